"""Moreau-envelope proximal step by damped Newton (theory notes, section 3).

`newton_minimize` minimises a smooth function of a small vector with a
Levenberg-Marquardt-damped Newton method (exact `jax.hessian`, eigenvalue
shift for indefinite Hessians, step accepted only if the objective does not
increase) until its gradient is small; `newton_steps` takes a fixed number
of the same steps (no while loop: under `vmap` no node waits for the
slowest). `moreau_prox` runs `newton_minimize` from several starts and keeps
the lowest objective. `moreau_minimiser` is the state evolution's prox: a
fixed number of steps from a few starts, the lowest objective kept, and a
custom JVP from the implicit function theorem at the optimum (so `jax.jvp`
and `jax.jacfwd` of anything built on it never differentiate through the
iterations); `moreau_minimisers` keeps every start (with the value's
tangent from the envelope theorem) and `tie_weights` turns their values
into a smoothed selection, continuous across a tie between two basins.
`envelope_derivatives` gives `f` and its derivatives at the
optimum by the implicit function theorem. All are pure and vmappable (the
state evolution vmaps them over quadrature nodes, GAMP over samples).
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
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

    Each step solves `(H + shift I) d = -g` with `shift = mu + max(0, -eig_min(H))`,
    takes the best of the step lengths `1, 1/2, ..., 1/128` along `d` and
    accepts it if the objective does not increase (ties accepted when the
    gradient shrinks); `mu` shrinks on acceptance and grows on rejection.
    Stops when `max|g| <= tol`, after `max_steps`, or when no step can be
    accepted (`mu > 1e12`).
    """
    derivatives = autodiff_derivatives(objective)
    f0, g0, H0 = derivatives(h0)

    def cond(state):
        h, f, g, H, mu, k = state
        return (k < max_steps) & (jnp.max(jnp.abs(g)) > tol) & (mu < 1e12)

    def body(state):
        h, f, g, H, mu, k = state
        return (*_newton_step(objective, derivatives, (h, f, g, H, mu)), k + 1)

    mu0 = jnp.asarray(1e-10, h0.dtype)
    h, f, g, H, mu, k = jax.lax.while_loop(cond, body, (h0, f0, g0, H0, mu0, jnp.asarray(0)))
    grad_norm = jnp.max(jnp.abs(g))
    return ProxResult(h=h, value=f, grad_norm=grad_norm, steps=k, converged=grad_norm <= tol)


_STEP_LENGTHS = 0.5 ** np.arange(8)


def autodiff_derivatives(objective: Callable[[Array], Array]) -> Callable[[Array], tuple[Array, Array, Array]]:
    """`h -> (value, gradient, Hessian)` of `objective: (n,) -> ()` by autodiff."""
    value_and_grad = jax.value_and_grad(objective)
    hessian = jax.hessian(objective)

    def derivatives(h):
        f, g = value_and_grad(h)
        return f, g, hessian(h)

    return derivatives


def _newton_step(objective, derivatives, state):
    """One globalised Newton step on `(h, f, g, H, mu)`.

    Direction `d = -(H + shift I)^{-1} g` with `shift = mu + max(0, -eig_min(H))`
    (a descent direction also where `H` is indefinite); step length the best of
    `1, 1/2, ..., 1/128` by objective value, accepted only if it decreases the
    objective (or ties it with a smaller gradient). `mu` grows tenfold on a
    rejected step and shrinks on an accepted one.
    """
    h, f, g, H, mu = state
    n = h.shape[0]
    H = 0.5 * (H + H.T)
    eig_min = small_linalg.min_eigenvalue(H)
    shift = mu + jnp.maximum(0.0, -eig_min) * (1.0 + 1e-6)
    d = -small_linalg.solve(H + shift * jnp.eye(n, dtype=h.dtype), g)
    trials = h[None] + jnp.asarray(_STEP_LENGTHS, h.dtype)[:, None] * d[None]
    values = jax.vmap(objective)(trials)
    values = jnp.where(jnp.isfinite(values), values, jnp.inf)
    h_new = trials[jnp.argmin(values)]
    f_new, g_new, H_new = derivatives(h_new)
    finite = jnp.isfinite(f_new) & jnp.all(jnp.isfinite(g_new)) & jnp.all(jnp.isfinite(H_new))
    decrease = f_new < f
    tie = (f_new <= f + 1e-14 * (1.0 + jnp.abs(f))) & (jnp.max(jnp.abs(g_new)) < jnp.max(jnp.abs(g)))
    accept = finite & (decrease | tie)
    pick = lambda new, old: jnp.where(accept, new, old)  # noqa: E731
    mu = jnp.where(accept, mu * 0.1, jnp.maximum(mu * 10.0, 1e-8))
    return pick(h_new, h), pick(f_new, f), pick(g_new, g), pick(H_new, H), mu


