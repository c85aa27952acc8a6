"""Depth: deep tied rank-1 attention as a sequence multi-index model (docs/depth.md).

`model`: the network, its sequence multi-index form and the channel inverse;
`posterior`: the posterior of two layers' projections given the sequence index, by a
Gauss-Hermite mixture and by a graded trapezoidal grid; `se`: Bayes-optimal state
evolution of the two-layer model (float64, jittable, with `phasejax.solvers.Status`),
continuation in alpha, free entropy, test error; `thresholds`: weak-recovery thresholds
per layer (linear stability, the bound `1 / (T^2 + T)`, control-variate estimators) and
the branch scan for first-order jumps; `three`: three layers (posterior, thresholds in the
learning order); `amp`: AMP on finite data, two or three layers.
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
from phasejax.depth.posterior import (
    GridRule,
    InnerRule,
    Posterior,
    gaussian_posterior,
    grid_rule,
    inner_rule,
    posterior,
    shared_grid_posterior,
)
from phasejax.depth.se import (
    DepthSEResult,
    Moments,
    bayes_test_error,
    continuation,
    free_entropy,
    moments_unlearned_first,
    outer_moments,
    rule_for,
    se_draws,
    se_map,
    solve_se,
)
from phasejax.depth.three import (
    ThirdThreshold,
    ThreeRule,
    ThreeSettings,
    ThreeThresholds,
    posterior_three,
    third_threshold,
    three_rule,
    three_thresholds,
)
from phasejax.depth.thresholds import (
    BranchScan,
    LayerThresholds,
    RuleCheck,
    SecondThreshold,
    ThresholdSettings,
    Thresholds,
    branch_scan,
    check_first,
    check_second,
    estimator_study,
    layer_thresholds,
    learned_branch,
    nishimori_mean,
    second_threshold,
    uninformed_thresholds,
)

__all__ = [
    "AMPResult",
    "BranchScan",
    "DepthData",
    "DepthSEResult",
    "GridRule",
    "InnerRule",
    "LayerThresholds",
    "Moments",
    "Posterior",
    "RuleCheck",
    "SecondThreshold",
    "ThirdThreshold",
    "ThreeRule",
    "ThreeSettings",
    "ThreeThresholds",
    "ThresholdSettings",
    "Thresholds",
    "attention",
    "bayes_test_error",
    "branch_scan",
    "check_first",
    "check_second",
    "continuation",
    "estimator_study",
    "free_entropy",
    "gaussian_posterior",
    "grid_rule",
    "inner_rule",
    "layer_thresholds",
    "learned_branch",
    "mixing_matrix",
    "model_output",
    "moments_unlearned_first",
    "network_output",
    "nishimori_mean",
    "outer_moments",
    "posterior",
    "posterior_three",
    "rule_for",
    "run_amp",
    "sample_data",
    "se_draws",
    "se_map",
    "second_threshold",
    "sequence_index",
    "sequence_index_from_output",
    "shared_grid_posterior",
    "solve_se",
    "third_threshold",
    "three_rule",
    "three_thresholds",
    "uninformed_thresholds",
]
