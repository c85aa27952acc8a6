"""Online training and evaluation of one induction model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from phasejax.tasks._common import F32, Array, train_online
from phasejax.tasks.induction.data import _check_int, _check_positive, sample_batch, soft_cross_entropy
from phasejax.tasks.induction.model import (
    InductionModel,
    batch_loss,
    induction_attention,
    induction_forward,
    init_induction_params,
    previous_token_attention,
)


def record_steps(steps: int, n_records: int) -> np.ndarray:
    """Ends of the (about) `n_records` geometric blocks `(end_{k-1}, end_k]` of `1..steps` the curves average over.

    `end_0 = 1` (the first step alone) and the last end is `steps`; blocks grow
    geometrically, so early training is resolved step by step and a curve
    looks even on a logarithmic step axis. Duplicates are dropped, so fewer
    than `n_records` ends may come back when `steps < n_records`-ish.
    """
    _check_int("steps", steps, 1)
    _check_int("n_records", n_records, 1)
    return np.unique(np.round(np.geomspace(1, steps, n_records)).astype(np.int64))


def _block_means(x: Array, ends: np.ndarray) -> Array:
    """Means of `x (steps, ...)` over the blocks `(ends[k-1], ends[k]]` (1-based steps; block 0 is `1..ends[0]`)."""
    c = jnp.concatenate([jnp.zeros((1,) + x.shape[1:], x.dtype), jnp.cumsum(x, 0)])
    starts = np.concatenate([[0], ends[:-1]])
    width = (ends - starts).astype(np.float32).reshape((-1,) + (1,) * (x.ndim - 1))
    return (c[ends] - c[starts]) / width


def train_induction(params0: dict, key: Array, S, beta, model: InductionModel, *, T: int, S_max: int, steps: int,
                    batch_size: int = 32, learning_rate: float = 1e-2, n_records: int = 60,
                    dtype=F32) -> tuple[dict, dict[str, Array]]:
    """Adam on fresh batches of in-context chains (one new batch per step; `lax.scan`). Pure; vmap over seeds.

    Returns `(params, curves)`: `curves["loss"] (R,)` the training loss and
    `curves["prev_token_attention"] (R, layers)` the per-layer mass on the
    previous token, both averaged over the `R` geometric blocks of steps
    ending at `record_steps(steps, n_records)`.
    """
    _check_int("steps", steps, 1)
    _check_int("batch_size", batch_size, 1)
    _check_positive("learning_rate", learning_rate)
    ends = record_steps(steps, n_records)
    params, (losses, prev) = train_online(lambda prm, tokens, P: batch_loss(prm, tokens, P, S, model), params0, key,
                                          lambda k: sample_batch(k, batch_size, S, beta, T, S_max, dtype),
                                          steps=steps, optimizer=optax.adam(learning_rate), has_aux=True)
    return params, dict(loss=_block_means(losses, ends), prev_token_attention=_block_means(prev, ends))


def evaluate_induction(params: dict, tokens: Array, P: Array, S, model: InductionModel) -> dict[str, Array]:
    """A model on evaluation chains `tokens (n, T)`, `P (n, S_max, S_max)`: losses and attention diagnostics.

    Returns `sequence_loss (n,)` (expected log loss of each chain, mean over
    positions), `position_loss (T,)` (mean over chains), per layer
    `prev_token_attention (layers,)`, `prev_token_profile (layers, T)` (the
    mass `A[t, t-1]` at each position, NaN at `t = 0`),
    `induction_attention (layers,)` and its uniform-attention value
    `induction_attention_chance`, and the patterns on chain 0,
    `example_attention (layers, T, T)`, `example_tokens (T,)`.
    """
    log_q, attn = jax.vmap(lambda x: induction_forward(params, x, S, model))(tokens)
    model_pos = jax.vmap(soft_cross_entropy)(log_q, tokens, P)                       # (n, T)
    T = tokens.shape[-1]
    ind = [jax.vmap(induction_attention)(a, tokens) for a in attn]
    return dict(
        sequence_loss=jnp.mean(model_pos, -1), position_loss=jnp.mean(model_pos, 0),
        prev_token_attention=jnp.stack([jnp.mean(jax.vmap(previous_token_attention)(a)) for a in attn]),
        prev_token_profile=jnp.stack([jnp.concatenate([jnp.full((1,), jnp.nan, a.dtype),
                                                       jnp.mean(a[:, jnp.arange(1, T), jnp.arange(T - 1)], 0)])
                                      for a in attn]),
        induction_attention=jnp.stack([jnp.mean(i[0]) for i in ind]),
        induction_attention_chance=jnp.stack([jnp.mean(i[1]) for i in ind]),
        example_attention=jnp.stack([a[0] for a in attn]), example_tokens=tokens[0])


def induction_run(seed, S, beta, eval_tokens: Array, eval_P: Array, *, model: InductionModel, T: int, S_max: int,
                  steps: int, batch_size: int = 32, learning_rate: float = 1e-2, init_scale: float = 0.02,
                  n_records: int = 60, dtype=F32) -> dict[str, Array]:
    """One run, pure in `seed`, `S`, `beta` and the evaluation chains (vmap over them): init, online Adam, evaluation.

    `eval_tokens (n, T)`, `eval_P (n, S_max, S_max)`: the chains it is scored
    on (`evaluation_chains`). Returns `evaluate_induction`'s outputs plus the
    training curves `curve_loss (R,)`, `curve_prev_token_attention (R, layers)`.
    """
    k_init, k_train = jax.random.split(jax.random.PRNGKey(seed))
    params0 = init_induction_params(k_init, model, S_max, T, init_scale=init_scale, dtype=dtype)
    params, curves = train_induction(params0, k_train, S, beta, model, T=T, S_max=S_max, steps=steps,
                                     batch_size=batch_size, learning_rate=learning_rate, n_records=n_records,
                                     dtype=dtype)
    out = evaluate_induction(params, eval_tokens, eval_P, S, model)
    out["curve_loss"] = curves["loss"]
    out["curve_prev_token_attention"] = curves["prev_token_attention"]
    return out
