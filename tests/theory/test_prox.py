"""The proximal step: damped Newton, multi-start, implicit derivatives, the closed-form L = 2 objective, the
smoothed selection at ties between basins."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.theory import make_params
from phasejax.theory.prox import envelope_derivatives, newton_minimize
from phasejax.theory import MapApproximation
from phasejax.theory.fields import Overlaps
from phasejax.theory.losses import pair_dot_product_derivatives, pair_dot_product_objective
from phasejax.theory.prox import (
    moreau_minimizer,
    moreau_minimizers,
    moreau_objective,
    tie_weights,
)
from phasejax.theory.updates import node_values


@pytest.fixture(autouse=True)
def _float64():
    with float64_scope():
        yield


def _problem(seed, V=12.0):
    params = make_params(2.0, 0.3)
    rng = np.random.default_rng(seed)
    omega = jnp.asarray(rng.normal(0, 0.6, (2, 1)))
    hstar = jnp.asarray(rng.normal(0, 0.5, (2, 1)))
    V_inv = jnp.full((2, 1, 1), 1.0 / V)

    def loss(h, hs):
        return params.loss(h, params.target(hs, params), params)

    def objective(hf, omega=omega, hstar=hstar):
        h = hf.reshape(2, 1)
        return 0.5 * jnp.sum((h - omega) ** 2 * V_inv[:, :, 0]) + loss(h, hstar)

    return params, omega, hstar, V_inv, loss, objective


def test_newton_reaches_stationarity_under_jit_and_vmap():
    _, omega, _, _, _, objective = _problem(0)

    def solve(h0):
        return newton_minimize(objective, h0, tol=1e-11)

    starts = jnp.asarray(np.random.default_rng(1).normal(0, 1, (16, 2)))
    out = jax.jit(jax.vmap(solve))(starts)
    chex.assert_shape(out.h, (16, 2))
    assert bool(jnp.all(out.converged))
    # gradients and Hessian eigenvalues at the results, in one compiled call (eager op-by-op dispatch is slow)
    grads, eigs = jax.jit(jax.vmap(lambda h: (jax.grad(objective)(h),
                                              jnp.linalg.eigvalsh(jax.hessian(objective)(h)))))(out.h)
    assert float(jnp.max(jnp.abs(grads))) < 1e-10
    # each result is a local minimum: the Hessian is positive semi-definite
    assert float(eigs.min()) > -1e-10


def test_multistart_keeps_the_lowest_objective():
    """`moreau_minimizer` from several starts ends at the lowest of the minima each start reaches alone
    (`newton_minimize`, one lane and its own loop: an independent run of the same steps)."""
    _, omega, _, _, _, objective = _problem(3, V=30.0)
    starts = jnp.stack([jnp.zeros(2), omega.ravel(), jnp.array([1.5, -1.5]), jnp.array([-1.5, 1.5])])
    # compiled once each (eager calls retrace and recompile the while loop for every start)
    h, gnorm, best = jax.jit(lambda st: moreau_minimizer(lambda hh, _: objective(hh), (), st, n_steps=60,
                                                         tol=1e-11))(starts)
    single = jax.jit(lambda s: newton_minimize(objective, s, tol=1e-11))
    singles = [single(s) for s in starts]
    lowest = min(float(s.value) for s in singles)
    assert float(objective(h)) <= lowest + 1e-13 and float(gnorm) < 1e-10
    np.testing.assert_allclose(np.asarray(h), np.asarray(singles[int(best)].h), atol=1e-9)


def test_implicit_derivatives_match_finite_differences():
    params, omega, hstar, V_inv, loss, _ = _problem(5, V=3.0)

    def prox_f(omega, hstar):
        def obj(hf):
            h = hf.reshape(2, 1)
            return 0.5 * jnp.sum((h - omega) ** 2 * V_inv[:, :, 0]) + loss(h, hstar)

        r = newton_minimize(obj, omega.ravel(), tol=1e-13, max_steps=200)
        return r.h.reshape(2, 1), (r.h.reshape(2, 1) - omega) / 3.0

    prox_f = jax.jit(prox_f)   # one compilation for the nine solves below
    h_hat, f = prox_f(omega, hstar)
    der = jax.jit(envelope_derivatives, static_argnums=0)(loss, h_hat, omega, V_inv, hstar)
    np.testing.assert_allclose(der.f, f, atol=1e-12)
    # stationarity: f = -grad_h loss at the optimum
    np.testing.assert_allclose(der.f, -jax.grad(loss)(h_hat, hstar), atol=1e-10)
    eps = 1e-6
    for l in range(2):
        e = jnp.zeros((2, 1)).at[l, 0].set(eps)
        fd_w = (prox_f(omega + e, hstar)[1] - prox_f(omega - e, hstar)[1])[l, 0] / (2 * eps)
        fd_h = (prox_f(omega, hstar + e)[1] - prox_f(omega, hstar - e)[1])[l, 0] / (2 * eps)
        assert abs(float(der.df_domega[l, 0, 0]) - float(fd_w)) < 1e-6
        assert abs(float(der.df_dhstar[l, 0, 0]) - float(fd_h)) < 1e-6


def _theta(seed, V=4.0):
    params = make_params(2.0, 0.3, sigma=[0.8, 1.1])
    rng = np.random.default_rng(seed)
    omega = jnp.asarray(rng.normal(0, 0.8, (2, 1)))
    T = jnp.asarray(rng.dirichlet([1.0, 1.0], size=2))
    return omega, T, jnp.full((2, 1, 1), 1.0 / V), params


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_closed_form_objective_equals_the_generic_one_with_autodiff_derivatives(seed):
    theta = _theta(seed)
    for h in np.random.default_rng(seed + 10).normal(0, 1.5, (5, 2)):
        (value, grad, hess), closed, generic, generic_grad, generic_hess = _both_objectives(jnp.asarray(h), theta)
        np.testing.assert_allclose(closed, generic, rtol=1e-12)
        np.testing.assert_allclose(value, generic, rtol=1e-12)
        np.testing.assert_allclose(grad, generic_grad, atol=1e-12)
        np.testing.assert_allclose(hess, generic_hess, atol=1e-11)


@jax.jit
def _both_objectives(h, theta):
    """The closed form's (value, gradient, Hessian) and value, the generic objective's value and autodiff
    derivatives (one compiled call for every seed and point)."""
    return (pair_dot_product_derivatives(h, theta), pair_dot_product_objective(h, theta), moreau_objective(h, theta),
            jax.grad(moreau_objective)(h, theta), jax.hessian(moreau_objective)(h, theta))


def test_moreau_minimizer_derivative_is_the_implicit_one():
    """d h_hat / d omega from the custom JVP equals a central finite difference of the minimiser."""
    omega, T, V_inv, params = _theta(4, V=2.0)
    starts = jnp.asarray([[0.0, 0.0], [1.0, -1.0], [-1.0, 1.0]])

    def h_hat(om):
        return moreau_minimizer(pair_dot_product_objective, (om, T, V_inv, params), starts, n_steps=40,
                                derivatives=pair_dot_product_derivatives)[0]

    h_hat = jax.jit(h_hat)      # one compilation for the five evaluations below
    jac = jax.jit(jax.jacfwd(h_hat))(omega)
    eps = 1e-6
    for l in range(2):
        e = jnp.zeros((2, 1)).at[l, 0].set(eps)
        fd = (h_hat(omega + e) - h_hat(omega - e)) / (2 * eps)
        np.testing.assert_allclose(jac[:, l, 0], fd, atol=1e-6)
    # the minimiser is stationary
    _, grad, _ = pair_dot_product_derivatives(h_hat(omega), (omega, T, V_inv, params))
    assert float(jnp.max(jnp.abs(grad))) < 1e-10


# ---------------------------------------------------------------------------------------------------------------
# Smoothed selection at ties between basins (tie_weights, moreau_minimizers, node_values(tie_width=...))
# ---------------------------------------------------------------------------------------------------------------


def test_tie_weights_select_the_lowest_and_count_each_minimum_once():
    np.testing.assert_allclose(tie_weights(jnp.asarray([0.0, 1.0, jnp.inf]), 1e-3), [1.0, 0.0, 0.0], atol=1e-300)
    np.testing.assert_allclose(tie_weights(jnp.asarray([0.0, 2e-3 * np.log(3.0)]), 2e-3), [0.75, 0.25], rtol=1e-12)
    # a minimum found by two starts counts once; the higher (less converged) copy gets nothing
    hs = jnp.asarray([[1.0, 0.5], [-1.0, -0.5], [1.0 + 1e-9, 0.5], [1.01, 0.51]])
    w = tie_weights(jnp.asarray([0.0, 0.0, 0.0, 1e-6]), 1e-3, hs)
    np.testing.assert_allclose(w, [0.5, 0.5, 0.0, 0.0], atol=1e-15)
    # the one-hot argmin in the limit of zero width
    np.testing.assert_allclose(tie_weights(jnp.asarray([3e-9, 1e-9, 2e-9]), 1e-12), [0.0, 1.0, 0.0], atol=1e-300)


def _mirror_problem(s):
    """Two mirror basins whose values tie at `s = 0` (the objective is even in h at omega = 0)."""
    params = make_params(2.0, 0.3)
    omega = jnp.asarray([[1.0], [-0.4]]) * s
    T = jnp.asarray([[0.95, 0.05], [0.1, 0.9]])
    return omega, T, jnp.full((2, 1, 1), 1.0 / 12.0), params


@jax.jit
def _minima_at(s):
    theta = _mirror_problem(s)
    starts = jnp.asarray([[1.0, -1.0], [-1.0, 1.0], [0.3, 0.2]])
    return moreau_minimizers(pair_dot_product_objective, theta, starts, n_steps=40,
                             derivatives=pair_dot_product_derivatives)


def test_moreau_minimizers_tangents_are_the_implicit_and_envelope_derivatives():
    """Every start's minimiser moves as the implicit function theorem says and its value as the envelope
    theorem says (central differences), including the basin that is not the lowest."""
    s0 = 0.03
    hs, values, gnorms = _minima_at(s0)
    assert float(jnp.max(gnorms)) < 1e-10
    assert float(jnp.max(jnp.abs(hs[0] - hs[1]))) > 0.5 and abs(float(values[0] - values[1])) < 0.05   # two basins
    _, (dhs, dvalues, _) = jax.jvp(_minima_at, (s0,), (1.0,))
    eps = 1e-6
    hp, vp, _ = _minima_at(s0 + eps)
    hm, vm, _ = _minima_at(s0 - eps)
    np.testing.assert_allclose(dhs, (hp - hm) / (2 * eps), atol=1e-6)
    np.testing.assert_allclose(dvalues, (vp - vm) / (2 * eps), atol=1e-7)


def test_tie_blend_is_continuous_across_a_tie_and_tends_to_the_hard_selection():
    """Across the tie at s = 0 the lowest basin's f jumps; the blend with tie_width moves smoothly (its
    largest step over a fine scan shrinks with the scan step) and equals the hard selection a few widths away."""

    @jax.jit
    def f_of(s, width):
        hs, values, _ = _minima_at(s)
        omega, _, V_inv, _ = _mirror_problem(s)
        fk = (hs - omega.reshape(1, 2)) * V_inv[:, 0, 0]
        hard = fk[jnp.argmin(values)]
        return hard, tie_weights(values, width, hs) @ fk

    width = 1e-4                                       # the values part by about 0.1 |s|: a blend for |s| ~ 1e-3
    for n in (201, 401):
        s = np.linspace(-0.005, 0.005, n)
        hard, soft = jax.vmap(f_of, in_axes=(0, None))(jnp.asarray(s), width)
        jump = float(jnp.max(jnp.abs(jnp.diff(hard, axis=0))))
        step = float(jnp.max(jnp.abs(jnp.diff(soft, axis=0))))
        assert jump > 0.05                             # the hard selection jumps between the mirror basins
        assert step < 0.2 * jump * 201 / n             # the blend does not: its steps shrink with the scan step
    far = jnp.asarray(np.r_[-np.linspace(0.02, 0.03, 5), np.linspace(0.02, 0.03, 5)])
    hard, soft = jax.vmap(f_of, in_axes=(0, None))(far, width)
    np.testing.assert_allclose(soft, hard, atol=1e-9)


def test_node_values_with_a_tie_width_blend_minima_and_differentiate_exactly():
    """`node_values(tie_width=...)`: the blended `f`, its second moment `ff` and the envelope have the JVP of
    central differences (all starts converged: 40 steps), the weights' switch included. (That a vanishing width
    gives the hard selection is `tie_weights`'s limit, tested above.)"""
    params = make_params(1.5, 0.3)
    ov = Overlaps(q0=jnp.asarray([[0.2]]), m=jnp.asarray([[0.0]]), V0=jnp.asarray([[54.0]]),
                  theta0=jnp.asarray([[0.0]]))
    rng = np.random.default_rng(0)
    points = jnp.asarray(rng.normal(size=(256, 4)))
    warm = jnp.asarray(rng.normal(size=(256, 2)))      # warm and its mirror start in both basins

    width = 2e-3

    def nodes(m, width):
        o = ov.replace(m=jnp.full((1, 1), m, jnp.float64))
        return node_values(o, params, points, warm, 0, n_steps=40, extra_starts=True, tie_width=width)

    eps = 1e-6

    @jax.jit                                           # one compilation for everything below
    def evaluate():
        blended, tangent = jax.jvp(lambda m: nodes(m, width), (0.0,), (1.0,))
        pair = jax.vmap(lambda m: nodes(m, width))(jnp.asarray([eps, -eps]))
        return blended, tangent, pair

    blended, tangent, pair = evaluate()
    assert float(jnp.max(blended.grad_norm)) < 1e-9
    mixed = jnp.abs(blended.ff - jnp.einsum("nla,nlb->nlab", blended.f, blended.f)).reshape(256, -1).max(1) > 1e-8
    assert int(jnp.sum(mixed)) >= 3                   # some nodes sit near a tie and are blends
    for key in ("f", "ff", "envelope"):
        fd = (getattr(pair, key)[0] - getattr(pair, key)[1]) / (2 * eps)
        np.testing.assert_allclose(getattr(tangent, key), fd, atol=1e-5 * (1 + float(jnp.max(jnp.abs(fd)))), err_msg=key)


