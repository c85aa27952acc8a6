"""Weak-recovery thresholds of the two-layer model and first-order jumps (docs/depth.md, section 3).

Linear stability of the uninformative point. Near `q_l = 0` the output function is
linear in the cavity, `g_l ~ (E[W_l | u, omega] - I) omega_l` with `W_l = z_l z_l^T`
(the posterior mean vanishes by the sign symmetry of layer `l`), so
`qhat_l = alpha M_l q_l` with the stability constant

    M_l = E |E[W_l | u, omega] - I_T|_F^2,

and layer `l` leaves zero where its growth factor `alpha M_l` exceeds one.

The bound. `E[W_l] = I` and a conditional expectation cannot increase the mean square:
`E|E[W|u] - I|^2 = E|W - I|^2 - E|W - E[W|u]|^2 <= E|W - I|^2 = T^2 + T`, so
`M_l <= T^2 + T` and every threshold is at least `1 / (T^2 + T)` (`1/6` for `T = 2`), for any
skip, and also next to another layer's cavity (`z_l` is independent of it at `q_l = 0`).

Estimators. The same identity gives two estimators of `M_l` with the direct one's mean that
never exceed the bound (`phasejax.depth.se.Moments`): `(T^2 + T) - |W_teacher - E[W|u]|^2`
(a control variate) and `(T^2 + T) - E[|W - E[W|u]|^2 | u]` (its posterior expectation);
`nishimori_mean` combines them with the variance-minimising weight. `E|g_l|^2` is estimated
likewise by `(T V - tr Cov[z_l | u, omega]) / V^2`.

First threshold: at `Q = 0` both layers' constants give `alpha_l^0 = 1 / M_l`
(`uninformed_thresholds`); the smaller one is learned first.

Second threshold (`second_threshold`): the learned layer's fixed point with the other one at
zero (an exact fixed point by symmetry) is parametrised by its own overlap: the fixed-point
equation `q / (1 - q) = alpha E|g|^2(q)` gives `alpha*(q) = q / ((1 - q) E|g|^2(q))`, so every
point of the branch is an exact fixed point of the map, with no iteration. The other layer's
growth factor along it is `G(q) = alpha*(q) M_other(q)`, and its threshold is `alpha*(q*)` with
`G(q*) = 1`.

First-order jumps: where the state evolution from an informative start and from the
uninformative start reach different fixed points, the Bayes-optimal one has the larger free
entropy (`phasejax.depth.se.free_entropy`); `branch_scan` locates where they exchange.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.depth.estimators import (
    JACKKNIFE_BLOCKS,
    RECENTRE,
    M_samples,
    block_means,
    combination_weight,
    crossing_log,
    g2_samples,
    jackknife_se,
    nishimori_mean,
    sample_moments,
)
from phasejax.depth.posterior import GridRule, InnerRule, grid_rule
from phasejax.depth.se import (
    STRIP_SKIP,
    DepthSEResult,
    Draws,
    continuation,
    free_entropy,
    independent_rule,
    rule_for,
    se_draws,
)
from phasejax.precision import uses_float64
from phasejax.solvers import HasStatus, Status

Array = jax.Array


SMALL_SKIP_GRADING = 1e-4
"""The grid's grading below `STRIP_SKIP`: at `c = 0` the posterior of `z_1` vanishes within `sqrt(2 |u_d|)` of the
diagonal (`u_d` the sequence index across it), and the default grading `0.01` does not resolve that for
`|u_d| < 2e-4`, where a finer grading and the `DiagonalRule` agree (docs/depth.md, section 3)."""


def threshold_grid(step: float, skip) -> GridRule:
    """The graded grid of `step` for the thresholds at `skip` (`SMALL_SKIP_GRADING` below `STRIP_SKIP`)."""
    return grid_rule(step, grading=SMALL_SKIP_GRADING) if skip < STRIP_SKIP else grid_rule(step)


@struct.dataclass
class Thresholds:
    """Per layer (index 0: layer 1, 1: layer 2) at `Q = 0`: the stability constant `M (2,)` (`nishimori_mean`), its
    standard error `M_se (2,)`, `alpha0 = 1 / M (2,)` and its error `alpha0_err (2,)` (Monte Carlo, one standard
    error), the combination's weight of the teacher estimator `weight (2,)`, and the number of draws `n_draws`."""

    M: Array
    M_se: Array
    alpha0: Array
    alpha0_err: Array
    weight: Array
    n_draws: int = struct.field(pytree_node=False, default=0)


