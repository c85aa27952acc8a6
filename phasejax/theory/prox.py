"""Moreau-envelope proximal step by damped Newton (theory notes, section 3).

`newton_minimize` minimises a smooth function of a small vector with a
Levenberg-Marquardt-damped Newton method (exact `jax.hessian`, eigenvalue
shift for indefinite Hessians, step accepted only if the objective does not
increase) until its gradient is small. `minimize_lanes` takes the same steps
for many problems at once, each lane stopping when its gradient is below a
tolerance or its steps reach a cap (lanes stepped side by side in blocks, so
that a lane costs about the steps it needs; `minimize_dense` is the small
program for a few lanes); `lowest_minima` and `all_minima` run it from every
start of every quadrature node and keep the lowest minimum, or every one.

The two entry points: `moreau_minimizer` is the prox of one node (the state
evolution's, GAMP's): at most `n_steps`
steps from each of a few starts, the lowest objective kept, and a custom JVP
from the implicit function theorem at the optimum (so `jax.jvp` and
`jax.jacfwd` of anything built on it never differentiate through the
iterations); `moreau_minimizers` keeps every start (what the replicon and a
smoothed selection read; with the value's tangent from the envelope theorem)
and `tie_weights` turns their values
into a smoothed selection, continuous across a tie between two basins.
`envelope_derivatives` gives `f` and its derivatives at the
optimum by the implicit function theorem. All are pure and vmappable (the
state evolution vmaps them over quadrature nodes, GAMP over samples).
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.flatten_util import ravel_pytree
from jax.scipy.linalg import block_diag

from phasejax.theory import small_linalg
from phasejax.theory.params import TiedAttentionParams

Array = jax.Array


@struct.dataclass
class ProxResult:
    """Result of a (multi-start) Newton minimisation.

    Attributes:
      h: `(n,)` minimiser found.
      value: `()` objective at `h`.
      grad_norm: `()` max-abs gradient at `h` (the residual).
      steps: `()` Newton steps taken.
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


ARMIJO = 0.4
"""A Newton step's full length is taken without trying shorter ones when it decreases the objective by at least
`ARMIJO` times the decrease its slope predicts (`f(h + d) <= f + ARMIJO g . d`). For a quadratic along `d` with
its minimum at length `t*` this holds when `t* >= 1 / (2 (1 - ARMIJO)) = 0.83`, where length 1 is also the best
of `1, 1/2, ..., 1/128`; elsewhere every length is tried and the best kept."""


def _direction(h, f, g, H, mu):
    """The damped Newton direction `d = -(H + shift I)^{-1} g`, `shift = mu + max(0, -eig_min(H))` (a descent
    direction also where `H` is indefinite), and whether the objective can rank steps along it at all (`False`
    where the predicted decrease `|g . d|` is below its rounding, `1e-13 (1 + |f|)`)."""
    n = h.shape[0]
    H = 0.5 * (H + H.T)
    eig_min = small_linalg.min_eigenvalue(H)
    shift = mu + jnp.maximum(0.0, -eig_min) * (1.0 + 1e-6)
    d = -small_linalg.solve(H + shift * jnp.eye(n, dtype=h.dtype), g)
    return d, jnp.abs(small_linalg.dot(g, d)) > 1e-13 * (1.0 + jnp.abs(f))


def _full_step_taken(f, g, d, f_full, resolved):
    """Whether the full step `h + d` (objective `f_full`) is taken without trying shorter ones (`ARMIJO`; always
    where the objective cannot rank steps, so that the last steps to a minimum are Newton's)."""
    return ~resolved | (jnp.isfinite(f_full) & (f_full <= f + ARMIJO * small_linalg.dot(g, d)))


def _best_length(objective, h, d, f_full):
    """The best of the steps `h + t d`, `t = 1, 1/2, ..., 1/128`, by objective value (`f_full` at `t = 1`)."""
    trials = h[None] + jnp.asarray(_STEP_LENGTHS[1:], h.dtype)[:, None] * d[None]
    values = jnp.concatenate([f_full[None], jax.vmap(objective)(trials)])
    values = jnp.where(jnp.isfinite(values), values, jnp.inf)
    return jnp.concatenate([(h + d)[None], trials])[jnp.argmin(values)]


