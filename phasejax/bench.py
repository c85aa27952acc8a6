"""Benchmarks of phasejax: one function per figure, each timing one thing and returning a plain dict.

This module registers the figures (`FIGURES`, `run_figure`) and writes the record (`benchmark_report`); the
figures live in `phasejax.benchmarks` by job (`programs`, `solves`, `diagrams`, `training`; what they share in
`record`). A new figure is one entry of `FIGURES` and one line of `run_figure`.

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
import time
from typing import Callable

import numpy as np

from phasejax.benchmarks.derivatives import gradient, vmapped_batch
from phasejax.benchmarks.diagrams import PAPER_GRID, lines, main_job, paper_diagram
from phasejax.benchmarks.programs import PROGRAM_ROW, cached_solve, program
from phasejax.benchmarks.record import device_name, environment, quadrature_for, versions
from phasejax.benchmarks.solves import batch, cold_solve, find_reference, warm_point
from phasejax.benchmarks.training import training

FIGURES = ("program", "cold_solve", "cached_solve", "warm_point", "batch", "gradient", "vmapped_batch", "lines",
           "main_job", "paper_diagram", "training", "counting")
PROJECT_ROWS = 2           # omega rows measured when the paper diagram is projected

__all__ = ["FIGURES", "PROJECT_ROWS", "BenchPlan", "run_figure", "benchmark_report", "summary_line", "device_name",
           "environment", "versions", "find_reference"]


@dataclasses.dataclass(frozen=True)
class BenchPlan:
    """What `run_figure` runs: `quick` shrinks every figure; `project` projects the paper diagram from
    `PROJECT_ROWS` omega rows; `reference` is the published method's script (`None`: not timed); `baseline` a
    checkout of another version whose compiled program `program` measures too (`None`: none); `host_devices` the
    CPU devices the commands `lines` and `main_job` run (`None`: their default)."""

    quick: bool = False
    project: bool = True
    reference: str | None = None
    progress: bool = False
    baseline: str | None = None
    host_devices: int | None = None


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
    if name == "gradient":
        return gradient(quadrature=q)
    if name == "vmapped_batch":
        return vmapped_batch(quadrature=q)
    if name == "lines":
        return lines(host_devices=plan.host_devices, quick=plan.quick)
    if name == "main_job":
        return main_job(host_devices=plan.host_devices, quick=plan.quick)
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
