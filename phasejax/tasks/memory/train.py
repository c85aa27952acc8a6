"""Trained memories (linear, MLP) and one run of any memory kind."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from phasejax.precision import check_float_dtype
from phasejax.solvers import HasStatus, Status, iterate
from phasejax.tasks._common import F32, Array
from phasejax.tasks.memory.data import KINDS, MemoryProblem, MemoryShape, sample_problem
from phasejax.tasks.memory.model import (
    factored_scores,
    linear_features,
    one_step_rows,
    outer_product_rows,
    output_scores,
    population_loss_from_scores,
    recall,
    weighted_error,
)


# ----------------------------------------------------------------------------
# Trained memories (full-batch Adam, one loop shape with a status)
# ----------------------------------------------------------------------------


class FitState(NamedTuple):
    """State of `MemoryFit`: parameters, optimiser state, and loss / recall / gradient at `params`."""

    params: Any
    opt_state: Any
    loss: Array
    recall: Array
    grads: Any


class MemoryFit:
    """Full-batch Adam on the population cross-entropy; stops at perfect recall (`Status.CONVERGED`).

    The object holds the student (`features(params, problem) -> (n_max, d_max)`) and the optimiser; the
    `MemoryProblem` is the argument of `init`, `step`, `terminate`. A non-finite loss stops with
    `Status.DIVERGED`.
    """

    def __init__(self, features, learning_rate: float):
        self.features = features
        self.optimizer = optax.adam(learning_rate)

    def _evaluate(self, problem: MemoryProblem, params):
        def loss_fn(prm):
            scores = output_scores(self.features(prm, problem), problem)
            return population_loss_from_scores(scores, problem), recall(scores, problem)

        (loss, rec), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        return loss, rec, grads

    def init(self, problem: MemoryProblem, params) -> FitState:
        loss, rec, grads = self._evaluate(problem, params)
        return FitState(params, self.optimizer.init(params), loss, rec, grads)

    def step(self, problem: MemoryProblem, state: FitState) -> FitState:
        updates, opt_state = self.optimizer.update(state.grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        loss, rec, grads = self._evaluate(problem, params)
        return FitState(params, opt_state, loss, rec, grads)

    def terminate(self, problem: MemoryProblem, state: FitState):
        bad = ~jnp.isfinite(state.loss)
        done = bad | (state.recall >= 1.0)
        return done, jnp.where(bad, Status.DIVERGED, Status.CONVERGED)


class MemoryFitResult(NamedTuple):
    """A trained memory: `params`, final `loss ()` and `recall ()`, `steps ()` taken, `status ()` (`Status` code)."""

    params: Any
    loss: Array
    recall: Array
    steps: Array
    status: Array

    status_name = HasStatus.status_name


def train_memory(features, params0, problem: MemoryProblem, *, steps: int, learning_rate: float) -> MemoryFitResult:
    """Adam on `L` from `params0` until perfect recall (converged) or `steps` steps (max_iterations). Vmappable."""
    solver = MemoryFit(features, learning_rate)
    out = iterate(solver, problem, solver.init(problem, params0), max_steps=steps)
    s = out.state
    return MemoryFitResult(params=s.params, loss=s.loss, recall=s.recall, steps=out.steps, status=out.status)


def train_linear(problem: MemoryProblem, *, steps: int, learning_rate: float = 0.1) -> MemoryFitResult:
    """A linear memory `W (d_max, d_max)` trained from `W = 0` (see `train_memory`)."""
    d_max = problem.E.shape[1]
    return train_memory(linear_features, jnp.zeros((d_max, d_max), problem.E.dtype), problem, steps=steps,
                        learning_rate=learning_rate)


def init_mlp(key: Array, d, m, d_max: int, m_max: int, dtype=F32) -> dict:
    """MLP parameters `U, V (m_max, d_max)`: `U_ij ~ N(0, 1)`, `V_ij ~ N(0, 1/m)`.

    On unit-norm inputs the pre-activations `U e_x` are `N(0, 1)`.

    `d` is not needed for the scales (inputs have unit norm) but kept for symmetry; `m` may be traced.
    """
    del d
    dtype = check_float_dtype(dtype)
    kU, kV = jax.random.split(key)
    return dict(U=jax.random.normal(kU, (m_max, d_max), dtype),
                V=jax.random.normal(kV, (m_max, d_max), dtype) / jnp.sqrt(jnp.asarray(m, dtype)))


def mlp_features(params: dict, problem: MemoryProblem, m) -> Array:
    """`F(E) = relu(E U^T) V` with only the first `m` hidden units `(n_max, d_max)`."""
    mask = (jnp.arange(params["U"].shape[0]) < m).astype(problem.E.dtype)
    return jax.nn.relu(problem.E @ params["U"].T * mask) @ params["V"]


def train_mlp(key: Array, problem: MemoryProblem, d, m, m_max: int, *, steps: int,
              learning_rate: float = 0.02) -> MemoryFitResult:
    """An MLP memory `F(z) = V^T relu(U z)` of width `m`, both layers trained (see `train_memory`)."""
    params0 = init_mlp(key, d, m, problem.E.shape[1], m_max, problem.E.dtype)
    return train_memory(lambda prm, prob: mlp_features(prm, prob, m), params0, problem, steps=steps,
                        learning_rate=learning_rate)


# ----------------------------------------------------------------------------
# One run (pure in seed, N, d, m; vmap over them)
# ----------------------------------------------------------------------------


def memory_run(seed, N, d, m, *, kind: str, shape: MemoryShape, steps: int = 0, learning_rate: float = 0.1,
               dtype=F32) -> dict[str, Array]:
    """Build one memory of `kind` on a fresh problem and measure it.

    Returns `accuracy ()` (recall over `x < N`), `error ()` (input-weighted
    error), `loss ()` (population cross-entropy of its scores), `steps ()` and
    `status ()`. `m` is used by `mlp` only.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got kind={kind!r}")
    k_prob, k_init = jax.random.split(jax.random.PRNGKey(seed))
    problem = sample_problem(k_prob, N, d, shape, dtype)
    if kind in ("outer_product", "one_step"):
        rows = outer_product_rows(problem) if kind == "outer_product" else one_step_rows(problem)
        scores = factored_scores(rows, problem)
        n_steps = jnp.asarray(0 if kind == "outer_product" else 1, jnp.int32)
        status = jnp.asarray(Status.CONVERGED, jnp.int32)
        loss = population_loss_from_scores(scores, problem)
    else:
        if kind == "linear":
            res = train_linear(problem, steps=steps, learning_rate=learning_rate)
            scores = output_scores(linear_features(res.params, problem), problem)
        else:
            res = train_mlp(k_init, problem, d, m, shape.m_max, steps=steps, learning_rate=learning_rate)
            scores = output_scores(mlp_features(res.params, problem, m), problem)
        n_steps, status, loss = res.steps.astype(jnp.int32), res.status.astype(jnp.int32), res.loss
    return dict(accuracy=recall(scores, problem), error=weighted_error(scores, problem), loss=loss,
                steps=n_steps, status=status)
