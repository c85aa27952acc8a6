"""Phase diagrams: grids, fixed-point tracks along alpha, tables, thresholds with errors and spinodals.

The entry points are `phase_diagram(grid, params, config=..., options=...) -> PhaseDiagram` (the map on a grid) and
`phase_boundary(params, omegas, config=..., options=...) -> PhaseBoundary` (the lines `alpha_c`, `alpha_l` and the
spinodals solved directly as curves, `phasejax.phase.boundary`); the thresholds'
rules (`alpha_c_with_error`, `alpha_l_with_error`, `root_with_error`, `crossing_status`) and the verdict of a
branch (`branch_verdicts`) are exported too. The helpers stay in `phasejax.phase.diagram` and
`phasejax.phase.thresholds`.

>>> from phasejax.phase import PhaseGrid
>>> PhaseGrid.from_ranges([1.0, 2.0], [0.3]).alphas
(1.0, 2.0)
"""

from phasejax.phase.diagram import (
    PHASE_BRANCHES,
    THRESHOLD_COLUMNS,
    PhaseConfig,
    PhaseDiagram,
    PhaseGrid,
    branch_verdicts,
    phase_diagram,
)
from phasejax.phase.boundary import BoundaryConfig, PhaseBoundary, phase_boundary
from phasejax.phase.thresholds import alpha_c_with_error, alpha_l_with_error, crossing_status, root_with_error

__all__ = [
    "phase_diagram", "PhaseGrid", "PhaseConfig", "PhaseDiagram", "PHASE_BRANCHES", "THRESHOLD_COLUMNS",
    "phase_boundary", "BoundaryConfig", "PhaseBoundary",
    "alpha_c_with_error", "alpha_l_with_error", "root_with_error", "crossing_status", "branch_verdicts",
]
