"""The one-layer transformer on Markov chains and its explicit constructions."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.precision import check_float_dtype
from phasejax.tasks._common import F32, Array, concrete
from phasejax.tasks.markov.data import all_chains, chain_probabilities, check_positive_int, check_probability


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
    std = concrete(init_std)
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
