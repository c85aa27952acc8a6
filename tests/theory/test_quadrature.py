import chex
import numpy as np
import pytest

from phasejax.theory import default_quadrature, gauss_hermite, quasi_monte_carlo


def test_gauss_hermite_normalised_and_exact_on_polynomials():
    q = gauss_hermite(3, 5)
    chex.assert_shape(q.points, (125, 3))
    assert np.isclose(float(q.weights.sum()), 1.0, atol=1e-14)
    z = np.asarray(q.points)
    w = np.asarray(q.weights)
    # Gaussian moments: E z^2 = 1, E z^4 = 3, E z^6 = 15, E z1^2 z2^4 = 3, odd moments 0.
    assert np.isclose(w @ z[:, 0] ** 2, 1.0, atol=1e-13)
    assert np.isclose(w @ z[:, 1] ** 4, 3.0, atol=1e-12)
    assert np.isclose(w @ z[:, 2] ** 6, 15.0, atol=1e-11)
    assert np.isclose(w @ (z[:, 0] ** 2 * z[:, 1] ** 4), 3.0, atol=1e-12)
    assert abs(w @ (z[:, 0] * z[:, 2] ** 2)) < 1e-13


def test_quasi_monte_carlo_is_fixed_and_gaussian():
    a = quasi_monte_carlo(6, 4096)
    b = quasi_monte_carlo(6, 4096)
    np.testing.assert_array_equal(np.asarray(a.points), np.asarray(b.points))
    z = np.asarray(a.points)
    assert np.all(np.isfinite(z))
    np.testing.assert_allclose(z.mean(0), 0.0, atol=0.01)
    np.testing.assert_allclose(np.cov(z.T), np.eye(6), atol=0.03)
    # E[cos(z1) cos(z2)] = exp(-1): a smooth non-polynomial test of the rule
    assert abs(float(a.expect(np.cos(z[:, 0]) * np.cos(z[:, 1]))) - np.exp(-1.0)) < 2e-3


def test_default_quadrature_switches_rule_with_dimension():
    assert default_quadrature(4).size == 10**4
    assert default_quadrature(6).size == 8192


@pytest.mark.parametrize("kwargs", [dict(dim=0, order=3), dict(dim=2, order=0), dict(dim=12, order=10)])
def test_gauss_hermite_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        gauss_hermite(**kwargs)
