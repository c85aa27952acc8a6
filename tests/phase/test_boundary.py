"""The lines solved directly (phasejax.phase.boundary) against their definitions and against roots found on a grid.

The lines' program compiles for a minute or two, so the checks that compute lines are slow ones (`-m slow`); the
default run checks the committed lines of the main job against its grid, the pieces, and the refusals. The slow
checks use one small rule (3584 nodes): they are of the method, which is the same on any rule. Their independent
references are plain solves of each branch (`solve_state_evolution`, cold, at the returned roots) and a
continuation row along a fine alpha grid (`solve_along_alpha`) whose sign change is interpolated.
"""

import os

import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.phase import BoundaryConfig, PhaseBoundary, phase_boundary
from phasejax.phase.boundary import BOUNDARY_COLUMNS, _hermite_root
from phasejax.sweep import RunOptions
from phasejax.theory import SEConfig, SplitProductRule, make_params, solve_along_alpha, solve_state_evolution
from phasejax.theory.baselines import linear_baseline_error

from _compare import RTOL_REDERIVED, assert_same_csv

SMALL = SplitProductRule(n_smooth=4, eta_step=1.0, n_piece=8, n_replicas=2)
CONFIG = BoundaryConfig(n_scan=8, alpha_min=0.8, alpha_max=2.2)
OMEGAS = (0.3, 0.32)
PARAMS = make_params(1.0, 0.0)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def run(tmp_path_factory):      # slow: only the slow tests use it
    """The lines at two omegas, computed in two sittings (the first stops after its one chunk) in one run
    directory, and once more in one sitting elsewhere."""
    folder = tmp_path_factory.mktemp("boundary")
    with float64_scope():
        once = phase_boundary(PARAMS, OMEGAS, quadrature=SMALL, config=CONFIG,
                              options=RunOptions(run_dir=str(folder / "once"), progress=False))
        first = phase_boundary(PARAMS, OMEGAS, quadrature=SMALL, config=CONFIG, segments=2,
                               options=RunOptions(run_dir=str(folder / "two"), chunk_size=1, max_chunks=1,
                                                  progress=False))
        resumed = phase_boundary(PARAMS, OMEGAS, quadrature=SMALL, config=CONFIG, segments=2,
                                 options=RunOptions(run_dir=str(folder / "two"), chunk_size=1, progress=False))
    return dict(once=once, first=first, resumed=resumed, folder=folder)


@pytest.mark.slow
def test_every_line_has_a_status_and_alpha_c_and_alpha_l_converge(run):
    ln = run["once"].lines
    assert list(ln) == list(BOUNDARY_COLUMNS)
    assert list(ln["alpha_c_status"]) == ["converged"] * 2 and list(ln["alpha_l_status"]) == ["converged"] * 2
    # at omega = 0.3 the positional branch stays stable out of its subspace, the semantic one too (no spinodal)
    assert set(ln["spinodal_positional_status"]) | set(ln["spinodal_semantic_status"]) == {"no_crossing"}
    assert np.all(np.isfinite(ln["alpha_c_err"])) and np.all(ln["alpha_c_err"] > 0)
    assert np.all(ln["alpha_l"] > ln["alpha_c"]) and list(ln["alpha_l_branch"]) == ["semantic"] * 2


@pytest.mark.slow
def test_at_alpha_c_the_branches_training_losses_are_equal(run):
    """Both branches solved afresh (cold) at each returned `alpha_c`: their training losses differ by less than the
    root's error times the slope, i.e. `alpha_c` is a root of `Delta e_t` within its error."""
    ln = run["once"].lines
    with float64_scope():
        for w, a, da in zip(OMEGAS, ln["alpha_c"], ln["alpha_c_err"]):
            p = PARAMS.replace(alpha=jnp.asarray(a), omega=jnp.asarray(w))
            e = {b: solve_state_evolution(p, b, quadrature=SMALL, config=SEConfig(tol=1e-10)) for b in
                 ("positional", "semantic")}
            gap = float(e["semantic"].train_loss - e["positional"].train_loss)
            dp = PARAMS.replace(alpha=jnp.asarray(a + 0.01), omega=jnp.asarray(w))
            slope = (float(solve_state_evolution(dp, "semantic", quadrature=SMALL).train_loss
                           - solve_state_evolution(dp, "positional", quadrature=SMALL).train_loss) - gap) / 0.01
            assert abs(gap / slope) < da, (w, a, gap, slope, da)


