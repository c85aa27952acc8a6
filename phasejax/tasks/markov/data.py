"""Input checks and the first-order binary Markov chain: sampling and closed forms."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.precision import check_float_dtype
from phasejax.tasks._common import F32, Array, check_int as check_positive_int, concrete


# ----------------------------------------------------------------------------
# Input checks (concrete values only: traced values are left to the caller)
# ----------------------------------------------------------------------------


def check_probability(name: str, value) -> None:
    """`ValueError` naming `name` unless every concrete entry of `value` lies in the open interval (0, 1)."""
    v = concrete(value)
    if v is None:
        return
    if not np.all(np.isfinite(v)) or np.any(v <= 0) or np.any(v >= 1):
        raise ValueError(f"{name} must lie in (0, 1), got {name}={v.tolist() if v.ndim else float(v)}")


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
