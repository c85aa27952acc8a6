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
(`xi, eta ~ N(0, I)`). The posterior of `Z` given `(u, omega)` lives on the
surface `A(z_1) z_2 = +-u`; it is integrated over `z_1` (Gauss-Hermite around
`omega_1` with scale `sqrt(V_1)`), with `z_2 = +-A(z_1)^{-1} u` and the
Jacobian `1 / |det A(z_1)|` (`posterior`). The outer expectation is a Monte
Carlo average over fixed draws (`se_draws`): the map is deterministic for a
given set of draws, and its standard error is reported.

The inner rule is exact for `V_2` of order one; when layer 2 is recovered
well (`V_2` small) while `V_1` is not, the integrand is a narrow ridge in
`z_1` and the rule's error grows (`quadrature_gap` measures it by comparing
two orders).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.depth.model import mixing_matrix, sequence_index
from phasejax.precision import uses_float64
from phasejax.solvers import Status, iterate
from phasejax.theory.quadrature import gauss_hermite

Array = jax.Array

Q_MAX = 0.9995
"""Overlaps are clipped to `[0, Q_MAX]`: the inner rule needs `V_l = 1 - q_l > 0`."""


@struct.dataclass
class InnerRule:
    """Gauss-Hermite rule for `N(0, I_2)` over one layer's projection: `nodes (K, 2)`, `log_weights (K,)`."""

    nodes: Array
    log_weights: Array


def inner_rule(order: int = 32) -> InnerRule:
    """Tensor Gauss-Hermite rule with `order` nodes per token (`order ** 2` nodes)."""
    q = gauss_hermite(2, order)
    return InnerRule(nodes=jnp.asarray(q.points), log_weights=jnp.log(jnp.asarray(q.weights)))


class Posterior(NamedTuple):
    """Posterior moments of `Z (2, T)` given `u` and the cavity `(omega, V)`.

    `mean (2, T)`, `second (2, T, T)` (per layer: `E[z_l z_l^T]`), `log_evidence ()`:
    `log` of the density of `+-u` under `Z ~ N(omega, diag(V) x I_T)`.
    """

    mean: Array
    second: Array
    log_evidence: Array


def _moments(logw, z1, z2):
    """Normalised moments from log-weights `logw (S, K)` of nodes `z1, z2 (S, K, T)`."""
    finite = jnp.isfinite(logw)
    logw = jnp.where(finite, logw, -jnp.inf)
    z1 = jnp.where(finite[..., None], z1, 0.0)  # nodes where A(z_1) is singular carry no weight
    z2 = jnp.where(finite[..., None], z2, 0.0)
    log_evidence = jax.scipy.special.logsumexp(logw)
    p = jnp.exp(logw - log_evidence)
    mean = jnp.stack([jnp.einsum("sk,ski->i", p, z1), jnp.einsum("sk,ski->i", p, z2)])
    second = jnp.stack([jnp.einsum("sk,ski,skj->ij", p, z1, z1), jnp.einsum("sk,ski,skj->ij", p, z2, z2)])
    return Posterior(mean=mean, second=second, log_evidence=log_evidence)


def _gauss_log(z, omega, V):
    T = z.shape[-1]
    return -0.5 * jnp.sum((z - omega) ** 2, -1) / V - 0.5 * T * jnp.log(2 * jnp.pi * V)


def _preimages(z2: Array, u: Array, skip) -> tuple[Array, Array, Array]:
    """For `T = 2`: the `z_1` with `A(z_1) z_2 = u` (two of them, `+-z_1`), the Jacobian
    `J = d(A(z_1) z_2)/dz_1 (2, 2)` there, and whether they exist.

    `A(z_1) z_2 = (1 + c) z_2 + (z_{2,1} - z_{2,0}) (p, -r)` is linear in the attention weights
    `p = softmax_01`, `r = softmax_10`; `logit p = a (b - a)` and `logit r = b (a - b)` give
    `(a - b)^2 = -(logit p + logit r)`, so a preimage exists iff `0 < p, r` and `p + r < 1`.
    """
    tiny = jnp.finfo(z2.dtype).tiny
    diff = z2[1] - z2[0]
    safe = jnp.where(jnp.abs(diff) > 1e-12, diff, 1e-12)
    p = (u[0] - (1.0 + skip) * z2[0]) / safe
    r = ((1.0 + skip) * z2[1] - u[1]) / safe
    valid = (p > 1e-12) & (p < 1 - 1e-12) & (r > 1e-12) & (r < 1 - 1e-12) & (p + r < 1 - 1e-12)
    p = jnp.where(valid, p, 0.25)
    r = jnp.where(valid, r, 0.25)
    P = jnp.log(p) - jnp.log1p(-p)
    R = jnp.log(r) - jnp.log1p(-r)
    s = jnp.sqrt(jnp.maximum(-(P + R), tiny))
    a, b = -P / s, R / s
    dp = p * (1 - p) * jnp.stack([b - 2 * a, a])
    dr = r * (1 - r) * jnp.stack([b, a - 2 * b])
    J = safe * jnp.stack([dp, -dr])
    return jnp.stack([a, b]), J, valid


