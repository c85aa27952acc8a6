"""Solve the tied-attention state evolution at every (alpha, omega) pair and print one JSON line per point.

    phasejax solve --alphas 1 2 --omegas 0.3 --branch semantic

Keys: alpha, omega, branch, q, m, V, theta, test_error, train_loss, residual (each value with `<key>_err`, a
95% half-width of its quadrature error; NaN for a fixed Gauss-Hermite rule), converged, iterations, status,
verdict (converged; absent where the branch's fixed point lies on its invariant plane; unresolved). Exits 1
(after printing every point) when a point did not converge.
q, V, theta are the per-token sigma_1^2 q0, sigma_1^2 V0, sigma_1^2 theta0 (first token; first entry for
r, t > 1); m is the first entry of m. Default quadrature: the converged adapted rule (docs/theory.md, 8.2).
"""

from __future__ import annotations

import sys

from phasejax.commands import flags
from phasejax.commands.argtypes import (
    UsageError, int_between, nonnegative_float, positive_float, positive_int, refuse_duplicates, unit_interval,
)

MAX_QMC_LOG2 = 24
"""`--qmc` accepts at most 2**MAX_QMC_LOG2 points per replica."""
MAX_POINTS = 10**7
"""The most quadrature points per replica of a rule (`--nodes` ** dimension, or `--qmc`)."""
DIMENSION = 4
"""The dimension of the rule of the command's problem (`L (r + t)` with two tokens, `r = t = 1`)."""
MAX_NODES = max(n for n in range(1, 100) if n ** DIMENSION <= MAX_POINTS)
"""The most Gauss-Hermite nodes per dimension `--nodes` accepts: 56, whose rule of 56^4 points stays within
`MAX_POINTS`."""

NAME = "solve"
HELP = "state evolution at (alpha, omega) points, one JSON line each"


def add_arguments(ap) -> None:
    ap.add_argument("--alphas", type=positive_float, nargs="+", help="sample complexities n / d (required)")
    ap.add_argument("--omegas", type=unit_interval, nargs="+", help="positional shares of the target (required)")
    flags.add_hidden_alias(ap, "--alpha", "alphas", type=positive_float, nargs="+")   # the older singular spellings
    flags.add_hidden_alias(ap, "--omega", "omegas", type=unit_interval, nargs="+")
    ap.add_argument("--branch", choices=("positional", "semantic", "agnostic"), default="semantic",
                    help="the subspace solved in (agnostic: both order parameters free)")
    ap.add_argument("--nodes", type=int_between(1, MAX_NODES), default=None,
                    help="use tensor Gauss-Hermite with this many nodes per dimension (no error estimates) "
                         f"instead of the converged default rule; at most {MAX_NODES} (a rule of {MAX_NODES}^"
                         f"{DIMENSION} points)")
    ap.add_argument("--qmc", type=positive_int, default=None,
                    help="use scrambled Sobol with 4 replicas of this many points (rounded up to a power of 2, "
                         f"at most 2^{MAX_QMC_LOG2}) instead of the converged default rule")
    flags.add_model(ap, A=True)
    ap.add_argument("--prox-starts", choices=("multi", "zero"), default="multi",
                    help="multi: the global minimum of each proximal problem; zero: one search from h = 0 "
                         "(the published method)")
    ap.add_argument("--hat-form", choices=("stein", "implicit"), default="stein")
    ap.add_argument("--tie-width", type=nonnegative_float, default=0.0,
                    help="blend a node's prox minima within about this energy of each other "
                         "(MapApproximation.tie_width; 0: the lowest only)")
    ap.add_argument("--tol", type=positive_float, default=1e-7, help="scaled residual at convergence")
    flags.add_progress(ap)


def quadrature_from(args, params):
    """The quadrature the flags ask for: None (the default scheme), Gauss-Hermite or scrambled Sobol."""
    import math

    from phasejax.theory import SobolRule, gauss_hermite

    dim = params.L * (params.r + params.t)
    if args.qmc and args.nodes:
        raise UsageError("--qmc and --nodes exclude each other (one quadrature rule per solve); pass one of them")
    if args.qmc and args.qmc > 2**MAX_QMC_LOG2:
        raise UsageError(f"--qmc {args.qmc} is beyond 2^{MAX_QMC_LOG2} = {2**MAX_QMC_LOG2} points; pass a smaller "
                         "--qmc")
    if args.nodes and (args.nodes > MAX_NODES or args.nodes ** dim > MAX_POINTS):
        raise UsageError(f"--nodes {args.nodes} makes a rule of {args.nodes}^{dim} = {float(args.nodes) ** dim:.3g} "
                         f"points, beyond {MAX_POINTS:.0e}; pass --nodes {int(MAX_POINTS ** (1 / dim))} or fewer")
    if args.qmc:
        return SobolRule.create(dim, log2_n=max(1, math.ceil(math.log2(args.qmc))), n_replicas=4)
    if args.nodes:
        return gauss_hermite(dim, args.nodes)
    return None


