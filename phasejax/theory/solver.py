"""The state-evolution solver: Newton on the order parameters inside a branch's invariant subspace.

The fixed point `x = F(x)` of the state evolution (`F`: energetic then
entropic updates, `phasejax.theory.updates`) is found by safeguarded Newton
iterations on the few order parameters: the Jacobian `J = dF/dx` comes from
`jax.jacfwd` through the quadrature (the proximal minimisers are
differentiated by the implicit function theorem), the step solves
`(I - J) dx = F(x) - x` restricted to the branch's free coordinates, is
capped to a relative size `max_step` and halved until the new state is
valid. Newton converges quadratically and to any fixed point, stable or not
under plain iteration, which the fixed-point census needs.

The per-node proximal problems are warm-started from the previous
iteration's minimisers and take a fixed number of Newton steps from two
starts: the warm start and, alternating between iterations, its mirror
`-h` or the field `omega`; convergence is declared only when the residual
is below `tol` on two consecutive iterations (so both alternatives were
tried at the fixed point).

The solver has the shape of an optimistix solver: `NewtonSE` holds only
its settings (`SEConfig`, and optionally a traced `kappa`); the problem, an
`SEProblem` (the parameters, the quadrature scheme, the start and invariant
subspace `BranchInit`, the rule's orientation `frame`, and the
`MapApproximation`: how the map is computed at the nodes, which changes
its fixed point, unlike the solver's settings), is passed to
`init(problem, warm)`, `step(problem, state)`, `terminate(problem, state)`
and `postprocess(problem, state)`; `phasejax.solvers.iterate` runs the loop
(`run_newton`). The map `se_map(problem, x, warm, alt_mode, ...)` takes
the same problem.

After the loop `postprocess` adds the training loss, the test error, the
stability of the fixed point inside its subspace (eigenvalues of `J`) and
out of it (`subspace_gain`, the linear gain of the unconstrained map on a
perturbation out of the subspace, from a JVP), and, for schemes with
replicas, quadrature error estimates (`phasejax.theory.results`).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.flatten_util import ravel_pytree

from phasejax import progress
from phasejax.precision import uses_float64
from phasejax.solvers import Status, iterate
from phasejax.theory.branches import BRANCHES, BranchInit, branch_init, free_mask
from phasejax.theory.fields import Overlaps, field_maps
from phasejax.theory.params import TiedAttentionParams, params_are_valid, validate_params
from phasejax.theory.results import SEErrors, SEResult, spread_error
from phasejax.theory.updates import (
    hats_from_nodes,
    hold_hats,
    check_tie_width,
    node_values,
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
      tol: stop when `max_i |F(x)_i - x_i| / max(1, |x_i|) < tol` on two consecutive iterations.
      max_iter: cap on Newton iterations (then `status = MAX_ITERATIONS`), per stage: a cold solve with an
        adaptive rule has two stages (solve with the rule oriented at the init, re-orient, solve again).
      max_iter_warm: the cap for a warm-started solve of a continuation row (a warm start needs a few
        iterations; one that needs many is usually a branch ending, and a vmapped row waits for it).
      max_step: cap on a Newton step's relative size per coordinate (`|dx_i| <= max_step max(|x_i|, 0.05)`).
      kappa: pseudo-transient continuation: the step solves `((1 + kappa res) I - J) dx = F(x) - x` with
        `res` the scaled residual: short steps along the flow `dx/dt = F(x) - x` far from a fixed point
        (which lead to fixed points that plain damped iteration can reach), Newton steps near it. `0`: pure Newton.
      psd_tol: tolerance of the validity checks (`q0`, `V0`, `I - theta0 q0^{-1} theta0^T`).
      errors: estimate quadrature errors from the scheme's replicas (when it has any).
    """

    tol: float = 1e-7
    max_iter: int = 40
    max_iter_warm: int = 30
    max_step: float = 0.5
    kappa: float = 5.0
    psd_tol: float = 1e-10
    errors: bool = True

    def __post_init__(self):
        if not self.tol > 0:
            raise ValueError(f"tol must be > 0, got {self.tol}")
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


