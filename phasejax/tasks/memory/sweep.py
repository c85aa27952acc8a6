"""Associative memories and their capacity (issue 14, Part A).

Setting (Cabannes, Dohmatob, Bietti 2024; Nichani, Lee, Bietti 2024; Bietti et al. 2023):
`N` input tokens, `M` output tokens, a target map `f*: [N] -> [M]`, input
embeddings `e_x` and output embeddings `u_y`, independent and uniform on the
unit sphere of `R^d` (so `|e_x| = |u_y| = 1` and `e_x . e_x' ~ N(0, 1/d)`), a
memory `F: R^d -> R^d` and argmax decoding

    f(x) = argmax_y  u_y^T F(e_x).

Recall is the fraction of inputs with `f(x) = f*(x)`; a tie counts as an error
(`margin_x = s_{x, f*(x)} - max_{y != f*(x)} s_{x, y} > 0` is required). Memories:

* `outer_product`: `W = sum_x q_x u_{f*(x)} e_x^T` (`q_x = 1`), `F(z) = W z`;
* `one_step`: one gradient step of size `eta` from `W = 0` on the population
  cross-entropy `L(W) = sum_x p_x CE(f*(x), (u_y^T W e_x)_y)` ("gradients as
  memories"): `W_1 = eta sum_x p_x (u_{f*(x)} - ubar) e_x^T`, `ubar` the mean
  of the `M` output embeddings;
* `linear`: `W` trained from 0 on `L(W)` by full-batch Adam;
* `mlp`: `F(z) = V^T relu(U z)`, `U, V in R^{m x d}`, trained on the same loss.

Outputs, `M`: either `M = N` with `f*` a random permutation (the injective
setting of Nichani et al.; `M=None`), or a fixed `M` with `f*` a uniform random
map (the setting of Cabannes et al.) or a random injection (`N <= M`).
The outer-product memory's capacity depends on that choice (see
`predicted_recall`): for fixed `M` it grows like `M d / log M`, for `M = N`
like `d^2 / log N`.

Padding: every problem is allocated at static sizes `(n_max, M_max, d_max,
m_max)`; `N`, `d`, `m` may be traced. Embeddings are drawn at `(n_max, d_max)`
and normalised over their first `d` coordinates (zeros elsewhere); inputs
`x >= N` get probability 0 and outputs `y >= M` the score `-inf`, so a padded
problem is the unpadded problem made of the top-left slices of the same
draws, and padded parameters get zero gradient (Adam never moves them).
That is what lets a whole `(N, d, m, seed)` grid be one vmapped call.

Closed form (`predicted_recall`, `predicted_recall_given_map`): the margin
`s_{x,f*(x)} - s_{x,y}` of the outer-product memory is `q_x` plus crosstalk.
Writing `c_{y'} = sum_{x' in f*^{-1}(y')} q_x' e_x'.e_x` and
`G_{yy'} = u_y.u_y'`, the margin against `y` splits into a part `A` shared by
all competitors and a part `B_y` of each, uncorrelated, with (sums of
squared weights `Q2_y = sum_{x' in f*^{-1}(y)} q_x'^2`, `S = Q2_{f*(x)} - q_x^2`)

    Var A   = S / d + (Q2_tot - Q2_{f*(x)}) / d^2
    Var B_y = (q_x^2 + S / d) / d + Q2_y / d + (Q2_tot - Q2_{f*(x)} - Q2_y) / d^2.

Treating them as Gaussian, `P(x recalled) = E_a prod_{y != f*(x)} Phi((q_x +
sqrt(Var A) a) / sqrt(Var B_y))`, a one-dimensional Gauss-Hermite integral.
For `M = N` injective (`q = 1`): `Var A + Var B = 2/d + (2N - 3)/d^2`, so 99%
recall needs `N ~ d^2 / (4 log(100 N))`; for fixed `M` the term `Q2_y / d ~
N / (M d)` dominates and `N* ~ M d / (4 log(100 M))`.

Sweeps (`capacity_sweep`) run the `(N, d, m, seed)` table through
`phasejax.sweep.run_chunked`, grouped by padded size (`padded_size(N)`, powers
of two) so that small problems are not padded to the largest; `capacity_from_recall`
finds `N*` (largest `N` with mean recall >= 99%) on every column at once,
`fit_power_law` / `bootstrap_exponents` fit `log N*` against `log d` (or
`log m d`) with confidence intervals. `zipf_sweep` measures the
Zipf-weighted error against `d` (one-step memory, and the outer-product memory
storing the `k` most frequent inputs) and compares it with the closed form
and its power laws `d^{-(alpha-1)/(2 alpha)}` and `d^{-(alpha-1)}`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from phasejax.io import atomic_write_json, read_csv, read_json, write_csv
from phasejax.precision import check_float_dtype, uses_float64
from phasejax.solvers import Status, iterate, status_code, status_names
from phasejax.sweep import RunOptions, run_chunked, run_options

Array = jax.Array
F32 = jnp.float32

KINDS = ("outer_product", "one_step", "linear", "mlp")
"""The memories: closed-form outer products, one gradient step, trained linear, trained MLP."""

TRAINED_KINDS = ("linear", "mlp")

RECALL_THRESHOLD = 0.99
"""Capacity `N*`: the largest `N` whose mean recall over seeds is at least this."""


# ----------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------


def _is_int(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, np.integer))


def check_sizes(*, N=None, d=None, M=None, m=None, injective: bool | None = None) -> None:
    """Raise `ValueError` naming the parameter for invalid concrete sizes (arrays are checked elementwise).

    `N, d, m >= 1` (integers), `M >= 1` or `None` (`M = N`), and an injective
    map needs `N <= M`.
    """
    for name, value in (("N", N), ("d", d), ("m", m), ("M", M)):
        if value is None:
            continue
        a = np.asarray(value)
        if a.dtype.kind not in "iu" or a.size == 0 or np.any(a < 1):
            raise ValueError(f"{name} must be an integer >= 1, got {name}={value!r}")
    if injective and M is not None and N is not None and np.any(np.asarray(N) > M):
        raise ValueError(f"an injective map [N] -> [M] needs N <= M, got N={int(np.max(N))} > M={M}; "
                         "use M=None (M = N) or injective=False")


# ----------------------------------------------------------------------------
# Problems: embeddings, target maps, input distributions
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MemoryShape:
    """Static padded sizes and output rule of a family of memory problems.

    Attributes:
      n_max: padded number of inputs (every `N` of the family is `<= n_max`).
      d_max: padded embedding dimension.
      M: number of outputs; `None` means `M = N` (then `M_max = n_max`).
      injective: `f*` a random injection (`M = None`: a random permutation of
        `[N]`); otherwise a uniform random map `[N] -> [M]`.
      m_max: padded MLP width (1 for the other memories).
      zipf_alpha: input distribution `p_x ∝ (x + 1)^(-zipf_alpha)` on `[N]`
        (0: uniform); it weights the population loss and the error.
    """

    n_max: int
    d_max: int
    M: int | None = None
    injective: bool = True
    m_max: int = 1
    zipf_alpha: float = 0.0

    def __post_init__(self):
        for name in ("n_max", "d_max", "m_max"):
            v = getattr(self, name)
            if not _is_int(v) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {name}={v!r}")
        if self.M is not None and (not _is_int(self.M) or self.M < 1):
            raise ValueError(f"M must be an integer >= 1 or None (M = N), got M={self.M!r}")
        if not (np.isfinite(self.zipf_alpha) and self.zipf_alpha >= 0):
            raise ValueError(f"zipf_alpha must be a finite number >= 0, got zipf_alpha={self.zipf_alpha!r}")

    @property
    def M_max(self) -> int:
        return self.n_max if self.M is None else int(self.M)

    @property
    def outputs(self) -> str:
        """Label of the output rule: `"M=N"`, `"M=N,random"`, `"M=8"`, `"M=8,injective"`."""
        return outputs_label(self.M, self.injective)


def outputs_label(M: int | None, injective: bool) -> str:
    """`"M=N"` (permutation), `"M=N,random"`, `"M=<M>"` (random map) or `"M=<M>,injective"`."""
    if M is None:
        return "M=N" if injective else "M=N,random"
    return f"M={int(M)}" + (",injective" if injective else "")


class MemoryProblem(NamedTuple):
    """One padded problem (a pytree; vmap over it).

    Attributes:
      E: `(n_max, d_max)` input embeddings, unit norm on the first `d`
        coordinates, zero rows for `x >= N`.
      U: `(M_max, d_max)` output embeddings, zero rows for invalid outputs.
      f: `(n_max,)` int32 target `f*(x)` (0 for `x >= N`).
      p: `(n_max,)` input probabilities (sum 1 over `x < N`, 0 beyond).
      x_valid: `(n_max,)` bool, `x < N`.
      y_valid: `(M_max,)` bool, `y < M` (`M = N` when `M` is None).
    """

    E: Array
    U: Array
    f: Array
    p: Array
    x_valid: Array
    y_valid: Array


def sphere_embeddings(key: Array, n_max: int, d, d_max: int, dtype=F32) -> Array:
    """`(n_max, d_max)` rows uniform on the unit sphere of `R^d` (first `d` coordinates; zeros beyond).

    `d` may be traced; the rows are normalised Gaussians, so the unpadded draw
    is the top-left slice of the padded one.
    """
    dtype = check_float_dtype(dtype)
    g = jax.random.normal(key, (n_max, d_max), dtype)
    g = g * (jnp.arange(d_max) < d).astype(dtype)
    return g / jnp.linalg.norm(g, axis=-1, keepdims=True)


def target_map(key: Array, N, shape: MemoryShape) -> Array:
    """`(n_max,)` int32 targets `f*(x)` for `x < N` (0 beyond); `N` may be traced.

    Injective: the first `N` entries of a uniformly random ordering of the
    `M` outputs (a random permutation of `[N]` when `M = N`). Otherwise i.i.d.
    uniform on `[M]`.
    """
    n_max, M_max = shape.n_max, shape.M_max
    M_eff = N if shape.M is None else shape.M
    x_valid = jnp.arange(n_max) < N
    if shape.injective:
        keys = jax.random.uniform(key, (M_max,))
        keys = jnp.where(jnp.arange(M_max) < M_eff, keys, 2.0)
        order = jnp.argsort(keys).astype(jnp.int32)
        f = order[:n_max] if M_max >= n_max else jnp.concatenate([order, jnp.zeros(n_max - M_max, jnp.int32)])
    else:
        f = jax.random.randint(key, (n_max,), 0, M_eff).astype(jnp.int32)
    return jnp.where(x_valid, f, 0)


def input_distribution(N, n_max: int, alpha: float = 0.0, dtype=F32) -> Array:
    """`(n_max,)` probabilities `p_x ∝ (x + 1)^(-alpha)` for `x < N`, 0 beyond (`alpha = 0`: uniform)."""
    dtype = check_float_dtype(dtype)
    x = jnp.arange(n_max)
    w = jnp.where(x < N, (x + 1.0).astype(dtype) ** (-alpha), 0.0).astype(dtype)
    return w / jnp.sum(w)


def sample_problem(key: Array, N, d, shape: MemoryShape, dtype=F32) -> MemoryProblem:
    """Draw embeddings, target map and input distribution of one problem (pure in `key, N, d`; vmap over them)."""
    kE, kU, kf = jax.random.split(key, 3)
    M_eff = N if shape.M is None else shape.M
    x_valid = jnp.arange(shape.n_max) < N
    y_valid = jnp.arange(shape.M_max) < M_eff
    E = sphere_embeddings(kE, shape.n_max, d, shape.d_max, dtype) * x_valid[:, None]
    U = sphere_embeddings(kU, shape.M_max, d, shape.d_max, dtype) * y_valid[:, None]
    return MemoryProblem(E=E, U=U, f=target_map(kf, N, shape), p=input_distribution(N, shape.n_max, shape.zipf_alpha,
                                                                                      dtype),
                         x_valid=x_valid, y_valid=y_valid)


def orthonormal_problem(N: int, M: int, d: int, f, p=None, dtype=F32) -> MemoryProblem:
    """A problem with exactly orthonormal embeddings (`d >= max(N, M)`): `e_x`, `u_y` standard basis vectors.

    For the closed-form checks: there the crosstalk vanishes exactly.
    """
    check_sizes(N=N, M=M, d=d)
    if d < max(N, M):
        raise ValueError(f"orthonormal embeddings need d >= max(N, M), got d={d}, N={N}, M={M}")
    eye = jnp.eye(d, dtype=check_float_dtype(dtype))
    p = jnp.full((N,), 1.0 / N, dtype) if p is None else jnp.asarray(p, dtype)
    return MemoryProblem(E=eye[:N], U=eye[:M], f=jnp.asarray(f, jnp.int32), p=p,
                         x_valid=jnp.ones(N, bool), y_valid=jnp.ones(M, bool))


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

    `features(params, problem) -> (n_max, d_max)`; a non-finite loss stops with `Status.DIVERGED`.
    """

    def __init__(self, features, problem: MemoryProblem, learning_rate: float):
        self.features = features
        self.problem = problem
        self.optimizer = optax.adam(learning_rate)

    def _evaluate(self, params):
        def loss_fn(prm):
            scores = output_scores(self.features(prm, self.problem), self.problem)
            return population_loss_from_scores(scores, self.problem), recall(scores, self.problem)

        (loss, rec), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        return loss, rec, grads

    def init(self, params) -> FitState:
        loss, rec, grads = self._evaluate(params)
        return FitState(params, self.optimizer.init(params), loss, rec, grads)

    def step(self, state: FitState) -> FitState:
        updates, opt_state = self.optimizer.update(state.grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        loss, rec, grads = self._evaluate(params)
        return FitState(params, opt_state, loss, rec, grads)

    def terminate(self, state: FitState):
        bad = ~jnp.isfinite(state.loss)
        done = bad | (state.recall >= 1.0)
        return done, jnp.where(bad, Status.DIVERGED, Status.CONVERGED)


class TrainResult(NamedTuple):
    """A trained memory: `params`, final `loss ()` and `recall ()`, `steps ()` taken, `status ()` (`Status` code)."""

    params: Any
    loss: Array
    recall: Array
    steps: Array
    status: Array


def train_memory(features, params0, problem: MemoryProblem, *, steps: int, learning_rate: float) -> TrainResult:
    """Adam on `L` from `params0` until perfect recall (converged) or `steps` steps (max_iterations). Vmappable."""
    solver = MemoryFit(features, problem, learning_rate)
    out = iterate(solver, solver.init(params0), max_steps=steps)
    s = out.state
    return TrainResult(params=s.params, loss=s.loss, recall=s.recall, steps=out.steps, status=out.status)


def train_linear(problem: MemoryProblem, *, steps: int, learning_rate: float = 0.1) -> TrainResult:
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
              learning_rate: float = 0.02) -> TrainResult:
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


