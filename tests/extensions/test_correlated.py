"""Tests of `phasejax.extensions.correlated`: label law and data (Monte Carlo), reduction of the mixture SE to the
main SE, the structure of the cluster gain, thresholds, write/load; experiments vs theory (slow)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax.extensions.correlated import (
    cluster_gain,
    correlated_params,
    embed_overlaps,
    empirical_thresholds,
    generate_mixture_data,
    make_label_law,
    mixture_map,
    mixture_test_error,
    mixture_training_loss,
    sample_labels,
    train_correlated,
    two_cluster_law,
)
from phasejax.precision import float64_scope
from phasejax.sweep import RunOptions
from phasejax.theory.fields import Overlaps
from phasejax.theory.quadrature import gauss_hermite
from phasejax.theory.se_map import state_evolution_map
from phasejax.theory.updates import hats_from_nodes, node_values, overlap_updates, test_error, training_loss

from _compare import RTOL_FLOAT32


# A positional-like and a semantic-like state of the paper's setting (per-token q ~ 0.05, V ~ 11).
STATE = dict(q0=0.2, m=0.25, V0=45.0, theta0=0.15)


def _state(m=STATE["m"], theta0=STATE["theta0"]):
    return Overlaps(q0=jnp.asarray([[STATE["q0"]]]), m=jnp.asarray([[m]]), V0=jnp.asarray([[STATE["V0"]]]),
                    theta0=jnp.asarray([[theta0]]))


@jax.jit
def _main_map(ov, params, rule):
    """The map of the main model on the Gaussian rule alone (no label configurations, the model's `C`)."""
    new, ev = state_evolution_map(params, ov, rule)
    return new, ev.hats, ev.envelope


# one compilation per function for every law (the law is an array argument), not an op-by-op run
_mixture_map = jax.jit(mixture_map)
_cluster_gain = jax.jit(cluster_gain)
_mixture_test_error = jax.jit(mixture_test_error)
_test_error = jax.jit(test_error)


# ---------------------------------------------------------------------------- inputs


@pytest.mark.parametrize("kwargs, name", [(dict(rho=1.2), "rho"), (dict(rho=-1.01), "rho"), (dict(rho=np.nan), "rho"),
                                          (dict(rho=0.0, mean_norm=-1.0), "mean_norm")])
def test_two_cluster_law_rejects_bad_inputs(kwargs, name):
    with pytest.raises(ValueError, match=name):
        two_cluster_law(**kwargs)


def test_make_label_law_rejects_bad_inputs():
    with pytest.raises(ValueError, match="probs"):
        make_label_law([[0, 0], [1, 1]], [0.7, 0.7], [[1.0], [-1.0]])
    with pytest.raises(ValueError, match="configs"):
        make_label_law([[0, 2]], [1.0], [[1.0], [-1.0]])
    with pytest.raises(ValueError, match="means"):
        make_label_law([[0, 0]], [1.0], [[np.inf]])
    params = correlated_params()
    with pytest.raises(ValueError, match="d"):
        generate_mixture_data(jax.random.PRNGKey(0), params, two_cluster_law(0.0), d=0, n=3)
    with pytest.raises(ValueError, match="rho"):
        train_correlated((1.0,), (2.0,), (0,), params=params, d=10)


# ---------------------------------------------------------------------------- label law and data (Monte Carlo)


def test_label_law_matches_specification():
    rho, n = 0.6, 40000
    labels = np.asarray(sample_labels(jax.random.PRNGKey(1), two_cluster_law(rho), n))
    same = np.mean(labels[:, 0] == labels[:, 1])
    se = np.sqrt(0.25 / n)
    assert abs(same - (1 + rho) / 2) < 4 * se
    assert np.all(np.abs(labels.mean(0) - 0.5) < 4 * se)


def test_mixture_data_moments():
    rho, a, d, n = -0.5, 1.5, 64, 6000
    params = correlated_params(0.3)
    data = generate_mixture_data(jax.random.PRNGKey(2), params, two_cluster_law(rho, a), d=d, n=n)
    assert data.x.shape == (n, 2, d) and data.x.dtype == jnp.float32
    s = np.asarray(data.x @ data.v[0])             # (n, 2): a s_l + sigma z
    sig2 = 0.25
    assert np.allclose(np.mean(s**2, 0), a**2 + sig2, rtol=0.05)
    assert abs(np.mean(s[:, 0] * s[:, 1]) - a**2 * rho) < 4 * np.sqrt((a**2 + sig2) ** 2 / n)
    assert np.allclose(np.asarray(data.u @ data.v.T), 0.0, atol=1e-6)
    signs = 1 - 2 * np.asarray(data.labels)       # cluster 0 -> +a
    assert np.allclose(np.mean(s * signs, 0), a, atol=4 * np.sqrt(sig2 / n))
    # the labels are the teacher's on the full tokens, means included
    hstar = np.asarray(data.x @ data.Qstar)[..., 0] / np.sqrt(d)
    z = hstar[:, :, None] * hstar[:, None, :]
    T = 0.7 * np.exp(z - z.max(-1, keepdims=True)) / np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True) \
        + 0.3 * np.asarray([[0.6, 0.4], [0.4, 0.6]])
    assert np.allclose(np.einsum("nij,njd->nid", T, np.asarray(data.x)), np.asarray(data.y), atol=1e-4)


