"""Phase diagram: physics, error bars, census tracks, resume, sharding, bad grids, files."""

import os
import textwrap

import numpy as np
import pytest

from phasejax.io import read_csv
from phasejax.phase import PHASE_BRANCHES, PhaseConfig, PhaseDiagram, PhaseGrid, phase_diagram
from phasejax.sweep import RunOptions
from phasejax.theory import SEConfig, SplitProductRule, make_params
from phasejax.theory.census import CENSUS_SEEDS

from _compare import RTOL_REDERIVED, assert_same_csv

PAPER = make_params(1.0, 0.0)   # sigma = 0.5, lambda = 0.01, standard A
SMALL = SplitProductRule(n_smooth=4, eta_step=1.0, n_piece=8, n_replicas=2)
# lower iteration caps than the default (40 cold, 30 warm): the converged solves of this grid need at most 17 and
# 10, and the solves that end a branch (reported max_iterations either way) stop sooner. One census track per
# subspace (the default follows two): half the solves; the census itself (several seeds, deduplication, the
# lowest e_t) is tested in tests/theory/test_census.py
CAPPED = PhaseConfig(seeds={b: CENSUS_SEEDS[b][:1] for b in PHASE_BRANCHES}, se=SEConfig(max_iter=25, max_iter_warm=15))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def small_diagram(tmp_path_factory):
    grid = PhaseGrid.from_ranges([0.6, 0.8, 1.1, 1.4, 1.6], [0.0, 0.3])
    run = tmp_path_factory.mktemp("pd")
    return phase_diagram(grid, PAPER, quadrature=SMALL, config=CAPPED,
                         options=RunOptions(run_dir=str(run), chunk_size=2, progress=False)), run


def test_every_point_has_both_branches_with_error_bars(small_diagram):
    """Both branches everywhere, except possibly the semantic one at the lowest alpha (0.6) of omega = 0: the
    semantic branch ends near there (its fixed point collapses to theta = 0 below weak recovery), so the solve
    slows down critically and may report max_iterations instead of a number."""
    pd, _ = small_diagram
    t = pd.table
    assert np.all(np.isfinite(t["e_positional"]))
    missing = ~np.isfinite(t["e_semantic"])
    alphas = np.asarray(pd.grid.alphas)
    assert not np.any(missing[:, alphas > 0.65])
    ok = np.isfinite(t["delta_e"])
    assert np.all(t["e_positional_err"] > 0) and np.all(t["delta_e_err"][ok] > 0)
    assert set(np.unique(t["global_branch"])) <= {0, 1}
    # the branch is the lowest-e_t distinct fixed point of its subspace
    pts = pd.points
    for key in ("is_branch", "distinct"):
        assert pts[key].dtype == bool
    assert np.all(pts["distinct"][pts["is_branch"]])


def test_thresholds_move_the_right_way_and_carry_errors(small_diagram):
    th = small_diagram[0].thresholds
    ac, al = th["alpha_c"], th["alpha_l"]
    assert list(th["alpha_c_status"]) == ["in_grid", "in_grid"]
    assert np.all(np.diff(ac) > 0)                              # alpha_c grows with omega
    ok = np.isfinite(al)
    assert ok[-1] and np.all(ac[ok] <= al[ok] + 1e-9)          # attention beats linear only once semantic
    assert np.all(np.asarray(th["alpha_c_err"]) > 0)


def test_written_and_loaded_back_are_equal(small_diagram, tmp_path):
    pd, _ = small_diagram
    pd.write(str(tmp_path))
    back = PhaseDiagram.load(str(tmp_path))
    assert back.grid == pd.grid
    for k in ("alpha_c", "alpha_c_err", "alpha_l", "alpha_c_status"):
        np.testing.assert_array_equal(np.asarray(back.thresholds[k]), np.asarray(pd.thresholds[k]))
    for k in ("q", "m", "train_loss", "train_loss_err", "status", "is_branch"):
        np.testing.assert_array_equal(np.asarray(back.points[k]), np.asarray(pd.points[k]))
    for k in ("delta_e", "global_branch", "n_fixed_points_positional"):
        np.testing.assert_array_equal(np.asarray(back.table[k]), np.asarray(pd.table[k]))
    csv = read_csv(str(tmp_path / "points.csv"))
    assert set(csv["status"]) <= {"converged", "max_iterations", "invalid_iterate", "invalid_input"}
    header = read_csv(str(tmp_path / "thresholds.csv"))
    for col in ("omega", "alpha_c", "alpha_l", "alpha_c_err", "alpha_l_err", "alpha_c_status"):
        assert col in header


