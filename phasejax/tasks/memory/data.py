"""Associative-memory problems: sizes, embeddings on the sphere, target maps and input laws."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.precision import check_float_dtype
from phasejax.tasks._common import F32, Array, is_int


KINDS = ("outer_product", "one_step", "linear", "mlp")
"""The memories: closed-form outer products, one gradient step, trained linear, trained MLP."""

TRAINED_KINDS = ("linear", "mlp")

RECALL_THRESHOLD = 0.99
"""Capacity `N*`: the largest `N` whose mean recall over seeds is at least this."""


# ----------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------


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
            if not is_int(v) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {name}={v!r}")
        if self.M is not None and (not is_int(self.M) or self.M < 1):
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
