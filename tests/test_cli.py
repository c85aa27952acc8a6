"""The `phasejax` command line: every subcommand's --help works (in-process, through the installed console
script, and in a fresh virtual environment), defaults are shown, and bad flags are usage errors naming the flag."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from phasejax.cli import command_modules

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = sorted(command_modules())
EXPERIMENT_COMMANDS = ("train", "fig2", "scaling", "random-init", "counting", "histogram", "bench-training")


def test_the_experiment_commands_are_discovered():
    assert set(EXPERIMENT_COMMANDS) <= set(COMMANDS), COMMANDS


@pytest.mark.parametrize("name", COMMANDS)
def test_help_of_every_subcommand(name, run_cli):
    code, out, _ = run_cli([name, "--help"])
    assert code == 0
    assert out.startswith(f"usage: phasejax {name}")


@pytest.mark.parametrize("name", EXPERIMENT_COMMANDS)
def test_help_shows_defaults_and_the_presets(name, run_cli):
    _, out, _ = run_cli([name, "--help"])
    out = " ".join(out.split())   # argparse wraps help lines at the terminal width
    assert "(default: cpu)" in out and "--preset {cpu,gpu" in out
    assert "(default: float" in out   # --dtype
    assert "--run-dir" in out or name == "bench-training"


@pytest.mark.parametrize("argv,flag", [
    (["histogram", "--seeds", "0"], "--seeds"),
    (["histogram", "--d", "7"], "--d"),
    (["counting", "--steps", "0"], "--steps"),
    (["counting", "--batch-size", "0"], "--batch-size"),
    (["counting", "--configs", "mlp"], "--configs"),
    (["fig2", "--seeds", "0"], "--seeds"),
    (["fig2", "--omega", "1.5"], "--omega"),
    (["scaling", "--ds", "10", "-5"], "--ds"),
    (["random-init", "--max-steps", "2.5"], "--max-steps"),
    (["train", "--alphas", "0"], "--alphas"),
    (["train", "--dtype", "float16"], "--dtype"),
    (["train", "--chunk-size", "0"], "--chunk-size"),
    (["bench-training", "--steps", "-1"], "--steps"),
])
def test_bad_flags_are_usage_errors_naming_the_flag(argv, flag, run_cli):
    code, _, err = run_cli(argv)
    assert code == 2, err
    assert f"argument {flag}" in err, err


@pytest.mark.parametrize("argv,needle", [
    (["solve", "--alphas", "x"], "phasejax solve: error: argument --alphas: expected a number, got 'x'"),
    (["solve", "--alphas", "1", "--bogus"], "phasejax solve: error: unrecognized arguments: --bogus"),
    (["train", "--bogus", "3"], "phasejax train: error: unrecognized arguments: --bogus 3"),
    (["nope"], "phasejax: error: argument COMMAND: invalid choice: 'nope'"),
])
def test_a_usage_error_is_one_line_naming_the_subcommand(argv, needle, run_cli):
    """argparse printed its usage block before the error, and an unknown flag was reported by `phasejax`, not by
    the subcommand whose --help lists the flags."""
    code, out, err = run_cli(argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(needle), err
    assert err.rstrip().endswith(f"see {needle.split(':')[0]} --help"), err


def test_flag_values_are_never_replaced_by_the_preset():
    """An explicit value wins; only omitted flags take the preset's value (`--steps 0` used to become 2500)."""
    from phasejax.cli import build_parser
    from phasejax.commands.counting import PRESETS
    from phasejax.commands.flags import pick

    args = build_parser().parse_args(["counting", "--steps", "7"])
    assert pick(args, "steps", PRESETS["cpu"]) == 7
    assert pick(args, "seeds", PRESETS["cpu"]) == PRESETS["cpu"]["seeds"]


def test_counting_config_names_are_case_insensitive_on_the_command_line():
    from phasejax.cli import build_parser

    args = build_parser().parse_args(["counting", "--configs", "DOT_bos_softmax", "Linear"])
    assert args.configs == ["dot+BOS+softmax", "linear"]


def _console_script() -> str:
    exe = os.path.join(os.path.dirname(sys.executable), "phasejax")
    return exe if os.path.exists(exe) else shutil.which("phasejax")


