"""Three layers of tied rank-1 attention: thresholds and learning order (docs/depth.md, section 7).

The model (`phasejax.depth.model` with `L = 3`): `M_1 = A(z_1)`, `h_2 = M_1 z_2`,
`M_2 = A(h_2) M_1`, and the output reveals `u = M_2 z_3` up to its sign. Each layer's
sign is invisible again (`A` is even in its argument), so the overlap matrix is
diagonal, `Q = diag(q_1, q_2, q_3)`, and the state evolution of `phasejax.depth.se`
applies unchanged with this posterior (`phasejax.depth.posterior.posterior_of`).

The posterior (`phasejax.depth.posterior.posterior_three`, `ThreeRule`): given `z_1`, the last two layers
are the two-layer problem in `h = P z_2`, `w = P z_3` with `P = A(z_1)`; its rule needs `c > 0`.

Thresholds. `three_thresholds` follows the learning order: the layer with the largest
stability constant at `Q = 0` first; along its branch (parametrised by its own overlap,
the others at zero, as in `phasejax.depth.thresholds`) the growth factors of the other
two; the one crossing one first is learned second; and the last layer's growth factor
along the two learned layers' fixed point (state evolution with the last layer held at
zero) gives the third threshold.
"""

from __future__ import annotations

import jax
import numpy as np
from flax import struct

from phasejax.depth.estimators import (
    JACKKNIFE_BLOCKS,
    RECENTRE,
    M_samples,
    block_means,
    crossing_log,
    g2_samples,
    jackknife_se,
    sample_moments,
)
from phasejax.depth.posterior import three_rule
from phasejax.depth.se import se_draws
from phasejax.depth.thresholds import check_first, check_second, second_threshold, uninformed_thresholds
from phasejax.precision import uses_float64

Array = jax.Array


@struct.dataclass
class ThirdThreshold:
    """The threshold of the layer learned last, next to the fixed point of the two learned ones.

    `alpha ()` and its errors `alpha_mc ()` (jackknife over blocks of draws, with the fixed point's shift
    linearised) and `alpha_interp ()`; `first`, `second`, `last ()`: layer indices in the learning order;
    `q_first`, `q_second ()`: the learned layers' overlaps at the threshold. The points: `V (n,)` (the second
    layer's `1 - q`), `V_first (n,)` (the first layer's at the same fixed point), `alpha_star (n,)`, `gain (n,)`;
    `root_residual (n,)`: `|log alpha_first - log alpha_second|` left by the root finder; `simultaneous ()`: the
    last layer is unstable from the scan's first point on (the second layer's overlap `1 - V[0]`), so it leaves
    zero together with the second one and `alpha` is that point's (no error bars); `n_draws`."""

    alpha: Array
    alpha_mc: Array
    alpha_interp: Array
    first: Array
    second: Array
    last: Array
    q_first: Array
    q_second: Array
    q: Array
    V_first: Array
    alpha_star: Array
    gain: Array
    root_residual: Array
    simultaneous: Array
    n_draws: int = struct.field(pytree_node=False, default=0)


def _both_learned(V_second, first, second, last, skip, draws, rule, x0, tol=1e-4, max_steps=12):
    """The fixed point where `first` and `second` are learned (`last` at zero) with the second layer at
    `1 - V_second`: the first layer's `x = log V_first` solving `alpha_first(x) = alpha_second(x)`, with
    `alpha_l = q_l / ((1 - q_l) E|g_l|^2)` (both fixed-point equations at one `alpha`), by the secant method.

    Returns `(x, per-sample (a_first, a_second, b_last) (3, N) at x, d/dx of the means' logs (3,), residual)`."""
    layers = draws.xi.shape[1]

    def evaluate(x):
        q = np.zeros(layers)
        q[first], q[second] = 1.0 - np.exp(x), 1.0 - V_second
        m = sample_moments(q, skip, draws, rule)
        samples = np.stack([g2_samples(m, first), g2_samples(m, second), M_samples(m, last)])
        logs = np.log(samples.mean(-1))
        h = (np.log(-np.expm1(x)) - x - logs[0]) - (np.log(1 - V_second) - np.log(V_second) - logs[1])
        return h, samples, logs

    x_prev, x = x0, x0 + 0.2
    h_prev, _, logs_prev = evaluate(x_prev)
    h, samples, logs = evaluate(x)
    for _ in range(max_steps):
        if abs(h) < tol or h == h_prev:
            break
        x_new = x - h * (x - x_prev) / (h - h_prev)
        x_new = float(np.clip(x_new, x - 1.5, min(x + 1.5, -1e-6)))
        x_prev, h_prev, logs_prev = x, h, logs
        x = x_new
        h, samples, logs = evaluate(x)
    slope = (logs - logs_prev) / (x - x_prev) if x != x_prev else np.zeros(3)
    return x, samples, slope, abs(h)


