"""A single-layer transformer on a binary first-order Markov chain (Makkuva et al. 2024, issue 13 part A).

Data: binary chains `s_1 .. s_N` with transition matrix `P = [[1-p, p], [q, 1-q]]`
started from the stationary law `pi = (q, p) / (p + q)`, so every position is
stationary; training is online (a fresh batch of chains every step).

Model (pure functions on a parameter dict, one head, no layer norm):

    x_n = s_n e + pos_n                                   (embedding e (d,), learned positions (N, d))
    y_n = x_n + W_O^T sum_{i <= n} att_{n,i} W_V^T x_i    (causal softmax attention,
                                                          scores <W_Q^T x_n, W_K^T x_i> / sqrt(d))
    z_n = y_n + W_2^T ReLU(W_1^T y_n)                     (feed-forward of width r)
    logit_n = <a, z_n> + b,   a = e when tied             (P_theta(s_{n+1} = 1 | s_1..s_n) = sigmoid(logit_n))

(the code uses row vectors: `x @ W`). The loss is the next-token binary
cross-entropy in nats averaged over the `N - 1` predicted positions.

Facts (all checked in `tests/tasks/test_markov.py`):

* the best loss is the entropy rate `H(s_2 | s_1) = (q h(p) + p h(q)) / (p + q)`,
  reached by `kernel_params` (the model predicts `P(s_{n+1} | s_n)`);
* the stationary predictor (`sigmoid(logit) = pi_1`) has loss `H(pi)`;
* `bad_critical_point(params, p, q)`: `e = 0`, `a = 0`, `W_O = 0`, `W_2 = 0`,
  `b = log(p / q)`, every other weight arbitrary. There the logit is
  `s_n |e|^2 + <e, pos_n> + b` in `(e, b)` (tied) and the model outputs `pi_1`;
  the gradient vanishes for any `(p, q)` (every other input to the logit is
  deterministic at `e = 0`, and `E[s_{n+1}] = pi_1`) and the Hessian is zero outside
  the `(e, b)` block (tied) or the `(e, a, b)` block (untied), with
  `d^2 L / de de = 2 kappa I + pi_0 pi_1 mean_n pos_n pos_n^T`, `kappa = pi_0 pi_1 (p + q - 1)`
  (tied), and `d^2 L / de da = kappa I`, `d^2 L / de de = 0` (untied)
  (`predicted_critical_spectrum`). Tied and `p + q > 1`: positive semi-definite,
  positive definite in `(e, b)` and exactly flat in the free weights, so a
  (non-strict) local minimum; tied and `p + q < 1`, or untied: a saddle.
  `critical_point_check` computes the exact gradient and Hessian (enumerating
  every chain of a short length, float64) and compares them with the closed form.

`markov_run` trains one Gaussian-initialised model online (SGD by default, the
closest to the gradient flow of the theory; AdamW as an option) and measures its
population loss with exact control variates (`estimate_population_loss`);
`markov_sweep` vmaps it over a `(p, q)` grid x tied/untied x seeds in resumable
chunks (`phasejax.sweep.run_chunked`) and returns a `MarkovSweep` (CSV/JSON files).
The rank-one reduced model and its gradient flow are in `phasejax.tasks.markov_reduced`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

from phasejax.precision import check_float_dtype

Array = jax.Array
F32 = jnp.float32


# ----------------------------------------------------------------------------
# Input checks (concrete values only: traced values are left to the caller)
# ----------------------------------------------------------------------------


def _concrete(x) -> np.ndarray | None:
    """`x` as a numpy array when it is concrete, `None` when it is a tracer."""
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(x)):
        return None
    return np.asarray(x)


def check_probability(name: str, value) -> None:
    """`ValueError` naming `name` unless every concrete entry of `value` lies in the open interval (0, 1)."""
    v = _concrete(value)
    if v is None:
        return
    if not np.all(np.isfinite(v)) or np.any(v <= 0) or np.any(v >= 1):
        raise ValueError(f"{name} must lie in (0, 1), got {name}={v.tolist() if v.ndim else float(v)}")


def check_positive_int(name: str, value, minimum: int = 1) -> int:
    """`int(value)` if it is an integer `>= minimum`, else `ValueError` naming `name`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {name}={value!r}")
    return int(value)


# ----------------------------------------------------------------------------
# The Markov chain: sampling and closed forms
# ----------------------------------------------------------------------------


def stationary_law(p, q, dtype=F32) -> Array:
    """`pi = (q, p) / (p + q)`, shape `p.shape + (2,)`: the stationary law of `P = [[1-p, p], [q, 1-q]]`."""
    check_probability("p", p)
    check_probability("q", q)
    p, q = jnp.asarray(p, dtype), jnp.asarray(q, dtype)
    return jnp.stack([q, p], -1) / (p + q)[..., None]


def binary_entropy(x, dtype=F32) -> Array:
    """`h(x) = -x log x - (1 - x) log(1 - x)` in nats (`h(0) = h(1) = 0`)."""
    x = jnp.asarray(x, dtype)
    xlogx = lambda u: jnp.where(u > 0, u * jnp.log(jnp.where(u > 0, u, 1)), 0)  # noqa: E731
    return -xlogx(x) - xlogx(1 - x)


def entropy_rate(p, q, dtype=F32) -> Array:
    """`H(s_{n+1} | s_n) = (q h(p) + p h(q)) / (p + q)` in nats: the best next-token loss."""
    check_probability("p", p)
    check_probability("q", q)
    p, q = jnp.asarray(p, dtype), jnp.asarray(q, dtype)
    return (q * binary_entropy(p, dtype) + p * binary_entropy(q, dtype)) / (p + q)


def stationary_entropy(p, q, dtype=F32) -> Array:
    """`H(pi) = h(p / (p + q))` in nats: the loss of the stationary (unigram) predictor."""
    check_probability("p", p)
    check_probability("q", q)
    p, q = jnp.asarray(p, dtype), jnp.asarray(q, dtype)
    return binary_entropy(p / (p + q), dtype)


def sample_chains(key: Array, p, q, n_chains: int, length: int, dtype=F32) -> Array:
    """`n_chains` stationary chains of `length >= 2` states, shape `(n_chains, length)`, values 0/1 in `dtype`.

    `s_1 ~ Bernoulli(pi_1)`, `s_{n+1} ~ Bernoulli(p)` after a 0 and `Bernoulli(1 - q)` after a 1.
    Pure and vmappable in `key`, `p`, `q` (scalars).
    """
    check_probability("p", p)
    check_probability("q", q)
    n_chains = check_positive_int("n_chains", n_chains)
    length = check_positive_int("length", length, 2)
    dtype = check_float_dtype(dtype)
    p, q = jnp.asarray(p, dtype), jnp.asarray(q, dtype)
    u = jax.random.uniform(key, (length, n_chains), dtype)
    s1 = (u[0] < p / (p + q)).astype(dtype)

    def step(s, u_n):
        nxt = jnp.where(s > 0.5, u_n < 1 - q, u_n < p).astype(dtype)
        return nxt, nxt

    _, rest = jax.lax.scan(step, s1, u[1:])
    return jnp.concatenate([s1[None], rest], 0).T


