"""The replicon eigenvalue (phasejax.theory.replicon) against closed forms and its smoothing limit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.theory import SobolRule, gauss_hermite, make_params
from phasejax.theory.fields import Overlaps
from phasejax.theory.fields import field_maps, gaussian_fields, split_node
from phasejax.theory.prox import newton_minimize, tie_weights
from phasejax.theory.quadrature import FixedRule
from phasejax.theory.replicon import (
    REPLICON_MAX_STEPS,
    REPLICON_MU0,
    REPLICON_STEPS,
    node_jacobians,
    replicon,
    rs_stable,
    spectral_radius,
)
from phasejax.theory.prox import moreau_objective


def linear_output(h, params):
    """A linear 'student' `S(h) = [[h]]` (`L = r = 1`): the loss is `sigma^2 (y - h)^2 / 2`, ridge regression."""
    return h[:1, :1]


def identity_target(hstar, params):
    return hstar[:1, :1]


def ridge_fixed_point_V0(alpha, sigma, lam):
    """`V0` of ridge regression on `y = h*` with the loss `sigma^2 (y - h)^2 / 2` per sample, in closed form:
    `V0 = 1 / (lam + alpha sigma^4 / (1 + sigma^4 V0))` is a quadratic in `V0` (its positive root)."""
    s4 = sigma**4
    # lam s4 V0^2 + (lam + alpha s4 - s4) V0 - 1 = 0
    a, b, c = lam * s4, lam + alpha * s4 - s4, -1.0
    return (-b + np.sqrt(b * b - 4 * a * c)) / (2 * a)


@pytest.mark.parametrize("alpha,lam", [(0.5, 0.1), (2.0, 0.01), (3.0, 1.0)])
def test_ridge_regression_closed_form(alpha, lam):
    """`L = r = t = 1`, linear output: `d prox / d omega = 1 / (1 + sigma^2 V)`, so the textbook replicon
    `alpha E[(1 - d prox / d omega)^2]` is `alpha (sigma^2 V / (1 + sigma^2 V))^2`, below 1 (convex loss)."""
    sigma = 0.7
    params = make_params(alpha, 0.0, sigma=sigma, lam=lam, A=np.eye(1), target=identity_target,
                         student=linear_output)
    V0 = ridge_fixed_point_V0(alpha, sigma, lam)
    V = sigma**2 * V0
    expected = alpha * (sigma**2 * V / (1 + sigma**2 * V)) ** 2
    with float64_scope():
        ov = Overlaps(q0=jnp.array([[0.3]]), m=jnp.zeros((1, 1)), V0=jnp.array([[V0]]), theta0=jnp.array([[0.2]]))
        res = replicon(ov, params, FixedRule(gauss_hermite(2, 4)), tie_width=0.0)
    assert float(res.value) == pytest.approx(expected, rel=1e-9)
    assert float(res.regular) == pytest.approx(expected, rel=1e-9)
    assert float(res.jump) == 0.0
    assert expected < 1.0


def coupled_linear_student(h, params):
    """A linear `S(h)` (`L = 2`, `r = 2`) whose entries mix both tokens' fields: cross-token Jacobian blocks."""
    a = jnp.array([[1.0, -0.5], [0.3, 0.8]])
    return jnp.stack([h[0] @ a[0] + 0.4 * h[1] @ a[1], 0.2 * h[0] @ a[1] - h[1] @ a[0]])[:, None] * \
        jnp.array([[1.0, 0.5]])


def test_matrix_replicon_closed_form():
    """General `L = 2`, `r = 2`, a quadratic loss: `J = V^{-1}((V^{-1} + K)^{-1} V^{-1} - I)` is constant (`K` the
    loss Hessian); the replicon is the spectral radius of `Delta -> alpha V0 sum sigma_l^2 sigma_l'^2 J_ll' Delta
    J_ll'^T V0`, built here entry by entry with numpy."""
    sig = np.array([0.5, 0.8])
    params = make_params(1.3, 0.2, sigma=sig, lam=0.05, A=np.eye(2), r=2, t=1, student=coupled_linear_student)
    V0 = np.array([[3.0, 0.7], [0.7, 2.0]])
    with float64_scope():
        ov = Overlaps(q0=jnp.array([[0.4, 0.1], [0.1, 0.3]]), m=jnp.zeros((1, 2)), V0=jnp.asarray(V0),
                      theta0=jnp.array([[0.2, 0.1]]))
        res = replicon(ov, params, FixedRule(gauss_hermite(6, 2)), tie_width=0.0)
        T = jnp.zeros((2, 2))
        K = np.asarray(jax.hessian(lambda hf: 0.5 * jnp.sum((T - coupled_linear_student(hf.reshape(2, 2), params)) ** 2
                                                            * jnp.asarray(sig**2)[None, :]))(jnp.zeros(4)))
    Vinv = np.zeros((4, 4))
    for l in range(2):
        Vinv[2 * l:2 * l + 2, 2 * l:2 * l + 2] = np.linalg.inv(sig[l] ** 2 * V0)
    J = Vinv @ (np.linalg.solve(Vinv + K, Vinv) - np.eye(4))
    M = np.zeros((4, 4))
    for i in range(2):
        for j in range(2):
            E = np.zeros((2, 2))
            E[i, j] = 1.0
            out = np.zeros((2, 2))
            for l in range(2):
                for lp in range(2):
                    B = J[2 * l:2 * l + 2, 2 * lp:2 * lp + 2]
                    out += sig[l] ** 2 * sig[lp] ** 2 * B @ E @ B.T
            M[:, 2 * i + j] = (1.3 * V0 @ out @ V0).ravel()
    assert np.abs(J[:2, 2:]).max() > 0.01              # the cross-token blocks matter
    assert float(res.value) == pytest.approx(np.max(np.abs(np.linalg.eigvals(M))), rel=1e-8)


