"""Optax training of the students on the empirical risk `R` of spec section 1.

`minimize(loss_fn, params0, config)` is a pure, jittable, vmappable loop
(`lax.while_loop`) of full-batch gradient descent, Adam or L-BFGS
(`optax.lbfgs` with its zoom line search), stopped by the gradient norm:
the run converges when the root-mean-square gradient entry
`||grad R||_F / sqrt(#weights)` falls below `gtol`. It returns a
`TrainResult` with the weights, loss, gradient norm, step count and a status,
the optimistix way: failure is a status the caller can vmap over.

`student_risk(graphdef, weights, x, y, p, mask, lam)` is the masked
`R = sum_mu mask_mu 1/(2d) ||y^mu - f(x^mu)||^2 + lam/2 ||weights||^2` of any
`nnx` student; padded samples (`mask = 0`) contribute exactly nothing, so a run
padded to `n_max` samples is the unpadded run.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Literal

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

from phasejax.empirics.data import TiedAttentionData, check_data

Array = jax.Array

CONVERGED = 0
MAX_STEPS = 1
DIVERGED = 2
"""`TrainResult.status`: gradient norm below `gtol`; step cap reached; loss or gradient not finite."""

DEFAULT_LEARNING_RATES = {"gd": 0.5, "adam": 0.01, "lbfgs": None}
"""Default learning rates (`None`: L-BFGS picks its step by line search)."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Static training options (hashable; part of the compilation key).

    Attributes:
      optimizer: `"gd"` (full-batch `optax.sgd`), `"adam"` or `"lbfgs"` (`optax.lbfgs`).
      learning_rate: step size; `None` takes `DEFAULT_LEARNING_RATES[optimizer]`
        (0.5 for GD suits the paper's setting, where the Hessian of `R` in `Q`
        has `O(1)` eigenvalues).
      max_steps: step cap.
      gtol: stop when the RMS gradient entry `||grad R||_F / sqrt(#weights)` < gtol.
      memory_size: L-BFGS history length.
    """

    optimizer: Literal["gd", "adam", "lbfgs"] = "lbfgs"
    learning_rate: float | None = None
    max_steps: int = 5000
    gtol: float = 1e-7
    memory_size: int = 10

    def __post_init__(self):
        if self.optimizer not in DEFAULT_LEARNING_RATES:
            raise ValueError(f"optimizer must be one of {tuple(DEFAULT_LEARNING_RATES)}, got {self.optimizer!r}")
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if not self.gtol > 0:
            raise ValueError(f"gtol must be > 0, got {self.gtol}")

    @property
    def lr(self) -> float | None:
        return DEFAULT_LEARNING_RATES[self.optimizer] if self.learning_rate is None else self.learning_rate

    def optax_optimizer(self) -> optax.GradientTransformation:
        if self.optimizer == "gd":
            return optax.sgd(self.lr)
        if self.optimizer == "adam":
            return optax.adam(self.lr)
        return optax.lbfgs(learning_rate=self.lr, memory_size=self.memory_size)


@struct.dataclass
class TrainResult:
    """Result of `minimize`: `params` (the weights pytree), `loss ()`, `grad_norm ()` (RMS entry),
    `steps ()`, `status ()` (`CONVERGED`, `MAX_STEPS`, `DIVERGED`), `converged ()`."""

    params: object
    loss: Array
    grad_norm: Array
    steps: Array
    status: Array
    converged: Array


def _rms(tree, size: int) -> Array:
    return optax.tree_utils.tree_norm(tree) / jnp.sqrt(size)


def minimize(loss_fn: Callable[[object], Array], params0, config: TrainConfig = TrainConfig()) -> TrainResult:
    """Minimise `loss_fn` from `params0` with the optimiser of `config`, stopped on the gradient norm.

    Pure and jittable (`config` static); vmapped over a batch of problems, each
    run freezes at its own stopping step.
    """
    opt = config.optax_optimizer()
    size = sum(x.size for x in jax.tree_util.tree_leaves(params0))
    lbfgs = config.optimizer == "lbfgs"
    value_and_grad = optax.value_and_grad_from_state(loss_fn) if lbfgs else None

    def cond(carry):
        _, _, v, g, step = carry
        return (step < config.max_steps) & (_rms(g, size) > config.gtol) & jnp.isfinite(v) & jnp.isfinite(_rms(g, size))

    def body(carry):
        params, state, v, g, step = carry
        if lbfgs:
            updates, state = opt.update(g, state, params, value=v, grad=g, value_fn=loss_fn)
            params = optax.apply_updates(params, updates)
            v, g = value_and_grad(params, state=state)
        else:
            updates, state = opt.update(g, state, params)
            params = optax.apply_updates(params, updates)
            v, g = jax.value_and_grad(loss_fn)(params)
        return params, state, v, g, step + 1

    v0, g0 = jax.value_and_grad(loss_fn)(params0)
    params, _, v, g, steps = jax.lax.while_loop(cond, body, (params0, opt.init(params0), v0, g0, jnp.asarray(0)))
    gn = _rms(g, size)
    finite = jnp.isfinite(v) & jnp.isfinite(gn)
    status = jnp.where(~finite, DIVERGED, jnp.where(gn <= config.gtol, CONVERGED, MAX_STEPS))
    return TrainResult(params=params, loss=v, grad_norm=gn, steps=steps, status=status, converged=status == CONVERGED)


def student_risk(graphdef, weights, x: Array, y: Array, p: Array, mask: Array | None, lam) -> Array:
    """Masked `R = sum_mu mask_mu ||y^mu - f(x^mu)||^2 / (2d) + lam/2 ||weights||^2` (spec section 1).

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
                  mask: Array | None = None) -> tuple[nnx.Module, TrainResult]:
    """Train an `nnx` student on `data` by minimising `R`; returns the trained module and the `TrainResult`.

    A convenience around `minimize` for one run (checks the data; not vmapped).
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
    check_data(data)
    if mask is not None and jnp.shape(mask) != (data.n,):
        raise ValueError(f"mask must have shape (n,) = ({data.n},), got {jnp.shape(mask)}")
    graphdef, weights = nnx.split(model, nnx.Param)
    loss = jax.jit(lambda w: student_risk(graphdef, w, data.x, data.y, data.p, mask, lam))
    res = jax.jit(minimize, static_argnums=(0, 2))(loss, weights, config)
    return nnx.merge(graphdef, res.params), res
