"""Runs that cannot lose or mix up a result, and errors a user can act on.

Bad inputs of the kind a new user tries (negative, NaN or huge values, conflicting flags, duplicates, foreign or
unwritable output folders, garbage run configurations, swapped / truncated / malformed chunks, damaged CSV files)
against the command line and the Python API. Each case asserts the exit code (2: bad input, 1: the run cannot go
on), that the error is one line `phasejax <cmd>: error: ...` naming the flag or file, and that no finished chunk or
result file was lost or changed. Every case stops before any compile (or uses a trivial batch function), so the
file runs in seconds.
"""

import json
import os
import re
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax.cli import build_parser, command_modules
from phasejax.commands.argtypes import OUTPUT_MARKER, UsageError, guard_output
from phasejax.io import read_csv, read_json, write_csv
from phasejax.sweep import CHUNK_META, RunOptions, chunk_checksum, run_chunked

from _cli import one_error_line, snapshot
from _compare import RTOL_FLOAT32, assert_same_csv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = sorted(command_modules())
TINY_TRAIN = ["train", "--d", "4", "--alphas", "1", "--omegas", "0.3", "--seeds", "1", "--inits", "semantic",
              "--max-steps", "2", "--n-test", "4", "--no-progress"]


# ----------------------------------------------------------------------------
# Output folders
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", COMMANDS)
def test_no_command_writes_into_results_by_default(name):
    """The committed results/ are written only when --out names them: every default lies elsewhere, and
    every --run-dir defaults to a persistent folder (None: <out>/run)."""
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[name]
    for action in sub._actions:
        if action.dest == "out" and isinstance(action.default, str):
            assert not os.path.normpath(action.default).startswith("results"), action.default
        if action.dest == "run_dir":
            assert action.default is None or not action.default.startswith(("/tmp", "tmp")), action.default
    if any(a.dest == "out" for a in sub._actions):
        assert any(a.dest == "overwrite" for a in sub._actions)


@pytest.fixture
def committed_like(tmp_path):
    """A folder like a committed result: files no command of this configuration wrote."""
    folder = tmp_path / "results" / "phase_diagram"
    folder.mkdir(parents=True)
    (folder / "diagram.csv").write_text("alpha,omega\n1.0,0.3\n")
    (folder / "summary.json").write_text('{"kept": true}\n')
    return folder


def test_a_folder_of_other_results_is_refused_and_untouched(committed_like, run_cli):
    """The audit's case: a small diagram into the folder of the committed main job."""
    before = snapshot(committed_like)
    code, out, err = run_cli(["phase-diagram", "--alpha-min", "1.2", "--alpha-max", "1.3", "--n-alpha", "2",
                              "--n-omega", "1", "--out", str(committed_like), "--no-progress"])
    assert code == 2, err
    line = one_error_line(err, "phase-diagram")
    assert str(committed_like) in line and "--out" in line and "--overwrite" in line
    assert snapshot(committed_like) == before and not (committed_like / OUTPUT_MARKER).exists()


def test_a_folder_of_another_configuration_is_refused_naming_what_differs(tmp_path, run_cli):
    out = tmp_path / "out"
    guard_output(str(out), False, dict(command="train", d=5))
    (out / "runs.csv").write_text("alpha\n1\n")
    before = snapshot(out)
    code, _, err = run_cli([*TINY_TRAIN, "--out", str(out)])
    assert code == 2
    line = one_error_line(err, "train")
    assert "another configuration" in line and "d" in line and "--overwrite" in line
    assert snapshot(out) == before


def test_the_same_configuration_reuses_its_folder_and_overwrite_replaces_the_marker(tmp_path):
    out = str(tmp_path / "out")
    ident = dict(command="x", n=1)
    assert guard_output(out, False, ident) == out
    open(os.path.join(out, "a.csv"), "w").close()
    assert guard_output(out, False, ident) == out                         # a re-run, a resumed run
    with pytest.raises(UsageError, match="differing: n"):
        guard_output(out, False, dict(ident, n=2))
    os.makedirs(os.path.join(out, "run", "chunks"))
    open(os.path.join(out, "run", "chunks", "chunk_00000.npz"), "w").close()
    guard_output(out, True, dict(ident, n=2))
    assert read_json(os.path.join(out, OUTPUT_MARKER))["identity"]["n"] == 2
    assert os.path.exists(os.path.join(out, "a.csv"))
    # the replaced configuration's chunks are kept, out of the way of the new run's resume
    assert not os.path.exists(os.path.join(out, "run"))
    assert os.path.exists(os.path.join(out, "run.replaced", "chunks", "chunk_00000.npz"))


