"""Depth: the network -> model mapping, the channel inverse, a one-layer reduction against a closed form,
the weak-recovery threshold against the state evolution's departure from zero, AMP against the SE (slow)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.depth import (
    bayes_test_error,
    continuation,
    free_entropy,
    inner_rule,
    model_output,
    network_output,
    outer_moments,
    se_draws,
    se_map,
    sequence_index,
    sequence_index_from_output,
    solve_se,
    uninformed_thresholds,
)
from phasejax.depth.se import Q_MAX, grid_rule, posterior, rule_for
from phasejax.solvers import Status


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_network_equals_sequence_multi_index_model(layers):
    """The attention network computed on d-dimensional tokens equals g(Z) of the projections Z = W X / sqrt(d)."""
    with float64_scope():
        d = 300
        X = jax.random.normal(jax.random.PRNGKey(0), (5, 2, d))
        W = jax.random.normal(jax.random.PRNGKey(1), (layers, d))
        Z = jnp.einsum("ntd,ld->nlt", X, W) / jnp.sqrt(d)
        for skip in (0.0, 0.7, 3.0):
            np.testing.assert_allclose(network_output(X, W, skip), model_output(Z, skip), atol=1e-13)


def test_output_determines_the_sequence_index_up_to_sign():
    with float64_scope():
        Z = jax.random.normal(jax.random.PRNGKey(2), (50, 2, 2))
        u = sequence_index(Z, 1.3)
        v = sequence_index_from_output(model_output(Z, 1.3))
        err = jnp.minimum(jnp.abs(u - v).max(-1), jnp.abs(u + v).max(-1))
        assert float(err.max()) < 1e-9
        # each layer's sign is invisible in the output
        flip = Z.at[:, 0].multiply(-1.0)
        np.testing.assert_allclose(model_output(flip, 1.3), model_output(Z, 1.3), atol=1e-14)


def test_channel_inverse_reads_saturated_rows():
    """Where a row of the output saturates (its large entry rounds to 1, the small one is still held to full
    relative precision), the sequence index is read from both entries of the row: `u` to 1e-9 relative for
    projections large enough that `1 - y` has lost every digit of the small entry."""
    with float64_scope():
        u = jnp.asarray([[13.0, 6.0], [-9.0, -2.5], [0.5, 12.0], [7.0, -6.0], [0.3, -0.2]])
        y = jax.nn.softmax(u[:, :, None] * u[:, None, :], axis=-1)
        assert bool(jnp.any(y == 1.0))  # saturated rows
        v = sequence_index_from_output(y)
        err = jnp.minimum(jnp.abs(u - v).max(-1), jnp.abs(u + v).max(-1)) / jnp.abs(u).max(-1)
        assert float(err.max()) < 1e-9, err


def test_amp_start_is_independent_of_the_data():
    """`amp_keys` gives the data and AMP's start independent streams: no token of the data has more than a chance
    overlap with the start's random direction (`|xi . x| / d` of order `1 / sqrt(d)`; a start drawn from one of the
    tokens' keys has overlap 1 with a token)."""
    from phasejax.depth import sample_data
    from phasejax.depth.amp import amp_keys, initial_estimate

    with float64_scope():
        d = 400
        data_key, start_key = amp_keys(jax.random.PRNGKey(7))
        data = sample_data(data_key, d, 1.0, 1.0, layers=3)
        xi = initial_estimate(jnp.zeros_like(data.W), start_key, 1.0, 0.0)  # run_amp's random direction
        overlaps = jnp.abs(jnp.einsum("ld,ntd->lnt", xi, data.X)) / d
        assert float(overlaps.max()) < 6 / np.sqrt(d)
        assert float(jnp.abs(xi @ data.W.T).max()) / d < 6 / np.sqrt(d)


def test_posterior_rules_agree():
    """The two independent rules for the posterior (Gauss-Hermite mixture, graded trapezoidal grid) give the same
    moments and evidence, also on the narrow ridge (small V_2, the mixture's ridge components), where the mixture
    approaches the grid as its order grows (the grid is converged at step 0.16: halving it changes nothing)."""
    with float64_scope():
        rng = np.random.default_rng(3)
        skip = 0.7
        for V, order in (([0.6, 0.5], 32), ([1.0, 0.05], 64)):
            V = jnp.asarray(V)
            om = jnp.sqrt(1 - V)[None, :, None] * rng.standard_normal((3, 2, 2))
            u = sequence_index(om + jnp.sqrt(V)[None, :, None] * rng.standard_normal((3, 2, 2)), skip)
            ridge = bool(V[1] < 0.5 * V[0])

            def both(u, om):
                return (posterior(u, om, V, skip, rule_for(order, skip), ridge),
                        posterior(u, om, V, skip, grid_rule(0.16)))

            a, b = jax.jit(jax.vmap(both))(u, om)
            np.testing.assert_allclose(a.second, b.second, atol=1e-2, rtol=1e-2)
            np.testing.assert_allclose(a.mean, b.mean, atol=1e-2)
            np.testing.assert_allclose(a.log_evidence, b.log_evidence, atol=1e-2)


