"""Continuation along `alpha`: a row of state-evolution solves, each started from the last (theory notes, 8.4).

A row is one `lax.scan` over its `alpha`s whose step is everything one point needs: the Newton solve (all its
stages, `phasejax.theory.newton`), the losses, stabilities and error bars (`postprocess`) and, optionally,
the replicon (`phasejax.theory.replicon`), all in the solver's one loop (the replicas and the replicon as its
error passes). Each is traced once, however long the row; a single cold solve is the same scan on one point. What a point carries to the next (`RowCarry`): the last two fixed points and
their `alpha` (the next start is extrapolated linearly from them), the count of successes, and the node
minimisers and rule orientation of the last success.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

import functools

from phasejax.solvers import Status
from phasejax.theory.adjoint import NoAdjoint, PointState, zero_tangent
from phasejax.theory.branches import BranchInit
from phasejax.theory.fields import field_maps
from phasejax.theory.newton import NewtonSE, SEConfig, postprocess, run_newton
from phasejax.theory.se_map import MapApproximation, SEProblem, initial_warm

Array = jax.Array


class RowCarry(NamedTuple):
    """What a continuation row (`continuation`) carries from one point to the next."""

    x_last: Array      # (n,) the last converged fixed point
    x_prev: Array      # (n,) the one before it (the secant's other end)
    a_last: Array      # () alpha of `x_last`
    a_prev: Array      # () alpha of `x_prev`
    n_ok: Array        # () converged solves since the row started
    warm: Array        # (N, L r) node minimisers of the last success
    frame: object      # the rule's orientation at the last success (None for a rule without one)


def continuation(params, alphas, init: BranchInit, scheme, config: SEConfig, approximation: MapApproximation,
                 kappa=None, *, retry: bool = True, replicon_tie_width: float | None = None):
    """Continuation along `alphas (A,)` with a cold start at `alphas[0]`: `(results (A,), final warm, final frame)`;
    with `replicon_tie_width` (static), `results` is `(SEResult (A,), RepliconResult (A,))`.

    Each solve starts from the previous fixed point (secant-extrapolated from the last two), its node minimisers
    and its quadrature orientation; a failed solve is reported and the next one restarts from the last success
    (with the cold cap `max_iter` until a first success). The cold first point of an adaptive rule takes two
    stages: solve with the rule oriented at `init`, re-orient at that solution and solve again (the returned
    fixed point is that of the rule oriented at it; its `iterations` count both stages). With `retry`, a failed
    solve is solved once more from its last iterate with the rule re-oriented there. The replicon of every
    point (`phasejax.theory.replicon`, at the smoothing `replicon_tie_width`) comes from the solver's error passes
    with the error replicas (`phasejax.theory.newton`); it is meaningful where the point converged. Until a first
    success the solve is cold: it orients the rule at its start and starts every node at its field.

    Differentiable in `params` and `alphas` as `config.adjoint` says (`phasejax.theory.adjoint`; default: the
    implicit function theorem at every converged point, the iterations not differentiated).
    """
    static = _RowSettings(config, approximation, bool(retry), replicon_tie_width)
    outs, warm, frame, _ = _differentiable_row(static, params, alphas, (init, scheme, kappa))
    return outs, warm, frame


class _RowSettings(NamedTuple):
    """The static settings of a row (hashable): the solver's (its adjoint included), the map's, the retry and the
    replicon's smoothing."""

    config: SEConfig
    approximation: MapApproximation
    retry: bool
    replicon_tie_width: float | None


