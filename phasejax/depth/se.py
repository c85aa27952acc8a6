"""Bayes-optimal state evolution of the two-layer sequence multi-index model (docs/depth.md, section 2).

Weights `w_l ~ N(0, I_d)` (one rank-1 weight per layer), `T = 2` tokens,
`n = alpha d` samples, output `y = softmax(u u^T)`, `u = A(z_1) z_2`
(`phasejax.depth.model`). Both layers' projections enter only through
`z z^T`, so the posterior is invariant under `w_1 -> -w_1` and under
`w_2 -> -w_2` separately: the overlap matrix is diagonal, `Q = diag(q_1, q_2)`,
and the state evolution is a map of two numbers,

    qhat_l = alpha E[ |g_l|^2 ],    q_l = qhat_l / (1 + qhat_l),

with `g_l = (E[z_l | u, omega] - omega_l) / V_l  (T,)`, `V_l = 1 - q_l`,
`omega_l = sqrt(q_l) xi_l` and the teacher's `z_l = omega_l + sqrt(V_l) eta_l`
(`xi, eta ~ N(0, I)`). The posterior of `Z` given `(u, omega)` is
`phasejax.depth.posterior.posterior` (two rules: a Gauss-Hermite mixture and a
graded trapezoidal grid). The outer expectation is a Monte Carlo average over
fixed draws (`se_draws`): the map is deterministic for a given set of draws, and
its standard error is reported.

`outer_moments` also returns the per-sample quantities of the estimators used for
the thresholds (`phasejax.depth.thresholds`): the Nishimori forms of `E|g_l|^2`
and of the stability constant `M_l`, whose means equal the direct ones and whose
variances are smaller.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.depth.model import sequence_index
from phasejax.depth.posterior import (
    DiagonalRule,
    GridRule,
    InnerRule,
    Posterior,
    diagonal_rule,
    grid_rule,
    inner_rule,
    posterior,
    posterior_of,
    shared_grid_posterior,
)
from phasejax.precision import uses_float64
from phasejax.solvers import HasStatus, Status, iterate

Array = jax.Array

__all__ = ["DiagonalRule", "GridRule", "InnerRule", "Posterior", "diagonal_rule", "grid_rule", "inner_rule",
           "posterior"]  # re-exported

Q_MAX = 0.9995
"""Overlaps are clipped to `[0, Q_MAX]`: the inner rules need `V_l = 1 - q_l > 0`."""

STRIP_SKIP = 0.1
"""Below this skip strength the mixture rule needs its strip component (`inner_rule(order, strip=True)`):
`A(z)` has the eigenvalue `c` across the diagonal, so the posterior has a feature there of width `~ sqrt(|u|)`."""


def rule_for(order: int, skip) -> InnerRule:
    """The mixture rule of `order` with the strip component where `skip < STRIP_SKIP` (always when `skip` is traced)."""
    if isinstance(skip, jax.core.Tracer):
        return inner_rule(order, strip=True)
    return inner_rule(order, strip=bool(np.all(np.asarray(skip) < STRIP_SKIP)))


DIAGONAL_ORDER = 96
"""Order of the `DiagonalRule` that replaces the mixture as the independent rule below `STRIP_SKIP`."""


def independent_rule(order: int, skip):
    """The rule that checks the graded grid at `skip`: the mixture `rule_for(order, skip)` from `STRIP_SKIP` on; below,
    the `DiagonalRule` of order `max(order, DIAGONAL_ORDER)`, since the mixture's strip does not converge there: at
    `c = 0`, `Q = 0` its per-sample `M_2` changes by up to 1 between orders 32, 64 and 128 where the grid's changes by
    less than `1e-4` with step, grading and box (docs/depth.md, section 3)."""
    if isinstance(skip, jax.core.Tracer) or np.all(np.asarray(skip) >= STRIP_SKIP):
        return rule_for(order, skip)
    return diagonal_rule(max(int(order), DIAGONAL_ORDER))


def output_function(u, omega, V, skip, rule, ridge: bool = True):
    """`g (L, T) = (E[Z | u, omega] - omega) / V` and `dg (L, T) = (Var[z_lt | ...] - V_l) / V_l^2` (the AMP channel);
    `L` layers as `rule`'s model (`posterior_of`)."""
    post = posterior_of(rule)(u, omega, V, skip, rule, ridge)
    var = jnp.diagonal(post.second, axis1=-2, axis2=-1) - post.mean**2
    g = (post.mean - omega) / V[:, None]
    dg = (var - V[:, None]) / V[:, None] ** 2
    return g, dg, post