@dataclasses.dataclass(frozen=True)
class MapApproximation:
    """How the state-evolution map `F` is computed at each quadrature node: these change the map, and so the
    fixed point (hashable; part of the compilation key). Part of the problem (`SEProblem`).

    Attributes:
      prox_steps: damped Newton steps per start of each node's proximal problem per iteration.
      prox_tol: gradient tolerance for a node's prox to count as converged (the solver converges only when
        every node's has).
      prox_starts: `"multi"` (warm start plus its mirror or the field, alternating; the global minimum) or
        `"zero"` (one local search from `h = 0`, the published method, for comparisons).
      hat_form: `"stein"` (default; integration by parts, keeps the delta terms where the prox's minimiser
        jumps) or `"implicit"` (pointwise implicit derivatives; misses them).
      tie_width: `0` (default): each node keeps its lowest prox minimum. `> 0` (an energy, e.g. `1e-3`): a
        node's minima are blended with weights `softmax(-M_k / tie_width)` (`node_values`), which makes the
        finite rule's map continuous where a node sits at a tie between two basins, so that Newton can
        converge there. The first order in `tie_width` cancels from the Gaussian averages; at `1e-3` the main
        setting's fixed point moves by less than its quadrature errors (theory notes, section 8.5). Stein form only.
    """

    prox_steps: int = 8
    prox_tol: float = 1e-8
    prox_starts: str = "multi"
    hat_form: str = "stein"
    tie_width: float = 0.0

    def __post_init__(self):
        v = self.prox_steps
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise ValueError(f"prox_steps must be a positive integer, got {v!r}")
        if not self.prox_tol > 0:
            raise ValueError(f"prox_tol must be > 0, got {self.prox_tol}")
        if self.prox_starts not in ("multi", "zero"):
            raise ValueError(f"prox_starts must be 'multi' or 'zero', got {self.prox_starts!r}")
        if self.hat_form not in ("stein", "implicit"):
            raise ValueError(f"hat_form must be 'stein' or 'implicit', got {self.hat_form!r}")
        check_tie_width(self.tie_width, self.hat_form)


# ----------------------------------------------------------------------------
# The map and the solver
# ----------------------------------------------------------------------------


class MapEvaluation(NamedTuple):
    """`F(x)` and what the free energy and diagnostics need, at one state.

    `Fx (n,)`, `hats`, `envelope ()` `E[M]`, `loss ()` `E[ell(h_hat)]`,
    `h (N, L r)` node minimisers, `prox_grad_norm ()` the largest node residual,
    `prox_unconverged ()` weight fraction of nodes above `prox_tol`.
    """

    Fx: Array
    hats: object
    envelope: Array
    loss: Array
    h: Array
    prox_grad_norm: Array
    prox_unconverged: Array


@struct.dataclass
class SEProblem:
    """The fixed-point problem one Newton solve works on (a pytree; the solver object holds only settings).

    `params`: the model and `alpha`, `omega`; `scheme`: the quadrature scheme; `init`: the start and the
    invariant subspace (`BranchInit`; its holds and gauge define the free coordinates); `frame`: the
    scheme's orientation data (`scheme.frame`), fixed during a solve (`None` for a rule without one);
    `approximation`: how the map is computed at the nodes (`MapApproximation`, static).
    """

    params: TiedAttentionParams
    scheme: object
    init: BranchInit
    frame: object = None
    approximation: MapApproximation = struct.field(pytree_node=False, default=MapApproximation())

    def unravel(self):
        """`ravel(Overlaps)`'s inverse for this problem's overlaps."""
        return ravel_pytree(self.init.overlaps)[1]


