"""Monte Carlo estimators shared by the thresholds of two and three layers (docs/depth.md, section 3).

The per-sample quantities of the state evolution at given overlaps (`sample_moments`, from
`phasejax.depth.se.outer_moments`), the variance-minimising combinations of two estimators of one mean
(`nishimori_mean`, `combined`; per quantity `g2_samples` and `M_samples`), the leave-one-block-out jackknife
(`block_means`, `jackknife_se`) that carries the Monte Carlo error through a nonlinear estimate such as a crossing,
and the crossing itself, interpolated between points around it (`crossing_log`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.depth.posterior import GridRule
from phasejax.depth.se import Moments, moments_unlearned_first, outer_moments

JACKKNIFE_BLOCKS = 32
"""Blocks of draws for the jackknife errors of the thresholds."""

RECENTRE = 3
"""Attempts at centring the final points of a threshold on its crossing (the pilot's estimate first)."""


def combination_weight(x, y) -> float:
    """The weight `w` of `x` in the variance-minimising convex combination `w x + (1 - w) y` of two estimators
    `x, y (N,)` of one mean (their sample covariances; 0.5 where both are constant)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    dx, dy = x - x.mean(), y - y.mean()
    vx, vy, cxy = np.mean(dx * dx), np.mean(dy * dy), np.mean(dx * dy)
    den = vx + vy - 2 * cxy
    return float(np.clip((vy - cxy) / den, 0.0, 1.0)) if den > 0 else 0.5


def nishimori_mean(teacher, posterior) -> tuple[float, float, float]:
    """Mean and standard error of the variance-minimising convex combination of two estimators with one mean.

    `teacher, posterior (N,)`: per-sample values (`Moments.M_teacher`, `Moments.M_posterior`). Returns
    `(mean, standard error, weight of teacher)`; a convex combination of two estimators that never exceed the bound
    never exceeds it either.
    """
    x, y = np.asarray(teacher, np.float64), np.asarray(posterior, np.float64)
    w = combination_weight(x, y)
    z = w * x + (1 - w) * y
    return float(z.mean()), float(z.std(ddof=1) / np.sqrt(z.size)), w


def combined(x, y) -> np.ndarray:
    """Per-sample values of the variance-minimising convex combination of two estimators `x, y (N,)` of one mean."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    w = combination_weight(x, y)
    return w * x + (1 - w) * y


def g2_samples(m: Moments, layer) -> np.ndarray:
    """Per-sample estimator of `E|g_l|^2` from `Moments` `m`: the combination (`combined`) of the direct `|g_l|^2`
    (best at small `q_l`, where it vanishes with `q_l`) and the Nishimori form (best at large `q_l`)."""
    return combined(m.g2[:, layer], m.g2_nishimori[:, layer])


def M_samples(m: Moments, layer) -> np.ndarray:
    """Per-sample estimator of the stability constant `M_l` at `q_l = 0` from `Moments` `m` (`nishimori_mean`)."""
    return combined(m.M_teacher[:, layer], m.M_posterior[:, layer])


def sample_moments(q, skip, draws, rule) -> Moments:
    """Per-sample `Moments` at overlaps `q (L,)` on `draws` with `rule`, compiled: the shared-grid path
    (`moments_unlearned_first`) where it applies (a `GridRule`, two layers, layer 1 at zero), `outer_moments`
    otherwise."""
    q = np.asarray(q, np.float64)
    if isinstance(rule, GridRule) and q.shape == (2,) and q[0] == 0.0:
        return _unlearned_first_jit(jnp.asarray(q[1]), jnp.asarray(skip, jnp.float64), draws, rule)
    return _outer_jit(jnp.asarray(q), jnp.asarray(skip, jnp.float64), draws, rule)


_unlearned_first_jit = jax.jit(moments_unlearned_first)
_outer_jit = jax.jit(outer_moments)


def block_means(x, n_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """Leave-one-block-out means of `x (..., N)` along its last axis: `(n_blocks, ...)`, and the full mean `(...)`."""
    x = np.asarray(x, np.float64)
    n = x.shape[-1]
    edges = np.linspace(0, n, n_blocks + 1).astype(int)
    sums = np.stack([x[..., a:b].sum(-1) for a, b in zip(edges[:-1], edges[1:])])
    sizes = np.diff(edges)
    total = x.sum(-1)
    return (total[None] - sums) / (n - sizes).reshape((-1,) + (1,) * (x.ndim - 1)), total / n


def jackknife_se(values) -> np.ndarray:
    """Standard error from leave-one-block-out estimates `values (B, ...)` (`block_means`): `(...)`."""
    values = np.asarray(values, np.float64)
    B = values.shape[0]
    return np.sqrt((B - 1) / B * np.sum((values - values.mean(0)) ** 2, 0))


def crossing_log(x, log_alpha, log_gain, reach: float = 1.0):
    """Where `log_gain (n,)` crosses zero along `x (n,)`, and `alpha` there from `log_alpha (n,)`: quadratic
    interpolation through the three points around the root, and linear on the bracketing pair. Returns
    `(alpha quadratic, alpha linear, exp(x*))`; NaN when the root lies farther than `reach` spacings outside."""
    x, log_alpha, log_gain = (np.asarray(v, np.float64) for v in (x, log_alpha, log_gain))
    order = np.argsort(x)
    x, log_alpha, log_gain = x[order], log_alpha[order], log_gain[order]
    sign = np.sign(log_gain)
    idx = np.nonzero(sign[:-1] != sign[1:])[0]
    k = idx[0] if idx.size else int(np.argmin(np.abs(log_gain[:-1] + log_gain[1:])))
    t = -log_gain[k] / (log_gain[k + 1] - log_gain[k])
    x_lin = x[k] + t * (x[k + 1] - x[k])
    a_lin = np.exp(log_alpha[k] + t * (log_alpha[k + 1] - log_alpha[k]))
    span = x[-1] - x[0]
    if not (x[0] - reach * span / (len(x) - 1) <= x_lin <= x[-1] + reach * span / (len(x) - 1)):
        return np.nan, np.nan, np.nan
    if len(x) < 3:
        return a_lin, a_lin, np.exp(x_lin)
    first = min(max(k - 1, 0), len(x) - 3)
    j = slice(first, first + 3)
    roots = np.roots(np.polyfit(x[j], log_gain[j], 2))
    roots = roots[np.isreal(roots)].real
    x_q = roots[np.argmin(np.abs(roots - x_lin))] if roots.size else x_lin
    a_q = np.exp(np.polyval(np.polyfit(x[j], log_alpha[j], 2), x_q))
    return a_q, a_lin, np.exp(x_q)
