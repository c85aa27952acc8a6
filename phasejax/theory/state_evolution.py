"""State evolution of tied low-rank attention with ridge penalty (spec sections 2-5).

The fixed point of the saddle-point equations is found by damped iteration of
`hat_updates` (energetic, a Gaussian expectation of proximal steps) and
`overlap_updates` (entropic, closed form), inside the invariant subspace of
the requested branch. `solve_state_evolution` returns an `SEResult` with the
order parameters, their conjugates, the test error, the training loss, the
residual, the iteration count, a status and a converged flag.

Conventions (spec section 2): the state holds `q0 (r, r)`, `m (K, r)`,
`V0 (r, r)`, `theta0 (t, r)`; per token `q_l = sigma_l^2 q0`,
`V_l = sigma_l^2 V0`, `theta_l = sigma_l^2 theta0`, `m_l = sum_k C[l, k] m_k`.

Example (paper setting, semantic branch at alpha = 2, omega = 0.3):
  >>> from phasejax.theory import make_params, solve_state_evolution
  >>> res = solve_state_evolution(make_params(2.0, 0.3), "semantic")
  >>> bool(res.converged), round(float(res.q[0]), 3)      # doctest: +SKIP
  (True, 0.114)
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp
from flax import struct
from jax.flatten_util import ravel_pytree

from phasejax.theory.params import TiedAttentionParams, params_are_valid, token_swap_symmetric, validate_params
from phasejax.theory.prox import envelope_derivatives, moreau_prox
from phasejax.theory.quadrature import Quadrature, default_quadrature

Array = jax.Array

BRANCHES = ("positional", "semantic", "agnostic")

# Status codes of `SEResult.status` (like optimistix's RESULTS).
CONVERGED = 0
MAX_ITERATIONS = 1
INVALID_ITERATE = 2
INVALID_INPUT = 3
_RUNNING = -1
STATUS_NAMES = {CONVERGED: "converged", MAX_ITERATIONS: "max_iterations",
                INVALID_ITERATE: "invalid_iterate", INVALID_INPUT: "invalid_input"}


@struct.dataclass
class Overlaps:
    """Order parameters (spec section 4): `q0 (r, r)`, `m (K, r)`, `V0 (r, r)`, `theta0 (t, r)`."""

    q0: Array
    m: Array
    V0: Array
    theta0: Array


@struct.dataclass
class Hats:
    """Conjugate parameters per token: `qhat (L, r, r)`, `mhat (L, r)`, `Vhat (L, r, r)`, `thetahat (L, r, t)`."""

    qhat: Array
    mhat: Array
    Vhat: Array
    thetahat: Array


@struct.dataclass
class BranchInit:
    """Initial overlaps and the invariant subspace to solve in (spec section 4).

    `hold_m`, `hold_theta` are bool arrays of shape `()`: when true, `m`
    (with `mhat`) or `theta0` (with `thetahat`) is held at zero throughout.
    Being arrays, inits of different branches can be stacked and vmapped.
    """

    overlaps: Overlaps
    hold_m: Array
    hold_theta: Array


@dataclasses.dataclass(frozen=True)
class SEConfig:
    """Static options of the SE solver (hashable; part of the compilation key).

    Attributes:
      damping: weight of the old iterate, `x <- damping x + (1 - damping) F(x)`.
      tol: stop when `max_i |F(x)_i - x_i| / max(1, |x_i|) < tol` over all order parameters.
      max_iter: iteration cap (then `status = MAX_ITERATIONS`).
      prox_starts: `"multi"` (starts 0, omega and the previous iteration's
        optimum; keep the lowest objective) or `"zero"` (one local search from
        `h = 0`, the published method).
      prox_max_steps, prox_tol: Newton cap and gradient tolerance of the prox.
      hat_form: `"stein"` (default; Gaussian integration by parts,
        `Vhat_l = -alpha E[f_l xi_l^T] q_l^{-1/2} + thetahat_l theta_l q_l^{-1}`,
        `thetahat_l = alpha E[f_l eta_l^T] R_l^{-1/2}`) or `"implicit"`
        (`d f / d omega`, `d f / d h*` per node from the implicit function
        theorem). They agree when the proximal map is smooth (convex Moreau
        problem). When it is not (large `V`, as at the paper's fixed points)
        the global minimiser jumps between basins, `f` is discontinuous, and
        the distributional derivative carries delta terms on the jump set:
        the Stein form keeps them, the pointwise implicit form misses them
        (about 5% in `q` on the positional branch at `alpha = 2`). Stein
        needs `q0` and `I - theta0 q0^{-1} theta0^T` non-singular (pseudo-
        inverses are used at the boundary).
      psd_tol: tolerance of the PSD checks on `q0`, `V0` and
        `I - theta0 q0^{-1} theta0^T`.
      stability_eps: size of the out-of-subspace perturbation used for
        `SEResult.subspace_gain`.
      acceleration: `"anderson"` (Anderson mixing of the damped iteration,
        memory `anderson_memory`, with a fallback to the plain damped step when
        the extrapolation leaves the valid domain) or `"none"` (plain damping).
        Anderson steps are taken only once the residual is below
        `anderson_start`: far from a fixed point the extrapolation can jump
        into the basin of another fixed point of the same subspace (seen in
        the positional subspace of the paper's setting), so the approach is
        plain damped iteration and only the final convergence is accelerated.
      check_every: with `prox_starts="multi"`, iterations between full
        multi-start evaluations; in between, each node's prox is warm-started
        from its previous optimum only. Convergence is declared only on a
        multi-start iteration, so the fixed point always uses the lowest of
        all starts.
    """

    damping: float = 0.8
    tol: float = 1e-8
    max_iter: int = 2000
    prox_starts: Literal["multi", "zero"] = "multi"
    prox_max_steps: int = 60
    prox_tol: float = 1e-10
    hat_form: Literal["implicit", "stein"] = "stein"
    psd_tol: float = 1e-10
    stability_eps: float = 1e-5
    acceleration: Literal["anderson", "none"] = "anderson"
    anderson_memory: int = 5
    anderson_start: float = 1e-2
    check_every: int = 25

    def __post_init__(self):
        if not 0.0 <= self.damping < 1.0:
            raise ValueError(f"damping must lie in [0, 1), got {self.damping}")
        if not self.tol > 0:
            raise ValueError(f"tol must be > 0, got {self.tol}")
        if self.max_iter < 1:
            raise ValueError(f"max_iter must be >= 1, got {self.max_iter}")
        if self.prox_starts not in ("multi", "zero"):
            raise ValueError(f"prox_starts must be 'multi' or 'zero', got {self.prox_starts!r}")
        if self.hat_form not in ("implicit", "stein"):
            raise ValueError(f"hat_form must be 'implicit' or 'stein', got {self.hat_form!r}")
        if self.acceleration not in ("anderson", "none"):
            raise ValueError(f"acceleration must be 'anderson' or 'none', got {self.acceleration!r}")
        if self.anderson_memory < 1 or self.check_every < 1:
            raise ValueError("anderson_memory and check_every must be >= 1")


@struct.dataclass
class HatEvaluation:
    """One energetic step: the hats plus what the free energy and diagnostics need.

    Attributes:
      hats: `Hats`.
      expected_envelope: `()` `E[M(omega, h*)]` (loss term included).
      expected_loss: `()` `E[ell(h_hat, h*)]` at the proximal points.
      prox_grad_norm: `()` largest prox residual over nodes.
      prox_unconverged: `()` fraction (by weight) of nodes whose prox did not converge.
      h_hat: `(N, L * r)` proximal points (warm starts for the next iteration).
    """

    hats: Hats
    expected_envelope: Array
    expected_loss: Array
    prox_grad_norm: Array
    prox_unconverged: Array
    h_hat: Array


@struct.dataclass
class SEResult:
    """Fixed point of the state evolution and its diagnostics.

    Attributes:
      overlaps: `Overlaps` at the returned point (the last valid iterate).
      hats: `Hats` evaluated at `overlaps`.
      test_error: `()` `eps_g` (spec section 5); NaN when `status` is
        `INVALID_ITERATE` or `INVALID_INPUT` (never a silent number).
      train_loss: `()` `e_t = R(Q_hat) / d` from the free energy (spec
        section 5); NaN likewise.
      energetic_loss: `()` the same quantity computed directly from the
        final proximal points, `alpha E[ell(h_hat, h*)] + lambda/2 tr q0`; the
        two agree at a fixed point, so their difference is a consistency check.
      residual: `()` scaled max change `|F(x) - x|` at the returned point.
      iterations: `()` number of SE iterations.
      status: `()` int, one of `CONVERGED`, `MAX_ITERATIONS`, `INVALID_ITERATE`, `INVALID_INPUT`.
      converged: `()` bool, `status == CONVERGED`.
      subspace_gain: `()` linear gain of the undamped SE map on a perturbation
        out of the branch's invariant subspace (`< 1`: the constrained fixed
        point is stable; `> 1`: it is a saddle of the SE, e.g. past a spinodal);
        `0` for an unconstrained solve.
      prox_grad_norm: `()` largest prox residual at the final evaluation.
      prox_unconverged: `()` weight fraction of nodes whose prox did not converge.
      sigma: `(L,)` copy of the token scales, for the per-token properties.
    """

    overlaps: Overlaps
    hats: Hats
    test_error: Array
    train_loss: Array
    energetic_loss: Array
    residual: Array
    iterations: Array
    status: Array
    converged: Array
    subspace_gain: Array
    prox_grad_norm: Array
    prox_unconverged: Array
    sigma: Array

    @property
    def q(self) -> Array:
        """Per-token `q_l = sigma_l^2 q0`, shape `(..., L, r, r)`; `(..., L)` when `r = 1`."""
        return _per_token(self.sigma, self.overlaps.q0)

    @property
    def V(self) -> Array:
        """Per-token `V_l = sigma_l^2 V0`, shape `(..., L, r, r)`; `(..., L)` when `r = 1`."""
        return _per_token(self.sigma, self.overlaps.V0)

    @property
    def theta(self) -> Array:
        """Per-token `theta_l = sigma_l^2 theta0`, shape `(..., L, t, r)`; `(..., L)` when `t = r = 1`."""
        return _per_token(self.sigma, self.overlaps.theta0)

    @property
    def m(self) -> Array:
        """`m (..., K, r)`."""
        return self.overlaps.m


def _per_token(sigma: Array, x: Array) -> Array:
    out = (sigma**2)[..., :, None, None] * x[..., None, :, :]
    if x.shape[-2:] == (1, 1):
        return out[..., 0, 0]
    return out


# ----------------------------------------------------------------------------
# Branches and inits
# ----------------------------------------------------------------------------


# Default inits in per-token units (q, V, theta per token; m), those of the
# published method for the paper's setting; converted to q0, V0, theta0 with
# the mean sigma^2.
BRANCH_DEFAULTS = {
    "positional": dict(q=0.02, m=0.2, V=14.6, theta=0.0),
    "semantic": dict(q=0.9, m=0.0, V=14.6, theta=0.35),
    "agnostic": dict(q=0.02, m=0.0, V=14.6, theta=0.0),
}


def branch_init(
    branch: str, params: TiedAttentionParams, *, q0=None, m=None, V0=None, theta0=None
) -> BranchInit:
    """Init and invariant subspace of a branch (spec section 4).

    * `"positional"`: `theta0` held at 0; init with `m` large.
    * `"semantic"`: init with `theta0 > 0`, `m = 0`; `m` held at 0 when the
      problem is token-swap symmetric (`token_swap_symmetric`), else free.
    * `"agnostic"`: both held at 0.

    Default overlaps are `BRANCH_DEFAULTS` (per-token values, divided by the
    mean `sigma^2`, placed on the leading diagonal for `r, t, K > 1`). Any of
    `q0 (r, r)`, `m (K, r)`, `V0 (r, r)`, `theta0 (t, r)` can be overridden.
    """
    if branch not in BRANCHES:
        raise ValueError(f"branch must be one of {BRANCHES}, got {branch!r}")
    r, t, K = params.r, params.t, params.K
    f64 = jnp.float64
    d = BRANCH_DEFAULTS[branch]
    s2 = jnp.mean(params.sigma**2)
    chosen = dict(
        q0=d["q"] / s2 * jnp.eye(r, dtype=f64) if q0 is None else jnp.asarray(q0, f64).reshape(r, r),
        m=d["m"] * jnp.eye(K, r, dtype=f64) if m is None else jnp.asarray(m, f64).reshape(K, r),
        V0=d["V"] / s2 * jnp.eye(r, dtype=f64) if V0 is None else jnp.asarray(V0, f64).reshape(r, r),
        theta0=d["theta"] / s2 * jnp.eye(t, r, dtype=f64) if theta0 is None else jnp.asarray(theta0, f64).reshape(t, r),
    )
    hold_theta = jnp.asarray(branch in ("positional", "agnostic"))
    if branch == "semantic":
        hold_m = token_swap_symmetric(params)
    else:
        hold_m = jnp.asarray(branch == "agnostic")
    ov = Overlaps(**chosen)
    ov = ov.replace(m=jnp.where(hold_m, 0.0, ov.m), theta0=jnp.where(hold_theta, 0.0, ov.theta0))
    return BranchInit(overlaps=ov, hold_m=hold_m, hold_theta=hold_theta)


# ----------------------------------------------------------------------------
# Gaussian fields (spec section 2)
# ----------------------------------------------------------------------------


def _sym_sqrt_and_pinv_sqrt(M: Array, eps: float = 1e-14) -> tuple[Array, Array, Array]:
    """Symmetric square root, pseudo-inverse square root and smallest eigenvalue of `M`."""
    M = 0.5 * (M + M.T)
    evals, evecs = jnp.linalg.eigh(M)
    clipped = jnp.clip(evals, 0.0, None)
    sqrt = (evecs * jnp.sqrt(clipped)) @ evecs.T
    inv = jnp.where(clipped > eps, 1.0 / jnp.sqrt(jnp.where(clipped > eps, clipped, 1.0)), 0.0)
    return sqrt, (evecs * inv) @ evecs.T, evals[0]


@struct.dataclass
class FieldMaps:
    """Linear maps from `(xi, eta)` to the fields, in token-free units.

    `omega_l = sigma_l q0^{1/2} xi_l + m_l`,
    `h*_l = sigma_l (theta0 q0^{-1/2} xi_l + Rn^{1/2} eta_l)`, `Rn = I - theta0 q0^{-1} theta0^T`.
    """

    sqrt_q0: Array       # (r, r)
    pinv_sqrt_q0: Array  # (r, r)
    B: Array             # (t, r) theta0 q0^{-1/2}
    sqrt_Rn: Array       # (t, t)
    pinv_sqrt_Rn: Array  # (t, t)
    m_tokens: Array      # (L, r)
    valid: Array         # () bool: q0, V0 PSD/PD, Rn PSD, all finite


def field_maps(ov: Overlaps, params: TiedAttentionParams, psd_tol: float = 1e-10) -> FieldMaps:
    """Build the `(xi, eta) -> (omega, h*)` maps and the validity flag (spec section 2)."""
    sqrt_q0, pinv_sqrt_q0, q0_min = _sym_sqrt_and_pinv_sqrt(ov.q0)
    B = ov.theta0 @ pinv_sqrt_q0
    Rn = jnp.eye(params.t, dtype=ov.q0.dtype) - B @ B.T
    sqrt_Rn, pinv_sqrt_Rn, Rn_min = _sym_sqrt_and_pinv_sqrt(Rn)
    V0_min = jnp.linalg.eigvalsh(0.5 * (ov.V0 + ov.V0.T))[0]
    finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(ov)]))
    # theta0 must lie in the range of q0 (else h* is not a valid Gaussian field).
    theta_in_range = jnp.all(jnp.abs(ov.theta0 - ov.theta0 @ pinv_sqrt_q0 @ sqrt_q0) <= 1e-8 + psd_tol)
    valid = finite & (q0_min >= -psd_tol) & (Rn_min >= -psd_tol) & (V0_min > 0) & theta_in_range
    return FieldMaps(sqrt_q0=sqrt_q0, pinv_sqrt_q0=pinv_sqrt_q0, B=B, sqrt_Rn=sqrt_Rn,
                     pinv_sqrt_Rn=pinv_sqrt_Rn, m_tokens=params.C @ ov.m, valid=valid)


def split_node(z: Array, params: TiedAttentionParams) -> tuple[Array, Array]:
    """Split a quadrature point `z (L (r + t),)` into `xi (L, r)` and `eta (L, t)`."""
    L, r, t = params.L, params.r, params.t
    return z[: L * r].reshape(L, r), z[L * r:].reshape(L, t)


def gaussian_fields(maps: FieldMaps, params: TiedAttentionParams, xi: Array, eta: Array) -> tuple[Array, Array]:
    """`omega (L, r)` and `h* (L, t)` at one node (spec section 2)."""
    s = params.sigma[:, None]
    omega = s * (xi @ maps.sqrt_q0.T) + maps.m_tokens
    hstar = s * (xi @ maps.B.T + eta @ maps.sqrt_Rn.T)
    return omega, hstar


def sample_loss(h: Array, target_matrix: Array, params: TiedAttentionParams) -> Array:
    """Per-sample loss `ell = 1/2 tr[(T - S(h)) D (T - S(h))^T]`, `D = diag(sigma^2)` (spec section 1)."""
    diff = target_matrix - params.student(h, params)
    return 0.5 * jnp.sum(diff**2 * (params.sigma**2)[None, :])


# ----------------------------------------------------------------------------
# Energetic (hat) updates: spec sections 3-4
# ----------------------------------------------------------------------------


def _zero_hats(params: TiedAttentionParams, dtype=jnp.float64) -> Hats:
    L, r, t = params.L, params.r, params.t
    return Hats(qhat=jnp.zeros((L, r, r), dtype), mhat=jnp.zeros((L, r), dtype),
                Vhat=jnp.zeros((L, r, r), dtype), thetahat=jnp.zeros((L, r, t), dtype))


def hat_updates(
    ov: Overlaps,
    params: TiedAttentionParams,
    quadrature: Quadrature,
    config: SEConfig = SEConfig(),
    warm: Array | None = None,
    starts: Literal["multi", "warm", "zero"] | None = None,
) -> HatEvaluation:
    """Energetic updates `qhat, mhat, Vhat, thetahat` (spec section 4), vmapped over nodes.

    Solves the proximal problem of spec section 3 at every quadrature node
    (`moreau_prox`) and averages. `starts` (default `config.prox_starts`):
    `"multi"` starts at 0, at omega and at `warm (N, L r)` (the previous
    optimum) and keeps the lowest objective; `"warm"` starts at `warm` only;
    `"zero"` at 0 only. `config.hat_form` picks the
    implicit-derivative or the Stein form of `Vhat` and `thetahat`.
    """
    L, r = params.L, params.r
    maps = field_maps(ov, params, config.psd_tol)
    V0_inv = jnp.linalg.inv(0.5 * (ov.V0 + ov.V0.T))
    V_inv = V0_inv[None] / (params.sigma**2)[:, None, None]  # (L, r, r)
    if warm is None:
        warm = jnp.zeros((quadrature.size, L * r), ov.q0.dtype)
    starts = config.prox_starts if starts is None else starts

    def loss_of(h, hstar):
        return sample_loss(h, params.target(hstar, params), params)

    def node(z, h_warm):
        xi, eta = split_node(z, params)
        omega, hstar = gaussian_fields(maps, params, xi, eta)
        T = params.target(hstar, params)

        def objective(hf):
            h = hf.reshape(L, r)
            dh = h - omega
            return 0.5 * jnp.einsum("la,lab,lb->", dh, V_inv, dh) + sample_loss(h, T, params)

        zero = jnp.zeros(L * r, omega.dtype)
        h0 = {"zero": lambda: zero[None], "warm": lambda: h_warm[None],
              "multi": lambda: jnp.stack([zero, omega.reshape(-1), h_warm])}[starts]()
        pr = moreau_prox(objective, h0, max_steps=config.prox_max_steps, tol=config.prox_tol)
        h_hat = pr.h.reshape(L, r)
        if config.hat_form == "implicit":
            der = envelope_derivatives(loss_of, h_hat, omega, V_inv, hstar)
            f, dfdw, dfdh = der.f, der.df_domega, der.df_dhstar
        else:  # the Stein form needs f only
            f = jnp.einsum("lab,lb->la", V_inv, h_hat - omega)
            dfdw = dfdh = None
        return dict(f=f, dfdw=dfdw, dfdh=dfdh, M=pr.value,
                    loss=sample_loss(h_hat, T, params), xi=xi, eta=eta, h=pr.h,
                    gn=pr.grad_norm, conv=pr.converged)

    out = jax.vmap(node)(quadrature.points, warm)
    E = quadrature.expect
    a = params.alpha
    f = out["f"]
    qhat = a * E(jnp.einsum("nla,nlb->nlab", f, f))
    mhat = a * E(f)
    if config.hat_form == "implicit":
        Vhat = -a * E(out["dfdw"])
        thetahat = a * E(out["dfdh"])
    else:  # Stein forms (spec section 4), general r, t
        s = params.sigma[:, None, None]
        f_eta = E(jnp.einsum("nla,nlb->nlab", f, out["eta"]))  # (L, r, t)
        f_xi = E(jnp.einsum("nla,nlb->nlab", f, out["xi"]))    # (L, r, r)
        thetahat = a * (f_eta @ maps.pinv_sqrt_Rn) / s
        pinv_q0 = maps.pinv_sqrt_q0 @ maps.pinv_sqrt_q0
        Vhat = -a * (f_xi @ maps.pinv_sqrt_q0) / s + thetahat @ ov.theta0 @ pinv_q0
    Vhat = 0.5 * (Vhat + jnp.swapaxes(Vhat, -1, -2))
    hats = Hats(qhat=qhat, mhat=mhat, Vhat=Vhat, thetahat=thetahat)
    unconverged = E((~out["conv"]).astype(ov.q0.dtype))
    return HatEvaluation(hats=hats, expected_envelope=E(out["M"]), expected_loss=E(out["loss"]),
                         prox_grad_norm=jnp.max(out["gn"]), prox_unconverged=unconverged, h_hat=out["h"])


# ----------------------------------------------------------------------------
# Entropic (overlap) updates: spec section 4
# ----------------------------------------------------------------------------


def _effective_hats(hats: Hats, params: TiedAttentionParams):
    s2 = params.sigma**2
    r = params.r
    G = params.lam * jnp.eye(r, dtype=hats.Vhat.dtype) + jnp.einsum("l,lab->ab", s2, hats.Vhat)
    qhat_eff = jnp.einsum("l,lab->ab", s2, hats.qhat)
    thetahat_eff = jnp.einsum("l,lat->ta", s2, hats.thetahat)  # (t, r)
    Mhat = params.C.T @ hats.mhat                               # (K, r)
    return G, qhat_eff, thetahat_eff, Mhat


def hold_hats(hats: Hats, hold_m: Array, hold_theta: Array) -> Hats:
    """Zero `mhat` / `thetahat` where the branch holds `m` / `theta0` at zero."""
    return hats.replace(mhat=jnp.where(hold_m, 0.0, hats.mhat),
                        thetahat=jnp.where(hold_theta, 0.0, hats.thetahat))


def overlap_updates(hats: Hats, params: TiedAttentionParams) -> Overlaps:
    """Entropic updates of spec section 4 for the ridge penalty.

    `G = lambda I + sum_l sigma_l^2 Vhat_l`, `V0 = G^{-1}`, `m = Mhat G^{-1}`,
    `theta0 = thetahat_eff G^{-1}`,
    `q0 = G^{-1} (qhat_eff + Mhat^T Mhat + thetahat_eff^T thetahat_eff) G^{-1}`.
    """
    G, qhat_eff, thetahat_eff, Mhat = _effective_hats(hats, params)
    G_inv = jnp.linalg.inv(G)
    G_inv = 0.5 * (G_inv + G_inv.T)
    inner = qhat_eff + Mhat.T @ Mhat + thetahat_eff.T @ thetahat_eff
    q0 = G_inv @ inner @ G_inv
    return Overlaps(q0=0.5 * (q0 + q0.T), m=Mhat @ G_inv, V0=G_inv, theta0=thetahat_eff @ G_inv)


# ----------------------------------------------------------------------------
# Errors and free energy: spec section 5
# ----------------------------------------------------------------------------


def test_error(ov: Overlaps, params: TiedAttentionParams, quadrature: Quadrature, rho0: Array | None = None) -> Array:
    """`eps_g = 1/L E tr[(T(h*) - S(h)) D (T(h*) - S(h))^T]`, `h_l = q_l^{1/2} xi_l + m_l` (spec section 5).

    `rho0 (t, t)` is the teacher's `Q*^T Q* / d` (default: `I_t`, its `d -> inf` value). For a
    finite-`d` teacher the field is written `h* = rho0^{1/2} h*'` with `h*'` of unit covariance,
    so the field maps apply to `theta0' = rho0^{-1/2} theta0`.
    """
    sqrt_rho = None
    if rho0 is not None:
        sqrt_rho, pinv_sqrt_rho, _ = _sym_sqrt_and_pinv_sqrt(rho0)
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


def training_loss(ov: Overlaps, hats: Hats, expected_envelope: Array, params: TiedAttentionParams) -> Array:
    """Training loss per dimension `e_t` from the zero-temperature free energy (spec section 5).

    `expected_envelope` is `E[M(omega, h*)]` from `hat_updates` at the same
    overlaps. At a fixed point this equals `alpha E[ell(h_hat, h*)] + lambda/2 tr q0`.
    """
    s2 = params.sigma**2
    G, qhat_eff, thetahat_eff, Mhat = _effective_hats(hats, params)
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


# ----------------------------------------------------------------------------
# The fixed-point solver: spec section 4
# ----------------------------------------------------------------------------


def _se_map(ov: Overlaps, params, quadrature, config, hold_m, hold_theta, warm, starts=None):
    ev = hat_updates(ov, params, quadrature, config, warm, starts)
    ev = ev.replace(hats=hold_hats(ev.hats, hold_m, hold_theta))
    new = overlap_updates(ev.hats, params)
    new = new.replace(m=jnp.where(hold_m, 0.0, new.m), theta0=jnp.where(hold_theta, 0.0, new.theta0))
    return new, ev


def _scaled_residual(x: Array, fx: Array) -> Array:
    return jnp.max(jnp.abs(fx - x) / jnp.maximum(1.0, jnp.abs(x)))


def _anderson_step(hist, x, g, beta, memory):
    """Anderson (type II) mixing of `x + beta g`, `g = F(x) - x`; returns proposal and new history."""
    dX, dG, prev_x, prev_g, count = hist
    slot = jnp.mod(count - 1, memory)
    push = count > 0
    dX = jnp.where(push, dX.at[slot].set(x - prev_x), dX)
    dG = jnp.where(push, dG.at[slot].set(g - prev_g), dG)
    rows = jnp.arange(memory) < jnp.minimum(count, memory)
    dGm = jnp.where(rows[:, None], dG, 0.0)
    dXm = jnp.where(rows[:, None], dX, 0.0)
    gram = dGm @ dGm.T
    reg = 1e-12 * jnp.trace(gram) + 1e-300
    gram = gram + jnp.diag(jnp.where(rows, reg, 1.0))
    gamma = jnp.linalg.solve(gram, dGm @ g)
    proposal = x + beta * g - (dXm + beta * dGm).T @ gamma
    return proposal, (dX, dG, x, g, count + 1)


def _solve_impl(params: TiedAttentionParams, init: BranchInit, quadrature: Quadrature, config: SEConfig) -> SEResult:
    hold_m, hold_theta = init.hold_m, init.hold_theta
    x0, unravel = ravel_pytree(init.overlaps)
    dtype, n = x0.dtype, x0.shape[0]
    N, Lr = quadrature.size, params.L * params.r
    M = config.anderson_memory
    beta = 1.0 - config.damping
    ev_shape = jax.eval_shape(lambda: hat_updates(init.overlaps, params, quadrature, config))
    ev0 = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), ev_shape)
    status0 = jnp.where(params_are_valid(params), _RUNNING, INVALID_INPUT)
    is_valid = lambda x: field_maps(unravel(x), params, config.psd_tol).valid

    def iterate(state, starts, final_check):
        """One SE iteration; convergence may be declared only when `final_check`."""
        x = state["x"]
        valid = is_valid(x)
        new, ev = _se_map(unravel(x), params, quadrature, config, hold_m, hold_theta, state["warm"], starts)
        fx, _ = ravel_pytree(new)
        ok = valid & jnp.all(jnp.isfinite(fx)) & jnp.all(jnp.isfinite(ev.h_hat))
        residual = _scaled_residual(x, fx)
        g = fx - x
        damped = x + beta * g
        if config.acceleration == "anderson":
            proposal, hist = _anderson_step(state["hist"], x, g, beta, M)
            use = (residual < config.anderson_start) & jnp.all(jnp.isfinite(proposal)) & is_valid(proposal)
            x_next = jnp.where(use, proposal, damped)
            # restart the history when a near-converged extrapolation had to be rejected
            reset = (residual < config.anderson_start) & ~use
            hist = jax.tree_util.tree_map(lambda h, h0: jnp.where(reset, h0, h), hist, _empty_hist(n, M, dtype))
        else:
            x_next, hist = damped, state["hist"]
        done = residual < config.tol
        status = jnp.where(~ok, INVALID_ITERATE, jnp.where(done & final_check, CONVERGED, _RUNNING))
        running = state["status"] == _RUNNING
        upd = running & ok
        sel = lambda new_v, old_v: jnp.where(upd, new_v, old_v)
        return dict(
            x=jnp.where(upd & (status == _RUNNING), x_next, x),
            x_eval=sel(x, state["x_eval"]),
            ev=jax.tree_util.tree_map(sel, ev, state["ev"]),
            warm=sel(ev.h_hat, state["warm"]),
            hist=jax.tree_util.tree_map(sel, hist, state["hist"]),
            residual=sel(residual, state["residual"]),
            warm_done=done,
            status=jnp.where(running, status, state["status"]),
            it=state["it"] + running.astype(state["it"].dtype),
        )

    cheap = "zero" if config.prox_starts == "zero" else "warm"
    check = config.prox_starts

    def outer_cond(state):
        return (state["it"] < config.max_iter) & (state["status"] == _RUNNING)

    def inner_cond(carry):
        state, k = carry
        return (k < config.check_every) & ~state["warm_done"] & outer_cond(state)

    def inner_body(carry):
        state, k = carry
        return iterate(state, cheap, final_check=False), k + 1

    def outer_body(state):
        state = iterate(state, check, final_check=True)
        state = dict(state, warm_done=jnp.asarray(False))
        state, _ = jax.lax.while_loop(inner_cond, inner_body, (state, jnp.asarray(0)))
        return state

    state0 = dict(x=x0, x_eval=x0, ev=ev0, warm=jnp.zeros((N, Lr), dtype), hist=_empty_hist(n, M, dtype),
                  residual=jnp.asarray(jnp.inf, dtype), warm_done=jnp.asarray(False), status=status0,
                  it=jnp.asarray(0))
    state = jax.lax.while_loop(outer_cond, outer_body, state0)
    status = jnp.where(state["status"] == _RUNNING, MAX_ITERATIONS, state["status"])
    ov = unravel(state["x_eval"])
    ev = state["ev"]
    hats = ev.hats
    e_t = training_loss(ov, hats, ev.expected_envelope, params)
    eps_g = test_error(ov, params, quadrature)
    gain = _subspace_gain(ov, params, quadrature, config, hold_m, hold_theta, state["warm"])
    # An invalid point has no meaningful error or loss: NaN, explained by `status`.
    invalid = (status == INVALID_ITERATE) | (status == INVALID_INPUT)
    e_direct = params.alpha * ev.expected_loss + 0.5 * params.lam * jnp.trace(ov.q0)
    eps_g, e_t, e_direct, gain = (jnp.where(invalid, jnp.nan, v) for v in (eps_g, e_t, e_direct, gain))
    return SEResult(overlaps=ov, hats=hats, test_error=eps_g, train_loss=e_t, energetic_loss=e_direct,
                    residual=state["residual"],
                    iterations=state["it"], status=status, converged=status == CONVERGED,
                    subspace_gain=gain, prox_grad_norm=ev.prox_grad_norm,
                    prox_unconverged=ev.prox_unconverged, sigma=params.sigma)


def _empty_hist(n, memory, dtype):
    z = jnp.zeros((memory, n), dtype)
    return (z, z, jnp.zeros((n,), dtype), jnp.zeros((n,), dtype), jnp.asarray(0))


_solve = jax.jit(_solve_impl, static_argnames=("config",))


def _subspace_gain(ov, params, quadrature, config, hold_m, hold_theta, warm):
    """Linear gain of the undamped SE map on a perturbation out of the held subspace."""
    eps = config.stability_eps
    scale = jnp.sqrt(jnp.maximum(jnp.trace(ov.q0) / params.r, 1e-12))
    dm = jnp.where(hold_m, eps * scale, 0.0) * jnp.eye(params.K, params.r, dtype=ov.q0.dtype)
    dth = jnp.where(hold_theta, eps * scale, 0.0) * jnp.eye(params.t, params.r, dtype=ov.q0.dtype)
    pert = ov.replace(m=ov.m + dm, theta0=ov.theta0 + dth)
    no = jnp.asarray(False)
    starts = "zero" if config.prox_starts == "zero" else "warm"
    new, _ = _se_map(pert, params, quadrature, config, no, no, warm, starts)
    num = jnp.sum(new.m * dm) + jnp.sum(new.theta0 * dth)
    den = jnp.sum(dm * dm) + jnp.sum(dth * dth)
    return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)


def solve_state_evolution(
    params: TiedAttentionParams,
    init: BranchInit | str = "semantic",
    quadrature: Quadrature | None = None,
    config: SEConfig = SEConfig(),
) -> SEResult:
    """Solve the state evolution of spec section 4 by damped fixed-point iteration.

    Args:
      params: `TiedAttentionParams` (see `make_params`). Array fields may be
        traced: the function is jittable and vmappable over `alpha`, `omega`,
        `lam`, `sigma`, `A` and over `init`.
      init: a branch name (`"positional"`, `"semantic"`, `"agnostic"`) or a
        `BranchInit` (from `branch_init`, possibly with custom overlaps).
      quadrature: rule over `(xi, eta)` in `L (r + t)` dimensions; default
        `default_quadrature` (10 Gauss-Hermite nodes per dimension up to 4 dims).
      config: `SEConfig` (static).

    Returns:
      `SEResult`. Invalid concrete inputs raise `ValueError`; invalid traced
      inputs give `status = INVALID_INPUT`; an iterate leaving the valid
      domain (non-PSD `rho - theta q^{-1} theta^T`, non-PD `V0`, non-finite)
      stops the solve with `status = INVALID_ITERATE` and the last valid
      iterate is returned.
    """
    validate_params(params)
    if isinstance(init, str):
        init = branch_init(init, params)
    if not isinstance(init, BranchInit):
        raise ValueError(f"init must be a branch name or a BranchInit, got {type(init).__name__}")
    dim = params.L * (params.r + params.t)
    if quadrature is None:
        quadrature = default_quadrature(dim)
    if quadrature.dim != dim:
        raise ValueError(f"quadrature has dimension {quadrature.dim}, but L (r + t) = {dim}")
    return _solve(params, init, quadrature, config)


def result_columns(res: SEResult, params: TiedAttentionParams) -> dict[str, Array]:
    """Flatten one `SEResult` to named scalar columns (for CSV / JSON output).

    `q, V, theta` are the per-token `sigma_1^2 q0`, `sigma_1^2 V0`,
    `sigma_1^2 theta0` of token 1 (first entry for `r, t > 1`), `m` the first
    entry of `m`; every entry of the overlaps and hats follows as
    `q0_i, m0_i, V0_i, theta0_i, qhat_i, mhat_i, Vhat_i, thetahat_i`. Vmappable.
    """
    s1 = params.sigma[0] ** 2
    ov, hats = res.overlaps, res.hats
    cols = dict(
        q=s1 * ov.q0.ravel()[0], m=ov.m.ravel()[0], V=s1 * ov.V0.ravel()[0], theta=s1 * ov.theta0.ravel()[0],
        test_error=res.test_error, train_loss=res.train_loss, energetic_loss=res.energetic_loss,
        residual=res.residual,
        iterations=res.iterations, status=res.status, converged=res.converged,
        subspace_gain=res.subspace_gain, prox_unconverged=res.prox_unconverged,
    )
    for name, arr in [("q0", ov.q0), ("m0", ov.m), ("V0", ov.V0), ("theta0", ov.theta0), ("qhat", hats.qhat),
                      ("mhat", hats.mhat), ("Vhat", hats.Vhat), ("thetahat", hats.thetahat)]:
        flat = arr.ravel()
        for i in range(flat.shape[0]):
            cols[f"{name}_{i}"] = flat[i]
    return cols


def stack_inits(inits: list[BranchInit]) -> BranchInit:
    """Stack `BranchInit`s along a new leading axis (for vmapping over branches)."""
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *inits)


def solve_state_evolution_batch(
    params: TiedAttentionParams,
    alpha: Array,
    omega: Array,
    init: BranchInit | str = "semantic",
    quadrature: Quadrature | None = None,
    config: SEConfig = SEConfig(),
    batched_init: bool = False,
) -> SEResult:
    """Solve the SE at `N` points `(alpha[i], omega[i])` in one vmapped, jitted call.

    Args:
      params: base parameters (its `alpha`, `omega` are replaced).
      alpha, omega: `(N,)` arrays (validated: `alpha > 0`, `omega` in [0, 1]).
      init: a branch name or `BranchInit`, shared by all points; or, with
        `batched_init=True`, a `BranchInit` with a leading `(N,)` axis
        (from `stack_inits`), one per point.
    Returns:
      `SEResult` whose leaves carry a leading `(N,)` axis.
    """
    alpha = jnp.atleast_1d(jnp.asarray(alpha, jnp.float64))
    omega = jnp.atleast_1d(jnp.asarray(omega, jnp.float64))
    if alpha.ndim != 1 or alpha.shape != omega.shape:
        raise ValueError(f"alpha and omega must be 1-d arrays of equal length, got {alpha.shape} and {omega.shape}")
    validate_params(params.replace(alpha=alpha, omega=omega))
    if isinstance(init, str):
        init = branch_init(init, params)
    dim = params.L * (params.r + params.t)
    quadrature = default_quadrature(dim) if quadrature is None else quadrature
    if quadrature.dim != dim:
        raise ValueError(f"quadrature has dimension {quadrature.dim}, but L (r + t) = {dim}")
    if batched_init:
        if init.hold_m.shape != alpha.shape:
            raise ValueError(f"batched init must have leading axis {alpha.shape}, got {init.hold_m.shape}")
        fn = jax.vmap(lambda a, w, i: _solve(params.replace(alpha=a, omega=w), i, quadrature, config))
        return fn(alpha, omega, init)
    fn = jax.vmap(lambda a, w: _solve(params.replace(alpha=a, omega=w), init, quadrature, config))
    return fn(alpha, omega)
