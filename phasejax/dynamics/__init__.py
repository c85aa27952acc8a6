"""Dynamics of online SGD for the single-direction attention student: population loss in the overlaps
`(m, e)`, its high-dimensional SGD ODEs, finite-`d` online SGD and the dynamical phase diagram
(docs/dynamics.md)."""

from phasejax.dynamics.diagram import (
    axis_losses,
    curvature_crossing,
    mechanism_minima,
    minimum_switch,
    ode_phase_diagram,
    plateau_curvatures,
    population_minimum,
    rate_crossing,
)
from phasejax.dynamics.ode import (
    MECHANISMS,
    ODEResult,
    classify_mechanism,
    escape_time_estimate,
    gradient_flow_drift,
    plateau_rates,
    random_init_angles,
    sgd_drift,
    sgd_ode_solve,
    sgd_ode_trajectory,
)
from phasejax.dynamics.population import (
    LOSSES,
    PAPER_PRE_SOFTMAX_A,
    DynamicsParams,
    LossWithError,
    PopulationTable,
    PopulationTerms,
    attention,
    build_population_table,
    fields,
    in_table_range,
    make_dynamics_params,
    population_loss,
    population_loss_with_error,
    plateau_terms,
    population_terms,
    quadrature_rule,
    sample_loss,
    spherical_gradient,
    table_terms,
    target,
)
from phasejax.dynamics.sgd import SGDRun, initial_weights, online_sgd

__all__ = [
    "DynamicsParams", "LOSSES", "LossWithError", "MECHANISMS", "ODEResult", "PAPER_PRE_SOFTMAX_A",
    "PopulationTable", "PopulationTerms", "SGDRun", "attention", "axis_losses", "build_population_table",
    "classify_mechanism", "curvature_crossing", "escape_time_estimate", "fields", "gradient_flow_drift",
    "in_table_range", "initial_weights", "make_dynamics_params", "mechanism_minima", "minimum_switch",
    "ode_phase_diagram", "online_sgd", "plateau_curvatures", "plateau_terms", "plateau_rates", "population_loss",
    "population_loss_with_error", "population_minimum", "population_terms", "quadrature_rule", "random_init_angles",
    "rate_crossing", "sample_loss", "sgd_drift", "sgd_ode_solve", "sgd_ode_trajectory", "spherical_gradient",
    "table_terms", "target"
]
