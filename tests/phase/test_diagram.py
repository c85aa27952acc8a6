"""Phase diagram: physics against the paper, resume, sharding, bad grids."""

import os
import textwrap

import numpy as np
import pytest

from phasejax.phase import PhaseGrid, phase_diagram
from phasejax.theory import gauss_hermite, make_params

PAPER = make_params(1.0, 0.0)   # sigma = 0.5, lambda = 0.01, standard A
PUBLISHED_ALPHA_C = {0.0: 0.55, 0.2: 0.93, 0.3: 1.24}   # spec section 5


@pytest.fixture(scope="module")
def paper_diagram(tmp_path_factory):
    grid = PhaseGrid.from_ranges(np.round(np.arange(0.4, 1.91, 0.15), 10), [0.0, 0.2, 0.3])
    return phase_diagram(grid, PAPER, quadrature=gauss_hermite(4, 6), chunk_size=11, progress=False,
                         run_dir=str(tmp_path_factory.mktemp("pd")))


def test_all_points_converged(paper_diagram):
    assert np.all(paper_diagram.points["converged"])


@pytest.mark.parametrize("omega", [0.2, 0.3])
def test_alpha_c_matches_the_paper(paper_diagram, omega):
    i = list(paper_diagram.grid.omegas).index(omega)
    assert paper_diagram.thresholds["alpha_c"][i] == pytest.approx(PUBLISHED_ALPHA_C[omega], abs=0.05)


@pytest.mark.xfail(strict=True, reason=(
    "alpha_c(0) converges to ~0.62 (quadrature orders 6-12, both prox start rules, e_t checked against "
    "the energetic identity), not the published ~0.55; see README 'Known deviations'"))
def test_alpha_c_at_omega_0_matches_the_paper(paper_diagram):
    assert paper_diagram.thresholds["alpha_c"][0] == pytest.approx(PUBLISHED_ALPHA_C[0.0], abs=0.05)


def test_thresholds_move_the_right_way(paper_diagram):
    ac, al = paper_diagram.thresholds["alpha_c"], paper_diagram.thresholds["alpha_l"]
    assert np.all(np.isfinite(ac)) and np.all(np.diff(ac) > 0)      # alpha_c grows with omega
    both = np.isfinite(ac) & np.isfinite(al)
    assert both.any() and np.all(ac[both] < al[both])               # paper: alpha_c < alpha_l


def test_killed_sweep_resumes_to_byte_identical_csv(tmp_path):
    grid = PhaseGrid.from_ranges([0.5, 1.0, 1.5], [0.3])
    kw = dict(quadrature=gauss_hermite(4, 3), chunk_size=2, progress=False)
    full = phase_diagram(grid, PAPER, run_dir=str(tmp_path / "full"), **kw)
    assert phase_diagram(grid, PAPER, run_dir=str(tmp_path / "killed"), max_chunks=1, **kw) is None
    resumed = phase_diagram(grid, PAPER, run_dir=str(tmp_path / "killed"), **kw)
    full.write(str(tmp_path / "full"))
    resumed.write(str(tmp_path / "killed"))
    for name in ("points.csv", "diagram.csv", "thresholds.csv"):
        a = open(tmp_path / "full" / name, "rb").read()
        b = open(tmp_path / "killed" / name, "rb").read()
        assert a == b, name


@pytest.mark.parametrize("alphas,omegas,match", [
    ([0.0, 1.0], [0.3], "alpha"), ([-1.0, 1.0], [0.3], "alpha"), ([1.0, 0.5], [0.3], "alpha"),
    ([1.0], [1.2], "omega"), ([1.0], [-0.1], "omega"), ([1.0], [np.nan], "omega"),
])
def test_bad_grid_values_fail_before_any_compute(tmp_path, alphas, omegas, match):
    with pytest.raises(ValueError, match=match):
        phase_diagram(PhaseGrid.from_ranges(alphas, omegas), PAPER, run_dir=str(tmp_path / "x"))
    assert not os.path.exists(tmp_path / "x")


def test_eight_forced_host_devices_equal_one_device(tmp_path, on_host_devices):
    code = textwrap.dedent(f"""
        import numpy as np, jax
        from phasejax.phase import PhaseGrid, phase_diagram
        from phasejax.theory import gauss_hermite, make_params
        assert len(jax.devices()) == 8, jax.devices()
        grid = PhaseGrid.from_ranges([0.5, 1.0, 1.5, 2.0], [0.1, 0.3])
        kw = dict(quadrature=gauss_hermite(4, 3), chunk_size=8, progress=False)
        p = make_params(1.0, 0.0)
        many = phase_diagram(grid, p, run_dir={str(tmp_path / 'eight')!r}, devices=jax.devices(), **kw)
        one = phase_diagram(grid, p, run_dir={str(tmp_path / 'one')!r}, devices=jax.devices()[:1], **kw)
        for k in one.points:
            if k == "residual":   # rounding-level noise below the tolerance: compare against it
                assert np.all(many.points[k] < 1e-8) and np.all(one.points[k] < 1e-8)
                continue
            np.testing.assert_allclose(np.asarray(many.points[k], float), np.asarray(one.points[k], float),
                                       rtol=1e-6, atol=1e-10, err_msg=k)
        print("EQUAL")
    """)
    assert "EQUAL" in on_host_devices(code)
