"""Induction heads on in-context Markov chains: data, Bayes references, models, sweeps."""

import dataclasses
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax.sweep import RunOptions
from phasejax.tasks.induction import (
    RUN_COLUMNS, InductionGrid, InductionModel, InductionResult, InductionTraining, bayes_predictive,
    exact_floor_check, induction_references, induction_run, induction_summary, induction_sweep,
)
from phasejax.tasks.induction.data import (
    hard_cross_entropy, sample_batch, sample_chain, sample_sequence, sample_transition_matrix, soft_cross_entropy,
    stationary_distribution, transition_counts, unigram_predictive,
)
from phasejax.tasks.induction.figures import plot_induction_figures, plot_prev_token_by_position
from phasejax.tasks.induction.model import (
    batch_loss, coordinate_ids, induction_attention, induction_forward, induction_head_params,
    init_induction_params, previous_token_attention, unpad_params,
)
from phasejax.tasks.induction.references import (
    evaluation_chains, induction_reference_table, reference_losses, stationary_start_predictive,
)
from phasejax.tasks.induction.train import record_steps
from phasejax.tasks.induction.references import _evaluation_set
from phasejax.tasks.induction.train import _block_means

from _compare import RTOL_FLOAT32

MODELS = [InductionModel(layers=2), InductionModel(layers=1, readout="linear"), InductionModel("standard", layers=1, d_model=8)]


# ----------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def draws():
    """Sampler outputs of the data tests, computed in one compiled call."""

    @jax.jit
    def compute(key):
        k1, k2, k4 = jax.random.split(key, 3)
        chain = sample_sequence(k1, 3, 0.7, 40, S_max=6), sample_sequence(k1, 3, 0.7, 40)        # S_max 6 and 3
        rows = jax.vmap(lambda k: sample_transition_matrix(k, 4, 0.5, 4))(jax.random.split(k2, 10_000))
        P = chain[0][1]                                                                         # padded to 6
        pi = stationary_distribution(P, 3)
        first = jax.vmap(lambda k: sample_chain(k, P, pi, 2, 3)[0])(jax.random.split(k4, 20_000))
        return chain, rows, (P, pi, first)

    return compute(jax.random.PRNGKey(0))


def test_sequences_are_chains_of_their_matrix_and_do_not_depend_on_the_padding(draws):
    (tokens, P), (small_tokens, small_P) = draws[0]
    assert tokens.shape == (40,) and tokens.dtype == jnp.int32 and P.shape == (6, 6) and P.dtype == jnp.float32
    assert 0 <= int(tokens.min()) and int(tokens.max()) < 3
    np.testing.assert_allclose(np.asarray(P[:3]).sum(1), 1.0, atol=1e-6)
    assert np.all(np.asarray(P)[3:] == 0) and np.all(np.asarray(P)[:, 3:] == 0)
    np.testing.assert_array_equal(small_tokens, tokens)
    # the same Gamma draws normalised by sums over 3 and 6 columns (zeros beyond 3): float32, a few units in the
    # last place
    np.testing.assert_allclose(small_P, np.asarray(P)[:3, :3], rtol=RTOL_FLOAT32)
    # every transition of the chain has positive probability
    assert np.all(np.asarray(P)[np.asarray(tokens[:-1]), np.asarray(tokens[1:])] > 0)


def test_dirichlet_rows_have_the_dirichlet_moments(draws):
    S, beta = 4, 0.5
    P = np.asarray(draws[1], float)
    n = len(P)
    mean, var = 1 / S, (S - 1) / (S**2 * (S * beta + 1))          # Dirichlet(beta 1_S) marginals
    x = P.reshape(n, S * S)
    assert np.all(np.abs(x.mean(0) - mean) < 5 * np.sqrt(var / n))
    assert np.all(np.abs(x.var(0) / var - 1) < 0.08)         # ~4 standard errors of a variance ratio
    # rows are independent: correlation of entries of different rows ~ 0
    assert abs(np.corrcoef(P[:, 0, 0], P[:, 1, 0])[0, 1]) < 5 / np.sqrt(n)


def test_first_state_follows_the_stationary_law(draws):
    S = 3
    P, pi, first = (np.asarray(a) for a in draws[2])
    n = len(first)
    np.testing.assert_allclose(pi @ P, pi, atol=1e-6)
    np.testing.assert_allclose(pi.sum(), 1.0, atol=1e-6)
    assert np.all(pi[S:] == 0) and np.all(pi[:S] > 0)                        # padded states: no mass
    freq = np.bincount(first, minlength=6) / n
    p = pi.astype(float)
    assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / n) + 1e-12)