def _row(static: _RowSettings, params, alphas, init: BranchInit, scheme, kappa):
    """The row itself: `(results (A,), final warm, final frame, PointState (A,))`."""
    config, approximation, retry, replicon_tie_width = static
    solver = NewtonSE(config, kappa, replicon_tie_width)
    x0, unravel = ravel_pytree(init.overlaps)
    p0 = params.replace(alpha=alphas[0])
    # placeholders until a first success: a solve with none orients the rule and starts every node at its field
    zeros = lambda f: jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(f))  # noqa: E731
    frame0 = zeros(lambda: scheme.frame(init.overlaps, p0))
    warm0 = zeros(lambda: initial_warm(p0, scheme, init.overlaps, frame0))
    first = jnp.arange(alphas.shape[0]) == 0

    def body(c: RowCarry, inp):
        alpha, is_first = inp
        slope = jnp.where(c.n_ok >= 2,
                          (c.x_last - c.x_prev) / jnp.where(c.a_last != c.a_prev, c.a_last - c.a_prev, 1.0), 0.0)
        guess = c.x_last + slope * (alpha - c.a_last)
        p = params.replace(alpha=alpha)
        guess = jnp.where(field_maps(unravel(guess), p).valid, guess, c.x_last)
        # a warm start gets `max_iter_warm` iterations; a cold start and a restart before any success `max_iter`
        cap = jnp.where((c.n_ok > 0) & ~is_first, config.max_iter_warm, config.max_iter)
        problem = SEProblem(p, scheme, init._replace(overlaps=unravel(guess)), c.frame, approximation)
        state = run_newton(solver, problem, c.warm, cap, orient_first=is_first, retry=retry, cold=c.n_ok == 0)
        result, replicon = postprocess(solver, problem, state)
        out = result if replicon_tie_width is None else (result, replicon)
        ok = state.status == Status.CONVERGED
        point = jax.lax.stop_gradient(PointState(x=state.x_eval, warm=state.warm, frame=state.frame, ok=ok))
        x_last = jnp.where(ok, state.x_eval, c.x_last)
        a_last = jnp.where(ok, alpha, c.a_last)
        frame = c.frame
        if frame is not None:      # oriented at this solution, for the next point
            frame = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), state.frames_end[0], c.frame)
        carry = RowCarry(
            x_last=x_last,
            # after the cold first point the row starts afresh from its solution (no secant across it)
            x_prev=jnp.where(is_first, x_last, jnp.where(ok, c.x_last, c.x_prev)),
            a_last=a_last,
            a_prev=jnp.where(is_first, a_last, jnp.where(ok, c.a_last, c.a_prev)),
            n_ok=(c.n_ok + ok).astype(c.n_ok.dtype),
            warm=jnp.where(ok, state.warm, c.warm),
            frame=frame)
        return jax.lax.stop_gradient(carry), (out, point)

    a0 = alphas[0]
    carry0 = RowCarry(x_last=x0, x_prev=x0, a_last=a0, a_prev=a0, n_ok=jnp.asarray(0, jnp.int32), warm=warm0,
                      frame=frame0)
    carry, (outs, points) = jax.lax.scan(body, carry0, (alphas, first))
    return outs, carry.warm, carry.frame, points


def _split(args):
    params, alphas, rest = args
    return (params, alphas, *rest)


@functools.lru_cache(maxsize=None)
def _mapped_row(static: _RowSettings):
    """`_row` for `static` whose `jax.vmap` solves the batch's rows one after the other on a CPU (`lax.map`: a
    vmapped while loop runs every lane until the slowest is done, so a batch would cost its slowest solve times its
    size) and side by side on an accelerator (where side by side is parallel)."""

    @jax.custom_batching.custom_vmap
    def row(params, alphas, rest):
        return _row(static, params, alphas, *rest)

    @row.def_vmap
    def _batched(axis_size, in_batched, params, alphas, rest):
        args = (params, alphas, rest)
        leaves, tree = jax.tree_util.tree_flatten(args)
        batched = jax.tree_util.tree_leaves(in_batched)
        if jax.default_backend() == "cpu":
            full = [a if b else jnp.broadcast_to(a, (axis_size,) + jnp.shape(a)) for a, b in zip(leaves, batched)]
            out = jax.lax.map(lambda ls: _row(static, *_split(jax.tree_util.tree_unflatten(tree, ls))), full)
        else:
            axes = jax.tree_util.tree_unflatten(tree, [0 if b else None for b in batched])
            out = jax.vmap(lambda p, a, r: _row(static, p, a, *r), in_axes=axes)(*args)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return row


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _differentiable_row(static: _RowSettings, params, alphas, rest):
    return _mapped_row(static)(params, alphas, rest)


@_differentiable_row.defjvp
def _row_jvp(static: _RowSettings, primals, tangents):
    """The row and its tangent: every point's by `static.config.adjoint` (`phasejax.theory.adjoint`), one point at
    a time."""
    params, alphas, rest = primals
    dparams, dalphas, _ = tangents
    out = _mapped_row(static)(params, alphas, rest)
    d_out = zero_tangent(out)
    adjoint = static.config.adjoint
    if isinstance(adjoint, NoAdjoint):
        return out, d_out
    init, scheme, _ = rest
    outs, _, _, points = out
    unravel = ravel_pytree(init.overlaps)[1]

    def one(point_in):
        alpha, dalpha, point = point_in
        problem = SEProblem(params.replace(alpha=alpha), scheme, init._replace(overlaps=unravel(point.x)), point.frame,
                            static.approximation)
        return adjoint.tangent(problem, point, dparams.replace(alpha=dalpha), static.config.psd_tol)

    dx, dobs = jax.lax.map(one, (alphas, dalphas, points))
    results = outs if static.replicon_tie_width is None else outs[0]
    d_results = zero_tangent(results).replace(
        overlaps=jax.vmap(unravel)(dx), hats=dobs.hats, train_loss=dobs.train_loss, test_error=dobs.test_error,
        energetic_loss=dobs.energetic_loss, sigma=jnp.broadcast_to(dparams.sigma, results.sigma.shape))
    d_outs = d_results if static.replicon_tie_width is None else (d_results, d_out[0][1])
    return out, (d_outs,) + tuple(d_out[1:])
