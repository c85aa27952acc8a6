"""Reference losses of the induction task: uniform, in-context unigram, Bayes (Dirichlet and stationary start)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.tasks._common import F32, Array
from phasejax.tasks.induction.data import (
    _check_S,
    _check_int,
    _check_positive,
    _safe_log,
    bayes_predictive,
    sample_batch,
    soft_cross_entropy,
    state_mask,
    stationary_distribution,
    unigram_predictive,
)


UNIGRAM_ALPHAS = tuple(float(a) for a in np.geomspace(0.01, 10.0, 31))
"""Grid of add-alpha smoothings over which the in-context unigram reference is optimised."""


def reference_losses(tokens: Array, P: Array, S, beta, alphas=UNIGRAM_ALPHAS) -> dict[str, Array]:
    """Per-position losses `(T,)` of one sequence for the uniform, the unigram (every alpha) and the Bayes predictors.

    Returns `uniform (T,)`, `unigram (A, T)` (one row per `alphas`) and `bayes (T,)`.
    """
    S_max = P.shape[-1]
    dtype = P.dtype
    S_f = jnp.asarray(S, dtype)
    uni = jax.vmap(lambda a: soft_cross_entropy(_safe_log(unigram_predictive(tokens, S, a, S_max, dtype)),
                                                tokens, P))(jnp.asarray(alphas, dtype))
    return dict(uniform=jnp.full(tokens.shape, jnp.log(S_f)), unigram=uni,
                bayes=soft_cross_entropy(_safe_log(bayes_predictive(tokens, S, beta, S_max, dtype)), tokens, P))


def _mean_se(x: Array) -> tuple[Array, Array]:
    """Mean and standard error over the leading axis."""
    n = x.shape[0]
    return jnp.mean(x, 0), jnp.std(x, 0) * jnp.sqrt(n / jnp.maximum(n - 1, 1)) / jnp.sqrt(n)


def induction_references(key: Array, S, beta, T: int, n_sequences: int = 4096, S_max: int | None = None,
                         dtype=F32) -> dict[str, Array]:
    """Reference losses by simulation on `n_sequences` fresh chains (vmappable over `S`, `beta`).

    Returns scalars `uniform_loss`, `unigram_loss` (best alpha), `unigram_alpha`,
    `bayes_loss` and their standard errors `*_se` (over sequences), the
    per-position curves `uniform_curve`, `unigram_curve`, `bayes_curve` `(T,)`
    and two independent large-`t` limits: the mean entropy rate
    `entropy_rate = E[sum_s pi_s H(P_s)]` (the Bayes loss tends to it) and the
    mean stationary entropy `stationary_entropy = E[H(pi)]` (the unigram loss
    tends to it), each with its standard error.
    """
    tokens, P = sample_batch(key, n_sequences, S, beta, T, S_max, dtype)
    refs = jax.vmap(lambda x, p: reference_losses(x, p, S, beta))(tokens, P)
    per_seq_uni = jnp.mean(refs["unigram"], -1)                      # (n, A)
    best = jnp.argmin(jnp.mean(per_seq_uni, 0))
    out = {}
    for name, per_pos in (("uniform", refs["uniform"]), ("unigram", refs["unigram"][:, best]),
                          ("bayes", refs["bayes"])):
        out[f"{name}_loss"], out[f"{name}_loss_se"] = _mean_se(jnp.mean(per_pos, -1))
        out[f"{name}_curve"] = jnp.mean(per_pos, 0)
    out["unigram_alpha"] = jnp.asarray(UNIGRAM_ALPHAS, dtype)[best]
    pi = jax.vmap(lambda p: stationary_distribution(p, S))(P)
    row_entropy = -jnp.sum(jnp.where(P > 0, P * _safe_log(P), 0.0), -1)       # (n, S_max)
    out["entropy_rate"], out["entropy_rate_se"] = _mean_se(jnp.sum(pi * row_entropy, -1))
    out["stationary_entropy"], out["stationary_entropy_se"] = _mean_se(
        -jnp.sum(jnp.where(pi > 0, pi * _safe_log(pi), 0.0), -1))
    return out


def stationary_start_predictive(key: Array, tokens: Array, S, beta, S_max: int, n_samples: int = 512,
                                dtype=F32) -> Array:
    """Exact Bayes predictive `(T, S_max)` with the stationary start, by self-normalised importance sampling.

    The posterior of `P` given `s_{1:t}` is the Dirichlet posterior (prior
    `beta` plus the transition counts) times `pi_P(s_1)`, so
    `q_t = E[pi_P(s_1) P[s_t, :]] / E[pi_P(s_1)]` under the Dirichlet
    posterior, estimated with `n_samples` posterior draws per position
    (relative error `O(n_samples^-1/2)`).
    """
    T = tokens.shape[-1]
    m = state_mask(S, S_max, dtype)
    prev = jnp.concatenate([tokens[:1], tokens[:-1]])
    step = jax.nn.one_hot(prev, S_max, dtype=dtype)[:, :, None] * jax.nn.one_hot(tokens, S_max, dtype=dtype)[:, None]
    step = step.at[0].set(0.0)
    counts = jnp.cumsum(step, 0)                                              # (T, S_max, S_max): s -> s' in s_{1:t}
    conc = (counts + jnp.asarray(beta, dtype)) * m[None, :, None] * m[None, None, :]

    def one_position(k, c, s_t):
        g = jax.random.gamma(k, jnp.where(c > 0, c, 1.0), (n_samples,) + c.shape, dtype) * (c > 0)
        g = g + (jnp.sum(g, -1, keepdims=True) == 0) * (c > 0)
        Ps = g / jnp.maximum(jnp.sum(g, -1, keepdims=True), jnp.finfo(dtype).tiny)
        w = jax.vmap(lambda p: stationary_distribution(p, S)[tokens[0]])(Ps)
        return jnp.sum(w[:, None] * Ps[:, s_t, :], 0) / jnp.sum(w)

    return jax.vmap(one_position)(jax.random.split(key, T), conc, tokens)


# ----------------------------------------------------------------------------
# Models


def evaluation_chains(S, beta, T: int, S_max: int, n_eval: int = 512, eval_seed: int = 12345,
                      dtype=F32) -> tuple[Array, Array]:
    """The evaluation chains of a grid point: `(tokens (n_eval, T), P (n_eval, S_max, S_max))`.

    Drawn from `eval_seed` alone (not the run's seed), so every model and seed
    of a point `(S, beta, T)` is scored on the same chains as the references
    (paired comparisons). Independent of the padding `S_max`.
    """
    return sample_batch(jax.random.PRNGKey(eval_seed), n_eval, S, beta, T, S_max, dtype)


def evaluation_references(tokens: Array, P: Array, S, beta) -> dict[str, Array]:
    """Reference predictors on evaluation chains `tokens (n, T)`, `P (n, S_max, S_max)` (vmappable over points).

    Returns per-chain losses (mean over the `T` positions) `bayes (n,)` and
    `unigram (n,)` (at the alpha of `UNIGRAM_ALPHAS` with the smallest mean
    loss, `unigram_alpha`), the uniform loss `uniform ()` (`log S`) and the
    per-position curves `bayes_curve (T,)`, `unigram_curve (T,)`.
    """
    refs = jax.vmap(lambda x, p: reference_losses(x, p, S, beta))(tokens, P)
    best = jnp.argmin(jnp.mean(refs["unigram"], (0, 2)))
    uni = refs["unigram"][:, best]
    return dict(bayes=jnp.mean(refs["bayes"], -1), unigram=jnp.mean(uni, -1),
                unigram_alpha=jnp.asarray(UNIGRAM_ALPHAS, P.dtype)[best], uniform=jnp.mean(refs["uniform"]),
                bayes_curve=jnp.mean(refs["bayes"], 0), unigram_curve=jnp.mean(uni, 0))


@functools.partial(jax.jit, static_argnames=("T", "S_max", "n_eval", "eval_seed", "dtype"))
def _evaluation_set(S: Array, beta: Array, *, T: int, S_max: int, n_eval: int, eval_seed: int,
                    dtype: str) -> tuple[Array, Array, dict[str, Array]]:
    """`evaluation_chains` and `evaluation_references` of points `(S (K,), beta (K,))` (vmapped)."""

    def point(S, beta):
        tokens, P = evaluation_chains(S, beta, T, S_max, n_eval, eval_seed, dtype)
        return tokens, P, evaluation_references(tokens, P, S, beta)

    return jax.vmap(point)(S, beta)


# ----------------------------------------------------------------------------
# References by simulation over a grid
# ----------------------------------------------------------------------------


def stationary_start_gap(key: Array, S, beta, T: int, S_max: int, n_sequences: int = 32, n_samples: int = 256,
                         dtype=F32) -> dict[str, Array]:
    """Loss of the Dirichlet posterior predictive minus that of the exact (stationary-start) Bayes predictor.

    Paired on `n_sequences` fresh chains; the exact predictor is
    `stationary_start_predictive` with `n_samples` posterior draws. Its Monte
    Carlo noise can only raise its loss (Jensen), so `gap` is biased low by
    `O(1 / n_samples)`. Returns `gap`, `gap_se` (nats, over sequences) and
    the per-position mean gap `gap_curve (T,)`.
    """
    k_seq, k_is = jax.random.split(key)
    tokens, P = sample_batch(k_seq, n_sequences, S, beta, T, S_max, dtype)

    def one(k, x, p):
        exact = stationary_start_predictive(k, x, S, beta, S_max, n_samples, dtype)
        dirichlet = bayes_predictive(x, S, beta, S_max, dtype)
        return soft_cross_entropy(_safe_log(dirichlet), x, p) - soft_cross_entropy(_safe_log(exact), x, p)

    # sequences one after the other (`lax.map`): the posterior draws of a whole batch would not fit in memory
    per_pos = jax.lax.map(lambda a: one(*a), (jax.random.split(k_is, n_sequences), tokens, P))
    gap, gap_se = _mean_se(jnp.mean(per_pos, -1))
    return dict(gap=gap, gap_se=gap_se, gap_curve=jnp.mean(per_pos, 0))


@functools.partial(jax.jit, static_argnames=("T", "S_max", "n_sequences", "n_exact", "n_samples", "seed", "dtype"))
def _reference_points(S: Array, beta: Array, *, T: int, S_max: int, n_sequences: int, n_exact: int, n_samples: int,
                      seed: int, dtype: str) -> dict[str, Array]:
    """`induction_references` (without curves) and `stationary_start_gap` vmapped over points `(S, beta)`."""

    def point(S, beta):
        key = jax.random.fold_in(jax.random.PRNGKey(seed), T)
        refs = induction_references(key, S, beta, T, n_sequences, S_max, dtype)
        if n_exact:
            gap = stationary_start_gap(jax.random.fold_in(key, 1), S, beta, T, S_max, n_exact, n_samples, dtype)
        else:
            gap = dict(gap=jnp.asarray(jnp.nan, dtype), gap_se=jnp.asarray(jnp.nan, dtype))
        return {k: v for k, v in refs.items() if not k.endswith("_curve")} | dict(
            stationary_start_gap=gap["gap"], stationary_start_gap_se=gap["gap_se"])

    return jax.vmap(point)(S, beta)


def induction_reference_table(Ss, Ts, betas, *, n_sequences: int = 4096, n_exact: int = 32, n_samples: int = 256,
                              seed: int = 0, dtype=F32) -> dict[str, np.ndarray]:
    """`induction_references` and `stationary_start_gap` on every `(S, T, beta)`; one row per point.

    Vmapped over `(S, beta)` for each `T` (which sets the shapes). Columns:
    `S, T, beta`, the reference losses and standard errors, `entropy_rate`,
    `stationary_entropy` (+ `_se`) and `stationary_start_gap` (+ `_se`):
    the Dirichlet predictive's loss minus the exact stationary-start Bayes loss
    (`n_exact` chains, `n_samples` posterior draws; `n_exact=0` skips it: NaN).
    """
    Ss = tuple(int(s) for s in np.atleast_1d(Ss))
    Ts = tuple(int(t) for t in np.atleast_1d(Ts))
    betas = tuple(float(b) for b in np.atleast_1d(betas))
    for S in Ss:
        _check_S(S, None)
    for T in Ts:
        _check_int("T", T, 2)
    for b in betas:
        _check_positive("beta", b)
    _check_int("n_sequences", n_sequences, 2)
    _check_int("n_exact", n_exact, 0)
    _check_int("n_samples", n_samples, 1)
    S_max = max(Ss)
    S_col, b_col = (a.ravel() for a in np.meshgrid(Ss, betas, indexing="ij"))
    rows: dict[str, list] = {}
    for T in Ts:
        out = jax.device_get(_reference_points(jnp.asarray(S_col), jnp.asarray(b_col, dtype), T=T, S_max=S_max,
                                               n_sequences=n_sequences, n_exact=n_exact, n_samples=n_samples,
                                               seed=seed, dtype=np.dtype(dtype).name))
        out = dict(S=S_col, T=np.full(len(S_col), T), beta=b_col) | out
        for k, v in out.items():
            rows.setdefault(k, []).append(np.asarray(v))
    return {k: np.concatenate(v) for k, v in rows.items()}


# ----------------------------------------------------------------------------
# Sweeps
# ----------------------------------------------------------------------------
