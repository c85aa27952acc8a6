import pytest


@pytest.fixture(scope="session")
def small_table():
    """A coarse population table (11 x 11 nodes per quadrant, Gauss-Hermite order 8): enough for the ODE tests."""
    from phasejax.dynamics import build_population_table, make_dynamics_params

    return build_population_table(make_dynamics_params(0.5), n_grid=11, order=8)
