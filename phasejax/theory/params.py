"""Model parameters of tied low-rank attention (docs/theory.md, section 1).

`TiedAttentionParams` is a frozen pytree: its array fields (`alpha`, `omega`,
`lam`, `sigma`, `A`, `C`) can be vmapped over; its static fields (`r`, `t`,
`target`, `student`) select the model and are part of the compilation key.

The per-sample loss (`phasejax.theory.losses`, default the square loss) and the penalty of the weights
(`phasejax.theory.penalties`, default ridge) are declared objects, static fields too.

The target `T` and student `S` are plain functions
``fn(H, params) -> (L, L)`` with ``H`` of shape ``(L, t)`` (target) or
``(L, r)`` (student); they may read any array field of ``params`` (the mixed
target reads ``omega`` and ``A``). Pass module-level functions (they must be
hashable and stable across calls, or every call recompiles).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.precision import uses_float64
from phasejax.theory.attention import dot_product_attention, dot_product_student, mixed_target  # noqa: F401
from phasejax.theory.losses import SampleLoss, SquareLoss
from phasejax.theory.penalties import Penalty, Ridge

Array = jax.Array

PAPER_A = ((0.6, 0.4), (0.4, 0.6))
"""The paper's standard positional matrix `A` (docs/theory.md, section 1)."""
PAPER_A_ASYMMETRIC = ((0.3, 0.7), (0.8, 0.2))
"""The paper's second example of `A`."""


@struct.dataclass
class TiedAttentionParams:
    """Parameters of the tied-attention learning problem (docs/theory.md, section 1).

    Attributes:
      alpha: `()` sample complexity `n / d`, > 0.
      omega: `()` target mix in [0, 1] (0 semantic, 1 positional).
      lam: `()` ridge penalty `lambda` >= 0.
      sigma: `(L,)` per-token standard deviations `sigma_l` > 0.
      A: `(L, L)` positional part of the target.
      C: `(L, K)` positional encodings `p_l = sum_k C[l, k] u_k`.
      r: student rank (static).
      t: teacher rank (static).
      target: `T(hstar (L, t), params) -> (L, L)` (static).
      student: `S(h (L, r), params) -> (L, L)` (static).
      loss: the per-sample loss, a `phasejax.theory.losses.SampleLoss` (static; default `SquareLoss()`).
      penalty: the penalty of the weights, a `phasejax.theory.penalties.Penalty` (static; default `Ridge()`, with
        `lam` its strength).
    """

    alpha: Array
    omega: Array
    lam: Array
    sigma: Array
    A: Array
    C: Array
    r: int = struct.field(pytree_node=False, default=1)
    t: int = struct.field(pytree_node=False, default=1)
    target: Callable = struct.field(pytree_node=False, default=mixed_target)
    student: Callable = struct.field(pytree_node=False, default=dot_product_student)
    loss: SampleLoss = struct.field(pytree_node=False, default=SquareLoss())
    penalty: Penalty = struct.field(pytree_node=False, default=Ridge())

    @property
    def L(self) -> int:
        return self.sigma.shape[-1]

    @property
    def K(self) -> int:
        return self.C.shape[-1]


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def validate_params(params: TiedAttentionParams) -> TiedAttentionParams:
    """Raise `ValueError` naming the parameter if `params` is invalid.

    Checks shapes always and values whenever they are concrete (not traced).
    Batched fields (a leading vmap axis, e.g. `alpha` of shape `(N,)`) are
    accepted: every entry is checked. Returns `params` unchanged.
    """
    if params.r < 1 or params.t < 1:
        raise ValueError(f"r and t must be >= 1, got r={params.r}, t={params.t}")
    if not isinstance(params.loss, SampleLoss):
        raise ValueError(f"loss must be a phasejax.theory.losses.SampleLoss (SquareLoss(), HuberLoss(delta)), got "
                         f"{params.loss!r}")
    if not isinstance(params.penalty, Penalty):
        raise ValueError(f"penalty must be a phasejax.theory.penalties.Penalty (Ridge()), got {params.penalty!r}")
    sigma, A, C = params.sigma, params.A, params.C
    if sigma.ndim < 1:
        raise ValueError(f"sigma must have shape (L,), got shape {sigma.shape}")
    L = sigma.shape[-1]
    if L < 1:
        raise ValueError("sigma must have at least one token (L >= 1)")
    if A.shape[-2:] != (L, L):
        raise ValueError(f"A must have shape (L, L) = ({L}, {L}), got {A.shape}")
    if C.ndim < 2 or C.shape[-2] != L:
        raise ValueError(f"C must have shape (L, K) with L={L}, got {C.shape}")
    checks = {
        "alpha": (params.alpha, lambda v: v > 0, "alpha must be > 0"),
        "omega": (params.omega, lambda v: (v >= 0) & (v <= 1), "omega must lie in [0, 1]"),
        "lam": (params.lam, lambda v: v >= 0, "lambda (lam) must be >= 0"),
        "sigma": (sigma, lambda v: v > 0, "sigma must be > 0"),
        "A": (A, lambda v: np.isfinite(v), "A must be finite"),
        "C": (C, lambda v: np.isfinite(v), "C must be finite"),
    }
    for name, (value, ok, msg) in checks.items():
        if not _is_concrete(value):
            continue
        v = np.asarray(value)
        if not np.all(np.isfinite(v)):
            raise ValueError(f"{name} must be finite, got {v}")
        if not np.all(ok(v)):
            raise ValueError(f"{msg}, got {name}={v}")
    return params


