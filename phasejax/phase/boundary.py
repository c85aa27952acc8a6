"""Phase boundaries solved directly as curves: `alpha_c(omega)`, `alpha_l(omega)` and the spinodals
(docs/boundary.md).

Every line is a root in `alpha` of a smooth function of the branches' fixed points, continued along `omega`:

* `alpha_c`: `Delta e_t = e_t(semantic) - e_t(positional) = 0` (the branches' training losses cross);
* `alpha_l`: `eps_g(global) - eps_lin = 0` (the global minimum's test error meets the linear baseline's; the
  global branch is the semantic one above `alpha_c`, the positional one below);
* `spinodal_<branch>`: `gain - 1 = 0`, the largest eigenvalue of the map's Jacobian out of the branch's subspace
  (`SEResult.subspace_gain`) at 1: the smallest singular value of `I - J` on the held coordinates reaches zero
  there, and the branch loses its stability out of its subspace (on the branch itself: a point where it has
  collapsed onto its invariant plane, its order parameter below `COLLAPSE_TOL`, has no spinodal).

Where a branch ends (collapses onto its invariant plane) is read off the grid, as the phase diagram does
(`phasejax.phase.diagram.collapse_point`).

At one `omega` each line is corrected by Newton in `alpha` (`refine`): the branches it needs are solved at the
current `alpha`, warm-started (`lane_solve`: one Newton solve of the state evolution, `phasejax.theory.newton`),
and the function's derivative comes from the derivatives of the fixed point the solver carries
(`phasejax.theory.newton.sensitivities`; for the gain, a secant through the lane's last two solves), so a step is
`-f / f_alpha`. A step
below `BoundaryConfig.accept` is taken without another solve. Along `omega` the lines are continued (`segment`):
the next point's `alpha` and the branches' states are predicted from the implicit derivatives in `omega`
(`d alpha / d omega = -f_omega / f_alpha`, `dx = x_alpha d alpha + x_omega d omega`), so one solve per branch and
line is usually enough. A segment starts with a coarse scan of both branches along `alpha` (`scan`): each line's
first sign change on it is its first guess. Segments run side by side on the devices (`phase_boundary`, through
`phasejax.sweep.run_chunked`: resumable, sharded; an accelerator maps many segments at once).

Errors (95%): `alpha_c` and `alpha_l` carry the quadrature error of their defining function (the two training
losses', or the test error's, from the solver's error replicas) propagated through its slope, plus the last
Newton step; the other lines the last Newton step only. The replicon's verdict at `alpha_c` is the branches'
(`phasejax.theory.replicon`). Every Newton step is safeguarded by the bracket the line's signs give (a step out of
it bisects). Each line has a `phasejax.solvers.Status` per `omega` (`LINE_STATUS`).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from phasejax import xla
from phasejax.bundle import BundleFile, ResultBundle
from phasejax.phase.diagram import PHASE_BRANCHES, scheme_fields
from phasejax.precision import float64_scope
from phasejax.solvers import HasStatus, Status, status_names
from phasejax.sweep import run_chunked, run_options
from phasejax.theory.baselines import linear_baseline_error
from phasejax.theory.branches import BranchInit, branch_init, stack_inits
from phasejax.theory.fields import field_maps
from phasejax.theory.newton import NewtonSE, SEConfig, postprocess, run_newton, sensitivities
from phasejax.theory.params import TiedAttentionParams, validate_params
from phasejax.theory.quadrature import SplitProductRule, resolve_scheme
from phasejax.theory.replicon import DEFAULT_TIE_WIDTH, rs_stable
from phasejax.theory.results import spread_error
from phasejax.theory.se_map import MapApproximation, SEProblem, initial_warm
from phasejax.theory.solver import map_points

Array = jax.Array

LINES = ("alpha_c", "alpha_l", "spinodal_positional", "spinodal_semantic")
"""The lines, in the order of every per-line array."""
LINE_STATUS = (Status.CONVERGED, Status.NO_ROOT, Status.BRANCH_LOST, Status.MAX_ITERATIONS, Status.INVALID_ITERATE)
"""The statuses of a line at one `omega` (`phasejax.solvers.Status`; the names go to CSV): `converged`; `no_root`
(no root in `[alpha_min, alpha_max]`, or the line is not there at this `omega`); `branch_lost` (a solve it needs
failed, or its branch collapsed there); `max_iterations` (Newton did not settle within `max_rounds` solves);
`invalid_iterate` (a Newton step that is not finite, with no bracket to bisect)."""
CONVERGED, NO_ROOT, BRANCH_LOST, UNSETTLED, STUCK = (int(code) for code in LINE_STATUS)

COLLAPSE_TOL = 1e-5
"""An order parameter below this (in the overlaps' units) lies on the invariant plane: the branch has collapsed."""

_LANE_BRANCH = (0, 1, 1, 0, 1)
"""The branch of each lane of one round: alpha_c's two branches, alpha_l's (its branch chosen per omega), the
positional spinodal's, the semantic spinodal's."""
_LANE_LINE = (0, 0, 1, 2, 3)
_LINE_LANE = (0, 2, 3, 4)
"""The lane whose `alpha` is each line's."""
_DOWN = (True, True, False, False)
"""Whether a line's function goes from + to - (alpha_c, alpha_l) or from - to + (the spinodals) as alpha grows."""


@dataclasses.dataclass(frozen=True)
class BoundaryConfig:
    """How the lines are solved (hashable: part of the compilation key and of a run's configuration).

    Attributes:
      alpha_min, alpha_max: the range a root is searched in.
      n_scan: points of the coarse scan of both branches at a segment's first `omega` (its roots' first guesses
        are cubic Hermite interpolations, from the values and the implicit derivatives).
      accept: a Newton step in `alpha` below this, or below half the root's own quadrature error, is taken
        without another solve (the line's root is then the last solve's `alpha` plus that step: exact to the
        step's square).
      max_rounds: solves per line and `omega` at most.
      spinodal_tol: a spinodal's Newton step below this settles it (the gain has no error estimate); its error is
        that step plus half its bracket.
      se, approximation: the solver's settings and the map's (`SEConfig`, `MapApproximation`).
      tie_width: the replicon's smoothing at `alpha_c` (`phasejax.theory.replicon`).
    """

    alpha_min: float = 0.3
    alpha_max: float = 3.0
    n_scan: int = 10
    accept: float = 1e-5
    max_rounds: int = 5
    spinodal_tol: float = 5e-5
    se: SEConfig = SEConfig()
    approximation: MapApproximation = MapApproximation()
    tie_width: float = DEFAULT_TIE_WIDTH

    def __post_init__(self):
        if not (0 < self.alpha_min < self.alpha_max and np.isfinite(self.alpha_max)):
            raise ValueError(f"alpha_min and alpha_max must satisfy 0 < alpha_min < alpha_max < inf, got "
                             f"alpha_min={self.alpha_min}, alpha_max={self.alpha_max}")
        for name in ("n_scan", "max_rounds"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or v < (3 if name == "n_scan" else 1):
                raise ValueError(f"{name} must be an integer >= {3 if name == 'n_scan' else 1}, got {name}={v!r}")
        if not self.accept > 0:
            raise ValueError(f"accept must be > 0, got accept={self.accept!r}")


# ----------------------------------------------------------------------------
# One branch solve and its derivatives ("a lane")
# ----------------------------------------------------------------------------


class BranchState(NamedTuple):
    """Where a branch's last solve ended: `x (n,)`, node minimisers `warm (N, L r)`, the rule's orientation there
    `frame`, and whether there is one yet (`ok ()`; else the next solve is cold)."""

    x: Array
    warm: Array
    frame: object
    ok: Array


class LaneOut(NamedTuple):
    """One branch solve at `(alpha, omega)` and the derivatives the lines need, `d/d alpha` and `d/d omega` of: the
    fixed point `dx (2, n)`, the training loss `de (2,)` and the test error `deps (2,)`; the values `e`, `eps` and the
    out-of-subspace gain `gain`, with the quadrature errors `e_err`, `eps_err` and the training loss on every error
    replica `e_reps (K,)` (NaN without passes), whether the branch is live there (`live`: its order parameter
    above `COLLAPSE_TOL`), whether RS is stable there (`rs`, NaN without passes), and the new state."""

    ok: Array
    e: Array
    e_err: Array
    e_reps: Array
    eps: Array
    eps_err: Array
    gain: Array
    live: Array
    rs: Array
    dx: Array
    de: Array
    deps: Array
    state: BranchState


def _order_index(init: BranchInit, branch) -> Array:
    """Index into `ravel(Overlaps)` of the order parameter of `branch` (first entry of `m` positional, of
    `theta0` semantic)."""
    ov = init.overlaps
    sizes = [x.size for x in (ov.q0, ov.m, ov.V0)]
    return jnp.where(branch == 0, sizes[0], sizes[0] + sizes[1] + sizes[2])


def lane_solve(config: BoundaryConfig, params: TiedAttentionParams, inits: BranchInit, scheme, branch, alpha, omega,
               guess, state: BranchState, passes, reorient=False):
    """Solve branch `branch` (0 positional, 1 semantic; `inits` holds both, stacked) at `(alpha, omega)` from the
    overlaps `guess (n,)` (the last fixed point where it is not a valid state), warm-started from `state` (cold
    where `state.ok` is false), with the error passes and the replicon where `passes`: a `LaneOut`. With
    `reorient` (may be traced) the rule is first oriented at `guess` (else it keeps `state.frame`), and the new
    state keeps the orientation the solve used: the rounds of one `omega` then solve on one finite rule, on which
    a line's function is smooth in `alpha` (a new orientation moves it by its quadrature error: the gain out of the
    subspace by up to `5e-3`). The derivatives in `alpha` and `omega` are the solver's own
    (`phasejax.theory.newton.sensitivities`: two more columns of the Jacobian every evaluation computes, at that
    orientation)."""
    solver = NewtonSE(config.se, None, config.tie_width, sensitivity=("alpha", "omega"))
    p = params.replace(alpha=alpha, omega=omega)
    init = jax.tree_util.tree_map(lambda a: a[branch], inits)
    unravel = ravel_pytree(init.overlaps)[1]
    guess = jnp.where(state.ok & field_maps(unravel(guess), p).valid, guess,
                      jnp.where(state.ok, state.x, ravel_pytree(init.overlaps)[0]))
    frame = state.frame
    if frame is not None:
        oriented = jax.lax.stop_gradient(scheme.frame(unravel(guess), p))
        frame = jax.tree_util.tree_map(lambda a, b: jnp.where(reorient & state.ok, a, b), oriented, frame)
    problem = SEProblem(p, scheme, init._replace(overlaps=unravel(guess)), frame, config.approximation)
    cold = ~state.ok
    cap = jnp.where(cold, config.se.max_iter, config.se.max_iter_warm)
    st = run_newton(solver, problem, state.warm, cap, orient_first=cold, retry=True, cold=cold, passes=passes)
    res, rep = postprocess(solver, problem, st)
    sens = sensitivities(solver, problem, st)
    ok = st.status == Status.CONVERGED
    c = st.x_eval[_order_index(init, branch)]
    stable = (rs_stable(rep.regular, rep.jump, rep.regular_err) if rep is not None else jnp.asarray(False))
    stable = jnp.where(passes & ok, stable.astype(st.x_eval.dtype), jnp.nan)
    # a cold solve orients at its start and again at its first stage's solution: it hands on the frame at its
    # solution; a warm one the frame it solved with
    used = st.frame
    if used is not None:
        used = jax.tree_util.tree_map(lambda a, b: jnp.where(cold, a, b), st.frames_end[0], st.frame)
    new = BranchState(x=jnp.where(ok, st.x_eval, state.x), warm=jnp.where(ok, st.warm, state.warm),
                      frame=used if used is None else jax.tree_util.tree_map(
                          lambda a, b: jnp.where(ok, a, b), used, state.frame),
                      ok=ok | state.ok)
    return LaneOut(ok=ok, e=res.train_loss, e_err=res.errors.train_loss, e_reps=res.errors.train_loss_replicas,
                   eps=res.test_error, eps_err=res.errors.test_error, gain=res.subspace_gain,
                   live=ok & (jnp.abs(c) > COLLAPSE_TOL), rs=stable, dx=sens.dx, de=sens.train_loss,
                   deps=sens.test_error, state=new)


# ----------------------------------------------------------------------------
# The lines at one omega: safeguarded Newton in alpha
# ----------------------------------------------------------------------------


class Lane(NamedTuple):
    """A lane's memory: its branch's last state, where it was solved (`alpha`, `omega`), the fixed point's
    derivatives there `dx (2, n)` (in `alpha`, `omega`: the predictor of the next solve's start) and its gain there
    (a spinodal's secant)."""

    state: BranchState
    alpha: Array
    omega: Array
    dx: Array
    gain: Array


class Lines(NamedTuple):
    """Every line's state at one `omega` (per-line arrays `(4,)` in `LINES` order; lanes `(5,)` in lane order).

    `root`: the line's `alpha` (NaN where it has none); `err`: its 95% error; `status`: `LINE_STATUS` code;
    `active`: the line is followed; `lo`, `hi`: its bracket (where its function has the sign of below and above the
    root; NaN: not known); `fa`: the last slope of its function in `alpha` (a spinodal's is a secant); `slope`:
    `d root / d omega` (the implicit derivative, or the last two roots' difference for a spinodal); `previous`,
    `previous_omega`, `previous_slope`: the roots at the `omega` before, that `omega` and their slopes (the
    predictor's curvature); `lanes`: the lanes' `Lane`s; `branch_l`: the branch `alpha_l` is read on (0
    positional, 1 semantic); `rs (2,)`: whether replica symmetry is stable for the positional and the semantic
    branch at `alpha_c`; `rounds`: the solves the last `omega` took."""

    root: Array
    err: Array
    status: Array
    active: Array
    lo: Array
    hi: Array
    fa: Array
    slope: Array
    previous: Array
    previous_omega: Array
    previous_slope: Array
    lanes: Lane
    branch_l: Array
    rs: Array
    rounds: Array

    status_name = HasStatus.status_name


def _line_functions(outs: LaneOut, lanes: Lane, alpha, omega, fa_last, eps_lin, deps_lin, shares: bool):
    """`(f (4,), f_alpha (4,), f_omega (4,), f_err (4,), ok (4,))` of the lines from the lanes' outputs `(5, ...)`
    solved at `alpha (5,)`, their memories before the round `lanes` and the lines' last slopes `fa_last (4,)`.
    `alpha_c`'s error is the spread of the two branches' difference over the rule's replicas (paired: their
    quadrature errors move together); a spinodal's slope in `alpha` is a secant through the lane's last solve at
    this `omega` (else its last slope), and its lane counts only where its branch is live."""
    e, de = outs.e, outs.de
    f = jnp.stack([e[1] - e[0], outs.eps[2] - eps_lin, outs.gain[3] - 1.0, outs.gain[4] - 1.0])
    same = (lanes.omega == omega) & (jnp.abs(alpha - lanes.alpha) > 1e-12) & jnp.isfinite(lanes.gain)
    secant = (outs.gain - lanes.gain) / jnp.where(same, alpha - lanes.alpha, 1.0)
    spin_fa = jnp.where(same[3:], secant[3:], fa_last[2:])
    fa = jnp.stack([de[1, 0] - de[0, 0], outs.deps[2, 0], spin_fa[0], spin_fa[1]])
    nan = jnp.asarray(jnp.nan, e.dtype)
    fw = jnp.stack([de[1, 1] - de[0, 1], outs.deps[2, 1] - deps_lin, nan, nan])
    delta_err = spread_error(f[0], outs.e_reps[1] - outs.e_reps[0], main_is_mean=shares)
    ferr = jnp.stack([delta_err, outs.eps_err[2], nan, nan])
    ok = jnp.stack([outs.ok[0] & outs.ok[1], outs.ok[2], outs.live[3], outs.live[4]])
    return f, fa, fw, ferr, ok


def _blank(tree_shape):
    return jax.tree_util.tree_map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype) if jnp.issubdtype(s.dtype, jnp.inexact)
                                  else jnp.zeros(s.shape, s.dtype), tree_shape)


