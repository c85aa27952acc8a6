"""Posterior of the layers' projections given the sequence index, by independent rules (docs/depth.md, sections 2, 7).

For `T = 2` tokens the output reveals the sequence index `u (T,)` up to its sign, and
`u = A(h) w` with `A(h) = c I + softmax(h h^T)` (`phasejax.depth.model.mixing_matrix`).
Given Gaussian priors `h ~ N(mu_a, C_a)`, `w ~ N(mu_b, C_b)` the posterior lives on the
surface `w = +-A(h)^{-1} u`: it is a density over `h` alone,

    p(h | u) ~ N(h; mu_a, C_a) sum_{+-} N(+-A(h)^{-1} u; mu_b, C_b) / |det A(h)|.

For the two-layer model `h = z_1`, `w = z_2` with `C = V I`; for three layers the last
two layers given the first one's projection are this problem with `h = P z_2`,
`w = P z_3`, `P = A(z_1)` (`readout = P^{-1}` maps the moments back to `z`).

Three rules integrate over `h`:

* `InnerRule`: Gauss-Hermite nodes in a defensive mixture (balance-heuristic importance
  weights). Components: the prior; for each sign of `u`, Gaussians at the two preimages
  `+-h*` of `w = mu_b` with the Laplace covariance (the ridge where `C_b` is small); and a
  *strip* along the diagonal `h_0 = h_1`, where `A(h)` is nearly singular for small `c`:
  Gauss-Hermite along the diagonal, log-normal across it (log-scale Gauss-Hermite) at the
  scale where `A(h)^{-1} u` becomes of the prior's size. Adaptive, cheap, used by the state
  evolution and AMP.
* `GridRule`: the trapezoidal rule on a fixed grid in rotated coordinates, uniform along
  the diagonal and graded across it (`delta = beta sinh(t)`, uniform in `t`), so it resolves
  the strip at every scale. No proposal, nothing adapted to the data; spectrally accurate
  for the smooth integrand while the grid step resolves the ridge. Used for the thresholds.
* `DiagonalRule`, for small skips: Gauss-Hermite along the diagonal times Gauss-Legendre in `log|delta|` across
  it, from below the wall where `A(h)^{-1} u` leaves the prior of `w` to the prior's tail. At `c = 0` the strip of
  the mixture does not converge (its estimates move by O(1) between orders 32, 64 and 128 on some samples); in
  `log|delta|` the wall is smooth and this rule converges with its order. The independent rule of the
  thresholds below `phasejax.depth.se.STRIP_SKIP`.

All three return `Posterior` (mean, second and fourth moments per layer, log evidence); the
tests compare them against each other and against closed forms.

Three layers (`posterior_three`, `ThreeRule`): given `z_1`, the last two layers are the two-layer problem in
`h = P z_2`, `w = P z_3` with `P = A(z_1)`: `u = A(h) w`, `h ~ N(P omega_2, V_2 P P^T)`,
`w ~ N(P omega_3, V_3 P P^T)`, and its evidence is the density of `+-u` given `z_1`. `posterior_three` integrates
`z_1` with Gauss-Hermite around its prior and the inner problem with the mixture rule. `P` is invertible for
`c > 0` (its eigenvalues are at least `c`); the rule needs `c > 0`, and it does not adapt to a posterior of `z_1`
narrower than its prior (layers 2 and 3 learned while layer 1 is not), which limits it to the regimes the
learning order visits (docs/depth.md, section 7).

`posterior_of(rule)` picks the posterior function of a rule's model (two or three layers).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.depth.model import mixing_matrix
from phasejax.theory.quadrature import gauss_hermite

Array = jax.Array

_E_S = np.array([1.0, 1.0]) / np.sqrt(2.0)
"""The diagonal direction `(1, 1) / sqrt(2)`; `_E_D` is the direction across it."""
_E_D = np.array([1.0, -1.0]) / np.sqrt(2.0)


@struct.dataclass
class InnerRule:
    """Gauss-Hermite defensive mixture: `nodes (K, 2)` and `log_weights (K,)` of the tensor rule for `N(0, I_2)`,
    and `strip_width` (static): the log-scale spread of the strip component (0 leaves the strip out)."""

    nodes: Array
    log_weights: Array
    strip_width: float = struct.field(pytree_node=False, default=0.7)


STRIP_WIDTH = 0.7
"""The strip component's spread in `log|delta|` (at `1.0` the rule converged to a 2% bias of `M_2` at `c = 0` and
order 64; at `0.7`, within the Monte Carlo error of a paired comparison with the grid, docs/depth.md, section 3)."""


def inner_rule(order: int = 32, strip: bool = True) -> InnerRule:
    """Tensor Gauss-Hermite rule with `order` nodes per token (`order ** 2` nodes per mixture component)."""
    if isinstance(order, bool) or int(order) != order or order < 2:
        raise ValueError(f"order must be an integer >= 2, got {order!r}")
    q = gauss_hermite(2, int(order))
    return InnerRule(nodes=jnp.asarray(q.points), log_weights=jnp.log(jnp.asarray(q.weights)),
                     strip_width=STRIP_WIDTH if strip else 0.0)


@struct.dataclass
class GridRule:
    """Trapezoidal rule on a graded grid: `s (Ns,)` along the diagonal and `t (Nt,)` across it, in units of the
    prior's standard deviation; `step` (the spacing of both), `box` (half-width covered, in standard deviations)
    and `grading` (`beta`: the spacing across the diagonal is `beta step` at the diagonal) are static."""

    s: Array
    t: Array
    step: float = struct.field(pytree_node=False, default=0.08)
    box: float = struct.field(pytree_node=False, default=8.0)
    grading: float = struct.field(pytree_node=False, default=0.01)

    @property
    def size(self) -> int:
        return int(self.s.shape[0] * self.t.shape[0])


def grid_rule(step: float = 0.08, box: float = 8.0, grading: float = 0.01) -> GridRule:
    """The graded trapezoidal grid (`GridRule`); `t` covers `|delta| <= 2 box` so the grid may be re-centred."""
    for name, v in (("step", step), ("box", box), ("grading", grading)):
        if not np.isfinite(v) or v <= 0:
            raise ValueError(f"{name} must be a positive number, got {v!r}")
    s = np.arange(-box, box + step / 2, step)
    t_max = float(np.arcsinh(2 * box / grading))
    n = int(np.ceil(t_max / step))
    t = step * np.arange(-n, n + 1)
    return GridRule(s=jnp.asarray(s), t=jnp.asarray(t), step=float(step), box=float(box), grading=float(grading))


@struct.dataclass
class DiagonalRule:
    """Product rule in coordinates along and across the diagonal, for small skips (`c < STRIP_SKIP` of
    `phasejax.depth.se`), where `A(h)` is singular on the diagonal: Gauss-Hermite `s_nodes (Ks,)`,
    `s_log_weights (Ks,)` for the prior along it, Gauss-Legendre `t_nodes (Kt,)`, `t_log_weights (Kt,)` on
    `[-1, 1]` in `log|delta|` across it, on both sides. The `log|delta|` interval runs from below the wall where
    `A(h)^{-1} u` leaves the prior of `w` (`_diagonal_interval`) to `box` (static) prior standard deviations."""

    s_nodes: Array
    s_log_weights: Array
    t_nodes: Array
    t_log_weights: Array
    box: float = struct.field(pytree_node=False, default=10.0)

    @property
    def size(self) -> int:
        return 2 * int(self.s_nodes.shape[0]) * int(self.t_nodes.shape[0])


def diagonal_rule(order: int = 64, order_across: int | None = None, box: float = 10.0) -> DiagonalRule:
    """`DiagonalRule` with `order` Gauss-Hermite nodes along the diagonal and `order_across` (default `order`)
    Gauss-Legendre nodes in `log|delta|` on each side of it."""
    for name, v in (("order", order), ("order_across", order if order_across is None else order_across)):
        if isinstance(v, bool) or int(v) != v or v < 2:
            raise ValueError(f"{name} must be an integer >= 2, got {v!r}")
    if not np.isfinite(box) or box <= 0:
        raise ValueError(f"box must be a positive number, got {box!r}")
    x, w = np.polynomial.hermite_e.hermegauss(int(order))
    t, v = np.polynomial.legendre.leggauss(int(order if order_across is None else order_across))
    return DiagonalRule(s_nodes=jnp.asarray(x), s_log_weights=jnp.log(jnp.asarray(w / w.sum())),
                        t_nodes=jnp.asarray(t), t_log_weights=jnp.log(jnp.asarray(v)), box=float(box))


def _diagonal_interval(u, mu_a, sd_d, mu_b, chol_b, box):
    """`[t_lo, t_hi]` in `log|delta|`: at a distance `delta` from the diagonal the smaller eigenvalue of
    `softmax(h h^T)`'s `1 - p - r` is at most `delta^2 / 2`, so `|A(h)^{-1} u| >= 2 |u_d| / delta^2`, which is
    8 prior standard deviations of `w` beyond its mean below `t_lo` (1.5 more of margin); `t_hi` covers `box`
    standard deviations of the prior of `h` across the diagonal."""
    u_d = jnp.abs(jnp.dot(_E_D, u))
    reach = jnp.sqrt(jnp.sum(mu_b**2)) + 8.0 * jnp.sqrt(jnp.trace(chol_b @ chol_b.T))
    t_lo = 0.5 * jnp.log(jnp.maximum(2.0 * u_d / reach, 1e-280)) - 1.5
    t_hi = jnp.log(jnp.abs(jnp.dot(_E_D, mu_a)) + box * sd_d)
    return jnp.minimum(t_lo, t_hi - 1.0), t_hi


def _diagonal(u, mu_a, cov_a, chol_a, mu_b, chol_b, skip, rule: DiagonalRule, readout) -> Posterior:
    mu_s = jnp.dot(_E_S, mu_a)
    sd_s = jnp.sqrt(_E_S @ cov_a @ _E_S)
    sd_d = jnp.sqrt(_E_D @ cov_a @ _E_D)
    t_lo, t_hi = _diagonal_interval(u, mu_a, sd_d, mu_b, chol_b, rule.box)
    half = 0.5 * (t_hi - t_lo)
    t = t_lo + half * (rule.t_nodes + 1.0)
    delta = jnp.exp(t)
    s = mu_s + sd_s * rule.s_nodes
    # measure: ds = sd_s dx / phi(x) against the Gauss-Hermite weights; d delta = delta dt, dt = half dv
    log_s = rule.s_log_weights + 0.5 * rule.s_nodes**2 + 0.5 * jnp.log(2 * jnp.pi) + jnp.log(sd_s)
    log_t = rule.t_log_weights + jnp.log(half) + t
    S, D = jnp.meshgrid(s, delta, indexing="ij")
    LS, LT = jnp.meshgrid(log_s, log_t, indexing="ij")
    S, D, L = S.reshape(-1), D.reshape(-1), (LS + LT).reshape(-1)
    h = jnp.concatenate([S[:, None] * _E_S + D[:, None] * _E_D, S[:, None] * _E_S - D[:, None] * _E_D])
    return _moments(jnp.concatenate([L, L]), h, u, mu_a, chol_a, mu_b, chol_b, skip, readout)


class Posterior(NamedTuple):
    """Posterior moments of the two projections `(z_a, z_b)` (the `readout` of `(h, w)`).

    `mean (2, T)`, `second (2, T, T)` (`E[z z^T]` per layer), `fourth (2,)` (`E|z|^4` per layer), and
    `log_evidence ()`: the log density of `+-u` under the priors.
    """

    mean: Array
    second: Array
    fourth: Array
    log_evidence: Array


def inv2(M: Array) -> Array:
    """Inverse of `2 x 2` matrices `(..., 2, 2)` in closed form (small batched LAPACK calls are slow under `vmap`)."""
    det = M[..., 0, 0] * M[..., 1, 1] - M[..., 0, 1] * M[..., 1, 0]
    adj = jnp.stack([jnp.stack([M[..., 1, 1], -M[..., 0, 1]], -1), jnp.stack([-M[..., 1, 0], M[..., 0, 0]], -1)], -2)
    return adj / det[..., None, None]


def chol2(C: Array) -> Array:
    """Lower Cholesky factor of symmetric positive definite `2 x 2` matrices `(..., 2, 2)` in closed form."""
    l00 = jnp.sqrt(C[..., 0, 0])
    l10 = C[..., 1, 0] / l00
    l11 = jnp.sqrt(jnp.maximum(C[..., 1, 1] - l10**2, 0.0))
    zero = jnp.zeros_like(l00)
    return jnp.stack([jnp.stack([l00, zero], -1), jnp.stack([l10, l11], -1)], -2)


def _gauss_log_chol(x, mean, chol):
    """`log N(x; mean, L L^T)` for `x (..., 2)` and a lower Cholesky factor `chol (2, 2)` (closed form)."""
    d = x - mean
    s0 = d[..., 0] / chol[0, 0]
    s1 = (d[..., 1] - chol[1, 0] * s0) / chol[1, 1]
    return -0.5 * (s0**2 + s1**2) - jnp.log(chol[0, 0]) - jnp.log(chol[1, 1]) - jnp.log(2 * jnp.pi)


def _inverse_images(h, u, skip):
    """`A(h)^{-1} u (K, T)` at nodes `h (K, T)` and `log|det A(h)| (K,)`; `valid (K,)` where `A(h)` is invertible."""
    A = mixing_matrix(h, skip)
    det = A[:, 0, 0] * A[:, 1, 1] - A[:, 0, 1] * A[:, 1, 0]
    valid = jnp.abs(det) > 1e-300
    safe = jnp.where(valid, det, 1.0)
    adj = jnp.stack([jnp.stack([A[:, 1, 1], -A[:, 0, 1]], -1), jnp.stack([-A[:, 1, 0], A[:, 0, 0]], -1)], -2)
    w = jnp.einsum("kij,j->ki", adj, u) / safe[:, None]
    return jnp.where(valid[:, None], w, 0.0), jnp.log(jnp.abs(safe)), valid


def _moments(log_measure, h, u, mu_a, chol_a, mu_b, chol_b, skip, readout) -> Posterior:
    """Moments from nodes `h (K, T)` with `log_measure (K,)` (log of weight / proposal density, or log cell volume)."""
    w, logdet, valid = _inverse_images(h, u, skip)
    w = jnp.stack([w, -w])  # (2 signs of u, K, T)
    logw = log_measure + _gauss_log_chol(h, mu_a, chol_a) + _gauss_log_chol(w, mu_b, chol_b) - logdet
    logw = jnp.where(valid & jnp.isfinite(logw), logw, -jnp.inf)
    log_evidence = jax.scipy.special.logsumexp(logw)
    p = jnp.exp(logw - log_evidence)  # (2, K)
    za = jnp.einsum("ij,kj->ki", readout, h)
    zb = jnp.einsum("ij,skj->ski", readout, w)
    za = jnp.broadcast_to(za, zb.shape)
    Z = jnp.stack([za, zb], -2)  # (2, K, 2 layers, T)
    Z = jnp.where(valid[None, :, None, None], Z, 0.0)
    mean = jnp.einsum("sk,skli->li", p, Z)
    second = jnp.einsum("sk,skli,sklj->lij", p, Z, Z)
    fourth = jnp.einsum("sk,skl->l", p, jnp.sum(Z**2, -1) ** 2)
    return Posterior(mean=mean, second=second, fourth=fourth, log_evidence=log_evidence)


def preimages(w: Array, u: Array, skip) -> tuple[Array, Array, Array]:
    """For `T = 2`: the `h` with `A(h) w = u` (two of them, `+-h`), the Jacobian `J = d(A(h) w)/dh (2, 2)` there,
    and whether they exist.

    `A(h) w = (1 + c) w + (w_1 - w_0) (p, -r)` is linear in the attention weights `p = softmax_01`,
    `r = softmax_10`; `logit p = a (b - a)` and `logit r = b (a - b)` give `(a - b)^2 = -(logit p + logit r)`,
    so a preimage exists iff `0 < p, r` and `p + r < 1`.
    """
    tiny = jnp.finfo(w.dtype).tiny
    diff = w[1] - w[0]
    safe = jnp.where(jnp.abs(diff) > 1e-12, diff, 1e-12)
    p = (u[0] - (1.0 + skip) * w[0]) / safe
    r = ((1.0 + skip) * w[1] - u[1]) / safe
    valid = (p > 1e-12) & (p < 1 - 1e-12) & (r > 1e-12) & (r < 1 - 1e-12) & (p + r < 1 - 1e-12)
    p = jnp.where(valid, p, 0.25)
    r = jnp.where(valid, r, 0.25)
    P = jnp.log(p) - jnp.log1p(-p)
    R = jnp.log(r) - jnp.log1p(-r)
    s = jnp.sqrt(jnp.maximum(-(P + R), tiny))
    a, b = -P / s, R / s
    dp = p * (1 - p) * jnp.stack([b - 2 * a, a])
    dr = r * (1 - r) * jnp.stack([b, a - 2 * b])
    J = safe * jnp.stack([dp, -dr])
    return jnp.stack([a, b]), J, valid


def _strip_scale(u, chol_b):
    """`log` of the distance from the diagonal at which `A(h)^{-1} u` has the prior's size across it."""
    u_d = jnp.dot(_E_D, u)
    s_b = jnp.sqrt(jnp.sum((_E_D @ chol_b) ** 2))
    return 0.5 * jnp.log(2.0 * jnp.abs(u_d) / s_b + 1e-12)


