"""The two equation blocks of the state evolution and the quantities derived from them (theory notes, sections 3-5).

* Energetic ("hat") updates: at every quadrature node, the proximal problem
  `min_h sum_l 1/2 (h_l - omega_l)^T V_l^{-1} (h_l - omega_l) + ell(h, h*)`
  is solved (`node_values`), and the hats are Gaussian averages of
  `f_l = V_l^{-1} (h_hat_l - omega_l)` (`hats_from_nodes`, Stein form):

      qhat_l = alpha E[f_l f_l^T],   mhat_l = alpha E[f_l],
      thetahat_l = alpha E[f_l eta_l^T] Rn^{-1/2} / sigma_l,
      Vhat_l = -alpha E[f_l xi_l^T] q0^{-1/2} / sigma_l + thetahat_l theta0 q0^{-1}.

* Entropic ("overlap") updates for the ridge penalty (`overlap_updates`):
  `G = lambda I + sum_l sigma_l^2 Vhat_l`, `V0 = G^{-1}`, `m = Mhat G^{-1}`,
  `theta0 = thetahat_eff G^{-1}`, `q0 = G^{-1}(qhat_eff + Mhat^T Mhat + thetahat_eff^T thetahat_eff) G^{-1}`.

* The training loss per dimension `e_t` from the zero-temperature free
  energy (`training_loss`) and the test error `eps_g` (`test_error`).

Every function is pure and vmappable; the prox is differentiable in the
state (implicit function theorem), so `jax.jacfwd` of the whole map is the
Jacobian the solver's Newton steps use.
"""

from __future__ import annotations

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
    sample_loss,
    split_node,
    sym_sqrt_pinv,
)
from phasejax.theory.params import TiedAttentionParams
from phasejax.theory.prox import envelope_derivatives, moreau_minimiser, moreau_minimisers, tie_weights
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


def moreau_objective(h_flat: Array, theta) -> Array:
    """`sum_l 1/2 (h_l - omega_l)^T V_l^{-1} (h_l - omega_l) + ell(h, T)`; `theta = (omega (L, r), T (L, L), V_inv (L, r, r), params)`."""
    omega, T, V_inv, params = theta
    h = h_flat.reshape(omega.shape)
    dh = h - omega
    return 0.5 * jnp.einsum("la,lab,lb->", dh, V_inv, dh) + sample_loss(h, T, params)


def pair_dot_product_derivatives(h_flat: Array, theta) -> tuple[Array, Array, Array]:
    """Closed-form value, gradient `(2,)` and Hessian `(2, 2)` of `moreau_objective` for `L = 2`, `r = 1`
    and the dot-product student `S(h) = softmax(h h^T)`.

    With `h = (a, b)`, `S_11 = sigmoid(z_1)`, `z_1 = a (a - b)`, `S_22 = sigmoid(z_2)`,
    `z_2 = b (b - a)` and rows summing to one, the loss is
    `ell = 1/2 Sigma [(S_11 - c_1)^2 + (S_22 - c_2)^2] + const` with `Sigma = sigma_1^2 + sigma_2^2`,
    `c_1 = (T_11 sigma_1^2 + (1 - T_12) sigma_2^2) / Sigma`, `c_2 = ((1 - T_21) sigma_1^2 + T_22 sigma_2^2) / Sigma`;
    the chain rule through `z_1, z_2` gives the gradient and Hessian. The value is computed directly.
    """
    omega, T, V_inv, params = theta
    s2 = params.sigma**2
    Sig = s2[0] + s2[1]
    a, b = h_flat[0], h_flat[1]
    z = jnp.stack([a * (a - b), b * (b - a)])
    u = jax.nn.sigmoid(z)
    du = u * (1.0 - u)
    d2u = du * (1.0 - 2.0 * u)
    c = jnp.stack([T[0, 0] * s2[0] + (1.0 - T[0, 1]) * s2[1], (1.0 - T[1, 0]) * s2[0] + T[1, 1] * s2[1]]) / Sig
    dpsi = Sig * (u - c) * du
    d2psi = Sig * (du**2 + (u - c) * d2u)
    gz = jnp.array([[2.0 * a - b, -a], [-b, 2.0 * b - a]])           # row i: grad of z_i
    hz = jnp.array([[[2.0, -1.0], [-1.0, 0.0]], [[0.0, -1.0], [-1.0, 2.0]]])
    v_inv = V_inv[:, 0, 0]
    dh = h_flat - omega[:, 0]
    grad = dpsi @ gz + v_inv * dh
    hess = (jnp.einsum("i,ij,ik->jk", d2psi, gz, gz) + jnp.einsum("i,ijk->jk", dpsi, hz) + jnp.diag(v_inv))
    S = jnp.array([[u[0], 1.0 - u[0]], [1.0 - u[1], u[1]]])
    value = 0.5 * jnp.sum(v_inv * dh**2) + 0.5 * jnp.sum((T - S) ** 2 * s2[None, :])
    return value, grad, hess


