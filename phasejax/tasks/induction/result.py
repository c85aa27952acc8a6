"""Induction heads on in-context Markov chains (Nichani, Damian, Lee 2024; Edelman et al. 2024; Bietti et al. 2023).

Data (`sample_sequence`): per sequence a transition matrix `P (S, S)` with
rows drawn iid from `Dirichlet(beta 1_S)`, a first state drawn from the
stationary law `pi P = pi`, then `T` tokens of the chain. The task is
next-token prediction *in context*: `P` is new in every sequence, so a model
can only predict well by estimating the transitions from the sequence itself.

Loss (`soft_cross_entropy`): at every position `t = 1..T` the prediction
`q_t` of the next token given `s_{1:t}` is scored by the expected log loss
`-sum_{s'} P[s_t, s'] log q_t(s')` (the next token's law given the past and
`P`), averaged over the `T` positions. It equals the usual sampled next-token
cross-entropy in expectation and has a smaller variance (it averages out the
draw of the next token).

References (`bayes_predictive`, `unigram_predictive`, `induction_references`):

* uniform: `q = 1/S`, loss `log S`;
* in-context unigram: `q(s') = (n_t(s') + alpha) / (t + S alpha)` with
  `n_t(s')` the count of `s'` in `s_{1:t}` and `alpha` chosen on a grid to
  minimise the loss (the best add-alpha unigram estimator);
* bigram = Bayes: the Dirichlet posterior predictive
  `q(s') = (n_t(s_t -> s') + beta) / (n_t(s_t) + S beta)`, with `n_t(s -> s')`
  the transitions `s_{j-1} = s, s_j = s'` for `2 <= j <= t` and
  `n_t(s) = sum_{s'} n_t(s -> s')`. It is the exact posterior mean of
  `P[s_t, :]` when the first state carries no information on `P`; with the
  stationary start the exact posterior has the extra factor `pi_P(s_1)`
  (`stationary_start_predictive` estimates that predictor by importance
  sampling; its loss differs from the Dirichlet one by a small amount that
  the summary reports).

Models (pure functions on parameter dicts, `induction_forward`):

* `"disentangled"` (Nichani, Damian, Lee 2024): one-hot token and position
  embeddings `x_i = [e_{s_i}, e_i]` (`d_0 = S + T`); layer `l` computes
  `A_l = softmax_causal(h_{l-1} W_l h_{l-1}^T)` and *concatenates*
  `h_l = [h_{l-1}, A_l h_{l-1}]` (`d_l = 2 d_{l-1}`), no value or output
  matrices. Readout `"probability"` (default): the last layer's attention
  averages the one-hot tokens of the keys, with one extra "sink" key of
  learned score `b` whose value is the uniform law, and that average *is*
  the predicted law. `readout="linear"`: logits `W_O h_L` (softmax).
  The probability readout can represent the Bayes predictor exactly
  (`induction_head_params`): layer 1 attends to the previous token, layer 2
  attends to the keys whose previous token equals the current token, and
  the sink at score `c + log(S beta)` adds the prior counts `beta`.
* `"standard"`: learned token and position embeddings of size `d_model`,
  pre-layer-norm blocks (one causal attention head, GELU MLP, residual
  sums), a final layer norm and a linear unembedding.

Padding: `S <= S_max` is an array argument (vmapped); states `>= S` never
occur, their one-hot coordinates are 0, their parameters get zero gradient
and their predicted probability is 0 (so a padded model computes what the
unpadded one does). `T`, the model and the layer count set the array shapes
and are static.

`induction_run(seed, S, beta, ...)` trains one model online (Adam, a fresh
batch every step) and measures it on `n_eval` fresh sequences shared by all
runs of the same `(S, T, beta)`; `induction_sweep` runs a grid through
`phasejax.sweep.run_chunked` (vmapped over `(S, beta, seed)`, one compiled
sweep per `(model, layers, T)`), and returns an `InductionResult`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

from phasejax.io import atomic_save_npz, atomic_write_json, load_npz, read_csv, read_json, write_csv
from phasejax.sweep import RunOptions, run_chunked, run_options

Array = jax.Array
F32 = jnp.float32


# ----------------------------------------------------------------------------
# Validation helpers
# ----------------------------------------------------------------------------


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_int(name: str, value, minimum: int) -> None:
    """`ValueError` naming `name` unless the (concrete) `value` is an integer `>= minimum` (tracers pass)."""
    if not _is_concrete(value):
        return
    a = np.asarray(value)
    if a.dtype == bool or not np.issubdtype(a.dtype, np.number) or np.any(a != np.round(a)) or np.any(a < minimum):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {name}={value!r}")


def _check_positive(name: str, value) -> None:
    """`ValueError` naming `name` unless the (concrete) `value` is finite and `> 0` (tracers pass)."""
    if not _is_concrete(value):
        return
    a = np.asarray(value, dtype=float)
    if np.any(~np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"{name} must be finite and > 0, got {name}={value!r}")


def _check_S(S, S_max: int | None) -> None:
    _check_int("S", S, 2)
    if S_max is not None:
        _check_int("S_max", S_max, 2)
        if _is_concrete(S) and np.any(np.asarray(S) > S_max):
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
        if not _is_concrete(S):
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


def record_steps(steps: int, n_records: int) -> np.ndarray:
    """Ends of the (about) `n_records` geometric blocks `(end_{k-1}, end_k]` of `1..steps` the curves average over.

    `end_0 = 1` (the first step alone) and the last end is `steps`; blocks grow
    geometrically, so early training is resolved step by step and a curve
    looks even on a logarithmic step axis. Duplicates are dropped, so fewer
    than `n_records` ends may come back when `steps < n_records`-ish.
    """
    _check_int("steps", steps, 1)
    _check_int("n_records", n_records, 1)
    return np.unique(np.round(np.geomspace(1, steps, n_records)).astype(np.int64))


def _block_means(x: Array, ends: np.ndarray) -> Array:
    """Means of `x (steps, ...)` over the blocks `(ends[k-1], ends[k]]` (1-based steps; block 0 is `1..ends[0]`)."""
    c = jnp.concatenate([jnp.zeros((1,) + x.shape[1:], x.dtype), jnp.cumsum(x, 0)])
    starts = np.concatenate([[0], ends[:-1]])
    width = (ends - starts).astype(np.float32).reshape((-1,) + (1,) * (x.ndim - 1))
    return (c[ends] - c[starts]) / width


def train_induction(params0: dict, key: Array, S, beta, model: InductionModel, *, T: int, S_max: int, steps: int,
                    batch_size: int = 32, learning_rate: float = 1e-2, n_records: int = 60,
                    dtype=F32) -> tuple[dict, dict[str, Array]]:
    """Adam on fresh batches of in-context chains (one new batch per step; `lax.scan`). Pure; vmap over seeds.

    Returns `(params, curves)`: `curves["loss"] (R,)` the training loss and
    `curves["prev_token_attention"] (R, layers)` the per-layer mass on the
    previous token, both averaged over the `R` geometric blocks of steps
    ending at `record_steps(steps, n_records)`.
    """
    _check_int("steps", steps, 1)
    _check_int("batch_size", batch_size, 1)
    _check_positive("learning_rate", learning_rate)
    ends = record_steps(steps, n_records)
    optimizer = optax.adam(learning_rate)

    def step(carry, k):
        params, state = carry
        tokens, P = sample_batch(k, batch_size, S, beta, T, S_max, dtype)
        (loss, prev), grad = jax.value_and_grad(batch_loss, has_aux=True)(params, tokens, P, S, model)
        updates, state = optimizer.update(grad, state, params)
        return (optax.apply_updates(params, updates), state), (loss, prev)

    (params, _), (losses, prev) = jax.lax.scan(step, (params0, optimizer.init(params0)),
                                               jax.random.split(key, steps))
    return params, dict(loss=_block_means(losses, ends), prev_token_attention=_block_means(prev, ends))


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


def evaluate_induction(params: dict, tokens: Array, P: Array, S, model: InductionModel) -> dict[str, Array]:
    """A model on evaluation chains `tokens (n, T)`, `P (n, S_max, S_max)`: losses and attention diagnostics.

    Returns `sequence_loss (n,)` (expected log loss of each chain, mean over
    positions), `position_loss (T,)` (mean over chains), per layer
    `prev_token_attention (layers,)`, `prev_token_profile (layers, T)` (the
    mass `A[t, t-1]` at each position, NaN at `t = 0`),
    `induction_attention (layers,)` and its uniform-attention value
    `induction_attention_chance`, and the patterns on chain 0,
    `example_attention (layers, T, T)`, `example_tokens (T,)`.
    """
    log_q, attn = jax.vmap(lambda x: induction_forward(params, x, S, model))(tokens)
    model_pos = jax.vmap(soft_cross_entropy)(log_q, tokens, P)                       # (n, T)
    T = tokens.shape[-1]
    ind = [jax.vmap(induction_attention)(a, tokens) for a in attn]
    return dict(
        sequence_loss=jnp.mean(model_pos, -1), position_loss=jnp.mean(model_pos, 0),
        prev_token_attention=jnp.stack([jnp.mean(jax.vmap(previous_token_attention)(a)) for a in attn]),
        prev_token_profile=jnp.stack([jnp.concatenate([jnp.full((1,), jnp.nan, a.dtype),
                                                       jnp.mean(a[:, jnp.arange(1, T), jnp.arange(T - 1)], 0)])
                                      for a in attn]),
        induction_attention=jnp.stack([jnp.mean(i[0]) for i in ind]),
        induction_attention_chance=jnp.stack([jnp.mean(i[1]) for i in ind]),
        example_attention=jnp.stack([a[0] for a in attn]), example_tokens=tokens[0])


def induction_run(seed, S, beta, eval_tokens: Array, eval_P: Array, *, model: InductionModel, T: int, S_max: int,
                  steps: int, batch_size: int = 32, learning_rate: float = 1e-2, init_scale: float = 0.02,
                  n_records: int = 60, dtype=F32) -> dict[str, Array]:
    """One run, pure in `seed`, `S`, `beta` and the evaluation chains (vmap over them): init, online Adam, evaluation.

    `eval_tokens (n, T)`, `eval_P (n, S_max, S_max)`: the chains it is scored
    on (`evaluation_chains`). Returns `evaluate_induction`'s outputs plus the
    training curves `curve_loss (R,)`, `curve_prev_token_attention (R, layers)`.
    """
    k_init, k_train = jax.random.split(jax.random.PRNGKey(seed))
    params0 = init_induction_params(k_init, model, S_max, T, init_scale=init_scale, dtype=dtype)
    params, curves = train_induction(params0, k_train, S, beta, model, T=T, S_max=S_max, steps=steps,
                                     batch_size=batch_size, learning_rate=learning_rate, n_records=n_records,
                                     dtype=dtype)
    out = evaluate_induction(params, eval_tokens, eval_P, S, model)
    out["curve_loss"] = curves["loss"]
    out["curve_prev_token_attention"] = curves["prev_token_attention"]
    return out


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


@dataclasses.dataclass(frozen=True)
class InductionTraining:
    """Optimisation and evaluation settings shared by every run of a sweep.

    Adam (`learning_rate`) on `steps` fresh batches of `batch_size` chains;
    initial scale `init_scale`; curves averaged over `n_records` geometric
    blocks of steps (`record_steps`); evaluation on `n_eval` chains drawn
    from `eval_seed`.
    """

    steps: int = 1500
    batch_size: int = 32
    learning_rate: float = 0.03
    init_scale: float = 0.02
    n_records: int = 60
    n_eval: int = 512
    eval_seed: int = 12345

    def __post_init__(self):
        for name in ("steps", "batch_size", "n_records", "n_eval"):
            _check_int(name, getattr(self, name), 1)
        _check_int("eval_seed", self.eval_seed, 0)
        _check_positive("learning_rate", self.learning_rate)
        _check_positive("init_scale", self.init_scale)


@dataclasses.dataclass(frozen=True)
class InductionGrid:
    """Runs `models x Ts x Ss x betas x seeds`; `S_max` (default `max(Ss)`) is the padded state count.

    `(S, beta, seed)` are vmapped (`tasks()`); each `(model, T)` is one
    compiled sweep (`groups()`), since the model and `T` set the array shapes.
    """

    models: tuple[InductionModel, ...] = (InductionModel(layers=1), InductionModel(layers=2))
    Ss: tuple[int, ...] = (2, 3, 5)
    Ts: tuple[int, ...] = (16, 32, 64)
    betas: tuple[float, ...] = (1.0,)
    seeds: tuple[int, ...] = (0, 1)
    S_max: int | None = None

    def __post_init__(self):
        models = tuple(self.models) if isinstance(self.models, (tuple, list)) else (self.models,)
        if not models or not all(isinstance(m, InductionModel) for m in models):
            raise ValueError(f"models must be a non-empty tuple of InductionModel, got {self.models!r}")
        object.__setattr__(self, "models", models)
        for name, kind in (("Ss", int), ("Ts", int), ("betas", float), ("seeds", int)):
            vals = tuple(kind(v) for v in np.atleast_1d(getattr(self, name)))
            if not vals:
                raise ValueError(f"{name} must not be empty")
            object.__setattr__(self, name, vals)
        for S in self.Ss:
            _check_int("S", S, 2)
        for T in self.Ts:
            _check_int("T", T, 2)
        for b in self.betas:
            _check_positive("beta", b)
        for s in self.seeds:
            _check_int("seed", s, 0)
        if self.S_max is not None:
            _check_int("S_max", self.S_max, 2)
            if self.S_max < max(self.Ss):
                raise ValueError(f"S_max must be >= max(Ss)={max(self.Ss)}, got S_max={self.S_max}")

    @property
    def padded_S(self) -> int:
        return max(self.Ss) if self.S_max is None else int(self.S_max)

    def tasks(self) -> dict[str, np.ndarray]:
        """Flat table `S, beta, seed` (order `S, beta, seed`) and `point`, the index of `(S, beta)` in `points()`."""
        S, b, s = np.meshgrid(self.Ss, self.betas, self.seeds, indexing="ij")
        point = np.meshgrid(np.arange(len(self.Ss) * len(self.betas)), self.seeds, indexing="ij")[0]
        return dict(S=S.ravel().astype(np.int32), beta=b.ravel().astype(np.float64), seed=s.ravel().astype(np.int64),
                    point=point.ravel().astype(np.int32))

    @property
    def point_index(self) -> np.ndarray:
        """Row of `tasks()` of the first seed of each point `(S, beta)` (in the order of `point`)."""
        return np.arange(len(self.Ss) * len(self.betas)) * len(self.seeds)

    def groups(self) -> list[tuple[InductionModel, int]]:
        return [(m, T) for m in self.models for T in self.Ts]


def _group_name(model: InductionModel, T: int, batch_size: int) -> str:
    return f"{model.name}-L{model.layers}-T{T}-B{batch_size}"


def induction_sweep(grid: InductionGrid, training: InductionTraining = InductionTraining(), *,
                    reference_sequences: int = 4096, n_exact: int = 32, n_samples: int = 256, dtype=F32,
                    options: RunOptions | None = None) -> "InductionResult | None":
    """Train every run of `grid` and measure it; reference losses by simulation on every `(S, T, beta)`.

    Every run of a point `(S, T, beta)` is scored on the same `training.n_eval`
    chains (`evaluation_chains`), on which the reference losses are computed
    once; the gaps to them are paired by chain. The references by simulation
    (`induction_reference_table` with `reference_sequences` fresh chains,
    `n_exact`, `n_samples`; `reference_sequences=0` skips it) are computed
    after the runs.

    Each `(model, T)` group goes through `phasejax.sweep.run_chunked` (vmap of
    `induction_run` over `(S, beta, seed)`, chunk files under
    `run_dir/<model>-L<layers>-T<T>-B<batch_size>/`); `options` as there, default
    `RunOptions(chunk_size=64)` (one chunk per group on small grids).
    Returns an `InductionResult`, or `None` while some chunk is missing.
    """
    options = run_options(options if options is not None else RunOptions(chunk_size=64))
    if not isinstance(training, InductionTraining):
        raise ValueError(f"training must be an InductionTraining, got {type(training).__name__}")
    _check_int("reference_sequences", reference_sequences, 0)
    dt = _check_dtype(dtype)
    S_max = grid.padded_S
    tasks = grid.tasks()
    pieces, missing = [], False
    for T in grid.Ts:
        # the evaluation chains and the references on them, once per point (S, beta)
        eval_tokens, eval_P, eval_refs = _evaluation_set(
            jnp.asarray(tasks["S"][grid.point_index]), jnp.asarray(tasks["beta"][grid.point_index], dt), T=T,
            S_max=S_max, n_eval=training.n_eval, eval_seed=training.eval_seed, dtype=dt.name)
        eval_refs = {k: np.asarray(v) for k, v in jax.device_get(eval_refs).items()}
        for model in grid.models:
            def fn(chunk, model=model, T=T, eval_tokens=eval_tokens, eval_P=eval_P):
                one = lambda seed, S, beta, point: induction_run(  # noqa: E731
                    seed, S, beta, eval_tokens[point], eval_P[point], model=model, T=T, S_max=S_max,
                    steps=training.steps, batch_size=training.batch_size, learning_rate=training.learning_rate,
                    init_scale=training.init_scale, n_records=training.n_records, dtype=dt)
                return jax.vmap(one)(jnp.asarray(chunk["seed"]), jnp.asarray(chunk["S"]),
                                     jnp.asarray(chunk["beta"], dt), jnp.asarray(chunk["point"]))

            config = dict(kind="induction_sweep", model=dataclasses.asdict(model), T=T, S_max=S_max,
                          training=dataclasses.asdict(training), dtype=str(dt),
                          data="Dirichlet(beta) rows, stationary start, fresh batch per step",
                          loss="expected next-token log loss over the T positions", optimizer="adam")
            sub = None if options.run_dir is None else os.path.join(options.run_dir,
                                                                    _group_name(model, T, training.batch_size))
            out = run_chunked(fn, tasks, config, options.replace(run_dir=sub))
            if out is None:
                missing = True
                continue
            pieces.append((model, T, out, eval_refs))
    if missing:
        return None
    if reference_sequences:
        references = induction_reference_table(grid.Ss, grid.Ts, grid.betas, n_sequences=reference_sequences,
                                               n_exact=n_exact, n_samples=n_samples, seed=training.eval_seed,
                                               dtype=dt)
    else:
        references = {}
    config = dict(grid=dict(models=[dataclasses.asdict(m) for m in grid.models], Ss=list(grid.Ss),
                            Ts=list(grid.Ts), betas=list(grid.betas), seeds=list(grid.seeds), S_max=S_max),
                  training=dataclasses.asdict(training), reference_sequences=reference_sequences,
                  n_exact=n_exact, n_samples=n_samples, dtype=str(dt))
    return InductionResult.from_runs(pieces, tasks, references, config)


# ----------------------------------------------------------------------------
# Result
# ----------------------------------------------------------------------------

RUN_COLUMNS = (
    "model", "layers", "S", "T", "beta", "seed", "batch_size", "final_loss", "final_loss_se", "bayes_loss",
    "bayes_loss_se", "unigram_loss", "unigram_loss_se", "unigram_alpha", "uniform_loss", "gap_to_bayes",
    "gap_to_bayes_se", "relative_gap", "prev_token_attention", "prev_token_attention_1", "prev_token_attention_2",
    "induction_attention_1", "induction_attention_2", "induction_attention_chance", "induction_step",
    "loss_drop_step", "steps_nearest_uniform", "steps_nearest_unigram", "steps_nearest_bayes",
    "first_nearest_uniform", "first_nearest_unigram", "first_nearest_bayes",
)
"""Columns of `runs.csv`. Per-layer columns `_1`, `_2` are empty (NaN) for absent layers;
`prev_token_attention` is the first layer's; steps are -1 when the event never happens; `batch_size` is the
number of chains per training step."""

LEVELS = ("uniform", "unigram", "bayes")
"""The three plateau levels. Each recorded training loss (after a running median over 3 records, against the
noise of single-step records) is assigned to the nearest level; `steps_nearest_<level>` sums the steps of the
records assigned to it (how long training sits there) and `first_nearest_<level>` is the first such step."""


def _nearest_levels(loss: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Index of the level nearest to each record of `loss (R,)`, after a running median over 3 records."""
    padded = np.concatenate([loss[:1], loss, loss[-1:]])
    smooth = np.median(np.stack([padded[:-2], padded[1:-1], padded[2:]]), 0)
    return np.argmin(np.abs(smooth[:, None] - levels[None, :]), 1)

