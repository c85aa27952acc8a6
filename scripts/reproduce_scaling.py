#!/usr/bin/env python3
"""Finite-size scaling of the trained overlaps `m` (positional init) and `theta` (semantic init).

    python scripts/reproduce_scaling.py                   # alpha = 1.5, omega = 0.3, d = 10 ... 1000
    python scripts/reproduce_scaling.py --ds 20 100 500 --seeds 4

One vmapped sweep over (init, seed) per dimension `d` (the shapes change with
`d`), each resumable under --out/train_d{d}/; the SE fixed points of both
branches are the d -> inf reference. Writes --out (default results/scaling/):
runs.csv (every run), summary.csv (per d: mean, std and distance to the SE),
se.json and scaling.png.
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alpha", type=float, default=1.5)
    ap.add_argument("--omega", type=float, default=0.3)
    ap.add_argument("--ds", type=int, nargs="+", default=[10, 20, 50, 100, 200, 500, 1000])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=10, help="Gauss-Hermite nodes per dimension (SE)")
    ap.add_argument("--chunk-size", type=int, default=20)
    ap.add_argument("--out", default="results/scaling")
    args = ap.parse_args(argv)

    from phasejax.empirics import TrainingGrid, train_students, write_runs_csv
    from phasejax.phase.diagram import _write_csv
    from phasejax.phase.sweep import atomic_write_json
    from phasejax.plotting import plot_finite_size_scaling
    from phasejax.theory import gauss_hermite, make_params, solve_state_evolution
    from phasejax.theory.state_evolution import result_columns

    params = make_params(args.alpha, args.omega)
    quad = gauss_hermite(4, args.nodes)
    se = {}
    for branch, key in (("positional", "m"), ("semantic", "theta")):
        res = solve_state_evolution(params, init=branch, quadrature=quad)
        cols = result_columns(res, params)
        se[key] = float(cols[key])
        se[f"{branch}_converged"] = bool(res.converged)
    ds = sorted(args.ds)
    parts, stats = [], {}
    for d in ds:
        grid = TrainingGrid(alphas=(args.alpha,), omegas=(args.omega,), seeds=tuple(range(args.seeds)), d=d)
        parts.append(train_students(grid, params, run_dir=os.path.join(args.out, f"train_d{d}"),
                                    chunk_size=args.chunk_size).runs)
        print(f"d={d}: {len(parts[-1]['alpha'])} runs, {int(np.sum(parts[-1]['converged']))} converged")
    runs = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    rows = []
    for key, code in (("m", 0), ("theta", 1)):
        mean, std = [], []
        for p in parts:
            v = np.asarray(p[key])[np.asarray(p["init"]) == code]
            mean.append(v.mean())
            std.append(v.std())
        stats[key, code] = (np.asarray(mean), np.asarray(std), args.seeds)
        rows += [[key, d, mu, sd, abs(mu - se[key]), se[key]] for d, mu, sd in zip(ds, mean, std)]
    paths = [write_runs_csv(runs, os.path.join(args.out, "runs.csv")),
             _write_csv(os.path.join(args.out, "summary.csv"), ["overlap", "d", "mean", "std", "abs_dev_from_se", "se"],
                        rows),
             atomic_write_json(os.path.join(args.out, "se.json"), dict(alpha=args.alpha, omega=args.omega,
                                                                      nodes=args.nodes, **se)),
             plot_finite_size_scaling(ds, stats, se, os.path.join(args.out, "scaling.png"), args.alpha)]
    print("wrote:\n  " + "\n  ".join(paths))


if __name__ == "__main__":
    main()
