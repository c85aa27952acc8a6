"""The 1RSB solver (docs/rsb.md): `Phi` with its gradient and Hessian at fixed quadrature nodes (the minimisers
differentiated by the implicit function theorem), Levenberg-Marquardt steps on `grad Phi = 0` (`RSBNewton`, run by
`phasejax.solvers.iterate`), the dense multistart check of the node minima, the result with its quadrature errors
(`RSBResult`), and the entry points of the two models (`solve_rsb`, `solve_perceptron_rsb`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.precision import uses_float64
from phasejax.solvers import HasStatus, Status, iterate
from phasejax.theory.params import TiedAttentionParams, validate_params
from phasejax.theory.prox import LaneSettings, lowest_minima
from phasejax.theory.quadrature import Quadrature, gauss_hermite
from phasejax.theory.results import spread_error
from phasejax.theory.rsb.models import RSB_MODES, PerceptronRSB, TiedAttentionRSB, attention_free
from phasejax.theory.rsb.rule import RSBRule, attention_rule, perceptron_rule

Array = jax.Array

DENSE_GRID = (-2.7, -0.9, 0.9, 2.7)
"""Coordinates of the dense grid of prox starts (their tensor product in `L r` dimensions, with the field, the
mirrored field and the warm start and its mirror): every minimum of the attention model's prox at the fixed points
of interest lies within `|h| < 3`."""


# ----------------------------------------------------------------------------
# The free energy and its derivatives
# ----------------------------------------------------------------------------


class Evaluation(NamedTuple):
    """`Phi` at a state with its derivatives: `phi ()`, `grad (n,)`, `hess (n, n)` (main rule), every replica's
    `phi_replicas (R,)` and `grad_replicas (R, n)`, the node minimisers `h (N, n_h)` and the largest prox gradient
    `prox_residual ()`."""

    phi: Array
    grad: Array
    hess: Array
    phi_replicas: Array
    grad_replicas: Array
    h: Array
    prox_residual: Array


def _energies(model, u, rule: RSBRule, starts_fn, settings: LaneSettings):
    """`Phi` on the main rule and every replica `(1 + R,)`, the minimisers and the prox residual."""
    objective, derivatives = model.prox()
    node_thetas, shared, omega = model.node_problems(u, rule)
    starts, active = starts_fn(jax.lax.stop_gradient(omega))
    h, gnorm, _, _ = lowest_minima(objective, derivatives, settings, node_thetas, shared, starts, active)
    M = jax.vmap(lambda hh, *th: objective(hh, tuple(th) + tuple(shared)))(h, *node_thetas)
    No, Ni = rule.outer.shape[0], rule.inner.shape[0]
    y = model.unpack(u)["y"]
    logz = jax.nn.logsumexp(-y * M.reshape(No, Ni), b=jnp.asarray(rule.inner_weights)[None], axis=1)
    per_outer = -logz / y
    W = jnp.concatenate([jnp.asarray(rule.outer_weights)[None], jnp.asarray(rule.replica_weights)])
    phi = model.entropic(u) + model.alpha() * (W @ per_outer)
    return phi, (jax.lax.stop_gradient(h), jnp.max(gnorm))


def evaluate(model, u: Array, rule: RSBRule, starts_fn, settings: LaneSettings) -> Evaluation:
    """`Phi`, its gradient and Hessian at `u (n,)` (forward-mode at fixed nodes, minimisers by the implicit function
    theorem) and the replicas' values and gradients."""

    def grads(v):
        G, (phis, aux) = jax.jacfwd(lambda w: (lambda r: (r[0], r))(_energies(model, w, rule, starts_fn, settings)),
                                    has_aux=True)(v)
        return G[0], (G, phis, aux)

    H, (G, phis, (h, pres)) = jax.jacfwd(grads, has_aux=True)(u)
    return Evaluation(phi=phis[0], grad=G[0], hess=0.5 * (H + H.T), phi_replicas=phis[1:], grad_replicas=G[1:], h=h,
                      prox_residual=pres)


