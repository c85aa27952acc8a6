"""The two models of the 1RSB code (docs/rsb.md): the state vector, the entropic term and the proximal problem
at every quadrature node of `TiedAttentionRSB` (the attention model) and `PerceptronRSB` (the spherical perceptron
with the quadratic hinge and a negative margin, the reference model of the tests), and the reference model's closed
forms (`gardner_capacity`, `perceptron_large_y`).

A model is any object with `names`, `n`, `unpack(u)`, `alpha()`, `valid(u)`, `entropic(u)`, `prox()`,
`node_problems(u, rule)`, `replicon_metric(shared)` and `observables(u, test_rule)`: the solver
(`phasejax.theory.rsb.solver`), the replicons and the state search take it as an argument.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.theory.fields import Overlaps
from phasejax.theory.params import TiedAttentionParams
from phasejax.theory.prox import closed_form_prox
from phasejax.theory.quadrature import Quadrature
from phasejax.theory.rsb.rule import RSBRule

Array = jax.Array


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


RSB_MODES = ("ground", "fixed_y", "rs")
"""`ground`: `y` extremised (`Sigma = 0`); `fixed_y`: `y` held at its start (one point of `Sigma(y)`); `rs`:
`Delta` held at 0 (the RS fixed point by the same code path)."""


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