def params_are_valid(params: TiedAttentionParams) -> Array:
    """Traceable validity flag (same value checks as `validate_params`), shape `()`."""
    ok = (params.alpha > 0) & (params.omega >= 0) & (params.omega <= 1) & (params.lam >= 0)
    ok = ok & jnp.all(params.sigma > 0) & jnp.all(jnp.isfinite(params.A)) & jnp.all(jnp.isfinite(params.C))
    for leaf in (params.alpha, params.omega, params.lam, params.sigma):
        ok = ok & jnp.all(jnp.isfinite(leaf))
    return ok


@uses_float64
def make_params(
    alpha,
    omega,
    *,
    sigma=0.5,
    lam=0.01,
    A=PAPER_A,
    C=None,
    r: int = 1,
    t: int = 1,
    target: Callable = mixed_target,
    student: Callable = dot_product_student,
    loss: SampleLoss = SquareLoss(),
    penalty: Penalty = Ridge(),
) -> TiedAttentionParams:
    """Build validated float64 parameters (float64 whatever the global JAX setting); defaults are the paper's setting.

    `sigma` may be a scalar (broadcast to all `L` tokens) or `(L,)`. `L` is
    read from `A`. `C` defaults to the paper's `[[1], [-1]]` for `L = 2`
    (and to alternating signs `(+1, -1, +1, ...)`, one direction, otherwise).
    `alpha`, `omega`, `lam` may carry a leading batch axis for `jax.vmap`.
    `A` (the target's positional attention matrix) may hold any finite entries: its rows need not sum to
    one, and where they do not, the target's positional attention rows do not either (the target is then
    not an attention map, but the theory holds unchanged); nonfinite entries raise `ValueError`. `loss` and
    `penalty` declare the training loss and the penalty (`phasejax.theory.losses`, `phasejax.theory.penalties`).

    Example:
      >>> p = make_params(2.0, 0.3)            # paper setting at alpha=2, omega=0.3
      >>> p.L, p.K, p.r, p.t
      (2, 1, 1, 1)
    """
    A = jnp.asarray(A, dtype=jnp.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be a square (L, L) matrix, got shape {A.shape}")
    L = A.shape[0]
    sigma = jnp.asarray(sigma, dtype=jnp.float64)
    if sigma.ndim == 0:
        sigma = jnp.full((L,), sigma)
    if sigma.shape != (L,):
        raise ValueError(f"sigma must be a scalar or have shape (L,) = ({L},), got {sigma.shape}")
    if C is None:
        C = jnp.asarray([[(-1.0) ** l] for l in range(L)])
    C = jnp.asarray(C, dtype=jnp.float64)
    if C.ndim != 2 or C.shape[0] != L:
        raise ValueError(f"C must have shape (L, K) with L={L}, got {C.shape}")
    params = TiedAttentionParams(
        alpha=jnp.asarray(alpha, dtype=jnp.float64),
        omega=jnp.asarray(omega, dtype=jnp.float64),
        lam=jnp.asarray(lam, dtype=jnp.float64),
        sigma=sigma,
        A=A,
        C=C,
        r=int(r),
        t=int(t),
        target=target,
        student=student,
        loss=loss,
        penalty=penalty,
    )
    return validate_params(params)


def token_swap_symmetric(params: TiedAttentionParams, atol: float = 1e-12) -> Array:
    """Whether the problem is symmetric under token reversal with `p -> -p` (docs/theory.md, section 4).

    With `P` the reversal permutation `l -> L-1-l`: equal `sigma` under `P`,
    `P A P^T = A` and `P C = -C`. When true, `m = 0` is an invariant subspace
    of the SE and the semantic branch is solved inside it. Traceable, shape `()`.
    (Assumes `T` and `S` are permutation-equivariant, as softmax attention is.)
    """
    sigma_sym = jnp.all(jnp.abs(params.sigma - params.sigma[::-1]) <= atol)
    A_sym = jnp.all(jnp.abs(params.A - params.A[::-1, ::-1]) <= atol)
    C_anti = jnp.all(jnp.abs(params.C + params.C[::-1]) <= atol)
    return sigma_sym & A_sym & C_anti