FORMATION_THRESHOLD = 0.5
"""`induction_step`: first step at which the first layer's mass on the previous token reaches this value."""


def _first_step(values: np.ndarray, steps: np.ndarray, threshold: float, below: bool) -> int:
    hit = values <= threshold if below else values >= threshold
    return int(steps[np.argmax(hit)]) if np.any(hit) else -1


@dataclasses.dataclass
class InductionResult:
    """Outputs of `induction_sweep` (numpy tables; `write` / `load` round-trip them exactly).

    * `runs`: one row per run (`RUN_COLUMNS`);
    * `curves`: long table `run, step, loss, prev_token_attention_1, prev_token_attention_2`
      (training batches, means over the geometric block of steps ending at `step`, see `record_steps`);
    * `positions`: long table `run, position, loss, bayes, unigram, prev_token_attention_1, _2`
      (evaluation loss at position `t = 1..T` and the mass `A_l[t, t-1]`, mean over the evaluation chains);
    * `references`: one row per `(S, T, beta)` (`induction_reference_table`);
    * `attention`: example attention patterns of the first seed's runs,
      `run{i}_layer{l}` `(T, T)` and `run{i}_tokens` `(T,)` (evaluation sequence 0);
    * `eval_losses`: `run{i}` `(n_eval,)` each run's loss on every evaluation chain (for paired comparisons);
    * `config`: the grid and training settings;
    * `floor`: optional `exact_floor_check` table (`{}` when not computed).
    """

    runs: dict
    curves: dict
    positions: dict
    references: dict
    attention: dict
    eval_losses: dict
    config: dict
    floor: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_runs(cls, pieces, tasks, references, config) -> "InductionResult":
        """Assemble the tables from `[(model, T, run_chunked outputs, evaluation references)]` and the tasks."""
        runs: dict[str, list] = {k: [] for k in RUN_COLUMNS}
        curves: dict[str, list] = {k: [] for k in ("run", "step", "loss", "prev_token_attention_1",
                                                    "prev_token_attention_2")}
        positions: dict[str, list] = {k: [] for k in ("run", "position", "loss", "bayes", "unigram",
                                                      "prev_token_attention_1", "prev_token_attention_2")}
        attention, eval_losses = {}, {}
        ends = record_steps(int(config["training"]["steps"]), int(config["training"]["n_records"]))
        widths = np.diff(np.concatenate([[0], ends]))
        first_seed = int(np.min(tasks["seed"]))
        batch_size = int(config["training"]["batch_size"])
        i = 0
        for model, T, out, refs in pieces:
            L = model.layers
            for r in range(len(tasks["S"])):
                pt = int(tasks["point"][r])
                layer = lambda key, l: float(out[key][r][l]) if l < L else np.nan  # noqa: E731
                row = dict(model=model.name, layers=L, S=int(tasks["S"][r]), T=T, beta=float(tasks["beta"][r]),
                           seed=int(tasks["seed"][r]), batch_size=batch_size)
                seq = np.asarray(out["sequence_loss"][r], np.float64)
                bayes, uni = np.asarray(refs["bayes"][pt], np.float64), np.asarray(refs["unigram"][pt], np.float64)
                for name, x in (("final_loss", seq), ("bayes_loss", bayes), ("unigram_loss", uni),
                                ("gap_to_bayes", seq - bayes)):
                    row[name] = float(np.mean(x))
                    row[f"{name}_se"] = float(np.std(x, ddof=1) / np.sqrt(len(x)))
                row["unigram_alpha"] = float(refs["unigram_alpha"][pt])
                row["uniform_loss"] = float(refs["uniform"][pt])
                row["relative_gap"] = row["gap_to_bayes"] / row["bayes_loss"]
                row["prev_token_attention"] = layer("prev_token_attention", 0)
                for l in (0, 1):
                    row[f"prev_token_attention_{l + 1}"] = layer("prev_token_attention", l)
                    row[f"induction_attention_{l + 1}"] = layer("induction_attention", l)
                row["induction_attention_chance"] = float(out["induction_attention_chance"][r][L - 1])
                loss = np.asarray(out["curve_loss"][r], float)
                prev = np.asarray(out["curve_prev_token_attention"][r], float)
                steps = ends
                row["induction_step"] = (_first_step(prev[:, 0], steps, FORMATION_THRESHOLD, False) if L >= 2
                                         else -1)
                row["loss_drop_step"] = _first_step(loss, steps, 0.5 * (row["unigram_loss"] + row["bayes_loss"]),
                                                    True)
                nearest = _nearest_levels(loss, np.asarray([row[f"{n}_loss"] for n in LEVELS]))
                for k, name in enumerate(LEVELS):
                    near = nearest == k
                    row[f"steps_nearest_{name}"] = int(np.sum(widths[near]))
                    row[f"first_nearest_{name}"] = int(steps[np.argmax(near)]) if np.any(near) else -1
                for k in RUN_COLUMNS:
                    runs[k].append(row[k])
                curves["run"].append(np.full(len(loss), i))
                curves["step"].append(steps)
                curves["loss"].append(loss)
                for l in (0, 1):
                    curves[f"prev_token_attention_{l + 1}"].append(prev[:, l] if l < L else np.full(len(loss), np.nan))
                positions["run"].append(np.full(T, i))
                positions["position"].append(np.arange(1, T + 1))
                positions["loss"].append(np.asarray(out["position_loss"][r], float))
                positions["bayes"].append(np.asarray(refs["bayes_curve"][pt], float))
                positions["unigram"].append(np.asarray(refs["unigram_curve"][pt], float))
                for l in (0, 1):
                    positions[f"prev_token_attention_{l + 1}"].append(
                        np.asarray(out["prev_token_profile"][r][l], float) if l < L else np.full(T, np.nan))
                eval_losses[f"run{i}"] = np.asarray(out["sequence_loss"][r], np.float32)
                if row["seed"] == first_seed:
                    attention[f"run{i}_tokens"] = np.asarray(out["example_tokens"][r], np.int64)
                    for l in range(L):
                        attention[f"run{i}_layer{l + 1}"] = np.asarray(out["example_attention"][r][l], np.float32)
                i += 1
        runs = {k: np.asarray(v) for k, v in runs.items()}
        curves = {k: np.concatenate(v) for k, v in curves.items()}
        positions = {k: np.concatenate(v) for k, v in positions.items()}
        refs = {k: np.asarray(v) for k, v in references.items()}
        return cls(runs=runs, curves=curves, positions=positions, references=refs, attention=attention,
                   eval_losses=eval_losses, config=dict(config))

    @classmethod
    def concatenate(cls, results: list["InductionResult"]) -> "InductionResult":
        """One result from several (runs renumbered; references of repeated `(S, T, beta)` kept once)."""
        runs, curves, positions, attention, refs, evals, floors = [], [], [], {}, [], {}, []
        offset = 0
        for res in results:
            n = len(res.runs["S"])
            runs.append(res.runs)
            curves.append(dict(res.curves, run=res.curves["run"] + offset))
            positions.append(dict(res.positions, run=res.positions["run"] + offset))
            for k, v in res.attention.items():
                idx, rest = k[3:].split("_", 1)
                attention[f"run{int(idx) + offset}_{rest}"] = v
            if res.references:
                refs.append(res.references)
            evals.update({f"run{int(k[3:]) + offset}": v for k, v in res.eval_losses.items()})
            if res.floor:
                floors.append(dict(res.floor, run=res.floor["run"] + offset))
            offset += n
        cat = lambda tables: {k: np.concatenate([t[k] for t in tables]) for k in tables[0]}  # noqa: E731
        ref = cat(refs) if refs else {}
        keys = list(zip(ref["S"].tolist(), ref["T"].tolist(), ref["beta"].tolist())) if ref else []
        keep = [keys.index(k) for k in dict.fromkeys(keys)]
        return cls(runs=cat(runs), curves=cat(curves), positions=cat(positions),
                   references={k: v[keep] for k, v in ref.items()}, attention=attention, eval_losses=evals,
                   config=dict(parts=[r.config for r in results]), floor=cat(floors) if floors else {})

    def write(self, out_dir: str) -> list[str]:
        """Write `runs.csv`, `curves.csv`, `position_losses.csv`, `attention.npz`, `eval_losses.npz`,
        `config.json`, `references.csv` and `exact_floor.csv` (when not empty) and the derived
        `summary.json` into `out_dir`; returns the paths."""
        os.makedirs(out_dir, exist_ok=True)
        j = lambda name: os.path.join(out_dir, name)  # noqa: E731
        paths = [write_csv(j("runs.csv"), self.runs, order=RUN_COLUMNS),
                 write_csv(j("curves.csv"), self.curves),
                 write_csv(j("position_losses.csv"), self.positions),
                 atomic_save_npz(j("attention.npz"), self.attention),
                 atomic_save_npz(j("eval_losses.npz"), self.eval_losses),
                 atomic_write_json(j("config.json"), self.config)]
        for name, table, order in (("references.csv", self.references, None),
                                   ("exact_floor.csv", self.floor, FLOOR_COLUMNS)):
            if table:
                paths.append(write_csv(j(name), table, order=order))
            elif os.path.exists(j(name)):
                os.remove(j(name))
        return paths + [atomic_write_json(j("summary.json"), induction_summary(self))]

    @classmethod
    def load(cls, out_dir: str) -> "InductionResult":
        """Read back what `write` wrote."""
        j = lambda name: os.path.join(out_dir, name)  # noqa: E731
        runs = read_csv(j("runs.csv"))
        runs["model"] = runs["model"].astype(str)
        config = read_json(j("config.json"))
        if "batch_size" not in runs:        # written before the column existed: one batch size for every part
            parts = config.get("parts", [config])
            sizes = {int(p["training"]["batch_size"]) for p in parts if "training" in p}
            if len(sizes) != 1:
                raise ValueError(f"{j('runs.csv')} has no batch_size column and config.json does not give one "
                                 f"batch size for every run (found {sorted(sizes)})")
            runs["batch_size"] = np.full(len(runs["S"]), sizes.pop())
        attention, eval_losses = load_npz(j("attention.npz")), load_npz(j("eval_losses.npz"))
        for name, value in (("attention.npz", attention), ("eval_losses.npz", eval_losses)):
            if value is None:
                raise ValueError(f"{j(name)} is missing or unreadable")
        floor = read_csv(j("exact_floor.csv")) if os.path.exists(j("exact_floor.csv")) else {}
        if floor:
            floor["model"] = floor["model"].astype(str)
        references = read_csv(j("references.csv")) if os.path.exists(j("references.csv")) else {}
        return cls(runs=runs, curves=read_csv(j("curves.csv")), positions=read_csv(j("position_losses.csv")),
                   references=references, attention=attention, eval_losses=eval_losses, config=config, floor=floor)

    def select(self, **where) -> np.ndarray:
        """Indices of the runs whose columns equal the given values (`select(model="standard", T=64)`)."""
        ok = np.ones(len(self.runs["S"]), bool)
        for k, v in where.items():
            col = self.runs[k]
            ok &= np.isclose(col, v) if np.issubdtype(col.dtype, np.floating) else (col == v)
        return np.flatnonzero(ok)

    def subset(self, idx) -> "InductionResult":
        """The runs `idx` (indices into `runs`, in that order) and their curves, positions, attention maps,
        evaluation losses and floor rows, renumbered `0..len(idx)-1`; references and config kept."""
        idx = np.asarray(idx, np.int64).ravel()
        n = len(self.runs["S"])
        if idx.size == 0 or np.any((idx < 0) | (idx >= n)) or len(np.unique(idx)) != idx.size:
            raise ValueError(f"idx must be distinct run indices in [0, {n}), got {idx.tolist()}")
        new = np.full(n, -1, np.int64)
        new[idx] = np.arange(idx.size)

        def long(table):
            if not table:
                return {}
            keep = new[np.asarray(table["run"], np.int64)] >= 0
            order = np.argsort(new[np.asarray(table["run"], np.int64)[keep]], kind="stable")
            out = {k: np.asarray(v)[keep][order] for k, v in table.items()}
            out["run"] = new[np.asarray(table["run"], np.int64)[keep]][order]
            return out

        def renamed(arrays):
            out = {}
            for k, v in arrays.items():
                i, rest = (k[3:].split("_", 1) + [""])[:2]
                if new[int(i)] >= 0:
                    out[f"run{new[int(i)]}" + (f"_{rest}" if rest else "")] = v
            return out

        return InductionResult(runs={k: np.asarray(v)[idx] for k, v in self.runs.items()}, curves=long(self.curves),
                               positions=long(self.positions), references=dict(self.references),
                               attention=renamed(self.attention), eval_losses=renamed(self.eval_losses),
                               config=dict(self.config), floor=long(self.floor))


