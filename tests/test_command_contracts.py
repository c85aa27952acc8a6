"""The commands keep their output contracts (the columns and files that downstream analyses read)."""

import contextlib
import io
import json

import numpy as np
import pytest

from phasejax.cli import main


def test_solve_prints_one_json_line_per_pair():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(["solve", "--alpha", "1.0", "2.0", "--omega", "0.3", "--branch", "positional", "--nodes", "4"])

    def strict(token):       # a Gauss-Hermite rule has no error estimate: null, never a bare NaN
        raise AssertionError(f"not strict JSON: {token}")

    rows = [json.loads(line, parse_constant=strict) for line in buf.getvalue().splitlines() if line.startswith("{")]
    assert len(rows) == 2 and rows[0]["q_err"] is None
    keys = {"alpha", "omega", "branch", "q", "m", "V", "theta", "test_error", "train_loss", "converged", "iterations"}
    for row in rows:
        assert keys <= set(row)
        assert row["branch"] == "positional" and row["theta"] == 0.0 and row["converged"] is True
    assert [r["alpha"] for r in rows] == [1.0, 2.0]


def _csv_header(path):
    with open(path) as fh:
        return fh.readline().strip().split(",")


@pytest.mark.slow
def test_fig2_writes_the_runs_csv_contract(tmp_path):
    main(["fig2", "--d", "20", "--n-alpha", "2", "--alpha-min", "1.0", "--alpha-max", "2.0", "--seeds", "1",
          "--no-progress", "--out", str(tmp_path)])
    header = _csv_header(tmp_path / "runs.csv")
    assert header[:11] == ["alpha", "omega", "seed", "init", "d", "m", "theta", "q", "train_loss", "test_error",
                           "test_error_theory"]
    with open(tmp_path / "runs.csv") as fh:
        assert len(fh.read().splitlines()) == 1 + 2 * 2   # alphas x inits x 1 seed
    assert (tmp_path / "fig2.png").stat().st_size > 10_000
    assert (tmp_path / "theory" / "thresholds.csv").exists()


@pytest.mark.slow
def test_random_init_fractions_sum_to_one(tmp_path):
    main(["random-init", "--d", "20", "--n-alpha", "2", "--seeds", "3", "--max-steps", "300", "--no-progress",
          "--out", str(tmp_path)])
    from phasejax.io import read_csv

    table = read_csv(str(tmp_path / "fractions.csv"))
    assert len(table["alpha"]) == 2
    total = table["positional"] + table["semantic"] + table["neither"]
    assert abs(total - 1.0).max() < 1e-12 and (table["n_runs"] == 3).all()
    assert (table["positional_low68"] <= table["positional"]).all()
    assert (table["positional"] <= table["positional_high68"]).all()


def _synthetic_runs(alphas, ds, inits, seeds, solution_of):
    """A runs table with `RUN_COLUMNS` (no training): one row per (d, alpha, init, seed)."""
    from phasejax.empirics import RUN_COLUMNS

    rows = [(d, a, i, s) for d in ds for a in alphas for i in inits for s in range(seeds)]
    rng = np.random.default_rng(0)
    runs = {k: rng.uniform(0.01, 0.3, len(rows)) for k in RUN_COLUMNS}
    runs.update(d=np.asarray([r[0] for r in rows]), alpha=np.asarray([r[1] for r in rows]),
                init=np.asarray([r[2] for r in rows]), seed=np.asarray([r[3] for r in rows]),
                omega=np.full(len(rows), 0.3), n=np.asarray([round(r[0] * r[1]) for r in rows]),
                steps=np.full(len(rows), 10), status=np.zeros(len(rows), int), converged=np.ones(len(rows), bool),
                solution=np.asarray([solution_of(k) for k in range(len(rows))]))
    return runs


def test_random_init_replot_recomputes_the_fractions_from_runs_csv(tmp_path):
    """`--replot` reads runs.csv only; the fractions are the counts of each solution per alpha."""
    from phasejax.empirics.sweep import write_runs_csv
    from phasejax.io import read_csv

    runs = _synthetic_runs((0.5, 1.0), (20,), (2,), 4, lambda k: (0, 0, 1, 2)[k % 4])   # init 2 = random
    write_runs_csv(runs, str(tmp_path / "runs.csv"))
    assert main(["random-init", "--replot", "--overwrite", "--out", str(tmp_path)]) == 0
    table = read_csv(str(tmp_path / "fractions.csv"))
    np.testing.assert_allclose(table["positional"], [0.5, 0.5])
    np.testing.assert_allclose(table["semantic"], [0.25, 0.25])
    assert (table["n_runs"] == 4).all() and (tmp_path / "fractions.png").stat().st_size > 10_000


