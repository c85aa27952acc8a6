"""The ground, threshold and marginal 1RSB states and the large-`y` limit of the reference model (the spherical
perceptron with the quadratic hinge and a negative margin, UNSAT), against an independent computation: the inner
Gaussian average in closed form, adaptive quadrature over the pattern's field, scipy's root finders and Brent's
searches, central differences for the derivatives (docs/rsb.md)."""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, optimize, special, stats

from phasejax.theory.rsb import (
    PerceptronRSB,
    gardner_capacity,
    locate_rsb_states,
    perceptron_large_y,
    perceptron_rule,
    perceptron_states,
    replica_rule,
    rsb_replicon,
    rsb_rule,
    solve_perceptron_rsb,
)

KAPPA = -0.5


def alpha_ref():
    return 1.5 * gardner_capacity(KAPPA)


# ---------------------------------------------------------------------------------------------------------------
# The independent computation
# ---------------------------------------------------------------------------------------------------------------


def log_z(u, D, a):
    """`log E_z exp(-y M(omega0 + sqrt(D) z))` with `u = kappa - omega0`, `M(w) = relu(kappa - w)^2 / (2 (1 + V))`
    (the envelope of the quadratic hinge) and `a = y / (1 + V)`: a Gaussian integral over two half lines."""
    hinge = (-a * u * u / (2 * (1 + a * D)) - 0.5 * np.log1p(a * D)
             + special.log_ndtr(u / np.sqrt(D * (1 + a * D))))
    return np.logaddexp(special.log_ndtr(-u / np.sqrt(D)), hinge)


def below_margin(u, D, a):
    """The states' measure of the fields below the margin (where the envelope's curvature is `1 / (1 + V)`)."""
    hinge = (-a * u * u / (2 * (1 + a * D)) - 0.5 * np.log1p(a * D)
             + special.log_ndtr(u / np.sqrt(D * (1 + a * D))))
    return np.exp(hinge - log_z(u, D, a))


def outer_average(f, D):
    """`E_xi f(kappa - sqrt(1 - D) xi)` by adaptive quadrature, split where the inner average varies fastest."""
    q0 = 1.0 - D
    c, w = KAPPA / np.sqrt(q0), 6.0 * np.sqrt(D / q0)
    pts = [-14.0, c - w, c, c + w, 14.0]
    return sum(integrate.quad(lambda x: stats.norm.pdf(x) * f(KAPPA - np.sqrt(q0) * x), lo, hi, epsabs=1e-15,
                              epsrel=1e-13, limit=500)[0] for lo, hi in zip(pts[:-1], pts[1:]))


def phi_independent(s, V, y, alpha):
    D = s * s
    q0 = 1.0 - D
    a = y / (1.0 + V)
    return (-np.log1p(y * D / V) / (2 * y) - q0 / (2 * (V + y * D))
            - alpha * outer_average(lambda u: log_z(u, D, a), D) / y)


def central_gradient(f, x, h=1e-5):
    x = np.asarray(x, float)
    steps = np.diag(h * np.maximum(1.0, np.abs(x)))
    return np.asarray([(f(x + e) - f(x - e)) / (2 * e[i]) for i, e in enumerate(steps)])


def fixed_y_independent(alpha, y, x0):
    """The stationary point in `(s, V)` at fixed `y`; `Sigma = y^2 dPhi/dy` and `e = Phi + y dPhi/dy`."""
    sol = optimize.root(lambda x: central_gradient(lambda v: phi_independent(v[0], v[1], y, alpha), x), x0,
                        tol=1e-13)
    s, V = sol.x
    eps = 1e-5 * y
    dphi = (phi_independent(s, V, y + eps, alpha) - phi_independent(s, V, y - eps, alpha)) / (2 * eps)
    phi = phi_independent(s, V, y, alpha)
    return dict(s=s, V=V, y=y, delta=s * s, phi=phi, complexity=y * y * dphi, energy=phi + y * dphi)


