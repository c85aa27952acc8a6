"""One step of replica symmetry breaking (1RSB) at zero temperature (docs/rsb.md).

The replica-symmetric (RS) state evolution describes one minimiser. Where the proximal problem has competing
minima the RS fixed point is replicon-unstable (docs/replica_symmetry.md) and the minima of the training loss
organise in states: two minimisers in the same state overlap by `q1`, two in different states by `q0 < q1`. At
zero temperature the 1RSB order parameters are `q0`, `Delta = q1 - q0`, the response `V0` within a state, `m`,
`theta0` and the Parisi parameter in its zero-temperature scaling `y = beta x` (an inverse energy: states are
weighted by `exp(-y N e)`). For the ridge penalty the free energy per dimension is

    Phi(y) = - log(1 + y Delta / V0) / (2 y) - (q0 - theta0^2 - |m|^2) / (2 (V0 + y Delta)) + lambda (q0 + Delta) / 2
             + alpha E_{xi, eta} [ -(1 / y) log E_z exp(-y M_V(omega0 + sigma sqrt(Delta) z, h*)) ]

with `omega0_l = sigma_l sqrt(q0) xi_l + (C m)_l`, the teacher's field `h*` correlated with `xi` only (through
`theta0`), `z_l` standard normal per token (the fluctuation of the field within a state) and `M_V` the Moreau
envelope of the RS theory (`phasejax.theory.prox`, `V_l = sigma_l^2 V0`). It is extremised in every order
parameter. At `Delta = 0` it is the RS free energy `-(q0 - c) / (2 V0) + lambda q0 / 2 + alpha E M`, whose
stationary point is the RS fixed point (`rs_energy`), and the RS point is a stationary point of `Phi` for every
`y`. The complexity of the states selected by `y` is `Sigma(y) = y^2 dPhi/dy` and their energy
`e(y) = Phi + y dPhi/dy`; the ground state has `Sigma = 0` (`y` extremised too).

The energetic term needs the global minimum of the proximal problem at every node `(xi, eta, z)`: each node is
minimised from its previous minimiser, its mirror, the field and the mirrored field (`lowest_minima`), and a dense
grid of starts (`DENSE_GRID`) is tried at the first evaluation and after convergence; a solve whose check finds a
lower minimum at some node is solved again from the dense minima (`missed_minima` reports what the last check
found). The hats are not written out: the gradient of `Phi` is computed by forward-mode differentiation at fixed
quadrature nodes with the minimisers differentiated by the implicit function theorem (the envelope theorem makes
it the Stein form), and its Jacobian (the Hessian of `Phi`) the same way; the stationary point is found by
Levenberg-Marquardt steps on `grad Phi = 0` (`RSBNewton`, run by `phasejax.solvers.iterate`).

Quadrature: the outer average over `(xi, eta)` on `n_replicas` independently scrambled Sobol rules (the state is
solved on their union; the spread of the replicas' estimates, propagated through the Hessian, gives the 95%
errors, as the RS solver reports them), the inner average over `z` on a tensor Gauss-Hermite rule.

Two models share this code: `TiedAttentionRSB` (the attention model, `L = 2`, `r = t = 1`, both branches by
holding `theta0` or `m` at zero) and `PerceptronRSB` (the spherical perceptron storing random labels with the
quadratic hinge loss and a negative margin, the reference model of the tests, where the inner average has a
closed form).

The code, by job: `rule` (the nested quadrature), `models` (the two models), `solver` (`Phi`, its derivatives,
the Levenberg-Marquardt solve and the entry points), `replicon` (the within- and between-state replicons),
`states` (the ground, threshold and marginal states located in `y`).
"""

from phasejax.theory.rsb.models import (
    RSB_MODES,
    PerceptronRSB,
    TiedAttentionRSB,
    attention_free,
    attention_state,
    gardner_capacity,
    perceptron_large_y,
    ridge_entropic,
)
from phasejax.theory.rsb.replicon import RSBReplicon, attention_replicon, perceptron_replicon, rsb_replicon
from phasejax.theory.rsb.rule import RSBRule, attention_rule, perceptron_rule, replica_rule, rsb_rule
from phasejax.theory.rsb.solver import (
    DENSE_GRID,
    RSBConfig,
    RSBNewton,
    RSBResult,
    dense_minima,
    paired_difference,
    solve_perceptron_rsb,
    solve_rsb,
    solve_rsb_problem,
)
from phasejax.theory.rsb.states import LocatedState, RSBStates, locate_rsb_states, perceptron_states

__all__ = [
    "DENSE_GRID", "LocatedState", "PerceptronRSB", "RSBConfig", "RSBNewton", "RSBReplicon", "RSBResult", "RSBRule",
    "RSBStates", "RSB_MODES", "TiedAttentionRSB", "attention_free", "attention_replicon", "attention_rule",
    "attention_state", "dense_minima", "gardner_capacity", "locate_rsb_states", "paired_difference",
    "perceptron_large_y", "perceptron_replicon", "perceptron_rule", "perceptron_states", "replica_rule",
    "ridge_entropic", "rsb_replicon", "rsb_rule", "solve_perceptron_rsb", "solve_rsb", "solve_rsb_problem",
]
