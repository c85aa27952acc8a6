"""One step of replica symmetry breaking (1RSB) at zero temperature (docs/rsb.md).

The replica-symmetric (RS) state evolution describes one minimiser. Where the proximal problem has competing
minima the RS fixed point is replicon-unstable (docs/replica_symmetry.md) and the minima of the training loss
organise in states: two minimisers in the same state overlap by `q1`, two in different states by `q0 < q1`. At
zero temperature the 1RSB order parameters are `q0`, `Delta = q1 - q0`, the response `V0` within a state, `m`,
`theta0` and the Parisi parameter in its zero-temperature scaling `y = beta x` (an inverse energy: states are
weighted by `exp(-y N e)`). For the ridge penalty the free energy per dimension is

    Phi(y) = - log(1 + y Delta / V0) / (2 y) - (q0 - theta0^2 - |m|^2) / (2 (V0 + y Delta)) + lambda (q0 + Delta) / 2
             + alpha E_{xi, eta} [ -(1 / y) log E_z exp(-y M_V(omega0 + sigma sqrt(Delta) z, h*)) ]

with `omega0_l = sigma_l sqrt(q0) xi_l + (C m)_l`, the teacher's field `h*` correlated with `xi` only (through
`theta0`), `z_l` standard normal per token (the fluctuation of the field within a state) and `M_V` the Moreau
envelope of the RS theory (`phasejax.theory.prox`, `V_l = sigma_l^2 V0`). It is extremised in every order
parameter. At `Delta = 0` it is the RS free energy `-(q0 - c) / (2 V0) + lambda q0 / 2 + alpha E M`, whose
stationary point is the RS fixed point (`rs_energy`), and the RS point is a stationary point of `Phi` for every
`y`. The complexity of the states selected by `y` is `Sigma(y) = y^2 dPhi/dy` and their energy
`e(y) = Phi + y dPhi/dy`; the ground state has `Sigma = 0` (`y` extremised too).

The energetic term needs the global minimum of the proximal problem at every node `(xi, eta, z)`: each node is
minimised from its previous minimiser, its mirror, the field and the mirrored field (`lowest_minima`), and a dense
grid of starts (`DENSE_GRID`) is tried at the first evaluation and after convergence; a solve whose check finds a
lower minimum at some node is solved again from the dense minima (`missed_minima` reports what the last check
found). The hats are not written out: the gradient of `Phi` is computed by forward-mode differentiation at fixed
quadrature nodes with the minimisers differentiated by the implicit function theorem (the envelope theorem makes
it the Stein form), and its Jacobian (the Hessian of `Phi`) the same way; the stationary point is found by
Levenberg-Marquardt steps on `grad Phi = 0` (`RSBNewton`, run by `phasejax.solvers.iterate`).

Quadrature: the outer average over `(xi, eta)` on `n_replicas` independently scrambled Sobol rules (the state is
solved on their union; the spread of the replicas' estimates, propagated through the Hessian, gives the 95%
errors, as the RS solver reports them), the inner average over `z` on a tensor Gauss-Hermite rule.

Two models share this code: `TiedAttentionRSB` (the attention model, `L = 2`, `r = t = 1`, both branches by
holding `theta0` or `m` at zero) and `PerceptronRSB` (the spherical perceptron storing random labels with the
quadratic hinge loss and a negative margin, the reference model of the tests, where the inner average has a
closed form).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.precision import float64_scope, uses_float64
from phasejax.solvers import HasStatus, Status, iterate
from phasejax.theory.fields import Overlaps
from phasejax.theory.params import TiedAttentionParams, validate_params
from phasejax.theory.prox import LaneSettings, closed_form_prox, lowest_minima
from phasejax.theory.quadrature import Quadrature, gauss_hermite, scrambled_sobol_points
from phasejax.theory.results import spread_error

Array = jax.Array

DENSE_GRID = (-2.7, -0.9, 0.9, 2.7)
"""Coordinates of the dense grid of prox starts (their tensor product in `L r` dimensions, with the field, the
mirrored field and the warm start and its mirror): every minimum of the attention model's prox at the fixed points
of interest lies within `|h| < 3`."""


# ----------------------------------------------------------------------------
# Quadrature: outer scrambled Sobol replicas, inner Gauss-Hermite
# ----------------------------------------------------------------------------


@struct.dataclass
class RSBRule:
    """Nested rule: `outer (No, D)` nodes with `outer_weights (No,)` (the union of the replicas) and
    `replica_weights (R, No)` (each replica alone), `inner (Ni, L)` nodes of `z` with `inner_weights (Ni,)`."""

    outer: Array
    outer_weights: Array
    replica_weights: Array
    inner: Array
    inner_weights: Array

    @property
    def n_nodes(self) -> int:
        return self.outer.shape[0] * self.inner.shape[0]

    def rs(self) -> "RSBRule":
        """The same outer rule with a single inner node `z = 0` (the RS energy: `Delta = 0`)."""
        L = self.inner.shape[1]
        return self.replace(inner=np.zeros((1, L)), inner_weights=np.ones((1,)))


def rsb_rule(outer_dim: int, inner_dim: int, *, log2_n: int = 10, n_replicas: int = 4, inner_order: int = 5,
             seed: int = 0, outer_scale: float = 1.0) -> RSBRule:
    """`n_replicas` Owen-scrambled Sobol rules of `2**log2_n` points in `outer_dim` dimensions (outer) and a tensor
    Gauss-Hermite rule of `inner_order` nodes per dimension in `inner_dim` dimensions (inner).

    `outer_scale = s > 1` draws the outer points from `N(0, s^2 I)` and weights them by the density ratio
    `prod_d s exp(-x_d^2 (1 - 1 / s^2) / 2)`, normalised within each replica (importance sampling with a wider
    proposal). For integrands that grow in the Gaussian tails (an envelope quadratic in the field) the plain rule's
    error is dominated by its outermost strata and falls like `1 / N`; the weighted integrand decays in the tails and
    the stratification error falls faster. `s = 1`: the plain rule."""
    for name, v, lo in (("outer_dim", outer_dim, 1), ("inner_dim", inner_dim, 1), ("log2_n", log2_n, 1),
                        ("n_replicas", n_replicas, 2), ("inner_order", inner_order, 1)):
        if isinstance(v, bool) or int(v) != v or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    if log2_n > 20:
        raise ValueError(f"log2_n must be <= 20, got {log2_n}")
    if not (isinstance(outer_scale, (int, float)) and not isinstance(outer_scale, bool) and outer_scale >= 1.0):
        raise ValueError(f"outer_scale must be a number >= 1, got {outer_scale!r}")
    per = 2 ** int(log2_n)
    R = int(n_replicas)
    seeds = [seed * 1009 + 7919 + k for k in range(R)]
    inner = gauss_hermite(int(inner_dim), int(inner_order))
    if outer_scale == 1.0:
        pts = np.concatenate([scrambled_sobol_points(int(outer_dim), int(log2_n), sd) for sd in seeds])
        W = np.repeat(np.eye(R), per, axis=1) / per
        w_outer = np.full((pts.shape[0],), 1.0 / pts.shape[0])
    else:
        from scipy.special import ndtri
        from scipy.stats import qmc

        s = float(outer_scale)
        u = np.concatenate([qmc.Sobol(int(outer_dim), scramble=True, seed=sd).random_base2(int(log2_n))
                            for sd in seeds])
        pts = s * ndtri(np.clip(u, 1e-16, 1.0 - 1e-16))
        logw = np.sum(np.log(s) - 0.5 * pts ** 2 * (1.0 - 1.0 / s ** 2), axis=1).reshape(R, per)
        w = np.exp(logw - logw.max(axis=1, keepdims=True))
        w = w / w.sum(axis=1, keepdims=True)                                                 # (R, per)
        W = np.zeros((R, R * per))
        for k in range(R):
            W[k, k * per:(k + 1) * per] = w[k]
        w_outer = w.reshape(-1) / R
    return RSBRule(outer=np.asarray(pts, np.float64), outer_weights=np.asarray(w_outer, np.float64),
                   replica_weights=np.asarray(W, np.float64), inner=np.asarray(inner.points),
                   inner_weights=np.asarray(inner.weights))


# ----------------------------------------------------------------------------
# Models: the state vector, the entropic term, the proximal problems at the nodes
# ----------------------------------------------------------------------------


def ridge_entropic(q0, delta, V0, c, y, lam):
    """The ridge penalty's entropic term of `Phi` (per dimension, sign of an energy):
    `-log(1 + y Delta / V0) / (2 y) - (q0 - c) / (2 (V0 + y Delta)) + lam (q0 + Delta) / 2`, `c = theta0^2 + |m|^2`
    (the overlaps with the teacher and the positional directions). Its `Delta -> 0` limit is the RS term
    `-(q0 - c) / (2 V0) + lam q0 / 2` for every `y`."""
    return -jnp.log1p(y * delta / V0) / (2.0 * y) - (q0 - c) / (2.0 * (V0 + y * delta)) + lam * (q0 + delta) / 2.0


@struct.dataclass
class TiedAttentionRSB:
    """The tied-attention model's 1RSB problem (`L = 2` or any `L`, `r = t = 1`).

    State vector `u = (q0, s, V0, m_1 .. m_K, theta0, y)` with `Delta = s^2` (so that `Delta = 0`, the RS point, is
    an interior point of the coordinates and `Phi` is even in `s`). `params`: `TiedAttentionParams`.
    """

    params: TiedAttentionParams

    @property
    def names(self) -> tuple:
        return ("q0", "s") + ("V0",) + tuple(f"m{k}" for k in range(self.params.K)) + ("theta0", "y")

    @property
    def n(self) -> int:
        return 5 + self.params.K

    def unpack(self, u):
        K = self.params.K
        return dict(q0=u[0], delta=u[1] ** 2, V0=u[2], m=u[3:3 + K], theta0=u[3 + K], y=u[4 + K])

    def alpha(self):
        return self.params.alpha

    def valid(self, u) -> Array:
        d = self.unpack(u)
        ok = (d["q0"] > 0) & (d["V0"] > 0) & (d["y"] > 0) & (d["theta0"] ** 2 < d["q0"])
        return ok & jnp.all(jnp.isfinite(u))

    def entropic(self, u):
        d = self.unpack(u)
        c = d["theta0"] ** 2 + jnp.sum(d["m"] ** 2)
        return ridge_entropic(d["q0"], d["delta"], d["V0"], c, d["y"], self.params.lam)

    def prox(self):
        return closed_form_prox(self.params)

    def node_problems(self, u, rule: RSBRule):
        """`(node_thetas, shared, omega (N, L))`: the prox problem of every node (outer-major, `N = No Ni`)."""
        p = self.params
        d = self.unpack(u)
        L = p.L
        sig = p.sigma
        xi, eta = rule.outer[:, :L], rule.outer[:, L:2 * L]
        sq = jnp.sqrt(d["q0"])
        B = d["theta0"] / sq
        omega0 = sig[None] * sq * xi + (p.C @ d["m"])[None]                                   # (No, L)
        hstar = sig[None] * (B * xi + jnp.sqrt(jnp.maximum(1.0 - B * B, 0.0)) * eta)          # (No, L)
        T = jax.vmap(lambda hs: p.target(hs[:, None], p))(hstar)                              # (No, L, L)
        omega = omega0[:, None, :] + sig[None, None] * jnp.abs(u[1]) * rule.inner[None]       # (No, Ni, L)
        No, Ni = omega.shape[:2]
        omega = omega.reshape(No * Ni, L, 1)
        T = jnp.repeat(T, Ni, axis=0)
        V_inv = (1.0 / (sig**2 * d["V0"]))[:, None, None]
        return (omega, T), (V_inv, p), omega.reshape(No * Ni, L)

    def replicon_metric(self, shared):
        """`(Vb (n, n), S (L, L))` for the replicons: the block-diagonal prox precision of the `L` tokens and
        `S = sigma^2 sigma^2^T`."""
        V_inv = shared[0]
        s2 = self.params.sigma ** 2
        return jax.scipy.linalg.block_diag(*[V_inv[l] for l in range(self.params.L)]), s2[:, None] * s2[None, :]

    def observables(self, u, test_rule: Quadrature):
        """`test_error` of one state (self-overlap `q1 = q0 + Delta`, `theta0`, `m`: a state's test error depends
        only on its own overlaps) and the per-token `q1 = sigma^2 (q0 + Delta)`."""
        from phasejax.theory.updates import test_error

        d = self.unpack(u)
        ov = Overlaps(q0=jnp.reshape(d["q0"] + d["delta"], (1, 1)), m=d["m"][:, None],
                      V0=jnp.reshape(d["V0"], (1, 1)), theta0=jnp.reshape(d["theta0"], (1, 1)))
        return dict(test_error=test_error(ov, self.params, test_rule))


def _quadratic_hinge_objective(h, theta):
    """`(h - omega)^2 V_inv / 2 + relu(kappa - h)^2 / 2` for `h (1,)`; `theta = (omega (1, 1), V_inv, kappa)`."""
    omega, V_inv, kappa = theta
    return 0.5 * V_inv * (h[0] - omega[0, 0]) ** 2 + 0.5 * jnp.maximum(kappa - h[0], 0.0) ** 2


@struct.dataclass
class PerceptronRSB:
    """The spherical perceptron (`|w|^2 = d`) storing `alpha d` random patterns with the quadratic hinge loss
    `relu(kappa - h)^2 / 2` (`kappa < 0`: a negative margin, a non-convex problem), at zero temperature in its
    UNSAT phase: the reference model of the tests.

    State vector `u = (s, V, y)` with `Delta = s^2` and `q0 = 1 - Delta` (the spherical constraint, `q1 = 1`).
    Entropic term: `-log(1 + y Delta / V) / (2 y) - q0 / (2 (V + y Delta))`. Its RS energy has the closed form
    `(sqrt(alpha / alpha_G) - 1)^2 / 2`, `alpha_G = 1 / int_{-kappa}^inf Dt (t + kappa)^2` (Gardner's capacity).
    """

    alpha_: Array
    kappa: Array

    names = ("s", "V", "y")
    n = 3

    def unpack(self, u):
        delta = u[0] ** 2
        return dict(q0=1.0 - delta, delta=delta, V0=u[1], y=u[2])

    def alpha(self):
        return self.alpha_

    def valid(self, u) -> Array:
        d = self.unpack(u)
        return (d["q0"] > 0) & (d["V0"] > 0) & (d["y"] > 0) & jnp.all(jnp.isfinite(u))

    def entropic(self, u):
        d = self.unpack(u)
        return ridge_entropic(d["q0"], d["delta"], d["V0"], 0.0, d["y"], 0.0)

    def prox(self):
        return _quadratic_hinge_objective, None

    def node_problems(self, u, rule: RSBRule):
        d = self.unpack(u)
        omega = jnp.sqrt(d["q0"]) * rule.outer[:, :1][:, None, :] + jnp.abs(u[0]) * rule.inner[None]   # (No, Ni, 1)
        N = omega.shape[0] * omega.shape[1]
        omega = omega.reshape(N, 1, 1)
        return (omega,), (1.0 / d["V0"], self.kappa), omega.reshape(N, 1)

    def replicon_metric(self, shared):
        """`(Vb (1, 1), S (1, 1))`: the prox precision `1 / V` and a unit token scale."""
        return jnp.reshape(shared[0], (1, 1)), jnp.ones((1, 1), jnp.result_type(shared[0]))

    def observables(self, u, test_rule):
        return {}


# ----------------------------------------------------------------------------
# The free energy and its derivatives
# ----------------------------------------------------------------------------


class Evaluation(NamedTuple):
    """`Phi` at a state with its derivatives: `phi ()`, `grad (n,)`, `hess (n, n)` (main rule), every replica's
    `phi_replicas (R,)` and `grad_replicas (R, n)`, the node minimisers `h (N, n_h)` and the largest prox gradient
    `prox_residual ()`."""

    phi: Array
    grad: Array
    hess: Array
    phi_replicas: Array
    grad_replicas: Array
    h: Array
    prox_residual: Array


def _energies(model, u, rule: RSBRule, starts_fn, settings: LaneSettings):
    """`Phi` on the main rule and every replica `(1 + R,)`, the minimisers and the prox residual."""
    objective, derivatives = model.prox()
    node_thetas, shared, omega = model.node_problems(u, rule)
    starts, active = starts_fn(jax.lax.stop_gradient(omega))
    h, gnorm, _, _ = lowest_minima(objective, derivatives, settings, node_thetas, shared, starts, active)
    M = jax.vmap(lambda hh, *th: objective(hh, tuple(th) + tuple(shared)))(h, *node_thetas)
    No, Ni = rule.outer.shape[0], rule.inner.shape[0]
    y = model.unpack(u)["y"]
    logz = jax.nn.logsumexp(-y * M.reshape(No, Ni), b=jnp.asarray(rule.inner_weights)[None], axis=1)
    per_outer = -logz / y
    W = jnp.concatenate([jnp.asarray(rule.outer_weights)[None], jnp.asarray(rule.replica_weights)])
    phi = model.entropic(u) + model.alpha() * (W @ per_outer)
    return phi, (jax.lax.stop_gradient(h), jnp.max(gnorm))


def evaluate(model, u: Array, rule: RSBRule, starts_fn, settings: LaneSettings) -> Evaluation:
    """`Phi`, its gradient and Hessian at `u (n,)` (forward-mode at fixed nodes, minimisers by the implicit function
    theorem) and the replicas' values and gradients."""

    def grads(v):
        G, (phis, aux) = jax.jacfwd(lambda w: (lambda r: (r[0], r))(_energies(model, w, rule, starts_fn, settings)),
                                    has_aux=True)(v)
        return G[0], (G, phis, aux)

    H, (G, phis, (h, pres)) = jax.jacfwd(grads, has_aux=True)(u)
    return Evaluation(phi=phis[0], grad=G[0], hess=0.5 * (H + H.T), phi_replicas=phis[1:], grad_replicas=G[1:], h=h,
                      prox_residual=pres)


def warm_starts(warm: Array):
    """Starts `(N, 4, n)`: the previous minimiser, its mirror, the field and the mirrored field."""

    def fn(omega):
        return jnp.stack([warm, -warm, omega, -omega], axis=1), jnp.ones((1, 4), bool)

    return fn


def dense_starts(warm: Array | None, n_h: int):
    """Starts `(N, 4 + G^n_h, n_h)`: those of `warm_starts` (the field twice where `warm` is `None`) and the
    tensor grid `DENSE_GRID^n_h`."""
    grid = np.stack(np.meshgrid(*([np.asarray(DENSE_GRID)] * n_h), indexing="ij"), -1).reshape(-1, n_h)

    def fn(omega):
        w = omega if warm is None else warm
        g = jnp.broadcast_to(jnp.asarray(grid, omega.dtype)[None], (omega.shape[0],) + grid.shape)
        st = jnp.concatenate([jnp.stack([w, -w, omega, -omega], axis=1), g], axis=1)
        return st, jnp.ones((1, st.shape[1]), bool)

    return fn


def dense_minima(objective, derivatives, node_thetas, shared, omega: Array, warm: Array | None = None, *,
                 n_steps: int = 60, stop_tol: float = 1e-12):
    """Every node's lowest minimum over the dense starts (`dense_starts`), with every start's end point:
    `(h (N, n), value (N,), h_starts (N, S, n), values (N, S))`. The multistart of the 1RSB energetic term."""
    n_h = omega.shape[1]
    starts, active = dense_starts(warm, n_h)(omega)
    settings = LaneSettings(max_steps=n_steps, stop_tol=stop_tol)
    h, _, _, hs = lowest_minima(objective, derivatives, settings, node_thetas, shared, starts, active)
    val = lambda hh, *th: objective(hh, tuple(th) + tuple(shared))  # noqa: E731
    values = jax.vmap(lambda hk, *th: jax.vmap(lambda hh: val(hh, *th))(hk))(hs, *node_thetas)
    return h, jax.vmap(val)(h, *node_thetas), hs, values


# ----------------------------------------------------------------------------
# The solver
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RSBConfig:
    """Settings of the 1RSB solver (hashable; part of the compilation key).

    Attributes:
      tol: stop when the Newton step is below `tol` in relative size (`|du_i| / max(|u_i|, floor_i)`), with every
        node's prox converged.
      gtol: or when the scaled gradient `|grad Phi * max(|u|, floor)|` is below `gtol` (an energy per dimension:
        moving any coordinate by its own size changes `Phi` by less than that to first order), with every node's
        prox converged; where `Phi` is flat in a direction (`y` near the RS limit) the Newton step is large while
        the gradient is not.
      max_iter: cap on evaluations per stage (two stages: solve, dense check, solve again from the dense minima).
      max_step: cap on a step's relative size per coordinate.
      prox_steps: damped Newton steps per prox start during the solve (the dense check takes 60).
      prox_tol: a start stops when its gradient is below this.
    """

    tol: float = 1e-7
    gtol: float = 1e-11
    max_iter: int = 40
    max_step: float = 0.3
    prox_steps: int = 30
    prox_tol: float = 1e-12

    def __post_init__(self):
        if not self.tol > 0:
            raise ValueError(f"tol must be > 0, got {self.tol}")
        if not self.gtol > 0:
            raise ValueError(f"gtol must be > 0, got {self.gtol}")
        for name in ("max_iter", "prox_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not self.max_step > 0:
            raise ValueError(f"max_step must be > 0, got {self.max_step}")
        if not self.prox_tol > 0:
            raise ValueError(f"prox_tol must be > 0, got {self.prox_tol}")


class RSBProblem(NamedTuple):
    """What is solved: the `model`, the `rule`, which coordinates are `free (n,)` and their scale floors
    `floor (n,)`."""

    model: object
    rule: RSBRule
    free: Array
    floor: Array


class RSBState(NamedTuple):
    """Solver state: the accepted point `u` and its evaluation `ev`, the merit `merit ()` (scaled gradient norm),
    the Levenberg-Marquardt parameter `mu ()`, the relative Newton step at `u` (`residual ()`), evaluations `it`."""

    u: Array
    ev: Evaluation
    merit: Array
    mu: Array
    residual: Array
    it: Array


def _scale(problem, u):
    return jnp.maximum(jnp.abs(u), problem.floor)


def _newton_step(problem, u, ev, mu):
    """`du` solving `(H^T H + mu I) du = -H^T g` on the free coordinates in scaled variables (`mu = 0`: Newton)."""
    sc = _scale(problem, u)
    g = jnp.where(problem.free, ev.grad * sc, 0.0)
    both = problem.free[:, None] & problem.free[None, :]
    H = jnp.where(both, ev.hess * sc[:, None] * sc[None, :], jnp.eye(u.shape[0], dtype=u.dtype))
    A = H.T @ H + mu * jnp.diag(jnp.diag(H.T @ H) + 1e-30)
    dv = -jnp.linalg.solve(A, H.T @ g)
    dv = jnp.where(problem.free & jnp.isfinite(dv), dv, 0.0)
    return dv * sc


def _merit(problem, u, ev):
    return jnp.sqrt(jnp.sum(jnp.where(problem.free, ev.grad * _scale(problem, u), 0.0) ** 2))


def _residual(problem, u, ev):
    du = _newton_step(problem, u, ev, 0.0)
    return jnp.max(jnp.abs(du) / _scale(problem, u))


@dataclasses.dataclass(frozen=True)
class RSBNewton:
    """Levenberg-Marquardt on `grad Phi = 0`: settings only (`RSBConfig`); the problem is an argument.

    A step from the accepted point is capped to `max_step` in relative size and halved until the state is valid;
    the trial point is evaluated and accepted when it lowers the merit `|grad Phi|` (scaled), else `mu` grows and a
    shorter step is tried from the accepted point. Done when the Newton step at the accepted point is below `tol`
    (relative) or the scaled gradient below `gtol`, and every prox start kept has converged."""

    config: RSBConfig

    def settings(self) -> LaneSettings:
        return LaneSettings(max_steps=self.config.prox_steps, stop_tol=self.config.prox_tol)

    def init(self, problem: RSBProblem, u0: Array, warm: Array) -> RSBState:
        ev = evaluate(problem.model, u0, problem.rule, warm_starts(warm), self.settings())
        return RSBState(u=u0, ev=ev, merit=_merit(problem, u0, ev), mu=jnp.asarray(1e-6, u0.dtype),
                        residual=_residual(problem, u0, ev), it=jnp.asarray(1))

    def step(self, problem: RSBProblem, st: RSBState) -> RSBState:
        du = _newton_step(problem, st.u, st.ev, st.mu)
        rel = jnp.max(jnp.abs(du) / _scale(problem, st.u))
        du = du * jnp.minimum(1.0, self.config.max_step / jnp.maximum(rel, 1e-300))
        ts = 0.5 ** jnp.arange(12)
        ok = jax.vmap(lambda t: problem.model.valid(st.u + t * du))(ts)
        t = ts[jnp.argmax(ok)]
        trial = st.u + jnp.where(jnp.any(ok), t, 0.0) * du
        ev = evaluate(problem.model, trial, problem.rule, warm_starts(st.ev.h), self.settings())
        merit = _merit(problem, trial, ev)
        accept = jnp.isfinite(merit) & (merit < st.merit) & jnp.all(jnp.isfinite(ev.hess))
        pick = lambda a, b: jax.tree_util.tree_map(lambda x, y_: jnp.where(accept, x, y_), a, b)  # noqa: E731
        u, ev_new = pick(trial, st.u), pick(ev, st.ev)
        mu = jnp.where(accept, jnp.maximum(st.mu * 0.1, 1e-12), st.mu * 10.0)
        return RSBState(u=u, ev=ev_new, merit=jnp.where(accept, merit, st.merit), mu=mu,
                        residual=jnp.where(accept, _residual(problem, u, ev_new), st.residual), it=st.it + 1)

    def terminate(self, problem: RSBProblem, st: RSBState):
        bad = ~jnp.all(jnp.isfinite(st.u)) | ~jnp.isfinite(st.ev.phi)
        small = (st.residual < self.config.tol) | (st.merit < self.config.gtol)
        done = (small & (st.ev.prox_residual < 1e-8)) | bad | (st.mu > 1e10)
        status = jnp.where(bad, Status.INVALID_ITERATE,
                           jnp.where(st.mu > 1e10, Status.MAX_ITERATIONS, Status.CONVERGED))
        return done, status


# ----------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------


@struct.dataclass
class RSBResult(HasStatus):
    """A 1RSB (or RS) stationary point with its quadrature errors (95% half-widths, `_err`).

    Attributes:
      u: `(n,)` the state vector (the model's `names`); u_err: `(n,)`.
      q0, delta, q1, V0, y: `()` (`q1 = q0 + Delta`; per-token values are `sigma_l^2` times these); with `_err`.
      phi: `()` the free energy `Phi(y)`; energy: `()` the energy of the states `e = Phi + y dPhi/dy` (the
        training loss per dimension of a ground state where `Sigma = 0`); complexity: `()` `Sigma = y^2 dPhi/dy`;
        each with `_err`.
      test_error: `()` a state's test error (attention model; NaN otherwise), with `_err`.
      phi_replicas, energy_replicas: `(R,)` the replicas' estimates of `phi` and `energy` (first order in their
        shift of the state): two results on the same rule give a difference with correlated errors
        (`paired_difference`).
      missed_minima: `()` nodes where the final dense check found a minimum lower than the one kept (by more than
        `1e-10`); dense_gain: `()` the largest such gap.
      residual: `()` relative Newton step at the solution; prox_residual: `()` largest prox gradient kept;
      iterations: `()` evaluations; status: `()` `phasejax.solvers.Status` code.
    """

    u: Array
    u_err: Array
    q0: Array
    q0_err: Array
    delta: Array
    delta_err: Array
    q1: Array
    q1_err: Array
    V0: Array
    V0_err: Array
    y: Array
    y_err: Array
    phi: Array
    phi_err: Array
    energy: Array
    energy_err: Array
    complexity: Array
    complexity_err: Array
    test_error: Array
    test_error_err: Array
    phi_replicas: Array
    energy_replicas: Array
    missed_minima: Array
    dense_gain: Array
    residual: Array
    prox_residual: Array
    iterations: Array
    status: Array

    @property
    def converged(self) -> Array:
        return self.status == Status.CONVERGED


def _dense_check(model, u, rule, warm):
    """Nodes whose dense multistart finds a lower minimum than the kept one: `(count, largest gap, dense
    minimisers)`."""
    objective, derivatives = model.prox()
    node_thetas, shared, omega = model.node_problems(u, rule)
    h, value, _, _ = dense_minima(objective, derivatives, node_thetas, shared, omega, warm)
    kept = jax.vmap(lambda hh, *th: objective(hh, tuple(th) + tuple(shared)))(warm, *node_thetas)
    gap = kept - value
    missed = gap > 1e-10 * (1.0 + jnp.abs(value))
    return jnp.sum(missed), jnp.max(jnp.where(missed, gap, 0.0)), h


def _postprocess(model, problem: RSBProblem, st: RSBState, status, missed, gain, test_rule) -> RSBResult:
    """Observables and their errors at the solution (replica gradients propagated through the Hessian)."""
    u, ev = st.u, st.ev
    n = u.shape[0]
    free = problem.free
    both = free[:, None] & free[None, :]
    H = jnp.where(both, ev.hess, jnp.eye(n, dtype=u.dtype))
    du_rep = -jax.vmap(lambda g: jnp.linalg.solve(H, jnp.where(free, g, 0.0)))(ev.grad_replicas)    # (R, n)
    u_rep = u[None] + du_rep
    y_index = n - 1 if model.names[-1] == "y" else None

    def obs(v, phi, g):
        d = model.unpack(v)
        dphi_dy = g[y_index] if y_index is not None else jnp.zeros((), v.dtype)
        out = dict(q0=d["q0"], delta=d["delta"], q1=d["q0"] + d["delta"], V0=d["V0"], y=d["y"], phi=phi,
                   energy=phi + d["y"] * dphi_dy, complexity=d["y"] ** 2 * dphi_dy)
        out.update(model.observables(v, test_rule) if test_rule is not None else {})
        return out

    main = obs(u, ev.phi, ev.grad)
    # each replica: its own energy and gradient at the shifted state (first order: phi moves by g . du)
    reps = jax.vmap(obs)(u_rep, ev.phi_replicas, ev.grad_replicas + du_rep @ ev.hess)
    err = {k: spread_error(main[k], reps[k], main_is_mean=True) for k in main}
    u_err = spread_error(u, u_rep, main_is_mean=True)
    nan = jnp.full((), jnp.nan, u.dtype)
    return RSBResult(u=u, u_err=u_err, q0=main["q0"], q0_err=err["q0"], delta=main["delta"], delta_err=err["delta"],
                     q1=main["q1"], q1_err=err["q1"], V0=main["V0"], V0_err=err["V0"], y=main["y"], y_err=err["y"],
                     phi=main["phi"], phi_err=err["phi"], energy=main["energy"], energy_err=err["energy"],
                     complexity=main["complexity"], complexity_err=err["complexity"],
                     test_error=main.get("test_error", nan), test_error_err=err.get("test_error", nan),
                     phi_replicas=reps["phi"], energy_replicas=reps["energy"],
                     missed_minima=missed, dense_gain=gain, residual=st.residual, prox_residual=ev.prox_residual,
                     iterations=st.it, status=status)


def solve_rsb_problem(model, u0: Array, free: Array, rule: RSBRule, config: RSBConfig = RSBConfig(),
                      test_rule: Quadrature | None = None) -> RSBResult:
    """Solve `grad Phi = 0` for `model` from `u0 (n,)` with the coordinates `free (n,)` (bool) free and the others
    held: the nodes are started from the dense grid, solved (`RSBNewton`), checked with the dense multistart and,
    from the dense minima, solved again. Pure; jittable (`model`, `u0`, `free` may be traced) and vmappable."""
    floor = jnp.asarray([1e-3] * u0.shape[0], u0.dtype)
    problem = RSBProblem(model=model, rule=rule, free=jnp.asarray(free, bool), floor=floor)
    solver = RSBNewton(config)
    objective, derivatives = model.prox()
    node_thetas, shared, omega = model.node_problems(u0, rule)
    warm0 = dense_minima(objective, derivatives, node_thetas, shared, omega)[0]
    out = iterate(solver, problem, solver.init(problem, u0, warm0), max_steps=config.max_iter)
    _, _, warm1 = _dense_check(model, out.state.u, rule, out.state.ev.h)
    st1 = out.state
    ev1 = evaluate(model, st1.u, rule, warm_starts(warm1), solver.settings())
    st1 = RSBState(u=st1.u, ev=ev1, merit=_merit(problem, st1.u, ev1), mu=jnp.asarray(1e-6, u0.dtype),
                   residual=_residual(problem, st1.u, ev1), it=st1.it + 1)
    out2 = iterate(solver, problem, st1, max_steps=config.max_iter)
    missed, gain, _ = _dense_check(model, out2.state.u, rule, out2.state.ev.h)
    status = jnp.where((out.status == Status.INVALID_ITERATE) | (out2.status == Status.INVALID_ITERATE),
                       jnp.int32(Status.INVALID_ITERATE), out2.status)
    return _postprocess(model, problem, out2.state, status, missed, gain, test_rule)


_solve_jit = jax.jit(solve_rsb_problem, static_argnames=("config",))


# ----------------------------------------------------------------------------
# Entry points for the attention model
# ----------------------------------------------------------------------------

RSB_MODES = ("ground", "fixed_y", "rs")
"""`ground`: `y` extremised (`Sigma = 0`); `fixed_y`: `y` held at its start (one point of `Sigma(y)`); `rs`:
`Delta` held at 0 (the RS fixed point by the same code path)."""


def attention_rule(params: TiedAttentionParams, *, log2_n: int = 10, n_replicas: int = 4, inner_order: int = 5,
                   seed: int = 0) -> RSBRule:
    """The default nested rule of the attention model: `n_replicas x 2**log2_n` Sobol points in the `2 L` dimensions
    of `(xi, eta)`, Gauss-Hermite with `inner_order` nodes per token for `z`."""
    return rsb_rule(2 * params.L, params.L, log2_n=log2_n, n_replicas=n_replicas, inner_order=inner_order,
                    seed=seed)


def attention_state(q0, delta, V0, m, theta0, y) -> Array:
    """The state vector `u` of `TiedAttentionRSB` from the order parameters (`m`: a number or `(K,)`)."""
    m = np.atleast_1d(np.asarray(m, np.float64))
    return np.concatenate([np.asarray([q0, np.sqrt(delta), V0], np.float64), m, np.asarray([theta0, y], np.float64)])


def attention_free(params: TiedAttentionParams, branch: str, mode: str) -> np.ndarray:
    """Which coordinates of `u` are solved: `branch` holds `theta0` (positional) or `m` (semantic) at zero, `mode`
    holds `y` (`fixed_y`, `rs`) and `s` (`rs`)."""
    if branch not in ("positional", "semantic"):
        raise ValueError(f"branch must be 'positional' or 'semantic', got {branch!r}")
    if mode not in RSB_MODES:
        raise ValueError(f"mode must be one of {RSB_MODES}, got {mode!r}")
    K = params.K
    free = np.ones(5 + K, bool)
    if branch == "positional":
        free[3 + K] = False
    else:
        free[3:3 + K] = False
    if mode in ("fixed_y", "rs"):
        free[4 + K] = False
    if mode == "rs":
        free[1] = False
    return free


@uses_float64
def solve_rsb(params: TiedAttentionParams, u0, *, branch: str = "positional", mode: str = "ground",
              rule: RSBRule | None = None, config: RSBConfig = RSBConfig(), test_order: int = 10) -> RSBResult:
    """Solve the 1RSB (or, `mode="rs"`, the RS) equations of the attention model from the state `u0`
    (`attention_state`; for `rs` its `Delta` is set to 0) on `branch` (docs/rsb.md).

    `rule`: `attention_rule(params)` by default. `test_order`: Gauss-Hermite nodes per dimension of the test
    error's average. Float64 inside a scoped switch; concrete invalid inputs raise `ValueError` naming them.

    Example:
      >>> from phasejax.theory import make_params
      >>> from phasejax.theory.rsb import attention_state, solve_rsb
      >>> p = make_params(1.25, 0.3)
      >>> res = solve_rsb(p, attention_state(0.2, 0.01, 40.0, 1.0, 0.0, 300.0))   # doctest: +SKIP
    """
    validate_params(params)
    if params.r != 1 or params.t != 1:
        raise ValueError(f"solve_rsb needs r = t = 1, got r={params.r}, t={params.t}")
    free = attention_free(params, branch, mode)
    u0 = jnp.asarray(u0, jnp.float64)
    if u0.shape != (5 + params.K,):
        raise ValueError(f"u0 must have shape ({5 + params.K},) (attention_state), got {u0.shape}")
    model = TiedAttentionRSB(params)
    if not isinstance(u0, jax.core.Tracer):
        d = model.unpack(np.asarray(u0))
        for name in ("q0", "V0", "y"):
            if not d[name] > 0:
                raise ValueError(f"u0: {name} must be > 0, got {float(d[name])}")
        if not d["theta0"] ** 2 < d["q0"]:
            raise ValueError(f"u0: theta0^2 must be < q0, got theta0={float(d['theta0'])}, q0={float(d['q0'])}")
    held_zero = ~free & (np.arange(free.size) != 4 + params.K)
    u0 = jnp.where(jnp.asarray(held_zero), 0.0, u0)
    if rule is None:
        rule = attention_rule(params)
    if mode == "rs":
        rule = rule.rs()
    return _solve_jit(model, u0, jnp.asarray(free), rule, config, gauss_hermite(2 * params.L, test_order))


@uses_float64
def solve_perceptron_rsb(alpha, kappa, u0, *, mode: str = "ground", rule: RSBRule | None = None,
                         config: RSBConfig = RSBConfig()) -> RSBResult:
    """The reference model (`PerceptronRSB`) by the same code path: `u0 = (sqrt(Delta), V, y)`; `mode` as
    `solve_rsb` (`rs` holds `Delta = 0`: the RS energy `(sqrt(alpha / alpha_G) - 1)^2 / 2`; `ground` frees `y`:
    the state of `Sigma = 0`, found from a start near it). `rule`: `perceptron_rule()` by default."""
    if not np.all(np.asarray(alpha) > 0):
        raise ValueError(f"alpha must be > 0, got {alpha}")
    if not np.all(np.asarray(kappa) < 0):
        raise ValueError(f"kappa must be < 0 (a negative margin), got {kappa}")
    if mode not in RSB_MODES:
        raise ValueError(f"mode must be one of {RSB_MODES}, got {mode!r}")
    u0 = jnp.asarray(u0, jnp.float64)
    if u0.shape != (3,):
        raise ValueError(f"u0 must be (sqrt(Delta), V, y), got shape {u0.shape}")
    free = np.asarray([mode != "rs", True, mode == "ground"])
    if mode == "rs":
        u0 = u0.at[0].set(0.0)
    if rule is None:
        rule = perceptron_rule()
    if mode == "rs":
        rule = rule.rs()
    model = PerceptronRSB(alpha_=jnp.asarray(alpha, jnp.float64), kappa=jnp.asarray(kappa, jnp.float64))
    return _solve_jit(model, u0, jnp.asarray(free), rule, config, None)


@struct.dataclass
class RSBReplicon:
    """The two replicon eigenvalues of a 1RSB state (docs/rsb.md), with 95% quadrature half-widths (`_err`).

    Attributes:
      within: `()` within the states (the innermost level): `alpha V0^2 sum_{l, l'} sigma_l^2 sigma_l'^2
        E_outer <J_{l l'}^2>_y`, the RS replicon's average with every outer node's inner nodes weighted by
        `w_i exp(-y M_i)` (the states' own measure), pointwise Jacobians (no jump term).
      within_jump: `()` the jump strength `A1` of the within-state replicon: `tie_width (R1(tie_width) - within)`,
        the coefficient of `1 / tie_width` (`> 0`: the within-state replicon diverges as the smoothing goes to zero,
        as the RS one does where `A > 0`).
      between: `()` between the states (the `q0` level): `alpha (V0 + y Delta)^2 sum sigma_l^2 sigma_l'^2
        E_outer [(d^2 phi_in / d omega0_l d omega0_l')^2]` with `phi_in = -(1 / y) log E_z exp(-y M)`, whose
        Hessian is `<H>_y - y Cov_y(grad M)` (pointwise Hessians of the envelope: a smooth inner average has no
        jump term).
      two_minima: `()` weight (outer times the states' inner measure) of nodes with a second minimum within
        `20 tie_width` of the lowest.
      tie_width: `()`.
    At `Delta = 0` both `within` and `between` are the RS regular replicon and `within_jump` its `A`.
    """

    within: Array
    within_err: Array
    within_jump: Array
    within_jump_err: Array
    between: Array
    between_err: Array
    two_minima: Array
    tie_width: Array


def rsb_replicon(model, u, rule: RSBRule, *, tie_width: float = 1e-3) -> RSBReplicon:
    """The within-state and between-state replicons (`RSBReplicon`) of any model of this module (`TiedAttentionRSB`,
    `PerceptronRSB`) at the state `u (n,)` on `rule` (the rule it was solved on). Float64 inside a scoped switch."""
    if not (isinstance(tie_width, (int, float)) and tie_width > 0):
        raise ValueError(f"tie_width must be a number > 0, got {tie_width!r}")
    with float64_scope():
        return _replicon_jit(model, jnp.asarray(u, jnp.float64), rule, float(tie_width))


def _tilted_inner_weights(model, u, rule: RSBRule, M):
    """The states' measure on the inner nodes of every outer node: `w_i exp(-y M_i) / sum`, `(No, Ni)`."""
    No, Ni = rule.outer.shape[0], rule.inner.shape[0]
    y = model.unpack(u)["y"]
    return jax.nn.softmax(-y * M.reshape(No, Ni) + jnp.log(jnp.asarray(rule.inner_weights))[None], axis=1)


def attention_replicon(params: TiedAttentionParams, result: RSBResult, rule: RSBRule, *,
                       tie_width: float = 1e-3) -> RSBReplicon:
    """The within-state and between-state replicons (`RSBReplicon`) of the attention model's 1RSB state `result`
    on `rule` (the rule it was solved on; for an RS result, `rule.rs()`). Every node's minima come from the dense
    multistart (`dense_minima`); a node's minima are blended at `tie_width` (an energy) for the jump term, as the
    RS replicon does (`phasejax.theory.replicon`). Float64 inside a scoped switch."""
    if not (isinstance(tie_width, (int, float)) and tie_width > 0):
        raise ValueError(f"tie_width must be a number > 0, got {tie_width!r}")
    with float64_scope():
        return _replicon_jit(TiedAttentionRSB(params), jnp.asarray(result.u, jnp.float64), rule,
                             float(tie_width))


def _replicon_values(model, u, rule, tie_width):
    from phasejax.theory.prox import tie_weights

    d = model.unpack(u)
    objective, derivatives = model.prox()
    node_thetas, shared, omega = model.node_problems(u, rule)
    h, value, hs, values = dense_minima(objective, derivatives, node_thetas, shared, omega)
    n = omega.shape[1]
    Vb, S = model.replicon_metric(shared)
    eye = jnp.eye(n, dtype=omega.dtype)
    hess = (lambda hh, th: derivatives(hh, th)[2]) if derivatives is not None else jax.hessian(objective)

    def node(w, hk, vals, *th):
        theta = tuple(th) + tuple(shared)
        Hs = jax.vmap(lambda hh: hess(hh, theta))(hk)
        Js = jax.vmap(lambda H: Vb @ (jnp.linalg.solve(0.5 * (H + H.T), Vb) - eye))(Hs)      # d f / d omega
        best = jnp.argmin(vals)
        fk = (hk - w[None]) @ Vb.T
        wts = tie_weights(vals, tie_width, hk)
        dev = fk - (wts @ fk)[None]
        J_tau = jnp.einsum("k,kab->ab", wts, Js) + jnp.einsum("k,ka,kb->ab", wts, dev, dev) / tie_width
        near = tie_weights(vals, 20.0 * tie_width, hk)
        return Js[best], J_tau, -fk[best], jnp.sum(near > 1e-9) > 1

    J, J_tau, g, two = jax.vmap(node)(omega, hs, values, *node_thetas)
    tilt = _tilted_inner_weights(model, u, rule, value)                                      # (No, Ni)
    No, Ni = tilt.shape

    def within(J_):
        per = jnp.einsum("lm,nlm->n", S, J_ ** 2).reshape(No, Ni)
        return jnp.sum(tilt * per, axis=1)                                                  # (No,)

    H = -J.reshape(No, Ni, n, n)                                                            # envelope Hessians
    gg = g.reshape(No, Ni, n)
    gbar = jnp.einsum("oi,oia->oa", tilt, gg)
    cov = jnp.einsum("oi,oia,oib->oab", tilt, gg, gg) - gbar[:, :, None] * gbar[:, None, :]
    hess_in = jnp.einsum("oi,oiab->oab", tilt, H) - d["y"] * cov
    between = jnp.einsum("lm,olm->o", S, hess_in ** 2)
    two_w = jnp.sum(tilt * two.reshape(No, Ni), axis=1)
    return within(J), within(J_tau), between, two_w, d


def _rsb_replicon(model, u, rule, tie_width):
    reg, tau, betw, two, d = _replicon_values(model, u, rule, tie_width)
    a = model.alpha()
    V0 = d["V0"]
    W = jnp.concatenate([jnp.asarray(rule.outer_weights)[None], jnp.asarray(rule.replica_weights)])
    R1 = a * V0 ** 2 * (W @ reg)
    R1t = a * V0 ** 2 * (W @ tau)
    R0 = a * (V0 + d["y"] * d["delta"]) ** 2 * (W @ betw)
    A1 = tie_width * (R1t - R1)
    err = lambda x: spread_error(x[0], x[1:], main_is_mean=True)  # noqa: E731
    return RSBReplicon(within=R1[0], within_err=err(R1), within_jump=A1[0], within_jump_err=err(A1),
                       between=R0[0], between_err=err(R0), two_minima=W[0] @ two,
                       tie_width=jnp.asarray(tie_width, u.dtype))


_replicon_jit = jax.jit(_rsb_replicon, static_argnames=("tie_width",))


def paired_difference(a: RSBResult, b: RSBResult, key: str = "energy") -> tuple[np.ndarray, float]:
    """`a.key - b.key` and its 95% error from the replicas of both results (the same rule: the replicas' errors are
    correlated and cancel in part), for `key` in `("phi", "energy")`."""
    from phasejax.theory.results import t_quantile_975

    diff = np.asarray(getattr(a, key), np.float64) - np.asarray(getattr(b, key), np.float64)
    reps = np.asarray(getattr(a, key + "_replicas"), np.float64) - np.asarray(getattr(b, key + "_replicas"), np.float64)
    K = reps.shape[0]
    return diff, float(t_quantile_975(K - 1)) * np.std(reps, ddof=1) / np.sqrt(K)


# ----------------------------------------------------------------------------
# The ground, threshold and marginal states: one-dimensional searches in y
# ----------------------------------------------------------------------------


@struct.dataclass
class LocatedState(HasStatus):
    """One 1RSB state located in `y` (docs/rsb.md, "The ground, threshold and marginal states"), with 95% errors
    (`_err`) from the spread of the same search repeated on each replica of the outer rule alone.

    Attributes:
      y: `()` the Parisi parameter of the state; phi, energy, complexity: `()` `Phi(y)`, `e = Phi + y dPhi/dy`,
        `Sigma = y^2 dPhi/dy`; delta, V0: `()` `Delta = q1 - q0` and the response within the state; within,
        between: `()` its replicons (`RSBReplicon`; `within` without the jump term), within_jump: `()` `A1`.
        Each with `_err` (NaN where the replicas were not searched).
      result: the `RSBResult` of the fixed-`y` solve at `y` on the full rule (the ground state: the solve with `y`
        free); replicon: its `RSBReplicon`.
      residual: `()` the search's criterion at the state: `|Sigma| / e` (ground), `|de/dy| y / e` from a central
        difference (threshold), `|within - 1|` (marginal).
      iterations: `()` fixed-`y` (or free-`y`) solves spent on the full rule.
      status: `()` `phasejax.solvers.Status`: `CONVERGED`; `INVALID_INPUT` where the scan's range holds no such state
        (values NaN); otherwise the worst status of the solves at the state.
    """

    y: Array
    y_err: Array
    phi: Array
    phi_err: Array
    energy: Array
    energy_err: Array
    complexity: Array
    complexity_err: Array
    delta: Array
    delta_err: Array
    V0: Array
    V0_err: Array
    within: Array
    within_err: Array
    within_jump: Array
    between: Array
    between_err: Array
    result: RSBResult | None
    replicon: RSBReplicon | None
    residual: Array
    iterations: Array
    status: Array


@struct.dataclass
class RSBStates:
    """The ground (`Sigma = 0`), threshold (largest complexity, highest energy) and marginal (within-state replicon
    at 1) states of a model (`LocatedState` each), and the fixed-`y` scan they were bracketed on: `scan_y (K,)`,
    `scan_phi`, `scan_energy`, `scan_complexity`, `scan_within` (`(K,)` each, the full rule), `scan_status (K,)`."""

    ground: LocatedState
    threshold: LocatedState
    marginal: LocatedState
    scan_y: Array
    scan_phi: Array
    scan_energy: Array
    scan_complexity: Array
    scan_within: Array
    scan_status: Array


_STATE_KEYS = ("y", "phi", "energy", "complexity", "delta", "V0", "within", "between")


def replica_rule(rule: RSBRule, r: int) -> RSBRule:
    """Replica `r` of `rule` alone: its outer nodes and weights (its two `replica_weights` rows identical, so that
    the solver's own error estimates are zero), the same inner rule."""
    w = np.asarray(rule.replica_weights)[int(r)]
    idx = np.nonzero(w)[0]
    ww = w[idx] / w[idx].sum()
    return RSBRule(outer=np.asarray(rule.outer)[idx], outer_weights=ww, replica_weights=np.stack([ww, ww]),
                   inner=rule.inner, inner_weights=rule.inner_weights)


class _FixedY:
    """Fixed-`y` solves of one model on one rule, warm-started from the solved state nearest in `log y`."""

    def __init__(self, model, free, rule, config, test_rule, tie_width, iy):
        self.model, self.free, self.rule, self.config = model, np.asarray(free, bool), rule, config
        self.test_rule, self.tie_width, self.iy = test_rule, tie_width, iy
        self.solved: dict[float, tuple] = {}
        self.count = 0

    def seed(self, u):
        self.solved[float(u[self.iy])] = (None, None, np.asarray(u))

    def solve(self, y, *, replicon=False):
        y = float(y)
        if y not in self.solved or self.solved[y][0] is None:
            ys = [k for k, v in self.solved.items() if v[0] is not None]
            if ys:
                near = min(ys, key=lambda k: abs(np.log(k / y)))
                u0 = np.asarray(self.solved[near][0].u).copy()
            else:
                u0 = np.asarray(next(iter(self.solved.values()))[2]).copy()
            u0[self.iy] = y
            res = _solve_jit(self.model, jnp.asarray(u0), jnp.asarray(self.free), self.rule, self.config,
                             self.test_rule)
            self.count += 1
            self.solved[y] = (res, None, None)
        res, rep, _ = self.solved[y]
        if replicon and rep is None:
            rep = _replicon_jit(self.model, jnp.asarray(res.u), self.rule, self.tie_width)
            self.solved[y] = (res, rep, None)
        return self.solved[y][:2]

    def ground(self, u0):
        free = self.free.copy()
        free[self.iy] = True
        self.count += 1
        res = _solve_jit(self.model, jnp.asarray(u0), jnp.asarray(free), self.rule, self.config, self.test_rule)
        return res, _replicon_jit(self.model, jnp.asarray(res.u), self.rule, self.tie_width)


def _values(res: RSBResult, rep: RSBReplicon) -> dict:
    return dict(y=float(res.y), phi=float(res.phi), energy=float(res.energy), complexity=float(res.complexity),
                delta=float(res.delta), V0=float(res.V0), within=float(rep.within), between=float(rep.between))


def _locate_ground(fy: _FixedY, lo: float, hi: float, xtol: float):
    """`Sigma(y) = 0` between `lo` (`Sigma > 0`) and `hi` (`Sigma < 0`): the solve with `y` free from the nearer
    end, kept if it converges inside the bracket; else Brent's root of `Sigma(y)` on fixed-`y` solves."""
    from scipy.optimize import brentq

    r_lo, r_hi = fy.solve(lo)[0], fy.solve(hi)[0]
    u0 = np.asarray((r_lo if abs(float(r_lo.complexity)) < abs(float(r_hi.complexity)) else r_hi).u)
    res, rep = fy.ground(u0)
    if int(res.status) == Status.CONVERGED and lo * (1 - 1e-9) <= float(res.y) <= hi * (1 + 1e-9):
        return res, rep
    y = brentq(lambda t: float(fy.solve(t)[0].complexity), lo, hi, xtol=xtol * lo, rtol=1e-12)
    return fy.solve(y, replicon=True)


def _locate_threshold(fy: _FixedY, lo: float, hi: float, xtol: float):
    """The largest complexity: `e(y)` at its maximum in `(lo, hi)` (`dSigma/dy = y de/dy`), by Brent's bounded
    search on fixed-`y` solves."""
    from scipy.optimize import minimize_scalar

    out = minimize_scalar(lambda t: -float(fy.solve(np.exp(t))[0].energy), bounds=(np.log(lo), np.log(hi)),
                          method="bounded", options=dict(xatol=xtol))
    return fy.solve(float(np.exp(out.x)), replicon=True)


def _locate_marginal(fy: _FixedY, lo: float, hi: float, xtol: float):
    """`within(y) = 1` between `lo` and `hi` (a sign change of `within - 1`), by Brent's root on fixed-`y` solves
    with their within-state replicons."""
    from scipy.optimize import brentq

    y = brentq(lambda t: float(fy.solve(np.exp(t), replicon=True)[1].within) - 1.0, np.log(lo), np.log(hi),
               xtol=xtol, rtol=1e-12)
    return fy.solve(float(np.exp(y)), replicon=True)


def _bracket_around(fy: _FixedY, kind: str, y0: float, width: float = 0.15, grow: int = 4):
    """A bracket of state `kind` for a replica's search around the full rule's `y0`: `y0 (1 -+ width)`, widened
    until the criterion changes sign (ground, marginal); `None` if it does not."""
    lo, hi = y0 * (1 - width), y0 * (1 + width)
    if kind == "threshold":
        return lo, hi
    if kind == "ground":
        f = lambda t: float(fy.solve(t)[0].complexity)  # noqa: E731
    else:
        f = lambda t: float(fy.solve(t, replicon=True)[1].within) - 1.0  # noqa: E731
    for _ in range(grow):
        if f(lo) * f(hi) < 0:
            return lo, hi
        lo, hi = lo * (1 - width), hi * (1 + width)
    return None


def locate_rsb_states(model, u0, free, rule: RSBRule, *, y_range=(2.0, 32.0), n_scan: int = 8,
                      config: RSBConfig = RSBConfig(), test_rule: Quadrature | None = None, tie_width: float = 1e-3,
                      xtol: float = 1e-4, replica_errors: bool = True) -> RSBStates:
    """Locate the ground, threshold and marginal 1RSB states of `model` (docs/rsb.md).

    `u0 (n,)`: a start (its `y` is replaced); `free (n,)`: the coordinates solved at fixed `y` (`y` held).
    Fixed-`y` solves on `n_scan` values of `y` geometric in `y_range` (each warm-started from the previous) bracket
    the states: the ground state where `Sigma` changes sign from `+` to `-` (then a solve with `y` free, or
    Brent's root of `Sigma(y)`), the threshold state at the scan's largest `e` (Brent's bounded search of `e(y)`,
    whose maximum is `Sigma`'s), the marginal state where the within-state replicon crosses 1 (Brent's root).
    `xtol`: the searches' tolerance in `log y`. With `replica_errors` each search is repeated on each replica of the
    outer rule alone (`replica_rule`), from the full rule's state, and the replicas' spread gives the 95% errors.
    The within-state replicon is its regular part (`RSBReplicon.within`); where its jump strength `within_jump` is
    positive the replicon diverges and no state is marginal in this sense (the attention model).
    Not jittable (a driver of jitted solves); float64 inside a scoped switch.
    """
    from phasejax.theory.results import t_quantile_975

    y_lo, y_hi = (float(v) for v in y_range)
    if not (0 < y_lo < y_hi and np.isfinite(y_hi)):
        raise ValueError(f"y_range must be (lo, hi) with 0 < lo < hi, got {y_range!r}")
    if isinstance(n_scan, bool) or int(n_scan) != n_scan or n_scan < 3:
        raise ValueError(f"n_scan must be an integer >= 3, got {n_scan!r}")
    if not xtol > 0:
        raise ValueError(f"xtol must be > 0, got {xtol!r}")
    iy = list(model.names).index("y")
    with float64_scope():
        fy = _FixedY(model, free, rule, config, test_rule, float(tie_width), iy)
        fy.seed(np.asarray(u0, np.float64))
        ys = np.geomspace(y_lo, y_hi, int(n_scan))
        scan = [fy.solve(y, replicon=True) for y in ys]
        sig = np.asarray([float(r.complexity) for r, _ in scan])
        e = np.asarray([float(r.energy) for r, _ in scan])
        R1 = np.asarray([float(p.within) for _, p in scan])
        brackets = {}
        k = np.nonzero((sig[:-1] > 0) & (sig[1:] <= 0))[0]
        brackets["ground"] = (ys[k[0]], ys[k[0] + 1]) if k.size else None
        k = int(np.argmax(e))
        brackets["threshold"] = (ys[k - 1], ys[k + 1]) if 0 < k < len(ys) - 1 else None
        k = np.nonzero(np.sign(R1[:-1] - 1.0) != np.sign(R1[1:] - 1.0))[0]
        brackets["marginal"] = (ys[k[0]], ys[k[0] + 1]) if k.size else None
        search = dict(ground=lambda f, lo, hi: _locate_ground(f, lo, hi, xtol),
                      threshold=lambda f, lo, hi: _locate_threshold(f, lo, hi, xtol),
                      marginal=lambda f, lo, hi: _locate_marginal(f, lo, hi, xtol))
        located = {}
        for kind in ("ground", "threshold", "marginal"):
            if brackets[kind] is None:
                located[kind] = _missing_state(Status.INVALID_INPUT)
                continue
            before = fy.count
            res, rep = search[kind](fy, *brackets[kind])
            main = _values(res, rep)
            reps = []
            if replica_errors:
                for r in range(np.asarray(rule.replica_weights).shape[0]):
                    fr = _FixedY(model, free, replica_rule(rule, r), config, test_rule, float(tie_width), iy)
                    fr.seed(np.asarray(res.u))
                    br = _bracket_around(fr, kind, main["y"])
                    if br is not None:
                        reps.append(_values(*search[kind](fr, *br)))
            K = len(reps)
            err = {key: (float(t_quantile_975(K - 1) * np.std([v[key] for v in reps], ddof=1) / np.sqrt(K))
                         if K >= 2 else np.nan) for key in _STATE_KEYS}
            located[kind] = _located(kind, res, rep, main, err, fy, fy.count - before)
        return RSBStates(ground=located["ground"], threshold=located["threshold"], marginal=located["marginal"],
                         scan_y=np.asarray(ys), scan_phi=np.asarray([float(r.phi) for r, _ in scan]), scan_energy=e,
                         scan_complexity=sig, scan_within=R1,
                         scan_status=np.asarray([int(r.status) for r, _ in scan], np.int32))


def _located(kind, res, rep, main, err, fy, count) -> LocatedState:
    if kind == "ground":
        residual = abs(main["complexity"]) / abs(main["energy"])
    elif kind == "threshold":
        y, h = main["y"], 1e-3 * main["y"]
        de = (float(fy.solve(y + h)[0].energy) - float(fy.solve(y - h)[0].energy)) / (2 * h)
        residual = abs(de) * y / abs(main["energy"])
    else:
        residual = abs(main["within"] - 1.0)
    status = int(res.status)
    f = lambda x: np.asarray(x, np.float64)  # noqa: E731
    return LocatedState(y=f(main["y"]), y_err=f(err["y"]), phi=f(main["phi"]), phi_err=f(err["phi"]),
                        energy=f(main["energy"]), energy_err=f(err["energy"]), complexity=f(main["complexity"]),
                        complexity_err=f(err["complexity"]), delta=f(main["delta"]), delta_err=f(err["delta"]),
                        V0=f(main["V0"]), V0_err=f(err["V0"]), within=f(main["within"]), within_err=f(err["within"]),
                        within_jump=f(float(rep.within_jump)), between=f(main["between"]),
                        between_err=f(err["between"]), result=res, replicon=rep, residual=f(residual),
                        iterations=np.asarray(count, np.int32), status=np.asarray(status, np.int32))


def _missing_state(status) -> LocatedState:
    nan = np.asarray(np.nan)
    return LocatedState(**{k: nan for k in ("y", "y_err", "phi", "phi_err", "energy", "energy_err", "complexity",
                                             "complexity_err", "delta", "delta_err", "V0", "V0_err", "within",
                                             "within_err", "within_jump", "between", "between_err", "residual")},
                        result=None, replicon=None, iterations=np.asarray(0, np.int32),
                        status=np.asarray(int(status), np.int32))


def perceptron_rule(*, log2_n: int = 11, n_replicas: int = 4, inner_order: int = 32, seed: int = 0,
                    outer_scale: float = 2.5) -> RSBRule:
    """The reference model's default rule: scrambled Sobol in the pattern's field drawn from `N(0, outer_scale^2)`
    and importance-weighted (`rsb_rule`), `inner_order` Gauss-Hermite nodes in `z`."""
    return rsb_rule(1, 1, log2_n=log2_n, n_replicas=n_replicas, inner_order=inner_order, seed=seed,
                    outer_scale=outer_scale)


@uses_float64
def perceptron_states(alpha, kappa, *, u0=(0.6, 4.0, 2.0), y_range=(2.0, 32.0), n_scan: int = 8,
                      rule: RSBRule | None = None, config: RSBConfig = RSBConfig(), xtol: float = 1e-4,
                      replica_errors: bool = True) -> RSBStates:
    """The ground, threshold and marginal states of the reference model (`PerceptronRSB`) by `locate_rsb_states`;
    `u0 = (sqrt(Delta), V, y)` starts the scan; `rule`: `perceptron_rule()` by default."""
    if not np.all(np.asarray(alpha) > 0):
        raise ValueError(f"alpha must be > 0, got {alpha}")
    if not np.all(np.asarray(kappa) < 0):
        raise ValueError(f"kappa must be < 0 (a negative margin), got {kappa}")
    model = PerceptronRSB(alpha_=jnp.asarray(alpha, jnp.float64), kappa=jnp.asarray(kappa, jnp.float64))
    return locate_rsb_states(model, np.asarray(u0, np.float64), np.asarray([True, True, False]),
                             perceptron_rule() if rule is None else rule, y_range=y_range, n_scan=n_scan,
                             config=config, xtol=xtol, replica_errors=replica_errors)


def perceptron_replicon(alpha, kappa, result: RSBResult, rule: RSBRule, *, tie_width: float = 1e-3) -> RSBReplicon:
    """The replicons (`RSBReplicon`) of the reference model's state `result` on `rule`. Within the states:
    `alpha (V / (1 + V))^2 E_xi <1[omega < kappa]>_y` (the prox of the quadratic hinge has one minimum: no jump)."""
    model = PerceptronRSB(alpha_=jnp.asarray(alpha, jnp.float64), kappa=jnp.asarray(kappa, jnp.float64))
    return rsb_replicon(model, result.u, rule, tie_width=tie_width)


def perceptron_large_y(alpha: float, kappa: float) -> dict:
    """The reference model's fixed-`y` states as `y -> infinity` in closed form (docs/rsb.md), where its RS point is
    replicon-unstable through the smooth part of the envelope (`R_RS = alpha_G Phi(kappa) > 1`, no tie set):
    `Delta y -> chi`, `V -> V_inf`, `Phi(y) - Phi_RS -> psi / y` and `Sigma(y) -> -psi`.

    With `W / (1 + W) = sqrt(alpha_G / alpha)` (the RS response), `P = Phi(kappa)` (the fraction of the RS fields
    below the margin): `V_inf / (1 + V_inf) = 1 / (P sqrt(alpha alpha_G))`, `chi = W - V_inf` and
    `psi = -log(W / V_inf) / 2 + chi / (2 W) + (alpha P / 2) log((1 + W) / (1 + V_inf)) - alpha P chi / (2 (1 + W))`
    (the first order in `1 / y` of `Phi` at `Delta = chi / y`, extremised in `chi` at fixed `W = V + chi`). Returns
    `dict(V_rs=W, V_inf, chi, psi, replicon_rs)`. `replicon_rs = alpha_G Phi(kappa) = Phi(kappa) / int_{t < kappa}
    Dt (kappa - t)^2 > 1` for every `kappa < 0` (Mills' inequality), so the limit exists throughout the UNSAT phase.
    Raises `ValueError` unless `kappa < 0` and `alpha > alpha_G`."""
    from scipy.stats import norm

    if not (alpha > 0 and kappa < 0):
        raise ValueError(f"alpha must be > 0 and kappa < 0, got alpha={alpha}, kappa={kappa}")
    aG = gardner_capacity(kappa)
    if not alpha > aG:
        raise ValueError(f"alpha must exceed Gardner's capacity {aG:.6g} (UNSAT), got {alpha}")
    P = float(norm.cdf(kappa))
    r = np.sqrt(aG / alpha)
    W = r / (1.0 - r)
    R = alpha * P * r * r
    v = 1.0 / (P * np.sqrt(alpha * aG))
    V = v / (1.0 - v)
    chi = W - V
    psi = (-0.5 * np.log(W / V) + chi / (2 * W) + 0.5 * alpha * P * np.log((1 + W) / (1 + V))
           - alpha * P * chi / (2 * (1 + W)))
    return dict(V_rs=float(W), V_inf=float(V), chi=float(chi), psi=float(psi), replicon_rs=float(R))


def gardner_capacity(kappa: float) -> float:
    """`alpha_G(kappa) = 1 / int_{-kappa}^inf Dt (t + kappa)^2`, the RS capacity of the spherical perceptron."""
    from scipy import integrate, stats

    val = integrate.quad(lambda t: stats.norm.pdf(t) * (t + kappa) ** 2, -kappa, np.inf, epsabs=1e-14)[0]
    return 1.0 / val


__all__ = [
    "DENSE_GRID", "LocatedState", "PerceptronRSB", "RSBConfig", "RSBNewton", "RSBReplicon", "RSBResult", "RSBRule",
    "RSBStates", "RSB_MODES", "TiedAttentionRSB", "attention_free", "attention_replicon", "attention_rule",
    "attention_state", "dense_minima", "gardner_capacity", "locate_rsb_states", "paired_difference",
    "perceptron_large_y", "perceptron_replicon", "perceptron_rule", "perceptron_states", "replica_rule",
    "ridge_entropic", "rsb_replicon", "rsb_rule", "solve_perceptron_rsb", "solve_rsb", "solve_rsb_problem",
]
