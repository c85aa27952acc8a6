"""Solving the state evolution: the entry points (theory notes, sections 4-5 and 8.4).

`solve_state_evolution` (one point), `solve_state_evolution_batch` (many points, each a cold solve),
`solve_along_alpha` (a continuation row) and `solve_state_evolution_grid` (rows over `omega`, vmapped) all run
the same compiled step, a point of a continuation row (`phasejax.theory.continuation`): the Newton solve of the
fixed point (`phasejax.theory.newton`) of the map `phasejax.theory.se_map`, its losses, stabilities and
quadrature errors. They compute in float64 inside a scoped switch (`phasejax.precision`), validate concrete
inputs (`ValueError` naming the parameter) and report traced invalid inputs as a status.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from phasejax import xla
from phasejax.precision import uses_float64
from phasejax.solvers import raise_unless_converged
from phasejax.theory.branches import BRANCHES, BranchInit, branch_init
from phasejax.theory.continuation import continuation
from phasejax.theory.newton import SEConfig
from phasejax.theory.params import TiedAttentionParams, validate_params
from phasejax.theory.quadrature import resolve_scheme  # noqa: F401 - the entry points resolve their rule
from phasejax.theory.results import SEResult
from phasejax.theory.se_map import MapApproximation

Array = jax.Array


def _solve(params, init, scheme, config, approximation, kappa=None):
    """Jittable core of a cold solve: `(SEResult, final node minimisers, frame)`, a continuation row of one
    point (an adaptive rule: two stages and a retry; a fixed rule: one solve, no retry)."""
    adaptive = bool(scheme.adaptive)
    results, warm, frame = continuation(params, jnp.reshape(params.alpha, (1,)), init, scheme, config, approximation,
                                        kappa, retry=adaptive)
    return jax.tree_util.tree_map(lambda a: a[0], results), warm, frame


solve_jit = xla.jit(_solve, static_argnames=("config", "approximation"), store=True)


def _solve_row(params, alphas, init: BranchInit, scheme, config: SEConfig, approximation: MapApproximation):
    """Continuation along `alphas (A,)` (`continuation`); results carry a leading `(A,)` axis."""
    return continuation(params, alphas, init, scheme, config, approximation)[0]


solve_row_jit = xla.jit(_solve_row, static_argnames=("config", "approximation"), store=True)


# ----------------------------------------------------------------------------
# Public entry points (float64 by a scoped switch; see phasejax.precision)
# ----------------------------------------------------------------------------


def resolve_init(init, params: TiedAttentionParams) -> BranchInit:
    """A `BranchInit` from a branch name or a `BranchInit` (validated)."""
    if isinstance(init, str):
        return branch_init(init, params)
    if not isinstance(init, BranchInit):
        raise ValueError(f"init must be a branch name {BRANCHES} or a BranchInit, got {type(init).__name__}")
    return _as_float64(init)


def _as_float64(init: BranchInit) -> BranchInit:
    """The init's overlaps in float64 (an init built outside `float64_scope` holds float32 arrays)."""
    return init._replace(overlaps=jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64), init.overlaps))


@uses_float64
def solve_state_evolution(params: TiedAttentionParams, init: BranchInit | str = "semantic", quadrature=None,
                          config: SEConfig = SEConfig(),
                          approximation: MapApproximation = MapApproximation(), *, throw: bool = False) -> SEResult:
    """Solve the state evolution at one point (theory notes, sections 4-5, 8).

    Args:
      params: `TiedAttentionParams` (`make_params`); its array fields may be traced (vmap, jit under
        `phasejax.float64_scope()`).
      init: a branch name (`"positional"`, `"semantic"`, `"agnostic"`) or a `BranchInit` (custom overlaps).
      quadrature: `None` for the converged default (`default_scheme`), a scheme (`SplitProductRule`,
        `SobolRule`) or a fixed `Quadrature` (then errors are not estimated).
      config: `SEConfig` (static): the solver's settings.
      approximation: `MapApproximation` (static): how the map is computed at the nodes.
      throw: raise `phasejax.solvers.SolverError` when the solve did not converge (a concrete call, as
        optimistix's `throw=True`); by default failure is the result's `status`.
    Returns:
      `SEResult` (float64) with `errors` (95% half-widths of the quadrature error). Invalid concrete
      inputs raise `ValueError`; invalid traced inputs give `status = INVALID_INPUT`; an iterate leaving the
      valid domain gives `INVALID_ITERATE` with the last valid evaluation.

    Example:
      >>> from phasejax.theory import make_params, solve_state_evolution
      >>> res = solve_state_evolution(make_params(2.0, 0.3), "semantic")      # doctest: +SKIP
      >>> res.status_name, round(float(res.q[0]), 4), float(res.q_err[0]) < 1e-3   # doctest: +SKIP
      ('converged', 0.1148, True)
    """
    validate_params(params)
    init = resolve_init(init, params)
    scheme = resolve_scheme(quadrature, params)
    return _checked(solve_jit(params, init, scheme, config, approximation)[0], throw, "solve_state_evolution")