@pytest.mark.slow       # the generic resume is tested in tests/test_sweep.py
def test_a_killed_sweep_resumes_to_the_same_files(small_diagram, tmp_path):
    pd, run = small_diagram
    grid = pd.grid
    opts = RunOptions(run_dir=str(tmp_path / "killed"), chunk_size=2, progress=False)
    assert phase_diagram(grid, PAPER, quadrature=SMALL, config=CAPPED, options=opts.replace(max_chunks=1)) is None
    resumed = phase_diagram(grid, PAPER, quadrature=SMALL, config=CAPPED, options=opts)
    pd.write(str(tmp_path / "full"))
    resumed.write(str(tmp_path / "resumed"))
    for name in ("points.csv", "diagram.csv", "thresholds.csv"):
        # the finished chunk loaded, the rest solved again by the same program: a re-derivation, 1e-12 relative
        assert_same_csv(tmp_path / "resumed" / name, tmp_path / "full" / name, rtol=RTOL_REDERIVED)


def test_an_arange_grid_is_the_literal_grid():
    assert PhaseGrid.from_ranges(np.arange(0.4, 0.9, 0.1), [0.3]) == PhaseGrid.from_ranges([0.4, 0.5, 0.6, 0.7, 0.8], [0.3])
    assert PhaseGrid.from_ranges(np.arange(0.4, 0.9, 0.1), [0.3]).alphas[2] == 0.6


@pytest.mark.parametrize("alphas,omegas,match", [
    ([0.0, 1.0], [0.3], "alpha"), ([-1.0, 1.0], [0.3], "alpha"), ([1.0, 0.5], [0.3], "alpha"),
    ([1.0], [1.2], "omega"), ([1.0], [-0.1], "omega"), ([1.0], [np.nan], "omega"),
])
def test_bad_grid_values_fail_before_any_compute(tmp_path, alphas, omegas, match):
    with pytest.raises(ValueError, match=match):
        phase_diagram(PhaseGrid.from_ranges(alphas, omegas), PAPER, options=RunOptions(run_dir=str(tmp_path / "x")))
    assert not os.path.exists(tmp_path / "x")


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="seeds"):
        PhaseConfig(seeds={"positional": [(0.02, 0.2, 14.6, 0.0)], "semantic": []})


@pytest.mark.slow       # sharding over forced host devices is tested generically in tests/test_sweep.py
def test_eight_forced_host_devices_equal_one_device(tmp_path, on_host_devices):
    code = textwrap.dedent(f"""
        import numpy as np, jax
        from phasejax.phase import PhaseGrid, phase_diagram
        from phasejax.sweep import RunOptions
        from phasejax.theory import SplitProductRule, make_params
        assert len(jax.devices()) == 8, jax.devices()
        grid = PhaseGrid.from_ranges([1.0, 1.5], [0.1, 0.3])
        rule = SplitProductRule(n_smooth=3, eta_step=1.2, n_piece=6, n_replicas=2)
        p = make_params(1.0, 0.0)
        opts = RunOptions(chunk_size=4, progress=False)
        many = phase_diagram(grid, p, quadrature=rule, options=opts.replace(devices=jax.devices()))
        one = phase_diagram(grid, p, quadrature=rule, options=opts.replace(devices=jax.devices()[:1]))
        for k in ("q", "m", "V", "theta", "train_loss", "test_error", "iterations", "status"):
            np.testing.assert_allclose(np.asarray(many.points[k], float), np.asarray(one.points[k], float),
                                       rtol=1e-6, atol=1e-7, err_msg=k)
        print("EQUAL")
    """)
    assert "EQUAL" in on_host_devices(code)


