"""Fixed-point census of one subspace at one point: every fixed point found from several seeds.

    phasejax census --alpha 0.6 --omega 0 --branch positional

Prints one JSON line per distinct fixed point (q, m, V, theta, train_loss, test_error, their errors, stability,
subspace gain), sorted by training loss; the first is the branch.
"""

from __future__ import annotations

import sys

from phasejax.commands import flags


NAME = "census"
HELP = "all fixed points of a subspace at one (alpha, omega)"


def add_arguments(ap) -> None:
    flags.add_point(ap, alpha=None, omega=None, required=True)
    ap.add_argument("--branch", choices=("positional", "semantic"), default="positional", help="subspace")
    flags.add_model(ap, A=True)
    flags.add_leave_out(ap, {"newton": "the plain Newton solves (only pseudo-transient ones)"})
    flags.add_progress(ap)


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