def test_vmapped_data_equals_one_by_one():
    params = correlated_params(0.3)
    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    law = two_cluster_law(0.4)
    batched = jax.vmap(lambda k: generate_mixture_data(k, params, law, d=16, n=5).x)(keys)
    for i, k in enumerate(keys):    # the same draws; float32 sums of order-1 terms in another batching
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(generate_mixture_data(k, params, law, 16, 5).x),
                                   rtol=RTOL_FLOAT32, atol=RTOL_FLOAT32)


# ---------------------------------------------------------------------------- state evolution


def test_mixture_map_reduces_to_main_map():
    """At m_cluster = 0 every label configuration has the fields of the main model: the maps agree for every law;
    with zero-norm means they agree at any m_cluster (which then gets no update)."""
    with float64_scope():
        params = correlated_params(0.3).replace(alpha=jnp.asarray(1.5))
        rule = gauss_hermite(4, 5)
        ov = _state()
        main, hats, env = _main_map(ov, params, rule)
        main_error = _test_error(ov, params, rule)
        for law in (two_cluster_law(0.9), two_cluster_law(-0.5, 2.0)):
            new, ev = _mixture_map(embed_overlaps(ov, jnp.zeros((1, 1))), params, law, rule.points, rule.weights)
            for name in ("q0", "V0", "theta0"):
                np.testing.assert_allclose(getattr(new, name), getattr(main, name), rtol=1e-7, atol=1e-12)
            np.testing.assert_allclose(new.m[:1], main.m, rtol=1e-7)
            np.testing.assert_allclose(new.m[1:], 0.0, atol=1e-12)
            np.testing.assert_allclose(mixture_training_loss(embed_overlaps(ov, jnp.zeros((1, 1))), ev, params, law),
                                       training_loss(ov, hats, env, params), rtol=1e-7)
            np.testing.assert_allclose(_mixture_test_error(embed_overlaps(ov, jnp.zeros((1, 1))), params, law, rule),
                                       main_error, rtol=1e-7)
        zero = two_cluster_law(0.7, 0.0)
        new, _ = _mixture_map(embed_overlaps(ov, jnp.asarray([[0.3]])), params, zero, rule.points, rule.weights)
        np.testing.assert_allclose(new.q0, main.q0, rtol=1e-7)
        np.testing.assert_allclose(new.m, jnp.concatenate([main.m, jnp.zeros((1, 1))]), rtol=1e-7, atol=1e-12)


@pytest.mark.slow       # ~20 s; the reduction to the main map (test_mixture_map_reduces_to_main_map) stays in the default
def test_cluster_gain_structure():
    """gain(rho) = a^2 G^-1 sum_lk E[s_l s_k] dmhat_l/dm_k: affine in rho, proportional to a^2, and at rho = -1
    (the cluster signs are +-(1, -1), a second positional encoding with a random sign) equal to the main SE's gain of
    the positional overlap m out of the m = 0 subspace, at a semantic state."""
    with float64_scope():
        params = correlated_params(0.3).replace(alpha=jnp.asarray(1.5))
        rule = gauss_hermite(4, 5)
        ov = _state(m=0.0)
        g = {rho: float(_cluster_gain(ov, params, two_cluster_law(rho), rule.points, rule.weights)[0, 0])
             for rho in (-1.0, 0.0, 1.0)}
        g_half = float(_cluster_gain(ov, params, two_cluster_law(0.5), rule.points, rule.weights)[0, 0])
        g2 = float(_cluster_gain(ov, params, two_cluster_law(0.0, 2.0), rule.points, rule.weights)[0, 0])
        warm = jax.jit(lambda o: node_values(o, params, rule.points, jnp.zeros((rule.size, 2)), 1,   # one compilation,
                                             extra_starts=True).h)(ov)                            # not op by op

        def F(m):
            o = ov.replace(m=m.reshape(1, 1))
            nodes = node_values(o, params, rule.points, warm, 1, extra_starts=True)
            return overlap_updates(hats_from_nodes(o, params, nodes, rule.weights), params).m.reshape(-1)

        g_main = float(jax.jit(jax.jacfwd(F))(jnp.zeros((1,)))[0, 0])
    assert abs(g[0.0]) > 1e-3
    np.testing.assert_allclose(g_half, 0.5 * (g[0.0] + g[1.0]), rtol=1e-8)
    np.testing.assert_allclose(g[0.0], 0.5 * (g[1.0] + g[-1.0]), rtol=1e-8)
    np.testing.assert_allclose(g2, 4.0 * g[0.0], rtol=1e-8)
    np.testing.assert_allclose(g[-1.0], g_main, rtol=1e-8)