# ----------------------------------------------------------------------------
# Closed-form crosstalk prediction (float64)
# ----------------------------------------------------------------------------


def crosstalk_variances(q_x, Q2_own, Q2_y, Q2_total, d, one_step_M=None):
    """Variances `(Var A, Var B_y)` of the shared and per-competitor crosstalk of an outer-product margin.

    Implements (module docstring) with `S = Q2_own - q_x^2`:
    `Var A = S/d + (Q2_tot - Q2_own)/d^2`,
    `Var B_y = (q_x^2 + S/d)/d + Q2_y/d + (Q2_tot - Q2_own - Q2_y)/d^2`.
    With `one_step_M = M`, the one-step memory's mean-subtraction term adds
    `q_x^2 (M - 2) / (M^2 d)` to both. Broadcasts over its arguments.
    """
    S = Q2_own - q_x**2
    var_a = S / d + (Q2_total - Q2_own) / d**2
    var_b = (q_x**2 + S / d) / d + Q2_y / d + (Q2_total - Q2_own - Q2_y) / d**2
    if one_step_M is not None:
        extra = q_x**2 * jnp.maximum(one_step_M - 2.0, 0.0) / (one_step_M**2 * d)
        var_a, var_b = var_a + extra, var_b + extra
    return var_a, var_b


def _gauss_hermite(n_nodes: int):
    """Nodes and weights of `E g(Z)`, `Z ~ N(0, 1)` (probabilists' Gauss-Hermite), float64."""
    t, w = np.polynomial.hermite_e.hermegauss(n_nodes)
    return jnp.asarray(t, jnp.float64), jnp.asarray(w / np.sqrt(2 * np.pi), jnp.float64)


def _binomial_log_pmf(k, n, p):
    from jax.scipy.special import gammaln

    kk = jnp.clip(k, 0.0, None)
    nk = jnp.maximum(n - kk, 0.0)
    return (gammaln(n + 1) - gammaln(kk + 1) - gammaln(nk + 1) + jnp.where(kk > 0, kk * jnp.log(p), 0.0)
            + jnp.where(nk > 0, nk * jnp.log1p(-p), 0.0))


def _count_window(n_trials, p, L: int):
    """`L` values covering `Bin(n_trials, p)` (stride 1 when they fit, else about 12 sd wide) and their weights."""
    n_trials = jnp.maximum(n_trials, 0.0)
    lam = n_trials * p
    sd = jnp.sqrt(jnp.maximum(lam * (1 - p), 1e-12))
    step = jnp.maximum(1.0, jnp.ceil(12.0 * sd / L))
    start = jnp.maximum(0.0, jnp.round(lam - step * L / 2))
    k = start + step * jnp.arange(L, dtype=jnp.float64)
    logw = jnp.where(k <= n_trials, _binomial_log_pmf(k, n_trials, p) + jnp.log(step), -jnp.inf)
    w = jnp.exp(logw - jnp.max(logw))
    return k, w / jnp.sum(w)


