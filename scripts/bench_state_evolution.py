#!/usr/bin/env python3
"""Benchmark the state-evolution solver at its certified default (issue 10, targets (a) and (c)).

    python scripts/bench_state_evolution.py [--out results/bench/state_evolution_cpu.json]
        [--reference ../shared/reference_method/se_scipy_loop.py] [--skip-reference]

(a) Cold start-up: a fresh interpreter imports phasejax and solves a 32-point grid (16 alpha in [0.5, 2] x
    omega in {0, 0.3}, positional subspace) by continuation rows (`solve_state_evolution_grid`); the wall time,
    start-up and compilation included, divided by 32, against the published method
    (`se_scipy_loop.py`, scipy BFGS per node in Python loops) at 4 Gauss-Hermite nodes per dimension on one
    point (alpha = 2, omega = 0.3), start-up included.
(c) Batch against single, after compilation: the same 16 points of one omega solved cold one at a time, as
    one batch (`solve_state_evolution_batch` at its default `batch_size="auto"`: one point after the other
    in one compiled `lax.map` on a CPU, all side by side on an accelerator) and as a continuation row
    (`solve_along_alpha`), in seconds per point. `--parts c` times (c) only.

Writes one JSON with the date, the device and every timing. Timings are wall-clock on the given machine;
they are inflated when other processes share it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ALPHAS = "np.linspace(0.5, 2.0, 16)"

COLD = textwrap.dedent(f"""
    import time, json
    t0 = time.perf_counter()
    import numpy as np, jax
    from phasejax.theory import make_params, solve_state_evolution_grid
    res = solve_state_evolution_grid(make_params(1.0, 0.0), {ALPHAS}, [0.0, 0.3], "positional")
    jax.block_until_ready(res)
    print(json.dumps(dict(seconds_in_process=time.perf_counter() - t0,
                          converged=int(np.sum(np.asarray(res.converged))),
                          iterations=np.asarray(res.iterations).tolist())))
""")


def run_reference(path: str) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, path, "--branch", "positional", "--alpha", "2.0", "--omega", "0.3",
                          "--nodes", "4"], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    line = [ln for ln in out.stdout.splitlines() if ln.strip().startswith("{")][-1]
    return dict(wall_s=wall, **json.loads(line))


def run_cold_grid() -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", COLD], capture_output=True, text=True, check=True, env=env)
    wall = time.perf_counter() - t0
    return dict(wall_s=wall, **json.loads(out.stdout.strip().splitlines()[-1]))


def batch_versus_single(omega: float = 0.3) -> dict:
    import jax
    import numpy as np

    from phasejax.theory import make_params, solve_along_alpha, solve_state_evolution, solve_state_evolution_batch

    params = make_params(1.0, omega)
    alphas = np.linspace(0.5, 2.0, 16)

    def timed(fn):
        jax.block_until_ready(fn())                 # compile
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn())
        return time.perf_counter() - t0, out

    singles, its = [], []
    for a in alphas:
        dt, res = timed(lambda a=a: solve_state_evolution(params.replace(alpha=a), "positional"))
        singles.append(dt)
        its.append(int(res.iterations))
    t_batch, batch = timed(lambda: solve_state_evolution_batch(params, alphas, np.full(16, omega), "positional"))
    t_row, row = timed(lambda: solve_along_alpha(params, alphas, "positional"))
    return dict(points=16, omega=omega, batch_size="auto (one point at a time on a CPU, all 16 side by side on "
                                                   "an accelerator)", backend=jax.default_backend(),
                single_s_per_point=float(np.mean(singles)),
                single_iterations=its, batch_s_per_point=t_batch / 16,
                batch_iterations=np.asarray(batch.iterations).tolist(), row_s_per_point=t_row / 16,
                row_iterations=np.asarray(row.iterations).tolist(),
                batch_over_single=t_batch / 16 / float(np.mean(singles)),
                row_over_single=t_row / 16 / float(np.mean(singles)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", default=os.path.join(ROOT, "..", "shared", "reference_method",
                                                         "se_scipy_loop.py"))
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--out", default="")
    ap.add_argument("--parts", default="a,c", help="which targets to time, of a,c (default both); with --out, "
                    "the parts not timed are kept from the existing file")
    args = ap.parse_args(argv)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if not parts or parts - {"a", "c"}:
        ap.error(f"--parts must name a and/or c, got {args.parts!r}")

    import jax

    report = dict(date=datetime.date.today().isoformat(), device=str(jax.devices()[0].device_kind),
                  platform=jax.default_backend(), cpu_count=os.cpu_count(), jax=jax.__version__,
                  load_average_at_start=os.getloadavg(),
                  quadrature="default (SplitProductRule, 20736 nodes, 4 replicas)")
    if args.out and os.path.exists(args.out) and parts != {"a", "c"}:
        with open(args.out) as fh:
            old = json.load(fh)
        report.update({k: v for k, v in old.items() if k[:2] in {f"{p}_" for p in {"a", "c"} - parts}})
        report["parts_timed_on_this_date"] = sorted(parts)
    if "a" in parts:
        cold = run_cold_grid()
        report["a_grid_32_points"] = dict(cold, s_per_point=cold["wall_s"] / 32)
        print(f"(a) 32-point grid in a fresh interpreter: {cold['wall_s']:.1f} s wall "
              f"({cold['wall_s'] / 32:.2f} s per point), {cold['converged']}/32 converged")
        if not args.skip_reference and os.path.exists(args.reference):
            ref = run_reference(args.reference)
            report["a_reference_one_point"] = ref
            report["a_speedup"] = ref["wall_s"] / (cold["wall_s"] / 32)
            print(f"    reference method, one point at 4 nodes/dim: {ref['wall_s']:.1f} s wall; "
                  f"speed-up per point {report['a_speedup']:.0f}x (target >= 100x)")
    if "c" in parts:
        c = batch_versus_single()
        report["c_batch_versus_single"] = c
        print(f"(c) after compilation: single {c['single_s_per_point']:.2f} s/point, batch "
              f"{c['batch_s_per_point']:.2f} s/point ({c['batch_over_single']:.2f}x), continuation row "
              f"{c['row_s_per_point']:.2f} s/point ({c['row_over_single']:.2f}x)")
    if args.out:
        from phasejax.io import atomic_write_json

        print("wrote", atomic_write_json(args.out, report))


if __name__ == "__main__":
    main()