def _check_skip(skip):
    if not isinstance(skip, jax.core.Tracer) and (np.ndim(skip) or not np.isfinite(skip) or skip < 0):
        raise ValueError(f"skip must be a number >= 0, got {skip}")


@uses_float64
def uninformed_thresholds(skip, draws: Draws | None = None, rule=None) -> Thresholds:
    """`alpha_l^0 = 1 / M_l` from the linear stability of `Q = 0` (module docstring), with Monte Carlo errors.

    `rule`: a `GridRule` (default `threshold_grid(0.16, skip)`) or an `InnerRule`; for three layers (`draws` of three layers)
    a `phasejax.depth.posterior.ThreeRule`."""
    _check_skip(skip)
    draws = se_draws(4096) if draws is None else draws
    rule = threshold_grid(0.16, skip) if rule is None else rule
    layers = draws.xi.shape[1]
    m = sample_moments(np.zeros(layers), skip, draws, rule)
    out = [nishimori_mean(m.M_teacher[:, l], m.M_posterior[:, l]) for l in range(layers)]
    M, M_se, w = (np.asarray(v) for v in zip(*out))
    return Thresholds(M=M, M_se=M_se, alpha0=1.0 / M, alpha0_err=M_se / M**2, weight=w, n_draws=int(m.g2.shape[0]))


def _crossing(V, a, b, reach: float = 1.0):
    """The threshold from the means at three (or more) points `V (n,)` of the learned layer's `1 - q`:
    `a (n,)` its `E|g|^2`, `b (n,)` the other layer's `M`. Returns `(alpha quadratic, alpha linear, V*)`;
    NaN when the growth factor crosses one farther than `reach` spacings outside the points."""
    V, a, b = (np.asarray(v, np.float64) for v in (V, a, b))
    log_alpha = np.log((1.0 - V) / (V * a))
    return crossing_log(np.log(V), log_alpha, log_alpha + np.log(b), reach)


@struct.dataclass
class SecondThreshold:
    """The threshold of the layer learned second, next to the first one's fixed point (module docstring).

    `alpha ()`: the threshold; its errors `alpha_mc ()` (Monte Carlo, jackknife over blocks of draws) and
    `alpha_interp ()` (quadratic against linear interpolation between the points); `q ()`: the learned layer's
    overlap there and its Monte Carlo error `q_err ()`; `learned ()`: the index of the learned layer, `other ()`:
    the index of the layer whose threshold this is.
    The points: `V (n,)` (the learned layer's `1 - q`), `alpha_star (n,)` (where each is a fixed point),
    `gain (n,)` and `gain_se (n,)` (the other layer's growth factor there). `branch_monotone ()`: `alpha_star`
    increases along the pilot scan up to the threshold (one fixed point per `alpha`: no jump of the learned layer).
    `n_draws`: the draws of the final points.
    """

    alpha: Array
    alpha_mc: Array
    alpha_interp: Array
    q: Array
    q_err: Array
    learned: Array
    other: Array
    V: Array
    alpha_star: Array
    gain: Array
    gain_se: Array
    branch_monotone: Array
    n_draws: int = struct.field(pytree_node=False, default=0)

    @property
    def alpha_err(self):
        """Monte Carlo and interpolation errors added in quadrature."""
        return np.hypot(self.alpha_mc, self.alpha_interp)


