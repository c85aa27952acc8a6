"""Population loss in the overlaps: against Monte Carlo on the finite-d model, limits and invariances."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.dynamics import make_dynamics_params, population_loss
from phasejax.dynamics.population import (
    population_loss_with_error, population_terms, quadrature_rule, sample_loss, spherical_gradient, table_terms,
)


def _monte_carlo_loss(params, m, e, d=64, n=30000, seed=0):
    """Mean and standard error of the per-sample loss of a student with overlaps (m, e) at finite d, from
    explicit d-dimensional vectors and tokens (no use of the field formulas of the module)."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((d, 3)))[0]            # orthonormal: teacher, u, rest
    wstar = np.sqrt(d) * basis[:, 0]
    u = basis[:, 1]
    w = np.sqrt(d) * (m * basis[:, 0] + e * u + np.sqrt(1 - m**2 - e**2) * basis[:, 2])
    x = rng.standard_normal((n, 2, d)) / np.sqrt(d) * float(params.sigma)
    p = np.asarray(params.signs)[:, None] * u[None, :] / np.sqrt(d)
    hstar = x @ wstar
    h = (x + p) @ w
    with float64_scope():
        ell = np.asarray(jax.vmap(lambda a, b: sample_loss(a, b, params))(jnp.asarray(hstar), jnp.asarray(h)))
    return ell.mean(), ell.std() / np.sqrt(n)


@pytest.mark.parametrize("loss,omega,m,e,sigma", [("square", 0.4, 0.5, 0.3, 1.0), ("square", 0.8, 0.2, 0.7, 0.7),
                                                  ("frobenius", 0.65, 0.4, 0.4, 1.0)])
def test_population_loss_matches_monte_carlo_on_the_finite_d_model(loss, omega, m, e, sigma):
    params = make_dynamics_params(omega, sigma=sigma, loss=loss)
    mc, se = _monte_carlo_loss(params, m, e)
    q = population_loss_with_error(m, e, params, order=8)
    assert abs(float(q.loss) - mc) < 4 * se + 2 * float(q.error), (float(q.loss), mc, se, float(q.error))
    assert float(q.error) < 0.02 * float(q.loss)


def test_omega_one_limit_loss_does_not_depend_on_the_semantic_overlap():
    # omega = 1: the target is the constant matrix A, so only the student's marginal law matters, and the
    # student fields' law does not depend on m at unit norm
    params = make_dynamics_params(1.0)
    r = population_loss_with_error(jnp.asarray([0.0, 0.5, 0.9]), jnp.asarray([0.3, 0.3, 0.3]), params, order=8)
    # exact in the integral; the tensor rule is not rotation invariant, so equal up to its error estimate
    loss, err = np.asarray(r.loss), np.asarray(r.error)
    assert np.ptp(loss) < 2 * err.max()
    assert err.max() < 1e-3


def test_omega_zero_limit_teacher_direction_has_zero_loss_and_is_a_critical_point():
    params = make_dynamics_params(0.0)
    with float64_scope():
        rule = quadrature_rule(2, 8)
        assert float(jax.jit(lambda m: population_loss(m, 0.0, params, rule))(1.0)) == 0.0
        t = jax.jit(lambda m: population_terms(m, 0.0, params, rule))(0.999999)
        gm, ge = spherical_gradient(0.999999, 0.0, t.dR_dm, t.dR_de)
        assert abs(float(gm)) < 1e-4 and abs(float(ge)) < 1e-12


def test_parities_and_autodiff_gradient_against_finite_differences():
    params = make_dynamics_params(0.6)
    with float64_scope():
        rule = quadrature_rule(2, 8)
        loss = jax.jit(lambda m, e: population_loss(m, e, params, rule))
        R = lambda m, e: float(loss(m, e))
        m, e = 0.35, 0.25
        assert R(-m, e) == pytest.approx(R(m, e), rel=1e-12)
        assert R(m, -e) == pytest.approx(R(m, e), rel=1e-12)   # token swap with p -> -p
        t = jax.jit(lambda m, e: population_terms(m, e, params, rule))(m, e)
        h = 1e-5
        assert float(t.dR_dm) == pytest.approx((R(m + h, e) - R(m - h, e)) / (2 * h), rel=1e-6)
        assert float(t.dR_de) == pytest.approx((R(m, e + h) - R(m, e - h)) / (2 * h), rel=1e-6)
        assert float(t.loss) == pytest.approx(R(m, e), rel=1e-12)


def test_table_interpolates_the_direct_quadrature(small_table):
    params = make_dynamics_params(0.5)
    with float64_scope():
        rule = quadrature_rule(2, 8)
        for m, e, om in [(0.13, 0.07, 0.62), (-0.41, 0.55, 0.2), (0.7, -0.33, 0.95)]:
            a = table_terms(small_table, m, e, om)
            b = population_terms(m, e, params.replace(omega=jnp.asarray(om)), rule)
            for x, y in zip(a, b):
                assert abs(float(x) - float(y)) < 2e-3 * max(abs(float(y)), 0.05)


def test_invalid_parameters_raise():
    with pytest.raises(ValueError, match="omega"):
        make_dynamics_params(1.5)
    with pytest.raises(ValueError, match="loss"):
        make_dynamics_params(0.5, loss="l1")
    with pytest.raises(ValueError, match="sigma"):
        make_dynamics_params(0.5, sigma=0.0)
