"""Tests of `phasejax.extensions.untied`: the untied student, its reduction to the tied model at W_Q = W_K (loss,
fields and test error node by node; the prox does not keep W_Q = W_K), inits and validation, threshold comparison,
vmapped runs; SE and experiments vs theory (slow)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax.empirics.students import UntiedAttention
from phasejax.empirics.training import TrainConfig
from phasejax.extensions._tables import run_tasks
from phasejax.extensions.untied import (
    INITS,
    tied_embedding,
    untied_init,
    untied_params,
    untied_run,
    untied_student,
)
from phasejax.precision import float64_scope
from phasejax.theory import make_params
from phasejax.theory.fields import Overlaps, field_maps, gaussian_fields
from phasejax.theory.quadrature import Quadrature, gauss_hermite
from phasejax.theory.updates import test_error as se_test_error

TIED = dict(q0=0.4, m=0.22, V0=45.0, theta0=0.25)


def _tied_ov():
    return Overlaps(**{k: jnp.asarray([[v]], jnp.float64) for k, v in TIED.items()})


def _embed_nodes(points):
    """Untied nodes `(N, 6)` from tied nodes `(N, 4)`: `xi_{l,Q} = xi_{l,K} = xi_l / sqrt 2`, so that
    `(xi_{l,Q} + xi_{l,K}) / sqrt 2 = xi_l` (the only combination an equal-column state sees)."""
    z = np.asarray(points)
    h = z[:, :2] / np.sqrt(2.0)
    return jnp.asarray(np.stack([h[:, 0], h[:, 0], h[:, 1], h[:, 1], z[:, 2], z[:, 3]], axis=1))


def test_untied_student_matches_module_and_tied_at_equal_columns():
    h = jnp.asarray([[0.3, -1.2], [0.8, 0.5]])
    S = untied_student(h, None)
    np.testing.assert_allclose(S, jax.nn.softmax(h[:, :1] @ h[:, 1:].T, axis=-1), rtol=1e-12)
    np.testing.assert_allclose(S.sum(-1), 1.0, rtol=1e-12)
    # the flax module computes the same attention matrix
    d = 64
    x = jax.random.normal(jax.random.PRNGKey(0), (3, 2, d))
    p = jnp.zeros((2, d))
    WQ, WK = jax.random.normal(jax.random.PRNGKey(1), (d, 1)), jax.random.normal(jax.random.PRNGKey(2), (d, 1))
    mod = UntiedAttention(WQ, WK).attention_matrix(x, p)
    hh = jnp.concatenate([x @ WQ, x @ WK], -1) / np.sqrt(d)
    np.testing.assert_allclose(mod, jax.vmap(lambda a: untied_student(a, None))(hh), rtol=1e-5, atol=1e-6)
    # equal columns: the tied student
    g = h[:, :1]
    with float64_scope():
        pu, pt = untied_params(1.0, 0.3), make_params(1.0, 0.3)
        T = jnp.asarray([[0.7, 0.3], [0.2, 0.8]])
        np.testing.assert_allclose(pu.loss(jnp.concatenate([g, g], 1), T, pu), pt.loss(g, T, pt), rtol=1e-13)


def test_equal_columns_reduce_to_tied_fields_and_test_error():
    """An untied state with W_Q = W_K (all 2 x 2 blocks equal) has the tied fields node by node and the tied
    test error (nodes embedding the tied rule: exact, node by node)."""
    with float64_scope():
        pu, pt = untied_params(1.2, 0.3), make_params(1.2, 0.3)
        ovt, ovu = _tied_ov(), tied_embedding(_tied_ov())
        gh = gauss_hermite(4, 6)
        nodes_u = _embed_nodes(gh.points)
        mt, mu_ = field_maps(ovt, pt), field_maps(ovu, pu)
        assert bool(mu_.valid)
        for zt, zu in zip(gh.points[::400], nodes_u[::400]):
            wt, hst = gaussian_fields(mt, pt, zt[:2].reshape(2, 1), zt[2:].reshape(2, 1))
            wu, hsu = gaussian_fields(mu_, pu, zu[:4].reshape(2, 2), zu[4:].reshape(2, 1))
            np.testing.assert_allclose(wu, jnp.concatenate([wt, wt], 1), rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(hsu, hst, rtol=1e-10, atol=1e-12)
        e_t = se_test_error(ovt, pt, gh)
        e_u = se_test_error(ovu, pu, Quadrature(points=nodes_u, weights=gh.weights))
        np.testing.assert_allclose(e_u, e_t, rtol=1e-10)


def test_prox_gradient_breaks_query_key_symmetry():
    """At h_Q = h_K the loss gradients in h_Q and h_K differ: W_Q = W_K is not invariant under the untied SE."""
    with float64_scope():
        pu = untied_params(1.0, 0.3)
        T = jnp.asarray([[0.75, 0.25], [0.3, 0.7]])
        g = jnp.asarray([0.4, -0.9])
        grad = jax.grad(lambda h: pu.loss(h, T, pu))(jnp.stack([g, g], 1))
        assert float(jnp.max(jnp.abs(grad[:, 0] - grad[:, 1]))) > 1e-3


def test_inits_and_validation():
    with float64_scope():
        pu = untied_params(1.0, 0.3)
        pos, sem = untied_init("positional", pu), untied_init("semantic", pu)
        assert bool(pos.hold_theta) and not bool(pos.hold_m)
        assert bool(sem.hold_m) and not bool(sem.hold_theta)
        assert bool(field_maps(pos.overlaps, pu).valid) and bool(field_maps(sem.overlaps, pu).valid)
        assert pos.gauge is None
        with pytest.raises(ValueError, match="init"):
            untied_init("random", pu)
        with pytest.raises(ValueError, match="corr"):
            untied_init("positional", pu, corr=1.0)
        with pytest.raises(ValueError, match="r=2"):
            untied_init("positional", make_params(1.0, 0.3))
    with pytest.raises(ValueError, match="omega"):
        untied_params(1.0, 1.5)
    with pytest.raises(ValueError, match="inits"):
        run_tasks((1.0,), (0.3,), (0,), ("mixed",), 10, INITS)


def test_vmapped_runs_equal_single_runs():
    params = untied_params()
    cfg = TrainConfig(max_steps=20)
    tasks = run_tasks((0.5, 1.0), (0.3,), (0, 1), INITS, 16, INITS)
    one = lambda s, a, w, i, n: untied_run(s, a, w, i, n, params=params, d=16, n_max=16, config=cfg, n_test=50)  # noqa
    cols = [jnp.asarray(tasks[k]) for k in ("seed", "alpha", "omega", "init", "n")]
    batched = jax.jit(jax.vmap(one))(*cols)
    for j in (0, 3, 6):
        single = jax.jit(one)(*(c[j] for c in cols))
        for k in ("test_error", "train_loss", "q", "q_QK", "m", "theta_K"):
            np.testing.assert_allclose(batched[k][j], single[k], rtol=2e-4, atol=1e-6)


@pytest.mark.slow
def test_experiments_approach_theory_with_d():
    """Seed-mean test error of positional-init untied runs approaches the SE with d (d = 100 vs 400)."""
    from phasejax.extensions.untied import train_untied, untied_theory
    from phasejax.theory.quadrature import SobolRule

    th = untied_theory((1.3,), (0.3,), quadrature=SobolRule.create(6, 8, 4))
    pos = th["init"] == "positional"
    assert th["status"][pos][0] == "converged"
    devs = []
    for d in (100, 400):
        runs = train_untied((1.3,), (0.3,), (0, 1, 2), d=d, inits=("positional",))
        devs.append(abs(np.mean(runs["test_error"]) / th["test_error"][pos][0] - 1))
    assert devs[1] < devs[0] or devs[1] < 0.05
