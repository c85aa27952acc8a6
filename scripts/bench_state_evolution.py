#!/usr/bin/env python3
"""Benchmark the SE solver: one converged solve per branch, and a vmapped batch of points.

    python scripts/bench_state_evolution.py [--nodes 10] [--batch 64] [--out results/bench/se_cpu.json]

Setting: L = 2, r = t = 1 (paper), Gauss-Hermite with --nodes per dimension.
Prints compile time, run time per solve (best of --repeat) and points/s of
the batch; with --out also writes them as JSON with the date and device.
"""

from __future__ import annotations

import argparse
import datetime
import time

import numpy as np


def timed(fn, repeat):
    import jax

    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    first = time.perf_counter() - t0
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn())
        runs.append(time.perf_counter() - t0)
    return first, min(runs), out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)

    import jax

    from phasejax.theory import gauss_hermite, make_params, solve_state_evolution, solve_state_evolution_batch

    quad = gauss_hermite(4, args.nodes)
    params = make_params(2.0, 0.3)
    report = dict(date=datetime.date.today().isoformat(), device=str(jax.devices()[0].device_kind),
                  platform=jax.default_backend(), jax=jax.__version__, nodes=args.nodes, quadrature_size=quad.size)
    for branch in ("semantic", "positional"):
        first, best, res = timed(lambda: solve_state_evolution(params, branch, quad), args.repeat)
        report[f"{branch}_compile_plus_run_s"] = round(first, 3)
        report[f"{branch}_solve_s"] = round(best, 3)
        report[f"{branch}_iterations"] = int(res.iterations)
        report[f"{branch}_converged"] = bool(res.converged)
        print(f"{branch:10s}: one solve {best:.3f} s after compilation ({first:.1f} s with it), "
              f"{int(res.iterations)} iterations, converged={bool(res.converged)}")
    rng = np.random.default_rng(0)
    alphas = rng.uniform(0.3, 3.0, args.batch)
    omegas = rng.uniform(0.0, 0.6, args.batch)
    first, best, res = timed(lambda: solve_state_evolution_batch(params, alphas, omegas, "semantic", quad), 1)
    report.update(batch=args.batch, batch_s=round(best, 3), batch_points_per_s=round(args.batch / best, 3),
                  batch_converged=int(np.sum(np.asarray(res.converged))))
    print(f"batch of {args.batch} points (semantic), one vmapped call: {best:.2f} s, "
          f"{args.batch / best:.2f} points/s, {int(np.sum(np.asarray(res.converged)))}/{args.batch} converged")
    if args.out:
        from phasejax.phase import atomic_write_json

        print("wrote", atomic_write_json(args.out, report))


if __name__ == "__main__":
    main()
