#!/usr/bin/env python3
"""Refine SplitProductRule one field at a time at one point and print the fixed point of each rule.

    python scripts/checks/split_rule_refinement.py --branch semantic --alpha 1.1281818181818182 --omega 0.3 \
        [--variants default teacher_coordinates=0,n_piece=24 ...] [--out refinement.json]

A variant is `default` (`SplitProductRule()`) or `field=value[,field=value]` over `SplitProductRule`'s fields
(`n_smooth`, `eta_step`, `eta_range`, `n_piece`, `piece_range`, `teacher_coordinates`: 0 for the plain
`(xi, eta)` layout); by default the plain layout refined one field at a time, then the default rule (the
table of docs/theory.md, section 8.2). Each is solved cold with the default `SEConfig`, and its
q, m, V, theta, test_error, train_loss (each with its 95% error), status and node count are printed as one
JSON line. Compare with a Sobol reference (`scripts/checks/make_certificate_references.py`) to see which part of
the rule carries its error on a branch. One variant costs one compilation and one cold solve.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_certificate_references import KEYS, result_row  # noqa: E402

# the diagnosis of docs/theory.md, section 8.2: the plain layout refined one field at a time, then the default
PLAIN = "teacher_coordinates=0"
DEFAULT_VARIANTS = (PLAIN, *(f"{PLAIN},{f}" for f in ("n_piece=24", "n_smooth=10", "eta_step=0.3", "eta_range=9.0",
                                                      "piece_range=4.0")), "default")
FIELDS = {"n_smooth": int, "eta_step": float, "eta_range": float, "n_piece": int, "piece_range": float,
          "teacher_coordinates": lambda v: {"1": True, "true": True, "0": False, "false": False}[v.lower()]}


def parse_variant(text: str) -> dict:
    if text == "default":
        return {}
    out = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        if name not in FIELDS or not value:
            raise argparse.ArgumentTypeError(f"a variant is 'default' or field=value[,...] over {tuple(FIELDS)}, "
                                             f"got {text!r}")
        try:
            out[name] = FIELDS[name](value)
        except (KeyError, ValueError):
            raise argparse.ArgumentTypeError(f"bad value in {text!r}") from None
    return out


def solve_variant(branch: str, alpha: float, omega: float, fields: dict) -> dict:
    from phasejax.theory import SplitProductRule, make_params, solve_state_evolution

    rule = SplitProductRule(**fields)
    params = make_params(alpha, omega)
    t0 = time.perf_counter()
    res = solve_state_evolution(params, branch, rule)
    row = dict(branch=branch, alpha=alpha, omega=omega, variant=fields or "default", nodes=rule.size)
    row.update(result_row(res, params))
    print(f"{fields or 'default'}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--branch", choices=("positional", "semantic"), required=True)
    ap.add_argument("--alpha", type=float, required=True)
    ap.add_argument("--omega", type=float, required=True)
    ap.add_argument("--variants", type=parse_variant, nargs="+", default=[parse_variant(v) for v in DEFAULT_VARIANTS])
    ap.add_argument("--out", default=None, help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    rows = []
    for fields in args.variants:
        rows.append(solve_variant(args.branch, args.alpha, args.omega, fields))
        print(json.dumps({k: rows[-1][k] for k in ("variant", "nodes", "status", "iterations")}
                         | {k: rows[-1][k] for key in KEYS for k in (key, key + "_err")}), flush=True)
        if args.out:
            from phasejax.io import atomic_write_json

            atomic_write_json(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
