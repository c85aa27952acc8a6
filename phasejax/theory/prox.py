"""Moreau-envelope proximal step by damped Newton (spec section 3).

`newton_minimize` minimises a smooth function of a small vector with a
Levenberg-Marquardt-damped Newton method (exact `jax.hessian`, eigenvalue
shift for indefinite Hessians, step accepted only if the objective does not
increase). `moreau_prox` runs it from several starts and keeps the lowest
objective. `envelope_derivatives` gives `f` and its derivatives at the
optimum by the implicit function theorem. All are pure and vmappable (the
state evolution vmaps them over quadrature nodes, GAMP over samples).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from flax import struct
from jax.scipy.linalg import block_diag

from phasejax.theory import small_linalg

Array = jax.Array


@struct.dataclass
class ProxResult:
    """Result of a (multi-start) Newton minimisation.

    Attributes:
      h: `(n,)` minimiser found.
      value: `()` objective at `h`.
      grad_norm: `()` max-abs gradient at `h` (the residual).
      steps: `()` Newton steps taken (summed over starts for `moreau_prox`).
      converged: `()` bool, `grad_norm <= tol`.
    """

    h: Array
    value: Array
    grad_norm: Array
    steps: Array
    converged: Array


def newton_minimize(
    objective: Callable[[Array], Array], h0: Array, *, max_steps: int = 60, tol: float = 1e-10
) -> ProxResult:
    """Minimise `objective: (n,) -> ()` from `h0 (n,)` by damped Newton.

    Each step solves `(H + shift I) d = -g` with `shift = mu + max(0, -eig_min(H))`
    and accepts `h + d` if the objective does not increase (ties accepted when
    the gradient shrinks); `mu` shrinks on acceptance and grows on rejection
    (Levenberg-Marquardt). Stops when `max|g| <= tol`, after `max_steps`, or
    when no step can be accepted (`mu > 1e12`).
    """
    value_and_grad = jax.value_and_grad(objective)
    hessian = jax.hessian(objective)
    n = h0.shape[0]
    eye = jnp.eye(n, dtype=h0.dtype)
    f0, g0 = value_and_grad(h0)

    def cond(state):
        h, f, g, mu, k = state
        return (k < max_steps) & (jnp.max(jnp.abs(g)) > tol) & (mu < 1e12)

    def body(state):
        h, f, g, mu, k = state
        H = hessian(h)
        H = 0.5 * (H + H.T)
        eig_min = small_linalg.min_eigenvalue(H)
        shift = mu + jnp.maximum(0.0, -eig_min) * (1.0 + 1e-6)
        d = -small_linalg.solve(H + shift * eye, g)
        h_new = h + d
        f_new, g_new = value_and_grad(h_new)
        finite = jnp.isfinite(f_new) & jnp.all(jnp.isfinite(g_new))
        decrease = f_new < f
        tie = (f_new <= f + 1e-14 * (1.0 + jnp.abs(f))) & (jnp.max(jnp.abs(g_new)) < jnp.max(jnp.abs(g)))
        accept = finite & (decrease | tie)
        h = jnp.where(accept, h_new, h)
        f = jnp.where(accept, f_new, f)
        g = jnp.where(accept, g_new, g)
        mu = jnp.where(accept, mu * 0.1, jnp.maximum(mu * 10.0, 1e-8))
        return h, f, g, mu, k + 1

    mu0 = jnp.asarray(1e-10, h0.dtype)
    h, f, g, mu, k = jax.lax.while_loop(cond, body, (h0, f0, g0, mu0, jnp.asarray(0)))
    grad_norm = jnp.max(jnp.abs(g))
    return ProxResult(h=h, value=f, grad_norm=grad_norm, steps=k, converged=grad_norm <= tol)


def moreau_prox(
    objective: Callable[[Array], Array], starts: Array, *, max_steps: int = 60, tol: float = 1e-10
) -> ProxResult:
    """Multi-start damped Newton: run `newton_minimize` from each row of `starts (S, n)`.

    Keeps the start with the lowest finite objective. `steps` is the total
    over starts.
    """
    runs = jax.vmap(lambda h0: newton_minimize(objective, h0, max_steps=max_steps, tol=tol))(starts)
    values = jnp.where(jnp.isfinite(runs.value), runs.value, jnp.inf)
    best = jnp.argmin(values)
    pick = jax.tree_util.tree_map(lambda x: x[best], runs)
    return pick.replace(steps=jnp.sum(runs.steps))


@struct.dataclass
class EnvelopeDerivatives:
    """`f = V^{-1}(h_hat - omega)` and its implicit derivatives (spec sections 3-4).

    Attributes:
      f: `(L, r)`.
      df_domega: `(L, r, r)` diagonal blocks `d f_l / d omega_l`.
      df_dhstar: `(L, r, t)` diagonal blocks `d f_l / d h*_l`.
    """

    f: Array
    df_domega: Array
    df_dhstar: Array


def _prox_system(loss_h: Callable[[Array], Array], h_hat: Array, V_inv: Array) -> tuple[Array, Array]:
    """`blockdiag(V_inv)` and the Hessian `H = blockdiag(V_inv) + d2 loss/dh2` at `h_hat (L, r)`."""
    L, r = h_hat.shape
    Vb = block_diag(*[V_inv[l] for l in range(L)])
    hess_loss = jax.hessian(lambda hf: loss_h(hf.reshape(L, r)))(h_hat.reshape(-1))
    return Vb, Vb + hess_loss


def prox_omega_jacobian(loss_h: Callable[[Array], Array], h_hat: Array, omega: Array, V_inv: Array):
    """`f (L, r)` and the diagonal blocks `d f_l / d omega_l (L, r, r)` at the optimum (implicit function theorem).

    For a loss of `h` alone (GAMP's per-sample loss). `d h_hat / d omega = H^{-1} blockdiag(V_inv)`.
    """
    Vb, H = _prox_system(loss_h, h_hat, V_inv)
    return jnp.einsum("lab,lb->la", V_inv, h_hat - omega), _diagonal_df_domega(Vb, H, *h_hat.shape)


def _diagonal_df_domega(Vb: Array, H: Array, L: int, r: int) -> Array:
    df_domega = Vb @ (small_linalg.solve(H, Vb) - jnp.eye(L * r, dtype=H.dtype))
    idx = jnp.arange(L)
    return df_domega.reshape(L, r, L, r)[idx, :, idx, :]


def envelope_derivatives(
    loss: Callable[[Array, Array], Array], h_hat: Array, omega: Array, V_inv: Array, hstar: Array
) -> EnvelopeDerivatives:
    """Implicit-function derivatives of the proximal map at its optimum.

    The optimum `h_hat (L, r)` of `sum_l 1/2 (h_l - omega_l)^T V_inv_l (h_l - omega_l) + loss(h, hstar)`
    satisfies `V_inv (h_hat - omega) + grad_h loss = 0`, so with the Hessian
    `H = blockdiag(V_inv) + d2 loss/dh2`:
    `d h_hat / d omega = H^{-1} blockdiag(V_inv)`,
    `d h_hat / d hstar = -H^{-1} d2 loss/(dh dhstar)`.
    Nothing is differentiated through the Newton iterations.

    Args:
      loss: `loss(h (L, r), hstar (L, t)) -> ()`.
      h_hat: `(L, r)` minimiser; omega: `(L, r)`; V_inv: `(L, r, r)`; hstar: `(L, t)`.
    """
    L, r = h_hat.shape
    t = hstar.shape[-1]
    Vb, H = _prox_system(lambda h: loss(h, hstar), h_hat, V_inv)
    cross = jax.jacfwd(jax.grad(loss, argnums=0), argnums=1)(h_hat, hstar).reshape(L * r, L * t)
    df_dhstar = (-Vb @ small_linalg.solve(H, cross)).reshape(L, r, L, t)
    idx = jnp.arange(L)
    return EnvelopeDerivatives(f=jnp.einsum("lab,lb->la", V_inv, h_hat - omega),
                               df_domega=_diagonal_df_domega(Vb, H, L, r),
                               df_dhstar=df_dhstar[idx, :, idx, :])