@pytest.mark.parametrize("make_bad", ["file", "under_a_file"])
def test_an_unusable_out_is_refused_before_any_compute(tmp_path, run_cli, make_bad):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    out = blocker if make_bad == "file" else blocker / "sub"
    code, _, err = run_cli([*TINY_TRAIN, "--out", str(out)])
    assert code == 2
    line = one_error_line(err, "train")
    assert "--out" in line and str(out) in line
    assert blocker.read_text() == "x"


def test_bench_training_refuses_an_existing_record(tmp_path, run_cli):
    record = tmp_path / "training_cpu.json"
    record.write_text('{"kept": true}\n')
    code, _, err = run_cli(["bench-training", "--out", str(record)])
    assert code == 2 and "--overwrite" in one_error_line(err, "bench-training")
    assert record.read_text() == '{"kept": true}\n'


# ----------------------------------------------------------------------------
# Run directories: garbage or foreign configurations
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "{not json", "[1, 2]"])
def test_a_garbage_config_json_is_one_line_naming_the_file(tmp_path, run_cli, content):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(content)
    code, _, err = run_cli([*TINY_TRAIN, "--out", str(tmp_path / "out"), "--run-dir", str(run_dir)])
    assert code == 2
    line = one_error_line(err, "train")
    assert "config.json" in line and str(run_dir) in line
    assert (run_dir / "config.json").read_text() == content


def test_a_run_dir_of_another_run_is_one_line(tmp_path):
    ref = run_chunked(_fn, TASKS, CONFIG, opts(tmp_path, chunk_size=4))
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match="holds another run; differing: config.version"):
        run_chunked(_fn, TASKS, dict(CONFIG, version=2), opts(tmp_path, chunk_size=4))
    assert snapshot(tmp_path) == before and ref is not None


# ----------------------------------------------------------------------------
# Chunks: identity and checksum
# ----------------------------------------------------------------------------


def _fn(chunk):
    a = jnp.asarray(chunk["alpha"])
    return dict(value=jnp.sin(a) + a**2, index=jnp.asarray(chunk["k"]))


TASKS = dict(alpha=np.linspace(0.1, 2.0, 10), k=np.arange(10))
CONFIG = dict(kind="reliability-test", version=1)


def opts(run_dir, **kw):
    return RunOptions(run_dir=str(run_dir), progress=False, **kw)


def chunk(run_dir, i):
    return os.path.join(run_dir, "chunks", f"chunk_{i:05d}.npz")


def _damage_swap(run_dir):
    shutil.copy(chunk(run_dir, 1), chunk(run_dir, 0))           # a valid chunk of the same run, wrong place