def test_scaling_replot_summarises_runs_csv_against_se_json(tmp_path):
    from phasejax.empirics.metrics import teacher_norms
    from phasejax.empirics.sweep import write_runs_csv
    from phasejax.io import atomic_write_json, read_csv

    runs = _synthetic_runs((1.5,), (10, 40), (0, 1), 5, lambda k: 0)
    # theta of the semantic runs at d = 10 exactly proportional to each seed's teacher norm
    sel = (runs["init"] == 1) & (runs["d"] == 10)
    runs["theta"][sel] = 0.13 * teacher_norms(runs["seed"][sel], 10)
    write_runs_csv(runs, str(tmp_path / "runs.csv"))
    atomic_write_json(str(tmp_path / "se.json"), dict(alpha=1.5, omega=0.3, m=0.25, theta=0.13))
    assert main(["scaling", "--replot", "--overwrite", "--out", str(tmp_path)]) == 0
    table = read_csv(str(tmp_path / "summary.csv"))
    for key, code, d in (("m", 0, 40), ("theta", 1, 10)):
        row = (table["overlap"] == key) & (table["d"] == d)
        v = runs[key][(runs["init"] == code) & (runs["d"] == d)]
        np.testing.assert_allclose(table["mean"][row], v.mean())
        np.testing.assert_allclose(table["abs_dev_from_se"][row], abs(v.mean() - {"m": 0.25, "theta": 0.13}[key]))
    row = (table["overlap"] == "theta") & (table["d"] == 10)
    np.testing.assert_allclose(table["adj_mean"][row], 0.13, rtol=1e-6)    # the teacher draw removed exactly
    assert table["abs_dev_adj"][row] < 1e-6 < table["abs_dev_from_se"][row]
    assert (tmp_path / "scaling.png").stat().st_size > 10_000
    # a NaN run leaves its d without an adjusted mean instead of stopping the summary
    runs["m"][np.flatnonzero((runs["init"] == 0) & (runs["d"] == 40))[0]] = np.nan
    write_runs_csv(runs, str(tmp_path / "runs.csv"))
    assert main(["scaling", "--replot", "--overwrite", "--out", str(tmp_path)]) == 0
    table = read_csv(str(tmp_path / "summary.csv"))
    assert np.isnan(table["adj_mean"][(table["overlap"] == "m") & (table["d"] == 40)]).all()


VERSION_KEYS = {"python", "jax", "jaxlib", "numpy", "scipy", "flax", "optax", "phasejax", "git_commit", "git_dirty"}


class _FakeRuns:
    """What `train_students` returns (no training)."""

    def __init__(self):
        self.runs = dict(alpha=np.ones(2), converged=np.ones(2, bool), status=np.zeros(2, int))

    def write(self, out):
        return []


def test_a_summary_records_the_command_and_the_versions_that_computed_it(tmp_path, run_cli, monkeypatch):
    """One function (`flags.provenance`) records, beside the command line, the package versions."""
    monkeypatch.setattr("phasejax.empirics.train_students", lambda *a, **k: _FakeRuns())
    out = tmp_path / "out"
    argv = ["train", "--d", "4", "--alphas", "1", "--omegas", "0.3", "--seeds", "1", "--no-progress", "--out", str(out)]
    monkeypatch.setattr("sys.argv", ["phasejax", *argv])         # as the `phasejax` entry point runs it
    code, _, err = run_cli(argv)
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["command"].startswith("phasejax ") and set(summary["versions"]) == VERSION_KEYS
    import jax
    import scipy

    assert summary["versions"]["jax"] == jax.__version__ and summary["versions"]["scipy"] == scipy.__version__


def test_a_phase_diagram_summary_records_the_versions(tmp_path, run_cli, monkeypatch):
    import os

    from phasejax.phase import PhaseDiagram

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pd = PhaseDiagram.load(os.path.join(root, "results", "phase_diagram"))
    monkeypatch.setattr("phasejax.phase.phase_diagram", lambda *a, **k: pd)
    out = tmp_path / "pd"
    argv = ["phase-diagram", "--n-alpha", "3", "--n-omega", "2", "--no-progress", "--out", str(out)]
    monkeypatch.setattr("sys.argv", ["phasejax", *argv])
    code, _, err = run_cli(argv)
    assert code in (0, 1), err
    summary = json.loads((out / "summary.json").read_text())
    assert "--n-alpha 3" in summary["command"] and set(summary["versions"]) == VERSION_KEYS
    assert PhaseDiagram.load(str(out)).versions == summary["versions"]


def test_an_extension_replot_keeps_the_data_files_and_records_itself(tmp_path, run_cli, monkeypatch):
    """A replot rewrites what it derives (thresholds, summary, figure), not runs.csv or theory.csv, keeps the
    record of what computed the results and adds its own."""
    import os
    import shutil

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "rank2"
    shutil.copytree(os.path.join(root, "results", "extensions", "rank2"), out)
    data = {n: (out / n).read_bytes() for n in ("runs.csv", "theory.csv")}
    argv = ["extension", "rank2", "--replot", "--out", str(out), "--overwrite", "--no-progress"]
    monkeypatch.setattr("sys.argv", ["phasejax", *argv])
    code, stdout, err = run_cli(argv)
    assert code == 0, err
    assert {n: (out / n).read_bytes() for n in data} == data
    assert "runs.csv" not in stdout and "(cpu preset) replotted" in stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["replotted_by"]["command"].startswith("phasejax extension rank2 --replot")
    assert set(summary["replotted_by"]["versions"]) == VERSION_KEYS and "versions" not in summary
