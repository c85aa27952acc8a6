"""SGD ODEs: linear escape from the plateau, omega = 0 and 1 limits, the table's range, the plateau rates against
a direct quadrature, and agreement with finite-d online SGD within standard errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.dynamics import (
    MECHANISMS, build_population_table, make_dynamics_params, online_sgd, sgd_ode_solve, sgd_ode_trajectory,
)
from phasejax.dynamics.ode import escape_time_estimate, plateau_rates, sgd_drift
from phasejax.dynamics.population import in_table_range, population_terms, quadrature_rule, spherical_gradient
from phasejax.solvers import Status


@pytest.fixture(scope="module")
def solve(small_table):
    """`sgd_ode_solve` on the small table, compiled once for scalar arguments; called per point."""
    with float64_scope():
        f = jax.jit(lambda tab, o, lr, m0, e0: sgd_ode_solve(tab, o, lr, m0, e0, t_max=3e3, r_escape=0.05))

    def run(o, lr, m0, e0, table=small_table):
        with float64_scope():
            outs = [f(table, *(jnp.asarray(v, jnp.float64) for v in args)) for args in zip(o, lr, m0, e0)]
        return jax.tree_util.tree_map(lambda *a: np.asarray(a), *outs)
    return run


def test_escape_time_matches_the_linear_growth_from_a_tiny_init(small_table, solve):
    # on the invariant axis e = 0 the overlap grows as m0 exp(lambda t) until nonlinear terms (O(m^2)) matter,
    # lambda the linearisation of the ODE's right-hand side at the origin (the table's interpolated drift)
    omega, lr, m0 = 0.3, 0.5, 1e-5
    res = solve([omega], [lr], [m0], [0.0])
    with float64_scope():
        lam_m = jax.jacfwd(lambda m: sgd_drift(m, 0.0, omega, lr, small_table)[0])(0.0)
        est = float(escape_time_estimate(lam_m, m0, r_escape=0.05))
    assert float(res.escape_time[0]) == pytest.approx(est, rel=0.02)


def test_omega_limits_reach_the_expected_mechanism(solve):
    # omega = 0: purely semantic target; omega = 1: purely positional target (the target ignores the tokens)
    res = solve([0.0, 1.0, 0.0, 0.3, 0.3], [0.5, 0.5, 1.0, 0.5, 1.0], [0.05] * 5, [0.05] * 5)
    assert [MECHANISMS[k] for k in res.mechanism] == ["semantic", "positional", "semantic", "semantic", "semantic"]
    assert np.all(res.status == Status.CONVERGED) and np.all(res.in_table)
    assert abs(res.e[0]) < 1e-6 and abs(res.m[1]) < 1e-6
    # omega = 0 is realizable: at m = 1 the per-sample gradient vanishes (Gamma = 0), so the learning-rate term
    # vanishes with the gradient term and SGD recovers the teacher, m -> 1 (to the steady-state tolerance)
    assert 1 - res.m[0] < 1e-6 and 1 - res.m[2] < 1e-6
    # omega = 0.3 is not: Gamma(1, 0) > 0 keeps the fixed point inside the sphere, more so for larger lr
    assert res.m[3] < 1 - 1e-4 and res.m[4] < res.m[3] - 1e-3


def test_table_covers_every_trajectory_or_flags_the_ones_that_leave_it(solve, small_table):
    # omega = 0, lr = 0.5: the trajectory ends at the semantic fixed point m = 1 (the sphere; a table to m = 0.98
    # put it at m = 0.9993 by extrapolation)
    res = solve([0.0], [0.5], [0.05], [0.05])
    assert float(res.m[0]) > 0.998 and bool(res.in_table[0]) and int(res.status[0]) == Status.CONVERGED
    assert float(small_table.m_grid[-1]) == 1.0 and float(small_table.e_grid[-1]) == 1.0   # the whole sphere
    # a table that stops at m = 0.98 (the grid of earlier versions): the same trajectory leaves it and is flagged
    # (same grid size and order as small_table, so the compiled solve is reused)
    short = build_population_table(make_dynamics_params(0.5), n_grid=11, order=8, m_max=0.98)
    out = solve([0.0], [0.5], [0.05], [0.05], table=short)
    assert not bool(out.in_table[0]) and int(out.status[0]) == Status.INVALID_ITERATE
    with float64_scope():
        assert float(out.m[0]) > 0.98 and not bool(in_table_range(short, out.m[0], 0.0))
        assert bool(in_table_range(short, 0.97, 0.0))
    with pytest.raises(ValueError, match="m_max"):
        build_population_table(make_dynamics_params(0.5), n_grid=5, order=4, m_max=1.01)


@pytest.mark.parametrize("omega,lr", [(0.3, 0.5), (0.8, 0.05)])
def test_plateau_rates_against_a_finite_difference_of_the_direct_drift(small_table, omega, lr):
    # lambda_m = d(dm/dt)/dm at (0, 0): a centred difference of the ODE's right-hand side with R_m, R_e, Gamma
    # by direct quadrature of the table's order (no table), against the table's stored curvatures
    params = make_dynamics_params(omega)
    h = 1e-3
    with float64_scope():
        rule = quadrature_rule(2, 8)
        terms = jax.jit(lambda m, e: population_terms(m, e, params, rule))

        def drift(m, e):
            t = terms(m, e)
            gm, ge = spherical_gradient(m, e, t.dR_dm, t.dR_de)
            shrink = 0.5 * lr**2 * t.gamma
            return np.asarray([-lr * gm - shrink * m, -lr * ge - shrink * e], np.float64)

        lam_m = (drift(h, 0.0)[0] - drift(-h, 0.0)[0]) / (2 * h)
        lam_e = (drift(0.0, h)[1] - drift(0.0, -h)[1]) / (2 * h)
        got = np.asarray(plateau_rates(small_table, omega, lr), np.float64)
        # the ODE's own linearisation interpolates the table: right to its interpolation error only
        jac = np.asarray(jax.jacfwd(lambda y: jnp.stack(sgd_drift(y[0], y[1], omega, lr, small_table)))(
            jnp.zeros(2)))
    # the difference errs by O(h^2) (relative ~1e-6); scale: the rates' size lr (|R_mm| + |R_ee| + lr Gamma)
    scale = abs(lam_m) + abs(lam_e)
    np.testing.assert_allclose(got, [lam_m, lam_e], rtol=0, atol=1e-5 * scale)
    assert abs(jac[0, 1]) < 1e-12 and abs(jac[1, 0]) < 1e-12          # the axes are invariant
    np.testing.assert_allclose(np.diag(jac), [lam_m, lam_e], rtol=0, atol=0.05 * scale)   # 2-3 % here


# ODE against finite-d online SGD, on the smooth table (sigma = 0.5, conftest): omega = 0.2, lr = 2 from
# (m, e) = (0.1, 0.1); m grows to 0.98 by t = 40, e decays. The seeds' mean differs from the ODE by its
# standard error and by the finite-d bias of online SGD, O(1/d): measured with 64 seeds, 3.1 / d at d = 128
# (largest near the escape, t = 24) and 1 / d at d = 512.
OMEGA, LR, M0, E0 = 0.2, 2.0, 0.1, 0.1
N_SE = 4.0          # standard errors of the seeds' mean
FINITE_D = 4.0      # finite-d allowance FINITE_D / d on the mean overlaps


def _sgd_runs(d, seeds, t_end, record_every, key):
    params = make_dynamics_params(OMEGA, sigma=0.5)
    f = jax.jit(jax.vmap(lambda k: online_sgd(params, k, LR, d=d, n_steps=int(t_end * d),
                                              record_every=record_every, m0=M0, e0=E0)))
    runs = f(jax.random.split(jax.random.PRNGKey(key), seeds))
    return np.asarray(runs.t[0], np.float64), np.asarray(runs.m, np.float64), np.asarray(runs.e, np.float64)


def test_ode_against_finite_d_online_sgd_within_standard_errors(smooth_table):
    d, seeds = 128, 16
    t, m, e = _sgd_runs(d, seeds, 40, 4 * d, 3)
    with float64_scope():
        m_ode, e_ode = (np.asarray(v) for v in sgd_ode_trajectory(smooth_table, OMEGA, LR, M0, E0, jnp.asarray(t)))
    for v, ref in ((m, m_ode), (e, e_ode)):
        se = v.std(0, ddof=1) / np.sqrt(seeds)
        tol = N_SE * se + FINITE_D / d
        assert np.all(np.abs(v.mean(0) - ref) < tol), (v.mean(0) - ref, tol)
    assert m_ode[-1] > 0.9 and m.mean(0)[-1] > 0.9 and abs(e_ode[-1]) < 0.01   # semantic in both


def _crossing_times(t, m, level):
    """Per row of `m (n, T)`: the first time `m` reaches `level`, linearly interpolated between records."""
    out = []
    for row in m:
        j = int(np.argmax(row >= level))
        assert row[j] >= level > row[j - 1], "the run must cross the level once it is recorded"
        out.append(t[j - 1] + (level - row[j - 1]) * (t[j] - t[j - 1]) / (row[j] - row[j - 1]))
    return np.asarray(out)


@pytest.mark.slow
def test_escape_time_ratio_of_the_ode_to_finite_d_sgd(smooth_table):
    # escape time: the first time m reaches 0.5 (t ~ 17.5 in the ODE). The ratio of the seeds' mean escape
    # time to the ODE's, with its standard error, must be 1 within N_SE errors plus a finite-d allowance
    # FINITE_D / d (relative: the mean overlap's O(1/d) bias, divided by the slope dm/dt ~ 0.05 near m = 0.5,
    # is a time shift O(1 / (0.05 d)) on t ~ 17.5, i.e. about 1 / d relative)
    level, seeds = 0.5, 32
    with float64_scope():
        ts = np.linspace(0.0, 30.0, 3001)
        m_ode, _ = sgd_ode_trajectory(smooth_table, OMEGA, LR, M0, E0, jnp.asarray(ts))
    t_ode = float(_crossing_times(ts, np.asarray(m_ode)[None], level)[0])
    ratios = []
    for d in (256, 1024):
        t, m, _ = _sgd_runs(d, seeds, 30, d // 8, 11 + d)
        t_sgd = _crossing_times(t, m, level)
        ratio, err = t_sgd.mean() / t_ode, t_sgd.std(ddof=1) / np.sqrt(seeds) / t_ode
        assert abs(ratio - 1.0) < N_SE * err + FINITE_D / d, (d, ratio, err)
        ratios.append((ratio, err))
    # the spread of escape times shrinks with d (fluctuations of order 1/sqrt(d))
    assert ratios[1][1] < ratios[0][1]
