"""Decoding and the closed-form memories (outer product, one gradient step)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from phasejax.tasks._common import Array
from phasejax.tasks.memory.data import MemoryProblem


# ----------------------------------------------------------------------------
# Decoding
# ----------------------------------------------------------------------------


def output_scores(features: Array, problem: MemoryProblem) -> Array:
    """Scores `s_{x,y} = u_y^T F(e_x)` `(n_max, M_max)` from `features = F(E) (n_max, d_max)`; `-inf` for invalid `y`.
    """
    s = features @ problem.U.T
    return jnp.where(problem.y_valid[None, :], s, -jnp.inf)


def margins(scores: Array, f: Array) -> Array:
    """`(n,)` margins `s_{x,f(x)} - max_{y != f(x)} s_{x,y}` (`+inf` with a single output)."""
    is_own = jnp.arange(scores.shape[-1])[None, :] == f[:, None]
    own = jnp.max(jnp.where(is_own, scores, -jnp.inf), axis=-1)
    return own - jnp.max(jnp.where(is_own, -jnp.inf, scores), axis=-1)


def recall(scores: Array, problem: MemoryProblem) -> Array:
    """Fraction of inputs `x < N` decoded correctly (`margin > 0`; ties are errors)."""
    ok = (margins(scores, problem.f) > 0) & problem.x_valid
    return jnp.sum(ok) / jnp.sum(problem.x_valid)


def weighted_error(scores: Array, problem: MemoryProblem) -> Array:
    """Error under the input distribution: `sum_x p_x 1{margin_x <= 0}` (the Zipf-weighted error)."""
    wrong = (margins(scores, problem.f) <= 0) & problem.x_valid
    return jnp.sum(jnp.where(wrong, problem.p, 0.0))


def population_loss_from_scores(scores: Array, problem: MemoryProblem) -> Array:
    """Population cross-entropy `sum_x p_x (-log softmax(s_x)_{f(x)})` (stable; invalid outputs excluded)."""
    logp = jax.nn.log_softmax(scores, axis=-1)
    picked = jnp.take_along_axis(logp, problem.f[:, None], axis=-1)[:, 0]
    return -jnp.sum(jnp.where(problem.x_valid, problem.p * picked, 0.0))


def linear_features(W: Array, problem: MemoryProblem) -> Array:
    """`F(E) = E W^T` `(n_max, d_max)` for a linear memory `W (d_max, d_max)`."""
    return problem.E @ W.T


def population_loss(W: Array, problem: MemoryProblem) -> Array:
    """`L(W) = sum_x p_x CE(f*(x), (u_y^T W e_x)_y)` of a linear memory."""
    return population_loss_from_scores(output_scores(linear_features(W, problem), problem), problem)


# ----------------------------------------------------------------------------
# Closed-form memories (factored: W = U^T B, never formed for the sweeps)
# ----------------------------------------------------------------------------


def outer_product_rows(problem: MemoryProblem, q: Array | None = None) -> Array:
    """`B (M_max, d_max)` with `B_y = sum_{x: f*(x) = y} q_x e_x`, so that `W = U^T B = sum_x q_x u_{f*(x)} e_x^T`.

    `q (n_max,)` defaults to 1 on `x < N`.
    """
    q = problem.x_valid.astype(problem.E.dtype) if q is None else q * problem.x_valid
    return jax.ops.segment_sum(q[:, None] * problem.E, problem.f, num_segments=problem.U.shape[0])


def one_step_rows(problem: MemoryProblem, learning_rate: float = 1.0) -> Array:
    """`B_1 (M_max, d_max)` of the memory after one gradient step from `W = 0`: `W_1 = U^T B_1`.

    At `W = 0` the softmax is uniform on the `M` valid outputs, so
    `-grad L(0) = sum_x p_x (u_{f*(x)} - ubar) e_x^T` with `ubar = (1/M) sum_y u_y`,
    i.e. `B_1 = eta (sum_{x: f*(x)=y} p_x e_x - 1{y valid} / M sum_x p_x e_x)`.
    """
    yv = problem.y_valid.astype(problem.E.dtype)
    mean_input = problem.p @ problem.E
    return learning_rate * (outer_product_rows(problem, problem.p) - yv[:, None] * mean_input[None, :] / jnp.sum(yv))


def memory_matrix(rows: Array, problem: MemoryProblem) -> Array:
    """`W = U^T B` `(d_max, d_max)` from factored rows `B (M_max, d_max)`."""
    return problem.U.T @ rows


def factored_scores(rows: Array, problem: MemoryProblem) -> Array:
    """Scores `(n_max, M_max)` of `W = U^T B`, `s = E B^T U U^T`, in the cheaper order for the static shapes.

    `((E B^T) U) U^T` costs `2 n M d` (few outputs), `(E (U^T B)^T) U^T` costs `M d^2 + n d^2 + n M d` (many).
    """
    n, d = problem.E.shape
    M = problem.U.shape[0]
    if 2 * n * M * d <= M * d * d + n * d * d + n * M * d:
        s = ((problem.E @ rows.T) @ problem.U) @ problem.U.T
    else:
        s = (problem.E @ memory_matrix(rows, problem).T) @ problem.U.T
    return jnp.where(problem.y_valid[None, :], s, -jnp.inf)


def one_step_memory(problem: MemoryProblem, learning_rate: float = 1.0) -> Array:
    """`W_1 = W_0 - eta grad L(W_0)` with `W_0 = 0`, by automatic differentiation of `population_loss`."""
    d_max = problem.E.shape[1]
    W0 = jnp.zeros((d_max, d_max), problem.E.dtype)
    return W0 - learning_rate * jax.grad(population_loss)(W0, problem)
