"""Depth: deep tied rank-1 attention as a sequence multi-index model (docs/depth.md).

`model`: the network, its sequence multi-index form and the channel inverse;
`posterior`: the posterior of two layers' projections given the sequence index, by a
Gauss-Hermite mixture, by a graded trapezoidal grid, and (small skips) by a product rule along and across the
diagonal, and of three layers' (Gauss-Hermite over the first layer around the two-layer rule); `se`: Bayes-optimal
state evolution (float64, jittable, with `phasejax.solvers.Status`), continuation in alpha, free entropy, test
error; `estimators`: the Monte Carlo estimators the thresholds share (per-sample moments, control-variate
combinations, jackknife errors, crossings); `thresholds`: weak-recovery thresholds per layer (linear stability,
the bound `1 / (T^2 + T)`), the learned layer's branch and its points as roots, and the branch scan for
first-order jumps; `three`: three layers' thresholds in the learning order; `amp`: AMP on finite data, two or
three layers.
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
from phasejax.depth.estimators import nishimori_mean
from phasejax.depth.posterior import (
    DiagonalRule,
    GridRule,
    InnerRule,
    Posterior,
    ThreeRule,
    diagonal_rule,
    gaussian_posterior,
    grid_rule,
    inner_rule,
    posterior,
    posterior_three,
    shared_grid_posterior,
    three_rule,
)
from phasejax.depth.se import (
    DepthSEResult,
    Moments,
    bayes_test_error,
    continuation,
    free_entropy,
    independent_rule,
    moments_unlearned_first,
    outer_moments,
    rule_for,
    se_draws,
    se_map,
    solve_se,
)
from phasejax.depth.three import ThirdThreshold, ThreeSettings, ThreeThresholds, third_threshold, three_thresholds
from phasejax.depth.thresholds import (
    BranchPoint,
    BranchScan,
    LayerThresholds,
    RuleCheck,
    SecondThreshold,
    ThresholdSettings,
    Thresholds,
    branch_point,
    branch_scan,
    check_first,
    check_second,
    estimator_study,
    layer_thresholds,
    learned_branch,
    second_threshold,
    threshold_grid,
    uninformed_thresholds,
)

__all__ = [  # entry points, parameter and result types, rules; the helpers stay in their modules
    "AMPResult",
    "bayes_test_error",
    "branch_point",
    "BranchPoint",
    "branch_scan",
    "BranchScan",
    "continuation",
    "DepthData",
    "DepthSEResult",
    "diagonal_rule",
    "free_entropy",
    "grid_rule",
    "independent_rule",
    "inner_rule",
    "layer_thresholds",
    "LayerThresholds",
    "network_output",
    "posterior",
    "Posterior",
    "rule_for",
    "run_amp",
    "sample_data",
    "se_draws",
    "sequence_index",
    "solve_se",
    "three_rule",
    "three_thresholds",
    "ThreeSettings",
    "ThreeThresholds",
    "ThresholdSettings",
]