THIRD_PILOT_Q = (0.001, 0.01, 0.03, 0.1, 0.2, 0.35, 0.5, 0.7, 0.85, 0.95)
"""The pilot scan of `third_threshold`: the second layer's overlap, from where it leaves zero upwards."""


def _logit(q):
    return np.log(q) - np.log1p(-q)


@uses_float64
def third_threshold(skip, first: int, second: int, q_first_start: float, draws, rule, *, pilot_draws, pilot_rule,
                    pilot_q=THIRD_PILOT_Q, spread: float = 0.3) -> ThirdThreshold:
    """The last layer's threshold along the fixed point of `first` and `second` (both learned, the last at zero),
    parametrised by the second layer's overlap `q` (`pilot_q` for the pilot scan, then three final points
    `spread` apart in `logit q`); `q_first_start`: the first layer's overlap where the second one leaves zero (the
    root finder's start). On that branch `alpha = q / ((1 - q) E|g_second|^2)`."""
    layers = draws.xi.shape[1]
    if layers != 3:
        raise ValueError(f"third_threshold needs draws of three layers, got {layers}")
    last = ({0, 1, 2} - {first, second}).pop()

    def scan(ys, d, r, x):
        xs, rows, slopes, res = [], [], [], []
        for y in ys:
            V = 1.0 / (1.0 + np.exp(y))
            x, samples, slope, h = _both_learned(V, first, second, last, skip, d, r, x)
            xs.append(x)
            rows.append(samples)
            slopes.append(slope)
            res.append(h)
        return np.asarray(xs), np.asarray(rows), np.asarray(slopes), np.asarray(res)

    def logs_of(ys, means):
        log_alpha = ys - np.log(means[:, 1])
        return log_alpha, log_alpha + np.log(means[:, 2])

    yp = _logit(np.asarray(pilot_q, np.float64))
    xs, rows, _, res_p = scan(yp, pilot_draws, pilot_rule, float(np.log(1 - q_first_start)))
    log_alpha, log_gain = logs_of(yp, rows.mean(-1))
    above = np.nonzero(log_gain >= 0)[0]
    nan = np.float64(np.nan)
    qp = np.asarray(pilot_q, np.float64)
    if not above.size or above[0] == 0:
        # never unstable on the scan, or unstable as soon as the second layer leaves zero (then the last layer's
        # threshold is the second one's, to the scan's resolution: `alpha` is the scan's first point)
        at_once = bool(above.size)
        return ThirdThreshold(alpha=np.float64(np.exp(log_alpha[0])) if at_once else nan, alpha_mc=nan,
                              alpha_interp=nan, first=np.int32(first), second=np.int32(second), last=np.int32(last),
                              q_first=np.float64(1 - np.exp(xs[0])) if at_once else nan,
                              q_second=np.float64(qp[0]) if at_once else nan, q=qp, V_first=np.exp(xs),
                              alpha_star=np.exp(log_alpha), gain=np.exp(log_gain), root_residual=res_p,
                              simultaneous=np.bool_(at_once), n_draws=pilot_draws.xi.shape[0])
    k = above[0]
    t = -log_gain[k - 1] / (log_gain[k] - log_gain[k - 1])
    y0 = yp[k - 1] + t * (yp[k] - yp[k - 1])
    x_start = float(xs[k - 1] + t * (xs[k] - xs[k - 1]))
    for _ in range(RECENTRE):
        ys = y0 + spread * np.array([-1.0, 0.0, 1.0])
        xs, rows, slopes, res = scan(ys, draws, rule, x_start)
        la, lg = logs_of(ys, rows.mean(-1))
        y_far = np.log(crossing_log(ys, la, lg, np.inf)[2])
        if ys[0] <= y_far <= ys[-1] or not np.isfinite(y_far):
            break
        y0, x_start = y_far, float(np.interp(y_far, ys, xs))  # centre on the final draws' crossing

    full = rows.mean(-1)
    # d h / d x at the roots, h = log alpha_first(x) - log alpha_second(x), x = log V_first
    dh = -np.exp(xs) / -np.expm1(xs) - 1.0 - slopes[:, 0] + slopes[:, 1]

    def estimate(means):
        # the roots move when the means do (first order): x* -> x* - (h(means) - h(full)) / dh
        logs = np.log(means)
        h_shift = -(logs[:, 0] - np.log(full[:, 0])) + (logs[:, 1] - np.log(full[:, 1]))
        logs = logs + slopes * (-h_shift / dh)[:, None]
        la = ys - logs[:, 1]
        return crossing_log(ys, la, la + logs[:, 2], reach=np.inf)

    alpha, alpha_lin, e_star = estimate(full)
    loo, _ = block_means(rows, JACKKNIFE_BLOCKS)  # (B, 3 points, 3 quantities)
    mc = jackknife_se(np.asarray([estimate(m)[0] for m in loo]))
    y_star = np.log(e_star)
    la, lg = logs_of(ys, full)
    q = 1.0 / (1.0 + np.exp(-ys))
    return ThirdThreshold(alpha=np.float64(alpha), alpha_mc=np.float64(mc),
                          alpha_interp=np.float64(abs(alpha - alpha_lin)), first=np.int32(first),
                          second=np.int32(second), last=np.int32(last),
                          q_first=np.float64(1 - np.exp(np.interp(y_star, ys, xs))),
                          q_second=np.float64(1.0 / (1.0 + np.exp(-y_star))), q=q, V_first=np.exp(xs),
                          alpha_star=np.exp(la), gain=np.exp(lg), root_residual=res, simultaneous=np.bool_(False),
                          n_draws=draws.xi.shape[0])


