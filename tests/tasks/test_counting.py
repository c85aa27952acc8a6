"""Counting: labels, explicit constructions, the paper's model and optimiser, the training path, the resumable
sweeps, the command's paper preset in miniature, and the committed results."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from phasejax.precision import float64_scope
from phasejax.sweep import RunOptions
from phasejax.tasks.histogram.counting import (
    COUNTING_CONFIGS,
    RUN_COLUMNS,
    CountingConfig,
    CountingGrid,
    CountingRuns,
    construction_accuracy,
    inventory_counting_params,
    relation_counting_params,
)
from phasejax.tasks.histogram.data import (
    IGNORE,
    HistogramTask,
    all_sequences,
    draw_parts,
    histogram_labels,
    majority_accuracy,
    masked_accuracy,
    masked_cross_entropy,
    model_inputs,
    parts_from_bits,
    parts_to_positions,
    sample_sequences,
    shuffle_parts,
)
from phasejax.tasks.histogram.model import counting_logits, init_counting_params, pad_params, reference_logits
from phasejax.tasks.histogram.sweep import SweepPlan, counting_phase_diagrams, counting_sweep, plan_groups
from phasejax.tasks.histogram.train import (
    CountingProtocol,
    batch_loss,
    group_trainer,
    init_group,
    run_keys,
    slot_batch,
    heldout_accuracy,
)


def test_histogram_labels_match_the_definition_and_bos_is_not_scored():
    # [B, A, A, D, E] -> [1, 2, 2, 1, 1]
    np.testing.assert_array_equal(histogram_labels(jnp.array([[1, 0, 0, 3, 4]])), [[1, 2, 2, 1, 1]])
    task = HistogramTask(T=5, L=7, bos=True, law="uniform")
    toks = np.asarray(sample_sequences(jax.random.PRNGKey(0), task, 200))
    brute = np.array([[np.sum(row == v) for v in row] for row in toks])
    np.testing.assert_array_equal(histogram_labels(jnp.asarray(toks)), brute)
    mt, lab = model_inputs(jnp.asarray(toks), task)
    assert mt.shape == lab.shape == (200, 8)
    np.testing.assert_array_equal(mt[:, 0], 5)            # BOS id T, first
    np.testing.assert_array_equal(lab[:, 0], IGNORE)      # not scored
    np.testing.assert_array_equal(lab[:, 1:], brute)
    logits = jax.nn.one_hot(jnp.array([[0, 2, 1]]), 4)
    assert float(masked_accuracy(logits, jnp.array([[IGNORE, 2, 3]]))) == 0.5


def test_all_sequences_is_exhaustive():
    seqs = all_sequences(HistogramTask(T=3, L=4, law="uniform"))
    assert seqs.shape == (81, 4) and len({tuple(s) for s in seqs}) == 81
    with pytest.raises(ValueError, match="max_count"):
        all_sequences(HistogramTask(T=32, L=10))


@pytest.mark.parametrize("T,L,d", [(4, 4, None), (3, 3, 7)])
def test_explicit_constructions_are_exact_on_every_sequence(T, L, d):
    task = HistogramTask(T, L)
    seqs = all_sequences(task)
    acc = lambda params, name: float(construction_accuracy(params, task, COUNTING_CONFIGS[name], seqs))  # noqa
    assert acc(relation_counting_params(HistogramTask(T, L, bos=True), d), "dot+BOS+softmax") == 1.0
    assert acc(inventory_counting_params(task, d), "linear") == 1.0
    assert acc(inventory_counting_params(task, d, softmax=True), "linear+softmax") == 1.0


@pytest.mark.parametrize("law", ["composition", "uniform"])
def test_explicit_constructions_are_exact_at_the_papers_size(law):
    task = HistogramTask(32, 10, law=law)
    seqs = sample_sequences(jax.random.PRNGKey(1), task, 20_000)
    rel = relation_counting_params(HistogramTask(32, 10, bos=True))
    assert rel["W1"].shape == (32, 1)                           # d = T, p = 1
    assert float(construction_accuracy(rel, task, COUNTING_CONFIGS["dot+BOS+softmax"], seqs)) == 1.0
    inv = inventory_counting_params(task)
    assert inv["W1"].shape == (32, 32)                          # d = T, p = T
    assert float(construction_accuracy(inv, task, COUNTING_CONFIGS["linear"], seqs)) == 1.0
    with pytest.raises(ValueError, match="d >= T"):
        relation_counting_params(HistogramTask(32, 10, bos=True), d=16)


def test_construction_accuracy_in_float64_equals_float32():
    task = HistogramTask(4, 4)
    seqs = all_sequences(task)
    cfg = COUNTING_CONFIGS["linear"]
    acc32 = construction_accuracy(inventory_counting_params(task), task, cfg, seqs)
    with float64_scope():
        params = inventory_counting_params(task, dtype=jnp.float64)
        assert params["W1"].dtype == jnp.float64
        acc64 = construction_accuracy(params, task, cfg, seqs)
    assert float(acc32) == float(acc64) == 1.0


def test_six_configurations_and_case_insensitive_names():
    assert list(COUNTING_CONFIGS) == ["linear", "linear+softmax", "dot", "dot+softmax", "dot+BOS", "dot+BOS+softmax"]
    for spelling in ("DOT+bos+Softmax", "dot_BOS_softmax", " dot+bos+softmax "):
        assert COUNTING_CONFIGS[spelling] == COUNTING_CONFIGS["dot+BOS+softmax"]
    with pytest.raises(ValueError, match="unknown configuration 'mlp'"):
        CountingConfig.from_name("mlp")
    with pytest.raises(KeyError):
        COUNTING_CONFIGS["mlp"]


def test_paper_initialisation_is_pytorchs_default():
    """Uniform weights and biases in +-1/sqrt(fan-in) (variance 1/(3 fan-in)), a standard normal embedding."""
    P = init_counting_params(jax.random.PRNGKey(0), 33, 11, 11, "dot", 64, 48)
    for name, fan_in in (("WQ", 64), ("WK", 64), ("W1", 64), ("b1", 64), ("W2", 48), ("b2", 48)):
        w = np.asarray(P[name])
        assert np.abs(w).max() <= 1 / np.sqrt(fan_in)
        assert np.var(w) == pytest.approx(1 / (3 * fan_in), rel=0.5 if w.size < 100 else 0.1), name
    assert np.std(np.asarray(P["E"])) == pytest.approx(1.0, rel=0.05)
    A = np.asarray(init_counting_params(jax.random.PRNGKey(0), 32, 10, 11, "linear", 4, 4)["A"])
    assert A.shape == (10, 10) and np.abs(A).max() <= 1 / np.sqrt(10)
    normal = init_counting_params(jax.random.PRNGKey(0), 32, 10, 11, "dot", 64, 48, init="normal")
    assert float(jnp.max(jnp.abs(normal["b1"]))) == 0.0
    assert np.var(np.asarray(normal["WQ"])) == pytest.approx(1 / 64, rel=0.1)


def test_adam_is_pytorchs_rule_with_the_papers_settings():
    """optax's Adam with betas (0.9, 0.98), eps 1e-9 against the update PyTorch documents, in float64 numpy:
    bias-corrected moments, eps added to the square root of the second."""
    protocol = CountingProtocol()
    opt = protocol.optimizer()
    rng = np.random.default_rng(0)
    w = rng.normal(size=5)
    grads = rng.normal(size=(6, 5))
    state = opt.init(jnp.asarray(w, jnp.float32))
    params = jnp.asarray(w, jnp.float32)
    m = v = np.zeros(5)
    for t, g in enumerate(grads, 1):
        updates, state = opt.update(jnp.asarray(g, jnp.float32), state, params)
        params = optax.apply_updates(params, updates)
        m = 0.9 * m + 0.1 * g
        v = 0.98 * v + 0.02 * g**2
        w = w - 1e-3 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.98**t)) + 1e-9)
    np.testing.assert_allclose(np.asarray(params), w, rtol=1e-6, atol=1e-7)


def test_protocol_defaults_are_the_papers_epochs():
    p = CountingProtocol()
    assert (p.epochs, p.epoch_size, p.batch_size, p.n_test) == (500, 10_000, 32, 3000)
    assert (p.steps_per_epoch, p.last_batch, p.steps) == (313, 16, 156_500)
    with pytest.raises(ValueError, match="b2"):
        CountingProtocol(b2=1.0)
    with pytest.raises(ValueError, match="init"):
        CountingProtocol(init="xavier")


@pytest.mark.parametrize("mixing,softmax,d,p", [("dot", True, 6, 3), ("dot", False, 3, 6), ("linear", True, 6, 3),
                                                ("linear", False, 3, 6)])
def test_vocabulary_form_of_the_model_is_the_literal_forward_pass(mixing, softmax, d, p):
    task = HistogramTask(9, 6, bos=True)
    P = init_counting_params(jax.random.PRNGKey(2), task.vocab, task.length, task.n_classes, mixing, d, p)
    tokens, _ = model_inputs(sample_sequences(jax.random.PRNGKey(3), task, 50), task)
    np.testing.assert_allclose(counting_logits(P, tokens, softmax), reference_logits(P, tokens, softmax),
                               rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("law", ["composition", "uniform"])
@pytest.mark.parametrize("name", ["dot+BOS+softmax", "dot", "linear+softmax"])
def test_slot_batches_give_the_loss_and_accuracy_over_positions(law, name):
    """The training path (slots: a part per slot for dot-product mixing, weighted by its size; a position per
    slot for linear mixing) against the literal model on the same sequences position by position, also with
    the parameters zero-padded to larger shapes (exact padding)."""
    cfg = COUNTING_CONFIGS[name]
    task = HistogramTask(16, 8, cfg.bos, law)
    d, p, n = 5, 4, 64
    P = init_counting_params(jax.random.PRNGKey(1), task.vocab, task.length, task.n_classes, cfg.mixing, d, p)
    key = jax.random.PRNGKey(7)
    batch = slot_batch(key, task, n, cfg.mixing)
    if law == "composition":
        # the same sequences from their words: slot_batch draws 2 L words for the parts, then L for the order
        # (linear mixing); any order will do for dot-product mixing
        bits = jax.random.bits(key, ((3 if cfg.mixing == "linear" else 2) * task.L, n), jnp.uint32)
        sizes, tokens = parts_from_bits(bits[:2 * task.L], task.T)
        order = bits[2 * task.L:] if cfg.mixing == "linear" else jax.random.bits(jax.random.PRNGKey(99),
                                                                                 (task.L, n), jnp.uint32)
        tok, lab = shuffle_parts(order, sizes, tokens)
    else:
        tok = (jax.random.bits(key, (task.L, n), jnp.uint32) % task.T).astype(jnp.int32)
        lab = histogram_labels(tok.T).T
    mt, ml = model_inputs(tok.T, task, lab.T)
    logits = reference_logits(P, mt, cfg.softmax)
    loss = float(masked_cross_entropy(logits, ml))
    assert float(batch_loss(P, batch, cfg.softmax, d)) == pytest.approx(loss, rel=2e-6, abs=2e-6)
    assert float(batch_loss(pad_params(P, d + 3, p + 5), batch, cfg.softmax, d)) == pytest.approx(loss, rel=2e-6)
    assert float(heldout_accuracy(P, batch, cfg.softmax, d, block=24)) == pytest.approx(
        float(masked_accuracy(logits, ml)), abs=1e-6)
    grad = jax.grad(batch_loss)(pad_params(P, d + 3, p + 5), batch, cfg.softmax, d)
    assert float(jnp.max(jnp.abs(grad["W1"][d:]))) == 0.0 and float(jnp.max(jnp.abs(grad["W2"][p:]))) == 0.0
    assert float(jnp.max(jnp.abs(grad["E"][:, d:]))) == 0.0


def test_every_configuration_is_scored_on_the_same_heldout_sequences():
    from phasejax.tasks.histogram.train import heldout_set

    protocol = CountingProtocol(n_test=200)
    for law in ("composition", "uniform"):
        task = HistogramTask(32, 10, law=law)
        dot, lin = heldout_set(task, protocol, "dot"), heldout_set(task, protocol, "linear")
        for b in range(200):           # the dot batch holds parts (token, size), the linear one positions
            parts = sorted((int(t), int(w)) for t, w in zip(dot["tokens"][:, b], dot["weights"][:, b]) if w > 0)
            seq = lin["tokens"][:, b].tolist()
            assert parts == sorted((t, seq.count(t)) for t in set(seq)) if law == "composition" \
                else dot["tokens"][:, b].tolist() == seq


def test_dot_product_loss_does_not_depend_on_the_order_of_positions():
    """Why a part can stand for its positions: the literal model's loss on a sequence and on its shuffle."""
    task = HistogramTask(12, 7, bos=True)
    sizes, tokens = draw_parts(jax.random.PRNGKey(4), 12, 7, 40)
    P = init_counting_params(jax.random.PRNGKey(1), task.vocab, task.length, task.n_classes, "dot", 6, 5)
    losses = []
    for k in (1, 2):
        tok, lab = parts_to_positions(jax.random.PRNGKey(k), sizes, tokens)
        mt, ml = model_inputs(tok.T, task, lab.T)
        losses.append(float(masked_cross_entropy(reference_logits(P, mt, True), ml)))
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)