# ----------------------------------------------------------------------------
# References
# ----------------------------------------------------------------------------


def test_posterior_predictive_equals_a_brute_force_count():
    S, beta, T = 4, 0.3, 30
    tokens = np.random.default_rng(4).integers(0, S, T).astype(np.int32)   # any sequence: counting is exact
    q, u, n = (np.asarray(a) for a in jax.jit(lambda x: (
        bayes_predictive(x, S, beta, 6), unigram_predictive(x, S, 0.7, 6), transition_counts(x, 6)))(tokens))
    toks = tokens.tolist()
    for t in range(T):
        counts = np.zeros(S)
        for j in range(1, t + 1):
            if toks[j - 1] == toks[t]:
                counts[toks[j]] += 1
        np.testing.assert_array_equal(n[t, :S], counts)
        np.testing.assert_allclose(q[t, :S], (counts + beta) / (counts.sum() + S * beta), rtol=1e-6)
        seen = np.bincount(toks[: t + 1], minlength=S)
        np.testing.assert_allclose(u[t, :S], (seen + 0.7) / (t + 1 + S * 0.7), rtol=1e-6)
        assert np.all(q[t, S:] == 0) and np.all(u[t, S:] == 0)


def test_bayes_log_loss_is_the_dirichlet_multinomial_marginal_likelihood():
    """Chain rule: sum_t -log q_t(s_{t+1}) = -log p(s_2..s_T | s_1) under the Dirichlet prior (closed form)."""
    S, beta, T = 3, 0.8, 50
    toks = np.random.default_rng(5).integers(0, S, T).astype(np.int32)
    q = np.asarray(jax.jit(lambda x: bayes_predictive(x, S, beta, S))(toks), float)
    sequential = -np.sum(np.log(q[np.arange(T - 1), toks[1:]]))
    counts = np.zeros((S, S))
    for a, b in zip(toks[:-1], toks[1:]):
        counts[a, b] += 1
    log_marginal = sum(math.lgamma(S * beta) - math.lgamma(S * beta + counts[s].sum())
                       + sum(math.lgamma(beta + c) - math.lgamma(beta) for c in counts[s]) for s in range(S))
    np.testing.assert_allclose(sequential, -log_marginal, rtol=1e-5)
    hard = np.asarray(hard_cross_entropy(jnp.log(jnp.asarray(q[:-1])), jnp.asarray(toks[1:])))
    np.testing.assert_allclose(hard.sum(), -log_marginal, rtol=1e-5)


def test_expected_loss_equals_the_sampled_next_token_loss_on_average():
    """`soft_cross_entropy` is the expectation of the sampled log loss: Monte Carlo over chains of length T + 1."""
    S, beta, T, n = 3, 1.0, 12, 4000

    @jax.jit
    def compute(key):
        tokens, P = sample_batch(key, n, S, beta, T + 1)
        log_q = jax.vmap(lambda x: jnp.log(bayes_predictive(x, S, beta, S)))(tokens[:, :T])
        soft = jax.vmap(soft_cross_entropy)(log_q, tokens[:, :T], P).mean(1)
        hard = jax.vmap(hard_cross_entropy)(log_q, tokens[:, 1:]).mean(1)
        return soft, hard, jax.vmap(lambda x, p: reference_losses(x, p, S, beta))(tokens[:, :T], P)

    soft, hard, refs = compute(jax.random.PRNGKey(6))
    diff = np.asarray(hard) - np.asarray(soft)
    assert abs(diff.mean()) < 4 * diff.std() / np.sqrt(n)
    # at the first position the Bayes predictor is uniform: loss log S for every chain
    np.testing.assert_allclose(np.asarray(refs["bayes"])[:, 0], np.log(S), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(refs["uniform"]), np.log(S), rtol=1e-6)