RIDGE_RATIO = 0.5
"""The ridge components of `posterior` are used where `V_2 < RIDGE_RATIO V_1`."""


def needs_ridge(V: Array) -> Array:
    """Whether the posterior needs its mixture's ridge components at prior variances `V (L,)` (the last two
    layers' problem: the last layer's variance small against the one before)."""
    return V[-1] < RIDGE_RATIO * V[-2]


class Draws(NamedTuple):
    """Fixed Gaussian draws `xi, eta (N, L, T)` for the outer expectation of the state evolution (`L` layers)."""

    xi: Array
    eta: Array


def se_draws(n_samples: int, seed: int = 0, T: int = 2, layers: int = 2) -> Draws:
    """`n_samples` draws for `layers` layers (float64; common to every alpha, so the curves are smooth in alpha)."""
    if isinstance(n_samples, bool) or int(n_samples) != n_samples or n_samples < 2:
        raise ValueError(f"n_samples must be an integer >= 2, got {n_samples}")
    if layers not in (2, 3):
        raise ValueError(f"layers must be 2 or 3, got {layers}")
    rng = np.random.default_rng(seed)
    return Draws(xi=jnp.asarray(rng.standard_normal((n_samples, layers, T))),
                 eta=jnp.asarray(rng.standard_normal((n_samples, layers, T))))


class Moments(NamedTuple):
    """Per-sample outer quantities, each `(N, 2)` (layer 1, layer 2) except `log_evidence (N,)`.

    `g2 = |g_l|^2` (the state evolution's estimator of `E|g_l|^2`); `g2_nishimori = (T V_l - tr Cov[z_l|...]) / V_l^2`,
    the same mean (`E|z_l - omega_l|^2 = T V_l`) with the teacher's discrepancy replaced by its posterior expectation.
    The stability constant `M_l = E|E[z_l z_l^T | u, omega] - I|_F^2` of a layer at `q_l = 0`, three ways:
    `cov_dev = |E[W_l|...] - V_l I - omega_l omega_l^T|_F^2 / V_l^2` (direct), `M_teacher = (T^2 + T) - |W_l - E[W_l|...]|_F^2`
    with the teacher's `W_l = z_l z_l^T` (control variate: `E|W_l - I|_F^2 = T^2 + T`), and
    `M_posterior = (T^2 + T) - (E[|z_l|^4|...] - |E[W_l|...]|_F^2)` (its posterior expectation). The last two have the
    direct one's mean at `q_l = 0` and never exceed the bound `T^2 + T` (docs/depth.md, section 3).
    """

    g2: Array
    g2_nishimori: Array
    cov_dev: Array
    M_teacher: Array
    M_posterior: Array
    log_evidence: Array


def sample_estimators(post: Posterior, omega: Array, V: Array, Z: Array) -> tuple[Array, ...]:
    """One sample's entries of `Moments` (all but `log_evidence`), each `(L,)`, from its posterior `post`, cavity
    `omega (L, T)`, variances `V (L,)` and the teacher's projections `Z (L, T)`."""
    T = omega.shape[-1]
    g = (post.mean - omega) / V[:, None]
    cov_trace = jnp.trace(post.second, axis1=-2, axis2=-1) - jnp.sum(post.mean**2, -1)
    W = Z[:, :, None] * Z[:, None, :]
    dev = post.second - V[:, None, None] * jnp.eye(T) - omega[:, :, None] * omega[:, None, :]
    bound = T**2 + T
    return (jnp.sum(g**2, -1), (T * V - cov_trace) / V**2, jnp.sum(dev**2, (-1, -2)) / V**2,
            bound - jnp.sum((W - post.second) ** 2, (-1, -2)),
            bound - (post.fourth - jnp.sum(post.second**2, (-1, -2))))