def _train(task, cfg, cells, seeds, width, hidden, protocol, epochs):
    fn = group_trainer(task, cfg.mixing, cfg.softmax, protocol)
    params = init_group(task, cfg.mixing, cells, seeds, width, hidden, protocol.init)
    state = jax.vmap(protocol.optimizer().init)(params)
    keys = jnp.stack([run_keys(s)[1] for s in seeds])
    ds = jnp.asarray([c[0] for c in cells], jnp.float32)
    out = []
    for e in epochs:
        params, state, o = fn(params, state, keys, ds, jnp.asarray(e))
        out.append(o)
    return params, {k: np.concatenate([np.asarray(o[k]) for o in out], 1) for k in out[0]}


def test_training_in_segments_is_training_in_one_go_and_learns():
    """Epochs 0-1 then 2-3 against 0-3 at once (the data of an epoch come from its index); and dot+BOS+softmax
    at T = 6, L = 4 learns: its held-out accuracy rises above the majority class's (0.5; 0.62 and 0.65 here)."""
    task, cfg = HistogramTask(6, 4, bos=True), COUNTING_CONFIGS["dot+BOS+softmax"]
    protocol = CountingProtocol(epochs=4, epoch_size=2000, batch_size=32, n_test=300, learning_rate=1e-2)
    cells, seeds = [(8, 8), (8, 8)], [0, 1]
    one, a = _train(task, cfg, cells, seeds, 8, 8, protocol, [np.arange(4)])
    two, b = _train(task, cfg, cells, seeds, 8, 8, protocol, [np.arange(2), np.arange(2, 4)])
    for k in one:
        np.testing.assert_allclose(one[k], two[k], rtol=2e-5, atol=2e-6, err_msg=k)
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=2e-5)
    np.testing.assert_allclose(a["accuracy"], b["accuracy"], atol=1e-6)
    assert a["loss"][:, -1].max() < a["loss"][:, 0].min()
    assert a["accuracy"][:, -1].min() > majority_accuracy(task) + 0.08