def all_chains(length: int, max_length: int = 20) -> np.ndarray:
    """Every binary chain of `length` states, `(2^length, length)` float64 (for exact expectations)."""
    length = check_positive_int("length", length, 1)
    if length > max_length:
        raise ValueError(f"length must be <= {max_length} to enumerate all 2^length chains, got length={length}")
    idx = np.arange(2**length)
    return ((idx[:, None] >> np.arange(length - 1, -1, -1)[None, :]) & 1).astype(np.float64)


def chain_probabilities(chains, p, q, dtype=F32) -> Array:
    """Probability of each chain `(M, N)` under the stationary start and `P`: `pi(s_1) prod_n P(s_n, s_{n+1})`."""
    check_probability("p", p)
    check_probability("q", q)
    s = jnp.asarray(chains, dtype)
    p, q = jnp.asarray(p, dtype), jnp.asarray(q, dtype)
    pi1 = p / (p + q)
    first = jnp.where(s[:, 0] > 0.5, pi1, 1 - pi1)
    prev, nxt = s[:, :-1], s[:, 1:]
    to_one = jnp.where(prev > 0.5, 1 - q, p)           # P(s_{n+1} = 1 | s_n)
    trans = jnp.where(nxt > 0.5, to_one, 1 - to_one)
    return first * jnp.prod(trans, axis=1)


# ----------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------

PARAM_NAMES = ("e", "a", "pos", "W_Q", "W_K", "W_V", "W_O", "W_1", "W_2", "b")
"""Keys of a parameter dict: embedding `e (d,)`, readout `a (d,)` (unused when tied), positions `pos (N, d)`,
attention `W_Q, W_K, W_V, W_O (d, d)`, feed-forward `W_1 (d, r)`, `W_2 (r, d)`, readout bias `b ()`."""


def init_markov_params(key: Array, d: int, length: int, hidden: int | None = None, init_std=0.02,
                       dtype=F32) -> dict:
    """Gaussian initialisation: every weight `~ N(0, init_std^2)` i.i.d., `b = 0`.

    `init_std = 0.02` is the GPT-2 convention used by Makkuva et al. (2024).
    `hidden` defaults to `4 d`. `init_std` may be traced (vmap over it).
    """
    d = check_positive_int("d", d)
    length = check_positive_int("length", length, 2)
    hidden = 4 * d if hidden is None else check_positive_int("hidden", hidden)
    dtype = check_float_dtype(dtype)
    std = _concrete(init_std)
    if std is not None and not (np.all(np.isfinite(std)) and np.all(std >= 0)):
        raise ValueError(f"init_std must be a finite number >= 0, got init_std={init_std!r}")
    shapes = dict(e=(d,), a=(d,), pos=(length, d), W_Q=(d, d), W_K=(d, d), W_V=(d, d), W_O=(d, d),
                  W_1=(d, hidden), W_2=(hidden, d))
    keys = jax.random.split(key, len(shapes))
    std = jnp.asarray(init_std, dtype)
    params = {name: std * jax.random.normal(k, shape, dtype) for (name, shape), k in zip(shapes.items(), keys)}
    params["b"] = jnp.zeros((), dtype)
    return params


def readout(params: dict, tied) -> Array:
    """The readout vector `a (d,)`: `e` when `tied` is 1, `params["a"]` when 0 (`tied` may be traced).

    Written as `tied * e + (1 - tied) * a`, so a tied model gives `a` exactly zero gradient and
    Adam never moves it: tied and untied runs share one parameter structure and vmap together.
    """
    t = jnp.asarray(tied, params["e"].dtype)
    return t * params["e"] + (1 - t) * params["a"]


def embed(params: dict, states: Array) -> Array:
    """Inputs `x_n = s_n e + pos_n`, shape `(..., N, d)`, for states `(..., N)` (0/1 floats)."""
    s = jnp.asarray(states, params["e"].dtype)
    return s[..., None] * params["e"] + params["pos"][: s.shape[-1]]


def attention_weights(params: dict, x: Array) -> Array:
    """Causal softmax attention `(..., N, N)` (rows sum to 1) of inputs `x (..., N, d)`:
    `softmax_{i <= n} <x_n W_Q, x_i W_K> / sqrt(d)`."""
    n, d = x.shape[-2], x.shape[-1]
    scores = (x @ params["W_Q"]) @ jnp.swapaxes(x @ params["W_K"], -1, -2) / jnp.sqrt(jnp.asarray(d, x.dtype))
    return jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((n, n), bool)), scores, -jnp.inf), axis=-1)


def markov_logits(params: dict, states: Array, tied) -> Array:
    """Logits `(..., N)` of `P(s_{n+1} = 1 | s_1..s_n)` for states `(..., N)` (0/1 floats); see the module docstring."""
    x = embed(params, states)
    y = x + (attention_weights(params, x) @ (x @ params["W_V"])) @ params["W_O"]
    z = y + jax.nn.relu(y @ params["W_1"]) @ params["W_2"]
    return z @ readout(params, tied) + params["b"]


def next_token_losses(logits: Array, states: Array) -> Array:
    """Per-position cross-entropy `(..., N - 1)` in nats of `logits[..., :-1]` against `states[..., 1:]`.

    `softplus(l) - s l` (stable for any `l`).
    """
    l, target = logits[..., :-1], jnp.asarray(states, logits.dtype)[..., 1:]
    return jax.nn.softplus(l) - target * l


def markov_loss(params: dict, states: Array, tied) -> Array:
    """Mean next-token cross-entropy over chains `(M, N)` and the `N - 1` predicted positions."""
    return jnp.mean(next_token_losses(markov_logits(params, states, tied), states))


def population_loss(params: dict, p, q, tied, length: int | None = None) -> Array:
    """Exact expected loss `E[markov_loss]` by enumerating all `2^N` chains (`N <= 20`; `N` = positions if None)."""
    n = params["pos"].shape[0] if length is None else length
    chains = all_chains(n)
    dt = params["e"].dtype
    w = chain_probabilities(chains, p, q, dt)
    per_chain = jnp.mean(next_token_losses(markov_logits(params, jnp.asarray(chains, dt), tied),
                                           jnp.asarray(chains, dt)), axis=-1)
    return jnp.sum(w * per_chain)


# ----------------------------------------------------------------------------
# Explicit constructions
# ----------------------------------------------------------------------------


def _log_odds(x):
    return jnp.log(x) - jnp.log1p(-x)


