"""Factual recall: sampler law, relation-only closed form, constructions, padding, sweeps, files."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax.sweep import RunOptions
from phasejax.tasks.factual import (
    FactualGrid, FactualResult, FactualTask, FactualTraining, capacity_fits, factual_experiment, factual_run,
    factual_sweep, factual_parameter_count, recall_capacity, relation_only_entropy,
)
from phasejax.tasks.factual.data import relation_only_log_probs, relation_only_loss, sample_factual_batch, sample_facts
from phasejax.tasks.factual.model import (
    attention_memory_params, factual_embeddings, factual_logits, init_factual_params, mlp_memory_params,
)
from phasejax.tasks.factual.result import factual_result, find_plateau, fit_log_log
from phasejax.tasks.factual.train import curve_steps, recall_accuracy, train_factual

from _compare import RTOL_REDERIVED

KEY = jax.random.PRNGKey(0)


def _chi2_ok(counts, expected) -> bool:
    """Pearson statistic within mean + 6 sd of its chi-square(k - 1) law (normal approximation)."""
    counts, expected = np.asarray(counts, float).ravel(), np.asarray(expected, float).ravel()
    k = counts.size
    stat = float(np.sum((counts - expected) ** 2 / expected))
    return stat < (k - 1) + 6 * math.sqrt(2 * (k - 1))


# ----------------------------------------------------------------------------
# Task and sampler
# ----------------------------------------------------------------------------


def test_sampler_has_the_stated_law():
    task = FactualTask(n_subjects=12, n_relations=3, n_attributes=4, n_noise=5, length=6)
    n_used, n = 8, 60_000
    facts = sample_facts(jax.random.PRNGKey(1), task)
    b = jax.jit(lambda k: sample_factual_batch(k, task, facts, n, n_subjects=n_used))(jax.random.PRNGKey(2))
    tok, lab, s, r = (np.asarray(x) for x in b)
    T, S = task.length, task.n_subjects
    assert tok.shape == (n, T + 1) and np.all(tok[:, -1] == task.eos)
    body = tok[:, :T]
    is_subj = body < S
    is_rel = (body >= S) & (body < S + task.n_relations)
    is_noise = (body >= task.noise_start) & (body < task.eos)
    # each sequence holds one subject, one relation and T - 2 noise tokens
    np.testing.assert_array_equal(is_subj.sum(1), 1)
    np.testing.assert_array_equal(is_rel.sum(1), 1)
    np.testing.assert_array_equal(is_noise.sum(1), T - 2)
    np.testing.assert_array_equal(body[is_subj], s)
    np.testing.assert_array_equal(body[is_rel], S + r)
    assert s.min() >= 0 and s.max() < n_used                      # only the first n_subjects are used
    # the answer is a*(s, r)
    np.testing.assert_array_equal(lab, np.asarray(facts)[s, r])
    # (s, r) uniform on [n_used] x [R]; the (subject, relation) positions uniform over ordered distinct pairs;
    # noise uniform on N
    assert _chi2_ok(np.bincount(s * task.n_relations + r, minlength=n_used * task.n_relations),
                    np.full(n_used * task.n_relations, n / (n_used * task.n_relations)))
    pos_s, pos_r = np.argmax(is_subj, 1), np.argmax(is_rel, 1)
    pair = np.bincount(pos_s * T + pos_r, minlength=T * T).reshape(T, T)
    assert np.all(np.diag(pair) == 0)
    off = ~np.eye(T, dtype=bool)
    assert _chi2_ok(pair[off], np.full(off.sum(), n / (T * (T - 1))))
    noise = body[is_noise] - task.noise_start
    assert _chi2_ok(np.bincount(noise, minlength=task.n_noise), np.full(task.n_noise, noise.size / task.n_noise))


def test_facts_are_balanced_and_do_not_depend_on_the_subject_padding():
    task = FactualTask(n_subjects=24, n_relations=3, n_attributes=4)
    f = np.asarray(sample_facts(KEY, task))
    assert f.shape == (24, 3) and f.dtype == np.int32
    for r in range(3):
        assert np.all((f[:, r] // 4) == r)                           # a*(s, r) in A_r
        for block in range(6):                                       # each block of D subjects: a bijection onto A_r
            np.testing.assert_array_equal(np.sort(f[4 * block:4 * block + 4, r]), np.arange(4 * r, 4 * r + 4))
    np.testing.assert_array_equal(np.asarray(sample_facts(KEY, task.replace(n_subjects=8))), f[:8])
    iid = np.asarray(sample_facts(KEY, task.replace(balanced=False, n_subjects=50)))
    assert np.all(iid // 4 == np.arange(3)[None, :])
    assert len({tuple(np.bincount(iid[:, r] - 4 * r, minlength=4)) for r in range(3)}) > 1   # not balanced


# ----------------------------------------------------------------------------
# The relation-only predictor: closed form
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("D,S,n_used", [(4, 16, None), (3, 12, 6)])
def test_relation_only_loss_is_log_A_r_on_balanced_facts(D, S, n_used):
    task = FactualTask(n_subjects=S, n_relations=3, n_attributes=D)
    facts = sample_facts(KEY, task)
    computed = float(relation_only_loss(task, facts, n_used))
    assert computed == pytest.approx(math.log(D), rel=1e-6)
    assert task.log_A_r == math.log(D)
    assert relation_only_entropy(facts, n_used) == pytest.approx(math.log(D), rel=1e-12)
    # the predictor's loss on sampled sequences is log D on every sample
    logp = relation_only_log_probs(task, facts, n_used)
    b = sample_factual_batch(jax.random.PRNGKey(3), task, facts, 500, n_used)
    per_sample = -np.asarray(logp)[np.asarray(b.relations), np.asarray(b.labels)]
    np.testing.assert_allclose(per_sample, math.log(D), rtol=1e-6)


def test_relation_only_loss_matches_the_conditional_entropy_on_unbalanced_facts():
    task = FactualTask(n_subjects=30, n_relations=4, n_attributes=5, balanced=False)
    facts = sample_facts(KEY, task)
    closed = relation_only_entropy(facts)
    assert closed < math.log(5)
    assert float(relation_only_loss(task, facts)) == pytest.approx(closed, rel=1e-5)
    # Monte Carlo: cross-entropy of p(a | r) on fresh sequences
    logp = np.asarray(relation_only_log_probs(task, facts))
    b = sample_factual_batch(jax.random.PRNGKey(4), task, facts, 50_000)
    ce = -logp[np.asarray(b.relations), np.asarray(b.labels)]
    assert abs(ce.mean() - closed) < 4 * ce.std() / np.sqrt(ce.size)


# ----------------------------------------------------------------------------
# Model: constructions, parameter count, padding
# ----------------------------------------------------------------------------

TINY = FactualTask(n_subjects=8, n_relations=2, n_attributes=4, n_noise=4, length=5)   # vocab 15, |A| = 8


@pytest.mark.parametrize("construction", ["attention", "mlp"])
def test_constructed_models_recall_every_fact(construction):
    d = 16
    facts = sample_facts(KEY, TINY)
    emb = factual_embeddings(jax.random.PRNGKey(5), TINY, d, d)
    if construction == "attention":
        params, m = attention_memory_params(TINY, facts, emb), 0
    else:
        params, m = mlp_memory_params(TINY, facts, emb), TINY.n_subjects * TINY.n_relations
    acc = jax.jit(lambda p: recall_accuracy(p, emb, jax.random.PRNGKey(6), TINY, facts, d, m, 1,
                                            n_subjects=TINY.n_subjects, n_contexts=16))(params)
    assert float(acc) == 1.0
    # the same logits with and without jit
    b = sample_factual_batch(jax.random.PRNGKey(7), TINY, facts, 256)
    eager = factual_logits(params, emb, b.tokens, d, m, 1)
    jitted = jax.jit(factual_logits, static_argnums=(3, 4, 5))(params, emb, b.tokens, d, m, 1)
    np.testing.assert_allclose(jitted, eager, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(np.argmax(eager, -1), b.labels)
    with pytest.raises(ValueError, match="d >= vocab"):
        attention_memory_params(TINY, facts, factual_embeddings(KEY, TINY, 12, 12))


def test_parameter_count_and_inert_padding():
    d, m, h, dh = 6, 5, 2, 4
    params = init_factual_params(KEY, d, m, h, d_max=10, m_max=9, heads_max=3, d_head=dh)
    emb = factual_embeddings(KEY, TINY, d, 10)
    sliced = dict(WQ=params["WQ"][:h, :, :d], WK=params["WK"][:h, :, :d], WV=params["WV"][:h, :, :d],
                  WO=params["WO"][:h, :, :d], U=params["U"][:m, :d], V=params["V"][:m, :d])
    assert sum(v.size for v in sliced.values()) == factual_parameter_count(d, m, h, dh) == 4 * h * dh * d + 2 * m * d
    np.testing.assert_array_equal(emb["E"][:, d:], 0.0)
    # the loss gradient vanishes exactly on the padded dimensions, units and heads
    facts = sample_facts(KEY, TINY)
    b = sample_factual_batch(KEY, TINY, facts, 64)

    def loss(p):
        logp = jax.nn.log_softmax(factual_logits(p, emb, b.tokens, d, m, h))
        return -jnp.mean(jnp.take_along_axis(logp, b.labels[:, None], 1))

    g = jax.jit(jax.grad(loss))(params)
    for k in ("WQ", "WK", "WV", "WO"):
        assert np.all(g[k][h:] == 0) and np.all(g[k][..., d:] == 0), k
        assert np.any(g[k][:h, :, :d] != 0), k
    for k in ("U", "V"):
        assert np.all(g[k][m:] == 0) and np.all(g[k][:, d:] == 0), k


def test_padded_training_equals_the_unpadded_model():
    d, m, h = 8, 4, 2
    training = FactualTraining(steps=25, batch_size=16, d_head=4, learning_rate=1e-2)
    facts = sample_facts(KEY, TINY)
    padded0 = init_factual_params(KEY, d, m, h, d_max=12, m_max=6, heads_max=3, d_head=4)
    emb = factual_embeddings(KEY, TINY, d, 12)
    small0 = dict(WQ=padded0["WQ"][:h, :, :d], WK=padded0["WK"][:h, :, :d], WV=padded0["WV"][:h, :, :d],
                  WO=padded0["WO"][:h, :, :d], U=padded0["U"][:m, :d], V=padded0["V"][:m, :d])
    small_emb = dict(E=emb["E"][:, :d], U=emb["U"][:, :d])
    run = jax.jit(lambda p, e, dd, mm, hh: train_factual(p, e, jax.random.PRNGKey(9), TINY, facts, dd, mm, hh,
                                                         n_subjects=8, training=training))
    padded, mp = run(padded0, emb, d, m, h)
    small, ms = run(small0, small_emb, d, m, h)
    np.testing.assert_allclose(mp["loss"], ms["loss"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(padded["WQ"][:h, :, :d], small["WQ"], rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(padded["V"][:m, :d], small["V"], rtol=1e-3, atol=1e-5)
    np.testing.assert_array_equal(padded["WO"][h:], padded0["WO"][h:])          # padding never moves
    np.testing.assert_array_equal(padded["U"][m:], padded0["U"][m:])


@pytest.mark.slow
def test_padded_subjects_give_the_same_sequences_and_logits():
    small, big = TINY, TINY.replace(n_subjects=20)
    params = init_factual_params(KEY, 8, 4, 2, d_max=8, m_max=4, heads_max=2, d_head=4)

    @jax.jit
    def batch_and_logits(task, n_subjects):
        batch = sample_factual_batch(jax.random.PRNGKey(11), task, sample_facts(KEY, task), 300, n_subjects)
        return batch, factual_logits(params, factual_embeddings(KEY, task, 8, 8), batch.tokens, 8, 4, 2)

    batch_and_logits = jax.jit(batch_and_logits.__wrapped__, static_argnums=0)
    b_small, l_small = batch_and_logits(small, small.n_subjects)
    b_big, l_big = batch_and_logits(big, small.n_subjects)
    for x, y in zip(b_small[1:], b_big[1:]):                      # labels, subjects, relations
        np.testing.assert_array_equal(x, y)
    shift = np.where(np.asarray(b_small.tokens) >= small.n_subjects, big.n_subjects - small.n_subjects, 0)
    np.testing.assert_array_equal(np.asarray(b_small.tokens) + shift, b_big.tokens)
    np.testing.assert_allclose(l_small, l_big, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------
# Sweeps, result files
# ----------------------------------------------------------------------------

SWEEP_TRAINING = FactualTraining(steps=300, batch_size=32, learning_rate=1e-2, d_head=8, curve_points=12,
                                 n_contexts=4)
SWEEP_GRID = FactualGrid(subjects=(4, 8), archs=((16, 0, 1), (16, 16, 2)), seeds=(0,))


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("factual_sweep"))
    out = factual_sweep(SWEEP_GRID, TINY, SWEEP_TRAINING, options=RunOptions(run_dir=run_dir, chunk_size=3,
                                                                              progress=False))
    return run_dir, out


def test_vmapped_sweep_equals_runs_one_by_one_and_learns_the_tiny_instance(swept):
    run_dir, out = swept
    tasks = SWEEP_GRID.tasks()
    one = jax.jit(lambda seed, s, d, m, h: factual_run(seed, s, d, m, h, task=TINY, training=SWEEP_TRAINING,
                                                       d_max=16, m_max=16, heads_max=2))
    for i in range(len(tasks["seed"])):
        r = one(*(tasks[k][i] for k in ("seed", "n_subjects", "d", "m", "n_heads")))
        np.testing.assert_allclose(out["curve_loss"][i], r["curve_loss"], rtol=2e-4, atol=1e-6)
        np.testing.assert_allclose(out["final_loss"][i], r["final_loss"], rtol=2e-4, atol=1e-6)
        n_eval = tasks["n_subjects"][i] * TINY.n_relations * SWEEP_TRAINING.n_contexts
        np.testing.assert_allclose(out["accuracy"][i], r["accuracy"], atol=1.5 / n_eval)   # float32 ties at most
        assert out["status"][i] == r["status"]
    np.testing.assert_array_equal(out["n_facts"], tasks["n_subjects"] * TINY.n_relations)
    np.testing.assert_array_equal(out["n_params"], [factual_parameter_count(d, m, h, 8) for d, m, h in
                                                    zip(tasks["d"], tasks["m"], tasks["n_heads"])])
    # the trained model stores every fact of the tiny instance (8 and 16 facts)
    np.testing.assert_array_equal(out["accuracy"], 1.0)
    again = factual_sweep(SWEEP_GRID, TINY, SWEEP_TRAINING, options=RunOptions(run_dir=run_dir, chunk_size=3,
                                                                                progress=False))
    np.testing.assert_array_equal(again["curve_loss"], out["curve_loss"])       # resumed from disk
    with pytest.raises(ValueError, match="differing"):
        factual_sweep(SWEEP_GRID, TINY, SWEEP_TRAINING.replace(steps=301),
                      options=RunOptions(run_dir=run_dir, chunk_size=3, progress=False))


def test_write_load_round_trip(swept, tmp_path):
    _, out = swept
    result = factual_result([(TINY, out)], {"tiny": out}, curve_training=SWEEP_TRAINING,
                            d_head=SWEEP_TRAINING.d_head, threshold=0.99, settings=dict(note="test"))
    paths = result.write(str(tmp_path))
    assert sorted(p.rsplit("/", 1)[1] for p in paths) == ["capacity.csv", "curves.csv", "recall.csv", "summary.json"]
    loaded = FactualResult.load(str(tmp_path))
    for name in ("runs", "curves", "capacity"):
        a, b = getattr(result, name), getattr(loaded, name)
        assert list(a) == list(b), name
        for k in a:
            x, y = np.asarray(a[k]), np.asarray(b[k])
            if x.dtype.kind in "fc":
                np.testing.assert_array_equal(x, y.astype(float), err_msg=f"{name}.{k}")
            else:
                np.testing.assert_array_equal(x.astype(str), y.astype(str), err_msg=f"{name}.{k}")
    assert loaded.summary == result.summary
    s = result.summary
    assert {"plateau_loss", "log_A_r", "facts_stored_per_parameter_count"} <= set(s)
    assert s["log_A_r"] == pytest.approx(math.log(TINY.n_attributes), rel=RTOL_REDERIVED)    # the same logarithm
    assert len(loaded.curves["step"]) == len(out["seed"]) * len(curve_steps(300, 12))


def test_plots_are_written(swept, tmp_path):
    _, out = swept
    result = factual_result([(TINY, out)], {"tiny": out}, curve_training=SWEEP_TRAINING, d_head=8)
    from phasejax.tasks.factual.figures import plot_factual_figures

    paths = plot_factual_figures(result, str(tmp_path))
    assert [p.rsplit("/", 1)[1] for p in paths] == ["curves.png", "phase_diagram.png", "facts_vs_params.png"]
    for p in paths:
        with open(p, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------
# Measurements: plateau, capacity, fits
# ----------------------------------------------------------------------------


def test_find_plateau_locates_the_intermediate_level_of_a_two_stage_curve():
    t = np.unique(np.round(np.geomspace(1, 20_000, 80)))
    level, L0 = 1.3, 2.8
    stage1 = 1 / (1 + (t / 40.0) ** 3)          # 1 -> 0 around t = 40
    stage2 = 1 / (1 + (2000.0 / t) ** 3)        # 0 -> 1 around t = 2000
    loss = level + (L0 - level) * stage1 - level * stage2
    pl = find_plateau(t - 1, loss)
    assert pl.found and abs(pl.loss - level) < 0.01 * level
    assert 40 < pl.step < 2000 and pl.decades > 0.5
    with pytest.raises(ValueError, match="steps and loss"):
        find_plateau(t[:5], loss[:4])


def test_recall_capacity_interpolates_in_log_facts_and_censors():
    n = [16, 32, 64, 128, 256]
    value, cens = recall_capacity(n, [1.0, 1.0, 0.995, 0.98, 0.5], 0.99)
    assert cens == "none" and value == pytest.approx(64 * 2 ** (1 / 3), rel=1e-12)
    assert recall_capacity(n, [1.0] * 5, 0.99) == (256.0, "above")
    assert recall_capacity(n, [0.9] * 5, 0.99) == (16.0, "below")
    assert recall_capacity(n[::-1], [0.5, 0.98, 0.995, 1.0, 1.0], 0.99)[0] == pytest.approx(value)   # order-free
    with pytest.raises(ValueError, match="threshold"):
        recall_capacity(n, [1.0] * 5, 1.5)


def test_capacity_fits_recover_an_exact_linear_law_and_ignore_censored_architectures():
    # recall falls by 0.01 per doubling of the facts beyond N0 = n_params / 24, so N* = 2 N0 = n_params / 12
    # (between grid points: exact under the log-linear interpolation); the last architecture is below the grid
    grid = 16 * 2 ** np.arange(8)
    rows = []
    for k, n_params in enumerate((1024, 2048, 4096, 8192, 64)):
        for seed in (0, 1, 2):
            for n in grid:
                acc = 1.0 - 0.01 * max(0.0, np.log2(n / (n_params / 24))) if n_params > 64 else 0.5
                rows.append(("fam", 32, 0, k + 1, n_params, n, seed, acc))
    names = ("family", "d", "m", "n_heads", "n_params", "n_facts", "seed", "accuracy")
    runs = {name: np.asarray(col) for name, col in zip(names, zip(*rows))}
    fit = capacity_fits(runs, 0.99, n_boot=50)["fam"]
    assert fit["n"] == 4 and fit["varied"] == "n_heads"
    assert fit["exponent"] == pytest.approx(1.0, abs=1e-9)
    assert np.exp(fit["intercept"]) == pytest.approx(1 / 12, rel=1e-9)
    assert fit["ci_low"] == pytest.approx(1.0, abs=1e-9) and fit["ci_high"] == pytest.approx(1.0, abs=1e-9)


def test_fit_log_log_recovers_an_exact_power_law():
    x = np.array([1e3, 2e3, 4e3, 8e3, 1.6e4])
    fit = fit_log_log(x, 3.0 * x ** 1.5, n_boot=200)
    assert fit["exponent"] == pytest.approx(1.5, rel=1e-9)
    assert fit["ci_low"] == pytest.approx(1.5, rel=1e-9) and fit["ci_high"] == pytest.approx(1.5, rel=1e-9)
    assert math.isnan(fit_log_log([1.0], [2.0])["exponent"])


# ----------------------------------------------------------------------------
# Bad inputs
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,name", [
    (dict(n_subjects=0), "n_subjects"), (dict(n_relations=0), "n_relations"), (dict(n_attributes=0), "n_attributes"),
    (dict(length=1), "length"), (dict(n_noise=0), "n_noise"), (dict(n_subjects=10, n_attributes=4), "n_subjects"),
    (dict(n_subjects=2.5), "n_subjects")])
def test_bad_task_inputs_raise_naming_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        FactualTask(**kwargs)


def test_bad_training_grid_and_sweep_inputs_raise_naming_the_parameter():
    for kwargs, name in [(dict(steps=0), "steps"), (dict(batch_size=-1), "batch_size"),
                         (dict(learning_rate=0.0), "learning_rate"), (dict(init_scale=float("nan")), "init_scale"),
                         (dict(optimizer="rmsprop"), "optimizer"), (dict(d_head=0), "d_head")]:
        with pytest.raises(ValueError, match=name):
            FactualTraining(**kwargs)
    for kwargs, name in [(dict(archs=((0, 0, 1),)), "d must"), (dict(archs=((8, -1, 1),)), "m must"),
                         (dict(archs=((8, 0, 0),)), "n_heads"), (dict(subjects=(0,)), "subjects"),
                         (dict(seeds=(-1,)), "seeds"), (dict(archs=((8, 0),)), "archs")]:
        with pytest.raises(ValueError, match=name):
            FactualGrid(**kwargs)
    with pytest.raises(ValueError, match="n_subjects"):
        factual_sweep(FactualGrid(subjects=(16,)), TINY)                     # more subjects than the task holds
    with pytest.raises(ValueError, match="n_subjects"):
        factual_sweep(FactualGrid(subjects=(6,)), TINY)                      # not a multiple of |A_r|
    with pytest.raises(ValueError, match="n_subjects"):
        sample_factual_batch(KEY, TINY, sample_facts(KEY, TINY), 4, n_subjects=0)
    with pytest.raises(ValueError, match="threshold"):
        factual_experiment(TINY, SWEEP_TRAINING, threshold=0.0)


def test_command_presets_are_valid_and_the_parser_validates():
    from phasejax.cli import build_parser
    from phasejax.commands.factual import presets

    for name, p in presets().items():
        task = p["task"]
        for grid in p["families"].values():
            assert max(grid.subjects) <= task.n_subjects, name
            assert all(s % task.n_attributes == 0 for s in grid.subjects), name
        for D in p["extra_attributes"]:
            p["curve_task"].replace(n_attributes=D)                         # raises unless D divides S
    args = build_parser().parse_args(["factual"])
    assert args.preset == "cpu" and args.out.endswith("factual")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["factual", "--steps", "0"])
