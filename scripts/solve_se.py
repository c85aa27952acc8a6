#!/usr/bin/env python3
"""Solve the tied-attention state evolution at every (alpha, omega) pair in one vmapped call.

    python scripts/solve_se.py --alpha 1 2 --omega 0.3 --branch semantic --nodes 10

prints one JSON line per point with keys alpha, omega, branch, q, m, V,
theta, test_error, train_loss, converged, iterations (plus status and
residual). q, V, theta are the per-token sigma_1^2 q0, sigma_1^2 V0,
sigma_1^2 theta0 of the spec (first token; first entry for r, t > 1); m is
the first entry of m (K = 1 in the paper's setting).
"""

from __future__ import annotations

import argparse
import json

import jax
import numpy as np

from phasejax.theory import BRANCHES, STATUS_NAMES, SEConfig, gauss_hermite, make_params, quasi_monte_carlo
from phasejax.theory import result_columns, solve_state_evolution_batch


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alpha", type=float, nargs="+", required=True)
    ap.add_argument("--omega", type=float, nargs="+", required=True)
    ap.add_argument("--branch", choices=BRANCHES, default="semantic")
    ap.add_argument("--nodes", type=int, default=10, help="Gauss-Hermite nodes per dimension")
    ap.add_argument("--qmc", type=int, default=0, help="use this many quasi-Monte-Carlo points instead")
    ap.add_argument("--sigma", type=float, default=0.5)
    ap.add_argument("--lam", type=float, default=0.01)
    ap.add_argument("--A", type=float, nargs=4, default=[0.6, 0.4, 0.4, 0.6], metavar=("A11", "A12", "A21", "A22"))
    ap.add_argument("--prox-starts", choices=("multi", "zero"), default="multi")
    ap.add_argument("--hat-form", choices=("stein", "implicit"), default="stein")
    ap.add_argument("--tol", type=float, default=1e-8)
    args = ap.parse_args(argv)

    A = np.asarray(args.A).reshape(2, 2)
    params = make_params(1.0, 0.0, sigma=args.sigma, lam=args.lam, A=A)
    alpha, omega = (g.ravel() for g in np.meshgrid(args.alpha, args.omega, indexing="ij"))
    dim = params.L * (params.r + params.t)
    quad = quasi_monte_carlo(dim, args.qmc) if args.qmc else gauss_hermite(dim, args.nodes)
    config = SEConfig(prox_starts=args.prox_starts, hat_form=args.hat_form, tol=args.tol)
    res = solve_state_evolution_batch(params, alpha, omega, args.branch, quad, config)
    cols = jax.device_get(jax.vmap(lambda r: result_columns(r, params))(res))
    keys = ("q", "m", "V", "theta", "test_error", "train_loss", "residual")
    for i in range(alpha.shape[0]):
        row = dict(alpha=float(alpha[i]), omega=float(omega[i]), branch=args.branch)
        row.update({k: float(cols[k][i]) for k in keys})
        row.update(converged=bool(cols["converged"][i]), iterations=int(cols["iterations"][i]),
                   status=STATUS_NAMES[int(cols["status"][i])])
        print(json.dumps(row))


if __name__ == "__main__":
    main()
