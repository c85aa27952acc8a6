"""Finite-size data of the tied-attention model (spec section 1), from a `jax.random` key.

`generate_data(key, params, d, n)` draws tokens `x (n, L, d)` with rows
`x_l ~ N(0, sigma_l^2 I_d)`, teacher weights `Q* (d, t)` with iid `N(0, 1)`
entries, positional encodings `p = C u (L, d)` with orthonormal `u (K, d)`
(the paper's `u = 1_d / sqrt(d)` for `K = 1`) and labels
`y = T(x Q* / sqrt(d)) x (n, L, d)`. Pure and jittable (`d`, `n` static).

Sample `mu` is drawn from `fold_in(key_x, mu)`, so the first `n` samples of a
data set do not depend on how many are drawn: a data set padded to `n_max`
samples and masked down to `n` is exactly the unpadded one (what the vmapped
sweeps over `alpha` rely on).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
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


def sample_count(alpha: float, d: int) -> int:
    """`n = round(alpha d)`; raises `ValueError` when it is below 1 (`alpha d < 1`)."""
    a = float(alpha)
    if not np.isfinite(a) or a <= 0:
        raise ValueError(f"alpha must be finite and > 0, got alpha={alpha}")
    n = int(round(a * d))
    if a * d < 1 or n < 1:
        raise ValueError(f"alpha * d must be >= 1 (at least one sample), got alpha={alpha}, d={d}")
    return n


def sample_tokens(key: Array, sigma: Array, d: int, n: int) -> Array:
    """Tokens `x (n, L, d)`, `x_l ~ N(0, sigma_l^2 I_d)`; sample `mu` from `fold_in(key, mu)` (prefix-stable)."""
    z = jax.vmap(lambda i: jax.random.normal(jax.random.fold_in(key, i), (sigma.shape[-1], d), jnp.float64))(
        jnp.arange(n))
    return sigma[None, :, None] * z


def teacher_labels(x: Array, Qstar: Array, params: TiedAttentionParams) -> Array:
    """`y = T(x Q* / sqrt(d)) x`, shape `(n, L, d)` for `x (n, L, d)`, `Q* (d, t)` (spec section 1)."""
    hstar = jnp.einsum("nld,dt->nlt", x, Qstar) / jnp.sqrt(x.shape[-1])
    T = jax.vmap(lambda h: params.target(h, params))(hstar)
    return jnp.einsum("nij,njd->nid", T, x)


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
    del L
    k_x, k_q = jax.random.split(key)
    x = sample_tokens(k_x, params.sigma, d, n)
    Qstar = jax.random.normal(k_q, (d, t), jnp.float64)
    u = positional_directions(d, params.K)
    return TiedAttentionData(x=x, y=teacher_labels(x, Qstar, params), p=params.C @ u, u=u, Qstar=Qstar)


def check_data(data: TiedAttentionData, params: TiedAttentionParams | None = None) -> TiedAttentionData:
    """Raise `ValueError` on mismatched shapes or non-finite entries (when concrete); returns `data`."""
    x, y, p, u, Qstar = data.x, data.y, data.p, data.u, data.Qstar
    if x.ndim != 3:
        raise ValueError(f"x must have shape (n, L, d), got {x.shape}")
    n, L, d = x.shape
    if y.shape != x.shape:
        raise ValueError(f"y must have the shape of x {x.shape}, got {y.shape}")
    if p.shape != (L, d):
        raise ValueError(f"p must have shape (L, d) = ({L}, {d}), got {p.shape}")
    if u.ndim != 2 or u.shape[1] != d:
        raise ValueError(f"u must have shape (K, d) with d={d}, got {u.shape}")
    if Qstar.ndim != 2 or Qstar.shape[0] != d:
        raise ValueError(f"Qstar must have shape (d, t) with d={d}, got {Qstar.shape}")
    if params is not None:
        if params.L != L:
            raise ValueError(f"data has L={L} tokens but params has L={params.L}")
        if params.K != u.shape[0] or params.t != Qstar.shape[1]:
            raise ValueError(f"data has K={u.shape[0]}, t={Qstar.shape[1]}; params has K={params.K}, t={params.t}")
    for name, arr in (("x", x), ("y", y), ("p", p), ("u", u), ("Qstar", Qstar)):
        if not isinstance(arr, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(arr))):
            raise ValueError(f"data.{name} holds NaN or inf entries")
    return data


def overlaps(Q: Array, u: Array, Qstar: Array) -> dict[str, Array]:
    """Overlaps of a student `Q (d, r)`: `q0 = Q^T Q / d`, `m = u Q / sqrt(d) (K, r)`, `theta0 = Q*^T Q / d`."""
    d = Q.shape[0]
    return dict(q0=Q.T @ Q / d, m=u @ Q / jnp.sqrt(d), theta0=Qstar.T @ Q / d)


def overlaps_of(Q: Array, data: TiedAttentionData) -> dict[str, Array]:
    """`overlaps` with the positional directions and teacher of `data`."""
    return overlaps(Q, data.u, data.Qstar)
