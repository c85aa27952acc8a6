import jax
import numpy as np
import pytest

from phasejax.theory import gauss_hermite, linear_baseline_error, make_params
from phasejax.theory.baselines import linear_baseline_weights


def test_linear_baseline_vanishes_for_a_purely_positional_target():
    assert float(linear_baseline_error(make_params(1.0, 1.0))) < 1e-28


def test_linear_baseline_scales_as_one_minus_omega_squared():
    # T - B = (1 - omega)(softmax - E softmax), so eps_lin(omega) = (1 - omega)^2 eps_lin(0).
    e0 = float(linear_baseline_error(make_params(1.0, 0.0)))
    for w in (0.2, 0.5, 0.9):
        assert float(linear_baseline_error(make_params(1.0, w))) == pytest.approx((1 - w) ** 2 * e0, rel=1e-12)


def test_linear_baseline_against_monte_carlo():
    p = make_params(1.0, 0.3)
    rng = np.random.default_rng(0)
    h = rng.normal(0, 0.5, (400_000, 2))
    z = h[:, 0] * h[:, 1]
    # softmax(H H^T) for L = 2, t = 1: row 1 = sigmoid(h1^2 - h1 h2), row 2 = sigmoid(h2^2 - h1 h2)
    s11 = 1 / (1 + np.exp(z - h[:, 0] ** 2))
    s22 = 1 / (1 + np.exp(z - h[:, 1] ** 2))
    S = np.stack([np.stack([s11, 1 - s11], -1), np.stack([1 - s22, s22], -1)], 1)
    T = 0.7 * S + 0.3 * np.asarray(p.A)
    B = T.mean(0)
    mc = ((T - B) ** 2 * 0.25).sum((1, 2)).mean() / 2
    np.testing.assert_allclose(linear_baseline_weights(p), B, atol=2e-3)
    assert float(linear_baseline_error(p, gauss_hermite(2, 30))) == pytest.approx(mc, rel=0.01)


def test_linear_baseline_vmaps_over_omega():
    """Under a user's vmap the float64 scope is the user's to open (the theory refuses a float32 trace)."""
    from phasejax import float64_scope

    p = make_params(1.0, 0.0)
    with float64_scope():
        out = jax.vmap(lambda w: linear_baseline_error(p.replace(omega=w)))(np.array([0.0, 0.5, 1.0]))
    assert out.shape == (3,) and float(out[2]) < 1e-28 and float(out[0]) > float(out[1])
    with pytest.raises(ValueError, match="float64"):
        jax.vmap(lambda w: linear_baseline_error(p.replace(omega=w)))(np.array([0.0, 0.5, 1.0]))
