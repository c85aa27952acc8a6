"""Factual recall in a one-layer transformer (Nichani, Lee, Bietti 2024; issue 14, part B).

Task (`FactualTask`): `S` subjects, `R` relations, for every relation `r` its
own set `A_r` of `D` attributes (the sets are disjoint; `|A| = R D` attributes
in all), `N_noise` noise tokens. A fact table `a*(s, r) in A_r` is drawn once
(`sample_facts`). A sequence holds the subject `s`, the relation `r` and
`T - 2` noise tokens in random order (the positions of `s` and `r` are a
uniformly random pair of distinct positions among the first `T`, the noise
tokens are i.i.d. uniform), followed by an end token `EOS`; the target is
`a*(s, r)`, predicted at `EOS` over the attribute vocabulary `A`.
`(s, r)` is uniform over `S x R`.

Token ids: subjects `0..S-1`, relations `S..S+R-1`, noise `S+R..S+R+N_noise-1`,
`EOS = S+R+N_noise`. Attribute ids `0..R D - 1`, `A_r = {r D, ..., r D + D - 1}`.

Model (`factual_logits`): frozen random embeddings `e_z`, `u_a ~ N(0, I_d / d)`
(near-orthonormal); one layer, query at `EOS`, no positional embeddings:

    beta^h_t = softmax_t( <W_K^h e_{z_t}, W_Q^h e_EOS> / sqrt(d_h) )
    z        = e_EOS + sum_h W_O^h^T W_V^h sum_t beta^h_t e_{z_t}
    out      = z + V^T relu(U z)                    (MLP of width m; m = 0: attention only)
    logits_a = u_a^T out,   a in A

`W_Q, W_K, W_V, W_O` are `(H, d_h, d)`, `U, V` are `(m, d)`; the trainable
parameter count is `4 H d_h d + 2 m d` (`factual_parameter_count`). Because
the query is always `EOS` and there are no positional embeddings, a score is a
function of the token id only: scores are computed once per vocabulary entry
and gathered, and the values as `W_V` applied to the attended mixture of the
(frozen) embeddings (the same numbers as per position, cheaper).

Padding (as in `phasejax.tasks.counting`): parameters are allocated at
`(d_max, m_max, H_max)` and the first `d` embedding dimensions, `m` hidden
units and `H` heads are used; the rest is multiplied by 0, gets zero gradient
and Adam never moves it. Subjects are padded the same way: a task allocates
`S_max` subject tokens and a run uses the first `S` (`n_subjects`, may be
traced). Embeddings and facts are drawn per token (`fold_in`), so a run's
draws do not depend on the padding. This is what makes a whole
`(S, d, m, H, seed)` grid one vmapped call (`factual_sweep`, via
`phasejax.sweep.run_chunked`).

The relation-only ("hallucinating") predictor `p(a | r)` ignores the subject;
for balanced fact tables (every attribute of `A_r` is the answer for exactly
`S / D` subjects) it is uniform on `A_r` and its cross-entropy is exactly
`log |A_r| = log D` (`relation_only_loss`, `relation_only_entropy`). Trained
models pass through this stage: the loss sits near `log D` while the
probability mass on `A_r` is already ~1 and the accuracy ~`1/D`, before the
subject is used (`find_plateau`).

Example (a few seconds on a CPU):
  >>> task = FactualTask(n_subjects=16, n_relations=2, n_attributes=4, n_noise=8, length=6)
  >>> training = FactualTraining(steps=300, batch_size=64, d_head=8, curve_points=10)
  >>> out = factual_run(0, 16, 32, 32, 2, task=task, training=training, d_max=32, m_max=32, heads_max=2)
  >>> sorted(out)[:3]
  ['accuracy', 'curve_accuracy', 'curve_loss']
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from phasejax.io import atomic_write_json, read_csv, read_json, write_csv
from phasejax.solvers import Status, status_code, status_names
from phasejax.sweep import RunOptions, run_chunked, run_options

Array = jax.Array
F32 = jnp.float32

MODEL_KINDS = ("attention+MLP", "attention-only")
"""Model names: `m > 0` is attention + MLP, `m = 0` attention only."""


def _is_int(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, np.integer))


def _check_int(name: str, value, low: int) -> int:
    if not _is_int(value) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {name}={value!r}")
    return int(value)


def _check_concrete_range(name: str, value, low: int, high: int) -> None:
    """Raise if a concrete (non-traced) `value` lies outside `[low, high]`; traced values are not checked."""
    if isinstance(value, jax.core.Tracer):
        return
    v = np.asarray(value)
    if v.size and (np.any(v < low) or np.any(v > high) or not np.all(v == np.round(v))):
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {name}={value!r}")


def model_kind(m) -> str:
    """`"attention-only"` for MLP width `m = 0`, else `"attention+MLP"`."""
    return MODEL_KINDS[1] if int(m) == 0 else MODEL_KINDS[0]


# ----------------------------------------------------------------------------
# Task
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FactualTask:
    """Subjects `S`, relations `R`, attributes per relation `D = |A_r|`, noise tokens, sequence length `T`.

    Attributes:
      n_subjects: `S`, subject tokens allocated (a run may use only the first
        `n_subjects <= S`, see `sample_factual_batch`).
      n_relations: `R`.
      n_attributes: `D = |A_r|` for every relation (the sets `A_r` are disjoint).
      n_noise: noise tokens `|N|` (>= 1 when `length > 2`).
      length: `T`, tokens before `EOS` (one subject, one relation, `T - 2` noise).
      balanced: draw every `a*(., r)` so that each attribute of `A_r` answers
        exactly `S / D` subjects (needs `D | S`); else i.i.d. uniform on `A_r`.
    """

    n_subjects: int = 64
    n_relations: int = 4
    n_attributes: int = 4
    n_noise: int = 16
    length: int = 8
    balanced: bool = True

    def __post_init__(self):
        _check_int("n_subjects", self.n_subjects, 1)
        _check_int("n_relations", self.n_relations, 1)
        _check_int("n_attributes", self.n_attributes, 1)
        _check_int("n_noise", self.n_noise, 0)
        _check_int("length", self.length, 2)
        if self.length > 2 and self.n_noise < 1:
            raise ValueError(f"n_noise must be >= 1 when length > 2, got n_noise={self.n_noise}, length={self.length}")
        if self.balanced and self.n_subjects % self.n_attributes:
            raise ValueError(f"n_subjects must be a multiple of n_attributes for a balanced fact table, got "
                             f"n_subjects={self.n_subjects}, n_attributes={self.n_attributes}")

    @property
    def vocab(self) -> int:
        """Input token ids: `S + R + N_noise + 1` (with `EOS`)."""
        return self.n_subjects + self.n_relations + self.n_noise + 1

    @property
    def eos(self) -> int:
        return self.n_subjects + self.n_relations + self.n_noise

    @property
    def noise_start(self) -> int:
        return self.n_subjects + self.n_relations

    @property
    def n_outputs(self) -> int:
        """Attribute vocabulary `|A| = R D` (the model's output classes)."""
        return self.n_relations * self.n_attributes

    @property
    def log_A_r(self) -> float:
        """`log |A_r| = log D`: the loss of the relation-only predictor on a balanced fact table."""
        return math.log(self.n_attributes)

    @property
    def log_A(self) -> float:
        """`log |A| = log (R D)`: the loss of the uniform predictor (the loss at initialisation)."""
        return math.log(self.n_outputs)

    def replace(self, **changes) -> "FactualTask":
        return dataclasses.replace(self, **changes)


def sample_facts(key: Array, task: FactualTask) -> Array:
    """Fact table `a*(s, r)`, shape `(S, R)` int32, `a*(s, r) in A_r = {r D, ..., r D + D - 1}`.

    Balanced: the subjects are cut into blocks of `D` consecutive ids; within
    each block and relation the answers are a uniformly random bijection onto
    `A_r` (so `a*(s, r)` is uniform on `A_r` and the first `S'` subjects form a
    balanced table whenever `D | S'`). Otherwise i.i.d. uniform on `A_r`.
    Subject `s`'s row depends only on `(key, s // D)` or `(key, s)`, not on `S`.
    """
    S, R, D = task.n_subjects, task.n_relations, task.n_attributes
    s = np.arange(S)
    if task.balanced:
        n_blocks = -(-S // D)
        block, rel = np.meshgrid(np.arange(n_blocks), np.arange(R), indexing="ij")
        perms = jax.vmap(lambda b, r: jax.random.permutation(jax.random.fold_in(jax.random.fold_in(key, b), r), D))(
            jnp.asarray(block.ravel()), jnp.asarray(rel.ravel())).reshape(n_blocks, R, D)
        offset = perms[s // D, :, s % D]                                   # (S, R)
    else:
        offset = jax.vmap(lambda i: jax.random.randint(jax.random.fold_in(key, i), (R,), 0, D, dtype=jnp.int32))(
            jnp.asarray(s))
    return (jnp.arange(R, dtype=jnp.int32)[None, :] * D + offset).astype(jnp.int32)


class FactualBatch(NamedTuple):
    """Sequences and their targets: `tokens (n, T + 1)` (last is `EOS`), `labels (n,) = a*(s, r)`,
    `subjects (n,)`, `relations (n,)` (relation index `r`, token id `S + r`)."""

    tokens: Array
    labels: Array
    subjects: Array
    relations: Array


def _draw_columns(key: Array, n: int, low, high) -> Array:
    """`(n, len(low))` int32, column `c` uniform on `[low[c], high[c])` (one `randint` call; bounds may be traced)."""
    low = jnp.asarray(low, jnp.int32)
    high = jnp.asarray(high, jnp.int32)
    return jax.random.randint(key, (n, low.shape[0]), low, high, dtype=jnp.int32)


def _place(task: FactualTask, subjects: Array, relations: Array, draws: Array) -> Array:
    """Sequences `(n, T + 1)` from `draws (n, 2 + T)` = (position i, offset j, T noise tokens); then `EOS`."""
    T = task.length
    i, j, noise = draws[:, 0], draws[:, 1], draws[:, 2:]
    j = j + (j >= i)                                       # uniform over the positions != i
    pos = jnp.arange(T, dtype=jnp.int32)[None, :]
    rel_tok = (task.n_subjects + relations).astype(jnp.int32)
    tokens = jnp.where(pos == i[:, None], subjects[:, None].astype(jnp.int32),
                       jnp.where(pos == j[:, None], rel_tok[:, None], noise))
    return jnp.concatenate([tokens, jnp.full((subjects.shape[0], 1), task.eos, jnp.int32)], axis=1)


def _context_bounds(task: FactualTask) -> tuple[list, list]:
    lo = [0, 0] + [task.noise_start] * task.length
    hi = [task.length, task.length - 1] + [task.noise_start + max(task.n_noise, 1)] * task.length
    return lo, hi


def factual_sequences(key: Array, task: FactualTask, subjects: Array, relations: Array) -> Array:
    """Token sequences `(n, T + 1)` holding `subjects[i]`, relation token `S + relations[i]` and noise, then `EOS`.

    The positions of the subject and the relation are a uniformly random
    ordered pair of distinct positions in `0..T-1`; the other `T - 2`
    positions hold i.i.d. uniform noise tokens.
    """
    lo, hi = _context_bounds(task)
    return _place(task, subjects, relations, _draw_columns(key, subjects.shape[0], lo, hi))


def sample_factual_batch(key: Array, task: FactualTask, facts: Array, n: int, n_subjects=None) -> FactualBatch:
    """`n` fresh sequences: `(s, r)` uniform over `[n_subjects] x [R]` (default `n_subjects = S`), target `a*(s, r)`.

    Each sequence as in `factual_sequences`. `n_subjects` may be traced (a padded
    sweep); a concrete value must lie in `[1, S]`.
    """
    n_subjects = task.n_subjects if n_subjects is None else n_subjects
    _check_concrete_range("n_subjects", n_subjects, 1, task.n_subjects)
    lo, hi = _context_bounds(task)
    draws = _draw_columns(key, n, [0, 0] + lo, [n_subjects, task.n_relations] + hi)
    s, r = draws[:, 0], draws[:, 1]
    return FactualBatch(_place(task, s, r, draws[:, 2:]), facts[s, r], s, r)


# ----------------------------------------------------------------------------
# The relation-only ("hallucinating") predictor: closed forms
# ----------------------------------------------------------------------------


def relation_only_log_probs(task: FactualTask, facts: Array, n_subjects=None, dtype=F32) -> Array:
    """`log p(a | r)` of the Bayes predictor that sees only the relation, shape `(R, R D)`.

    `p(a | r) = #{s < n_subjects : a*(s, r) = a} / n_subjects` (`-inf` off the support).
    """
    n_subjects = task.n_subjects if n_subjects is None else n_subjects
    _check_concrete_range("n_subjects", n_subjects, 1, task.n_subjects)
    used = (jnp.arange(task.n_subjects) < n_subjects).astype(dtype)
    onehot = jax.nn.one_hot(facts, task.n_outputs, dtype=dtype)            # (S, R, |A|)
    counts = jnp.einsum("s,sra->ra", used, onehot)
    return jnp.log(counts / jnp.asarray(n_subjects, dtype))


def relation_only_loss(task: FactualTask, facts: Array, n_subjects=None, dtype=F32) -> Array:
    """Population cross-entropy of the relation-only predictor: `E_{s,r} [-log p(a*(s, r) | r)]` (scalar).

    Computed from the fact table (the noise and the order do not enter this
    predictor). On a balanced table it equals `log D` exactly (`FactualTask.log_A_r`).
    """
    n_subjects = task.n_subjects if n_subjects is None else n_subjects
    logp = relation_only_log_probs(task, facts, n_subjects, dtype)
    used = (jnp.arange(task.n_subjects) < n_subjects).astype(dtype)
    picked = jnp.take_along_axis(logp.T[None, :, :].repeat(task.n_subjects, 0),
                                 facts[:, None, :], axis=1)[:, 0, :]       # (S, R): log p(a*(s, r) | r)
    return -jnp.sum(used[:, None] * picked) / (jnp.asarray(n_subjects, dtype) * task.n_relations)


def relation_only_entropy(facts, n_subjects: int | None = None) -> float:
    """Closed form in float64 (numpy): `H(a | r) = mean_r [-sum_a p(a|r) log p(a|r)]` of a fact table `(S, R)`.

    Equals `log D` for a balanced table; the relation-only predictor's loss is this entropy.
    """
    f = np.asarray(facts)
    f = f if n_subjects is None else f[:int(n_subjects)]
    out = 0.0
    for r in range(f.shape[1]):
        _, counts = np.unique(f[:, r], return_counts=True)
        p = counts / counts.sum()
        out += float(-(p * np.log(p)).sum())
    return out / f.shape[1]


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
# Losses, training, recall
# ----------------------------------------------------------------------------


def factual_metrics(logits: Array, labels: Array, relations: Array, n_attributes: int) -> dict[str, Array]:
    """Mean cross-entropy `loss`, `accuracy` (argmax = `a*`) and `mass_A_r` (probability on `A_r`) of a batch."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    loss = -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))
    accuracy = jnp.mean((jnp.argmax(logits, -1) == labels).astype(logits.dtype))
    in_block = (jnp.arange(logits.shape[-1])[None, :] // n_attributes) == relations[:, None]
    mass = jnp.mean(jnp.sum(jnp.where(in_block, jnp.exp(logp), 0.0), axis=-1))
    return dict(loss=loss, accuracy=accuracy, mass_A_r=mass)


OPTIMIZERS = ("adam", "sgd")


@dataclasses.dataclass(frozen=True)
class FactualTraining:
    """How every run is trained and measured (online: a fresh batch per step).

    Attributes:
      steps, batch_size, learning_rate: online optimisation.
      optimizer: `"adam"` or `"sgd"` (plain gradient descent on fresh batches).
      init_scale: multiplies the standard initialisation of every trainable weight.
      d_head: head dimension `d_h`.
      n_contexts: random contexts (order and noise) per fact for the recall measurement.
      curve_points: log-spaced windows of steps over which the per-step batch metrics are averaged.
      loss_tol: a run whose last-window loss is below this has status `converged`, else
        `max_iterations` (`diverged` if any loss is not finite).
    """

    steps: int = 3000
    batch_size: int = 128
    learning_rate: float = 3e-3
    optimizer: str = "adam"
    init_scale: float = 1.0
    d_head: int = 16
    n_contexts: int = 4
    curve_points: int = 60
    loss_tol: float = 1e-2

    def __post_init__(self):
        for name in ("steps", "batch_size", "d_head", "n_contexts", "curve_points"):
            _check_int(name, getattr(self, name), 1)
        for name in ("learning_rate", "init_scale", "loss_tol"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float, np.floating)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {name}={v!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got optimizer={self.optimizer!r}")

    def optax_optimizer(self) -> optax.GradientTransformation:
        return optax.adam(self.learning_rate) if self.optimizer == "adam" else optax.sgd(self.learning_rate)

    def replace(self, **changes) -> "FactualTraining":
        return dataclasses.replace(self, **changes)


def curve_windows(steps: int, curve_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Log-spaced windows `[lo, hi)` of the step index `t < steps` (at most `curve_points`; first: single steps)."""
    edges = np.unique(np.round(np.geomspace(1, steps, curve_points + 1)).astype(np.int64))
    edges = np.unique(np.concatenate([[0], edges, [steps]]))
    return edges[:-1], edges[1:]


def curve_steps(steps: int, curve_points: int) -> np.ndarray:
    """Step of every curve point: the mean `t` (updates already made) over its window."""
    lo, hi = curve_windows(steps, curve_points)
    return (lo + hi - 1) / 2.0


def window_means(values: Array, lo: np.ndarray, hi: np.ndarray) -> Array:
    """Means of `values (steps,)` over the windows `[lo, hi)` (static), shape `(len(lo),)`."""
    c = jnp.concatenate([jnp.zeros((1,), values.dtype), jnp.cumsum(values)])
    return (c[hi] - c[lo]) / jnp.asarray(hi - lo, values.dtype)


def train_factual(params0: dict, embeddings: dict, key: Array, task: FactualTask, facts: Array, d, m, n_heads, *,
                  n_subjects, training: FactualTraining) -> tuple[dict, dict[str, Array]]:
    """Online training (`lax.scan`, a fresh batch per step). Returns `(params, metrics)`.

    `metrics[k]` has shape `(steps,)` for `k` in `loss, accuracy, mass_A_r`: the
    batch metrics of the parameters *before* step `t`'s update, on the fresh
    batch of step `t` (an unbiased estimate of the population value). Pure;
    vmap over seeds and the padded sizes.
    """
    opt = training.optax_optimizer()

    def loss_fn(params, batch):
        logits = factual_logits(params, embeddings, batch.tokens, d, m, n_heads)
        mets = factual_metrics(logits, batch.labels, batch.relations, task.n_attributes)
        return mets["loss"], mets

    def step(carry, k):
        params, state = carry
        batch = sample_factual_batch(k, task, facts, training.batch_size, n_subjects)
        (_, mets), grad = jax.value_and_grad(loss_fn, has_aux=True)(params, batch)
        updates, state = opt.update(grad, state, params)
        return (optax.apply_updates(params, updates), state), mets

    (params, _), metrics = jax.lax.scan(step, (params0, opt.init(params0)),
                                        jax.random.split(key, training.steps))
    return params, metrics


def recall_accuracy(params: dict, embeddings: dict, key: Array, task: FactualTask, facts: Array, d, m, n_heads, *,
                    n_subjects, n_contexts: int) -> Array:
    """Fraction of (fact, context) pairs recalled: each `(s, r)`, `s < n_subjects`, in `n_contexts` random contexts.

    A context is a random order and random noise; recall means `argmax_a logits = a*(s, r)`.
    """
    s = jnp.repeat(jnp.arange(task.n_subjects, dtype=jnp.int32), task.n_relations)
    r = jnp.tile(jnp.arange(task.n_relations, dtype=jnp.int32), task.n_subjects)
    used = (s < n_subjects).astype(embeddings["E"].dtype)

    def one_context(k):
        tokens = factual_sequences(k, task, s, r)
        hit = jnp.argmax(factual_logits(params, embeddings, tokens, d, m, n_heads), -1) == facts[s, r]
        return jnp.sum(hit * used)

    hits = jax.lax.map(one_context, jax.random.split(key, n_contexts))
    return jnp.sum(hits) / (jnp.sum(used) * n_contexts)


def factual_run(seed, n_subjects, d, m, n_heads, *, task: FactualTask, training: FactualTraining, d_max: int,
                m_max: int, heads_max: int, dtype=F32) -> dict[str, Array]:
    """One run, pure in `(seed, n_subjects, d, m, n_heads)` (vmap over them): draw, train, measure.

    The seed draws the fact table, the frozen embeddings, the initialisation,
    the training batches and the recall contexts. Returns `accuracy` (recall
    over all facts and `n_contexts` contexts), `facts_recalled` (`= S R accuracy`),
    `final_loss` (mean batch loss over the last window), `status` (`Status` code),
    and `curve_loss`, `curve_accuracy`, `curve_mass_A_r` (`(P,)` window means,
    steps `curve_steps(training.steps, training.curve_points)`).
    """
    k_facts, k_emb, k_init, k_train, k_test = jax.random.split(jax.random.PRNGKey(seed), 5)
    facts = sample_facts(k_facts, task)
    embeddings = factual_embeddings(k_emb, task, d, d_max, dtype)
    params0 = init_factual_params(k_init, d, m, n_heads, d_max=d_max, m_max=m_max, heads_max=heads_max,
                                  d_head=training.d_head, init_scale=training.init_scale, dtype=dtype)
    params, metrics = train_factual(params0, embeddings, k_train, task, facts, d, m, n_heads, n_subjects=n_subjects,
                                    training=training)
    accuracy = recall_accuracy(params, embeddings, k_test, task, facts, d, m, n_heads, n_subjects=n_subjects,
                               n_contexts=training.n_contexts)
    lo, hi = curve_windows(training.steps, training.curve_points)
    curves = {f"curve_{k}": window_means(v, lo, hi) for k, v in metrics.items()}
    final_loss = curves["curve_loss"][-1]
    finite = jnp.all(jnp.isfinite(metrics["loss"]))
    status = jnp.where(~finite, Status.DIVERGED,
                       jnp.where(final_loss <= training.loss_tol, Status.CONVERGED, Status.MAX_ITERATIONS))
    n_facts = jnp.asarray(n_subjects, dtype) * task.n_relations
    return dict(accuracy=accuracy, facts_recalled=accuracy * n_facts, final_loss=final_loss,
                status=status.astype(jnp.int32), **curves)


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


# ----------------------------------------------------------------------------
# Sweeps
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FactualGrid:
    """Runs to train: every `n_subjects` in `subjects` x architecture `(d, m, H)` in `archs` x seed.

    `m = 0` is the attention-only model. `tasks()` is the flat table in order
    `(arch, n_subjects, seed)` with columns `d, m, n_heads, n_subjects, seed`.
    """

    subjects: tuple[int, ...] = (16, 32, 64)
    archs: tuple[tuple[int, int, int], ...] = ((32, 0, 2), (32, 64, 2))
    seeds: tuple[int, ...] = (0, 1)

    def __post_init__(self):
        subjects = tuple(int(v) for v in np.atleast_1d(self.subjects))
        seeds = tuple(int(v) for v in np.atleast_1d(self.seeds))
        archs = tuple(tuple(int(x) for x in a) for a in self.archs)
        if not subjects or min(subjects) < 1:
            raise ValueError(f"subjects must be non-empty integers >= 1, got subjects={self.subjects!r}")
        if not seeds or min(seeds) < 0:
            raise ValueError(f"seeds must be non-empty integers >= 0, got seeds={self.seeds!r}")
        if not archs or any(len(a) != 3 for a in archs):
            raise ValueError(f"archs must be non-empty (d, m, n_heads) triples, got archs={self.archs!r}")
        for d, m, h in archs:
            if d < 1:
                raise ValueError(f"d must be >= 1, got d={d} in archs")
            if m < 0:
                raise ValueError(f"m must be >= 0 (0: attention only), got m={m} in archs")
            if h < 1:
                raise ValueError(f"n_heads must be >= 1, got n_heads={h} in archs")
        object.__setattr__(self, "subjects", subjects)
        object.__setattr__(self, "seeds", seeds)
        object.__setattr__(self, "archs", archs)

    def tasks(self) -> dict[str, np.ndarray]:
        rows = [(d, m, h, s, seed) for (d, m, h) in self.archs for s in self.subjects for seed in self.seeds]
        cols = np.asarray(rows, dtype=np.int64).T
        return dict(d=cols[0].astype(np.int32), m=cols[1].astype(np.int32), n_heads=cols[2].astype(np.int32),
                    n_subjects=cols[3].astype(np.int32), seed=cols[4])


def factual_sweep(grid: FactualGrid, task: FactualTask, training: FactualTraining = FactualTraining(), *,
                  options: RunOptions | None = None, dtype=F32) -> dict[str, np.ndarray] | None:
    """Train every run of `grid` in padded, vmapped chunks (`phasejax.sweep.run_chunked`).

    Padded to the grid's largest `d`, `m`, `H`; every `n_subjects` must lie in
    `[1, task.n_subjects]` (and be a multiple of `D` for a balanced table).
    Returns the task columns, `n_facts = n_subjects R`, `n_params`
    (`factual_parameter_count`) and the outputs of `factual_run` (curves as `(runs, P)`
    arrays), or `None` while chunks are missing (`options.max_chunks`, other hosts).
    `options` as in `run_chunked`; default `RunOptions(chunk_size=16)`.
    """
    options = run_options(options)
    for s in grid.subjects:
        if s > task.n_subjects:
            raise ValueError(f"n_subjects must be <= task.n_subjects={task.n_subjects}, got n_subjects={s} in grid")
        if task.balanced and s % task.n_attributes:
            raise ValueError(f"n_subjects must be a multiple of n_attributes={task.n_attributes} for a balanced "
                             f"fact table, got n_subjects={s} in grid")
    d_max = max(a[0] for a in grid.archs)
    m_max = max(max(a[1] for a in grid.archs), 1)
    heads_max = max(a[2] for a in grid.archs)

    def fn(chunk):
        def one(seed, s, d, m, h):
            return factual_run(seed, s, d, m, h, task=task, training=training, d_max=d_max, m_max=m_max,
                               heads_max=heads_max, dtype=dtype)

        return jax.vmap(one)(*(jnp.asarray(chunk[k]) for k in ("seed", "n_subjects", "d", "m", "n_heads")))

    config = dict(kind="factual_sweep", task=dataclasses.asdict(task), training=dataclasses.asdict(training),
                  subjects=list(grid.subjects), archs=[list(a) for a in grid.archs], seeds=list(grid.seeds),
                  dtype=str(jnp.dtype(dtype)), data="online (fresh batch per step)")
    tasks = grid.tasks()
    out = run_chunked(fn, tasks, config, options)
    if out is None:
        return None
    out = dict(out)
    out.update(tasks)
    out["n_facts"] = tasks["n_subjects"].astype(np.int64) * task.n_relations
    out["n_params"] = np.asarray([factual_parameter_count(d, m, h, training.d_head)
                                  for d, m, h in zip(tasks["d"], tasks["m"], tasks["n_heads"])], np.int64)
    return out


# ----------------------------------------------------------------------------
# The hallucination plateau
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Plateau:
    """The intermediate plateau of one learning curve (`find_plateau`).

    `loss` at the flattest interior point `step`; `decades`: the span in
    `log10(step)` of the contiguous stretch around it where the curve stays
    within `band` (relative) of `loss`; `index` into the curve; `found`: an
    interior point existed (else the values are NaN).
    """

    loss: float
    step: float
    decades: float
    index: int
    found: bool


def find_plateau(steps, loss, *, margin: float = 0.1, band: float = 0.05) -> Plateau:
    """Flattest interior point of a learning curve in log-time (numpy; no reference value is used).

    Interior: losses strictly between `L_end + margin (L_0 - L_end)` and
    `L_0 - margin (L_0 - L_end)`, with `L_0`, `L_end` the first and last points.
    The slope at point `k` is the centred difference `(L_{k+1} - L_{k-1}) /
    (log10 t_{k+1} - log10 t_{k-1})`; the plateau is the interior point of
    smallest `|slope|`.
    """
    t = np.asarray(steps, float) + 1.0             # t = updates made + 1 > 0
    L = np.asarray(loss, float)
    if t.shape != L.shape or L.ndim != 1 or L.size < 3:
        raise ValueError(f"steps and loss must be 1-d of equal length >= 3, got {t.shape} and {L.shape}")
    lt = np.log10(t)
    hi_cut = L[0] - margin * (L[0] - L[-1])
    lo_cut = L[-1] + margin * (L[0] - L[-1])
    k = np.arange(1, L.size - 1)
    slope = (L[k + 1] - L[k - 1]) / (lt[k + 1] - lt[k - 1])
    ok = (L[k] < hi_cut) & (L[k] > lo_cut) & np.isfinite(slope)
    if not np.any(ok):
        return Plateau(float("nan"), float("nan"), float("nan"), -1, False)
    i = int(k[ok][np.argmin(np.abs(slope[ok]))])
    inside = np.abs(L - L[i]) <= band * abs(L[i])
    a = i
    while a > 0 and inside[a - 1]:
        a -= 1
    b = i
    while b < L.size - 1 and inside[b + 1]:
        b += 1
    return Plateau(float(L[i]), float(steps[i]), float(lt[b] - lt[a]), i, True)


# ----------------------------------------------------------------------------
# Capacity: facts stored against parameters
# ----------------------------------------------------------------------------

CENSORING = ("none", "below", "above")
"""`recall_capacity` censoring: `"below"`: recall < threshold already at the grid's
smallest fact count (capacity < that count); `"above"`: recall >= threshold at every
fact count (capacity >= the largest)."""


def recall_capacity(n_facts, accuracy, threshold: float = 0.99) -> tuple[float, str]:
    """Facts stored: the number of facts `N*` at which recall first drops below `threshold` (numpy).

    Over the fact counts `n_facts` (sorted), `N*` interpolates linearly in
    `log N` between the last count with recall `>= threshold` and the first with
    recall `< threshold`. Returns `(N*, "none")`, or `(smallest N, "below")`,
    or `(largest N, "above")` when the crossing lies outside the grid (`CENSORING`).
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must lie in (0, 1], got threshold={threshold}")
    n = np.asarray(n_facts, float)
    acc = np.asarray(accuracy, float)
    if n.ndim != 1 or n.shape != acc.shape or n.size == 0 or np.any(n <= 0):
        raise ValueError(f"n_facts must be positive and match accuracy in shape, got {n.shape} and {acc.shape}")
    order = np.argsort(n)
    n, acc = n[order], acc[order]
    below = np.flatnonzero(acc < threshold)
    if below.size == 0:
        return float(n[-1]), "above"
    i = int(below[0])
    if i == 0:
        return float(n[0]), "below"
    frac = (acc[i - 1] - threshold) / (acc[i - 1] - acc[i])
    return float(np.exp(np.log(n[i - 1]) + frac * (np.log(n[i]) - np.log(n[i - 1])))), "none"


def capacity_table(runs: dict, threshold: float = 0.99) -> dict[str, np.ndarray]:
    """Facts stored per architecture, from a runs table (`FactualResult.runs`).

    One row per `(family, d, m, n_heads)`: `facts_stored` = `recall_capacity`
    of the seed-mean recall, `censored` its censoring, `facts_stored_se` the
    standard error of the per-seed capacities (NaN if fewer than two seeds or
    any seed censored), `capacity_grid` the largest grid fact count with
    seed-mean recall `>= threshold` (0 if none), and `seed_capacities` (a
    space-separated list, `seed:N*:censoring`).
    """
    fam = np.asarray(runs["family"]).astype(str)
    keys = sorted({(f, int(d), int(m), int(h)) for f, d, m, h in zip(fam, runs["d"], runs["m"], runs["n_heads"])},
                  key=lambda k: (k[0], factual_parameter_count(k[1], k[2], k[3], 1), k))
    cols = ("family", "model", "d", "m", "n_heads", "n_params", "facts_stored", "facts_stored_se", "censored",
            "capacity_grid", "seed_capacities")
    out = {k: [] for k in cols}
    for f, d, m, h in keys:
        sel = (fam == f) & (runs["d"] == d) & (runs["m"] == m) & (runs["n_heads"] == h)
        nf = np.unique(runs["n_facts"][sel])
        mean_acc = np.asarray([np.mean(np.asarray(runs["accuracy"][sel & (runs["n_facts"] == n)], float))
                               for n in nf])
        cap, cens = recall_capacity(nf, mean_acc, threshold)
        per_seed = []
        for seed in np.unique(runs["seed"][sel]):
            ss = sel & (runs["seed"] == seed)
            per_seed.append((int(seed),) + recall_capacity(runs["n_facts"][ss], runs["accuracy"][ss], threshold))
        vals = [c for _, c, z in per_seed if z == "none"]
        se = (float(np.std(vals, ddof=1) / np.sqrt(len(vals)))
              if len(vals) == len(per_seed) and len(vals) > 1 else float("nan"))
        ok = mean_acc >= threshold
        row = dict(family=f, model=model_kind(m), d=d, m=m, n_heads=h, n_params=int(runs["n_params"][sel][0]),
                   facts_stored=cap, facts_stored_se=se, censored=cens,
                   capacity_grid=int(nf[ok].max()) if np.any(ok) else 0,
                   seed_capacities=" ".join(f"{s}:{c:.6g}:{z}" for s, c, z in per_seed))
        for k in cols:
            out[k].append(row[k])
    return {k: np.asarray(v) for k, v in out.items()}


def fit_log_log(x, y, *, n_boot: int = 2000, seed: int = 0) -> dict:
    """Least-squares fit `log y = a + b log x`, 95% interval of `b` by resampling the points (numpy).

    Non-positive points are dropped. Returns `exponent, intercept, ci_low, ci_high, n`
    (NaN where fewer than two distinct `x`).
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    lx, ly = np.log(x[keep]), np.log(y[keep])
    nan = float("nan")
    if lx.size < 2 or np.ptp(lx) == 0:
        return dict(exponent=nan, intercept=nan, ci_low=nan, ci_high=nan, n=int(lx.size))
    b, a = np.polyfit(lx, ly, 1)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        idx = rng.integers(0, lx.size, lx.size)
        if np.ptp(lx[idx]) > 0:
            boots.append(np.polyfit(lx[idx], ly[idx], 1)[0])
    lo, hi = np.percentile(boots, [2.5, 97.5]) if boots else (nan, nan)
    return dict(exponent=float(b), intercept=float(a), ci_low=float(lo), ci_high=float(hi), n=int(lx.size))


def capacity_fits(runs: dict, threshold: float = 0.99, *, n_boot: int = 1000, seed: int = 0) -> dict:
    """Per family: log-log fit of the facts stored `N*` (seed-mean recall) against the parameter count.

    The exponent is the least-squares slope over the architectures whose `N*`
    is inside the grid (`censored == "none"`); its 95% interval comes from
    resampling the seeds with replacement, independently per architecture,
    and refitting (architectures whose resampled `N*` leaves the grid are
    dropped from that refit). Returns `{family: dict(exponent, intercept,
    ci_low, ci_high, n, n_boot_used, varied)}`.
    """
    fam_col = np.asarray(runs["family"]).astype(str)
    rng = np.random.default_rng(seed)
    nan = float("nan")
    fits = {}
    for fam in map(str, dict.fromkeys(fam_col)):
        sel = fam_col == fam
        archs = sorted({(int(d), int(m), int(h)) for d, m, h in zip(runs["d"][sel], runs["m"][sel],
                                                                     runs["n_heads"][sel])})
        per_arch = []                     # (n_params, fact counts, accuracy (n_seeds, n_counts))
        for d, m, h in archs:
            sa = sel & (runs["d"] == d) & (runs["m"] == m) & (runs["n_heads"] == h)
            nf = np.unique(runs["n_facts"][sa])
            seeds = np.unique(runs["seed"][sa])
            acc = np.full((seeds.size, nf.size), np.nan)
            for i, sd in enumerate(seeds):
                for j, n in enumerate(nf):
                    hit = sa & (runs["seed"] == sd) & (runs["n_facts"] == n)
                    if np.any(hit):
                        acc[i, j] = float(np.mean(np.asarray(runs["accuracy"][hit], float)))
            per_arch.append((int(runs["n_params"][sa][0]), nf, acc))

        def fit_of(capacities):
            xs = [p for (p, _, _), (c, z) in zip(per_arch, capacities) if z == "none"]
            ys = [c for c, z in capacities if z == "none"]
            if len(xs) < 2 or np.ptp(np.log(xs)) == 0:
                return nan, nan, len(xs)
            b, a = np.polyfit(np.log(xs), np.log(ys), 1)
            return float(b), float(a), len(xs)

        b, a, n = fit_of([recall_capacity(nf, np.nanmean(acc, 0), threshold) for _, nf, acc in per_arch])
        boots = []
        for _ in range(n_boot):
            caps = [recall_capacity(nf, np.nanmean(acc[rng.integers(0, acc.shape[0], acc.shape[0])], 0), threshold)
                    for _, nf, acc in per_arch]
            bb, _, _ = fit_of(caps)
            if np.isfinite(bb):
                boots.append(bb)
        lo, hi = np.percentile(boots, [2.5, 97.5]) if boots else (nan, nan)
        fits[fam] = dict(exponent=b, intercept=a, ci_low=float(lo), ci_high=float(hi), n=n, n_boot_used=len(boots),
                         varied=_varied_archs(archs))
    return fits


def _varied_archs(archs) -> str:
    names = [k for i, k in enumerate(("d", "m", "n_heads")) if len({a[i] for a in archs}) > 1]
    return ",".join(names) if names else "none"


# ----------------------------------------------------------------------------
# The experiment and its result
# ----------------------------------------------------------------------------

RUN_COLUMNS = ("family", "model", "d", "m", "n_heads", "d_head", "n_params", "n_subjects", "n_facts", "seed",
               "accuracy", "facts_recalled", "final_loss", "status")
"""Columns of `recall.csv` (one row per trained run of the capacity sweeps)."""

CURVE_COLUMNS = ("run", "model", "d", "m", "n_heads", "n_subjects", "n_attributes", "seed", "step", "loss",
                 "accuracy", "mass_A_r")
"""Columns of `curves.csv` (one row per run and curve point; `step`: mean updates made over the point's window)."""

CAPACITY_COLUMNS = ("family", "model", "d", "m", "n_heads", "n_params", "facts_stored", "facts_stored_se",
                    "censored", "capacity_grid", "seed_capacities")
"""Columns of `capacity.csv` (`capacity_table`)."""

DEFAULT_FAMILIES = {
    "heads": FactualGrid(subjects=(4, 8, 16, 32, 64, 128), archs=((32, 0, 1), (32, 0, 2), (32, 0, 4), (32, 0, 8)),
                         seeds=(0, 1)),
    "width": FactualGrid(subjects=(4, 8, 16, 32, 64, 128), archs=((32, 32, 2), (32, 64, 2), (32, 128, 2),
                                                                  (32, 256, 2)), seeds=(0, 1)),
}
"""Capacity sweep families: attention only with `H` varied, attention + MLP with `m` varied."""


@dataclasses.dataclass
class FactualResult:
    """Outputs of `factual_experiment` (numpy columns and a JSON-ready summary).

    Attributes:
      runs: capacity sweeps, one row per run, columns `RUN_COLUMNS` (`status` as names).
      curves: learning curves, columns `CURVE_COLUMNS`.
      capacity: facts stored per architecture, columns `CAPACITY_COLUMNS`.
      summary: `plateau_loss`, `log_A_r`, `facts_stored_per_parameter_count`, fits, settings.
    """

    runs: dict
    curves: dict
    capacity: dict
    summary: dict

    def write(self, out_dir: str) -> list[str]:
        """Write `recall.csv`, `curves.csv`, `capacity.csv`, `summary.json` into `out_dir`; returns the paths."""
        os.makedirs(out_dir, exist_ok=True)
        return [write_csv(os.path.join(out_dir, "curves.csv"), self.curves, order=CURVE_COLUMNS),
                write_csv(os.path.join(out_dir, "recall.csv"), self.runs, order=RUN_COLUMNS),
                write_csv(os.path.join(out_dir, "capacity.csv"), self.capacity, order=CAPACITY_COLUMNS),
                atomic_write_json(os.path.join(out_dir, "summary.json"), self.summary)]

    @classmethod
    def load(cls, out_dir: str) -> "FactualResult":
        """Read back what `write` wrote (numeric columns as int64 / float64, text columns as strings)."""
        return cls(runs=read_csv(os.path.join(out_dir, "recall.csv")),
                   curves=read_csv(os.path.join(out_dir, "curves.csv")),
                   capacity=read_csv(os.path.join(out_dir, "capacity.csv")),
                   summary=read_json(os.path.join(out_dir, "summary.json")))

    def plot(self, out_dir: str) -> list[str]:
        """Write `curves.png`, `phase_diagram.png`, `facts_vs_params.png`; returns the paths."""
        return [plot_learning_curves(self, os.path.join(out_dir, "curves.png")),
                plot_recall_phase_diagram(self, os.path.join(out_dir, "phase_diagram.png")),
                plot_facts_vs_params(self, os.path.join(out_dir, "facts_vs_params.png"))]


def _runs_table(sweep: dict, family: str, d_head: int) -> dict:
    n = len(sweep["seed"])
    return dict(family=np.asarray([family] * n), model=np.asarray([model_kind(m) for m in sweep["m"]]),
                d=sweep["d"], m=sweep["m"], n_heads=sweep["n_heads"], d_head=np.full(n, d_head),
                n_params=sweep["n_params"], n_subjects=sweep["n_subjects"], n_facts=sweep["n_facts"],
                seed=sweep["seed"], accuracy=np.asarray(sweep["accuracy"], float),
                facts_recalled=np.asarray(sweep["facts_recalled"], float),
                final_loss=np.asarray(sweep["final_loss"], float), status=status_names(sweep["status"]))


def _curves_table(sweep: dict, task: FactualTask, training: FactualTraining, first_run: int = 0) -> dict:
    steps = curve_steps(training.steps, training.curve_points)
    n, p = sweep["curve_loss"].shape
    rep = lambda v: np.repeat(np.asarray(v), p)  # noqa: E731
    return dict(run=np.repeat(np.arange(first_run, first_run + n), p),
                model=rep([model_kind(m) for m in sweep["m"]]), d=rep(sweep["d"]), m=rep(sweep["m"]),
                n_heads=rep(sweep["n_heads"]), n_subjects=rep(sweep["n_subjects"]),
                n_attributes=np.full(n * p, task.n_attributes), seed=rep(sweep["seed"]), step=np.tile(steps, n),
                loss=np.asarray(sweep["curve_loss"], float).ravel(),
                accuracy=np.asarray(sweep["curve_accuracy"], float).ravel(),
                mass_A_r=np.asarray(sweep["curve_mass_A_r"], float).ravel())


def _concat(tables: list[dict]) -> dict:
    return {k: np.concatenate([np.asarray(t[k]) for t in tables]) for k in tables[0]}


def json_ready(obj):
    """`obj` with numpy scalars and arrays made plain Python and non-finite floats made `None` (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, np.ndarray)):
        return [json_ready(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _mean_se(values) -> tuple[float, float]:
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return float("nan"), float("nan")
    return float(v.mean()), (float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan"))


def plateau_summary(curves: dict) -> dict:
    """`find_plateau` of every curve run, and per `|A_r|` and model the mean and s.e. against `log |A_r|`.

    The reference `log |A_r|` is used only to report the relative error, never to locate the plateau.
    """
    per_run = []
    for run in np.unique(curves["run"]):
        sel = curves["run"] == run
        pl = find_plateau(curves["step"][sel], curves["loss"][sel])
        i = pl.index
        D = int(curves["n_attributes"][sel][0])
        per_run.append(dict(run=int(run), model=str(curves["model"][sel][0]), n_attributes=D,
                            seed=int(curves["seed"][sel][0]), found=pl.found, plateau_loss=pl.loss,
                            log_A_r=math.log(D), step=pl.step, decades=pl.decades,
                            accuracy_at_plateau=float(curves["accuracy"][sel][i]) if pl.found else float("nan"),
                            mass_A_r_at_plateau=float(curves["mass_A_r"][sel][i]) if pl.found else float("nan"),
                            final_loss=float(curves["loss"][sel][-1]),
                            final_accuracy=float(curves["accuracy"][sel][-1])))
    groups = {}
    for D in sorted({r["n_attributes"] for r in per_run}):
        for name in ("all",) + MODEL_KINDS:
            rows = [r for r in per_run if r["found"] and r["n_attributes"] == D and name in ("all", r["model"])]
            if not rows:
                continue
            mean, se = _mean_se([r["plateau_loss"] for r in rows])
            log_A_r = math.log(D)
            groups[f"|A_r|={D}, {name}"] = dict(
                n_attributes=D, model=name, log_A_r=log_A_r, plateau_loss=mean, plateau_loss_se=se,
                relative_error=(mean - log_A_r) / log_A_r, within_5_percent=bool(abs(mean - log_A_r) <= 0.05 * log_A_r),
                decades=_mean_se([r["decades"] for r in rows])[0],
                accuracy_at_plateau=_mean_se([r["accuracy_at_plateau"] for r in rows])[0],
                mass_A_r_at_plateau=_mean_se([r["mass_A_r_at_plateau"] for r in rows])[0], n_runs=len(rows))
    return dict(per_run=per_run, groups=groups, n_runs=len(per_run), n_found=sum(r["found"] for r in per_run))


def factual_experiment(task: FactualTask, training: FactualTraining, *, families=None,
                       curve_task: FactualTask | None = None, curve_archs=((64, 128, 4), (64, 0, 4)),
                       curve_seeds=(0, 1, 2, 3), curve_training: FactualTraining | None = None,
                       extra_attributes=(), options: RunOptions | None = None,
                       threshold: float = 0.99) -> FactualResult | None:
    """Learning curves (the hallucination plateau) and the capacity sweeps, with their summary.

    Sweeps, each one `factual_sweep` (resumable under `run_dir/<name>` when
    `options.run_dir` is set): `curves` (`curve_archs` x `curve_seeds` on
    `curve_task`, default `task`, with `curve_training`, default `training`);
    `curves_A<D>` for every `D` in `extra_attributes` (the first curve
    architecture on `curve_task` with `|A_r| = D`: does the plateau follow
    `log |A_r|`?); and one capacity sweep per entry of `families` (name ->
    `FactualGrid` on `task`; default `DEFAULT_FAMILIES`). Returns `None` while
    chunks are missing.
    """
    options = run_options(options)
    families = DEFAULT_FAMILIES if families is None else dict(families)
    if not families:
        raise ValueError("families must name at least one FactualGrid")
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must lie in (0, 1], got threshold={threshold}")
    curve_task = task if curve_task is None else curve_task
    curve_training = training if curve_training is None else curve_training
    sub = lambda name: options if options.run_dir is None else options.replace(  # noqa: E731
        run_dir=os.path.join(options.run_dir, name))

    curve_jobs = [("curves", curve_task, FactualGrid(subjects=(curve_task.n_subjects,), archs=curve_archs,
                                                     seeds=curve_seeds))]
    for D in extra_attributes:
        t = curve_task.replace(n_attributes=int(D))
        curve_jobs.append((f"curves_A{int(D)}", t, FactualGrid(subjects=(t.n_subjects,), archs=curve_archs[:1],
                                                               seeds=curve_seeds)))
    curve_sweeps = []
    for name, t, g in curve_jobs:
        out = factual_sweep(g, t, curve_training, options=sub(name))
        if out is None:
            return None
        curve_sweeps.append((t, out))
    capacity_sweeps = {}
    for name, g in families.items():
        out = factual_sweep(g, task, training, options=sub(f"capacity_{name}"))
        if out is None:
            return None
        capacity_sweeps[name] = out
    settings = dict(
        task=dataclasses.asdict(task), training=dataclasses.asdict(training),
        families={k: dict(subjects=list(g.subjects), archs=[list(a) for a in g.archs], seeds=list(g.seeds))
                  for k, g in families.items()},
        curve_archs=[list(a) for a in curve_jobs[0][2].archs], curve_seeds=list(curve_jobs[0][2].seeds),
        extra_attributes=[int(D) for D in extra_attributes])
    return factual_result(curve_sweeps, capacity_sweeps, curve_training=curve_training, d_head=training.d_head,
                          threshold=threshold, settings=settings)


def factual_result(curve_sweeps, capacity_sweeps, *, curve_training: FactualTraining, d_head: int,
                   threshold: float = 0.99, settings: dict | None = None) -> FactualResult:
    """Assemble a `FactualResult` from sweep outputs (`factual_sweep`).

    Args:
      curve_sweeps: list of `(FactualTask, sweep)` for the learning curves (all
        trained with `curve_training`); the first task is the main one, whose
        `log |A_r|` is the summary's `log_A_r`.
      capacity_sweeps: `{family name: sweep}` (all with head dimension `d_head`).
      threshold: recall needed to store a number of facts (`recall_capacity`).
      settings: JSON-ready settings copied into the summary.
    """
    if not curve_sweeps or not capacity_sweeps:
        raise ValueError("curve_sweeps and capacity_sweeps must not be empty")
    curve_tables, first = [], 0
    for t, out in curve_sweeps:
        curve_tables.append(_curves_table(out, t, curve_training, first))
        first += len(out["seed"])
    curves = _concat(curve_tables)
    runs = _concat([_runs_table(out, name, d_head) for name, out in capacity_sweeps.items()])
    curve_task = curve_sweeps[0][0]
    plateau = plateau_summary(curves)
    table = capacity_table(runs, threshold)
    main = plateau["groups"].get(f"|A_r|={curve_task.n_attributes}, all", {})
    nan = float("nan")
    summary = dict(
        plateau_loss=main.get("plateau_loss", nan), plateau_loss_se=main.get("plateau_loss_se", nan),
        log_A_r=curve_task.log_A_r, log_A=curve_task.log_A,
        plateau_relative_error=main.get("relative_error", nan),
        plateau_within_5_percent=bool(main.get("within_5_percent", False)),
        plateau=plateau,
        facts_stored_per_parameter_count=[{k: table[k][i] for k in CAPACITY_COLUMNS} for i in range(len(table["d"]))],
        facts_vs_params_fit=capacity_fits(runs, threshold),
        capacity_threshold=threshold, d_head=d_head, curve_task=dataclasses.asdict(curve_task),
        curve_training=dataclasses.asdict(curve_training),
        status_counts={str(k): int(np.sum(runs["status"] == k)) for k in np.unique(runs["status"])},
        **(settings or {}))
    return FactualResult(runs=runs, curves=curves, capacity=table, summary=json_ready(summary))


# ----------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------

_COLORS = {MODEL_KINDS[0]: "C0", MODEL_KINDS[1]: "C3"}


def _num(x) -> float:
    """A summary number (`None` written for NaN) as a float."""
    return float("nan") if x is None else float(x)


def plot_learning_curves(result: FactualResult, path: str) -> str:
    """Loss (top) and accuracy / mass on `A_r` (bottom) against steps, per model, with `log |A_r|` and `log |A|`.

    Curves with other `|A_r|` (`extra_attributes`) are drawn in the top panel with their own `log |A_r|` lines.
    """
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    c, s = result.curves, result.summary
    ct = s["curve_task"]
    D0 = ct["n_attributes"]
    fig = Figure(figsize=(8.4, 7.6))
    ax1, ax2 = fig.subplots(2, 1, sharex=True, gridspec_kw=dict(hspace=0.06, height_ratios=(1.5, 1)))
    per_run = {r["run"]: r for r in s["plateau"]["per_run"]}
    extra_styles = ["C2", "C4", "C5", "C6"]
    for gi, ((D, mk), group) in enumerate(_curve_groups(c).items()):
        main = D == D0
        color = _COLORS[mk] if main else extra_styles[gi % len(extra_styles)]
        runs = group
        t = c["step"][c["run"] == runs[0]] + 1
        L = np.stack([c["loss"][c["run"] == r] for r in runs])
        sel0 = c["run"] == runs[0]
        d, m, h = int(c["d"][sel0][0]), int(c["m"][sel0][0]), int(c["n_heads"][sel0][0])
        label = f"{mk} (d={d}, m={m}, H={h}), |A_r|={D}; {len(runs)} seeds"
        for row in L:
            ax1.plot(t, row, color=color, lw=0.6, alpha=0.35)
        ax1.plot(t, L.mean(0), color=color, lw=2 if main else 1.4, label=label)
        for r in runs:
            pr = per_run.get(int(r))
            if pr and pr["found"]:
                ax1.plot(pr["step"] + 1, pr["plateau_loss"], "o", ms=6, mfc="none", mew=1.2, color=color)
        if not main:
            ax1.axhline(math.log(D), color=color, ls="--", lw=0.9)
            continue
        acc = np.stack([c["accuracy"][c["run"] == r] for r in runs]).mean(0)
        mass = np.stack([c["mass_A_r"][c["run"] == r] for r in runs]).mean(0)
        ax2.plot(t, acc, color=color, lw=2, label=f"accuracy, {mk}")
        ax2.plot(t, mass, color=color, lw=1.5, ls="--", label=f"probability on $A_r$, {mk}")
    ax1.axhline(s["log_A_r"], color="k", ls="--", lw=1,
                label=rf"$\log|A_r|$ = {s['log_A_r']:.3f}: relation only (uniform on $A_r$)")
    ax1.axhline(s["log_A"], color="gray", ls=":", lw=1,
                label=rf"$\log|A|$ = {s['log_A']:.3f}: uniform on all attributes")
    ax1.set_xscale("log")
    ax1.set_ylabel("cross-entropy (nats)")
    ax1.set_ylim(bottom=0)
    ax1.legend(fontsize=7, loc="lower left", framealpha=0.92)
    ax1.set_title(f"Factual recall, S={ct['n_subjects']}, R={ct['n_relations']}, |A_r|={D0}, T={ct['length']}, "
                  f"{ct['n_noise']} noise tokens; online {s['curve_training']['optimizer']}, batch "
                  f"{s['curve_training']['batch_size']}, lr {s['curve_training']['learning_rate']:g}\n"
                  f"thin: seeds, thick: seed mean, circles: plateau (flattest interior point); |A_r|={D0}: "
                  f"plateau {_num(s['plateau_loss']):.3f} ± {_num(s['plateau_loss_se']):.3f} (s.e.) vs log|A_r| "
                  f"{s['log_A_r']:.3f}", fontsize=8.5)
    ax2.axhline(1.0 / D0, color="k", ls="--", lw=1, label=rf"$1/|A_r|$ = {1 / D0:.2f}: guessing within $A_r$")
    ax2.set_xlabel("training step (each point: mean of the fresh-batch metrics over a log-spaced window)")
    ax2.set_ylabel(f"fraction (|A_r|={D0})")
    ax2.set_ylim(-0.02, 1.02)
    ax2.legend(fontsize=7, loc="center right", framealpha=0.92)
    return save_figure(fig, path)


def _curve_groups(c: dict) -> dict:
    groups = {}
    for r in np.unique(c["run"]):
        sel = c["run"] == r
        groups.setdefault((int(c["n_attributes"][sel][0]), str(c["model"][sel][0])), []).append(int(r))
    return dict(sorted(groups.items(), key=lambda kv: (kv[0][0], MODEL_KINDS.index(kv[0][1]))))


def _log_index(values, grid) -> np.ndarray:
    """Position of `values` on a categorical axis whose ticks are `grid`, interpolated in log scale."""
    return np.interp(np.log(np.asarray(values, float)), np.log(np.asarray(grid, float)), np.arange(len(grid)))


def plot_recall_phase_diagram(result: FactualResult, path: str) -> str:
    """Seed-mean recall over (parameters, facts), one panel per sweep family, with the capacity `N*` curve."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    r, cap = result.runs, result.capacity
    thr = result.summary["capacity_threshold"]
    fams = list(dict.fromkeys(np.asarray(r["family"]).astype(str)))
    fig = Figure(figsize=(4.6 * len(fams) + 1.2, 5.4))
    axes = fig.subplots(1, len(fams), squeeze=False)[0]
    mesh = None
    for ax, fam in zip(axes, fams):
        sel = np.asarray(r["family"]).astype(str) == fam
        params = np.unique(r["n_params"][sel])
        facts = np.unique(r["n_facts"][sel])
        acc = np.full((facts.size, params.size), np.nan)
        for i, nf in enumerate(facts):
            for j, npar in enumerate(params):
                s = sel & (r["n_facts"] == nf) & (r["n_params"] == npar)
                if np.any(s):
                    acc[i, j] = np.asarray(r["accuracy"][s], float).mean()
        mesh = ax.pcolormesh(np.arange(params.size), np.arange(facts.size), acc, shading="nearest",
                             cmap="viridis", vmin=0, vmax=1)
        for i in range(facts.size):
            for j in range(params.size):
                if np.isfinite(acc[i, j]):
                    ax.text(j, i, f"{acc[i, j]:.2f}", ha="center", va="center", fontsize=7,
                            color="w" if acc[i, j] < 0.6 else "k")
        cs = np.asarray(cap["family"]).astype(str) == fam
        order = np.argsort(cap["n_params"][cs])
        xs = _log_index(cap["n_params"][cs][order], params)
        ys = _log_index(cap["facts_stored"][cs][order], facts)
        cens = np.asarray(cap["censored"][cs][order]).astype(str)
        ok = cens == "none"
        ax.plot(xs[ok], ys[ok], "r-o", lw=2, ms=5, label=f"facts stored N*: seed-mean recall crosses {thr:g}")
        if np.any(cens == "above"):
            ax.plot(xs[cens == "above"], np.full(np.sum(cens == "above"), facts.size - 0.5), "r^", ms=9,
                    clip_on=False, label="N* above the grid")
        if np.any(cens == "below"):
            ax.plot(xs[cens == "below"], np.full(np.sum(cens == "below"), -0.5), "rv", ms=9, clip_on=False,
                    label="N* below the grid")
        labels = []
        for npar in params:
            s = sel & (r["n_params"] == npar)
            labels.append(f"{npar}\nd={int(r['d'][s][0])} m={int(r['m'][s][0])}\nH={int(r['n_heads'][s][0])}")
        ax.set_xticks(np.arange(params.size), labels, fontsize=6.5)
        ax.set_yticks(np.arange(facts.size), [str(int(f)) for f in facts])
        ax.set_xlabel("trainable parameters (architecture)")
        ax.set_ylabel("facts S·R")
        varied = result.summary.get("facts_vs_params_fit", {}).get(fam, {}).get("varied", "")
        ax.set_title(f"{fam}: {model_kind(int(r['m'][sel][0]))}, {varied} varied\nrecall (mean over seeds)",
                     fontsize=9)
        ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.24), ncol=1, frameon=False)
    cb = fig.colorbar(mesh, ax=list(axes), fraction=0.03, pad=0.02)
    cb.set_label("recall accuracy (all facts × random contexts)")
    return save_figure(fig, path)


def plot_facts_vs_params(result: FactualResult, path: str) -> str:
    """Facts stored (`N*`) against parameters, log-log, per sweep family, with the fitted power laws."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    s, cap = result.summary, result.capacity
    fig = Figure(figsize=(6.6, 4.8))
    ax = fig.subplots()
    fams = list(dict.fromkeys(np.asarray(cap["family"]).astype(str)))
    markers = ["o", "s", "D", "^", "v"]
    xs_all, ys_all = [], []
    for k, fam in enumerate(fams):
        sel = np.asarray(cap["family"]).astype(str) == fam
        x = np.asarray(cap["n_params"][sel], float)
        y = np.asarray(cap["facts_stored"][sel], float)
        e = np.nan_to_num(np.asarray([_num(v) for v in cap["facts_stored_se"][sel]], float))
        cens = np.asarray(cap["censored"][sel]).astype(str)
        color = f"C{k}"
        fit = s["facts_vs_params_fit"].get(fam, {})
        lab = f"{fam} ({model_kind(int(cap['m'][sel][0]))}, {fit.get('varied', '')} varied)"
        ok = cens == "none"
        if fit and np.isfinite(_num(fit.get("exponent"))):
            lab += f": slope {fit['exponent']:.2f} [{_num(fit['ci_low']):.2f}, {_num(fit['ci_high']):.2f}]"
            xx = np.geomspace(x[ok].min(), x[ok].max(), 50)                   # over the fitted points only
            ax.plot(xx, np.exp(fit["intercept"]) * xx ** fit["exponent"], color=color, lw=1)
        ax.errorbar(x[ok], y[ok], yerr=e[ok], fmt=markers[k % len(markers)], color=color, capsize=3, label=lab)
        if np.any(~ok):
            ax.plot(x[cens == "above"], y[cens == "above"], "^", color=color, ms=8, mfc="none")
            ax.plot(x[cens == "below"], y[cens == "below"], "v", color=color, ms=8, mfc="none")
        xs_all.extend(x)
        ys_all.extend(y[ok])
    if xs_all and ys_all:
        xx = np.geomspace(min(xs_all), max(xs_all), 10)
        c0 = np.exp(np.median(np.log(ys_all)) - np.log(np.median(xs_all)))
        ax.plot(xx, c0 * xx, "k:", lw=1, label="slope 1 (facts ∝ parameters)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("trainable parameters  4 H d_h d + 2 m d")
    ax.set_ylabel("facts stored N* (facts S·R)")
    steps = s.get("training", {}).get("steps", "?")
    ax.set_title(f"Facts stored N* (seed-mean recall crosses {s['capacity_threshold']:g}) against parameter count, "
                 f"{steps} online steps per run\nerror bars: s.e. of the per-seed N*; brackets: 95% interval of the "
                 "slope (seeds resampled); open triangles: N* outside the grid", fontsize=8)
    ax.legend(fontsize=7, loc="upper left", framealpha=0.9)
    return save_figure(fig, path)
