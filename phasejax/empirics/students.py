"""Attention students of theory notes section 1 as `flax.nnx` modules, and their informed inits.

Every student maps tokens `x (..., L, d)` and positional encodings `p (L, d)`
to predictions `(..., L, d)`:

* `TiedAttention`: `f_Q(x) = S((x + p) Q / sqrt(d)) (x + p)`, `Q (d, r)`,
  `S(H) = softmax(H H^T)` by default (any `(L, r) -> (L, L)` map can be given).
* `UntiedAttention`: `softmax((x + p) W_Q W_K^T (x + p)^T / d) V(x + p)` with
  `W_Q, W_K (d, r)` and the value map `V(z) = z` or, with `value_rank = k > 0`,
  the low-rank trainable `V(z) = z (I_d + W_a W_b^T / d)`, `W_a, W_b (d, k)`
  (`W_b` starts at 0, so the value map starts at the identity).
* `LinearPositional`: the dense positional baseline `f_B(x) = B x`, `B (L, L)`
  (theory notes section 6; it ignores `p`).

The modules are thin: training (`phasejax.empirics.training`) splits them
with `nnx.split` into a static graph and a pytree of `nnx.Param`s and works on
that pytree, so runs vmap over seeds, `alpha` and `omega` like any pure
function. Inits (`positional_init`, `semantic_init`, `random_init`) are pure
functions of the data and a key.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from phasejax.theory.params import dot_product_attention

Array = jax.Array

STUDENTS = ("tied", "untied", "linear")
INITS = ("positional", "semantic", "random")


def _fields(x: Array, p: Array, W: Array) -> tuple[Array, Array]:
    """`xt = x + p (..., L, d)` and `xt W / sqrt(d) (..., L, r)`."""
    xt = x + p
    return xt, xt @ W / jnp.sqrt(xt.shape[-1])


class TiedAttention(nnx.Module):
    """Tied low-rank dot-product attention `S((x + p) Q / sqrt(d)) (x + p)` (theory notes, section 1).

    Args:
      Q0: `(d, r)` initial weights (see `positional_init`, `semantic_init`, `random_init`).
      attention: `S`, a map `(L, r) -> (L, L)` (default `softmax(H H^T)`, stable).
    """

    def __init__(self, Q0: Array, attention: Callable[[Array], Array] = dot_product_attention):
        self.Q = nnx.Param(jnp.asarray(Q0))
        self.attention = attention

    def attention_matrix(self, x: Array, p: Array) -> Array:
        """`S((x + p) Q / sqrt(d))`, shape `(..., L, L)`."""
        _, h = _fields(x, p, self.Q[...])
        return jnp.vectorize(self.attention, signature="(l,r)->(l,m)")(h)

    def __call__(self, x: Array, p: Array) -> Array:
        return self.attention_matrix(x, p) @ (x + p)


class UntiedAttention(nnx.Module):
    """Untied query/key attention with an optional low-rank trainable value map.

    Args:
      WQ0, WK0: `(d, r)` initial query and key weights.
      value_rank: `k >= 0`; with `k > 0` the value map is `z (I + W_a W_b^T / d)`.
      rngs: `nnx.Rngs` used for `W_a ~ N(0, 1)` when `value_rank > 0`.
    """

    def __init__(self, WQ0: Array, WK0: Array, value_rank: int = 0, rngs: nnx.Rngs | None = None):
        if WQ0.shape != WK0.shape:
            raise ValueError(f"WQ0 and WK0 must have the same shape, got {WQ0.shape} and {WK0.shape}")
        if value_rank < 0:
            raise ValueError(f"value_rank must be >= 0, got {value_rank}")
        self.WQ = nnx.Param(jnp.asarray(WQ0))
        self.WK = nnx.Param(jnp.asarray(WK0))
        self.value_rank = value_rank
        if value_rank:
            if rngs is None:
                raise ValueError("value_rank > 0 needs rngs to initialise the value weights")
            d = WQ0.shape[0]
            self.Wa = nnx.Param(jax.random.normal(rngs.params(), (d, value_rank), WQ0.dtype))
            self.Wb = nnx.Param(jnp.zeros((d, value_rank), WQ0.dtype))

    def attention_matrix(self, x: Array, p: Array) -> Array:
        """`softmax(H_Q H_K^T)`, `H = (x + p) W / sqrt(d)`, shape `(..., L, L)`."""
        _, hq = _fields(x, p, self.WQ[...])
        _, hk = _fields(x, p, self.WK[...])
        return jax.nn.softmax(hq @ jnp.swapaxes(hk, -1, -2), axis=-1)

    def __call__(self, x: Array, p: Array) -> Array:
        xt = x + p
        v = xt
        if self.value_rank:
            v = xt + (xt @ self.Wa[...]) @ self.Wb[...].T / xt.shape[-1]
        return self.attention_matrix(x, p) @ v


class LinearPositional(nnx.Module):
    """Dense positional baseline `f_B(x) = B x`, `B (L, L)` (theory notes, section 6)."""

    def __init__(self, B0: Array):
        self.B = nnx.Param(jnp.asarray(B0))

    def __call__(self, x: Array, p: Array) -> Array:
        del p
        return self.B[...] @ x


# ----------------------------------------------------------------------------
# Inits
# ----------------------------------------------------------------------------


def positional_init(u: Array, r: int, m0: float = 0.5) -> Array:
    """`Q (d, r)` along the positional directions: column `j` is `m0 sqrt(d) u_{j mod K}` (so `m = m0`)."""
    d = u.shape[1]
    cols = [u[j % u.shape[0]] for j in range(r)]
    return (m0 * np.sqrt(d)) * jnp.stack(cols, axis=1)


def semantic_init(Qstar: Array, r: int) -> Array:
    """The informed init `Q = Q*` (`theta0 = q0 = ||Q*||^2 / d`); columns beyond `t` are 0."""
    d, t = Qstar.shape
    if r <= t:
        return Qstar[:, :r]
    return jnp.concatenate([Qstar, jnp.zeros((d, r - t), Qstar.dtype)], axis=1)


def random_init(key: Array, d: int, r: int, scale: float = 0.1, dtype=jnp.float32) -> Array:
    """Small random `Q (d, r)` with iid `N(0, scale^2)` entries (drawn in float32, cast to `dtype`; `q0 ~ scale^2`, `m, theta0 ~ scale / sqrt(d)`)."""
    return scale * jax.random.normal(key, (d, r), jnp.float32).astype(dtype)


def init_weights(code: Array, key: Array, u: Array, Qstar: Array, r: int, *, m0: float = 0.5,
                 random_scale: float = 0.1) -> Array:
    """`Q0 (d, r)` for init code `0 positional / 1 semantic / 2 random` (`INITS` order); `code` may be traced."""
    d = u.shape[1]
    options = jnp.stack([positional_init(u, r, m0), semantic_init(Qstar, r),
                         random_init(key, d, r, random_scale, Qstar.dtype)])
    return options[code]


def make_student(kind: str, Q0: Array, *, L: int, value_rank: int = 0, key: Array | None = None,
                 attention: Callable[[Array], Array] = dot_product_attention) -> nnx.Module:
    """Build a student of `kind` in `STUDENTS` from query weights `Q0 (d, r)`.

    `"untied"` uses `W_Q = W_K = Q0` (the tied model's point, untied in training);
    `"linear"` ignores `Q0` and starts at `B = 0 (L, L)`.
    """
    if kind == "tied":
        return TiedAttention(Q0, attention)
    if kind == "untied":
        rngs = nnx.Rngs(params=key if key is not None else jax.random.PRNGKey(0))
        return UntiedAttention(Q0, Q0, value_rank, rngs)
    if kind == "linear":
        return LinearPositional(jnp.zeros((L, L), Q0.dtype))
    raise ValueError(f"student must be one of {STUDENTS}, got {kind!r}")


def query_weights(state) -> Array | None:
    """The `(d, r)` weights whose overlaps are reported: `Q` (tied), `W_Q` (untied), `None` (linear)."""
    for name in ("Q", "WQ"):
        if name in state:
            return state[name][...]
    return None
