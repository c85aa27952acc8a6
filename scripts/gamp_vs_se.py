#!/usr/bin/env python3
"""GAMP on finite-size data against state evolution: trajectories and fixed points, both branches.

    python scripts/gamp_vs_se.py          # trajectories at d = 2000, alpha = 2; fixed points at d = 1000; 2 seeds
    python scripts/gamp_vs_se.py --d 500 --fp-d 500 --alphas 1.5 2.0

Trajectories: GAMP (spec section 7) from a semantic-side and a
positional-side init at `--alpha`, overlaps per iteration, against the SE
iterated from the same overlaps with the same damping
(`state_evolution_trajectory`, implicit hat form: GAMP's Onsager terms use
pointwise per-sample Jacobians; the Stein-form trajectory is drawn dashed).
GAMP damps `Q`, the SE damps the overlaps, so transients differ by the
damping; the fixed points do not depend on it.
Fixed points: GAMP at every `--alphas` value (dimension `--fp-d`) against
the SE fixed point of the library's default solver (Stein form, each branch
in its subspace); the trajectory runs add rows at `--d`. A run that stops at
`--max-iter` is reported with `converged = false` and its last iterate.
Writes --out (default results/gamp/): trajectories.csv, fixed_points.csv
(alpha, omega, branch, d, seed, q, m, theta, se_q, se_m, se_theta,
grad_norm, converged), gamp_vs_se.png.
"""

from __future__ import annotations

import argparse
import os
import time


INITS = {"semantic": (1.0, 0.0, 0.6), "positional": (0.08, 0.2, 0.0)}   # (q0, m, theta0) of Q0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=2000, help="dimension of the trajectories")
    ap.add_argument("--fp-d", type=int, default=1000, help="dimension of the fixed points vs alpha")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--alpha", type=float, default=2.0, help="alpha of the trajectories")
    ap.add_argument("--alphas", type=float, nargs="+", default=[1.0, 1.5, 2.0], help="fixed points")
    ap.add_argument("--omega", type=float, default=0.3)
    ap.add_argument("--damping", type=float, nargs=2, default=[0.5, 0.8], metavar=("SEMANTIC", "POSITIONAL"),
                    help="weight of the old iterate (GAMP and SE) per branch; 0.5 diverges on the positional one")
    ap.add_argument("--max-iter", type=int, default=200)
    ap.add_argument("--C0", type=float, default=50.0)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--out", default="results/gamp")
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from phasejax.empirics import generate_data
    from phasejax.phase.diagram import _fmt, _write_csv
    from phasejax.plotting import plot_gamp_vs_se
    from phasejax.theory import Overlaps, SEConfig, gauss_hermite, make_params, solve_state_evolution
    from phasejax.theory.gamp import gamp, init_weights, state_evolution_trajectory
    from phasejax.theory.state_evolution import result_columns

    quad = gauss_hermite(4, args.nodes)
    s2 = 0.25   # sigma^2 of the paper's setting (per-token convention)
    t0 = time.perf_counter()
    fixed_rows, traj_rows, traj = [], [], {}
    jobs = [(alpha, args.fp_d) for alpha in sorted(args.alphas)] + [(args.alpha, args.d)]
    for alpha, d in jobs:
        trajectories = (alpha, d) == (args.alpha, args.d)
        params = make_params(alpha, args.omega)
        n = int(round(alpha * d))
        for branch, (q0, m, th) in INITS.items():
            damping = args.damping[0] if branch == "semantic" else args.damping[1]
            se = result_columns(solve_state_evolution(params, init=branch, quadrature=quad), params)
            for seed in range(args.seeds):
                data = generate_data(jax.random.PRNGKey(seed), params, d, n)
                Q0 = init_weights(jax.random.PRNGKey(1000 + seed), data, q0, m, th)
                res = gamp(data, params, Q0, jnp.array([[args.C0]]), max_iter=args.max_iter, damping=damping)
                it = int(res.iterations)
                fixed_rows.append([alpha, args.omega, branch, d, seed, s2 * float(res.q0[it, 0, 0]),
                                   float(res.m[it, 0, 0]), s2 * float(res.theta0[it, 0, 0]), float(se["q"]),
                                   float(se["m"]), float(se["theta"]), float(res.grad_norm), bool(res.converged)])
                print(f"d={d} alpha={alpha} {branch:10s} seed {seed}: {it} its, converged {bool(res.converged)}, "
                      f"q={fixed_rows[-1][5]:.4f} (SE {float(se['q']):.4f})")
                if trajectories:
                    traj[branch, seed] = res
                    for t in range(res.q0.shape[0]):
                        traj_rows.append(["gamp", branch, seed, t, s2 * float(res.q0[t, 0, 0]), float(res.m[t, 0, 0]),
                                          s2 * float(res.theta0[t, 0, 0])])
            if trajectories:
                first = traj[branch, 0]
                ov0 = Overlaps(q0=jnp.mean(jnp.stack([traj[branch, s].q0[0] for s in range(args.seeds)]), 0),
                               m=jnp.mean(jnp.stack([traj[branch, s].m[0] for s in range(args.seeds)]), 0),
                               V0=jnp.array([[args.C0]]),
                               theta0=jnp.mean(jnp.stack([traj[branch, s].theta0[0] for s in range(args.seeds)]), 0))
                for form in ("implicit", "stein"):
                    tr = state_evolution_trajectory(params, ov0, quad, first.q0.shape[0] - 1, damping,
                                                    SEConfig(hat_form=form))
                    traj["se", branch, form] = tr
                    for t in range(tr.q0.shape[0]):
                        traj_rows.append([f"se_{form}", branch, -1, t, s2 * float(tr.q0[t, 0, 0]),
                                          float(tr.m[t, 0, 0]), s2 * float(tr.theta0[t, 0, 0])])
    cols = ["alpha", "omega", "branch", "d", "seed", "q", "m", "theta", "se_q", "se_m", "se_theta", "grad_norm",
            "converged"]
    fmt = lambda row: [v if isinstance(v, str) else _fmt(v) for v in row]  # noqa: E731
    paths = [_write_csv(os.path.join(args.out, "fixed_points.csv"), cols, [fmt(r) for r in fixed_rows]),
             _write_csv(os.path.join(args.out, "trajectories.csv"), ["source", "branch", "seed", "iteration", "q", "m",
                                                                     "theta"], [fmt(r) for r in traj_rows])]
    fp_rows = [r for r in fixed_rows if r[3] == args.fp_d]
    paths.append(plot_gamp_vs_se(traj, fp_rows, cols, os.path.join(args.out, "gamp_vs_se.png"), d=args.d,
                                 fp_d=args.fp_d, alpha=args.alpha, damping=args.damping))
    print(f"done in {time.perf_counter() - t0:.0f} s\nwrote:\n  " + "\n  ".join(paths))


if __name__ == "__main__":
    main()