def _mixture(u, mu_a, cov_a, chol_a, mu_b, cov_b, chol_b, skip, rule: InnerRule, readout, ridge: bool) -> Posterior:
    T = u.shape[-1]
    eye = jnp.eye(T, dtype=u.dtype)
    centers, chols, valids = [mu_a], [chol_a], [jnp.asarray(True)]
    if ridge:
        prec_b = inv2(cov_b)
        prec_a = inv2(cov_a)
        for sign in (1.0, -1.0):
            hs, J, valid = preimages(mu_b, sign * u, skip)
            K = inv2(mixing_matrix(hs, skip)) @ J
            cov = inv2(K.T @ prec_b @ K + prec_a + 1e-12 * eye)
            cov = 0.5 * (cov + cov.T)
            for mirror in (1.0, -1.0):
                centers.append(jnp.where(valid, mirror * hs, mu_a))
                chols.append(jnp.where(valid, chol2(cov), chol_a))
                valids.append(valid)
    centers, chols, valids = jnp.stack(centers), jnp.stack(chols), jnp.stack(valids)  # (C, T), (C, T, T), (C,)
    strip = rule.strip_width > 0
    n_comp = centers.shape[0] + (1 if strip else 0)
    log_pi = jnp.where(jnp.concatenate([valids, jnp.ones((n_comp - valids.shape[0],), bool)]), 0.0, -jnp.inf)
    log_pi = log_pi - jax.scipy.special.logsumexp(log_pi)
    nodes = [centers[:, None, :] + jnp.einsum("cij,kj->cki", chols, rule.nodes)]  # (C, K, T)
    node_logw = [log_pi[: centers.shape[0], None] + rule.log_weights[None, :]]
    if strip:
        mu_s = jnp.dot(_E_S, mu_a)
        sd_s = jnp.sqrt(jnp.sum((_E_S @ chol_a) ** 2))
        mu_t = _strip_scale(u, chol_b)
        sd_t = rule.strip_width
        s = mu_s + sd_s * rule.nodes[:, 0]
        delta = jnp.exp(mu_t + sd_t * rule.nodes[:, 1])
        hs = jnp.concatenate([s[:, None] * _E_S + delta[:, None] * _E_D, s[:, None] * _E_S - delta[:, None] * _E_D])
        nodes.append(hs[None])
        node_logw.append(log_pi[-1] + jnp.concatenate([rule.log_weights, rule.log_weights])[None] - jnp.log(2.0))
    h = jnp.concatenate([n.reshape(-1, T) for n in nodes])
    log_node = jnp.concatenate([lw.reshape(-1) for lw in node_logw])
    # log density of the mixture at every node (balance heuristic)
    log_comp = jax.vmap(lambda c, L: _gauss_log_chol(h, c, L))(centers, chols)  # (C, N)
    terms = log_pi[: centers.shape[0], None] + log_comp
    if strip:
        s, delta = h @ _E_S, h @ _E_D
        ad = jnp.maximum(jnp.abs(delta), 1e-300)
        log_strip = (-0.5 * ((s - mu_s) / sd_s) ** 2 - jnp.log(sd_s) - 0.5 * ((jnp.log(ad) - mu_t) / sd_t) ** 2
                     - jnp.log(sd_t) - jnp.log(ad) - jnp.log(2.0 * jnp.pi) - jnp.log(2.0))
        terms = jnp.concatenate([terms, (log_pi[-1] + log_strip)[None]])
    log_q = jax.scipy.special.logsumexp(terms, axis=0)
    return _moments(log_node - log_q, h, u, mu_a, chol_a, mu_b, chol_b, skip, readout)