def posterior(u: Array, omega: Array, V: Array, skip, rule: InnerRule, ridge: bool = True) -> Posterior:
    """Moments of `Z` given `A(z_1) z_2 = +-u`, prior `N(omega_l, V_l I)` per layer. `u (T,)`, `omega (2, T)`, `V (2,)`.

    Integrates over `z_1` with `z_2 = +-A(z_1)^{-1} u` (Jacobian `1 / |det A(z_1)|`). The rule is a
    defensive mixture (balance-heuristic importance weights over deterministic Gauss-Hermite nodes):
    the prior `N(omega_1, V_1)` and, for each sign of `u`, Gaussians at the two preimages `+-z_1*`
    of `z_2 = omega_2` (`_preimages`) with the Laplace covariance `(J^T A^{-T} A^{-1} J / V_2 + I / V_1)^{-1}`.
    The prior part covers broad posteriors, the others the narrow ridge `A(z_1)^{-1} u ~ omega_2` when
    `V_2` is small. Components whose preimage does not exist get weight zero. `ridge=False` keeps the
    prior component alone (enough, and five times cheaper, when `V_2` is not small against `V_1`).
    """
    T = u.shape[-1]
    eye = jnp.eye(T, dtype=u.dtype)
    centers, covs, valids = [omega[0]], [V[0] * eye], [jnp.asarray(True)]
    for sign in ((1.0, -1.0) if ridge else ()):
        z1s, J, valid = _preimages(omega[1], sign * u, skip)
        Ainv = jnp.linalg.inv(mixing_matrix(z1s, skip))
        K = Ainv @ J
        prec = K.T @ K / V[1] + eye / V[0]
        cov = jnp.linalg.inv(prec + 1e-12 * eye)
        cov = 0.5 * (cov + cov.T)
        for mirror in (1.0, -1.0):
            centers.append(jnp.where(valid, mirror * z1s, omega[0]))
            covs.append(jnp.where(valid, cov, V[0] * eye))
            valids.append(valid)
    centers, covs, valids = jnp.stack(centers), jnp.stack(covs), jnp.stack(valids)  # (C, T), (C, T, T), (C,)
    log_pi = jnp.where(valids, 0.0, -jnp.inf)
    log_pi = log_pi - jax.scipy.special.logsumexp(log_pi)
    chol = jnp.linalg.cholesky(covs)
    z1 = centers[:, None, :] + jnp.einsum("cij,kj->cki", chol, rule.nodes)  # (C, K, T)
    z1 = z1.reshape(-1, T)
    # log q(z1) of the mixture, log N(z1; omega_1, V_1) of the prior
    diff = z1[None, :, :] - centers[:, None, :]
    sol = jax.scipy.linalg.solve_triangular(chol[:, None], diff[..., None], lower=True)[..., 0]
    logdet = jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), -1)
    log_comp = -0.5 * jnp.sum(sol**2, -1) - logdet[:, None] - 0.5 * T * jnp.log(2 * jnp.pi)
    log_q = jax.scipy.special.logsumexp(log_pi[:, None] + log_comp, axis=0)
    log_prior = _gauss_log(z1, omega[0], V[0])
    # node weights: pi_c w_k (per component) * prior / mixture density (a component's own rule integrates it)
    log_node = (log_pi[:, None] + rule.log_weights[None, :]).reshape(-1) + log_prior - log_q
    A = mixing_matrix(z1, skip)
    det = A[:, 0, 0] * A[:, 1, 1] - A[:, 0, 1] * A[:, 1, 0]
    adj = jnp.stack([jnp.stack([A[:, 1, 1], -A[:, 0, 1]], -1), jnp.stack([-A[:, 1, 0], A[:, 0, 0]], -1)], -2)
    z2 = jnp.einsum("kij,j->ki", adj, u) / det[:, None]
    z2 = jnp.stack([z2, -z2], axis=0)  # (2 signs of u, C K, T)
    logw = log_node + _gauss_log(z2, omega[1], V[1]) - jnp.log(jnp.abs(det))
    logw = jnp.where(jnp.isfinite(logw), logw, -jnp.inf)
    return _moments(logw, jnp.broadcast_to(z1, z2.shape), z2)


