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
from phasejax.phase.sweep import atomic_write_bytes, atomic_write_json, atomic_write_text, config_fingerprint, run_chunked
from phasejax.phase.thresholds import alpha_c, alpha_l, first_downcrossing

__all__ = [
    "PHASE_BRANCHES",
    "PhaseDiagram",
    "PhaseGrid",
    "alpha_c",
    "alpha_l",
    "by_branch",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "config_fingerprint",
    "derive_table",
    "first_downcrossing",
    "make_chunk_fn",
    "phase_diagram",
    "run_chunked",
]