PILOT_V = tuple(float(v) for v in np.geomspace(0.7, 0.003, 16))
"""The pilot scan's values of the learned layer's `V = 1 - q`."""


def _point_means(V_points, learned, skip, draws, rule, others=None):
    """Per-sample `a (n, N)`, `b (k, n, N)` at the points (the learned layer at `V = 1 - q`, every other layer at 0):
    the learned layer's `E|g|^2` (`g2_samples`) and the `M` of each of `others` (default: every other layer;
    `M_samples`), with the combinations' weights per point."""
    layers = draws.xi.shape[1]
    others = [l for l in range(layers) if l != learned] if others is None else list(others)
    a, b = [], []
    for V in V_points:
        q = np.zeros(layers)
        q[learned] = 1.0 - V
        m = sample_moments(q, skip, draws, rule)
        a.append(g2_samples(m, learned))
        b.append([M_samples(m, other) for other in others])
    return np.asarray(a), np.swapaxes(np.asarray(b), 0, 1)


def _threshold_from_samples(V, a, b, n_blocks=JACKKNIFE_BLOCKS):
    """`(alpha, alpha_lin, V*)` and their jackknife standard errors from per-sample `a, b (n, N)`."""
    est = np.asarray(_crossing(V, a.mean(-1), b.mean(-1)))
    loo_a, _ = block_means(a, n_blocks)
    loo_b, _ = block_means(b, n_blocks)
    reps = np.asarray([_crossing(V, loo_a[j], loo_b[j]) for j in range(n_blocks)])
    return est, jackknife_se(reps)


@uses_float64
def second_threshold(skip, learned: int = 1, draws: Draws | None = None, rule=None, *,
                     pilot_draws: Draws | None = None, pilot_rule=None, spread: float = 0.12,
                     pilot_V=PILOT_V) -> SecondThreshold:
    """The threshold of the layer learned second, next to the fixed point of `learned`, the others at zero.

    A pilot scan over `pilot_V` (with `pilot_draws`, `pilot_rule`) finds, among the other layers, the one whose
    growth factor reaches one first, and brackets its crossing; the final three points at
    `V* exp(-spread, 0, spread)` use `draws` and `rule` (default `threshold_grid(0.16, skip)`; for three layers, draws of three
    layers and a `ThreeRule` for all four arguments). The learned layer's overlap at every point is an exact fixed
    point of the map (module docstring).
    """
    _check_skip(skip)
    draws = se_draws(16384, seed=1) if draws is None else draws
    layers = draws.xi.shape[1]
    if learned not in range(layers):
        raise ValueError(f"learned must be a layer index in [0, {layers}), got {learned}")
    if not 0 < spread < 1:
        raise ValueError(f"spread must be in (0, 1), got {spread}")
    rule = threshold_grid(0.16, skip) if rule is None else rule
    pilot_draws = se_draws(2048, seed=2) if pilot_draws is None else pilot_draws
    pilot_rule = threshold_grid(0.24, skip) if pilot_rule is None else pilot_rule
    others = [l for l in range(layers) if l != learned]
    Vp = np.asarray(pilot_V, np.float64)
    a, b = _point_means(Vp, learned, skip, pilot_draws, pilot_rule, others)
    alpha_star = (1 - Vp) / (Vp * a.mean(-1))
    gains = alpha_star[None] * b.mean(-1)  # (others, n)
    crossings = []
    for g in gains:
        above = np.nonzero(g >= 1.0)[0]
        crossings.append(above[0] if above.size and above[0] > 0 else None)
    alphas = [np.interp(1.0, g[k - 1:k + 1], alpha_star[k - 1:k + 1]) if k is not None else np.inf
              for g, k in zip(gains, crossings)]
    j = int(np.argmin(alphas))
    other, k = others[j], crossings[j]
    nan = np.float64(np.nan)
    if k is None:
        return SecondThreshold(alpha=nan, alpha_mc=nan, alpha_interp=nan, q=nan, q_err=nan, learned=np.int32(learned),
                               other=np.int32(other), V=Vp, alpha_star=alpha_star, gain=gains[j],
                               gain_se=alpha_star * b[j].std(-1) / np.sqrt(b.shape[-1]),
                               branch_monotone=np.bool_(np.all(np.diff(alpha_star) > 0)),
                               n_draws=pilot_draws.xi.shape[0])
    monotone = bool(np.all(np.diff(alpha_star[: k + 1]) > 0))
    _, _, V0 = _crossing(Vp[k - 1:k + 1], a[k - 1:k + 1].mean(-1), b[j, k - 1:k + 1].mean(-1))
    for _ in range(RECENTRE):
        V_final = V0 * np.exp(spread * np.array([1.0, 0.0, -1.0]))
        a, b = _point_means(V_final, learned, skip, draws, rule, [other])
        b = b[0]
        (alpha, alpha_lin, V_star), (alpha_mc, _, V_mc) = _threshold_from_samples(V_final, a, b)
        V_far = _crossing(V_final, a.mean(-1), b.mean(-1), np.inf)[2]
        if V_final[-1] <= V_far <= V_final[0] or not np.isfinite(V_far):
            break
        V0 = V_far  # the pilot missed: centre the points on the final draws' crossing
    alpha_star = (1 - V_final) / (V_final * a.mean(-1))
    n = a.shape[-1]
    return SecondThreshold(alpha=np.float64(alpha), alpha_mc=np.float64(alpha_mc),
                           alpha_interp=np.float64(abs(alpha - alpha_lin)), q=np.float64(1 - V_star),
                           q_err=np.float64(V_mc), learned=np.int32(learned), other=np.int32(other), V=V_final,
                           alpha_star=alpha_star, gain=alpha_star * b.mean(-1),
                           gain_se=alpha_star * b.std(-1, ddof=1) / np.sqrt(n), branch_monotone=np.bool_(monotone),
                           n_draws=n)