def se_map(problem: SEProblem, x: Array, warm: Array, alt_mode, psd_tol: float = SEConfig.psd_tol,
           extra_starts: bool = False) -> MapEvaluation:
    """One state-evolution map `x -> F(x)` (energetic then entropic update, held coordinates at 0).

    `x (n,)`: the raveled overlaps; `warm (N, L r)`: the node minimisers to start each prox from;
    `alt_mode`: which alternative start the prox tries besides the warm one (alternates between iterations);
    `psd_tol`: the validity checks' tolerance (`SEConfig.psd_tol`)."""
    params, hold_m, hold_theta = problem.params, problem.init.hold_m, problem.init.hold_theta
    approx = problem.approximation
    ov = problem.unravel()(x)
    rule = problem.scheme.main(ov, params, problem.frame)
    nodes = node_values(ov, params, rule.points, warm, alt_mode, n_steps=approx.prox_steps,
                        psd_tol=psd_tol, prox_tol=approx.prox_tol, extra_starts=extra_starts,
                        prox_starts=approx.prox_starts, hat_form=approx.hat_form,
                        tie_width=approx.tie_width)
    hats = hold_hats(hats_from_nodes(ov, params, nodes, rule.weights, hat_form=approx.hat_form), hold_m, hold_theta)
    new = overlap_updates(hats, params)
    new = new.replace(m=jnp.where(hold_m, 0.0, new.m), theta0=jnp.where(hold_theta, 0.0, new.theta0))
    E = lambda v: jnp.tensordot(rule.weights, v, axes=1)  # noqa: E731
    unconverged = E((nodes.grad_norm > approx.prox_tol).astype(x.dtype))
    return MapEvaluation(Fx=ravel_pytree(new)[0], hats=hats, envelope=E(nodes.envelope), loss=E(nodes.loss),
                         h=nodes.h, prox_grad_norm=jnp.max(nodes.grad_norm), prox_unconverged=unconverged)


class SEState(NamedTuple):
    """State of the Newton solver (one lane; vmap adds a leading axis).

    The last *accepted* evaluation (`x_eval`, `ev`, `jac`, `residual`) is what
    the solver returns; `x` is the next trial point.
    """

    x: Array                 # (n,) next trial state to evaluate
    warm: Array              # (N, L r) node minimisers of the accepted evaluation
    x_eval: Array            # (n,) accepted state
    ev: MapEvaluation        # evaluation at x_eval
    jac: Array               # (n, n) dF/dx at x_eval
    residual: Array          # () scaled residual at x_eval
    prev_residual: Array     # () residual of the accepted evaluation before
    mu: Array                # () Levenberg-Marquardt parameter of the step
    it: Array                # () evaluations done
    status: Array            # () Status code (RUNNING while iterating)


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


