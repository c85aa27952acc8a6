"""State evolution: spec check values, limits, invariances, consistency, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax.theory import (
    CONVERGED,
    INVALID_INPUT,
    INVALID_ITERATE,
    MAX_ITERATIONS,
    Overlaps,
    SEConfig,
    branch_init,
    gauss_hermite,
    hat_updates,
    Hats,
    make_params,
    overlap_updates,
    solve_state_evolution,
    solve_state_evolution_batch,
    stack_inits,
)
from phasejax.theory.state_evolution import hold_hats

PAPER = make_params(2.0, 0.3)
Q6 = gauss_hermite(4, 6)

# Spec section 4 check values (paper setting, alpha = 2, omega = 0.3).
SPEC = {
    "semantic": dict(q=0.1142, m=0.0, V=12.33, theta=0.1586),
    "positional": dict(q=0.0500, m=0.2586, V=11.04, theta=0.0),
}


@pytest.fixture(scope="module")
def paper_solutions():
    return {b: solve_state_evolution(PAPER, b) for b in ("semantic", "positional")}


@pytest.mark.parametrize("branch", ["semantic", "positional"])
def test_spec_check_values_at_alpha_2(paper_solutions, branch):
    res = paper_solutions[branch]
    ref = SPEC[branch]
    assert int(res.status) == CONVERGED and bool(res.converged)
    assert float(res.residual) < 1e-8
    got = dict(q=float(res.q[0]), m=float(res.m[0, 0]), V=float(res.V[0]), theta=float(res.theta[0]))
    for key in ("q", "m", "theta"):
        if ref[key] == 0.0:
            assert got[key] == 0.0  # held exactly in the branch's invariant subspace
        else:
            assert got[key] == pytest.approx(ref[key], rel=0.01), key
    # V is the most quadrature-sensitive quantity (spec: within about 5%)
    assert got["V"] == pytest.approx(ref["V"], rel=0.05)
    assert float(res.prox_unconverged) == 0.0
    assert np.isfinite(float(res.test_error)) and np.isfinite(float(res.train_loss))


def test_branch_stability_diagnostic(paper_solutions):
    # At alpha = 2 both constrained fixed points are stable out of their subspace.
    for res in paper_solutions.values():
        assert float(res.subspace_gain) < 1.0


def test_free_energy_equals_energetic_training_loss(paper_solutions):
    """At a fixed point the spec's e_t reduces to alpha E[ell(h_hat)] + lambda/2 tr q0."""
    for branch, res in paper_solutions.items():
        assert float(res.train_loss) == pytest.approx(float(res.energetic_loss), rel=1e-6), branch


def test_fixed_point_independent_of_quadrature_order():
    a = solve_state_evolution(PAPER, "semantic", gauss_hermite(4, 8))
    b = solve_state_evolution(PAPER, "semantic", gauss_hermite(4, 12))
    for x, y in [(a.q[0], b.q[0]), (a.theta[0], b.theta[0]), (a.train_loss, b.train_loss),
                 (a.test_error, b.test_error)]:
        assert float(x) == pytest.approx(float(y), rel=2e-3)
    assert float(a.V[0]) == pytest.approx(float(b.V[0]), rel=5e-3)


def test_stein_and_implicit_hats_agree_where_the_prox_is_smooth():
    # V0 small: the Moreau problem is convex, the proximal map smooth, and
    # Gaussian integration by parts must reproduce the implicit derivatives.
    ov = Overlaps(q0=jnp.array([[1.2]]), m=jnp.array([[0.3]]), V0=jnp.array([[0.8]]), theta0=jnp.array([[0.7]]))
    q = gauss_hermite(4, 12)
    stein = hat_updates(ov, PAPER, q, SEConfig(hat_form="stein")).hats
    implicit = hat_updates(ov, PAPER, q, SEConfig(hat_form="implicit")).hats
    np.testing.assert_allclose(stein.Vhat, implicit.Vhat, rtol=1e-5)
    np.testing.assert_allclose(stein.thetahat, implicit.thetahat, rtol=1e-5)
    np.testing.assert_array_equal(stein.qhat, implicit.qhat)


