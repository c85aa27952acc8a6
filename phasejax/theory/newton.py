"""The Newton solver of the state evolution's fixed point (theory notes, section 8.4).

The fixed point `x = F(x)` of the state evolution (`phasejax.theory.se_map`) is found by safeguarded Newton
iterations on the few order parameters: the Jacobian `J = dF/dx` comes from `jax.jacfwd` through the
quadrature (the proximal minimisers are differentiated by the implicit function theorem), the step solves
`((1 + kappa res) I - J) dx = F(x) - x` restricted to the branch's free coordinates, is capped to a relative
size `max_step` and halved until the new state is valid. Newton converges quadratically and to any fixed
point, stable or not under plain iteration, which the fixed-point census needs.

The per-node proximal problems are warm-started from the previous evaluation's minimisers. Far from the fixed
point only the warm start runs; once the residual is below `check_tol` every evaluation also restarts each
node from an alternative, its mirror `-h` and the field `omega` in turn, and convergence is declared only
when the residual is below `tol` on two consecutive evaluations that tried different alternatives (so both
were tried at the fixed point) and every node's prox has converged.

One solve may have up to three stages, all in one loop (`NewtonSE.step` moves between them): with a rule
that is oriented at the overlaps (`SplitProductRule`), a cold solve first solves with the rule oriented at
its start (stage 0), re-orients at that solution and solves again (stage 1); a solve that fails is solved
once more from its last iterate with the rule re-oriented there (stage 2, with `max_iter_warm` iterations),
because an orientation carried from elsewhere can leave the finite rule's map without an exact fixed point
within reach. A cold solve (no rule orientation and no node minimisers yet) begins with an orienting step
(stage -1: the rule oriented at the start, nothing evaluated), and its first evaluation starts every node at its
field. When the last stage ends, the rule is oriented at the solution (with its replicas' orientations, for
the error bars), for the next point of a continuation row. Every orientation is the same traced call.

Then the same loop makes the error passes (`NewtonSE.passes`): one step per copy of the rule (the scheme's
`pass_copies`: its replicas, and the main rule for the replicon) evaluates the map on that copy's nodes at the
solution, every node started from its main node's minimiser and from where the main node's alternative starts
ended (an alternative that ended in the minimiser's own basin is not run again), and keeps the hats, the
averaged envelope and the replicon's node averages of every row of weights the copy holds (`PassSums`). So the
map, its proximal problems and the rule's construction are traced once per program, for the solve and for
its error bars alike.

The solver has the shape of an optimistix solver: `NewtonSE` holds only its settings (`SEConfig`, optionally
a traced `kappa`, and the replicon's smoothing); the problem, an `SEProblem`, is passed to `init`, `step`,
`terminate` and `postprocess`; `phasejax.solvers.iterate` runs the loop (`run_newton`). After the loop
`postprocess` adds the training loss, the test error, the stability of the fixed point inside its subspace
(eigenvalues of `J`) and out of it (`subspace_gain`, from the Jacobian of the unconstrained map evaluated with
`J`), and, from the passes, quadrature error estimates (`phasejax.theory.results`) and the replicon
(`phasejax.theory.replicon`).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from phasejax.solvers import Status, iterate
from phasejax.theory.adjoint import AbstractAdjoint, ImplicitAdjoint, observables
from phasejax.theory.branches import free_mask
from phasejax.theory.fields import field_maps
from phasejax.theory.params import params_are_valid
from phasejax.theory.fields import Hats
from phasejax.theory.replicon import (
    RepliconMoments,
    minima_jacobians,
    replicon_from_moments,
    replicon_moments,
)
from phasejax.theory.results import SEErrors, SEResult, spread_error
from phasejax.theory.se_map import PSD_TOL, MapEvaluation, SEProblem, evaluate_map, initial_warm
from phasejax.theory.updates import (
    hats_from_nodes,
    hold_hats,
    overlap_updates,
    test_error,
    training_loss,
)

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class SEConfig:
    """Settings of the state-evolution solver: stopping, caps, step control (hashable; part of the compilation
    key). They decide how the fixed point is found, not which map it is a fixed point of (`MapApproximation`).

    Attributes:
      tol: stop when `max_i |F(x)_i - x_i| / max(1, |x_i|) < tol` on two consecutive evaluations (which, with
        the multi-start prox, tried both alternative starts).
      check_tol: below this residual every evaluation also tries an alternative prox start (the mirror and
        the field in turn); above it only the warm start runs. At least `tol`.
      max_iter: cap on Newton iterations (then `status = MAX_ITERATIONS`), per stage: a cold solve with an
        adaptive rule has two stages (solve with the rule oriented at the init, re-orient, solve again).
      max_iter_warm: the cap for a warm-started solve of a continuation row and for the retry of a failed
        solve (a warm start needs a few iterations; one that needs many is usually a branch ending, and a
        vmapped row waits for it).
      max_step: cap on a Newton step's relative size per coordinate (`|dx_i| <= max_step max(|x_i|, 0.05)`).
      kappa: pseudo-transient continuation: the step solves `((1 + kappa res) I - J) dx = F(x) - x` with
        `res` the scaled residual: short steps along the flow `dx/dt = F(x) - x` far from a fixed point
        (which lead to fixed points that plain damped iteration can reach), Newton steps near it. `0`: pure Newton.
      psd_tol: tolerance of the validity checks (`q0`, `V0`, `I - theta0 q0^{-1} theta0^T`).
      errors: estimate quadrature errors from the scheme's replicas (when it has any).
      adjoint: how a solve is differentiated (`phasejax.theory.adjoint`): `ImplicitAdjoint()` (default; the
        implicit function theorem at the fixed point) or `NoAdjoint()` (outputs are constants).
    """

    tol: float = 1e-7
    check_tol: float = 1e-4
    max_iter: int = 40
    max_iter_warm: int = 30
    max_step: float = 0.5
    kappa: float = 5.0
    psd_tol: float = PSD_TOL
    errors: bool = True
    adjoint: AbstractAdjoint = ImplicitAdjoint()

    def __post_init__(self):
        if not self.tol > 0:
            raise ValueError(f"tol must be > 0, got {self.tol}")
        if not self.check_tol >= self.tol:
            raise ValueError(f"check_tol must be >= tol = {self.tol}, got {self.check_tol}")
        for name in ("max_iter", "max_iter_warm"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not self.max_step > 0:
            raise ValueError(f"max_step must be > 0, got {self.max_step}")
        if not self.psd_tol >= 0:
            raise ValueError(f"psd_tol must be >= 0, got {self.psd_tol}")
        if not self.kappa >= 0:
            raise ValueError(f"kappa must be >= 0, got {self.kappa}")
        if not isinstance(self.adjoint, AbstractAdjoint):
            raise ValueError(f"adjoint must be an AbstractAdjoint (ImplicitAdjoint(), NoAdjoint()), got {self.adjoint!r}")


class SEState(NamedTuple):
    """State of the Newton solver (one lane; vmap adds a leading axis).

    The last *accepted* evaluation (`x_eval`, `ev`, `jac`, `jac_open`, `residual`) is what the solver returns;
    `x` is the next trial point.
    """

    x: Array                 # (n,) next trial state to evaluate
    warm: Array              # (N, L r) node minimisers of the accepted evaluation
    h_alt: Array             # (N, 2, L r) where the mirror and field starts ended, at the latest evaluations
    x_eval: Array            # (n,) accepted state
    ev: MapEvaluation        # evaluation at x_eval
    jac: Array               # (n, n) dF/dx at x_eval (with the branch's holds)
    jac_open: Array          # (n, n) the same without the holds
    residual: Array          # () scaled residual at x_eval
    prev_residual: Array     # () residual of the accepted evaluation before
    mu: Array                # () Levenberg-Marquardt parameter of the step
    it: Array                # () evaluations done, all stages
    status: Array            # () Status code (RUNNING while iterating)
    checking: Array          # () bool: evaluations try an alternative prox start
    rebase: Array            # () bool: the map changed (checking began): the next valid evaluation is accepted
    alt_next: Array          # () the alternative the next checking evaluation tries (0 mirror, 1 field)
    last_alt: Array          # () the alternative the accepted evaluation tried (-1: none)
    stage: Array             # () -1 orienting the rule (no evaluation), 0 solve with the rule oriented at the
                             # start, 1 solve, 2 retry
    stage_it: Array          # () evaluations in this stage
    cap: Array               # () this stage's iteration cap
    cap_solve: Array         # () the solve stage's cap
    retry: Array             # () bool: a failed solve stage is retried
    frame: object            # the rule's orientation the solve uses (None for a rule without one)
    frames_end: object       # the orientations at the solution (main and replicas), set when the solve ends
    first_stage: Array      # () the stage an orienting step (stage -1) hands over to (0 or 1)
    field_warm: Array        # () bool: no node minimisers yet: the next evaluation starts every node at its field
    pass_index: Array        # () the error passes done after the solve ended (`NewtonSE.passes`)
    with_passes: Array       # () bool: the passes run (else the solve ends with its last evaluation)
    sens: object             # with `sensitivity`: the accepted evaluation's Jacobians in the parameters (else None)
    sums: object             # PassSums of the passes (None without passes)


class PassSums(NamedTuple):
    """What the error passes (`NewtonSE.passes`) read off the rule copies' nodes at the solution, one entry per
    row of weights (row 0 the main rule's, row `k` replica `k`'s: the scheme's `pass_rows`): the hats (`Hats`,
    leading `(R,)` axis, before the branch's holds), the averaged envelope `(R,)` and, with the replicon,
    `RepliconMoments`."""

    hats: Hats
    envelope: Array
    replicon: RepliconMoments | None


def _scaled_residual(x, Fx, free):
    return jnp.max(jnp.where(free, jnp.abs(Fx - x) / jnp.maximum(1.0, jnp.abs(x)), 0.0))


def newton_lm_step(x, Fx, J, free, mu, max_step):
    """Step `dx` solving `(I - J~ + mu I) dy = r~` in relative coordinates `y_i = x_i / max(|x_i|, 0.05)`.

    `mu = 0` is Newton's step; large `mu` a short step along the residual
    `F(x) - x` (damped plain iteration). Held coordinates do not move, and the
    step is capped to `max_step` in relative size.
    """
    n = x.shape[0]
    scale = jnp.maximum(jnp.abs(x), 0.05)
    Js = J * scale[None, :] / scale[:, None]
    both = free[:, None] & free[None, :]
    eye = jnp.eye(n, dtype=x.dtype)
    A = jnp.where(both, eye - Js + mu * eye, eye)
    dy = jnp.linalg.solve(A, jnp.where(free, (Fx - x) / scale, 0.0))
    dy = jnp.where(jnp.all(jnp.isfinite(dy)), dy, jnp.where(free, (Fx - x) / scale / (1.0 + mu), 0.0))
    rel = jnp.max(jnp.abs(dy))
    dy = dy * jnp.minimum(1.0, max_step / jnp.maximum(rel, 1e-300))
    return dy * scale


@jax.named_scope("orientations")
def orientations(problem: SEProblem, x: Array):
    """The scheme's orientations at the overlaps `x`: `(frame, replica frames)`, or `None` for a rule without."""
    return jax.lax.stop_gradient(problem.scheme.orientations(problem.unravel()(x), problem.params))


@dataclasses.dataclass(frozen=True)
class NewtonSE:
    """The solver: settings only; the problem (`SEProblem`) is an argument of `init`, `step`, `terminate`
    and `postprocess` (the loop is `phasejax.solvers.iterate`, see `run_newton`).

    Each step evaluates `F` and `J` at the trial point. If its residual is
    lower than the accepted one's (or nothing was accepted yet), it is
    accepted and the Levenberg-Marquardt parameter `mu` shrinks; otherwise it
    is rejected, `mu` grows, and a shorter step is tried from the accepted
    point (with the accepted point's Jacobian). Invalid trial states are
    never evaluated: the step is halved until the state is valid. When a
    stage ends, the next one starts (module docstring).

    After the solve has ended, the same loop makes the error passes (`passes`): one step per copy of the rule
    (the replicas, and the main rule for the replicon), each evaluating the map on that copy's nodes at the
    solution, every node started from its main node's minimiser and from where the main node's alternatives
    ended, and keeping what the errors and the replicon read off them (`PassSums`). So the map, its proximal
    problems and the rule are traced once per program, for the solve and its error bars.

    Attributes:
      config: `SEConfig` (static).
      kappa: `None` (use `config.kappa`) or a traced override of it (one compiled solve serves several
        kappas, as in the census).
      replicon_tie_width: `None` (no replicon), or the smoothing (static) of the replicon the passes compute
        (`phasejax.theory.replicon`; with the multi-start map only).
      sensitivity: names of scalar fields of the parameters (e.g. `("alpha", "omega")`, static) whose
        derivatives the solve carries: every evaluation's Jacobian then also has their columns (one `jacfwd` with
        `n + k` tangents), and `sensitivities` gives the fixed point's derivatives from the last one at no further
        evaluation (at the orientation the solve used: an outer search's derivatives, not
        `phasejax.theory.adjoint`'s, which follow the orientation too).
    """

    config: SEConfig
    kappa: object = None
    replicon_tie_width: float | None = None
    sensitivity: tuple = ()

    def _wants(self, problem: SEProblem) -> tuple[bool, bool]:
        """`(errors, replicon)`: whether the passes give error bars and the replicon."""
        n_rep = int(problem.scheme.n_replicas)
        replicon = self.replicon_tie_width is not None and problem.approximation.alternates
        return self.config.errors and n_rep >= 2, replicon

    def passes(self, problem: SEProblem) -> tuple[int, ...]:
        """The rule copies (the scheme's `pass_copies`) whose nodes are solved after the solve, in order."""
        errors, replicon = self._wants(problem)
        return tuple(problem.scheme.pass_copies(replicon)) if (errors or replicon) else ()

    def _map_and_jac(self, problem: SEProblem, x, warm, alt_mode, frame, copy=None, given_starts=None,
                     field_warm=False):
        """`(J, J_open, ev, nodes, weights, sens)`: the map and its Jacobians at `x`; `sens` (`None` without
        `sensitivity`) the Jacobians of `(F, ravel(hats), E[M])` in `(x, theta)` (`Sensitivity`'s raw parts)."""
        gauge = problem.init.gauge
        names = self.sensitivity
        theta0 = jnp.stack([jnp.asarray(getattr(problem.params, n), x.dtype) for n in names]) if names else None

        def F(x_, theta=None):
            prob = problem if theta is None else problem.replace(
                params=problem.params.replace(**{n: theta[i] for i, n in enumerate(names)}))
            ev, nodes, weights = evaluate_map(prob, x_, warm, alt_mode, self.config.psd_tol, frame=frame,
                                              copy=copy, given_starts=given_starts, field_warm=field_warm)
            if gauge is not None:   # gauge-fixed coordinates stay where they are
                ev = ev._replace(Fx=jnp.where(gauge, x_, ev.Fx))
            extra = () if theta is None else (ravel_pytree(ev.hats)[0], ev.envelope)
            return (ev.Fx, ev.Fx_open) + extra, (ev, nodes, weights)

        if not names:
            (J, J_open), (ev, nodes, weights) = jax.jacfwd(F, has_aux=True)(x)
            return J, J_open, ev, nodes, weights, None
        ((J, JF_t), (J_open, _), dh, de), (ev, nodes, weights) = jax.jacfwd(F, argnums=(0, 1), has_aux=True)(x, theta0)
        return J, J_open, ev, nodes, weights, (JF_t, dh, de)

    def _pass_sums(self, problem: SEProblem, x, nodes, weights, copy) -> tuple[PassSums, Array]:
        """`(PassSums, owned (R,))` of one pass: every row of the copy's weights (`pass_rows`), and which rows the
        copy holds."""
        params, approx = problem.params, problem.approximation
        ov = problem.unravel()(x)
        rows, owned = problem.scheme.pass_rows(weights, copy)
        hats = jax.vmap(lambda w: hats_from_nodes(ov, params, nodes, w, hat_form=approx.hat_form))(rows)
        moments = None
        if self._wants(problem)[1]:
            jac = minima_jacobians(nodes.minima, params, self.replicon_tie_width, approx.prox_tol)
            moments = replicon_moments(jac, rows, params, approx.prox_tol)
        return PassSums(hats=hats, envelope=rows @ nodes.envelope, replicon=moments), owned

    def init(self, problem: SEProblem, warm: Array | None = None, *, orient_first=False, cap_solve=None,
             retry=False, cold=None, passes=True) -> SEState:
        """The state before the first evaluation, at `problem.init`.

        Args:
          warm: `(N, L r)` node warm starts (default: none, as `cold`).
          orient_first: (may be traced) a first stage solves with the rule oriented at the start and is followed
            by a solve with the rule re-oriented at its solution (a cold solve with an adaptive rule).
          cap_solve: (may be traced) the solve stage's cap (default `config.max_iter`).
          retry: (may be traced) a failed solve stage is solved once more, re-oriented at its last iterate.
          cold: (may be traced; default: `warm is None`) neither `problem.frame` nor `warm` holds anything yet: a
            first step orients the rule at the start (stage -1, the same traced orientation as at a stage's end;
            an adaptive rule) and the first evaluation starts every node at its field `omega`.
          passes: (may be traced) make the error passes after the solve (default); `False` skips them (the errors
            and the replicon are then NaN): one traced solver serves the iterations of an outer search, which need
            no error bars, and its last solve, which does.
        """
        cfg = self.config
        ov = problem.init.overlaps
        x0 = ravel_pytree(ov)[0]
        n = x0.shape[0]
        if cold is None:
            cold = warm is None
        if warm is None:   # a placeholder: the first evaluation starts every node at its field omega
            warm = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(
                lambda: initial_warm(problem.params, problem.scheme, ov, problem.frame)))
        cold = jnp.asarray(cold, bool)
        zeros = lambda tree: jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), tree)  # noqa: E731

        def shapes():            # what an evaluation and a pass give (traced for their shapes only)
            ev, nodes, weights = evaluate_map(problem, x0, warm, 0, cfg.psd_tol, copy=0)
            sums = self._pass_sums(problem, x0, nodes, weights, 0)[0] if self.passes(problem) else None
            sens = self._map_and_jac(problem, x0, warm, 0, problem.frame)[5] if self.sensitivity else None
            return ev, sums, sens

        ev0, sums0, sens0 = zeros(jax.eval_shape(shapes))
        ends_shape = jax.eval_shape(lambda: orientations(problem, x0))
        frames_end = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), ends_shape)
        status0 = jnp.where(params_are_valid(problem.params), Status.RUNNING, Status.INVALID_INPUT).astype(jnp.int32)
        inf = jnp.asarray(jnp.inf, x0.dtype)
        i32 = lambda v: jnp.asarray(v, jnp.int32)  # noqa: E731
        cap_solve = i32(cfg.max_iter if cap_solve is None else cap_solve)
        orient_first = jnp.asarray(orient_first, bool) & (problem.frame is not None)
        first_stage = jnp.where(orient_first, 0, 1).astype(jnp.int32)
        orienting = cold & (problem.frame is not None)
        return SEState(x=x0, warm=warm, h_alt=jnp.stack([-warm, warm], axis=1), x_eval=x0, ev=ev0,
                       jac=jnp.zeros((n, n), x0.dtype), jac_open=jnp.zeros((n, n), x0.dtype), residual=inf,
                       prev_residual=inf, mu=jnp.asarray(0.0, x0.dtype), it=i32(0), status=status0,
                       checking=jnp.asarray(not problem.approximation.alternates), rebase=jnp.asarray(False),
                       alt_next=i32(0),
                       last_alt=i32(-1), stage=jnp.where(orienting, -1, first_stage).astype(jnp.int32),
                       stage_it=i32(0),
                       cap=jnp.where(orient_first, cfg.max_iter, cap_solve).astype(jnp.int32), cap_solve=cap_solve,
                       retry=jnp.asarray(retry, bool), frame=problem.frame, frames_end=frames_end,
                       first_stage=first_stage, field_warm=cold,
                       pass_index=jnp.where(passes, 0, len(self.passes(problem))).astype(jnp.int32),
                       with_passes=jnp.asarray(passes, bool), sens=sens0, sums=sums0)

    def _valid(self, problem: SEProblem, x):
        return field_maps(problem.unravel()(x), problem.params, self.config.psd_tol).valid

    def _propose(self, problem: SEProblem, x, Fx, J, free, mu):
        dx = newton_lm_step(x, Fx, J, free, mu, self.config.max_step)

        def shrink(carry):
            t, _ = carry
            return t * 0.5, self._valid(problem, x + 0.5 * t * dx)

        t, _ = jax.lax.while_loop(lambda c: (~c[1]) & (c[0] > 1e-4), shrink,
                                  (jnp.asarray(1.0, x.dtype), self._valid(problem, x + dx)))
        return x + t * dx

    def step(self, problem: SEProblem, state: SEState) -> SEState:
        cfg = self.config
        alternates = problem.approximation.alternates
        free = free_mask(problem.init)
        passes = self.passes(problem)
        alt_mode = jnp.where(state.checking, state.alt_next, -1) if alternates else jnp.asarray(0)
        x, frame, copy, given = state.x, state.frame, jnp.asarray(0, jnp.int32), None
        orienting = (state.stage == -1) if state.frame is not None else jnp.asarray(False)
        if passes:       # after the solve: a pass over a rule copy's nodes at the solution (no Newton step)
            passing = (state.status != Status.RUNNING) & ~orienting
            copy = jnp.where(passing, jnp.asarray(passes, jnp.int32)[jnp.minimum(state.pass_index, len(passes) - 1)],
                             0)
            x = jnp.where(passing, state.x_eval, state.x)
            if frame is not None:
                reps = state.frames_end[1]
                frame = jax.tree_util.tree_map(
                    lambda main, rep: jnp.where(passing & (copy > 0), rep[jnp.maximum(copy - 1, 0)], main),
                    state.frame, reps)
            if alternates:
                given = (passing, state.h_alt, _distinct_alternatives(state.warm, state.h_alt))

        def evaluate():
            """`(J, J_open, ev, sums)`: the map and its Jacobian at `x`, and the sums with a pass's rows added."""
            J, J_open, ev, nodes, weights, sens = self._map_and_jac(problem, x, state.warm, alt_mode, frame, copy,
                                                                    given, state.field_warm)
            sums = state.sums
            if passes:
                def collect():
                    new, owned = self._pass_sums(problem, x, nodes, weights, copy)
                    return jax.tree_util.tree_map(
                        lambda a, b: jnp.where(owned.reshape((-1,) + (1,) * (a.ndim - 1)), a, b), new, state.sums)

                sums = jax.lax.cond(passing, collect, lambda: state.sums)
            return J, J_open, ev, sums, sens

        if state.frame is None:
            J, J_open, ev, sums, sens = evaluate()
        else:            # an orienting step evaluates nothing
            J, J_open, ev, sums, sens = jax.lax.cond(
                orienting, lambda: (state.jac, state.jac_open, state.ev, state.sums, state.sens), evaluate)
        ok = (self._valid(problem, x) & jnp.all(jnp.isfinite(ev.Fx)) & jnp.all(jnp.isfinite(J))
              & jnp.all(jnp.isfinite(ev.h)))
        residual = _scaled_residual(x, ev.Fx, free)
        first = ~jnp.isfinite(state.residual)
        # once alternative starts are tried the map is another one: its first evaluation is not compared, nor is
        # one where a node found a lower minimum than its warm start's (its residual is of a better map)
        accept = ok & (first | state.rebase | ev.switched | (residual < 2.0 * state.residual) | (residual < cfg.tol))
        # both alternative starts tried at the fixed point: this evaluation and the accepted one before it
        both = (state.checking & (state.last_alt >= 0) & (alt_mode != state.last_alt)) if alternates else True
        done = (accept & (residual < cfg.tol) & (state.residual < cfg.tol) & (ev.prox_unconverged == 0) & both)
        # pseudo-transient continuation: mu = kappa * residual (a short step along the flow
        # dx/dt = F(x) - x far from the fixed point, Newton near it) plus a boost after rejections
        boost = jnp.where(accept, state.mu * 0.25, jnp.maximum(state.mu * 4.0, 1.0))
        res_base = jnp.where(accept, residual, state.residual)
        # accepted: step from the new point with its Jacobian; rejected: shorter step from the accepted point
        base_x = jnp.where(accept, x, state.x_eval)
        base_F = jnp.where(accept, ev.Fx, state.ev.Fx)
        base_J = jnp.where(accept, J, state.jac)
        kappa = cfg.kappa if self.kappa is None else self.kappa
        x_next = self._propose(problem, base_x, base_F, base_J, free, kappa * res_base + boost)
        never_ok = first & ~ok
        stage_status = jnp.where(never_ok, Status.INVALID_ITERATE, jnp.where(done, Status.CONVERGED, Status.RUNNING))
        running = state.status == Status.RUNNING
        stage_it = state.stage_it + running.astype(jnp.int32)
        stage_status = jnp.where((stage_status == Status.RUNNING) & (stage_it >= state.cap), Status.MAX_ITERATIONS,
                                 stage_status)
        keep = running & accept
        sel = lambda new, old: jnp.where(keep, new, old)  # noqa: E731
        tried = (alt_mode >= 0) & state.checking if alternates else jnp.asarray(False)
        h_alt = state.h_alt
        if alternates:      # where the alternative start of this evaluation ended
            h_alt = jnp.where(keep & tried & (alt_mode == 0), h_alt.at[:, 0].set(ev.h_starts[:, 1]), h_alt)
            h_alt = jnp.where(keep & tried & (alt_mode == 1), h_alt.at[:, 1].set(ev.h_starts[:, 2]), h_alt)
        x_eval = sel(x, state.x_eval)

        # the stage's end: the next stage starts from the accepted point with the rule re-oriented there
        ended = running & (stage_status != Status.RUNNING)
        failed = (stage_status == Status.MAX_ITERATIONS) | (stage_status == Status.INVALID_ITERATE)
        next_stage = jnp.where(state.stage == 0, 1, jnp.where((state.stage == 1) & state.retry & failed, 2, -1))
        switch = ended & (next_stage >= 0)
        finish = ended & (next_stage < 0)
        orient_at = jnp.where(orienting, state.x, x_eval)
        frames = jax.lax.cond(switch | finish | orienting, lambda: orientations(problem, orient_at),
                              lambda: jax.tree_util.tree_map(jnp.asarray, state.frames_end)) \
            if state.frames_end is not None else None
        frame = state.frame
        if frame is not None:
            frame = jax.tree_util.tree_map(lambda a, b: jnp.where(switch | orienting, a, b), frames[0], frame)
        entering = (~state.checking & accept & (residual < cfg.check_tol)) if alternates else jnp.asarray(False)
        checking = state.checking | entering
        new = SEState(
            x=jnp.where(running & (stage_status == Status.RUNNING), x_next, jnp.where(switch, x_eval, state.x)),
            warm=sel(ev.h, state.warm),
            h_alt=h_alt,
            x_eval=x_eval,
            ev=jax.tree_util.tree_map(sel, ev, state.ev),
            jac=sel(J, state.jac),
            jac_open=sel(J_open, state.jac_open),
            sens=None if sens is None else jax.tree_util.tree_map(sel, sens, state.sens),
            residual=jnp.where(switch, jnp.inf, sel(residual, state.residual)),
            prev_residual=jnp.where(switch, jnp.inf, sel(state.residual, state.prev_residual)),
            mu=jnp.where(switch, 0.0, jnp.where(running, boost, state.mu)),
            it=state.it + running.astype(state.it.dtype),
            status=jnp.where(switch, Status.RUNNING, jnp.where(running, stage_status, state.status)).astype(jnp.int32),
            checking=jnp.where(switch, jnp.asarray(not alternates), jnp.where(running, checking, state.checking)),
            rebase=running & entering & ~switch,
            alt_next=jnp.where(running & tried, 1 - state.alt_next, state.alt_next).astype(jnp.int32),
            last_alt=jnp.where(switch, -1, jnp.where(keep, jnp.where(tried, alt_mode, -1), state.last_alt)
                               ).astype(jnp.int32),
            stage=jnp.where(switch, next_stage, state.stage).astype(jnp.int32),
            stage_it=jnp.where(switch, 0, stage_it).astype(jnp.int32),
            cap=jnp.where(switch, jnp.where(next_stage == 1, state.cap_solve, self.config.max_iter_warm),
                          state.cap).astype(jnp.int32),
            cap_solve=state.cap_solve,
            retry=state.retry,
            frame=frame,
            frames_end=frames if frames is not None else state.frames_end,
            first_stage=state.first_stage,
            field_warm=state.field_warm & ~keep,
            pass_index=state.pass_index,
            with_passes=state.with_passes,
            sums=state.sums,
        )
        if state.frame is not None:      # an orienting step only orients the rule and hands over to the solve
            oriented = state._replace(frame=frame, frames_end=new.frames_end, stage=state.first_stage)
            new = jax.tree_util.tree_map(lambda a, b: jnp.where(orienting, a, b), oriented, new)
        if passes:       # a pass leaves the solve's state as it is (every update above is gated on running)
            new = new._replace(sums=sums, pass_index=state.pass_index + passing.astype(jnp.int32))
        return new

    def terminate(self, problem: SEProblem, state: SEState):
        return (state.status != Status.RUNNING) & (state.pass_index >= len(self.passes(problem))), state.status

    def postprocess(self, problem: SEProblem, state: SEState) -> SEResult:
        """`SEResult` from a final state: losses, stability, subspace gain and (optionally) errors."""
        return postprocess(self, problem, state)[0]

    def max_steps(self, problem: SEProblem) -> int:
        """The most steps a solve can take: three stages at their largest caps, then the passes."""
        return 2 * self.config.max_iter + self.config.max_iter_warm + 1 + len(self.passes(problem))