def pair_dot_product_objective(h_flat: Array, theta) -> Array:
    """`moreau_objective` in closed form for `L = 2`, `r = 1` and the dot-product student (see
    `pair_dot_product_derivatives`); equal to the generic one, cheaper."""
    omega, T, V_inv, params = theta
    s2 = params.sigma**2
    a, b = h_flat[0], h_flat[1]
    u = jax.nn.sigmoid(jnp.stack([a * (a - b), b * (b - a)]))
    dh = h_flat - omega[:, 0]
    S = jnp.array([[u[0], 1.0 - u[0]], [1.0 - u[1], u[1]]])
    return 0.5 * jnp.sum(V_inv[:, 0, 0] * dh**2) + 0.5 * jnp.sum((T - S) ** 2 * s2[None, :])


def closed_form_prox(params: TiedAttentionParams):
    """`(objective, derivatives)` in closed form when they apply to `params` (`L = 2`, `r = 1`,
    dot-product student), else `(moreau_objective, None)` (autodiff)."""
    from phasejax.theory.params import dot_product_student

    if params.L == 2 and params.r == 1 and params.student is dot_product_student:
        return pair_dot_product_objective, pair_dot_product_derivatives
    return moreau_objective, None


def node_values(ov: Overlaps, params: TiedAttentionParams, points: Array, warm: Array, alt_mode,
                *, n_steps: int = 8, n_warm_steps: int | None = None, psd_tol: float = 1e-10,
                prox_tol: float = 1e-9, extra_starts: bool = False, prox_starts: str = "multi",
                hat_form: str = "stein", tie_width: float = 0.0) -> NodeValues:
    """Solve the proximal problem at every node `points (N, L (r + t))`.

    Starts: `warm (N, L r)` (the previous minimiser of the node; `n_warm_steps`
    damped Newton steps, default `n_steps`) and an alternative (`n_steps`
    steps): `-warm` when `alt_mode == 0` (the mirror basin: the dot-product
    student is even in `h`) or `omega` when `alt_mode == 1`; with
    `extra_starts` both alternatives. The lowest objective is kept
    (`moreau_minimiser`, differentiable in the state; closed forms where
    `closed_form_prox` applies). `prox_starts="zero"` instead runs one local
    search from `h = 0` (the published method; it misses the global minimum
    where the mirror basin is lower). `hat_form="implicit"` adds the
    pointwise implicit derivatives of `f` (for the implicit-form hats).

    `tie_width > 0` (an energy) replaces the hard selection by `tie_weights`:
    `f`, `f f^T` (`ff`), the envelope and the loss are averages over the
    node's distinct minima with weights `softmax(-M_k / tie_width)`, so a node
    whose two basins are within a few `tie_width` of each other contributes a
    mixture instead of jumping from one to the other (theory notes, section
    8.5; Stein form only). It always uses both alternative starts (as with
    `extra_starts`), so that the minima found do not depend on `alt_mode`. `h`
    stays the lowest start's minimiser (the next warm start). A start that
    has not converged (gradient above `prox_tol`) and is not the lowest gets
    no weight: after a few Newton steps it may be anywhere on its way to a
    minimum that another start has already reached.
    """
    L, r = params.L, params.r
    maps = field_maps(ov, params, psd_tol)
    V0_inv = jnp.linalg.inv(0.5 * (ov.V0 + ov.V0.T))
    V_inv = V0_inv[None] / (params.sigma**2)[:, None, None]
    if prox_starts not in ("multi", "zero"):
        raise ValueError(f"prox_starts must be 'multi' or 'zero', got {prox_starts!r}")
    if hat_form not in ("stein", "implicit"):
        raise ValueError(f"hat_form must be 'stein' or 'implicit', got {hat_form!r}")
    check_tie_width(tie_width, hat_form)
    objective, derivatives = closed_form_prox(params)
    n_warm = n_steps if n_warm_steps is None else n_warm_steps
    extra_starts = extra_starts or tie_width > 0       # a blend needs the same minima found at every call

    def node(z, h_warm):
        xi, eta = split_node(z, params)
        omega, hstar = gaussian_fields(maps, params, xi, eta)
        T = params.target(hstar, params)
        theta = (omega, T, V_inv, params)
        w = omega.reshape(-1)
        if prox_starts == "zero":
            starts, steps = (jnp.zeros((1, L * r), w.dtype),), (n_steps + n_warm,)
        elif extra_starts:
            starts, steps = (h_warm[None], jnp.stack([-h_warm, w])), (n_warm, n_steps)
        else:
            starts, steps = (h_warm[None], jnp.where(alt_mode == 0, -h_warm, w)[None]), (n_warm, n_steps)
        if tie_width > 0:
            hs, values, gnorms = moreau_minimisers(objective, theta, starts, n_steps=steps, tol=prox_tol,
                                                   derivatives=derivatives)
            # a start still on its way (not converged) is left out unless it is the lowest: after a few Newton
            # steps it may sit anywhere on the way to a minimum another start has reached
            counted = (gnorms <= prox_tol) | (jnp.arange(values.shape[0]) == jnp.argmin(values))
            w = tie_weights(jnp.where(counted, values, jnp.inf), tie_width, hs)
            hks = hs.reshape(-1, L, r)
            fk = jnp.einsum("lab,klb->kla", V_inv, hks - omega[None])
            f = jnp.einsum("k,kla->la", w, fk)
            ff = jnp.einsum("k,kla,klb->lab", w, fk, fk)
            envelope = w @ jnp.where(w > 0, values, 0.0)
            loss = w @ jax.vmap(lambda hk: sample_loss(hk, T, params))(hks)
            gnorm = jnp.max(jnp.where(w > 0, gnorms, 0.0))
            h = hs[jnp.argmin(values)]
            return NodeValues(f=f, h=h, envelope=envelope, loss=loss, grad_norm=gnorm, xi=xi, eta=eta, ff=ff)
        h, gnorm, _ = moreau_minimiser(objective, theta, starts, n_steps=steps, tol=prox_tol,
                                       derivatives=derivatives)
        hm = h.reshape(L, r)
        f = jnp.einsum("lab,lb->la", V_inv, hm - omega)
        dfdw = dfdh = None
        if hat_form == "implicit":
            der = envelope_derivatives(lambda hh, hs: sample_loss(hh, params.target(hs, params), params),
                                       hm, omega, V_inv, hstar)
            dfdw, dfdh = der.df_domega, der.df_dhstar
        return NodeValues(f=f, h=h, envelope=moreau_objective(h, theta), loss=sample_loss(hm, T, params),
                          grad_norm=gnorm, xi=xi, eta=eta, df_domega=dfdw, df_dhstar=dfdh)

    return jax.vmap(node)(points, warm)


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
    return Hats(qhat=qhat, mhat=mhat, Vhat=Vhat, thetahat=thetahat)