def replicons_independent(state, alpha):
    """Within the states `alpha (V / (1 + V))^2 E_xi <1[below the margin]>_y`; between them
    `alpha (V + y Delta)^2 E_xi [phi_in''^2]`, `phi_in = -log Z / y`, its second derivative by central
    differences of the closed form."""
    D, V, y = state["delta"], state["V"], state["y"]
    a = y / (1.0 + V)
    within = alpha * (V / (1 + V)) ** 2 * outer_average(lambda u: below_margin(u, D, a), D)
    h = 1e-3 * np.sqrt(D)
    d2 = lambda u: -(log_z(u + h, D, a) - 2 * log_z(u, D, a) + log_z(u - h, D, a)) / (h * h) / y  # noqa: E731
    between = alpha * (V + y * D) ** 2 * outer_average(lambda u: d2(u) ** 2, D)
    return within, between


class FixedY:
    """Independent fixed-`y` states, each started from the nearest one solved."""

    def __init__(self, alpha, x0):
        self.alpha, self.cache, self.x0 = alpha, {}, x0

    def __call__(self, y):
        if y not in self.cache:
            near = min(self.cache, key=lambda k: abs(np.log(k / y))) if self.cache else None
            x0 = [self.cache[near]["s"], self.cache[near]["V"]] if near else self.x0
            self.cache[y] = fixed_y_independent(self.alpha, y, x0)
        return self.cache[y]


def states_independent(alpha):
    """The three states: the ground state by a root of the full gradient (`y` too), the threshold by Brent's bounded
    search of `max_y e(y)`, the marginal state by Brent's root of `within(y) = 1`."""
    f = lambda x: phi_independent(x[0], x[1], x[2], alpha)  # noqa: E731
    sol = optimize.root(lambda x: central_gradient(f, x), [0.47, 2.7, 8.8], tol=1e-13)
    s, V, y = sol.x
    ground = dict(s=s, V=V, y=y, delta=s * s, phi=f(sol.x), energy=f(sol.x), complexity=0.0,
                  gradient=np.max(np.abs(central_gradient(f, sol.x))))
    fy = FixedY(alpha, [np.sqrt(0.3), 3.0])
    for y0 in (4.3, 8.0, 12.0, 16.0):
        fy(y0)
    th = optimize.minimize_scalar(lambda t: -fy(np.exp(t))["energy"], bounds=(np.log(3.0), np.log(6.5)),
                                  method="bounded", options=dict(xatol=1e-6))
    threshold = dict(fy(np.exp(th.x)))
    ym = optimize.brentq(lambda t: replicons_independent(fy(np.exp(t)), alpha)[0] - 1.0, np.log(12.0),
                         np.log(22.0), xtol=1e-8)
    marginal = dict(fy(np.exp(ym)))
    for st in (ground, threshold, marginal):
        st["within"], st["between"] = replicons_independent(st, alpha)
    return dict(ground=ground, threshold=threshold, marginal=marginal)


# ---------------------------------------------------------------------------------------------------------------
# Fast checks: the weighted rule, the replica split, the inputs
# ---------------------------------------------------------------------------------------------------------------


def test_importance_weighted_rule_integrates_gaussian_moments():
    """Both outer rules (plain and importance-weighted, `outer_scale = 2.5`) estimate `E x^2 = 1`, `E x^4 = 3` and
    the quadratic hinge's `E relu(kappa - x)^2 = (1 + kappa^2) Phi(kappa) + kappa phi(kappa)` (closed forms) within
    three times the 95% error of their replicas' spread, and the weighted rule, whose integrands decay in the
    tails, has the smaller spread for each."""
    from phasejax.theory.results import spread_error

    hinge = (1 + KAPPA**2) * stats.norm.cdf(KAPPA) + KAPPA * stats.norm.pdf(KAPPA)
    spread = {}
    for scale in (1.0, 2.5):
        rule = rsb_rule(1, 1, log2_n=10, n_replicas=4, inner_order=3, outer_scale=scale)
        x = np.asarray(rule.outer)[:, 0]
        W = np.asarray(rule.replica_weights)
        np.testing.assert_allclose(W.sum(axis=1), 1.0, rtol=1e-13)
        assert np.asarray(rule.outer_weights).sum() == pytest.approx(1.0, rel=1e-13)
        for name, f, exact in (("x2", x**2, 1.0), ("x4", x**4, 3.0), ("hinge", np.maximum(KAPPA - x, 0.0) ** 2, hinge)):
            est = W @ f
            err = float(spread_error(est.mean(), est, main_is_mean=True))
            assert abs(np.asarray(rule.outer_weights) @ f - exact) <= 3.0 * err, (scale, name, est, exact)
            spread[scale, name] = err
    for name in ("x2", "x4", "hinge"):
        assert spread[2.5, name] < spread[1.0, name], name


