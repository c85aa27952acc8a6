#!/usr/bin/env python3
"""Reference fixed points from a much larger rule, for the test that the default's error bars cover its error.

    python scripts/checks/make_se_references.py [--out tests/theory/data/se_references.json]

At alpha in {0.5, 1.1} x omega in {0, 0.3}, both branches: solves with
`SplitProductRule(n_smooth=10, eta_step=0.3, n_piece=24)` (225,600 nodes, 11x the default, with its own
replica errors) and writes q, m, V, theta, e_t, eps_g with their errors and the status. About 10 minutes
on a 2-core CPU. The slow test `test_references_are_reproducible` recomputes one point.
"""

from __future__ import annotations

import argparse
import datetime
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POINTS = [(a, w) for a in (0.5, 1.1) for w in (0.0, 0.3)]
LARGE = dict(n_smooth=10, eta_step=0.3, n_piece=24)


def reference_point(alpha: float, omega: float, branch: str) -> dict:
    import jax.numpy as jnp

    from phasejax.theory import SplitProductRule, make_params, solve_state_evolution

    res = solve_state_evolution(make_params(alpha, omega), branch, SplitProductRule(**LARGE))
    row = dict(alpha=alpha, omega=omega, branch=branch, status=res.status_name, iterations=int(res.iterations))
    for key in ("q", "m", "V", "theta"):
        row[key] = float(jnp.ravel(getattr(res, key))[0])
        row[key + "_err"] = float(jnp.ravel(getattr(res, key + "_err"))[0])
    row.update(train_loss=float(res.train_loss), train_loss_err=float(res.errors.train_loss),
               test_error=float(res.test_error), test_error_err=float(res.errors.test_error))
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "theory", "data", "se_references.json"))
    args = ap.parse_args(argv)
    import jax

    from phasejax.io import atomic_write_json

    rows = []
    for a, w in POINTS:
        for branch in ("positional", "semantic"):
            rows.append(reference_point(a, w, branch))
            print(rows[-1], flush=True)
    report = dict(date=datetime.date.today().isoformat(), device=str(jax.devices()[0].device_kind),
                  rule=dict(name="SplitProductRule", **LARGE), generator="scripts/checks/make_se_references.py",
                  points=rows)
    print("wrote", atomic_write_json(args.out, report))


if __name__ == "__main__":
    main()