def refine(config: BoundaryConfig, params, inits, scheme, lines: Lines, omega) -> Lines:
    """Newton rounds in `alpha` for every active line at `omega` (at most `config.max_rounds` solves each), from
    the roots, brackets and lane states in `lines`; a step that leaves the bracket bisects it. Returns the lines
    with their roots, errors and statuses there."""
    eps_lin, deps_lin = jax.jvp(lambda w: linear_baseline_error(params.replace(omega=w)), (omega,),
                                (jnp.ones_like(omega),))
    line_of, lane_of = jnp.asarray(_LANE_LINE), jnp.asarray(_LINE_LANE)
    down = jnp.asarray(_DOWN)
    shares = bool(scheme.shares_main_nodes)
    # the error passes (K more map evaluations per solve) run where a line can settle: from the second round on, or
    # from the first where no error is known yet (a segment's first omega); a first round without them settles
    # nothing and takes its tolerance from the error at the omega before (errors change slowly along omega)
    known = jnp.isfinite(lines.err)

    def round_(carry):
        ln, k, pending = carry
        branch = jnp.asarray(_LANE_BRANCH).at[2].set(ln.branch_l)
        alpha = ln.root[line_of]
        lanes = ln.lanes
        step = jnp.stack([alpha - lanes.alpha, jnp.broadcast_to(omega - lanes.omega, alpha.shape)], axis=1)
        guess = lanes.state.x + jnp.einsum("lk,lkn->ln", jnp.nan_to_num(step), jnp.nan_to_num(lanes.dx))
        busy = pending[line_of]
        passes = (jnp.arange(5) < 3) & ((k > 0) | ~known[line_of])

        def one(i):
            lane_state = jax.tree_util.tree_map(lambda a: a[i], lanes.state)

            def run():
                return lane_solve(config, params, inits, scheme, branch[i], alpha[i], omega, guess[i], lane_state,
                                  passes[i], reorient=k == 0)

            def skip():
                return _blank(jax.eval_shape(run))._replace(state=lane_state)

            return jax.lax.cond(busy[i], run, skip)

        outs = jax.lax.map(one, jnp.arange(5))
        f, fa, fw, ferr, ok = _line_functions(outs, lanes, alpha, omega, ln.fa, eps_lin, deps_lin, shares)
        at = alpha[lane_of]
        # the bracket: the function's sign below the root is + for a down-crossing line, - for an up-crossing one
        below = jnp.where(down, f > 0, f < 0)
        usable = pending & ok & jnp.isfinite(f)
        lo = jnp.where(usable & below, at, ln.lo)
        hi = jnp.where(usable & ~below, at, ln.hi)
        newton = at - f / fa
        inside = jnp.isfinite(newton) & ~(newton <= lo) & ~(newton >= hi)
        bisect = jnp.where(jnp.isfinite(lo) & jnp.isfinite(hi), 0.5 * (lo + hi), jnp.nan)
        candidate = jnp.where(inside, newton, bisect)
        move = candidate - at
        finite = jnp.isfinite(candidate)
        in_range = (candidate >= config.alpha_min) & (candidate <= config.alpha_max)
        # settled: the step is below `accept`, or below half the root's own quadrature error (the function is only
        # known to its error bars; the step itself, added to the error, is exact to its square)
        spinodal = jnp.arange(4) >= 2
        measured = passes[lane_of] | spinodal      # this round's solves carry the line's error (a spinodal has none)
        own = jnp.where(jnp.isfinite(ferr) & measured, jnp.abs(ferr / fa), jnp.where(known, lines.err, 0.0))
        tol = jnp.where(spinodal, config.spinodal_tol, jnp.maximum(config.accept, 0.5 * own))
        done = usable & finite & in_range & inside & (jnp.abs(move) < tol) & measured
        half = jnp.where(jnp.isfinite(lo) & jnp.isfinite(hi), 0.5 * (hi - lo), 0.0)
        lost = pending & ~ok
        out_of_range = usable & finite & ~in_range
        stuck = usable & ~finite
        status = jnp.where(done, CONVERGED, jnp.where(lost, BRANCH_LOST, jnp.where(
            out_of_range, NO_ROOT, jnp.where(stuck, STUCK, ln.status)))).astype(jnp.int32)
        root = jnp.where(usable & finite & in_range, candidate, ln.root)
        err = jnp.where(done, own + jnp.abs(move) + jnp.where(spinodal, half, 0.0), ln.err)
        # d root / d omega: the implicit derivative where the line has one, else the last two omegas' roots
        by_difference = jnp.where(jnp.isfinite(ln.previous) & (omega != ln.previous_omega),
                                  (candidate - ln.previous) / (omega - ln.previous_omega), 0.0)
        slope = jnp.where(done, jnp.where(jnp.isfinite(fw), -fw / fa, by_difference), ln.slope)
        fa_kept = jnp.where(usable & jnp.isfinite(fa), fa, ln.fa)
        ran = busy & outs.ok
        # the rule is oriented at the first round's start only (`lane_solve`'s `reorient`): every round of one omega
        # solves on the same finite rule
        new_lanes = Lane(state=jax.tree_util.tree_map(lambda a, b: jnp.where(
            ran.reshape((-1,) + (1,) * (a.ndim - 1)), a, b), outs.state, lanes.state),
            alpha=jnp.where(ran, alpha, lanes.alpha), omega=jnp.where(ran, omega, lanes.omega),
            dx=jnp.where(ran[:, None, None], outs.dx, lanes.dx), gain=jnp.where(ran, outs.gain, lanes.gain))
        rs = jnp.where(done[0], outs.rs[:2], ln.rs)
        ended = lost | out_of_range | stuck
        still = pending & ~(done | ended)
        # alpha_l is read on the global branch: the semantic one above alpha_c
        branch_l = jnp.where(jnp.isfinite(root[0]) & jnp.isfinite(root[1]), (root[1] > root[0]).astype(jnp.int32),
                             ln.branch_l)
        new = ln._replace(root=root, err=err, status=status, active=ln.active & ~ended, lo=lo, hi=hi, fa=fa_kept,
                          slope=slope, lanes=new_lanes, branch_l=branch_l, rs=rs, rounds=ln.rounds + 1)
        return new, k + 1, still

    def more(carry):
        _, k, pending = carry
        return jnp.any(pending) & (k < config.max_rounds)

    start = lines._replace(rounds=jnp.zeros((), jnp.int32), status=jnp.where(lines.active, UNSETTLED, lines.status))
    out, _, pending = jax.lax.while_loop(more, round_, (start, jnp.zeros((), jnp.int32), lines.active))
    # a line Newton did not settle stays followed (its last estimate predicts the next omega's); its value here is
    # not reported (`_point`)
    return out._replace(status=jnp.where(pending, UNSETTLED, out.status).astype(jnp.int32))


