"""The two equation blocks of the state evolution and the quantities derived from them (theory notes, sections 3-5).

* Energetic ("hat") updates: at every quadrature node, the proximal problem
  `min_h sum_l 1/2 (h_l - omega_l)^T V_l^{-1} (h_l - omega_l) + ell(h, h*)`
  is solved (`node_values`), and the hats are Gaussian averages of
  `f_l = V_l^{-1} (h_hat_l - omega_l)` (`hats_from_nodes`, Stein form):

      qhat_l = alpha E[f_l f_l^T],   mhat_l = alpha E[f_l],
      thetahat_l = alpha E[f_l eta_l^T] Rn^{-1/2} / sigma_l,
      Vhat_l = -alpha E[f_l xi_l^T] q0^{-1/2} / sigma_l + thetahat_l theta0 q0^{-1}.

* Entropic ("overlap") updates (`overlap_updates`): the model's penalty (`params.penalty`,
  `phasejax.theory.penalties`) maps the effective hats to the overlaps; for the ridge penalty
  `G = lambda I + sum_l sigma_l^2 Vhat_l`, `V0 = G^{-1}`, `m = Mhat G^{-1}`,
  `theta0 = thetahat_eff G^{-1}`, `q0 = G^{-1}(qhat_eff + Mhat^T Mhat + thetahat_eff^T thetahat_eff) G^{-1}`.

* The training loss per dimension `e_t` from the zero-temperature free
  energy (`training_loss`) and the test error `eps_g` (`test_error`).

Every function is pure and vmappable; the prox is differentiable in the
state (implicit function theorem), so `jax.jacfwd` of the whole map is the
Jacobian the solver's Newton steps use.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.theory.fields import (
    FieldMaps,
    Hats,
    Overlaps,
    field_maps,
    gaussian_fields,
    split_node,
    student_field,
    sym_sqrt_pinv,
)
from phasejax.theory import small_linalg
from phasejax.theory.losses import square_error
from phasejax.theory.penalties import effective_hats
from phasejax.theory.params import TiedAttentionParams
from phasejax.theory.prox import (
    LaneSettings,
    all_minima,
    node_lanes,
    closed_form_prox,
    envelope_derivatives,
    lowest_minima_per_start,
    moreau_objective,
    tie_weights,
)
from phasejax.theory.quadrature import Quadrature

Array = jax.Array


@struct.dataclass
class NodeValues:
    """Per-node results of the proximal problems, `N` nodes.

    Attributes:
      f: `(N, L, r)` `V^{-1}(h_hat - omega)`; h: `(N, L r)` the minimisers (warm starts for the next call);
      envelope: `(N,)` the Moreau envelope `M` (loss term included); loss: `(N,)` `ell(h_hat, h*)`;
      grad_norm: `(N,)` prox gradient residual; xi: `(N, L, r)`; eta: `(N, L, t)`;
      df_domega: `(N, L, r, r)` and df_dhstar: `(N, L, r, t)` pointwise implicit derivatives (only with
        `hat_form="implicit"`, else `None`).
      ff: `(N, L, r, r)` the weighted second moment `sum_k w_k f_k f_k^T` over a node's minima (only with a
        `tie_width`, else `None`: then it is `f f^T`).
      h_starts: `(N, S, L r)` where every start ended (`S = 3`: warm, mirror, field; `1` for `prox_starts="zero"`;
        an inactive start's is the start itself); not differentiated.
      start: `(N,)` the index of the start whose minimum is kept (hard selection only, else `None`).
      minima: every start's minimum (`NodeMinima`; hard selection only, else `None`), for what is read off all
        of a node's minima (the replicon).
      encodings: `(N, L, K)` every node's own positional encodings (`Quadrature.encodings`), or `None`.
    """

    f: Array
    h: Array
    envelope: Array
    loss: Array
    grad_norm: Array
    xi: Array
    eta: Array
    df_domega: Array | None = None
    df_dhstar: Array | None = None
    ff: Array | None = None
    h_starts: Array | None = None
    start: Array | None = None
    minima: object = None
    encodings: Array | None = None


STOP_TOL_FACTOR = 1e-5
"""A start of a node's prox stops when its gradient is below `STOP_TOL_FACTOR * prox_tol`: Newton converges
quadratically, so the step that passes `prox_tol` usually lands far below it, and the minimisers (and the map)
are then exact to rounding, whatever the number of steps each start took."""


def node_values(ov: Overlaps, params: TiedAttentionParams, points: Array, warm: Array, alt_mode,
                *, n_steps: int = 8, n_warm_steps: int | None = None, psd_tol: float = 1e-10,
                prox_tol: float = 1e-9, extra_starts: bool = False, prox_starts: str = "multi",
                hat_form: str = "stein", tie_width: float = 0.0, given_starts=None, field_warm=False,
                encodings: Array | None = None) -> NodeValues:
    """Solve the proximal problem at every node `points (N, L (r + t))` (with its own encodings `encodings
    (N, L, K)`, a label mixture; default: the model's `C`).

    Starts: `warm (N, L r)` (the previous minimiser of the node; at most `n_warm_steps` damped Newton steps,
    default `n_steps`) and alternatives (at most `n_steps` steps each): `-warm` when `alt_mode == 0` (the
    mirror basin: the dot-product student is even in `h`), `omega` when `alt_mode == 1`, none when
    `alt_mode == -1` (`alt_mode` may be traced); with `extra_starts` both alternatives. `prox_starts="zero"`
    instead runs one local search from `h = 0` (the published method; it misses the global minimum where the
    mirror basin is lower). The minimisation itself is `node_values_at`'s.

    `tie_width > 0` (an energy) replaces the hard selection by `tie_weights` (see `node_values_at`). It
    always uses both alternative starts (as with `extra_starts`), so that the minima found do not depend on
    `alt_mode`.

    `given_starts`: `None`, or `(use, alternatives (N, 2, L r), active (N, 2))` (`use` may be traced): where
    `use`, the two alternatives are these starts, each run where `active`, instead of the mirror and the field
    (the starts of a pass over another rule's nodes at a fixed point: where the main node's alternatives ended).
    `field_warm` (may be traced): `warm` holds nothing yet; every node's field `omega` is its warm start.
    """
    if prox_starts not in ("multi", "zero"):
        raise ValueError(f"prox_starts must be 'multi' or 'zero', got {prox_starts!r}")
    L, r = params.L, params.r
    N = points.shape[0]
    n_warm = n_steps if n_warm_steps is None else n_warm_steps
    if prox_starts == "zero":
        return node_values_at(ov, params, points, jnp.zeros((N, 1, L * r), warm.dtype), jnp.ones((1,), bool),
                              n_steps=(n_steps + n_warm,), psd_tol=psd_tol, prox_tol=prox_tol, hat_form=hat_form,
                              tie_width=tie_width, encodings=encodings)
    extra_starts = extra_starts or tie_width > 0       # a blend needs the same minima found at every call
    w = node_omegas(ov, params, points, encodings, psd_tol).reshape(N, L * r)
    warm = jnp.where(field_warm, w, warm)
    mode = jnp.asarray(alt_mode)
    active = jnp.stack([jnp.asarray(True), (mode == 0) | extra_starts, (mode == 1) | extra_starts])
    starts = jnp.stack([warm, -warm, w], axis=1)
    if given_starts is not None:
        use, alternatives, alt_active = given_starts
        starts = jnp.where(use, jnp.concatenate([warm[:, None], alternatives], axis=1), starts)
        active = jnp.where(use, jnp.concatenate([jnp.ones((N, 1), bool), alt_active], axis=1),
                           jnp.broadcast_to(active, (N, 3)))
    return node_values_at(ov, params, points, starts, active,
                          n_steps=(n_warm, n_steps, n_steps), psd_tol=psd_tol, prox_tol=prox_tol, hat_form=hat_form,
                          tie_width=tie_width, encodings=encodings)


class NodeFields(NamedTuple):
    """The fields of every node: `xi (N, L, r)`, `eta (N, L, t)`, `omega (N, L, r)`, `hstar (N, L, t)`, the target
    `T (N, L, L)`, and the prox's quadratic weights `V_inv (L, r, r)` (`V_l^{-1}`)."""

    xi: Array
    eta: Array
    omega: Array
    hstar: Array
    T: Array
    V_inv: Array


def node_omegas(ov: Overlaps, params: TiedAttentionParams, points: Array, encodings: Array | None = None,
                psd_tol: float = 1e-10) -> Array:
    """The student's fields `omega (N, L, r)` at every node `points (N, L (r + t))` (`student_field`)."""
    maps = field_maps(ov, params, psd_tol)
    xi = jax.vmap(lambda z: split_node(z, params)[0])(points)
    if encodings is None:
        return jax.vmap(lambda a: student_field(maps, params, a))(xi)
    return jax.vmap(lambda a, e: student_field(maps, params, a, e))(xi, encodings)


def node_fields(ov: Overlaps, params: TiedAttentionParams, points: Array, psd_tol: float = 1e-10,
                encodings: Array | None = None) -> NodeFields:
    """The Gaussian fields, targets and prox weights at every node `points (N, L (r + t))` (with its own encodings
    `encodings (N, L, K)`, or the model's `C`)."""
    maps = field_maps(ov, params, psd_tol)
    V0_inv = small_linalg.inv(0.5 * (ov.V0 + ov.V0.T))
    V_inv = V0_inv[None] / (params.sigma**2)[:, None, None]
    xi, eta = jax.vmap(lambda z: split_node(z, params))(points)
    if encodings is None:
        omega, hstar = jax.vmap(lambda a, b: gaussian_fields(maps, params, a, b))(xi, eta)
    else:
        omega, hstar = jax.vmap(lambda a, b, e: gaussian_fields(maps, params, a, b, e))(xi, eta, encodings)
    T = jax.vmap(lambda hs: params.target(hs, params))(hstar)
    return NodeFields(xi=xi, eta=eta, omega=omega, hstar=hstar, T=T, V_inv=V_inv)


def lane_settings(n_steps, n_starts: int, prox_tol: float, **kw) -> LaneSettings:
    """`LaneSettings` for `n_starts` starts of at most `n_steps` steps each (an int or one per start), stopping at
    `STOP_TOL_FACTOR * prox_tol`."""
    caps = tuple(int(k) for k in np.broadcast_to(np.asarray(n_steps), (n_starts,)))
    return LaneSettings(max_steps=caps, stop_tol=STOP_TOL_FACTOR * prox_tol, **kw)


class NodeMinima(NamedTuple):
    """Every start's minimum at every node (not differentiated): `hs (N, S, L r)`, `values (N, S)` (`inf` where not
    finite or the start was not active), `grad_norms (N, S)`, and the nodes' `fields` (`NodeFields`)."""

    hs: Array
    values: Array
    grad_norms: Array
    fields: NodeFields


def node_minima(ov: Overlaps, params: TiedAttentionParams, points: Array, starts: Array, active: Array, *,
                n_steps=8, psd_tol: float = 1e-10, prox_tol: float = 1e-9, encodings: Array | None = None,
                **lanes) -> NodeMinima:
    """Minimise every node's proximal problem from each of its starts `starts (N, S, L r)` where `active`
    (`(N, S)` or broadcastable), at most `n_steps` steps each, every start kept (`NodeMinima`). The computation
    of `node_values_at` without its selection and derivatives: for what is read off the minima at a fixed
    state (error replicas, the replicon). `lanes`: more `LaneSettings` (e.g. `mu0`)."""
    fields = node_fields(ov, params, points, psd_tol, encodings)
    objective, derivatives = closed_form_prox(params)
    settings = lane_settings(n_steps, starts.shape[1], prox_tol, **lanes)
    st = node_lanes(objective, derivatives, settings, (fields.omega, fields.T), (fields.V_inv, params),
                    jax.lax.stop_gradient(starts), active)
    values = jnp.where(jnp.broadcast_to(active, st.f.shape), st.f, jnp.inf)
    return NodeMinima(hs=st.h, values=values, grad_norms=jnp.max(jnp.abs(st.g), axis=-1), fields=fields)


def node_values_at(ov: Overlaps, params: TiedAttentionParams, points: Array, starts: Array, active: Array, *,
                   n_steps=8, psd_tol: float = 1e-10, prox_tol: float = 1e-9, hat_form: str = "stein",
                   tie_width: float = 0.0, encodings: Array | None = None) -> NodeValues:
    """Solve the proximal problem at every node `points (N, L (r + t))` from the starts `starts (N, S, L r)`
    where `active` (`(N, S)` or broadcastable, may be traced; the first start must be active), each start
    taking at most `n_steps` damped Newton steps (an int or one per start).

    Each start stops as soon as its gradient is below `STOP_TOL_FACTOR * prox_tol`
    (`phasejax.theory.prox.minimize_lanes`: a start costs the steps it needs), and the lowest objective is kept
    (`lowest_minima`, differentiable in the state; closed forms where `closed_form_prox` applies).
    `hat_form="implicit"` adds the pointwise implicit derivatives of `f` (for the implicit-form hats).

    `tie_width > 0` (an energy) replaces the hard selection by `tie_weights`:
    `f`, `f f^T` (`ff`), the envelope and the loss are averages over the
    node's distinct minima with weights `softmax(-M_k / tie_width)`, so a node
    whose two basins are within a few `tie_width` of each other contributes a
    mixture instead of jumping from one to the other (theory notes, section
    8.5; Stein form only). `h` stays the lowest start's minimiser (the next
    warm start). A start that has not converged (gradient above `prox_tol`)
    and is not the lowest gets no weight: after a few Newton steps it may be
    anywhere on its way to a minimum that another start has already reached.
    """
    L, r = params.L, params.r
    if hat_form not in ("stein", "implicit"):
        raise ValueError(f"hat_form must be 'stein' or 'implicit', got {hat_form!r}")
    check_tie_width(tie_width, hat_form)
    objective, derivatives = closed_form_prox(params)
    fd = node_fields(ov, params, points, psd_tol, encodings)
    xi, eta, omega, hstar, T, V_inv = fd
    N = points.shape[0]
    settings = lane_settings(n_steps, starts.shape[1], prox_tol)
    starts = jax.lax.stop_gradient(starts)
    node_thetas, shared = (omega, T), (V_inv, params)

    if tie_width > 0:
        hs, values, gnorms = all_minima(objective, derivatives, settings, node_thetas, shared, starts, active)

        def blend(hs, values, gnorms, omega, T):
            # a start still on its way (not converged) is left out unless it is the lowest: after a few Newton
            # steps it may sit anywhere on the way to a minimum another start has reached
            counted = (gnorms <= prox_tol) | (jnp.arange(values.shape[0]) == jnp.argmin(values))
            wts = tie_weights(jnp.where(counted, values, jnp.inf), tie_width, hs)
            hks = hs.reshape(-1, L, r)
            fk = jnp.einsum("lab,klb->kla", V_inv, hks - omega[None])
            f = jnp.einsum("k,kla->la", wts, fk)
            ff = jnp.einsum("k,kla,klb->lab", wts, fk, fk)
            envelope = wts @ jnp.where(wts > 0, values, 0.0)
            loss = wts @ jax.vmap(lambda hk: params.loss(hk, T, params))(hks)
            gnorm = jnp.max(jnp.where(wts > 0, gnorms, 0.0))
            return f, hs[jnp.argmin(values)], envelope, loss, gnorm, ff

        f, h, envelope, loss, gnorm, ff = jax.vmap(blend)(hs, values, gnorms, omega, T)
        return NodeValues(f=f, h=h, envelope=envelope, loss=loss, grad_norm=gnorm, xi=xi, eta=eta, ff=ff,
                          h_starts=jax.lax.stop_gradient(hs), encodings=encodings)

    h, gnorm, start, h_starts, values, gnorms = lowest_minima_per_start(objective, derivatives, settings, node_thetas,
                                                                        shared, starts, active)
    hm = h.reshape(N, L, r)
    f = jnp.einsum("lab,nlb->nla", V_inv, hm - omega)
    envelope = jax.vmap(lambda hh, om, t: moreau_objective(hh, (om, t, V_inv, params)))(h, omega, T)
    loss = jax.vmap(lambda hh, t: params.loss(hh, t, params))(hm, T)
    dfdw = dfdh = None
    if hat_form == "implicit":
        der = jax.vmap(lambda hh, om, hs: envelope_derivatives(
            lambda a, b: params.loss(a, params.target(b, params), params), hh, om, V_inv, hs))(hm, omega, hstar)
        dfdw, dfdh = der.df_domega, der.df_dhstar
    return NodeValues(f=f, h=h, envelope=envelope, loss=loss, grad_norm=gnorm, xi=xi, eta=eta, df_domega=dfdw,
                      df_dhstar=dfdh, h_starts=h_starts, start=start,
                      minima=NodeMinima(hs=h_starts, values=values, grad_norms=gnorms, fields=fd), encodings=encodings)


def check_tie_width(tie_width, hat_form: str) -> None:
    """Raise `ValueError` unless `tie_width` is a finite number `>= 0`, and `0` unless `hat_form == "stein"`."""
    if not (isinstance(tie_width, (int, float)) and np.isfinite(tie_width) and tie_width >= 0):
        raise ValueError(f"tie_width must be a finite number >= 0, got {tie_width!r}")
    if tie_width > 0 and hat_form != "stein":
        raise ValueError("tie_width > 0 needs hat_form='stein' (the implicit form has no smoothed derivatives)")


def hats_from_nodes(ov: Overlaps, params: TiedAttentionParams, nodes: NodeValues, weights: Array,
                    maps: FieldMaps | None = None, hat_form: str = "stein") -> Hats:
    """Hats from node values and `weights (N,)` summing to 1: Stein form (module docstring), or with
    `hat_form="implicit"` `Vhat_l = -alpha E[d f_l / d omega_l]`, `thetahat_l = alpha E[d f_l / d h*_l]` from the
    pointwise implicit derivatives (these miss the delta terms where the prox's minimiser jumps)."""
    maps = field_maps(ov, params) if maps is None else maps
    a = params.alpha
    f = nodes.f
    E = lambda v: jnp.tensordot(weights, v, axes=1)  # noqa: E731
    qhat = a * E(jnp.einsum("nla,nlb->nlab", f, f) if nodes.ff is None else nodes.ff)
    mhat = a * E(f)
    s = params.sigma[:, None, None]
    f_eta = E(jnp.einsum("nla,nlb->nlab", f, nodes.eta))  # (L, r, t)
    f_xi = E(jnp.einsum("nla,nlb->nlab", f, nodes.xi))    # (L, r, r)
    if hat_form == "implicit":
        thetahat = a * E(nodes.df_dhstar)
        Vhat = -a * E(nodes.df_domega)
    else:
        thetahat = a * (f_eta @ maps.pinv_sqrt_Rn) / s
        pinv_q0 = maps.pinv_sqrt_q0 @ maps.pinv_sqrt_q0
        Vhat = -a * (f_xi @ maps.pinv_sqrt_q0) / s + thetahat @ ov.theta0 @ pinv_q0
    Vhat = 0.5 * (Vhat + jnp.swapaxes(Vhat, -1, -2))
    # nodes with their own encodings: `Mhat = alpha E[C_node^T f]` (not `C^T mhat`)
    Mhat = None if nodes.encodings is None else a * E(jnp.einsum("nlk,nla->nka", nodes.encodings, f))
    return Hats(qhat=qhat, mhat=mhat, Vhat=Vhat, thetahat=thetahat, Mhat=Mhat)


def hold_hats(hats: Hats, hold_m: Array, hold_theta: Array) -> Hats:
    """Zero `mhat` (and `Mhat`) / `thetahat` where a branch holds `m` / `theta0` at zero (its invariant subspace)."""
    return hats.replace(mhat=jnp.where(hold_m, 0.0, hats.mhat), thetahat=jnp.where(hold_theta, 0.0, hats.thetahat),
                        Mhat=None if hats.Mhat is None else jnp.where(hold_m, 0.0, hats.Mhat))


def overlap_updates(hats: Hats, params: TiedAttentionParams) -> Overlaps:
    """The entropic update: the model's penalty (`params.penalty.overlaps`) on the effective hats."""
    return params.penalty.overlaps(effective_hats(hats, params), params)


def training_loss(ov: Overlaps, hats: Hats, expected_envelope: Array, params: TiedAttentionParams) -> Array:
    """Training loss per dimension `e_t` from the zero-temperature free energy (theory notes, section 5).

    `expected_envelope` is `E[M(omega, h*)]` at the same overlaps. With the effective hats (`effective_hats`)
    `e_t = -(tr(Vhat q0) / 2 - tr(qhat V0) / 2 - tr(thetahat^T theta0) - tr(Mhat^T m) + Psi - alpha E[M])`, `Psi`
    the penalty's free entropy (`Penalty.free_entropy`). At a fixed point this equals
    `alpha E[ell(h_hat, h*)] + penalty` (the energetic loss).
    """
    eff = effective_hats(hats, params)
    exchange = (0.5 * jnp.einsum("ab,ba->", eff.Vhat, ov.q0) - 0.5 * jnp.einsum("ab,ba->", eff.qhat, ov.V0)
                - jnp.einsum("ta,ta->", eff.thetahat, ov.theta0) - jnp.einsum("ka,ka->", eff.Mhat, ov.m))
    return -(exchange + params.penalty.free_entropy(eff, params) - params.alpha * expected_envelope)


def test_error(ov: Overlaps, params: TiedAttentionParams, quadrature: Quadrature, rho0: Array | None = None) -> Array:
    """`eps_g = 1/L E tr[(T(h*) - S(h)) D (T(h*) - S(h))^T]` with fresh fields `h_l = omega_l` (theory notes, section 5):
    the square error (`phasejax.theory.losses.square_error`) whatever the training loss.

    `rho0 (t, t)` is the teacher's `Q*^T Q* / d` (default `I_t`, its `d -> inf`
    value). For a finite-`d` teacher the field is written `h* = rho0^{1/2} h*'`
    with `h*'` of unit covariance, so the field maps apply to `rho0^{-1/2} theta0`. A rule whose nodes carry
    their own encodings (`Quadrature.encodings`) averages over them.
    """
    sqrt_rho = None
    if rho0 is not None:
        sqrt_rho, pinv_sqrt_rho, _ = sym_sqrt_pinv(rho0)
        ov = ov.replace(theta0=pinv_sqrt_rho @ ov.theta0)
    maps = field_maps(ov, params)

    def node(z, encoding):
        xi, eta = split_node(z, params)
        h, hstar = gaussian_fields(maps, params, xi, eta, encoding)
        if sqrt_rho is not None:
            hstar = hstar @ sqrt_rho
        return square_error(h, params.target(hstar, params), params)

    if quadrature.encodings is None:
        values = jax.vmap(lambda z: node(z, None))(quadrature.points)
    else:
        values = jax.vmap(node)(quadrature.points, quadrature.encodings)
    return quadrature.expect(values) / params.L


test_error.__test__ = False  # not a pytest test