def test_alpha_to_zero_gives_vanishing_q0():
    res = solve_state_evolution_batch(PAPER, [1e-3, 1e-2], [0.3, 0.3], "semantic", Q6)
    q0 = np.asarray(res.overlaps.q0[:, 0, 0])
    assert np.all(np.asarray(res.converged))
    assert q0[0] < q0[1]
    assert q0[0] < 0.05 and q0[1] < 0.5


def test_large_lambda_gives_vanishing_Q():
    lams = np.array([0.03, 0.3, 3.0, 1e4])
    res = [solve_state_evolution(PAPER.replace(lam=jnp.asarray(lam)), "positional", Q6) for lam in lams]
    assert all(bool(r.converged) for r in res)
    q0 = np.array([abs(float(r.overlaps.q0[0, 0])) for r in res])
    m = np.array([abs(float(r.m[0, 0])) for r in res])
    assert q0[0] > 1e-3 and np.all(np.diff(q0[:3]) < 0)   # ||Q||^2 / d decreases with lambda ...
    assert q0[-1] < 1e-10 and m[-1] < 1e-6                # ... and vanishes as lambda -> inf
    # (grad ell = 0 at h = 0 for softmax attention, so m = 0 is the large-lambda fixed point)


def test_vmapped_equals_looped():
    alphas, omegas = np.array([0.8, 1.6]), np.array([0.2, 0.5])
    inits = stack_inits([branch_init("semantic", PAPER), branch_init("positional", PAPER)])
    batch = solve_state_evolution_batch(PAPER, alphas, omegas, inits, Q6, batched_init=True)
    for i, branch in enumerate(["semantic", "positional"]):
        single = solve_state_evolution(PAPER.replace(alpha=jnp.asarray(alphas[i]), omega=jnp.asarray(omegas[i])),
                                       branch, Q6)
        # Same iterations and status; values equal up to the rounding of vectorised vs
        # scalar kernels, which the fixed-point iteration carries to the order of its tolerance.
        assert int(single.iterations) == int(batch.iterations[i])
        assert int(single.status) == int(batch.status[i]) == 0
        assert float(single.residual) < 1e-8 and float(batch.residual[i]) < 1e-8  # rounding-level noise
        single, batch_i = (r.replace(residual=jnp.zeros(())) for r in (single, jax.tree_util.tree_map(lambda x: x[i], batch)))
        for a, b in zip(jax.tree_util.tree_leaves(single), jax.tree_util.tree_leaves(batch_i)):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-6, atol=1e-10)


def test_overlap_updates_closed_form():
    """Entropic update against the spec's scalar formulas (r = t = K = 1, L = 2)."""
    rng = np.random.default_rng(0)
    hats = hold_hats(
        Hats(
            qhat=jnp.asarray(rng.uniform(0.1, 1, (2, 1, 1))), mhat=jnp.asarray(rng.normal(size=(2, 1))),
            Vhat=jnp.asarray(rng.uniform(0.1, 1, (2, 1, 1))), thetahat=jnp.asarray(rng.normal(size=(2, 1, 1)))),
        jnp.asarray(False), jnp.asarray(False))
    ov = overlap_updates(hats, PAPER)
    s2 = 0.25
    G = 0.01 + s2 * float(hats.Vhat.sum())
    Mh = float(hats.mhat[0, 0] - hats.mhat[1, 0])
    th = s2 * float(hats.thetahat.sum())
    assert float(ov.V0[0, 0]) == pytest.approx(1 / G)
    assert float(ov.m[0, 0]) == pytest.approx(Mh / G)
    assert float(ov.theta0[0, 0]) == pytest.approx(th / G)
    assert float(ov.q0[0, 0]) == pytest.approx((s2 * float(hats.qhat.sum()) + Mh**2 + th**2) / G**2)


@pytest.mark.parametrize("field,value,name", [
    ("alpha", 0.0, "alpha"), ("alpha", -1.0, "alpha"), ("omega", 1.5, "omega"), ("omega", -0.1, "omega"),
    ("lam", -0.01, "lam"), ("sigma", jnp.array([0.5, -0.5]), "sigma"), ("alpha", jnp.nan, "alpha"),
])
def test_invalid_parameters_raise_naming_the_parameter(field, value, name):
    bad = PAPER.replace(**{field: jnp.asarray(value, jnp.float64)})
    with pytest.raises(ValueError, match=name):
        solve_state_evolution(bad, "semantic", Q6)