def newton_steps(objective: Callable[[Array], Array], h0: Array, n_steps: int, *, tol: float = 1e-10,
                 derivatives: Callable | None = None) -> ProxResult:
    """Minimise `objective: (n,) -> ()` from `h0 (n,)` by exactly `n_steps` damped Newton steps.

    The same globalised steps as `newton_minimize`, in a `fori_loop` of fixed
    length (a converged iterate stays put: its step vanishes or is rejected).
    `derivatives(h) -> (value, gradient, Hessian)` defaults to autodiff of
    `objective`. `converged` reports `max|g| <= tol` at the end.
    """
    derivatives = autodiff_derivatives(objective) if derivatives is None else derivatives
    f0, g0, H0 = derivatives(h0)
    state = (h0, f0, g0, H0, jnp.asarray(1e-10, h0.dtype))
    h, f, g, _, _ = jax.lax.fori_loop(0, n_steps, lambda _, s: _newton_step(objective, derivatives, s), state)
    grad_norm = jnp.max(jnp.abs(g))
    return ProxResult(h=h, value=f, grad_norm=grad_norm, steps=jnp.asarray(n_steps), converged=grad_norm <= tol)


def _run_starts(objective, derivatives, theta, starts, n_steps, tol):
    """Fixed-step Newton from every start group: `hs (S, n)`, `values (S,)` (non-finite -> inf), `gnorms (S,)`."""
    results = []
    for group, steps in zip(starts, n_steps):
        results.append(jax.vmap(lambda h0, steps=steps: newton_steps(
            lambda h: objective(h, theta), h0, steps, tol=tol,
            derivatives=None if derivatives is None else (lambda h: derivatives(h, theta))))(group))
    hs = jnp.concatenate([r.h for r in results])
    values = jnp.concatenate([r.value for r in results])
    gnorms = jnp.concatenate([r.grad_norm for r in results])
    return hs, jnp.where(jnp.isfinite(values), values, jnp.inf), gnorms


def _implicit_tangents(objective, derivatives, h, theta, dtheta):
    """Tangents of a minimiser `h (n,)` of `objective(., theta)` and of its value along `dtheta`.

    `dh = -H^{-1} d_theta grad_h objective` (implicit function theorem) and
    `dvalue = d_theta objective + grad_h objective . dh` (the envelope theorem
    plus the first-order effect of a residual gradient).
    """
    if derivatives is None:
        H = jax.hessian(objective, argnums=0)(h, theta)
        grad_h = jax.grad(objective, argnums=0)
    else:
        H = derivatives(h, theta)[2]
        grad_h = lambda h_, th: derivatives(h_, th)[1]  # noqa: E731
    g, dgrad = jax.jvp(lambda th: grad_h(h, th), (theta,), (dtheta,))
    dh = -small_linalg.solve(0.5 * (H + H.T), dgrad)
    _, dvalue = jax.jvp(lambda th: objective(h, th), (theta,), (dtheta,))
    return dh, dvalue + g @ dh


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 4, 5))
def _minimiser(objective, derivatives, theta, starts, n_steps, tol):
    hs, values, gnorms = _run_starts(objective, derivatives, theta, starts, n_steps, tol)
    best = jnp.argmin(values)
    return hs[best], gnorms[best], best


@_minimiser.defjvp
def _minimiser_jvp(objective, derivatives, n_steps, tol, primals, tangents):
    theta, starts = primals
    dtheta, _ = tangents
    h, gnorm, best = _minimiser(objective, derivatives, theta, starts, n_steps, tol)
    dh, _ = _implicit_tangents(objective, derivatives, h, theta, dtheta)
    return (h, gnorm, best), (dh, jnp.zeros_like(gnorm), jax.custom_derivatives.zero_from_primal(best))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 4, 5))
def _all_minimisers(objective, derivatives, theta, starts, n_steps, tol):
    return _run_starts(objective, derivatives, theta, starts, n_steps, tol)


@_all_minimisers.defjvp
def _all_minimisers_jvp(objective, derivatives, n_steps, tol, primals, tangents):
    theta, starts = primals
    dtheta, _ = tangents
    hs, values, gnorms = _all_minimisers(objective, derivatives, theta, starts, n_steps, tol)
    dhs, dvalues = jax.vmap(lambda h: _implicit_tangents(objective, derivatives, h, theta, dtheta))(hs)
    dvalues = jnp.where(jnp.isfinite(values), dvalues, 0.0)
    return (hs, values, gnorms), (dhs, dvalues, jnp.zeros_like(gnorms))