def kernel_params(p, q, d: int, length: int, hidden: int | None = None, dtype=F32) -> dict:
    """A global minimum (tied and untied): the model predicts `P(s_{n+1} = 1 | s_n)`, loss = entropy rate.

    Attention off (`W_O = 0`), `pos = 0`, `e = a = u_1` (first unit vector), one
    feed-forward unit with `W_1[0, 0] = alpha`, `W_2[0, 0] = beta`, so
    `logit_n = (1 + alpha beta) s_n + b` (`s_n >= 0` keeps the ReLU linear).
    `1 + alpha beta = Delta* = logit(1 - q) - logit(p)` and `b = logit(p)`.
    """
    check_probability("p", p)
    check_probability("q", q)
    d = check_positive_int("d", d)
    length = check_positive_int("length", length, 2)
    hidden = 4 * d if hidden is None else check_positive_int("hidden", hidden)
    dtype = check_float_dtype(dtype)
    p, q = jnp.asarray(p, dtype), jnp.asarray(q, dtype)
    delta = _log_odds(1 - q) - _log_odds(p)
    ab = delta - 1                                           # alpha beta
    alpha = jnp.sqrt(jnp.abs(ab))
    beta = jnp.sign(ab) * alpha
    u = jnp.zeros((d,), dtype).at[0].set(1)
    zeros = lambda *s: jnp.zeros(s, dtype)  # noqa: E731
    return dict(e=u, a=u, pos=zeros(length, d), W_Q=zeros(d, d), W_K=zeros(d, d), W_V=zeros(d, d),
                W_O=zeros(d, d), W_1=zeros(d, hidden).at[0, 0].set(alpha), W_2=zeros(hidden, d).at[0, 0].set(beta),
                b=_log_odds(p))


def bad_critical_point(params: dict, p, q) -> dict:
    """The stationary ("unigram") critical point `theta_pi` built from `params`: `e = a = 0`, `W_O = 0`,
    `W_2 = 0`, `b = log(p / q)`; positions, `W_Q, W_K, W_V, W_1` are kept as given (arbitrary).

    There the logit is `b` for every input, i.e. the model predicts `pi_1 = p / (p + q)` (loss `H(pi)`).
    """
    check_probability("p", p)
    check_probability("q", q)
    dt = params["e"].dtype
    out = dict(params)
    for k in ("e", "a", "W_O", "W_2"):
        out[k] = jnp.zeros_like(params[k])
    out["b"] = jnp.log(jnp.asarray(p, dt)) - jnp.log(jnp.asarray(q, dt))
    return out


# ----------------------------------------------------------------------------
# Training and evaluation
# ----------------------------------------------------------------------------


def markov_optimizer(learning_rate: float, steps: int, *, weight_decay: float = 0.0, b1: float = 0.9,
                     b2: float = 0.95, warmup_fraction: float = 0.02, schedule: str = "cosine",
                     optimizer: str = "sgd", grad_clip: float = 0.0) -> optax.GradientTransformation:
    """Plain SGD (or AdamW) with linear warm-up over `warmup_fraction * steps` then cosine decay to 0
    (`schedule="cosine"`) or a constant rate (`"constant"`); Makkuva et al. use AdamW, betas (0.9, 0.95).

    `grad_clip > 0` first clips the gradient to that global norm (0: no clipping).
    """
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got learning_rate={learning_rate}")
    steps = check_positive_int("steps", steps)
    if not 0 <= warmup_fraction < 1:
        raise ValueError(f"warmup_fraction must lie in [0, 1), got warmup_fraction={warmup_fraction}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got weight_decay={weight_decay}")
    if schedule not in ("cosine", "constant"):
        raise ValueError(f"schedule must be 'cosine' or 'constant', got schedule={schedule!r}")
    if optimizer not in ("adamw", "sgd"):
        raise ValueError(f"optimizer must be 'adamw' or 'sgd', got optimizer={optimizer!r}")
    if not (math.isfinite(grad_clip) and grad_clip >= 0):
        raise ValueError(f"grad_clip must be a finite number >= 0, got grad_clip={grad_clip}")
    warmup = int(warmup_fraction * steps)
    if schedule == "cosine":
        lr = optax.warmup_cosine_decay_schedule(0.0, learning_rate, max(warmup, 1), steps, end_value=0.0) \
            if warmup > 0 else optax.cosine_decay_schedule(learning_rate, steps)
    else:
        lr = optax.linear_schedule(0.0, learning_rate, warmup) if warmup > 0 else learning_rate
        if warmup > 0:
            lr = optax.join_schedules([lr, optax.constant_schedule(learning_rate)], [warmup])
    if optimizer == "sgd":
        tx = optax.chain(optax.add_decayed_weights(weight_decay), optax.sgd(lr)) if weight_decay else optax.sgd(lr)
    else:
        tx = optax.adamw(lr, b1=b1, b2=b2, weight_decay=weight_decay)
    return optax.chain(optax.clip_by_global_norm(grad_clip), tx) if grad_clip > 0 else tx


def train_markov(params0: dict, key: Array, p, q, tied, *, steps: int, batch_size: int,
                 optimizer: optax.GradientTransformation) -> tuple[dict, Array]:
    """`steps` optimiser steps, each on `batch_size` fresh chains (online); returns `(params, losses (steps,))`.

    Pure in every array argument (`lax.scan`); vmap over seeds, `p`, `q`, `tied`.
    """
    step = _train_step(p, q, tied, params0["pos"].shape[0], batch_size, optimizer, params0["e"].dtype)
    (params, _), losses = jax.lax.scan(step, (params0, optimizer.init(params0)), jax.random.split(key, steps))
    return params, losses


def _train_step(p, q, tied, length: int, batch_size: int, optimizer, dtype):
    """`((params, opt_state), key) -> ((params, opt_state), loss)`: one online step (a `lax.scan` body)."""
    def step(carry, k):
        params, state = carry
        states = sample_chains(k, p, q, batch_size, length, dtype)
        loss, grad = jax.value_and_grad(markov_loss)(params, states, tied)
        updates, state = optimizer.update(grad, state, params)
        return (optax.apply_updates(params, updates), state), loss

    return step