@struct.dataclass
class RuleCheck:
    """A threshold recomputed with another rule on the same draws: `primary ()` and `other ()` (both on the check's
    draws), `difference ()` `= other - primary` and its jackknife standard error `difference_se ()` (paired draws,
    so the Monte Carlo noise common to both cancels), and `n_draws`."""

    primary: Array
    other: Array
    difference: Array
    difference_se: Array
    n_draws: int = struct.field(pytree_node=False, default=0)


@uses_float64
def check_first(skip, layer: int, draws: Draws, rule, other_rule) -> RuleCheck:
    """`alpha_l^0` of `layer` with `rule` and with `other_rule` on the same `draws`."""
    _check_skip(skip)
    vals = []
    for r in (rule, other_rule):
        m = sample_moments(np.zeros(draws.xi.shape[1]), skip, draws, r)
        x, y = np.asarray(m.M_teacher[:, layer]), np.asarray(m.M_posterior[:, layer])
        vals.append(0.5 * (x + y))  # a fixed weight: the same estimator for both rules
    loo, full = block_means(np.stack(vals), JACKKNIFE_BLOCKS)
    est = 1.0 / full
    reps = 1.0 / loo
    diff_se = jackknife_se(reps[:, 1] - reps[:, 0])
    return RuleCheck(primary=np.float64(est[0]), other=np.float64(est[1]), difference=np.float64(est[1] - est[0]),
                     difference_se=np.float64(diff_se), n_draws=int(draws.xi.shape[0]))


@uses_float64
def check_second(skip, threshold: SecondThreshold, draws: Draws, rule, other_rule) -> RuleCheck:
    """`second_threshold`'s crossing at its final points recomputed with `rule` and with `other_rule` on `draws`."""
    return check_crossing(skip, threshold.V, threshold.learned, threshold.other, draws, rule, other_rule)