def output_function(u, omega, V, skip, rule, ridge: bool = True):
    """`g (2, T) = (E[Z | u, omega] - omega) / V` and `dg (2, T) = (Var[z_lt | ...] - V_l) / V_l^2` (the AMP channel)."""
    post = posterior(u, omega, V, skip, rule, ridge)
    var = jnp.diagonal(post.second, axis1=-2, axis2=-1) - post.mean**2
    g = (post.mean - omega) / V[:, None]
    dg = (var - V[:, None]) / V[:, None] ** 2
    return g, dg, post


RIDGE_RATIO = 0.5
"""The ridge components of `posterior` are used where `V_2 < RIDGE_RATIO V_1`."""


def needs_ridge(V: Array) -> Array:
    """Whether `posterior` needs its ridge components at prior variances `V (2,)`."""
    return V[1] < RIDGE_RATIO * V[0]


class Draws(NamedTuple):
    """Fixed Gaussian draws `xi, eta (N, 2, T)` for the outer expectation of the state evolution."""

    xi: Array
    eta: Array


def se_draws(n_samples: int, seed: int = 0, T: int = 2) -> Draws:
    """`n_samples` draws (float64; common to every alpha, so the curves are smooth in alpha)."""
    if int(n_samples) != n_samples or n_samples < 2:
        raise ValueError(f"n_samples must be an integer >= 2, got {n_samples}")
    rng = np.random.default_rng(seed)
    return Draws(xi=jnp.asarray(rng.standard_normal((n_samples, 2, T))),
                 eta=jnp.asarray(rng.standard_normal((n_samples, 2, T))))


class Moments(NamedTuple):
    """Per-sample outer quantities: `g2 (N, 2)` `= |g_l|^2`, `cov_dev (N, 2)` `= |E[z_l z_l^T|...] - V_l I|_F^2 / V_l^2`,
    `log_evidence (N,)`."""

    g2: Array
    cov_dev: Array
    log_evidence: Array


def outer_moments(q: Array, skip, draws: Draws, rule: InnerRule) -> Moments:
    """The per-sample quantities of the state evolution at overlaps `q (2,)` (teacher and cavity from `draws`)."""
    q = jnp.clip(q, 0.0, Q_MAX)
    V = 1.0 - q
    omega = jnp.sqrt(q)[None, :, None] * draws.xi
    Z = omega + jnp.sqrt(V)[None, :, None] * draws.eta
    u = sequence_index(Z, skip)

    def batch(ridge):
        def one(u_, om_):
            g, _, post = output_function(u_, om_, V, skip, rule, ridge)
            T = u_.shape[-1]
            dev = post.second - V[:, None, None] * jnp.eye(T) - om_[:, :, None] * om_[:, None, :]
            return jnp.sum(g**2, -1), jnp.sum(dev**2, (-1, -2)) / V**2, post.log_evidence

        return lambda: jax.vmap(one)(u, omega)

    g2, cov_dev, le = jax.lax.cond(needs_ridge(V), batch(True), batch(False))
    return Moments(g2=g2, cov_dev=cov_dev, log_evidence=le)


def se_map(q: Array, alpha, skip, draws: Draws, rule: InnerRule) -> tuple[Array, Array]:
    """One state-evolution step: `(qhat (2,), its Monte Carlo standard error (2,))` at overlaps `q (2,)`."""
    m = outer_moments(q, skip, draws, rule)
    n = m.g2.shape[0]
    return alpha * m.g2.mean(0), alpha * m.g2.std(0) / jnp.sqrt(n)


class SEState(NamedTuple):
    q: Array
    residual: Array


