"""Weak-recovery thresholds of the two-layer model and first-order jumps (docs/depth.md, section 3).

Linear stability of the uninformative point `Q = 0`. Near `Q = 0` the output
function is linear in the cavity, `g_l ~ (E[z_l z_l^T | u] - I) omega_l` (the
mean vanishes by the sign symmetry, and so does the layer-to-layer block of the
posterior covariance), so `qhat_l = alpha M_l q_l` with

    M_l = E_u |E[z_l z_l^T | u] - I_T|_F^2,

and layer `l` leaves `q_l = 0` where `alpha M_l > 1`: `alpha_l^0 = 1 / M_l`
(`uninformed_thresholds`). The layer with the smaller `alpha_l^0` is learned
first. The other one then sits at zero next to the learned layer's fixed point
`q*(alpha)`; it stays there until `alpha M_l(q*(alpha)) = 1`, with `M_l(q)` the
same quantity given also the learned layer's cavity (`conditional_threshold`).
So `alpha_first = min_l alpha_l^0` and `alpha_second` solves the conditional
equation.

First-order jumps: where the state evolution from an informative start and
from the uninformative start reach different fixed points, the Bayes-optimal
one has the larger free entropy (`phasejax.depth.se.free_entropy`);
`branch_scan` locates where they exchange.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.depth.se import Draws, InnerRule, DepthSEResult, continuation, free_entropy, inner_rule, outer_moments, se_draws
from phasejax.precision import uses_float64
from phasejax.solvers import Status

Array = jax.Array


@struct.dataclass
class Thresholds:
    """Per layer (index 0: layer 1, 1: layer 2): `M (2,)`, its standard error `M_se (2,)`,
    `alpha0 = 1 / M (2,)` and its error `alpha0_err (2,)` (Monte Carlo, one standard error)."""

    M: Array
    M_se: Array
    alpha0: Array
    alpha0_err: Array


_moments_jit = jax.jit(outer_moments)


@uses_float64
def uninformed_thresholds(skip, draws: Draws | None = None, rule: InnerRule | None = None) -> Thresholds:
    """`alpha_l^0 = 1 / M_l` from the linear stability of `Q = 0` (module docstring), with Monte Carlo errors."""
    if not isinstance(skip, jax.core.Tracer) and np.any(np.asarray(skip) < 0):
        raise ValueError(f"skip must be >= 0, got {skip}")
    draws = se_draws(4096) if draws is None else draws
    rule = inner_rule(16) if rule is None else rule
    m = _moments_jit(jnp.zeros(2), jnp.asarray(skip, jnp.float64), draws, rule)
    n = m.cov_dev.shape[0]
    M = m.cov_dev.mean(0)
    M_se = m.cov_dev.std(0) / jnp.sqrt(n)
    return Thresholds(M=M, M_se=M_se, alpha0=1.0 / M, alpha0_err=M_se / M**2)


@struct.dataclass
class ConditionalThreshold:
    """The second layer's threshold next to the first layer's fixed point.

    `alpha ()` and its error `alpha_err ()` (Monte Carlo plus interpolation), `learned ()` the index of the layer
    learned first, `q_learned ()` its overlap at `alpha`; the scan: `alphas (n,)`, `gain (n,)` `= alpha M_l(q*)`,
    `gain_se (n,)`, `q_star (n,)`, `status (n,)`. `alpha` is NaN when the gain stays below one on the scan.
    """

    alpha: Array
    alpha_err: Array
    learned: Array
    q_learned: Array
    alphas: Array
    gain: Array
    gain_se: Array
    q_star: Array
    status: Array


@uses_float64
def conditional_threshold(skip, alphas, learned: int = 1, draws: Draws | None = None, rule: InnerRule | None = None,
                          **solver_options) -> ConditionalThreshold:
    """Where the layer other than `learned` (0 or 1) leaves zero, scanning increasing `alphas (n,)`.

    Along the scan the other layer is pinned at `q = 0` (an exact fixed point by symmetry) and the
    learned one follows its fixed point by continuation; `gain = alpha M_other(q*)` is the other
    layer's linear growth factor. The crossing `gain = 1` is interpolated linearly; its error adds
    the Monte Carlo error of the gain (through the local slope) and the change to a quadratic
    interpolation.
    """
    if learned not in (0, 1):
        raise ValueError(f"learned must be 0 or 1, got {learned}")
    alphas = np.asarray(alphas, np.float64)
    if alphas.ndim != 1 or alphas.size < 3 or np.any(np.diff(alphas) <= 0):
        raise ValueError("alphas must be an increasing 1-d grid of at least 3 values")
    other = 1 - learned
    draws = se_draws(1024) if draws is None else draws
    rule = inner_rule(16) if rule is None else rule
    frozen = (other == 0, other == 1)
    res = continuation(alphas, skip, draws=draws, rule=rule, frozen=frozen, **solver_options)
    m = jax.vmap(lambda q: _moments_jit(q, jnp.asarray(skip, jnp.float64), draws, rule))(res.q)
    n = m.cov_dev.shape[1]
    M = np.asarray(m.cov_dev[:, :, other].mean(1))
    M_se = np.asarray(m.cov_dev[:, :, other].std(1)) / np.sqrt(n)
    gain, gain_se = alphas * M, alphas * M_se
    q_star = np.asarray(res.q[:, learned])
    alpha, err, q_at = np.nan, np.nan, np.nan
    above = np.nonzero(gain >= 1.0)[0]
    if above.size and above[0] > 0:
        k = above[0]
        a0, a1, g0, g1 = alphas[k - 1], alphas[k], gain[k - 1], gain[k]
        slope = (g1 - g0) / (a1 - a0)
        alpha = a0 + (1.0 - g0) / slope
        # quadratic through three neighbours, for the interpolation error
        j = slice(max(k - 2, 0), max(k - 2, 0) + 3) if k + 1 >= alphas.size else slice(k - 1, k + 2)
        coef = np.polyfit(alphas[j], gain[j] - 1.0, 2)
        roots = np.roots(coef)
        roots = roots[np.isreal(roots)].real
        quad = roots[np.argmin(np.abs(roots - alpha))] if roots.size else alpha
        mc = 0.5 * (gain_se[k - 1] + gain_se[k]) / abs(slope)
        err = float(np.hypot(mc, abs(quad - alpha)))
        q_at = float(np.interp(alpha, alphas, q_star))
    return ConditionalThreshold(alpha=np.float64(alpha), alpha_err=np.float64(err), learned=np.int32(learned),
                                q_learned=np.float64(q_at), alphas=alphas, gain=gain, gain_se=gain_se,
                                q_star=q_star, status=np.asarray(res.status))


@struct.dataclass
class BranchScan:
    """Fixed points from the uninformative start (`q_low (n, 2)`) and an informative one (`q_high (n, 2)`) along
    `alphas (n,)`, their free entropies `phi_low, phi_high (n,)` with standard errors `phi_se (n,)` (of the
    difference, common draws), `coexist (n,)` (both solves converged and the branches differ by more than `tol`),
    `alpha_jump ()`: where `phi_high - phi_low` changes sign among coexisting points (NaN if never), and the full
    results of both branches, `low` and `high` (`DepthSEResult`, leading axis `n`, in the order of `alphas`)."""

    alphas: Array
    q_low: Array
    q_high: Array
    phi_low: Array
    phi_high: Array
    phi_se: Array
    coexist: Array
    alpha_jump: Array
    low: DepthSEResult
    high: DepthSEResult


@uses_float64
def branch_scan(skip, alphas, draws: Draws | None = None, rule: InnerRule | None = None, *, q_high=(0.99, 0.99),
                tol: float = 1e-3, **solver_options) -> BranchScan:
    """Both branches along `alphas` (the informative one by continuation from `q_high` down in alpha)."""
    alphas = np.asarray(alphas, np.float64)
    draws = se_draws(1024) if draws is None else draws
    rule = inner_rule(16) if rule is None else rule
    low = continuation(alphas, skip, draws=draws, rule=rule, **solver_options)
    high = continuation(alphas[::-1], skip, q0=q_high, draws=draws, rule=rule, q_floor=0.0, **solver_options)
    high = jax.tree_util.tree_map(lambda a: a[::-1], high)
    q_low, q_high_ = np.asarray(low.q), np.asarray(high.q)
    converged = (np.asarray(low.status) == Status.CONVERGED) & (np.asarray(high.status) == Status.CONVERGED)
    coexist = converged & (np.max(np.abs(q_low - q_high_), -1) > tol)
    phi_low, phi_high, phi_se = (np.full(alphas.shape, np.nan) for _ in range(3))
    fe = jax.jit(free_entropy)
    for i in np.nonzero(coexist)[0]:
        a = jnp.asarray(alphas[i])
        phi_low[i], s0 = (float(v) for v in fe(jnp.asarray(q_low[i]), a, skip, draws, rule))
        phi_high[i], s1 = (float(v) for v in fe(jnp.asarray(q_high_[i]), a, skip, draws, rule))
        phi_se[i] = np.hypot(s0, s1)
    jump = np.nan
    d = phi_high - phi_low
    idx = np.nonzero(coexist[:-1] & coexist[1:] & (np.sign(d[:-1]) != np.sign(d[1:])))[0]
    if idx.size:
        k = idx[0]
        jump = alphas[k] + (alphas[k + 1] - alphas[k]) * (-d[k]) / (d[k + 1] - d[k])
    return BranchScan(alphas=alphas, q_low=q_low, q_high=q_high_, phi_low=phi_low, phi_high=phi_high,
                      phi_se=phi_se, coexist=coexist, alpha_jump=np.float64(jump), low=low, high=high)