@struct.dataclass
class ThreeSettings:
    """How `three_thresholds` computes one skip's thresholds (all static): the rule (`outer_order`, `inner_order`),
    the draws of the first threshold (`draws_first`), of the final points of the other two (`draws`) and of their
    pilot scans (`pilot_draws`), the check rule (`check_outer`, `check_inner`) and its paired draws
    (`check_draws`), and the `seed` of all draws."""

    outer_order: int = 6
    inner_order: int = 8
    draws_first: int = 16384
    draws: int = 4096
    pilot_draws: int = 512
    check_outer: int = 8
    check_inner: int = 12
    check_draws: int = 512
    seed: int = 1


SECOND_PILOT_V = tuple(float(v) for v in np.geomspace(0.7, 0.001, 12))
"""The pilot scan of the second threshold of three layers: the first layer's `V = 1 - q`."""


@struct.dataclass
class ThreeThresholds:
    """One skip's three thresholds in the learning order: `first` (`Thresholds` at `Q = 0` for the three layers),
    `second` (`SecondThreshold`), `third` (`ThirdThreshold`); `first_check`, `second_check`: `RuleCheck` of the rule
    against the finer check rule on paired draws."""

    skip: float
    first: object
    second: object
    third: ThirdThreshold
    first_check: object
    second_check: object

    @property
    def order(self) -> tuple[int, int, int]:
        """Layer indices in the order they are learned."""
        return int(self.third.first), int(self.third.second), int(self.third.last)


@uses_float64
def three_thresholds(skip, settings: ThreeSettings = ThreeSettings()) -> ThreeThresholds:
    """The three layers' thresholds at one skip strength (`c > 0`), in the order they are learned (module docstring)."""
    if not np.isfinite(skip) or skip <= 0:
        raise ValueError(f"skip must be > 0 for three layers, got {skip}")
    st = settings
    rule = three_rule(st.outer_order, st.inner_order)
    check_rule = three_rule(st.check_outer, st.check_inner)

    def draws(n, k):
        return se_draws(n, st.seed + k, layers=3)

    first = uninformed_thresholds(skip, draws(st.draws_first, 0), rule)
    layer = int(np.argmin(first.alpha0))
    second = second_threshold(skip, layer, draws(st.draws, 1), rule, pilot_draws=draws(st.pilot_draws, 2),
                              pilot_rule=rule, pilot_V=SECOND_PILOT_V)
    third = third_threshold(skip, layer, int(second.other), float(second.q), draws(st.draws, 3), rule,
                            pilot_draws=draws(st.pilot_draws, 4), pilot_rule=rule)
    check = draws(st.check_draws, 5)
    first_check = check_first(skip, layer, check, rule, check_rule)
    second_check = check_second(skip, second, check, rule, check_rule)
    return ThreeThresholds(skip=float(skip), first=first, second=second, third=third, first_check=first_check,
                           second_check=second_check)
