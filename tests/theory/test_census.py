"""Fixed-point census: every fixed point of a subspace from several seeds, deduplicated, the branch the lowest e_t."""

import numpy as np
import pytest

from phasejax.theory import SplitProductRule, fixed_point_census, make_params
from phasejax.theory.census import CENSUS_SEEDS, census_seeds

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


@pytest.mark.slow       # a second census run; the fixture's own checks stay in the default
def test_every_distinct_point_is_a_fixed_point(census):
    r = census.results
    d = np.asarray(census.distinct)
    # every distinct one is a fixed point: solves started there end where they started. They are the census's
    # own cold solves (both methods), seeded with the distinct points, repeated to the census's four seeds: the
    # same compiled call as the fixture's.
    p = make_params(0.6, 0.0)
    s2 = float(np.mean(np.asarray(p.sigma) ** 2))           # census seeds are per-token: overlaps times s2
    ov = {k: np.asarray(getattr(r.overlaps, k))[:, 0, 0] for k in ("q0", "m", "V0", "theta0")}
    found = np.flatnonzero(d)
    picks = np.resize(found, len(CENSUS_SEEDS["positional"]))
    seeds = [(s2 * ov["q0"][i], ov["m"][i], s2 * ov["V0"][i], s2 * ov["theta0"][i]) for i in picks]
    again = fixed_point_census(p, "positional", seeds=seeds, quadrature=SMALL).results
    for lane, i in enumerate(np.concatenate([picks, picks])):          # pseudo-transient, then plain Newton
        assert bool(again.converged[lane]), (lane, i)
        # (a cold solve re-orients the rule at its start, so the two agree within the quadrature errors)
        for key in ("q", "m", "V"):
            dev = np.abs(np.ravel(getattr(again, key)[lane]) - np.ravel(getattr(r, key)[i]))
            tol = np.ravel(getattr(again, key + "_err")[lane]) + np.ravel(getattr(r, key + "_err")[i]) + 1e-6
            assert np.all(dev <= tol), (key, lane, i, dev, tol)


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


def test_bad_batch_size_raises_before_any_compute():
    with pytest.raises(ValueError, match="batch_size"):
        fixed_point_census(make_params(0.6, 0.0), "positional", quadrature=SMALL, batch_size=0)
