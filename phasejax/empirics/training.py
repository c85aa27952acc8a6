"""Optax training of the students on the empirical risk `R` (theory notes, section 1).

`minimize(loss_fn, params0, config)` is a pure, jittable, vmappable loop
(`lax.while_loop`) of full-batch gradient descent, Adam or L-BFGS
(`optax.lbfgs` with its zoom line search), stopped by the gradient norm:
the run converges when the root-mean-square gradient entry
`||grad R||_F / sqrt(#weights)` falls below `gtol`. It returns a
`TrainResult` with the weights, loss, gradient norm, step count and a
`phasejax.solvers.Status`, the optimistix way: failure is a status the caller
can vmap over. The loop is `phasejax.solvers.iterate` (the one loop shared
with the state evolution and GAMP).

`student_risk(graphdef, weights, x, y, p, mask, lam)` is the masked
`R = sum_mu mask_mu 1/(2d) ||y^mu - f(x^mu)||^2 + lam/2 ||weights||^2` of any
`nnx` student; padded samples (`mask = 0`) contribute exactly nothing, so a run
padded to `n_max` samples is the unpadded run.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx, struct

from phasejax.empirics.data import TiedAttentionData, check_data
from phasejax.precision import dtype_scope
from phasejax.solvers import Status, iterate, raise_unless_converged

Array = jax.Array

DEFAULT_LEARNING_RATES = {"gd": 0.5, "adam": 0.01, "lbfgs": None}
"""Default learning rates (`None`: L-BFGS picks its step by line search)."""

DEFAULT_GTOL = {"float64": 1e-7, "float32": 1e-6}
"""Default stopping tolerance on the RMS gradient entry per dtype (`TrainConfig.gtol=None`).

Measured on the paper's setting (`omega = 0.3`, `alpha` 0.5 and 2, L-BFGS,
same data in both precisions): float32 runs stopped at `1e-6` reach the
float64 minimiser's overlaps within `3e-4` at `d = 1000` and `2e-5` at
`d = 100` (at `1e-5`, slow runs stop up to `8e-3` early, comparable to the
seed-to-seed spread); float32 rounding makes `1e-7` unreliable."""


def _positive_number(value, name: str, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {name}={value!r}")


def _positive_int(value, name: str) -> None:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value) or int(value) != value or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {name}={value!r}")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Static training options (hashable; part of the compilation key). Validated on construction.

    Attributes:
      optimizer: `"gd"` (full-batch `optax.sgd`), `"adam"` or `"lbfgs"` (`optax.lbfgs`).
      learning_rate: step size; `None` takes `DEFAULT_LEARNING_RATES[optimizer]`
        (0.5 for GD suits the paper's setting, where the Hessian of `R` in `Q`
        has `O(1)` eigenvalues).
      max_steps: step cap (a positive integer; `2.5` is refused, not rounded).
      gtol: stop when the RMS gradient entry `||grad R||_F / sqrt(#weights)` < gtol;
        `None` takes `DEFAULT_GTOL` for the dtype of the weights.
      memory_size: L-BFGS history length.
    """

    optimizer: Literal["gd", "adam", "lbfgs"] = "lbfgs"
    learning_rate: float | None = None
    max_steps: int = 5000
    gtol: float | None = None
    memory_size: int = 10

    def __post_init__(self):
        if self.optimizer not in DEFAULT_LEARNING_RATES:
            raise ValueError(f"optimizer must be one of {tuple(DEFAULT_LEARNING_RATES)}, got {self.optimizer!r}")
        _positive_number(self.learning_rate, "learning_rate", allow_none=True)
        _positive_int(self.max_steps, "max_steps")
        _positive_number(self.gtol, "gtol", allow_none=True)
        _positive_int(self.memory_size, "memory_size")
        object.__setattr__(self, "max_steps", int(self.max_steps))
        object.__setattr__(self, "memory_size", int(self.memory_size))

    @property
    def lr(self) -> float | None:
        return DEFAULT_LEARNING_RATES[self.optimizer] if self.learning_rate is None else self.learning_rate

    def tolerance(self, dtype) -> float:
        """`gtol`, or the default for `dtype` (`DEFAULT_GTOL`) when `gtol` is None."""
        if self.gtol is not None:
            return float(self.gtol)
        return DEFAULT_GTOL["float64" if np.dtype(dtype).itemsize == 8 else "float32"]

    def optax_optimizer(self) -> optax.GradientTransformation:
        if self.optimizer == "gd":
            return optax.sgd(self.lr)
        if self.optimizer == "adam":
            return optax.adam(self.lr)
        return optax.lbfgs(learning_rate=self.lr, memory_size=self.memory_size)


@struct.dataclass
class TrainResult:
    """Result of `minimize`: `params` (the weights pytree), `loss ()`, `grad_norm ()` (RMS entry),
    `steps ()`, `status ()` (a `phasejax.solvers.Status` code: `CONVERGED`, `MAX_ITERATIONS`, `DIVERGED`),
    `converged ()`."""

    params: object
    loss: Array
    grad_norm: Array
    steps: Array
    status: Array
    converged: Array


def _rms(tree, size: int) -> Array:
    return optax.tree_utils.tree_norm(tree) / np.sqrt(size)


class _State(NamedTuple):
    params: object
    opt_state: object
    loss: Array
    grad: object


