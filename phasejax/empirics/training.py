"""Optax training of the students on the empirical risk `R` (theory notes, section 1).

`minimize(loss_fn, params0, config)` is a pure, jittable, vmappable loop
(`lax.while_loop`) of any `optax.GradientTransformation` (`TrainConfig(optimizer=optax.adamw(1e-2))`), or of the
shorthands full-batch gradient descent, Adam and L-BFGS (`optax.lbfgs` with its zoom line search), stopped by the
gradient norm:
the run converges when the root-mean-square gradient entry
`||grad R||_F / sqrt(#weights)` falls below `gtol`. It returns a
`TrainResult` with the weights, loss, gradient norm, step count and a
`phasejax.solvers.Status`, the optimistix way: failure is a status the caller
can vmap over. The loop is `phasejax.solvers.iterate` (the one loop shared
with the state evolution and GAMP).

`student_risk(graphdef, weights, x, y, p, mask, lam, loss)` is the masked
`R = sum_mu mask_mu loss.output_risk(y^mu - f(x^mu)) + lam/2 ||weights||^2` of any
`nnx` student, with the model's per-sample loss (`phasejax.theory.losses`; the square loss
`||y - f||^2 / (2d)` by default); `tied_risk(x, y, p, params, mask)` the same for the tied student as a function
of `Q` (through per-sample Gram matrices for the square loss). Padded samples (`mask = 0`) contribute exactly
nothing, so a run padded to `n_max` samples is the unpadded run. The test error stays the square error whatever
the training loss (`phasejax.empirics.metrics`).
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
from phasejax.solvers import HasStatus, Status, iterate, raise_unless_converged
from phasejax.theory.gram import gram_inputs, gram_risk
from phasejax.theory.losses import SampleLoss, SquareLoss
from phasejax.theory.params import TiedAttentionParams
from phasejax.theory.penalties import Ridge

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


@dataclasses.dataclass(frozen=True, eq=False)
class TrainConfig:
    """Static training options (hashable; part of the compilation key). Validated on construction.

    Attributes:
      optimizer: any `optax.GradientTransformation` (e.g. `optax.adamw(1e-2)`), or a shorthand: `"gd"`
        (full-batch `optax.sgd`), `"adam"` or `"lbfgs"` (`optax.lbfgs`). A transformation with extra arguments
        (`optax.GradientTransformationExtraArgs`, as `optax.lbfgs` and optax's chains are) gets `value`, `grad`
        and `value_fn` at every step, so line searches work; one whose state stores the value and gradient at
        the new point (`optax.lbfgs`) has them reused (`optax.value_and_grad_from_state`).
      learning_rate: step size of a shorthand; `None` takes `DEFAULT_LEARNING_RATES[optimizer]`
        (0.5 for GD suits the paper's setting, where the Hessian of `R` in `Q`
        has `O(1)` eigenvalues). A transformation carries its own: `learning_rate` must be `None` then.
      max_steps: step cap (a positive integer; `2.5` is refused, not rounded).
      gtol: stop when the RMS gradient entry `||grad R||_F / sqrt(#weights)` < gtol;
        `None` takes `DEFAULT_GTOL` for the dtype of the weights.
      memory_size: L-BFGS history length (the `"lbfgs"` shorthand).

    Two configs are equal (and hash alike) when their fields are, a transformation compared by identity (its
    functions are closures, with no value to compare): reuse one transformation object to reuse a compiled
    program. A sweep's run directory (`phasejax.sweep`) records a transformation by the identity of its
    functions (`phasejax.sweep.callable_identity`); where that differs between processes (optax's closures
    over other transformations), set `tx.update.__phasejax_id__ = "a name"` to resume in another process.
    """

    optimizer: Literal["gd", "adam", "lbfgs"] | optax.GradientTransformation = "lbfgs"
    learning_rate: float | None = None
    max_steps: int = 5000
    gtol: float | None = None
    memory_size: int = 10

    def __post_init__(self):
        if isinstance(self.optimizer, optax.GradientTransformation):
            if self.learning_rate is not None:
                raise ValueError(f"learning_rate applies to the shorthands {tuple(DEFAULT_LEARNING_RATES)} only (a "
                                 f"GradientTransformation has its own), got learning_rate={self.learning_rate!r}")
        elif not isinstance(self.optimizer, str) or self.optimizer not in DEFAULT_LEARNING_RATES:
            raise ValueError(f"optimizer must be an optax.GradientTransformation or one of "
                             f"{tuple(DEFAULT_LEARNING_RATES)}, got optimizer={self.optimizer!r}")
        _positive_number(self.learning_rate, "learning_rate", allow_none=True)
        _positive_int(self.max_steps, "max_steps")
        _positive_number(self.gtol, "gtol", allow_none=True)
        _positive_int(self.memory_size, "memory_size")
        object.__setattr__(self, "max_steps", int(self.max_steps))
        object.__setattr__(self, "memory_size", int(self.memory_size))

    def _key(self) -> tuple:
        opt = self.optimizer if isinstance(self.optimizer, str) else ("transformation", id(self.optimizer))
        return opt, self.learning_rate, self.max_steps, self.gtol, self.memory_size

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    @property
    def lr(self) -> float | None:
        """The step size of a shorthand (`None` for L-BFGS, which searches its step, and for a transformation)."""
        if not isinstance(self.optimizer, str):
            return None
        return DEFAULT_LEARNING_RATES[self.optimizer] if self.learning_rate is None else self.learning_rate

    def tolerance(self, dtype) -> float:
        """`gtol`, or the default for `dtype` (`DEFAULT_GTOL`) when `gtol` is None."""
        if self.gtol is not None:
            return float(self.gtol)
        return DEFAULT_GTOL["float64" if np.dtype(dtype).itemsize == 8 else "float32"]

    def optax_optimizer(self) -> optax.GradientTransformation:
        """The transformation: `optimizer` itself, or the shorthand's."""
        if not isinstance(self.optimizer, str):
            return self.optimizer
        if self.optimizer == "gd":
            return optax.sgd(self.lr)
        if self.optimizer == "adam":
            return optax.adam(self.lr)
        return optax.lbfgs(learning_rate=self.lr, memory_size=self.memory_size)


@struct.dataclass
class TrainResult(HasStatus):
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


def stores_value_and_grad(opt_state) -> bool:
    """Whether an optimiser state holds the loss and gradient at the new point (fields `value` and `grad`, as
    `optax.lbfgs`'s line search keeps them), for `optax.value_and_grad_from_state`. Decided on the state's
    structure (static)."""
    try:
        return optax.tree.get(opt_state, "value") is not None and optax.tree.get(opt_state, "grad") is not None
    except KeyError:            # several fields of the name: not a state to read them from
        return False


@dataclasses.dataclass(frozen=True)
class GradientSolver:
    """`minimize` as a `phasejax.solvers.iterate` solver: one optimiser step per `step`, stop on the RMS gradient.

    The object holds the optimiser (any `optax.GradientTransformation`) and the stopping rule; the problem, the
    argument of `init`, `step` and `terminate`, is the loss function `loss_fn(params) -> ()`."""

    opt: optax.GradientTransformation
    size: int
    gtol: float

    def init(self, loss_fn: Callable, params0) -> _State:
        v0, g0 = jax.value_and_grad(loss_fn)(params0)
        return _State(params0, self.opt.init(params0), v0, g0)

    def step(self, loss_fn: Callable, s: _State) -> _State:
        if isinstance(self.opt, optax.GradientTransformationExtraArgs):
            updates, opt_state = self.opt.update(s.grad, s.opt_state, s.params, value=s.loss, grad=s.grad,
                                                 value_fn=loss_fn)
        else:
            updates, opt_state = self.opt.update(s.grad, s.opt_state, s.params)
        params = optax.apply_updates(s.params, updates)
        if stores_value_and_grad(opt_state):
            v, g = optax.value_and_grad_from_state(loss_fn)(params, state=opt_state)
        else:
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
    solver = GradientSolver(config.optax_optimizer(), size, config.tolerance(dtype))
    out = iterate(solver, loss_fn, solver.init(loss_fn, params0), max_steps=config.max_steps, report_progress=True)
    s = out.state
    if throw:
        raise_unless_converged(out.status, "minimize")
    return TrainResult(params=s.params, loss=s.loss, grad_norm=_rms(s.grad, size), steps=out.steps, status=out.status,
                       converged=out.status == Status.CONVERGED)


def student_risk(graphdef, weights, x: Array, y: Array, p: Array, mask: Array | None, lam,
                 loss: SampleLoss = SquareLoss()) -> Array:
    """Masked `R = sum_mu mask_mu loss.output_risk(y^mu - f(x^mu)) + lam/2 ||weights||^2` (theory notes, section 1):
    with the square loss (the default) `sum_mu mask_mu ||y^mu - f(x^mu)||^2 / (2d) + lam/2 ||weights||^2`.

    Args:
      graphdef, weights: an `nnx.split` student (`weights` the `nnx.Param` state).
      x, y: `(n, L, d)`; p: `(L, d)`; mask: `(n,)` 0/1 weights or `None` (all samples).
      lam: ridge penalty on every trained weight.
      loss: the per-sample loss (`phasejax.theory.losses.SampleLoss`; its `output_risk` of the residuals
        `(n, L, d)`), the model's `params.loss`.
    """
    pred = nnx.merge(graphdef, weights)(x, p)
    return _masked_sum(loss.output_risk(y - pred), mask) + 0.5 * lam * optax.tree_utils.tree_norm(weights, squared=True)


def _masked_sum(per_sample: Array, mask: Array | None) -> Array:
    if mask is not None:
        per_sample = jnp.where(mask, per_sample, 0.0)   # where, not *: padded NaN cannot leak in
    return jnp.sum(per_sample)


def check_trainable(params: TiedAttentionParams, *, square_loss_for: str | None = None) -> TiedAttentionParams:
    """`params` if the empirics can train its model: the penalty is ridge (`Ridge`, the students' `lam/2 ||w||^2`)
    and, with `square_loss_for` (the routine's name), the loss is the square loss (routines written through its
    Gram matrices or closed forms: GAMP's prox, the bracket's control variate); else `ValueError` naming the
    field."""
    if type(params.penalty) is not Ridge:
        raise ValueError(f"penalty: the students are trained with the ridge penalty lam/2 ||w||^2 (Ridge()), got "
                         f"penalty={params.penalty!r}")
    if square_loss_for is not None and type(params.loss) is not SquareLoss:
        raise ValueError(f"loss: {square_loss_for} is written for the square loss (SquareLoss()), got "
                         f"loss={params.loss!r}")
    return params


def tied_risk(x: Array, y: Array, p: Array, params: TiedAttentionParams, mask: Array | None = None
              ) -> Callable[[Array], Array]:
    """`Q -> R(Q)`, the masked risk of the tied student `f_Q(x) = S((x + p) Q / sqrt(d)) (x + p)` with
    `S = params.student` and the loss `params.loss` (plus `params.lam / 2 ||Q||^2`); `Q (d, r)`.

    The square loss goes through the per-sample Gram matrices (`phasejax.theory.gram.gram_risk`: one pass over
    the `(n, L, d)` data per evaluation, computed once here); any other loss through `loss.output_risk` of the
    residuals `y - f_Q(x)`. Data `x, y (n, L, d)`, `p (L, d)`, `mask (n,)` or `None`.
    """
    if type(params.loss) is SquareLoss:
        inputs = gram_inputs(x, y, p)
        return lambda Q: gram_risk(Q, inputs, params, mask)
    xt = x + p[None]
    student = jax.vmap(lambda h: params.student(h, params))

    def risk(Q):
        S = student(jnp.einsum("nld,dr->nlr", xt, Q) / jnp.sqrt(xt.shape[-1]))
        residual = y - jnp.einsum("nlk,nkd->nld", S, xt)
        return _masked_sum(params.loss.output_risk(residual), mask) + 0.5 * params.lam * jnp.sum(Q**2)

    return risk


def train_student(model: nnx.Module, data: TiedAttentionData, lam, config: TrainConfig = TrainConfig(),
                  mask: Array | None = None, *, loss: SampleLoss = SquareLoss(),
                  throw: bool = False) -> tuple[nnx.Module, TrainResult]:
    """Train an `nnx` student on `data` by minimising `R` (`student_risk` with `loss`, by default the square loss;
    pass the model's `params.loss`); returns the trained module and the `TrainResult` (with `throw`, a run that
    did not converge raises `phasejax.solvers.SolverError`).

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
    if not isinstance(loss, SampleLoss):
        raise ValueError(f"loss must be a phasejax.theory.losses.SampleLoss (SquareLoss(), HuberLoss(delta)), got "
                         f"loss={loss!r}")
    dtype = data.x.dtype
    with dtype_scope(dtype):
        graphdef, weights = nnx.split(model, nnx.Param)
        lam_d = jnp.asarray(lam_value, dtype)
        risk = jax.jit(lambda w: student_risk(graphdef, w, data.x, data.y, data.p, mask, lam_d, loss))
        res = jax.jit(minimize, static_argnums=(0, 2))(risk, weights, config)
        if throw:
            raise_unless_converged(res.status, "train_student")
        return nnx.merge(graphdef, res.params), res