@dataclasses.dataclass(frozen=True)
class NewtonSE:
    """The solver: settings only; the problem (`SEProblem`) is an argument of `init`, `step`, `terminate`
    and `postprocess` (the loop is `phasejax.solvers.iterate`, see `run_newton`).

    Each step evaluates `F` and `J` at the trial point. If its residual is
    lower than the accepted one's (or nothing was accepted yet), it is
    accepted and the Levenberg-Marquardt parameter `mu` shrinks; otherwise it
    is rejected, `mu` grows, and a shorter step is tried from the accepted
    point (with the accepted point's Jacobian). Invalid trial states are
    never evaluated: the step is halved until the state is valid.

    Attributes:
      config: `SEConfig` (static).
      kappa: `None` (use `config.kappa`) or a traced override of it (one compiled solve serves several
        kappas, as in the census).
    """

    config: SEConfig
    kappa: object = None

    def _map_and_jac(self, problem: SEProblem, x, warm, alt_mode):
        gauge = problem.init.gauge

        def F(x_):
            ev = se_map(problem, x_, warm, alt_mode, self.config.psd_tol)
            if gauge is not None:   # gauge-fixed coordinates stay where they are
                ev = ev._replace(Fx=jnp.where(gauge, x_, ev.Fx))
            return ev.Fx, ev

        return jax.jacfwd(F, has_aux=True)(x)

    def init(self, problem: SEProblem, warm: Array | None = None) -> SEState:
        """The state before the first evaluation, at `problem.init`; `warm (N, L r)`: node warm starts
        (default: every node's field, `initial_warm`)."""
        ov = problem.init.overlaps
        x0 = ravel_pytree(ov)[0]
        n = x0.shape[0]
        if warm is None:   # first evaluation: start every node at its field omega (and its mirror)
            warm = initial_warm(problem.params, problem.scheme, ov, problem.frame)
        ev_shape = jax.eval_shape(lambda: se_map(problem, x0, warm, 0, self.config.psd_tol))
        ev0 = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), ev_shape)
        status0 = jnp.where(params_are_valid(problem.params), Status.RUNNING, Status.INVALID_INPUT).astype(jnp.int32)
        inf = jnp.asarray(jnp.inf, x0.dtype)
        return SEState(x=x0, warm=warm, x_eval=x0, ev=ev0, jac=jnp.zeros((n, n), x0.dtype), residual=inf,
                       prev_residual=inf, mu=jnp.asarray(0.0, x0.dtype), it=jnp.asarray(0), status=status0)

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
        free = free_mask(problem.init)
        x = state.x
        J, ev = self._map_and_jac(problem, x, state.warm, state.it % 2)
        ok = (self._valid(problem, x) & jnp.all(jnp.isfinite(ev.Fx)) & jnp.all(jnp.isfinite(J))
              & jnp.all(jnp.isfinite(ev.h)))
        residual = _scaled_residual(x, ev.Fx, free)
        first = ~jnp.isfinite(state.residual)
        accept = ok & (first | (residual < 2.0 * state.residual) | (residual < cfg.tol))
        done = accept & (residual < cfg.tol) & (state.residual < cfg.tol) & (ev.prox_unconverged == 0)
        # pseudo-transient continuation: mu = kappa * residual (a short step along the flow
        # dx/dt = F(x) - x far from the fixed point, Newton near it) plus a boost after rejections
        boost = jnp.where(accept, state.mu * 0.25, jnp.maximum(state.mu * 4.0, 1.0))
        res_base = jnp.where(accept, residual, state.residual)
        mu = boost
        # accepted: step from the new point with its Jacobian; rejected: shorter step from the accepted point
        base_x = jnp.where(accept, x, state.x_eval)
        base_F = jnp.where(accept, ev.Fx, state.ev.Fx)
        base_J = jnp.where(accept, J, state.jac)
        kappa = cfg.kappa if self.kappa is None else self.kappa
        x_next = self._propose(problem, base_x, base_F, base_J, free, kappa * res_base + mu)
        never_ok = first & ~ok
        status = jnp.where(never_ok, Status.INVALID_ITERATE, jnp.where(done, Status.CONVERGED, Status.RUNNING))
        # an invalid or non-finite trial point counts as rejected; the first one ends the solve
        running = state.status == Status.RUNNING
        keep = running & accept
        sel = lambda new, old: jnp.where(keep, new, old)  # noqa: E731
        return SEState(
            x=jnp.where(running & (status == Status.RUNNING), x_next, state.x),
            warm=sel(ev.h, state.warm),
            x_eval=sel(x, state.x_eval),
            ev=jax.tree_util.tree_map(sel, ev, state.ev),
            jac=sel(J, state.jac),
            residual=sel(residual, state.residual),
            prev_residual=sel(state.residual, state.prev_residual),
            mu=jnp.where(running, mu, state.mu),
            it=state.it + running.astype(state.it.dtype),
            status=jnp.where(running, status, state.status).astype(jnp.int32),
        )

    def terminate(self, problem: SEProblem, state: SEState):
        return state.status != Status.RUNNING, state.status

    def postprocess(self, problem: SEProblem, state: SEState) -> SEResult:
        """`SEResult` from a final state: losses, stability, subspace gain and (optionally) errors."""
        return _postprocess(self.config, problem, state)


def run_newton(solver: NewtonSE, problem: SEProblem, warm: Array | None = None, max_iter=None) -> SEState:
    """Iterate `solver` on `problem` from `problem.init` (and optional node warm starts `warm (N, L r)`) to a
    final state, at most `max_iter` iterations (default `solver.config.max_iter`; may be traced)."""
    out = iterate(solver, problem, solver.init(problem, warm),
                  max_steps=solver.config.max_iter if max_iter is None else max_iter)
    state = out.state
    return state._replace(status=jnp.where(state.status == Status.RUNNING, out.status, state.status))


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


