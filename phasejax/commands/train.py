"""Train students over an (alpha, omega, init, seed) grid: one vmapped, chunked, resumable sweep.

    phasejax train                                           # CPU preset: d = 200, 5 alphas, 2 omegas, 3 seeds
    phasejax train --alphas 0.5 1 2 --omegas 0.3 --seeds 5 --d 500 --inits positional semantic random
    phasejax train --student untied --optimizer adam --max-steps 20000

Writes --out (default runs/train/): runs.csv (columns of
`phasejax.empirics.RUN_COLUMNS`: overlaps, losses, fresh-sample and
overlap-predicted test errors, solver status, solution kind) and training.json
(grid and configuration; `phasejax.empirics.TrainingRuns.load(out)` reads both).
"""

from __future__ import annotations

import os
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import (
    UsageError, check_fits, nonnegative_int, positive_float, refuse_duplicates, run_options_from, unit_interval,
)

NAME = "train"
HELP = "train tied / untied / linear students over an (alpha, omega, init, seed) grid"

PRESETS = {
    "cpu": dict(d=200, alphas=[0.5, 1.0, 1.5, 2.0, 2.5], omegas=[0.1, 0.3], seeds=3),
    "gpu": dict(d=1000, alphas=[round(0.1 * k, 1) for k in range(1, 31)], omegas=[0.0, 0.1, 0.2, 0.3, 0.4, 0.5],
                seeds=10),
}


INITS = ("positional", "semantic", "random")
STUDENTS = ("tied", "untied", "linear")
"""`phasejax.empirics.INITS` and `STUDENTS`, spelled here so that parsing the command line does not import JAX
(a test checks that they agree)."""


def add_arguments(ap) -> None:
    flags.add_preset(ap, "cpu: d = 200, alphas 0.5 ... 2.5, omegas 0.1, 0.3, 3 seeds; "
                         "gpu: d = 1000, 30 alphas, 6 omegas, 10 seeds")
    flags.add_sizes(ap, d="one")
    ap.add_argument("--alphas", type=positive_float, nargs="+", default=None, help="(default: the preset's)")
    ap.add_argument("--omegas", type=unit_interval, nargs="+", default=None, help="(default: the preset's)")
    ap.add_argument("--inits", choices=INITS, nargs="+", default=["positional", "semantic"])
    ap.add_argument("--student", choices=STUDENTS, default="tied")
    ap.add_argument("--value-rank", type=nonnegative_int, default=0, help="trainable value rank (untied student)")
    flags.add_optimizer(ap, max_steps=5000, gtol=True,
                        learning_rate_help="step size of gd (default 0.5) and adam (default 0.01); refused with "
                                           "lbfgs, whose line search sets the step")
    flags.add_model(ap)
    flags.add_n_test(ap, 1000)
    flags.add_dtype(ap)
    flags.add_sweep(ap, NAME, chunk_size=20)


def check_size(grid, args, dtype) -> None:
    """Refuse, before any compile, a run whose data do not fit: one run holds about `5 (n_max + n_test) L d`
    numbers (`phasejax.empirics.run_memory_estimate`); `RunError` with the estimate and the flags that shrink it."""
    from phasejax.empirics.sweep import run_memory_estimate

    check_fits(run_memory_estimate(grid, n_test=args.n_test, dtype=dtype),
               f"one training run at --d {grid.d} with alpha up to {max(grid.alphas):g} ({grid.n_max} samples)",
               "--d (or the largest of --alphas, or --n-test)")


def run(args) -> int:
    import numpy as np

    from phasejax.empirics import TrainConfig, TrainingGrid, train_students
    from phasejax.io import atomic_write_json
    from phasejax.theory import make_params

    preset = PRESETS[args.preset]
    if args.optimizer == "lbfgs" and args.learning_rate is not None:
        raise UsageError("--learning-rate is not used by --optimizer lbfgs (its line search sets the step); "
                         "drop it, or pass --optimizer gd or adam")
    if args.value_rank and args.student != "untied":
        raise UsageError(f"--value-rank is used by --student untied only, not {args.student}; drop it")
    for flag, name in (("--alphas", "alphas"), ("--omegas", "omegas"), ("--inits", "inits")):
        refuse_duplicates(flags.pick(args, name, preset) if name != "inits" else args.inits, flag)
    grid = TrainingGrid(alphas=tuple(flags.pick(args, "alphas", preset)), omegas=tuple(flags.pick(args, "omegas", preset)),
                        seeds=tuple(range(flags.pick(args, "seeds", preset))), inits=tuple(args.inits),
                        d=flags.pick(args, "d", preset))
    config = TrainConfig(args.optimizer, learning_rate=args.learning_rate, max_steps=args.max_steps, gtol=args.gtol)
    options = run_options_from(args, args.out)
    check_size(grid, args, flags.dtype_from(args))
    t0 = time.perf_counter()
    runs = train_students(grid, make_params(1.0, 0.0, sigma=args.sigma, lam=args.lam), student=args.student,
                          config=config, n_test=args.n_test, value_rank=args.value_rank, dtype=flags.dtype_from(args),
                          options=options)
    if runs is None:
        return flags.not_finished(options)
    seconds = time.perf_counter() - t0
    r = runs.runs
    paths = runs.write(args.out)
    paths.append(atomic_write_json(os.path.join(args.out, "summary.json"), dict(
        preset=args.preset, n_runs=int(len(r["alpha"])), n_converged=int(np.sum(r["converged"])), seconds=seconds,
        **flags.environment())))
    print(f"{len(r['alpha'])} runs in {seconds:.1f} s, {int(np.sum(r['converged']))} converged")
    flags.print_paths(paths)
    return flags.finish(NAME, flags.run_failures(r["status"], hint=flags.TRAINING_HINT))
