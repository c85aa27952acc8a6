"""Theory of tied low-rank dot-product attention (the notes: `docs/theory.md`).

Pure, jittable, vmappable functions: model parameters, quadrature schemes
(with replicas for error estimates), the Newton proximal step, the two
equation blocks of the state evolution, the Newton solver of the fixed
point (single, batched, continued along alpha), the fixed-point census,
the training loss and test error, and the linear positional baseline.
Public entry points compute in float64 inside a scoped switch and return
float64 arrays (see `phasejax.precision`).
"""

from phasejax.solvers import STATUS_NAMES, Status
from phasejax.theory.baselines import linear_baseline_error, linear_baseline_weights
from phasejax.theory.census import CENSUS_SEEDS, FixedPointCensus, census_seeds, dedupe, fixed_point_census
from phasejax.theory.fields import (
    FieldMaps,
    Hats,
    Overlaps,
    field_maps,
    gaussian_fields,
    overlaps_valid,
    sample_loss,
    split_node,
)
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
from phasejax.theory.prox import (
    EnvelopeDerivatives,
    ProxResult,
    envelope_derivatives,
    moreau_minimizer,
    moreau_minimizers,
    moreau_prox,
    newton_minimize,
    prox_omega_jacobian,
    tie_weights,
)
from phasejax.theory.quadrature import (
    FixedRule,
    Quadrature,
    SobolRule,
    SplitProductRule,
    default_quadrature,
    default_scheme,
    gauss_hermite,
    quasi_monte_carlo,
)
from phasejax.theory.results import SEErrors, SEResult, result_columns
from phasejax.theory.branches import BRANCH_DEFAULTS, BRANCHES, BranchInit, branch_init, stack_inits
from phasejax.theory.newton import SEConfig
from phasejax.theory.se_map import MapApproximation
from phasejax.theory.solver import (
    map_points,
    solve_along_alpha,
    solve_state_evolution,
    solve_state_evolution_batch,
    solve_state_evolution_grid,
)
from phasejax.theory.updates import (
    hats_from_nodes,
    hold_hats,
    node_values,
    overlap_updates,
    test_error,
    training_loss,
)

__all__ = [
    "BRANCHES", "BRANCH_DEFAULTS", "BranchInit", "CENSUS_SEEDS", "EnvelopeDerivatives", "FieldMaps",
    "FixedPointCensus", "FixedRule", "Hats", "MapApproximation", "Overlaps", "PAPER_A", "PAPER_A_ASYMMETRIC",
    "ProxResult",
    "Quadrature", "SEConfig", "SEErrors", "SEResult", "STATUS_NAMES", "SobolRule", "SplitProductRule", "Status",
    "TiedAttentionParams", "branch_init", "census_seeds", "dedupe", "default_quadrature", "default_scheme",
    "dot_product_attention", "dot_product_student", "envelope_derivatives", "field_maps", "fixed_point_census",
    "gauss_hermite", "gaussian_fields", "hats_from_nodes", "hold_hats", "linear_baseline_error",
    "linear_baseline_weights", "make_params", "map_points", "mixed_target", "moreau_minimizer", "moreau_minimizers",
    "moreau_prox",
    "newton_minimize", "node_values", "overlap_updates", "overlaps_valid", "prox_omega_jacobian",
    "quasi_monte_carlo",
    "result_columns", "sample_loss", "solve_along_alpha", "solve_state_evolution", "solve_state_evolution_batch",
    "solve_state_evolution_grid",
    "split_node", "stack_inits", "test_error", "tie_weights", "token_swap_symmetric", "training_loss", "validate_params",
]
