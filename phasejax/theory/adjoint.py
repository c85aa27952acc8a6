"""Derivatives of a state-evolution fixed point, by the implicit function theorem (docs/model.md).

A converged solve returns `x*` with `x* = F(x*, p)` on the branch's free coordinates (`F` the map of
`phasejax.theory.se_map` at the rule the solve used, `p` the model's array parameters). Differentiating that
identity gives `(I - J) dx = dF/dp . dp`, `J = dF/dx` at `x*`: one small linear solve with the Jacobian the
Newton solver already holds, whatever the number of iterations it took. An observable `o(x, p)` (the training
loss, the test error, the hats) then moves by `do = do/dx . dx + do/dp . dp`. The iterations themselves are never
differentiated, so `jax.jvp`, `jax.jacfwd`, `jax.vjp` and `jax.grad` of a solve all cost one solve plus a few
map evaluations with tangents, and reverse mode needs no `while_loop` transposition.

How a solve is differentiated is declared, as in optimistix's `root_find(..., adjoint=...)`:
`ImplicitAdjoint` (the default) or `NoAdjoint` (the solve's outputs are constants: `stop_gradient`). A subclass
of `AbstractAdjoint` may compute `tangent` another way.

What is and is not differentiated (`ImplicitAdjoint`):

* the overlaps, the hats, the training loss, the energetic loss and the test error of a converged point, and
  `sigma` (passed through), with respect to every array field of `TiedAttentionParams` (`alpha`, `omega`, `lam`,
  `sigma`, `A`, `C`) and the `alphas` of a continuation row;
* the derivative is that of the finite rule's fixed point at the rule's orientation (the frame) the solve
  used: the orientation decides only the quadrature error, not the integral, and is held fixed;
* within the branch's invariant subspace: held coordinates stay at zero (a perturbation that breaks the symmetry
  holding them, such as an asymmetric change of `A` on the semantic branch, is followed inside the subspace);
* a point that did not converge has NaN tangents (the identity `x = F(x)` does not hold there); in reverse mode the
  NaN reaches the gradient of anything computed from the same call (the transpose sums over a row's points, the
  failed one included): check `status` first;
* no derivative exists where `I - J` is singular (a fold of the branch, a spinodal: the tangent is large or not
  finite there) or where a quadrature node sits at a tie between two prox minima (the map jumps; with
  `MapApproximation(tie_width > 0)` it is smooth);
* the error bars, the stability, the subspace gain, the replicon, the residual and the counts are not
  differentiated (zero tangents, as under `stop_gradient`).
"""

from __future__ import annotations

import abc
import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.theory.branches import free_mask
from phasejax.theory.se_map import SEProblem, evaluate_map

Array = jax.Array


class PointState(NamedTuple):
    """What a finished solve hands to its adjoint (one point; a row adds a leading `(A,)` axis): the returned
    point `x (n,)`, the node minimisers there `warm (N, L r)`, the rule's orientation the last stage solved with
    `frame` (None for a rule without one) and whether it converged `ok ()`."""

    x: Array
    warm: Array
    frame: object
    ok: Array


class Observables(NamedTuple):
    """The differentiable quantities of a fixed point: `hats`, `train_loss ()`, `test_error ()`,
    `energetic_loss ()` (see `SEResult`)."""

    hats: object
    train_loss: Array
    test_error: Array
    energetic_loss: Array


def observables(problem: SEProblem, x: Array, ev, rule) -> Observables:
    """The observables at the state `x (n,)` from its map evaluation `ev` (`MapEvaluation`) on `rule`."""
    from phasejax.theory.updates import test_error, training_loss

    params = problem.params
    ov = problem.unravel()(x)
    return Observables(hats=ev.hats, train_loss=training_loss(ov, ev.hats, ev.envelope, params),
                       test_error=test_error(ov, params, rule),
                       energetic_loss=params.alpha * ev.loss + params.penalty.value(ov, params))


class AbstractAdjoint(abc.ABC):
    """How a state-evolution solve is differentiated (a frozen, hashable object holding only its settings)."""

    @abc.abstractmethod
    def tangent(self, problem: SEProblem, point: PointState, dparams, psd_tol: float):
        """`(dx (n,), Observables of tangents)` of the solve that ended at `point`, along the parameter tangent
        `dparams` (a `TiedAttentionParams` of tangents)."""


@dataclasses.dataclass(frozen=True)
class ImplicitAdjoint(AbstractAdjoint):
    """The implicit function theorem at the returned fixed point (module docstring).

    The map is linearised once at `x*`, with the rule oriented at `x*` and the orientation differentiated (an
    adapted rule puts its split on the surface where a node's prox minimiser jumps; as the parameters move, the
    surface moves, and only a split that moves with it gives the derivative of the integral: held fixed, the
    rule's sum misses the jump's contribution). Its Jacobian `J` (`n` applications of the linearisation), one
    linear solve `(I - J) dx = dF/dp . dp` on the free coordinates, and one more application for the
    observables give the tangent."""

    def tangent(self, problem: SEProblem, point: PointState, dparams, psd_tol: float):
        init = problem.init
        free = free_mask(init)
        gauge = init.gauge
        scheme = problem.scheme

        def evaluate(x, params):
            prob = problem.replace(params=params)
            ov = prob.unravel()(x)
            frame = scheme.frame(ov, params) if point.frame is not None else None
            ev = evaluate_map(prob, x, point.warm, -1, psd_tol, extra_starts=problem.approximation.alternates,
                              frame=frame)[0]
            Fx = ev.Fx if gauge is None else jnp.where(gauge, x, ev.Fx)
            return Fx, observables(prob, x, ev, scheme.main(ov, params, frame))

        _, linear = jax.linearize(evaluate, point.x, problem.params)
        n = point.x.shape[0]
        zero_p = jax.tree_util.tree_map(jnp.zeros_like, problem.params)
        eye = jnp.eye(n, dtype=point.x.dtype)
        J = jax.vmap(lambda e: linear(e, zero_p)[0], out_axes=1)(eye)          # (n, n): column j is J e_j
        dF, _ = linear(jnp.zeros_like(point.x), dparams)
        A = jnp.where(free[:, None] & free[None, :], eye - J, eye)
        dx = jnp.where(free, jnp.linalg.solve(A, jnp.where(free, dF, 0.0)), 0.0)
        _, dobs = linear(dx, dparams)
        # NaN where the point did not converge, as a factor: linear in the tangent, so reverse mode (the transpose)
        # gives NaN too, not the zero a `where` would transpose to
        mask = jnp.where(point.ok, 1.0, jnp.nan)
        nan = lambda t: t * mask  # noqa: E731
        return nan(dx), jax.tree_util.tree_map(nan, dobs)


@dataclasses.dataclass(frozen=True)
class NoAdjoint(AbstractAdjoint):
    """No derivative: the solve's outputs are constants (zero tangents, as `jax.lax.stop_gradient`)."""

    def tangent(self, problem: SEProblem, point: PointState, dparams, psd_tol: float):
        return None


def zero_tangent(tree):
    """Zero tangents of the pytree `tree`: zeros for inexact leaves, `float0` zeros for integer and boolean ones."""
    def zero(x):
        x = jnp.asarray(x)
        if jnp.issubdtype(x.dtype, jnp.inexact):
            return jnp.zeros_like(x)
        return np.zeros(x.shape, dtype=jax.dtypes.float0)

    return jax.tree_util.tree_map(zero, tree)
