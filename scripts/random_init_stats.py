#!/usr/bin/env python3
"""From small random inits, trained with Adam: the fraction of runs ending positional, semantic or neither.

    python scripts/random_init_stats.py                   # d = 200, omega = 0.3, 10 alphas, 20 seeds
    python scripts/random_init_stats.py --d 1000 --seeds 50 --chunk-size 200   # GPU

Each run is classified by `phasejax.empirics.metrics.classify_solution`
(direction cosines of Q with the positional direction and with the teacher,
threshold 0.5). Writes --out (default results/random_init/): runs.csv,
fractions.csv (alpha, positional, semantic, neither, n_runs, n_converged) and
fractions.png; chunks under --out/train/ (resumable).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=200)
    ap.add_argument("--omega", type=float, default=0.3)
    ap.add_argument("--alpha-min", type=float, default=0.25)
    ap.add_argument("--alpha-max", type=float, default=2.5)
    ap.add_argument("--n-alpha", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--learning-rate", type=float, default=0.01)
    ap.add_argument("--max-steps", type=int, default=10000)
    ap.add_argument("--chunk-size", type=int, default=50)
    ap.add_argument("--out", default="results/random_init")
    args = ap.parse_args(argv)

    from phasejax.empirics import TrainConfig, TrainingGrid, train_students
    from phasejax.empirics.metrics import SOLUTIONS
    from phasejax.phase.diagram import _write_csv
    from phasejax.plotting import plot_solution_fractions
    from phasejax.theory import make_params

    alphas = np.round(np.linspace(args.alpha_min, args.alpha_max, args.n_alpha), 10)
    grid = TrainingGrid(alphas=alphas, omegas=(args.omega,), seeds=tuple(range(args.seeds)), inits=("random",),
                        d=args.d)
    config = TrainConfig("adam", learning_rate=args.learning_rate, max_steps=args.max_steps)
    t0 = time.perf_counter()
    runs = train_students(grid, make_params(1.0, args.omega), config=config, run_dir=os.path.join(args.out, "train"),
                          chunk_size=args.chunk_size, progress=True)
    r = runs.runs
    fractions, rows = [], []
    for a in alphas:
        sel = np.isclose(r["alpha"], a)
        f = [float(np.mean(r["solution"][sel] == k)) for k in range(len(SOLUTIONS))]
        fractions.append(f)
        rows.append([a, *f, int(sel.sum()), int(r["converged"][sel].sum())])
    paths = [runs.write_csv(os.path.join(args.out, "runs.csv")),
             _write_csv(os.path.join(args.out, "fractions.csv"), ["alpha", *SOLUTIONS, "n_runs", "n_converged"], rows),
             plot_solution_fractions(alphas, np.asarray(fractions), SOLUTIONS,
                                     os.path.join(args.out, "fractions.png"),
                                     rf"Adam from random inits, $d={args.d}$, $\omega={args.omega:g}$, "
                                     f"{args.seeds} seeds per alpha")]
    print(f"{len(r['alpha'])} runs in {time.perf_counter() - t0:.1f} s, {int(r['converged'].sum())} converged")
    print("wrote:\n  " + "\n  ".join(paths))


if __name__ == "__main__":
    main()
