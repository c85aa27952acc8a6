"""The closed-form crosstalk prediction of recall (float64), capacities, power-law fits and bootstrap."""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.precision import uses_float64
from phasejax.tasks.memory.data import RECALL_THRESHOLD, check_sizes


# ----------------------------------------------------------------------------
# Closed-form crosstalk prediction (float64)
# ----------------------------------------------------------------------------


def crosstalk_variances(q_x, Q2_own, Q2_y, Q2_total, d, one_step_M=None):
    """Variances `(Var A, Var B_y)` of the shared and per-competitor crosstalk of an outer-product margin.

    Implements (module docstring) with `S = Q2_own - q_x^2`:
    `Var A = S/d + (Q2_tot - Q2_own)/d^2`,
    `Var B_y = (q_x^2 + S/d)/d + Q2_y/d + (Q2_tot - Q2_own - Q2_y)/d^2`.
    With `one_step_M = M`, the one-step memory's mean-subtraction term adds
    `q_x^2 (M - 2) / (M^2 d)` to both. Broadcasts over its arguments.
    """
    S = Q2_own - q_x**2
    var_a = S / d + (Q2_total - Q2_own) / d**2
    var_b = (q_x**2 + S / d) / d + Q2_y / d + (Q2_total - Q2_own - Q2_y) / d**2
    if one_step_M is not None:
        extra = q_x**2 * jnp.maximum(one_step_M - 2.0, 0.0) / (one_step_M**2 * d)
        var_a, var_b = var_a + extra, var_b + extra
    return var_a, var_b


def _gauss_hermite(n_nodes: int):
    """Nodes and weights of `E g(Z)`, `Z ~ N(0, 1)` (probabilists' Gauss-Hermite), float64."""
    t, w = np.polynomial.hermite_e.hermegauss(n_nodes)
    return jnp.asarray(t, jnp.float64), jnp.asarray(w / np.sqrt(2 * np.pi), jnp.float64)


def _binomial_log_pmf(k, n, p):
    from jax.scipy.special import gammaln

    kk = jnp.clip(k, 0.0, None)
    nk = jnp.maximum(n - kk, 0.0)
    return (gammaln(n + 1) - gammaln(kk + 1) - gammaln(nk + 1) + jnp.where(kk > 0, kk * jnp.log(p), 0.0)
            + jnp.where(nk > 0, nk * jnp.log1p(-p), 0.0))


def _count_window(n_trials, p, L: int):
    """`L` values covering `Bin(n_trials, p)` (stride 1 when they fit, else about 12 sd wide) and their weights."""
    n_trials = jnp.maximum(n_trials, 0.0)
    lam = n_trials * p
    sd = jnp.sqrt(jnp.maximum(lam * (1 - p), 1e-12))
    step = jnp.maximum(1.0, jnp.ceil(12.0 * sd / L))
    start = jnp.maximum(0.0, jnp.round(lam - step * L / 2))
    k = start + step * jnp.arange(L, dtype=jnp.float64)
    logw = jnp.where(k <= n_trials, _binomial_log_pmf(k, n_trials, p) + jnp.log(step), -jnp.inf)
    w = jnp.exp(logw - jnp.max(logw))
    return k, w / jnp.sum(w)


