"""Depth: deep tied rank-1 attention as a sequence multi-index model (docs/depth.md).

`model`: the network, its sequence multi-index form and the channel inverse;
`se`: Bayes-optimal state evolution of the two-layer model (float64, jittable,
with `phasejax.solvers.Status`), continuation in alpha, free entropy, test error;
`thresholds`: weak-recovery thresholds per layer (linear stability) and the
branch scan for first-order jumps; `amp`: AMP on finite data.
"""

from phasejax.depth.amp import AMPResult, DepthData, run_amp, sample_data
from phasejax.depth.model import (
    attention,
    mixing_matrix,
    model_output,
    network_output,
    sequence_index,
    sequence_index_from_output,
)
from phasejax.depth.se import (
    DepthSEResult,
    bayes_test_error,
    continuation,
    free_entropy,
    inner_rule,
    outer_moments,
    posterior,
    se_draws,
    se_map,
    solve_se,
)
from phasejax.depth.thresholds import (
    BranchScan,
    ConditionalThreshold,
    Thresholds,
    branch_scan,
    conditional_threshold,
    uninformed_thresholds,
)

__all__ = [
    "AMPResult",
    "BranchScan",
    "ConditionalThreshold",
    "DepthData",
    "DepthSEResult",
    "Thresholds",
    "attention",
    "bayes_test_error",
    "branch_scan",
    "conditional_threshold",
    "continuation",
    "free_entropy",
    "inner_rule",
    "mixing_matrix",
    "model_output",
    "network_output",
    "outer_moments",
    "posterior",
    "run_amp",
    "sample_data",
    "se_draws",
    "se_map",
    "sequence_index",
    "sequence_index_from_output",
    "solve_se",
    "uninformed_thresholds",
]