def _distinct_alternatives(warm: Array, h_alt: Array) -> Array:
    """`(N, 2)`: where a node's alternative starts ended away from its minimiser `warm (N, L r)` (`h_alt
    (N, 2, L r)`; one that ended in the minimiser's own basin need not run again)."""
    starts = jnp.concatenate([warm[:, None], h_alt], axis=1)
    scale = 1.0 + jnp.max(jnp.abs(starts), axis=-1)
    return (jnp.max(jnp.abs(h_alt - warm[:, None]), axis=-1) > 1e-6 * scale[:, 1:])


def run_newton(solver: NewtonSE, problem: SEProblem, warm: Array | None = None, max_iter=None, **init) -> SEState:
    """Iterate `solver` on `problem` from `problem.init` (and optional node warm starts `warm (N, L r)`) to a
    final state, its passes included; `max_iter` (may be traced): the solve stage's cap (default
    `solver.config.max_iter`); `init`: the other keywords of `NewtonSE.init` (`orient_first`, `retry`)."""
    state = solver.init(problem, warm, cap_solve=max_iter, **init)
    return iterate(solver, problem, state, max_steps=solver.max_steps(problem)).state


# ----------------------------------------------------------------------------
# After the loop: losses, stability, error estimates
# ----------------------------------------------------------------------------