FLOOR_COLUMNS = ("run", "model", "layers", "S", "T", "beta", "seed", "n_chains", "n_samples", "model_minus_exact",
                 "model_minus_exact_se", "dirichlet_minus_exact", "dirichlet_minus_exact_se", "model_minus_dirichlet",
                 "model_minus_dirichlet_se")
"""Columns of `exact_floor.csv` (paired differences of mean losses on the same evaluation chains, nats)."""


@functools.partial(jax.jit, static_argnames=("S", "T", "S_max", "n_eval", "n_chains", "n_samples", "eval_seed",
                                             "dtype"))
def _exact_chain_losses(beta, *, S: int, T: int, S_max: int, n_eval: int, n_chains: int, n_samples: int,
                        eval_seed: int, dtype: str) -> tuple[Array, Array]:
    """Per-chain losses `(n_chains,)` of the Dirichlet and the exact stationary-start predictors on the first
    `n_chains` evaluation chains of `induction_run` (same key, same padding)."""
    tokens, P = evaluation_chains(S, beta, T, S_max, n_eval, eval_seed, dtype)
    tokens, P = tokens[:n_chains], P[:n_chains]
    keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(eval_seed), 2), n_chains)

    def one(k, x, p):
        exact = stationary_start_predictive(k, x, S, beta, S_max, n_samples, dtype)
        dirichlet = bayes_predictive(x, S, beta, S_max, dtype)
        return (jnp.mean(soft_cross_entropy(_safe_log(dirichlet), x, p)),
                jnp.mean(soft_cross_entropy(_safe_log(exact), x, p)))

    return jax.lax.map(lambda a: one(*a), (keys, tokens, P))


