"""Why the rank-2 semantic row does not converge at the CPU preset's rule: a diagnosis at one point.

Solves the rank-2 SE from the semantic init (`phasejax.extensions.rank2`) at one alpha (omega = 0.3) with
the preset's Sobol rule (4 scrambles of 2^log2_n points in 6 dimensions), then re-evaluates the map at the
last accepted point three ways: with the solver's two alternating prox starts (mode 0: mirror, mode 1:
field) from the accepted node minimisers, and once more at the trial point the solver would take next. It
prints the scaled residual per coordinate (`|F - x| / max(1, |x|)`, coordinates in `ravel(Overlaps)`
order: q0 (4), m (2), V0 (4), theta0 (2)), how many nodes change their minimiser between the modes, and
the fraction of nodes whose prox did not converge.

    python scripts/checks/rank2_semantic_residual.py            # alpha = 1.3, log2_n = 11, 150 iterations (~3 min)
    python scripts/checks/rank2_semantic_residual.py 1.8 11 150

Results (alpha = 1.3, log2_n = 11): the solve stops at max_iterations with residual 0.016; the
residual sits in V0's off-diagonal entry (|V0_12| = 0.39 against V0_ii = 98 and 141) and in V0_22; the two
modes give residuals 0.18 and 0.016 although only 1 of the 8192 nodes changes its minimiser between them,
and the trial point one Newton step of size 1e-9 away has residual 0.028 with one node unconverged. A single
node moves F by more than the tolerance: the map is discontinuous at the rule's resolution.
"""

import dataclasses
import sys

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.extensions.rank2 import EXTENSION_SE_CONFIG, rank2_init, rank2_params
from phasejax.precision import float64_scope
from phasejax.theory.quadrature import SobolRule
from phasejax.theory.branches import free_mask
from phasejax.theory.newton import NewtonSE, run_newton
from phasejax.theory.se_map import SEProblem, se_map


def main(alpha: float = 1.3, log2_n: int = 11, max_iter: int = 150) -> None:
    with float64_scope():
        p = rank2_params(alpha, 0.3)
        ib = rank2_init("semantic", p)
        rule = SobolRule.create(6, log2_n, 4)
        cfg = dataclasses.replace(EXTENSION_SE_CONFIG, max_iter=max_iter)
        solver = NewtonSE(cfg)
        st = jax.jit(lambda p, ib, rule: run_newton(solver, SEProblem(p, rule, ib)))(p, ib, rule)
        print(f"alpha={alpha} log2_n={log2_n}: status {int(st.status)} after {int(st.it)} iterations, "
              f"residual {float(st.residual):.3g}")
        free = free_mask(ib)
        print("x_eval", np.round(np.asarray(st.x_eval), 4).tolist())
        hs = []
        for label, x, mode in (("mode 0 at x_eval", st.x_eval, 0), ("mode 1 at x_eval", st.x_eval, 1),
                               ("trial point", st.x, 0)):
            ev = se_map(SEProblem(p, rule, ib), x, st.warm, mode)
            scaled = jnp.where(free, jnp.abs(ev.Fx - x) / jnp.maximum(1.0, jnp.abs(x)), 0.0)
            print(f"{label}: |x - x_eval|max {float(jnp.max(jnp.abs(x - st.x_eval))):.2g}, scaled residual "
                  f"{np.round(np.asarray(scaled), 5).tolist()}, unconverged nodes {float(ev.prox_unconverged):.2g}")
            hs.append(ev.h)
        moved = int(jnp.sum(jnp.max(jnp.abs(hs[0] - hs[1]), axis=1) > 1e-4))
        print(f"nodes whose minimiser differs between modes 0 and 1: {moved} of {hs[0].shape[0]}")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(float(args[0]) if args else 1.3, int(args[1]) if len(args) > 1 else 11,
         int(args[2]) if len(args) > 2 else 150)