# ----------------------------------------------------------------------------
# A segment of omegas: a coarse scan at its first omega, then continuation along omega
# ----------------------------------------------------------------------------


def _first(mask: Array) -> Array:
    """Index of the first true entry of `mask (n,)` (`n` where none)."""
    return jnp.where(jnp.any(mask), jnp.argmax(mask), mask.shape[0])


def _hermite_root(a, f, df, j):
    """The root in `[a[j], a[j + 1]]` of the cubic Hermite interpolant of `f` with derivatives `df` (the linear
    interpolation's where a derivative is not finite), by a few bisection-safeguarded Newton steps on the cubic."""
    n = a.shape[0]
    jj = jnp.clip(j, 0, n - 2)
    a0, a1, f0, f1 = a[jj], a[jj + 1], f[jj], f[jj + 1]
    h = a1 - a0
    d0, d1 = df[jj] * h, df[jj + 1] * h
    cubic = jnp.isfinite(d0) & jnp.isfinite(d1)
    d0, d1 = jnp.where(cubic, d0, f1 - f0), jnp.where(cubic, d1, f1 - f0)

    def p(t):
        return ((2 * t**3 - 3 * t**2 + 1) * f0 + (t**3 - 2 * t**2 + t) * d0 + (-2 * t**3 + 3 * t**2) * f1
                + (t**3 - t**2) * d1)

    t = f0 / jnp.where(f0 != f1, f0 - f1, 1.0)
    lo, hi = jnp.zeros_like(t), jnp.ones_like(t)
    for _ in range(30):
        val = p(t)
        lo, hi = jnp.where(val * f0 > 0, t, lo), jnp.where(val * f0 > 0, hi, t)
        t_new = t - val / jax.grad(p)(t)
        t = jnp.where((t_new > lo) & (t_new < hi), t_new, 0.5 * (lo + hi))
    return a0 + h * t