def test_references_by_simulation_approach_their_independent_limits():
    """Bayes loss at position t ~ entropy rate + S(S-1)/(2t); unigram loss -> E[H(pi)]; order uniform > unigram > Bayes."""
    S, T = 2, 96
    r = jax.jit(lambda k: induction_references(k, S, 1.0, T, 2048))(jax.random.PRNGKey(7))
    t = np.arange(1, T + 1)
    late = t >= T // 2
    excess = (np.asarray(r["bayes_curve"]) - float(r["entropy_rate"])) * t
    ratio = excess[late].mean() / (S * (S - 1) / 2)
    assert 0.7 < ratio < 1.15, ratio
    assert float(r["bayes_loss"]) < float(r["unigram_loss"]) < float(r["uniform_loss"])
    assert float(r["uniform_loss"]) == pytest.approx(np.log(S), rel=1e-6)
    uni_end = float(np.mean(np.asarray(r["unigram_curve"])[-16:]))
    assert abs(uni_end - float(r["stationary_entropy"])) < 0.02
    assert float(r["entropy_rate"]) < float(r["stationary_entropy"])       # conditioning lowers entropy


def test_exact_stationary_start_predictive_matches_quadrature():
    """S = 2, beta = 1, one token seen: the exact predictive weighs P by pi_P(s_1) (quadrature over (a, b))."""
    n = 1000
    a = (np.arange(n) + 0.5) / n
    A, B = np.meshgrid(a, a, indexing="ij")            # P = [[1-a, a], [b, 1-b]], pi_0 = b / (a + b)
    pi0 = B / (A + B)
    stay = float(np.mean(pi0 * (1 - A)) / np.mean(pi0))
    tokens = jnp.array([0, 1, 1, 0], jnp.int32)
    q = np.asarray(jax.jit(lambda k: stationary_start_predictive(k, tokens, 2, 1.0, 2, n_samples=20000))(
        jax.random.PRNGKey(8)))
    assert q[0, 0] == pytest.approx(stay, abs=0.01)
    assert abs(stay - 0.5) > 0.05                       # while the Dirichlet predictive says 1/2
    np.testing.assert_allclose(q.sum(1), 1.0, atol=1e-5)


# ----------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------


def test_induction_head_construction_computes_the_bayes_predictor_and_extreme_scores_stay_finite():
    S, beta, T = 3, 0.5, 24
    model = InductionModel(layers=2)
    params = induction_head_params(S, T, beta, S_max=4)
    extreme = induction_head_params(S, T, beta, S_max=4, scale=300.0)          # scores far above the sink's
    extreme["sink"] = jnp.asarray(-200.0)

    @jax.jit
    def compute(params, extreme, key):
        tokens, P = sample_batch(key, 64, S, beta, T, 4)
        log_q, attn = jax.vmap(lambda x: induction_forward(params, x, S, model))(tokens)
        bayes = jax.vmap(lambda x: bayes_predictive(x, S, beta, 4))(tokens)
        frac, chance = jax.vmap(induction_attention)(attn[1], tokens)
        finite = jax.value_and_grad(lambda p: batch_loss(p, tokens, P, S, model)[0])(extreme)
        return (log_q, bayes, jnp.mean(jax.vmap(previous_token_attention)(attn[0])), jnp.mean(frac), jnp.mean(chance),
                finite)

    log_q, bayes, prev, frac, chance, (loss, grad) = compute(params, extreme, jax.random.PRNGKey(9))
    np.testing.assert_allclose(np.exp(np.asarray(log_q)), np.asarray(bayes), atol=2e-5)
    assert float(prev) > 0.999
    assert float(frac) > 0.999 and float(chance) < 0.6
    # the probability readout keeps the loss and its gradient finite when the sink's share underflows
    assert np.isfinite(float(loss))
    assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree_util.tree_leaves(grad))


def test_models_are_causal_and_padded_states_do_not_enter_them():
    """Forward only (cheap): causality, padded = unpadded model, padded coordinates have no influence."""
    model, S, S_max, T, k = MODELS[0], 3, 5, 10, 4

    @jax.jit
    def compute(key):
        padded = init_induction_params(key, model, S_max, T, init_scale=0.5)      # non-uniform attention
        small = init_induction_params(key, model, S, T, init_scale=0.5)
        noisy = {name: w + jnp.where(_padded_coordinates(w.shape, S, S_max, T), 3.0, 0.0) if w.ndim else w
                 for name, w in padded.items()}
        tokens, _ = sample_sequence(jax.random.PRNGKey(11), S, 1.0, T, S_max)
        changed = tokens.at[k + 1:].set((tokens[k + 1:] + 1) % S)
        fwd = lambda p, x: induction_forward(p, x, S, model)[0]  # noqa: E731
        return padded, small, fwd(padded, tokens), fwd(small, tokens), fwd(noisy, tokens), fwd(padded, changed)

    padded, small, lp, ls, ln, lc = (jax.device_get(x) for x in compute(jax.random.PRNGKey(10)))
    for x, y in zip(jax.tree_util.tree_leaves(unpad_params(padded, model, S, S_max, T)),
                    jax.tree_util.tree_leaves(small)):
        np.testing.assert_allclose(x, y, rtol=RTOL_FLOAT32)                     # same draws, another shape
    np.testing.assert_allclose(lp[:, :S], ls, rtol=1e-5, atol=1e-6)              # same function
    assert np.all(np.isneginf(lp[:, S:]))                                         # padded states: probability 0
    np.testing.assert_array_equal(ln, lp)                                         # padded weights have no effect
    np.testing.assert_array_equal(lc[: k + 1], lp[: k + 1])                       # causal
    assert np.max(np.abs(lc[k + 1:, :S] - lp[k + 1:, :S])) > 1e-4