def _postprocess(cfg: SEConfig, problem: SEProblem, state: SEState) -> SEResult:
    params, scheme, ib, frame = problem.params, problem.scheme, problem.init, problem.frame
    unravel = problem.unravel()
    x = state.x_eval
    ov = unravel(x)
    ev = state.ev
    free = free_mask(ib)
    held = ~free_mask(ib, with_gauge=False)
    rule = scheme.main(ov, params, frame)
    e_t = training_loss(ov, ev.hats, ev.envelope, params)
    eps_g = test_error(ov, params, rule)
    e_direct = params.alpha * ev.loss + 0.5 * params.lam * jnp.trace(ov.q0)
    stability = _spectral_abscissa(state.jac, free)
    # out of the subspace: Jacobian of the unconstrained map (no holds) on the held coordinates
    no = jnp.asarray(False)
    open_problem = problem.replace(init=ib._replace(hold_m=no, hold_theta=no))
    J_open = jax.jacfwd(lambda x_: se_map(open_problem, x_, state.warm, 0, cfg.psd_tol).Fx)(x)
    gain = _spectral_abscissa(J_open, held)

    nan = jnp.asarray(jnp.nan, x.dtype)
    n_rep = int(getattr(scheme, "n_replicas", 0) or 0)
    n = x.shape[0]
    both = free[:, None] & free[None, :]
    A = jnp.where(both, jnp.eye(n, dtype=x.dtype) - state.jac, jnp.eye(n, dtype=x.dtype))
    # the solver's error: the main rule's Newton correction from the returned point (results module docstring)
    delta = jnp.where(free, jnp.linalg.solve(A, jnp.where(free, ev.Fx - x, 0.0)), 0.0)
    solver_x = jnp.abs(delta)
    solver_g = jnp.abs(test_error(unravel(x + delta), params, rule) - eps_g)
    err_x = jnp.full_like(x, jnp.nan)
    err_e = err_g = nan
    if cfg.errors and n_rep >= 2:
        quad_all, W = scheme.replicas(ov, params, frame)
        warm_all = state.warm if scheme.shares_main_nodes else jnp.tile(state.warm, (n_rep, 1))
        approx = problem.approximation
        nodes = node_values(ov, params, quad_all.points, warm_all, 0, n_steps=approx.prox_steps,
                            psd_tol=cfg.psd_tol, prox_tol=approx.prox_tol, extra_starts=True,
                            prox_starts=approx.prox_starts, hat_form=approx.hat_form,
                            tie_width=approx.tie_width)

        def replica(w):
            hats = hold_hats(hats_from_nodes(ov, params, nodes, w, hat_form=approx.hat_form), ib.hold_m,
                             ib.hold_theta)
            new = overlap_updates(hats, params)
            new = new.replace(m=jnp.where(ib.hold_m, 0.0, new.m), theta0=jnp.where(ib.hold_theta, 0.0, new.theta0))
            Fk = ravel_pytree(new)[0]
            xk = x + jnp.linalg.solve(A, jnp.where(free, Fk - x, 0.0))
            ek = training_loss(ov, hats, jnp.tensordot(w, nodes.envelope, axes=1), params)
            gk = test_error(unravel(xk), params, rule)
            return xk, ek, gk

        xs, es, gs = jax.vmap(replica)(W)
        mean_mode = bool(scheme.shares_main_nodes)
        err_x = spread_error(x, xs, main_is_mean=mean_mode)
        err_e = spread_error(e_t, es, main_is_mean=mean_mode)
        err_g = spread_error(eps_g, gs, main_is_mean=mean_mode)

    invalid = (state.status == Status.INVALID_ITERATE) | (state.status == Status.INVALID_INPUT)
    blank = lambda v: jnp.where(invalid, jnp.nan, v)  # noqa: E731
    errors = SEErrors(overlaps=unravel(blank(err_x + solver_x)), train_loss=blank(err_e),
                      test_error=blank(err_g + solver_g), solver_overlaps=unravel(blank(solver_x)),
                      solver_test_error=blank(solver_g), n_replicas=n_rep if cfg.errors else 0)
    return SEResult(overlaps=ov, hats=ev.hats, test_error=blank(eps_g), train_loss=blank(e_t),
                    energetic_loss=blank(e_direct), residual=state.residual, iterations=state.it,
                    status=state.status, converged=state.status == Status.CONVERGED, stability=blank(stability),
                    subspace_gain=blank(gain), prox_grad_norm=ev.prox_grad_norm,
                    prox_unconverged=ev.prox_unconverged, sigma=params.sigma, errors=errors)


def _solve_oriented(solver: NewtonSE, problem: SEProblem, warm, max_iter=None):
    """One Newton solve with the rule's orientation `problem.frame` fixed, plus postprocessing:
    `(SEResult, warm)`."""
    state = run_newton(solver, problem, warm, max_iter)
    return solver.postprocess(problem, state), state.warm


class RowCarry(NamedTuple):
    """What a continuation row (`_continuation`) carries from one point to the next."""

    x_last: Array      # (n,) the last converged fixed point
    x_prev: Array      # (n,) the one before it (the secant's other end)
    a_last: Array      # () alpha of `x_last`
    a_prev: Array      # () alpha of `x_prev`
    n_ok: Array        # () converged solves since the row started (at most 1 right after a cold solve)
    warm: Array        # (N, L r) node minimisers of the last success
    frame: object      # the rule's orientation at the last success (None for a rule without one)
    it_before: Array   # () iterations of a cold solve's first stage, added to the second stage's


