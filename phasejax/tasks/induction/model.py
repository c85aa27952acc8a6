"""The induction models (disentangled and standard transformers): parameters, forward passes, constructions."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.tasks._common import F32, Array
from phasejax.tasks.induction.data import (
    _check_S,
    _check_dtype,
    _check_int,
    _check_positive,
    soft_cross_entropy,
    state_mask,
)


# ----------------------------------------------------------------------------

KINDS = ("disentangled", "standard")
READOUTS = ("probability", "linear")


@dataclasses.dataclass(frozen=True)
class InductionModel:
    """Architecture (static): `kind` `"disentangled"` or `"standard"`, `layers` attention layers.

    `readout` (disentangled only): `"probability"` (the last attention layer's
    average of one-hot tokens plus a uniform sink is the predicted law) or
    `"linear"` (logits `W_O h_L`). `d_model`, `mlp_ratio`: width of the
    standard transformer's residual stream and MLP.
    """

    kind: str = "disentangled"
    layers: int = 2
    readout: str = "probability"
    d_model: int = 32
    mlp_ratio: int = 4

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got kind={self.kind!r}")
        if self.readout not in READOUTS:
            raise ValueError(f"readout must be one of {READOUTS}, got readout={self.readout!r}")
        _check_int("layers", self.layers, 1)
        _check_int("d_model", self.d_model, 1)
        _check_int("mlp_ratio", self.mlp_ratio, 1)

    @property
    def name(self) -> str:
        suffix = "" if self.kind == "standard" or self.readout == "probability" else "-linear"
        return f"{self.kind}{suffix}"


def coordinate_ids(S_max: int, T: int, layers: int) -> list[np.ndarray]:
    """Padding-independent ids of the residual-stream coordinates `h_0 .. h_layers` of the disentangled model.

    `h_0 = [e_s (s < S_max), e_t (t < T)]` gets ids `2 s` and `2 t + 1`;
    `h_l = [h_{l-1}, A_l h_{l-1}]` gets `2 id` for the copy and `2 id + 1` for
    the attention output. The id of a coordinate does not depend on `S_max`.
    """
    ids = [np.concatenate([2 * np.arange(S_max), 2 * np.arange(T) + 1])]
    for _ in range(layers):
        ids.append(np.concatenate([2 * ids[-1], 2 * ids[-1] + 1]))
    return ids


def _normal_by_ids(key: Array, row_ids, col_ids, dtype) -> Array:
    """`(len(row_ids), len(col_ids))` standard normals, entry `(i, j)` drawn from `fold_in(fold_in(key, id_i), id_j)`."""
    row_keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.asarray(row_ids, jnp.uint32))
    draw = lambda k: jax.vmap(lambda j: jax.random.normal(jax.random.fold_in(k, j), (), dtype))(  # noqa: E731
        jnp.asarray(col_ids, jnp.uint32))
    return jax.vmap(draw)(row_keys)


def init_induction_params(key: Array, model: InductionModel, S_max: int, T: int, *, init_scale: float = 0.02,
                          sink_init: float | None = None, dtype=F32) -> dict:
    """Initial parameters of `model` for `S_max` states and length `T`.

    Disentangled: `W_l ~ N(0, init_scale^2)` of shape `(d_{l-1}, d_{l-1})`,
    `d_l = 2^l (S_max + T)`; probability readout: sink score
    `b = sink_init` (default `log T + 2`, so the untrained model predicts
    within about 10% of uniform); linear readout: `W_O ~ N(0, init_scale^2)`
    `(S_max, d_L)`. Standard: embeddings `N(0, 1)`, matrices
    `N(0, 1/fan_in)`, the output projections of each block and the
    unembedding scaled by `init_scale`, layer norms at identity.
    Every entry tied to a state is drawn from a key of its own (see
    `coordinate_ids`), so the parameters of the states `< S` do not depend on
    `S_max`: a padded model starts where the unpadded one does.
    """
    _check_int("S_max", S_max, 2)
    _check_int("T", T, 2)
    _check_positive("init_scale", init_scale)
    _check_dtype(dtype)
    keys = jax.random.split(key, 2 * model.layers + 4)
    if model.kind == "disentangled":
        ids = coordinate_ids(S_max, T, model.layers)
        params = {f"W{layer + 1}": init_scale * _normal_by_ids(keys[layer], ids[layer], ids[layer], dtype)
                  for layer in range(model.layers)}
        if model.readout == "probability":
            params["sink"] = jnp.asarray(math.log(T) + 2.0 if sink_init is None else sink_init, dtype)
        else:
            params["WO"] = init_scale * _normal_by_ids(keys[-1], np.arange(S_max), ids[-1], dtype)
        return params
    D, H = model.d_model, model.d_model * model.mlp_ratio
    normal = lambda k, shape, fan_in: jax.random.normal(k, shape, dtype) / np.sqrt(fan_in)  # noqa: E731
    params = dict(E=_normal_by_ids(keys[-1], np.arange(S_max), np.arange(D), dtype),
                  pos=jax.random.normal(keys[-2], (T, D), dtype),
                  ln_g=jnp.ones((D,), dtype), ln_b=jnp.zeros((D,), dtype),
                  U=init_scale * _normal_by_ids(keys[-3], np.arange(S_max), np.arange(D), dtype).T / np.sqrt(D))
    for layer in range(model.layers):
        k = jax.random.split(keys[layer], 6)
        params[f"block{layer + 1}"] = dict(
            ln1_g=jnp.ones((D,), dtype), ln1_b=jnp.zeros((D,), dtype),
            Wq=normal(k[0], (D, D), D), Wk=normal(k[1], (D, D), D), Wv=normal(k[2], (D, D), D),
            Wo=init_scale * normal(k[3], (D, D), D),
            ln2_g=jnp.ones((D,), dtype), ln2_b=jnp.zeros((D,), dtype),
            W1=normal(k[4], (D, H), D), b1=jnp.zeros((H,), dtype),
            W2=init_scale * normal(k[5], (H, D), H), b2=jnp.zeros((D,), dtype))
    return params


def unpad_params(params: dict, model: InductionModel, S: int, S_max: int, T: int) -> dict:
    """The parameters of the unpadded model (`S` states) inside padded ones (`S_max` states).

    Keeps the coordinates whose id (`coordinate_ids`) exists for `S` states; for
    the standard model the rows of `E` and columns of `U` of the first `S` states.
    """
    if model.kind == "standard":
        return dict(params, E=params["E"][:S], U=params["U"][:, :S])
    full, small = coordinate_ids(S_max, T, model.layers), coordinate_ids(S, T, model.layers)
    keep = [np.flatnonzero(np.isin(f, s)) for f, s in zip(full, small)]
    out = {f"W{layer + 1}": params[f"W{layer + 1}"][np.ix_(keep[layer], keep[layer])] for layer in range(model.layers)}
    if "sink" in params:
        out["sink"] = params["sink"]
    if "WO" in params:
        out["WO"] = params["WO"][:S][:, keep[-1]]
    return out


def _causal_mask(T: int) -> Array:
    return jnp.tril(jnp.ones((T, T), bool))


def _masked_log_softmax(scores: Array, mask: Array) -> Array:
    scores = jnp.where(mask, scores, -jnp.inf)
    return scores - jax.scipy.special.logsumexp(scores, -1, keepdims=True)


def _layer_norm(x: Array, g: Array, b: Array, eps: float = 1e-5) -> Array:
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.var(x, -1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps) * g + b


def disentangled_forward(params: dict, tokens: Array, S, model: InductionModel) -> tuple[Array, tuple[Array, ...]]:
    """Disentangled transformer on one sequence `tokens (T,)`: `(log_q (T, S_max), attentions)`.

    `x = [onehot_{S_max}(s_i), onehot_T(i)]`; layer `l`:
    `A_l = softmax_causal(h W_l h^T)`, `h <- [h, A_l h]`. Probability readout:
    the last layer's scores get one sink column of score `b`;
    `q_t(s') = (sum_{j <= t, s_j = s'} e^{score_tj} + e^b / S) / (sum_{j <= t} e^{score_tj} + e^b)`.
    Linear readout: `log_softmax(W_O h_t)` over the first `S` states.
    `attentions[l]` is layer `l`'s `(T, T)` pattern (without the sink column).
    """
    T = tokens.shape[-1]
    S_max = params["W1"].shape[0] - T
    dtype = params["W1"].dtype
    onehot = jax.nn.one_hot(tokens, S_max, dtype=dtype)
    h = jnp.concatenate([onehot, jnp.eye(T, dtype=dtype)], -1)
    causal = _causal_mask(T)
    m = state_mask(S, S_max, dtype)
    attentions = []
    for layer in range(model.layers):
        scores = h @ params[f"W{layer + 1}"] @ h.T
        last = layer == model.layers - 1
        if last and model.readout == "probability":
            # one extra key (the sink) of score b whose value is the uniform law on the S states; weights are
            # normalised by their row maximum (including b), so the sink's share never underflows unless the
            # scores exceed b by ~80, where the clamp at the smallest normal float keeps the loss finite
            b = params["sink"]
            scores = jnp.where(causal, scores, -jnp.inf)
            top = jax.lax.stop_gradient(jnp.maximum(jnp.max(scores, -1, keepdims=True), b))
            w = jnp.exp(scores - top)                                                       # (T, T)
            w_sink = jnp.exp(b - top)                                                       # (T, 1)
            norm = jnp.sum(w, -1, keepdims=True) + w_sink
            mass = w @ onehot + w_sink * m / jnp.asarray(S, dtype)                         # (T, S_max)
            log_q = jnp.where(m > 0, jnp.log(jnp.maximum(mass, jnp.finfo(dtype).tiny)) - jnp.log(norm), -jnp.inf)
            attentions.append(w / norm)
            return log_q, tuple(attentions)
        log_a = _masked_log_softmax(scores, causal)
        a = jnp.exp(log_a)
        attentions.append(a)
        h = jnp.concatenate([h, a @ h], -1)
    logits = h @ params["WO"].T
    return _masked_log_softmax(logits, m > 0), tuple(attentions)


def standard_forward(params: dict, tokens: Array, S, model: InductionModel) -> tuple[Array, tuple[Array, ...]]:
    """Standard pre-LN transformer on `tokens (T,)`: `(log_q (T, S_max), attentions)`.

    `x = E[s] + pos`; per block `x += softmax_causal(q k^T / sqrt(D)) v W_o`
    (`q, k, v` of `LN(x)`), `x += GELU(LN(x) W_1 + b_1) W_2 + b_2`; logits
    `LN(x) U`, log-softmax over the first `S` states.
    """
    T = tokens.shape[-1]
    S_max = params["E"].shape[0]
    x = params["E"][tokens] + params["pos"][:T]
    causal = _causal_mask(T)
    attentions = []
    for layer in range(model.layers):
        blk = params[f"block{layer + 1}"]
        h = _layer_norm(x, blk["ln1_g"], blk["ln1_b"])
        q, k, v = h @ blk["Wq"], h @ blk["Wk"], h @ blk["Wv"]
        a = jnp.exp(_masked_log_softmax(q @ k.T / jnp.sqrt(jnp.asarray(q.shape[-1], x.dtype)), causal))
        attentions.append(a)
        x = x + (a @ v) @ blk["Wo"]
        h = _layer_norm(x, blk["ln2_g"], blk["ln2_b"])
        x = x + jax.nn.gelu(h @ blk["W1"] + blk["b1"]) @ blk["W2"] + blk["b2"]
    logits = _layer_norm(x, params["ln_g"], params["ln_b"]) @ params["U"]
    return _masked_log_softmax(logits, state_mask(S, S_max, x.dtype) > 0), tuple(attentions)


def induction_forward(params: dict, tokens: Array, S, model: InductionModel) -> tuple[Array, tuple[Array, ...]]:
    """`(log_q (T, S_max), attentions ((T, T) per layer))` of `model` on one sequence `tokens (T,)`."""
    fwd = disentangled_forward if model.kind == "disentangled" else standard_forward
    return fwd(params, tokens, S, model)


def induction_head_params(S: int, T: int, beta: float, *, S_max: int | None = None, scale: float = 30.0,
                          dtype=F32) -> dict:
    """An explicit two-layer disentangled model (probability readout) that computes the Bayes predictor.

    Layer 1 (positions only): `W_1[pos i, pos i-1] = scale`, so position `i`
    attends to `i - 1` (position 0 to itself) and `h_1` holds the previous
    token. Layer 2: `W_2[tok s, prev-tok s] = scale` (a key matches when its
    previous token is the current token) and `W_2[tok s, pos 0] = -scale`
    (position 0 has no predecessor); sink score `scale + log(S beta)`. With
    `n` matching keys the prediction is `(n_{s -> s'} + beta) / (n + S beta)`
    up to `O(T e^{-scale})`.
    """
    S_max = S if S_max is None else S_max
    _check_S(S, S_max)
    _check_int("T", T, 2)
    _check_positive("beta", beta)
    d0 = S_max + T
    W1 = np.zeros((d0, d0))
    W1[S_max + np.arange(1, T), S_max + np.arange(T - 1)] = scale
    W2 = np.zeros((2 * d0, 2 * d0))
    W2[np.arange(S_max), d0 + np.arange(S_max)] = scale      # query token s . key's previous token s
    W2[np.arange(S_max), S_max] = -scale                     # key position 0: no previous token
    return dict(W1=jnp.asarray(W1, dtype), W2=jnp.asarray(W2, dtype),
                sink=jnp.asarray(scale + math.log(S * beta), dtype))


# ----------------------------------------------------------------------------
# Attention diagnostics
# ----------------------------------------------------------------------------


def previous_token_attention(attn: Array) -> Array:
    """Mean attention mass on the previous token, `mean_{t >= 1} A[t, t-1]`, of a `(T, T)` pattern."""
    T = attn.shape[-1]
    return jnp.mean(attn[jnp.arange(1, T), jnp.arange(T - 1)])


def induction_attention(attn: Array, tokens: Array) -> tuple[Array, Array]:
    """How much a `(T, T)` pattern attends to the induction targets, and the chance value.

    Targets of query `t`: keys `1 <= j <= t` with `s_{j-1} = s_t`. Returns the
    mean over queries with at least one target of (the mass on targets / the
    pattern's total mass over keys) and the same for uniform causal attention.
    """
    T = tokens.shape[-1]
    prev = jnp.concatenate([jnp.full((1,), -1, tokens.dtype), tokens[:-1]])
    j, t = jnp.arange(T)[None, :], jnp.arange(T)[:, None]
    target = ((j <= t) & (j >= 1) & (prev[None, :] == tokens[:, None])).astype(attn.dtype)
    has = jnp.sum(target, -1) > 0
    frac = jnp.sum(attn * target, -1) / jnp.maximum(jnp.sum(attn, -1), jnp.finfo(attn.dtype).tiny)
    chance = jnp.sum(target, -1) / (jnp.arange(T) + 1)
    n = jnp.maximum(jnp.sum(has), 1)
    return jnp.sum(jnp.where(has, frac, 0.0)) / n, jnp.sum(jnp.where(has, chance, 0.0)) / n


# ----------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------


def batch_loss(params: dict, tokens: Array, P: Array, S, model: InductionModel) -> tuple[Array, Array]:
    """Mean expected log loss over a batch `tokens (B, T)`, `P (B, S_max, S_max)`, and the per-layer
    previous-token attention `(layers,)` (mean over the batch); the aux output of the training loss."""
    log_q, attn = jax.vmap(lambda x: induction_forward(params, x, S, model))(tokens)
    loss = jnp.mean(jax.vmap(soft_cross_entropy)(log_q, tokens, P))
    prev = jnp.stack([jnp.mean(jax.vmap(previous_token_attention)(a)) for a in attn])
    return loss, prev