def test_groups_cover_the_grid_once():
    grid = CountingGrid(ds=(2, 4, 8), ps=(1, 3), seeds=(0, 1))
    for grouping, count in (("cell", 6), ("d", 3), ("all", 1)):
        groups = plan_groups(grid, grouping)
        assert len(groups) == count
        rows = np.sort(np.concatenate([g["runs"] for g in groups]))
        np.testing.assert_array_equal(rows, np.arange(12))
        t = grid.tasks()
        for g in groups:
            assert g["width"] == t["d"][g["runs"]].max() and g["hidden"] == t["p"][g["runs"]].max()
    assert len(plan_groups(grid, "all", max_runs=5)) == 3


SMALL = dict(grid=CountingGrid(ds=(2, 5), ps=(1, 3), seeds=(0, 1)), task=HistogramTask(8, 5),
             protocol=CountingProtocol(epochs=3, epoch_size=96, n_test=60))


@pytest.fixture(scope="module")
def small_sweeps(tmp_path_factory):
    """One configuration's grid under every grouping, the last one cut short and resumed."""
    out = {}
    for grouping in ("cell", "all"):
        out[grouping] = counting_sweep(SMALL["grid"], SMALL["task"], "dot+BOS+softmax", SMALL["protocol"],
                                       SweepPlan(grouping=grouping))
    run_dir = tmp_path_factory.mktemp("counting_d")
    opts = RunOptions(run_dir=str(run_dir), progress=False)
    plan = SweepPlan(grouping="d", segment_epochs=2)
    sweep = lambda o: counting_sweep(SMALL["grid"], SMALL["task"], "dot+BOS+softmax", SMALL["protocol"], plan,  # noqa
                                     options=o)
    out["cut"] = sweep(opts.replace(max_chunks=1))
    out["d"] = sweep(opts)
    out["again"] = sweep(opts.replace(max_chunks=0))
    out["run_dir"] = run_dir
    return out


