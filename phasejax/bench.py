"""Benchmarks of phasejax: one function per figure, each timing one thing and returning a plain dict.

`phasejax bench` (`phasejax.commands.bench`) runs the figures below on the device JAX sees and writes one
JSON record; `phasejax bench-training` runs the training figure alone with every size as a flag.

* `program`: the compiled program of one phase-diagram chunk (one 40-alpha row, the replicon included), in
  a fresh process: lowering and XLA compile seconds, optimised HLO lines, fusions (XLA's kernels) and
  `memory_analysis()`; with a baseline checkout (`--baseline PATH`), the same for it in the same run, and the
  ratios.
* `cold_solve`: one `solve_state_evolution` per subspace at `alpha = 1.5, omega = 0.3`: the first call
  of the figure (compilation included), then a second call at another alpha (after compilation).
* `cached_solve`: the same cold solve in two fresh processes sharing a new persistent compilation cache: the
  first traces, compiles and stores the program (the lowered one in the cache's `phasejax-programs`, the
  compiled one in JAX's cache), the second loads both (`phasejax.xla`: no tracing).
* `warm_point`: one continuation row (`solve_along_alpha`, 8 alphas in [1.2, 1.9], `omega = 0.3`,
  positional) on its second call, per point.
* `batch`: a 32-point continuation grid (`solve_state_evolution_grid`, 16 alphas in [0.5, 2] x omega in
  {0, 0.3}, positional) per point, against the published method on one point timed in the same run.
* `main_job`: the default phase diagram (`phasejax phase-diagram`'s defaults) in a temporary run
  directory, compilation included.
* `paper_diagram`: the paper's 40 alpha x 20 omega x 2 subspace diagram, projected from a measured
  subset of omega rows (`project_rows`) or run in full.
* `training`: the vmapped training sweep against a Python loop, and L-BFGS, GD, Adam and GAMP to
  convergence (`training_benchmark`).

Every figure entry holds `name`, `what`, `seconds`, `seconds_per_point`, `points`, `solves`,
`compilation_included`, `statuses` (count per status name) and `converged`; figures with a first call
and a second one also give `first_call`, and `batch` gives `reference` and `ratio`. Compile times are
the durations JAX reports for tracing, lowering and compiling (`jax.monitoring` events) during a call.
Each figure starts with JAX's in-memory caches cleared (`jax.clear_caches`), so its compile-included
times do not depend on which figures ran before it (a persistent compilation cache, if configured,
still applies: the record says whether one was).

The theory computes in float64 inside its own scoped switch (`phasejax.precision`); timings are
wall-clock and are inflated when other processes share the machine.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from typing import Callable

import numpy as np

FIGURES = ("program", "cold_solve", "cached_solve", "warm_point", "batch", "main_job", "paper_diagram", "training",
           "counting")
COMPILE_EVENT_PREFIX = "/jax/core/compile/"
REFERENCE_RELPATH = os.path.join("shared", "reference_method", "se_scipy_loop.py")
QUICK_NODES = 4            # `--quick`: tensor Gauss-Hermite with this many nodes per dimension
PAPER_GRID = dict(alpha_min=0.1, alpha_max=2.5, n_alpha=40, omega_min=0.0, omega_max=0.95, n_omega=20, tracks=1)
PROJECT_ROWS = 2           # omega rows measured when the paper diagram is projected


# ----------------------------------------------------------------------------------------------------------
# Timing helpers and the environment record
# ----------------------------------------------------------------------------------------------------------

def timed(fn: Callable, *args):
    """`(out, seconds, compile_seconds)` of `fn(*args)`, blocked until ready.

    `compile_seconds` sums the tracing, lowering and compilation durations JAX reports during the call
    (`jax.monitoring` events under `/jax/core/compile/`); `None` where this JAX cannot report them.
    """
    import jax

    spent = [0.0]

    def listener(event, duration, **_):
        if event.startswith(COMPILE_EVENT_PREFIX):
            spent[0] += float(duration)

    can_listen = hasattr(jax.monitoring, "unregister_event_duration_listener")
    if can_listen:
        jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        seconds = time.perf_counter() - t0
    finally:
        if can_listen:
            jax.monitoring.unregister_event_duration_listener(listener)
    return out, seconds, (spent[0] if can_listen else None)


def status_counts(codes) -> dict[str, int]:
    """`{status name: count}` of an array of `phasejax.solvers.Status` codes (any shape)."""
    from phasejax.solvers import status_name

    values, counts = np.unique(np.asarray(codes).ravel(), return_counts=True)
    return {status_name(v): int(c) for v, c in zip(values, counts)}


def device_name(backend: str | None = None) -> str:
    """`cpu`, `gpu` or `tpu`: the file name of a record (`jax.default_backend()`, CUDA and ROCm as `gpu`)."""
    import jax

    backend = backend or jax.default_backend()
    return {"cuda": "gpu", "rocm": "gpu"}.get(backend, backend)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(root: str, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def repository_root() -> str:
    """The folder holding the `phasejax` package (the repository root of a source checkout)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def environment() -> dict:
    """Where and with what a record was measured: UTC date, device, versions, git commit, JAX settings."""
    import jax

    from phasejax import __version__
    from phasejax.commands.flags import command_line

    root = repository_root()
    commit = _git(root, "rev-parse", "HEAD") if os.path.exists(os.path.join(root, ".git")) else None
    dirty = _git(root, "status", "--porcelain", "--untracked-files=no") if commit else None
    devices = jax.devices()
    return dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        device=dict(name=device_name(), platform=jax.default_backend(), kind=str(devices[0].device_kind),
                    count=len(devices), cpu_count=os.cpu_count(),
                    load_average_at_start=list(os.getloadavg()) if hasattr(os, "getloadavg") else None),
        versions=dict(python=platform.python_version(), jax=jax.__version__, jaxlib=_version("jaxlib"),
                      numpy=np.__version__, scipy=_version("scipy"), flax=_version("flax"), optax=_version("optax"),
                      phasejax=__version__, git_commit=commit, git_dirty=None if dirty is None else bool(dirty)),
        jax_settings=dict(persistent_compilation_cache=jax.config.jax_compilation_cache_dir or None,
                          xla_flags=os.environ.get("XLA_FLAGS") or None),
        command=command_line(),
    )


