import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One JAX persistent compilation cache per test session, shared by the xdist workers and by the subprocesses the
# tests start (they inherit the environment): a program already compiled by another process of the session (the
# default state-evolution solve, say) is loaded instead of compiled again (XLA compilation only; tracing stays).
# A fresh, empty directory each session: nothing carries over between runs. The controller (the first process to
# import this file) makes it and removes it; PHASEJAX_TEST_COMPILE_CACHE=0 turns it off; a JAX_COMPILATION_CACHE_DIR set by the
# user is used as it is.
_OWN_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ and os.environ.get("PHASEJAX_TEST_COMPILE_CACHE", "1") != "0":
    _OWN_CACHE = tempfile.mkdtemp(prefix="phasejax-test-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_CACHE


# XLA's CPU backend compiles the tests' programs at optimization level 1 instead of its default 2: the training
# programs of the sandbox, empirics and extension tests compile about twice as fast, the state-evolution tests take
# as long as at level 2, and results differ from level 2 in the last bits only. The commands keep XLA's default.
# Set before JAX creates its CPU backend (this file is imported before any test module); a level already in
# XLA_FLAGS is kept; PHASEJAX_TEST_XLA_OPT_LEVEL=2 runs the suite at the production level.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    _level = os.environ.get("PHASEJAX_TEST_XLA_OPT_LEVEL", "1")
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_backend_optimization_level={_level}").strip()
# and with the two options the theory's programs always use (`phasejax.xla.CPU_COMPILER_OPTIONS`: XLA's older CPU
# fusion emitter, no expensive LLVM passes) for every program of the suite: the training programs of the sandbox
# and empirics tests then compile in about three quarters of the CPU time (tests/tasks/test_induction.py: 80 -> 58
# CPU seconds). PHASEJAX_TEST_XLA_OPT_LEVEL=2 leaves them out too.
if os.environ.get("PHASEJAX_TEST_XLA_OPT_LEVEL", "1") != "2":
    for _flag in ("xla_cpu_use_fusion_emitters=false", "xla_llvm_disable_expensive_passes=true"):
        if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --{_flag}").strip()


def pytest_unconfigure(config):
    if _OWN_CACHE is not None:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


# The longest files start first, so that no worker is left alone with one at the end (pytest-xdist's loadfile
# hands out files in collection order).
LONGEST_FIRST = ("tests/theory/test_solver.py", "tests/phase/test_diagram.py", "tests/theory/test_census.py",
                 "tests/empirics/test_training.py", "tests/tasks/test_induction.py")


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}

    def key(item):
        return rank.get(os.path.relpath(str(item.path), ROOT).replace(os.sep, "/"), len(rank))

    items.sort(key=key)        # stable: the other files and every file's tests keep their order


def run_on_host_devices(code: str, n_devices: int = 8, timeout: int = 600) -> str:
    """Run `code` in a fresh interpreter with `n_devices` forced CPU devices; assert it succeeds, return stdout."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    env = dict(os.environ, XLA_FLAGS=" ".join(flags + [f"--xla_force_host_platform_device_count={n_devices}"]),
               JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.fixture
def on_host_devices():
    """The `run_on_host_devices` helper, as a fixture."""
    return run_on_host_devices


def _run_cli(argv) -> tuple[int, str, str]:
    """`phasejax.cli.main(argv)` in this process: `(exit code, stdout, stderr)`. A `SystemExit("error: ...")`
    counts as Python's interpreter would treat it: the message on stderr and exit code 1."""
    from phasejax.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
            if isinstance(code, str):
                print(code, file=err)
                code = 1
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def run_cli():
    """The `phasejax` command run in-process (`_run_cli`)."""
    return _run_cli