def warm_starts(warm: Array):
    """Starts `(N, 4, n)`: the previous minimiser, its mirror, the field and the mirrored field."""

    def fn(omega):
        return jnp.stack([warm, -warm, omega, -omega], axis=1), jnp.ones((1, 4), bool)

    return fn


def dense_starts(warm: Array | None, n_h: int):
    """Starts `(N, 4 + G^n_h, n_h)`: those of `warm_starts` (the field twice where `warm` is `None`) and the
    tensor grid `DENSE_GRID^n_h`."""
    grid = np.stack(np.meshgrid(*([np.asarray(DENSE_GRID)] * n_h), indexing="ij"), -1).reshape(-1, n_h)

    def fn(omega):
        w = omega if warm is None else warm
        g = jnp.broadcast_to(jnp.asarray(grid, omega.dtype)[None], (omega.shape[0],) + grid.shape)
        st = jnp.concatenate([jnp.stack([w, -w, omega, -omega], axis=1), g], axis=1)
        return st, jnp.ones((1, st.shape[1]), bool)

    return fn


def dense_minima(objective, derivatives, node_thetas, shared, omega: Array, warm: Array | None = None, *,
                 n_steps: int = 60, stop_tol: float = 1e-12):
    """Every node's lowest minimum over the dense starts (`dense_starts`), with every start's end point:
    `(h (N, n), value (N,), h_starts (N, S, n), values (N, S))`. The multistart of the 1RSB energetic term."""
    n_h = omega.shape[1]
    starts, active = dense_starts(warm, n_h)(omega)
    settings = LaneSettings(max_steps=n_steps, stop_tol=stop_tol)
    h, _, _, hs = lowest_minima(objective, derivatives, settings, node_thetas, shared, starts, active)
    val = lambda hh, *th: objective(hh, tuple(th) + tuple(shared))  # noqa: E731
    values = jax.vmap(lambda hk, *th: jax.vmap(lambda hh: val(hh, *th))(hk))(hs, *node_thetas)
    return h, jax.vmap(val)(h, *node_thetas), hs, values