@pytest.mark.slow
def test_alpha_c_and_alpha_l_agree_with_a_fine_grid(run):
    """A continuation row of each branch along alphas 0.02 apart around the line, the sign change of `Delta e_t`
    (of `eps_g(semantic) - eps_lin` for `alpha_l`) interpolated linearly: within the line's error plus the
    interpolation's (the curvature over 0.02: below 1e-4 here)."""
    ln = run["once"].lines
    with float64_scope():
        for i, w in enumerate(OMEGAS):
            p = PARAMS.replace(omega=jnp.asarray(w))
            for key in ("alpha_c", "alpha_l"):
                a0 = float(ln[key][i])
                alphas = np.round(np.arange(a0 - 0.05, a0 + 0.051, 0.02), 6)
                rows = {b: solve_along_alpha(p, alphas, b, quadrature=SMALL) for b in ("positional", "semantic")}
                if key == "alpha_c":
                    f = np.asarray(rows["semantic"].train_loss - rows["positional"].train_loss)
                else:
                    f = np.asarray(rows["semantic"].test_error) - float(linear_baseline_error(p))
                j = int(np.flatnonzero((f[:-1] > 0) & (f[1:] <= 0))[0])
                root = alphas[j] + (alphas[j + 1] - alphas[j]) * f[j] / (f[j] - f[j + 1])
                assert abs(root - a0) < ln[f"{key}_err"][i] + 1e-4, (key, w, root, a0, ln[f"{key}_err"][i])


@pytest.mark.slow
def test_two_segments_resumed_give_the_lines_of_one(run):
    """Cut into two segments (each from its own scan) and computed in two sittings of one run directory: the first
    stops after one chunk (`None`), the second loads it and computes the other; the lines are those of the run in
    one segment, within their errors (a segment's start is another scan, the same roots)."""
    assert run["first"] is None
    a, b = run["resumed"].lines, run["once"].lines
    for key in ("alpha_c", "alpha_l"):
        assert np.all(np.abs(a[key] - b[key]) <= a[f"{key}_err"] + b[f"{key}_err"]), key
    # the resumed run read the first chunk back: both chunks are on disk
    assert len(os.listdir(run["folder"] / "two" / "chunks")) == 2


@pytest.mark.slow
def test_the_bundle_writes_and_loads_back(run, tmp_path):
    paths = run["once"].write(str(tmp_path))
    assert [os.path.basename(p) for p in paths] == ["boundary.csv", "boundary.json"]
    back = PhaseBoundary.load(str(tmp_path))
    assert back.write(str(tmp_path / "again"))
    assert_same_csv(tmp_path / "again" / "boundary.csv", tmp_path / "boundary.csv", rtol=RTOL_REDERIVED)


def test_the_cubic_hermite_root_is_exact_for_a_cubic():
    f = lambda x: (x - 0.37) * (1.0 + x + x**2)  # noqa: E731 - one root, at 0.37
    df = lambda x: (1.0 + x + x**2) + (x - 0.37) * (1.0 + 2 * x)  # noqa: E731
    with float64_scope():
        a = jnp.linspace(0.0, 1.0, 5)
        root = _hermite_root(a, f(a), df(a), 1)
    assert abs(float(root) - 0.37) < 1e-12


@pytest.mark.parametrize("kwargs, match", [
    (dict(omegas=(0.3, 0.2)), "increasing"), (dict(omegas=(1.5,)), "omegas"), (dict(omegas=(0.3,), segments=2),
                                                                               "segments"),
])
def test_bad_inputs_are_refused_before_any_compute(kwargs, match):
    kw = dict(omegas=(0.3,)) | kwargs
    with pytest.raises(ValueError, match=match):
        phase_boundary(PARAMS, kw.pop("omegas"), quadrature=SMALL, config=CONFIG, **kw)


@pytest.mark.parametrize("kwargs, name", [(dict(alpha_min=2.0, alpha_max=1.0), "alpha_min"), (dict(n_scan=2), "n_scan"),
                                          (dict(max_rounds=0), "max_rounds"), (dict(accept=0.0), "accept")])
def test_a_bad_setting_names_itself(kwargs, name):
    with pytest.raises(ValueError, match=name):
        BoundaryConfig(**kwargs)


COMMITTED = os.path.join(ROOT, "results", "phase_diagram")


@pytest.mark.skipif(not os.path.exists(os.path.join(COMMITTED, "boundary.csv")), reason="no committed boundary")
def test_committed_boundary_meets_its_targets_and_agrees_with_the_grid():
    """The main job's lines: at least 51 omegas over the grid's range, `alpha_c_err <= 0.001` wherever alpha_c
    converged, and at the grid's omegas the lines within the combined errors of the grid's thresholds."""
    from phasejax.phase import PhaseDiagram

    ln = PhaseBoundary.load(COMMITTED).lines
    pd = PhaseDiagram.load(COMMITTED)
    w = np.asarray(ln["omega"])
    assert w.size >= 51 and w[0] <= min(pd.grid.omegas) + 1e-12 and w[-1] >= max(pd.grid.omegas) - 1e-12
    ok = np.asarray(ln["alpha_c_status"]) == "converged"
    assert ok.mean() > 0.9 and np.all(np.asarray(ln["alpha_c_err"])[ok] <= 1e-3)
    for key in ("alpha_c", "alpha_l"):
        grid = np.asarray(ln[f"{key}_grid"])
        both = np.isfinite(grid) & np.isfinite(np.asarray(ln[key]))
        assert both.sum() >= 8, key
        gap = np.abs(np.asarray(ln[key])[both] - grid[both])
        assert np.all(gap <= np.asarray(ln[f"{key}_err"])[both] + np.asarray(ln[f"{key}_grid_err"])[both]), key
