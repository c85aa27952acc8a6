#!/usr/bin/env python3
"""Figure 2 of the paper: trained tied-attention students from both informed inits vs the SE.

    python scripts/reproduce_fig2.py                      # d = 1000, omega = 0.3, 20 alphas, 5 seeds
    python scripts/reproduce_fig2.py --d 200 --seeds 3    # quick look

Every (alpha, init, seed) run is one entry of a single vmapped, chunked,
resumable sweep (`phasejax.empirics.train_students`); the SE curves come
from `phasejax.phase.phase_diagram` on the same alphas. Writes to --out
(default results/fig2/): runs.csv (one row per run), theory.csv (SE per alpha
and branch), fig2.png, and the chunk folders train/ and theory/ (a re-run
with the same flags resumes).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=1000)
    ap.add_argument("--omega", type=float, default=0.3)
    ap.add_argument("--alpha-min", type=float, default=0.1)
    ap.add_argument("--alpha-max", type=float, default=2.0)
    ap.add_argument("--n-alpha", type=int, default=20)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--sigma", type=float, default=0.5)
    ap.add_argument("--lam", type=float, default=0.01)
    ap.add_argument("--optimizer", default="lbfgs", choices=["lbfgs", "gd", "adam"])
    ap.add_argument("--nodes", type=int, default=8, help="Gauss-Hermite nodes per dimension (SE)")
    ap.add_argument("--chunk-size", type=int, default=20, help="runs per compiled call")
    ap.add_argument("--out", default="results/fig2")
    args = ap.parse_args(argv)

    from phasejax.empirics import TrainConfig, TrainingGrid, train_students
    from phasejax.phase import PhaseGrid, phase_diagram
    from phasejax.plotting import plot_training_vs_theory
    from phasejax.theory import gauss_hermite, make_params

    alphas = np.round(np.linspace(args.alpha_min, args.alpha_max, args.n_alpha), 10)
    params = make_params(1.0, args.omega, sigma=args.sigma, lam=args.lam)
    grid = TrainingGrid(alphas=alphas, omegas=(args.omega,), seeds=tuple(range(args.seeds)),
                        inits=("positional", "semantic"), d=args.d)
    t0 = time.perf_counter()
    runs = train_students(grid, params, config=TrainConfig(args.optimizer), run_dir=os.path.join(args.out, "train"),
                          chunk_size=args.chunk_size, progress=True)
    t_train = time.perf_counter() - t0
    t0 = time.perf_counter()
    theory = phase_diagram(PhaseGrid.from_ranges(alphas, (args.omega,)), params, quadrature=gauss_hermite(4, args.nodes),
                           run_dir=os.path.join(args.out, "theory"), chunk_size=8, progress=True)
    t_theory = time.perf_counter() - t0
    paths = [runs.write_csv(os.path.join(args.out, "runs.csv"))]
    paths += theory.write(os.path.join(args.out, "theory"))
    paths.append(plot_training_vs_theory(runs.runs, theory, os.path.join(args.out, "fig2.png"), args.omega))
    r = runs.runs
    print(f"{len(r['alpha'])} runs at d={args.d} in {t_train:.1f} s ({int(np.sum(r['converged']))} converged); "
          f"SE {2 * len(alphas)} solves in {t_theory:.1f} s")
    print("wrote:\n  " + "\n  ".join(paths))


if __name__ == "__main__":
    main()