def _continuation(params, alphas, init: BranchInit, scheme, config: SEConfig, approximation: MapApproximation,
                  kappa=None):
    """Continuation along `alphas (A,)` with a cold start at `alphas[0]`: `(results (A,), final warm, final frame)`.

    Each solve starts from the previous fixed point (secant-extrapolated), its node minimisers and its
    quadrature orientation; a failed solve is reported and the next one restarts from the last success.
    The cold first point of an adaptive rule takes two stages: solve with the rule oriented at `init`,
    re-orient at that solution and solve again from there (the returned fixed point is that of the rule
    oriented at it; its `iterations` count both stages). Both stages are steps of the one `lax.scan`, so
    the Newton loop and the postprocessing are traced and compiled once, however long the row.
    """
    solver = NewtonSE(config, kappa)
    x0, unravel = ravel_pytree(init.overlaps)
    p0 = params.replace(alpha=alphas[0])
    frame0 = scheme.frame(init.overlaps, p0)
    warm0 = initial_warm(p0, scheme, init.overlaps, frame0)
    two_stage = frame0 is not None
    seq = jnp.concatenate([alphas[:1], alphas]) if two_stage else alphas
    second = jnp.arange(seq.shape[0]) == (1 if two_stage else -1)        # the re-oriented second stage
    first = jnp.arange(seq.shape[0]) == 0

    def body(c: RowCarry, inp):
        alpha, is_first, is_second = inp
        slope = jnp.where(c.n_ok >= 2,
                          (c.x_last - c.x_prev) / jnp.where(c.a_last != c.a_prev, c.a_last - c.a_prev, 1.0), 0.0)
        guess = c.x_last + slope * (alpha - c.a_last)
        p = params.replace(alpha=alpha)
        valid = field_maps(unravel(guess), p).valid
        guess = jnp.where(valid, guess, c.x_last)
        # a warm start gets `max_iter_warm` iterations; a cold start (both stages) and a restart before any
        # success get `max_iter`
        cap = jnp.where((c.n_ok > 0) & ~is_first & ~is_second, config.max_iter_warm, config.max_iter)
        state = run_newton(solver, SEProblem(p, scheme, init._replace(overlaps=unravel(guess)), c.frame,
                                             approximation), c.warm, cap)

        # a solve that failed (warm, or the second stage of a cold one) is solved once more from its last
        # iterate, with the rule re-oriented there (the orientation carried from the previous point or stage can
        # leave the finite rule's map without an exact fixed point within reach: Newton stalls at a residual
        # near the tolerance); the first stage of a cold solve only orients the rule and is not retried
        def retry(args):
            st, _ = args
            frame_r = scheme.frame(unravel(st.x_eval), p)
            st2 = run_newton(solver, SEProblem(p, scheme, init._replace(overlaps=unravel(st.x_eval)), frame_r,
                                               approximation), st.warm, config.max_iter_warm)
            return st2._replace(it=(st2.it + st.it).astype(st.it.dtype)), frame_r

        failed = (state.status != Status.CONVERGED) & (state.status != Status.INVALID_INPUT) & ~(is_first & two_stage)
        state, frame_used = jax.lax.cond(failed, retry, lambda args: args, (state, c.frame))
        state = state._replace(it=(state.it + c.it_before).astype(state.it.dtype))
        ok = state.status == Status.CONVERGED
        x_new = state.x_eval
        frame_new = scheme.frame(unravel(x_new), p)      # oriented at this solution, for the next point
        x_last = jnp.where(ok, x_new, c.x_last)
        a_last = jnp.where(ok, alpha, c.a_last)
        # after the second stage the row starts afresh from the cold solution (no secant across the stages)
        carry = RowCarry(
            x_last=x_last,
            x_prev=jnp.where(is_second, x_last, jnp.where(ok, c.x_last, c.x_prev)),
            a_last=a_last,
            a_prev=jnp.where(is_second, a_last, jnp.where(ok, c.a_last, c.a_prev)),
            n_ok=jnp.where(is_second, jnp.minimum(c.n_ok + ok, 1), c.n_ok + ok).astype(c.n_ok.dtype),
            warm=jnp.where(ok, state.warm, c.warm),
            frame=jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), frame_new, c.frame),
            it_before=jnp.where(is_first & two_stage, state.it, 0).astype(c.it_before.dtype))
        progress.tick(1.0 / seq.shape[0], c.n_ok)     # a sweep's bar moves per point (phasejax.progress)
        return carry, (state, frame_used)

    a0 = alphas[0]
    carry0 = RowCarry(x_last=x0, x_prev=x0, a_last=a0, a_prev=a0, n_ok=jnp.asarray(0, jnp.int32), warm=warm0,
                      frame=frame0, it_before=jnp.asarray(0))
    carry, (states, frames) = jax.lax.scan(body, carry0, (seq, first, second))
    if two_stage:   # the first stage's solve is only the start of the second
        states, frames, seq = jax.tree_util.tree_map(lambda a: a[1:], (states, frames, seq))

    def post(state, alpha, frame):     # traced once, vmapped over the row
        p = params.replace(alpha=alpha)
        return solver.postprocess(SEProblem(p, scheme, init, frame, approximation), state)

    if seq.shape[0] == 1:     # one point (a cold solve): no vmap, a smaller program to trace and compile
        one = post(*jax.tree_util.tree_map(lambda a: a[0], (states, seq, frames)))
        return jax.tree_util.tree_map(lambda a: a[None], one), carry.warm, carry.frame
    return jax.vmap(post)(states, seq, frames), carry.warm, carry.frame