def test_replica_rule_holds_one_replica():
    """`replica_rule(rule, r)` is replica `r`'s nodes with its weights: its estimate of a moment is that replica's."""
    rule = rsb_rule(1, 1, log2_n=6, n_replicas=3, inner_order=4, outer_scale=2.0)
    f = np.asarray(rule.outer)[:, 0] ** 2
    for r in range(3):
        sub = replica_rule(rule, r)
        assert np.asarray(sub.outer).shape == (64, 1)
        assert np.asarray(sub.outer_weights) @ np.asarray(sub.outer)[:, 0] ** 2 == pytest.approx(
            np.asarray(rule.replica_weights)[r] @ f, rel=1e-13)


def test_state_search_inputs_raise_naming_the_parameter():
    model = PerceptronRSB(alpha_=jnp.asarray(7.0), kappa=jnp.asarray(KAPPA))
    free = np.asarray([True, True, False])
    rule = perceptron_rule(log2_n=4, inner_order=4)
    with pytest.raises(ValueError, match="y_range"):
        locate_rsb_states(model, [0.6, 4.0, 2.0], free, rule, y_range=(5.0, 2.0))
    with pytest.raises(ValueError, match="n_scan"):
        locate_rsb_states(model, [0.6, 4.0, 2.0], free, rule, n_scan=2)
    with pytest.raises(ValueError, match="outer_scale"):
        rsb_rule(1, 1, outer_scale=0.5)
    with pytest.raises(ValueError, match="kappa"):
        perceptron_states(7.0, 0.5)
    with pytest.raises(ValueError, match="alpha must exceed"):
        perceptron_large_y(2.0, -0.5)      # alpha_G(-0.5) = 4.77: SAT
    with pytest.raises(ValueError, match="kappa"):
        perceptron_large_y(7.0, 0.5)


# ---------------------------------------------------------------------------------------------------------------
# The states by phasejax's code path against the independent computation
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def located():
    return perceptron_states(alpha_ref(), KAPPA, rule=perceptron_rule(log2_n=10, inner_order=32))


@pytest.fixture(scope="module")
def reference():
    return states_independent(alpha_ref())


