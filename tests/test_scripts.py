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