def _start_groups(starts, n_steps):
    if not isinstance(starts, (tuple, list)):
        starts, n_steps = (starts,), (n_steps,)
    return tuple(jax.lax.stop_gradient(s) for s in starts), tuple(int(k) for k in n_steps)


def moreau_minimiser(objective: Callable[[Array, object], Array], theta, starts, *, n_steps=8,
                     tol: float = 1e-10, derivatives: Callable | None = None) -> tuple[Array, Array, Array]:
    """Lowest of fixed-step damped Newton minimisations of `objective(h, theta)` from several starts.

    `starts` is an `(S, n)` array run with `n_steps` steps each, or a tuple of
    such arrays with a tuple of step counts (e.g. a well-converged warm start
    with few steps and cold starts with more). `derivatives(h, theta) ->
    (value, gradient, Hessian)` may replace autodiff (a closed form is much
    cheaper). Returns `(h (n,), grad_norm (), start_index ())`. Differentiable
    in `theta` (any pytree) by the implicit function theorem at the returned
    optimum: `dh = -H^{-1} d_theta grad_h objective` (a switch of the selected
    start is not differentiated); `starts` is not differentiated.
    """
    starts, n_steps = _start_groups(starts, n_steps)
    return _minimiser(objective, derivatives, theta, starts, n_steps, tol)


def moreau_minimisers(objective: Callable[[Array, object], Array], theta, starts, *, n_steps=8,
                      tol: float = 1e-10, derivatives: Callable | None = None) -> tuple[Array, Array, Array]:
    """Every start's fixed-step damped Newton minimisation of `objective(h, theta)`, none discarded.

    Same arguments as `moreau_minimiser`. Returns `hs (S, n)`, `values (S,)`
    (`inf` where not finite) and `grad_norms (S,)`, `S` the total number of
    starts. Differentiable in `theta`: each `h_k` by the implicit function
    theorem at its own optimum, each value by the envelope theorem
    (`d value_k = d_theta objective(h_k, theta)`), so a smooth function of the
    values (`tie_weights`) is differentiated exactly, switches included.
    """
    starts, n_steps = _start_groups(starts, n_steps)
    return _all_minimisers(objective, derivatives, theta, starts, n_steps, tol)


def tie_weights(values: Array, width, minimisers: Array | None = None, same_tol: float = 0.05) -> Array:
    """Smoothed selection of the lowest of `values (S,)`: `softmax(-values / width)`, `(S,)`.

    `width` is an energy: starts whose objective lies within a few `width` of the
    lowest share the weight, the others get (exponentially) none; `inf` values
    get exactly none. As `width -> 0` this is the one-hot of the argmin (ties
    split). With `minimisers (S, n)`, starts that ended in the same basin
    (`max|h_i - h_j| <= same_tol (1 + max|h|)`) count once, by the lowest of
    them (the best converged): else a minimum found by two starts would be
    favoured (by `width log 2` in energy), and a start still on its way to a
    minimum another start has reached would be blended in. Used to make a
    prox's selection between two basins continuous in the fields: the
    weights' error against the hard selection is odd about a tie, so the
    first order in `width` cancels from Gaussian averages of anything linear
    in the weights (theory notes, section 8.5).
    """
    values = jnp.asarray(values)
    finite = jnp.isfinite(values)
    low = jnp.min(jnp.where(finite, values, jnp.inf))
    keep = finite
    if minimisers is not None:
        h = jax.lax.stop_gradient(minimisers)
        size = jnp.max(jnp.abs(h), axis=1)
        scale = 1.0 + jnp.maximum(size[:, None], size[None, :])
        same = jnp.max(jnp.abs(h[:, None] - h[None, :]), axis=-1) <= same_tol * scale
        v = jax.lax.stop_gradient(values)
        idx = jnp.arange(v.shape[0])
        lower = (v[None, :] < v[:, None]) | ((v[None, :] == v[:, None]) & (idx[None, :] < idx[:, None]))
        keep = finite & ~jnp.any(same & lower & finite[None, :], axis=1)
    z = jnp.where(keep, -(values - low) / width, -jnp.inf)
    return jax.nn.softmax(z)


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
    """`f = V^{-1}(h_hat - omega)` and its implicit derivatives (docs/theory.md, sections 3-4).

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
