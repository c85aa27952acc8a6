#!/usr/bin/env python3
"""Reference fixed points from a rule of another family, to certify the default quadrature (SplitProductRule).

    python scripts/checks/make_certificate_references.py [--points semantic:1.1:0.3 ...] [--log2-n 16] [--seed 1]

The default rule of the paper's model (`SplitProductRule`, docs/theory.md 8.2) is laid out around the
positional branch's jump sheet; the references of `scripts/checks/make_se_references.py` are a larger rule of the
same family and cannot see a bias the family shares. These references are solved with scrambled Sobol
(`SobolRule.create(4, log2_n, n_replicas=4, seed)`: the union of four independent scrambles of `2**log2_n`
points; its 95% errors come from the standard error of the four scrambles' means).

Points: both branches at alpha in {0.5, 0.8, 1.1, 1.5, 2.0} x omega in {0, 0.3}, the semantic point
alpha = 1.1281818181818182, omega = 0.3, and the semantic branch's collapse region (omega = 0.3, alpha = 0.9;
omega = 0.05, alpha = 0.6). Each row has q, m, V, theta, test_error, train_loss with `_err`, the status and
the iterations; a solve that does not converge is stored with its status and is no part of the certificate
(`tests/theory/test_certificate.py` uses converged rows only). About 1-2 minutes per point on a 2-core CPU
at log2_n = 16. `--points` recomputes a subset (`branch:alpha:omega`) and replaces those rows in the file.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(ROOT, "tests", "theory", "data", "certificate_references.json")
BRANCHES = ("positional", "semantic")
GRID = [(b, a, w) for w in (0.0, 0.3) for a in (0.5, 0.8, 1.1, 1.5, 2.0) for b in BRANCHES]
EXTRA = [("semantic", 1.1281818181818182, 0.3), ("semantic", 0.9, 0.3), ("semantic", 0.6, 0.05)]
POINTS = GRID + EXTRA
KEYS = ("q", "m", "V", "theta", "test_error", "train_loss")
LOG2_N = 16
N_REPLICAS = 4
SEED = 1


def point_id(branch: str, alpha: float, omega: float) -> str:
    return f"{branch}:{alpha!r}:{omega!r}"


def parse_point(text: str) -> tuple[str, float, float]:
    try:
        branch, a, w = text.split(":")
        a, w = float(a), float(w)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a point is branch:alpha:omega, got {text!r}") from None
    if branch not in BRANCHES:
        raise argparse.ArgumentTypeError(f"branch must be one of {BRANCHES}, got {branch!r}")
    return branch, a, w


def rule_description(log2_n: int = LOG2_N, n_replicas: int = N_REPLICAS, seed: int = SEED) -> dict:
    return dict(name="SobolRule", dim=4, log2_n=int(log2_n), n_replicas=int(n_replicas), seed=int(seed),
                nodes=int(n_replicas) * 2 ** int(log2_n))


def make_rule(log2_n: int = LOG2_N, n_replicas: int = N_REPLICAS, seed: int = SEED):
    from phasejax.theory import SobolRule

    return SobolRule.create(4, log2_n=log2_n, n_replicas=n_replicas, seed=seed)


def result_row(res, params) -> dict:
    """The columns of one `SEResult` (token 1's per-token q, V, theta; m) as plain floats."""
    import jax

    from phasejax import float64_scope
    from phasejax.solvers import status_name
    from phasejax.theory import result_columns

    with float64_scope():
        cols = jax.device_get(result_columns(res, params))
    row = {}
    for key in KEYS:
        row[key] = float(cols[key])
        row[key + "_err"] = float(cols[key + "_err"])
    row.update(status=status_name(cols["status"]), iterations=int(cols["iterations"]),
               residual=float(cols["residual"]), energetic_loss=float(cols["energetic_loss"]))
    return row


def reference_point(branch: str, alpha: float, omega: float, log2_n: int = LOG2_N, seed: int = SEED,
                    n_replicas: int = N_REPLICAS, rule=None) -> dict:
    """Solve one point with the Sobol rule; returns the JSON row (values, errors, status, rule)."""
    from phasejax.theory import make_params, solve_state_evolution

    rule = make_rule(log2_n, n_replicas, seed) if rule is None else rule
    params = make_params(alpha, omega)
    t0 = time.perf_counter()
    res = solve_state_evolution(params, branch, rule)
    row = dict(id=point_id(branch, alpha, omega), branch=branch, alpha=float(alpha), omega=float(omega))
    row.update(result_row(res, params))
    row.update(rule=rule_description(log2_n, n_replicas, seed))
    print(f"{row['id']}: {time.perf_counter() - t0:.1f} s", flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=parse_point, nargs="+", default=None,
                    help="recompute only these points (branch:alpha:omega), replacing their rows in --out")
    ap.add_argument("--log2-n", type=int, default=LOG2_N, help="Sobol points per scramble: 2**log2_n")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args(argv)

    from phasejax.io import atomic_write_json, read_json

    points = POINTS if args.points is None else args.points
    report = dict(generator="scripts/checks/make_certificate_references.py",
                  rule=rule_description(args.log2_n, N_REPLICAS, args.seed), points=[])
    if args.points is not None and os.path.exists(args.out):
        report = read_json(args.out)
        if report["rule"] != rule_description(args.log2_n, N_REPLICAS, args.seed):
            print(f"--log2-n/--seed differ from the rule of {args.out} ({report['rule']}); rows would mix rules",
                  file=sys.stderr)
            return 2
    rule = make_rule(args.log2_n, N_REPLICAS, args.seed)
    rows = {p["id"]: p for p in report["points"]}
    for branch, a, w in points:
        row = reference_point(branch, a, w, args.log2_n, args.seed, N_REPLICAS, rule)
        rows[row["id"]] = row
        print({k: row[k] for k in ("id", "status", "iterations", *KEYS)}, flush=True)
        # written after every point: a long run that is stopped keeps what it has
        order = {point_id(*p): i for i, p in enumerate(POINTS)}
        report["points"] = sorted(rows.values(), key=lambda p: (order.get(p["id"], len(order)), p["id"]))
        atomic_write_json(args.out, report)
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