@uses_float64
def check_crossing(skip, V, learned: int, other: int, draws: Draws, rule, other_rule) -> RuleCheck:
    """Where layer `other`'s growth factor crosses one along layer `learned`'s branch, interpolated between the
    branch points `V (n,)` (the learned layer's `1 - q`), computed with `rule` and with `other_rule` on `draws`."""
    _check_skip(skip)
    learned, other = int(learned), int(other)
    V = np.asarray(V, np.float64)
    samples = [(a, b[0]) for a, b in (_point_means(V, learned, skip, draws, r, [other]) for r in (rule, other_rule))]
    # the crossing may lie outside the points on few draws: extrapolate (the difference is what is measured)
    est = [_crossing(V, a.mean(-1), b.mean(-1), np.inf)[0] for a, b in samples]
    loo = [(block_means(a, JACKKNIFE_BLOCKS)[0], block_means(b, JACKKNIFE_BLOCKS)[0]) for a, b in samples]
    reps = np.asarray([[_crossing(V, la[j], lb[j], np.inf)[0] for la, lb in loo] for j in range(JACKKNIFE_BLOCKS)])
    return RuleCheck(primary=np.float64(est[0]), other=np.float64(est[1]), difference=np.float64(est[1] - est[0]),
                     difference_se=np.float64(jackknife_se(reps[:, 1] - reps[:, 0])), n_draws=int(draws.xi.shape[0]))


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
    rule = rule_for(32, skip) if rule is None else rule
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


@struct.dataclass
class ThresholdSettings:
    """How `layer_thresholds` computes one skip's thresholds (all static).

    `target`: the Monte Carlo standard error aimed at for each threshold; the draws start at `draws_first`,
    `draws_second` and are raised in proportion to the squared error ratio (the second threshold's up to `RAISES`
    times, until its error is below the target), up to `max_draws`.
    `step`: the grid rule's step (`grid_rule`); its error is measured against `step / 2` on `rule_draws` draws.
    `check_order`: the independent rule (`independent_rule`: the Gauss-Hermite mixture, the `DiagonalRule` below
    `STRIP_SKIP`) that recomputes both thresholds on `check_draws` draws
    (paired), raised like the others until the paired difference's error is below `target / 2`.
    `pilot_draws`, `pilot_step`: the pilot scan of `second_threshold`. `seed`: of all draws.
    """

    target: float = 0.0015
    draws_first: int = 16384
    draws_second: int = 16384
    max_draws: int = 262144
    step: float = 0.16
    rule_draws: int = 2048
    check_order: int = 96
    check_draws: int = 1024
    max_check_draws: int = 8192
    pilot_draws: int = 2048
    pilot_step: float = 0.24
    seed: int = 1


@struct.dataclass
class LayerThresholds:
    """One skip's thresholds: `first` (`Thresholds` at `Q = 0`) and `second` (`SecondThreshold`); the layer learned
    first, `first_layer` (index); the grid rule's own error, `first_grid`, `second_grid` (`RuleCheck` of `step`
    against `step / 2`); and the independent rule's, `first_check`, `second_check` (`RuleCheck` of the grid against
    the Gauss-Hermite mixture)."""

    skip: float
    first_layer: int
    first: Thresholds
    second: SecondThreshold
    first_grid: RuleCheck
    second_grid: RuleCheck
    first_check: RuleCheck
    second_check: RuleCheck

    @property
    def alpha_first(self) -> tuple[float, float]:
        """The first layer's threshold and its error (Monte Carlo and the grid's error in quadrature)."""
        l = self.first_layer
        return float(self.first.alpha0[l]), float(np.hypot(self.first.alpha0_err[l], self.first_grid.difference))

    @property
    def alpha_second(self) -> tuple[float, float]:
        """The second layer's threshold and its error (Monte Carlo, interpolation and the grid's error)."""
        s = self.second
        return float(s.alpha), float(np.sqrt(s.alpha_mc**2 + s.alpha_interp**2 + self.second_grid.difference**2))


