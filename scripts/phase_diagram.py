#!/usr/bin/env python3
"""Phase diagram of positional vs semantic tied attention (the library's main job).

    python scripts/phase_diagram.py                       # paper setting, CPU-sized grid
    python scripts/phase_diagram.py --alpha-max 3 --n-alpha 60 --n-omega 21 --nodes 10   # GPU-sized

Writes to --out (default results/phase_diagram/): points.csv (every point and
branch), diagram.csv (global minimum, Delta e_t, baseline), thresholds.csv
(omega, alpha_c, alpha_l), config.json, summary.json, phase_map.png and
slice_omega_0.3.png. Chunks go to --out/chunks/ and a re-run with the same
flags resumes where a killed run stopped.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alpha-min", type=float, default=0.2)
    ap.add_argument("--alpha-max", type=float, default=2.4)
    ap.add_argument("--n-alpha", type=int, default=12)
    ap.add_argument("--omega-min", type=float, default=0.0)
    ap.add_argument("--omega-max", type=float, default=0.5)
    ap.add_argument("--n-omega", type=int, default=6)
    ap.add_argument("--nodes", type=int, default=8, help="Gauss-Hermite nodes per dimension")
    ap.add_argument("--sigma", type=float, default=0.5)
    ap.add_argument("--lam", type=float, default=0.01)
    ap.add_argument("--A", type=float, nargs=4, default=[0.6, 0.4, 0.4, 0.6], metavar=("A11", "A12", "A21", "A22"))
    ap.add_argument("--chunk-size", type=int, default=12, help="tasks per compiled call (use hundreds on a GPU)")
    ap.add_argument("--devices", type=int, default=0, help="number of local devices to shard over (0: all)")
    ap.add_argument("--slice-omega", type=float, default=0.3)
    ap.add_argument("--out", default="results/phase_diagram")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)

    import jax

    from phasejax.phase import PhaseGrid, phase_diagram
    from phasejax.plotting import plot_omega_slice, plot_phase_map
    from phasejax.theory import gauss_hermite, make_params

    grid = PhaseGrid.from_ranges(np.round(np.linspace(args.alpha_min, args.alpha_max, args.n_alpha), 10),
                                 np.round(np.linspace(args.omega_min, args.omega_max, args.n_omega), 10))
    params = make_params(1.0, 0.0, sigma=args.sigma, lam=args.lam, A=np.reshape(args.A, (2, 2)))
    devices = jax.local_devices()
    if args.devices:
        if args.devices > len(devices):
            raise SystemExit(f"--devices {args.devices} but only {len(devices)} local devices")
        devices = devices[: args.devices]
    t0 = time.perf_counter()
    pd = phase_diagram(grid, params, quadrature=gauss_hermite(4, args.nodes), run_dir=args.out,
                       chunk_size=args.chunk_size, devices=devices, progress=not args.no_progress)
    paths = pd.write(args.out)
    paths.append(plot_phase_map(pd, os.path.join(args.out, "phase_map.png")))
    paths.append(plot_omega_slice(pd, args.slice_omega, os.path.join(args.out, f"slice_omega_{args.slice_omega:g}.png")))
    print(f"{len(grid.alphas) * len(grid.omegas)} points x 2 branches on {len(devices)} device(s) "
          f"in {time.perf_counter() - t0:.1f} s")
    for w, ac, al in zip(pd.thresholds["omega"], pd.thresholds["alpha_c"], pd.thresholds["alpha_l"]):
        print(f"omega={w:.3f}  alpha_c={ac:.4f}  alpha_l={al:.4f}")
    print("wrote:\n  " + "\n  ".join(paths + [os.path.join(args.out, "config.json")]))


if __name__ == "__main__":
    main()
