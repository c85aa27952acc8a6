"""Derivatives of a fixed point (phasejax.theory.adjoint): the implicit function theorem against re-solves.

The reference is independent of the adjoint: central differences of converged re-solves (a cold solve at each
shifted parameter, its rule oriented at its own solution), Richardson-extrapolated from steps `1e-4` and `5e-5`
(the plain step-`1e-4` difference of the test error in `lambda = 0.01` still carries an `h^2` truncation of
`2e-4` relative). The solves stop at a residual of `1e-11` (near the map's rounding floor) so that the
differences are not the solver's noise. The rule has 16 tanh-sinh nodes per side of the split instead of the
default 12: with 12, the derivative's own quadrature error reaches `3e-4` relative (`d eps_g / d omega` on the
semantic branch; the slow test shows it), with 16 it is below `1e-5`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.theory import NoAdjoint, SEConfig, SplitProductRule, make_params, solve_along_alpha, solve_state_evolution

POINT = np.array([1.5, 0.3, 0.01])          # alpha, omega, lambda
RULE = SplitProductRule(n_piece=16)
TOL = {"positional": 1e-11, "semantic": 1e-11}


def _solver(branch, quadrature=RULE):
    config = SEConfig(tol=TOL[branch])

    def solve(v):
        return solve_state_evolution(make_params(v[0], v[1], lam=v[2]), branch, quadrature=quadrature, config=config)

    def observables(v):
        res = solve(v)
        return jnp.stack([res.train_loss, res.test_error])

    return solve, jax.jit(observables)


def _central_differences(observables, h=1e-4):
    """`(2, 3)`: d(train loss, test error) / d(alpha, omega, lambda) by central differences of re-solves with step
    `h`; in `lambda` (0.01, where the step is 1% of the value) Richardson-extrapolated from `h` and `h / 2`."""
    def cd(i, step):
        e = np.zeros(3)
        e[i] = step
        return (np.asarray(observables(jnp.asarray(POINT + e))) - np.asarray(observables(jnp.asarray(POINT - e)))) / (2 * step)

    return np.stack([cd(0, h), cd(1, h), (4.0 * cd(2, h / 2) - cd(2, h)) / 3.0], axis=1)


@pytest.fixture(scope="module", params=["positional", "semantic"])
def derivatives(request):
    """The Jacobian of (train loss, test error) in (alpha, omega, lambda) by `jax.jvp` (one tangent per parameter)
    and by `jax.vjp` (one cotangent per output), each one compiled program, and the central differences."""
    branch = request.param
    with float64_scope():
        solve, observables = _solver(branch)
        v = jnp.asarray(POINT)
        assert solve(v).status_name == "converged"
        jvp = jax.jit(lambda v, T: jax.vmap(lambda t: jax.jvp(observables, (v,), (t,))[1], out_axes=1)(T))
        vjp = jax.jit(lambda v, U: jax.vmap(jax.vjp(observables, v)[1])(U)[0])
        J_fwd = np.asarray(jvp(v, jnp.eye(3)))
        J_rev = np.asarray(vjp(v, jnp.eye(2)))
        cd = _central_differences(observables)
    return dict(branch=branch, fwd=J_fwd, rev=J_rev, cd=cd)


def test_jvp_and_vjp_match_central_differences_of_re_solves(derivatives):
    """d(train loss, test error) / d(alpha, omega, lambda) at alpha = 1.5, omega = 0.3: forward mode (`jax.jvp`,
    as `jax.jacfwd` does it) and reverse mode (`jax.vjp`, as `jax.grad` does it) both within 1e-4 relative of the
    central differences."""
    cd = derivatives["cd"]
    for name in ("fwd", "rev"):
        rel = np.abs(derivatives[name] - cd) / np.abs(cd)
        assert np.all(rel < 1e-4), (derivatives["branch"], name, rel, derivatives[name], cd)


def test_forward_and_reverse_mode_are_one_linear_map(derivatives):
    """`jax.jvp` and `jax.vjp` give the same Jacobian to 1e-10 (they linearise the same map and transpose it)."""
    np.testing.assert_allclose(derivatives["rev"], derivatives["fwd"], rtol=1e-10, atol=1e-16)


def test_a_row_is_differentiated_point_by_point():
    """The derivative of a continuation row in its `alphas` is each point's own derivative in `alpha` (the
    warm starts carried along the row are not differentiated), and a point that did not converge has NaN
    tangents."""
    small = SplitProductRule(n_smooth=4, eta_step=1.0, n_piece=8, n_replicas=2)
    with float64_scope():
        p = make_params(1.0, 0.3)
        alphas = jnp.asarray([1.4, 1.6])
        row = lambda a: solve_along_alpha(p, a, "positional", quadrature=small).train_loss  # noqa: E731
        J = np.asarray(jax.jacfwd(row)(alphas))
        one = lambda a: solve_state_evolution(p.replace(alpha=a), "positional", quadrature=small).train_loss  # noqa: E731
        singles = [float(jax.grad(one)(a)) for a in alphas]
        np.testing.assert_allclose(np.diag(J), singles, rtol=1e-6)
        np.testing.assert_allclose(J - np.diag(np.diag(J)), 0.0, atol=1e-14)
        capped = SEConfig(max_iter=1, max_iter_warm=1)
        stopped = lambda a: solve_state_evolution(p.replace(alpha=a), "positional", quadrature=small,  # noqa: E731
                                                  config=capped)
        assert stopped(1.5).status_name == "max_iterations"
        assert np.isnan(float(jax.grad(lambda a: stopped(a).train_loss)(1.5)))


def test_no_adjoint_makes_the_outputs_constants():
    small = SplitProductRule(n_smooth=4, eta_step=1.0, n_piece=8, n_replicas=2)
    with float64_scope():
        g = jax.grad(lambda a: solve_state_evolution(make_params(a, 0.3), "positional", quadrature=small,
                                                     config=SEConfig(adjoint=NoAdjoint())).train_loss)(1.5)
    assert float(g) == 0.0


def test_an_adjoint_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="adjoint"):
        SEConfig(adjoint="implicit")


@pytest.mark.slow
def test_the_default_rules_derivative_error_falls_with_its_split_nodes():
    """d eps_g / d omega on the semantic branch: the default rule (12 tanh-sinh nodes per side) is within 4e-4
    of the re-solves' central differences, 16 nodes within 1e-5: the gap is the rule's error in the derivative,
    not the adjoint's."""
    e = jnp.asarray([0.0, 1.0, 0.0])
    gaps = {}
    with float64_scope():
        for n_piece in (12, 16):
            _, observables = _solver("semantic", SplitProductRule(n_piece=n_piece))
            _, jvp = jax.jvp(observables, (jnp.asarray(POINT),), (e,))
            h = 1e-4
            cd = (np.asarray(observables(jnp.asarray(POINT) + h * e)) - np.asarray(observables(jnp.asarray(POINT) - h * e))) / (2 * h)
            gaps[n_piece] = abs(float(jvp[1]) - cd[1]) / abs(cd[1])
    assert gaps[12] < 4e-4 and gaps[16] < 1e-5, gaps
