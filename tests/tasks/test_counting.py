"""Histogram task: labels, explicit constructions, padded and vmapped counting sweeps."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax.precision import float64_scope, x64_enabled
from phasejax.sweep import RunOptions
from phasejax.tasks.histogram.counting import (
    COUNTING_CONFIGS,
    CountingConfig,
    CountingGrid,
    CountingRuns,
    construction_accuracy,
    counting_logits,
    counting_phase_diagrams,
    counting_run,
    counting_sweep,
    init_counting_params,
    loss_curve,
    inventory_counting_params,
    relation_counting_params,
    train_counting,
    unpad,
)
from phasejax.tasks.histogram.data import (
    IGNORE,
    HistogramTask,
    all_sequences,
    histogram_labels,
    masked_accuracy,
    model_inputs,
    sample_sequences,
)


def test_histogram_labels_match_the_definition_and_bos_is_not_scored():
    # [B, A, A, D, E] -> [1, 2, 2, 1, 1]
    np.testing.assert_array_equal(histogram_labels(jnp.array([[1, 0, 0, 3, 4]])), [[1, 2, 2, 1, 1]])
    task = HistogramTask(T=5, L=7, bos=True)
    toks = np.asarray(sample_sequences(jax.random.PRNGKey(0), task, 200))
    brute = np.array([[np.sum(row == v) for v in row] for row in toks])
    np.testing.assert_array_equal(histogram_labels(jnp.asarray(toks)), brute)
    mt, lab = model_inputs(jnp.asarray(toks), task)
    assert mt.shape == lab.shape == (200, 8)
    np.testing.assert_array_equal(mt[:, 0], 5)            # BOS id T, first
    np.testing.assert_array_equal(lab[:, 0], IGNORE)      # not scored
    np.testing.assert_array_equal(lab[:, 1:], brute)
    assert toks.min() >= 0 and toks.max() < 5


def test_masked_accuracy_ignores_the_bos_position():
    logits = jax.nn.one_hot(jnp.array([[0, 2, 1]]), 4)
    assert float(masked_accuracy(logits, jnp.array([[IGNORE, 2, 1]]))) == 1.0
    assert float(masked_accuracy(logits, jnp.array([[IGNORE, 2, 3]]))) == 0.5


def test_all_sequences_is_exhaustive():
    seqs = all_sequences(HistogramTask(T=3, L=4))
    assert seqs.shape == (81, 4) and len({tuple(s) for s in seqs}) == 81
    with pytest.raises(ValueError, match="max_count"):
        all_sequences(HistogramTask(T=32, L=10))


def _accuracy(params, task, cfg, toks):
    mt, lab = model_inputs(jnp.asarray(toks), task)
    return float(masked_accuracy(counting_logits(params, mt, cfg, params["E"].shape[1], params["b1"].shape[0]), lab))


@pytest.mark.parametrize("T,L,d", [(4, 5, None), (3, 6, 7)])
def test_explicit_constructions_are_exact_on_every_sequence(T, L, d):
    rel_task, inv_task = HistogramTask(T, L, bos=True), HistogramTask(T, L)
    seqs = all_sequences(inv_task)
    assert _accuracy(relation_counting_params(rel_task, d), rel_task, COUNTING_CONFIGS["dot+BOS+softmax"], seqs) == 1.0
    assert _accuracy(inventory_counting_params(inv_task, d), inv_task, COUNTING_CONFIGS["linear"], seqs) == 1.0
    assert _accuracy(inventory_counting_params(inv_task, d, softmax=True), inv_task,
                     COUNTING_CONFIGS["linear+softmax"], seqs) == 1.0


def test_explicit_constructions_are_exact_at_the_papers_size():
    seqs = np.asarray(sample_sequences(jax.random.PRNGKey(1), HistogramTask(32, 10), 20_000))
    rel = relation_counting_params(HistogramTask(32, 10, bos=True))
    assert rel["W1"].shape == (32, 1)                           # d = T, p = 1
    assert _accuracy(rel, HistogramTask(32, 10, bos=True), COUNTING_CONFIGS["dot+BOS+softmax"], seqs) == 1.0
    inv = inventory_counting_params(HistogramTask(32, 10))
    assert inv["W1"].shape == (32, 32)                          # d = T, p = T
    assert _accuracy(inv, HistogramTask(32, 10), COUNTING_CONFIGS["linear"], seqs) == 1.0
    with pytest.raises(ValueError, match="d >= T"):
        relation_counting_params(HistogramTask(32, 10, bos=True), d=16)


def test_six_configurations_and_case_insensitive_names():
    assert list(COUNTING_CONFIGS) == ["linear", "linear+softmax", "dot", "dot+softmax", "dot+BOS", "dot+BOS+softmax"]
    assert CountingConfig.from_name("dot+BOS").bos
    for spelling in ("DOT+bos+Softmax", "dot_BOS_softmax", " dot+bos+softmax "):
        assert COUNTING_CONFIGS[spelling] == COUNTING_CONFIGS["dot+BOS+softmax"]
    assert COUNTING_CONFIGS["dot+BOS+softmax"].dir_name == "dot_BOS_softmax"
    for lookup in (lambda: CountingConfig.from_name("mlp"), lambda: COUNTING_CONFIGS["mlp"]):
        with pytest.raises(ValueError, match="unknown configuration 'mlp'"):
            lookup()
    with pytest.raises(KeyError):   # still a KeyError for mapping code
        COUNTING_CONFIGS["mlp"]


def test_construction_accuracy_in_float64_equals_float32():
    task = HistogramTask(4, 5)
    seqs = all_sequences(task)
    cfg = COUNTING_CONFIGS["linear"]
    acc32 = construction_accuracy(inventory_counting_params(task), task, cfg, seqs)
    with float64_scope():
        params = inventory_counting_params(task, dtype=jnp.float64)
        assert params["W1"].dtype == jnp.float64
        acc64 = construction_accuracy(params, task, cfg, seqs)
    assert float(acc32) == float(acc64) == 1.0


@pytest.mark.parametrize("name", ["dot+BOS+softmax", "linear"])
def test_masked_padding_trains_like_the_unpadded_model(name):
    task, cfg = HistogramTask(6, 5), COUNTING_CONFIGS[name]
    d, p = 4, 3
    padded0 = init_counting_params(jax.random.PRNGKey(0), task, cfg, d, p, d_max=8, p_max=8)
    small0 = unpad(padded0, d, p)
    key = jax.random.PRNGKey(1)
    padded, loss_pad = train_counting(padded0, key, task, cfg, d, p, steps=40, batch_size=32)
    small, loss_small = train_counting(small0, key, task, cfg, d, p, steps=40, batch_size=32)
    np.testing.assert_allclose(loss_pad, loss_small, rtol=1e-4, atol=1e-6)
    for k in small:
        np.testing.assert_allclose(unpad(padded, d, p)[k], small[k], rtol=1e-4, atol=1e-5, err_msg=k)
    # padded entries never move
    np.testing.assert_array_equal(padded["W1"][d:], padded0["W1"][d:])
    np.testing.assert_array_equal(padded["W2"][p:], padded0["W2"][p:])


def test_small_vmapped_sweep_equals_its_runs_one_by_one_resumes_and_round_trips(tmp_path):
    task, cfg = HistogramTask(6, 5), COUNTING_CONFIGS["dot+softmax"]
    grid = CountingGrid(ds=(2, 4), ps=(1, 3), seeds=(0, 1))
    kw = dict(task=task, cfg=cfg, d_max=4, p_max=3, steps=20, batch_size=16, n_test=256)
    options = RunOptions(run_dir=str(tmp_path / "run"), chunk_size=3, progress=False)
    sweep = lambda: counting_sweep(grid, task, "DOT+softmax", steps=20, batch_size=16, n_test=256,  # noqa: E731
                                   options=options)
    swept = sweep()
    one = jax.jit(lambda s, d, p: counting_run(s, d, p, **kw))
    tasks = grid.tasks()
    for i in range(len(tasks["d"])):
        r = one(tasks["seed"][i], tasks["d"][i], tasks["p"][i])
        np.testing.assert_allclose(swept.runs["final_loss"][i], r["final_loss"], rtol=1e-5)
        np.testing.assert_allclose(swept.runs["accuracy"][i], r["accuracy"], atol=2 / 1280)   # float32 ties at most
    np.testing.assert_array_equal(sweep().runs["accuracy"], swept.runs["accuracy"])   # resumed from disk
    assert swept.names == ["dot+softmax"] and set(swept.runs["config"]) == {"dot+softmax"}
    swept.write(str(tmp_path / "out"))
    for loaded in (CountingRuns.load(str(tmp_path / "out")), CountingRuns.from_csv(str(tmp_path / "out" / "runs.csv"))):
        for k, v in swept.runs.items():
            np.testing.assert_array_equal(loaded.runs[k], v, err_msg=k)
    assert CountingRuns.load(str(tmp_path / "out")).config == swept.config


# Two configurations with loss curves, in their own run directories: one computation (two compiled sweeps) for the
# two tests below.
CURVES_TASK, CURVES_GRID = HistogramTask(5, 4), CountingGrid(ds=(3,), ps=(1, 2), seeds=(0,))
CURVES_KW = dict(steps=30, batch_size=8, n_test=32, curve_points=10)


@pytest.fixture(scope="module")
def two_configurations(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("counting_two")
    kw = dict(CURVES_KW, options=RunOptions(run_dir=str(run_dir), progress=False))
    return counting_phase_diagrams(CURVES_GRID, CURVES_TASK, ["dot+BOS+softmax", "linear"], **kw), run_dir, kw


def test_several_configurations_resume_in_their_own_run_directories(two_configurations):
    both, run_dir, kw = two_configurations
    assert sorted(p.name for p in run_dir.iterdir()) == ["dot_BOS_softmax", "linear"]
    assert both.names == ["dot+BOS+softmax", "linear"] and set(both.config) == {"dot+BOS+softmax", "linear"}
    np.testing.assert_array_equal(both.select("DOT_bos_SoftMax")["accuracy"],
                                  counting_phase_diagrams(CURVES_GRID, CURVES_TASK, "dot+BOS+softmax",
                                                          **kw).runs["accuracy"])


def test_bad_task_inputs():
    with pytest.raises(ValueError, match="T"):
        HistogramTask(T=0)
    with pytest.raises(ValueError, match="mixing"):
        CountingConfig("mlp")
    with pytest.raises(ValueError, match="ds"):
        CountingGrid(ds=(0, 2))
    with pytest.raises(ValueError, match="steps"):
        counting_sweep(CountingGrid(ds=(2,), ps=(2,), seeds=(0,)), HistogramTask(4, 3), COUNTING_CONFIGS["dot"], steps=0)
    assert not x64_enabled()


COMMITTED = os.path.join(os.path.dirname(__file__), "..", "..", "results", "counting")


def test_loss_curves_are_block_means_whose_last_block_is_the_final_loss(two_configurations, tmp_path):
    np.testing.assert_allclose(loss_curve(jnp.arange(10.0), 5), [0.5, 2.5, 4.5, 6.5, 8.5])
    task, grid = CURVES_TASK, CURVES_GRID
    runs = two_configurations[0]
    c = runs.curves
    assert len(c["loss"]) == 2 * 2 * 10 and set(c["step"]) == set(range(3, 31, 3))
    for name in runs.names:
        r = runs.select(name)
        for p, final in zip(r["p"], r["final_loss"]):   # final_loss = mean of the last tenth = the last block
            sel = (c["config"] == name) & (c["p"] == p) & (c["step"] == 30)
            np.testing.assert_allclose(c["loss"][sel], [final], rtol=1e-6)
    runs.write(str(tmp_path))
    back = CountingRuns.load(str(tmp_path))
    for k, v in runs.curves.items():
        np.testing.assert_array_equal(back.curves[k], v, err_msg=k)
    with pytest.raises(ValueError, match="curve_points"):
        counting_sweep(grid, task, "dot", steps=30, curve_points=7)


@pytest.mark.parametrize("sub", ["", "proposition"])
def test_committed_outputs_load_with_their_configuration(sub):
    out = os.path.join(COMMITTED, sub)
    if not os.path.exists(os.path.join(out, "counting.json")):
        pytest.skip(f"no committed {out}/counting.json")
    loaded, plain = CountingRuns.load(out), CountingRuns.from_csv(os.path.join(out, "runs.csv"))
    for k, v in plain.runs.items():
        np.testing.assert_array_equal(loaded.runs[k], v, err_msg=k)
    assert set(loaded.config) == set(loaded.names)
    for name in loaded.names:
        cfg, r = loaded.config[name], loaded.select(name)
        assert cfg["config"] == name and cfg["T"] == int(r["T"][0]) and cfg["L"] == int(r["L"][0])
        assert sorted(set(r["d"])) == sorted(cfg["ds"]) and sorted(set(r["p"])) == sorted(cfg["ps"])