def scan(config: BoundaryConfig, params, inits, scheme, omega) -> Lines:
    """Both branches along a coarse `alpha` grid at `omega` (`config.n_scan` points: the positional branch upwards
    from `alpha_min`, the semantic one downwards from `alpha_max`, each solve warm-started from the last), and
    every line's first sign change on it (on live points for a spinodal): the lines' first roots (cubic Hermite
    roots from the values and the implicit derivatives), brackets and lanes."""
    n = config.n_scan
    alphas = jnp.linspace(config.alpha_min, config.alpha_max, n)
    x0 = jax.vmap(lambda i: ravel_pytree(jax.tree_util.tree_map(lambda a: a[i], inits).overlaps)[0])(jnp.arange(2))
    p0 = params.replace(omega=omega)
    one = jax.tree_util.tree_map(lambda a: a[0], inits)
    frame_shape = jax.eval_shape(lambda: scheme.frame(one.overlaps, p0))
    frame0 = None if frame_shape is None else jax.tree_util.tree_map(
        lambda s: jnp.zeros((2,) + s.shape, s.dtype), frame_shape)
    warm_shape = jax.eval_shape(lambda: initial_warm(p0, scheme, one.overlaps, None if frame0 is None else
                                                     jax.tree_util.tree_map(lambda f: f[0], frame0)))
    cold = BranchState(x=x0, warm=jnp.zeros((2,) + warm_shape.shape, x0.dtype), frame=frame0,
                       ok=jnp.zeros((2,), bool))

    def step(carry, i):
        states, dxs, last = carry
        a = jnp.stack([alphas[i], alphas[n - 1 - i]])

        def lane(b):
            st = jax.tree_util.tree_map(lambda v: v[b], states)
            guess = st.x + jnp.nan_to_num(dxs[b, 0]) * (a[b] - last[b])
            return lane_solve(config, params, inits, scheme, b, a[b], omega, guess, st, False)

        outs = jax.lax.map(lane, jnp.arange(2))
        ok = outs.ok
        dxs = jnp.where(ok[:, None, None], outs.dx, dxs)
        last = jnp.where(ok, a, last)
        return (outs.state, dxs, last), outs

    dxs0 = jnp.zeros((2, 2, x0.shape[1]), x0.dtype)
    _, outs = jax.lax.scan(step, (cold, dxs0, jnp.full((2,), config.alpha_min, x0.dtype)), jnp.arange(n))
    flip = lambda v: jnp.stack([v[:, 0], v[::-1, 1]], axis=1)   # noqa: E731 - the semantic lane ran downwards
    outs = jax.tree_util.tree_map(flip, outs)
    ok, e, eps, gain, live = outs.ok, outs.e, outs.eps, outs.gain, outs.live
    eps_lin = linear_baseline_error(p0)
    both = ok[:, 0] & ok[:, 1]
    delta = jnp.where(both, e[:, 1] - e[:, 0], jnp.nan)
    ddelta = outs.de[:, 1, 0] - outs.de[:, 0, 0]
    sem_global = (both & (delta < 0)) | (ok[:, 1] & ~ok[:, 0])
    gap = jnp.where(ok[:, 0] | ok[:, 1], jnp.where(sem_global, eps[:, 1], eps[:, 0]) - eps_lin, jnp.nan)
    dgap = jnp.where(sem_global, outs.deps[:, 1, 0], outs.deps[:, 0, 0])
    spin = [jnp.where(live[:, b], gain[:, b] - 1.0, jnp.nan) for b in (0, 1)]
    j = jnp.stack([_first((delta[:-1] >= 0) & (delta[1:] < 0)), _first((gap[:-1] >= 0) & (gap[1:] < 0)),
                   _first((spin[0][:-1] <= 0) & (spin[0][1:] > 0)), _first((spin[1][:-1] <= 0) & (spin[1][1:] > 0))])
    found = j < n - 1
    nan_d = jnp.full((n,), jnp.nan, delta.dtype)
    roots = jnp.stack([_hermite_root(alphas, delta, ddelta, j[0]), _hermite_root(alphas, gap, dgap, j[1]),
                       _hermite_root(alphas, spin[0], nan_d, j[2]), _hermite_root(alphas, spin[1], nan_d, j[3])])
    jc = jnp.clip(j, 0, n - 2)
    roots = jnp.where(found, roots, jnp.nan)
    branch = jnp.asarray(_LANE_BRANCH).at[2].set(sem_global[jnp.clip(j[1] + 1, 0, n - 1)].astype(jnp.int32))
    # each lane starts from the scan's state of its branch at the bracket's nearer end
    line = jnp.asarray(_LANE_LINE)
    nearer = jnp.where(jnp.abs(roots - alphas[jc]) <= jnp.abs(alphas[jc + 1] - roots), jc, jc + 1)[line]
    pick = lambda v: v[nearer, branch]  # noqa: E731
    lanes = Lane(state=jax.tree_util.tree_map(pick, outs.state), alpha=alphas[nearer],
                 omega=jnp.full((5,), omega, x0.dtype), dx=outs.dx[nearer, branch], gain=gain[nearer, branch])
    dtype = roots.dtype
    # the functions' slopes at the brackets' nearer ends (a spinodal's: the bracket's secant)
    near = jnp.where(jnp.abs(roots - alphas[jc]) <= jnp.abs(alphas[jc + 1] - roots), jc, jc + 1)
    secant = lambda f, i: (f[i + 1] - f[i]) / (alphas[i + 1] - alphas[i])  # noqa: E731
    fa = jnp.stack([ddelta[near[0]], dgap[near[1]], secant(spin[0], jc[2]), secant(spin[1], jc[3])])
    return Lines(root=roots, err=jnp.full((4,), jnp.nan, dtype),
                 status=jnp.where(found, UNSETTLED, NO_ROOT).astype(jnp.int32), active=found,
                 lo=jnp.where(found, alphas[jc], jnp.nan), hi=jnp.where(found, alphas[jc + 1], jnp.nan), fa=fa,
                 slope=jnp.zeros((4,), dtype), previous=jnp.full((4,), jnp.nan, dtype), previous_omega=omega,
                 previous_slope=jnp.full((4,), jnp.nan, dtype),
                 lanes=lanes, branch_l=branch[2], rs=jnp.full((2,), jnp.nan, dtype), rounds=jnp.zeros((), jnp.int32))