@uses_float64
def predicted_recall(N, d, M: int | None = None, injective: bool = True, *, one_step: bool = False,
                     n_nodes: int = 64, n_counts: int = 24, batch_size: int = 16) -> np.ndarray:
    """Closed-form (Gaussian crosstalk) expected recall of the outer-product memory, float64, broadcast over `N, d`.

    `P(x recalled) = E_A prod_{y != f*(x)} Phi((1 + A) / sqrt(Var B_y))`,
    `A ~ N(0, Var A)`, with the variances of `crosstalk_variances` (`q = 1`).
    Averages over embeddings and over the map: an injective map gives every
    used output one preimage (`M = None`: `M = N`); a uniform random map gives
    `f*(x)` `1 + Bin(N-1, 1/M)` preimages and each competitor, given that,
    `Bin(N - n*, 1/(M-1))` (competitors treated as independent).
    `one_step=True` adds the one-step memory's mean-subtraction variance.
    """
    N, d = np.asarray(N), np.asarray(d)
    check_sizes(N=N, d=d, M=M, injective=injective)
    Nb, db = np.broadcast_arrays(N.astype(np.float64), d.astype(np.float64))
    n_flat = Nb.size
    # pad to a power-of-two length (repeating the last point) so calls of similar size share one compilation
    n_pad = max(batch_size, 1 << int(np.ceil(np.log2(max(n_flat, 1)))))
    Nf, df = (jnp.asarray(np.pad(a.ravel(), (0, n_pad - n_flat), mode="edge")) for a in (Nb, db))
    Mf = Nf if M is None else jnp.full_like(Nf, float(M))
    vals = _predicted_recall_flat(Nf, df, Mf, injective, one_step, n_nodes, n_counts, batch_size)
    return np.asarray(vals)[:n_flat].reshape(Nb.shape)


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6, 7))
def _predicted_recall_flat(Nf, df, Mf, injective: bool, one_step: bool, n_nodes: int, n_counts: int,
                           batch_size: int):
    t, w = _gauss_hermite(n_nodes)

    def one(args):
        n, dd, mm = args
        osm = mm if one_step else None
        if injective:
            q2 = jnp.array([1.0, 0.0])                                       # a used / an unused competitor
            var_a, var_b = crosstalk_variances(1.0, 1.0, q2, n, dd, osm)
            lp = jax.scipy.special.log_ndtr((1.0 + jnp.sqrt(var_a) * t[:, None]) / jnp.sqrt(var_b)[None, :])
            return jnp.sum(w * jnp.exp(lp @ jnp.stack([n - 1.0, mm - n])))
        k_own, w_own = _count_window(n - 1.0, 1.0 / mm, n_counts)                                    # (Ko,)
        k_c, w_c = jax.vmap(lambda ko: _count_window(n - 1.0 - ko, 1.0 / jnp.maximum(mm - 1.0, 1.0), n_counts))(k_own)
        var_a, var_b = crosstalk_variances(1.0, k_own[:, None] + 1.0, k_c, n, dd, osm)               # (Ko,1), (Ko,Kc)
        z = (1.0 + jnp.sqrt(var_a)[:, :, None] * t[None, :, None]) / jnp.sqrt(var_b)[:, None, :]       # (Ko,Q,Kc)
        mean_cdf = jnp.sum(w_c[:, None, :] * jax.scipy.special.ndtr(z), axis=-1)                      # (Ko,Q)
        inner = jnp.where(mm > 1.0, (mm - 1.0) * jnp.log(jnp.clip(mean_cdf, 1e-300, 1.0)), 0.0)
        return jnp.sum(w_own * jnp.sum(w * jnp.exp(inner), axis=-1))

    return jax.lax.map(one, (Nf, df, Mf), batch_size=batch_size)


def _recall_given_map(f, q, x_valid, y_valid, d, one_step, n_nodes: int, batch_size: int):
    """Pure core of `predicted_recall_given_map` for one problem (float64 under `float64_scope`); vmappable.

    `one_step` is a traced bool: it adds the one-step memory's mean-subtraction variance.
    """
    q = jnp.where(x_valid, q, 0.0)
    M_out = y_valid.shape[0]
    Q2_y = jax.ops.segment_sum(q**2, f, num_segments=M_out)
    Q2_total = jnp.sum(Q2_y)
    n_valid_out = jnp.sum(y_valid).astype(q.dtype)
    t, w = _gauss_hermite(n_nodes)

    def one(args):
        qx, fx = args
        var_a, var_b = crosstalk_variances(qx, Q2_y[fx], Q2_y, Q2_total, d)
        extra = jnp.where(one_step, qx**2 * jnp.maximum(n_valid_out - 2.0, 0.0) / (n_valid_out**2 * d), 0.0)
        var_a, var_b = var_a + extra, var_b + extra
        lp = jax.scipy.special.log_ndtr((qx + jnp.sqrt(var_a) * t[:, None]) / jnp.sqrt(var_b)[None, :])   # (Q, M)
        comp = y_valid & (jnp.arange(M_out) != fx)
        return jnp.sum(w * jnp.exp(jnp.sum(jnp.where(comp[None, :], lp, 0.0), axis=-1)))

    P = jax.lax.map(one, (q, f), batch_size=batch_size)
    return jnp.where(x_valid, P, jnp.nan)


@functools.partial(jax.jit, static_argnums=(6, 7))
def _recall_given_maps(f, q, x_valid, y_valid, d, one_step, n_nodes: int, batch_size: int):
    """`_recall_given_map` over a leading problem axis (sequential `lax.map`: memory stays `O(n M n_nodes)`)."""
    return jax.lax.map(lambda a: _recall_given_map(*a, n_nodes, batch_size), (f, q, x_valid, y_valid, d, one_step))


