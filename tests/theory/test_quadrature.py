import chex
import numpy as np
import pytest

from phasejax.theory import gauss_hermite
from phasejax.theory.quadrature import default_quadrature, quasi_monte_carlo

from _compare import RTOL_REDERIVED


@pytest.fixture(autouse=True)
def _float64():
    from phasejax import float64_scope

    with float64_scope():
        yield


def test_gauss_hermite_normalised_and_exact_on_polynomials():
    q = gauss_hermite(3, 5)
    chex.assert_shape(q.points, (125, 3))
    assert np.isclose(float(q.weights.sum()), 1.0, atol=1e-14)
    z = np.asarray(q.points)
    w = np.asarray(q.weights)
    # Gaussian moments: E z^2 = 1, E z^4 = 3, E z^6 = 15, E z1^2 z2^4 = 3, odd moments 0.
    assert np.isclose(w @ z[:, 0] ** 2, 1.0, atol=1e-13)
    assert np.isclose(w @ z[:, 1] ** 4, 3.0, atol=1e-12)
    assert np.isclose(w @ z[:, 2] ** 6, 15.0, atol=1e-11)
    assert np.isclose(w @ (z[:, 0] ** 2 * z[:, 1] ** 4), 3.0, atol=1e-12)
    assert abs(w @ (z[:, 0] * z[:, 2] ** 2)) < 1e-13


def test_quasi_monte_carlo_is_fixed_and_gaussian():
    a = quasi_monte_carlo(6, 4096)
    b = quasi_monte_carlo(6, 4096)
    np.testing.assert_allclose(np.asarray(a.points), np.asarray(b.points), rtol=RTOL_REDERIVED)   # made again
    z = np.asarray(a.points)
    assert np.all(np.isfinite(z))
    np.testing.assert_allclose(z.mean(0), 0.0, atol=0.01)
    np.testing.assert_allclose(np.cov(z.T), np.eye(6), atol=0.03)
    # E[cos(z1) cos(z2)] = exp(-1): a smooth non-polynomial test of the rule
    assert abs(float(a.expect(np.cos(z[:, 0]) * np.cos(z[:, 1]))) - np.exp(-1.0)) < 2e-3


def test_default_quadrature_switches_rule_with_dimension():
    assert default_quadrature(4).size == 10**4
    assert default_quadrature(6).size == 8192


@pytest.mark.parametrize("kwargs", [dict(dim=0, order=3), dict(dim=2, order=0), dict(dim=12, order=10)])
def test_gauss_hermite_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        gauss_hermite(**kwargs)


# --- the adapted rules (float64) -------------------------------------------------------------------------------

import jax  # noqa: E402
from scipy.special import ndtr  # noqa: E402

from phasejax import float64_scope  # noqa: E402
from phasejax.theory import SobolRule, SplitProductRule, make_params  # noqa: E402
from phasejax.theory.fields import Overlaps  # noqa: E402


@pytest.fixture
def x64():
    with float64_scope():
        yield


def _overlaps(q0=0.05, m=0.25):
    import jax.numpy as jnp

    return Overlaps(q0=jnp.full((1, 1), q0), m=jnp.full((1, 1), m), V0=jnp.full((1, 1), 11.0),
                    theta0=jnp.zeros((1, 1)))


def test_split_rule_integrates_a_step_across_its_switch_plane_exactly(x64):
    """A jump on the plane the rule is split on, times a smooth eta factor: exact to rounding."""
    import jax.numpy as jnp

    params, ov = make_params(2.0, 0.3), _overlaps()
    rule = SplitProductRule(n_smooth=6, eta_step=0.5, n_piece=10)
    K = rule.n_smooth * rule.n_eta
    angle = 0.7
    normal = jnp.tile(jnp.array([np.cos(angle), np.sin(angle)]), (K, 1))
    q = jax.jit(lambda ov, params, normal: rule.rule(ov, params, frame=normal))(ov, params, normal)
    assert q.size == rule.size
    z = np.asarray(q.points)
    xi0 = np.asarray(SplitProductRule._pivot(ov, params))
    c = float(np.array([np.cos(angle), np.sin(angle)]) @ xi0)
    step = (z[:, :2] @ np.array([np.cos(angle), np.sin(angle)]) > c).astype(float)
    w = np.asarray(q.weights)
    assert w.sum() == pytest.approx(1.0, abs=1e-10)
    # E[1{n.xi > c}] = 1 - Phi(c); E[1{n.xi > c} cos(eta_1)] = (1 - Phi(c)) exp(-1/2)
    assert w @ step == pytest.approx(1.0 - ndtr(c), abs=1e-10)
    assert w @ (step * np.cos(z[:, 2])) == pytest.approx((1.0 - ndtr(c)) * np.exp(-0.5), abs=1e-8)