class LinePoint(NamedTuple):
    """The lines at one `omega`: `root (4,)`, `err (4,)`, `status (4,)` (in `LINES` order), `rs (2,)` (RS stable at
    `alpha_c`: positional, semantic; NaN unknown), `branch_l ()` and `rounds ()` (the solves it took)."""

    root: Array
    err: Array
    status: Array
    rs: Array
    branch_l: Array
    rounds: Array

    status_name = HasStatus.status_name


def _point(lines: Lines) -> LinePoint:
    """What is reported of the lines at one `omega`: the converged ones' roots and errors (NaN for the others)."""
    good = lines.status == CONVERGED
    return LinePoint(root=jnp.where(good, lines.root, jnp.nan), err=jnp.where(good, lines.err, jnp.nan),
                     status=lines.status, rs=lines.rs, branch_l=lines.branch_l, rounds=lines.rounds)


def segment(config: BoundaryConfig, params: TiedAttentionParams, omegas: Array, scheme=None) -> LinePoint:
    """The lines along `omegas (W,)` (increasing): the coarse scan at `omegas[0]`, Newton there, then each next
    `omega` predicted from the last (`alpha` and the branches' states along their implicit derivatives) and
    corrected by Newton (`refine`). Pure and jittable; returns `LinePoint`s with a leading `(W,)` axis."""
    scheme = resolve_scheme(None, params) if scheme is None else scheme
    inits = stack_inits([branch_init(b, params) for b in PHASE_BRANCHES])
    first = refine(config, params, inits, scheme, scan(config, params, inits, scheme, omegas[0]), omegas[0])

    def advance(carry, omega):
        lines, last = carry
        d = omega - last
        # second order: the slope's change over the last step is the curvature
        curv = jnp.where(jnp.isfinite(lines.previous_slope) & (last != lines.previous_omega),
                         (lines.slope - lines.previous_slope) / (last - lines.previous_omega), 0.0)
        step = jnp.where(lines.active, jnp.nan_to_num(lines.slope) * d + 0.5 * jnp.nan_to_num(curv) * d * d, 0.0)
        predicted = lines._replace(root=jnp.where(lines.active, lines.root + step, lines.root),
                                   lo=jnp.full_like(lines.lo, jnp.nan), hi=jnp.full_like(lines.hi, jnp.nan),
                                   previous=lines.root, previous_omega=last, previous_slope=lines.slope)
        new = refine(config, params, inits, scheme, predicted, omega)
        return (new, omega), _point(new)

    _, rest = jax.lax.scan(advance, (first, omegas[0]), omegas[1:])
    return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), _point(first), rest)