@uses_float64
def predicted_recall_given_map(f, q, x_valid, y_valid, d, *, one_step=False, n_nodes: int = 48,
                               batch_size: int = 512) -> np.ndarray:
    """Closed-form (Gaussian crosstalk) probability `P_x` that input `x` is recalled, given the map and the weights.

    `f (..., n)` targets, `q (..., n)` weights of the outer-product memory
    `W = sum_x q_x u_{f(x)} e_x^T` (the one-step memory: `q = p` and
    `one_step=True`), masks `x_valid (..., n)`, `y_valid (..., M)`, `d (...)`,
    `one_step` a bool or a `(...)` bool array; leading axes are problems
    (one compiled `lax.map`). Averages over the embeddings only. Cost
    `O(n M n_nodes)` per problem; inputs with `q_x = 0` (not stored) get the
    chance level of the crosstalk. Returns float64 `(..., n)`, NaN for invalid `x`.
    """
    f = jnp.asarray(f, jnp.int32)
    d = jnp.asarray(d, jnp.float64)
    lead = d.shape
    if f.shape[:-1] != lead:
        raise ValueError(f"f must have shape d.shape + (n,), got f.shape={f.shape}, d.shape={lead}")
    n, M_out = f.shape[-1], np.shape(y_valid)[-1]
    args = (f.reshape(-1, n),
            jnp.broadcast_to(jnp.asarray(q, jnp.float64), f.shape).reshape(-1, n),
            jnp.broadcast_to(jnp.asarray(x_valid, bool), f.shape).reshape(-1, n),
            jnp.broadcast_to(jnp.asarray(y_valid, bool), lead + (M_out,)).reshape(-1, M_out),
            d.reshape(-1),
            jnp.broadcast_to(jnp.asarray(one_step, bool), lead).reshape(-1))
    return np.asarray(_recall_given_maps(*args, n_nodes, batch_size)).reshape(f.shape)


def predicted_capacity(ds, M: int | None = None, injective: bool = True, *, one_step: bool = False,
                       threshold: float = RECALL_THRESHOLD, n_min: int = 2, n_max: int = 200_000,
                       points_per_octave: int = 24) -> np.ndarray:
    """`N*_pred(d)` `(D,)`: where `predicted_recall` crosses `threshold`, on a fine geometric `N` grid (vectorised).

    NaN where the crossing lies outside `[n_min, n_max]` (or above `M` for injective maps).
    """
    ds = np.atleast_1d(np.asarray(ds))
    hi = n_max if (M is None or not injective) else min(n_max, M)
    Ns = np.unique(np.round(np.geomspace(n_min, hi, int(points_per_octave * np.log2(hi / n_min)) + 1)).astype(np.int64))
    rec = predicted_recall(Ns[None, :], ds[:, None], M, injective, one_step=one_step)
    n_star, _ = capacity_from_recall(Ns, rec, threshold)
    return n_star


# ----------------------------------------------------------------------------
# Capacity, fits, bootstrap
# ----------------------------------------------------------------------------


BRACKETED, ABOVE_GRID, BELOW_GRID = 0, 1, 2
"""`capacity_from_recall` flags: crossing found / recall never dropped (N* above the grid) / first point failed."""


def capacity_from_recall(Ns, recall_values, threshold: float = RECALL_THRESHOLD) -> tuple[np.ndarray, np.ndarray]:
    """Largest `N` with `recall >= threshold`, vectorised over leading axes; `(N* (...,), flag (...,))`.

    `Ns (K,)` increasing, `recall_values (..., K)` (NaN where not computed). The
    crossing is the first tested `N` whose recall falls below `threshold`; `N*`
    interpolates `log N` linearly in recall between it and the tested point
    before it (a run of successes). Flags: `BRACKETED`, `ABOVE_GRID` (no
    failure: `N*` is NaN, the last tested `N` is a lower bound), `BELOW_GRID`
    (the first tested point already fails: NaN).
    """
    Ns = np.asarray(Ns, np.float64)
    r = np.asarray(recall_values, np.float64)
    K = Ns.shape[0]
    valid = np.isfinite(r)
    fail = valid & (r < threshold)
    any_fail = fail.any(-1)
    first_fail = np.argmax(fail, axis=-1)
    # last tested point before the first failure
    idx = np.arange(K)
    before = valid & (idx < first_fail[..., None])
    has_before = before.any(-1)
    prev = np.where(has_before, K - 1 - np.argmax(before[..., ::-1], axis=-1), 0)
    r_hi = np.take_along_axis(r, prev[..., None], -1)[..., 0]
    r_lo = np.take_along_axis(r, first_fail[..., None], -1)[..., 0]
    lN_hi, lN_lo = np.log(Ns[prev]), np.log(Ns[first_fail])
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.clip((r_hi - threshold) / (r_hi - r_lo), 0.0, 1.0)
    n_star = np.exp(lN_hi + frac * (lN_lo - lN_hi))
    flag = np.where(~any_fail, ABOVE_GRID, np.where(has_before, BRACKETED, BELOW_GRID))
    return np.where(flag == BRACKETED, n_star, np.nan), flag