def test_tie_width_is_validated():
    for bad in (-1e-3, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="tie_width"):
            MapApproximation(tie_width=bad)
    with pytest.raises(ValueError, match="tie_width"):
        MapApproximation(tie_width=1e-3, hat_form="implicit")


# ----------------------------------------------------------------------------
# Many lanes at once (minimize_lanes, the engine of every node's prox)
# ----------------------------------------------------------------------------


def _lane_problems(n, seed=3):
    params = make_params(2.0, 0.3)
    rng = np.random.default_rng(seed)
    omega = jnp.asarray(rng.normal(0, 0.6, (n, 2, 1)))
    T = jnp.asarray(rng.uniform(0.1, 0.9, (n, 2, 2)))
    V_inv = jnp.asarray([[[0.35]], [[0.35]]])
    objective = lambda h, th: pair_dot_product_objective(h, (th[0], th[1], V_inv, params))  # noqa: E731
    derivatives = lambda h, th: pair_dot_product_derivatives(h, (th[0], th[1], V_inv, params))  # noqa: E731
    starts = jnp.asarray(rng.normal(0, 1.0, (n, 2)))
    return objective, derivatives, starts, (omega, T)


def test_lanes_reach_what_a_single_newton_reaches():
    """Every lane of `minimize_lanes` (blocks, partitions, the line search only where the full step is not
    taken) ends where `newton_minimize` (one lane, its own while loop) ends from the same start; inactive lanes
    keep their start and take no step; a lane stops at its cap."""
    from phasejax.theory.prox import minimize_lanes

    objective, derivatives, starts, thetas = _lane_problems(300)
    active = jnp.arange(300) % 7 != 3
    caps = jnp.where(jnp.arange(300) % 11 == 5, 2, 60)
    lanes = jax.jit(lambda: minimize_lanes(objective, derivatives, starts, thetas, active, caps,
                                           stop_tol=1e-12, block=32))()
    single = jax.jit(jax.vmap(lambda h0, om, T: newton_minimize(lambda h: objective(h, (om, T)), h0, max_steps=60,
                                                                tol=1e-12)))(starts, *thetas)
    full = np.asarray(active & (caps == 60))
    np.testing.assert_allclose(np.asarray(lanes.h)[full], np.asarray(single.h)[full], atol=1e-9)
    assert np.all(np.max(np.abs(np.asarray(lanes.g)), axis=1)[full] <= 1e-12)
    off = ~np.asarray(active)
    np.testing.assert_array_equal(np.asarray(lanes.h)[off], np.asarray(starts)[off])
    assert np.all(np.asarray(lanes.steps)[off] == 0)
    assert np.all(np.asarray(lanes.steps)[np.asarray(caps == 2)] <= 2)
    assert np.asarray(lanes.steps)[full].max() > np.asarray(lanes.steps)[full].min() + 2   # lanes need different work


def test_lanes_do_not_depend_on_their_order():
    """A permutation of the lanes permutes the results (the partitions only reorder the work)."""
    from phasejax.theory.prox import minimize_lanes

    objective, derivatives, starts, thetas = _lane_problems(200, seed=5)
    perm = np.random.default_rng(0).permutation(200)
    run = jax.jit(lambda s, om, T: minimize_lanes(objective, derivatives, s, (om, T), True, 40, stop_tol=1e-12,
                                                  block=16))
    a = run(starts, *thetas)
    b = run(starts[perm], *(t[perm] for t in thetas))
    np.testing.assert_allclose(np.asarray(b.h), np.asarray(a.h)[perm], atol=1e-12)