@uses_float64
def predicted_recall(N, d, M: int | None = None, injective: bool = True, *, one_step: bool = False,
                     n_nodes: int = 64, n_counts: int = 24, batch_size: int = 16) -> np.ndarray:
    """Closed-form (Gaussian crosstalk) expected recall of the outer-product memory, float64, broadcast over `N, d`.

    `P(x recalled) = E_A prod_{y != f*(x)} Phi((1 + A) / sqrt(Var B_y))`,
    `A ~ N(0, Var A)`, with the variances of `crosstalk_variances` (`q = 1`).
    Averages over embeddings and over the map: an injective map gives every
    used output one preimage (`M = None`: `M = N`); a uniform random map gives
    `f*(x)` `1 + Bin(N-1, 1/M)` preimages and each competitor, given that,
    `Bin(N - n*, 1/(M-1))` (competitors treated as independent).
    `one_step=True` adds the one-step memory's mean-subtraction variance.
    """
    N, d = np.asarray(N), np.asarray(d)
    check_sizes(N=N, d=d, M=M, injective=injective)
    Nb, db = np.broadcast_arrays(N.astype(np.float64), d.astype(np.float64))
    n_flat = Nb.size
    # pad to a power-of-two length (repeating the last point) so calls of similar size share one compilation
    n_pad = max(batch_size, 1 << int(np.ceil(np.log2(max(n_flat, 1)))))
    Nf, df = (jnp.asarray(np.pad(a.ravel(), (0, n_pad - n_flat), mode="edge")) for a in (Nb, db))
    Mf = Nf if M is None else jnp.full_like(Nf, float(M))
    vals = _predicted_recall_flat(Nf, df, Mf, injective, one_step, n_nodes, n_counts, batch_size)
    return np.asarray(vals)[:n_flat].reshape(Nb.shape)


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6, 7))
def _predicted_recall_flat(Nf, df, Mf, injective: bool, one_step: bool, n_nodes: int, n_counts: int,
                           batch_size: int):
    t, w = _gauss_hermite(n_nodes)

    def one(args):
        n, dd, mm = args
        osm = mm if one_step else None
        if injective:
            q2 = jnp.array([1.0, 0.0])                                       # a used / an unused competitor
            var_a, var_b = crosstalk_variances(1.0, 1.0, q2, n, dd, osm)
            lp = jax.scipy.special.log_ndtr((1.0 + jnp.sqrt(var_a) * t[:, None]) / jnp.sqrt(var_b)[None, :])
            return jnp.sum(w * jnp.exp(lp @ jnp.stack([n - 1.0, mm - n])))
        k_own, w_own = _count_window(n - 1.0, 1.0 / mm, n_counts)                                    # (Ko,)
        k_c, w_c = jax.vmap(lambda ko: _count_window(n - 1.0 - ko, 1.0 / jnp.maximum(mm - 1.0, 1.0), n_counts))(k_own)
        var_a, var_b = crosstalk_variances(1.0, k_own[:, None] + 1.0, k_c, n, dd, osm)               # (Ko,1), (Ko,Kc)
        z = (1.0 + jnp.sqrt(var_a)[:, :, None] * t[None, :, None]) / jnp.sqrt(var_b)[:, None, :]       # (Ko,Q,Kc)
        mean_cdf = jnp.sum(w_c[:, None, :] * jax.scipy.special.ndtr(z), axis=-1)                      # (Ko,Q)
        inner = jnp.where(mm > 1.0, (mm - 1.0) * jnp.log(jnp.clip(mean_cdf, 1e-300, 1.0)), 0.0)
        return jnp.sum(w_own * jnp.sum(w * jnp.exp(inner), axis=-1))

    return jax.lax.map(one, (Nf, df, Mf), batch_size=batch_size)


def _recall_given_map(f, q, x_valid, y_valid, d, one_step, n_nodes: int, batch_size: int):
    """Pure core of `predicted_recall_given_map` for one problem (float64 under `float64_scope`); vmappable.

    `one_step` is a traced bool: it adds the one-step memory's mean-subtraction variance.
    """
    q = jnp.where(x_valid, q, 0.0)
    M_out = y_valid.shape[0]
    Q2_y = jax.ops.segment_sum(q**2, f, num_segments=M_out)
    Q2_total = jnp.sum(Q2_y)
    n_valid_out = jnp.sum(y_valid).astype(q.dtype)
    t, w = _gauss_hermite(n_nodes)

    def one(args):
        qx, fx = args
        var_a, var_b = crosstalk_variances(qx, Q2_y[fx], Q2_y, Q2_total, d)
        extra = jnp.where(one_step, qx**2 * jnp.maximum(n_valid_out - 2.0, 0.0) / (n_valid_out**2 * d), 0.0)
        var_a, var_b = var_a + extra, var_b + extra
        lp = jax.scipy.special.log_ndtr((qx + jnp.sqrt(var_a) * t[:, None]) / jnp.sqrt(var_b)[None, :])   # (Q, M)
        comp = y_valid & (jnp.arange(M_out) != fx)
        return jnp.sum(w * jnp.exp(jnp.sum(jnp.where(comp[None, :], lp, 0.0), axis=-1)))

    P = jax.lax.map(one, (q, f), batch_size=batch_size)
    return jnp.where(x_valid, P, jnp.nan)


@functools.partial(jax.jit, static_argnums=(6, 7))
def _recall_given_maps(f, q, x_valid, y_valid, d, one_step, n_nodes: int, batch_size: int):
    """`_recall_given_map` over a leading problem axis (sequential `lax.map`: memory stays `O(n M n_nodes)`)."""
    return jax.lax.map(lambda a: _recall_given_map(*a, n_nodes, batch_size), (f, q, x_valid, y_valid, d, one_step))


@uses_float64
def predicted_recall_given_map(f, q, x_valid, y_valid, d, *, one_step=False, n_nodes: int = 48,
                               batch_size: int = 512) -> np.ndarray:
    """Closed-form (Gaussian crosstalk) probability `P_x` that input `x` is recalled, given the map and the weights.

    `f (..., n)` targets, `q (..., n)` weights of the outer-product memory
    `W = sum_x q_x u_{f(x)} e_x^T` (the one-step memory: `q = p` and
    `one_step=True`), masks `x_valid (..., n)`, `y_valid (..., M)`, `d (...)`,
    `one_step` a bool or a `(...)` bool array; leading axes are problems
    (one compiled `lax.map`). Averages over the embeddings only. Cost
    `O(n M n_nodes)` per problem; inputs with `q_x = 0` (not stored) get the
    chance level of the crosstalk. Returns float64 `(..., n)`, NaN for invalid `x`.
    """
    f = jnp.asarray(f, jnp.int32)
    d = jnp.asarray(d, jnp.float64)
    lead = d.shape
    if f.shape[:-1] != lead:
        raise ValueError(f"f must have shape d.shape + (n,), got f.shape={f.shape}, d.shape={lead}")
    n, M_out = f.shape[-1], np.shape(y_valid)[-1]
    args = (f.reshape(-1, n),
            jnp.broadcast_to(jnp.asarray(q, jnp.float64), f.shape).reshape(-1, n),
            jnp.broadcast_to(jnp.asarray(x_valid, bool), f.shape).reshape(-1, n),
            jnp.broadcast_to(jnp.asarray(y_valid, bool), lead + (M_out,)).reshape(-1, M_out),
            d.reshape(-1),
            jnp.broadcast_to(jnp.asarray(one_step, bool), lead).reshape(-1))
    return np.asarray(_recall_given_maps(*args, n_nodes, batch_size)).reshape(f.shape)


def predicted_capacity(ds, M: int | None = None, injective: bool = True, *, one_step: bool = False,
                       threshold: float = RECALL_THRESHOLD, n_min: int = 2, n_max: int = 200_000,
                       points_per_octave: int = 24) -> np.ndarray:
    """`N*_pred(d)` `(D,)`: where `predicted_recall` crosses `threshold`, on a fine geometric `N` grid (vectorised).

    NaN where the crossing lies outside `[n_min, n_max]` (or above `M` for injective maps).
    """
    ds = np.atleast_1d(np.asarray(ds))
    hi = n_max if (M is None or not injective) else min(n_max, M)
    Ns = np.unique(np.round(np.geomspace(n_min, hi, int(points_per_octave * np.log2(hi / n_min)) + 1)).astype(np.int64))
    rec = predicted_recall(Ns[None, :], ds[:, None], M, injective, one_step=one_step)
    n_star, _ = capacity_from_recall(Ns, rec, threshold)
    return n_star


# ----------------------------------------------------------------------------
# Capacity, fits, bootstrap
# ----------------------------------------------------------------------------


BRACKETED, ABOVE_GRID, BELOW_GRID = 0, 1, 2
"""`capacity_from_recall` flags: crossing found / recall never dropped (N* above the grid) / first point failed."""


def capacity_from_recall(Ns, recall_values, threshold: float = RECALL_THRESHOLD) -> tuple[np.ndarray, np.ndarray]:
    """Largest `N` with `recall >= threshold`, vectorised over leading axes; `(N* (...,), flag (...,))`.

    `Ns (K,)` increasing, `recall_values (..., K)` (NaN where not computed). The
    crossing is the first tested `N` whose recall falls below `threshold`; `N*`
    interpolates `log N` linearly in recall between it and the tested point
    before it (a run of successes). Flags: `BRACKETED`, `ABOVE_GRID` (no
    failure: `N*` is NaN, the last tested `N` is a lower bound), `BELOW_GRID`
    (the first tested point already fails: NaN).
    """
    Ns = np.asarray(Ns, np.float64)
    r = np.asarray(recall_values, np.float64)
    K = Ns.shape[0]
    valid = np.isfinite(r)
    fail = valid & (r < threshold)
    any_fail = fail.any(-1)
    first_fail = np.argmax(fail, axis=-1)
    # last tested point before the first failure
    idx = np.arange(K)
    before = valid & (idx < first_fail[..., None])
    has_before = before.any(-1)
    prev = np.where(has_before, K - 1 - np.argmax(before[..., ::-1], axis=-1), 0)
    r_hi = np.take_along_axis(r, prev[..., None], -1)[..., 0]
    r_lo = np.take_along_axis(r, first_fail[..., None], -1)[..., 0]
    lN_hi, lN_lo = np.log(Ns[prev]), np.log(Ns[first_fail])
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.clip((r_hi - threshold) / (r_hi - r_lo), 0.0, 1.0)
    n_star = np.exp(lN_hi + frac * (lN_lo - lN_hi))
    flag = np.where(~any_fail, ABOVE_GRID, np.where(has_before, BRACKETED, BELOW_GRID))
    return np.where(flag == BRACKETED, n_star, np.nan), flag