def effective_hats(hats: Hats, params: TiedAttentionParams) -> tuple[Array, Array, Array, Array]:
    """`G (r, r)`, `qhat_eff (r, r)`, `thetahat_eff (t, r)`, `Mhat (K, r)` of the entropic updates."""
    s2 = params.sigma**2
    r = params.r
    G = params.lam * jnp.eye(r, dtype=hats.Vhat.dtype) + jnp.einsum("l,lab->ab", s2, hats.Vhat)
    qhat_eff = jnp.einsum("l,lab->ab", s2, hats.qhat)
    thetahat_eff = jnp.einsum("l,lat->ta", s2, hats.thetahat)
    Mhat = params.C.T @ hats.mhat
    return G, qhat_eff, thetahat_eff, Mhat


def hold_hats(hats: Hats, hold_m: Array, hold_theta: Array) -> Hats:
    """Zero `mhat` / `thetahat` where a branch holds `m` / `theta0` at zero (its invariant subspace)."""
    return hats.replace(mhat=jnp.where(hold_m, 0.0, hats.mhat), thetahat=jnp.where(hold_theta, 0.0, hats.thetahat))


def overlap_updates(hats: Hats, params: TiedAttentionParams) -> Overlaps:
    """Entropic updates for the ridge penalty (module docstring); closed form."""
    G, qhat_eff, thetahat_eff, Mhat = effective_hats(hats, params)
    G_inv = jnp.linalg.inv(G)
    G_inv = 0.5 * (G_inv + G_inv.T)
    inner = qhat_eff + Mhat.T @ Mhat + thetahat_eff.T @ thetahat_eff
    q0 = G_inv @ inner @ G_inv
    return Overlaps(q0=0.5 * (q0 + q0.T), m=Mhat @ G_inv, V0=G_inv, theta0=thetahat_eff @ G_inv)