def test_diagonal_rule_agrees_with_the_graded_grid_at_skip_zero():
    """At c = 0, A(z_1) is singular on the diagonal and the posterior of z_1 vanishes within ~sqrt(2 |u_d|) of it
    (u_d: the sequence index across the diagonal). The product rule along and across the diagonal (Gauss-Hermite x
    Gauss-Legendre in log|delta|) and the graded grid (trapezoidal, sinh-graded) share no node; they agree on the
    moments and the evidence at Q = 0 and on the ridge (V_2 = 0.07), also for a sample with |u_d| ~ 1e-5."""
    from phasejax.depth import diagonal_rule

    with float64_scope():
        rng = np.random.default_rng(41)
        skip = 0.0
        for V in ([1.0, 1.0], [1.0, 0.07]):
            V = jnp.asarray(V)
            om = jnp.sqrt(1 - V)[None, :, None] * rng.standard_normal((4, 2, 2))
            u = sequence_index(om + jnp.sqrt(V)[None, :, None] * rng.standard_normal((4, 2, 2)), skip)
            u = u.at[0].set(jnp.asarray([0.6, 0.60002]))  # next to the diagonal

            def both(u, om):
                return (posterior(u, om, V, skip, diagonal_rule(96)),
                        posterior(u, om, V, skip, grid_rule(0.08, grading=1e-4)))

            a, b = jax.jit(jax.vmap(both))(u, om)
            np.testing.assert_allclose(a.log_evidence, b.log_evidence, atol=2e-3)
            np.testing.assert_allclose(a.mean, b.mean, atol=2e-3)
            np.testing.assert_allclose(a.second, b.second, atol=5e-3, rtol=1e-3)
            np.testing.assert_allclose(a.fourth, b.fourth, atol=2e-2, rtol=1e-3)


def test_one_layer_reduction_against_closed_form():
    """With layer 1 known (q_1 -> 1) the output reveals +-z_2: the posterior of z_2 sits on the two points
    +-z_2 with weights N(+-z_2; omega_2, V_2), so E[z_2] = z_2 tanh(omega_2 . z_2 / V_2), and at q_2 = 0 the
    layer-2 stability constant is E|z z^T - I|_F^2 = E|z|^4 - 2 E|z|^2 + T = 6 for T = 2 (weak recovery at 1/6)."""
    with float64_scope():
        draws, rule, skip = se_draws(64, seed=5), rule_for(8, 1.0), 1.0
        q = jnp.asarray([Q_MAX, 0.3])
        m = outer_moments(q, skip, draws, rule)
        V2 = 1 - q[1]
        omega2 = jnp.sqrt(q[1]) * draws.xi[:, 1]
        z2 = omega2 + jnp.sqrt(V2) * draws.eta[:, 1]
        g = (z2 * jnp.tanh(jnp.sum(omega2 * z2, -1) / V2)[:, None] - omega2) / V2
        closed = jnp.sum(g**2, -1)
        assert float(jnp.median(jnp.abs(m.g2[:, 1] - closed) / (closed + 1))) < 0.02
        np.testing.assert_allclose(m.g2[:, 1].mean(), closed.mean(), rtol=0.03)
        m0 = outer_moments(jnp.asarray([Q_MAX, 0.0]), skip, draws, rule)
        z = draws.eta[:, 1]
        exact = jnp.sum((z[:, :, None] * z[:, None, :] - jnp.eye(2)) ** 2, (-1, -2))
        # layer 1 is known up to sqrt(1 - Q_MAX) ~ 0.02, which moves z_2 = A(z_1)^{-1} u by a few percent
        np.testing.assert_allclose(m0.cov_dev[:, 1], exact, rtol=0.1, atol=0.05)
        np.testing.assert_allclose(m0.cov_dev[:, 1].mean(), exact.mean(), rtol=0.03)
        # closed form E |z z^T - I|_F^2 = T (E z^4 - 2 E z^2 + 1) + T (T - 1) = T^2 + T = 6 for T = 2
        assert abs(float(exact.mean()) - 6.0) < 4 * float(exact.std()) / np.sqrt(exact.size)


@pytest.mark.slow
def test_threshold_matches_departure_of_the_state_evolution():
    """Layer 2 leaves q_2 = 0 exactly where its growth factor exceeds one: the SE map's growth factor at small q_2
    (the direct estimator E|g_2|^2 / q_2) and the control-variate estimate alpha M_2 of `uninformed_thresholds`
    are two estimators of one number, and the solve stays at zero below the map's own threshold and leaves it
    above."""
    with float64_scope():
        draws, rule, skip = se_draws(128, seed=7), inner_rule(8), 1.0
        th = uninformed_thresholds(skip, draws, rule)
        assert float(th.alpha0[1]) >= 1 / 6  # the bound M_2 <= T^2 + T holds for the estimator itself
        qhat, qhat_se = se_map(jnp.asarray([0.0, 1e-5]), 1.0, skip, draws, rule)
        assert float(qhat[0]) < 1e-20  # layer 1 stays at zero (sign symmetry)
        gain, gain_se = float(qhat[1]) / 1e-5, float(qhat_se[1]) / 1e-5
        a2 = 1.0 / gain  # the map's own threshold on these draws
        assert abs(gain - float(th.M[1])) < 3 * np.hypot(gain_se, float(th.M_se[1]))
        below = solve_se(0.8 * a2, skip, q0=(0.0, 1e-3), draws=draws, rule=rule, max_iterations=60, tol=1e-9)
        above = solve_se(1.25 * a2, skip, q0=(0.0, 1e-3), draws=draws, rule=rule, max_iterations=150, tol=1e-9)
        assert float(below.q[1]) < 1e-6
        assert float(above.q[1]) > 0.02
        assert int(above.status) == Status.CONVERGED and not bool(np.any(above.clipped))
        assert float(above.error) < 1e-9
        # far above both thresholds the map pushes both overlaps past the cap: converged, but flagged
        high = solve_se(8.0, skip, q0=(0.5, 0.5), draws=draws, rule=rule, max_iterations=100)
        assert int(high.status) == Status.CONVERGED and bool(np.all(high.clipped))
        np.testing.assert_allclose(high.q, Q_MAX)


