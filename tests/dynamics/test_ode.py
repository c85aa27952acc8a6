"""SGD ODEs: linear escape from the plateau, omega = 0 and 1 limits, and agreement with finite-d online SGD."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.dynamics import (
    MECHANISMS,
    escape_time_estimate,
    make_dynamics_params,
    online_sgd,
    plateau_rates,
    sgd_ode_solve,
    sgd_ode_trajectory,
)
from phasejax.solvers import Status


@pytest.fixture(scope="module")
def solve(small_table):
    """`sgd_ode_solve` on the small table, compiled once for scalar arguments; called per point."""
    with float64_scope():
        f = jax.jit(lambda o, lr, m0, e0: sgd_ode_solve(small_table, o, lr, m0, e0, t_max=3e3, r_escape=0.05))

    def run(o, lr, m0, e0):
        with float64_scope():
            outs = [f(*(jnp.asarray(v, jnp.float64) for v in args)) for args in zip(o, lr, m0, e0)]
        return jax.tree_util.tree_map(lambda *a: np.asarray(a), *outs)
    return run


def test_escape_time_matches_the_linear_growth_from_a_tiny_init(small_table, solve):
    # on the invariant axis e = 0 the overlap grows as m0 exp(lambda_m t) until nonlinear terms (O(m^2)) matter
    omega, lr, m0 = 0.3, 0.5, 1e-5
    res = solve([omega], [lr], [m0], [0.0])
    with float64_scope():
        lam_m, _ = plateau_rates(small_table, omega, lr)
        est = float(escape_time_estimate(lam_m, m0, r_escape=0.05))
    assert float(res.escape_time[0]) == pytest.approx(est, rel=0.02)


def test_omega_limits_reach_the_expected_mechanism(solve):
    # omega = 0: purely semantic target; omega = 1: purely positional target (the target ignores the tokens)
    res = solve([0.0, 1.0, 0.0], [0.5, 0.5, 1.0], [0.05, 0.05, 0.05], [0.05, 0.05, 0.05])
    assert [MECHANISMS[k] for k in res.mechanism] == ["semantic", "positional", "semantic"]
    assert np.all(res.status == Status.CONVERGED)
    assert abs(res.e[0]) < 1e-6 and abs(res.m[1]) < 1e-6
    # the learning-rate term keeps the fixed point inside the sphere: m^2 + e^2 < 1, more so for larger lr
    assert res.m[0] < 1 and res.m[2] < res.m[0] - 1e-3


def test_ode_against_finite_d_online_sgd_within_the_finite_size_band(small_table):
    # omega = 0.3, lr = 0.5, from (m, e) = (0.1, 0.1) at d = 128: 8 seeds of online SGD to t = 40
    params = make_dynamics_params(0.3)
    d, lr, seeds = 128, 0.5, 8
    f = jax.jit(jax.vmap(lambda k: online_sgd(params, k, lr, d=d, n_steps=40 * d, record_every=4 * d,
                                              m0=0.1, e0=0.1)))
    runs = f(jax.random.split(jax.random.PRNGKey(3), seeds))
    t = np.asarray(runs.t[0], np.float64)
    with float64_scope():
        m_ode, e_ode = (np.asarray(v) for v in sgd_ode_trajectory(small_table, 0.3, lr, 0.1, 0.1, jnp.asarray(t)))
    m, e = np.asarray(runs.m, np.float64), np.asarray(runs.e, np.float64)
    # the ODE stays inside the seeds' band (mean +- 3 std + 1/sqrt(d)), and the seeds' mean is close to it
    for v, ref in ((m, m_ode), (e, e_ode)):
        band = 3 * v.std(0) + 1 / np.sqrt(d)
        assert np.all(np.abs(v.mean(0) - ref) < band), (v.mean(0), ref, band)
    assert m_ode[-1] > 0.5 and m.mean(0)[-1] > 0.5        # the semantic overlap has grown in both


@pytest.mark.slow
def test_sgd_deviation_from_the_ode_shrinks_with_d(small_table):
    params = make_dynamics_params(0.3)
    lr, seeds = 0.5, 8
    errs = []
    for d in (100, 400):
        f = jax.jit(jax.vmap(lambda k: online_sgd(params, k, lr, d=d, n_steps=40 * d, record_every=4 * d,
                                                  m0=0.1, e0=0.1)))
        runs = f(jax.random.split(jax.random.PRNGKey(5), seeds))
        t = np.asarray(runs.t[0], np.float64)
        with float64_scope():
            m_ode, e_ode = (np.asarray(v) for v in sgd_ode_trajectory(small_table, 0.3, lr, 0.1, 0.1,
                                                                         jnp.asarray(t)))
        errs.append(np.sqrt(np.mean((np.asarray(runs.m) - m_ode) ** 2 + (np.asarray(runs.e) - e_ode) ** 2)))
    assert errs[1] < errs[0]