def teacher_and_cavity(q: Array, skip, draws: Draws) -> tuple[Array, Array, Array, Array]:
    """`(V (L,), omega (N, L, T), Z (N, L, T), u (N, T))` at overlaps `q (L,)` (clipped to `[0, Q_MAX]`)."""
    q = jnp.clip(q, 0.0, Q_MAX)
    V = 1.0 - q
    omega = jnp.sqrt(q)[None, :, None] * draws.xi
    Z = omega + jnp.sqrt(V)[None, :, None] * draws.eta
    return V, omega, Z, sequence_index(Z, skip)


def outer_moments(q: Array, skip, draws: Draws, rule) -> Moments:
    """The per-sample quantities of the state evolution at overlaps `q (L,)` (teacher and cavity from `draws`);
    `rule` an `InnerRule` or a `GridRule` (two layers) or a `phasejax.depth.posterior.ThreeRule` (three layers)."""
    V, omega, Z, u = teacher_and_cavity(q, skip, draws)
    post_fn = posterior_of(rule)

    def batch(ridge):
        def one(u_, om_, z_):
            post = post_fn(u_, om_, V, skip, rule, ridge)
            return sample_estimators(post, om_, V, z_) + (post.log_evidence,)

        return lambda: jax.lax.map(lambda a: one(*a), (u, omega, Z), batch_size=64)

    if isinstance(rule, GridRule):
        out = batch(False)()
    else:
        out = jax.lax.cond(needs_ridge(V), batch(True), batch(False))
    return Moments(*out)


BLOCK = 256
"""Samples per block of `moments_unlearned_first`."""


def moments_unlearned_first(q2, skip, draws: Draws, rule: GridRule) -> Moments:
    """`outer_moments` at `q = (0, q2)` on a `GridRule`, through `shared_grid_posterior`: with layer 1 at `q_1 = 0`
    its prior is `N(0, I)` for every sample, so the grid and `A(z_1)^{-1}` are computed once (the same numbers,
    many times faster). Jittable; the draws are processed in blocks of `BLOCK` (padded)."""
    if not isinstance(rule, GridRule):
        raise TypeError(f"rule must be a GridRule, got {type(rule).__name__}")
    V, omega, Z, u = teacher_and_cavity(jnp.stack([jnp.zeros_like(jnp.asarray(q2, jnp.float64)),
                                                   jnp.asarray(q2, jnp.float64)]), skip, draws)
    n = u.shape[0]
    pad = (-n) % BLOCK

    def blocks(a):
        a = jnp.concatenate([a, jnp.repeat(a[:1], pad, axis=0)]) if pad else a  # padding rows, dropped below
        return a.reshape((-1, BLOCK) + a.shape[1:])

    T = u.shape[-1]

    def one_block(args):
        u_, om_, z_ = args
        post = shared_grid_posterior(u_, om_[:, 1], V[1], jnp.zeros(T, u_.dtype), V[0], skip, rule)
        est = jax.vmap(lambda p, o, z: sample_estimators(p, o, V, z))(post, om_, z_)
        return est + (post.log_evidence,)

    out = jax.lax.map(one_block, (blocks(u), blocks(omega), blocks(Z)))
    return Moments(*(a.reshape((-1,) + a.shape[2:])[:n] for a in out))


def se_map(q: Array, alpha, skip, draws: Draws, rule) -> tuple[Array, Array]:
    """One state-evolution step: `(qhat (L,), its Monte Carlo standard error (L,))` at overlaps `q (L,)`.

    Uses the direct estimator `|g_l|^2`, which vanishes identically at `q_l = 0` (the uninformative point stays an
    exact fixed point of the map for any draws)."""
    m = outer_moments(q, skip, draws, rule)
    n = m.g2.shape[0]
    return alpha * m.g2.mean(0), alpha * m.g2.std(0) / jnp.sqrt(n)