def _padded_coordinates(shape, S, S_max, T):
    """Mask of the entries of a disentangled `W_l` that touch a padded (state >= S) coordinate."""
    n = shape[0] // (S_max + T)
    ids = [i for i in coordinate_ids(S_max, T, 3) if len(i) == shape[0]][0]
    base = ids // n                                                   # the h_0 id the coordinate copies
    real = ~((base % 2 == 0) & (base // 2 >= S))
    return ~(real[:, None] & real[None, :])


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS, ids=lambda m: f"{m.name}-L{m.layers}")
def test_padded_states_change_neither_the_loss_nor_its_gradient(model):
    S, S_max, T = 3, 5, 10

    @jax.jit
    def compute(key):
        padded = init_induction_params(key, model, S_max, T)
        small = init_induction_params(key, model, S, T)
        tokens, P = sample_batch(jax.random.PRNGKey(11), 16, S, 1.0, T, S_max)
        loss = lambda prm, P: batch_loss(prm, tokens, P, S, model)[0]  # noqa: E731
        return jax.value_and_grad(loss)(padded, P), jax.value_and_grad(loss)(small, P[:, :S, :S])

    (lp, gp), (ls, gs) = compute(jax.random.PRNGKey(10))
    np.testing.assert_allclose(lp, ls, rtol=1e-6)
    for x, y in zip(jax.tree_util.tree_leaves(unpad_params(gp, model, S, S_max, T)), jax.tree_util.tree_leaves(gs)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)
    # padded coordinates get exactly zero gradient, so Adam never moves them
    total = sum(float(jnp.sum(jnp.abs(g))) for g in jax.tree_util.tree_leaves(gp))
    kept = sum(float(jnp.sum(jnp.abs(g))) for g in jax.tree_util.tree_leaves(unpad_params(gp, model, S, S_max, T)))
    assert total == pytest.approx(kept, rel=1e-6)


def test_curves_average_over_geometric_blocks():
    ends = record_steps(1500, 60)
    assert ends[0] == 1 and ends[-1] == 1500 and np.all(np.diff(ends) > 0) and 50 <= len(ends) <= 60
    x = np.random.default_rng(0).normal(size=(1500, 2)).astype(np.float32)
    starts = np.concatenate([[0], ends[:-1]])
    brute = np.stack([x[a:b].mean(0) for a, b in zip(starts, ends)])
    np.testing.assert_allclose(np.asarray(_block_means(jnp.asarray(x), ends)), brute, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------
# Sweeps
# ----------------------------------------------------------------------------

GRID = InductionGrid(models=(InductionModel(layers=1),), Ss=(3, 5), Ts=(12,), seeds=(0, 1))
TRAINING = InductionTraining(steps=20, batch_size=8, n_records=8, n_eval=256, learning_rate=0.03)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("induction_run"))
    options = RunOptions(run_dir=run_dir, chunk_size=3, progress=False)    # 4 tasks: chunks of 3 and 1 (padded)
    result = induction_sweep(GRID, TRAINING, reference_sequences=0, options=options)
    return result, options


def test_vmapped_sweep_equals_runs_one_by_one_and_resumes(swept):
    result, options = swept
    tasks = GRID.tasks()
    one = jax.jit(lambda seed, S, beta, tokens, P: induction_run(
        seed, S, beta, tokens, P, model=GRID.models[0], T=12, S_max=5, steps=TRAINING.steps,
        batch_size=TRAINING.batch_size, learning_rate=TRAINING.learning_rate, init_scale=TRAINING.init_scale,
        n_records=TRAINING.n_records))
    # the evaluation chains of every point, as the sweep drew them (same compiled call: a cache hit)
    tokens, P, _ = _evaluation_set(jnp.asarray(tasks["S"][GRID.point_index]),
                                   jnp.asarray(tasks["beta"][GRID.point_index], jnp.float32), T=12, S_max=5,
                                   n_eval=TRAINING.n_eval, eval_seed=TRAINING.eval_seed, dtype="float32")
    c = result.curves
    for i in range(len(tasks["S"])):
        pt = tasks["point"][i]
        r = one(tasks["seed"][i], tasks["S"][i], tasks["beta"][i], tokens[pt], P[pt])
        if i == 0:      # the public function draws the same chains (jitted: eager sampling is slow)
            public = jax.jit(evaluation_chains, static_argnums=(2, 3, 4, 5))
            np.testing.assert_array_equal(public(int(tasks["S"][i]), float(tasks["beta"][i]), 12, 5,
                                                 TRAINING.n_eval, TRAINING.eval_seed)[0], tokens[pt])
        assert result.runs["S"][i] == tasks["S"][i] and result.runs["seed"][i] == tasks["seed"][i]
        np.testing.assert_allclose(result.runs["final_loss"][i], float(np.mean(r["sequence_loss"])), rtol=1e-5)
        np.testing.assert_allclose(result.runs["prev_token_attention_1"][i], float(r["prev_token_attention"][0]),
                                   rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(c["loss"][c["run"] == i], np.asarray(r["curve_loss"]), rtol=1e-5)
    again = induction_sweep(GRID, TRAINING, reference_sequences=0, options=options)
    np.testing.assert_array_equal(again.runs["final_loss"], result.runs["final_loss"])     # read back from disk
    with pytest.raises(ValueError, match="holds another run"):
        induction_sweep(GRID, InductionTraining(steps=25, batch_size=8, n_records=8, n_eval=256),
                        reference_sequences=0, options=options)


def test_bayes_loss_is_below_every_trained_model_on_the_same_sequences(swept):
    result, _ = swept
    r = result.runs
    assert np.all(r["gap_to_bayes"] > 0) and np.all(r["final_loss"] > r["bayes_loss"])
    # the paired difference is resolved: each gap exceeds 2 of its standard errors
    assert np.all(r["gap_to_bayes"] > 2 * r["gap_to_bayes_se"])
    # references of one grid point do not depend on the seed (same evaluation chains)
    for S in GRID.Ss:
        assert len(np.unique(r["bayes_loss"][r["S"] == S])) == 1
    assert np.all(r["bayes_loss"] < r["unigram_loss"]) and np.all(r["unigram_loss"] < r["uniform_loss"])
    assert induction_summary(result)["facts"]["bayes_below_every_model"]["holds"]


def _round_trip(result, tmp_path):
    paths = result.write(str(tmp_path))
    assert all(os.path.getsize(p) > 0 for p in paths)
    back = InductionResult.load(str(tmp_path))
    for table in ("runs", "curves", "positions", "references", "attention", "eval_losses", "floor"):
        a, b = getattr(result, table), getattr(back, table)
        assert set(a) == set(b), table
        for k in a:
            if np.asarray(a[k]).dtype.kind in "US":
                np.testing.assert_array_equal(np.asarray(a[k]).astype(str), b[k])
            else:
                np.testing.assert_array_equal(np.asarray(a[k], float), np.asarray(b[k], float), err_msg=f"{table}.{k}")
    assert back.config == result.config
    return back


def test_write_load_round_trip(swept, tmp_path):
    result, _ = swept
    # every run's per-chain evaluation losses average to its final loss
    for i in range(len(result.runs["S"])):
        np.testing.assert_allclose(result.eval_losses[f"run{i}"].mean(), result.runs["final_loss"][i], rtol=1e-5)
    _round_trip(result, tmp_path)


def test_subset_keeps_each_runs_tables_together(swept):
    result, _ = swept
    assert np.all(result.runs["batch_size"] == TRAINING.batch_size)
    sub = result.subset([2, 0])             # the seed-0 runs of S = 5 and S = 3: they have attention maps
    np.testing.assert_array_equal(sub.runs["seed"], result.runs["seed"][[2, 0]])
    for new, old in enumerate((2, 0)):
        for table in ("curves", "positions"):
            a, b = getattr(sub, table), getattr(result, table)
            np.testing.assert_array_equal(a["loss"][a["run"] == new], b["loss"][b["run"] == old])
        np.testing.assert_array_equal(sub.eval_losses[f"run{new}"], result.eval_losses[f"run{old}"])
        for key in [k for k in result.attention if k.startswith(f"run{old}_")]:
            np.testing.assert_array_equal(sub.attention[f"run{new}_" + key.split("_", 1)[1]], result.attention[key])
    assert set(sub.curves["run"]) == {0, 1} and len(sub.eval_losses) == 2
    kept = [k for k in result.attention if k.split("_")[0] in ("run0", "run2")]
    assert len(kept) > 0 and len(sub.attention) == len(kept)
    # the floor table's run column is renumbered with the rest
    floor = dict(run=np.arange(4), seed=result.runs["seed"].copy())
    sub = dataclasses.replace(result, floor=floor).subset([2, 0])
    np.testing.assert_array_equal(sub.floor["run"], [0, 1])
    np.testing.assert_array_equal(sub.floor["seed"], result.runs["seed"][[2, 0]])
    for bad in ([], [0, 0], [4], [-1]):
        with pytest.raises(ValueError, match="idx"):
            result.subset(bad)


def test_results_written_before_the_batch_size_column_still_load(swept, tmp_path):
    from phasejax.io import atomic_write_json, write_csv

    result, _ = swept
    result.write(str(tmp_path))
    old = [c for c in RUN_COLUMNS if c != "batch_size"]
    write_csv(str(tmp_path / "runs.csv"), {k: result.runs[k] for k in old}, order=old)     # an older runs.csv
    back = InductionResult.load(str(tmp_path))          # one part, one batch size: filled in from config.json
    np.testing.assert_array_equal(back.runs["batch_size"], np.full(4, TRAINING.batch_size))
    two = dict(parts=[result.config, dict(result.config, training=dict(result.config["training"], batch_size=99))])
    atomic_write_json(str(tmp_path / "config.json"), two)
    with pytest.raises(ValueError, match="batch_size"):
        InductionResult.load(str(tmp_path))


def test_previous_token_fact_is_judged_per_batch_size(swept, tmp_path):
    """The fact's verdict is that of the runs with the most chains per step; every batch size keeps its own."""
    result, _ = swept
    runs = dict(result.runs, layers=np.full(4, 2), batch_size=np.array([8, 8, 16, 16]),
                prev_token_attention_1=np.array([0.85, 0.86, 0.91, 0.95]))
    fake = dataclasses.replace(result, runs=runs)
    fact = induction_summary(fake, min_T=12)["facts"]["two_layer_prev_token_attention"]
    assert fact["judged_at_batch_size"] == 16 and fact["holds"] and fact["min"] == pytest.approx(0.91)
    assert not fact["by_batch_size"][8]["holds"] and fact["by_batch_size"][8]["mean"] == pytest.approx(0.855)
    assert fact["by_batch_size"][16]["n_runs"] == 2 and fact["by_batch_size"][16]["Ss"] == [5]
    points = induction_summary(fake, min_T=12)["points"]
    # runs 0, 1 are S = 3 (seeds 0, 1), runs 2, 3 are S = 5: one point per (batch size, S), both seeds in it
    assert sorted((p["batch_size"], p["S"], p["n_seeds"]) for p in points) == [(8, 3, 2), (16, 5, 2)]
    path = plot_prev_token_by_position(fake, str(tmp_path / "prev.png"))
    assert os.path.getsize(path) > 10_000
    with pytest.raises(ValueError, match="T = 64"):
        plot_prev_token_by_position(fake, str(tmp_path / "none.png"), T=64)


@pytest.mark.slow
def test_references_exact_floor_and_figures(swept, tmp_path):
    result, _ = swept
    references = induction_reference_table((3, 5), (12,), (1.0,), n_sequences=256, n_exact=4, n_samples=16)
    assert np.all(references["bayes_loss"] < references["unigram_loss"])
    floor = exact_floor_check(result, eval_seed=TRAINING.eval_seed, n_eval=TRAINING.n_eval, S_max=5,
                              max_gap_se=1e9, n_chains=8, n_samples=16)           # every point, tiny sizes
    assert len(floor["run"]) == len(result.runs["S"])
    assert np.all(np.isfinite(floor["model_minus_exact"])) and np.all(floor["model_minus_exact_se"] > 0)
    back = _round_trip(dataclasses.replace(result, references=references, floor=floor), tmp_path)
    assert induction_summary(back)["facts"]["exact_floor_below_every_checked_model"]["n_checked_runs"] == 4
    figures = plot_induction_figures(back, str(tmp_path))
    assert len(figures) == 4 and all(os.path.getsize(p) > 10_000 for p in figures)


# ----------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------


def test_bad_inputs_raise_value_errors_naming_the_parameter():
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="S must"):
        sample_sequence(key, 1, 1.0, 10)
    with pytest.raises(ValueError, match="T must"):
        sample_sequence(key, 3, 1.0, 1)
    with pytest.raises(ValueError, match="beta must"):
        sample_sequence(key, 3, 0.0, 10)
    with pytest.raises(ValueError, match="beta must"):
        sample_sequence(key, 3, -1.0, 10)
    with pytest.raises(ValueError, match="beta must"):
        sample_sequence(key, 3, float("nan"), 10)
    with pytest.raises(ValueError, match="S must be <= S_max"):
        sample_sequence(key, 4, 1.0, 10, S_max=3)
    with pytest.raises(ValueError, match="dtype"):
        sample_sequence(key, 3, 1.0, 10, dtype=jnp.int32)
    with pytest.raises(ValueError, match="n must"):
        sample_batch(key, 0, 3, 1.0, 10)
    with pytest.raises(ValueError, match="kind"):
        InductionModel(kind="mlp")
    with pytest.raises(ValueError, match="readout"):
        InductionModel(readout="argmax")
    with pytest.raises(ValueError, match="layers"):
        InductionModel(layers=0)
    with pytest.raises(ValueError, match="S must"):
        InductionGrid(Ss=(1, 3))
    with pytest.raises(ValueError, match="T must"):
        InductionGrid(Ts=(1,))
    with pytest.raises(ValueError, match="beta must"):
        InductionGrid(betas=(0.0,))
    with pytest.raises(ValueError, match="S_max"):
        InductionGrid(Ss=(2, 5), S_max=3)
    with pytest.raises(ValueError, match="seed"):
        InductionGrid(seeds=(-1,))
    with pytest.raises(ValueError, match="models"):
        InductionGrid(models=())
    with pytest.raises(ValueError, match="steps"):
        InductionTraining(steps=0)
    with pytest.raises(ValueError, match="n_records"):
        InductionTraining(n_records=0)
    with pytest.raises(ValueError, match="learning_rate"):
        InductionTraining(learning_rate=0.0)
    with pytest.raises(ValueError, match="S must"):
        induction_head_params(1, 10, 1.0)
    with pytest.raises(ValueError, match="beta must"):
        induction_head_params(3, 10, 0.0)
    with pytest.raises(ValueError, match="n_sequences"):
        induction_reference_table((3,), (8,), (1.0,), n_sequences=1)
    with pytest.raises(ValueError, match="options"):
        induction_sweep(InductionGrid(), options="tmp")


def test_command_line_validates_its_flags(capsys):
    from phasejax.cli import build_parser

    args = build_parser().parse_args(["induction", "--preset", "gpu", "--steps", "100"])
    assert args.preset == "gpu" and args.steps == 100 and args.chunk_size == 64
    for bad in (["--steps", "0"], ["--learning-rate", "-1"], ["--preset", "tpu"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["induction", *bad])


# ----------------------------------------------------------------------------
# Physics (slow)
# ----------------------------------------------------------------------------


@pytest.mark.slow
def test_two_layers_approach_bayes_and_one_layer_does_not():
    """At S = 3, T = 32: 2 layers within 2% of the Bayes loss, 1 layer more than 5% above it; previous-token head."""
    grid = InductionGrid(models=(InductionModel(layers=1), InductionModel(layers=2)), Ss=(3,), Ts=(32,), seeds=(0,))
    result = induction_sweep(grid, InductionTraining(steps=1500, n_eval=512), reference_sequences=1024, n_exact=0,
                             options=RunOptions(progress=False))
    r = result.runs
    one, two = r["layers"] == 1, r["layers"] == 2
    assert np.all(r["relative_gap"][two] < 0.02)
    assert np.all(r["relative_gap"][one] > 0.05)
    assert np.all(r["prev_token_attention_1"][two] > 0.8)
    assert np.all(r["induction_attention_2"][two] > 0.9)
