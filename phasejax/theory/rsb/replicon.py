"""The two replicon eigenvalues of a 1RSB state (docs/rsb.md): within the states (the innermost level, with its
jump strength where minima tie) and between them (the `q0` level), from the dense multistart's minima at every
node, with quadrature errors from the replicas."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from phasejax.precision import float64_scope
from phasejax.theory.params import TiedAttentionParams
from phasejax.theory.results import spread_error
from phasejax.theory.rsb.models import PerceptronRSB, TiedAttentionRSB
from phasejax.theory.rsb.rule import RSBRule
from phasejax.theory.rsb.solver import RSBResult, dense_minima

Array = jax.Array


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


def perceptron_replicon(alpha, kappa, result: RSBResult, rule: RSBRule, *, tie_width: float = 1e-3) -> RSBReplicon:
    """The replicons (`RSBReplicon`) of the reference model's state `result` on `rule`. Within the states:
    `alpha (V / (1 + V))^2 E_xi <1[omega < kappa]>_y` (the prox of the quadratic hinge has one minimum: no jump)."""
    model = PerceptronRSB(alpha_=jnp.asarray(alpha, jnp.float64), kappa=jnp.asarray(kappa, jnp.float64))
    return rsb_replicon(model, result.u, rule, tie_width=tie_width)