def _checked(result: SEResult, throw: bool, what: str) -> SEResult:
    """`result`, or `SolverError` with `throw` when any of its points did not converge."""
    if throw:
        raise_unless_converged(result.status, what)
    return result


def _check_grid(alpha, omega):
    alpha = jnp.atleast_1d(jnp.asarray(alpha, jnp.float64))
    omega = jnp.atleast_1d(jnp.asarray(omega, jnp.float64))
    if alpha.ndim != 1 or alpha.shape != omega.shape:
        raise ValueError(f"alpha and omega must be 1-d arrays of equal length, got {alpha.shape} and {omega.shape}")
    return alpha, omega


def _lanes(batch_size, n: int):
    """The number of points solved side by side (vmapped) in a batch: `"auto"` is 1 on a CPU (the points
    of a vmapped while loop all run until the slowest is done, and a CPU gains nothing from solving them
    side by side) and all `n` on an accelerator (where side by side is parallel)."""
    if batch_size == "auto":
        return 1 if jax.default_backend() == "cpu" else n
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer or 'auto', got batch_size={batch_size!r}")
    return min(int(batch_size), n)


def map_points(f, xs, batch_size: int | str = "auto"):
    """`f` over the leading axis of the pytree `xs` (`n` points), in groups of `batch_size` vmapped points,
    the groups one after the other in a `jax.lax.map` (`_lanes`: `"auto"` is one point at a time on a CPU,
    all `n` side by side on an accelerator). A vmapped group of iterative solves costs its slowest point
    times the group size; mapped one by one, the points cost the sum of their solves."""
    n = jax.tree_util.tree_leaves(xs)[0].shape[0]
    lanes = _lanes(batch_size, n)
    if n == 1:       # one point: neither a loop nor a batch axis in the program
        return jax.tree_util.tree_map(lambda a: a[None], f(jax.tree_util.tree_map(lambda a: a[0], xs)))
    if lanes == n:
        return jax.vmap(f)(xs)
    return jax.lax.map(f, xs, batch_size=None if lanes == 1 else lanes)   # 1: a plain scan, no vmap


@uses_float64
def solve_state_evolution_batch(params: TiedAttentionParams, alpha, omega, init: BranchInit | str = "semantic",
                                quadrature=None, config: SEConfig = SEConfig(), batched_init: bool = False,
                                batch_size: int | str = "auto",
                                approximation: MapApproximation = MapApproximation(), *,
                                throw: bool = False) -> SEResult:
    """Solve at `N` points `(alpha[i], omega[i])` in one call (results carry a leading `(N,)` axis).

    `init` is shared by all points, or with `batched_init=True` a `BranchInit` with a leading `(N,)` axis
    (`stack_inits`). The points go through `jax.lax.map` in groups of `batch_size` vmapped points: within
    a group every point gets the same work per iteration and the loop runs until the group's slowest point
    is done, so a group costs its slowest point. `"auto"`: one point at a time on a CPU (a batch then costs
    the sum of its solves, no more), all `N` side by side on an accelerator. `solve_along_alpha`
    (continuation) is much cheaper along a line of `alpha`. `throw`: raise `SolverError` when any point did not
    converge (as `solve_state_evolution`).
    """
    alpha, omega = _check_grid(alpha, omega)
    validate_params(params.replace(alpha=alpha, omega=omega))
    scheme = resolve_scheme(quadrature, params)
    _lanes(batch_size, alpha.shape[0])          # a bad batch_size raises before any compute
    if batched_init:
        if not isinstance(init, BranchInit) or init.hold_m.shape != alpha.shape:
            raise ValueError(f"a batched init must be a BranchInit with leading axis {alpha.shape}")
        inits = _as_float64(init)
    else:
        one = resolve_init(init, params)
        inits = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, alpha.shape + jnp.shape(x)), one)

    def solve(point):
        a, w, i = point
        return solve_jit(params.replace(alpha=a, omega=w), i, scheme, config, approximation)[0]

    return _checked(map_points(solve, (alpha, omega, inits), batch_size), throw, "solve_state_evolution_batch")


