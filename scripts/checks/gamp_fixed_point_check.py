#!/usr/bin/env python3
"""Does GAMP have a fixed point at the minimiser of the empirical risk, and is it stable? (docs/gamp.md, mechanism)

    nice -n 15 python scripts/checks/gamp_fixed_point_check.py                 # d = 200, seeds 0 1, both branches
    python scripts/checks/gamp_fixed_point_check.py --d 400 --seeds 0 1 2 --eps 0 1e-6 1e-3 --max-steps 80

Per branch (`BRANCH_INITS`) and seed, in float64, at the paper's point
(`--alpha 2 --omega 0.3 --lam 0.01`):

1. *Existence.* L-BFGS minimises `R(Q)` from the branch's init (same data and
   init as `phasejax gamp`). At its minimiser `Q*` every sample's
   `h = xt Q* / sqrt(d)` is a stationary point of its prox objective; the
   global-minimum prox makes `Q*` a GAMP fixed point only if `h` is also the
   *global* minimiser. `prox_consistency` counts the samples where it is not,
   for `C` in `--C-values` and the SE's `C = V / sigma_1^2`.
2. *Stability.* GAMP (Stein Onsager term, `BRANCH_DAMPING`, `C0` = the SE's
   `C`) is started at `Q* + eps ||Q*|| / sqrt(d) z` (`z` standard normal) with
   `f0 = fixed_point_f(Q*)`, so that `eps = 0` starts exactly on the fixed
   point. Recorded per iteration: the residual `||Q_new - Q|| / ||Q||` and the
   fraction of samples whose prox minimiser jumped to the mirror basin.

The SE's `C` per branch is read from `--se-reference` (written by `phasejax
gamp`); without that file `--C0` is used for both branches. Writes
`--out/fixed_point_check.json` (default runs/gamp_fixed_point_check; an existing file only with --overwrite;
config, per-run numbers and histories,
timings) and prints a table. About 4 minutes of CPU at the defaults.
"""

from __future__ import annotations

import argparse
import math
import os
import time


