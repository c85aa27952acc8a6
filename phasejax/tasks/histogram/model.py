"""The counting model of Behrens, Biggio & Zdeborova (2024): pure functions on a parameter dict.

Token embeddings only (no positional embedding anywhere), `x_i = E[t_i]` of
size `d`; token mixing `a` either by dot-product attention
`a_ij = <x_i W_Q, x_j W_K> / sqrt(d)` or by a learned position-only matrix
`a_ij = A_ij` ("linear"), with or without a row softmax; residual
`h = x + a x`; then `Linear(d, p)`, ReLU, `Linear(p, L + 1)` (logits over the
counts `0..L`). An optional BOS token (id `T`) is prepended.

`counting_logits` computes this function through the vocabulary: the
`V x V` score table `G = (E W_Q)(E W_K)^T / sqrt(d)` is read at the token
pairs, and the first layer's `(E W_1)[t] + a (E W_1)[t]` replaces
`(x + a x) W_1` when `p <= d` (both identities of linear maps: the same
function, with fewer operations for `V < n L`). `reference_logits` is the
literal forward pass, for tests.

Initial parameters (`INITS`): `"paper"` is PyTorch's default of the paper's
code (`E ~ N(0, 1)`; every weight and bias `~ U(-1/sqrt(f), 1/sqrt(f))` with
`f` the layer's fan-in: `d` for `W_Q, W_K, W_1, b_1`, `p` for `W_2, b_2`,
the sequence length for `A`); `"normal"` is phasejax's earlier choice
(`W ~ N(0, 1/f)`, zero biases).

Zero padding is exact: parameters padded with zeros to larger `(d, p)` give
the same logits, zero gradients on the padding (ReLU's derivative at 0 is 0),
so Adam never moves it; only the score scale `1/sqrt(d)` must be the run's
own `d` (the `d` argument).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.tasks._common import Array

__all__ = ["INITS", "init_counting_params", "counting_logits", "reference_logits", "pad_params", "slot_logits"]

INITS = ("paper", "normal")
"""Initialisations of `init_counting_params` (see the module docstring)."""


def init_counting_params(key: Array, vocab: int, length: int, n_classes: int, mixing: str, d: int, p: int,
                         init: str = "paper") -> dict:
    """Initial parameters at the exact shapes, float32: `E (vocab, d)`, `WQ, WK (d, d)` (dot) or
    `A (length, length)` (linear), `W1 (d, p)`, `b1 (p,)`, `W2 (p, n_classes)`, `b2 (n_classes,)`."""
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got init={init!r}")
    kE, kQ, kK, kA, k1, kb1, k2, kb2 = jax.random.split(key, 8)
    f32 = jnp.float32

    def weight(k, shape, fan_in):
        if init == "paper":
            return jax.random.uniform(k, shape, f32, -1.0, 1.0) / np.sqrt(fan_in)
        return jax.random.normal(k, shape, f32) / np.sqrt(fan_in)

    def bias(k, shape, fan_in):
        return weight(k, shape, fan_in) if init == "paper" else jnp.zeros(shape, f32)

    params = dict(E=jax.random.normal(kE, (vocab, d), f32), W1=weight(k1, (d, p), d), b1=bias(kb1, (p,), d),
                  W2=weight(k2, (p, n_classes), p), b2=bias(kb2, (n_classes,), p))
    if mixing == "dot":
        params["WQ"] = weight(kQ, (d, d), d)
        params["WK"] = weight(kK, (d, d), d)
    else:
        params["A"] = weight(kA, (length, length), length)
    return params


def pad_params(params: dict, d: int, p: int) -> dict:
    """`params` padded with zeros to embedding size `d` and hidden size `p` (the same model: see the module
    docstring)."""
    def pad(x, widths):
        return jnp.pad(x, [(0, w - s) for s, w in zip(x.shape, widths)])

    V, C = params["E"].shape[0], params["b2"].shape[0]
    out = dict(params, E=pad(params["E"], (V, d)), W1=pad(params["W1"], (d, p)), b1=pad(params["b1"], (p,)),
               W2=pad(params["W2"], (p, C)))
    for k in ("WQ", "WK"):
        if k in params:
            out[k] = pad(params[k], (d, d))
    return out


def _mix(scores: Array, softmax: bool) -> Array:
    return jax.nn.softmax(scores, axis=-1) if softmax else scores


def counting_logits(params: dict, tokens: Array, softmax: bool, d=None) -> Array:
    """Logits `(n, length, n_classes)` for model tokens `(n, length)` (see the module docstring); the mixing is
    dot-product when `params` has `WQ`, else linear (`A`). `d`: the score scale's `d` (default: `E`'s width)."""
    E = params["E"]
    width, hidden = E.shape[1], params["W1"].shape[1]
    if "WQ" in params:
        d = width if d is None else d
        table = (E @ params["WQ"]) @ (E @ params["WK"]).T / jnp.sqrt(jnp.asarray(d, E.dtype))     # (V, V)
        a = _mix(table[tokens[:, :, None], tokens[:, None, :]], softmax)                          # (n, len, len)
    else:
        a = jnp.broadcast_to(_mix(params["A"], softmax), tokens.shape + tokens.shape[-1:])
    if hidden <= width:        # mix in the hidden space: (E W1)[t] + a (E W1)[t]
        u = (E @ params["W1"])[tokens]
        pre = u + a @ u
    else:                      # mix in the embedding space: (x + a x) W1
        x = E[tokens]
        pre = (x + a @ x) @ params["W1"]
    return jax.nn.relu(pre + params["b1"]) @ params["W2"] + params["b2"]


def reference_logits(params: dict, tokens: Array, softmax: bool, d=None) -> Array:
    """The same logits, literally as the paper's model computes them: `x = E[t]`, scores
    `(x W_Q)(x W_K)^T / sqrt(d)` or `A`, `h = x + a x`, `W_2 ReLU(W_1 h + b_1) + b_2`."""
    x = params["E"][tokens]
    if "WQ" in params:
        d = x.shape[-1] if d is None else d
        scores = (x @ params["WQ"]) @ jnp.swapaxes(x @ params["WK"], -1, -2) / jnp.sqrt(jnp.asarray(d, x.dtype))
    else:
        scores = jnp.broadcast_to(params["A"], tokens.shape + tokens.shape[-1:])
    h = x + _mix(scores, softmax) @ x
    return jax.nn.relu(h @ params["W1"] + params["b1"]) @ params["W2"] + params["b2"]


def slot_logits(params: dict, batch: dict, softmax: bool, d=None) -> Array:
    """Logits `(n_classes, S * n)` of the slots of a batch, feature-major (the training path; see
    `phasejax.tasks.histogram.train.slot_batch` for the batch and why it is the same model).

    The mixed input of a query slot is written over the vocabulary: `h = (o + m) E`, with `o` the one-hot of its
    token and `m[c]` the weight its mixing puts on the token `c`. Dot-product mixing: `m[c] = n[c] e^{G[t, c]}
    / sum_c' n[c'] e^{G[t, c']}` with softmax (`n[c] G[t, c]` without), `n` the sequence's token counts
    (`batch["counts"] (V, n)`), `G` the score table; linear mixing: `m[c] = sum_j a[i, j] [t_j = c]` over the
    positions `batch["positions"] (length, n)`. Every product is a matrix product of operands with the slots as
    the minor axis, ordered for the fewest operations at the shapes given."""
    E = params["E"]
    V, width = E.shape
    hidden = params["W1"].shape[1]
    tokens = batch["tokens"]                                                   # (S, n)
    S, n = tokens.shape
    cols = S * n
    vocab = jnp.arange(V, dtype=tokens.dtype)
    onehot = (vocab[:, None, None] == tokens[None]).astype(E.dtype).reshape(V, cols)       # (V, S n)
    if "WQ" in params:
        scale = jnp.sqrt(jnp.asarray(width if d is None else d, E.dtype))
        EQ, EK = E @ params["WQ"], E @ params["WK"]
        if V * V * (width + cols) <= 2 * V * width * cols:      # scores[c, slot] = G[t_slot, c]
            scores = (EK @ EQ.T) @ onehot / scale
        else:
            scores = EK @ (EQ.T @ onehot) / scale
        scores = scores.reshape(V, S, n)
        counts = batch["counts"][:, None, :]                                   # (V, 1, n)
        if softmax:          # log 0 = -inf: tokens absent from the sequence get no weight
            mix = jax.nn.softmax(scores + jnp.log(counts), axis=0)
        else:
            mix = scores * counts
        mix = mix.reshape(V, cols)
    else:
        positions = batch["positions"]                                         # (length, n)
        a = _mix(params["A"], softmax)[positions.shape[0] - S:]                # rows of the query slots (S, length)
        at = (vocab[None, :, None] == positions[:, None, :]).astype(E.dtype)   # (length, V, n)
        mix = (a @ at.reshape(positions.shape[0], V * n)).reshape(S, V, n).transpose(1, 0, 2).reshape(V, cols)
    seen = onehot + mix                                                        # (V, S n)
    if V * width * hidden + hidden * V * cols <= width * V * cols + hidden * width * cols:
        pre = (E @ params["W1"]).T @ seen
    else:
        pre = params["W1"].T @ (E.T @ seen)
    z = jax.nn.relu(pre + params["b1"][:, None])                               # (p, S n)
    return params["W2"].T @ z + params["b2"][:, None]