def _grid(u, mu_a, cov_a, chol_a, mu_b, chol_b, skip, rule: GridRule, readout) -> Posterior:
    h, log_measure = _grid_nodes(mu_a, cov_a, rule)
    return _moments(log_measure, h, u, mu_a, chol_a, mu_b, chol_b, skip, readout)


def gaussian_posterior(u: Array, mu_a: Array, cov_a: Array, mu_b: Array, cov_b: Array, skip, rule,
                       readout: Array | None = None, ridge: bool = True) -> Posterior:
    """Posterior moments of `(readout h, readout w)` given `A(h) w = +-u`, `h ~ N(mu_a, cov_a)`, `w ~ N(mu_b, cov_b)`.

    `u, mu_a, mu_b (T,)`, `cov_a, cov_b (T, T)`, `readout (T, T)` (default identity), `rule` an `InnerRule` or a
    `GridRule`. `ridge=False` leaves out the mixture's ridge components (enough, and cheaper, when `cov_b` is not
    small against `cov_a`); the grid ignores it.
    """
    T = u.shape[-1]
    eye = jnp.eye(T, dtype=u.dtype)
    readout = eye if readout is None else readout
    chol_a = chol2(cov_a)
    chol_b = chol2(cov_b)
    if isinstance(rule, GridRule):
        return _grid(u, mu_a, cov_a, chol_a, mu_b, chol_b, skip, rule, readout)
    if isinstance(rule, InnerRule):
        return _mixture(u, mu_a, cov_a, chol_a, mu_b, cov_b, chol_b, skip, rule, readout, ridge)
    if isinstance(rule, DiagonalRule):
        return _diagonal(u, mu_a, cov_a, chol_a, mu_b, chol_b, skip, rule, readout)
    raise TypeError(f"rule must be an InnerRule, a GridRule or a DiagonalRule, got {type(rule).__name__}")