def _finish_step(derivatives, state, h_new):
    """Evaluate `h_new` and accept it if it decreases the objective (or ties it with a smaller gradient); `mu`
    shrinks tenfold on acceptance and grows tenfold (to at least `1e-8`) on rejection."""
    h, f, g, H, mu = state
    f_new, g_new, H_new = derivatives(h_new)
    finite = jnp.isfinite(f_new) & jnp.all(jnp.isfinite(g_new)) & jnp.all(jnp.isfinite(H_new))
    decrease = f_new < f
    tie = (f_new <= f + 1e-14 * (1.0 + jnp.abs(f))) & (jnp.max(jnp.abs(g_new)) < jnp.max(jnp.abs(g)))
    accept = finite & (decrease | tie)
    pick = lambda new, old: jnp.where(accept, new, old)  # noqa: E731
    mu = jnp.where(accept, mu * 0.1, jnp.maximum(mu * 10.0, 1e-8))
    return pick(h_new, h), pick(f_new, f), pick(g_new, g), pick(H_new, 0.5 * (H + H.T)), mu


def _newton_step(objective, derivatives, state):
    """One globalised Newton step on `(h, f, g, H, mu)`.

    Direction `d = -(H + shift I)^{-1} g` with `shift = mu + max(0, -eig_min(H))`
    (a descent direction also where `H` is indefinite); length 1 where it
    decreases the objective enough (`ARMIJO`) or where the objective cannot
    rank steps (a predicted decrease below its rounding: the last steps to a
    minimum are then Newton's and its gradient falls to rounding), else the
    best of `1, 1/2, ..., 1/128` by objective value; accepted only if it
    decreases the objective (or ties it with a smaller gradient). `mu` grows
    tenfold on a rejected step and shrinks on an accepted one.
    (`minimize_lanes` takes the same steps, trying the shorter lengths only on
    the lanes that need them.)
    """
    h, f, g, H, mu = state
    d, resolved = _direction(h, f, g, H, mu)
    f_full = objective(h + d)
    h_new = jnp.where(_full_step_taken(f, g, d, f_full, resolved), h + d, _best_length(objective, h, d, f_full))
    return _finish_step(derivatives, state, h_new)


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
    return dh, dvalue + small_linalg.dot(g, dh)


def _one_node(objective, derivatives, theta, starts, n_steps, tol):
    """`(objective, derivatives, settings, node_thetas, shared, starts)` of `lowest_minima` for one node whose
    problem is `objective(h, theta)`, started from `starts (S, n)` (or a tuple of such groups with a tuple of
    step counts)."""
    if isinstance(starts, (tuple, list)):
        caps = tuple(int(k) for group, k in zip(starts, n_steps) for _ in range(group.shape[0]))
        starts = jnp.concatenate(starts)
    else:
        caps = (int(n_steps),) * starts.shape[0]
    obj = lambda h, th: objective(h, th[0])  # noqa: E731
    der = None if derivatives is None else (lambda h, th: derivatives(h, th[0]))
    settings = LaneSettings(max_steps=caps, stop_tol=tol)
    return obj, der, settings, (), (theta,), jax.lax.stop_gradient(starts)[None]


def moreau_minimizer(objective: Callable[[Array, object], Array], theta, starts, *, n_steps=8,
                     tol: float = 1e-13, derivatives: Callable | None = None) -> tuple[Array, Array, Array]:
    """The lowest of damped Newton minimisations of `objective(h, theta)` from several starts: `lowest_minima` for
    one node.

    `starts` is an `(S, n)` array, every start taking at most `n_steps` steps, or a tuple of such arrays with a
    tuple of step counts (e.g. a well-converged warm start with few steps and cold starts with more); a start
    stops when its gradient is below `tol`. `derivatives(h, theta) -> (value, gradient, Hessian)` may replace
    autodiff (a closed form is much cheaper). Returns `(h (n,), grad_norm (), start_index ())`. Differentiable
    in `theta` (any pytree) by the implicit function theorem at the returned optimum:
    `dh = -H^{-1} d_theta grad_h objective` (a switch of the selected start is not differentiated); `starts` is
    not differentiated.
    """
    obj, der, settings, node, shared, st = _one_node(objective, derivatives, theta, starts, n_steps, tol)
    h, gnorm, best, _ = lowest_minima(obj, der, settings, node, shared, st, True)
    return h[0], gnorm[0], best[0]


