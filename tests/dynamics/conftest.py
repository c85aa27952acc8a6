import pytest


@pytest.fixture(scope="session")
def small_table():
    """A coarse population table (11 x 11 nodes per quadrant, Gauss-Hermite order 8): enough for the ODE tests."""
    from phasejax.dynamics import build_population_table, make_dynamics_params

    return build_population_table(make_dynamics_params(0.5), n_grid=11, order=8)


@pytest.fixture(scope="session")
def smooth_table():
    """The same grid at token scale `sigma = 0.5`, where the Gauss-Hermite rule has nearly converged at order 8:
    at omega = 0.3 the plateau curvatures `R_mm = -0.0436`, `R_ee = -0.0062` are within 3e-4 of order 24, and
    the ODE trajectory of `test_ode.py` moves by at most 1.1e-3 in `m` from order 8 to order 12 (at
    `sigma = 1`, order 8 misses `R_mm` by 20 %). So ODE and finite-d SGD compare without a quadrature
    allowance beyond the stated finite-d one."""
    from phasejax.dynamics import build_population_table, make_dynamics_params

    return build_population_table(make_dynamics_params(0.5, sigma=0.5), n_grid=11, order=8)