def _damage_truncate(run_dir):
    with open(chunk(run_dir, 0), "rb") as fh:
        data = fh.read()
    with open(chunk(run_dir, 0), "wb") as fh:
        fh.write(data[: len(data) // 2])


def _rewrite(run_dir, change, reseal):
    with np.load(chunk(run_dir, 0)) as z:
        arrays = {k: z[k] for k in z.files}
    change(arrays)
    if reseal:
        arrays["_checksum"] = np.asarray(chunk_checksum(arrays))
    np.savez(chunk(run_dir, 0), **arrays)


DAMAGES = {
    "swapped": (_damage_swap, "is chunk 1 of this run, not chunk 0"),
    "truncated": (_damage_truncate, "unreadable"),
    "edited value": (lambda d: _rewrite(d, lambda a: a.__setitem__("value", a["value"] + 1), False), "checksum"),
    "missing key": (lambda d: _rewrite(d, lambda a: a.pop("value"), True), "outputs"),
    "wrong row count": (lambda d: _rewrite(d, lambda a: a.__setitem__("value", a["value"][:2]), True), "rows"),
    "foreign run": (lambda d: _rewrite(d, lambda a: a.__setitem__("_fingerprint", np.asarray("0" * 64)), True),
                    "another run"),
    "no identity": (lambda d: _rewrite(d, lambda a: [a.pop(k) for k in CHUNK_META], False), "lacks"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_bad_chunk_is_reported_recomputed_and_never_merged(tmp_path, capsys, damage):
    ref = run_chunked(_fn, TASKS, CONFIG, opts(tmp_path / "ref", chunk_size=4))
    run_dir = tmp_path / "run"
    run_chunked(_fn, TASKS, CONFIG, opts(run_dir, chunk_size=4))
    good = {i: open(chunk(run_dir, i), "rb").read() for i in (1, 2)}
    capsys.readouterr()
    make, why = DAMAGES[damage]
    make(run_dir)
    again = run_chunked(_fn, TASKS, CONFIG, opts(run_dir, chunk_size=4))
    err = capsys.readouterr().err
    assert chunk(run_dir, 0) in err and why in err and "recomputing" in err, err
    for k in ref:       # chunk 0 computed again: float32 re-derived, a few units in the last place
        np.testing.assert_allclose(again[k], ref[k], rtol=RTOL_FLOAT32)
    assert np.array_equal(again["index"], TASKS["k"])                     # each row is its own task's
    assert {i: open(chunk(run_dir, i), "rb").read() for i in (1, 2)} == good    # finished chunks untouched
    assert os.path.exists(chunk(run_dir, 0) + ".rejected")                  # the bad one kept aside, not lost
    # the recomputed chunk is accepted silently on the next run
    run_chunked(_fn, TASKS, CONFIG, opts(run_dir, chunk_size=4))
    assert capsys.readouterr().err == ""


# ----------------------------------------------------------------------------
# Flags: refused values and conflicts, one line each
# ----------------------------------------------------------------------------


def test_a_phase_diagram_beyond_memory_is_refused_before_compiling(tmp_path, run_cli, monkeypatch):
    """The row programs' memory estimate against what the device has (here made 16 MiB, below one row program's
    `ROW_BYTES`): refused in one line naming the flag that shrinks it, nothing computed or written."""
    import phasejax.sweep
    from phasejax.commands.phase_diagram import ROW_BYTES

    assert ROW_BYTES > 2**24
    monkeypatch.setattr(phasejax.sweep, "available_memory", lambda device=None: 2**24)
    argv = ["phase-diagram", "--n-alpha", "40", "--n-omega", "2", "--out", str(tmp_path / "out")]
    got, out, err = run_cli(argv)
    assert got == 1, err
    assert "GiB available; shrink --n-alpha" in one_error_line(err, "phase-diagram")
    assert out == "" and snapshot(tmp_path) == {}


@pytest.mark.parametrize("argv,code,needle", [
    (["solve", "--alphas", "1", "--omegas", "0.3", "--qmc", "5", "--nodes", "8"], 2, "--qmc and --nodes"),
    (["solve", "--alphas", "1", "--omegas", "0.3", "--nodes", "500"], 2, "--nodes"),
    (["solve", "--alphas", "1", "--omegas", "0.3", "--qmc", "100000000"], 2, "--qmc"),
    (["solve", "--alphas", "1", "1", "--omegas", "0.3"], 2, "--alphas repeats 1"),
    (["solve", "--alphas", "1", "--omegas", "0.3", "0.3"], 2, "--omegas repeats 0.3"),
    (["solve", "--alpha", "1", "2", "2", "--omega", "0.3"], 2, "--alphas repeats 2"),    # the older spelling
    (["train", "--optimizer", "lbfgs", "--learning-rate", "0.5"], 2, "--learning-rate"),
    (["train", "--alphas", "1", "1"], 2, "--alphas repeats 1"),
    (["train", "--inits", "semantic", "semantic"], 2, "--inits repeats semantic"),
    (["train", "--value-rank", "2"], 2, "--value-rank"),
    (["train", "--d", "10000000"], 1, "GiB available; shrink --d"),
    (["gamp", "--ds", "10000000"], 1, "GiB available; shrink the largest of --ds"),
    (["markov", "--length", "1000000"], 1, "GiB available; shrink --length"),
    (["histogram", "--d", "1000000", "--width", "1000000"], 1, "GiB available; shrink --d or --width"),
    (["phase-diagram", "--n-alpha", "100000", "--n-omega", "1000"], 2, "--n-alpha"),
    (["phase-diagram", "--alpha-min", "2", "--alpha-max", "1"], 2, "--alpha-max"),
    (["phase-diagram", "--tracks", "99"], 2, "--tracks"),
    (["random-init", "--replot"], 2, "--replot"),
    (["counting", "--configs", "dot", "dot"], 2, "--configs"),
    (["counting", "--ds", "4", "4"], 2, "--ds repeats 4"),
    (["scaling", "--ds", "10", "20", "10"], 2, "--ds repeats 10"),
    (["markov", "--ps", "0.2", "0.2"], 2, "--ps repeats 0.2"),
    (["train", "--process-index", "3", "--process-count", "2"], 2, "--process-index"),
])
def test_bad_inputs_after_parsing_are_one_line(argv, code, needle, tmp_path, run_cli):
    if argv[0] != "solve":
        argv = [*argv, "--out", str(tmp_path / "out")]
    got, out, err = run_cli(argv)
    assert got == code, err
    assert needle in one_error_line(err, argv[0])
    assert out == ""
    produced = snapshot(tmp_path)
    assert produced == {}, produced          # nothing computed, nothing written, no folder with only the marker


@pytest.mark.parametrize("argv,flag", [
    (["solve", "--alphas", "1", "--omegas", "0.3", "--A", "nan", ".4", ".4", ".6"], "--A"),
    (["phase-diagram", "--A", "inf", ".4", ".4", ".6"], "--A"),
    (["census", "--alpha", "1", "--omega", "0", "--A", ".6", ".4", "x", ".6"], "--A"),
    (["solve", "--alphas", "-1", "--omegas", "0.3"], "--alphas"),
    (["solve", "--alphas", "1", "--omegas", "1.5"], "--omegas"),
    (["solve", "--alphas", "1", "--omegas", "0.3", "--qmc", "1e8"], "--qmc"),
    (["train", "--d", "abc"], "--d"),
    (["counting", "--learning-rate", "-1"], "--learning-rate"),
])
def test_bad_values_are_usage_errors_naming_the_flag(argv, flag, run_cli):
    code, _, err = run_cli(argv)
    assert code == 2 and f"argument {flag}" in err, err


def test_train_students_refuses_a_run_that_cannot_fit_before_compiling():
    from phasejax.empirics import TrainingGrid, train_students

    with pytest.raises(ValueError, match=r"d=10000000.*GiB available"):
        train_students(TrainingGrid(alphas=(2.5,), omegas=(0.3,), seeds=(0,), d=10**7))


def test_debug_shows_the_traceback(run_cli):
    code, _, err = run_cli(["solve", "--alphas", "1", "1", "--omegas", "0.3", "--debug"])
    assert code == 2
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("phasejax solve: error: --alphas")


def test_help_texts_show_each_default_once(run_cli):
    for name in COMMANDS:
        _, out, _ = run_cli([name, "--help"])
        flat = " ".join(out.split())
        assert "(default: None)" not in flat, name
        assert re.search(r"default[^()]*\)\s*\(default:", flat) is None, name        # never twice
    _, out, _ = run_cli(["solve", "--help"])
    assert "(default: semantic)" in " ".join(out.split())                # no hidden default
    _, out, _ = run_cli(["phase-diagram", "--help"])
    flat = " ".join(out.split())
    assert "--sigma SIGMA token standard deviation (default: 0.5)" in flat
    assert "--n-alpha N_ALPHA number of alphas (default: 23)" in flat


# ----------------------------------------------------------------------------
# Loaders
# ----------------------------------------------------------------------------


def _runs_csv(tmp_path):
    from phasejax.empirics import RUN_COLUMNS

    row = dict(alpha=1.0, omega=0.3, seed=0, init="semantic", d=4, m=0.1, theta=0.2, q=0.3, train_loss=0.1,
               test_error=0.2, test_error_theory=0.2, n=4, grad_norm=1e-7, steps=3, status="converged",
               converged=1, cos_m=0.1, cos_theta=0.9, solution="semantic")
    path = tmp_path / "runs.csv"
    write_csv(str(path), {k: np.asarray([row[k], row[k]]) for k in RUN_COLUMNS})
    return path


@pytest.mark.parametrize("edit,needle", [
    (lambda t: t.replace(",theta,", ",thetaX,", 1), "lacks the column theta"),
    (lambda t: t.replace("0.2,", "abc,", 1), "expected a number, got 'abc'"),
    (lambda t: t.rsplit("\n", 2)[0][:-9] + "\n", "cells, the header has"),
    (lambda t: t.replace("semantic", "sideways", 1), "'sideways' is not one of"),
    (lambda t: t.split("\n")[0] + "\n", "0 data rows"),
    (lambda t: "", "is empty"),
])
def test_training_runs_from_csv_validates(tmp_path, edit, needle):
    from phasejax.empirics import TrainingRuns

    path = _runs_csv(tmp_path)
    TrainingRuns.from_csv(str(path))                                       # the good file loads
    path.write_text(edit(path.read_text()))
    with pytest.raises(ValueError) as info:
        TrainingRuns.from_csv(str(path))
    assert str(path) in str(info.value) and needle in str(info.value)


@pytest.mark.parametrize("content", ["", "[]", '{"grid": 3, "config": {}}',
                                     '{"grid": {"alphas": [-1], "omegas": [0.3]}, "config": {}}'])
def test_training_runs_load_validates_training_json(tmp_path, content):
    from phasejax.empirics import TrainingRuns

    _runs_csv(tmp_path)
    (tmp_path / "training.json").write_text(content)
    with pytest.raises(ValueError, match="training.json"):
        TrainingRuns.load(str(tmp_path))


def test_read_csv_checks_kinds_and_names_file_and_column(tmp_path):
    path = str(tmp_path / "t.csv")
    write_csv(path, dict(a=np.array([1, 2]), b=np.array(["x", "y"])))
    assert read_csv(path, required=dict(a="int", b="str"))["a"].tolist() == [1, 2]
    with pytest.raises(ValueError, match=r"t.csv, column 'b', line 2: expected a number, got 'x'"):
        read_csv(path, required=dict(b="number"))
    with pytest.raises(ValueError, match="lacks the column c"):
        read_csv(path, required=["a", "c"])
    with pytest.raises(ValueError, match="0 or 1"):
        read_csv(path, required=dict(a="bool"))


def test_read_json_names_the_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("{oops")
    with pytest.raises(ValueError, match=r"c.json is not valid JSON"):
        read_json(str(path))
    path.write_text(json.dumps([1]))
    with pytest.raises(ValueError, match="must hold a JSON object"):
        read_json(str(path), kind=dict)


@pytest.mark.parametrize("tasks,fn,needle", [
    (dict(alpha=np.ones((3, 2))), _fn, "shape (3,)"),
    (dict(alpha=np.ones(3), k=np.arange(4)), _fn, "task column 'k'"),
    (dict(alpha=np.ones(0), k=np.arange(0)), _fn, "empty"),
    ({}, _fn, "at least one column"),
    (TASKS, lambda c: dict(total=jnp.sum(jnp.asarray(c["alpha"]))), "leading axis"),
])
def test_run_chunked_refuses_bad_tables_and_batch_functions(tmp_path, tasks, fn, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        run_chunked(fn, tasks, CONFIG, opts(tmp_path, chunk_size=4))


@pytest.mark.slow
def test_a_swapped_chunk_of_a_command_is_recomputed_and_the_csv_is_unchanged(tmp_path, run_cli):
    """End to end: `train` over four runs in two chunks; chunk 1 replaced by a copy of chunk 0; the re-run
    names the chunk, recomputes it, and writes the same runs.csv."""
    argv = ["train", "--d", "6", "--alphas", "0.5", "1", "--omegas", "0.3", "--seeds", "2", "--inits", "semantic",
            "--optimizer", "gd", "--max-steps", "5", "--n-test", "8", "--chunk-size", "2", "--no-progress",
            "--out", str(tmp_path / "out")]
    code, _, err = run_cli(argv)
    assert code == 1 and "none of the 4 runs converged" in err, err     # 5 GD steps: written, not converged
    shutil.copy(tmp_path / "out" / "runs.csv", tmp_path / "first_runs.csv")
    chunks = tmp_path / "out" / "run" / "chunks"
    shutil.copy(chunks / "chunk_00000.npz", chunks / "chunk_00001.npz")
    code, _, err = run_cli(argv)
    assert code == 1, err
    assert str(chunks / "chunk_00001.npz") in err and "is chunk 0 of this run, not chunk 1" in err
    # chunk 1 trained again by the same float32 program: a few units in the last place
    assert_same_csv(tmp_path / "out" / "runs.csv", tmp_path / "first_runs.csv", rtol=RTOL_FLOAT32)


@pytest.mark.slow
def test_solve_point_by_point_gives_the_batch_fixed_points():
    """On a CPU `solve` runs one call per point (a progress bar per point on a terminal); its fixed points are
    those of one batch call to well within the solver's tolerance (scaled residual 1e-7): the two compiled
    programs differ in the last digits only."""
    from phasejax import float64_scope
    from phasejax.commands.solve import solve_points
    from phasejax.theory import SEConfig, gauss_hermite, make_params, result_columns, solve_state_evolution_batch

    params = make_params(1.0, 0.0)
    alpha, omega = np.asarray([1.0, 2.0]), np.asarray([0.3, 0.3])
    rule = gauss_hermite(params.L * (params.r + params.t), 4)
    with float64_scope():
        batch = solve_state_evolution_batch(params, alpha, omega, "positional", rule, SEConfig())
        each = solve_points(params, alpha, omega, "positional", rule, SEConfig(), progress=True)
        cols = [jax.device_get(jax.vmap(lambda r: result_columns(r, params))(res)) for res in (batch, each)]
    for key in ("q", "m", "V", "theta", "test_error", "train_loss"):
        np.testing.assert_allclose(cols[1][key], cols[0][key], rtol=1e-8, err_msg=key)
    assert np.all(cols[0]["converged"]) and np.all(cols[1]["converged"])
    assert np.all(cols[1]["residual"] < 1e-7)


# ----------------------------------------------------------------------------
# Every flag honoured or refused; one exit-code rule
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("argv,needle", [
    (["fig2", "--replot", "--d", "77", "--seeds", "9", "--omega", "0.9"],
     "--d, --omega, --seeds are not used by --replot"),
    (["phase-diagram", "--n-alpha", "1", "--alpha-min", "1", "--alpha-max", "2"], "--alpha-max 2 would be dropped"),
    (["phase-diagram", "--n-omega", "1", "--omega-min", "0.3", "--omega-max", "0.3", "--slice-omega", "0.9"],
     "--slice-omega 0.9 is not an omega of the grid (0.3)"),
    (["solve", "--alphas", "1", "--alpha", "2", "--omegas", "0.3"], "--alphas given more than once"),
    (["solve", "--alphas", "1", "--alphas", "2", "--omegas", "0.3"], "--alphas given more than once"),
    (["random-init", "--n-alpha", "1", "--alpha-max", "2"], "--alpha-max 2 would be dropped"),
])
def test_a_flag_that_would_be_ignored_is_refused(argv, needle, tmp_path, run_cli):
    """`fig2 --replot --d 77 ...`, `--n-alpha 1` with `--alpha-max`, a `--slice-omega` off the grid and a flag
    given twice used to be dropped silently (exit 0)."""
    if argv[0] != "solve":
        argv = [*argv, "--out", str(tmp_path / "out")]
    code, out, err = run_cli(argv)
    assert code == 2, err
    assert needle in one_error_line(err, argv[0])
    assert out == "" and snapshot(tmp_path) == {}


class _FakeRuns:
    """What `train_students` returns, with chosen statuses (no training)."""

    def __init__(self, statuses):
        n = len(statuses)
        self.runs = dict(alpha=np.ones(n), converged=np.asarray(statuses) == 0, status=np.asarray(statuses))

    def write(self, out):
        return []


@pytest.mark.parametrize("statuses,code,needle", [
    ([1, 1], 1, "none of the 2 runs converged (max_iterations: 2)"),          # train --max-steps 20
    ([4, 4], 1, "2 of 2 runs ended without a result (diverged: 2)"),          # train --learning-rate 1e30
    ([0, 1], 0, None),                                                        # a run at its step cap is a result
])
def test_train_follows_the_exit_code_rule(monkeypatch, tmp_path, run_cli, statuses, code, needle):
    """`train` exited 0 when no run converged or every run diverged; `solve` and `phase-diagram` exit 1 there."""
    monkeypatch.setattr("phasejax.empirics.train_students", lambda *a, **k: _FakeRuns(statuses))
    got, _, err = run_cli([*TINY_TRAIN, "--out", str(tmp_path / "out")])
    assert got == code, err
    if needle:
        assert needle in one_error_line(err, "train")
    assert (tmp_path / "out" / "summary.json").exists()                   # the files are written first


# ----------------------------------------------------------------------------
# Run directories: locks, chunk sizes, names; output folders: markers, permissions
# ----------------------------------------------------------------------------


def test_two_identical_runs_do_not_both_compute(tmp_path):
    from phasejax._errors import RunError
    from phasejax.sweep import run_dir_lock

    with run_dir_lock(str(tmp_path), 0):                   # another run holds the directory
        with pytest.raises(RunError, match=r"another process \(pid \d+\) is computing into the run directory"):
            run_chunked(_fn, TASKS, CONFIG, opts(tmp_path, chunk_size=4))
        assert not os.path.exists(chunk(tmp_path, 0))
    assert run_chunked(_fn, TASKS, CONFIG, opts(tmp_path, chunk_size=4)) is not None   # released: it runs


def test_a_run_directory_of_another_chunk_size_is_reused(tmp_path, capsys):
    """The chunk size does not change the results: a run directory made with another one goes on with its own
    chunking, every finished chunk reused (it used to be refused as another run)."""
    ref = run_chunked(_fn, TASKS, CONFIG, RunOptions(run_dir=str(tmp_path / "ref"), chunk_size=3, progress=False))
    first = run_chunked(_fn, TASKS, CONFIG, opts(tmp_path, chunk_size=4, max_chunks=2))
    assert first is None
    before = snapshot(tmp_path / "chunks")
    capsys.readouterr()
    out = run_chunked(_fn, TASKS, CONFIG, opts(tmp_path, chunk_size=3))
    assert "holds chunks of 4 tasks; going on with that chunk size" in capsys.readouterr().err
    for k in ref:       # chunks of 4 against chunks of 3: float32 re-derived, a few units in the last place
        np.testing.assert_allclose(out[k], ref[k], rtol=RTOL_FLOAT32)
    after = snapshot(tmp_path / "chunks")
    assert {k: after[k] for k in before} == before and len(after) == 3     # 2 reused, 1 computed, chunks of 4


@pytest.mark.parametrize("make,needle", [
    (lambda p: "", "--run-dir is empty"),
    (lambda p: (p / "file").write_text("x") and str(p / "file"), "is a file, not a folder"),
])
def test_a_run_dir_that_is_not_a_folder_is_a_usage_error(tmp_path, run_cli, make, needle):
    run_dir = make(tmp_path)
    code, _, err = run_cli([*TINY_TRAIN, "--out", str(tmp_path / "out"), "--run-dir", run_dir])
    assert code == 2, err
    line = one_error_line(err, "train")
    assert needle in line and "--run-dir" in line
    assert not (tmp_path / "out").exists()                  # a refused run leaves no folder with only the marker


def test_a_damaged_output_marker_is_named(tmp_path, run_cli):
    out = tmp_path / "out"
    out.mkdir()
    (out / OUTPUT_MARKER).write_text("{damaged")
    (out / "runs.csv").write_text("alpha\n1\n")
    code, _, err = run_cli([*TINY_TRAIN, "--out", str(out)])
    assert code == 2
    line = one_error_line(err, "train")
    assert "configuration cannot be read" in line and OUTPUT_MARKER in line and "differing" not in line


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="permissions do not bind root")
def test_a_read_only_out_is_found_before_computing(tmp_path, run_cli):
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o555)
    try:
        code, _, err = run_cli([*TINY_TRAIN, "--out", str(out)])
    finally:
        out.chmod(0o755)
    assert code == 2
    line = one_error_line(err, "train")
    assert "cannot write to --out" in line and ".tmp-" not in line


def test_summaries_record_the_command_shell_quoted(monkeypatch):
    import shlex

    from phasejax.commands.flags import command_line

    monkeypatch.setattr("sys.argv", ["/usr/bin/phasejax", "train", "--out", "my runs/a b", "--alphas", "1"])
    assert command_line() == "phasejax train --out 'my runs/a b' --alphas 1"
    assert shlex.split(command_line())[3] == "my runs/a b"


@pytest.mark.parametrize("script,existing", [("census_profile.py", "profile_alpha0.6_omega0.csv"),
                                             ("gamp_fixed_point_check.py", "fixed_point_check.json")])
def test_scripts_refuse_to_overwrite_results_before_computing(tmp_path, script, existing):
    """The scripts wrote into results/ by default, replacing the committed files; their default is under runs/
    and an existing file is replaced only with --overwrite (checked before any compute)."""
    import subprocess
    import sys

    (tmp_path / existing).write_text("kept\n")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "checks", script), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "--overwrite" in out.stderr and (tmp_path / existing).read_text() == "kept\n"
    with open(os.path.join(ROOT, "scripts", "checks", script)) as fh:
        assert '"--out", default="results' not in fh.read()


def test_replot_into_a_folder_the_command_did_not_write_needs_overwrite(tmp_path, run_cli):
    """`--replot --out results/X` skipped the guard: it rewrote committed figures and summaries silently."""
    from phasejax.empirics import RUN_COLUMNS
    from phasejax.empirics.sweep import write_runs_csv

    runs = {k: np.zeros(2) for k in RUN_COLUMNS}
    runs.update(alpha=np.asarray([0.5, 1.0]), d=np.asarray([20, 20]), init=np.asarray([2, 2]), seed=np.asarray([0, 1]),
                n=np.asarray([10, 20]), steps=np.asarray([3, 3]),
                solution=np.asarray([0, 1]), status=np.zeros(2, int), converged=np.ones(2, bool))
    write_runs_csv(runs, str(tmp_path / "runs.csv"))
    before = snapshot(tmp_path)
    code, _, err = run_cli(["random-init", "--replot", "--out", str(tmp_path)])
    assert code == 2 and "--overwrite" in one_error_line(err, "random-init")
    assert snapshot(tmp_path) == before
    code, _, err = run_cli(["random-init", "--replot", "--out", str(tmp_path), "--overwrite"])
    assert code == 0, err


def test_a_full_disk_is_one_line_naming_the_file():
    import errno

    from phasejax.cli import error_line

    code, line = error_line(OSError(errno.ENOSPC, "No space left on device", "/data/out/runs.csv"))
    assert code == 1 and "no space left on the disk of /data/out/runs.csv" in line and "[Errno" not in line
    code, line = error_line(PermissionError(errno.EACCES, "Permission denied", "/ro/out/summary.json"))
    assert code == 1 and "/ro/out/summary.json" in line and "writable --out" in line


# ----------------------------------------------------------------------------
# One check per concern: files read back, modes, the flag as typed
# ----------------------------------------------------------------------------


def test_check_reads_names_the_flag_the_file_and_what_it_lacks(tmp_path):
    from phasejax.commands.argtypes import Reads, check_reads
    from phasejax.io import atomic_save_npz, atomic_write_json

    write_csv(str(tmp_path / "t.csv"), dict(alpha=np.ones(2), lam=np.ones(2)))
    atomic_write_json(str(tmp_path / "s.json"), {"config": {"sigma": 0.5}})
    atomic_save_npz(str(tmp_path / "a.npz"), {"tokens": np.arange(3)})
    ok = [Reads(str(tmp_path / "t.csv"), ("alpha", "lambda|lam")), Reads(str(tmp_path / "s.json"), ("config.sigma",)),
          Reads(str(tmp_path / "a.npz"), ("tokens",)), Reads(str(tmp_path / "absent.csv"), ("x",), optional=True)]
    check_reads(ok)
    cases = [(Reads(str(tmp_path / "t.csv"), ("alpha", "omega", "q")), "t.csv lacks the columns omega, q, which "
              "--replot reads (--out)"),
             (Reads(str(tmp_path / "t.csv"), ("lambda|lams",)), "lacks the column lambda (or lams)"),
             (Reads(str(tmp_path / "s.json"), ("config.lam",), flag="--rs-dir", reader="rsb", fix="pass another"),
              "s.json lacks the key config.lam, which rsb reads (--rs-dir); pass another"),
             (Reads(str(tmp_path / "a.npz"), ("tokens", "semantic_before")), "a.npz lacks the array semantic_before"),
             (Reads(str(tmp_path / "none.csv"), ("x",)), f"--out {tmp_path} lacks none.csv, which --replot reads")]
    for spec, needle in cases:
        with pytest.raises(UsageError) as info:
            check_reads([spec])
        assert needle in str(info.value), str(info.value)
    (tmp_path / "bad.csv").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UsageError, match="bad.csv is not a text file"):
        check_reads([Reads(str(tmp_path / "bad.csv"), ("x",))])


def test_a_mode_refuses_the_flags_it_never_reads_named_as_typed(run_cli, tmp_path):
    """`--no-project` (a switch of `--project`) is named as typed; a hidden older spelling by the shown one."""
    code, _, err = run_cli(["bench", "--parts", "cold_solve", "--project", "--out", str(tmp_path)])
    assert code == 2 and "--project is not used with --parts without paper_diagram" in err
    code, _, err = run_cli(["solve", "--alpha", "1", "1", "--omegas", "0.3"])
    assert code == 2 and "--alphas repeats 1" in err
    code, _, err = run_cli(["bracket", "--ds", "50", "100", "--datasets", "4", "4", "--no-rs", "--degree", "9",
                            "--out", str(tmp_path / "b")])
    assert code == 2 and "--datasets" not in err and "--degree 9" in err    # --datasets may repeat (a count per d)