# ----------------------------------------------------------------------------
# The lines over an omega range: segments side by side, resumable; the result bundle
# ----------------------------------------------------------------------------

LINE_RULE = dict(eta_step=0.4)
"""The lines' default rule: `SplitProductRule` with a finer trapezoid in the teacher's direction than the solver's
default (0.6): the training losses' quadrature errors fall ten-fold (at `omega = 0`, `alpha = 0.614`: 2.1e-6 ->
1.7e-7), which brings `alpha_c`'s error below 1e-3 where the branches cross at a shallow angle, for 1.5 times the
nodes."""


def line_scheme(params, quadrature=None):
    """The rule of the lines: `quadrature` (a scheme or `Quadrature`), or the default: `LINE_RULE` where the
    split rule applies (`L = 2`, `r = t = 1`), else the solver's default."""
    if quadrature is None and SplitProductRule.applies_to(params):
        quadrature = SplitProductRule(**LINE_RULE)
    return resolve_scheme(quadrature, params)


BOUNDARY_COLUMNS = ("omega", "alpha_c", "alpha_c_err", "alpha_l", "alpha_l_err", "spinodal_positional",
                    "spinodal_positional_err", "spinodal_semantic", "spinodal_semantic_err", "status",
                    "alpha_c_status", "alpha_l_status", "spinodal_positional_status", "spinodal_semantic_status",
                    "rs_stable_positional", "rs_stable_semantic", "alpha_l_branch", "solves", "alpha_c_grid",
                    "alpha_c_grid_err", "alpha_l_grid", "alpha_l_grid_err")