class SEState(NamedTuple):
    """The iterate `q (L,)`, the last step's size `residual ()`, the one before `previous ()`, and `error ()`: the
    estimated distance to the fixed point (`residual rho / (1 - rho)`, `rho = residual / previous`, the observed
    contraction; infinite while the steps do not shrink)."""

    q: Array
    residual: Array
    previous: Array
    error: Array


class _FixedProblem(NamedTuple):
    """The map `_Fixed` iterates: `se_map` at `alpha`, `skip` with `draws`, `rule`; `frozen (L,)` layers at 0."""

    alpha: Array
    skip: Array
    draws: Draws
    rule: InnerRule
    frozen: Array


def _distance(residual, previous):
    """Distance to the fixed point of a linearly converging iteration, from its last two step sizes."""
    rho = residual / jnp.maximum(previous, jnp.finfo(jnp.float64).tiny)
    return jnp.where(rho < 1.0, residual * rho / (1.0 - rho), jnp.inf)


class _Fixed:
    """Damped iteration of `_FixedProblem`'s map (settings: `damping`, `tol`).

    The convergence test: the distance to the fixed point, estimated from the contraction of the last two steps
    (`_distance`), and the last step are both below `tol`. Near a threshold the contraction tends to one and the
    iteration slows down; the test keeps it going instead of stopping on a small step."""

    def __init__(self, damping, tol):
        self.damping, self.tol = damping, tol

    def step(self, problem: _FixedProblem, state):
        qhat, _ = se_map(state.q, problem.alpha, problem.skip, problem.draws, problem.rule)
        new = jnp.minimum(qhat / (1.0 + qhat), Q_MAX)
        new = jnp.where(problem.frozen, 0.0, new)
        new = self.damping * new + (1.0 - self.damping) * state.q
        ok = jnp.all(jnp.isfinite(new))
        residual = jnp.where(ok, jnp.max(jnp.abs(new - state.q)), jnp.nan)
        return SEState(q=jnp.where(ok, new, state.q), residual=residual, previous=state.residual,
                       error=_distance(residual, state.residual))

    def terminate(self, problem: _FixedProblem, state):
        bad = ~jnp.isfinite(state.residual)
        done = bad | (state.residual == 0.0) | ((state.error < self.tol) & (state.residual < self.tol))
        return done, jnp.where(bad, Status.INVALID_ITERATE, Status.CONVERGED)


@struct.dataclass
class DepthSEResult(HasStatus):
    """A fixed point: `q (L,)` (layer 1, 2, ...), `qhat (L,)` and its Monte Carlo standard error `qhat_se (L,)`,
    `q_se (L,)` (the standard error carried to `q`), `residual ()` (the last step), `error ()` (the estimated
    distance to the fixed point of the map, `SEState`), `iterations ()`, `status ()` (`Status` code), and
    `clipped (L,)`: True for a layer whose overlap sits at the cap `Q_MAX` (the map pushes it above the cap,
    so the reported `q` is a lower bound on the fixed point's, even when `status` is converged)."""

    q: Array
    qhat: Array
    qhat_se: Array
    q_se: Array
    residual: Array
    error: Array
    iterations: Array
    status: Array
    clipped: Array


MAX_ITERATIONS = 20000
"""A safety net only: the state evolution stops on its convergence test (`_Fixed`); a solve that reaches this many
steps reports `Status.MAX_ITERATIONS`."""


def _solve(alpha, skip, q0, draws, rule, damping, tol, max_iterations, frozen):
    solver = _Fixed(damping, tol)
    inf = jnp.asarray(jnp.inf)
    out = iterate(solver, _FixedProblem(alpha, skip, draws, rule, frozen),
                  SEState(q=jnp.asarray(q0, jnp.float64), residual=inf, previous=inf, error=inf),
                  max_steps=max_iterations, min_steps=2)
    q = out.state.q
    qhat, se = se_map(q, alpha, skip, draws, rule)
    q_se = se / (1.0 + qhat) ** 2
    return DepthSEResult(q=q, qhat=qhat, qhat_se=se, q_se=q_se, residual=out.state.residual, error=out.state.error,
                         iterations=out.steps, status=out.status, clipped=qhat / (1.0 + qhat) >= Q_MAX)