def moreau_minimizers(objective: Callable[[Array, object], Array], theta, starts, *, n_steps=8,
                      tol: float = 1e-13, derivatives: Callable | None = None) -> tuple[Array, Array, Array]:
    """Every start's damped Newton minimisation of `objective(h, theta)`, none discarded: `all_minima` for one
    node.

    Same arguments as `moreau_minimizer`. Returns `hs (S, n)`, `values (S,)` (`inf` where not finite) and
    `grad_norms (S,)`, `S` the total number of starts. Differentiable in `theta`: each `h_k` by the implicit
    function theorem at its own optimum, each value by the envelope theorem (`d value_k = d_theta
    objective(h_k, theta)`), so a smooth function of the values (`tie_weights`) is differentiated exactly,
    switches included.
    """
    obj, der, settings, node, shared, st = _one_node(objective, derivatives, theta, starts, n_steps, tol)
    hs, values, gnorms = all_minima(obj, der, settings, node, shared, st, True)
    return hs[0], values[0], gnorms[0]


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


# ----------------------------------------------------------------------------
# The state evolution's proximal objective (theory notes, section 3)
# ----------------------------------------------------------------------------


def moreau_objective(h_flat: Array, theta) -> Array:
    """`sum_l 1/2 (h_l - omega_l)^T V_l^{-1} (h_l - omega_l) + ell(h, T)` with the model's loss `ell = params.loss`;
    `theta = (omega (L, r), T (L, L), V_inv (L, r, r), params)`."""
    omega, T, V_inv, params = theta
    h = h_flat.reshape(omega.shape)
    dh = h - omega
    return 0.5 * jnp.einsum("la,lab,lb->", dh, V_inv, dh) + params.loss(h, T, params)


def closed_form_prox(params: TiedAttentionParams):
    """`(objective, derivatives)` of the proximal problem: the loss's closed forms where it declares them
    (`SampleLoss.prox_derivatives`), else `(moreau_objective, None)` (autodiff)."""
    closed = params.loss.prox_derivatives(params)
    return (moreau_objective, None) if closed is None else closed


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


# ----------------------------------------------------------------------------
# Many minimisations at once: lanes that stop when they have converged
# ----------------------------------------------------------------------------


class LaneState(NamedTuple):
    """Damped-Newton state of `M` lanes: `h (M, n)`, value `f (M,)`, gradient `g (M, n)`, Hessian `H (M, n, n)`,
    Levenberg-Marquardt damping `mu (M,)` and the steps taken `steps (M,)`."""

    h: Array
    f: Array
    g: Array
    H: Array
    mu: Array
    steps: Array


class LaneSettings(NamedTuple):
    """How `minimize_lanes` runs (static; hashable).

    Attributes:
      max_steps: the most damped Newton steps a lane takes (an int, or a tuple of one per start slot).
      stop_tol: a lane stops when `max |g| <= stop_tol`.
      block: the lanes stepped side by side in a block (`minimize_lanes`).
      mu0: the initial Levenberg-Marquardt damping.
    """

    max_steps: int | tuple = 8
    stop_tol: float = 1e-11
    block: int = 512
    mu0: float = 1e-10


def lane_derivatives(objective: Callable, derivatives: Callable | None) -> Callable:
    """`(h, theta) -> (value, gradient, Hessian)`: `derivatives`, or autodiff of `objective(h, theta)`."""
    if derivatives is not None:
        return derivatives
    value_and_grad = jax.value_and_grad(objective)
    hessian = jax.hessian(objective)
    return lambda h, theta: (*value_and_grad(h, theta), hessian(h, theta))


def _partition(flags: Array) -> Array:
    """The permutation `(M,)` that puts the lanes where `flags` is false first and those where it is true last, each
    group in its order (a stable partition: two cumulative sums, no sort)."""
    M = flags.shape[0]
    dest = jnp.where(flags, M - jnp.sum(flags) + jnp.cumsum(flags) - 1, jnp.cumsum(~flags) - 1)
    return jnp.zeros((M,), jnp.int32).at[dest].set(jnp.arange(M, dtype=jnp.int32))