def test_groupings_and_resumption_give_the_same_runs(small_sweeps):
    assert small_sweeps["cut"] is None                      # one segment of one group, then stopped
    ref = small_sweeps["cell"]
    for other in ("all", "d", "again"):
        r = small_sweeps[other]
        np.testing.assert_allclose(r.runs["final_loss"], ref.runs["final_loss"], rtol=2e-5, err_msg=other)
        np.testing.assert_allclose(r.runs["accuracy"], ref.runs["accuracy"], atol=1 / 300, err_msg=other)
        np.testing.assert_allclose(r.curves["loss"], ref.curves["loss"], rtol=2e-5, err_msg=other)
    r = ref.runs
    assert list(r) == list(RUN_COLUMNS) and set(r["data"]) == {"composition"}
    assert set(r["steps"]) == {9} and set(r["batch_size"]) == {32}
    assert np.all(r["best_accuracy"] >= r["accuracy"])
    c = ref.curves
    np.testing.assert_array_equal(np.sort(np.unique(c["epoch"])), [1, 2, 3])
    last = c["epoch"] == 3
    np.testing.assert_allclose(c["loss"][last], r["final_loss"])
    np.testing.assert_allclose(c["accuracy"][last], r["accuracy"])


def test_a_damaged_chunk_is_set_aside_and_recomputed(small_sweeps, tmp_path):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(small_sweeps["run_dir"], run_dir)
    chunk = run_dir / "chunks" / "group_0000.npz"
    chunk.write_bytes(chunk.read_bytes()[:200])
    lines = []
    r = counting_sweep(SMALL["grid"], SMALL["task"], "dot+BOS+softmax", SMALL["protocol"],
                       SweepPlan(grouping="d", segment_epochs=2), options=RunOptions(run_dir=str(run_dir)),
                       log=lines.append)
    assert any("rejected" in line for line in lines)
    np.testing.assert_allclose(r.runs["final_loss"], small_sweeps["d"].runs["final_loss"], rtol=2e-5)
    with pytest.raises(ValueError, match="another run"):
        counting_sweep(SMALL["grid"], SMALL["task"], "dot+BOS+softmax", SMALL["protocol"].replace(epochs=2),
                       SweepPlan(grouping="d"), options=RunOptions(run_dir=str(run_dir)))