def posterior(u: Array, omega: Array, V: Array, skip, rule, ridge: bool = True) -> Posterior:
    """Two-layer posterior: moments of `Z (2, T)` given `A(z_1) z_2 = +-u`, `z_l ~ N(omega_l, V_l I)`.

    `u (T,)`, `omega (2, T)`, `V (2,)`; see `gaussian_posterior`.
    """
    T = u.shape[-1]
    eye = jnp.eye(T, dtype=u.dtype)
    return gaussian_posterior(u, omega[0], V[0] * eye, omega[1], V[1] * eye, skip, rule, None, ridge)


def _grid_nodes(mu_a, cov_a, rule: GridRule):
    """The grid's nodes `h (K, T)` and log cell volumes `(K,)` for the prior `N(mu_a, cov_a)` (`_grid`)."""
    mu_s, mu_d = jnp.dot(_E_S, mu_a), jnp.dot(_E_D, mu_a)
    sd_s = jnp.sqrt(_E_S @ cov_a @ _E_S)
    sd_d = jnp.sqrt(_E_D @ cov_a @ _E_D)
    centre = jnp.where(jnp.abs(mu_d) > rule.box * sd_d, mu_d, 0.0)
    s = mu_s + sd_s * rule.s
    delta = centre + rule.grading * sd_d * jnp.sinh(rule.t)
    log_vol = jnp.log(rule.step * sd_s) + jnp.log(rule.grading * sd_d * rule.step * jnp.cosh(rule.t))
    S, D = jnp.meshgrid(s, delta, indexing="ij")
    h = S.reshape(-1, 1) * _E_S + D.reshape(-1, 1) * _E_D
    return h, jnp.broadcast_to(log_vol[None, :], S.shape).reshape(-1)