def test_depth_functions_reject_bad_inputs():
    with pytest.raises(ValueError, match="q must"):
        free_entropy(jnp.asarray([0.2, 1.2]), 1.0, 1.0)
    with pytest.raises(ValueError, match="alpha"):
        free_entropy(jnp.asarray([0.2, 0.2]), -1.0, 1.0)
    with pytest.raises(ValueError, match="skip"):
        bayes_test_error(jnp.asarray([0.2, 0.2]), -0.5)
    with pytest.raises(ValueError, match="q must"):
        bayes_test_error(jnp.asarray([0.2, 0.2, 0.2, 0.2]), 1.0)  # two or three layers only
    with pytest.raises(ValueError, match="n_samples"):
        bayes_test_error(jnp.asarray([0.2, 0.2]), 1.0, n_samples=1)


@pytest.mark.slow
def test_se_map_is_vmappable():
    with float64_scope():
        draws, rule = se_draws(16, seed=1), inner_rule(6)
        qs = jnp.asarray([[0.0, 0.1], [0.2, 0.3]])
        out = jax.vmap(lambda q: se_map(q, 0.5, 1.0, draws, rule)[0])(qs)
        np.testing.assert_allclose(out[1], se_map(qs[1], 0.5, 1.0, draws, rule)[0], rtol=1e-12)


def test_invalid_inputs_raise():
    with pytest.raises(ValueError, match="alpha"):
        solve_se(-1.0, 1.0)
    with pytest.raises(ValueError, match="skip"):
        uninformed_thresholds(-0.5)
    with pytest.raises(ValueError, match="q0"):
        continuation([0.5], 1.0, q0=(1.5, 0.0))


@pytest.mark.slow
def test_amp_fixed_point_matches_state_evolution():
    """AMP on data (d = 2000, alpha = 1.2, skip 1; 3 seeds; start m = q = 0.1 on both layers) ends at the SE's
    fixed point within the finite-size band (3 standard deviations over seeds plus 2 / sqrt(d))."""
    from phasejax.depth import run_amp, sample_data
    from phasejax.depth.amp import amp_keys

    with float64_scope():
        rule, skip, alpha, d = inner_rule(10), 1.0, 1.2, 2000
        se = solve_se(alpha, skip, draws=se_draws(1024, seed=3), rule=rule, max_iterations=200, tol=1e-8)
        ms = []
        for s in range(3):
            data_key, start_key = amp_keys(jax.random.PRNGKey(s))
            res = run_amp(sample_data(data_key, d, alpha, skip), skip, start_key, q_init=0.1, m_init=0.1, rule=rule)
            ms.append(np.asarray(res.m))
        ms = np.asarray(ms)
        band = 3 * ms.std(0, ddof=1) + 2 / np.sqrt(d)
        assert np.all(np.abs(ms.mean(0) - np.asarray(se.q)) < band), (ms, se.q)


def test_depth_command_flags():
    """`phasejax depth` takes the shared flags: `--seed`, `--no-progress`, `--out`/`--overwrite`, and `--layers`."""
    from phasejax.cli import build_parser

    args = build_parser().parse_args(["depth", "--layers", "3", "--seed", "4", "--no-progress", "--no-amp",
                                      "--skip-grid", "0.5,2", "--out", "somewhere"])
    assert (args.layers, args.seed, args.no_progress, args.no_amp, args.skip_grid, args.out) == \
        (3, 4, True, True, (0.5, 2.0), "somewhere")
    assert build_parser().parse_args(["depth"]).no_progress is False


@pytest.mark.slow
def test_state_evolution_reports_its_stopping_reason():
    """The state evolution stops on its convergence test (slow test above: `CONVERGED`, with the estimated distance
    to the fixed point below `tol`); a cap reached first is reported as `MAX_ITERATIONS`, not as converged."""
    with float64_scope():
        capped = solve_se(0.9, 1.0, draws=se_draws(8, seed=2), rule=inner_rule(4), max_iterations=2)
        assert int(capped.status) == Status.MAX_ITERATIONS and int(capped.iterations) == 2
        assert float(capped.error) > 0
