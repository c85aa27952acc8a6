"""Approximate message passing on finite data for the two- and three-layer models (docs/depth.md, sections 4, 7).

The generalised AMP of a multi-index model with a Gaussian prior, per layer
(diagonal in the layers, like the state evolution):

    omega_{mu,l} = X_mu what_l / sqrt(d) - V_l g_{mu,l}          (T,)  Onsager-corrected cavity
    g, dg        = output functions of (u_mu, omega_mu, V)         (phasejax.depth.se.output_function)
    Lambda_l     = -(1/d) sum_{mu,t} dg_{mu,l,t}
    b_l          = (1/sqrt(d)) sum_{mu,t} x_{mu,t} g_{mu,l,t} + Lambda_l what_l
    what_l       = b_l / (1 + Lambda_l),   V_l = 1 / (1 + Lambda_l)

with `u_mu` read off the output `y_mu` (`sequence_index_from_output`). Its
overlaps `m_l = |what_l . w_l| / d` follow the state evolution's `q_l` as `d`
grows (the sign of each layer is not identifiable). The number of layers is the
teacher's (`W (L, d)`); the rule is the state evolution's (`phasejax.depth.posterior.posterior_of`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.depth.model import model_output, sequence_index_from_output
from phasejax.depth.se import inner_rule, needs_ridge, output_function
from phasejax.precision import uses_float64
from phasejax.solvers import HasStatus, Status, iterate

Array = jax.Array


@struct.dataclass
class DepthData:
    """A teacher `W (L, d)`, inputs `X (n, T, d)` and outputs `y (n, T, T)`."""

    W: Array
    X: Array
    y: Array


def amp_keys(key) -> tuple[Array, Array]:
    """`(data_key, start_key)` for one AMP run: `sample_data(data_key, ...)`, `run_amp(..., start_key)`.

    Two independent streams. `sample_data` splits its own key into the teacher's and the tokens' keys, and
    `jax.random.fold_in(key, 1)` is the tokens' key: a start drawn from it would be the first tokens themselves,
    an initial estimate with an `O(sqrt(d))` projection on two samples."""
    data_key, start_key = jax.random.split(key)
    return data_key, start_key


@uses_float64
def sample_data(key, d: int, alpha: float, skip, T: int = 2, layers: int = 2) -> DepthData:
    """`n = round(alpha d)` samples of the `layers`-layer network with weights `W ~ N(0, I)` and standard Gaussian
    tokens (float64: the channel inverse reads logits of the output's entries). `key` is split into the teacher's
    and the tokens' keys; an AMP start needs a key independent of both (`amp_keys`)."""
    if int(d) != d or d < 2:
        raise ValueError(f"d must be an integer >= 2, got {d}")
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    if layers not in (2, 3):
        raise ValueError(f"layers must be 2 or 3, got {layers}")
    n = max(int(round(alpha * d)), 1)
    kw, kx = jax.random.split(key)
    W = jax.random.normal(kw, (layers, d), jnp.float64)
    X = jax.random.normal(kx, (n, T, d), jnp.float64)
    Z = jnp.einsum("ntd,ld->nlt", X, W) / jnp.sqrt(d)
    return DepthData(W=W, X=X, y=model_output(Z, skip))


BATCH = 256
"""Samples per batch of the output functions (bounds the memory of a fine rule on many samples)."""


class AMPState(NamedTuple):
    what: Array  # (L, d)
    V: Array  # (L,)
    g: Array  # (n, L, T)
    m: Array  # (L,) overlaps with the teacher
    residual: Array


@struct.dataclass
class AMPResult(HasStatus):
    """`m (L,)`: `|what_l . w_l| / d`; `q (L,)`: `|what_l|^2 / d`; `teacher_norm (L,)`: `|w_l|^2 / d`, the bound of
    `m` (the state evolution's overlaps are in units of `E|w_l|^2 / d = 1`; at `d = 1000` the teacher's own norm is
    `1 +- 0.045`, which matters next to full recovery); `m_history (max_iterations, L)` (NaN past the end);
    `residual ()` (the last change of `m`), `iterations ()`, `status ()` (a `Status` code)."""

    m: Array
    q: Array
    teacher_norm: Array
    m_history: Array
    residual: Array
    iterations: Array
    status: Array


class _AMPProblem(NamedTuple):
    """What AMP runs on: the `data`, each sample's sequence index `u`, the `skip` strength and the inner `rule`."""

    data: DepthData
    u: Array
    skip: Array
    rule: object


class _AMP:
    """One AMP iteration (settings: `damping`, `tol`)."""

    def __init__(self, damping, tol):
        self.damping, self.tol = damping, tol

    def step(self, problem: _AMPProblem, s: AMPState) -> AMPState:
        X, W = problem.data.X, problem.data.W
        d = X.shape[-1]
        omega = jnp.einsum("ntd,ld->nlt", X, s.what) / jnp.sqrt(d) - s.V[None, :, None] * s.g
        def batch(ridge):
            return lambda: jax.lax.map(
                lambda a: output_function(a[0], a[1], s.V, problem.skip, problem.rule, ridge)[:2], (problem.u, omega),
                batch_size=BATCH)

        g, dg = jax.lax.cond(needs_ridge(s.V), batch(True), batch(False))
        Lam = jnp.maximum(-jnp.sum(dg, (0, 2)) / d, 0.0)
        b = jnp.einsum("ntd,nlt->ld", X, g) / jnp.sqrt(d) + Lam[:, None] * s.what
        what = b / (1.0 + Lam)[:, None]
        V = 1.0 / (1.0 + Lam)
        what = self.damping * what + (1 - self.damping) * s.what
        V = self.damping * V + (1 - self.damping) * s.V
        ok = jnp.all(jnp.isfinite(what)) & jnp.all(jnp.isfinite(V)) & jnp.all(jnp.isfinite(g))
        m = jnp.abs(jnp.sum(what * W, -1)) / d
        return AMPState(what=jnp.where(ok, what, s.what), V=jnp.where(ok, V, s.V), g=jnp.where(ok, g, s.g),
                        m=jnp.where(ok, m, s.m), residual=jnp.where(ok, jnp.max(jnp.abs(m - s.m)), jnp.nan))

    def terminate(self, problem: _AMPProblem, s: AMPState):
        bad = ~jnp.isfinite(s.residual)
        return bad | (s.residual < self.tol * jnp.maximum(jnp.max(s.m), 0.05)), jnp.where(bad, Status.INVALID_ITERATE, Status.CONVERGED)


@uses_float64
def run_amp(data: DepthData, skip, key, *, q_init=0.1, m_init=0.0, rule=None,
            damping: float = 1.0, tol: float = 1e-4, max_iterations: int = 80) -> AMPResult:
    """AMP from `what_l = m_init_l w_l + sqrt(q_init_l - m_init_l^2) xi_l`, `xi ~ N(0, I)`, and `V_l = 1 - q_init_l`.

    `q_init`, `m_init`: one number for every layer or one per layer (a tuple of `L`). `m_init = 0` is a random start
    (no information on the teacher); on the Nishimori line (`q_init = m_init`) a small `m_init` is the finite-size
    counterpart of the state evolution's start `q = q_floor`. Damping below 1 breaks the Onsager term's bookkeeping
    (docs/depth.md, section 4).

    Stops when the overlaps change by less than `tol` relative to `max(m, 0.05)` (after at least 10 steps).
    `key` draws `xi`; it must be independent of the data's (`amp_keys`).
    """
    L = int(np.shape(data.W)[0])
    q0, m0 = _per_layer(q_init, L, "q_init"), _per_layer(m_init, L, "m_init")
    for q, m in zip(q0, m0):
        if not 0 < q < 1:
            raise ValueError(f"q_init must be in (0, 1), got {q_init}")
        if not 0 <= m <= np.sqrt(q):
            raise ValueError(f"m_init must be in [0, sqrt(q_init)], got {m_init}")
    rule = inner_rule(12) if rule is None else rule
    return _run(data, jnp.asarray(skip, jnp.float64), key, q0, m0, rule, damping, tol, max_iterations)


def _per_layer(value, L: int, name: str) -> tuple[float, ...]:
    """`value` (a number or `L` numbers) as a tuple of `L` floats (a static argument of the jitted run)."""
    values = tuple(float(v) for v in np.atleast_1d(np.asarray(value, np.float64)))
    if len(values) == 1:
        values = values * L
    if len(values) != L or not all(np.isfinite(values)):
        raise ValueError(f"{name} must be a number or {L} numbers, got {value!r}")
    return values


def initial_estimate(W: Array, key, q_init, m_init) -> Array:
    """AMP's start `what_l = m_init_l w_l + sqrt(q_init_l - m_init_l^2) xi_l (L, d)`, `xi ~ N(0, I)` drawn from
    `key`; `q_init`, `m_init` scalars or `(L,)`."""
    q = jnp.broadcast_to(jnp.asarray(q_init, jnp.float64), W.shape[:1])[:, None]
    m = jnp.broadcast_to(jnp.asarray(m_init, jnp.float64), W.shape[:1])[:, None]
    return m * W + jnp.sqrt(q - m**2) * jax.random.normal(key, W.shape, jnp.float64)


def _run_impl(data, skip, key, q_init, m_init, rule, damping, tol, max_iterations):
    data = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), data)
    n, T, d = data.X.shape
    u = sequence_index_from_output(data.y)
    L = data.W.shape[0]
    what = initial_estimate(data.W, key, q_init, m_init)
    s0 = AMPState(what=what, V=1.0 - jnp.asarray(q_init, jnp.float64), g=jnp.zeros((n, L, T)),
                  m=jnp.abs(jnp.sum(what * data.W, -1)) / d, residual=jnp.asarray(jnp.inf))
    solver = _AMP(damping, tol)
    hist0 = jnp.full((max_iterations, L), jnp.nan)

    class _Recording:
        def step(self, problem, st):
            s, h, k = st
            s = solver.step(problem, s)
            return s, h.at[k].set(s.m), k + 1

        def terminate(self, problem, st):
            return solver.terminate(problem, st[0])

    out = iterate(_Recording(), _AMPProblem(data, u, skip, rule), (s0, hist0, jnp.asarray(0)),
                  max_steps=max_iterations, min_steps=10)
    s, hist, _ = out.state
    return AMPResult(m=s.m, q=jnp.sum(s.what**2, -1) / d, teacher_norm=jnp.sum(data.W**2, -1) / d, m_history=hist,
                     residual=s.residual, iterations=out.steps, status=out.status)


_run = jax.jit(_run_impl, static_argnames=("q_init", "m_init", "damping", "tol", "max_iterations"))