"""The columns of `boundary.csv`; the last four are a phase diagram's grid thresholds at the omegas the two
share (a cross-check: `with_grid`; NaN elsewhere)."""


def boundary_config(params, omegas, scheme, config: BoundaryConfig, segments: int) -> dict:
    """Everything the lines depend on, for a run's fingerprint (JSON)."""
    settings = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    return dict(kind="tied_attention_phase_boundary", omegas=[float(w) for w in omegas], segments=int(segments),
                sigma=np.asarray(params.sigma).tolist(), lam=float(params.lam), A=np.asarray(params.A).tolist(),
                C=np.asarray(params.C).tolist(), r=params.r, t=params.t, target=params.target, student=params.student,
                loss=repr(params.loss), penalty=repr(params.penalty),
                quadrature=dict(kind=type(scheme).__name__, **scheme_fields(scheme)),
                boundary={k: v for k, v in settings.items() if k not in ("se", "approximation")},
                se_config=dataclasses.asdict(config.se), map_approximation=dataclasses.asdict(config.approximation))


def phase_boundary(params: TiedAttentionParams, omegas, *, quadrature=None, config: BoundaryConfig = BoundaryConfig(),
                   segments: int | None = None, options=None):
    """The lines `alpha_c`, `alpha_l` and the spinodals along `omegas` (strictly increasing, in [0, 1]), solved
    directly (module docstring): a `PhaseBoundary`, or `None` while chunks are missing (`RunOptions.max_chunks`).

    The omegas are cut into `segments` contiguous segments (default: one per device `options` uses), each
    continued from its own coarse scan; the segments are the tasks of `phasejax.sweep.run_chunked` (resumable,
    sharded over devices: two host devices keep two CPU cores busy, an accelerator maps a chunk's segments side by
    side). `quadrature`: the lines' rule (default `line_scheme`)."""
    if not isinstance(config, BoundaryConfig):
        raise ValueError(f"config must be a BoundaryConfig, got {type(config).__name__}")
    w = np.asarray(omegas, float)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any((w < 0) | (w > 1)):
        raise ValueError(f"omegas must be a non-empty 1-d sequence in [0, 1], got {omegas!r}")
    if w.size > 1 and np.any(np.diff(w) <= 0):
        raise ValueError("omegas must be strictly increasing")
    options = run_options(options)
    n_dev = len(options.devices) if options.devices is not None else len(jax.local_devices())
    S = int(segments) if segments is not None else max(1, min(n_dev, w.size))
    if isinstance(segments, bool) or not 1 <= S <= w.size:
        raise ValueError(f"segments must be an integer in [1, {w.size}] (the number of omegas), got {segments!r}")
    with float64_scope():
        validate_params(params)
        scheme = line_scheme(params, quadrature)
        W = -(-w.size // S)
        padded = np.concatenate([w, np.full(S * W - w.size, w[-1])]).reshape(S, W)
        table = jnp.asarray(padded)

        def fn(chunk):
            return map_points(lambda s: segment(config, params, table[s], scheme)._asdict(),
                              jnp.asarray(chunk["segment"]))

        cfg = boundary_config(params, w, scheme, config, S)
        # a chunk holds a whole number of segments per device (a chunk is padded to the devices: fewer segments
        # than devices would leave a device computing padding)
        chunk = n_dev * max(1, min(options.chunk_size, S) // n_dev)
        out = run_chunked(fn, dict(segment=np.arange(S, dtype=np.int32)), cfg, options.replace(chunk_size=chunk),
                          compiler_options=xla.compiler_options())
    if out is None:
        return None
    flat = {k: np.asarray(v).reshape((S * W,) + np.asarray(v).shape[2:])[: w.size] for k, v in out.items()}
    return PhaseBoundary(lines=lines_table(w, flat), config=json_config(cfg))


def json_config(cfg: dict) -> dict:
    """`cfg` with its functions named (`__qualname__`), as a phase diagram's summary records them."""
    return {k: (v if not callable(v) else getattr(v, "__qualname__", str(v))) for k, v in cfg.items()}


def lines_table(omegas, points: dict) -> dict[str, np.ndarray]:
    """`BOUNDARY_COLUMNS` from the segments' `LinePoint`s (flattened to one row per omega); `status` is
    `alpha_c`'s."""
    out = dict(omega=np.asarray(omegas, float))
    for k, line in enumerate(LINES):
        out[line] = points["root"][:, k]
        out[f"{line}_err"] = points["err"][:, k]
        out[f"{line}_status"] = status_names(points["status"][:, k])
    out["status"] = out["alpha_c_status"]
    out["rs_stable_positional"], out["rs_stable_semantic"] = points["rs"][:, 0], points["rs"][:, 1]
    out["alpha_l_branch"] = np.where(np.isfinite(out["alpha_l"]),
                                     np.asarray(PHASE_BRANCHES)[points["branch_l"].astype(int)], "none")
    out["solves"] = points["rounds"].astype(int)
    for c in BOUNDARY_COLUMNS[-4:]:
        out[c] = np.full(out["omega"].shape, np.nan)
    return {c: out[c] for c in BOUNDARY_COLUMNS}


def with_grid(boundary: "PhaseBoundary", thresholds: dict) -> "PhaseBoundary":
    """`boundary` with a phase diagram's grid thresholds (`PhaseDiagram.thresholds`) in its `*_grid` columns at the
    omegas the two share (to 1e-9)."""
    lines = dict(boundary.lines)
    w, g = np.asarray(lines["omega"], float), np.asarray(thresholds["omega"], float)
    for key in ("alpha_c", "alpha_c_err", "alpha_l", "alpha_l_err"):
        col = np.full(w.shape, np.nan)
        for j, om in enumerate(g):
            hit = np.abs(w - om) <= 1e-9
            col[hit] = float(np.asarray(thresholds[key], float)[j])
        lines[key.replace("_err", "") + "_grid" + ("_err" if key.endswith("_err") else "")] = col
    return dataclasses.replace(boundary, lines=lines)


BOUNDARY_ERRORS = ("alpha_c_err and alpha_l_err are 95% errors: the quadrature error of the line's defining function "
                   "(the difference of the two branches' training losses over the rule's paired replicas; the "
                   "global minimum's test error) through its slope, plus the last Newton step. The spinodals' errors "
                   "are their last Newton step and half their bracket: the gain out of the subspace has no "
                   "replica error, and moves by up to 5e-3 with the rule's orientation (about 2e-3 in alpha). None "
                   "covers replica symmetry breaking (see the phase diagram's threshold_errors).")
"""What the lines' errors cover, written into `boundary.json`."""


@dataclasses.dataclass
class PhaseBoundary(ResultBundle):
    """The lines of a phase diagram along omega (`phase_boundary`): `write(out_dir)`, `PhaseBoundary.load(out_dir)`.

    Attributes:
      lines: `BOUNDARY_COLUMNS`, one row per omega: each line's root in alpha (NaN where it has none) with its 95%
        error and status (`LINE_STATUS`), `status` (alpha_c's), whether replica symmetry is stable at `alpha_c`
        for each branch (`rs_stable_<branch>`: 1, 0, NaN unknown), the branch `alpha_l` is read on and the solves
        the omega took.
      config: the run's configuration (JSON).
      command, versions: what computed it (`phasejax.provenance`), or `None`.
    """

    lines: dict
    config: dict
    command: str | None = None
    versions: dict | None = None

    FILES = (BundleFile("boundary.csv", field="lines", columns=BOUNDARY_COLUMNS,
                        required=dict(omega="number", alpha_c="number", alpha_c_err="number", alpha_l="number",
                                      alpha_l_err="number", spinodal_positional="number", spinodal_semantic="number",
                                      status="str"),
                        dtypes={c: str for c in BOUNDARY_COLUMNS if c.endswith("status") or c == "alpha_l_branch"},
                        min_rows=1),
             BundleFile("boundary.json", field="summary", required=("config",)))
    """`boundary.csv` (the lines) and `boundary.json` (the configuration, what the errors cover, the statuses'
    counts, the command and versions); beside a phase diagram's files in the main job's folder."""

    def to_files(self) -> dict:
        counts = {line: {name: int(np.sum(np.asarray(self.lines[f"{line}_status"]) == name)) for name in status_names(np.asarray(LINE_STATUS))}
                  for line in LINES}
        summary = dict(config=self.config, line_errors=BOUNDARY_ERRORS, statuses=counts)
        if self.command is not None:
            summary["command"] = self.command
        if self.versions is not None:
            summary["versions"] = self.versions
        return dict(lines=self.lines, summary=summary)

    @classmethod
    def from_files(cls, contents: dict, out_dir: str) -> "PhaseBoundary":
        s = contents["summary"]
        return cls(lines=contents["lines"], config=s["config"], command=s.get("command"), versions=s.get("versions"))
