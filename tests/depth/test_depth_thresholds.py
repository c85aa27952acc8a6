"""Thresholds of the two-layer model: the bound M_l <= T^2 + T, the control-variate estimators against the direct
one, and the committed thresholds recomputed with an independent rule on fresh draws."""

import csv
import os

import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.depth import grid_rule, moments_unlearned_first, nishimori_mean, outer_moments, rule_for, se_draws
from phasejax.depth.estimators import M_samples, g2_samples

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
THRESHOLDS = os.path.join(ROOT, "results", "depth", "thresholds.csv")
BOUND = 6.0  # T^2 + T for T = 2


def _committed():
    with open(THRESHOLDS) as fh:
        rows = list(csv.DictReader(fh))
    return {k: np.asarray([float(r[k]) if r[k] not in ("", "True", "False") else float(r[k] == "True")
                           for r in rows]) for k in rows[0]}


@pytest.mark.parametrize("skip", [1.0, pytest.param(4.0, marks=pytest.mark.slow)])
def test_control_variates_respect_the_bound_and_estimate_the_same_mean(skip):
    """At Q = 0 the three estimators of M_2 (direct, teacher control variate, its posterior expectation) have one
    mean; the last two never exceed T^2 + T sample by sample, and their combination has a smaller spread."""
    with float64_scope():
        m = moments_unlearned_first(jnp.asarray(0.0), skip, se_draws(2048, seed=21), grid_rule(0.24))
        direct, teacher, post = (np.asarray(a[:, 1]) for a in (m.cov_dev, m.M_teacher, m.M_posterior))
        assert teacher.max() <= BOUND + 1e-9 and post.max() <= BOUND + 1e-9
        n = direct.size
        for x in (teacher, post):
            diff = direct - x  # paired: the common noise cancels
            assert abs(diff.mean()) < 4 * diff.std(ddof=1) / np.sqrt(n)
        mean, se, _ = nishimori_mean(teacher, post)
        assert se < direct.std(ddof=1) / np.sqrt(n)
        assert mean <= BOUND


def test_committed_thresholds_respect_the_bound_with_small_confirmed_errors():
    """Every committed threshold is at least 1 / (T^2 + T), has an error of at most 0.002, and the independent rule
    (Gauss-Hermite mixture, paired draws) reproduces it within that error and its own standard error."""
    th = _committed()
    for layer in (1, 2):
        a, err = th[f"alpha_{layer}"], th[f"alpha_{layer}_err"]
        assert np.all(a >= 1 / BOUND), (layer, a)
        assert np.all(err <= 0.002), (layer, err)
        diff, se = th[f"alpha_{layer}_check_diff"], th[f"alpha_{layer}_check_se"]
        assert np.all(np.abs(diff) <= err + 3 * se), (layer, diff, se, err)
    assert np.all(th["first_layer"] == 2)


def test_committed_thresholds_cover_the_skip_grid_of_the_command():
    """`thresholds.csv` holds every skip strength of `phasejax depth`'s grid, from 0 to 4, in order."""
    from phasejax.commands.depth import SKIP_GRID

    np.testing.assert_array_equal(_committed()["skip"], np.asarray(SKIP_GRID))


@pytest.mark.slow
def test_committed_threshold_at_skip_zero_recomputed_with_the_diagonal_rule():
    """At c = 0 (A(z_1) singular on the diagonal), from fresh draws and the diagonal product rule instead of the
    graded grid: alpha_2 = 1 / M_2 at Q = 0 agrees with the committed value within the errors."""
    from phasejax.depth import diagonal_rule

    th = _committed()
    assert th["skip"][0] == 0.0
    with float64_scope():
        m0 = outer_moments(jnp.zeros(2), 0.0, se_draws(1024, seed=29), diagonal_rule(96))
        M2, M2_se, _ = nishimori_mean(m0.M_teacher[:, 1], m0.M_posterior[:, 1])
        assert M2 <= BOUND
        a2, a2_se = 1 / M2, M2_se / M2**2
        assert abs(a2 - th["alpha_2"][0]) < 4 * np.hypot(a2_se, th["alpha_2_err"][0]), (a2, a2_se)


def test_committed_thresholds_recomputed_with_an_independent_rule():
    """At skip 1, from fresh draws and the Gauss-Hermite mixture instead of the graded grid: alpha_2 = 1 / M_2 at
    Q = 0 agrees with the committed value, and at layer 2's committed overlap q_2* the fixed point's alpha,
    `q_2* / ((1 - q_2*) E|g_2|^2)`, agrees with the committed alpha_1 while layer 1's growth factor there is one."""
    th = _committed()
    i = int(np.argmin(np.abs(th["skip"] - 1.0)))
    assert th["skip"][i] == 1.0
    with float64_scope():
        draws, rule = se_draws(768, seed=23), rule_for(16, 1.0)
        m0 = outer_moments(jnp.zeros(2), 1.0, draws, rule)
        M2, M2_se, _ = nishimori_mean(m0.M_teacher[:, 1], m0.M_posterior[:, 1])
        a2, a2_se = 1 / M2, M2_se / M2**2
        assert abs(a2 - th["alpha_2"][i]) < 4 * np.hypot(a2_se, th["alpha_2_err"][i])
        q2 = th["q2_at_alpha_1"][i]
        m = outer_moments(jnp.asarray([0.0, q2]), 1.0, draws, rule)
        g2, M1 = g2_samples(m, 1), M_samples(m, 0)
        alpha = q2 / ((1 - q2) * g2.mean())
        gain = alpha * M1.mean()
        # relative Monte Carlo error of the gain (both means from the same draws: errors added, an upper bound)
        rel = g2.std(ddof=1) / g2.mean() / np.sqrt(g2.size) + M1.std(ddof=1) / M1.mean() / np.sqrt(M1.size)
        assert abs(gain - 1) < 4 * rel, (gain, rel)
        assert abs(alpha - th["alpha_1"][i]) < 4 * np.hypot(alpha * rel, th["alpha_1_err"][i]), (alpha, rel)