def fit_power_law(x, y, level: float = 0.95) -> dict:
    """OLS fit `log y = log c + b log x` on the finite pairs; `b`, `c`, a Student-t interval on `b`, points used.

    Returns `dict(exponent, prefactor, ci, stderr, n_points, residual_std)`;
    `ci` is NaN with fewer than 3 points.
    """
    from scipy import stats

    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    lx, ly = np.log(x[ok]), np.log(y[ok])
    n = int(ok.sum())
    if n < 2:
        return dict(exponent=np.nan, prefactor=np.nan, ci=[np.nan, np.nan], stderr=np.nan, n_points=n,
                    residual_std=np.nan)
    A = np.stack([np.ones(n), lx], 1)
    coef, *_ = np.linalg.lstsq(A, ly, rcond=None)
    resid = ly - A @ coef
    if n > 2:
        s2 = resid @ resid / (n - 2)
        se = float(np.sqrt(s2 / np.sum((lx - lx.mean()) ** 2)))
        tq = stats.t.ppf(0.5 + level / 2, n - 2)
        ci = [float(coef[1] - tq * se), float(coef[1] + tq * se)]
    else:
        se, ci = np.nan, [np.nan, np.nan]
    return dict(exponent=float(coef[1]), prefactor=float(np.exp(coef[0])), ci=ci, stderr=se, n_points=n,
                residual_std=float(np.std(resid)) if n > 2 else np.nan)


def _batched_slopes(lx: np.ndarray, ly: np.ndarray) -> np.ndarray:
    """OLS slopes of `ly (B, P)` on `lx (P,)` per row, ignoring NaN entries (NaN with < 2 points)."""
    ok = np.isfinite(ly)
    n = ok.sum(-1)
    X = np.where(ok, lx[None, :], 0.0)
    Y = np.where(ok, ly, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx, my = X.sum(-1) / n, Y.sum(-1) / n
        sxy = (np.where(ok, (X - mx[:, None]) * (Y - my[:, None]), 0.0)).sum(-1)
        sxx = (np.where(ok, (X - mx[:, None]) ** 2, 0.0)).sum(-1)
        b = sxy / sxx
    return np.where(n >= 2, b, np.nan)


def bootstrap_exponents(Ns, recall_seeds, x, *, n_boot: int = 2000, seed: int = 0,
                        threshold: float = RECALL_THRESHOLD, level: float = 0.95) -> dict:
    """Seed-bootstrap of the capacity exponent: resample seeds, recompute every `N*`, refit (vectorised over resamples).

    `recall_seeds (C, K, S)`: recall of column `c` (a `d`, or an `(m, d)`) at
    `Ns[k]` for seed `s` (NaN where not run); `x (C,)` the abscissa (`d` or `m d`).
    Returns `dict(ci, median, n_boot, n_valid, column_ci (C, 2))` (`column_ci`: percentile interval of each `N*`).
    """
    r = np.asarray(recall_seeds, np.float64)
    S = r.shape[-1]
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, S, size=(n_boot, S))
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)               # all-NaN cells (not run) stay NaN
        boot = np.nanmean(np.take(r, pick, axis=-1).transpose(2, 0, 1, 3), axis=-1)      # (B, C, K)
    n_star, _ = capacity_from_recall(Ns, boot, threshold)
    slopes = _batched_slopes(np.log(np.asarray(x, np.float64)), np.log(n_star))
    good = slopes[np.isfinite(slopes)]
    lo, hi = (np.quantile(good, [0.5 - level / 2, 0.5 + level / 2]) if good.size else (np.nan, np.nan))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        col_ci = np.nanquantile(n_star, [0.5 - level / 2, 0.5 + level / 2], axis=0).T       # (C, 2)
    return dict(ci=[float(lo), float(hi)], median=float(np.median(good)) if good.size else np.nan,
                n_boot=int(n_boot), n_valid=int(good.size), column_ci=col_ci)