@pytest.mark.parametrize("kwargs,name", [
    (dict(A=[[0.6, 0.4]]), "A"), (dict(C=[[1.0], [-1.0], [1.0]]), "C"), (dict(sigma=[0.5, 0.5, 0.5]), "sigma"),
])
def test_invalid_shapes_raise_naming_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        make_params(1.0, 0.3, **kwargs)


def test_batch_rejects_bad_grid_before_compute():
    with pytest.raises(ValueError, match="omega"):
        solve_state_evolution_batch(PAPER, [1.0, 2.0], [0.3, 1.2], "semantic", Q6)
    with pytest.raises(ValueError, match="alpha"):
        solve_state_evolution_batch(PAPER, [1.0, 2.0], [0.3], "semantic", Q6)


def test_traced_invalid_input_is_reported_not_raised():
    res = jax.jit(lambda a: solve_state_evolution(PAPER.replace(alpha=a), "semantic", Q6,
                                                  SEConfig(max_iter=3)))(jnp.asarray(-1.0))
    assert int(res.status) == INVALID_INPUT and not bool(res.converged)
    assert np.isnan(float(res.test_error))


def test_non_psd_iterate_is_reported():
    # theta0^2 > q0 violates rho - theta q^{-1} theta^T >= 0 (spec section 2)
    init = branch_init("semantic", PAPER, q0=0.5, theta0=1.0)
    res = solve_state_evolution(PAPER, init, Q6)
    assert int(res.status) == INVALID_ITERATE and not bool(res.converged)
    assert np.isnan(float(res.train_loss)) and np.isnan(float(res.test_error))


def test_iteration_cap_is_reported():
    res = solve_state_evolution(PAPER, "semantic", Q6, SEConfig(max_iter=2))
    assert int(res.status) == MAX_ITERATIONS and not bool(res.converged)
    assert int(res.iterations) == 2 and float(res.residual) > 1e-8


def test_general_L_with_quasi_monte_carlo():
    """L = 3 tokens (6 Gaussian dimensions, QMC rule), unequal sigma: converges, and the
    free energy equals the energetic training loss at the fixed point."""
    from phasejax.theory import quasi_monte_carlo

    A = [[0.5, 0.3, 0.2], [0.2, 0.6, 0.2], [0.3, 0.3, 0.4]]
    p = make_params(1.5, 0.3, sigma=[0.5, 0.6, 0.4], A=A)
    q = quasi_monte_carlo(6, 2048)
    for branch in ("semantic", "positional"):
        res = solve_state_evolution(p, branch, q)
        assert bool(res.converged), branch
        assert res.q.shape == (3,) and res.m.shape == (1, 1)
        assert float(res.train_loss) == pytest.approx(float(res.energetic_loss), rel=1e-6), branch
    # no token-swap symmetry here, so the semantic branch is solved with m free
    assert float(jnp.abs(solve_state_evolution(p, "semantic", q).m[0, 0])) > 0


@pytest.mark.slow
@pytest.mark.parametrize("branch", ["semantic", pytest.param("positional", marks=pytest.mark.xfail(
    strict=True, reason=("positional q is not converged in the Gauss-Hermite order: 0.0497 (4 nodes), "
                         "0.0500 (10), 0.0522 (14); the integrand jumps where the prox's global minimiser "
                         "switches basins, and a tensor rule converges slowly across jumps")))])
def test_spec_check_values_at_high_quadrature_order(branch):
    """The check values hold at 14 Gauss-Hermite nodes per dimension too (38416 nodes)."""
    res = solve_state_evolution(PAPER, branch, gauss_hermite(4, 14))
    ref = SPEC[branch]
    assert bool(res.converged)
    key = "theta" if branch == "semantic" else "m"
    got = float(res.theta[0]) if key == "theta" else float(res.m[0, 0])
    assert float(res.q[0]) == pytest.approx(ref["q"], rel=0.01)
    assert got == pytest.approx(ref[key], rel=0.01)
    assert float(res.V[0]) == pytest.approx(ref["V"], rel=0.05)
