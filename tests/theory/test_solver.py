"""The state-evolution solver: converged references at the default, errors, stability, batch, continuation, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.solvers import SolverError, Status
from phasejax.theory import MapApproximation, SEConfig, SplitProductRule, SobolRule, branch_init, gauss_hermite, make_params, solve_along_alpha, solve_state_evolution, solve_state_evolution_batch
from phasejax.theory.solver import map_points
from phasejax.theory.branches import stack_inits

from _compare import RTOL_FLOAT32

PAPER = make_params(2.0, 0.3)
SMALL = SplitProductRule(n_smooth=4, eta_step=1.0, n_piece=8, n_replicas=2)   # 3584 nodes: fast, ~1% accurate

# Converged values at alpha = 2, omega = 0.3 (scrambled Sobol, 2^16 points, two scrambles; uncertainty
# in the last digit where given). The default must match q, m, theta, V within 0.5% and e_t within 2e-6.
CONVERGED = {
    "positional": dict(q=0.0510, m=0.2583, V=11.36, theta=0.0, e_t=0.004513),
    "semantic": dict(q=0.1148, m=0.0, V=12.67, theta=0.1581, e_t=0.0035906),
}


@pytest.fixture(scope="module")
def check_point():
    return {b: solve_state_evolution(PAPER, b) for b in ("positional", "semantic")}


def _value(res, key):
    return float(np.ravel(getattr(res, key))[0])


@pytest.mark.parametrize("branch", ["positional", "semantic"])
def test_default_matches_the_converged_references(check_point, branch):
    res, ref = check_point[branch], CONVERGED[branch]
    assert res.status_name == "converged" and bool(res.converged)
    assert float(res.residual) < SEConfig().tol and float(res.prox_unconverged) == 0.0
    for key in ("q", "m", "V", "theta"):
        if ref[key] == 0.0:
            assert _value(res, key) == 0.0, key          # held exactly in the branch's invariant subspace
        else:
            assert _value(res, key) == pytest.approx(ref[key], rel=0.005), key
    assert abs(float(res.train_loss) - ref["e_t"]) < 2e-6
    # the free energy equals the energetic loss alpha E[ell(h_hat)] + lambda/2 tr q0 at a fixed point
    assert float(res.train_loss) == pytest.approx(float(res.energetic_loss), rel=1e-6)


@pytest.mark.parametrize("branch", ["positional", "semantic"])
def test_default_reports_errors_below_the_convergence_target(check_point, branch):
    res = check_point[branch]
    assert res.errors.n_replicas == 4
    for key in ("q", "m", "V", "theta"):
        v, e = _value(res, key), _value(res, key + "_err")
        if v == 0.0:
            assert e == 0.0, key                          # a held overlap has no quadrature error
        else:
            assert 0.0 < e < 0.005 * abs(v), (key, v, e)
    assert 0.0 < float(res.errors.train_loss) < 2e-6
    assert 0.0 < float(res.errors.test_error) < 0.005 * float(res.test_error)


def test_both_branches_are_stable_at_the_check_point(check_point):
    for res in check_point.values():
        assert float(res.stability) < 1.0 and float(res.subspace_gain) < 1.0


def test_semantic_is_the_global_minimum_at_alpha_2(check_point):
    assert float(check_point["semantic"].train_loss) < float(check_point["positional"].train_loss)


# The fixed rule is the one of test_continuation_equals_a_cold_start (its single solves share one compilation);
# the vmapped batch (the accelerator default) and the adaptive rule's batch (a two-stage solve per lane) are
# checked too, in the slow run (each is one more compilation).
# lanes: 2 = the two points side by side (vmap, the accelerator default), 1 = one after the other (lax.map, the
# CPU default)
@pytest.mark.parametrize("rule,lanes", [pytest.param(gauss_hermite(4, 8), 2, id="fixed-vmapped",
                                                     marks=pytest.mark.slow),
                                        # behind -m slow too (~30 s): the grouping itself is tested by
                                        # test_map_points_equals_vmap_for_every_group_size in the default suite
                                        pytest.param(gauss_hermite(4, 8), 1, id="fixed-mapped",
                                                     marks=pytest.mark.slow),
                                        pytest.param(SMALL, 2, id="adaptive", marks=pytest.mark.slow)])
def test_batch_equals_single(rule, lanes):
    alphas, omegas = np.array([0.8, 1.6]), np.array([0.2, 0.5])
    inits = stack_inits([branch_init("semantic", PAPER), branch_init("positional", PAPER)])
    batch = solve_state_evolution_batch(PAPER, alphas, omegas, inits, rule, batched_init=True, batch_size=lanes)
    for i, branch in enumerate(["semantic", "positional"]):
        with float64_scope():   # float64 like PAPER's fields: the same point as the batch's
            p = PAPER.replace(alpha=jnp.asarray(alphas[i]), omega=jnp.asarray(omegas[i]))
        single = solve_state_evolution(p, branch, rule)
        assert single.status_name == "converged" and int(batch.status[i]) == Status.CONVERGED
        assert int(single.iterations) == int(batch.iterations[i])
        for key in ("q", "m", "V", "theta", "train_loss", "test_error"):
            np.testing.assert_allclose(np.ravel(getattr(batch, key)[i]), np.ravel(getattr(single, key)),
                                       rtol=1e-7, atol=1e-12, err_msg=key)


@pytest.mark.parametrize("batch_size", [1, 2, 5, "auto"])
def test_map_points_equals_vmap_for_every_group_size(batch_size):
    """Groups of vmapped points one after the other give what one vmap gives, for an iterative function whose
    points take different numbers of iterations (a while loop: Newton's square root)."""
    def sqrt_newton(a):
        body = lambda c: (0.5 * (c[0] + a / c[0]), c[1] + 1)  # noqa: E731
        return jax.lax.while_loop(lambda c: jnp.abs(c[0] ** 2 - a) > 1e-6 * a, body, (a + 1.0, 0))

    xs = jnp.asarray([0.5, 2.0, 9.0, 100.0, 1e4])
    got = jax.jit(lambda x: map_points(sqrt_newton, x, batch_size))(xs)
    want = jax.vmap(sqrt_newton)(xs)
    np.testing.assert_allclose(got[0], np.sqrt(np.asarray(xs)), rtol=1e-6)
    # the same float32 Newton steps in other batches: a few units in the last place (a loop that stopped one step
    # apart would still be within its stop, 5e-7 relative)
    np.testing.assert_allclose(got[0], want[0], rtol=RTOL_FLOAT32)
    assert len(set(np.asarray(got[1]).tolist())) > 1             # the points differ in their iteration counts
    with pytest.raises(ValueError, match="batch_size"):
        map_points(sqrt_newton, xs, 0)


@pytest.mark.slow       # 28 s; continuation rows are exercised in the default suite by tests/phase/test_diagram.py
def test_continuation_equals_a_cold_start():
    """With a fixed rule, continuation reaches the cold start's fixed point to solver precision, in fewer
    iterations. (Gauss-Hermite is not converged here, but its fixed point is well defined and unique nearby;
    a small Sobol rule has several spurious fixed points within its large error.) A row's first point is a
    cold solve, so a row up and the same row down give each end both ways, from one compilation."""
    alphas = np.array([1.7, 1.85, 2.0])
    rule = gauss_hermite(4, 8)
    up = solve_along_alpha(PAPER, alphas, "positional", rule)
    down = solve_along_alpha(PAPER, alphas[::-1], "positional", rule)
    assert np.all(np.asarray(up.converged)) and np.all(np.asarray(down.converged))
    for i in range(len(alphas)):
        for key in ("q", "m", "V", "train_loss"):
            np.testing.assert_allclose(np.ravel(getattr(up, key)[i]), np.ravel(getattr(down, key)[-1 - i]),
                                       rtol=1e-5, err_msg=f"{key} at alpha = {alphas[i]}")
    # warm ends against cold ends: fewer iterations
    assert int(up.iterations[-1]) < int(down.iterations[0]) and int(down.iterations[-1]) < int(up.iterations[0])


@pytest.mark.slow
def test_continuation_with_the_adaptive_rule_agrees_within_the_error_bars():
    """The adaptive rule is oriented at the previous point of a row, at the solution itself in a cold solve:
    two orientations of one rule, so the fixed points agree within the reported quadrature errors."""
    alphas = np.array([1.85, 2.0])
    row = solve_along_alpha(PAPER, alphas, "positional", SMALL)
    cold = solve_state_evolution(PAPER, "positional", SMALL)
    assert np.all(np.asarray(row.converged))
    for key in ("q", "m", "V"):
        diff = np.abs(np.ravel(getattr(row, key)[-1]) - np.ravel(getattr(cold, key)))
        err = np.ravel(getattr(row, key + "_err")[-1]) + np.ravel(getattr(cold, key + "_err"))
        assert np.all(diff <= err), key
    assert abs(float(row.train_loss[-1]) - float(cold.train_loss)) <= float(row.errors.train_loss[-1]
                                                                            + cold.errors.train_loss)


@pytest.mark.slow       # one more compilation (~30 s); the L = 3 map is tested in tests/extensions/test_general_L.py
def test_general_L_uses_randomised_qmc_and_reports_errors():
    """L = 3 tokens, unequal sigma (6 Gaussian dimensions): the default is scrambled Sobol with replicas."""
    A = [[0.5, 0.3, 0.2], [0.2, 0.6, 0.2], [0.3, 0.3, 0.4]]
    p = make_params(1.5, 0.3, sigma=[0.5, 0.6, 0.4], A=A)
    rule = SobolRule.create(6, log2_n=9, n_replicas=4)
    res = solve_state_evolution(p, "semantic", rule)
    assert res.status_name == "converged"
    assert res.q.shape == (3,) and res.m.shape == (1, 1)
    assert float(res.train_loss) == pytest.approx(float(res.energetic_loss), rel=1e-6)
    assert np.all(np.isfinite(np.asarray(res.q_err))) and float(res.errors.train_loss) > 0
    assert float(jnp.abs(res.m[0, 0])) > 0      # no token-swap symmetry: the semantic branch has m free


@pytest.mark.slow
def test_alpha_to_zero_and_large_lambda_limits():
    res = solve_state_evolution_batch(PAPER, [1e-3, 1e-2], [0.3, 0.3], "semantic", SMALL)
    q0 = np.asarray(res.overlaps.q0[:, 0, 0])
    assert np.all(np.asarray(res.converged)) and q0[0] < q0[1] < 0.5
    big = solve_state_evolution(PAPER.replace(lam=jnp.asarray(1e4)), "positional", SMALL)
    assert big.status_name == "converged"
    assert float(big.overlaps.q0[0, 0]) < 1e-10 and abs(float(big.m[0, 0])) < 1e-6


@pytest.mark.parametrize("field,value,name", [
    ("alpha", 0.0, "alpha"), ("alpha", -1.0, "alpha"), ("omega", 1.5, "omega"), ("omega", -0.1, "omega"),
    ("lam", -0.01, "lam"), ("sigma", [0.5, -0.5], "sigma"), ("alpha", np.nan, "alpha"),
])
def test_invalid_parameters_raise_naming_the_parameter(field, value, name):
    with float64_scope():
        bad = PAPER.replace(**{field: jnp.asarray(value, jnp.float64)})
    with pytest.raises(ValueError, match=name):
        solve_state_evolution(bad, "semantic", SMALL)


def test_bad_grids_and_inits_are_rejected_before_compute():
    with pytest.raises(ValueError, match="omega"):
        solve_state_evolution_batch(PAPER, [1.0, 2.0], [0.3, 1.2], "semantic", SMALL)
    with pytest.raises(ValueError, match="alpha"):
        solve_state_evolution_batch(PAPER, [1.0, 2.0], [0.3], "semantic", SMALL)
    with pytest.raises(ValueError, match="branch"):
        solve_state_evolution(PAPER, "sideways", SMALL)
    for bad in (0, 1.5, True, "all"):
        with pytest.raises(ValueError, match="batch_size"):
            solve_state_evolution_batch(PAPER, [1.0, 2.0], [0.3, 0.3], "semantic", SMALL, batch_size=bad)
    with pytest.raises(ValueError, match="monotone"):
        solve_along_alpha(PAPER, [1.0, 2.0, 1.5], "semantic", SMALL)
    with pytest.raises(ValueError, match="dimension"):
        from phasejax.theory import gauss_hermite
        solve_state_evolution(PAPER, "semantic", gauss_hermite(3, 4))


CAP = 15


@jax.jit
def _capped_solve(alpha, init):
    """A solve at a traced alpha from a traced init with a cap of `CAP` iterations (one compilation for the
    tests below). A fixed rule and no error bars: the smallest program that has the whole loop. From the
    semantic default init at alpha = 2 it needs 18 iterations, so it stops 3 short."""
    return solve_state_evolution(PAPER.replace(alpha=alpha), init, gauss_hermite(4, 4),
                                 SEConfig(max_iter=CAP, errors=False))


def _semantic_init():
    return branch_init("semantic", PAPER)


def test_traced_invalid_input_is_reported_not_raised():
    with float64_scope():
        res = _capped_solve(jnp.asarray(-1.0), _semantic_init())
    assert int(res.status) == Status.INVALID_INPUT and not bool(res.converged)
    assert np.isnan(float(res.test_error)) and np.isnan(float(res.train_loss))


def test_an_invalid_init_is_reported():
    # theta0^2 > q0 violates I - theta0 q0^{-1} theta0^T >= 0
    init = branch_init("semantic", PAPER, q0=0.5, theta0=1.0)
    res = solve_state_evolution(PAPER, init)      # the default rule: the compilation of check_point
    assert int(res.status) == Status.INVALID_ITERATE and not bool(res.converged)
    assert np.isnan(float(res.train_loss)) and np.isnan(float(res.test_error))
    # asked to, the entry point raises instead (as optimistix's throw=True)
    with pytest.raises(SolverError, match="solve_state_evolution did not converge.*invalid_iterate"):
        solve_state_evolution(PAPER, init, throw=True)


def test_iteration_cap_is_reported():
    with float64_scope():
        res = _capped_solve(jnp.asarray(2.0), _semantic_init())
    assert int(res.status) == Status.MAX_ITERATIONS and res.status_name == "max_iterations"
    # (a fixed rule has one stage; a cold solve with an adaptive rule has two, each capped)
    assert int(res.iterations) == CAP and float(res.residual) > SEConfig().tol


def test_solver_error_is_the_distance_to_the_fixed_point():
    """A solve stopped 3 iterations short (residual ~1e-4) reports, as its solver error, the first-order
    distance to the fixed point: it equals the distance to the converged point (the same solve restarted
    there) entry by entry to 1% (the second-order remainder), and so does the test error's; after
    convergence it is negligible."""
    def flat(ov):      # float64 entries (jax's ravel_pytree outside float64_scope would round them to float32)
        return np.concatenate([np.ravel(np.asarray(v)) for v in jax.tree_util.tree_leaves(ov)])

    with float64_scope():
        init = _semantic_init()
        short = _capped_solve(jnp.asarray(2.0), init)
        full = _capped_solve(jnp.asarray(2.0), init._replace(overlaps=short.overlaps))
    assert full.status_name == "converged" and short.status_name == "max_iterations"
    assert 1e-5 < float(short.residual) < 1e-2
    x_full, x_short, shift = flat(full.overlaps), flat(short.overlaps), flat(short.errors.solver_overlaps)
    np.testing.assert_allclose(shift, np.abs(x_full - x_short), rtol=0.01, atol=1e-6 * np.max(np.abs(x_full)))
    assert np.max(shift) > 1e-4 * np.max(np.abs(x_full))             # not trivially small
    d_eps = abs(float(full.test_error) - float(short.test_error))
    assert float(short.errors.solver_test_error) == pytest.approx(d_eps, rel=0.01)
    # without replicas the quadrature part is unknown, so the total error is NaN; the solver part is not
    assert np.isnan(float(short.errors.test_error))
    assert np.max(flat(full.errors.solver_overlaps)) < 1e-6 * np.max(np.abs(x_full))


def test_traced_call_in_float32_explains_how_to_enable_float64():
    with pytest.raises(ValueError, match="float64_scope"):
        jax.jit(lambda a: solve_state_evolution(PAPER.replace(alpha=a), "semantic", SMALL))(jnp.asarray(1.0))


@pytest.mark.slow
def test_smoothed_selection_moves_the_fixed_point_less_than_its_errors():
    """Main setting, positional fixed point at alpha = 1.5, omega = 0.3, default rule: with `tie_width` 1e-3 and
    3e-4 the solve converges to the hard selection's fixed point within the two solves' error bars (theory
    notes, section 8.5)."""
    p = make_params(1.5, 0.3)
    hard = solve_state_evolution(p, "positional")
    for width in (1e-3, 3e-4):
        soft = solve_state_evolution(p, "positional", approximation=MapApproximation(tie_width=width))
        assert soft.status_name == "converged"
        for key, field, scale in (("q", "q0", 0.25), ("m", "m", 1.0), ("V", "V0", 0.25)):   # q, V = sigma^2 q0, V0
            err = scale * (_value(hard.errors.overlaps, field) + _value(soft.errors.overlaps, field))
            assert abs(_value(soft, key) - _value(hard, key)) < err, (width, key)
        assert abs(float(soft.test_error) - float(hard.test_error)) < float(hard.errors.test_error + soft.errors.test_error)
        # e_t's quadrature error is tiny (4e-8): the measured shifts, 0.03% and 0.003%, are below 0.1%
        assert float(soft.train_loss) == pytest.approx(float(hard.train_loss), rel=1e-3)


@pytest.mark.slow
def test_the_collapsed_semantic_branch_converges_onto_the_agnostic_fixed_point():
    """alpha = 0.5, omega = 0.3: the semantic branch has collapsed onto theta = 0. The hard selection (on the
    teacher-coordinate layout of the default rule) and the smoothed one (tie_width = 1e-4) both converge to
    theta = 0, the agnostic fixed point, whose training loss and V they reproduce (theory notes, 8.5-8.6)."""
    p = make_params(0.5, 0.3)
    hard = solve_state_evolution(p, "semantic")
    soft = solve_state_evolution(p, "semantic", approximation=MapApproximation(tie_width=1e-4))
    agnostic = solve_state_evolution(p, "agnostic")
    assert hard.status_name == "converged" and abs(_value(hard, "theta")) < 1e-8
    assert float(hard.train_loss) == pytest.approx(float(agnostic.train_loss), rel=1e-6)
    assert soft.status_name == "converged" and agnostic.status_name == "converged"
    assert abs(_value(soft, "theta")) < 1e-8
    assert float(soft.train_loss) == pytest.approx(float(agnostic.train_loss), rel=5e-4)
    assert _value(soft, "V") == pytest.approx(_value(agnostic, "V"), rel=5e-4)


@pytest.mark.slow       # two compilations of the solver (about 50 s)
def test_two_batchings_give_the_same_error_bars():
    """The error bars of a batch do not depend on how its points are grouped: one after the other (`lax.map`) or
    side by side (`vmap`). Every replica's layout is fixed by the rule (normals of one sign), so the two differ
    only by the rounding of programs XLA compiles differently (measured: 1e-13 relative)."""
    alphas, omegas = np.array([1.5, 1.7]), np.array([0.3, 0.3])
    one = solve_state_evolution_batch(PAPER, alphas, omegas, "positional", SMALL, batch_size=1)
    two = solve_state_evolution_batch(PAPER, alphas, omegas, "positional", SMALL, batch_size=2)
    for key in ("train_loss", "test_error"):
        a, b = np.asarray(getattr(one.errors, key)), np.asarray(getattr(two.errors, key))
        assert np.all(np.isfinite(a)) and np.all(a > 0)
        np.testing.assert_allclose(a, b, rtol=1e-9, err_msg=key)
    np.testing.assert_allclose(np.asarray(one.errors.overlaps.q0), np.asarray(two.errors.overlaps.q0), rtol=1e-9)


@pytest.mark.slow       # two compilations (~20 s)
def test_a_rows_memory_does_not_grow_with_its_length():
    """The row program runs its postprocessing per point inside the scan: XLA's memory analysis of a row of 12
    alphas needs no more temporary memory than one of 3 (only the outputs grow)."""
    from phasejax.theory.solver import _solve_row

    def temp(n):
        with float64_scope():
            init = branch_init("positional", PAPER)
            fn = jax.jit(lambda a: _solve_row(PAPER, a, init, SMALL, SEConfig(), MapApproximation()))
            mem = fn.lower(jnp.linspace(1.0, 2.0, n)).compile().memory_analysis()
        return mem.temp_size_in_bytes, mem.output_size_in_bytes

    (t3, o3), (t12, o12) = temp(3), temp(12)
    assert t12 <= 1.02 * t3 + (o12 - o3), (t3, t12)
