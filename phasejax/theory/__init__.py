"""Theory of tied low-rank dot-product attention (the notes: `docs/theory.md`).

Pure, jittable, vmappable functions: model parameters, quadrature schemes
(with replicas for error estimates), the Newton proximal step, the two
equation blocks of the state evolution, the Newton solver of the fixed
point (single, batched, continued along alpha), the fixed-point census,
the training loss and test error, and the linear positional baseline.
Public entry points compute in float64 inside a scoped switch and return
float64 arrays (see `phasejax.precision`).

This package exports the entry points, the parameter, configuration and
result types, the declared pieces of the model (its loss, its penalty, the
quadrature scheme) and the quadrature rules; the helpers (node fields, the
equation blocks, the Newton steps, the prox's two entry points
`phasejax.theory.prox.moreau_minimizer` and `.moreau_minimizers`, the census
seeds) stay in their modules (`phasejax.theory.fields`, `.updates`, `.newton`,
`.prox`, `.census`, ...).
"""

from phasejax.theory.adjoint import ImplicitAdjoint, NoAdjoint
from phasejax.theory.baselines import linear_baseline_error
from phasejax.theory.branches import BRANCHES, BranchInit, branch_init
from phasejax.theory.census import FixedPointCensus, fixed_point_census
from phasejax.theory.fields import Overlaps
from phasejax.theory.newton import SEConfig
from phasejax.theory.params import TiedAttentionParams, make_params
from phasejax.theory.losses import HuberLoss, SampleLoss, SquareLoss
from phasejax.theory.penalties import Penalty, Ridge
from phasejax.theory.quadrature import (
    Quadrature,
    QuadratureScheme,
    SobolRule,
    SplitProductRule,
    default_scheme,
    gauss_hermite,
)
from phasejax.theory.replicon import RepliconResult, replicon
from phasejax.theory.results import SEResult, result_columns
from phasejax.theory.se_map import MapApproximation
from phasejax.theory.solver import (
    solve_along_alpha,
    solve_state_evolution,
    solve_state_evolution_batch,
    solve_state_evolution_grid,
)
from phasejax.theory.updates import test_error, training_loss

__all__ = [
    # the model, its declared loss and penalty, and its branches
    "make_params", "TiedAttentionParams", "SampleLoss", "SquareLoss", "HuberLoss", "Penalty", "Ridge",
    "BRANCHES", "BranchInit", "branch_init",
    # state evolution: entry points, settings, results
    "solve_state_evolution", "solve_along_alpha", "solve_state_evolution_batch", "solve_state_evolution_grid",
    "SEConfig", "MapApproximation", "SEResult", "result_columns", "Overlaps",
    # derivatives of a solve (`phasejax.theory.adjoint.AbstractAdjoint` to write another)
    "ImplicitAdjoint", "NoAdjoint",
    # every fixed point, and whether replica symmetry holds there
    "fixed_point_census", "FixedPointCensus", "replicon", "RepliconResult",
    # quadrature rules
    "Quadrature", "QuadratureScheme", "SplitProductRule", "SobolRule", "default_scheme", "gauss_hermite",
    # the quantities of a fixed point
    "training_loss", "test_error", "linear_baseline_error",
]