def estimate_population_loss(params: dict, key: Array, p, q, tied, n_chains: int = 4096) -> dict[str, Array]:
    """Population loss of the model from `n_chains` fresh chains, with two exact control variates.

    Per chain `m` the mean losses of the model (`y_m`), of the stationary predictor (`c1_m`,
    `E = H(pi)` exactly) and of the kernel predictor (`c2_m`, `E = ` entropy rate exactly) are
    computed on the same chain; the estimate is `mean(y) - beta . (mean(c) - E[c])` with `beta`
    the least-squares fit of `y` on `c` (control variates; fitting `beta` on the same chains
    costs a bias of order `1 / n_chains`). A model near either predictor then has an error far
    below the plain Monte Carlo one. Returns `loss`, `loss_se` (standard error from the
    regression residuals, chains i.i.d.) and `loss_mc` (plain mean). The model is evaluated in
    blocks of chains (`lax.map`) to bound the memory of the attention matrices.
    """
    dt = params["e"].dtype
    length = params["pos"].shape[0]
    n_chains = check_positive_int("n_chains", n_chains)
    states = sample_chains(key, p, q, n_chains, length, dt)
    p_, q_ = jnp.asarray(p, dt), jnp.asarray(q, dt)
    block = math.gcd(n_chains, max(1, 2**20 // length**2))   # bounds the (chains, N, N) attention memory
    per_block = lambda st: jnp.mean(next_token_losses(markov_logits(params, st, tied), st), -1)  # noqa: E731
    y = jax.lax.map(per_block, states.reshape(n_chains // block, block, length)).reshape(n_chains)
    b_pi = jnp.log(p_) - jnp.log(q_)
    c1 = jnp.mean(next_token_losses(jnp.full_like(states, b_pi), states), -1)
    kernel_logit = jnp.where(states > 0.5, _log_odds(1 - q_), _log_odds(p_))
    c2 = jnp.mean(next_token_losses(kernel_logit, states), -1)
    exact = jnp.stack([stationary_entropy(p_, q_, dt), entropy_rate(p_, q_, dt)])
    c = jnp.stack([c1, c2], -1)
    cc = c - jnp.mean(c, 0)
    gram = cc.T @ cc                       # least squares by the 2 x 2 normal equations; the ridge only
    gram = gram + 1e-6 * jnp.trace(gram) * jnp.eye(2, dtype=dt) + jnp.finfo(dt).tiny   # matters when c1 = c2
    beta = jnp.linalg.solve(gram, cc.T @ (y - jnp.mean(y)))
    resid = (y - jnp.mean(y)) - cc @ beta
    loss = jnp.mean(y) - (jnp.mean(c, 0) - exact) @ beta
    se = jnp.sqrt(jnp.sum(resid**2) / jnp.maximum(n_chains - 3, 1) / n_chains)
    return dict(loss=loss, loss_se=se, loss_mc=jnp.mean(y))


# ----------------------------------------------------------------------------
# The bad critical point: exact gradient and Hessian spectrum
# ----------------------------------------------------------------------------


def active_names(tied: bool) -> tuple[str, ...]:
    """Parameters the loss depends on: all of `PARAM_NAMES`, less the readout `a` when tied."""
    return tuple(k for k in PARAM_NAMES if not (tied and k == "a"))


def predicted_critical_spectrum(params: dict, p, q, tied: bool) -> np.ndarray:
    """Closed-form Hessian eigenvalues at `bad_critical_point` (ascending, numpy float64, one per active parameter).

    With `kappa = pi_0 pi_1 (p + q - 1)`, `M = mean_n pos_n pos_n^T`, `m = mean_n pos_n`
    (over the `N - 1` predicted positions): the `(e, b)` block (tied)
    `[[2 kappa I + pi_0 pi_1 M, pi_0 pi_1 m], [pi_0 pi_1 m^T, pi_0 pi_1]]`, or the
    `(e, a, b)` block (untied) `[[0, kappa I, 0], [kappa I, pi_0 pi_1 M, pi_0 pi_1 m], [0, pi_0 pi_1 m^T, pi_0 pi_1]]`;
    every other eigenvalue is 0.
    """
    check_probability("p", p)
    check_probability("q", q)
    p, q = float(p), float(q)
    pos = np.asarray(params["pos"], np.float64)[:-1]
    d = pos.shape[1]
    g = p * q / (p + q) ** 2                     # pi_0 pi_1 = sigma'(b)
    kappa = g * (p + q - 1)
    M, m = pos.T @ pos / len(pos), pos.mean(0)
    eye = np.eye(d)
    if tied:
        block = np.block([[2 * kappa * eye + g * M, g * m[:, None]], [g * m[None, :], np.array([[g]])]])
    else:
        z = np.zeros((d, d))
        block = np.block([[z, kappa * eye, np.zeros((d, 1))], [kappa * eye, g * M, g * m[:, None]],
                          [np.zeros((1, d)), g * m[None, :], np.array([[g]])]])
    n_active = sum(int(np.size(params[k])) for k in active_names(tied))
    eig = np.concatenate([np.linalg.eigvalsh(block), np.zeros(n_active - len(block))])
    return np.sort(eig)


@dataclasses.dataclass(frozen=True)
class CriticalPointCheck:
    """Exact check of `bad_critical_point`: loss vs `H(pi)`, largest gradient entry, Hessian spectrum.

    `eigenvalues` are the exact Hessian's (active parameters, ascending); `predicted` the
    closed form of `predicted_critical_spectrum`.
    """

    p: float
    q: float
    tied: bool
    loss: float
    stationary_entropy: float
    grad_max: float
    eigenvalues: np.ndarray
    predicted: np.ndarray

    @property
    def min_eigenvalue(self) -> float:
        return float(self.eigenvalues[0])

    @property
    def max_spectrum_error(self) -> float:
        return float(np.max(np.abs(self.eigenvalues - self.predicted)))

    def row(self) -> dict:
        """One flat record (for CSV / JSON)."""
        return dict(p=self.p, q=self.q, tied=int(self.tied), loss=self.loss, stationary_entropy=self.stationary_entropy,
                    grad_max=self.grad_max, min_eigenvalue=self.min_eigenvalue,
                    max_eigenvalue=float(self.eigenvalues[-1]),
                    n_negative=int(np.sum(self.eigenvalues < -1e-9)), n_params=int(self.eigenvalues.size),
                    predicted_min_eigenvalue=float(self.predicted[0]), max_spectrum_error=self.max_spectrum_error)


@jax.jit
def _exact_loss_derivatives(active: dict, fixed: dict, chains: Array, weights: Array, tied: Array):
    """Exact population loss, gradient `(P,)` and Hessian `(P, P)` in the flattened `active` parameters
    (`jax.flatten_util.ravel_pytree` order: sorted keys), from enumerated chains with probabilities `weights`."""
    from jax.flatten_util import ravel_pytree

    flat, unravel = ravel_pytree(active)

    def loss(vec):
        prm = dict(fixed, **unravel(vec))
        per_chain = jnp.mean(next_token_losses(markov_logits(prm, chains, tied), chains), -1)
        return jnp.sum(weights * per_chain)

    return loss(flat), jax.grad(loss)(flat), jax.hessian(loss)(flat)


def critical_point_check(p, q, tied: bool, *, d: int = 4, length: int = 6, hidden: int | None = None,
                         free_std: float = 0.5, seed: int = 0, dtype=F32) -> CriticalPointCheck:
    """Build `bad_critical_point` with random free weights (`~ N(0, free_std^2)`) and measure it exactly.

    The population loss is the exact expectation over all `2^length` chains, so the gradient
    and the Hessian (`jax.hessian` over the flattened active parameters) carry no sampling error.
    Use `dtype=jnp.float64` (enabled in a scope here) for a meaningful spectrum.
    """
    from phasejax.precision import dtype_scope

    check_probability("p", p)
    check_probability("q", q)
    dtype = check_float_dtype(dtype)
    with dtype_scope(dtype):
        params = bad_critical_point(init_markov_params(jax.random.PRNGKey(seed), d, length, hidden, free_std, dtype),
                                    p, q)
        names = active_names(bool(tied))
        chains = jnp.asarray(all_chains(length), dtype)
        value, grad, hess = _exact_loss_derivatives(
            {k: params[k] for k in names}, {k: v for k, v in params.items() if k not in names}, chains,
            chain_probabilities(chains, p, q, dtype), jnp.asarray(float(bool(tied)), dtype))
        h_pi = float(stationary_entropy(p, q, dtype))
    grad, hess = np.asarray(grad, np.float64), np.asarray(hess, np.float64)
    eig = np.sort(np.linalg.eigvalsh(0.5 * (hess + hess.T)))
    return CriticalPointCheck(p=float(p), q=float(q), tied=bool(tied), loss=float(value), stationary_entropy=h_pi,
                              grad_max=float(np.max(np.abs(grad))), eigenvalues=eig,
                              predicted=predicted_critical_spectrum(params, p, q, bool(tied)))


def stationary_direction_curvature(params: dict, key: Array, p, q, tied, n_chains: int = 2048) -> Array:
    """Curvature of the loss along the embedding direction at the stationary point, given the other weights.

    With `u = e / |e|` (and `a` moved with `e` when tied), the weights other than `e`, `a`,
    `b` as in `params` and `b = log(p / q)`, returns `d^2 L(t u) / dt^2` at `t = 0` for tied
    models (Monte Carlo over `n_chains` fresh chains). At `bad_critical_point` weights it is
    `2 kappa + pi_0 pi_1 mean_n <u, pos_n>^2`; a negative value means the stationary point has
    become unstable along `u` (how AdamW runs escape: see `docs/sandboxes/markov.md`).
    """
    dt = params["e"].dtype
    u = params["e"] / jnp.maximum(jnp.linalg.norm(params["e"]), jnp.finfo(dt).tiny)
    states = sample_chains(key, p, q, n_chains, params["pos"].shape[0], dt)
    base = dict(params, b=jnp.log(jnp.asarray(p, dt)) - jnp.log(jnp.asarray(q, dt)))

    def along(t):
        return markov_loss(dict(base, e=t * u, a=t * u), states, tied)

    return jax.grad(jax.grad(along))(jnp.asarray(0.0, dt))


# ----------------------------------------------------------------------------
# One run and the (p, q) x tied x seed sweep
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MarkovTraining:
    """Model size and training of every run of a sweep (everything the results depend on besides the grid).

    `optimizer="sgd"` (default: plain SGD, the closest to the gradient flow of the theory)
    or `"adamw"` (Makkuva et al.'s choice; see the README section for how it escapes).
    The learning rate warms up linearly over `warmup_fraction * steps`, then follows
    `schedule`; `grad_clip > 0` clips gradients to that global norm (default 0: off).
    `n_eval` fresh chains measure the final population loss (`estimate_population_loss`);
    `n_curve` bins of the training loss are kept.
    """

    d: int = 8
    length: int = 32
    hidden: int | None = None
    init_std: float = 0.02
    steps: int = 1000
    batch_size: int = 16
    optimizer: str = "sgd"
    learning_rate: float = 0.5
    weight_decay: float = 0.0
    schedule: str = "cosine"
    warmup_fraction: float = 0.02
    grad_clip: float = 0.0
    n_eval: int = 4096
    n_curve: int = 25

    def __post_init__(self):
        check_positive_int("d", self.d)
        check_positive_int("length", self.length, 2)
        if self.hidden is not None:
            check_positive_int("hidden", self.hidden)
        for name in ("steps", "batch_size", "n_eval", "n_curve"):
            check_positive_int(name, getattr(self, name))
        if self.n_curve > self.steps:
            raise ValueError(f"n_curve must be <= steps, got n_curve={self.n_curve}, steps={self.steps}")
        if not (math.isfinite(self.init_std) and self.init_std >= 0):
            raise ValueError(f"init_std must be a finite number >= 0, got init_std={self.init_std}")
        self.make_optimizer()   # validates the optimiser settings

    @property
    def width(self) -> int:
        """Feed-forward width `r` (`4 d` unless given)."""
        return 4 * self.d if self.hidden is None else self.hidden

    def make_optimizer(self) -> optax.GradientTransformation:
        return markov_optimizer(self.learning_rate, self.steps, weight_decay=self.weight_decay,
                                warmup_fraction=self.warmup_fraction, schedule=self.schedule,
                                optimizer=self.optimizer, grad_clip=self.grad_clip)


def markov_run(seed, p, q, tied, training: MarkovTraining = MarkovTraining(), dtype=F32) -> dict[str, Array]:
    """One run, pure in `seed`, `p`, `q`, `tied` (vmap over them): Gaussian init, online training, evaluation.

    Returns `final_loss` (control-variate population estimate), `final_loss_se`,
    `final_loss_mc` (plain Monte Carlo), `train_loss_tail` (mean training loss over the last
    10% of steps), `e_norm`, `readout_norm` (final `|e|`, `|a|`) and `curve (n_curve,)` (binned training loss).
    """
    tr = training
    k_init, k_train, k_eval = jax.random.split(jax.random.PRNGKey(seed), 3)
    params0 = init_markov_params(k_init, tr.d, tr.length, tr.width, tr.init_std, dtype)
    params, losses = train_markov(params0, k_train, p, q, tied, steps=tr.steps, batch_size=tr.batch_size,
                                  optimizer=tr.make_optimizer())
    ev = estimate_population_loss(params, k_eval, p, q, tied, tr.n_eval)
    per_bin = tr.steps // tr.n_curve
    tail = max(1, tr.steps // 10)
    return dict(final_loss=ev["loss"], final_loss_se=ev["loss_se"], final_loss_mc=ev["loss_mc"],
                train_loss_tail=jnp.mean(losses[-tail:]), e_norm=jnp.linalg.norm(params["e"]),
                readout_norm=jnp.linalg.norm(readout(params, tied)),
                curve=jnp.mean(losses[: per_bin * tr.n_curve].reshape(tr.n_curve, per_bin), 1))


def markov_trace(seed, p, q, tied, training: MarkovTraining = MarkovTraining(), n_points: int = 25,
                 n_chains: int = 1024, dtype=F32) -> dict[str, Array]:
    """The run of `markov_run` (same seed, same data) observed at `n_points` equally spaced steps.

    Returns `step (n_points,)`, `loss` (mean training loss over each segment), `e_norm` and
    `curvature` (`stationary_direction_curvature` at the end of each segment). Needs
    `steps % n_points == 0`. Shows how a tied run leaves the stationary point: the
    curvature along `e` turns negative before `|e|` grows (AdamW), or stays at
    `2 kappa + ...` (SGD).
    """
    tr = training
    n_points = check_positive_int("n_points", n_points)
    if tr.steps % n_points:
        raise ValueError(f"n_points must divide steps={tr.steps}, got n_points={n_points}")
    k_init, k_train, k_eval = jax.random.split(jax.random.PRNGKey(seed), 3)
    params0 = init_markov_params(k_init, tr.d, tr.length, tr.width, tr.init_std, dtype)
    optimizer = tr.make_optimizer()
    step = _train_step(p, q, tied, tr.length, tr.batch_size, optimizer, dtype)
    keys = jax.random.split(k_train, tr.steps).reshape(n_points, tr.steps // n_points, -1)

    def segment(carry, ks):
        carry, losses = jax.lax.scan(step, carry, ks)
        params = carry[0]
        return carry, (jnp.mean(losses), jnp.linalg.norm(params["e"]),
                       stationary_direction_curvature(params, k_eval, p, q, tied, n_chains))

    _, (loss, e_norm, curvature) = jax.lax.scan(segment, (params0, optimizer.init(params0)), keys)
    return dict(step=(jnp.arange(1, n_points + 1) * (tr.steps // n_points)), loss=loss, e_norm=e_norm,
                curvature=curvature)


def plot_markov_trace(traces: dict, p: float, q: float, training: MarkovTraining, path: str) -> str:
    """`|e|`, training loss and the curvature along `e` at the stationary point vs step, one line per seed
    (`traces` as returned by a vmap of `markov_trace` over seeds, numpy)."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    fig = Figure(figsize=(13.5, 3.6))
    axes = fig.subplots(1, 3, gridspec_kw=dict(wspace=0.42))
    steps = np.asarray(traces["step"])[0]
    h_rate, h_pi = reference_losses(p, q)
    kappa = p * q / (p + q) ** 2 * (p + q - 1)
    for k in range(np.asarray(traces["loss"]).shape[0]):
        lab = "one line per seed" if k == 0 else None
        axes[0].plot(steps, traces["loss"][k], "C0-", lw=1, label=lab)
        axes[1].semilogy(steps, traces["e_norm"][k], "C1-", lw=1, label=lab)
        axes[2].plot(steps, traces["curvature"][k], "C3-", lw=1, label=lab)
    axes[0].axhline(float(h_pi), color="k", ls="--", lw=1, label=r"$H(\pi)$")
    axes[0].axhline(float(h_rate), color="k", ls=":", lw=1, label="entropy rate")
    axes[2].axhline(2 * kappa, color="k", ls="--", lw=1, label=r"$2\kappa = 2\pi_0\pi_1(p+q-1)$")
    axes[2].axhline(0, color="0.5", lw=0.8)
    labels = ("training loss (nats, segment mean)", "$|e|$ (embedding norm)",
              r"$\partial_t^2 L(e = t u)$ at $t = 0$, $u = e/|e|$")
    for ax, lab in zip(axes, labels):
        ax.set_xlabel("training step")
        ax.set_ylabel(lab)
        ax.legend(fontsize=7)
    fig.suptitle(f"Tied runs at p = {p:g}, q = {q:g} ({training.optimizer}, lr {training.learning_rate:g}): "
                 "curvature along the embedding at the stationary point, given the other weights "
                 "(negative: the bad minimum has become a saddle)", fontsize=9)
    return save_figure(fig, path, dpi=100)


def curve_steps(training: MarkovTraining) -> np.ndarray:
    """Centre step (1-based) of each bin of `markov_run`'s `curve`, `(n_curve,)`."""
    per_bin = training.steps // training.n_curve
    return per_bin * np.arange(training.n_curve) + (per_bin + 1) / 2


@dataclasses.dataclass(frozen=True)
class MarkovGrid:
    """The `(p, q)` grid x `tied` (1 tied, 0 untied) x seeds; `tasks()` is the flat table (order p, q, tied, seed)."""

    ps: tuple[float, ...] = (0.1, 0.25, 0.4, 0.55, 0.7, 0.85)
    qs: tuple[float, ...] = (0.1, 0.25, 0.4, 0.55, 0.7, 0.85)
    tied: tuple[int, ...] = (1, 0)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)

    def __post_init__(self):
        for name, kind in (("ps", float), ("qs", float), ("tied", int), ("seeds", int)):
            vals = tuple(kind(v) for v in np.atleast_1d(getattr(self, name)))
            object.__setattr__(self, name, vals)
            if not vals:
                raise ValueError(f"{name} must not be empty")
        check_probability("p", np.asarray(self.ps))
        check_probability("q", np.asarray(self.qs))
        if not set(self.tied) <= {0, 1}:
            raise ValueError(f"tied must hold 0 (untied) and/or 1 (tied), got tied={self.tied}")
        if min(self.seeds) < 0:
            raise ValueError(f"seeds must be >= 0, got seeds={self.seeds}")

    def tasks(self) -> dict[str, np.ndarray]:
        p, q, t, s = np.meshgrid(self.ps, self.qs, self.tied, self.seeds, indexing="ij")
        return dict(p=p.ravel().astype(np.float32), q=q.ravel().astype(np.float32), tied=t.ravel().astype(np.int32),
                    seed=s.ravel().astype(np.int64))


RUN_COLUMNS = ("p", "q", "tied", "seed", "final_loss", "entropy_rate", "stationary_entropy", "stuck",
               "at_entropy_rate", "gap", "final_loss_se", "final_loss_mc", "train_loss_tail", "e_norm", "readout_norm")
"""Columns of `runs.csv` (the issue's eight first; `gap = final_loss - entropy_rate`)."""


def reference_losses(p, q) -> tuple[np.ndarray, np.ndarray]:
    """`(entropy_rate, stationary_entropy)` in float64 (numpy) for arrays `p`, `q`."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    check_probability("p", p)
    check_probability("q", q)
    h = lambda x: -x * np.log(x) - (1 - x) * np.log1p(-x)  # noqa: E731
    return (q * h(p) + p * h(q)) / (p + q), h(p / (p + q))


def shortest_float64(values) -> np.ndarray:
    """Float32 values as the float64 of their shortest decimal repr (exact for float32; short in CSV files);
    other dtypes unchanged."""
    a = np.asarray(values)
    if a.dtype != np.float32:
        return a
    return np.asarray([float(str(v)) for v in a.ravel()], np.float64).reshape(a.shape)


def classify_runs(runs: Mapping[str, np.ndarray], tol: float = 1e-3) -> dict[str, np.ndarray]:
    """Add `entropy_rate`, `stationary_entropy` (float64 closed forms), `gap`, `stuck` (`|final_loss - H(pi)| < tol`)
    and `at_entropy_rate` (`|final_loss - entropy_rate| < tol`) to a table with `p`, `q`, `final_loss`."""
    out = dict(runs)
    h_rate, h_pi = reference_losses(runs["p"], runs["q"])
    loss = np.asarray(runs["final_loss"], np.float64)
    out.update(entropy_rate=h_rate, stationary_entropy=h_pi, gap=loss - h_rate,
               stuck=np.abs(loss - h_pi) < tol, at_entropy_rate=np.abs(loss - h_rate) < tol)
    return out


def cell_summary(runs: Mapping[str, np.ndarray]) -> list[dict]:
    """Per `(p, q, tied)` cell: seeds, fraction stuck / at the entropy rate, mean and std of the gap."""
    cells = []
    keys = sorted({(round(float(p), 12), round(float(q), 12), int(t))
                   for p, q, t in zip(runs["p"], runs["q"], runs["tied"])})
    for p, q, t in keys:
        sel = np.isclose(runs["p"], p) & np.isclose(runs["q"], q) & (np.asarray(runs["tied"]) == t)
        gap = np.asarray(runs["gap"], np.float64)[sel]
        cells.append(dict(p=p, q=q, tied=t, p_plus_q=p + q, n_seeds=int(sel.sum()),
                          fraction_stuck=float(np.mean(runs["stuck"][sel])),
                          fraction_at_entropy_rate=float(np.mean(runs["at_entropy_rate"][sel])),
                          mean_gap=float(gap.mean()), std_gap=float(gap.std(ddof=1)) if gap.size > 1 else 0.0,
                          entropy_gap=float(runs["stationary_entropy"][sel][0] - runs["entropy_rate"][sel][0])))
    return cells


def expected_facts(cells: list[dict], low: float = 0.8, high: float = 1.2) -> dict:
    """The issue's checks on the cells: tied runs stuck in most seeds where `p + q >= high`, at the entropy rate
    in most seeds where `p + q <= low`; untied runs at the entropy rate (counts of cells that pass)."""
    def count(tied, region, key):
        sel = [c for c in cells if c["tied"] == tied and region(c["p_plus_q"])]
        ok = [c for c in sel if c[key] > 0.5]
        return dict(cells=len(sel), cells_passing=len(ok), holds=bool(sel) and len(ok) == len(sel),
                    mean_fraction=float(np.mean([c[key] for c in sel])) if sel else float("nan"))

    hi = lambda s: s >= high - 1e-9  # noqa: E731
    lo = lambda s: s <= low + 1e-9  # noqa: E731
    return {f"tied_stuck_where_p+q>={high}": count(1, hi, "fraction_stuck"),
            f"tied_at_entropy_rate_where_p+q<={low}": count(1, lo, "fraction_at_entropy_rate"),
            f"untied_at_entropy_rate_where_p+q>={high}": count(0, hi, "fraction_at_entropy_rate"),
            f"untied_at_entropy_rate_where_p+q<={low}": count(0, lo, "fraction_at_entropy_rate")}


@dataclasses.dataclass
class MarkovSweep:
    """Result of `markov_sweep`: `runs` (columns `RUN_COLUMNS`), `curves` (long table `run, step, loss`),
    `summary` (settings, per-cell statistics, the expected facts). `write`/`load` round-trip through CSV/JSON."""

    runs: dict
    curves: dict
    summary: dict

    def write(self, out_dir: str) -> list[str]:
        from phasejax.io import atomic_write_json, write_csv

        os.makedirs(out_dir, exist_ok=True)
        return [write_csv(os.path.join(out_dir, "runs.csv"), self.runs, order=list(RUN_COLUMNS)),
                write_csv(os.path.join(out_dir, "curves.csv"), self.curves, order=["run", "step", "loss"]),
                atomic_write_json(os.path.join(out_dir, "summary.json"), self.summary)]

    @classmethod
    def load(cls, out_dir: str) -> "MarkovSweep":
        from phasejax.io import read_csv, read_json

        runs = read_csv(os.path.join(out_dir, "runs.csv"))
        for k in ("stuck", "at_entropy_rate"):
            runs[k] = runs[k].astype(bool)
        return cls(runs=runs, curves=read_csv(os.path.join(out_dir, "curves.csv")),
                   summary=read_json(os.path.join(out_dir, "summary.json")))


def markov_sweep(grid: MarkovGrid = MarkovGrid(), training: MarkovTraining = MarkovTraining(), *, tol: float = 1e-3,
                 options=None) -> MarkovSweep | None:
    """Train every `(p, q, tied, seed)` of `grid` (`markov_run`, vmapped in resumable chunks; `options` as in
    `phasejax.sweep.run_chunked`, default `RunOptions(chunk_size=64)`). `None` while chunks are missing."""
    from phasejax.sweep import RunOptions, run_chunked, run_options

    options = run_options(options if options is not None else RunOptions(chunk_size=64))
    if not (math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a finite number > 0, got tol={tol}")

    def fn(chunk):
        one = lambda s, p, q, t: markov_run(s, p, q, t, training)  # noqa: E731
        return jax.vmap(one)(jnp.asarray(chunk["seed"]), jnp.asarray(chunk["p"]), jnp.asarray(chunk["q"]),
                             jnp.asarray(chunk["tied"], F32))

    config = dict(kind="markov_sweep", training=dataclasses.asdict(training), width=training.width,
                  data="online: a fresh batch of stationary chains per step", dtype="float32")
    tasks = grid.tasks()
    out = run_chunked(fn, tasks, config, options)
    if out is None:
        return None
    curve = shortest_float64(out.pop("curve"))
    runs = {k: shortest_float64(v) for k, v in out.items()}
    runs.update(tasks)
    runs["p"], runs["q"] = shortest_float64(tasks["p"]), shortest_float64(tasks["q"])   # the grid's decimals
    runs = classify_runs(runs, tol)
    n, m = curve.shape
    curves = dict(run=np.repeat(np.arange(n), m), step=np.tile(curve_steps(training), n), loss=curve.ravel())
    cells = cell_summary(runs)
    summary = dict(grid=dataclasses.asdict(grid), training=dataclasses.asdict(training), width=training.width,
                   tol=tol, cells=cells, facts=expected_facts(cells), n_runs=n,
                   loss_units="nats per predicted token", final_loss="control-variate population estimate "
                   "(estimate_population_loss) on training.n_eval fresh chains")
    return MarkovSweep(runs=runs, curves=curves, summary=summary)


# ----------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------


def _cell_grid(cells: list[dict], tied: int, key: str):
    ps = sorted({c["p"] for c in cells})
    qs = sorted({c["q"] for c in cells})
    grid = np.full((len(qs), len(ps)), np.nan)
    for c in cells:
        if c["tied"] == tied:
            grid[qs.index(c["q"]), ps.index(c["p"])] = c[key]
    return np.asarray(ps), np.asarray(qs), grid


def _pq_lines(ax, ps, qs):
    x = np.linspace(0, 1, 50)
    for level, style, lab in ((1.0, "k-", "$p+q=1$ (theory)"), (0.8, "k:", "$p+q=0.8,\\ 1.2$"), (1.2, "k:", None)):
        px = np.interp(x, [0, 1], [ps[0] - 0.5 * _step(ps), ps[-1] + 0.5 * _step(ps)])
        qv = level - px
        ax.plot(px, qv, style, lw=1.2, label=lab)
    ax.set_xlim(ps[0] - 0.5 * _step(ps), ps[-1] + 0.5 * _step(ps))
    ax.set_ylim(qs[0] - 0.5 * _step(qs), qs[-1] + 0.5 * _step(qs))


def _step(v):
    return float(np.min(np.diff(v))) if len(v) > 1 else 0.1


def plot_markov_phase_diagrams(sweep: MarkovSweep, path: str) -> str:
    """Phase diagrams over `(p, q)`: mean `final loss - entropy rate` (log scale) and fraction of seeds stuck at
    `H(pi)`, tied (top) and untied (bottom)."""
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    cells = sweep.summary["cells"]
    tr = sweep.summary["training"]
    n_seeds = max(c["n_seeds"] for c in cells)
    tieds = sorted({c["tied"] for c in cells}, reverse=True)
    fig = Figure(figsize=(10.5, 4.3 * len(tieds)))
    axes = np.asarray(fig.subplots(len(tieds), 2, squeeze=False, gridspec_kw=dict(wspace=0.28, hspace=0.45)))
    floor = 1e-5
    tol = sweep.summary["tol"]
    for i, tied in enumerate(tieds):
        ps, qs, gap = _cell_grid(cells, tied, "mean_gap")
        _, _, stuck = _cell_grid(cells, tied, "fraction_stuck")
        _, _, entropy_gap = _cell_grid(cells, tied, "entropy_gap")
        stuck = np.where(entropy_gap < tol, np.nan, stuck)      # H(pi) and the optimum indistinguishable
        name = "tied ($a = e$)" if tied else "untied"
        axes[i, 1].set_facecolor("0.75")
        ax = axes[i, 0]
        m = ax.pcolormesh(ps, qs, np.clip(gap, floor, None), shading="nearest", cmap="magma",
                          norm=LogNorm(floor, max(0.3, np.nanmax(gap))))
        cb = fig.colorbar(m, ax=ax)
        cb.set_label("final loss $-$ entropy rate (nats, mean over seeds)")
        ax.set_title(f"{name}: excess loss", fontsize=10)
        ax = axes[i, 1]
        m = ax.pcolormesh(ps, qs, stuck, shading="nearest", cmap="RdBu_r", vmin=0, vmax=1)
        for a, p in enumerate(ps):
            for b, q in enumerate(qs):
                if np.isfinite(stuck[b, a]):
                    ax.text(p, q, f"{stuck[b, a]:.1f}", ha="center", va="center", fontsize=7,
                            color="w" if abs(stuck[b, a] - 0.5) > 0.3 else "k")
        cb = fig.colorbar(m, ax=ax)
        cb.set_label(r"fraction of seeds stuck at $H(\pi)$")
        ax.set_title(f"{name}: stuck at the stationary predictor", fontsize=10)
        for ax in axes[i]:
            _pq_lines(ax, ps, qs)
            ax.set_xlabel("$p = P(1 \\mid 0)$")
            ax.set_ylabel("$q = P(0 \\mid 1)$")
            ax.set_aspect("equal")
        for ax in axes[i]:     # below the axes: inside, it would cover cells
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=7, frameon=False)
    fig.suptitle(f"Single-layer transformer on binary Markov chains: {tr['optimizer']} lr={tr['learning_rate']:g}, "
                 f"{tr['steps']} steps, batch {tr['batch_size']}, N={tr['length']}, d={tr['d']}, "
                 f"init std {tr['init_std']:g}, {n_seeds} seeds per cell\n(stuck: final loss within "
                 f"{tol:g} nats of $H(\\pi)$; grey: $H(\\pi) -$ entropy rate < {tol:g}, the two outcomes coincide)",
                 fontsize=9)
    return save_figure(fig, path, dpi=100)


def plot_markov_curves(sweep: MarkovSweep, path: str, cells: list[tuple[float, float]] | None = None) -> str:
    """Training-loss curves (binned, one thin line per seed) of tied and untied runs at a few `(p, q)`, with the
    entropy rate and `H(pi)` levels."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    runs, curves = sweep.runs, sweep.curves
    pq = np.stack([np.asarray(runs["p"], np.float64), np.asarray(runs["q"], np.float64)], -1)
    if cells is None:   # the lowest and the highest p + q of the grid, and one on each side of 1 near it
        uniq = sorted({(float(a), float(b)) for a, b in pq}, key=lambda c: c[0] + c[1])
        below = [c for c in uniq if c[0] + c[1] < 0.95]
        above = [c for c in uniq if c[0] + c[1] > 1.15]
        picks = (uniq[0], below[-1] if below else None, above[0] if above else None, uniq[-1])
        cells = list(dict.fromkeys(c for c in picks if c is not None))
    fig = Figure(figsize=(3.6 * len(cells), 3.9))
    axes = np.atleast_1d(fig.subplots(1, len(cells), sharey=False, gridspec_kw=dict(wspace=0.33)))
    run_idx, steps, loss = np.asarray(curves["run"]), np.asarray(curves["step"]), np.asarray(curves["loss"])
    for ax, (p, q) in zip(axes, cells):
        sel_cell = np.isclose(pq[:, 0], p) & np.isclose(pq[:, 1], q)
        for tied, color, lab in ((1, "C3", "tied"), (0, "C0", "untied")):
            idx = np.flatnonzero(sel_cell & (np.asarray(runs["tied"]) == tied))
            for j, r in enumerate(idx):
                m = run_idx == r
                ax.plot(steps[m], loss[m], color=color, lw=0.8, alpha=0.7, label=f"{lab} (one line per seed)"
                        if j == 0 else None)
        h_rate, h_pi = reference_losses(p, q)
        ax.axhline(float(h_pi), color="k", ls="--", lw=1, label=r"$H(\pi)$ (stationary predictor)")
        ax.axhline(float(h_rate), color="k", ls=":", lw=1, label="entropy rate (optimum)")
        lo, hi = float(h_rate), float(max(h_pi, np.max(loss[np.isin(run_idx, np.flatnonzero(sel_cell))])))
        ax.set_ylim(lo - 0.1 * (hi - lo) - 1e-3, hi + 0.05 * (hi - lo) + 1e-3)
        ax.set_title(f"p = {p:g}, q = {q:g} (p + q = {p + q:g})", fontsize=9)
        ax.set_xlabel("training step")
        ax.set_ylabel("training loss (nats, binned)")
    axes[0].legend(fontsize=7, loc="center right")
    tr = sweep.summary["training"]
    fig.suptitle(f"Training curves ({tr['optimizer']}, lr {tr['learning_rate']:g}, batch {tr['batch_size']} x "
                 f"N={tr['length']}), {tr['steps']} steps: tied (red) and untied (blue) runs, one line per seed; "
                 f"theory: the tied model stays at $H(\\pi)$ when p + q > 1", fontsize=9, y=1.03)
    return save_figure(fig, path, dpi=100)


def plot_critical_spectra(checks: list[CriticalPointCheck], path: str) -> str:
    """Exact Hessian eigenvalues at `bad_critical_point` (dots) against the closed form (line), one panel per check."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    fig = Figure(figsize=(3.4 * len(checks), 3.4))
    axes = np.atleast_1d(fig.subplots(1, len(checks), gridspec_kw=dict(wspace=0.35)))
    for ax, c in zip(axes, checks):
        k = np.arange(c.eigenvalues.size)
        nz = np.abs(c.predicted) > 1e-12
        ax.plot(k, c.predicted, "k-", lw=1, label="closed form")
        ax.plot(k[nz], c.eigenvalues[nz], "o", ms=4, color="C3" if c.min_eigenvalue < -1e-9 else "C2",
                label="exact Hessian (non-zero)")
        ax.plot(k[~nz], c.eigenvalues[~nz], ".", ms=2, color="0.5", label="exact Hessian (zero)")
        ax.axhline(0, color="0.6", lw=0.6)
        verdict = "saddle" if c.min_eigenvalue < -1e-9 else "PSD (local min.)"
        ax.set_title(f"{'tied' if c.tied else 'untied'}, p = {c.p:g}, q = {c.q:g}: {verdict}\n"
                     f"max|grad| = {c.grad_max:.1e}, min eig = {c.min_eigenvalue:.3g}", fontsize=8)
        ax.set_xlabel("eigenvalue index (ascending)")
        ax.set_ylabel("Hessian eigenvalue")
        ax.legend(fontsize=6, loc="upper left")
    fig.suptitle(r"Hessian of the exact population loss at $\theta_\pi$ ($e = a = 0$, $W_O = W_2 = 0$, "
                 r"$b = \log(p/q)$, other weights random), float64, all $2^N$ chains", fontsize=9, y=1.06)
    return save_figure(fig, path, dpi=100)