def _solve(params, init, scheme, config, approximation, kappa=None):
    """Jittable core of a cold solve: Newton solve plus postprocessing. Returns `(SEResult, final node
    minimisers, frame)`. A rule without an orientation takes one solve; an adaptive one takes two stages in
    one compiled loop (`_continuation` on the one point).
    """
    if not getattr(scheme, "adaptive", False):
        warm = initial_warm(params, scheme, init.overlaps)
        res, warm = _solve_oriented(NewtonSE(config, kappa), SEProblem(params, scheme, init, None, approximation), warm)
        return res, warm, None
    results, warm, frame = _continuation(params, jnp.reshape(params.alpha, (1,)), init, scheme, config, approximation,
                                         kappa)
    return jax.tree_util.tree_map(lambda a: a[0], results), warm, frame


solve_jit = jax.jit(_solve, static_argnames=("config", "approximation"))


def initial_warm(params: TiedAttentionParams, scheme, ov: Overlaps, frame=None) -> Array:
    """Node warm starts for a first evaluation: every node's field `omega`, shape `(N, L r)`."""
    rule = scheme.main(ov, params, frame)
    maps = field_maps(ov, params)
    L, r = params.L, params.r
    xi = rule.points[:, : L * r].reshape(-1, L, r)
    return (params.sigma[None, :, None] * jnp.einsum("nla,ba->nlb", xi, maps.sqrt_q0)
            + maps.m_tokens[None]).reshape(-1, L * r)


def _solve_row(params, alphas, init: BranchInit, scheme, config: SEConfig, approximation: MapApproximation):
    """Continuation along `alphas (A,)` (`_continuation`); results carry a leading `(A,)` axis."""
    return _continuation(params, alphas, init, scheme, config, approximation)[0]


solve_row_jit = jax.jit(_solve_row, static_argnames=("config", "approximation"))


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


def resolve_scheme(quadrature, params: TiedAttentionParams):
    """The quadrature scheme: `default_scheme(params)` for `None`, a `Quadrature` as a `FixedRule`, or a scheme."""
    from phasejax.theory.quadrature import as_scheme, default_scheme

    scheme = default_scheme(params) if quadrature is None else as_scheme(quadrature)
    dim = params.L * (params.r + params.t)
    if scheme.dim != dim:
        raise ValueError(f"quadrature has dimension {scheme.dim}, but L (r + t) = {dim}")
    if hasattr(scheme, "applies_to") and not scheme.applies_to(params):
        raise ValueError(f"quadrature {type(scheme).__name__} does not apply to L={params.L}, r={params.r}, "
                         f"t={params.t}; use SobolRule")
    return scheme


