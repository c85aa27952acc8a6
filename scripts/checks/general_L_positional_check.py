"""Is there a second SE fixed point where the L = 3 students that stay positional end?

At `alpha = 1.1` (equal sigma, omega = 0.3) the positional students of `results/extensions/general_L/runs.csv`
sit at `m ~ 0.27`, `q ~ 0.085`, far from the SE's positional fixed point (`m = 0.194`, `q = 0.109`). This
solves the SE (same Sobol rule as the preset) from the students' seed-mean overlaps at the largest d, once
inside the positional subspace (`theta` held at 0) and once with `m` and `theta` free (`theta` started at
+-0.12 and 0.02 in the SE's units, per token 0.03 and 0.005), and prints where each solve ends.

    python scripts/checks/general_L_positional_check.py          # about 1 minute on 2 CPU cores

Result: the held solve returns to m = 0.19408, q = 0.10889 (e_t 0.00780); every free solve goes
to the semantic fixed point (m = 0.00025, theta = 0.16956, e_t 0.00652; from theta0 = -0.12 its mirror
theta = -0.16956). So the SE has no fixed point near
the students: they sit at finite-d minima next to a fixed point that is unstable out of its subspace, and
fewer of them stay there as d grows (7, 6, 4 of 8 seeds at d = 200, 400, 800).
"""

import os

import jax.numpy as jnp
import numpy as np

from phasejax.extensions.general_L import general_L_params
from phasejax.io import read_csv
from phasejax.precision import float64_scope
from phasejax.theory import result_columns
from phasejax.theory.quadrature import SobolRule
from phasejax.theory.branches import BranchInit, branch_init
from phasejax.theory.solver import solve_state_evolution

RUNS = os.path.join("results", "extensions", "general_L", "runs.csv")


def main(alpha: float = 1.1) -> None:
    runs = read_csv(RUNS)
    s2 = 0.25                                   # sigma_1^2: the table's q, theta are per token
    sel = (runs["alpha"] == alpha) & (runs["se_branch"] == "positional")
    d = max(runs["d"][sel])
    sel &= runs["d"] == d
    q, m = float(np.mean(runs["q"][sel])), float(np.mean(runs["m"][sel]))
    print(f"students at alpha={alpha}, d={d} ({int(sel.sum())} seeds): q={q:.4f}, m={m:.4f}, "
          f"|theta| mean {np.mean(np.abs(runs['theta'][sel])):.4f}")
    with float64_scope():
        p = general_L_params(alpha, 0.3)
        rule = SobolRule.create(6, log2_n=10, n_replicas=4)
        base = branch_init("positional", p)
        for label, theta0, hold in (("theta held at 0", 0.0, True), ("free, theta0 = +0.12", 0.12, False),
                                    ("free, theta0 = -0.12", -0.12, False), ("free, theta0 = 0.02", 0.02, False)):
            ov = base.overlaps.replace(q0=jnp.array([[q / s2]]), m=jnp.array([[m]]), theta0=jnp.array([[theta0]]))
            res = solve_state_evolution(p, BranchInit(ov, jnp.asarray(False), jnp.asarray(hold)), quadrature=rule)
            c = result_columns(res, p)
            print(f"{label}: {res.status_name} after {int(res.iterations)} iterations: " + ", ".join(
                f"{k}={float(np.ravel(c[k])[0]):.5f}" for k in ("q", "m", "theta", "train_loss", "test_error")))


if __name__ == "__main__":
    main()