def test_split_rule_on_the_semantic_branch_is_laid_out_in_the_teachers_coordinates(x64):
    """With theta0 != 0 the rule is rotated so that every teacher node's nodes share one teacher field (hence one
    target and one switch plane), and each teacher node's student line is split exactly where omega = 0."""
    import jax.numpy as jnp

    from phasejax.theory.fields import field_maps, gaussian_fields

    params = make_params(1.1, 0.3)
    ov = Overlaps(q0=jnp.full((1, 1), 0.3), m=jnp.zeros((1, 1)), V0=jnp.full((1, 1), 80.0),
                  theta0=jnp.full((1, 1), 0.43))
    rule = SplitProductRule(n_smooth=4, eta_step=0.8, n_piece=6)
    K = rule.n_smooth * rule.n_eta
    angle = 0.4
    normal = jnp.tile(jnp.array([np.cos(angle), np.sin(angle)]), (K, 1))
    q = jax.jit(lambda ov, params, normal: rule.rule(ov, params, frame=normal))(ov, params, normal)
    z = np.asarray(q.points).reshape(K, -1, 4)
    maps = field_maps(ov, params)
    omega, hstar = gaussian_fields(maps, params, jnp.asarray(z[..., :2])[..., None], jnp.asarray(z[..., 2:])[..., None])
    hstar, omega = np.asarray(hstar)[..., 0], np.asarray(omega)[..., 0]
    # one teacher field per teacher node
    np.testing.assert_allclose(hstar, np.broadcast_to(hstar[:, :1], hstar.shape), atol=1e-12)
    # the split: on each teacher node the weight on the side n . omega > 0 is that of the tanh-sinh piece
    # above the cut, and the cut passes through omega = 0 (the two pieces meet there)
    c = 0.43 / np.sqrt(0.3)
    s = np.sqrt(1 - c**2)
    xi_rot = s * z[..., :2] - c * z[..., 2:]                              # back to the rotated student plane
    n = np.array([np.cos(angle), np.sin(angle)])
    side = omega @ n > 0
    w = np.asarray(q.weights).reshape(K, -1)
    eta_rot = c * z[:, 0, :2] + s * z[:, 0, 2:]
    pivot = -(c / s) * eta_rot
    inside = np.all(np.abs(pivot) < 8.0, axis=1)           # the rule clips the pivot to [-8, 8] (far tails)
    assert inside.mean() > 0.8
    cut = pivot @ n
    np.testing.assert_allclose(((w * side).sum(1) / w.sum(1))[inside], 1.0 - ndtr(cut[inside]), atol=1e-12)
    np.testing.assert_array_equal(((xi_rot @ n) > cut[:, None])[inside], side[inside])
    assert w.sum() == pytest.approx(1.0, abs=1e-10)


def test_split_rule_on_smooth_integrands_and_its_replicas(x64):
    """Smooth integrands: the main rule is accurate, and the replicas' spread covers its actual error."""
    params, ov = make_params(2.0, 0.3), _overlaps()
    rule = SplitProductRule(n_replicas=4)
    # one compiled call (eager op-by-op dispatch of the rule's construction is slow)
    q, (rq, W) = jax.jit(lambda ov, params: (rule.main(ov, params), rule.replicas(ov, params)))(ov, params)
    W = np.asarray(W)
    assert W.shape == (4, 4 * rule.size)
    np.testing.assert_allclose(W.sum(1), 1.0, atol=1e-10)

    def g(z):
        return np.cos(z[:, 0]) * np.cos(z[:, 1]) * np.exp(0.3 * z[:, 2]) * z[:, 3] ** 2

    exact = np.exp(-1.0) * np.exp(0.045) * 1.0
    main = np.asarray(q.weights) @ g(np.asarray(q.points))
    reps = W @ g(np.asarray(rq.points))
    assert main == pytest.approx(exact, rel=2e-3)
    assert abs(main - exact) < 3 * reps.std(ddof=1)
    assert abs(reps.mean() - exact) < 3 * reps.std(ddof=1) / 2


def test_sobol_rule_is_reproducible_and_its_replicas_partition_the_nodes(x64):
    a, b = SobolRule.create(4, log2_n=10, n_replicas=4, seed=3), SobolRule.create(4, log2_n=10, n_replicas=4, seed=3)
    np.testing.assert_allclose(np.asarray(a.points), np.asarray(b.points), rtol=RTOL_REDERIVED)   # made again
    params, ov = make_params(2.0, 0.3), _overlaps()
    q, W = a.replicas(ov, params)
    W = np.asarray(W)
    assert W.shape == (4, 4096) and np.all((W > 0).sum(0) == 1)
    np.testing.assert_allclose(W.sum(1), 1.0, atol=1e-12)
    z = np.asarray(q.points)
    est = W @ (np.cos(z[:, 0]) * np.cos(z[:, 3]))
    # each scramble is an unbiased estimate; the spread is a valid error bar
    err = est.std(ddof=1) / 2.0
    assert abs(est.mean() - np.exp(-1.0)) < 5 * err + 1e-6


@pytest.mark.parametrize("kwargs", [dict(n_smooth=0), dict(n_piece=1.5), dict(eta_step=0.0), dict(n_replicas=1)])
def test_split_rule_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        SplitProductRule(**kwargs)


def test_sobol_rule_rejects_bad_arguments():
    with pytest.raises(ValueError, match="log2_n"):
        SobolRule.create(4, log2_n=0)
    with pytest.raises(ValueError, match="dim"):
        SobolRule.create(0)