class _FixedProblem(NamedTuple):
    """The map `_Fixed` iterates: `se_map` at `alpha`, `skip` with `draws`, `rule`; `frozen (2,)` layers at 0."""

    alpha: Array
    skip: Array
    draws: Draws
    rule: InnerRule
    frozen: Array


class _Fixed:
    """Damped iteration of `_FixedProblem`'s map (settings: `damping`, `tol`)."""

    def __init__(self, damping, tol):
        self.damping, self.tol = damping, tol

    def step(self, problem: _FixedProblem, state):
        qhat, _ = se_map(state.q, problem.alpha, problem.skip, problem.draws, problem.rule)
        new = jnp.minimum(qhat / (1.0 + qhat), Q_MAX)
        new = jnp.where(problem.frozen, 0.0, new)
        new = self.damping * new + (1.0 - self.damping) * state.q
        return SEState(q=jnp.where(jnp.all(jnp.isfinite(new)), new, state.q),
                       residual=jnp.where(jnp.all(jnp.isfinite(new)), jnp.max(jnp.abs(new - state.q)), jnp.nan))

    def terminate(self, problem: _FixedProblem, state):
        bad = ~jnp.isfinite(state.residual)
        done = bad | (state.residual < self.tol)
        return done, jnp.where(bad, Status.INVALID_ITERATE, Status.CONVERGED)


@struct.dataclass
class DepthSEResult:
    """A fixed point: `q (2,)` (layer 1, layer 2), `qhat (2,)` and its Monte Carlo standard error `qhat_se (2,)`,
    `q_se (2,)` (the standard error carried to `q`), `residual ()`, `iterations ()`, `status ()` (`Status` code),
    and `clipped (2,)`: True for a layer whose overlap sits at the cap `Q_MAX` (the map pushes it above the cap,
    so the reported `q` is a lower bound on the fixed point's, even when `status` is converged)."""

    q: Array
    qhat: Array
    qhat_se: Array
    q_se: Array
    residual: Array
    iterations: Array
    status: Array
    clipped: Array


def _solve(alpha, skip, q0, draws, rule, damping, tol, max_iterations, frozen):
    solver = _Fixed(damping, tol)
    out = iterate(solver, _FixedProblem(alpha, skip, draws, rule, frozen), SEState(q=jnp.asarray(q0, jnp.float64), residual=jnp.asarray(jnp.inf)),
                  max_steps=max_iterations, min_steps=1)
    q = out.state.q
    qhat, se = se_map(q, alpha, skip, draws, rule)
    q_se = se / (1.0 + qhat) ** 2
    return DepthSEResult(q=q, qhat=qhat, qhat_se=se, q_se=q_se, residual=out.state.residual,
                         iterations=out.steps, status=out.status, clipped=qhat / (1.0 + qhat) >= Q_MAX)


def _check(alpha=None, skip=None, q0=None, *, name: str = "q0", closed: bool = False):
    if alpha is not None and not isinstance(alpha, jax.core.Tracer) and np.any(np.asarray(alpha) < 0):
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    if skip is not None and not isinstance(skip, jax.core.Tracer) and np.any(np.asarray(skip) < 0):
        raise ValueError(f"skip must be >= 0, got {skip}")
    if q0 is not None and not isinstance(q0, jax.core.Tracer):
        a = np.asarray(q0)
        top = np.any(a > 1) if closed else np.any(a >= 1)
        if a.shape[-1:] != (2,) or not np.all(np.isfinite(a)) or np.any(a < 0) or top:
            raise ValueError(f"{name} must have shape (..., 2) with entries in [0, {'1]' if closed else '1)'}, "
                             f"got {q0}")


@uses_float64
def solve_se(alpha, skip, q0=(1e-3, 1e-3), draws: Draws | None = None, rule: InnerRule | None = None, *,
             damping: float = 1.0, tol: float = 1e-7, max_iterations: int = 400,
             frozen=(False, False)) -> DepthSEResult:
    """Iterate the state evolution from `q0 (2,)` to a fixed point (jittable and vmappable in `alpha, skip, q0`).

    `frozen (2,)` pins a layer's overlap at zero (the fixed point where only the
    other layer is learned; exact, by the sign symmetry of each layer).
    """
    _check(alpha, skip, q0)
    draws = se_draws(2048) if draws is None else draws
    rule = inner_rule() if rule is None else rule
    return _solve_jit(jnp.asarray(alpha, jnp.float64), jnp.asarray(skip, jnp.float64), jnp.asarray(q0, jnp.float64),
                      draws, rule, damping, tol, max_iterations, jnp.asarray(frozen))


