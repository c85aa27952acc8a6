"""Associative memories: closed forms, one-step memory, padding, sweeps, capacity search, I/O."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax.solvers import Status
from phasejax.sweep import RunOptions
from phasejax.tasks.memory import (
    CapacityGrid, MemoryResult, SweepSpec, ZipfGrid, capacity_sweep, fit_power_law, predicted_capacity,
    run_memory_study, zipf_sweep,
)
from phasejax.tasks.memory.capacity import (
    ABOVE_GRID, BELOW_GRID, BRACKETED, bootstrap_exponents, capacity_from_recall, crosstalk_variances, predicted_recall, predicted_recall_given_map,
)
from phasejax.tasks.memory.data import MemoryShape, check_sizes, orthonormal_problem, sample_problem
from phasejax.tasks.memory.model import (
    factored_scores, linear_features, memory_matrix, one_step_memory, one_step_rows, output_scores, population_loss,
    recall,
)
from phasejax.tasks.memory.sweep import geometric_ints, padded_size, zipf_fits, zipf_tail
from phasejax.tasks.memory.train import memory_run, mlp_features, train_mlp

QUIET = dict(progress=False)


# ----------------------------------------------------------------------------
# Problems and padding
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("M,injective", [(None, True), (12, True), (5, False)])
def test_padded_problem_holds_the_unpadded_problem(M, injective):
    shape = MemoryShape(n_max=32, d_max=16, M=M, injective=injective, zipf_alpha=1.5)
    N, d = 10, 8
    pr = sample_problem(jax.random.PRNGKey(3), N, d, shape)
    E, U, f, p = (np.asarray(a) for a in (pr.E, pr.U, pr.f, pr.p))
    np.testing.assert_allclose(np.linalg.norm(E[:N, :d], axis=1), 1.0, rtol=1e-6)
    assert np.all(E[N:] == 0) and np.all(E[:, d:] == 0) and np.all(U[:, d:] == 0)
    M_eff = N if M is None else M
    assert np.all(np.asarray(pr.y_valid) == (np.arange(shape.M_max) < M_eff))
    assert np.all(U[M_eff:] == 0)
    assert f[:N].min() >= 0 and f[:N].max() < M_eff and np.all(f[N:] == 0)
    if injective:
        assert len(set(f[:N].tolist())) == N
        if M is None:
            assert sorted(f[:N].tolist()) == list(range(N))        # a permutation of [N]
    np.testing.assert_allclose(p[:N].sum(), 1.0, rtol=1e-6)
    np.testing.assert_allclose(p[:N], (np.arange(1, N + 1) ** -1.5) / np.sum(np.arange(1, N + 1) ** -1.5), rtol=1e-5)
    assert np.all(p[N:] == 0)


def _unpadded(pr, N, d, M):
    return pr._replace(E=pr.E[:N, :d], U=pr.U[:M, :d], f=pr.f[:N], p=pr.p[:N], x_valid=pr.x_valid[:N],
                       y_valid=pr.y_valid[:M])


def test_padding_does_not_change_the_trained_memories():
    N, d, m, M = 12, 6, 5, 4
    shape = MemoryShape(n_max=16, d_max=8, M=M, injective=False, m_max=8)
    pr = jax.jit(lambda k: sample_problem(k, N, d, shape))(jax.random.PRNGKey(0))   # compiled calls throughout:
    small = _unpadded(pr, N, d, M)                                                    # op by op is slow
    # linear memory: same loss, the unpadded gradient in the top-left block and zero gradient elsewhere (so Adam
    # from W = 0 never moves the padding; the trained MLP below checks the same through a whole Adam run)
    W_big = jnp.zeros((8, 8)).at[:d, :d].set(jax.random.normal(jax.random.PRNGKey(5), (d, d)))
    loss_and_grad = jax.jit(jax.value_and_grad(population_loss))
    L_big, g_big = loss_and_grad(W_big, pr)
    L_small, g_small = loss_and_grad(W_big[:d, :d], small)
    np.testing.assert_allclose(L_big, L_small, rtol=1e-6)
    np.testing.assert_allclose(g_big[:d, :d], g_small, rtol=1e-4, atol=1e-7)
    assert np.all(np.asarray(g_big)[d:] == 0) and np.all(np.asarray(g_big)[:, d:] == 0)
    key = jax.random.PRNGKey(1)
    big = jax.jit(lambda k, prob: train_mlp(k, prob, d, m, 8, steps=40))(key, pr)
    ref = jax.tree_util.tree_map(lambda a: a[:m, :d], big.params)
    # the unpadded run starts from the top-left slice of the padded init
    from phasejax.tasks.memory.train import init_mlp, train_memory
    p0 = jax.tree_util.tree_map(lambda a: a[:m, :d], init_mlp(key, d, m, 8, 8))
    small_mlp = jax.jit(lambda p0, prob: train_memory(lambda prm, pb: mlp_features(prm, pb, m), p0, prob, steps=40,
                                                      learning_rate=0.02))(p0, small)
    np.testing.assert_allclose(big.loss, small_mlp.loss, rtol=1e-5)
    for k in ("U", "V"):
        np.testing.assert_allclose(ref[k], small_mlp.params[k], rtol=1e-4, atol=1e-5)
    p0_big = init_mlp(key, d, m, 8, 8)
    np.testing.assert_array_equal(big.params["U"][m:], p0_big["U"][m:])       # padded units never move


# ----------------------------------------------------------------------------
# Closed forms
# ----------------------------------------------------------------------------


def test_crosstalk_variances_match_monte_carlo_margins():
    """Second moments of the margins of a weighted outer product, for a fixed map, against simulation."""
    N, M, d, n_rep = 40, 5, 24, 1500
    rng = np.random.default_rng(0)
    f = rng.integers(0, M, N)
    q = rng.uniform(0.2, 1.5, N)
    x0 = 0
    Q2 = np.bincount(f, q**2, minlength=M)
    y_comp = [y for y in range(M) if y != f[x0]]
    A_s, B_s = [], []
    for _ in range(n_rep):
        E = rng.standard_normal((N, d))
        E /= np.linalg.norm(E, axis=1, keepdims=True)
        U = rng.standard_normal((M, d))
        U /= np.linalg.norm(U, axis=1, keepdims=True)
        s = U @ ((U[f] * q[:, None]).T @ (E @ E[x0]))
        A_s.append(s[f[x0]] - q[x0])                            # shared part: own score minus signal
        B_s.append(-s[y_comp])                                  # per-competitor part
    A_s, B_s = np.asarray(A_s), np.asarray(B_s)
    var_a, var_b = crosstalk_variances(q[x0], Q2[f[x0]], Q2[y_comp], Q2.sum(), d)
    np.testing.assert_allclose(A_s.var(), var_a, rtol=0.12)
    np.testing.assert_allclose(B_s.var(axis=0), var_b, rtol=0.12)
    assert abs(np.mean(A_s)) < 4 * np.sqrt(var_a / n_rep)
    # the shared and per-competitor parts are uncorrelated
    assert np.max(np.abs([np.corrcoef(A_s, B_s[:, j])[0, 1] for j in range(len(y_comp))])) < 0.1


def _measured_recall(kind, shape, Ns, d, n_seeds):
    run = jax.jit(jax.vmap(lambda s, N: memory_run(s, N, d, 0, kind=kind, shape=shape)))
    seeds = jnp.repeat(jnp.arange(n_seeds), len(Ns))
    Nv = jnp.tile(jnp.asarray(Ns), n_seeds)
    acc = np.asarray(run(seeds, Nv)["accuracy"]).reshape(n_seeds, len(Ns))
    return acc.mean(0), acc.std(0) / np.sqrt(n_seeds)


def test_outer_product_recall_matches_the_closed_form():
    # fixed M (random map): the Gaussian crosstalk closed form is accurate to about 0.01 at d = 128
    Ns = np.array([32, 64, 96, 128, 192])
    mean, se = _measured_recall("outer_product", MemoryShape(n_max=256, d_max=128, M=8, injective=False), Ns, 128, 96)
    pred = predicted_recall(Ns, 128, 8, False)
    assert pred[0] > 0.995 and pred[-1] < 0.93                   # the range spans the transition
    np.testing.assert_allclose(mean, pred, atol=0.012 + 3 * se.max())
    # M = N (injective): same variance, but the Gaussian approximation is conservative (the competitors' scores
    # u_y . W e_x live in a d-dim subspace and have lighter tails); it stays within 0.07 and below the measurement
    Ns = np.array([30, 60, 100, 150, 250])
    mean, se = _measured_recall("outer_product", MemoryShape(n_max=256, d_max=64), Ns, 64, 48)
    pred = predicted_recall(Ns, 64)
    assert pred[0] > 0.999 and pred[-1] < 0.8
    assert np.all(np.abs(mean - pred) < 0.07)
    assert np.all(pred <= mean + 3 * se + 1e-3)


def test_predicted_recall_limits_and_capacity_scaling():
    # one competitor-free case: M = 1 always recalls
    assert predicted_recall(5, 4, 1, False) == pytest.approx(1.0)
    # recall decreases in N and increases in d
    r = predicted_recall(np.array([[50, 100, 200]]), np.array([[64], [128]]))
    assert np.all(np.diff(r, axis=1) < 0) and np.all(r[1] > r[0])
    # the closed-form capacity: ~ d / log for fixed M, ~ d^2 / log for M = N
    ds = np.array([256, 1024])
    n_fixed = predicted_capacity(ds, 8, False, n_max=2000, points_per_octave=8)
    n_inj = predicted_capacity(ds, None, True, n_max=40_000, points_per_octave=8)
    assert 0.8 < np.log(n_fixed[1] / n_fixed[0]) / np.log(4) < 1.2
    assert 1.6 < np.log(n_inj[1] / n_inj[0]) / np.log(4) < 2.1


def test_predicted_recall_given_map_agrees_with_the_averaged_closed_form():
    # an injective map with uniform weights: every input has the same P_x, equal to predicted_recall
    N, d = 80, 48
    f = np.random.default_rng(0).permutation(N)
    P = predicted_recall_given_map(f, np.ones(N), np.ones(N, bool), np.ones(N, bool), d)
    np.testing.assert_allclose(P, predicted_recall(N, d), rtol=1e-6)
    P1 = predicted_recall_given_map(f, np.ones(N), np.ones(N, bool), np.ones(N, bool), d, one_step=True)
    np.testing.assert_allclose(P1, predicted_recall(N, d, one_step=True), rtol=1e-6)
    assert np.all(P1 < P)                                  # the mean-subtraction term only adds crosstalk
    # vectorised over problems (leading axes, a per-problem one_step flag) equals one by one
    fs = np.stack([f, np.roll(f, 3)])
    Pv = predicted_recall_given_map(fs, np.ones(N), np.ones(N, bool), np.ones(N, bool), np.array([d, 2 * d]),
                                    one_step=np.array([False, True]))
    np.testing.assert_allclose(Pv[0], P, rtol=1e-10)
    np.testing.assert_allclose(Pv[1], predicted_recall_given_map(fs[1], np.ones(N), np.ones(N, bool),
                                                                 np.ones(N, bool), 2 * d, one_step=True), rtol=1e-10)


# ----------------------------------------------------------------------------
# One gradient step
# ----------------------------------------------------------------------------


def test_one_step_memory_is_the_gradient_and_is_exact_with_orthonormal_embeddings():
    rng = np.random.default_rng(1)
    N, M, d, eta = 7, 4, 9, 0.7
    f = rng.integers(0, M, N)
    p = rng.dirichlet(np.ones(N))
    pr = orthonormal_problem(N, M, d, f, p)

    def memories(pr):                                                 # one compiled call (op by op is slow)
        W1 = one_step_memory(pr, eta)                                 # autodiff of the population loss at W = 0
        return W1, memory_matrix(one_step_rows(pr, eta), pr), output_scores(linear_features(W1, pr), pr)

    W1, W1_rows, scores = jax.jit(memories)(pr)
    np.testing.assert_allclose(W1, W1_rows, atol=1e-7)
    expected = eta * p[:, None] * ((np.arange(M)[None, :] == f[:, None]) - 1.0 / M)
    np.testing.assert_allclose(scores, expected, atol=1e-7)          # u_k^T W_1 e_z = eta p_z (1{f(z)=k} - 1/M)
    assert float(recall(scores, pr)) == 1.0
    # random embeddings: same identity (factored form), under jit
    shape = MemoryShape(n_max=16, d_max=32, M=6, injective=False, zipf_alpha=1.2)
    prr = jax.jit(lambda k: sample_problem(k, 13, 20, shape))(jax.random.PRNGKey(2))

    def factored(prr):
        rows = one_step_rows(prr)
        W = one_step_memory(prr)
        return W, memory_matrix(rows, prr), factored_scores(rows, prr), output_scores(linear_features(W, prr), prr)

    W, W_rows, s_factored, s_dense = jax.jit(factored)(prr)
    np.testing.assert_allclose(W, W_rows, atol=2e-6)
    np.testing.assert_allclose(s_factored[:13], s_dense[:13], atol=2e-5)


def test_one_step_memory_reaches_perfect_recall_where_the_closed_form_says_so():
    d, n_seeds = 128, 24
    shape = MemoryShape(n_max=128, d_max=d, M=8, injective=False)
    # closed form: recall > 0.9999 at N = 12, below 0.95 at N = 100 (one-step variance included)
    p_hi, p_lo = predicted_recall(np.array([12, 100]), d, 8, False, one_step=True)
    assert p_hi > 0.9999 and p_lo < 0.95
    run = jax.jit(jax.vmap(lambda s, N: memory_run(s, N, d, 0, kind="one_step", shape=shape)))
    hi = np.asarray(run(jnp.arange(n_seeds), jnp.full(n_seeds, 12))["accuracy"])
    lo = np.asarray(run(jnp.arange(n_seeds), jnp.full(n_seeds, 100))["accuracy"])
    assert np.all(hi == 1.0)                                          # perfect recall on every seed
    assert np.mean(lo) < 0.99 and abs(np.mean(lo) - p_lo) < 0.03


# ----------------------------------------------------------------------------
# Capacity search and fits
# ----------------------------------------------------------------------------


def test_capacity_from_recall_interpolates_and_flags():
    Ns = np.array([10, 20, 40, 80, 160])
    r = np.array([[1.0, 1.0, 0.995, 0.9, 0.5],           # crossing between 40 and 80
                  [1.0, 1.0, 1.0, 1.0, 1.0],             # never fails: above the grid
                  [0.5, 0.4, 0.3, 0.2, 0.1],             # fails at once: below the grid
                  [np.nan, 1.0, 0.99, 0.95, np.nan]])    # windowed column: crossing between 40 and 80, at 40
    n, flag = capacity_from_recall(Ns, r)
    frac = (0.995 - 0.99) / (0.995 - 0.9)
    assert n[0] == pytest.approx(np.exp(np.log(40) + frac * np.log(2)))
    assert list(flag) == [BRACKETED, ABOVE_GRID, BELOW_GRID, BRACKETED]
    assert np.isnan(n[1]) and np.isnan(n[2]) and n[3] == pytest.approx(40.0)
    # vectorised over leading axes equals row by row
    n3, f3 = capacity_from_recall(Ns, np.stack([r, r[::-1]]))
    np.testing.assert_array_equal(f3[1], flag[::-1])
    np.testing.assert_allclose(n3[0], n)


def test_power_law_fit_and_seed_bootstrap_recover_a_known_exponent():
    x = np.array([8.0, 16, 32, 64, 128])
    fit = fit_power_law(x, 0.3 * x**1.7)
    assert fit["exponent"] == pytest.approx(1.7) and fit["prefactor"] == pytest.approx(0.3)
    assert fit["ci"][1] - fit["ci"][0] < 1e-8
    # synthetic recall curves with N*(x) = 2 x^1.3 and seed noise: the bootstrap interval covers 1.3
    rng = np.random.default_rng(0)
    Ns = np.asarray(geometric_ints(2, 3000, 8), float)
    n_true = 2.0 * x**1.3
    curve = 1.0 / (1.0 + (Ns[None, :] / (n_true[:, None] * 1.6)) ** 8)          # crosses 0.99 near n_true
    cube = np.clip(curve[:, :, None] + rng.normal(0, 0.003, (len(x), len(Ns), 6)), 0, 1)
    boot = bootstrap_exponents(Ns, cube, x, n_boot=400)
    n_star, _ = capacity_from_recall(Ns, cube.mean(-1))
    assert boot["ci"][0] < fit_power_law(x, n_star)["exponent"] < boot["ci"][1]
    assert boot["ci"][0] < 1.3 < boot["ci"][1] and boot["ci"][1] - boot["ci"][0] < 0.1
    assert boot["column_ci"].shape == (len(x), 2)


def test_padded_size_and_grid_window():
    np.testing.assert_array_equal(padded_size([1, 8, 33, 100, 256]), [32, 32, 64, 128, 256])
    np.testing.assert_array_equal(padded_size([1, 33, 128, 129], factor=4), [32, 128, 128, 512])
    g = CapacityGrid(ds=(8, 16), Ns=(2, 4, 8, 16, 32, 64, 128), seeds=(0,), window=(0.1, 1.0, 2.0))
    assert g.column_Ns(8, 0) == (8, 16, 32, 64) and g.column_Ns(16, 0) == (32, 64, 128)
    t = g.tasks()
    assert len(t["N"]) == 7 and set(t["m"]) == {0}


# ----------------------------------------------------------------------------
# Sweeps
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind,M,ms,steps", [("outer_product", None, (0,), 0), ("mlp", 6, (3, 5), 25)])
def test_vmapped_sweep_equals_runs_one_by_one(tmp_path, kind, M, ms, steps):
    """(N, d, seed) and (N, m, d, seed) sweeps, chunked and resumed, against single jitted runs."""
    grid = CapacityGrid(ds=(4, 6), Ns=(3, 5, 8), seeds=(0, 1), ms=ms)
    opts = RunOptions(run_dir=str(tmp_path), chunk_size=5, **QUIET)
    lr = 0.05 if steps else 0.0
    swept = capacity_sweep(kind, grid, M=M, injective=False, steps=steps, learning_rate=lr, options=opts)
    t = grid.tasks()
    assert list(swept["N"]) == list(t["N"]) and set(swept["outputs"]) == {"M=N,random" if M is None else f"M={M}"}
    n_pad = int(padded_size(8))
    assert np.all(padded_size(t["N"]) == n_pad)                      # one padded group
    shape = MemoryShape(n_max=n_pad, d_max=6, M=M, injective=False, m_max=max(max(ms), 1))
    one = jax.jit(lambda s, N, d, m: memory_run(s, N, d, m, kind=kind, shape=shape, steps=steps, learning_rate=lr))
    for i in range(len(t["N"])):
        r = one(t["seed"][i], t["N"][i], t["d"][i], t["m"][i])
        np.testing.assert_allclose(swept["accuracy"][i], r["accuracy"], atol=1e-6)
        np.testing.assert_allclose(swept["loss"][i], r["loss"], rtol=1e-4, atol=1e-6)
        assert swept["steps"][i] == int(r["steps"]) and swept["status"][i] == int(r["status"])
    again = capacity_sweep(kind, grid, M=M, injective=False, steps=steps, learning_rate=lr, options=opts)
    np.testing.assert_array_equal(again["accuracy"], swept["accuracy"])           # resumed from disk


def test_trained_linear_memory_stops_at_perfect_recall():
    shape = MemoryShape(n_max=16, d_max=8)
    r = jax.jit(lambda s: memory_run(s, 12, 8, 0, kind="linear", shape=shape, steps=400, learning_rate=0.1))(0)
    assert float(r["accuracy"]) == 1.0 and int(r["status"]) == Status.CONVERGED and 0 < int(r["steps"]) < 400


def test_bad_inputs_raise_value_errors_naming_the_parameter():
    with pytest.raises(ValueError, match="N must be"):
        check_sizes(N=0)
    with pytest.raises(ValueError, match="d must be"):
        check_sizes(d=0)
    with pytest.raises(ValueError, match="m must be"):
        check_sizes(m=0)
    with pytest.raises(ValueError, match="M must be"):
        check_sizes(M=0)
    with pytest.raises(ValueError, match="injective.*N <= M"):
        check_sizes(N=10, M=5, injective=True)
    check_sizes(N=5, M=10, injective=True)                  # M > N: an injection exists (unused outputs compete)
    with pytest.raises(ValueError, match="N must be"):
        CapacityGrid(ds=(8,), Ns=(0, 4))
    with pytest.raises(ValueError, match="d must be"):
        CapacityGrid(ds=(0,), Ns=(4,))
    with pytest.raises(ValueError, match="m must be"):
        CapacityGrid(ds=(8,), Ns=(4,), ms=(0, 4))
    with pytest.raises(ValueError, match="m must be"):
        capacity_sweep("mlp", CapacityGrid(ds=(8,), Ns=(4,)), M=4, injective=False, steps=5)
    with pytest.raises(ValueError, match="N <= M"):
        capacity_sweep("outer_product", CapacityGrid(ds=(8,), Ns=(4, 9)), M=6, injective=True)
    with pytest.raises(ValueError, match="steps"):
        capacity_sweep("linear", CapacityGrid(ds=(8,), Ns=(4,)), steps=0)
    with pytest.raises(ValueError, match="kind"):
        capacity_sweep("hopfield", CapacityGrid(ds=(8,), Ns=(4,)))
    with pytest.raises(ValueError, match="N must be"):
        predicted_recall(0, 8)
    with pytest.raises(ValueError, match="d_max"):
        MemoryShape(n_max=4, d_max=0)
    with pytest.raises(ValueError, match="M must be"):
        MemoryShape(n_max=4, d_max=4, M=0)
    with pytest.raises(ValueError, match="alpha"):
        ZipfGrid(alpha=1.0)
    with pytest.raises(ValueError, match="d >= max"):
        orthonormal_problem(4, 3, 2, [0, 1, 2, 0])


def test_zipf_tail_is_the_mass_beyond_k():
    p = np.arange(1, 101, dtype=float) ** -2.0
    p /= p.sum()
    np.testing.assert_allclose(zipf_tail([0, 1, 10, 100], 100, 2.0), [1.0, 1 - p[0], p[10:].sum(), 0.0], atol=1e-12)


# ----------------------------------------------------------------------------
# Study result: write / load
# ----------------------------------------------------------------------------


def test_study_result_write_load_round_trip(tmp_path):
    specs = [SweepSpec("outer_product", 8, False, CapacityGrid(ds=(16, 32, 64), Ns=geometric_ints(2, 32, 3),
                                                               seeds=(0, 1, 2)), expected=(0.8, 1.2))]
    res = run_memory_study(specs, None, n_boot=50, options=RunOptions(**QUIET))
    # a Zipf table with the columns zipf_sweep writes (the sweep itself: the slow test below)
    rng = np.random.default_rng(0)
    res.zipf = dict(d=np.repeat([8, 16], 2), seed=np.tile([0, 1], 2), k=np.array([3, 3, 5, 5]),
                    **{c: rng.uniform(0, 1, 4) for c in ("error_one_step", "error_top_k", "predicted_one_step",
                                                         "predicted_top_k", "recall_one_step")})
    paths = res.write(str(tmp_path))
    assert sorted(p.split("/")[-1] for p in paths) == ["capacity.csv", "fits.json", "zipf.csv"]
    back = MemoryResult.load(str(tmp_path))
    assert back.fits == res.fits
    assert set(back.capacity) == set(res.capacity)
    for k in res.capacity:
        if k == "status":
            np.testing.assert_array_equal(back.status_codes(), res.capacity[k])
        elif np.asarray(res.capacity[k]).dtype.kind in "US":
            np.testing.assert_array_equal(back.capacity[k], res.capacity[k])
        else:
            np.testing.assert_allclose(back.capacity[k], res.capacity[k], rtol=0, atol=0)
    assert set(back.zipf) == set(res.zipf)
    for k in res.zipf:
        np.testing.assert_allclose(back.zipf[k], res.zipf[k], rtol=0, atol=0)
    with open(tmp_path / "capacity.csv") as fh:
        assert fh.readline().strip().startswith("kind,d,m,N,seed,accuracy")
    fit = res.fits["outer_product|M=8"]
    assert fit["in_expected_range"] == (0.8 <= fit["exponent"] <= 1.2) and len(fit["N_star_closed_form"]) == 3


@pytest.mark.slow
def test_zipf_errors_follow_the_closed_form():
    """Zipf-weighted errors of the one-step and top-k memories against the closed form given each map."""
    grid = ZipfGrid(ds=(32, 64, 128, 256), seeds=(0, 1, 2, 3, 4, 5), N=2048, M=8, alpha=2.0)
    table = zipf_sweep(grid, options=RunOptions(**QUIET))
    fits = zipf_fits(table, grid)
    # one step: the error is carried by a few frequent inputs, so it scatters across seeds; compare within 3 s.e.
    err, pred = np.asarray(fits["one_step"]["error"]), np.asarray(fits["one_step"]["predicted_error"])
    se = np.asarray([np.std(table["error_one_step"][table["d"] == d]) for d in grid.ds]) / np.sqrt(len(grid.seeds))
    assert np.all(np.abs(err - pred) < 0.2 * pred + 3 * se)
    assert -0.45 < fits["one_step"]["exponent"] < -0.15
    # top k: little scatter; the Gaussian closed form is conservative (as for M = N), within 35% above
    err, pred = np.asarray(fits["top_k"]["error"]), np.asarray(fits["top_k"]["predicted_error"])
    assert np.all(err <= 1.05 * pred) and np.all(err >= 0.65 * pred) and np.all(np.diff(err) < 0)
    assert -1.2 < fits["top_k"]["exponent"] < -0.75


@pytest.mark.slow
def test_trained_linear_capacity_grows_like_d_squared_for_injective_maps():
    grid = CapacityGrid(ds=(8, 16, 24), Ns=geometric_ints(2, 400, 6), seeds=(0, 1, 2), window=(0.08, 0.45, 2.0))
    t = capacity_sweep("linear", grid, steps=300, learning_rate=0.1, options=RunOptions(**QUIET))
    from phasejax.tasks.memory.sweep import capacity_fit

    fit = capacity_fit(t, "linear", "M=N", n_boot=300)
    assert 1.5 < fit["exponent"] < 2.1
