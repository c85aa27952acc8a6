"""Part A of the histogram task: the masked transformer, lifting the mask, attention diagnostics."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from phasejax.tasks.histogram.data import HistogramTask, sample_batch
from phasejax.tasks.histogram.two_solutions import (
    attention_kind,
    attention_mask,
    lift_mask,
    make_transformer,
    train_transformer,
    transformer_accuracy,
)

TASK = HistogramTask(T=6, L=5, law="uniform")


def test_masked_attention_sees_only_its_half_and_training_keeps_the_mask():
    graphdef, params, frozen = make_transformer(jax.random.PRNGKey(0), TASK, 8, 16, "positional")
    tokens, _ = sample_batch(jax.random.PRNGKey(1), TASK, 50)
    model = nnx.merge(graphdef, params, frozen)
    attn = model.attention(tokens)
    # positional-only attention cannot depend on the tokens
    np.testing.assert_allclose(attn, jnp.broadcast_to(attn[0], attn.shape), atol=1e-6)
    trained, losses = jax.jit(lambda p: train_transformer(graphdef, p, frozen, jax.random.PRNGKey(2), TASK, steps=30,
                                                          batch_size=32, optimizer=optax.adam(1e-3)))(params)
    assert np.all(np.isfinite(losses))
    # rows of W_Q acting on the hidden (token) half never receive a gradient
    np.testing.assert_array_equal(trained["query"]["kernel"][...][:4], params["query"]["kernel"][...][:4])
    assert 0.0 <= float(transformer_accuracy(graphdef, trained, frozen, jax.random.PRNGKey(3), TASK, 256)) <= 1.0


def test_lifting_the_mask_keeps_the_function():
    graphdef, params, frozen = make_transformer(jax.random.PRNGKey(0), TASK, 8, 16, "semantic")
    lifted, open_mask = lift_mask(params, frozen)
    np.testing.assert_array_equal(open_mask["mask"][...], 1.0)
    tokens, _ = sample_batch(jax.random.PRNGKey(1), TASK, 20)
    np.testing.assert_allclose(nnx.merge(graphdef, lifted, open_mask)(tokens),
                               nnx.merge(graphdef, params, frozen)(tokens), atol=1e-6)


def test_attention_kind_on_ideal_patterns():
    tokens = jnp.array([[0, 1, 1, 2], [3, 3, 3, 0]])
    same = (tokens[:, :, None] == tokens[:, None, :]).astype(jnp.float32)
    semantic = same / same.sum(-1, keepdims=True)
    k = attention_kind(semantic, tokens)
    assert float(k["same_token_mass"]) == pytest.approx(1.0)
    uniform = jnp.full((2, 4, 4), 0.25)
    k = attention_kind(uniform, tokens)
    assert float(k["input_dependence"]) == pytest.approx(0.0)
    assert float(k["same_token_mass"]) == pytest.approx(float(k["chance"]))


def test_bad_masks():
    with pytest.raises(ValueError, match="mask"):
        attention_mask("both", 8)
    with pytest.raises(ValueError, match="even"):
        attention_mask("full", 7)


@pytest.mark.slow       # two compilations of the two-phase training
def test_two_solutions_sweep_equals_its_run_and_round_trips(tmp_path):
    from phasejax.sweep import RunOptions
    from phasejax.tasks.histogram.two_solutions import TwoSolutions, TwoSolutionsConfig, two_solutions, two_solutions_run

    config = TwoSolutionsConfig(task=TASK, d=8, p=8, steps=4, sgd_steps=3, batch_size=8, n_test=32, n_probe=16,
                                n_show=2)
    result = two_solutions(config, seeds=(3,), solutions="positional", options=RunOptions(progress=False))
    one = jax.jit(lambda: two_solutions_run(1, 3, config=config))()
    for key in ("accuracy_masked", "accuracy_after", "weight_move_sgd", "input_dependence_before"):
        # input_dependence_before is ~1e-7 here (positional-only attention): compare it at float32 resolution
        np.testing.assert_allclose(result.runs[key][0], one[key], rtol=1e-5, atol=1e-8, err_msg=key)
    # positional-only attention cannot depend on the tokens: the same pattern for every probe sequence
    before = result.attention["positional", "before"][0]
    np.testing.assert_allclose(before, np.broadcast_to(before[0], before.shape), atol=1e-6)
    assert float(result.runs["input_dependence_before"][0]) < 1e-5
    result.write(str(tmp_path))
    loaded = TwoSolutions.load(str(tmp_path))
    for k, v in result.runs.items():
        np.testing.assert_array_equal(loaded.runs[k], v, err_msg=k)
    for k, v in result.attention.items():
        np.testing.assert_array_equal(loaded.attention[k], v)
    np.testing.assert_array_equal(loaded.tokens, result.tokens)
    assert loaded.config == result.config


def test_bad_two_solution_inputs():
    from phasejax.tasks.histogram.two_solutions import TwoSolutionsConfig, two_solutions

    with pytest.raises(ValueError, match="seeds"):
        two_solutions(TwoSolutionsConfig(), seeds=())
    with pytest.raises(ValueError, match="d must be even"):
        TwoSolutionsConfig(d=7)
    with pytest.raises(ValueError, match="solutions"):
        two_solutions(TwoSolutionsConfig(), seeds=(0,), solutions=("full",))