def _check(alpha=None, skip=None, q0=None, *, name: str = "q0", closed: bool = False, layers: int = 2):
    if alpha is not None and not isinstance(alpha, jax.core.Tracer) and np.any(np.asarray(alpha) < 0):
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    if skip is not None and not isinstance(skip, jax.core.Tracer) and np.any(np.asarray(skip) < 0):
        raise ValueError(f"skip must be >= 0, got {skip}")
    if q0 is not None and not isinstance(q0, jax.core.Tracer):
        a = np.asarray(q0)
        top = np.any(a > 1) if closed else np.any(a >= 1)
        if a.shape[-1:] != (layers,) or not np.all(np.isfinite(a)) or np.any(a < 0) or top:
            raise ValueError(f"{name} must have shape (..., {layers}) with entries in [0, {'1]' if closed else '1)'}, "
                             f"got {q0}")


@uses_float64
def solve_se(alpha, skip, q0=None, draws: Draws | None = None, rule=None, *,
             damping: float = 1.0, tol: float = 1e-7, max_iterations: int = MAX_ITERATIONS,
             frozen=None) -> DepthSEResult:
    """Iterate the state evolution from `q0 (L,)` (default `1e-3` per layer) to a fixed point (jittable and
    vmappable in `alpha, skip, q0`). `L` is the draws' number of layers (default draws: two layers); `rule` must
    match it (`posterior_of`).

    Stops on the convergence test of `_Fixed` (estimated distance to the fixed point below `tol`); `max_iterations`
    is a safety net whose status, `MAX_ITERATIONS`, says the test was not met.

    `frozen (L,)` pins layers' overlaps at zero (the fixed point where only the
    others are learned; exact, by the sign symmetry of each layer).
    """
    draws = se_draws(2048) if draws is None else draws
    layers = draws.xi.shape[1]
    q0 = (1e-3,) * layers if q0 is None else q0
    frozen = (False,) * layers if frozen is None else frozen
    _check(alpha, skip, q0, layers=layers)
    rule = rule_for(32, skip) if rule is None else rule
    return _solve_jit(jnp.asarray(alpha, jnp.float64), jnp.asarray(skip, jnp.float64), jnp.asarray(q0, jnp.float64),
                      draws, rule, damping, tol, max_iterations, jnp.asarray(frozen))


_solve_jit = jax.jit(_solve, static_argnames=("damping", "tol", "max_iterations"))


@uses_float64
def continuation(alphas, skip, q0=None, draws: Draws | None = None, rule=None, *,
                 q_floor: float = 1e-3, damping: float = 1.0, tol: float = 1e-7, max_iterations: int = MAX_ITERATIONS,
                 frozen=None) -> DepthSEResult:
    """Fixed points along increasing (or decreasing) `alphas (n,)`, each started from the previous one.

    The start is raised to at least `q_floor` per layer, so that a layer can
    leave the uninformative point where it is unstable (at `q = 0` exactly the
    map stays at zero by symmetry). Returns an `DepthSEResult` with a leading axis `n`.
    """
    alphas = np.asarray(alphas, np.float64)
    draws = se_draws(2048) if draws is None else draws
    layers = draws.xi.shape[1]
    q0 = (1e-3,) * layers if q0 is None else q0
    frozen = jnp.asarray((False,) * layers if frozen is None else frozen)
    _check(alphas, skip, q0, layers=layers)
    rule = rule_for(32, skip) if rule is None else rule

    def body(q, alpha):
        start = jnp.where(frozen, 0.0, jnp.maximum(q, q_floor))
        res = _solve(alpha, skip, start, draws, rule, damping, tol, max_iterations, frozen)
        return res.q, res

    _, out = _scan_jit(body, jnp.asarray(q0, jnp.float64), jnp.asarray(alphas))
    return out