def _check_alphas(alphas, params: TiedAttentionParams):
    """`alphas` as a float64 `(A,)` array, non-empty, strictly monotone and valid (continuation rows); traced
    `alphas` (a derivative in them, a vmap) are checked for their shape only."""
    if isinstance(alphas, jax.core.Tracer):
        if alphas.ndim != 1 or alphas.shape[0] == 0:
            raise ValueError(f"alphas must be a non-empty 1-d sequence, got shape {alphas.shape}")
        return jnp.asarray(alphas, jnp.float64)
    a = np.asarray(alphas, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"alphas must be a non-empty 1-d sequence, got shape {a.shape}")
    if a.size > 1 and not (np.all(np.diff(a) > 0) or np.all(np.diff(a) < 0)):
        raise ValueError("alphas must be strictly monotone for continuation")
    validate_params(params.replace(alpha=jnp.asarray(a)))
    return a


@uses_float64
def solve_along_alpha(params: TiedAttentionParams, alphas, init: BranchInit | str = "semantic", quadrature=None,
                      config: SEConfig = SEConfig(),
                      approximation: MapApproximation = MapApproximation(), *, throw: bool = False) -> SEResult:
    """Follow a fixed point along `alphas (A,)` (strictly monotone) by continuation; results carry an `(A,)` axis.

    Each solve starts from the previous fixed point, extrapolated linearly from the last two, with the
    previous node minimisers as prox warm starts: a few Newton iterations per point instead of a cold
    solve. If a solve fails the next restarts from the last success. The branch followed is the fixed
    point reached from `init` at `alphas[0]`; where it ends (a fold) the continuation lands on another
    fixed point or fails (see `fixed_point_census` for a systematic search). `throw`: raise `SolverError` when
    any point did not converge (as `solve_state_evolution`).
    """
    a = _check_alphas(alphas, params)
    init = resolve_init(init, params)
    scheme = resolve_scheme(quadrature, params)
    return _checked(solve_row_jit(params, jnp.asarray(a), init, scheme, config, approximation), throw,
                    "solve_along_alpha")


@uses_float64
def solve_state_evolution_grid(params: TiedAttentionParams, alphas, omegas, init: BranchInit | str = "semantic",
                               quadrature=None, config: SEConfig = SEConfig(),
                               approximation: MapApproximation = MapApproximation(), *,
                               throw: bool = False) -> SEResult:
    """Solve on the grid `omegas (W,) x alphas (A,)` in one jitted call; results carry a `(W, A)` leading axis.

    Every `omega` is a continuation row along `alphas` (`solve_along_alpha`), and the rows are vmapped: the
    cheapest way to solve many points (a warm start needs a few Newton iterations instead of a cold solve's
    15-25). The phase diagram (`phasejax.phase.phase_diagram`) runs the same rows in resumable chunks. `throw`:
    raise `SolverError` when any point did not converge (as `solve_state_evolution`).
    """
    a = _check_alphas(alphas, params)
    w = np.atleast_1d(np.asarray(omegas, dtype=np.float64))
    if w.ndim != 1:
        raise ValueError(f"omegas must be a 1-d sequence, got shape {w.shape}")
    validate_params(params.replace(omega=jnp.asarray(w)))
    init = resolve_init(init, params)
    scheme = resolve_scheme(quadrature, params)
    rows = jax.vmap(lambda om: solve_row_jit(params.replace(omega=om), jnp.asarray(a), init, scheme, config,
                                             approximation))(jnp.asarray(w))
    return _checked(rows, throw, "solve_state_evolution_grid")