def exact_floor_check(result: InductionResult, *, eval_seed: int, n_eval: int, S_max: int, max_gap_se: float = 2.0,
                      n_chains: int = 256, n_samples: int = 128, dtype=F32) -> dict[str, np.ndarray]:
    """Compare the runs that come close to (or beat) the Dirichlet predictive with the exact Bayes floor.

    The Dirichlet posterior predictive ignores that the first state is drawn
    from `P`'s stationary law, so it is not quite the Bayes predictor and a
    trained model can beat it at small `T`. For every `(S, T, beta)` where
    some run's paired gap to it is below `max_gap_se` standard errors, the
    exact predictor (`stationary_start_predictive`, `n_samples` posterior
    draws) is evaluated on the first `n_chains` evaluation chains (the same
    chains the runs were scored on: `eval_seed`, `n_eval`, `S_max` of the
    sweep) and every run of that point is compared with it, paired by chain.
    Importance-sampling noise can only raise the exact predictor's loss, so a
    model found above the estimated floor is above the true one too only up
    to that `O(1 / n_samples)` bias. Returns a table with `FLOOR_COLUMNS`.
    """
    _check_int("n_chains", n_chains, 2)
    _check_int("n_samples", n_samples, 1)
    r = result.runs
    close = r["gap_to_bayes"] < max_gap_se * r["gap_to_bayes_se"]
    points = sorted(set(zip(r["S"][close].tolist(), r["T"][close].tolist(), r["beta"][close].tolist())))
    rows: dict[str, list] = {k: [] for k in FLOOR_COLUMNS}
    n = min(n_chains, n_eval)
    for S, T, beta in points:
        dirichlet, exact = (np.asarray(a, float) for a in _exact_chain_losses(
            jnp.asarray(beta, dtype), S=int(S), T=int(T), S_max=S_max, n_eval=n_eval, n_chains=n,
            n_samples=n_samples, eval_seed=eval_seed, dtype=np.dtype(dtype).name))
        for i in result.select(S=S, T=T, beta=beta):
            model = np.asarray(result.eval_losses[f"run{i}"], float)[:n]
            row = dict(run=int(i), model=str(r["model"][i]), layers=int(r["layers"][i]), S=int(S), T=int(T),
                       beta=float(beta), seed=int(r["seed"][i]), n_chains=n, n_samples=n_samples)
            for name, diff in (("model_minus_exact", model - exact), ("dirichlet_minus_exact", dirichlet - exact),
                               ("model_minus_dirichlet", model - dirichlet)):
                row[name] = float(np.mean(diff))
                row[f"{name}_se"] = float(np.std(diff, ddof=1) / np.sqrt(n))
            for k in FLOOR_COLUMNS:
                rows[k].append(row[k])
    return {k: np.asarray(v) for k, v in rows.items()}