def fit_power_law(x, y, level: float = 0.95) -> dict:
    """OLS fit `log y = log c + b log x` on the finite pairs; `b`, `c`, a Student-t interval on `b`, points used.

    Returns `dict(exponent, prefactor, ci, stderr, n_points, residual_std)`;
    `ci` is NaN with fewer than 3 points.
    """
    from scipy import stats

    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    lx, ly = np.log(x[ok]), np.log(y[ok])
    n = int(ok.sum())
    if n < 2:
        return dict(exponent=np.nan, prefactor=np.nan, ci=[np.nan, np.nan], stderr=np.nan, n_points=n,
                    residual_std=np.nan)
    A = np.stack([np.ones(n), lx], 1)
    coef, *_ = np.linalg.lstsq(A, ly, rcond=None)
    resid = ly - A @ coef
    if n > 2:
        s2 = resid @ resid / (n - 2)
        se = float(np.sqrt(s2 / np.sum((lx - lx.mean()) ** 2)))
        tq = stats.t.ppf(0.5 + level / 2, n - 2)
        ci = [float(coef[1] - tq * se), float(coef[1] + tq * se)]
    else:
        se, ci = np.nan, [np.nan, np.nan]
    return dict(exponent=float(coef[1]), prefactor=float(np.exp(coef[0])), ci=ci, stderr=se, n_points=n,
                residual_std=float(np.std(resid)) if n > 2 else np.nan)


def _batched_slopes(lx: np.ndarray, ly: np.ndarray) -> np.ndarray:
    """OLS slopes of `ly (B, P)` on `lx (P,)` per row, ignoring NaN entries (NaN with < 2 points)."""
    ok = np.isfinite(ly)
    n = ok.sum(-1)
    X = np.where(ok, lx[None, :], 0.0)
    Y = np.where(ok, ly, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx, my = X.sum(-1) / n, Y.sum(-1) / n
        sxy = (np.where(ok, (X - mx[:, None]) * (Y - my[:, None]), 0.0)).sum(-1)
        sxx = (np.where(ok, (X - mx[:, None]) ** 2, 0.0)).sum(-1)
        b = sxy / sxx
    return np.where(n >= 2, b, np.nan)


def bootstrap_exponents(Ns, recall_seeds, x, *, n_boot: int = 2000, seed: int = 0,
                        threshold: float = RECALL_THRESHOLD, level: float = 0.95) -> dict:
    """Seed-bootstrap of the capacity exponent: resample seeds, recompute every `N*`, refit (vectorised over resamples).

    `recall_seeds (C, K, S)`: recall of column `c` (a `d`, or an `(m, d)`) at
    `Ns[k]` for seed `s` (NaN where not run); `x (C,)` the abscissa (`d` or `m d`).
    Returns `dict(ci, median, n_boot, n_valid, column_ci (C, 2))` (`column_ci`: percentile interval of each `N*`).
    """
    r = np.asarray(recall_seeds, np.float64)
    S = r.shape[-1]
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, S, size=(n_boot, S))
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)               # all-NaN cells (not run) stay NaN
        boot = np.nanmean(np.take(r, pick, axis=-1).transpose(2, 0, 1, 3), axis=-1)      # (B, C, K)
    n_star, _ = capacity_from_recall(Ns, boot, threshold)
    slopes = _batched_slopes(np.log(np.asarray(x, np.float64)), np.log(n_star))
    good = slopes[np.isfinite(slopes)]
    lo, hi = (np.quantile(good, [0.5 - level / 2, 0.5 + level / 2]) if good.size else (np.nan, np.nan))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        col_ci = np.nanquantile(n_star, [0.5 - level / 2, 0.5 + level / 2], axis=0).T       # (C, 2)
    return dict(ci=[float(lo), float(hi)], median=float(np.median(good)) if good.size else np.nan,
                n_boot=int(n_boot), n_valid=int(good.size), column_ci=col_ci)


# ----------------------------------------------------------------------------
# Sweeps
# ----------------------------------------------------------------------------


def padded_size(N, minimum: int = 32, factor: int = 2) -> np.ndarray:
    """Padded input count of a problem with `N` inputs: `minimum * factor^k`, the smallest such value `>= N`.

    Tasks of a sweep are grouped by it (one compiled call per group): `factor` 2 for trained memories (cost
    grows with the padded size), 4 for the closed-form ones (compilation dominates).
    """
    N = np.maximum(np.asarray(N, np.float64), 1.0)
    k = np.ceil(np.log(np.maximum(N / minimum, 1.0)) / np.log(factor) - 1e-12)
    return (minimum * float(factor) ** np.maximum(k, 0)).astype(np.int64)


def geometric_ints(lo: float, hi: float, points_per_octave: float) -> tuple[int, ...]:
    """Distinct integers on a geometric grid from `lo` to `hi` with about `points_per_octave` points per doubling."""
    n = max(2, int(round(points_per_octave * np.log2(hi / lo))) + 1)
    return tuple(int(v) for v in np.unique(np.round(np.geomspace(lo, hi, n)).astype(np.int64)))


@dataclasses.dataclass(frozen=True)
class CapacityGrid:
    """`(N, d, m, seed)` grid of one memory: a shared geometric `Ns` lattice, cut to a window per column.

    A column is a `d` (and an `m` for the MLP; `ms=(0,)` means no hidden
    layer). With `window=(lo, hi, power)` only `N` with
    `lo x^power <= N <= hi x^power` are run, `x = d` (or `m d`), so compute goes
    where the transition is; the window is wide and the capacity search
    reports when a crossing falls outside it.
    """

    ds: tuple[int, ...]
    Ns: tuple[int, ...]
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    ms: tuple[int, ...] = (0,)
    window: tuple[float, float, float] | None = None

    def __post_init__(self):
        for name in ("ds", "Ns", "seeds", "ms"):
            vals = tuple(int(v) for v in np.atleast_1d(getattr(self, name)))
            object.__setattr__(self, name, vals)
            if not vals:
                raise ValueError(f"{name} must not be empty")
        check_sizes(N=np.asarray(self.Ns), d=np.asarray(self.ds))
        if min(self.ms) < 0 or (0 in self.ms and len(self.ms) > 1):
            raise ValueError(f"m must be >= 1 (or ms=(0,) for memories without hidden layer), got ms={self.ms}")
        if min(self.seeds) < 0:
            raise ValueError(f"seeds must be >= 0, got seeds={self.seeds}")
        if list(self.Ns) != sorted(set(self.Ns)):
            raise ValueError(f"Ns must be strictly increasing, got Ns={self.Ns}")
        if self.window is not None:
            lo, hi, pw = (float(v) for v in self.window)
            if not (0 < lo < hi and np.isfinite(hi) and np.isfinite(pw)):
                raise ValueError(f"window must be (lo, hi, power) with 0 < lo < hi, got window={self.window}")
            object.__setattr__(self, "window", (lo, hi, pw))

    def columns(self) -> list[tuple[int, int]]:
        """`(d, m)` pairs, in order."""
        return [(d, m) for d in self.ds for m in self.ms]

    def column_Ns(self, d: int, m: int) -> tuple[int, ...]:
        """The `N` values run for column `(d, m)`."""
        if self.window is None:
            return self.Ns
        lo, hi, pw = self.window
        x = float(d * m if m > 0 else d) ** pw
        return tuple(N for N in self.Ns if lo * x <= N <= hi * x)

    def tasks(self) -> dict[str, np.ndarray]:
        """Flat task table, ordered `(d, m, N, seed)`."""
        rows = [(N, d, m, s) for d, m in self.columns() for N in self.column_Ns(d, m) for s in self.seeds]
        if not rows:
            raise ValueError("the grid holds no task (window excludes every N)")
        a = np.asarray(rows, np.int64)
        return dict(N=a[:, 0], d=a[:, 1], m=a[:, 2], seed=a[:, 3])