_solve_jit = jax.jit(_solve, static_argnames=("damping", "tol", "max_iterations"))


@uses_float64
def continuation(alphas, skip, q0=(1e-3, 1e-3), draws: Draws | None = None, rule: InnerRule | None = None, *,
                 q_floor: float = 1e-3, damping: float = 1.0, tol: float = 1e-7, max_iterations: int = 400,
                 frozen=(False, False)) -> DepthSEResult:
    """Fixed points along increasing (or decreasing) `alphas (n,)`, each started from the previous one.

    The start is raised to at least `q_floor` per layer, so that a layer can
    leave the uninformative point where it is unstable (at `q = 0` exactly the
    map stays at zero by symmetry). Returns an `DepthSEResult` with a leading axis `n`.
    """
    alphas = np.asarray(alphas, np.float64)
    _check(alphas, skip, q0)
    draws = se_draws(2048) if draws is None else draws
    rule = inner_rule() if rule is None else rule
    frozen = jnp.asarray(frozen)

    def body(q, alpha):
        start = jnp.where(frozen, 0.0, jnp.maximum(q, q_floor))
        res = _solve(alpha, skip, start, draws, rule, damping, tol, max_iterations, frozen)
        return res.q, res

    _, out = _scan_jit(body, jnp.asarray(q0, jnp.float64), jnp.asarray(alphas))
    return out


def _scan(body, init, xs):
    return jax.lax.scan(body, init, xs)


_scan_jit = jax.jit(_scan, static_argnums=0)


@uses_float64
def free_entropy(q, alpha, skip, draws: Draws | None = None, rule: InnerRule | None = None) -> tuple[Array, Array]:
    """Replica-symmetric free entropy at a fixed point `q (2,)` and its Monte Carlo standard error.

    `phi = sum_l [-q_l qhat_l / 2 + (qhat_l - log(1 + qhat_l)) / 2] + alpha E[log Z_out]`, with
    `qhat_l = q_l / (1 - q_l)` (the prior's stationarity condition) and `Z_out` the density of `+-u`
    (its `q`-independent normalisation cancels in comparisons at equal `alpha`). Of two fixed points
    at the same `alpha` the larger `phi` is the Bayes-optimal one.
    """
    _check(alpha=alpha, skip=skip, q0=q, name="q")
    draws = se_draws(2048) if draws is None else draws
    rule = inner_rule() if rule is None else rule
    q = jnp.clip(jnp.asarray(q, jnp.float64), 0.0, Q_MAX)
    qhat = q / (1.0 - q)
    m = outer_moments(q, skip, draws, rule)
    prior = jnp.sum(-0.5 * q * qhat + 0.5 * (qhat - jnp.log1p(qhat)))
    n = m.log_evidence.shape[0]
    return prior + alpha * m.log_evidence.mean(), alpha * m.log_evidence.std() / jnp.sqrt(n)


@uses_float64
def bayes_test_error(q, skip, n_samples: int = 20000, seed: int = 1) -> tuple[Array, Array]:
    """Test error `E |y - y_hat|_F^2` of the plug-in predictor `y_hat = g(omega)` at overlaps `q (2,)`, and its
    standard error. `omega = sqrt(q) xi` is the student's projection, the teacher's is
    `omega + sqrt(1 - q) eta` (the same predictor as the paper's generalisation curves)."""
    from phasejax.depth.model import model_output

    _check(skip=skip, q0=q, name="q", closed=True)
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 2:
        raise ValueError(f"n_samples must be an integer >= 2, got {n_samples!r}")
    d = se_draws(n_samples, seed)
    q = jnp.clip(jnp.asarray(q, jnp.float64), 0.0, 1.0)
    omega = jnp.sqrt(q)[None, :, None] * d.xi
    Z = omega + jnp.sqrt(1.0 - q)[None, :, None] * d.eta
    err = jnp.sum((model_output(Z, skip) - model_output(omega, skip)) ** 2, (-1, -2))
    return err.mean(), err.std() / jnp.sqrt(n_samples)
