"""The command-line scripts keep their documented output contracts."""

import contextlib
import importlib.util
import io
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_solve_se_prints_one_json_line_per_pair():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        _load("solve_se").main(["--alpha", "1.0", "2.0", "--omega", "0.3", "--branch", "positional", "--nodes", "4"])
    rows = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert len(rows) == 2
    keys = {"alpha", "omega", "branch", "q", "m", "V", "theta", "test_error", "train_loss", "converged", "iterations"}
    for row in rows:
        assert keys <= set(row)
        assert row["branch"] == "positional" and row["theta"] == 0.0 and row["converged"] is True
    assert [r["alpha"] for r in rows] == [1.0, 2.0]


def test_solve_se_rejects_bad_omega():
    with pytest.raises(ValueError, match="omega"):
        _load("solve_se").main(["--alpha", "1.0", "--omega", "1.5", "--nodes", "3"])


def _csv_header(path):
    with open(path) as fh:
        return fh.readline().strip().split(",")


def test_reproduce_fig2_writes_the_runs_csv_contract(tmp_path):
    _load("reproduce_fig2").main(["--d", "20", "--n-alpha", "2", "--alpha-min", "1.0", "--alpha-max", "2.0",
                                  "--seeds", "1", "--nodes", "3", "--chunk-size", "4", "--out", str(tmp_path)])
    header = _csv_header(tmp_path / "runs.csv")
    assert header[:11] == ["alpha", "omega", "seed", "init", "d", "m", "theta", "q", "train_loss", "test_error",
                           "test_error_theory"]
    with open(tmp_path / "runs.csv") as fh:
        assert len(fh.read().splitlines()) == 1 + 2 * 2   # alphas x inits x 1 seed
    assert (tmp_path / "fig2.png").stat().st_size > 10_000


def test_random_init_stats_fractions_sum_to_one(tmp_path):
    _load("random_init_stats").main(["--d", "20", "--n-alpha", "2", "--seeds", "3", "--max-steps", "300",
                                     "--out", str(tmp_path)])
    with open(tmp_path / "fractions.csv") as fh:
        rows = [line.split(",") for line in fh.read().splitlines()[1:]]
    assert len(rows) == 2
    for row in rows:
        assert abs(sum(float(x) for x in row[1:4]) - 1.0) < 1e-12 and int(row[4]) == 3


def test_gamp_vs_se_writes_the_fixed_points_contract(tmp_path):
    _load("gamp_vs_se").main(["--d", "40", "--seeds", "1", "--alpha", "2.0", "--alphas", "2.0", "--fp-d", "40", "--max-iter", "3",
                              "--nodes", "3", "--out", str(tmp_path)])
    assert _csv_header(tmp_path / "fixed_points.csv") == ["alpha", "omega", "branch", "d", "seed", "q", "m", "theta",
                                                          "se_q", "se_m", "se_theta", "grad_norm", "converged"]
    assert (tmp_path / "gamp_vs_se.png").stat().st_size > 10_000