def test_the_installed_console_script_runs():
    exe = _console_script()
    assert exe, "no `phasejax` console script next to the interpreter: install the package (pip install -e .)"
    out = subprocess.run([exe, "counting", "--help"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage: phasejax counting" in out.stdout
    listing = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=300)
    assert listing.returncode == 0 and all(name in listing.stdout for name in EXPERIMENT_COMMANDS)


@pytest.mark.slow
def test_every_subcommand_help_works_in_a_fresh_virtual_environment(tmp_path):
    """pip install of the checkout (not editable) into a new venv, then `phasejax <cmd> --help` for every command.

    Needs network access to PyPI (the dependencies are downloaded). CI: `pytest -m slow tests/test_cli.py`.
    """
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = str(venv / "bin" / "python")
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    install = subprocess.run([py, "-m", "pip", "install", "-q", ROOT], capture_output=True, text=True, timeout=1800,
                             env=env)
    assert install.returncode == 0, install.stderr[-3000:]
    exe = str(venv / "bin" / "phasejax")
    for name in COMMANDS:
        out = subprocess.run([exe, name, "--help"], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                             env=env)
        assert out.returncode == 0, (name, out.stderr[-2000:])
        assert f"usage: phasejax {name}" in out.stdout
    # the installed package, not the checkout, was used
    where = subprocess.run([py, "-c", "import phasejax; print(phasejax.__file__)"], capture_output=True, text=True,
                           cwd=tmp_path, env=env)
    assert str(venv) in where.stdout, where.stdout


def test_every_shared_flag_is_in_the_vocabulary_table():
    """docs/cli.md tables every flag that three or more commands share (one spelling per meaning)."""
    import argparse
    import collections

    from phasejax.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices
    users = collections.Counter(o for p in sub.values() for a in p._actions if a.help != argparse.SUPPRESS
                                for o in a.option_strings if o.startswith("--") and o != "--help")
    with open(os.path.join(ROOT, "docs", "cli.md")) as fh:
        table = fh.read().split("## Flag vocabulary", 1)[1]
    missing = sorted(o for o, n in users.items() if n >= 3 and f"`{o}`" not in table)
    assert not missing, missing


def test_older_spellings_are_hidden_aliases(run_cli):
    from phasejax.cli import build_parser

    args = build_parser().parse_args(["counting", "--lr", "0.5"])
    assert args.learning_rate == 0.5
    assert build_parser().parse_args(["counting"]).learning_rate == 1e-3
    args = build_parser().parse_args(["solve", "--alpha", "1", "2", "--omega", "0.3"])
    assert args.alphas == [1.0, 2.0] and args.omegas == [0.3]
    _, out, _ = run_cli(["counting", "--help"])
    assert "--lr" not in out and "--learning-rate" in out


@pytest.mark.parametrize("argv, expected", [
    (["/some/folder/phasejax/cli.py", "depth", "--out", "x"], "phasejax depth --out x"),
    (["/usr/bin/phasejax", "solve"], "phasejax solve"),
    (["/some/folder/script.py", "--flag"], "script.py --flag"),
])
def test_results_record_the_command_as_typed(monkeypatch, argv, expected):
    from phasejax.commands.flags import command_line

    monkeypatch.setattr("sys.argv", argv)
    assert command_line() == expected


def test_parsing_and_usage_errors_do_not_start_jax():
    """Arguments are parsed before JAX is imported: a usage error comes back without JAX's start-up cost."""
    code = ("import sys\nfrom phasejax.cli import build_parser, main\nbuild_parser()\n"
            "try:\n    main(['solve', '--alphas', 'x'])\nexcept SystemExit as e:\n    assert e.code == 2, e.code\n"
            "assert 'jax' not in sys.modules, 'parsing imported jax'\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_commands_spell_the_libraries_names():
    """Commands spell some choices out (so that parsing imports no JAX); they are the library's."""
    from phasejax.commands import train
    from phasejax.empirics import INITS, STUDENTS

    assert train.INITS == INITS and train.STUDENTS == STUDENTS


def _interrupt(tmp_path, body: str, wait_after_ready: float = 0.5) -> tuple[int, float, str]:
    """Run `body` (indented into a `prompt_interrupts(..., grace=1.0)` block after it prints "ready") in a fresh
    interpreter, send it SIGINT `wait_after_ready` seconds after "ready", and return `(exit code, seconds from the
    signal to the exit, stderr)`. On a timeout the child's threads are dumped (faulthandler, SIGUSR1) into the
    failure message."""
    import signal
    import threading
    import time

    code = textwrap.dedent("""
        import faulthandler, os, signal, sys, time
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        import jax, jax.numpy as jnp
        from phasejax.commands._session import prompt_interrupts
        grow = lambda c: (c[0] * 1.000000001, c[1] + 1.0)
        f = jax.jit(lambda x: jax.lax.while_loop(lambda c: c[0] < 1e30, grow, (x, 0.0))[1])   # minutes
        f.lower(1.0).compile()
        with prompt_interrupts("phasejax test: interrupted", grace=1.0):
            print("ready", flush=True)
    """) + textwrap.indent(textwrap.dedent(body), " " * 4)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)   # never a full pipe
    reader.start()
    try:
        assert proc.stdout.readline().strip() == "ready", "".join(err)
        time.sleep(wait_after_ready)
        t0 = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(2.0)
            proc.kill()
            reader.join(timeout=10)
            raise AssertionError("no exit within 60 s of SIGINT; the child's threads:\n" + "".join(err)[-6000:])
        took = time.perf_counter() - t0
    finally:
        proc.kill()
    reader.join(timeout=10)
    return rc, took, "".join(err)


def test_ctrl_c_ends_a_long_compiled_call_within_seconds(tmp_path):
    """Python sees Ctrl-C only when a compiled call returns; `prompt_interrupts` ends the process after its grace
    period instead, with its message and exit code 130."""
    rc, took, err = _interrupt(tmp_path, "f(1.0).block_until_ready()")
    assert rc == 130 and took < 15, (rc, took, err[-3000:])
    assert "phasejax test: interrupted" in err


def test_ctrl_c_that_raises_keyboard_interrupt_in_python_ends_the_process_the_same_way(tmp_path):
    """An interrupt that lands in Python code inside the block (before a program starts, say) raises
    `KeyboardInterrupt`; leaving the block with it ends the process at once, with the same message and code (not
    through the interpreter's shutdown, which would wait for programs in flight)."""
    rc, took, err = _interrupt(tmp_path, "time.sleep(30)\nf(1.0).block_until_ready()")
    assert rc == 130 and took < 15, (rc, took, err[-3000:])
    assert "phasejax test: interrupted" in err and "Traceback" not in err


def test_ctrl_c_whose_keyboard_interrupt_is_lost_still_ends_the_process(tmp_path):
    """An interrupt whose `KeyboardInterrupt` never reaches the block (lost in a garbage-collection callback, as
    JAX's can lose it) still ends the process: the watcher ends it after the grace period. Simulated by a
    handler that swallows the interrupt while Python code keeps running."""
    body = """
        signal.signal(signal.SIGINT, lambda *_: None)
        t_end = time.time() + 30
        while time.time() < t_end:
            sum(range(1000))
    """
    rc, took, err = _interrupt(tmp_path, body)
    assert rc == 130 and took < 15, (rc, took, err[-3000:])
    assert "phasejax test: interrupted" in err


def test_a_line_while_the_first_program_compiles(tmp_path, monkeypatch, capsys):
    import jax
    import jax.numpy as jnp

    from phasejax.commands import _session

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with _session.compile_notice("demo", enabled=True):
        jax.jit(lambda x: jnp.sin(x) * 3.25 + 1.0)(jnp.arange(7.0)).block_until_ready()
        jax.jit(lambda x: jnp.cos(x) * 1.5)(jnp.arange(5.0)).block_until_ready()
    err = capsys.readouterr().err
    assert err.count("phasejax demo: compiling (") == 1, err
    assert "demo" in json.loads((tmp_path / "phasejax" / "compile_seconds.json").read_text())
    assert _session.compile_message("demo", 42.0) == "phasejax demo: compiling (about 42 s, as last time) ..."
    with _session.compile_notice("demo", enabled=False):      # not on a terminal: nothing
        jax.jit(lambda x: x - 2.0)(jnp.arange(3.0)).block_until_ready()
    assert capsys.readouterr().err == ""


def test_an_interrupted_command_names_its_run_directory_only_if_it_has_one():
    from phasejax.cli import build_parser, interrupted_message

    solve = build_parser().parse_args(["solve", "--alphas", "1", "--omegas", "0.3"])
    assert interrupted_message(solve) == "phasejax solve: interrupted"
    train = build_parser().parse_args(["train", "--out", "o"])
    assert "finished chunks stay in o/run" in interrupted_message(train)


@pytest.mark.parametrize("argv,dest,value", [
    (["markov", "--skip-critical"], "no_critical", True),
    (["bench-training", "--skip-gamp"], "no_gamp", True),
    (["histogram", "--p", "7"], "width", 7),
    (["counting", "--ps", "3", "5"], "widths", [3, 5]),
    (["replicas", "--lams", "0"], "lams", [0.0]),          # --lams 0 is accepted, as --lam 0
])
def test_one_vocabulary_with_older_spellings_hidden(argv, dest, value, run_cli):
    from phasejax.cli import build_parser

    assert getattr(build_parser().parse_args(argv), dest) == value
    _, out, _ = run_cli([argv[0], "--help"])
    assert argv[1] not in out.split() or argv[1] in ("--lams",)


def test_long_commands_have_no_progress_and_sweeps_chunk_size():
    import argparse

    from phasejax.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name in ("bench-training", "depth", "extension", "solve", "census", "phase-diagram", "train", "gamp", "markov"):
        assert "--no-progress" in sub[name]._option_string_actions, name
    assert "--chunk-size" in sub["extension"]._option_string_actions


def test_replot_recognises_the_folder_its_own_command_wrote(tmp_path):
    """`--replot` without `--overwrite` rewrites a folder that the same command wrote (its marker names the
    command), and refuses one of another command or without a marker."""
    from phasejax.commands.argtypes import UsageError, guard_output, guard_replot

    out = str(tmp_path / "out")
    guard_output(out, False, {"seeds": 2}, command="replicas")
    assert guard_replot(out, False, "replicas") == out
    with pytest.raises(UsageError, match="did not write"):
        guard_replot(out, False, "gamp")
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(UsageError, match="did not write"):
        guard_replot(str(bare), False, "replicas")
    assert guard_replot(str(bare), True, "replicas") == str(bare)


def test_an_unwritable_out_is_one_line_before_computing_also_for_root(tmp_path, run_cli, monkeypatch):
    """A read-only --out is refused before any compute, named without the temporary file's name (root can write
    anywhere: the failed write is simulated here; tests/test_reliability.py checks real permissions)."""
    import errno

    import phasejax.io

    def refuse(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", f"{path}.tmp-1234")

    monkeypatch.setattr(phasejax.io, "atomic_write_json", refuse)
    out = tmp_path / "out"
    out.mkdir()
    code, stdout, err = run_cli(["train", "--d", "4", "--alphas", "1", "--omegas", "0.3", "--seeds", "1",
                                 "--max-steps", "2", "--no-progress", "--out", str(out)])
    assert code == 2 and stdout == ""
    assert err.strip() == (f"phasejax train: error: cannot write to --out {out} (Permission denied); pass a writable "
                           "--out folder"), err


def test_a_chunked_command_with_stderr_in_a_file_writes_a_line_per_chunk(tmp_path):
    """Run as a batch job (stderr to a file): one progress line per finished chunk, none per step."""
    log = tmp_path / "job.err"
    argv = ["train", "--d", "4", "--alphas", "0.5", "1", "--omegas", "0.3", "--seeds", "1", "--inits", "semantic",
            "--max-steps", "2", "--n-test", "4", "--chunk-size", "1", "--out", str(tmp_path / "out")]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(log, "w") as err:
        done = subprocess.run([sys.executable, "-m", "phasejax.cli", *argv], stdout=subprocess.PIPE, stderr=err,
                              text=True, timeout=600, cwd=tmp_path, env=env)
    lines = log.read_text().splitlines()
    progress = [ln for ln in lines if ln.startswith("phasejax: train_students: chunk ")]
    assert [ln.split(",")[0] for ln in progress] == ["phasejax: train_students: chunk 1 of 2 done (1 of 2 tasks)",
                                                      "phasejax: train_students: chunk 2 of 2 done (2 of 2 tasks)"]
    assert "\r" not in log.read_text()                     # no bar redrawn into the log
    assert done.returncode == 1 and lines[-1].startswith("phasejax train: error: none of the 2 runs converged")
