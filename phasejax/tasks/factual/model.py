"""The factual-recall model (attention, optional MLP) and its explicit memory constructions."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.tasks._common import F32, Array
from phasejax.tasks.factual.data import FactualTask


# ----------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------


def factual_parameter_count(d, m, n_heads, d_head) -> int:
    """Trainable parameters of the one-layer model: `4 H d_h d` (attention) `+ 2 m d` (MLP)."""
    return int(4 * n_heads * d_head * d + 2 * m * d)


def factual_embeddings(key: Array, task: FactualTask, d, d_max: int, dtype=F32) -> dict:
    """Frozen random embeddings at padded width `d_max`: `E (vocab, d_max)`, `U (R D, d_max)`.

    `e_z, u_a = g[:d] / sqrt(d)` with `g ~ N(0, I)` drawn per token from
    `fold_in(key_kind, index)` (kinds: subjects, relations, noise, `EOS`,
    attributes), so a token's embedding does not depend on how many tokens
    of each kind the task has; `||e_z|| ~ 1`, `e_z . e_z' ~ N(0, 1/d)`; the
    entries beyond `d` are 0. `d` may be traced.
    """
    counts = (task.n_subjects, task.n_relations, task.n_noise, 1, task.n_outputs)
    kind = np.concatenate([np.full(c, k) for k, c in enumerate(counts)])
    index = np.concatenate([np.arange(c) for c in counts])
    kind_keys = jax.random.split(key, len(counts))
    g = jax.vmap(lambda k, i: jax.random.normal(jax.random.fold_in(kind_keys[k], i), (d_max,), dtype))(
        jnp.asarray(kind), jnp.asarray(index))
    mask = (jnp.arange(d_max) < d).astype(dtype) / jnp.sqrt(jnp.asarray(d, dtype))
    n_in = task.vocab
    return dict(E=g[:n_in] * mask, U=g[n_in:] * mask)


def init_factual_params(key: Array, d, m, n_heads, *, d_max: int, m_max: int, heads_max: int, d_head: int,
                        init_scale: float = 1.0, dtype=F32) -> dict:
    """Trainable parameters at padded shapes: `WQ, WK, WV, WO (H_max, d_h, d_max)`, `U, V (m_max, d_max)`.

    `W_Q, W_K, W_V, U ~ N(0, s^2 / d)`, `W_O ~ N(0, s^2 / (H d_h))`, `V ~ N(0, s^2 / m)`
    with `s = init_scale`; `d, m, n_heads` (may be traced) set the scales only.
    """
    s = jnp.asarray(init_scale, dtype)
    rd = s / jnp.sqrt(jnp.asarray(d, dtype))
    ro = s / jnp.sqrt(jnp.asarray(n_heads * d_head, dtype))
    rm = s / jnp.sqrt(jnp.maximum(jnp.asarray(m, dtype), 1.0))
    shape_a, shape_m = (heads_max, d_head, d_max), (m_max, d_max)
    size_a, size_m = int(np.prod(shape_a)), int(np.prod(shape_m))
    g = jax.random.normal(key, (4 * size_a + 2 * size_m,), dtype)          # one draw, cut into the weights
    parts = jnp.split(g, np.cumsum([size_a] * 4 + [size_m]))
    a = [parts[k].reshape(shape_a) for k in range(4)]
    return dict(WQ=a[0] * rd, WK=a[1] * rd, WV=a[2] * rd, WO=a[3] * ro,
                U=parts[4].reshape(shape_m) * rd, V=parts[5].reshape(shape_m) * rm)


def _masked(params: dict, d, m, n_heads) -> dict:
    """Parameters with the padding (dimensions >= d, units >= m, heads >= H) multiplied by 0."""
    dtype = params["WQ"].dtype
    md = (jnp.arange(params["WQ"].shape[-1]) < d).astype(dtype)
    mh = (jnp.arange(params["WQ"].shape[0]) < n_heads).astype(dtype)[:, None, None]
    mm = (jnp.arange(params["U"].shape[0]) < m).astype(dtype)[:, None]
    att = {k: params[k] * mh * md for k in ("WQ", "WK", "WV", "WO")}
    return dict(att, U=params["U"] * mm * md, V=params["V"] * mm * md)


def attention_scores(params: dict, embeddings: dict, d, n_heads) -> Array:
    """Score of every vocabulary entry as a key for the `EOS` query, `(H_max, vocab)`.

    `scores[h, z] = <W_K^h e_z, W_Q^h e_EOS> / sqrt(d_h)` (`EOS` is the last token id).
    """
    p = _masked(params, d, params["U"].shape[0], n_heads)
    E = embeddings["E"]
    q = jnp.einsum("hkd,d->hk", p["WQ"], E[-1])
    keys = jnp.einsum("hkd,vd->hvk", p["WK"], E)
    return jnp.einsum("hk,hvk->hv", q, keys) / jnp.sqrt(jnp.asarray(p["WQ"].shape[1], E.dtype))


def attention_weights(params: dict, embeddings: dict, tokens: Array, d, n_heads) -> Array:
    """Attention of the `EOS` query over the sequence, `(H_max, n, T + 1)` (stable softmax; rows sum to 1)."""
    return jax.nn.softmax(attention_scores(params, embeddings, d, n_heads)[:, tokens], axis=-1)


def factual_logits(params: dict, embeddings: dict, tokens: Array, d, m, n_heads) -> Array:
    """Logits `(n, R D)` over the attributes at `EOS` for tokens `(n, T + 1)` (module docstring's equations).

    Computed as `attn = sum_h W_O^h^T W_V^h xbar_h` with the attended mixture
    `xbar_h = sum_t beta^h_t e_{z_t}` (the embeddings are frozen, so only the
    scalar scores are gathered by token id).
    """
    E = embeddings["E"]
    p = _masked(params, d, m, n_heads)
    beta = attention_weights(params, embeddings, tokens, d, n_heads)         # (H, n, T+1)
    xbar = jnp.einsum("hnt,ntd->hnd", beta, E[tokens])                       # (H, n, d)
    attn = jnp.einsum("hkd,hnk->nd", p["WO"], jnp.einsum("hke,hne->hnk", p["WV"], xbar))
    z = E[-1] + attn
    out = z + jax.nn.relu(z @ p["U"].T) @ p["V"]
    return out @ embeddings["U"].T


# ----------------------------------------------------------------------------
# Explicit constructions (associative memories built from the frozen embeddings)
# ----------------------------------------------------------------------------


def _embedding_duals(task: FactualTask, embeddings: dict) -> tuple[np.ndarray, np.ndarray]:
    """Float64 pseudo-inverses: `Ed (vocab, d)` with `Ed E^T = I` and `Ud (d, |A|)` with `U Ud = I`.

    Needs linearly independent embeddings: `d >= vocab` and `d >= R D` (checked).
    """
    E = np.asarray(embeddings["E"], np.float64)
    U = np.asarray(embeddings["U"], np.float64)
    if E.shape[1] < E.shape[0] or np.linalg.matrix_rank(E) < E.shape[0]:
        raise ValueError(f"the constructions need d >= vocab = {task.vocab} independent embeddings, got d={E.shape[1]}")
    if U.shape[1] < U.shape[0] or np.linalg.matrix_rank(U) < U.shape[0]:
        raise ValueError(f"the constructions need d >= R D = {task.n_outputs}, got d={U.shape[1]}")
    return np.linalg.pinv(E).T, np.linalg.pinv(U)


def attention_memory_params(task: FactualTask, facts, embeddings: dict, scale: float = 50.0) -> dict:
    """Attention-only model storing every fact in `W_O^T W_V` (`H = 1`, `d_h = d`, `m = 1` unit unused).

    `W_Q = W_K = 0` (uniform attention over the `T + 1` tokens), `W_V = I`,
    and `W_O^T = M` with `M e_s = c sum_r U^+ 1[a*(s, r)]`, `M e_r = c U^+ 1[A_r]`,
    `M e_noise = M e_EOS = 0`, `c = scale (T + 1)`: the logits are `u_a . e_EOS`
    plus `scale` on every `a*(s, r')` and on every `a in A_r`, so `a*(s, r)`
    (the only attribute with both) wins by `scale` (the `A_r` are disjoint).
    Float32 arrays at `d_max = E.shape[1]`; use `d = d_max, m = 0, n_heads = 1`.
    """
    f = np.asarray(facts)
    Ed, Ud = _embedding_duals(task, embeddings)
    d = Ed.shape[1]
    c = scale * (task.length + 1)
    targets = np.zeros((task.vocab, task.n_outputs))            # logit pattern wanted from each token
    for s_ in range(task.n_subjects):
        targets[s_, f[s_]] = 1.0
    for r in range(task.n_relations):
        targets[task.n_subjects + r, r * task.n_attributes:(r + 1) * task.n_attributes] = 1.0
    M = c * (Ud @ targets.T) @ Ed                               # M e_z = c U^+ targets[z]
    zeros = np.zeros((1, d, d))
    return {k: jnp.asarray(v, F32) for k, v in dict(
        WQ=zeros, WK=zeros, WV=np.eye(d)[None], WO=M.T[None], U=np.zeros((1, d)), V=np.zeros((1, d))).items()}


def mlp_memory_params(task: FactualTask, facts, embeddings: dict, scale: float = 50.0) -> dict:
    """Attention + MLP model storing every fact in the MLP, one hidden unit per fact (`m = S R`).

    Uniform attention with `W_O^T W_V = I` (`H = 1`, `d_h = d`) puts
    `z = e_EOS + (1 / (T + 1)) sum_t e_{z_t}` in the residual stream; unit
    `(s, r)` reads `(T + 1)(e*_s + e*_r) - 1.5 (T + 1) / (T + 2) e*_EOS` (dual
    vectors `e*`), i.e. `1[s present] + 1[r present] - 1.5`, so its ReLU is
    `0.5` exactly when both are present, and writes `2 scale U^+ 1[a*(s, r)]`.
    Float32 arrays at `d_max = E.shape[1]`; use `d = d_max, m = S R, n_heads = 1`.
    """
    f = np.asarray(facts)
    Ed, Ud = _embedding_duals(task, embeddings)
    d, T1 = Ed.shape[1], task.length + 1
    S, R = task.n_subjects, task.n_relations
    units_in, units_out = [], []
    for s_ in range(S):
        for r in range(R):
            units_in.append(T1 * (Ed[s_] + Ed[S + r]) - 1.5 * T1 / (T1 + 1) * Ed[task.eos])
            units_out.append(2.0 * scale * Ud[:, f[s_, r]])
    zeros = np.zeros((1, d, d))
    return {k: jnp.asarray(v, F32) for k, v in dict(
        WQ=zeros, WK=zeros, WV=np.eye(d)[None], WO=np.eye(d)[None], U=np.asarray(units_in),
        V=np.asarray(units_out)).items()}