@pytest.mark.parametrize("omega,ref,ref_err,max_err", [(0.0, 0.612, 0.005, 0.01), (0.3, 1.2515, 0.003, 0.003)])
def test_committed_main_job_matches_the_converged_thresholds(omega, ref, ref_err, max_err):
    """The committed default run (`phasejax phase-diagram`) against converged values computed with other rules,
    alpha_c(0) = 0.612 +- 0.005 and alpha_c(0.3) = 1.2515 +- 0.003: within the two errors combined, with its own
    error bar below `max_err` (at omega = 0 the slope of Delta e_t is only about -4e-4 per unit alpha, so
    its root's error is wider). Every cell of the committed run has a verdict; none is unresolved."""
    th = read_csv(os.path.join(ROOT, "results", "phase_diagram", "thresholds.csv"))
    w = np.asarray(th["omega"])
    i = int(np.argmin(np.abs(w - omega)))
    assert abs(w[i] - omega) < 1e-9, f"omega = {omega} not in the committed grid"
    assert th["alpha_c_status"][i] == "in_grid"
    assert abs(th["alpha_c"][i] - ref) <= np.hypot(ref_err, th["alpha_c_err"][i]), (omega, th["alpha_c"][i])
    assert th["alpha_c_err"][i] <= max_err
    diag = read_csv(os.path.join(ROOT, "results", "phase_diagram", "diagram.csv"))
    for b in ("positional", "semantic"):
        assert not any(str(v).startswith("unresolved") for v in diag[f"verdict_{b}"])
    pts = read_csv(os.path.join(ROOT, "results", "phase_diagram", "points.csv"))
    assert set(pts["status"]) == {"converged"}


@pytest.mark.parametrize("damage", ["drop_delta_e", "truncate_points", "garbage_summary", "text_in_alpha_c",
                                    "list_grid"])
def test_load_names_the_damaged_file_and_column(tmp_path, damage):
    import shutil

    src = os.path.join(os.path.dirname(__file__), "..", "..", "results", "phase_diagram")
    out = tmp_path / "pd"
    shutil.copytree(src, out)
    PhaseDiagram.load(str(out))                        # the committed diagram loads
    if damage == "drop_delta_e":
        lines = (out / "diagram.csv").read_text().splitlines()
        col = lines[0].split(",").index("delta_e")
        (out / "diagram.csv").write_text("\n".join(",".join(c for j, c in enumerate(line.split(",")) if j != col)
                                                   for line in lines) + "\n")
        expect = ("diagram.csv", "delta_e")
    elif damage == "truncate_points":
        text = (out / "points.csv").read_text()
        (out / "points.csv").write_text(text[: len(text) // 2])
        expect = ("points.csv", "line")
    elif damage == "garbage_summary":
        (out / "summary.json").write_text("{not json")
        expect = ("summary.json", "JSON")
    elif damage == "text_in_alpha_c":
        lines = (out / "thresholds.csv").read_text().splitlines()
        cells = lines[1].split(",")
        cells[1] = "abc"
        lines[1] = ",".join(cells)
        (out / "thresholds.csv").write_text("\n".join(lines) + "\n")
        expect = ("thresholds.csv", "alpha_c")
    else:
        (out / "grid.json").write_text("[1, 2]")
        expect = ("grid.json", "object")
    with pytest.raises(ValueError) as info:
        PhaseDiagram.load(str(out))
    for word in expect:
        assert word in str(info.value), str(info.value)


def test_the_command_that_computed_a_diagram_is_in_its_summary(tmp_path, monkeypatch):
    """`phasejax phase-diagram` records its command line, shell-quoted, in summary.json, and loading keeps it;
    a diagram computed from Python records none (here the committed diagram stands in for the computation)."""
    import json
    import shlex

    import phasejax.phase
    from phasejax.cli import main

    committed = PhaseDiagram.load(os.path.join(ROOT, "results", "phase_diagram"))
    monkeypatch.setattr(phasejax.phase, "phase_diagram", lambda *a, **k: committed.__class__(
        **{**committed.__dict__, "command": None}))
    out = tmp_path / "a b"
    argv = ["phase-diagram", "--out", str(out), "--no-progress", "--run-dir", str(tmp_path / "run")]
    monkeypatch.setattr("sys.argv", ["/somewhere/bin/phasejax", *argv])
    assert main(argv) == 0
    with open(out / "summary.json") as fh:
        recorded = json.load(fh)["command"]
    assert shlex.split(recorded) == ["phasejax", *argv]
    assert PhaseDiagram.load(str(out)).command == recorded
    committed.__class__(**{**committed.__dict__, "command": None}).write(str(tmp_path / "py"))
    with open(tmp_path / "py" / "summary.json") as fh:
        assert "command" not in json.load(fh)
