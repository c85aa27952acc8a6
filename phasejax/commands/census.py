"""Fixed-point census of one subspace at one point: every fixed point found from several seeds.

    phasejax census --alpha 0.6 --omega 0 --branch positional

Prints one JSON line per distinct fixed point (q, m, V, theta, train_loss, test_error, their errors, stability,
subspace gain), sorted by training loss; the first is the branch.
"""

from __future__ import annotations

import sys

from phasejax.commands.argtypes import finite_float, nonnegative_float, positive_float, unit_interval

NAME = "census"
HELP = "all fixed points of a subspace at one (alpha, omega)"


def add_arguments(ap) -> None:
    ap.add_argument("--alpha", type=positive_float, required=True)
    ap.add_argument("--omega", type=unit_interval, required=True)
    ap.add_argument("--branch", choices=("positional", "semantic"), default="positional", help="subspace")
    ap.add_argument("--sigma", type=positive_float, default=0.5)
    ap.add_argument("--lam", type=nonnegative_float, default=0.01)
    ap.add_argument("--A", type=finite_float, nargs=4, default=[0.6, 0.4, 0.4, 0.6], metavar=("A11", "A12", "A21", "A22"),
                    help="the target's positional part A, row by row (target: (1 - omega) softmax + omega A); any "
                         "finite entries are accepted: with rows not summing to one the target's attention rows "
                         "do not sum to one either")
    ap.add_argument("--no-newton", action="store_true", help="only pseudo-transient solves (no plain Newton)")
    ap.add_argument("--no-progress", action="store_true", help="no progress line (drawn only on a terminal)")


def run(args) -> int:
    import jax
    import numpy as np

    from phasejax import float64_scope
    from phasejax.io import json_line
    from phasejax.theory import fixed_point_census, make_params, result_columns

    params = make_params(args.alpha, args.omega, sigma=args.sigma, lam=args.lam, A=np.asarray(args.A).reshape(2, 2))
    if not args.no_progress and sys.stderr.isatty():
        print("solving from every census seed in one compiled batch (compilation included: about half a minute "
              "on a CPU core) ...", file=sys.stderr, flush=True)
    c = fixed_point_census(params, args.branch, newton_too=not args.no_newton)
    with float64_scope():
        cols = jax.device_get(jax.vmap(lambda r: result_columns(r, params))(c.results))
    idx = [i for i in np.argsort(np.asarray(cols["train_loss"])) if bool(c.distinct[i])]
    keys = ("q", "m", "V", "theta", "train_loss", "test_error")
    for rank, i in enumerate(idx):
        row = dict(alpha=args.alpha, omega=args.omega, subspace=args.branch, branch=rank == 0)
        for k in keys:
            row[k], row[k + "_err"] = float(cols[k][i]), float(cols[k + "_err"][i])
        row.update(stability=float(cols["stability"][i]), subspace_gain=float(cols["subspace_gain"][i]))
        print(json_line(row))
    if not idx:
        print(json_line(dict(alpha=args.alpha, omega=args.omega, subspace=args.branch, found=0)))
    return 0
