"""One-step RSB at zero temperature (phasejax.theory.rsb): limits, the multistart, a reference model computed
independently, and the RS limit of the attention model against the RS solver."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, optimize, special, stats

from phasejax import float64_scope
from phasejax.theory import make_params
from phasejax.theory.prox import closed_form_prox
from phasejax.theory.rsb import (
    RSBConfig,
    attention_free,
    attention_replicon,
    attention_rule,
    attention_state,
    dense_minima,
    gardner_capacity,
    ridge_entropic,
    rsb_rule,
    solve_perceptron_rsb,
    solve_rsb,
)


# ---------------------------------------------------------------------------------------------------------------
# The entropic term and its RS limit
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("y", [0.3, 5.0, 400.0])
def test_entropic_term_reduces_to_rs(y):
    """At `Delta = 0` the ridge term is the RS one, `-(q0 - c) / (2 V0) + lam q0 / 2`, whatever `y`; its first order
    in `Delta` is `-1 / (2 V0) + y (q0 - c) / (2 V0^2) + lam / 2` (the series of `log1p` and `1 / (V0 + y Delta)`)."""
    q0, V0, c, lam = 0.3, 12.0, 0.05, 0.01
    with float64_scope():
        e0 = float(ridge_entropic(q0, 0.0, V0, c, y, lam))
        slope = float(jax.grad(lambda d: ridge_entropic(q0, d, V0, c, y, lam))(0.0))
    assert e0 == pytest.approx(-(q0 - c) / (2 * V0) + lam * q0 / 2, rel=1e-14)
    assert slope == pytest.approx(-1 / (2 * V0) + y * (q0 - c) / (2 * V0**2) + lam / 2, rel=1e-12)


# ---------------------------------------------------------------------------------------------------------------
# The dense multistart finds every minimum
# ---------------------------------------------------------------------------------------------------------------


def double_well(h, theta):
    """`sum_i (h_i^2 - a_i^2)^2 / 4 + b_i h_i`: separable, four minima near `(+-a_1, +-a_2)` for small tilts `b`."""
    b, a = theta
    return jnp.sum((h**2 - a**2) ** 2 / 4.0 + b * h)


def double_well_minima(a, b):
    """The exact minima of one coordinate: the real roots of `x^3 - a^2 x + b = 0` with positive curvature."""
    roots = np.roots([1.0, 0.0, -a * a, b])
    roots = np.sort(roots[np.abs(roots.imag) < 1e-12].real)
    return roots[3 * roots**2 - a * a > 0]


def test_dense_multistart_finds_every_minimum():
    """Every one of the four minima of a tilted double well in two dimensions, at every node (different tilts), is
    among the dense multistart's end points, and the lowest it keeps is the global minimum (exact minima: roots of
    a cubic per coordinate)."""
    a = np.asarray([1.3, 0.8])
    rng = np.random.default_rng(1)
    b = rng.uniform(-0.05, 0.05, size=(6, 2))
    with float64_scope():
        omega = jnp.zeros((6, 2))
        h, value, hs, values = dense_minima(double_well, None, (jnp.asarray(b),), (jnp.asarray(a),), omega)
    h, value, hs, values = map(np.asarray, (h, value, hs, values))
    for i in range(6):
        m1, m2 = double_well_minima(a[0], b[i, 0]), double_well_minima(a[1], b[i, 1])
        assert len(m1) == 2 and len(m2) == 2
        exact = np.asarray([[x1, x2] for x1 in m1 for x2 in m2])
        exact_values = np.sum((exact**2 - a**2) ** 2 / 4.0 + b[i] * exact, axis=1)
        for e in exact:
            assert np.min(np.max(np.abs(hs[i] - e), axis=1)) < 1e-9
        assert value[i] == pytest.approx(exact_values.min(), abs=1e-13)
        np.testing.assert_allclose(h[i], exact[np.argmin(exact_values)], atol=1e-9)


@pytest.mark.slow
def test_dense_multistart_finds_both_mirror_minima_of_the_attention_prox():
    """At `omega = 0` the dot-product student's prox is even in `h` (`softmax(h h^T)` does not change under
    `h -> -h`): its minima come in mirror pairs of equal value. The dense multistart finds the pair at every
    teacher field."""
    params = make_params(1.5, 0.3)
    objective, derivatives = closed_form_prox(params)
    with float64_scope():
        hstar = jnp.asarray([[2.0, -1.5], [1.8, 0.3], [-1.2, 2.2]])
        T = jax.vmap(lambda hs: params.target(hs[:, None], params))(hstar)
        omega = jnp.zeros((3, 2, 1))
        V_inv = jnp.full((2, 1, 1), 1.0 / (0.25 * 60.0))
        h, value, hs, values = dense_minima(objective, derivatives, (omega, T), (V_inv, params), omega[:, :, 0])
    h, value, hs, values = map(np.asarray, (h, value, hs, values))
    for i in range(3):
        assert np.max(np.abs(h[i])) > 0.1                       # a non-trivial minimum
        mirror = np.min(np.max(np.abs(hs[i] + h[i]), axis=1))    # its mirror is among the end points
        assert mirror < 1e-8
        assert values[i][np.argmin(np.max(np.abs(hs[i] + h[i]), axis=1))] == pytest.approx(value[i], abs=1e-14)


# ---------------------------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------------------------


def test_invalid_inputs_raise_naming_the_parameter():
    p = make_params(1.2, 0.3)
    u = attention_state(0.19, 0.01, 60.0, 0.25, 0.0, 300.0)
    with pytest.raises(ValueError, match="branch"):
        attention_free(p, "both", "ground")
    with pytest.raises(ValueError, match="mode"):
        solve_rsb(p, u, mode="full")
    with pytest.raises(ValueError, match="y must be > 0"):
        solve_rsb(p, attention_state(0.19, 0.01, 60.0, 0.25, 0.0, -1.0))
    with pytest.raises(ValueError, match="q0 must be > 0"):
        solve_rsb(p, attention_state(-0.1, 0.01, 60.0, 0.25, 0.0, 1.0))
    with pytest.raises(ValueError, match="u0 must have shape"):
        solve_rsb(p, u[:-1])
    with pytest.raises(ValueError, match="kappa"):
        solve_perceptron_rsb(5.0, 0.5, [0.5, 1.0, 1.0])
    with pytest.raises(ValueError, match="n_replicas"):
        rsb_rule(1, 1, n_replicas=1)
    with pytest.raises(ValueError, match="tol"):
        RSBConfig(tol=0.0)


# ---------------------------------------------------------------------------------------------------------------
# The reference model: the spherical perceptron with a negative margin, UNSAT, quadratic hinge
# ---------------------------------------------------------------------------------------------------------------


def _H(x):
    return 0.5 * special.erfc(x / np.sqrt(2.0))


def perceptron_phi_independent(s, V, y, alpha, kappa):
    """`Phi` of the reference model computed independently of phasejax: the envelope of the quadratic hinge in
    closed form (`(kappa - omega)^2 / (2 (1 + V))` below the margin), the inner Gaussian average of
    `exp(-y M)` in closed form (a Gaussian integral on a half line), the outer average by adaptive quadrature."""
    D = s * s
    q0 = 1.0 - D
    a = y / (1.0 + V)

    def integrand(xi):
        u = kappa - np.sqrt(q0) * xi
        Z = _H(u / np.sqrt(D)) + np.exp(-a * u * u / (2 * (1 + a * D))) / np.sqrt(1 + a * D) * (
            1.0 - _H(u / np.sqrt(D * (1 + a * D))))
        return stats.norm.pdf(xi) * np.log(Z)

    outer = integrate.quad(integrand, -12, 12, epsabs=1e-14, epsrel=1e-13, limit=400, points=[kappa / np.sqrt(q0)])[0]
    return -np.log1p(y * D / V) / (2 * y) - q0 / (2 * (V + y * D)) - alpha * outer / y


def perceptron_fixed_y_independent(alpha, kappa, y, x0):
    """The stationary point in `(s, V)` at fixed `y` by scipy's root finder on central differences, and the
    complexity `Sigma = y^2 dPhi/dy` by a central difference in `y`."""
    f = lambda x: perceptron_phi_independent(x[0], x[1], y, alpha, kappa)  # noqa: E731

    def grad(x, h=1e-5):
        out = []
        for i in range(2):
            e = np.zeros(2)
            e[i] = h * max(1.0, abs(x[i]))
            out.append((f(x + e) - f(x - e)) / (2 * e[i]))
        return np.asarray(out)

    sol = optimize.root(grad, x0, tol=1e-12)
    s, V = sol.x
    eps = 1e-5 * y
    dphi = (perceptron_phi_independent(s, V, y + eps, alpha, kappa)
            - perceptron_phi_independent(s, V, y - eps, alpha, kappa)) / (2 * eps)
    return dict(phi=f(sol.x), delta=s * s, V=V, complexity=y * y * dphi, gradient=np.max(np.abs(grad(sol.x))))


@pytest.mark.slow
def test_perceptron_rs_energy_is_gardners_closed_form():
    """By the same code path with `Delta` held at 0, the reference model's RS energy is
    `(sqrt(alpha / alpha_G) - 1)^2 / 2` (stationarity in `V` of
    `-1/(2V) + alpha int Dt (kappa - t)^2 / (2 (1 + V))`)."""
    kappa = -0.5
    alpha = 1.5 * gardner_capacity(kappa)
    res = solve_perceptron_rsb(alpha, kappa, [0.0, 1.0, 1.0], mode="rs",
                               rule=rsb_rule(1, 1, log2_n=14, n_replicas=4, inner_order=1))
    expected = (np.sqrt(alpha / gardner_capacity(kappa)) - 1.0) ** 2 / 2.0
    assert res.status_name == "converged"
    assert abs(float(res.energy) - expected) <= 2.0 * float(res.energy_err) + 1e-7
    assert float(res.energy_err) < 0.01 * expected


@pytest.mark.slow
@pytest.mark.parametrize("y", [2.0, 5.0])
def test_perceptron_1rsb_against_an_independent_computation(y):
    """At fixed `y` the reference model's 1RSB stationary point (`Phi`, `Delta`, `V`, `Sigma`) by phasejax's code
    path (Newton on the gradient, multistart prox at every inner node, Sobol outer rule) agrees with the
    independent closed-form computation to its quadrature error; `Delta > 0` and `Phi` lies above the RS energy."""
    kappa = -0.5
    alpha = 1.5 * gardner_capacity(kappa)
    ref = perceptron_fixed_y_independent(alpha, kappa, y, [0.6, 4.0])
    assert ref["gradient"] < 1e-8
    res = solve_perceptron_rsb(alpha, kappa, [0.6, 4.0, y], mode="fixed_y",
                               rule=rsb_rule(1, 1, log2_n=13, n_replicas=4, inner_order=24))
    assert res.status_name == "converged"
    assert int(res.missed_minima) == 0
    for key, ref_key in (("phi", "phi"), ("delta", "delta"), ("V0", "V"), ("complexity", "complexity")):
        got, err = float(getattr(res, key)), float(getattr(res, key + "_err"))
        assert abs(got - ref[ref_key]) <= 3.0 * err + 1e-6 * abs(ref[ref_key]), (key, got, err, ref[ref_key])
    rs = (np.sqrt(alpha / gardner_capacity(kappa)) - 1.0) ** 2 / 2.0
    assert ref["delta"] > 0.1
    assert ref["phi"] > rs


# ---------------------------------------------------------------------------------------------------------------
# The attention model: RS limit where RS is stable
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_attention_1rsb_collapses_to_rs_where_rs_is_stable():
    """At `lambda = 0.1` (positional branch, `alpha = 1.5`, `omega = 0.3`) no node's prox has two minima and the
    replicon is below 1: started with `Delta > 0`, the 1RSB solution at fixed `y` collapses to `Delta = 0`, and its
    energy and overlaps are the RS solver's (`solve_state_evolution`, another rule and another method: iterated
    hats) within the quadrature errors."""
    from phasejax.theory import solve_state_evolution

    p = make_params(1.5, 0.3, lam=0.1)
    rs = solve_state_evolution(p, "positional")
    q0, m, V0 = float(rs.overlaps.q0[0, 0]), float(rs.overlaps.m[0, 0]), float(rs.overlaps.V0[0, 0])
    rule = attention_rule(p, log2_n=9, inner_order=3)
    res = solve_rsb(p, attention_state(0.9 * q0, 0.05 * q0, V0, m, 0.0, 50.0), mode="fixed_y", rule=rule)
    assert res.status_name == "converged"
    assert float(res.delta) < 1e-6 * q0
    first = lambda x: float(np.ravel(np.asarray(x))[0])  # noqa: E731
    tol = lambda err, rs_err: 2.0 * (first(err) + first(rs_err)) + 1e-9  # noqa: E731
    assert abs(float(res.energy) - float(rs.train_loss)) <= tol(res.energy_err, rs.errors.train_loss)
    assert abs(float(res.q1) - q0) <= tol(res.q1_err, first(rs.q_err) / 0.25)
    assert abs(float(res.u[3]) - m) <= tol(res.u_err[3], rs.m_err)


@pytest.mark.slow
def test_attention_semantic_branch_at_large_alpha_is_rs():
    """On the semantic branch at `alpha = 2`, `omega = 0.3` (`lambda = 0.01`) no node has a competing minimum and
    the replicon is 0.24: started with `Delta > 0`, the 1RSB solution at fixed `y` collapses to `Delta = 0` with
    the RS solver's training loss and overlaps within the quadrature errors."""
    from phasejax.theory import solve_state_evolution

    p = make_params(2.0, 0.3)
    rs = solve_state_evolution(p, "semantic")
    q0, V0, th = float(rs.overlaps.q0[0, 0]), float(rs.overlaps.V0[0, 0]), float(rs.overlaps.theta0[0, 0])
    rule = attention_rule(p, log2_n=9, inner_order=3)
    res = solve_rsb(p, attention_state(0.95 * q0, 0.03 * q0, V0, 0.0, th, 50.0), branch="semantic", mode="fixed_y",
                    rule=rule)
    first = lambda x: float(np.ravel(np.asarray(x))[0])  # noqa: E731
    assert res.status_name == "converged"
    assert float(res.delta) < 1e-6 * q0
    assert abs(float(res.energy) - float(rs.train_loss)) <= 2.0 * (float(res.energy_err) + first(rs.errors.train_loss))
    assert abs(float(res.q1) - q0) <= 2.0 * (float(res.q1_err) + first(rs.q_err) / 0.25)
    assert abs(float(res.u[4]) - th) <= 2.0 * (float(res.u_err[4]) + first(rs.theta_err) / 0.25)