# ----------------------------------------------------------------------------
# The solver
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RSBConfig:
    """Settings of the 1RSB solver (hashable; part of the compilation key).

    Attributes:
      tol: stop when the Newton step is below `tol` in relative size (`|du_i| / max(|u_i|, floor_i)`), with every
        node's prox converged.
      gtol: or when the scaled gradient `|grad Phi * max(|u|, floor)|` is below `gtol` (an energy per dimension:
        moving any coordinate by its own size changes `Phi` by less than that to first order), with every node's
        prox converged; where `Phi` is flat in a direction (`y` near the RS limit) the Newton step is large while
        the gradient is not.
      max_iter: cap on evaluations per stage (two stages: solve, dense check, solve again from the dense minima).
      max_step: cap on a step's relative size per coordinate.
      prox_steps: damped Newton steps per prox start during the solve (the dense check takes 60).
      prox_tol: a start stops when its gradient is below this.
    """

    tol: float = 1e-7
    gtol: float = 1e-11
    max_iter: int = 40
    max_step: float = 0.3
    prox_steps: int = 30
    prox_tol: float = 1e-12

    def __post_init__(self):
        if not self.tol > 0:
            raise ValueError(f"tol must be > 0, got {self.tol}")
        if not self.gtol > 0:
            raise ValueError(f"gtol must be > 0, got {self.gtol}")
        for name in ("max_iter", "prox_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not self.max_step > 0:
            raise ValueError(f"max_step must be > 0, got {self.max_step}")
        if not self.prox_tol > 0:
            raise ValueError(f"prox_tol must be > 0, got {self.prox_tol}")


class RSBProblem(NamedTuple):
    """What is solved: the `model`, the `rule`, which coordinates are `free (n,)` and their scale floors
    `floor (n,)`."""

    model: object
    rule: RSBRule
    free: Array
    floor: Array


class RSBState(NamedTuple):
    """Solver state: the accepted point `u` and its evaluation `ev`, the merit `merit ()` (scaled gradient norm),
    the Levenberg-Marquardt parameter `mu ()`, the relative Newton step at `u` (`residual ()`), evaluations `it`."""

    u: Array
    ev: Evaluation
    merit: Array
    mu: Array
    residual: Array
    it: Array


def _scale(problem, u):
    return jnp.maximum(jnp.abs(u), problem.floor)


def _newton_step(problem, u, ev, mu):
    """`du` solving `(H^T H + mu I) du = -H^T g` on the free coordinates in scaled variables (`mu = 0`: Newton)."""
    sc = _scale(problem, u)
    g = jnp.where(problem.free, ev.grad * sc, 0.0)
    both = problem.free[:, None] & problem.free[None, :]
    H = jnp.where(both, ev.hess * sc[:, None] * sc[None, :], jnp.eye(u.shape[0], dtype=u.dtype))
    A = H.T @ H + mu * jnp.diag(jnp.diag(H.T @ H) + 1e-30)
    dv = -jnp.linalg.solve(A, H.T @ g)
    dv = jnp.where(problem.free & jnp.isfinite(dv), dv, 0.0)
    return dv * sc


def _merit(problem, u, ev):
    return jnp.sqrt(jnp.sum(jnp.where(problem.free, ev.grad * _scale(problem, u), 0.0) ** 2))


def _residual(problem, u, ev):
    du = _newton_step(problem, u, ev, 0.0)
    return jnp.max(jnp.abs(du) / _scale(problem, u))


@dataclasses.dataclass(frozen=True)
class RSBNewton:
    """Levenberg-Marquardt on `grad Phi = 0`: settings only (`RSBConfig`); the problem is an argument.

    A step from the accepted point is capped to `max_step` in relative size and halved until the state is valid;
    the trial point is evaluated and accepted when it lowers the merit `|grad Phi|` (scaled), else `mu` grows and a
    shorter step is tried from the accepted point. Done when the Newton step at the accepted point is below `tol`
    (relative) or the scaled gradient below `gtol`, and every prox start kept has converged."""

    config: RSBConfig

    def settings(self) -> LaneSettings:
        return LaneSettings(max_steps=self.config.prox_steps, stop_tol=self.config.prox_tol)

    def init(self, problem: RSBProblem, u0: Array, warm: Array) -> RSBState:
        ev = evaluate(problem.model, u0, problem.rule, warm_starts(warm), self.settings())
        return RSBState(u=u0, ev=ev, merit=_merit(problem, u0, ev), mu=jnp.asarray(1e-6, u0.dtype),
                        residual=_residual(problem, u0, ev), it=jnp.asarray(1))

    def step(self, problem: RSBProblem, st: RSBState) -> RSBState:
        du = _newton_step(problem, st.u, st.ev, st.mu)
        rel = jnp.max(jnp.abs(du) / _scale(problem, st.u))
        du = du * jnp.minimum(1.0, self.config.max_step / jnp.maximum(rel, 1e-300))
        ts = 0.5 ** jnp.arange(12)
        ok = jax.vmap(lambda t: problem.model.valid(st.u + t * du))(ts)
        t = ts[jnp.argmax(ok)]
        trial = st.u + jnp.where(jnp.any(ok), t, 0.0) * du
        ev = evaluate(problem.model, trial, problem.rule, warm_starts(st.ev.h), self.settings())
        merit = _merit(problem, trial, ev)
        accept = jnp.isfinite(merit) & (merit < st.merit) & jnp.all(jnp.isfinite(ev.hess))
        pick = lambda a, b: jax.tree_util.tree_map(lambda x, y_: jnp.where(accept, x, y_), a, b)  # noqa: E731
        u, ev_new = pick(trial, st.u), pick(ev, st.ev)
        mu = jnp.where(accept, jnp.maximum(st.mu * 0.1, 1e-12), st.mu * 10.0)
        return RSBState(u=u, ev=ev_new, merit=jnp.where(accept, merit, st.merit), mu=mu,
                        residual=jnp.where(accept, _residual(problem, u, ev_new), st.residual), it=st.it + 1)

    def terminate(self, problem: RSBProblem, st: RSBState):
        bad = ~jnp.all(jnp.isfinite(st.u)) | ~jnp.isfinite(st.ev.phi)
        small = (st.residual < self.config.tol) | (st.merit < self.config.gtol)
        done = (small & (st.ev.prox_residual < 1e-8)) | bad | (st.mu > 1e10)
        status = jnp.where(bad, Status.INVALID_ITERATE,
                           jnp.where(st.mu > 1e10, Status.MAX_ITERATIONS, Status.CONVERGED))
        return done, status


# ----------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------


@struct.dataclass
class RSBResult(HasStatus):
    """A 1RSB (or RS) stationary point with its quadrature errors (95% half-widths, `_err`).

    Attributes:
      u: `(n,)` the state vector (the model's `names`); u_err: `(n,)`.
      q0, delta, q1, V0, y: `()` (`q1 = q0 + Delta`; per-token values are `sigma_l^2` times these); with `_err`.
      phi: `()` the free energy `Phi(y)`; energy: `()` the energy of the states `e = Phi + y dPhi/dy` (the
        training loss per dimension of a ground state where `Sigma = 0`); complexity: `()` `Sigma = y^2 dPhi/dy`;
        each with `_err`.
      test_error: `()` a state's test error (attention model; NaN otherwise), with `_err`.
      phi_replicas, energy_replicas: `(R,)` the replicas' estimates of `phi` and `energy` (first order in their
        shift of the state): two results on the same rule give a difference with correlated errors
        (`paired_difference`).
      missed_minima: `()` nodes where the final dense check found a minimum lower than the one kept (by more than
        `1e-10`); dense_gain: `()` the largest such gap.
      residual: `()` relative Newton step at the solution; prox_residual: `()` largest prox gradient kept;
      iterations: `()` evaluations; status: `()` `phasejax.solvers.Status` code.
    """

    u: Array
    u_err: Array
    q0: Array
    q0_err: Array
    delta: Array
    delta_err: Array
    q1: Array
    q1_err: Array
    V0: Array
    V0_err: Array
    y: Array
    y_err: Array
    phi: Array
    phi_err: Array
    energy: Array
    energy_err: Array
    complexity: Array
    complexity_err: Array
    test_error: Array
    test_error_err: Array
    phi_replicas: Array
    energy_replicas: Array
    missed_minima: Array
    dense_gain: Array
    residual: Array
    prox_residual: Array
    iterations: Array
    status: Array

    @property
    def converged(self) -> Array:
        return self.status == Status.CONVERGED


def _dense_check(model, u, rule, warm):
    """Nodes whose dense multistart finds a lower minimum than the kept one: `(count, largest gap, dense
    minimisers)`."""
    objective, derivatives = model.prox()
    node_thetas, shared, omega = model.node_problems(u, rule)
    h, value, _, _ = dense_minima(objective, derivatives, node_thetas, shared, omega, warm)
    kept = jax.vmap(lambda hh, *th: objective(hh, tuple(th) + tuple(shared)))(warm, *node_thetas)
    gap = kept - value
    missed = gap > 1e-10 * (1.0 + jnp.abs(value))
    return jnp.sum(missed), jnp.max(jnp.where(missed, gap, 0.0)), h


def _postprocess(model, problem: RSBProblem, st: RSBState, status, missed, gain, test_rule) -> RSBResult:
    """Observables and their errors at the solution (replica gradients propagated through the Hessian)."""
    u, ev = st.u, st.ev
    n = u.shape[0]
    free = problem.free
    both = free[:, None] & free[None, :]
    H = jnp.where(both, ev.hess, jnp.eye(n, dtype=u.dtype))
    du_rep = -jax.vmap(lambda g: jnp.linalg.solve(H, jnp.where(free, g, 0.0)))(ev.grad_replicas)    # (R, n)
    u_rep = u[None] + du_rep
    y_index = n - 1 if model.names[-1] == "y" else None

    def obs(v, phi, g):
        d = model.unpack(v)
        dphi_dy = g[y_index] if y_index is not None else jnp.zeros((), v.dtype)
        out = dict(q0=d["q0"], delta=d["delta"], q1=d["q0"] + d["delta"], V0=d["V0"], y=d["y"], phi=phi,
                   energy=phi + d["y"] * dphi_dy, complexity=d["y"] ** 2 * dphi_dy)
        out.update(model.observables(v, test_rule) if test_rule is not None else {})
        return out

    main = obs(u, ev.phi, ev.grad)
    # each replica: its own energy and gradient at the shifted state (first order: phi moves by g . du)
    reps = jax.vmap(obs)(u_rep, ev.phi_replicas, ev.grad_replicas + du_rep @ ev.hess)
    err = {k: spread_error(main[k], reps[k], main_is_mean=True) for k in main}
    u_err = spread_error(u, u_rep, main_is_mean=True)
    nan = jnp.full((), jnp.nan, u.dtype)
    return RSBResult(u=u, u_err=u_err, q0=main["q0"], q0_err=err["q0"], delta=main["delta"], delta_err=err["delta"],
                     q1=main["q1"], q1_err=err["q1"], V0=main["V0"], V0_err=err["V0"], y=main["y"], y_err=err["y"],
                     phi=main["phi"], phi_err=err["phi"], energy=main["energy"], energy_err=err["energy"],
                     complexity=main["complexity"], complexity_err=err["complexity"],
                     test_error=main.get("test_error", nan), test_error_err=err.get("test_error", nan),
                     phi_replicas=reps["phi"], energy_replicas=reps["energy"],
                     missed_minima=missed, dense_gain=gain, residual=st.residual, prox_residual=ev.prox_residual,
                     iterations=st.it, status=status)


@functools.partial(jax.jit, static_argnames=("config",))
def solve_rsb_problem(model, u0: Array, free: Array, rule: RSBRule, config: RSBConfig = RSBConfig(),
                      test_rule: Quadrature | None = None) -> RSBResult:
    """Solve `grad Phi = 0` for `model` from `u0 (n,)` with the coordinates `free (n,)` (bool) free and the others
    held: the nodes are started from the dense grid, solved (`RSBNewton`), checked with the dense multistart and,
    from the dense minima, solved again. Pure and compiled (`config` static: one program per model type, shapes
    and settings); vmappable."""
    floor = jnp.asarray([1e-3] * u0.shape[0], u0.dtype)
    problem = RSBProblem(model=model, rule=rule, free=jnp.asarray(free, bool), floor=floor)
    solver = RSBNewton(config)
    objective, derivatives = model.prox()
    node_thetas, shared, omega = model.node_problems(u0, rule)
    warm0 = dense_minima(objective, derivatives, node_thetas, shared, omega)[0]
    out = iterate(solver, problem, solver.init(problem, u0, warm0), max_steps=config.max_iter)
    _, _, warm1 = _dense_check(model, out.state.u, rule, out.state.ev.h)
    st1 = out.state
    ev1 = evaluate(model, st1.u, rule, warm_starts(warm1), solver.settings())
    st1 = RSBState(u=st1.u, ev=ev1, merit=_merit(problem, st1.u, ev1), mu=jnp.asarray(1e-6, u0.dtype),
                   residual=_residual(problem, st1.u, ev1), it=st1.it + 1)
    out2 = iterate(solver, problem, st1, max_steps=config.max_iter)
    missed, gain, _ = _dense_check(model, out2.state.u, rule, out2.state.ev.h)
    status = jnp.where((out.status == Status.INVALID_ITERATE) | (out2.status == Status.INVALID_ITERATE),
                       jnp.int32(Status.INVALID_ITERATE), out2.status)
    return _postprocess(model, problem, out2.state, status, missed, gain, test_rule)


def paired_difference(a: RSBResult, b: RSBResult, key: str = "energy") -> tuple[np.ndarray, float]:
    """`a.key - b.key` and its 95% error from the replicas of both results (the same rule: the replicas' errors are
    correlated and cancel in part), for `key` in `("phi", "energy")`."""
    from phasejax.theory.results import t_quantile_975

    diff = np.asarray(getattr(a, key), np.float64) - np.asarray(getattr(b, key), np.float64)
    reps = np.asarray(getattr(a, key + "_replicas"), np.float64) - np.asarray(getattr(b, key + "_replicas"), np.float64)
    K = reps.shape[0]
    return diff, float(t_quantile_975(K - 1)) * np.std(reps, ddof=1) / np.sqrt(K)


# ----------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------


@uses_float64
def solve_rsb(params: TiedAttentionParams, u0, *, branch: str = "positional", mode: str = "ground",
              rule: RSBRule | None = None, config: RSBConfig = RSBConfig(), test_order: int = 10) -> RSBResult:
    """Solve the 1RSB (or, `mode="rs"`, the RS) equations of the attention model from the state `u0`
    (`attention_state`; for `rs` its `Delta` is set to 0) on `branch` (docs/rsb.md).

    `rule`: `attention_rule(params)` by default. `test_order`: Gauss-Hermite nodes per dimension of the test
    error's average. Float64 inside a scoped switch; concrete invalid inputs raise `ValueError` naming them.

    Example:
      >>> from phasejax.theory import make_params
      >>> from phasejax.theory.rsb import attention_state, solve_rsb
      >>> p = make_params(1.25, 0.3)
      >>> res = solve_rsb(p, attention_state(0.2, 0.01, 40.0, 1.0, 0.0, 300.0))   # doctest: +SKIP
    """
    validate_params(params)
    if params.r != 1 or params.t != 1:
        raise ValueError(f"solve_rsb needs r = t = 1, got r={params.r}, t={params.t}")
    free = attention_free(params, branch, mode)
    u0 = jnp.asarray(u0, jnp.float64)
    if u0.shape != (5 + params.K,):
        raise ValueError(f"u0 must have shape ({5 + params.K},) (attention_state), got {u0.shape}")
    model = TiedAttentionRSB(params)
    if not isinstance(u0, jax.core.Tracer):
        d = model.unpack(np.asarray(u0))
        for name in ("q0", "V0", "y"):
            if not d[name] > 0:
                raise ValueError(f"u0: {name} must be > 0, got {float(d[name])}")
        if not d["theta0"] ** 2 < d["q0"]:
            raise ValueError(f"u0: theta0^2 must be < q0, got theta0={float(d['theta0'])}, q0={float(d['q0'])}")
    held_zero = ~free & (np.arange(free.size) != 4 + params.K)
    u0 = jnp.where(jnp.asarray(held_zero), 0.0, u0)
    if rule is None:
        rule = attention_rule(params)
    if mode == "rs":
        rule = rule.rs()
    return solve_rsb_problem(model, u0, jnp.asarray(free), rule, config, gauss_hermite(2 * params.L, test_order))


@uses_float64
def solve_perceptron_rsb(alpha, kappa, u0, *, mode: str = "ground", rule: RSBRule | None = None,
                         config: RSBConfig = RSBConfig()) -> RSBResult:
    """The reference model (`PerceptronRSB`) by the same code path: `u0 = (sqrt(Delta), V, y)`; `mode` as
    `solve_rsb` (`rs` holds `Delta = 0`: the RS energy `(sqrt(alpha / alpha_G) - 1)^2 / 2`; `ground` frees `y`:
    the state of `Sigma = 0`, found from a start near it). `rule`: `perceptron_rule()` by default."""
    if not np.all(np.asarray(alpha) > 0):
        raise ValueError(f"alpha must be > 0, got {alpha}")
    if not np.all(np.asarray(kappa) < 0):
        raise ValueError(f"kappa must be < 0 (a negative margin), got {kappa}")
    if mode not in RSB_MODES:
        raise ValueError(f"mode must be one of {RSB_MODES}, got {mode!r}")
    u0 = jnp.asarray(u0, jnp.float64)
    if u0.shape != (3,):
        raise ValueError(f"u0 must be (sqrt(Delta), V, y), got shape {u0.shape}")
    free = np.asarray([mode != "rs", True, mode == "ground"])
    if mode == "rs":
        u0 = u0.at[0].set(0.0)
    if rule is None:
        rule = perceptron_rule()
    if mode == "rs":
        rule = rule.rs()
    model = PerceptronRSB(alpha_=jnp.asarray(alpha, jnp.float64), kappa=jnp.asarray(kappa, jnp.float64))
    return solve_rsb_problem(model, u0, jnp.asarray(free), rule, config, None)