def run(args) -> int:
    import jax
    import numpy as np

    from phasejax import float64_scope
    from phasejax.io import json_line
    from phasejax.solvers import status_name
    from phasejax.theory import MapApproximation, SEConfig, make_params, result_columns

    missing = [f for f, v in (("--alphas", args.alphas), ("--omegas", args.omegas)) if v is None]
    if missing:
        raise UsageError(f"the following arguments are required: {', '.join(missing)}")
    refuse_duplicates(args.alphas, "--alphas")
    refuse_duplicates(args.omegas, "--omegas")
    params = make_params(1.0, 0.0, sigma=args.sigma, lam=args.lam, A=np.asarray(args.A).reshape(2, 2))
    alpha, omega = (g.ravel() for g in np.meshgrid(args.alphas, args.omegas, indexing="ij"))
    config = SEConfig(tol=args.tol)
    approximation = MapApproximation(prox_starts=args.prox_starts, hat_form=args.hat_form, tie_width=args.tie_width)
    rule = quadrature_from(args, params)
    res = solve_points(params, alpha, omega, args.branch, rule, config, approximation=approximation,
                       progress=not args.no_progress and sys.stderr.isatty())
    with float64_scope():
        cols = jax.device_get(jax.vmap(lambda r: result_columns(r, params))(res))
    keys = ("q", "m", "V", "theta", "test_error", "train_loss")
    failed = []
    for i in range(alpha.shape[0]):
        row = dict(alpha=float(alpha[i]), omega=float(omega[i]), branch=args.branch)
        for k in keys:
            row[k] = float(cols[k][i])
            row[k + "_err"] = float(cols[k + "_err"][i])
        row.update(residual=float(cols["residual"][i]), converged=bool(cols["converged"][i]),
                   iterations=int(cols["iterations"][i]), status=status_name(cols["status"][i]),
                   stability=float(cols["stability"][i]), subspace_gain=float(cols["subspace_gain"][i]))
        row["verdict"] = point_verdict(row)
        if not row["converged"]:
            failed.append(f"alpha={row['alpha']:g} omega={row['omega']:g}: {row['status']} "
                          f"(residual {row['residual']:.1e})")
        print(json_line(row), flush=True)
    if failed:
        print(f"phasejax solve: error: {len(failed)} of {alpha.shape[0]} points did not converge: "
              + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


def solve_points(params, alpha, omega, branch, rule, config, *, progress: bool, approximation=None):
    """`solve_state_evolution_batch` over the points (`approximation`: a `MapApproximation`, `None` for the
    default). On a CPU, where a batch solves its points one after the
    other anyway, one call per point (the program is compiled once, for the first point), under a progress bar
    with an ETA when `progress`; the output does not depend on whether stderr is a terminal. On an accelerator
    one batch, the points side by side, after a line on stderr when `progress`."""
    import jax
    import jax.numpy as jnp

    from phasejax.theory import MapApproximation, solve_state_evolution_batch

    approx = MapApproximation() if approximation is None else approximation
    n = alpha.shape[0]
    if n == 1 or jax.default_backend() != "cpu":
        if progress:
            print(f"solving {n} point{'s' if n > 1 else ''} in one compiled batch (compilation included) ...",
                  file=sys.stderr, flush=True)
        return solve_state_evolution_batch(params, alpha, omega, branch, rule, config, approximation=approx)
    from tqdm.auto import tqdm

    points = tqdm(range(n), unit="point", desc=f"{n} points (the first compiles)", dynamic_ncols=True,
                  disable=not progress)
    parts = [solve_state_evolution_batch(params, alpha[i:i + 1], omega[i:i + 1], branch, rule, config,
                                         approximation=approx)
             for i in points]
    return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *parts)


def point_verdict(row: dict) -> str:
    """`converged`; `absent: ...` where the branch's fixed point lies on its invariant plane (it collapsed onto
    the agnostic fixed point: the branch does not exist there); `unresolved: <status>`. As the phase diagram's
    verdicts (`phasejax.phase.branch_verdicts`)."""
    from phasejax.phase import PHASE_BRANCHES
    from phasejax.phase.diagram import COLLAPSE_TOL, ORDER_PARAMETER

    if not row["converged"]:
        return "unresolved: " + row["status"]
    name = dict(zip(PHASE_BRANCHES, ORDER_PARAMETER)).get(row["branch"])
    if name is not None and abs(row[name]) <= COLLAPSE_TOL:
        return f"absent: the fixed point lies on the invariant plane {name} = 0"
    return "converged"