def quadrature_for(quick: bool):
    """The rule of every state-evolution figure: `None` (the converged default scheme), or for `quick`
    the tensor Gauss-Hermite rule with `QUICK_NODES` per dimension (no error estimates)."""
    from phasejax.theory import gauss_hermite

    return gauss_hermite(4, QUICK_NODES) if quick else None


def _rule_name(quadrature) -> str:
    if quadrature is None:
        return "default scheme (SplitProductRule, with replicas for error bars)"
    return f"tensor Gauss-Hermite, {QUICK_NODES} nodes per dimension ({QUICK_NODES ** 4} nodes, no error bars)"


def _entry(name: str, what: str, *, seconds: float, points: int, compilation_included: bool, statuses: dict,
           solves: int | None = None, **extra) -> dict:
    """One figure's record (the keys every figure shares, then its own)."""
    return dict(name=name, what=what, seconds=float(seconds), seconds_per_point=float(seconds) / points,
                points=int(points), solves=int(points if solves is None else solves),
                compilation_included=bool(compilation_included), statuses=statuses,
                converged=int(statuses.get("converged", 0)), **extra)


# ----------------------------------------------------------------------------------------------------------
# The compiled program, and the persistent compilation cache
# ----------------------------------------------------------------------------------------------------------

PROGRAM_ROW = dict(n_alpha=40, alpha_min=0.2, alpha_max=2.6, omega=0.3)
"""The chunk the `program` figure compiles: one positional row of 40 alphas at `omega = 0.3`, one track."""

_PROGRAM_CODE = """
import json, os, resource, sys, time
import jax, numpy as np
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
from phasejax.precision import float64_scope
from phasejax.phase.diagram import PhaseConfig, PhaseGrid, make_row_fn
from phasejax.theory import make_params
from phasejax.theory.solver import resolve_scheme
row = json.loads(sys.argv[1])
with float64_scope():
    params = make_params(1.0, row["omega"])
    grid = PhaseGrid.from_ranges(np.linspace(row["alpha_min"], row["alpha_max"], row["n_alpha"]), [row["omega"]])
    one_track = PhaseConfig(seeds={b: s[:1] for b, s in PhaseConfig().seeds.items()})
    fn = make_row_fn(grid, params, resolve_scheme(None, params), one_track)
    chunk = dict(omega=np.full(1, row["omega"]), branch=np.zeros(1, np.int32))
    try:                      # the XLA options the phase diagram compiles with (a version without them: none)
        from phasejax.xla import compiler_options
        options = compiler_options()
    except ImportError:
        options = None
    t, c = time.perf_counter(), cpu()
    lowered = jax.jit(fn, compiler_options=options).lower(chunk)
    lower_s, lower_cpu = time.perf_counter() - t, cpu() - c
    t, c = time.perf_counter(), cpu()
    compiled = lowered.compile()
    compile_s, compile_cpu = time.perf_counter() - t, cpu() - c
    text = compiled.as_text()
    mem = compiled.memory_analysis()
print(json.dumps(dict(lower_seconds=lower_s, lower_cpu_seconds=lower_cpu, compile_seconds=compile_s,
                      compile_cpu_seconds=compile_cpu, hlo_lines=text.count(chr(10)), fusions=text.count(" fusion("),
                      temp_bytes=int(mem.temp_size_in_bytes), argument_bytes=int(mem.argument_size_in_bytes),
                      output_bytes=int(mem.output_size_in_bytes),
                      generated_code_bytes=int(mem.generated_code_size_in_bytes))))
"""


