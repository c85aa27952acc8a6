"""Benchmark figures of compilation: the compiled program of one phase-diagram chunk in a fresh process
(`program`, against a baseline checkout), and a cold solve through the persistent compilation cache
(`cached_solve`)."""

from __future__ import annotations

import json
import os
import tempfile

from phasejax.benchmarks.record import figure_entry, fresh_process, git


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


def program(*, baseline: str | None = None, row: dict = PROGRAM_ROW) -> dict:
    """The compiled program of one phase-diagram chunk (`row`: one positional row, one track, the replicon
    included), measured in a fresh process with no compilation cache: lowering and compile seconds (wall and
    CPU), optimised HLO lines, fusions and `memory_analysis()` bytes (`temp_bytes`: the peak of the program's
    own buffers). `baseline`: a checkout of another version of phasejax (a folder holding its `phasejax`
    package), measured the same way in the same run; the record then holds it and the ratios."""
    env = dict(PHASEJAX_COMPILE_CACHE="0", JAX_ENABLE_COMPILATION_CACHE="false")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    now = fresh_process(_PROGRAM_CODE, json.dumps(row), env=env)
    extra = dict(row=row, program=now)
    if baseline is not None:
        then = fresh_process(_PROGRAM_CODE, json.dumps(row), source=baseline, env=env)
        extra.update(baseline=dict(source=os.path.abspath(baseline), commit=git(baseline, "rev-parse", "HEAD"),
                                   program=then),
                     ratios={k: then[k] / now[k] for k in ("lower_seconds", "compile_seconds", "compile_cpu_seconds",
                                                           "hlo_lines", "fusions", "temp_bytes") if now[k]})
    return figure_entry(
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
        first = fresh_process(_CACHED_SOLVE_CODE, cache)
        second = fresh_process(_CACHED_SOLVE_CODE, cache)
    statuses = {}
    for run in (first, second):
        statuses[run["status"]] = statuses.get(run["status"], 0) + 1
    return figure_entry(
        "cached_solve",
        "one cold solve_state_evolution (positional, alpha=1.5, omega=0.3, default scheme) in a fresh process "
        "with an empty persistent compilation cache (first_process: compiles and stores), then in another fresh "
        "process with that cache (seconds: the solve call, the program loaded from the cache)",
        seconds=second["seconds"], points=1, solves=2, compilation_included=True, statuses=statuses,
        first_process=first, second_process=second)