@uses_float64
def se_trajectory(alpha, skip, q0, draws: Draws, rule, steps: int) -> Array:
    """The state evolution from `q0 (L,)` step by step: the overlaps after each of `steps` steps `(steps, L)` (no
    stopping test; the counterpart of an AMP run's history from the same start)."""
    layers = draws.xi.shape[1]
    _check(alpha, skip, q0, layers=layers)
    if isinstance(steps, bool) or int(steps) != steps or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    return _trajectory_jit(jnp.asarray(alpha, jnp.float64), jnp.asarray(skip, jnp.float64),
                           jnp.asarray(q0, jnp.float64), draws, rule, int(steps))


def _trajectory(alpha, skip, q0, draws, rule, steps):
    def body(q, _):
        qhat, _ = se_map(q, alpha, skip, draws, rule)
        new = jnp.minimum(qhat / (1.0 + qhat), Q_MAX)
        return new, new

    return jax.lax.scan(body, q0, None, length=steps)[1]


_trajectory_jit = jax.jit(_trajectory, static_argnames=("steps",))


def _scan(body, init, xs):
    return jax.lax.scan(body, init, xs)


_scan_jit = jax.jit(_scan, static_argnums=0)


@uses_float64
def free_entropy(q, alpha, skip, draws: Draws | None = None, rule=None) -> tuple[Array, Array]:
    """Replica-symmetric free entropy at a fixed point `q (L,)` and its Monte Carlo standard error.

    `phi = sum_l [-q_l qhat_l / 2 + (qhat_l - log(1 + qhat_l)) / 2] + alpha E[log Z_out]`, with
    `qhat_l = q_l / (1 - q_l)` (the prior's stationarity condition) and `Z_out` the density of `+-u`
    (its `q`-independent normalisation cancels in comparisons at equal `alpha`). Of two fixed points
    at the same `alpha` the larger `phi` is the Bayes-optimal one.
    """
    draws = se_draws(2048) if draws is None else draws
    _check(alpha=alpha, skip=skip, q0=q, name="q", layers=draws.xi.shape[1])
    rule = rule_for(32, skip) if rule is None else rule
    q = jnp.clip(jnp.asarray(q, jnp.float64), 0.0, Q_MAX)
    qhat = q / (1.0 - q)
    m = outer_moments(q, skip, draws, rule)
    prior = jnp.sum(-0.5 * q * qhat + 0.5 * (qhat - jnp.log1p(qhat)))
    n = m.log_evidence.shape[0]
    return prior + alpha * m.log_evidence.mean(), alpha * m.log_evidence.std() / jnp.sqrt(n)


@uses_float64
def bayes_test_error(q, skip, n_samples: int = 20000, seed: int = 1) -> tuple[Array, Array]:
    """Test error `E |y - y_hat|_F^2` of the plug-in predictor `y_hat = g(omega)` at overlaps `q (L,)`, and its
    standard error. `omega = sqrt(q) xi` is the student's projection, the teacher's is
    `omega + sqrt(1 - q) eta` (the same predictor as the paper's generalisation curves)."""
    from phasejax.depth.model import model_output

    layers = int(np.shape(q)[-1]) if np.ndim(q) else 0
    _check(skip=skip, q0=q, name="q", closed=True, layers=layers if layers in (2, 3) else 2)
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 2:
        raise ValueError(f"n_samples must be an integer >= 2, got {n_samples!r}")
    d = se_draws(n_samples, seed, layers=layers)
    q = jnp.clip(jnp.asarray(q, jnp.float64), 0.0, 1.0)
    omega = jnp.sqrt(q)[None, :, None] * d.xi
    Z = omega + jnp.sqrt(1.0 - q)[None, :, None] * d.eta
    err = jnp.sum((model_output(Z, skip) - model_output(omega, skip)) ** 2, (-1, -2))
    return err.mean(), err.std() / jnp.sqrt(n_samples)