RAISES = 6
"""How many times `layer_thresholds` raises the draws of a threshold whose Monte Carlo error is above the target."""


MARGIN = 1.3
"""The factor by which `_more` raises the draws beyond the squared error ratio. A jackknife error is itself an
estimate that moves by 10-20% between nested draws; with a margin of 1.1 a threshold raised six times could still
end above its target (`alpha_1` at `c = 2`: 0.00208 against 0.0019)."""


def _more(n, err, target, cap, block=256):
    """The draws that bring a standard error `err` at `n` draws to `target` (with `MARGIN`), capped, in blocks."""
    if not np.isfinite(err) or err <= target or n >= cap:
        return n
    return int(min(cap, block * np.ceil(n * MARGIN * (err / target) ** 2 / block)))


@uses_float64
def layer_thresholds(skip, settings: ThresholdSettings = ThresholdSettings()) -> LayerThresholds:
    """Both layers' thresholds at one skip strength, with their errors and the independent rule's check."""
    _check_skip(skip)
    st = settings
    grid, fine = threshold_grid(st.step, skip), threshold_grid(st.step / 2, skip)
    other_rule = independent_rule(st.check_order, skip)
    n = st.draws_first
    first = uninformed_thresholds(skip, se_draws(n, st.seed), grid)
    layer = int(np.argmin(first.alpha0))
    n_more = _more(n, float(first.alpha0_err[layer]), st.target, st.max_draws)
    if n_more > n:
        first = uninformed_thresholds(skip, se_draws(n_more, st.seed), grid)
    pilot = se_draws(st.pilot_draws, st.seed + 1)
    pilot_rule = threshold_grid(st.pilot_step, skip)
    n = st.draws_second
    second = second_threshold(skip, layer, se_draws(n, st.seed + 2), grid, pilot_draws=pilot, pilot_rule=pilot_rule)
    for _ in range(RAISES):  # the jackknife error is itself an estimate: raise until it is below the target
        n_more = _more(n, float(second.alpha_mc), st.target, st.max_draws)
        if n_more <= n:
            break
        n = n_more
        second = second_threshold(skip, layer, se_draws(n, st.seed + 2), grid, pilot_draws=pilot,
                                  pilot_rule=pilot_rule)
    rule_draws = se_draws(st.rule_draws, st.seed + 3)
    first_grid = check_first(skip, layer, rule_draws, grid, fine)
    second_grid = check_second(skip, second, rule_draws, grid, fine)
    checks = []
    for check in (lambda d: check_first(skip, layer, d, grid, other_rule),
                  lambda d: check_second(skip, second, d, grid, other_rule)):
        n = st.check_draws
        res = check(se_draws(n, st.seed + 4))
        n_more = _more(n, float(res.difference_se), st.target / 2, st.max_check_draws)
        if n_more > n:
            res = check(se_draws(n_more, st.seed + 4))
        checks.append(res)
    return LayerThresholds(skip=float(skip), first_layer=layer, first=first, second=second, first_grid=first_grid,
                           second_grid=second_grid, first_check=checks[0], second_check=checks[1])