def capacity_sweep(kind: str, grid: CapacityGrid, *, M: int | None = None, injective: bool = True, steps: int = 0,
                   learning_rate: float = 0.1, dtype=F32, options: RunOptions | None = None,
                   bucket_factor: int | None = None) -> dict | None:
    """Build and measure the memory `kind` at every `(N, d, m, seed)` of `grid`.

    Tasks are grouped by `padded_size(N, factor=bucket_factor)` (default 2 for
    trained memories, 4 for the closed-form ones); each group is one vmapped
    `memory_run` padded to `(n_pad, max d, max m)` and runs through
    `run_chunked` (in `run_dir/n<n_pad>` when `options.run_dir` is set; default
    `RunOptions(chunk_size=32)`). Returns the task table with `kind`, `outputs`,
    `M` (the value used: `N` when `M` is None) and `accuracy, error, loss, steps,
    status`, or `None` while chunks are missing.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got kind={kind!r}")
    options = run_options(options if options is not None else RunOptions(chunk_size=32))
    dtype = check_float_dtype(dtype)
    tasks = grid.tasks()
    check_sizes(N=tasks["N"], d=tasks["d"], M=M, injective=injective)
    if kind == "mlp":
        if grid.ms == (0,):
            raise ValueError("m must be >= 1 for the mlp memory; give the grid ms=(...)")
        check_sizes(m=np.asarray(grid.ms))
    if kind in TRAINED_KINDS:
        if not _is_int(steps) or steps < 1:
            raise ValueError(f"steps must be a positive integer for trained memories, got steps={steps!r}")
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got learning_rate={learning_rate!r}")
    else:
        steps, learning_rate = 0, 0.0
    d_max, m_max = max(grid.ds), max(max(grid.ms), 1)
    if bucket_factor is None:
        bucket_factor = 2 if kind in TRAINED_KINDS else 4
    pads = padded_size(tasks["N"], factor=bucket_factor)
    outputs = {k: np.zeros(len(tasks["N"]), np.float64) for k in ("accuracy", "error", "loss")}
    outputs.update(steps=np.zeros(len(tasks["N"]), np.int64), status=np.zeros(len(tasks["N"]), np.int64))
    for n_pad in np.unique(pads):
        sel = np.nonzero(pads == n_pad)[0]
        shape = MemoryShape(n_max=int(n_pad), d_max=d_max, M=M, injective=injective, m_max=m_max)
        out = _run_group(kind, shape, {k: v[sel] for k, v in tasks.items()}, steps, learning_rate, dtype, options)
        if out is None:
            return None
        for k in outputs:
            outputs[k][sel] = out[k]
    n = len(tasks["N"])
    table = dict(kind=np.full(n, kind), outputs=np.full(n, outputs_label(M, injective)),
                 M=tasks["N"] if M is None else np.full(n, int(M)), d=tasks["d"], m=tasks["m"], N=tasks["N"],
                 seed=tasks["seed"])
    table.update(outputs)
    return table


def _run_group(kind, shape: MemoryShape, tasks: dict, steps, learning_rate, dtype, options: RunOptions):
    def fn(chunk):
        one = lambda s, N, d, m: memory_run(s, N, d, m, kind=kind, shape=shape, steps=steps,  # noqa: E731
                                            learning_rate=learning_rate, dtype=dtype)
        return jax.vmap(one)(jnp.asarray(chunk["seed"]), jnp.asarray(chunk["N"]), jnp.asarray(chunk["d"]),
                             jnp.asarray(chunk["m"]))

    config = dict(kind="memory_capacity", memory=kind, shape=dataclasses.asdict(shape), steps=int(steps),
                  learning_rate=float(learning_rate), optimizer="adam (full batch)" if kind in TRAINED_KINDS else None,
                  dtype=str(np.dtype(dtype)), embeddings="uniform on the unit sphere")
    opts = options
    if options.run_dir is not None:
        opts = options.replace(run_dir=os.path.join(options.run_dir, f"{kind}_{shape.outputs}_n{shape.n_max}"
                                                    .replace(",", "_").replace("=", "")))
    return run_chunked(fn, tasks, config, opts)


def recall_cube(table: dict, kind: str, outputs: str) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray]:
    """Rows of one `(kind, outputs)` as `(columns [(d, m)], Ns (K,), recall (C, K, S))`, NaN where not run."""
    sel = (np.asarray(table["kind"]) == kind) & (np.asarray(table["outputs"]) == outputs)
    if not sel.any():
        raise ValueError(f"no rows with kind={kind!r} and outputs={outputs!r}")
    d, m, N, s, acc = (np.asarray(table[k])[sel] for k in ("d", "m", "N", "seed", "accuracy"))
    cols = sorted(set(zip(d.tolist(), m.tolist())))
    Ns, seeds = np.unique(N), np.unique(s)
    cube = np.full((len(cols), len(Ns), len(seeds)), np.nan)
    ci = {c: i for i, c in enumerate(cols)}
    cube[[ci[c] for c in zip(d.tolist(), m.tolist())], np.searchsorted(Ns, N), np.searchsorted(seeds, s)] = acc
    return cols, Ns, cube


def capacity_fit(table: dict, kind: str, outputs: str, *, n_boot: int = 2000, seed: int = 0,
                 expected: tuple[float, float] | None = None) -> dict:
    """`N*` per column (mean recall over seeds) and the fit of `log N*` on `log d` (`log m d` for the MLP).

    Returns a JSON-ready dict: columns, `N*` and flags, the OLS exponent with its
    t-interval, the seed-bootstrap interval, local exponents between
    neighbouring columns, the exponent of `N* ln N*` (a capacity `~ x^b / log N`
    has `N* ln N* ~ x^b`), and `expected` / `in_expected_range` when given.
    """
    cols, Ns, cube = recall_cube(table, kind, outputs)
    x = np.asarray([d * m if m > 0 else d for d, m in cols], np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)               # cells outside the window stay NaN
        mean = np.nanmean(cube, axis=-1)
    n_star, flag = capacity_from_recall(Ns, mean)
    fit = fit_power_law(x, n_star)
    fit_log = fit_power_law(x, n_star * np.log(n_star))
    boot = bootstrap_exponents(Ns, cube, x, n_boot=n_boot, seed=seed)
    order = np.argsort(x, kind="stable")
    lx, ly = np.log(x[order]), np.log(n_star[order])
    with np.errstate(divide="ignore", invalid="ignore"):      # equal abscissae (MLP: same m d) give no slope
        local = np.where(lx[1:] > lx[:-1], (ly[1:] - ly[:-1]) / (lx[1:] - lx[:-1]), np.nan)
    out = dict(kind=kind, outputs=outputs, x="m*d" if kind == "mlp" else "d",
               d=[c[0] for c in cols], m=[c[1] for c in cols], x_values=x.tolist(),
               N_star=[float(v) if np.isfinite(v) else None for v in n_star],
               N_star_ci95_bootstrap=[[float(a) if np.isfinite(a) else None for a in row] for row in boot["column_ci"]],
               flag=[["bracketed", "above_grid", "below_grid"][int(f)] for f in flag],
               exponent=fit["exponent"], prefactor=fit["prefactor"], ci95_ols=fit["ci"],
               ci95_bootstrap=boot["ci"], bootstrap_median=boot["median"], n_points=fit["n_points"],
               local_exponents=[float(v) if np.isfinite(v) else None for v in local],
               exponent_log_corrected=fit_log["exponent"], ci95_ols_log_corrected=fit_log["ci"],
               n_seeds=int(cube.shape[-1]), threshold=RECALL_THRESHOLD)
    if expected is not None:
        out["expected"] = list(expected)
        out["in_expected_range"] = bool(expected[0] <= fit["exponent"] <= expected[1])
    return out


# ----------------------------------------------------------------------------
# Zipf-distributed inputs
# ----------------------------------------------------------------------------


def problem_map(seed, N, shape: MemoryShape) -> Array:
    """The target map `(n_max,)` of `sample_problem(jax.random.PRNGKey(seed), N, d, shape)` (independent of `d`)."""
    return target_map(jax.random.split(jax.random.PRNGKey(seed), 3)[2], N, shape)


def zipf_run(seed, d, k, *, shape: MemoryShape, dtype=F32) -> dict[str, Array]:
    """Zipf-weighted errors of the one-step memory (`q = p`) and of the outer product of the `k` most frequent inputs.

    `shape.n_max` inputs, all used (`N = n_max`); pure in `seed, d, k`.
    """
    problem = sample_problem(jax.random.PRNGKey(seed), shape.n_max, d, shape, dtype)
    one = factored_scores(one_step_rows(problem), problem)
    q_top = (jnp.arange(shape.n_max) < k).astype(problem.E.dtype)
    top = factored_scores(outer_product_rows(problem, q_top), problem)
    return dict(error_one_step=weighted_error(one, problem), error_top_k=weighted_error(top, problem),
                recall_one_step=recall(one, problem))


def zipf_tail(k, N: int, alpha: float) -> np.ndarray:
    """`sum_{x >= k} p_x` for `p_x ∝ (x + 1)^-alpha` on `[N]` (the error of storing exactly the top `k`)."""
    w = np.arange(1, N + 1, dtype=np.float64) ** (-alpha)
    c = np.concatenate([[0.0], np.cumsum(w)]) / w.sum()
    return 1.0 - c[np.clip(np.asarray(k), 0, N)]


@dataclasses.dataclass(frozen=True)
class ZipfGrid:
    """Zipf experiment: `N` inputs with `p_x ∝ (x+1)^-alpha`, `M` outputs (random map), dimensions `ds`, `seeds`."""

    ds: tuple[int, ...] = (16, 32, 64, 128, 256)
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    N: int = 4096
    M: int = 8
    alpha: float = 2.0

    def __post_init__(self):
        for name in ("ds", "seeds"):
            object.__setattr__(self, name, tuple(int(v) for v in np.atleast_1d(getattr(self, name))))
        check_sizes(N=self.N, d=np.asarray(self.ds), M=self.M)
        if not (np.isfinite(self.alpha) and self.alpha > 1):
            raise ValueError(f"alpha must be > 1 (a normalisable Zipf law as N grows), got alpha={self.alpha!r}")


def zipf_top_k(ds, grid: ZipfGrid, *, n_k: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """`(k*(d), predicted error)`: the number of most frequent inputs to store that minimises the closed-form error.

    Uses the expected recall of a uniform-weight outer product over `k` inputs
    with `M` outputs (`predicted_recall`) for the stored inputs and chance
    `1 - 1/M` for the rest: `err(k) = (1 - tail(k)) (1 - R(k, d)) + tail(k) (1 - 1/M)`.
    """
    ds = np.atleast_1d(np.asarray(ds))
    ks = np.asarray(geometric_ints(1, grid.N, n_k / np.log2(grid.N)), np.int64)
    R = predicted_recall(ks[None, :], ds[:, None], grid.M, False)
    # stored inputs are the most frequent ones, so weight their errors by their own (larger) mass
    tail = zipf_tail(ks, grid.N, grid.alpha)
    err = (1.0 - tail)[None, :] * (1.0 - R) + tail[None, :] * (1.0 - 1.0 / grid.M)
    best = np.argmin(err, axis=-1)
    return ks[best], err[np.arange(len(ds)), best]


def zipf_sweep(grid: ZipfGrid, *, dtype=F32, options: RunOptions | None = None) -> dict | None:
    """Measured and predicted Zipf-weighted errors against `d` (one task per `(d, seed)`, `run_chunked`).

    Returns columns `d, seed, k, error_one_step, error_top_k, predicted_one_step,
    predicted_top_k` (`None` while chunks are missing). The predictions are the
    closed form given each seed's map (`predicted_recall_given_map`).
    """
    options = run_options(options if options is not None else RunOptions(chunk_size=8))
    shape = MemoryShape(n_max=grid.N, d_max=max(grid.ds), M=grid.M, injective=False, zipf_alpha=grid.alpha)
    k_star, _ = zipf_top_k(grid.ds, grid)
    kd = dict(zip(grid.ds, k_star.tolist()))
    d, s = np.meshgrid(np.asarray(grid.ds), np.asarray(grid.seeds), indexing="ij")
    tasks = dict(d=d.ravel().astype(np.int64), seed=s.ravel().astype(np.int64))
    tasks["k"] = np.asarray([kd[int(v)] for v in tasks["d"]], np.int64)

    def fn(chunk):
        one = lambda s_, d_, k_: zipf_run(s_, d_, k_, shape=shape, dtype=dtype)  # noqa: E731
        return jax.vmap(one)(jnp.asarray(chunk["seed"]), jnp.asarray(chunk["d"]), jnp.asarray(chunk["k"]))

    config = dict(kind="memory_zipf", grid=dataclasses.asdict(grid), shape=dataclasses.asdict(shape),
                  dtype=str(np.dtype(dtype)))
    out = run_chunked(fn, tasks, config, options)
    if out is None:
        return None
    # closed form given each task's map (the map depends on the seed only), vectorised over tasks
    maps = np.asarray(jax.vmap(lambda s_: problem_map(s_, grid.N, shape))(jnp.asarray(tasks["seed"])))
    p = np.asarray(input_distribution(grid.N, grid.N, grid.alpha, jnp.float32), np.float64)
    p = p / p.sum()
    xv, yv = np.ones(grid.N, bool), np.ones(grid.M, bool)
    top = (np.arange(grid.N)[None, :] < tasks["k"][:, None]).astype(np.float64)
    n_t = len(tasks["d"])                     # one call: the one-step problems, then the top-k ones
    P = predicted_recall_given_map(np.concatenate([maps, maps]), np.concatenate([np.broadcast_to(p, top.shape), top]),
                                   xv, yv, np.concatenate([tasks["d"], tasks["d"]]),
                                   one_step=np.arange(2 * n_t) < n_t)
    P1, Pk = P[:n_t], P[n_t:]
    preds_one, preds_top = np.sum(p * (1 - P1), -1), np.sum(p * (1 - Pk), -1)
    table = dict(tasks)
    table.update({k: np.asarray(v, np.float64) for k, v in out.items()})
    table["predicted_one_step"] = np.asarray(preds_one)
    table["predicted_top_k"] = np.asarray(preds_top)
    return table


def zipf_fits(table: dict, grid: ZipfGrid) -> dict:
    """Power-law fits of the mean Zipf error against `d`.

    Asymptotic exponents: `-(alpha-1)/(2 alpha)` (one step), `-(alpha-1)` (top k).
    """
    ds = np.unique(table["d"])
    out = dict(alpha=grid.alpha, N=grid.N, M=grid.M)
    for name, pred_exp in (("one_step", -(grid.alpha - 1) / (2 * grid.alpha)), ("top_k", -(grid.alpha - 1))):
        err = np.asarray([np.mean(table[f"error_{name}"][table["d"] == d]) for d in ds])
        pred = np.asarray([np.mean(table[f"predicted_{name}"][table["d"] == d]) for d in ds])
        fm, fp = fit_power_law(ds, err), fit_power_law(ds, pred)
        out[name] = dict(d=ds.tolist(), error=err.tolist(), predicted_error=pred.tolist(),
                         exponent=fm["exponent"], ci95_ols=fm["ci"], exponent_closed_form=fp["exponent"],
                         asymptotic_exponent=float(pred_exp),
                         max_relative_gap_to_closed_form=float(np.max(np.abs(err - pred) / pred)))
    return out


# ----------------------------------------------------------------------------
# Result type
# ----------------------------------------------------------------------------


CAPACITY_COLUMNS = ("kind", "d", "m", "N", "seed", "accuracy", "outputs", "M", "error", "loss", "steps", "status")
ZIPF_COLUMNS = ("d", "seed", "k", "error_one_step", "error_top_k", "predicted_one_step", "predicted_top_k",
                "recall_one_step")


@dataclasses.dataclass
class MemoryResult:
    """Capacity table, Zipf table and fits of a memory study; `write` / `load` as CSV + JSON.

    Attributes:
      capacity: columns `CAPACITY_COLUMNS` (`status` as names, e.g. `"converged"`).
      fits: JSON-ready dict (per `"<kind>|<outputs>"` a `capacity_fit`, `"zipf"`, `"config"`).
      zipf: columns `ZIPF_COLUMNS` (may be empty).
    """

    capacity: dict
    fits: dict
    zipf: dict = dataclasses.field(default_factory=dict)

    def write(self, out_dir: str) -> list[str]:
        """Write `capacity.csv`, `fits.json` and (if any) `zipf.csv` to `out_dir`; returns the paths."""
        os.makedirs(out_dir, exist_ok=True)
        cap = dict(self.capacity)
        if np.asarray(cap["status"]).dtype.kind in "iu":
            cap["status"] = status_names(cap["status"])
        paths = [write_csv(os.path.join(out_dir, "capacity.csv"), cap, order=CAPACITY_COLUMNS),
                 atomic_write_json(os.path.join(out_dir, "fits.json"), self.fits)]
        if self.zipf:
            paths.append(write_csv(os.path.join(out_dir, "zipf.csv"), self.zipf, order=ZIPF_COLUMNS))
        return paths

    @classmethod
    def load(cls, out_dir: str) -> "MemoryResult":
        """Read back what `write` wrote."""
        cap = read_csv(os.path.join(out_dir, "capacity.csv"))
        zpath = os.path.join(out_dir, "zipf.csv")
        return cls(capacity=cap, fits=read_json(os.path.join(out_dir, "fits.json")),
                   zipf=read_csv(zpath) if os.path.exists(zpath) else {})

    def status_codes(self) -> np.ndarray:
        """`status` column as `Status` codes."""
        st = np.asarray(self.capacity["status"])
        return st if st.dtype.kind in "iu" else np.asarray([status_code(s) for s in st])


def concat_tables(tables: list[dict]) -> dict:
    """Concatenate column dicts with the same keys."""
    keys = list(tables[0])
    return {k: np.concatenate([np.asarray(t[k]) for t in tables]) for k in keys}


# ----------------------------------------------------------------------------
# Studies (presets)
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """One capacity sweep of a study: memory `kind`, output rule, grid, training budget, expected exponent range."""

    kind: str
    M: int | None
    injective: bool
    grid: CapacityGrid
    steps: int = 0
    learning_rate: float = 0.1
    expected: tuple[float, float] | None = None

    @property
    def key(self) -> str:
        return f"{self.kind}|{outputs_label(self.M, self.injective)}"


def memory_preset(name: str, seeds: tuple[int, ...] | None = None) -> tuple[list[SweepSpec], ZipfGrid]:
    """The sweeps of the `cpu` (default, minutes on 2 cores) or `gpu` (larger grids) study."""
    if name not in ("cpu", "gpu"):
        raise ValueError(f"preset must be 'cpu' or 'gpu', got preset={name!r}")
    big = name == "gpu"
    s_cheap = tuple(range(16 if big else 8)) if seeds is None else tuple(seeds)
    s_train = tuple(range(8 if big else 4)) if seeds is None else tuple(seeds)
    M_fixed = 8
    per_octave = 6 if big else 4
    ds_op = (16, 32, 64, 128, 256, 512, 1024, 2048) if big else (16, 32, 64, 128, 256, 512)
    ds_inj = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384) if big else (16, 24, 32, 48, 64, 96, 128)
    lattice = geometric_ints(2, 40_000 if big else 4_000, per_octave)
    op_fixed = CapacityGrid(ds_op, lattice, s_cheap, window=(0.05, 1.5, 1.0))       # N* ~ 0.45 d (M = 8)
    op_inj = CapacityGrid(ds_inj, lattice, s_cheap, window=(0.004, 0.08, 2.0))       # N* ~ 0.023 d^2 (M = N)
    specs = [SweepSpec("outer_product", M_fixed, False, op_fixed, expected=(0.8, 1.2)),
             SweepSpec("one_step", M_fixed, False, op_fixed),
             SweepSpec("outer_product", None, True, op_inj),
             SweepSpec("one_step", None, True, op_inj)]
    steps_lin = 1500 if big else 300        # 1500 steps reach the plateau of N*; 300 give 10-15% less, same exponent
    ds_lin = (8, 12, 16, 24, 32, 48, 64) if big else (8, 12, 16, 24, 32)
    specs.append(SweepSpec("linear", None, True, CapacityGrid(ds_lin, geometric_ints(2, 4_000, per_octave), s_train,
                                                              window=(0.06, 0.45, 2.0)),            # N* ~ 0.2 d^2
                           steps=steps_lin, learning_rate=0.1, expected=(1.5, 2.1)))
    ds_lin8 = (8, 16, 32, 64, 128) if big else (8, 16, 32, 64)
    specs.append(SweepSpec("linear", M_fixed, False, CapacityGrid(ds_lin8, geometric_ints(2, 4_000, per_octave),
                                                                  s_train, window=(1.0, 6.0, 1.0)),  # N* ~ 3 d
                           steps=steps_lin, learning_rate=0.1))
    ds_mlp, ms_mlp = ((8, 16, 32), (16, 32, 64, 128)) if big else ((8, 16), (16, 32, 64))
    specs.append(SweepSpec("mlp", M_fixed, False, CapacityGrid(ds_mlp, geometric_ints(2, 20_000, per_octave), s_train,
                                                               ms=ms_mlp, window=(0.3, 2.0, 1.0)),   # N* ~ m d
                           steps=4000 if big else 1500, learning_rate=0.02, expected=(0.8, 1.2)))
    zipf = ZipfGrid(ds=(16, 32, 64, 128, 256, 512, 1024, 2048) if big else (16, 32, 64, 128, 256, 512),
                    seeds=s_cheap, N=32768 if big else 8192, M=M_fixed, alpha=2.0)
    return specs, zipf


def run_memory_study(specs: list[SweepSpec], zipf: ZipfGrid | None, *, n_boot: int = 2000, dtype=F32,
                     options: RunOptions | None = None, log=None) -> MemoryResult | None:
    """Run every sweep of `specs` (and the Zipf experiment), fit the capacities; `None` while chunks are missing."""
    options = run_options(options)
    tables, fits = [], {}
    for spec in specs:
        if log:
            log(f"sweep {spec.key} ({len(spec.grid.tasks()['N'])} tasks)")
        opts = options if options.run_dir is None else options.replace(
            run_dir=os.path.join(options.run_dir, "capacity"))
        t = capacity_sweep(spec.kind, spec.grid, M=spec.M, injective=spec.injective, steps=spec.steps,
                           learning_rate=spec.learning_rate, dtype=dtype, options=opts)
        if t is None:
            return None
        tables.append(t)
        fit = capacity_fit(t, spec.kind, outputs_label(spec.M, spec.injective), n_boot=n_boot, expected=spec.expected)
        if spec.kind in ("outer_product", "one_step"):
            xs = np.asarray(fit["d"])
            hi = 4 * max(spec.grid.Ns) if (spec.M is None or not spec.injective) else spec.M
            pred = predicted_capacity(xs, spec.M, spec.injective, one_step=spec.kind == "one_step", n_max=hi)
            fit["N_star_closed_form"] = [float(v) if np.isfinite(v) else None for v in pred]
            fit["exponent_closed_form"] = fit_power_law(xs, pred)["exponent"]
        fit.update(steps=spec.steps, learning_rate=spec.learning_rate)
        fits[spec.key] = fit
    ztable = {}
    if zipf is not None:
        if log:
            log(f"zipf sweep ({len(zipf.ds) * len(zipf.seeds)} tasks)")
        opts = options if options.run_dir is None else options.replace(run_dir=os.path.join(options.run_dir, "zipf"))
        ztable = zipf_sweep(zipf, dtype=dtype, options=opts)
        if ztable is None:
            return None
        fits["zipf"] = zipf_fits(ztable, zipf)
    fits["config"] = dict(threshold=RECALL_THRESHOLD, embeddings="uniform on the unit sphere of R^d",
                          sweeps={s.key: dict(kind=s.kind, M=s.M, injective=s.injective, ds=list(s.grid.ds),
                                              ms=list(s.grid.ms), seeds=list(s.grid.seeds), window=s.grid.window,
                                              steps=s.steps, learning_rate=s.learning_rate) for s in specs},
                          zipf=dataclasses.asdict(zipf) if zipf is not None else None, n_boot=n_boot)
    return MemoryResult(capacity=concat_tables(tables), fits=json_ready(fits), zipf=ztable)


def json_ready(obj):
    """`obj` with numpy scalars / arrays as Python numbers / lists, tuples as lists, and NaN / inf as `None`."""
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, np.ndarray)):
        return [json_ready(v) for v in (obj.tolist() if isinstance(obj, np.ndarray) else obj)]
    if isinstance(obj, (np.generic,)):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


# ----------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------


def _edges(values: np.ndarray) -> np.ndarray:
    """Cell edges (geometric midpoints) around increasing positive `values`."""
    v = np.asarray(values, np.float64)
    if len(v) == 1:
        return np.array([v[0] / 1.2, v[0] * 1.2])
    mid = np.sqrt(v[1:] * v[:-1])
    return np.concatenate([[v[0] ** 2 / mid[0]], mid, [v[-1] ** 2 / mid[-1]]])


def _fit_keys(result: MemoryResult) -> list[str]:
    """Capacity-fit keys in the order outer product, one step, linear, MLP (fixed M before M = N)."""
    keys = [k for k, v in result.fits.items() if isinstance(v, dict) and "exponent" in v and "kind" in v]
    return sorted(keys, key=lambda k: (KINDS.index(result.fits[k]["kind"]), "=N" in result.fits[k]["outputs"], k))


def _plain_log_y(ax, axes: str = "y") -> None:
    """Plain-number labels on log axes (`"x"`, `"y"` or `"xy"`): decades, plus 2 and 5 times a decade."""
    def minor(v, _):
        m = v / 10 ** np.floor(np.log10(v))
        return f"{v:g}" if np.isclose(m, 2) or np.isclose(m, 5) else ""

    for name in axes:
        axis = getattr(ax, f"{name}axis")
        axis.set_major_formatter(lambda v, _: f"{v:g}")
        axis.set_minor_formatter(minor)
        ax.tick_params(axis=name, which="both", labelsize=8)


_TITLES = {"outer_product": "outer product", "one_step": "one gradient step", "linear": "trained linear",
           "mlp": "trained MLP"}


def _exponent_text(fit: dict, short: bool = False) -> str:
    if fit.get("exponent") is None:
        return "no fit"
    lo, hi = fit["ci95_bootstrap"]
    ci = f"[{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "[n/a]"
    return f"{fit['exponent']:.2f} {ci}" if short else f"exponent {fit['exponent']:.2f}, boot. 95% CI {ci}"


def _recall_map_panel(ax, Ns, xs, grid, fit, xlabel):
    from matplotlib.colors import Normalize

    mesh = ax.pcolormesh(_edges(xs), _edges(Ns), np.ma.masked_invalid(grid.T), cmap="viridis",
                         norm=Normalize(0.0, 1.0), shading="flat")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_ticks(ax.xaxis, xs)
    ax.set_facecolor("0.85")
    ax.set_xlabel(xlabel)
    return mesh


def _plain_log_ticks(axis, values) -> None:
    """Major ticks at `values` (thinned to at most 7), plain integer labels, no minor labels."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    v = np.unique(np.asarray(values, float))
    if len(v) > 7:
        v = v[:: int(np.ceil(len(v) / 7))]
    axis.set_major_locator(FixedLocator(v))
    axis.set_major_formatter(lambda x, _: f"{x:g}")
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def plot_phase_diagrams(result: MemoryResult, path: str) -> str:
    """Mean recall over seeds on the `(d, N)` grid of every sweep (MLP: `(m, N)` per `d`) with the capacity curves.

    White dots: measured `N*` with bootstrap 95% intervals; black line: power-law fit; dashed: closed form.
    Grey cells were not run (outside the sweep's window).
    """
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    keys = _fit_keys(result)
    panels = []
    for key in keys:
        fit = result.fits[key]
        if fit["kind"] == "mlp":
            for d in sorted(set(fit["d"])):
                panels.append((key, d))
        else:
            panels.append((key, None))
    ncol = 4
    nrow = int(np.ceil(len(panels) / ncol))
    fig = Figure(figsize=(4.1 * ncol, 3.6 * nrow + 1.5))
    axes = np.atleast_1d(fig.subplots(nrow, ncol, squeeze=False)).ravel()
    mesh = None
    for ax, (key, d_fixed) in zip(axes, panels):
        fit = result.fits[key]
        kind, outputs = fit["kind"], fit["outputs"]
        cols, Ns, cube = recall_cube(result.capacity, kind, outputs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(cube, axis=-1)                          # (C, K)
        nstar = np.asarray([np.nan if v is None else v for v in fit["N_star"]], float)
        ci = np.asarray([[np.nan if a is None else a for a in row] for row in fit["N_star_ci95_bootstrap"]], float)
        if d_fixed is None:
            xs = np.asarray([c[0] for c in cols], float)
            sel = np.arange(len(cols))
            xlabel = "embedding dimension $d$"
        else:
            sel = np.asarray([i for i, c in enumerate(cols) if c[0] == d_fixed])
            xs = np.asarray([cols[i][1] for i in sel], float)
            xlabel = f"MLP width $m$  ($d={d_fixed}$)"
        mesh = _recall_map_panel(ax, Ns, xs, mean[sel], fit, xlabel)
        ok = np.isfinite(nstar[sel])
        yerr = np.abs(ci[sel][ok].T - nstar[sel][ok][None, :])
        ax.errorbar(xs[ok], nstar[sel][ok], yerr=np.nan_to_num(yerr), fmt="o", color="w", mec="k", ms=5, capsize=2.5,
                    ecolor="k", elinewidth=1.2, label="measured capacity $N^*$ (bars: seed-bootstrap 95%)")
        if fit["exponent"] is not None:
            xx = np.geomspace(xs.min(), xs.max(), 50)
            scale = xx if d_fixed is None else xx * d_fixed
            ax.plot(xx, fit["prefactor"] * scale ** fit["exponent"], "k-", lw=1.2,
                    label=r"power-law fit of $N^*$ (exponent in the panel title)")
        if "N_star_closed_form" in fit:
            pred = np.asarray([np.nan if v is None else v for v in fit["N_star_closed_form"]], float)
            ax.plot(xs, pred[sel], "--", color="C1", lw=1.5, label="closed form (Gaussian crosstalk)")
        ax.set_ylabel("number of stored pairs $N$")
        _plain_log_y(ax)
        ax.set_title(f"{_TITLES[kind]}, {outputs}" + ("" if d_fixed is None else f", $d={d_fixed}$")
                     + f"\n{_exponent_text(fit)}", fontsize=9)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    top, bottom = 1.0 - 1.05 / fig.get_figheight(), 0.95 / fig.get_figheight()
    fig.subplots_adjust(left=0.05, right=0.9, top=top, bottom=bottom, wspace=0.32, hspace=0.5)
    cb = fig.colorbar(mesh, cax=fig.add_axes([0.915, bottom + 0.1 * (top - bottom), 0.012, 0.8 * (top - bottom)]))
    cb.set_label("mean recall over seeds (fraction of the $N$ pairs recalled)")
    handles, labels = {}, {}
    for ax in axes[: len(panels)]:                       # one legend for the figure, below the panels (off the data)
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=3, fontsize=8, frameon=False,
               bbox_to_anchor=(0.47, 0.0))
    fig.suptitle("Associative-memory recall over (embedding dimension $d$, stored pairs $N$), mean over seeds\n"
                 "capacity $N^*$ = largest $N$ with mean recall $\\geq$ 99%; grey cells: not run (outside each "
                 "sweep's window around its transition)", fontsize=10, y=1.0 - 0.15 / fig.get_figheight())
    return save_figure(fig, path)