# ---------------------------------------------------------------------------------------------------------------
# The replicons of a 1RSB state
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_rsb_replicons_at_the_rs_point_are_the_rs_replicon():
    """At `Delta = 0` the states' inner measure is one node, so both 1RSB replicons (within and between the states)
    are the RS replicon. At `lambda = 0.1` (no node with two minima) they agree with `phasejax.theory.replicon`
    (another rule: the RS default scheme, another code path: the RS engine's own prox starts and Jacobians) within
    the quadrature errors, and the jump strength is zero."""
    from phasejax.theory import solve_state_evolution
    from phasejax.theory.quadrature import default_scheme
    from phasejax.theory.replicon import replicon

    p = make_params(1.5, 0.3, lam=0.1)
    rs = solve_state_evolution(p, "positional")
    ref = replicon(rs.overlaps, p, default_scheme(p), tie_width=1e-3)
    q0, m, V0 = float(rs.overlaps.q0[0, 0]), float(rs.overlaps.m[0, 0]), float(rs.overlaps.V0[0, 0])
    rule = attention_rule(p, log2_n=8, inner_order=3)
    res = solve_rsb(p, attention_state(q0, 0.0, V0, m, 0.0, 1.0), mode="rs", rule=rule)
    rep = attention_replicon(p, res, rule.rs())
    assert res.status_name == "converged"
    assert float(rep.within) == pytest.approx(float(rep.between), rel=1e-12)
    tol = 2.0 * (float(rep.within_err) + float(ref.regular_err)) + 1e-9
    assert abs(float(rep.within) - float(ref.regular)) <= tol
    assert float(ref.regular) < 1.0 and float(ref.jump) == 0.0
    assert abs(float(rep.within_jump)) < 1e-12 and float(rep.two_minima) == 0.0


def test_replicon_rejects_a_bad_tie_width():
    p = make_params(1.2, 0.3)
    with pytest.raises(ValueError, match="tie_width"):
        attention_replicon(p, None, None, tie_width=0.0)