@pytest.mark.slow
def test_ground_threshold_and_marginal_states_against_an_independent_computation(located, reference):
    """The reference model's three states (`perceptron_states`: fixed-`y` solves on a scan, the free-`y` solve and
    Brent's searches, 95% errors from the same searches on each replica of the outer rule) agree with the
    independent computation within three times those errors plus the inner rule's error: the change of each value
    when the state is solved again with 64 Gauss-Hermite nodes instead of 32 (the envelope's kink at the margin
    makes the replicons converge like `1 / n`; for `y`, that change of the criterion over its slope on the scan).
    The ground state has `Sigma = 0` and is the maximum of `Phi(y)`; the threshold state has the largest
    complexity, positive, below `y*`; the marginal state is beyond `y*` (negative complexity), so every state of
    positive complexity is replicon-unstable (`within > 1`)."""
    alpha = alpha_ref()
    model = PerceptronRSB(alpha_=jnp.asarray(alpha), kappa=jnp.asarray(KAPPA))
    fine_rule = perceptron_rule(log2_n=10, inner_order=64)
    ys = np.asarray(located.scan_y)
    for kind in ("ground", "threshold", "marginal"):
        st, ref = getattr(located, kind), reference[kind]
        assert st.status_name == "converged", kind
        assert int(st.result.missed_minima) == 0
        fine = solve_perceptron_rsb(alpha, KAPPA, np.asarray(st.result.u), mode="fixed_y", rule=fine_rule)
        fine_rep = rsb_replicon(model, fine.u, fine_rule)
        fine_values = dict(phi=float(fine.phi), energy=float(fine.energy), complexity=float(fine.complexity),
                           delta=float(fine.delta), V0=float(fine.V0), within=float(fine_rep.within),
                           between=float(fine_rep.between))
        inner = {key: abs(v - float(getattr(st, key))) for key, v in fine_values.items()}
        k = int(np.clip(np.searchsorted(ys, float(st.y)), 1, len(ys) - 1))
        if kind == "ground":
            slope = (located.scan_complexity[k] - located.scan_complexity[k - 1]) / (ys[k] - ys[k - 1])
            inner["y"] = abs(fine_values["complexity"]) / abs(slope)
        elif kind == "marginal":
            slope = (located.scan_within[k] - located.scan_within[k - 1]) / (ys[k] - ys[k - 1])
            inner["y"] = inner["within"] / abs(slope)
        else:
            inner["y"] = 0.0                     # de/dy = 0: the inner rule moves y at second order
        for key, ref_key in (("y", "y"), ("phi", "phi"), ("energy", "energy"), ("complexity", "complexity"),
                             ("delta", "delta"), ("V0", "V"), ("within", "within"), ("between", "between")):
            if kind == "ground" and key == "complexity":
                assert abs(float(st.complexity)) < 1e-9
                continue
            if kind == "marginal" and key == "within":
                continue                         # 1 by construction
            got, err = float(getattr(st, key)), float(getattr(st, key + "_err"))
            assert np.isfinite(err) and err > 0, (kind, key)
            tol = 3.0 * err + inner[key] + 1e-9 * abs(ref[ref_key])
            assert abs(got - ref[ref_key]) <= tol, (kind, key, got, err, inner[key], ref[ref_key])
        assert float(st.within_jump) == pytest.approx(0.0, abs=1e-12)
    g, t, m = located.ground, located.threshold, located.marginal
    assert float(g.phi) >= np.max(located.scan_phi) - 1e-12
    assert 0 < float(t.y) < float(g.y) < float(m.y)
    assert float(t.complexity) > 0 > float(m.complexity)
    assert float(t.complexity) >= np.max(located.scan_complexity) - 1e-12
    assert float(g.within) - 1 > 3 * float(g.within_err) and float(t.within) - 1 > 3 * float(t.within_err)
    rs = (np.sqrt(alpha / gardner_capacity(KAPPA)) - 1.0) ** 2 / 2.0
    assert float(g.energy) - rs > 100 * float(g.energy_err)


@pytest.mark.slow
def test_ground_state_by_the_free_y_solve_and_by_the_root_of_sigma_agree(located):
    """The free-`y` solve (`mode="ground"`) from the scan's state below `y*` and from one above it end at the same
    state, and a fixed-`y` solve there has `Sigma = 0` within its error (a different route to the same root)."""
    alpha = alpha_ref()
    rule = perceptron_rule(log2_n=10, inner_order=32)
    y = float(located.ground.y)
    for y0 in (0.7 * y, 1.3 * y):
        res = solve_perceptron_rsb(alpha, KAPPA, [0.5, 2.8, y0], mode="ground", rule=rule)
        assert res.status_name == "converged"
        assert float(res.y) == pytest.approx(y, rel=1e-6)
        assert float(res.phi) == pytest.approx(float(located.ground.phi), rel=1e-10)
    fixed = solve_perceptron_rsb(alpha, KAPPA, np.asarray(located.ground.result.u), mode="fixed_y", rule=rule)
    assert abs(float(fixed.complexity)) <= 3.0 * float(fixed.complexity_err) + 1e-10