@uses_float64
def solve_state_evolution(params: TiedAttentionParams, init: BranchInit | str = "semantic", quadrature=None,
                          config: SEConfig = SEConfig(),
                          approximation: MapApproximation = MapApproximation()) -> SEResult:
    """Solve the state evolution at one point (theory notes, sections 4-5, 8).

    Args:
      params: `TiedAttentionParams` (`make_params`); its array fields may be traced (vmap, jit under
        `phasejax.float64_scope()`).
      init: a branch name (`"positional"`, `"semantic"`, `"agnostic"`) or a `BranchInit` (custom overlaps).
      quadrature: `None` for the converged default (`default_scheme`), a scheme (`SplitProductRule`,
        `SobolRule`) or a fixed `Quadrature` (then errors are not estimated).
      config: `SEConfig` (static): the solver's settings.
      approximation: `MapApproximation` (static): how the map is computed at the nodes.
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
    return solve_jit(params, init, scheme, config, approximation)[0]


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
    if lanes == n:
        return jax.vmap(f)(xs)
    return jax.lax.map(f, xs, batch_size=None if lanes == 1 else lanes)   # 1: a plain scan, no vmap


@uses_float64
def solve_state_evolution_batch(params: TiedAttentionParams, alpha, omega, init: BranchInit | str = "semantic",
                                quadrature=None, config: SEConfig = SEConfig(), batched_init: bool = False,
                                batch_size: int | str = "auto",
                                approximation: MapApproximation = MapApproximation()) -> SEResult:
    """Solve at `N` points `(alpha[i], omega[i])` in one call (results carry a leading `(N,)` axis).

    `init` is shared by all points, or with `batched_init=True` a `BranchInit` with a leading `(N,)` axis
    (`stack_inits`). The points go through `jax.lax.map` in groups of `batch_size` vmapped points: within
    a group every point gets the same work per iteration and the loop runs until the group's slowest point
    is done, so a group costs its slowest point. `"auto"`: one point at a time on a CPU (a batch then costs
    the sum of its solves, no more), all `N` side by side on an accelerator. `solve_along_alpha`
    (continuation) is much cheaper along a line of `alpha`.
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

    return map_points(solve, (alpha, omega, inits), batch_size)


def _check_alphas(alphas, params: TiedAttentionParams) -> np.ndarray:
    """`alphas` as a float64 `(A,)` array, non-empty, strictly monotone and valid (continuation rows)."""
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
                      approximation: MapApproximation = MapApproximation()) -> SEResult:
    """Follow a fixed point along `alphas (A,)` (strictly monotone) by continuation; results carry an `(A,)` axis.

    Each solve starts from the previous fixed point, extrapolated linearly from the last two, with the
    previous node minimisers as prox warm starts: a few Newton iterations per point instead of a cold
    solve. If a solve fails the next restarts from the last success. The branch followed is the fixed
    point reached from `init` at `alphas[0]`; where it ends (a fold) the continuation lands on another
    fixed point or fails (see `fixed_point_census` for a systematic search).
    """
    a = _check_alphas(alphas, params)
    init = resolve_init(init, params)
    scheme = resolve_scheme(quadrature, params)
    return solve_row_jit(params, jnp.asarray(a), init, scheme, config, approximation)


@uses_float64
def solve_state_evolution_grid(params: TiedAttentionParams, alphas, omegas, init: BranchInit | str = "semantic",
                               quadrature=None, config: SEConfig = SEConfig(),
                               approximation: MapApproximation = MapApproximation()) -> SEResult:
    """Solve on the grid `omegas (W,) x alphas (A,)` in one jitted call; results carry a `(W, A)` leading axis.

    Every `omega` is a continuation row along `alphas` (`solve_along_alpha`), and the rows are vmapped: the
    cheapest way to solve many points (a warm start needs a few Newton iterations instead of a cold solve's
    15-25). The phase diagram (`phasejax.phase.phase_diagram`) runs the same rows in resumable chunks.
    """
    a = _check_alphas(alphas, params)
    w = np.atleast_1d(np.asarray(omegas, dtype=np.float64))
    if w.ndim != 1:
        raise ValueError(f"omegas must be a 1-d sequence, got shape {w.shape}")
    validate_params(params.replace(omega=jnp.asarray(w)))
    init = resolve_init(init, params)
    scheme = resolve_scheme(quadrature, params)
    return jax.vmap(lambda om: solve_row_jit(params.replace(omega=om), jnp.asarray(a), init, scheme, config,
                                                   approximation))(
        jnp.asarray(w))
