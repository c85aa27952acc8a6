"""From small random inits, trained with Adam: the fraction of runs ending positional, semantic or neither.

    phasejax random-init                     # CPU preset: d = 200, omega = 0.3, 10 alphas, 20 seeds
    phasejax random-init --preset gpu        # d = 1000, 20 alphas, 100 seeds
    phasejax random-init --replot            # redo fractions.csv and fractions.png from <out>/runs.csv

Each run is classified by `phasejax.empirics.classify_solution` (direction
cosines of Q with the positional direction and with the teacher, threshold
0.5). Writes --out (default runs/random_init/): runs.csv and training.json,
fractions.csv (per alpha: the fractions, 68% Wilson intervals of the positional
and positional+semantic fractions, runs and converged runs), fractions.png and
summary.json.
"""

from __future__ import annotations

import os
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import grid_range, run_options_from

NAME = "random-init"
HELP = "Adam from small random inits: fractions of runs ending positional / semantic / neither vs alpha"

PRESETS = {
    "cpu": dict(d=200, n_alpha=10, seeds=20),
    "gpu": dict(d=1000, n_alpha=20, seeds=100),
}


def add_arguments(ap) -> None:
    flags.add_preset(ap, "cpu: d = 200, 10 alphas, 20 seeds; gpu: d = 1000, 20 alphas, 100 seeds")
    flags.add_alpha_curve(ap, 0.25, 2.5, seeds="seeds per alpha (default: the preset's)")
    flags.add_optimizer(ap, optimizers=("adam",), learning_rate=0.01, max_steps=10000,
                        learning_rate_help="Adam learning rate")
    flags.add_dtype(ap)
    flags.add_replot(ap, "only redo fractions.csv and fractions.png from <out>/runs.csv (no training)")
    flags.add_sweep(ap, NAME, chunk_size=50)


def reads(args) -> list:
    """The files the command reads back with `--replot`: runs.csv (`phasejax.empirics.RUN_COLUMNS`)."""
    if not args.replot:
        return []
    from phasejax.empirics.sweep import RUN_COLUMNS

    return flags.replot_reads(args, {"runs.csv": RUN_COLUMNS})


def fractions(runs: dict, out: str) -> list[str]:
    """Per alpha: the fractions of runs ending in each of `SOLUTIONS`, 68% Wilson intervals of the positional
    and positional+semantic fractions, the run counts; writes fractions.csv and fractions.png into `out`."""
    import numpy as np

    from phasejax.empirics import SOLUTIONS
    from phasejax.io import write_csv
    from phasejax.plotting_experiments import plot_solution_fractions, wilson_interval

    alphas = np.unique(np.asarray(runs["alpha"]))
    at = [np.isclose(np.asarray(runs["alpha"]), a) for a in alphas]
    counts = np.asarray([[np.sum(np.asarray(runs["solution"])[sel] == k) for k in range(len(SOLUTIONS))]
                         for sel in at])
    n = counts.sum(1)
    frac = counts / n[:, None]
    table = {"alpha": alphas}
    for k, name in enumerate(SOLUTIONS):
        table[name] = frac[:, k]
    for label, k in (("positional", counts[:, 0]), ("positional_or_semantic", counts[:, 0] + counts[:, 1])):
        lo, hi = wilson_interval(k, n)
        table[f"{label}_low68"], table[f"{label}_high68"] = lo, hi
    table["n_runs"] = n
    table["n_converged"] = np.asarray([int(np.sum(np.asarray(runs["converged"])[sel])) for sel in at])
    d, omega = int(np.asarray(runs["d"])[0]), float(np.asarray(runs["omega"])[0])
    n_txt = f"{int(n.min())}" if n.min() == n.max() else f"{int(n.min())} to {int(n.max())}"
    return [write_csv(os.path.join(out, "fractions.csv"), table),
            plot_solution_fractions(alphas, frac, SOLUTIONS, os.path.join(out, "fractions.png"),
                                    rf"Adam from random inits, $d={d}$, $\omega={omega:g}$, {n_txt} runs per "
                                    r"$\alpha$; error bars: 68% Wilson intervals of the stacked boundaries",
                                    n_runs=n)]


def run(args) -> int:
    import numpy as np

    from phasejax.empirics import TrainConfig, TrainingGrid, train_students
    from phasejax.empirics.sweep import read_runs_csv
    from phasejax.io import atomic_write_json
    from phasejax.theory import make_params

    if args.replot:
        path = os.path.join(args.out, "runs.csv")
        if not os.path.exists(path):
            raise SystemExit(f"error: --replot needs {path}")
        flags.print_paths(fractions(read_runs_csv(path), args.out))
        return 0
    preset = PRESETS[args.preset]
    d, n_alpha, seeds = flags.pick(args, "d", preset), flags.pick(args, "n_alpha", preset), flags.pick(args, "seeds", preset)
    alphas = grid_range(args, "alpha", n_alpha)
    grid = TrainingGrid(alphas=alphas, omegas=(args.omega,), seeds=tuple(range(seeds)), inits=("random",), d=d)
    config = TrainConfig("adam", learning_rate=args.learning_rate, max_steps=args.max_steps)
    options = run_options_from(args, args.out)
    t0 = time.perf_counter()
    runs = train_students(grid, make_params(1.0, args.omega), config=config, dtype=flags.dtype_from(args), options=options)
    if runs is None:
        return flags.not_finished(options)
    seconds = time.perf_counter() - t0
    r = runs.runs
    paths = runs.write(args.out)
    paths += fractions(r, args.out)
    paths.append(atomic_write_json(os.path.join(args.out, "summary.json"), dict(
        preset=args.preset, d=d, omega=args.omega, seeds=seeds, dtype=args.dtype, learning_rate=args.learning_rate,
        max_steps=args.max_steps, n_runs=int(len(r["alpha"])), n_converged=int(np.sum(r["converged"])),
        seconds=seconds, **flags.environment())))
    print(f"{len(r['alpha'])} runs in {seconds:.1f} s, {int(np.sum(r['converged']))} converged")
    flags.print_paths(paths)
    return flags.finish(NAME, flags.run_failures(r["status"], hint=flags.TRAINING_HINT))