@uses_float64
def estimator_study(skip, q, draws: Draws, rule=None) -> dict:
    """Per-sample mean and standard deviation of every estimator at overlaps `q (2,)`: the stability constants of the
    layers at zero (`direct`, `teacher`, `posterior`, `combined`: `nishimori_mean`) and `E|g_l|^2` of the others
    (`direct`, `nishimori`). Returns `{(quantity, estimator): (mean, std)}` with quantity `M_1`, `M_2`, `g2_1`, `g2_2`."""
    _check_skip(skip)
    rule = threshold_grid(0.16, skip) if rule is None else rule
    q = np.asarray(q, np.float64)
    m = sample_moments(q, skip, draws, rule)
    out = {}
    for l in range(2):
        if q[l] == 0.0:
            x, y = np.asarray(m.M_teacher[:, l]), np.asarray(m.M_posterior[:, l])
            w = combination_weight(x, y)
            for name, v in (("direct", m.cov_dev[:, l]), ("teacher", x), ("posterior", y),
                            ("combined", w * x + (1 - w) * y)):
                v = np.asarray(v)
                out[(f"M_{l + 1}", name)] = (float(v.mean()), float(v.std(ddof=1)))
        else:
            for name, v in (("direct", m.g2[:, l]), ("nishimori", m.g2_nishimori[:, l]),
                            ("combined", g2_samples(m, l))):
                v = np.asarray(v)
                out[(f"g2_{l + 1}", name)] = (float(v.mean()), float(v.std(ddof=1)))
    return out


@uses_float64
def learned_branch(skip, V, learned: int = 1, draws: Draws | None = None, rule=None) -> tuple[Array, Array]:
    """The learned layer's fixed point with the other one held at zero, as `alpha*(q)` (module docstring): at the
    learned layer's `V = 1 - q (n,)` returns `(alpha* (n,), its Monte Carlo standard error (n,))`. Every point is an
    exact fixed point of the map on these draws; `q(alpha)` follows by interpolation where `alpha*` increases."""
    _check_skip(skip)
    draws = se_draws(4096, seed=5) if draws is None else draws
    rule = threshold_grid(0.16, skip) if rule is None else rule
    V = np.asarray(V, np.float64)
    a, _ = _point_means(V, learned, skip, draws, rule, [])
    mean = a.mean(-1)
    alpha = (1 - V) / (V * mean)
    return alpha, alpha * a.std(-1, ddof=1) / np.sqrt(a.shape[-1]) / mean


@struct.dataclass
class BranchPoint(HasStatus):
    """The learned layer's fixed point at one `alpha`, the other layers held at zero: the root of
    `alpha*(q) = alpha` on the branch `alpha*(q) = q / ((1 - q) E|g|^2(q))` (module docstring).

    `alpha ()`; `q ()`: the learned layer's overlap there; `q_err ()`: its Monte Carlo standard error, the root's
    shift under the draws' error of `E|g|^2` to first order (`V se(log E|g|^2) / |d log alpha* / d log V|`,
    `V = 1 - q`); `slope ()`: `dq / dalpha` along the branch; `residual ()`: `|log alpha*(q) - log alpha|` at the
    root; `iterations ()`: evaluations of `E|g|^2` (the bracketing scan, Brent's method, the slope); `status ()`:
    `Status.CONVERGED`, `MAX_ITERATIONS` (Brent's method did not meet its tolerance) or `INVALID_INPUT` (no root
    on the branch between `1 - Q_MAX` and the scan's first `V`: `alpha` below the learned layer's threshold or
    beyond the cap; `q`, `q_err`, `slope` NaN); `learned ()`: the layer's index; `n_draws`."""

    alpha: Array
    q: Array
    q_err: Array
    slope: Array
    residual: Array
    iterations: Array
    status: Array
    learned: Array
    n_draws: int = struct.field(pytree_node=False, default=0)


BRANCH_SCAN_V = tuple(float(v) for v in np.geomspace(0.995, 5e-4, 12))
"""The values of the learned layer's `V = 1 - q` that `branch_point` scans for the first sign change of
`alpha*(q) - alpha` from the uninformative end (the branch connected to `q = 0`); `5e-4` is `1 - Q_MAX`."""


