"""State evolution at one point of the L = 3 problem for a rank-1 and a rank-2 tied student (issue 12, item 5).

    python scripts/general_L_rank2_point.py --alpha 2.1 --log2-n 10 --inits semantic mixed \
        --out results/extensions/general_L/rank2_point.jsonl

Rank 1: the library's branch init; rank 2: `phasejax.extensions.rank2.rank2_init` (rotation gauge fixed),
Sobol rule in `L (r + 1)` dimensions with 4 replicas (95% errors). One JSON line per solve.
"""

import argparse
import json
import os
import time

import jax.numpy as jnp
import numpy as np

from phasejax.extensions.general_L import general_L_params
from phasejax.extensions.rank2 import EXTENSION_SE_CONFIG, invariant_columns, rank2_init
from phasejax.io import atomic_write_text
from phasejax.precision import float64_scope
from phasejax.theory import solve_state_evolution
from phasejax.theory.quadrature import SobolRule


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--alpha", type=float, default=2.1)
    ap.add_argument("--omega", type=float, default=0.3)
    ap.add_argument("--log2-n", type=int, default=10, help="Sobol points per replica: 2^log2_n")
    ap.add_argument("--inits", nargs="+", default=["semantic", "mixed"], choices=["positional", "semantic", "mixed"])
    ap.add_argument("--out", default=os.path.join("results", "extensions", "general_L", "rank2_point.jsonl"))
    args = ap.parse_args()
    lines = []
    with float64_scope():
        for r in (1, 2):
            p = general_L_params(args.alpha, args.omega, r=r)
            rule = SobolRule.create(p.L * (r + 1), args.log2_n, 4)
            for name in args.inits:
                if r == 1 and name == "mixed":
                    continue
                t = time.time()
                res = solve_state_evolution(p, rank2_init(name, p) if r == 2 else name, rule, EXTENSION_SE_CONFIG)
                out = dict(r=r, alpha=args.alpha, omega=args.omega, init=name, status=res.status_name,
                           iterations=int(res.iterations), train_loss=float(res.train_loss),
                           train_loss_err=float(res.errors.train_loss), test_error=float(res.test_error),
                           test_error_err=float(res.errors.test_error), seconds=time.time() - t,
                           rule=f"Sobol 4 x 2^{args.log2_n} in {p.L * (r + 1)} dims")
                if r == 2:
                    out.update({k: float(np.asarray(v)) for k, v in
                                invariant_columns(res.overlaps, p.sigma, res.errors.overlaps).items()
                                if np.size(v) == 1})
                else:
                    out.update(q=float(jnp.ravel(res.q)[0]), m=float(jnp.ravel(res.m)[0]),
                               theta=float(jnp.ravel(res.theta)[0]))
                print(json.dumps(out), flush=True)
                lines.append(json.dumps(out))
    atomic_write_text(args.out, "\n".join(lines) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