# ---------------------------------------------------------------------------- thresholds, results


def test_empirical_thresholds_on_constructed_data():
    """Paired runs whose branch gap is linear in alpha with its root at 1.2 (rho = 0) and 1.4 (rho = 0.9)."""
    alphas = np.asarray([0.5, 1.0, 1.5, 2.0])
    rows = {k: [] for k in ("d", "rho", "alpha", "seed", "init", "train_loss")}
    for rho, ac in ((0.0, 1.2), (0.9, 1.4)):
        for a in alphas:
            for s in range(4):
                for init, e in (("positional", 1.0), ("semantic", 1.0 + 0.01 * (ac - a) + 1e-4 * (s - 1.5))):
                    for k, v in zip(rows, (100, rho, a, s, init, e)):
                        rows[k].append(v)
    thr = empirical_thresholds({k: np.asarray(v) for k, v in rows.items()})
    assert thr["alpha_c"].tolist() == pytest.approx([1.2, 1.4], abs=1e-9)
    assert thr["shift"].tolist() == pytest.approx([0.0, 0.2], abs=1e-9)
    assert thr["alpha_c_status"].tolist() == ["in_grid", "in_grid"]
    # each seed's root sits 0.01 (s - 1.5) off: the bootstrap 95% half-width is ~1.96 sd / sqrt(4) of those offsets
    expected = 1.96 * np.std(0.01 * (np.arange(4) - 1.5)) / 2
    np.testing.assert_allclose(thr["alpha_c_err"], expected, rtol=0.3)
    assert np.all(thr["shift_err"] < 1e-9)          # the same seed offsets at both rho: the paired shift is exact


# ---------------------------------------------------------------------------- experiments (slow)


@pytest.mark.slow
def test_vmapped_training_equals_one_by_one():
    params = correlated_params(0.3)
    both = train_correlated((1.5,), (0.0, 0.9), (0,), params=params, d=60, inits=("positional",),
                            options=RunOptions(progress=False, chunk_size=2))
    for i, rho in enumerate((0.0, 0.9)):
        one = train_correlated((1.5,), (rho,), (0,), params=params, d=60, inits=("positional",),
                               options=RunOptions(progress=False, chunk_size=1))
        # float32 L-BFGS to an RMS gradient of 1e-6: a vmapped and a single run sum in different orders and stop
        # at slightly different points, a few 1e-6 apart (m_cluster, near 0, shows it: -0.002713 vs -0.002710)
        for k in ("train_loss", "m", "m_cluster", "q"):
            np.testing.assert_allclose(both[k][i], one[k][0], rtol=2e-4, atol=1e-5)


@pytest.mark.slow
def test_experiments_approach_theory_as_d_grows():
    """Seed-averaged training loss of positional and semantic inits at alpha = 2, rho = 0.9 against the main SE
    (the mixture fixed point): the gap at d = 800 is below the gap at d = 100 and below 10%."""
    from phasejax.theory import make_params, solve_state_evolution

    theory = {b: float(solve_state_evolution(make_params(2.0, 0.3), b).train_loss) for b in ("positional", "semantic")}
    gaps = {}
    for d in (100, 800):
        runs = train_correlated((2.0,), (0.9,), (0, 1, 2), params=correlated_params(0.3), d=d,
                                options=RunOptions(progress=False, chunk_size=6))
        gaps[d] = max(abs(runs["train_loss"][runs["init"] == c].mean() / theory[b] - 1)
                      for c, b in ((0, "positional"), (1, "semantic")))
    assert gaps[800] < gaps[100]
    assert gaps[800] < 0.1