class _Rows(NamedTuple):
    """How a lane's state and problem are laid out in one row of floats (`_pack`, `_unpack`)."""

    n: int                  # the minimiser's size
    unravel: Callable       # a lane's problem from its row part


def _pack(st: LaneState, cap: Array, act: Array, theta_rows: Array) -> Array:
    """Lanes as rows `(M, P)`: `h, f, g, H, mu, steps, cap, active` and the lane's problem, raveled."""
    M, n = st.h.shape
    col = lambda a: jnp.asarray(a, st.h.dtype)[:, None]  # noqa: E731
    return jnp.concatenate([st.h, col(st.f), st.g, st.H.reshape(M, n * n), col(st.mu), col(st.steps), col(cap),
                            col(act), theta_rows], axis=1)


def _unpack(rows: Array, n: int) -> tuple[LaneState, Array, Array]:
    """`(LaneState, cap, active)` of rows `(..., P)` (`_pack`'s inverse, the problem left in the row)."""
    lead = rows.shape[:-1]
    h, f, g = rows[..., :n], rows[..., n], rows[..., n + 1:2 * n + 1]
    k = 2 * n + 1
    H = rows[..., k:k + n * n].reshape(lead + (n, n))
    k += n * n
    st = LaneState(h=h, f=f, g=g, H=H, mu=rows[..., k], steps=rows[..., k + 1].astype(jnp.int32))
    return st, rows[..., k + 2].astype(jnp.int32), rows[..., k + 3] > 0.5


def _row_problem(rows: Array, layout: _Rows):
    """The lanes' problems (`thetas`, leading axes those of `rows`) of rows `(..., P)`."""
    if layout.unravel is None:
        return ()
    n = layout.n
    k = 2 * n + 1 + n * n + 4
    lead = rows.shape[:-1]
    theta = jax.vmap(layout.unravel)(rows[..., k:].reshape((-1, rows.shape[-1] - k)))
    return jax.tree_util.tree_map(lambda a: a.reshape(lead + a.shape[1:]), theta)