def _prev_token_profile(result: InductionResult, run: int) -> np.ndarray:
    """Run `run`'s first-layer mass `A_1[t, t-1]` at the queries `t = 1 .. T-1` (0-based), shape `(T - 1,)`."""
    p = result.positions
    return np.asarray(p["prev_token_attention_1"][p["run"] == run], float)[1:]


def _prev_token_by_position(result: InductionResult, runs: np.ndarray, threshold: float) -> dict:
    """Where along the sequence the first layer's previous-token mass `A_1[t, t-1]` falls short of `threshold`.

    From the per-position profiles of `runs` (mean over evaluation chains):
    the mean mass over the queries of the first three quarters and of the
    last quarter of the sequence, and the fraction of queries `t >= 1` whose
    mass reaches `threshold` (run means). Key `j` is read by the queries
    `t >= j` only, so the last positions get the least training signal.
    """
    first, last, frac = [], [], []
    for i in runs:
        prof = _prev_token_profile(result, i)
        cut = (3 * (len(prof) + 1)) // 4
        first.append(np.mean(prof[:cut - 1]))
        last.append(np.mean(prof[cut - 1:]))
        frac.append(np.mean(prof >= threshold))
    return dict(mean_first_three_quarters=float(np.mean(first)), mean_last_quarter=float(np.mean(last)),
                fraction_of_queries_at_or_above_threshold=float(np.mean(frac)),
                note="first-layer mass on the previous token by query position (0-based t = 1..T-1, mean over the "
                     "evaluation chains, then over runs with T >= min_T)")