def plot_capacity_fits(result: MemoryResult, path: str) -> str:
    """`N*` against `d` (left) and against `m d` (right, MLP), log-log, with bootstrap 95% intervals and fits."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    fig = Figure(figsize=(12, 4.6))
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw=dict(wspace=0.25))
    markers = dict(outer_product="o", one_step="s", linear="^", mlp="D")
    for i, key in enumerate(_fit_keys(result)):
        fit = result.fits[key]
        ax = ax2 if fit["kind"] == "mlp" else ax1
        x = np.asarray(fit["x_values"], float)
        y = np.asarray([np.nan if v is None else v for v in fit["N_star"]], float)
        ci = np.asarray([[np.nan if a is None else a for a in row] for row in fit["N_star_ci95_bootstrap"]], float)
        ok = np.isfinite(y)
        color = f"C{i}"
        ax.errorbar(x[ok], y[ok], yerr=np.nan_to_num(np.abs(ci[ok].T - y[ok][None, :])), fmt=markers[fit["kind"]],
                    color=color, ms=5, capsize=2, mfc="none" if fit["kind"] == "one_step" else color,
                    label=f"{_TITLES[fit['kind']]}, {fit['outputs']}: {_exponent_text(fit, short=True)}")
        if fit["exponent"] is not None and ok.any():
            xx = np.geomspace(x[ok].min(), x[ok].max(), 50)
            ax.plot(xx, fit["prefactor"] * xx ** fit["exponent"], "-", color=color, lw=1)
        if "N_star_closed_form" in fit:
            pred = np.asarray([np.nan if v is None else v for v in fit["N_star_closed_form"]], float)
            ax.plot(x, pred, ":", color=color, lw=1.5)
    mlp = [result.fits[k] for k in _fit_keys(result) if result.fits[k]["kind"] == "mlp"]
    if mlp and mlp[0]["N_star"]:
        x = np.asarray(mlp[0]["x_values"], float)
        y = np.asarray([np.nan if v is None else v for v in mlp[0]["N_star"]], float)
        c = np.exp(np.nanmean(np.log(y / x)))                      # geometric-mean N* / (m d)
        xx = np.geomspace(x.min(), x.max(), 20)
        ax2.plot(xx, c * xx, "k--", lw=1, label=f"reference $N^* = {c:.2f}\\, m d$ (exponent 1)")
    for ax, xl in ((ax1, "embedding dimension $d$"), (ax2, "MLP parameters per layer $m d$")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xl)
        _plain_log_y(ax, "xy")
        ax.set_ylabel("capacity $N^*$ (99% mean recall)")
        ax.grid(True, which="both", alpha=0.3)
        if ax is ax1:   # many entries: below the axes, off the data
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2,
                      title="memory, outputs: exponent [boot. 95% CI]", title_fontsize=7)
        else:
            ax.legend(fontsize=7, loc="lower right", title="memory, outputs: exponent [boot. 95% CI]",
                      title_fontsize=7)
    ax1.set_title("capacity vs $d$ (lines: fits; dotted: closed form)", fontsize=9)
    ax2.set_title("MLP memory $F(z) = V^T \\mathrm{relu}(U z)$: capacity vs $m d$", fontsize=9)
    fig.suptitle("Capacity scaling of associative memories (error bars: seed-bootstrap 95% intervals of $N^*$)",
                 fontsize=10)
    return save_figure(fig, path)


def plot_zipf(result: MemoryResult, path: str) -> str:
    """Zipf-weighted error against `d`: measured (mean and seed std), closed form, and the asymptotic power laws."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    z = result.zipf
    info = result.fits["zipf"]
    fig = Figure(figsize=(6.8, 4.8))
    ax = fig.subplots()
    ds = np.unique(z["d"])
    for name, color, label in (("one_step", "C0", "one gradient step ($q = p$)"),
                               ("top_k", "C3", "outer product of the $k^*(d)$ most frequent")):
        err = np.asarray([np.mean(z[f"error_{name}"][z["d"] == d]) for d in ds])
        sd = np.asarray([np.std(z[f"error_{name}"][z["d"] == d]) for d in ds])
        pred = np.asarray([np.mean(z[f"predicted_{name}"][z["d"] == d]) for d in ds])
        f = info[name]
        ax.errorbar(ds, err, sd, fmt="o", color=color, capsize=2, ms=5,
                    label=f"{label}: measured, slope {f['exponent']:.2f}")
        ax.plot(ds, pred, "-", color=color, lw=1.2, label=f"closed form, slope {f['exponent_closed_form']:.2f}")
        ref = pred[-1] * (ds / ds[-1]) ** f["asymptotic_exponent"]
        ax.plot(ds, ref, "--", color=color, lw=1, alpha=0.7,
                label=f"$d^{{{f['asymptotic_exponent']:.2f}}}$ (asymptotic law)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("embedding dimension $d$")
    _plain_log_y(ax, "xy")
    ax.set_ylabel(r"error $\sum_x p_x 1\{f(x) \neq f^*(x)\}$")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
              title="markers: measured (mean over seeds)\nsolid: closed form given each map", title_fontsize=7)
    ax.set_title(f"Zipf inputs $p_x \\propto x^{{-{info['alpha']:g}}}$, N = {info['N']}, M = {info['M']} "
                 f"(error bars: std over {len(np.unique(z['seed']))} seeds)", fontsize=9)
    return save_figure(fig, path)