@pytest.mark.slow
def test_the_independent_rule_converges_to_the_grid_at_large_skip():
    """At c = 2 the order-32 mixture of the committed check puts layer 1's crossing 0.002 below the grid's on paired
    draws (`alpha_1_check_diff`, about two of its standard errors); the order-64 mixture agrees with the grid within
    its standard error and at a third or less of the order-32 difference: the difference is the mixture's, not the
    grid's. The branch points bracket the committed `q_2` at the threshold."""
    from phasejax.depth.thresholds import check_crossing, independent_rule, threshold_grid

    th = _committed()
    i = int(np.argmin(np.abs(th["skip"] - 2.0)))
    assert th["skip"][i] == 2.0
    v = 1 - th["q2_at_alpha_1"][i]
    with float64_scope():
        draws, grid = se_draws(768, seed=5), threshold_grid(0.16, 2.0)
        diff = {order: check_crossing(2.0, [v / 1.25, v, 1.25 * v], 1, 0, draws, grid, independent_rule(order, 2.0))
                for order in (32, 64)}
    d32, d64 = (float(diff[o].difference) for o in (32, 64))
    se64 = float(diff[64].difference_se)
    assert abs(d64) < 3 * se64 + 1e-4, (d64, se64)
    assert abs(d64) < abs(d32) / 3, (d32, d64)



# ---------------------------------------------------------------------------------------------------------------
# A point of the learned layer's branch as a root (branch_point)
# ---------------------------------------------------------------------------------------------------------------


def test_branch_point_is_a_fixed_point_of_the_state_evolution_map():
    """The root of `alpha*(q) = alpha` on layer 2's branch (layer 1 at zero, c = 1, alpha = 0.7) is where the
    parametrisation puts it (`learned_branch` at its `V` returns `alpha`), and the state-evolution map with the
    direct estimator `|g_2|^2` (not the combination the root uses) maps it to itself within that map's Monte Carlo
    error on the same draws."""
    from phasejax.depth import branch_point, learned_branch, se_map
    from phasejax.depth.thresholds import threshold_grid

    with float64_scope():
        draws, rule = se_draws(1024, seed=21), threshold_grid(0.24, 1.0)
        p = branch_point(1.0, 0.7, draws=draws, rule=rule)
        assert p.status_name == "converged" and p.residual < 1e-9 and p.n_draws == 1024
        assert 0.9 < p.q < 1.0 and 0 < p.q_err < 0.01 and p.slope > 0
        alpha, _ = learned_branch(1.0, [1.0 - float(p.q)], 1, draws, rule)
        assert float(alpha[0]) == pytest.approx(0.7, rel=1e-8)
        qhat, qhat_se = se_map(jnp.asarray([0.0, float(p.q)]), 0.7, 1.0, draws, rule)
        q_map = float(qhat[1] / (1 + qhat[1]))
        q_map_se = float(qhat_se[1] / (1 + qhat[1]) ** 2)
        assert abs(float(qhat[0])) < 1e-8                 # layer 1 stays at zero (by its sign symmetry)
        assert abs(q_map - float(p.q)) < 4 * q_map_se, (q_map, float(p.q), q_map_se)


@pytest.mark.slow
def test_branch_point_error_is_the_spread_over_independent_draws():
    """The root's Monte Carlo error (first order in the draws' error of `E|g_2|^2`) against the scatter of the
    roots on 8 independent sets of draws: chi^2 / dof of the roots about their mean, with the reported errors,
    within the 97% range of a chi^2 with 7 degrees of freedom."""
    from phasejax.depth import branch_point
    from phasejax.depth.thresholds import threshold_grid

    with float64_scope():
        points = [branch_point(1.0, 0.7, draws=se_draws(512, seed=40 + k), rule=threshold_grid(0.32, 1.0))
                  for k in range(8)]
    q = np.asarray([float(p.q) for p in points])
    err = np.asarray([float(p.q_err) for p in points])
    assert all(p.status_name == "converged" for p in points)
    mean = np.sum(q / err**2) / np.sum(1 / err**2)
    chi2_per_dof = np.sum(((q - mean) / err) ** 2) / (q.size - 1)
    assert 0.25 < chi2_per_dof < 2.4, (q, err, chi2_per_dof)


def test_branch_point_outside_the_branch_and_invalid_inputs():
    """Below the learned layer's threshold (`alpha_2 = 0.186` at c = 1) the branch has no point: the status says
    so and the values are NaN; invalid inputs raise ValueError naming the parameter."""
    from phasejax.depth import branch_point
    from phasejax.depth.thresholds import threshold_grid

    with float64_scope():
        draws, rule = se_draws(256, seed=3), threshold_grid(0.32, 1.0)
        p = branch_point(1.0, 0.1, draws=draws, rule=rule)
        assert p.status_name == "invalid_input" and np.isnan(p.q) and np.isnan(p.q_err)
        for kwargs, name in ((dict(alpha=-1.0), "alpha"), (dict(alpha=0.7, learned=2), "learned"),
                             (dict(alpha=0.7, skip=-1.0), "skip")):
            with pytest.raises(ValueError, match=name):
                branch_point(**dict(dict(skip=1.0, draws=draws, rule=rule), **kwargs))
