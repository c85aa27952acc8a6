"""In-context Markov chains: input checks, sampling, transition counts, predictives and cross-entropies."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.tasks._common import F32, Array, concrete


# ----------------------------------------------------------------------------
# Validation helpers
# ----------------------------------------------------------------------------


def _check_int(name: str, value, minimum: int) -> None:
    """`ValueError` naming `name` unless the (concrete) `value` is an integer `>= minimum` (tracers pass)."""
    if concrete(value) is None:
        return
    a = np.asarray(value)
    if a.dtype == bool or not np.issubdtype(a.dtype, np.number) or np.any(a != np.round(a)) or np.any(a < minimum):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {name}={value!r}")


def _check_positive(name: str, value) -> None:
    """`ValueError` naming `name` unless the (concrete) `value` is finite and `> 0` (tracers pass)."""
    if concrete(value) is None:
        return
    a = np.asarray(value, dtype=float)
    if np.any(~np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"{name} must be finite and > 0, got {name}={value!r}")


def _check_S(S, S_max: int | None) -> None:
    _check_int("S", S, 2)
    if S_max is not None:
        _check_int("S_max", S_max, 2)
        if concrete(S) is not None and np.any(np.asarray(S) > S_max):
            raise ValueError(f"S must be <= S_max={S_max}, got S={S!r}")


def _check_dtype(dtype) -> np.dtype:
    from phasejax.precision import check_float_dtype

    return check_float_dtype(dtype)


# ----------------------------------------------------------------------------
# Data: in-context Markov chains
# ----------------------------------------------------------------------------


def state_mask(S, S_max: int, dtype=F32) -> Array:
    """`(S_max,)` indicator of the states `0..S-1` that exist (`S` may be traced)."""
    return (jnp.arange(S_max) < S).astype(dtype)


def _entry_keys(key: Array, rows: int, cols: int) -> Array:
    """Keys `(rows, cols, 2)` with entry `(i, j)` = `fold_in(fold_in(key, i), j)`: independent of the padded shape."""
    row_keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(rows))
    return jax.vmap(lambda k: jax.vmap(lambda j: jax.random.fold_in(k, j))(jnp.arange(cols)))(row_keys)


def sample_transition_matrix(key: Array, S, beta, S_max: int, dtype=F32) -> Array:
    """`P (S_max, S_max)`: rows `0..S-1` iid `Dirichlet(beta 1_S)` on the first `S` columns, zero elsewhere.

    Drawn as normalised `Gamma(beta)` variables (the Dirichlet's definition),
    entry `(i, j)` from its own key, so the first `S x S` block does not depend
    on `S_max` and `S`, `beta` may be traced (vmappable).
    """
    _check_S(S, S_max)
    _check_positive("beta", beta)
    m = state_mask(S, S_max, dtype)
    keys = _entry_keys(key, S_max, S_max)
    g = jax.vmap(jax.vmap(lambda k: jax.random.gamma(k, jnp.asarray(beta, dtype), (), dtype)))(keys)
    g = g * m[None, :] * m[:, None]
    # a float32 Gamma(beta) draw can underflow to 0 for beta << 1; a row of zeros would be undefined
    g = g + (jnp.sum(g, 1, keepdims=True) == 0) * m[None, :] * m[:, None]
    return g / jnp.maximum(jnp.sum(g, 1, keepdims=True), jnp.finfo(dtype).tiny)


def stationary_distribution(P: Array, S) -> Array:
    """`pi (S_max,)` with `pi P = pi`, `sum pi = 1` on the first `S` states, 0 beyond.

    Solves `(I - P^T + m m^T) pi = m` (`m` the state mask), which for an
    irreducible chain on the first `S` states has the stationary law as its
    unique solution (rows of padded states reduce to `pi_s = 0`).
    """
    S_max = P.shape[-1]
    m = state_mask(S, S_max, P.dtype)
    A = jnp.eye(S_max, dtype=P.dtype) - P.T + m[:, None] * m[None, :]
    pi = jnp.linalg.solve(A, m)
    pi = jnp.clip(pi, 0.0, None) * m
    return pi / jnp.sum(pi)


def _inverse_cdf(p: Array, u: Array, S) -> Array:
    """The state `min{s : p_0 + ... + p_s > u * sum(p)}` (clipped to `S - 1` against rounding)."""
    c = jnp.cumsum(p)
    return jnp.minimum(jnp.sum(c <= u * c[-1]), jnp.asarray(S) - 1).astype(jnp.int32)


def sample_chain(key: Array, P: Array, pi: Array, T: int, S) -> Array:
    """`T` states `(T,)` int32 of the chain `P (S_max, S_max)` started from `pi (S_max,)`.

    One uniform per token (inverse CDF), so the draw does not depend on the padding `S_max`.
    """
    _check_int("T", T, 1)
    u = jax.random.uniform(key, (T,), P.dtype)
    s0 = _inverse_cdf(pi, u[0], S)

    def step(s, u_t):
        nxt = _inverse_cdf(P[s], u_t, S)
        return nxt, nxt

    _, rest = jax.lax.scan(step, s0, u[1:])
    return jnp.concatenate([s0[None], rest])


def sample_sequence(key: Array, S, beta, T: int, S_max: int | None = None, dtype=F32) -> tuple[Array, Array]:
    """One in-context Markov chain: `(tokens (T,) int32, P (S_max, S_max))` (`S_max` defaults to a concrete `S`).

    `P`'s rows are `Dirichlet(beta 1_S)`, the first state is drawn from `P`'s
    stationary law. `S` and `beta` may be traced (vmap over them); `T` and
    `S_max` are static.
    """
    if S_max is None:
        if concrete(S) is None:
            raise ValueError("S_max must be given when S is traced")
        S_max = int(S)
    _check_S(S, S_max)
    _check_int("T", T, 2)
    _check_positive("beta", beta)
    _check_dtype(dtype)
    kP, kx = jax.random.split(key)
    P = sample_transition_matrix(kP, S, beta, S_max, dtype)
    return sample_chain(kx, P, stationary_distribution(P, S), T, S), P


def sample_batch(key: Array, n: int, S, beta, T: int, S_max: int | None = None, dtype=F32) -> tuple[Array, Array]:
    """`n` independent sequences: `(tokens (n, T), P (n, S_max, S_max))`."""
    _check_int("n", n, 1)
    return jax.vmap(lambda k: sample_sequence(k, S, beta, T, S_max, dtype))(jax.random.split(key, n))


def next_token_laws(tokens: Array, P: Array) -> Array:
    """`(T, S_max)`: row `t` is `P[s_t, :]`, the law of the token after position `t`."""
    return P[tokens]


# ----------------------------------------------------------------------------
# References: Bayes (= bigram), unigram, uniform
# ----------------------------------------------------------------------------


def transition_counts(tokens: Array, S_max: int) -> Array:
    """`(T, S_max)`: row `t` counts the transitions `s_t -> s'` seen in `s_{1:t}`.

    `n[t, s'] = #{1 <= j <= t : s_{j-1} = s_t, s_j = s'}` (0-based positions;
    `j = 0` has no predecessor). Computed as `M @ onehot(tokens)` with the
    induction pattern `M[t, j] = [1 <= j <= t][s_{j-1} = s_t]`.
    """
    T = tokens.shape[-1]
    prev = jnp.concatenate([jnp.full((1,), -1, tokens.dtype), tokens[:-1]])
    j, t = jnp.arange(T)[None, :], jnp.arange(T)[:, None]
    M = (j <= t) & (j >= 1) & (prev[None, :] == tokens[:, None])
    return M.astype(F32) @ jax.nn.one_hot(tokens, S_max, dtype=F32)


def bayes_predictive(tokens: Array, S, beta, S_max: int, dtype=F32) -> Array:
    """Dirichlet posterior predictive `(T, S_max)`: `q_t(s') = (n_t(s_t -> s') + beta) / (n_t(s_t) + S beta)`.

    Row `t` predicts the token after position `t` from `s_{1:t}`; zero on
    states `>= S`. The posterior mean of `P[s_t, :]` under the
    `Dirichlet(beta 1_S)` prior given the observed transitions.
    """
    m = state_mask(S, S_max, dtype)
    n = transition_counts(tokens, S_max).astype(dtype) * m
    num = n + jnp.asarray(beta, dtype) * m
    return num / jnp.sum(num, -1, keepdims=True)


def unigram_predictive(tokens: Array, S, alpha, S_max: int, dtype=F32) -> Array:
    """In-context unigram `(T, S_max)`: `q_t(s') = (n_{1:t}(s') + alpha) / (t + S alpha)`, counts of `s_{1:t}`."""
    m = state_mask(S, S_max, dtype)
    n = jnp.cumsum(jax.nn.one_hot(tokens, S_max, dtype=dtype), 0) * m
    num = n + jnp.asarray(alpha, dtype) * m
    return num / jnp.sum(num, -1, keepdims=True)


def soft_cross_entropy(log_q: Array, tokens: Array, P: Array) -> Array:
    """Per-position expected log loss `(T,)`: `-sum_{s'} P[s_t, s'] log q_t(s')` (0 * log 0 = 0).

    `log_q (T, S_max)` are the predicted log-probabilities of the token after
    position `t`; states with `P[s_t, s'] = 0` (padding) do not contribute.
    """
    target = next_token_laws(tokens, P)
    safe = jnp.where(target > 0, log_q, 0.0)
    return -jnp.sum(target * safe, -1)


def hard_cross_entropy(log_q: Array, next_tokens: Array) -> Array:
    """Per-position sampled log loss `(T,)`: `-log q_t(s_{t+1})` for the realised next tokens `(T,)`."""
    return -jnp.take_along_axis(log_q, next_tokens[:, None], -1)[:, 0]


def _safe_log(q: Array) -> Array:
    return jnp.log(jnp.where(q > 0, q, 1.0)) + jnp.where(q > 0, 0.0, -jnp.inf)