def test_results_round_trip(small_sweeps, tmp_path):
    r = small_sweeps["cell"]
    r.write(str(tmp_path))
    back = CountingRuns.load(str(tmp_path))
    for k, v in r.runs.items():
        np.testing.assert_array_equal(back.runs[k], v, err_msg=k)
    np.testing.assert_allclose(back.curves["loss"], r.curves["loss"])
    assert back.config == r.config


def test_bad_sweep_inputs():
    with pytest.raises(ValueError, match="grouping"):
        SweepPlan(grouping="shape")
    with pytest.raises(ValueError, match="segment_epochs"):
        SweepPlan(segment_epochs=0)
    with pytest.raises(ValueError, match="ds"):
        CountingGrid(ds=(0, 2))
    with pytest.raises(ValueError, match="protocol"):
        counting_sweep(CountingGrid(ds=(2,), ps=(2,), seeds=(0,)), HistogramTask(4, 3), "dot", protocol=None)
    with pytest.raises(ValueError, match="repeat"):
        counting_phase_diagrams(CountingGrid(ds=(2,), ps=(2,), seeds=(0,)), HistogramTask(4, 3), ["dot", "DOT"])


def test_the_paper_preset_runs_in_miniature_and_resumes(tmp_path):
    """`phasejax counting --preset paper` with its grouping and chunking, shrunk: two configurations, a 2 x 2
    grid, 2 epochs of 64 sequences; then again into the same run folder (every chunk read back)."""
    from phasejax.cli import main

    out = tmp_path / "out"
    argv = ["counting", "--preset", "paper", "--configs", "dot+BOS+softmax", "linear", "--ds", "1", "3",
            "--widths", "1", "2", "--seeds", "2", "--epochs", "2", "--epoch-size", "64", "--n-test", "40",
            "--T", "6", "--L", "4", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    runs = CountingRuns.load(str(out))
    assert len(runs.runs["d"]) == 2 * 2 * 2 * 2 and runs.names == ["dot+BOS+softmax", "linear"]
    assert set(runs.runs["steps"]) == {4}
    import json

    summary = json.loads((out / "summary.json").read_text())
    assert summary["protocol"]["b2"] == 0.98 and summary["protocol"]["eps"] == 1e-9
    assert summary["grouping"] == "all" and summary["majority_accuracy"] == pytest.approx(0.5)
    assert summary["command"] and summary["versions"]["jax"] == jax.__version__
    for name in ("maps_best.png", "maps_mean.png", "loss_curves.png", "constructions.csv"):
        assert (out / name).exists(), name
    assert main(argv + ["--overwrite"]) == 0
    again = CountingRuns.load(str(out))
    np.testing.assert_array_equal(again.runs["final_loss"], runs.runs["final_loss"])


COMMITTED = os.path.join(os.path.dirname(__file__), "..", "..", "results", "counting")


@pytest.mark.parametrize("sub", ["", "proposition"])
def test_committed_outputs_are_the_papers_law_and_protocol(sub):
    out = os.path.join(COMMITTED, sub)
    if not os.path.exists(os.path.join(out, "counting.json")):
        pytest.skip(f"no committed {out}/counting.json")
    loaded = CountingRuns.load(out)
    r = loaded.runs
    assert set(r["data"]) == {"composition"} and set(r["batch_size"]) == {32}
    assert sorted(loaded.names) == sorted(COUNTING_CONFIGS)
    for name in loaded.names:
        cfg, sel = loaded.config[name], loaded.select(name)
        assert cfg["config"] == name and cfg["protocol"]["b2"] == 0.98 and cfg["protocol"]["epoch_size"] == 10_000
        assert sorted(set(sel["d"])) == sorted(cfg["ds"]) and sorted(set(sel["p"])) == sorted(cfg["ps"])
        assert len(sel["d"]) == len(cfg["ds"]) * len(cfg["ps"]) * len(cfg["seeds"])
    assert np.all(r["best_accuracy"] >= r["accuracy"] - 1e-12)
    c = loaded.curves
    for name in loaded.names:       # the last epoch of every curve is the run's final loss
        sel = (c["config"] == name) & (c["epoch"] == c["epoch"].max())
        np.testing.assert_allclose(np.sort(c["loss"][sel]), np.sort(loaded.select(name)["final_loss"]), rtol=1e-6)