@dataclasses.dataclass(frozen=True)
class GradientSolver:
    """`minimize` as a `phasejax.solvers.iterate` solver: one optimiser step per `step`, stop on the RMS gradient.

    The object holds the optimiser and the stopping rule; the problem, the argument of `init`, `step` and
    `terminate`, is the loss function `loss_fn(params) -> ()`."""

    opt: optax.GradientTransformation
    lbfgs: bool
    size: int
    gtol: float

    def init(self, loss_fn: Callable, params0) -> _State:
        v0, g0 = jax.value_and_grad(loss_fn)(params0)
        return _State(params0, self.opt.init(params0), v0, g0)

    def step(self, loss_fn: Callable, s: _State) -> _State:
        if self.lbfgs:
            updates, opt_state = self.opt.update(s.grad, s.opt_state, s.params, value=s.loss, grad=s.grad,
                                                 value_fn=loss_fn)
            params = optax.apply_updates(s.params, updates)
            v, g = optax.value_and_grad_from_state(loss_fn)(params, state=opt_state)
        else:
            updates, opt_state = self.opt.update(s.grad, s.opt_state, s.params)
            params = optax.apply_updates(s.params, updates)
            v, g = jax.value_and_grad(loss_fn)(params)
        return _State(params, opt_state, v, g)

    def terminate(self, loss_fn: Callable, s: _State) -> tuple[Array, Array]:
        gn = _rms(s.grad, self.size)
        finite = jnp.isfinite(s.loss) & jnp.isfinite(gn)
        status = jnp.where(finite, Status.CONVERGED, Status.DIVERGED)
        return (~finite) | (gn <= self.gtol), status


def minimize(loss_fn: Callable[[object], Array], params0, config: TrainConfig = TrainConfig(), *,
             throw: bool = False) -> TrainResult:
    """Minimise `loss_fn` from `params0` with the optimiser of `config`, stopped on the gradient norm.

    Pure and jittable (`config` static); vmapped over a batch of problems, each
    run freezes at its own stopping step (`phasejax.solvers.iterate`). Computes
    in the dtype of `params0`; `config.gtol=None` picks the tolerance for it.
    With `throw` (a concrete call, not under `jit` or `vmap`) a run that did not converge raises
    `phasejax.solvers.SolverError`, as optimistix's `throw=True`; by default failure is the result's status.
    """
    leaves = jax.tree_util.tree_leaves(params0)
    size = sum(x.size for x in leaves)
    dtype = jnp.result_type(*leaves) if leaves else jnp.float32
    solver = GradientSolver(config.optax_optimizer(), config.optimizer == "lbfgs", size, config.tolerance(dtype))
    out = iterate(solver, loss_fn, solver.init(loss_fn, params0), max_steps=config.max_steps, report_progress=True)
    s = out.state
    if throw:
        raise_unless_converged(out.status, "minimize")
    return TrainResult(params=s.params, loss=s.loss, grad_norm=_rms(s.grad, size), steps=out.steps, status=out.status,
                       converged=out.status == Status.CONVERGED)


def student_risk(graphdef, weights, x: Array, y: Array, p: Array, mask: Array | None, lam) -> Array:
    """Masked `R = sum_mu mask_mu ||y^mu - f(x^mu)||^2 / (2d) + lam/2 ||weights||^2` (theory notes, section 1).

    Args:
      graphdef, weights: an `nnx.split` student (`weights` the `nnx.Param` state).
      x, y: `(n, L, d)`; p: `(L, d)`; mask: `(n,)` 0/1 weights or `None` (all samples).
      lam: ridge penalty on every trained weight.
    """
    pred = nnx.merge(graphdef, weights)(x, p)
    per_sample = jnp.sum((y - pred) ** 2, axis=(1, 2)) / (2.0 * x.shape[-1])
    if mask is not None:
        per_sample = jnp.where(mask, per_sample, 0.0)   # where, not *: padded NaN cannot leak in
    return jnp.sum(per_sample) + 0.5 * lam * optax.tree_utils.tree_norm(weights, squared=True)


def train_student(model: nnx.Module, data: TiedAttentionData, lam, config: TrainConfig = TrainConfig(),
                  mask: Array | None = None, *, throw: bool = False) -> tuple[nnx.Module, TrainResult]:
    """Train an `nnx` student on `data` by minimising `R`; returns the trained module and the `TrainResult`
    (with `throw`, a run that did not converge raises `phasejax.solvers.SolverError`).

    A convenience around `minimize` for one run (checks the data; not vmapped).
    Computes in the dtype of `data` (inside `dtype_scope`, so float64 data
    trains in float64); the model's weights should have that dtype too.

    Example:
      >>> import jax
      >>> from phasejax.theory import make_params
      >>> from phasejax.empirics import generate_data, TiedAttention, semantic_init, train_student
      >>> params = make_params(1.0, 0.3)
      >>> data = generate_data(jax.random.PRNGKey(0), params, d=100, n=100)
      >>> model, res = train_student(TiedAttention(semantic_init(data.Qstar, 1)), data, params.lam)
      >>> bool(res.converged)
      True
    """
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    check_data(data)
    lam_value = np.asarray(lam, dtype=float)
    if lam_value.shape != () or not np.isfinite(lam_value) or lam_value < 0:
        raise ValueError(f"lam must be a finite number >= 0, got lam={lam!r}")
    if mask is not None and jnp.shape(mask) != (data.n,):
        raise ValueError(f"mask must have shape (n,) = ({data.n},), got {jnp.shape(mask)}")
    dtype = data.x.dtype
    with dtype_scope(dtype):
        graphdef, weights = nnx.split(model, nnx.Param)
        lam_d = jnp.asarray(lam_value, dtype)
        loss = jax.jit(lambda w: student_risk(graphdef, w, data.x, data.y, data.p, mask, lam_d))
        res = jax.jit(minimize, static_argnums=(0, 2))(loss, weights, config)
        if throw:
            raise_unless_converged(res.status, "train_student")
        return nnx.merge(graphdef, res.params), res
