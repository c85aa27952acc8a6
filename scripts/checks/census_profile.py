#!/usr/bin/env python3
"""The positional subspace's reduced map at alpha = 0.6, omega = 0: how many fixed points are there?

    python scripts/checks/census_profile.py [--alpha 0.6] [--omega 0.0] [--out runs/census_profile]
    python scripts/checks/census_profile.py --out results/census --overwrite      # rewrite the committed profile

For each `m` on a grid, (q, V) are solved self-consistently with `m` held, and `F_m(m) - m` is recorded
(`F_m`: the SE map's `m` component). Fixed points of the positional subspace are its zeros. Done with the
default rule (converged, `SplitProductRule`) and with tensor Gauss-Hermite at 8 nodes per dimension, whose
sign changes are quadrature artefacts. Writes `profile_alpha<a>_omega<w>.csv` and a PNG. ~10 min on 2 cores.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

M_GRID = [0.2, 0.17, 0.15, 0.14, 0.13, 0.12, 0.11, 0.095, 0.085, 0.075, 0.06, 0.045, 0.03, 0.02, 0.016, 0.012,
          0.008, 0.004]


def profile(alpha: float, omega: float, scheme, ms) -> dict:
    """`F_m(m) - m` with (q0, V0) solved at each held `m` by damped iteration (damping 0.5, residual < 1e-6)."""
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    from phasejax import float64_scope
    from phasejax.theory import branch_init, make_params
    from phasejax.theory.se_map import SEProblem, initial_warm, se_map

    out = dict(m=[], q=[], V=[], F_m_minus_m=[], qV_residual=[])
    with float64_scope():
        p = make_params(alpha, omega)
        init = branch_init("positional", p)
        x, unravel = ravel_pytree(init.overlaps)          # layout: q0, m, V0, theta0
        s2 = float(np.mean(np.asarray(p.sigma) ** 2))

        @jax.jit
        def F(x, warm, frame):
            problem = SEProblem(p, scheme, init._replace(hold_m=jnp.asarray(False), hold_theta=jnp.asarray(True)),
                                frame)
            ev = se_map(problem, x, warm, jnp.asarray(0))
            return ev.Fx, ev.h

        free = jnp.array([0, 2])
        for m in ms:
            x = x.at[1].set(m)
            frame = scheme.frame(unravel(x), p)
            warm = initial_warm(p, scheme, unravel(x), frame)
            for k in range(80):
                Fx, warm = F(x, warm, frame)
                new = x.at[free].set(0.5 * x[free] + 0.5 * Fx[free])
                if k % 15 == 14:
                    frame = scheme.frame(unravel(new), p)
                res = float(jnp.max(jnp.abs(new - x)[free] / jnp.abs(x[free])))
                x = new
                if res < 1e-6 and k > 16:
                    break
            Fx, _ = F(x, warm, frame)
            for key, v in (("m", m), ("q", float(x[0]) * s2), ("V", float(x[2]) * s2),
                           ("F_m_minus_m", float(Fx[1]) - m), ("qV_residual", res)):
                out[key].append(v)
            print(f"  m = {m:.4f}: F_m - m = {out['F_m_minus_m'][-1]:+.3e}", flush=True)
    return {k: np.asarray(v) for k, v in out.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alpha", type=float, default=0.6)
    ap.add_argument("--omega", type=float, default=0.0)
    ap.add_argument("--out", default=os.path.join("runs", "census_profile"), help="output folder")
    ap.add_argument("--overwrite", action="store_true", help="replace the profile's files in --out if they exist")
    args = ap.parse_args(argv)
    from phasejax.commands.argtypes import UsageError, guard_output_file

    stem = os.path.join(args.out, f"profile_alpha{args.alpha:g}_omega{args.omega:g}")
    try:
        for path in (stem + ".csv", stem + ".png"):       # before any compute
            guard_output_file(path, args.overwrite)
    except UsageError as e:
        ap.error(str(e))

    from matplotlib.figure import Figure

    from phasejax.io import write_csv
    from phasejax.plotting import save_figure
    from phasejax.theory import SplitProductRule, gauss_hermite
    from phasejax.theory.quadrature import FixedRule

    rules = {"default": SplitProductRule(), "gauss_hermite_8": FixedRule(gauss_hermite(4, 8))}
    cols = {k: [] for k in ("rule", "m", "q", "V", "F_m_minus_m", "qV_residual")}
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    for name, scheme in rules.items():
        print(name, flush=True)
        prof = profile(args.alpha, args.omega, scheme, M_GRID)
        for k, v in prof.items():
            cols[k].extend(v.tolist())
        cols["rule"].extend([name] * len(M_GRID))
        label = "default rule (converged, 20736 nodes)" if name == "default" else "Gauss-Hermite, 8 nodes/dim (4096)"
        ax.plot(prof["m"], prof["F_m_minus_m"], "o-" if name == "default" else "s--", label=label, ms=4)
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xlabel("m (held)")
    ax.set_ylabel(r"$F_m(m) - m$  (q, V self-consistent)")
    ax.set_title(f"Positional subspace, alpha = {args.alpha:g}, omega = {args.omega:g}: zeros are fixed points")
    ax.legend(loc="lower left", fontsize=8)
    print("wrote", write_csv(stem + ".csv", cols, order=list(cols)))
    print("wrote", save_figure(fig, stem + ".png"))


if __name__ == "__main__":
    main()