def test_split_rule_in_teacher_coordinates_splits_on_the_semantic_switch_sheet(x64):
    """With `theta0 > 0` and `h_V` along `h*`, the switch between mirror minima is `omega . h* = 0`, at `m = 0`
    the quadric `xi . (c xi + s eta) = 0` (`c = theta0 q0^{-1/2}`, `s = (1 - c^2)^{1/2}`): at fixed `eta` a
    circle through the pivot, which the plain layout cuts with a line. In teacher coordinates each teacher
    node holds one `h*`, and with normals along it the sheet is that node's split plane: the step across it
    is integrated exactly, node by node."""
    import jax.numpy as jnp

    params = make_params(2.0, 0.3)
    q0, theta0 = 0.3, 0.43
    ov = Overlaps(q0=jnp.full((1, 1), q0), m=jnp.zeros((1, 1)), V0=jnp.full((1, 1), 11.0),
                  theta0=jnp.full((1, 1), theta0))
    c = theta0 / np.sqrt(q0)
    s = np.sqrt(1.0 - c**2)
    rule = SplitProductRule(teacher_coordinates=True)
    EP, EM, W_teacher = rule.eta_nodes(jnp.float64)
    u, v = rule._uv(params)
    teacher = np.asarray(EP[:, None] * v[None] + EM[:, None] * u[None])          # (K, 2) h* / sigma per node
    K = len(teacher)
    normal = teacher / np.linalg.norm(teacher, axis=1, keepdims=True)
    q = jax.jit(lambda ov, params, n: rule.rule(ov, params, frame=n))(ov, params, jnp.asarray(normal))
    z, w = np.asarray(q.points), np.asarray(q.weights)
    xi, eta = z[:, :2], z[:, 2:]
    hstar = c * xi + s * eta
    np.testing.assert_allclose(hstar.reshape(K, -1, 2), np.broadcast_to(teacher[:, None], (K, len(z) // K, 2)),
                               atol=1e-12)
    step = (np.sum(xi * hstar, axis=1) > 0).astype(float)
    per_node = (w * step).reshape(K, -1).sum(1)
    # xi . h* > 0  <=>  n . xi' > -(c / s) |h*|: the weight above the split of each teacher node
    np.testing.assert_allclose(per_node, np.asarray(W_teacher) * ndtr(c * np.linalg.norm(teacher, axis=1) / s),
                               atol=1e-13)
    assert w.sum() == pytest.approx(1.0, abs=1e-10)


def test_split_rule_in_teacher_coordinates_is_the_plain_layout_where_theta_vanishes(x64):
    """On the positional branch (`theta0 = 0`) the teacher's field is `eta`: the same nodes and weights."""
    params, ov = make_params(2.0, 0.3), _overlaps()
    a, b = SplitProductRule(teacher_coordinates=False), SplitProductRule(teacher_coordinates=True)
    qa, qb = jax.jit(lambda ov, params: (a.main(ov, params), b.main(ov, params)))(ov, params)
    np.testing.assert_allclose(np.asarray(qb.points), np.asarray(qa.points), rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(qb.weights), np.asarray(qa.weights), rtol=0, atol=1e-15)


def test_split_rule_orientations_have_one_sign_and_the_replicas_are_its_shifts(x64):
    """Every switch-plane normal (main rule and replicas, `orientations`) has a non-negative first component, so
    which mirror minimum rounding makes the lower cannot flip a replica's layout; the main rule is the same for a
    normal and its negative (its grid offsets are the midpoints), and the vectorised replicas are the rules built
    one by one at their offsets."""
    rule = SplitProductRule(n_smooth=4, eta_step=1.0, n_piece=6)
    import jax.numpy as jnp

    branch_ov = Overlaps(q0=jnp.full((1, 1), 0.1), m=jnp.zeros((1, 1)), V0=jnp.full((1, 1), 12.0),
                         theta0=jnp.full((1, 1), 0.15))
    for p in (make_params(1.0, 0.3),):
        frame, replica_frames = jax.jit(lambda o: rule.orientations(o, p))(branch_ov)
        assert float(np.min(np.asarray(frame)[:, 0])) >= 0 and float(np.min(np.asarray(replica_frames)[..., 0])) >= 0
        main = jax.jit(lambda o, f: rule.main(o, p, f))
        key = lambda q: np.round(np.asarray(q.points), 9).tolist()  # noqa: E731
        assert sorted(key(main(branch_ov, frame))) == sorted(key(main(branch_ov, -frame)))
        quad, W = jax.jit(lambda o, f, r: rule.replicas(o, p, f, r))(branch_ov, frame, replica_frames)
        one_rule = jax.jit(lambda o, e, s: rule.rule(o, p, None, e, s))
        for k, sh in enumerate(rule._shifts()):
            one = one_rule(branch_ov, *sh)
            n = one.points.shape[0]
            np.testing.assert_allclose(np.asarray(quad.points)[k * n:(k + 1) * n], np.asarray(one.points), atol=1e-12)
            np.testing.assert_allclose(np.asarray(W)[k, k * n:(k + 1) * n], np.asarray(one.weights), atol=1e-15)