def shared_grid_posterior(u: Array, omega_b: Array, V_b, mu_a: Array, V_a, skip, rule: GridRule) -> Posterior:
    """`posterior` with a `GridRule` for a batch whose first layer has one prior for every sample.

    `u, omega_b (N, T)`; `h ~ N(mu_a, V_a I)` shared, `w ~ N(omega_b[n], V_b I)`. The grid, `A(h)` and its inverse
    are computed once and every sample's weights and moments are matrix products over the nodes: the same numbers
    as `posterior` sample by sample (tested), many times faster. Returns a `Posterior` with a leading axis `N`.
    """
    T = u.shape[-1]
    eye = jnp.eye(T, dtype=u.dtype)
    h, log_measure = _grid_nodes(mu_a, V_a * eye, rule)
    A = mixing_matrix(h, skip)
    det = A[:, 0, 0] * A[:, 1, 1] - A[:, 0, 1] * A[:, 1, 0]
    valid = jnp.abs(det) > 1e-300
    safe = jnp.where(valid, det, 1.0)
    adj = jnp.stack([jnp.stack([A[:, 1, 1], -A[:, 0, 1]], -1), jnp.stack([-A[:, 1, 0], A[:, 0, 0]], -1)], -2)
    B = jnp.where(valid[:, None, None], adj / safe[:, None, None], 0.0)
    W = jnp.einsum("kab,nb->nka", B, u)  # w at every node for +u: (N, K, T)
    base = (log_measure - 0.5 * jnp.sum((h - mu_a) ** 2, -1) / V_a - 0.5 * T * jnp.log(2 * jnp.pi * V_a)
            - jnp.log(jnp.abs(safe)) - 0.5 * T * jnp.log(2 * jnp.pi * V_b))
    base = jnp.where(valid, base, -jnp.inf)
    quad = jnp.sum(W**2, -1)  # (N, K)
    lin = jnp.einsum("nka,na->nk", W, omega_b)
    common = base[None, :] - 0.5 * (quad + jnp.sum(omega_b**2, -1)[:, None]) / V_b
    logw = jnp.stack([common + lin / V_b, common - lin / V_b])  # (2 signs, N, K)
    log_evidence = jax.scipy.special.logsumexp(logw, axis=(0, 2))
    p = jnp.exp(logw - log_evidence[None, :, None])
    both, odd = p[0] + p[1], p[0] - p[1]  # (N, K)
    mean_a = both @ h
    second_a = jnp.einsum("nk,ka,kb->nab", both, h, h)
    fourth_a = both @ jnp.sum(h**2, -1) ** 2
    mean_b = jnp.einsum("nk,nka->na", odd, W)
    second_b = jnp.einsum("nk,nka,nkb->nab", both, W, W)
    fourth_b = jnp.sum(both * quad**2, -1)
    return Posterior(mean=jnp.stack([mean_a, mean_b], 1), second=jnp.stack([second_a, second_b], 1),
                     fourth=jnp.stack([fourth_a, fourth_b], 1), log_evidence=log_evidence)


