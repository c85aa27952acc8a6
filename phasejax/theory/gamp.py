"""GAMP for tied low-rank attention on finite-size data, and its SE trajectory (spec section 7).

`gamp(data, params, Q0, C0, ...)` iterates, per sample `mu`, the proximal step
of spec section 3 with the finite-`d` loss
`ell_mu(h) = 1/(2d) ||y^mu - S(h) xt^mu||^2` (written through the `L x L`
Gram matrices `xt xt^T / d` and `xt y^T / d`), implicit per-sample
Jacobians, Onsager terms and the ridge denoiser. At a fixed point
`h_hat = xt Q / sqrt(d)` and `lambda Q = -grad` of the loss term: GAMP fixed
points are critical points of `R(Q)`. `state_evolution_trajectory` iterates
the SE with the same damping from the same overlaps, for comparison
iteration by iteration.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import struct

from phasejax.empirics.data import TiedAttentionData, overlaps_of
from phasejax.theory.gram import GAMPInputs, gram_inputs, gram_risk, sample_loss_gram  # noqa: F401 (re-exported)
from phasejax.theory.params import TiedAttentionParams
from phasejax.theory.prox import moreau_prox, prox_omega_jacobian
from phasejax.theory.quadrature import Quadrature
from phasejax.theory.state_evolution import (
    CONVERGED,
    MAX_ITERATIONS,
    Overlaps,
    SEConfig,
    _se_map,
)

Array = jax.Array

DIVERGED = 4
"""`GAMPResult.status` when an iterate is non-finite, `C` stops being positive definite, or `Q` explodes."""


def gamp_inputs(data: TiedAttentionData) -> GAMPInputs:
    """Per-sample Gram matrices of a data set (see `phasejax.theory.gram.gram_inputs`)."""
    return gram_inputs(data.x, data.y, data.p)


def empirical_risk(Q: Array, data: TiedAttentionData, params: TiedAttentionParams) -> Array:
    """`R(Q) = sum_mu 1/(2d) ||y^mu - f_Q(x^mu)||^2 + lambda/2 ||Q||^2` (spec section 1), computed directly."""
    xt = data.x + data.p[None]
    h = jnp.einsum("nld,dr->nlr", xt, Q) / jnp.sqrt(data.d)
    S = jax.vmap(lambda hh: params.student(hh, params))(h)
    resid = data.y - jnp.einsum("nij,njd->nid", S, xt)
    return 0.5 * jnp.sum(resid**2) / data.d + 0.5 * params.lam * jnp.sum(Q**2)


@struct.dataclass
class GAMPResult:
    """GAMP output.

    Attributes:
      Q: `(d, r)` final weights; C: `(r, r)` final variance parameter.
      q0: `(T + 1, r, r)`, m: `(T + 1, K, r)`, theta0: `(T + 1, t, r)` overlaps of
        the init and after every iteration (frozen after the stop).
      residual: `(T,)` relative change `||Q_new - Q|| / max(||Q||, 1e-6 sqrt(d))` per iteration (the floor
        keeps the criterion defined when the weights shrink to 0, e.g. at large `lambda`).
      iterations: `()`; status: `()` (`CONVERGED`, `MAX_ITERATIONS`, `DIVERGED`);
      converged: `()` bool; grad_norm: `()` max-abs gradient of `R` at `Q`
        (`jax.grad`), relative to `max |lambda Q|`.
    """

    Q: Array
    C: Array
    q0: Array
    m: Array
    theta0: Array
    residual: Array
    iterations: Array
    status: Array
    converged: Array
    grad_norm: Array


@functools.partial(jax.jit, static_argnames=("max_iter", "prox_starts"))
def gamp(
    data: TiedAttentionData,
    params: TiedAttentionParams,
    Q0: Array,
    C0: Array,
    *,
    max_iter: int = 200,
    damping: float = 0.5,
    tol: float = 1e-8,
    prox_starts: str = "multi",
    max_norm: float = 1e6,
) -> GAMPResult:
    """GAMP of spec section 7 on `data`, from `Q0 (d, r)`, `C0 (r, r)`.

    `damping` is the weight of the old `Q` and `C`. Stops when the relative
    change of `Q` is below `tol` (`CONVERGED`) or an iterate diverges
    (`DIVERGED`: non-finite, `C` not positive definite, or
    `||Q|| / sqrt(d) > max_norm`); the last good iterate is returned.
    """
    inp = gamp_inputs(data)
    n, L, d = inp.xt.shape
    r = Q0.shape[1]
    s2 = params.sigma**2
    sqrt_d = jnp.sqrt(d)
    lam_eye = params.lam * jnp.eye(r, dtype=Q0.dtype)

    def step(Q, C, f_prev, h_prev):
        V = s2[:, None, None] * C[None]                      # (L, r, r)
        V_inv = jnp.linalg.inv(C)[None] / s2[:, None, None]
        w = jnp.einsum("nld,dr->nlr", inp.xt, Q) / sqrt_d - jnp.einsum("lab,nlb->nla", V, f_prev)

        def per_sample(w_mu, G, Y, c, h_warm):
            loss_h = lambda h: sample_loss_gram(h, G, Y, c, params)

            def objective(hf):
                h = hf.reshape(L, r)
                dh = h - w_mu
                return 0.5 * jnp.einsum("la,lab,lb->", dh, V_inv, dh) + loss_h(h)

            zero = jnp.zeros(L * r, Q.dtype)
            if prox_starts == "zero":
                starts = zero[None]
            elif prox_starts == "warm":
                starts = h_warm[None]
            else:
                starts = jnp.stack([zero, w_mu.reshape(-1), h_warm])
            pr = moreau_prox(objective, starts)
            f, dfdw = prox_omega_jacobian(loss_h, pr.h.reshape(L, r), w_mu, V_inv)
            return f, dfdw, pr.h

        f, dfdw, h_hat = jax.vmap(per_sample)(w, inp.G, inp.Y, inp.c, h_prev)
        Ahat = -jnp.einsum("l,nlab->ab", s2, dfdw) / d
        Ahat = 0.5 * (Ahat + Ahat.T)
        B = jnp.einsum("nld,nlr->dr", inp.xt, f) / sqrt_d + Q @ Ahat
        M_inv = jnp.linalg.inv(lam_eye + Ahat)
        return B @ M_inv, 0.5 * (M_inv + M_inv.T), f, h_hat

    def cond(state):
        return (state[4] == -1) & (state[5] < max_iter)

    def body(state):
        Q, C, f_prev, h_prev, status, it, hist = state
        Q_new, C_new, f, h_hat = step(Q, C, f_prev, h_prev)
        Q_next = damping * Q + (1.0 - damping) * Q_new
        C_next = damping * C + (1.0 - damping) * C_new
        residual = jnp.linalg.norm(Q_new - Q) / jnp.maximum(jnp.linalg.norm(Q), 1e-6 * sqrt_d)   # floor: sqrt(q0) = 1e-6
        bad = (~jnp.all(jnp.isfinite(Q_next)) | ~jnp.all(jnp.isfinite(C_next))
               | (jnp.linalg.eigvalsh(C_next)[0] <= 0) | (jnp.linalg.norm(Q_next) / sqrt_d > max_norm))
        status = jnp.where(bad, DIVERGED, jnp.where(residual < tol, CONVERGED, -1))
        # on convergence or divergence keep Q (the last good point, whose residual was measured)
        moving = status == -1
        Q = jnp.where(moving, Q_next, Q)
        C = jnp.where(moving, C_next, C)
        f_prev = jnp.where(moving, f, f_prev)
        h_prev = jnp.where(moving, h_hat, h_prev)
        ov = overlaps_of(Q, data)
        hist = tuple(h.at[it].set(v) for h, v in zip(hist, (ov["q0"], ov["m"], ov["theta0"], residual)))
        return Q, C, f_prev, h_prev, status, it + 1, hist

    f0 = jnp.zeros((n, L, r), Q0.dtype)
    h0 = jnp.einsum("nld,dr->nlr", inp.xt, Q0).reshape(n, L * r) / sqrt_d
    ov0 = overlaps_of(Q0, data)
    hist0 = tuple(jnp.broadcast_to(v, (max_iter,) + v.shape) for v in (ov0["q0"], ov0["m"], ov0["theta0"]))
    hist0 = hist0 + (jnp.full((max_iter,), jnp.nan, Q0.dtype),)
    state0 = (Q0, C0, f0, h0, jnp.asarray(-1), jnp.asarray(0), hist0)
    # a while loop: the time to converge is what it costs (no frozen iterations after the stop)
    Q, C, _, _, status, it, (q0s, ms, ths, res) = jax.lax.while_loop(cond, body, state0)
    after = jnp.arange(max_iter) >= it   # overlaps frozen at the final iterate after the stop
    q0s, ms, ths = (jnp.where(after.reshape((-1,) + (1,) * (h.ndim - 1)), h[jnp.maximum(it - 1, 0)], h)
                    for h in (q0s, ms, ths))
    status = jnp.where(status == -1, MAX_ITERATIONS, status)
    grad = jax.grad(empirical_risk)(Q, data, params)
    scale = jnp.maximum(jnp.max(jnp.abs(params.lam * Q)), 1e-300)
    return GAMPResult(Q=Q, C=C, q0=jnp.concatenate([ov0["q0"][None], q0s]), m=jnp.concatenate([ov0["m"][None], ms]),
                      theta0=jnp.concatenate([ov0["theta0"][None], ths]), residual=res, iterations=it,
                      status=status, converged=status == CONVERGED, grad_norm=jnp.max(jnp.abs(grad)) / scale)


def init_weights(key: Array, data: TiedAttentionData, q0: float, m: float, theta0: float) -> Array:
    """`Q0 (d, 1)` with overlaps close to `(q0, m, theta0)`: `m sqrt(d) u + theta0 Q* + noise` (r = t = K = 1)."""
    noise_var = q0 - m**2 - theta0**2
    if noise_var < 0:
        raise ValueError(f"need q0 >= m^2 + theta0^2, got q0={q0}, m={m}, theta0={theta0}")
    z = jax.random.normal(key, (data.d, 1), jnp.float64)
    return m * jnp.sqrt(data.d) * data.u[:1].T + theta0 * data.Qstar[:, :1] + jnp.sqrt(noise_var) * z


@functools.partial(jax.jit, static_argnames=("n_iter", "config"))
def state_evolution_trajectory(
    params: TiedAttentionParams,
    init: Overlaps,
    quadrature: Quadrature,
    n_iter: int,
    damping: float = 0.5,
    config: SEConfig = SEConfig(),
) -> Overlaps:
    """SE iterated `n_iter` times from `init` with plain damping (no subspace holds, no acceleration).

    Returns `Overlaps` with a leading axis `n_iter + 1` (the init first), to draw
    against `GAMPResult` overlaps. Note GAMP damps `Q` while the SE damps the
    overlaps; with `damping = 0` the two describe the same iteration. GAMP's
    Onsager terms use pointwise per-sample Jacobians, so the SE it follows is
    `SEConfig(hat_form="implicit")` (at d = 1000 its trajectory is within about
    8% of GAMP's, the Stein form's about 12%); the two forms differ only where
    the proximal map jumps between basins (see `SEConfig.hat_form`).
    """
    no = jnp.asarray(False)

    def body(carry, _):
        ov, warm = carry
        new, ev = _se_map(ov, params, quadrature, config, no, no, warm, config.prox_starts)
        nxt = jax.tree_util.tree_map(lambda a, b: damping * a + (1.0 - damping) * b, ov, new)
        return (nxt, ev.h_hat), nxt

    warm0 = jnp.zeros((quadrature.size, params.L * params.r), init.q0.dtype)
    _, traj = jax.lax.scan(body, (init, warm0), None, length=n_iter)
    return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), init, traj)
