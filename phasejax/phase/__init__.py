"""Phase diagrams: grids, chunked resumable sharded sweeps, thresholds."""

from phasejax.phase.diagram import (
    PHASE_BRANCHES,
    PhaseDiagram,
    PhaseGrid,
    by_branch,
    derive_table,
    make_chunk_fn,
    phase_diagram,
)
from phasejax.phase.thresholds import alpha_c, alpha_l, first_downcrossing

__all__ = [
    "PHASE_BRANCHES",
    "PhaseDiagram",
    "PhaseGrid",
    "alpha_c",
    "alpha_l",
    "by_branch",
    "derive_table",
    "first_downcrossing",
    "make_chunk_fn",
    "phase_diagram",
]
