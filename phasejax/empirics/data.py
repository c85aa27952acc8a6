"""Finite-size data of the tied-attention model (spec section 1), from a `jax.random` key.

`generate_data(key, params, d, n)` draws tokens `x (n, L, d)` with rows
`x_l ~ N(0, sigma_l^2 I_d)`, teacher weights `Q* (d, t)` with iid `N(0, 1)`
entries, positional encodings `p = C u (L, d)` with orthonormal `u (K, d)`
(the paper's `u = 1_d / sqrt(d)` for `K = 1`) and labels
`y = T(x Q* / sqrt(d)) x (n, L, d)`. Pure and jittable (`d`, `n` static).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from phasejax.theory.params import TiedAttentionParams, validate_params

Array = jax.Array


@struct.dataclass
class TiedAttentionData:
    """A finite-size data set: `x (n, L, d)`, `y (n, L, d)`, `p (L, d)`, `u (K, d)`, `Qstar (d, t)`."""

    x: Array
    y: Array
    p: Array
    u: Array
    Qstar: Array

    @property
    def n(self) -> int:
        return self.x.shape[0]

    @property
    def d(self) -> int:
        return self.x.shape[-1]


def positional_directions(d: int, K: int, dtype=jnp.float64) -> Array:
    """Orthonormal `u (K, d)`: `u_1 = 1_d / sqrt(d)` (the paper's), then alternating-sign and cosine patterns."""
    if K < 1 or K > d:
        raise ValueError(f"need 1 <= K <= d, got K={K}, d={d}")
    i = jnp.arange(d, dtype=dtype)
    cols = [jnp.ones(d, dtype)] + [jnp.cos(jnp.pi * k * (i + 0.5) / d) for k in range(1, K)]
    basis, _ = jnp.linalg.qr(jnp.stack(cols, axis=1))
    u = basis.T * jnp.sign(basis[0])[:, None]   # first direction +1_d/sqrt(d)
    return u.astype(dtype)


def generate_data(key: Array, params: TiedAttentionParams, d: int, n: int) -> TiedAttentionData:
    """Draw a data set of `n` sequences in dimension `d` (spec section 1).

    `params.alpha` is ignored (use `n = alpha d`); `omega`, `sigma`, `A`, `C`,
    `t` and the target come from `params`.
    """
    if int(d) != d or d < 1:
        raise ValueError(f"d must be a positive integer, got {d}")
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer (n = alpha d >= 1), got {n}")
    validate_params(params.replace(alpha=jnp.asarray(1.0)))
    L, t = params.L, params.t
    k_x, k_q = jax.random.split(key)
    x = params.sigma[None, :, None] * jax.random.normal(k_x, (n, L, d), jnp.float64)
    Qstar = jax.random.normal(k_q, (d, t), jnp.float64)
    u = positional_directions(d, params.K)
    p = params.C @ u
    hstar = jnp.einsum("nld,dt->nlt", x, Qstar) / jnp.sqrt(d)
    T = jax.vmap(lambda h: params.target(h, params))(hstar)
    y = jnp.einsum("nij,njd->nid", T, x)
    return TiedAttentionData(x=x, y=y, p=p, u=u, Qstar=Qstar)


def overlaps_of(Q: Array, data: TiedAttentionData) -> dict[str, Array]:
    """Overlaps of a student `Q (d, r)`: `q0 = Q^T Q / d`, `m = u Q / sqrt(d) (K, r)`, `theta0 = Q*^T Q / d`."""
    d = Q.shape[0]
    return dict(q0=Q.T @ Q / d, m=data.u @ Q / jnp.sqrt(d), theta0=data.Qstar.T @ Q / d)
