"""Counting phase diagrams over embedding size `d` and hidden size `p` (Behrens, Biggio, Zdeborová 2024).

Model (pure functions on a parameter dict): token embedding `x_i = E[t_i]`
of size `d`; token mixing `A` either by dot-product attention
`a_ij = <x_i W_Q, x_j W_K> / sqrt(d)` or by a learned position-only matrix
`a_ij = c_ij` ("linear"), with or without a row softmax; residual
`h = x + A x`; feed-forward `ReLU(h W_1 + b_1) W_2 + b_2` of hidden size `p`
giving logits over the classes `0..L`. An optional BOS token is prepended.
No positional embeddings: the linear mixing is the only positional path.

Padding: parameters are allocated at `(d_max, p_max)` and the first `d`
embedding and `p` hidden units are used; the rest is multiplied by 0 in the
forward pass, so it gets zero gradient and Adam never moves it (its update is
`0 / (sqrt(0) + eps) = 0`). A padded run is the unpadded run (same init
draws: the unpadded init is the top-left slice of the padded one), which is
what lets a configuration's whole `(d, p)` grid be one vmapped call.

`counting_run(seed, d, p, ...)` trains one model online (a fresh batch every
step, Adam) and measures its accuracy on fresh sequences; `counting_sweep`
vmaps it over `(d, p, seed)` in resumable chunks. Explicit constructions:
`relation_counting_params` (dot + BOS + softmax, `d >= T`, `p = 1`) and
`inventory_counting_params` (linear mixing, `d >= T`, `p = T`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from phasejax.sweep import RunOptions, run_chunked, run_options
from phasejax.tasks.histogram import (
    HistogramTask,
    masked_accuracy,
    masked_cross_entropy,
    sample_batch,
    train_online,
)

Array = jax.Array
F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class CountingConfig:
    """Token mixing `"dot"` or `"linear"`, with or without softmax, with or without BOS."""

    mixing: str = "dot"
    softmax: bool = True
    bos: bool = False

    def __post_init__(self):
        if self.mixing not in ("dot", "linear"):
            raise ValueError(f"mixing must be 'dot' or 'linear', got {self.mixing!r}")

    @property
    def name(self) -> str:
        return self.mixing + ("+BOS" if self.bos else "") + ("+softmax" if self.softmax else "")

    @classmethod
    def from_name(cls, name: str) -> "CountingConfig":
        if name not in COUNTING_CONFIGS:
            raise ValueError(f"unknown configuration {name!r}; choose from {tuple(COUNTING_CONFIGS)}")
        return COUNTING_CONFIGS[name]


COUNTING_CONFIGS = {c.name: c for c in (
    CountingConfig("linear", False), CountingConfig("linear", True), CountingConfig("dot", False),
    CountingConfig("dot", True), CountingConfig("dot", False, True), CountingConfig("dot", True, True))}
"""The six configurations of the paper: linear, linear+softmax, dot, dot+softmax, dot+BOS, dot+BOS+softmax."""


def _task_for(task: HistogramTask, cfg: CountingConfig) -> HistogramTask:
    return dataclasses.replace(task, bos=cfg.bos)


def init_counting_params(key: Array, task: HistogramTask, cfg: CountingConfig, d, p, d_max: int, p_max: int) -> dict:
    """Initial parameters at padded shapes `(d_max, p_max)`; `d`, `p` (may be traced) set the init scales.

    `E ~ N(0, 1)`, `W_Q, W_K, W_1 ~ N(0, 1/d)`, `W_2 ~ N(0, 1/p)`, `C ~ N(0, 1/L)`, biases 0.
    """
    tk = _task_for(task, cfg)
    kE, kQ, kK, kC, k1, k2 = jax.random.split(key, 6)
    d_s, p_s = jnp.sqrt(jnp.asarray(d, F32)), jnp.sqrt(jnp.asarray(p, F32))
    params = dict(
        E=jax.random.normal(kE, (tk.vocab, d_max), F32),
        W1=jax.random.normal(k1, (d_max, p_max), F32) / d_s,
        b1=jnp.zeros((p_max,), F32),
        W2=jax.random.normal(k2, (p_max, tk.n_classes), F32) / p_s,
        b2=jnp.zeros((tk.n_classes,), F32),
    )
    if cfg.mixing == "dot":
        params["WQ"] = jax.random.normal(kQ, (d_max, d_max), F32) / d_s
        params["WK"] = jax.random.normal(kK, (d_max, d_max), F32) / d_s
    else:
        params["C"] = jax.random.normal(kC, (tk.length, tk.length), F32) / np.sqrt(tk.length)
    return params


def unpad(params: dict, d: int, p: int) -> dict:
    """The top-left `(d, p)` slice of padded parameters (the unpadded model of the same init)."""
    out = dict(params)
    out["E"] = params["E"][:, :d]
    out["W1"] = params["W1"][:d, :p]
    out["b1"] = params["b1"][:p]
    out["W2"] = params["W2"][:p]
    for k in ("WQ", "WK"):
        if k in params:
            out[k] = params[k][:d, :d]
    return out


def mixing_matrix(params: dict, x: Array, cfg: CountingConfig, d) -> Array:
    """`A (..., length, length)`: attention scores or `C`, row-softmaxed if `cfg.softmax` (stable)."""
    if cfg.mixing == "dot":
        md = (jnp.arange(params["WQ"].shape[0]) < d).astype(x.dtype)
        mask2 = md[:, None] * md[None, :]
        q = x @ (params["WQ"] * mask2)
        k = x @ (params["WK"] * mask2)
        scores = q @ jnp.swapaxes(k, -1, -2) / jnp.sqrt(jnp.asarray(d, x.dtype))
    else:
        scores = jnp.broadcast_to(params["C"], x.shape[:-2] + params["C"].shape)
    return jax.nn.softmax(scores, axis=-1) if cfg.softmax else scores


def counting_logits(params: dict, tokens: Array, cfg: CountingConfig, d, p) -> Array:
    """Logits `(n, length, L + 1)` for model tokens `(n, length)`, using the first `d` / `p` units."""
    d_max, p_max = params["E"].shape[1], params["b1"].shape[0]
    md = (jnp.arange(d_max) < d).astype(F32)
    mp = (jnp.arange(p_max) < p).astype(F32)
    x = params["E"][tokens] * md
    h = x + mixing_matrix(params, x, cfg, d) @ x
    z = jax.nn.relu(h @ (params["W1"] * md[:, None] * mp[None, :]) + params["b1"] * mp)
    return z @ (params["W2"] * mp[:, None]) + params["b2"]


def train_counting(params0: dict, key: Array, task: HistogramTask, cfg: CountingConfig, d, p, *, steps: int,
                   batch_size: int = 128, learning_rate: float = 1e-3) -> tuple[dict, Array]:
    """Adam on fresh batches (online: one new batch per step). Returns `(params, losses (steps,))`."""
    tk = _task_for(task, cfg)
    return train_online(lambda prm, tokens, labels: masked_cross_entropy(counting_logits(prm, tokens, cfg, d, p),
                                                                        labels),
                        params0, key, lambda k: sample_batch(k, tk, batch_size), steps=steps,
                        optimizer=optax.adam(learning_rate))


def counting_accuracy(params: dict, key: Array, task: HistogramTask, cfg: CountingConfig, d, p,
                      n_test: int = 4096) -> Array:
    """Per-token accuracy on `n_test` fresh sequences (BOS position not scored)."""
    tokens, labels = sample_batch(key, _task_for(task, cfg), n_test)
    return masked_accuracy(counting_logits(params, tokens, cfg, d, p), labels)


def counting_run(seed, d, p, *, task: HistogramTask, cfg: CountingConfig, d_max: int, p_max: int, steps: int,
                 batch_size: int = 128, learning_rate: float = 1e-3, n_test: int = 4096) -> dict[str, Array]:
    """One run (pure in `seed`, `d`, `p`; vmap over them): init, online Adam, fresh-sample accuracy."""
    k_init, k_train, k_test = jax.random.split(jax.random.PRNGKey(seed), 3)
    params0 = init_counting_params(k_init, task, cfg, d, p, d_max, p_max)
    params, losses = train_counting(params0, k_train, task, cfg, d, p, steps=steps, batch_size=batch_size,
                                    learning_rate=learning_rate)
    tail = max(1, steps // 10)
    return dict(accuracy=counting_accuracy(params, k_test, task, cfg, d, p, n_test),
                final_loss=jnp.mean(losses[-tail:]))


@dataclasses.dataclass(frozen=True)
class CountingGrid:
    """`(d, p, seed)` grid of one configuration; `tasks()` is the flat table (order `d, p, seed`)."""

    ds: tuple[int, ...] = tuple(2**k for k in range(8))
    ps: tuple[int, ...] = tuple(2**k for k in range(8))
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)

    def __post_init__(self):
        for name in ("ds", "ps", "seeds"):
            vals = tuple(int(v) for v in np.atleast_1d(getattr(self, name)))
            object.__setattr__(self, name, vals)
            if not vals:
                raise ValueError(f"{name} must not be empty")
        if min(self.ds) < 1 or min(self.ps) < 1:
            raise ValueError(f"d and p must be >= 1, got ds={self.ds}, ps={self.ps}")
        if min(self.seeds) < 0:
            raise ValueError(f"seeds must be >= 0, got {self.seeds}")

    def tasks(self) -> dict[str, np.ndarray]:
        d, p, s = np.meshgrid(self.ds, self.ps, self.seeds, indexing="ij")
        return dict(d=d.ravel().astype(np.int32), p=p.ravel().astype(np.int32), seed=s.ravel().astype(np.int64))


def counting_sweep(grid: CountingGrid, task: HistogramTask, cfg: CountingConfig, *, steps: int, batch_size: int = 128,
                   learning_rate: float = 1e-3, n_test: int = 4096,
                   options: RunOptions | None = None) -> dict[str, np.ndarray] | None:
    """Train every `(d, p, seed)` of `grid` for one configuration, padded to the grid's largest `d`, `p`.

    Each chunk is one compiled `vmap` of `counting_run`, sharded over `devices`,
    written atomically under `run_dir` and skipped on a re-run (see
    `phasejax.sweep.run_chunked`; `options` as there, default `RunOptions(chunk_size=64)`).
    Returns the task columns plus `accuracy` and `final_loss`, or `None` while chunks are missing.
    """
    options = run_options(options if options is not None else RunOptions(chunk_size=64))

    for name, value in (("steps", steps), ("batch_size", batch_size), ("n_test", n_test)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {name}={value}")
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
    d_max, p_max = max(grid.ds), max(grid.ps)

    def fn(chunk):
        one = lambda s, d, p: counting_run(s, d, p, task=task, cfg=cfg, d_max=d_max, p_max=p_max,  # noqa: E731
                                           steps=steps, batch_size=batch_size, learning_rate=learning_rate,
                                           n_test=n_test)
        return jax.vmap(one)(jnp.asarray(chunk["seed"]), jnp.asarray(chunk["d"]), jnp.asarray(chunk["p"]))

    config = dict(kind="counting_sweep", config=cfg.name, T=task.T, L=task.L, ds=list(grid.ds), ps=list(grid.ps),
                  seeds=list(grid.seeds), steps=steps, batch_size=batch_size, learning_rate=learning_rate,
                  n_test=n_test, optimizer="adam", data="online (fresh batch per step)")
    tasks = grid.tasks()
    out = run_chunked(fn, tasks, config, options)
    if out is None:
        return None
    out = dict(out)
    out.update(tasks)
    return out


# ----------------------------------------------------------------------------
# Explicit constructions
# ----------------------------------------------------------------------------


def relation_counting_params(task: HistogramTask, d: int | None = None, scale: float = 30.0) -> dict:
    """Relation-based counting, dot + BOS + softmax, `d >= T`, `p = 1` (unpadded parameters).

    Tokens embed one-hot `e_t`, BOS embeds `1_T` (ones on the token dims), and
    `W_Q = W_K = c I` with `c^2 / sqrt(d) = scale`: a token scores `scale` on
    every copy of itself and on BOS, 0 elsewhere, so the softmax puts `1/(k+1)`
    on BOS for a token occurring `k` times. Then `1_T . h = 2 + (T-1)/(k+1)`;
    one ReLU unit reads `z = (T-1)/(k+1)` and the logits `2 g_c z - g_c^2`,
    `g_c = (T-1)/(c+1)`, peak at `c = k`.
    """
    T, L = task.T, task.L
    d = T if d is None else d
    if d < T:
        raise ValueError(f"the relation construction needs d >= T, got d={d}, T={T}")
    if T < 2:
        raise ValueError("the relation construction needs T >= 2")
    E = np.zeros((T + 1, d), np.float32)
    E[np.arange(T), np.arange(T)] = 1.0
    E[T, :T] = 1.0
    c = np.sqrt(scale * np.sqrt(d))
    ones = np.zeros((d, 1), np.float32)
    ones[:T, 0] = 1.0
    g = np.array([0.0] + [(T - 1) / (k + 1) for k in range(1, L + 1)], np.float32)
    b2 = -(g**2)
    b2[0] = -1e3   # count 0 never occurs
    return dict(E=jnp.asarray(E), WQ=c * jnp.eye(d, dtype=F32), WK=c * jnp.eye(d, dtype=F32),
                W1=jnp.asarray(ones), b1=jnp.asarray([-2.0], F32), W2=jnp.asarray(2 * g[None, :]), b2=jnp.asarray(b2))


def inventory_counting_params(task: HistogramTask, d: int | None = None, softmax: bool = False) -> dict:
    """Inventory-based counting, linear mixing, `d >= T`, `p = T` (unpadded parameters).

    One-hot tokens; uniform mixing `a_ij = 1/L` (`C = 1/L`, or `C = 0` under a
    softmax) puts the sequence's histogram `sum_t n_t e_t / L` in every
    position; hidden unit `t` computes `ReLU(L h_t - L) = n_t [t = t_i]`, so
    the units sum to the count `k`, and the logits `2 c k - c^2` peak at `c = k`.
    """
    T, L = task.T, task.L
    d = T if d is None else d
    if d < T:
        raise ValueError(f"the inventory construction needs d >= T, got d={d}, T={T}")
    E = np.zeros((T, d), np.float32)
    E[np.arange(T), np.arange(T)] = 1.0
    W1 = np.zeros((d, T), np.float32)
    W1[np.arange(T), np.arange(T)] = L
    cls = np.arange(L + 1, dtype=np.float32)
    C = np.zeros((L, L), np.float32) if softmax else np.full((L, L), 1.0 / L, np.float32)
    return dict(E=jnp.asarray(E), C=jnp.asarray(C), W1=jnp.asarray(W1), b1=jnp.full((T,), -float(L), F32),
                W2=jnp.asarray(np.tile(2 * cls[None, :], (T, 1))), b2=jnp.asarray(-(cls**2)))