@jax.named_scope("minimize_lanes")
def minimize_lanes(objective: Callable, derivatives: Callable | None, h0: Array, thetas, active: Array,
                   max_steps, *, stop_tol: float = 1e-11, block: int = 512, mu0: float = 1e-10) -> LaneState:
    """Minimise `objective(h, theta_i)` from `h0[i]` for every lane `i` of `M`, each until it has converged.

    `thetas` is a pytree with a leading `(M,)` axis (of the dtype of `h0`); `active (M,)` bool marks the lanes
    to minimise (the others keep their start and take no step); `max_steps` (an int or `(M,)` integer array, may
    be traced) caps each lane's steps. A lane stops when its gradient is below `stop_tol` (or its steps reach
    its cap).

    The steps are `_newton_step`'s, taken side by side in blocks of `block` lanes, so that a lane costs about the
    steps it needs: the lanes with a step to take are put last (a stable partition), each round steps only the
    blocks from the first one with a lane still going, skipping any block with none, and the lanes still going
    are put last again after the second and the fourth round; a block tries the shorter lengths of its steps
    only where a lane's full length is not taken (near a minimum, most steps). A lane's state and problem
    travel as one row of floats, so that a block is read and written whole. The step is traced once. Returns
    the final `LaneState` (values non-finite -> `inf`) in the lanes' order. Jittable and vmappable.
    """
    der = lane_derivatives(objective, derivatives)
    M, n = h0.shape
    dtype = h0.dtype
    f, g, H = jax.vmap(der)(h0, thetas)
    st = LaneState(h=h0, f=f, g=g, H=H, mu=jnp.full((M,), mu0, dtype), steps=jnp.zeros((M,), jnp.int32))
    cap = jnp.broadcast_to(jnp.asarray(max_steps, jnp.int32), (M,))
    act = jnp.broadcast_to(jnp.asarray(active, bool), (M,)) & (cap > 0)
    if jax.tree_util.tree_leaves(thetas):
        theta_rows = jax.vmap(lambda t: ravel_pytree(t)[0])(thetas)
        layout = _Rows(n=n, unravel=ravel_pytree(jax.tree_util.tree_map(lambda a: a[0], thetas))[1])
    else:                 # the lanes share their problem (it lives in the objective's closure)
        theta_rows, layout = jnp.zeros((M, 0), dtype), _Rows(n=n, unravel=None)
    K = max(1, min(int(block), M))
    nb = -(-M // K)
    pad = nb * K - M

    def going(s, c, a):
        return a & (jnp.max(jnp.abs(s.g), axis=-1) > stop_tol) & (s.steps < c)

    rows = _pack(st, cap, act, theta_rows.astype(dtype))
    order = _partition(going(st, cap, act))                                      # the lanes going last
    rows = rows[order]
    if pad:     # lanes that take no step (not active)
        rows = jnp.concatenate([rows, jnp.zeros((pad, rows.shape[1]), dtype)])
        order = jnp.concatenate([order, jnp.full((pad,), M, order.dtype)])          # M: a padding lane
    rows = rows.reshape(nb, K, -1)

    def full_length(s, theta):     # a direction and its full length: `(direction, value there, taken)`
        d, resolved = _direction(s.h, s.f, s.g, s.H, s.mu)
        f_full = objective(s.h + d, theta)
        return d, f_full, _full_step_taken(s.f, s.g, d, f_full, resolved)

    def finish(s, theta, h_new, run):
        h, f, g, H, mu = _finish_step(lambda h: der(h, theta), (s.h, s.f, s.g, s.H, s.mu), h_new)
        moved = LaneState(h=h, f=f, g=g, H=H, mu=mu, steps=s.steps + 1)
        return jax.tree_util.tree_map(lambda a, b: jnp.where(run, a, b), moved, s)

    def step_rows(r):
        """`_newton_step` on a block's rows where a lane is going: the shorter lengths are tried only if a lane's
        full length is not taken."""
        s, c, a = _unpack(r, n)
        th = _row_problem(r, layout)
        run = going(s, c, a)
        d, f_full, taken = jax.vmap(full_length)(s, th)
        h_new = s.h + d
        h_new = jax.lax.cond(jnp.any(run & ~taken), lambda: jnp.where(
            taken[:, None], h_new, jax.vmap(lambda s_, t_, d_, f_: _best_length(lambda h: objective(h, t_), s_.h, d_,
                                                                                 f_))(s, th, d, f_full)),
            lambda: h_new)
        s = jax.vmap(finish)(s, th, h_new, run)
        return r.at[:, :2 * n + 1 + n * n + 2].set(_pack(s, c, a, r[:, :0])[:, :2 * n + 1 + n * n + 2])

    def live_lanes(rows):
        return going(*_unpack(rows, n))

    def regroup(carry):
        """Put the lanes still going last (a stable partition), so that the rounds that follow step the fewest
        blocks."""
        rows, order = carry
        flat = rows.reshape(nb * K, -1)
        perm = _partition(live_lanes(flat))
        return flat[perm].reshape(rows.shape), order[perm]

    def round_(carry):
        rows, order, r = carry
        rows, order = jax.lax.cond((r == 2) | (r == 4), regroup, lambda c: c, (rows, order))
        live = jnp.any(live_lanes(rows), axis=1)                                       # (nb,)

        def step_block(i, rows):
            return jax.lax.cond(live[i], lambda: rows.at[i].set(step_rows(rows[i])), lambda: rows)  # noqa: B023

        return jax.lax.fori_loop(jnp.argmax(live), nb, step_block, rows), order, r + 1

    rows, order, _ = jax.lax.while_loop(lambda c: jnp.any(live_lanes(c[0])) & (c[2] < jnp.max(cap)), round_,
                                        (rows, order, jnp.asarray(0, jnp.int32)))
    flat = jnp.zeros((M + 1, rows.shape[-1]), dtype).at[order].set(rows.reshape(nb * K, -1))[:M]
    st = _unpack(flat, n)[0]
    return st._replace(f=jnp.where(jnp.isfinite(st.f), st.f, jnp.inf))


@jax.named_scope("minimize_dense")
def minimize_dense(objective: Callable, derivatives: Callable | None, h0: Array, thetas, max_steps: int, *,
                   stop_tol: float = 1e-11, mu0: float = 1e-10) -> LaneState:
    """Minimise `objective(h, theta_i)` from `h0[i] (M, n)` for every lane (`thetas`: leading `(M,)` axis) by
    `_newton_step`s side by side, until every lane's gradient is below `stop_tol` or `max_steps` steps: the small
    program for a few lanes (`minimize_lanes` is the economical one for many). A lane that has stopped keeps its
    state. Returns the final `LaneState` (values non-finite -> `inf`)."""
    der = lane_derivatives(objective, derivatives)
    M = h0.shape[0]
    f, g, H = jax.vmap(der)(h0, thetas)
    st = LaneState(h=h0, f=f, g=g, H=H, mu=jnp.full((M,), mu0, h0.dtype), steps=jnp.zeros((M,), jnp.int32))

    def going(st):
        return jnp.max(jnp.abs(st.g), axis=-1) > stop_tol

    def one(st, theta, run):
        h, f, g, H, mu = _newton_step(lambda h: objective(h, theta), lambda h: der(h, theta),
                                      (st.h, st.f, st.g, st.H, st.mu))
        moved = LaneState(h=h, f=f, g=g, H=H, mu=mu, steps=st.steps + 1)
        return jax.tree_util.tree_map(lambda a, b: jnp.where(run, a, b), moved, st)

    st, _ = jax.lax.while_loop(lambda c: jnp.any(going(c[0])) & (c[1] < max_steps),
                               lambda c: (jax.vmap(one)(c[0], thetas, going(c[0])), c[1] + 1), (st, jnp.asarray(0)))
    return st._replace(f=jnp.where(jnp.isfinite(st.f), st.f, jnp.inf))


def node_lanes(objective, derivatives, settings: LaneSettings, node_thetas, shared, starts, active) -> LaneState:
    """Every start of every node: `starts (N, S, n)`, `active (N, S)` (or broadcastable); node `i`'s objective is
    `objective(h, node_thetas[i] + shared)` (tuples). Returns `LaneState` with `(N, S)` leading axes. The lanes
    are laid out slot by slot (all nodes' first start, then all second starts, ...): the rounds of
    `minimize_lanes` run slot by slot first (a slot with no active start costs nothing), then take the lowest
    lanes first."""
    N, S, n = starts.shape
    lane_node = jnp.tile(jnp.arange(N), S)
    thetas = jax.tree_util.tree_map(lambda a: a[lane_node], tuple(node_thetas))
    caps = np.broadcast_to(np.asarray(settings.max_steps, np.int32), (S,))
    st = minimize_lanes(lambda h, th: objective(h, tuple(th) + tuple(shared)),
                        None if derivatives is None else (lambda h, th: derivatives(h, tuple(th) + tuple(shared))),
                        jnp.swapaxes(starts, 0, 1).reshape(S * N, n), thetas,
                        jnp.swapaxes(jnp.broadcast_to(active, (N, S)), 0, 1).reshape(-1), np.repeat(caps, N),
                        stop_tol=settings.stop_tol, block=settings.block, mu0=settings.mu0)
    return jax.tree_util.tree_map(lambda a: jnp.swapaxes(a.reshape((S, N) + a.shape[1:]), 0, 1), st)


def _best(values: Array, active: Array) -> Array:
    """Index `(N,)` of the lowest value among each node's active starts (`values (N, S)`)."""
    return jnp.argmin(jnp.where(jnp.broadcast_to(active, values.shape), values, jnp.inf), axis=1)


def lowest_minima(objective, derivatives, settings: LaneSettings, node_thetas, shared, starts, active):
    """`(h, grad_norm, start, h_starts)` of `lowest_minima_per_start` (without the per-start values)."""
    return lowest_minima_per_start(objective, derivatives, settings, node_thetas, shared, starts, active)[:4]


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
def lowest_minima_per_start(objective, derivatives, settings: LaneSettings, node_thetas, shared, starts, active):
    """The lowest minimum of every node's proximal problem over its active starts (`minimize_lanes`).

    Node `i` minimises `objective(h, node_thetas[i] + shared)` (`node_thetas`: a tuple of `(N, ...)` arrays,
    `shared`: a tuple of unbatched values) from `starts (N, S, n)`, where `active (N, S)` (or broadcastable).
    Returns `h (N, n)`, `grad_norm (N,)` (max-abs gradient), `start (N,)` (the index of the start kept),
    every start's end point `h_starts (N, S, n)` (an inactive start's is the start itself), value
    `values (N, S)` (`inf` where not finite or not active) and gradient norm `grad_norms (N, S)`.
    Differentiable in `node_thetas` and `shared` by the implicit function theorem at the kept minimum
    (`dh = -H^{-1} d_theta grad_h objective`; a switch of the kept start is not differentiated; the per-start
    outputs carry no tangent); the starts are not differentiated.
    """
    st = node_lanes(objective, derivatives, settings, node_thetas, shared, starts, active)
    best = _best(st.f, active)
    pick = lambda a: jnp.take_along_axis(a, best.reshape((-1,) + (1,) * (a.ndim - 1)), axis=1)[:, 0]  # noqa: E731
    gnorms = jnp.max(jnp.abs(st.g), axis=-1)
    values = jnp.where(jnp.broadcast_to(active, st.f.shape), st.f, jnp.inf)
    return pick(st.h), pick(gnorms), best, st.h, values, gnorms


@lowest_minima_per_start.defjvp
def _lowest_minima_jvp(objective, derivatives, settings, primals, tangents):
    node_thetas, shared, starts, active = primals
    d_node, d_shared = tangents[0], tangents[1]
    out = lowest_minima_per_start(objective, derivatives, settings, node_thetas, shared, starts, active)
    h, gnorm, best, hs, values, gnorms = out
    dh = jax.vmap(lambda h_, th, dth: _implicit_tangents(objective, derivatives, h_, tuple(th) + tuple(shared),
                                                         tuple(dth) + tuple(d_shared))[0],
                  in_axes=(0, 0, 0))(h, tuple(node_thetas), tuple(d_node))
    return out, (dh, jnp.zeros_like(gnorm), jax.custom_derivatives.zero_from_primal(best), jnp.zeros_like(hs),
                 jnp.zeros_like(values), jnp.zeros_like(gnorms))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
def all_minima(objective, derivatives, settings: LaneSettings, node_thetas, shared, starts, active):
    """Every start's minimum of every node's proximal problem, none discarded (arguments as `lowest_minima`).

    Returns `hs (N, S, n)`, `values (N, S)` (`inf` where not finite or the start is not active) and
    `grad_norms (N, S)`. Differentiable: each `h` by the implicit function theorem at its own optimum, each
    value by the envelope theorem, so a smooth function of the values (`tie_weights`) is differentiated
    exactly, switches included.
    """
    st = node_lanes(objective, derivatives, settings, node_thetas, shared, starts, active)
    values = jnp.where(jnp.broadcast_to(active, st.f.shape), st.f, jnp.inf)
    return st.h, values, jnp.max(jnp.abs(st.g), axis=-1)


@all_minima.defjvp
def _all_minima_jvp(objective, derivatives, settings, primals, tangents):
    node_thetas, shared, starts, active = primals
    d_node, d_shared = tangents[0], tangents[1]
    hs, values, gnorms = all_minima(objective, derivatives, settings, node_thetas, shared, starts, active)

    def per_node(hk, th, dth):
        theta, dtheta = tuple(th) + tuple(shared), tuple(dth) + tuple(d_shared)
        return jax.vmap(lambda h_: _implicit_tangents(objective, derivatives, h_, theta,
                                                      dtheta))(hk)

    dhs, dvalues = jax.vmap(per_node)(hs, tuple(node_thetas), tuple(d_node))
    finite = jnp.isfinite(values)
    dhs = jnp.where(finite[..., None], dhs, 0.0)      # an inactive or failed start carries no tangent
    dvalues = jnp.where(finite, dvalues, 0.0)
    return (hs, values, gnorms), (dhs, dvalues, jnp.zeros_like(gnorms))