# ---------------------------------------------------------------------------------------------------------------
# Large y
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_large_y_limit_against_the_independent_computation():
    """`perceptron_large_y`'s closed form (`Delta y -> chi`, `V -> V_inf`, `(Phi - Phi_RS) y -> psi`,
    `Sigma -> -psi`) is the limit of the independent fixed-`y` states at `y = 1e3 .. 1e6`, extrapolated with
    corrections in `y^-1/2` and `y^-1` (the kink of the envelope at the margin, smoothed over a window
    `sqrt(Delta)`), to within the spread of two extrapolations (with and without `y = 1e3`)."""
    alpha = alpha_ref()
    lim = perceptron_large_y(alpha, KAPPA)
    rs = (np.sqrt(alpha / gardner_capacity(KAPPA)) - 1.0) ** 2 / 2.0
    ys = np.asarray([1e3, 3e3, 1e4, 3e4, 1e5, 3e5, 1e6])
    x = np.asarray([np.sqrt(3.1), 1.3])                        # (sqrt(Delta y), V)
    rows = []
    for y in ys:
        f = lambda v: phi_independent(v[0] / np.sqrt(y), v[1], y, alpha)  # noqa: E731
        x = optimize.root(lambda v: central_gradient(f, v, h=1e-4), x, tol=1e-13).x
        s, V = x[0] / np.sqrt(y), x[1]
        eps = 1e-4 * y
        dphi = (phi_independent(s, V, y + eps, alpha) - phi_independent(s, V, y - eps, alpha)) / (2 * eps)
        rows.append(((f(x) - rs) * y, -y * y * dphi, x[0] ** 2, V))
    rows = np.asarray(rows)
    A = np.stack([np.ones_like(ys), ys**-0.5, 1.0 / ys], axis=1)
    for j, key in enumerate(("psi", "psi", "chi", "V_inf")):
        full = np.linalg.lstsq(A, rows[:, j], rcond=None)[0][0]
        part = np.linalg.lstsq(A[1:], rows[1:, j], rcond=None)[0][0]
        assert abs(full - lim[key]) <= 2.0 * abs(full - part) + 1e-3 * abs(lim[key]), (key, full, part, lim[key])
    assert lim["replicon_rs"] == pytest.approx(gardner_capacity(KAPPA) * stats.norm.cdf(KAPPA), rel=1e-12)


@pytest.mark.slow
def test_code_path_on_the_way_to_large_y():
    """At `y = 20` and `50` the code path's fixed-`y` states (`Phi`, `Sigma`, `Delta y`) agree with the independent
    computation within three times their errors plus the inner rule's (the difference between 32 and 64 nodes):
    `(Phi - Phi_RS) y` grows towards `psi` and `Sigma` falls towards `-psi`, not like `1 / y^2` and `1 / y`."""
    alpha = alpha_ref()
    lim = perceptron_large_y(alpha, KAPPA)
    rs = (np.sqrt(alpha / gardner_capacity(KAPPA)) - 1.0) ** 2 / 2.0
    prev = None
    for y in (20.0, 50.0):
        ref = fixed_y_independent(alpha, y, [np.sqrt(2.5 / y), 2.0])
        res = [solve_perceptron_rsb(alpha, KAPPA, [np.sqrt(2.5 / y), 2.0, y], mode="fixed_y",
                                    rule=perceptron_rule(log2_n=10, inner_order=n)) for n in (32, 64)]
        for key in ("phi", "complexity", "delta"):
            got, err = float(getattr(res[1], key)), float(getattr(res[1], key + "_err"))
            inner = abs(got - float(getattr(res[0], key)))
            assert abs(got - ref[key]) <= 3.0 * err + inner + 1e-10, (y, key, got, err, inner, ref[key])
        scaled = ((float(res[1].phi) - rs) * y, float(res[1].complexity))
        assert 0 < scaled[0] < lim["psi"] and -lim["psi"] < scaled[1] < 0
        if prev is not None:
            assert scaled[0] > prev[0] and scaled[1] < prev[1]
        prev = scaled