@uses_float64
def branch_point(skip, alpha, learned: int = 1, draws: Draws | None = None, rule=None, *, xtol: float = 1e-10,
                 scan_V=BRANCH_SCAN_V) -> BranchPoint:
    """The learned layer's overlap at `alpha` with the other layers held at zero, as a root in `log V` of
    `log alpha*(V) - log alpha` (Brent's method on fixed `draws`, default 16384, with `rule`, default
    `threshold_grid(0.16, skip)`), with its Monte Carlo error (`BranchPoint`).

    Found as a root, not by iterating the map: near a threshold the map contracts slowly and iterates averaged
    over a finite run sit on one side of the fixed point, while every `alpha*(q)` is an exact fixed point of the
    map on the draws. The root is the first one met scanning `scan_V` from the uninformative end (the branch
    continuously connected to `q = 0`); where `alpha*` is not monotone there are others. `xtol`: Brent's tolerance
    in `log V`.

    Example (few draws and a coarse grid: a quick look, not a measurement):
      >>> from phasejax.depth import branch_point, se_draws
      >>> p = branch_point(1.0, 0.45, draws=se_draws(256, seed=3), rule=threshold_grid(0.32, 1.0))
      >>> p.status_name, bool(0.5 < p.q < 0.8)
      ('converged', True)
    """
    from scipy.optimize import brentq

    _check_skip(skip)
    if isinstance(alpha, bool) or not np.ndim(alpha) == 0 or not np.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"alpha must be a number > 0, got {alpha!r}")
    if not xtol > 0:
        raise ValueError(f"xtol must be > 0, got {xtol!r}")
    draws = se_draws(16384, seed=5) if draws is None else draws
    layers = draws.xi.shape[1]
    if learned not in range(layers):
        raise ValueError(f"learned must be a layer index in [0, {layers}), got {learned}")
    rule = threshold_grid(0.16, skip) if rule is None else rule
    log_alpha = float(np.log(alpha))
    samples: dict[float, np.ndarray] = {}

    def log_g2(x):
        """`log E|g|^2` at the learned layer's `V = exp(x)` (its per-sample values kept in `samples`)."""
        if x not in samples:
            samples[x] = _point_means([np.exp(x)], learned, skip, draws, rule, [])[0][0]
        return float(np.log(samples[x].mean()))

    def h(x):
        """`log alpha*(V) - log alpha` at `x = log V`."""
        return float(np.log1p(-np.exp(x)) - x - log_g2(x) - log_alpha)

    xs = np.log(np.asarray(scan_V, np.float64))
    xs = xs[xs >= np.log(1.0 - 0.9995) - 1e-12]
    values = []
    lo = hi = None
    for x in xs:
        values.append(h(x))
        if len(values) > 1 and values[-2] < 0 <= values[-1]:
            lo, hi = xs[len(values) - 2], x
            break
    nan = np.float64(np.nan)
    if lo is None:
        return BranchPoint(alpha=np.float64(alpha), q=nan, q_err=nan, slope=nan, residual=nan,
                           iterations=np.int32(len(samples)), status=np.int32(Status.INVALID_INPUT),
                           learned=np.int32(learned), n_draws=int(draws.xi.shape[0]))
    x, info = brentq(h, hi, lo, xtol=xtol, rtol=4 * np.finfo(float).eps, maxiter=100, full_output=True,
                     disp=False)
    residual = abs(h(x))
    step = 0.01
    dlog_a = (log_g2(x + step) - log_g2(x - step)) / (2 * step)   # central difference on the same draws
    V = np.exp(x)
    dh = -1.0 / (1.0 - V) - dlog_a          # d log alpha* / d log V
    a = samples[x]
    se_log_a = a.std(ddof=1) / np.sqrt(a.size) / a.mean()
    status = Status.CONVERGED if info.converged else Status.MAX_ITERATIONS
    return BranchPoint(alpha=np.float64(alpha), q=np.float64(1.0 - V), q_err=np.float64(V * se_log_a / abs(dh)),
                       slope=np.float64(-V / (dh * alpha)), residual=np.float64(residual),
                       iterations=np.int32(len(samples)), status=np.int32(status), learned=np.int32(learned),
                       n_draws=int(draws.xi.shape[0]))
