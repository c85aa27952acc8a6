"""Theory of tied low-rank dot-product attention (spec `tied_attention_theory.md`).

Pure, jittable, vmappable functions: quadrature rules, the Newton proximal
step, the state evolution (SE), the test error and training loss from the
overlaps, and the linear positional baseline.
"""

from phasejax.theory.baselines import linear_baseline_error, linear_baseline_weights
from phasejax.theory.params import (
    PAPER_A,
    PAPER_A_ASYMMETRIC,
    TiedAttentionParams,
    dot_product_attention,
    dot_product_student,
    make_params,
    mixed_target,
    token_swap_symmetric,
    validate_params,
)
from phasejax.theory.prox import EnvelopeDerivatives, ProxResult, envelope_derivatives, moreau_prox, newton_minimize
from phasejax.theory.quadrature import Quadrature, default_quadrature, gauss_hermite, quasi_monte_carlo
from phasejax.theory.state_evolution import (
    BRANCHES,
    CONVERGED,
    INVALID_INPUT,
    INVALID_ITERATE,
    MAX_ITERATIONS,
    STATUS_NAMES,
    BranchInit,
    Hats,
    HatEvaluation,
    Overlaps,
    SEConfig,
    SEResult,
    branch_init,
    field_maps,
    gaussian_fields,
    hat_updates,
    overlap_updates,
    sample_loss,
    solve_state_evolution,
    solve_state_evolution_batch,
    stack_inits,
    BRANCH_DEFAULTS,
    test_error,
    training_loss,
)
