#!/usr/bin/env python3
"""Benchmark the phase-diagram sweep and compare with the published method (reference).

    python scripts/bench_phase_diagram.py [--n-alpha 32 --n-omega 16] [--nodes 4] [--host-devices 8]
        [--reference ../shared/reference_method/se_scipy_loop.py] [--out results/bench/phase_cpu.json]

1. Points per second for an n_alpha x n_omega grid with both branches on one
   device (and, with --host-devices N on a CPU, on N forced host devices, in
   a subprocess since XLA reads the flag at start-up).
2. The same point (alpha = 2, omega = 0.3, semantic) solved by the reference
   method (scipy BFGS per node, Python loops) and by phasejax at equal
   Gauss-Hermite order, printing the speed ratio.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def sweep_seconds(n_alpha, n_omega, nodes, chunk_size, devices):
    import jax

    from phasejax.phase import PhaseGrid, phase_diagram
    from phasejax.theory import gauss_hermite, make_params

    grid = PhaseGrid.from_ranges(np.linspace(0.2, 3.0, n_alpha), np.linspace(0.0, 0.6, n_omega))
    devs = jax.local_devices()[:devices] if devices else jax.local_devices()
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        pd = phase_diagram(grid, make_params(1.0, 0.0), quadrature=gauss_hermite(4, nodes), run_dir=d,
                           chunk_size=chunk_size, devices=devs, progress=False)
        dt = time.perf_counter() - t0
    return dt, 2 * n_alpha * n_omega, int(np.sum(pd.points["converged"])), len(devs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-alpha", type=int, default=32)
    ap.add_argument("--n-omega", type=int, default=16)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--chunk-size", type=int, default=64)
    ap.add_argument("--host-devices", type=int, default=0)
    ap.add_argument("--reference", default=os.path.join(HERE, "..", "..", "shared", "reference_method",
                                                         "se_scipy_loop.py"))
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--sweep-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)

    import jax

    report = dict(date=datetime.date.today().isoformat(), device=str(jax.devices()[0].device_kind),
                  platform=jax.default_backend(), jax=jax.__version__, nodes=args.nodes,
                  grid=[args.n_alpha, args.n_omega])
    dt, n, conv, ndev = sweep_seconds(args.n_alpha, args.n_omega, args.nodes, args.chunk_size, 0)
    print(f"sweep {args.n_alpha}x{args.n_omega} x 2 branches = {n} solves on {ndev} device(s): "
          f"{dt:.1f} s (compile included), {n / dt:.2f} solves/s, {conv}/{n} converged")
    report.update(sweep_s=round(dt, 2), solves=n, solves_per_s=round(n / dt, 3), converged=conv, devices=ndev)
    if args.sweep_only:
        print(json.dumps(report))
        return
    if args.host_devices and jax.default_backend() == "cpu":
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={args.host_devices}")
        cmd = [sys.executable, __file__, "--sweep-only", "--skip-reference", "--n-alpha", str(args.n_alpha),
               "--n-omega", str(args.n_omega), "--nodes", str(args.nodes), "--chunk-size", str(args.chunk_size)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        sub = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"same sweep on {sub['devices']} forced host devices: {sub['sweep_s']:.1f} s, "
              f"{sub['solves_per_s']:.2f} solves/s")
        report["host_devices"] = sub
    if not args.skip_reference:
        from phasejax.theory import SEConfig, gauss_hermite, make_params, solve_state_evolution

        spec = importlib.util.spec_from_file_location("se_scipy_loop", args.reference)
        ref = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ref)
        t0 = time.perf_counter()
        r = ref.solve(2.0, 0.3, "semantic", args.nodes)
        t_ref = time.perf_counter() - t0
        quad = gauss_hermite(4, args.nodes)
        # same rule as the reference: single start at h = 0, its stopping tolerance on the overlaps
        cfg = SEConfig(prox_starts="zero", tol=1e-4)
        p = make_params(2.0, 0.3)
        jax.block_until_ready(solve_state_evolution(p, "semantic", quad, cfg))
        t0 = time.perf_counter()
        ours = solve_state_evolution(p, "semantic", quad, cfg)
        jax.block_until_ready(ours)
        t_ours = time.perf_counter() - t0
        print(f"reference (scipy loop, {args.nodes} nodes/dim): {t_ref:.2f} s, q={r['q']:.5f}, V={r['V']:.3f}")
        print(f"phasejax  (same order, zero start): {t_ours:.3f} s, q={float(ours.q[0]):.5f}, "
              f"V={float(ours.V[0]):.3f}  -> speed ratio {t_ref / t_ours:.0f}x")
        report.update(reference_s=round(t_ref, 3), phasejax_s=round(t_ours, 4), speed_ratio=round(t_ref / t_ours, 1))
    if args.out:
        from phasejax.phase import atomic_write_json

        print("wrote", atomic_write_json(args.out, report))


if __name__ == "__main__":
    main()