def _spectral_abscissa(J: Array, mask: Array) -> Array:
    """Largest real part of the eigenvalues of `J (n, n)` restricted to the coordinates in `mask`; NaN if none."""
    both = mask[:, None] & mask[None, :]
    Jm = jnp.where(both, J, 0.0) + jnp.diag(jnp.where(mask, 0.0, -1e30))
    finite = jnp.all(jnp.isfinite(Jm))
    ev = jnp.linalg.eigvals(jnp.where(finite, Jm, 0.0))
    return jnp.where(jnp.any(mask) & finite, jnp.max(ev.real), jnp.nan)


@jax.named_scope("postprocess")
def postprocess(solver: NewtonSE, problem: SEProblem, state: SEState):
    """`(SEResult, RepliconResult or None)` from a final state (`NewtonSE.postprocess` returns the first).

    The error replicas and the replicon (with the solver's `replicon_tie_width`, `phasejax.theory.replicon`)
    are read off the passes' sums (`PassSums`).
    """
    cfg = solver.config
    params, scheme, ib = problem.params, problem.scheme, problem.init
    unravel = problem.unravel()
    x = state.x_eval
    ov = unravel(x)
    ev = state.ev
    free = free_mask(ib)
    held = ~free_mask(ib, with_gauge=False)
    rule = ev.rule                     # the main rule the accepted evaluation used
    e_t, eps_g, e_direct = observables(problem, x, ev, rule)[1:]
    stability = _spectral_abscissa(state.jac, free)
    gain = _spectral_abscissa(state.jac_open, held)   # out of the subspace: the unconstrained map's Jacobian

    nan = jnp.asarray(jnp.nan, x.dtype)
    n_rep = int(scheme.n_replicas)
    n = x.shape[0]
    both = free[:, None] & free[None, :]
    A = jnp.where(both, jnp.eye(n, dtype=x.dtype) - state.jac, jnp.eye(n, dtype=x.dtype))
    # the solver's error: the main rule's Newton correction from the returned point (results module docstring)
    delta = jnp.where(free, jnp.linalg.solve(A, jnp.where(free, ev.Fx - x, 0.0)), 0.0)
    solver_x = jnp.abs(delta)
    solver_g = jnp.abs(test_error(unravel(x + delta), params, rule) - eps_g)
    err_x = jnp.full_like(x, jnp.nan)
    err_e = err_g = nan
    es = gs = jnp.full((n_rep if cfg.errors else 0,), jnp.nan, x.dtype)
    want_errors, want_replicon = solver._wants(problem)
    shares = bool(scheme.shares_main_nodes)
    sums = state.sums

    def replica(hats_k, envelope_k):
        hats = hold_hats(hats_k, ib.hold_m, ib.hold_theta)
        new = overlap_updates(hats, params)
        new = new.replace(m=jnp.where(ib.hold_m, 0.0, new.m), theta0=jnp.where(ib.hold_theta, 0.0, new.theta0))
        Fk = ravel_pytree(new)[0]
        xk = x + jnp.linalg.solve(A, jnp.where(free, Fk - x, 0.0))
        ek = training_loss(ov, hats, envelope_k, params)
        gk = test_error(unravel(xk), params, rule)
        return xk, ek, gk

    if want_errors:         # rows 1..K of the passes: the replicas
        xs, es, gs = jax.vmap(replica)(jax.tree_util.tree_map(lambda a: a[1:], sums.hats), sums.envelope[1:])
        err_x = spread_error(x, xs, main_is_mean=shares)
        err_e = spread_error(e_t, es, main_is_mean=shares)
        err_g = spread_error(eps_g, gs, main_is_mean=shares)
    replicon = (replicon_from_moments(sums.replicon, shares, ov, params, solver.replicon_tie_width)
                if want_replicon else None)

    invalid = (state.status == Status.INVALID_ITERATE) | (state.status == Status.INVALID_INPUT)
    blank = lambda v: jnp.where(invalid, jnp.nan, v)  # noqa: E731
    no_passes = lambda v: jnp.where(state.with_passes, v, jnp.nan)  # noqa: E731
    err_x, err_e, err_g, es, gs = (no_passes(v) for v in (err_x, err_e, err_g, es, gs))
    if replicon is not None:
        replicon = jax.tree_util.tree_map(no_passes, replicon)
    errors = SEErrors(overlaps=unravel(blank(err_x + solver_x)), train_loss=blank(err_e),
                      test_error=blank(err_g + solver_g), solver_overlaps=unravel(blank(solver_x)),
                      solver_test_error=blank(solver_g), train_loss_replicas=blank(es),
                      test_error_replicas=blank(gs + solver_g), n_replicas=n_rep if cfg.errors else 0)
    result = SEResult(overlaps=ov, hats=ev.hats, test_error=blank(eps_g), train_loss=blank(e_t),
                      energetic_loss=blank(e_direct), residual=state.residual, iterations=state.it,
                      status=state.status, converged=state.status == Status.CONVERGED, stability=blank(stability),
                      subspace_gain=blank(gain), prox_grad_norm=ev.prox_grad_norm,
                      prox_unconverged=ev.prox_unconverged, sigma=params.sigma, errors=errors)
    return result, replicon


