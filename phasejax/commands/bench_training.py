"""Benchmark of the empirical sweeps and of the solvers that train one student.

    phasejax bench-training                  # CPU preset: d = 200, 500 runs x 50 GD steps in one call
    phasejax bench-training --preset gpu     # d = 1000, 100 steps

1. Sweep throughput: the whole (seed, alpha, omega) grid of tied students,
   `--steps` full-batch GD steps each (fixed, so every run does the same
   work), in one compiled vmapped call per chunk (one call when
   `--chunk-size` >= the grid), in runs x steps per second; against the same
   runs in a Python loop, one jitted run at a time (`--loop-runs` of them are
   timed and the rate extrapolated). Compilation is timed separately and
   excluded from both rates; a 1-step run isolates the cost of the steps.
2. Solvers to convergence on the same data and init (semantic init,
   `alpha = 1.5`, `omega = 0.3`, `--solver-seeds` data sets): L-BFGS, GD and
   Adam stopped at RMS gradient `--gtol`, and GAMP (theory notes, section 7)
   stopped on its relative change of `Q`; steps, seconds and the risk reached.
Writes a JSON record to --out (default runs/bench/training_<platform>.json; --out
results/bench/training_cpu.json rewrites the committed one, with --overwrite). The measurement is
`phasejax.benchmarks.training.training_benchmark`; `phasejax bench --parts training` runs it at the preset's
sizes beside the other figures.
"""

from __future__ import annotations

import datetime
import os

from phasejax.commands import flags
from phasejax.commands.argtypes import UsageError, guard_output_file, positive_float, positive_int
from phasejax.io import atomic_write_json

NAME = "bench-training"
HELP = "benchmark: vmapped training sweep vs a Python loop; L-BFGS, GD, Adam and GAMP to convergence"


def add_arguments(ap) -> None:
    flags.add_preset(ap, "cpu: d = 200, 50 GD steps, one chunk of 500 runs (the numbers in "
                         "results/bench/training_cpu.json); gpu: d = 1000, 100 steps")
    flags.add_sizes(ap, d="one", seeds=None)
    ap.add_argument("--seeds", type=positive_int, default=5, help="number of seeds of the throughput grid")
    ap.add_argument("--n-alpha", type=positive_int, default=20, help="number of alphas of the throughput grid")
    ap.add_argument("--n-omega", type=positive_int, default=5, help="number of omegas of the throughput grid")
    flags.add_steps(ap, help="GD steps per run in the throughput test (>= 2)")
    ap.add_argument("--chunk-size", type=positive_int, default=None, help="runs per compiled call (default: the preset's)")
    ap.add_argument("--loop-runs", type=positive_int, default=10, help="runs timed one at a time")
    ap.add_argument("--solver-seeds", type=positive_int, default=3, help="data sets of the solver comparison")
    ap.add_argument("--gtol", type=positive_float, default=1e-7, help="RMS-gradient tolerance of the solvers")
    flags.add_leave_out(ap, {"sweep": "the sweep throughput test", "solvers": "the solver comparison",
                             "gamp": "GAMP from the solver comparison"}, older="skip")
    flags.add_dtype(ap, default="float64")
    flags.add_output(ap, None, help="JSON record (default: runs/bench/training_<platform>.json)", guard=False)
    flags.add_progress(ap)


def run(args) -> int:
    import jax

    from phasejax.benchmarks.training import TRAINING_PRESETS, training_benchmark

    out = guard_output_file(args.out or os.path.join("runs", "bench", f"training_{jax.default_backend()}.json"),
                            args.overwrite)     # before any compute
    preset = TRAINING_PRESETS[args.preset]
    args.d, args.steps, args.chunk_size = (flags.pick(args, k, preset) for k in ("d", "steps", "chunk_size"))
    if args.steps < 2:
        raise UsageError(f"--steps must be >= 2 (the 1-step run is subtracted), got {args.steps}")
    record = dict(date=datetime.date.today().isoformat(), args={k: v for k, v in vars(args).items() if k != "_run"},
                  **flags.environment())
    record.update(training_benchmark(
        d=args.d, steps=args.steps, chunk_size=args.chunk_size, seeds=args.seeds, n_alpha=args.n_alpha,
        n_omega=args.n_omega, loop_runs=args.loop_runs, solver_seeds=args.solver_seeds, gtol=args.gtol,
        sweep=not args.no_sweep, solvers=not args.no_solvers, gamp=not args.no_gamp, dtype=flags.dtype_from(args),
        log=(lambda line: None) if args.no_progress else print))
    flags.print_paths([atomic_write_json(out, record)])
    return 0