def _fd_jacobians(ov, params, points, tau, eps=1e-5):
    """Per node, by central finite differences of re-solved prox minimisers (generic autodiff objective,
    `newton_minimize` to a gradient of `1e-12`): `d f / d omega` of the lowest minimum and of the blend
    `sum_k softmax(-M_k / tau) f_k` over the minima reached from `omega`, `-omega` and the mirror of the lower
    of those two (the starts of `node_jacobians`; `L = 2`, `r = 1`)."""
    maps = field_maps(ov, params)
    V_inv = jnp.linalg.inv(ov.V0)[None] / (params.sigma**2)[:, None, None]
    Vb = jnp.diag(V_inv[:, 0, 0])

    def node(z):
        xi, eta = split_node(z, params)
        omega, hstar = gaussian_fields(maps, params, xi, eta)
        T = params.target(hstar, params)

        def solve(h0, om):
            return newton_minimize(lambda h: moreau_objective(h, (om, T, V_inv, params)), h0, max_steps=200,
                                   tol=1e-12)

        w = omega.reshape(-1)
        pair = jax.vmap(lambda h0: solve(h0, omega))(jnp.stack([w, -w]))          # the two basins' minima
        mirror = solve(-pair.h[jnp.argmin(pair.value)], omega)                     # and from the lowest's mirror
        base = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b[None]]), pair, mirror)
        shifts = eps * jnp.concatenate([jnp.eye(2), -jnp.eye(2)])                  # (+e0, +e1, -e0, -e1)

        def moved(dw):     # follow each minimum to omega + dw (a local solve from it)
            om = omega + dw.reshape(omega.shape)
            res = jax.vmap(lambda h0: solve(h0, om))(base.h)
            fk = (res.h - (w + dw)[None]) @ Vb
            wts = tie_weights(res.value, tau, res.h)
            return fk, wts @ fk, res.converged

        fk, fs, ok = jax.vmap(moved)(shifts)                                       # (4, 3, 2), (4, 2), (4, 3)
        Jk = (fk[:2] - fk[2:]).transpose(1, 2, 0) / (2 * eps)                       # (k, row, column)
        Js = (fs[:2] - fs[2:]).T / (2 * eps)
        return Jk[jnp.argmin(base.value)], Js, jnp.all(ok) & jnp.all(base.converged)

    return jax.vmap(node)(points)


def _replicon_r1(J, weights, ov, params):
    """The replicon for `r = 1` from per-node Jacobians `(N, L, L)`: `alpha V0^2 sum_ll' s_l^2 s_l'^2 E[J_ll'^2]`."""
    s2 = np.asarray(params.sigma) ** 2
    second = np.einsum("n,nlm->lm", np.asarray(weights), np.asarray(J) ** 2)
    return float(params.alpha) * float(ov.V0[0, 0]) ** 2 * float(s2 @ second @ s2)


