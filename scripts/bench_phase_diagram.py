#!/usr/bin/env python3
"""Benchmark the phase diagram at the certified default (issue 10, target (b)).

    python scripts/bench_phase_diagram.py [--n-omega 20] [--tracks 1] [--out results/bench/phase_diagram_cpu.json]

Runs `phase_diagram` on the paper's grid (40 alpha in [0.1, 2.5] x omega in [0, 0.95], both subspaces, one
continuation track per subspace) in a fresh run directory and records the wall time, compilation included.
With `--n-omega k < 20` it runs the first `k` rows of omega values spread over [0, 0.95] and projects the full
diagram's time as `20 / k` times the measured one (rows cost about the same; the projection is labelled as
such in the JSON).
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile
import time

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-alpha", type=int, default=40)
    ap.add_argument("--n-omega", type=int, default=20)
    ap.add_argument("--tracks", type=int, default=1)
    ap.add_argument("--chunk-size", type=int, default=2)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)

    import jax

    from phasejax.phase import PhaseConfig, PhaseGrid, phase_diagram
    from phasejax.sweep import RunOptions
    from phasejax.theory import CENSUS_SEEDS, make_params

    full_omegas = np.linspace(0.0, 0.95, 20)
    omegas = full_omegas[np.linspace(0, 19, args.n_omega).round().astype(int)] if args.n_omega < 20 else full_omegas
    grid = PhaseGrid.from_ranges(np.linspace(0.1, 2.5, args.n_alpha), omegas)
    config = PhaseConfig(seeds={b: CENSUS_SEEDS[b][: args.tracks] for b in ("positional", "semantic")})
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        pd = phase_diagram(grid, make_params(1.0, 0.0), config=config,
                           options=RunOptions(run_dir=d, chunk_size=args.chunk_size, progress=True))
        wall = time.perf_counter() - t0
    pts = pd.points
    n_solves = len(pts["alpha"])
    converged = int(np.sum(np.asarray(pts["status"]) == 0)) if np.asarray(pts["status"]).dtype != object else None
    report = dict(date=datetime.date.today().isoformat(), device=str(jax.devices()[0].device_kind),
                  platform=jax.default_backend(), cpu_count=os.cpu_count(), jax=jax.__version__,
                  load_average_at_start=os.getloadavg(),
                  grid=dict(n_alpha=args.n_alpha, omegas=[float(w) for w in omegas], tracks=args.tracks),
                  solves=n_solves, converged=converged, wall_s=wall, s_per_solve=wall / n_solves)
    if args.n_omega < 20:
        report["projected_full_diagram_s"] = wall * 20 / args.n_omega
        report["projection"] = "measured rows x 20 / n_omega (rows cost about the same)"
    print(f"{n_solves} solves in {wall:.1f} s ({wall / n_solves:.2f} s per solve), {converged} converged")
    if "projected_full_diagram_s" in report:
        print(f"projected full 40 x 20 x 2 diagram: {report['projected_full_diagram_s'] / 60:.1f} min (target: < 10)")
    if args.out:
        from phasejax.io import atomic_write_json

        print("wrote", atomic_write_json(args.out, report))


if __name__ == "__main__":
    main()