def _fresh_process(code: str, *args: str, source: str | None = None, env: dict | None = None,
                   timeout: float = 1800) -> dict:
    """Run `code` in a new Python process (the package imported from `source`, default this checkout) and
    return the JSON object its last output line holds."""
    environ = dict(os.environ, **(env or {}))
    environ["PYTHONPATH"] = (source or repository_root()) + os.pathsep + environ.get("PYTHONPATH", "")
    flags = []
    if source is not None:
        # an editable install of this checkout maps `phasejax` here whatever the path (a finder its .pth file
        # installs): without the site hooks (-S), with the installed packages' folders on the path instead
        import site

        flags = ["-S"]
        environ["PYTHONPATH"] += os.pathsep + os.pathsep.join(site.getsitepackages())
    # in the checkout's folder: `python -c` puts the working directory first on the path
    out = subprocess.run([sys.executable, *flags, "-c", code, *args], capture_output=True, text=True,
                         timeout=timeout, env=environ, cwd=source or repository_root())
    if out.returncode != 0:
        raise RuntimeError(f"a measurement process failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def program(*, baseline: str | None = None, row: dict = PROGRAM_ROW) -> dict:
    """The compiled program of one phase-diagram chunk (`row`: one positional row, one track, the replicon
    included), measured in a fresh process with no compilation cache: lowering and compile seconds (wall and
    CPU), optimised HLO lines, fusions and `memory_analysis()` bytes (`temp_bytes`: the peak of the program's
    own buffers). `baseline`: a checkout of another version of phasejax (a folder holding its `phasejax`
    package), measured the same way in the same run; the record then holds it and the ratios."""
    env = dict(PHASEJAX_COMPILE_CACHE="0", JAX_ENABLE_COMPILATION_CACHE="false")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    now = _fresh_process(_PROGRAM_CODE, json.dumps(row), env=env)
    extra = dict(row=row, program=now)
    if baseline is not None:
        then = _fresh_process(_PROGRAM_CODE, json.dumps(row), source=baseline, env=env)
        extra.update(baseline=dict(source=os.path.abspath(baseline), commit=_git(baseline, "rev-parse", "HEAD"),
                                   program=then),
                     ratios={k: then[k] / now[k] for k in ("lower_seconds", "compile_seconds", "compile_cpu_seconds",
                                                           "hlo_lines", "fusions", "temp_bytes") if now[k]})
    return _entry(
        "program",
        f"the compiled program of one phase-diagram chunk ({row['n_alpha']} alphas in [{row['alpha_min']:g}, "
        f"{row['alpha_max']:g}] at omega={row['omega']:g}, positional, one track, default rule, replicon "
        f"columns) in a fresh process without a compilation cache: seconds are lowering plus XLA compile"
        + ("; the baseline checkout measured the same way in the same run" if baseline else ""),
        seconds=now["lower_seconds"] + now["compile_seconds"], points=row["n_alpha"], compilation_included=True,
        statuses={}, **extra)


_CACHED_SOLVE_CODE = """
import json, sys, time
import jax
from phasejax.theory import make_params, solve_state_evolution
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
t = time.perf_counter()
res = solve_state_evolution(make_params(1.5, 0.3), "positional")
jax.block_until_ready(res)
print(json.dumps(dict(seconds=time.perf_counter() - t, status=res.status_name, iterations=int(res.iterations))))
"""


def cached_solve() -> dict:
    """One cold `solve_state_evolution` (positional, `alpha = 1.5, omega = 0.3`, default rule) in two fresh
    processes sharing a new, empty persistent compilation cache: the first traces, compiles and stores the
    program, the second loads it (its seconds are loading the lowered and the compiled program, and the
    solve)."""
    with tempfile.TemporaryDirectory(prefix="phasejax-cache-") as cache:
        first = _fresh_process(_CACHED_SOLVE_CODE, cache)
        second = _fresh_process(_CACHED_SOLVE_CODE, cache)
    statuses = {}
    for run in (first, second):
        statuses[run["status"]] = statuses.get(run["status"], 0) + 1
    return _entry(
        "cached_solve",
        "one cold solve_state_evolution (positional, alpha=1.5, omega=0.3, default scheme) in a fresh process "
        "with an empty persistent compilation cache (first_process: compiles and stores), then in another fresh "
        "process with that cache (seconds: the solve call, the program loaded from the cache)",
        seconds=second["seconds"], points=1, solves=2, compilation_included=True, statuses=statuses,
        first_process=first, second_process=second)


# ----------------------------------------------------------------------------------------------------------
# State evolution: cold solve, warm point, batch against the published method
# ----------------------------------------------------------------------------------------------------------

def cold_solve(*, quadrature=None, alpha: float = 1.5, second_alpha: float = 1.6, omega: float = 0.3,
               branches=("positional", "semantic")) -> dict:
    """One cold `solve_state_evolution` per subspace, twice: at `alpha` (the figure's first calls,
    compilation included) and at `second_alpha` (after compilation). `seconds` is the first calls' total."""
    from phasejax.theory import make_params, solve_state_evolution

    calls = []
    for branch in branches:
        for call, a in ((1, alpha), (2, second_alpha)):
            res, dt, dc = timed(lambda a=a, b=branch: solve_state_evolution(make_params(a, omega), b, quadrature))
            calls.append(dict(branch=branch, alpha=a, omega=omega, call=call, seconds=dt, compile_seconds=dc,
                              iterations=int(res.iterations), status=res.status_name))
    first = [c for c in calls if c["call"] == 1]
    second = [c for c in calls if c["call"] == 2]
    codes = [c["status"] for c in calls]
    statuses = {s: codes.count(s) for s in sorted(set(codes))}
    return _entry(
        "cold_solve",
        f"one cold solve_state_evolution per subspace ({', '.join(branches)}) at alpha={alpha}, omega={omega}, "
        f"{_rule_name(quadrature)}: the first call of each subspace in the process (compilation included; the "
        f"subspaces share most of the compiled program, see compile_seconds), then a second call at "
        f"alpha={second_alpha} (after compilation)",
        seconds=sum(c["seconds"] for c in first), points=len(first), solves=len(calls), compilation_included=True,
        statuses=statuses, calls=calls,
        after_compilation=dict(seconds=sum(c["seconds"] for c in second),
                               seconds_per_point=sum(c["seconds"] for c in second) / len(second)),
        quadrature=_rule_name(quadrature))


def warm_point(*, quadrature=None, alphas=tuple(np.linspace(1.2, 1.9, 8)), omega: float = 0.3,
               branch: str = "positional") -> dict:
    """One continuation row (`solve_along_alpha`) called twice with the same shapes; `seconds` is the second
    call (after compilation), per point its share; with the mean Newton iterations per point."""
    from phasejax.theory import make_params, solve_along_alpha

    alphas = np.asarray(alphas, dtype=np.float64)
    params = make_params(1.0, omega)
    _, t_first, c_first = timed(lambda: solve_along_alpha(params, alphas, branch, quadrature))
    res, seconds, c_second = timed(lambda: solve_along_alpha(params, alphas, branch, quadrature))
    its = np.asarray(res.iterations)
    return _entry(
        "warm_point",
        f"one point of a continuation row after compilation: solve_along_alpha over {len(alphas)} alphas in "
        f"[{alphas[0]:g}, {alphas[-1]:g}] at omega={omega} ({branch}), {_rule_name(quadrature)}, timed on its "
        f"second call and divided by the number of points (the row's first point is a cold solve)",
        seconds=seconds, points=len(alphas), compilation_included=False, statuses=status_counts(res.status),
        mean_iterations=float(its.mean()), mean_iterations_warm=float(its[1:].mean()) if len(its) > 1 else None,
        iterations=its.tolist(), compile_seconds=c_second,
        first_call=dict(seconds=t_first, seconds_per_point=t_first / len(alphas), compile_seconds=c_first,
                        compilation_included=True),
        alphas=alphas.tolist(), omega=omega, branch=branch, quadrature=_rule_name(quadrature))


def find_reference() -> str | None:
    """The published method's script (`shared/reference_method/se_scipy_loop.py`) inside or beside the
    repository, or beside the working directory; `None` if there is none."""
    for base in (repository_root(), os.path.dirname(repository_root()), os.getcwd(), os.path.dirname(os.getcwd())):
        path = os.path.join(base, REFERENCE_RELPATH)
        if os.path.isfile(path):
            return os.path.abspath(path)
    return None


def reference_solve(path: str, *, alpha: float = 2.0, omega: float = 0.3, branch: str = "positional",
                    nodes: int = 4) -> dict:
    """The published method (scipy BFGS per quadrature node in Python loops) on one point, in a fresh
    interpreter: its own solve time (`seconds`) and the wall time with interpreter start-up (`wall_seconds`)."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, path, "--branch", branch, "--alpha", str(alpha), "--omega", str(omega),
                          "--nodes", str(nodes)], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    line = [ln for ln in out.stdout.splitlines() if ln.strip().startswith("{")][-1]
    rec = json.loads(line)
    return dict(path=os.path.abspath(path), nodes_per_dimension=nodes, alpha=alpha, omega=omega, branch=branch,
                seconds=float(rec["seconds"]), wall_seconds=wall, iterations=int(rec["iterations"]),
                converged=bool(rec["converged"]), prox_solves=int(rec["prox_solves"]))


def batch(*, quadrature=None, alphas=tuple(np.linspace(0.5, 2.0, 16)), omegas=(0.0, 0.3),
          branch: str = "positional", reference: str | None = None, reference_nodes: int = 4) -> dict:
    """A continuation grid (`solve_state_evolution_grid`, one row per omega) called twice; `seconds` is the
    second call (after compilation). With `reference` (the published method's script), that method on one
    point in the same run and `ratio` = its seconds / ours per point."""
    from phasejax.theory import make_params, solve_state_evolution_grid

    alphas = np.asarray(alphas, dtype=np.float64)
    omegas = np.asarray(omegas, dtype=np.float64)
    params = make_params(1.0, 0.0)
    n = len(alphas) * len(omegas)
    _, t_first, c_first = timed(lambda: solve_state_evolution_grid(params, alphas, omegas, branch, quadrature))
    res, seconds, c_second = timed(lambda: solve_state_evolution_grid(params, alphas, omegas, branch, quadrature))
    entry = _entry(
        "batch",
        f"a {n}-point continuation batch: solve_state_evolution_grid over {len(alphas)} alphas in "
        f"[{alphas[0]:g}, {alphas[-1]:g}] x omega in {omegas.tolist()} ({branch}), {_rule_name(quadrature)}, "
        f"timed on its second call (after compilation), per point; first_call includes compilation",
        seconds=seconds, points=n, compilation_included=False, statuses=status_counts(res.status),
        iterations=np.asarray(res.iterations).tolist(), compile_seconds=c_second,
        first_call=dict(seconds=t_first, seconds_per_point=t_first / n, compile_seconds=c_first,
                        compilation_included=True),
        quadrature=_rule_name(quadrature), reference=None, ratio=None)
    if reference is None:
        entry["reference"] = dict(missing=f"no published method found ({REFERENCE_RELPATH})")
        return entry
    ref = reference_solve(reference, nodes=reference_nodes, branch=branch)
    ref["method"] = (f"the published method (se_scipy_loop.py: scipy BFGS per quadrature node in Python loops, "
                     f"damped fixed-point iteration), {reference_nodes} Gauss-Hermite nodes per dimension "
                     f"({reference_nodes ** 4} nodes), one point, in a fresh interpreter")
    entry["reference"] = ref
    entry["ratio"] = ref["seconds"] / entry["seconds_per_point"]
    entry["ratio_first_call"] = ref["wall_seconds"] / (t_first / n)
    entry["ratio_meaning"] = ("ratio: the published method's seconds for its one point over phasejax's seconds per "
                              "point after compilation (above 1: phasejax is faster); ratio_first_call: its wall "
                              "time with interpreter start-up over phasejax's first call per point, compilation "
                              "included")
    return entry


# ----------------------------------------------------------------------------------------------------------
# Phase diagrams
# ----------------------------------------------------------------------------------------------------------

def main_job_settings() -> dict:
    """The `phasejax phase-diagram` defaults (read from the command's own flags, so the two cannot drift)."""
    import argparse

    from phasejax.commands import phase_diagram as command

    ap = argparse.ArgumentParser()
    command.add_arguments(ap)
    a = ap.parse_args([])
    return dict(alphas=np.linspace(a.alpha_min, a.alpha_max, a.n_alpha).tolist(),
                omegas=np.linspace(a.omega_min, a.omega_max, a.n_omega).tolist(), tracks=a.tracks,
                chunk_size=a.chunk_size, sigma=a.sigma, lam=a.lam, A=list(a.A))


def time_phase_diagram(alphas, omegas, *, tracks: int = 1, chunk_size: int | None = None, sigma: float = 0.5,
                       lam: float = 0.01, A=(0.6, 0.4, 0.4, 0.6), quadrature=None, progress: bool = False) -> dict:
    """`phase_diagram` on `alphas x omegas` (both subspaces, `tracks` census seeds each) in a temporary run
    directory, compilation included: seconds, compile seconds, solves and their statuses. `chunk_size` rows
    per compiled call (None: the command's `auto_chunk_rows`)."""
    from phasejax.commands.phase_diagram import auto_chunk_rows
    from phasejax.phase import PHASE_BRANCHES, PhaseConfig, PhaseGrid, phase_diagram
    from phasejax.sweep import RunOptions
    from phasejax.theory import make_params
    from phasejax.theory.census import CENSUS_SEEDS

    grid = PhaseGrid.from_ranges(np.asarray(alphas, np.float64), np.asarray(omegas, np.float64))
    config = PhaseConfig(seeds={b: CENSUS_SEEDS[b][:tracks] for b in PHASE_BRANCHES})
    params = make_params(1.0, 0.0, sigma=sigma, lam=lam, A=np.reshape(A, (2, 2)))
    if chunk_size is None:
        chunk_size = auto_chunk_rows(len(grid.alphas), 2 * len(grid.omegas), tracks)
    with tempfile.TemporaryDirectory(prefix="phasejax-bench-") as run_dir:
        options = RunOptions(run_dir=run_dir, chunk_size=chunk_size, progress=progress)
        pd, seconds, compile_s = timed(
            lambda: phase_diagram(grid, params, quadrature=quadrature, config=config, options=options))
    status = np.asarray(pd.points["status"])
    return dict(seconds=seconds, compile_seconds=compile_s, solves=int(status.size), statuses=status_counts(status),
                grid=dict(n_alpha=len(grid.alphas), alpha_min=float(grid.alphas[0]), alpha_max=float(grid.alphas[-1]),
                          omegas=[float(w) for w in grid.omegas], subspaces=list(PHASE_BRANCHES), tracks=tracks),
                chunk_size=chunk_size)


def main_job(*, quadrature=None, n_alpha: int | None = None, n_omega: int | None = None,
             progress: bool = False) -> dict:
    """The default phase diagram (`main_job_settings`), compilation included; `n_alpha`, `n_omega` shrink it
    (same ranges)."""
    s = main_job_settings()
    alphas, omegas = s.pop("alphas"), s.pop("omegas")
    if n_alpha is not None:
        alphas = np.linspace(alphas[0], alphas[-1], n_alpha).tolist()
    if n_omega is not None:
        omegas = np.linspace(omegas[0], omegas[-1], n_omega).tolist()
    run = time_phase_diagram(alphas, omegas, quadrature=quadrature, progress=progress, **s)
    shape = f"{len(alphas)} alpha x {len(omegas)} omega x 2 subspaces x {s['tracks']} track(s)"
    return _entry(
        "main_job",
        f"the main job, phase_diagram at the `phasejax phase-diagram` defaults "
        f"({'shrunk to ' if n_alpha or n_omega else ''}{shape}, chunk size {run['chunk_size']}), "
        f"{_rule_name(quadrature)}, in a temporary run directory; total time, compilation included",
        seconds=run["seconds"], points=run["solves"], compilation_included=True, statuses=run["statuses"],
        compile_seconds=run["compile_seconds"], grid=run["grid"], chunk_size=run["chunk_size"],
        quadrature=_rule_name(quadrature))


def measured_rows(n_omega: int, rows: int) -> np.ndarray:
    """Indices of `rows` omega rows spread over `n_omega` (the middle of each of `rows` equal blocks)."""
    rows = max(1, min(rows, n_omega))
    return np.unique(((np.arange(rows) + 0.5) * n_omega / rows).astype(int))


def paper_diagram(*, quadrature=None, n_alpha: int = PAPER_GRID["n_alpha"], n_omega: int = PAPER_GRID["n_omega"],
                  project_rows: int | None = None, chunk_size: int | None = None, progress: bool = False) -> dict:
    """The paper's diagram (`PAPER_GRID`: 40 alpha in [0.1, 2.5] x 20 omega in [0, 0.95] x 2 subspaces, one
    track), compilation included. With `project_rows`, only that many omega rows (`measured_rows`) are run
    and the full time is projected: compile seconds + the rest x (all rows / measured rows)."""
    g = PAPER_GRID
    alphas = np.linspace(g["alpha_min"], g["alpha_max"], n_alpha)
    all_omegas = np.linspace(g["omega_min"], g["omega_max"], n_omega)
    idx = measured_rows(n_omega, project_rows) if project_rows else np.arange(n_omega)
    run = time_phase_diagram(alphas, all_omegas[idx], tracks=g["tracks"], chunk_size=chunk_size,
                             quadrature=quadrature, progress=progress)
    full_solves = n_alpha * n_omega * 2 * g["tracks"]
    shape = f"{n_alpha} alpha x {n_omega} omega x 2 subspaces x {g['tracks']} track"
    extra = {}
    seconds = run["seconds"]
    if project_rows:
        compile_s = run["compile_seconds"]
        if compile_s is not None:       # nested tracing may be reported twice: never more than the whole run
            compile_s = min(compile_s, run["seconds"])
        scale = n_omega / len(idx)
        if compile_s is None:
            seconds = run["seconds"] * scale
            how = "measured seconds x (all omega rows / measured rows), compilation scaled too"
        else:
            seconds = compile_s + (run["seconds"] - compile_s) * scale
            how = "compile seconds + (measured seconds - compile seconds) x (all omega rows / measured rows)"
        extra = dict(projected=True, projection=dict(
            how=how, measured_omegas=run["grid"]["omegas"], measured_rows=len(idx), all_rows=n_omega,
            measured_seconds=run["seconds"], measured_compile_seconds=compile_s, measured_solves=run["solves"],
            statuses_of="the measured solves"))
    else:
        extra = dict(projected=False)
    return _entry(
        "paper_diagram",
        f"the paper's phase diagram ({shape}, chunk size {run['chunk_size']}), {_rule_name(quadrature)}, in a temporary "
        f"run directory, compilation included"
        + (f"; projected from {len(idx)} of the {n_omega} omega rows (both subspaces, every alpha)"
           if project_rows else ""),
        seconds=seconds, points=full_solves, compilation_included=True, statuses=run["statuses"],
        compile_seconds=run["compile_seconds"], grid=dict(run["grid"], omegas=all_omegas.tolist()),
        chunk_size=run["chunk_size"], quadrature=_rule_name(quadrature), **extra)


# ----------------------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------------------

TRAINING_PRESETS = {
    "cpu": dict(d=200, steps=50, chunk_size=500),
    "gpu": dict(d=1000, steps=100, chunk_size=500),
}
TRAINING_DEFAULTS = dict(seeds=5, n_alpha=20, n_omega=5, loop_runs=10, solver_seeds=3, gtol=1e-7)
TRAINING_QUICK = dict(d=20, steps=3, chunk_size=8, seeds=1, n_alpha=2, n_omega=2, loop_runs=2, solver_seeds=1,
                      gtol=1e-6)


def _time_compiled(fn, *args):
    import jax

    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t0


def training_benchmark(*, d: int, steps: int, chunk_size: int, seeds: int = 5, n_alpha: int = 20, n_omega: int = 5,
                       loop_runs: int = 10, solver_seeds: int = 3, gtol: float = 1e-7, sweep: bool = True,
                       solvers: bool = True, gamp: bool = True, dtype="float64",
                       log: Callable[[str], None] = print) -> dict:
    """The training benchmark: `{"sweep": ..., "solvers": ...}` (the parts asked for).

    1. Sweep throughput: the whole (seed, alpha, omega) grid of tied students, `steps` full-batch GD steps
       each (fixed, so every run does the same work), in one compiled vmapped call per chunk, in runs x steps
       per second; against the same runs in a Python loop, one jitted run at a time (`loop_runs` of them are
       timed and the rate extrapolated). Compilation is timed separately and excluded from both rates; a
       1-step run isolates the cost of the steps.
    2. Solvers to convergence on the same data and init (semantic init, `alpha = 1.5`, `omega = 0.3`,
       `solver_seeds` data sets): L-BFGS, GD and Adam stopped at RMS gradient `gtol`, and GAMP (theory notes,
       section 7) stopped on its relative change of `Q`; steps, seconds and the risk reached.
    Runs in `dtype` (float64 inside a scoped switch); `log` gets one line per result.
    """
    from phasejax.precision import dtype_scope

    if steps < 2:
        raise ValueError(f"steps must be >= 2 (the 1-step run is subtracted), got {steps}")
    with dtype_scope(dtype):
        return _training(d=d, steps=steps, chunk_size=chunk_size, seeds=seeds, n_alpha=n_alpha, n_omega=n_omega,
                         loop_runs=loop_runs, solver_seeds=solver_seeds, gtol=gtol, sweep=sweep, solvers=solvers,
                         gamp=gamp, dtype=dtype, log=log)


def _training(*, d, steps, chunk_size, seeds, n_alpha, n_omega, loop_runs, solver_seeds, gtol, sweep, solvers,
              gamp, dtype, log) -> dict:
    import jax
    import jax.numpy as jnp

    from phasejax.empirics import TrainConfig, TrainingGrid, cast_params, generate_data, semantic_init
    from phasejax.empirics.sweep import make_run_fn, make_training_fn
    from phasejax.empirics.training import minimize
    from phasejax.theory import make_params
    from phasejax.theory.gram import gram_inputs, gram_risk

    dtype = jnp.dtype(dtype)
    params = make_params(1.0, 0.3)
    record = {}

    # ---------------------------------------------------------------- 1. sweep vs loop
    if sweep:
        grid = TrainingGrid(alphas=np.round(np.linspace(0.1, 2.0, n_alpha), 10),
                            omegas=np.round(np.linspace(0.0, 0.5, n_omega), 10),
                            seeds=tuple(range(seeds)), inits=("semantic",), d=d)
        tasks = grid.tasks()
        n_runs = len(tasks["alpha"])
        chunk = min(chunk_size, n_runs)
        k = min(loop_runs, n_runs)
        idx = np.linspace(0, n_runs - 1, k).astype(int)
        timing = {}
        for n_steps in (1, steps):   # the difference isolates the cost of the steps from data and metrics
            config = TrainConfig("gd", max_steps=n_steps, gtol=1e-300)   # fixed work per run
            batch_fn = jax.jit(make_training_fn(grid, params, config=config, dtype=dtype))
            t0 = time.perf_counter()
            compiled = batch_fn.lower({k_: v[:chunk] for k_, v in tasks.items()}).compile()
            t_compile = time.perf_counter() - t0
            t_run = 0.0
            for start in range(0, n_runs, chunk):
                part = {k_: np.resize(v[start:start + chunk], chunk) for k_, v in tasks.items()}  # last chunk padded
                out, dt = _time_compiled(compiled, part)
                t_run += dt
            assert int(np.min(out["steps"])) == n_steps
            one = jax.jit(make_run_fn(grid, params, config=config, dtype=dtype))
            one_c = one.lower(tasks["seed"][0], tasks["alpha"][0], tasks["omega"][0], tasks["init"][0]).compile()
            t0 = time.perf_counter()
            for i in idx:
                jax.block_until_ready(one_c(tasks["seed"][i], tasks["alpha"][i], tasks["omega"][i], tasks["init"][i]))
            timing[n_steps] = dict(compile_s=t_compile, run_s=t_run, loop_s_per_run=(time.perf_counter() - t0) / k)
        S, t1, tS = steps, timing[1], timing[steps]
        sweep_rate = n_runs * S / tS["run_s"]
        loop_rate = S / tS["loop_s_per_run"]
        sweep_step_rate = n_runs * (S - 1) / max(tS["run_s"] - t1["run_s"], 1e-9)
        loop_step_rate = (S - 1) / max(tS["loop_s_per_run"] - t1["loop_s_per_run"], 1e-9)
        record["sweep"] = dict(
            runs=n_runs, steps_per_run=S, d=d, n_max=grid.n_max, chunk_size=chunk,
            n_calls=int(np.ceil(n_runs / chunk)), compile_s=tS["compile_s"], run_s=tS["run_s"],
            runs_x_steps_per_s=sweep_rate, loop_runs_timed=k, loop_s_per_run=tS["loop_s_per_run"],
            loop_runs_x_steps_per_s=loop_rate, speedup=sweep_rate / loop_rate,
            fixed_cost_s_per_run=dict(sweep=t1["run_s"] / n_runs, loop=t1["loop_s_per_run"]),
            steps_only_runs_x_steps_per_s=dict(sweep=sweep_step_rate, loop=loop_step_rate),
            steps_only_speedup=sweep_step_rate / loop_step_rate,
        )
        log(f"sweep: {n_runs} runs x {S} GD steps at d={d} in {int(np.ceil(n_runs / chunk))} call(s): "
            f"{tS['run_s']:.1f} s (+{tS['compile_s']:.1f} s compile) = {sweep_rate:.0f} runs x steps / s")
        log(f"loop:  {tS['loop_s_per_run']:.3f} s per run = {loop_rate:.0f} runs x steps / s;  "
            f"ratio {sweep_rate / loop_rate:.2f}x")
        log(f"per run, data + metrics (1 step): sweep {t1['run_s'] / n_runs * 1e3:.1f} ms, loop "
            f"{t1['loop_s_per_run'] * 1e3:.1f} ms; steps only: sweep {sweep_step_rate:.0f}, loop "
            f"{loop_step_rate:.0f} runs x steps / s (ratio {sweep_step_rate / loop_step_rate:.2f}x)")

    # ---------------------------------------------------------------- 2. solvers to convergence
    if solvers:
        from phasejax.empirics.gamp import empirical_risk, gamp as run_gamp_solver

        p15 = make_params(1.5, 0.3)
        n = int(round(1.5 * d))
        names = ("lbfgs", "gd", "adam") + (("gamp",) if gamp else ())
        rows = {name: [] for name in names}
        p15_d = cast_params(p15, dtype)
        for seed in range(solver_seeds):
            data = generate_data(jax.random.PRNGKey(1000 + seed), p15, d, n, dtype=dtype)
            inputs = gram_inputs(data.x, data.y, data.p)
            Q0 = semantic_init(data.Qstar, 1)
            for name in ("lbfgs", "gd", "adam"):
                cfg = TrainConfig(name, max_steps=50000, gtol=gtol)
                solve = jax.jit(lambda Q, inputs=inputs, cfg=cfg:
                                minimize(lambda q: gram_risk(q, inputs, p15_d), Q, cfg))
                solve.lower(Q0).compile()
                res, dt = _time_compiled(solve, Q0)
                rows[name].append(dict(steps=int(res.steps), seconds=dt, risk_per_d=float(res.loss) / d,
                                       grad_rms=float(res.grad_norm), converged=bool(res.converged), Q=res.params))
            if not gamp:
                continue
            run_gamp = lambda Q, data=data: run_gamp_solver(data, p15_d, Q, jnp.array([[50.0]], dtype),  # noqa: E731
                                                             max_iter=500, damping=0.5, tol=1e-8)
            run_gamp(Q0)   # compile
            res, dt = _time_compiled(run_gamp, Q0)
            rows["gamp"].append(dict(steps=int(res.iterations), seconds=dt,
                                     risk_per_d=float(empirical_risk(res.Q, data, p15_d)) / d,
                                     grad_rms=float(jnp.linalg.norm(jax.grad(empirical_risk)(res.Q, data, p15_d))
                                                    / np.sqrt(d)),
                                     converged=bool(res.converged), Q=res.Q))
        ref = rows["lbfgs"]
        summary = {}
        for name, rs in rows.items():
            dist = [float(jnp.linalg.norm(r["Q"] - q["Q"]) / jnp.linalg.norm(q["Q"])) for r, q in zip(rs, ref)]
            summary[name] = dict(
                median_steps=float(np.median([r["steps"] for r in rs])),
                median_seconds=float(np.median([r["seconds"] for r in rs])),
                all_converged=all(r["converged"] for r in rs),
                n_converged=sum(r["converged"] for r in rs), n_runs=len(rs),
                max_risk_gap_per_d=float(max(abs(r["risk_per_d"] - q["risk_per_d"]) for r, q in zip(rs, ref))),
                max_rel_distance_to_lbfgs=max(dist),
                max_grad_rms=max(r["grad_rms"] for r in rs),
            )
            s = summary[name]
            log(f"{name:6s} steps {s['median_steps']:7.0f}  {s['median_seconds']:7.3f} s  "
                f"converged {s['all_converged']}  |risk - lbfgs|/d {s['max_risk_gap_per_d']:.1e}  "
                f"|Q - Q_lbfgs|/|Q| {s['max_rel_distance_to_lbfgs']:.1e}")
        record["solvers"] = dict(alpha=1.5, omega=0.3, d=d, n=n, init="semantic", gtol_rms=gtol,
                                 gamp=dict(damping=0.5, tol=1e-8, C0=50.0), results=summary)
    return record


def training(*, quick: bool = False, preset: str | None = None, log: Callable[[str], None] = print) -> dict:
    """The training figure: `training_benchmark` at `preset` (default: `gpu` on an accelerator, else `cpu`) or
    at the `TRAINING_QUICK` sizes; `seconds` is the vmapped sweep's run time (compilation excluded)."""
    import jax

    preset = preset or ("cpu" if jax.default_backend() == "cpu" else "gpu")
    sizes = dict(TRAINING_QUICK) if quick else dict(TRAINING_DEFAULTS, **TRAINING_PRESETS[preset])
    record = training_benchmark(**sizes, log=log)
    sw, solv = record["sweep"], record["solvers"]["results"]
    statuses = {"converged": sum(s["n_converged"] for s in solv.values()),
                "not_converged": sum(s["n_runs"] - s["n_converged"] for s in solv.values())}
    statuses = {k: v for k, v in statuses.items() if v}
    return _entry(
        "training",
        f"the vmapped training sweep ({sw['runs']} tied students x {sw['steps_per_run']} full-batch GD steps at "
        f"d={sw['d']}, float64) in {sw['n_calls']} compiled call(s), compilation excluded, against a Python loop "
        f"of jitted runs (loop_speedup); then L-BFGS, GD, Adam and GAMP to convergence (statuses count those "
        f"solver runs)",
        seconds=sw["run_s"], points=sw["runs"], solves=sum(s["n_runs"] for s in solv.values()),
        compilation_included=False, statuses=statuses, loop_speedup=sw["speedup"],
        preset="quick" if quick else preset, sizes=sizes, details=record)


# ----------------------------------------------------------------------------------------------------------
# All figures
# ----------------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class BenchPlan:
    """What `run_figure` runs: `quick` shrinks every figure; `project` projects the paper diagram from
    `PROJECT_ROWS` omega rows; `reference` is the published method's script (`None`: not timed); `baseline` a
    checkout of another version whose compiled program `program` measures too (`None`: none)."""

    quick: bool = False
    project: bool = True
    reference: str | None = None
    progress: bool = False
    baseline: str | None = None


def run_figure(name: str, plan: BenchPlan, log: Callable[[str], None] = lambda line: None) -> dict:
    """Time the figure `name` (one of `FIGURES`) under `plan`; JAX's in-memory caches are cleared first."""
    import jax

    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; known: {', '.join(FIGURES)}")
    jax.clear_caches()
    q = quadrature_for(plan.quick)
    if name == "program":
        return program(baseline=plan.baseline,
                       row=dict(PROGRAM_ROW, n_alpha=4) if plan.quick else PROGRAM_ROW)
    if name == "cached_solve":
        return cached_solve()
    if name == "cold_solve":
        return cold_solve(quadrature=q)
    if name == "warm_point":
        return warm_point(quadrature=q, alphas=np.linspace(1.2, 1.9, 4 if plan.quick else 8))
    if name == "batch":
        return batch(quadrature=q, alphas=np.linspace(0.5, 2.0, 4 if plan.quick else 16), reference=plan.reference,
                     reference_nodes=2 if plan.quick else 4)
    if name == "main_job":
        return main_job(quadrature=q, n_alpha=4 if plan.quick else None, n_omega=2 if plan.quick else None,
                        progress=plan.progress)
    if name == "paper_diagram":
        return paper_diagram(quadrature=q, n_alpha=4 if plan.quick else PAPER_GRID["n_alpha"],
                             project_rows=PROJECT_ROWS if plan.project else None, progress=plan.progress)
    if name == "counting":
        from phasejax.tasks.histogram.bench import counting_entry

        return counting_entry(quick=plan.quick, baseline=plan.baseline, log=log)
    return training(quick=plan.quick, log=log)


def benchmark_report(parts=FIGURES, plan: BenchPlan = BenchPlan(),
                     progress: Callable[[str], None] = lambda line: None,
                     on_figure: Callable[[dict], None] = lambda report: None) -> dict:
    """The whole record: `environment()`, the plan, and one entry per figure of `parts` (in the order given,
    each once). `progress` gets a line as each figure starts and ends; `on_figure` gets the record so far
    after each figure (`complete` is false until the last one is in), so a caller can keep what is done."""
    unknown = sorted(set(parts) - set(FIGURES))
    if unknown:
        raise ValueError(f"parts: unknown figure(s) {unknown}; known: {list(FIGURES)}")
    parts = list(dict.fromkeys(parts))
    report = dict(environment(), quick=plan.quick, parts=parts,
                  reference_method=plan.reference, complete=False, figures=[])
    for i, name in enumerate(parts):
        progress(f"bench: {name} ...")
        t0 = time.perf_counter()
        entry = run_figure(name, plan, log=progress)
        report["figures"].append(entry)
        report["complete"] = i == len(parts) - 1
        progress(f"bench: {name} done in {time.perf_counter() - t0:.1f} s ({summary_line(entry)})")
        on_figure(report)
    return report


def summary_line(entry: dict) -> str:
    """One line: seconds, per point, converged solves, the ratio to the published method, projection."""
    line = (f"{entry['seconds']:.2f} s, {entry['seconds_per_point']:.3g} s per point over {entry['points']}, "
            f"{entry['converged']}/{sum(entry['statuses'].values())} converged")
    if entry.get("ratio") is not None:
        line += f", published method / phasejax per point: {entry['ratio']:.3g}x"
    if entry.get("projected"):
        line += ", projected"
    if entry.get("compilation_included"):
        line += ", compilation included"
    return line
