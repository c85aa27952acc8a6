"""Part A of the histogram task: one transformer, two solutions (positional vs semantic attention).

`HistogramTransformer` (`flax.nnx`): the input of position `i` is
`x_i = [E_tok[t_i], E_pos[i]]`, a token half and a positional half of `d / 2`
entries each (so "semantic half" and "positional half" are well defined);
one dot-product attention layer whose queries and keys read `x * mask`
(values read all of `x`), residual, layer norm, a ReLU MLP of width `p` and
per-position logits over the counts `0..L`. The mask is a frozen
`nnx.Variable`: `"semantic"` lets the attention pattern see only the tokens,
`"positional"` only the positions, `"full"` both.

`train_transformers(keys, ...)` trains one model per key (vmapped over seeds)
with Adam (fresh batches) or SGD; `attention_kind` measures how positional or
semantic an attention pattern is.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from phasejax.tasks.histogram import (
    HistogramTask,
    masked_accuracy,
    masked_cross_entropy,
    sample_batch,
    train_online,
)

Array = jax.Array
MASKS = ("semantic", "positional", "full")


def attention_mask(kind: str, d: int) -> Array:
    """`(d,)` 0/1 mask of the attention's query/key input: token half, positional half or all."""
    if kind not in MASKS:
        raise ValueError(f"mask must be one of {MASKS}, got {kind!r}")
    if d % 2:
        raise ValueError(f"d must be even (two halves), got d={d}")
    half = jnp.arange(d) < d // 2
    return {"semantic": half, "positional": ~half, "full": jnp.ones(d, bool)}[kind].astype(jnp.float32)


class FrozenMask(nnx.Variable):
    """A non-trainable variable (not an `nnx.Param`, so optimisers never see it)."""


class HistogramTransformer(nnx.Module):
    """One-layer transformer for the histogram task (see the module docstring). Inputs `(..., L)` int tokens."""

    def __init__(self, task: HistogramTask, d: int = 64, p: int = 128, mask: str = "full", *, rngs: nnx.Rngs):
        if d % 2:
            raise ValueError(f"d must be even, got d={d}")
        half = d // 2
        init = nnx.initializers.normal(1.0)
        self.tok = nnx.Embed(task.vocab, half, embedding_init=init, rngs=rngs)
        self.pos = nnx.Embed(task.length, half, embedding_init=init, rngs=rngs)
        self.query = nnx.Linear(d, d, use_bias=False, rngs=rngs)
        self.key = nnx.Linear(d, d, use_bias=False, rngs=rngs)
        self.value = nnx.Linear(d, d, use_bias=False, rngs=rngs)
        self.norm = nnx.LayerNorm(d, rngs=rngs)
        self.hidden = nnx.Linear(d, p, rngs=rngs)
        self.out = nnx.Linear(p, task.n_classes, rngs=rngs)
        self.mask = FrozenMask(attention_mask(mask, d))
        self.d = d

    def embed(self, tokens: Array) -> Array:
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[-1]), tokens.shape)
        return jnp.concatenate([self.tok(tokens), self.pos(positions)], axis=-1)

    def attention(self, tokens: Array) -> Array:
        """Attention matrices `(..., L, L)` (row softmax, stable)."""
        xm = self.embed(tokens) * self.mask[...]
        scores = self.query(xm) @ jnp.swapaxes(self.key(xm), -1, -2) / jnp.sqrt(self.d)
        return jax.nn.softmax(scores, axis=-1)

    def __call__(self, tokens: Array) -> Array:
        x = self.embed(tokens)
        h = self.norm(x + self.attention(tokens) @ self.value(x))
        return self.out(jax.nn.relu(self.hidden(h)))


def make_transformer(key: Array, task: HistogramTask, d: int, p: int, mask: str):
    """`(graphdef, params, frozen)` of a fresh `HistogramTransformer` (split for pure training)."""
    return nnx.split(HistogramTransformer(task, d, p, mask, rngs=nnx.Rngs(key)), nnx.Param, ...)


def train_transformer(graphdef, params, frozen, key: Array, task: HistogramTask, *, steps: int, batch_size: int,
                      optimizer: optax.GradientTransformation) -> tuple[object, Array]:
    """Train on fresh batches (one per step); returns `(params, losses (steps,))`. Pure; vmap over seeds."""
    return train_online(lambda prm, tokens, labels: masked_cross_entropy(nnx.merge(graphdef, prm, frozen)(tokens),
                                                                        labels),
                        params, key, lambda k: sample_batch(k, task, batch_size), steps=steps, optimizer=optimizer)


def transformer_accuracy(graphdef, params, frozen, key: Array, task: HistogramTask, n_test: int = 4096) -> Array:
    tokens, labels = sample_batch(key, task, n_test)
    return masked_accuracy(nnx.merge(graphdef, params, frozen)(tokens), labels)


def attention_kind(attn: Array, tokens: Array) -> dict[str, Array]:
    """How semantic and how positional attention matrices `attn (n, L, L)` on `tokens (n, L)` are.

    * `same_token_mass`: mean over positions of the attention on positions
      holding the same token (itself included); `chance` is its value for
      uniform attention (mean count / L).
    * `input_dependence`: mean over `(i, j)` of the standard deviation of
      `attn[:, i, j]` across sequences, divided by the mean entry `1/L`
      (0 for an input-independent, purely positional pattern).
    """
    same = (tokens[:, :, None] == tokens[:, None, :]).astype(attn.dtype)
    L = attn.shape[-1]
    return dict(same_token_mass=jnp.mean(jnp.sum(attn * same, -1)), chance=jnp.mean(jnp.sum(same, -1)) / L,
                input_dependence=jnp.mean(jnp.std(attn, axis=0)) * L)


def perturb(params, key: Array, scale: float):
    """Add iid `N(0, scale^2)` noise to every parameter."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(key, len(leaves))
    return jax.tree_util.tree_unflatten(
        treedef, [x + scale * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)])


def relative_distance(a, b) -> Array:
    """`||a - b|| / ||b||` over whole parameter pytrees."""
    diff = jax.tree_util.tree_map(lambda x, y: x - y, a, b)
    return optax.tree_utils.tree_norm(diff) / optax.tree_utils.tree_norm(b)


def lift_mask(params, frozen):
    """Unmask the attention without changing the function: zero the query/key rows the mask hid, mask -> 1.

    Rows of `W_Q`, `W_K` acting on masked-out inputs never received a gradient
    (their input was 0) and still hold their random init; zeroing them makes
    the unmasked model compute exactly what the masked one did.
    """
    mask = frozen["mask"][...]
    params = jax.tree_util.tree_map(lambda x: x, params)   # copy the structure
    for name in ("query", "key"):
        params[name]["kernel"] = params[name]["kernel"].replace(params[name]["kernel"][...] * mask[:, None])
    frozen = jax.tree_util.tree_map(jnp.ones_like, frozen)
    return params, frozen