class Sensitivity(NamedTuple):
    """Derivatives of a solve's fixed point in the solver's `sensitivity` parameters (`k` of them): the overlaps
    `dx (k, n)`, the training loss `train_loss (k,)` and the test error `test_error (k,)`; NaN where it did not
    converge."""

    dx: Array
    train_loss: Array
    test_error: Array


def sensitivities(solver: NewtonSE, problem: SEProblem, state: SEState) -> Sensitivity:
    """The fixed point's derivatives in `solver.sensitivity` from the solve's last accepted evaluation: `dx = (I -
    J)^{-1} dF/dtheta` on the branch's free coordinates, and the training loss and the test error along it (the
    free energy with the hats' and the envelope's derivatives; the test error on the rule the solve used,
    re-evaluated along `(dx, theta)`: no proximal problem is solved again)."""
    names = solver.sensitivity
    if not names:
        raise ValueError("the solver has no `sensitivity`: make it with NewtonSE(..., sensitivity=('alpha', ...))")
    params, ib = problem.params, problem.init
    x = state.x_eval
    n, k = x.shape[0], len(names)
    JF_t, (dh_x, dh_t), (de_x, de_t) = state.sens
    free = free_mask(ib)
    eye = jnp.eye(n, dtype=x.dtype)
    A = jnp.where(free[:, None] & free[None, :], eye - state.jac, eye)
    dx = jnp.where(free[:, None], jnp.linalg.solve(A, jnp.where(free[:, None], JF_t, 0.0)), 0.0)   # (n, k)
    dhats = dh_x @ dx + dh_t
    denv = de_x @ dx + de_t
    unravel, unravel_hats = problem.unravel(), ravel_pytree(state.ev.hats)[1]
    theta0 = jnp.stack([jnp.asarray(getattr(params, nm), x.dtype) for nm in names])
    with_theta = lambda th: params.replace(**{nm: th[i] for i, nm in enumerate(names)})  # noqa: E731

    def losses(x_, h_, env_, th):
        p = with_theta(th)
        ov = unravel(x_)
        rule = problem.scheme.main(ov, p, state.frame)
        return jnp.stack([training_loss(ov, unravel_hats(h_), env_, p), test_error(ov, p, rule)])

    h0 = ravel_pytree(state.ev.hats)[0]
    basis = jnp.eye(k, dtype=x.dtype)
    d = jax.vmap(lambda j: jax.jvp(losses, (x, h0, state.ev.envelope, theta0),
                                   (dx[:, j], dhats[:, j], denv[j], basis[j]))[1])(jnp.arange(k))     # (k, 2)
    ok = state.status == Status.CONVERGED
    nan = lambda v: jnp.where(ok, v, jnp.nan)  # noqa: E731
    return Sensitivity(dx=nan(dx.T), train_loss=nan(d[:, 0]), test_error=nan(d[:, 1]))