def _history(a, it):
    """First `it` entries of a per-iteration history as a plain list (NaN after the stop is dropped)."""
    import numpy as np

    return [float(v) for v in np.asarray(a)[:it]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--d", type=int, default=200, help="dimension; n = round(alpha d) samples")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="data seeds (init: seed + 10**6)")
    ap.add_argument("--branches", nargs="+", default=["positional", "semantic"], choices=["positional", "semantic"])
    ap.add_argument("--alpha", type=float, default=2.0)
    ap.add_argument("--omega", type=float, default=0.3)
    ap.add_argument("--lam", type=float, default=0.01)
    ap.add_argument("--C-values", type=float, nargs="+", default=[10.0, 2.0],
                    help="variances C checked by prox_consistency besides the SE's")
    ap.add_argument("--eps", type=float, nargs="+", default=[0.0, 1e-3],
                    help="relative size of the perturbation of the L-BFGS minimiser GAMP starts from")
    ap.add_argument("--max-steps", type=int, default=40, help="GAMP iterations")
    ap.add_argument("--gtol", type=float, default=1e-10, help="L-BFGS stopping RMS gradient")
    ap.add_argument("--se-reference", default="results/gamp/se_reference.json",
                    help="SE fixed points (V per branch) written by `phasejax gamp`")
    ap.add_argument("--C0", type=float, default=50.0, help="GAMP's C0 where no SE reference is found")
    ap.add_argument("--out", default=os.path.join("runs", "gamp_fixed_point_check"),
                    help="output folder of fixed_point_check.json")
    ap.add_argument("--overwrite", action="store_true", help="replace --out/fixed_point_check.json if it exists")
    args = ap.parse_args(argv)
    for name in ("d", "max_steps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be a positive integer")
    from phasejax.commands.argtypes import UsageError, guard_output_file

    try:
        out_path = guard_output_file(os.path.join(args.out, "fixed_point_check.json"), args.overwrite)
    except UsageError as e:
        ap.error(str(e))

    import jax
    import jax.numpy as jnp
    import numpy as np

    import phasejax
    from phasejax.empirics.data import generate_data, overlaps_of, sample_count
    from phasejax.empirics.gamp import (BRANCH_DAMPING, BRANCH_INITS, empirical_risk, fixed_point_f, gamp,
                                        gamp_inputs, weights_at_overlaps, prox_consistency)
    from phasejax.empirics.training import TrainConfig, minimize
    from phasejax.io import atomic_write_json, read_json
    from phasejax.solvers import Status
    from phasejax.theory import make_params
    from phasejax.theory.gram import gram_risk

    t_start = time.perf_counter()
    params = make_params(args.alpha, args.omega, lam=args.lam)
    s2 = float(np.asarray(params.sigma)[0]) ** 2
    C_se, C_source = {}, f"--C0 = {args.C0}"
    if os.path.exists(args.se_reference):
        se = read_json(args.se_reference)
        same = all(math.isclose(se["params"][k], getattr(args, k)) for k in ("alpha", "omega", "lam"))
        if same:
            C_se = {b: se[b]["V"] / s2 for b in args.branches}
            C_source = f"V / sigma_1^2 from {args.se_reference}"
    C_se = {b: C_se.get(b, args.C0) for b in args.branches}
    n = sample_count(args.alpha, args.d)
    config = TrainConfig("lbfgs", gtol=args.gtol, max_steps=5000)

    rows, timings = [], {}
    with phasejax.float64_scope():
        train = jax.jit(lambda Q, inp: minimize(lambda q: gram_risk(q, inp, params), Q, config))
        consistency = jax.jit(prox_consistency)
        for branch in args.branches:
            for seed in args.seeds:
                t0 = time.perf_counter()
                data = generate_data(jax.random.PRNGKey(seed), params, args.d, n, dtype=jnp.float64)
                Q0 = weights_at_overlaps(jax.random.PRNGKey(10**6 + seed), data, *BRANCH_INITS[branch])
                tr = train(Q0, gamp_inputs(data))
                Qs = tr.params
                grad = jax.grad(empirical_risk)(Qs, data, params)
                ov = overlaps_of(Qs, data)
                row = dict(branch=branch, seed=seed, d=args.d, n=n, C_se=C_se[branch],
                           lbfgs=dict(status=Status(int(tr.status)).name.lower(), steps=int(tr.steps),
                                      rel_grad=float(jnp.max(jnp.abs(grad)) / jnp.max(jnp.abs(params.lam * Qs))),
                                      q=s2 * float(ov["q0"][0, 0]), m=float(ov["m"][0, 0]),
                                      theta=s2 * float(ov["theta0"][0, 0])))
                t1 = time.perf_counter()
                row["consistency"] = []
                for C in [C_se[branch], *args.C_values]:
                    out = consistency(Qs, jnp.array([[C]]), data, params)
                    ng = np.asarray(out["not_global"])
                    row["consistency"].append(dict(
                        C=float(C), not_global=int(ng.sum()), mirror=int(np.asarray(out["mirror"]).sum()),
                        max_gap=float(np.max(np.asarray(out["gap"])))))
                t2 = time.perf_counter()
                f0 = fixed_point_f(Qs, data, params)
                z = jax.random.normal(jax.random.PRNGKey(2 * 10**6 + seed), Qs.shape, jnp.float64)
                row["stability"] = []
                for eps in args.eps:
                    Qp = Qs + eps * jnp.linalg.norm(Qs) / jnp.sqrt(jnp.asarray(args.d, jnp.float64)) * z
                    r = gamp(data, params, Qp, jnp.array([[C_se[branch]]]), f0=f0, max_iter=args.max_steps,
                             damping=BRANCH_DAMPING[branch], onsager="stein")
                    it = int(r.iterations)
                    res, flips = _history(r.residual, it), _history(r.flip_fraction, it)
                    first_flip = next((i + 1 for i, v in enumerate(flips) if v > 0), None)
                    tail = res[max(it - 10, 0):]
                    row["stability"].append(dict(
                        eps=eps, status=Status(int(r.status)).name.lower(), iterations=it,
                        first_flip_iteration=first_flip, first_flip_samples=(
                            int(round(flips[first_flip - 1] * n)) if first_flip else 0),
                        residual_before_first_flip=(max(res[:first_flip - 1]) if first_flip and first_flip > 1
                                                    else None),
                        max_residual=max(res), residual_last10_mean=float(np.mean(tail)),
                        flip_fraction_last10_mean=float(np.mean(flips[max(it - 10, 0):])),
                        q_final=s2 * float(r.q0[it, 0, 0]), residual=res, flip_fraction=flips))
                t3 = time.perf_counter()
                row["seconds"] = dict(lbfgs=t1 - t0, consistency=t2 - t1, gamp=t3 - t2)
                rows.append(row)
                print(f"done {branch} seed {seed} ({t3 - t0:.0f} s)", flush=True)

    cfg = dict(d=args.d, n=n, seeds=args.seeds, branches=args.branches, alpha=args.alpha, omega=args.omega,
               lam=args.lam, C_values=args.C_values, C_se_source=C_source, eps=args.eps, max_iter=args.max_steps,
               gtol=args.gtol, onsager="stein", prox_starts="multi", dtype="float64",
               damping={b: BRANCH_DAMPING[b] for b in args.branches},
               inits={b: list(BRANCH_INITS[b]) for b in args.branches},
               data_key="PRNGKey(seed)", init_key="PRNGKey(seed + 10**6)", perturbation_key="PRNGKey(seed + 2*10**6)")
    timings = dict(total_wall_s=time.perf_counter() - t_start, cpu_s=time.process_time())
    path = atomic_write_json(out_path, dict(config=cfg, runs=rows, timings=timings))

    print(f"\nd = {args.d}, n = {n}; not-global prox samples at C = SE / " + " / ".join(f"{c:g}" for c in args.C_values))
    print(f"{'branch':<11}{'seed':>5}{'lbfgs':>10}{'q':>8}  {'not global':<12}{'eps':>7}{'status':>16}{'it':>4}"
          f"{'1st flip':>9}{'res<flip':>10}{'max res':>9}{'res last10':>11}{'flips last10':>13}")
    for row in rows:
        ng = "/".join(str(c["not_global"]) for c in row["consistency"])
        for s in row["stability"]:
            ff = "-" if s["first_flip_iteration"] is None else f"{s['first_flip_iteration']}({s['first_flip_samples']})"
            rb = "-" if s["residual_before_first_flip"] is None else f"{s['residual_before_first_flip']:.1e}"
            print(f"{row['branch']:<11}{row['seed']:>5}{row['lbfgs']['status']:>10.9}{row['lbfgs']['q']:>8.4f}  "
                  f"{ng:<12}{s['eps']:>7.0e}{s['status']:>16}{s['iterations']:>4}{ff:>9}{rb:>10}"
                  f"{s['max_residual']:>9.2e}{s['residual_last10_mean']:>11.2e}{s['flip_fraction_last10_mean']:>13.4f}")
    print(f"\nwrote {path} ({timings['total_wall_s']:.0f} s wall, {timings['cpu_s']:.0f} s CPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
