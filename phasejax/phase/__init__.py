"""Phase diagrams: grids, fixed-point tracks along alpha, tables, thresholds with errors and spinodals."""

from phasejax.phase.diagram import (
    COLLAPSE_TOL,
    ORDER_PARAMETER,
    PHASE_BRANCHES,
    THRESHOLD_COLUMNS,
    PhaseConfig,
    PhaseDiagram,
    PhaseGrid,
    branch_table,
    branch_verdicts,
    collapse_point,
    derive_table,
    diagram_config,
    make_row_fn,
    phase_diagram,
    point_verdicts,
    points_table,
)
from phasejax.phase.thresholds import (
    alpha_c,
    alpha_c_with_error,
    alpha_l,
    alpha_l_with_error,
    crossing_status,
    first_downcrossing,
    first_upcrossing,
    root_with_error,
)

__all__ = [
    "COLLAPSE_TOL", "ORDER_PARAMETER", "branch_verdicts", "collapse_point", "point_verdicts",
    "PHASE_BRANCHES", "PhaseConfig", "PhaseDiagram", "PhaseGrid", "THRESHOLD_COLUMNS", "alpha_c", "alpha_c_with_error",
    "alpha_l", "alpha_l_with_error", "branch_table", "crossing_status", "derive_table", "diagram_config",
    "first_downcrossing", "first_upcrossing", "make_row_fn", "phase_diagram", "points_table", "root_with_error",
]
