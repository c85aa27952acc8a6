"""Fixed-point census: every fixed point of a subspace from several seeds, deduplicated, the branch the lowest e_t."""

import numpy as np
import pytest

from phasejax.theory import SplitProductRule, census_seeds, fixed_point_census, make_params, solve_state_evolution
from phasejax.theory.solver import BranchInit

SMALL = SplitProductRule(n_smooth=4, eta_step=1.0, n_piece=8, n_replicas=2)


@pytest.fixture(scope="module")
def census():
    """alpha = 0.6, omega = 0: the positional subspace holds a stable m > 0 point and the m = 0 point."""
    return fixed_point_census(make_params(0.6, 0.0), "positional", quadrature=SMALL)


def test_census_finds_the_positional_and_the_m_zero_fixed_points(census):
    r = census.results
    d = np.asarray(census.distinct)
    m = np.asarray(r.m)[:, 0, 0]
    assert int(census.n_distinct) == int(d.sum()) >= 2
    assert np.any(d & (m > 0.1)) and np.any(d & (np.abs(m) < 1e-3))
    # every distinct one is a fixed point: a solve started there ends where it started
    p = make_params(0.6, 0.0)
    for i in np.flatnonzero(d):
        ov = type(r.overlaps)(*(np.asarray(getattr(r.overlaps, k))[i] for k in ("q0", "m", "V0", "theta0")))
        init = BranchInit(overlaps=ov, hold_m=np.asarray(False), hold_theta=np.asarray(True))
        again = solve_state_evolution(p, init, SMALL)
        assert again.status_name == "converged"
        # (the cold solve re-orients the rule at its start, so the two agree within the quadrature errors)
        for key in ("q", "m", "V"):
            dev = np.abs(np.ravel(getattr(again, key)) - np.ravel(getattr(r, key)[i]))
            tol = np.ravel(getattr(again, key + "_err")) + np.ravel(getattr(r, key + "_err")[i]) + 1e-6
            assert np.all(dev <= tol), (key, dev, tol)


def test_branch_is_the_lowest_training_loss_and_duplicates_are_merged(census):
    r = census.results
    d = np.asarray(census.distinct)
    e = np.asarray(r.train_loss)
    b = int(census.branch_index)
    assert d[b] and e[b] == e[d].min()
    assert float(census.branch.train_loss) == e[b]
    # duplicates: converged solves that are not distinct agree with a distinct one
    conv = np.asarray(r.converged)
    X = np.stack([np.asarray(r.q)[:, 0], np.asarray(r.m)[:, 0, 0], np.asarray(r.V)[:, 0]], 1)
    for i in np.flatnonzero(conv & ~d):
        assert np.min(np.max(np.abs(X[d] - X[i]) / np.maximum(1, np.abs(X[i])), axis=1)) <= 1e-4
    # the m > 0 point is stable in its subspace and is the branch here (lower e_t than m = 0)
    assert float(np.asarray(r.m)[b, 0, 0]) > 0.1 and float(r.stability[b]) < 1.0


def test_bad_seeds_are_rejected():
    p = make_params(0.6, 0.0)
    with pytest.raises(ValueError, match="seeds"):
        census_seeds("positional", p, seeds=())
    with pytest.raises(ValueError, match="seed"):
        census_seeds("positional", p, seeds=[(0.1, 0.2)])