def test_node_jacobians_and_replicon_against_finite_differences():
    """The implicit-function Jacobians of `node_jacobians` (the replicon's default, early-stopping path), the
    blended one with its jump term `(1 / tau) sum_k w_k (f_k - f)(f_k - f)^T`, and the replicon built from
    them, against central finite differences of the re-solved prox minimisers (a different minimiser and the
    generic objective). Overlaps near the semantic fixed point at `alpha = 0.8`, `omega = 0.3`, where a
    few percent of the nodes have two competing minima; a smoothing `tau = 0.05` wide enough for the
    difference quotients to resolve. Also:
    the nodes are independent (reversing their order, which changes which starts share the extra Newton
    rounds, gives the same Jacobians)."""
    params = make_params(0.8, 0.3)
    tau = 0.05
    with float64_scope():
        ov = Overlaps(q0=jnp.array([[0.227]]), m=jnp.zeros((1, 1)), V0=jnp.array([[105.7]]),
                      theta0=jnp.array([[0.239]]))
        rule = SobolRule.create(4, log2_n=6, n_replicas=2).main(ov, params)
        jac = jax.jit(lambda pts: node_jacobians(ov, params, pts, tau, n_steps=REPLICON_STEPS,
                                                 max_steps=REPLICON_MAX_STEPS, mu0=REPLICON_MU0))
        J_reg, J_tau, two, gnorm = jac(rule.points)
        J_rev = jac(rule.points[::-1])
        J_fd, Js_fd, ok = jax.jit(lambda pts: _fd_jacobians(ov, params, pts, tau))(rule.points)
        res = jax.jit(lambda q: replicon(ov, params, FixedRule(q), tie_width=tau, n_steps=REPLICON_STEPS,
                                         max_steps=REPLICON_MAX_STEPS, mu0=REPLICON_MU0))(rule)
    J_reg, J_tau, J_fd, Js_fd = (np.asarray(a) for a in (J_reg, J_tau, J_fd, Js_fd))
    assert np.all(np.asarray(ok)) and np.max(np.asarray(gnorm)) <= 1e-8
    scale = 1.0 + np.max(np.abs(J_fd), axis=(1, 2))
    assert np.max(np.max(np.abs(J_reg - J_fd), axis=(1, 2)) / scale) < 1e-5
    jump_part = np.max(np.abs(J_tau - J_reg), axis=(1, 2))
    assert np.sum(jump_part > 1e-2 * scale) >= 3                 # nodes whose blend moves: the jump term is tested
    assert np.max(np.max(np.abs(J_tau - Js_fd), axis=(1, 2)) / (1.0 + np.max(np.abs(Js_fd), axis=(1, 2)))) < 1e-5
    np.testing.assert_allclose(np.asarray(J_rev[0])[::-1], J_reg, rtol=0, atol=1e-9)
    np.testing.assert_allclose(np.asarray(J_rev[1])[::-1], J_tau, rtol=0, atol=1e-9)
    assert float(res.regular) == pytest.approx(_replicon_r1(J_fd.reshape(-1, 2, 2), rule.weights, ov, params),
                                               rel=1e-5)
    assert float(res.value) == pytest.approx(_replicon_r1(Js_fd.reshape(-1, 2, 2), rule.weights, ov, params),
                                             rel=1e-5)
    # the blend moves the value (by 0.0056 here, 1e4 times the 1e-5 agreement above): the jump term is in it
    assert abs(float(res.value) - float(res.regular)) > 1e-3
    assert float(res.two_minima) > 0


def test_spectral_radius_and_rs_stable():
    with float64_scope():
        assert float(spectral_radius(jnp.array([[0.0, 2.0], [0.5, 0.0]]))) == pytest.approx(1.0)
        assert float(spectral_radius(jnp.array([[-0.3]]))) == pytest.approx(0.3)
    assert bool(rs_stable(0.5, 0.0)) and not bool(rs_stable(0.5, 1e-4)) and not bool(rs_stable(1.2, 0.0))
    assert not bool(rs_stable(0.95, 0.0, 0.1)) and not bool(rs_stable(np.nan, 0.0))
    assert bool(rs_stable(0.5, 5e-8)) and not bool(rs_stable(0.5, 2e-7))


def test_invalid_tie_width():
    params = make_params(1.0, 0.3)
    ov = Overlaps(q0=jnp.array([[0.1]]), m=jnp.zeros((1, 1)), V0=jnp.array([[10.0]]), theta0=jnp.zeros((1, 1)))
    with pytest.raises(ValueError, match="tie_width"):
        replicon(ov, params, SobolRule.create(4, 6, 2), tie_width=-1.0)


@pytest.mark.slow
def test_jump_term_scales_like_one_over_tie_width():
    """Where the prox has two minima (positional branch, lambda = 0.01) the replicon grows like `1 / tau` as the
    smoothing `tau -> 0`: `tau (R(tau) - R_regular)` stays of one order while `R(tau)` grows tenfold per decade;
    where no node has two minima (semantic branch) it does not move."""
    from phasejax.theory import solve_state_evolution, default_scheme

    vals = {}
    for branch, alpha in (("positional", 1.5), ("semantic", 2.0)):
        p = make_params(alpha, 0.3)
        res = solve_state_evolution(p, branch)
        assert bool(res.converged)
        with float64_scope():
            vals[branch] = [replicon(res.overlaps, p, default_scheme(p), tie_width=t) for t in (1e-2, 1e-3, 1e-4)]
    pos = vals["positional"]
    growth = [float(r.value - r.regular) for r in pos]
    assert float(pos[0].two_minima) > 1e-4                      # nodes with two competing minima exist
    assert growth[2] > 5 * growth[1] > 5 * 5 * growth[0] > 0     # ~10x per decade of tau: the 1/tau term
    assert float(pos[2].value) > 1 > float(pos[0].regular)      # RS broken at small smoothing, by the jumps alone
    sem = vals["semantic"]
    assert all(abs(float(r.value) - float(sem[0].regular)) < 1e-6 for r in sem)
    assert float(sem[0].regular) < 1