def training_loss(ov: Overlaps, hats: Hats, expected_envelope: Array, params: TiedAttentionParams) -> Array:
    """Training loss per dimension `e_t` from the zero-temperature free energy (theory notes, section 5).

    `expected_envelope` is `E[M(omega, h*)]` at the same overlaps. At a
    fixed point this equals `alpha E[ell(h_hat, h*)] + lambda/2 tr q0`.
    """
    s2 = params.sigma**2
    G, qhat_eff, thetahat_eff, Mhat = effective_hats(hats, params)
    q_l = s2[:, None, None] * ov.q0[None]
    V_l = s2[:, None, None] * ov.V0[None]
    theta_l = s2[:, None, None] * ov.theta0[None]
    m_l = params.C @ ov.m
    per_token = (0.5 * jnp.einsum("lab,lba->", hats.Vhat, q_l)
                 - 0.5 * jnp.einsum("lab,lba->", hats.qhat, V_l)
                 - jnp.einsum("lat,lta->", hats.thetahat, theta_l)
                 - jnp.einsum("la,la->", hats.mhat, m_l))
    inner = qhat_eff + Mhat.T @ Mhat + thetahat_eff.T @ thetahat_eff
    entropic = 0.5 * jnp.trace(jnp.linalg.solve(G, inner))
    return -(per_token + entropic - params.alpha * expected_envelope)


def test_error(ov: Overlaps, params: TiedAttentionParams, quadrature: Quadrature, rho0: Array | None = None) -> Array:
    """`eps_g = 1/L E tr[(T(h*) - S(h)) D (T(h*) - S(h))^T]` with fresh fields `h_l = omega_l` (theory notes, section 5).

    `rho0 (t, t)` is the teacher's `Q*^T Q* / d` (default `I_t`, its `d -> inf`
    value). For a finite-`d` teacher the field is written `h* = rho0^{1/2} h*'`
    with `h*'` of unit covariance, so the field maps apply to `rho0^{-1/2} theta0`.
    """
    sqrt_rho = None
    if rho0 is not None:
        sqrt_rho, pinv_sqrt_rho, _ = sym_sqrt_pinv(rho0)
        ov = ov.replace(theta0=pinv_sqrt_rho @ ov.theta0)
    maps = field_maps(ov, params)

    def node(z):
        xi, eta = split_node(z, params)
        h, hstar = gaussian_fields(maps, params, xi, eta)
        if sqrt_rho is not None:
            hstar = hstar @ sqrt_rho
        return 2.0 * sample_loss(h, params.target(hstar, params), params)

    return quadrature.expect(jax.vmap(node)(quadrature.points)) / params.L


test_error.__test__ = False  # not a pytest test