def induction_summary(result: InductionResult, *, within: float = 0.02, above: float = 0.05,
                      min_T: int = 64, prev_threshold: float = 0.9) -> dict:
    """Per-point statistics (mean and standard deviation over seeds) and the checks of the expected facts.

    Facts: (1) the Bayes loss is below every trained model's (paired, same
    sequences); (2) the 2-layer disentangled model ends within `within` of
    the Bayes loss and (3) the 1-layer one more than `above` above it at
    `T >= min_T`; (4) the 2-layer model's first layer puts at least
    `prev_threshold` of its mass on the previous token (at `T >= min_T`);
    (5) the training loss of the 2-layer runs passes near the uniform, the
    unigram and the Bayes levels in this order (and how long it stays);
    (6) with `result.floor`, no checked run lies below the exact Bayes floor.
    """
    r = result.runs
    points = []
    keys = sorted(set(zip(r["model"].tolist(), r["layers"].tolist(), r["S"].tolist(), r["T"].tolist(),
                          r["beta"].tolist(), r["batch_size"].tolist())),
                  key=lambda k: (k[0], k[1], k[5], k[3], k[2], k[4]))
    stat_cols = ("final_loss", "bayes_loss", "unigram_loss", "relative_gap", "prev_token_attention_1",
                 "prev_token_attention_2", "induction_attention_2", "induction_step", "loss_drop_step")
    for model, L, S, T, beta, batch in keys:
        idx = result.select(model=model, layers=L, S=S, T=T, beta=beta, batch_size=batch)
        pt = dict(model=model, layers=L, S=S, T=T, beta=beta, batch_size=batch, n_seeds=len(idx))
        for c in stat_cols:
            v = np.asarray(r[c], float)[idx]
            if c.endswith("_step"):
                v = np.where(v < 0, np.nan, v)
            pt[c] = dict(mean=float(np.nanmean(v)) if np.any(np.isfinite(v)) else None,
                         std=float(np.nanstd(v)) if np.any(np.isfinite(v)) else None)
        points.append(pt)
    dis = r["model"] == "disentangled"
    big = r["T"] >= min_T
    two, one = dis & (r["layers"] == 2), dis & (r["layers"] == 1)
    facts = {}
    z = r["gap_to_bayes"] / np.maximum(r["gap_to_bayes_se"], 1e-300)
    facts["bayes_below_every_model"] = dict(
        holds=bool(np.all(r["gap_to_bayes"] > 0)), min_gap=float(np.min(r["gap_to_bayes"])),
        min_gap_in_standard_errors=float(np.min(z)))
    if np.any(two & big):
        g = r["relative_gap"][two & big]
        facts["two_layer_within_bayes"] = dict(threshold=within, min_T=min_T, holds=bool(np.all(g <= within)),
                                               max_relative_gap=float(np.max(g)), mean_relative_gap=float(np.mean(g)))
        # per number of chains per step: the mass keeps rising with it (a sample-count effect), so the fact is
        # judged on the best-trained runs, the largest batch; every batch size is listed with its own verdict
        by_batch = {}
        for batch in np.unique(r["batch_size"][two & big]):
            sel = two & big & (r["batch_size"] == batch)
            p = r["prev_token_attention_1"][sel]
            by_batch[int(batch)] = dict(holds=bool(np.all(p >= prev_threshold)), n_runs=int(np.sum(sel)),
                                        Ss=sorted({int(v) for v in r["S"][sel]}), min=float(np.min(p)),
                                        mean=float(np.mean(p)), by_query_position=_prev_token_by_position(
                                            result, np.flatnonzero(sel), prev_threshold))
        largest = max(by_batch)
        facts["two_layer_prev_token_attention"] = dict(
            threshold=prev_threshold, min_T=min_T, judged_at_batch_size=largest,
            **{k: by_batch[largest][k] for k in ("holds", "min", "mean")}, by_batch_size=by_batch,
            note="first-layer mass on the previous token of the 2-layer disentangled runs at T >= min_T; holds, "
                 "min and mean are those of the runs with the most chains per training step (by_batch_size lists "
                 "every batch size with its own verdict)")
    if np.any(one & big):
        g = r["relative_gap"][one & big]
        facts["one_layer_above_bayes"] = dict(threshold=above, min_T=min_T, holds=bool(np.all(g > above)),
                                              min_relative_gap=float(np.min(g)), mean_relative_gap=float(np.mean(g)))
    if result.floor:
        f = result.floor
        zf = f["model_minus_exact"] / np.maximum(f["model_minus_exact_se"], 1e-300)
        facts["exact_floor_below_every_checked_model"] = dict(
            holds=bool(np.all(zf > -2.0)), n_checked_runs=int(len(zf)), min_model_minus_exact=float(np.min(
                f["model_minus_exact"])), min_in_standard_errors=float(np.min(zf)),
            max_dirichlet_minus_exact=float(np.max(f["dirichlet_minus_exact"])),
            note="runs within 2 standard errors of (or below) the Dirichlet predictive, compared on the same chains "
                 "with the exact stationary-start Bayes predictor; holds = none is more than 2 SE below it")
    for label, sel in (("two_layer", two), ("standard", r["model"] == "standard")):
        if not np.any(sel):
            continue
        first = {n: r[f"first_nearest_{n}"][sel] for n in LEVELS}
        in_order = (first["uniform"] >= 0) & (first["uniform"] < first["unigram"]) & (
            first["unigram"] < first["bayes"])
        facts[f"{label}_plateaus"] = dict(
            fraction_of_runs_in_order=float(np.mean(in_order)),
            median_steps_nearest={n: float(np.median(r[f"steps_nearest_{n}"][sel])) for n in first},
            median_first_step_nearest={n: float(np.median(v[v >= 0])) if np.any(v >= 0) else None
                                       for n, v in first.items()},
            holds=bool(np.all(in_order)),
            note="in order: the (median-of-3 smoothed) training loss is first nearest to the uniform, then to the "
                 "in-context unigram, then to the Bayes level; steps_nearest: how long it stays nearest to each "
                 "level (a plateau is a long stay)")
    if np.any(two):
        steps = r["induction_step"][two]
        facts["induction_step"] = dict(threshold=FORMATION_THRESHOLD, formed_in_fraction=float(np.mean(steps >= 0)),
                                       median=float(np.median(steps[steps >= 0])) if np.any(steps >= 0) else None)
    refs = result.references
    rel = (refs["stationary_start_gap"] / refs["bayes_loss"]) if "stationary_start_gap" in refs else np.array([np.nan])
    if np.any(np.isfinite(rel)):
        worst = int(np.nanargmax(rel))
        facts["stationary_start_correction"] = dict(
            max_relative=float(rel[worst]), at=dict(S=int(refs["S"][worst]), T=int(refs["T"][worst]),
                                                     beta=float(refs["beta"][worst])),
            max_relative_at_min_T=(float(np.nanmax(rel[refs["T"] >= min_T])) if np.any(refs["T"] >= min_T)
                                   else None),
            note="loss of the Dirichlet posterior predictive minus that of the exact Bayes predictor under the "
                 "stationary start (importance sampling), relative to the Bayes loss: how far the Dirichlet "
                 "predictive lies above the true floor")
    return dict(points=points, facts=facts, config=result.config)


# ----------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------

_STYLE = {("disentangled", 1): ("C0", "disentangled, 1 layer"), ("disentangled", 2): ("C3", "disentangled, 2 layers"),
          ("disentangled-linear", 1): ("C9", "disentangled (linear readout), 1 layer"),
          ("disentangled-linear", 2): ("C1", "disentangled (linear readout), 2 layers"),
          ("standard", 1): ("C2", "standard, 1 layer"), ("standard", 2): ("C4", "standard, 2 layers")}


def _style(model: str, layers: int) -> tuple[str, str]:
    return _STYLE.get((model, layers), ("C7", f"{model}, {layers} layers"))


def _models_in(result: InductionResult, idx) -> list[tuple[str, int]]:
    pairs = dict.fromkeys(zip(result.runs["model"][idx].tolist(), result.runs["layers"][idx].tolist()))
    return sorted(pairs, key=lambda p: (p[0] != "disentangled", p[0], p[1]))