@struct.dataclass
class ThreeRule:
    """The three-layer rule: Gauss-Hermite `outer_nodes (K, 2)`, `outer_log_weights (K,)` for `z_1` around its prior,
    and the mixture `inner` (`InnerRule`) for the last two layers given `z_1`."""

    outer_nodes: Array
    outer_log_weights: Array
    inner: InnerRule

    @property
    def size(self) -> int:
        return int(self.outer_nodes.shape[0]) * int(self.inner.nodes.shape[0])


def three_rule(outer_order: int = 8, inner_order: int = 10) -> ThreeRule:
    """`outer_order ** 2` nodes for `z_1` times the mixture of order `inner_order` (no strip: `c > 0`)."""
    if isinstance(outer_order, bool) or int(outer_order) != outer_order or outer_order < 2:
        raise ValueError(f"outer_order must be an integer >= 2, got {outer_order!r}")
    q = gauss_hermite(2, int(outer_order))
    return ThreeRule(outer_nodes=jnp.asarray(q.points), outer_log_weights=jnp.log(jnp.asarray(q.weights)),
                     inner=inner_rule(inner_order, strip=False))


def posterior_three(u: Array, omega: Array, V: Array, skip, rule: ThreeRule, ridge: bool = True) -> Posterior:
    """Moments of `Z (3, T)` given `+-u`, `z_l ~ N(omega_l, V_l I)`: `u (T,)`, `omega (3, T)`, `V (3,)`.

    Returns a `Posterior` whose fields have a leading axis of 3 (layers 1, 2, 3); `ridge` switches the inner
    mixture's ridge components (`phasejax.depth.se.needs_ridge`)."""
    z1 = omega[0] + jnp.sqrt(V[0]) * rule.outer_nodes  # (K, T)

    def inner(z):
        P = mixing_matrix(z, skip)
        PPt = P @ P.T
        return gaussian_posterior(u, P @ omega[1], V[1] * PPt, P @ omega[2], V[2] * PPt, skip, rule.inner,
                                  inv2(P), ridge)

    posts = jax.vmap(inner)(z1)
    logw = rule.outer_log_weights + posts.log_evidence
    logw = jnp.where(jnp.isfinite(logw), logw, -jnp.inf)
    log_evidence = jax.scipy.special.logsumexp(logw)
    p = jnp.exp(logw - log_evidence)
    clean = lambda a: jnp.where(jnp.isfinite(a), a, 0.0)  # noqa: E731 - nodes of zero weight
    mean = jnp.concatenate([(p @ z1)[None], jnp.einsum("k,kli->li", p, clean(posts.mean))])
    second = jnp.concatenate([jnp.einsum("k,ki,kj->ij", p, z1, z1)[None],
                              jnp.einsum("k,klij->lij", p, clean(posts.second))])
    fourth = jnp.concatenate([(p @ jnp.sum(z1**2, -1) ** 2)[None], p @ clean(posts.fourth)])
    return Posterior(mean=mean, second=second, fourth=fourth, log_evidence=log_evidence)


def posterior_of(rule):
    """The posterior function `(u, omega (L, T), V (L,), skip, rule, ridge) -> Posterior` for `rule`'s model: two
    layers for an `InnerRule`, a `GridRule` or a `DiagonalRule`, three for a `ThreeRule`."""
    return posterior_three if isinstance(rule, ThreeRule) else posterior