def _default_S(result: InductionResult) -> int:
    Ss = np.unique(result.runs["S"])
    return int(Ss[len(Ss) // 2])


def plot_induction_curves(result: InductionResult, path: str, S: int | None = None, beta: float | None = None) -> str:
    """Training loss (top) and first-layer previous-token attention (bottom) vs step, one column per `T`.

    Thin lines: one per seed (block means of the training loss); dashed:
    the uniform, in-context unigram and Bayes (bigram) levels on the evaluation chains.
    """
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    S = _default_S(result) if S is None else S
    beta = float(result.runs["beta"][0]) if beta is None else beta
    Ts = np.unique(result.runs["T"][result.select(S=S, beta=beta)])
    fig = Figure(figsize=(4.2 * len(Ts), 7.0))
    axes = np.asarray(fig.subplots(2, len(Ts), squeeze=False, gridspec_kw=dict(hspace=0.28, wspace=0.25)))
    c = result.curves
    for j, T in enumerate(Ts):
        idx = result.select(S=S, T=T, beta=beta)
        ax, ax2 = axes[0, j], axes[1, j]
        for model, L in _models_in(result, idx):
            color, label = _style(model, L)
            for n, i in enumerate(idx[(result.runs["model"][idx] == model) & (result.runs["layers"][idx] == L)]):
                sel = c["run"] == i
                ax.plot(c["step"][sel], c["loss"][sel], color=color, lw=1.0, alpha=0.8, label=label if n == 0 else None)
                ax2.plot(c["step"][sel], c["prev_token_attention_1"][sel], color=color, lw=1.0, alpha=0.8,
                         label=label if n == 0 else None)
        r0 = idx[0]
        for name, ls, lab in (("uniform", ":", "uniform"), ("unigram", "--", "in-context unigram"),
                              ("bayes", "-.", "Bayes = bigram")):
            ax.axhline(result.runs[f"{name}_loss"][r0], color="k", ls=ls, lw=1.0, label=f"{lab} level")
        lo, hi = result.runs["bayes_loss"][r0], result.runs["uniform_loss"][r0]
        data = np.concatenate([c["loss"][c["run"] == i] for i in idx])
        ax.set_ylim(min(lo - 0.15 * (hi - lo), float(np.min(data)) - 0.02 * (hi - lo)),
                    max(hi + 0.25 * (hi - lo), float(np.max(data)) + 0.02 * (hi - lo)))
        ax.set_xscale("log")
        ax2.set_xscale("log")
        ax.set_title(f"S={S}, T={T}, beta={beta:g}", fontsize=9)
        ax.set_ylabel("training loss (nats / token)")
        ax2.axhline(0.9, color="gray", ls="--", lw=0.8, label="0.9")
        ax2.axhline(FORMATION_THRESHOLD, color="gray", ls=":", lw=0.8, label=f"{FORMATION_THRESHOLD} (formation)")
        ax2.set_ylim(0, 1)
        ax2.set_xlabel("training step (log scale)")
        ax2.set_ylabel("layer-1 mass on previous token")
    # one legend per row, right of the panels (the curves span their whole height); every column's entries
    for row in (0, 1):
        entries = {}
        for ax in axes[row]:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                entries.setdefault(label, handle)
        box = axes[row, -1].get_position()
        fig.legend(list(entries.values()), list(entries), fontsize=7, loc="center left",
                   bbox_to_anchor=(box.x1 + 0.01, 0.5 * (box.y0 + box.y1)), frameon=False)
    n_seeds = len(np.unique(result.runs["seed"]))
    fig.suptitle(f"Training on in-context Markov chains: loss and previous-token attention ({n_seeds} seeds, "
                 f"one line each; curves are means over blocks of steps)", fontsize=10)
    return save_figure(fig, path)


def plot_induction_attention(result: InductionResult, path: str, S: int | None = None, T: int | None = None,
                             beta: float | None = None) -> str:
    """Attention patterns of the first seed's models on one evaluation chain, and the per-position
    previous-token mass `A_1[t, t-1]` (mean over the evaluation chains)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    from phasejax.plotting import save_figure

    S = _default_S(result) if S is None else S
    T = int(np.max(result.runs["T"])) if T is None else T
    beta = float(result.runs["beta"][0]) if beta is None else beta
    idx = [i for i in result.select(S=S, T=T, beta=beta) if f"run{i}_tokens" in result.attention]
    panels = [(i, l) for i in idx for l in range(1, int(result.runs["layers"][i]) + 1)]
    fig = Figure(figsize=(3.3 * len(panels) + 4.6, 3.9))
    axes = fig.subplots(1, len(panels) + 1, gridspec_kw=dict(wspace=0.35, width_ratios=[1] * len(panels) + [1.3]))
    im = None
    for ax, (i, l) in zip(axes, panels):
        a = result.attention[f"run{i}_layer{l}"]
        im = ax.imshow(a, vmin=0, vmax=1, cmap="Greys", interpolation="nearest")
        _, label = _style(str(result.runs["model"][i]), int(result.runs["layers"][i]))
        ax.set_title(f"{label}\nlayer {l}", fontsize=8)
        ax.set_xlabel("key position", fontsize=8)
        ax.set_ylabel("query position", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if im is not None:
        cb = fig.colorbar(im, ax=list(axes[:-1]), shrink=0.8, pad=0.02)
        cb.set_label("attention weight")
    ax = axes[-1]
    p = result.positions
    for i in idx:
        model, L = str(result.runs["model"][i]), int(result.runs["layers"][i])
        color, label = _style(model, L)
        sel = p["run"] == i
        ax.plot(p["position"][sel], p["prev_token_attention_1"][sel], color=color, lw=1.2, label=label)
    ax.axhline(0.9, color="gray", ls="--", lw=0.8)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("query position t", fontsize=8)
    ax.set_ylabel("layer-1 mass on t-1 (mean over eval chains)", fontsize=8)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title("previous-token attention by position", fontsize=8)
    seed = int(np.min(result.runs["seed"]))
    fig.suptitle(f"Attention on one evaluation chain (S={S}, T={T}, beta={beta:g}, seed {seed})", fontsize=10)
    return save_figure(fig, path)


def plot_induction_phase_diagram(result: InductionResult, path: str, beta: float | None = None,
                                 model: str = "disentangled") -> str:
    """Relative gap to the Bayes loss over `(S, T)` for each layer count of `model`, and the 2-layer formation step.

    Cells: mean over seeds; text: mean +- standard deviation over seeds.
    """
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    beta = float(result.runs["beta"][0]) if beta is None else beta
    sel = result.select(model=model, beta=beta)
    Ls = np.unique(result.runs["layers"][sel])
    Ss, Ts = np.unique(result.runs["S"][sel]), np.unique(result.runs["T"][sel])
    has_step = np.any(Ls >= 2)
    fig = Figure(figsize=(4.4 * (len(Ls) + has_step), 3.9))
    axes = np.atleast_1d(fig.subplots(1, len(Ls) + has_step, gridspec_kw=dict(wspace=0.45)))

    def grid(col, layers):
        mean, sd = np.full((len(Ss), len(Ts)), np.nan), np.full((len(Ss), len(Ts)), np.nan)
        for a, S in enumerate(Ss):
            for b, T in enumerate(Ts):
                v = np.asarray(result.runs[col], float)[result.select(model=model, beta=beta, layers=layers, S=S, T=T)]
                v = v[v >= 0] if col.endswith("_step") else v
                if len(v):
                    mean[a, b], sd[a, b] = np.mean(v), np.std(v)
        return mean, sd

    gaps = {L: grid("relative_gap", L) for L in Ls}
    allg = np.concatenate([100 * g[0].ravel() for g in gaps.values()])
    pos = allg[np.isfinite(allg) & (allg > 0)]
    norm = LogNorm(vmin=max(0.05, float(np.min(pos))) if len(pos) else 0.05,
                   vmax=max(float(np.max(pos)) if len(pos) else 1.0, 1.0))
    for ax, L in zip(axes, Ls):
        mean, sd = gaps[L]
        mesh = ax.pcolormesh(np.arange(len(Ts)), np.arange(len(Ss)), np.clip(100 * mean, norm.vmin, None),
                             norm=norm, cmap="magma_r", shading="nearest")
        for a in range(len(Ss)):
            for b in range(len(Ts)):
                if np.isfinite(mean[a, b]):
                    ax.text(b, a, f"{100 * mean[a, b]:.1f}\n±{100 * sd[a, b]:.1f}", ha="center", va="center",
                            fontsize=7, color="w" if 100 * mean[a, b] > np.sqrt(norm.vmin * norm.vmax) else "k")
        ax.set_xticks(np.arange(len(Ts)), [str(t) for t in Ts])
        ax.set_yticks(np.arange(len(Ss)), [str(s) for s in Ss])
        ax.set_xlabel("sequence length T")
        ax.set_ylabel("number of states S")
        ax.set_title(f"{model}, {L} layer{'s' if L > 1 else ''}: (loss - Bayes) / Bayes", fontsize=9)
        cb = fig.colorbar(mesh, ax=ax, shrink=0.85)
        cb.set_label("relative gap to Bayes (%)")
    if has_step:
        ax = axes[-1]
        mean, sd = grid("induction_step", int(np.max(Ls)))
        mesh = ax.pcolormesh(np.arange(len(Ts)), np.arange(len(Ss)), mean, cmap="viridis", shading="nearest")
        for a in range(len(Ss)):
            for b in range(len(Ts)):
                txt = f"{mean[a, b]:.0f}\n±{sd[a, b]:.0f}" if np.isfinite(mean[a, b]) else "never"
                bright = np.isfinite(mean[a, b]) and mean[a, b] > np.nanmean(mean)
                ax.text(b, a, txt, ha="center", va="center", fontsize=7, color="k" if bright else "w")
        ax.set_xticks(np.arange(len(Ts)), [str(t) for t in Ts])
        ax.set_yticks(np.arange(len(Ss)), [str(s) for s in Ss])
        ax.set_xlabel("sequence length T")
        ax.set_ylabel("number of states S")
        ax.set_title(f"{int(np.max(Ls))} layers: step at which layer-1 previous-token\nmass reaches "
                     f"{FORMATION_THRESHOLD}", fontsize=9)
        cb = fig.colorbar(mesh, ax=ax, shrink=0.85)
        cb.set_label("training step")
    n_seeds = len(np.unique(result.runs["seed"][sel]))
    fig.suptitle(f"Final gap to the Bayes (Dirichlet posterior predictive) loss, beta={beta:g}; cells: mean ± std "
                 f"over {n_seeds} seeds (gaps below {norm.vmin:.2g}% get the lightest colour)", fontsize=10, y=1.06)
    return save_figure(fig, path)


def plot_induction_positions(result: InductionResult, path: str, S: int | None = None,
                             beta: float | None = None) -> str:
    """Evaluation loss at each position `t` (in-context learning curve), one panel per `T`, seed means."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    from phasejax.plotting import save_figure

    S = _default_S(result) if S is None else S
    beta = float(result.runs["beta"][0]) if beta is None else beta
    Ts = np.unique(result.runs["T"][result.select(S=S, beta=beta)])
    fig = Figure(figsize=(4.2 * len(Ts), 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(Ts), gridspec_kw=dict(wspace=0.25)))
    p = result.positions
    for ax, T in zip(axes, Ts):
        idx = result.select(S=S, T=T, beta=beta)
        pos = np.arange(1, T + 1)
        for model, L in _models_in(result, idx):
            color, label = _style(model, L)
            runs = idx[(result.runs["model"][idx] == model) & (result.runs["layers"][idx] == L)]
            ax.plot(pos, np.mean([p["loss"][p["run"] == i] for i in runs], 0), color=color, lw=1.3, label=label)
        ref = lambda k: np.mean([p[k][p["run"] == i] for i in idx], 0)  # noqa: E731
        ax.plot(pos, ref("unigram"), "k--", lw=1.0, label="in-context unigram")
        ax.plot(pos, ref("bayes"), "k-.", lw=1.0, label="Bayes = bigram")
        ax.axhline(float(result.runs["uniform_loss"][idx[0]]), color="k", ls=":", lw=1.0, label="uniform")
        ax.set_xlabel("position t (tokens seen)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("expected next-token loss (nats)")
        ax.set_title(f"S={S}, T={T}", fontsize=9)
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    box = axes[-1].get_position()
    fig.legend(list(entries.values()), list(entries), fontsize=7, loc="center left",
               bbox_to_anchor=(box.x1 + 0.01, 0.5 * (box.y0 + box.y1)), frameon=False)
    fig.suptitle(f"In-context learning: loss at each position on the evaluation chains (beta={beta:g}; "
                 "model curves are seed means)", fontsize=10)
    return save_figure(fig, path)


def plot_prev_token_by_position(result: InductionResult, path: str, T: int | None = None,
                                threshold: float = 0.9) -> str:
    """First-layer mass `A_1[t, t-1]` against the query position `t` for the 2-layer disentangled runs at `T`
    (default: the largest), one line per `(chains per step, S)`: the seed mean, with the seeds' range shaded."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    r = result.runs
    two = np.flatnonzero((r["model"] == "disentangled") & (r["layers"] == 2))
    if two.size == 0:
        raise ValueError("the result has no 2-layer disentangled runs")
    T = int(np.max(r["T"][two])) if T is None else int(T)
    two = two[r["T"][two] == T]
    if two.size == 0:
        raise ValueError(f"no 2-layer disentangled run has T = {T}")
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    batches, Ss = np.unique(r["batch_size"][two]), np.unique(r["S"][two])
    styles = ("-", "--", ":", "-.")
    t = np.arange(1, T)                                               # 0-based query t = 1 .. T-1
    for b, batch in enumerate(batches):
        for k, S in enumerate(Ss):
            runs = two[(r["batch_size"][two] == batch) & (r["S"][two] == S)]
            if runs.size == 0:
                continue
            prof = np.stack([_prev_token_profile(result, i) for i in runs])
            mean = float(prof.mean())
            line, = ax.plot(t, prof.mean(0), color=f"C{b}", ls=styles[k % len(styles)], lw=1.3,
                            label=f"{int(batch)} chains/step, S={int(S)}: mean {mean:.3f}")
            ax.fill_between(t, prof.min(0), prof.max(0), color=line.get_color(), alpha=0.15, lw=0)
    ax.axhline(threshold, color="k", lw=0.8, ls=":", label=f"{threshold:g}")
    ax.set_xlabel("query position t (attends to key t-1)")
    ax.set_ylabel("first-layer attention on the previous token")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, loc="lower left")
    n_seeds = len(np.unique(r["seed"][two]))
    ax.set_title(f"2-layer disentangled model, T={T}: previous-token head by position\n"
                 f"(lines: mean over {n_seeds} seeds and the evaluation chains; bands: range over seeds)", fontsize=9)
    return save_figure(fig, path)


def plot_induction_figures(result: InductionResult, out_dir: str, S: int | None = None) -> list[str]:
    """All figures of a sweep into `out_dir`: curves, attention, phase diagram, positions (from the runs of the
    most common number of chains per step: the main grid) and the previous-token mass by position (all runs)."""
    sizes, counts = np.unique(result.runs["batch_size"], return_counts=True)
    main = result.subset(result.select(batch_size=int(sizes[np.argmax(counts)])))
    paths = [plot_induction_curves(main, os.path.join(out_dir, "curves.png"), S),
             plot_induction_attention(main, os.path.join(out_dir, "attention.png"), S),
             plot_induction_phase_diagram(main, os.path.join(out_dir, "phase_diagram.png")),
             plot_induction_positions(main, os.path.join(out_dir, "position_losses.png"), S)]
    if np.any((result.runs["model"] == "disentangled") & (result.runs["layers"] == 2)):
        paths.append(plot_prev_token_by_position(result, os.path.join(out_dir, "prev_token.png")))
    return paths
