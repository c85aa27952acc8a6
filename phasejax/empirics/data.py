"""Finite-size data of the tied-attention model (theory notes, section 1), from a `jax.random` key.

`generate_data(key, params, d, n, dtype=float32)` draws tokens `x (n, L, d)`
with rows `x_l ~ N(0, sigma_l^2 I_d)`, teacher weights `Q* (d, t)` with iid
`N(0, 1)` entries, positional encodings `p = C u (L, d)` with orthonormal
`u (K, d)` (the paper's `u = 1_d / sqrt(d)` for `K = 1`) and labels
`y = T(x Q* / sqrt(d)) x (n, L, d)`. It is the one function that draws data:
the training sweeps call it with the data key of `run_keys(seed)`, so
`generate_data(run_keys(seed)["data"], params, d, n)` is exactly the data set
of seed `seed` in `phasejax.empirics.train_students` (its first `n` samples).

Keys: `key` is split into `(k_x, k_q)` (tokens, teacher); sample `mu` is
drawn from `fold_in(k_x, mu)`, so the first `n` samples of a data set do not
depend on how many are drawn: a data set padded to `n_max` samples and masked
down to `n` is exactly the unpadded one (what the vmapped sweeps over `alpha`
rely on).

Precision: arrays are created in `dtype` (default float32, the right choice
on accelerators). Random numbers are always drawn in float32 and cast
(`standard_normal`), so a float64 data set is the float32 one of the same key,
exactly. With `dtype=jnp.float64` the function runs inside
`phasejax.precision.dtype_scope(dtype)`; keep computing on the result inside
`phasejax.float64_scope()` to stay in float64 (outside a float64 scope JAX
computes in float32).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.precision import check_float_dtype, dtype_scope
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


def check_positive_int(value, name: str) -> int:
    """`int(value)` if `value` is an integer >= 1 (not a bool, not 2.5), else `ValueError` naming `name`."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, float, np.floating)):
        raise ValueError(f"{name} must be a positive integer, got {name}={value!r}")
    if not np.isfinite(value) or int(value) != value or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {name}={value!r}")
    return int(value)


def cast_params(params: TiedAttentionParams, dtype) -> TiedAttentionParams:
    """`params` with every array field (`alpha, omega, lam, sigma, A, C`) in `dtype` (static fields kept).

    The theory builds float64 parameters; empirics computing in float32 cast
    them once here instead of mixing precisions.
    """
    dtype = check_float_dtype(dtype)
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a).astype(dtype), params)


def run_keys(seed) -> dict[str, Array]:
    """The keys of training run `seed` (int, may be traced): `data`, `test`, `init`.

    `data` goes to `generate_data` (tokens and teacher), `test` draws the fresh
    test tokens, `init` the random init. The same seed gives the same data
    set in every function of `phasejax.empirics`.
    """
    k_data, k_test, k_init = jax.random.split(jax.random.PRNGKey(seed), 3)
    return dict(data=k_data, test=k_test, init=k_init)


def positional_directions(d: int, K: int, dtype=jnp.float32) -> Array:
    """Orthonormal `u (K, d)`: `u_1 = 1_d / sqrt(d)` (the paper's), then cosine patterns, orthonormalised.

    Built in numpy float64 (exact to rounding) and returned in `dtype`.
    """
    d = check_positive_int(d, "d")
    K = check_positive_int(K, "K")
    if K > d:
        raise ValueError(f"K (positional directions) must be <= d, got K={K}, d={d}")
    i = np.arange(d, dtype=np.float64)
    cols = [np.ones(d)] + [np.cos(np.pi * k * (i + 0.5) / d) for k in range(1, K)]
    basis, _ = np.linalg.qr(np.stack(cols, axis=1))
    u = basis.T * np.sign(basis[0])[:, None]   # first direction +1_d/sqrt(d)
    return jnp.asarray(u, check_float_dtype(dtype))


def sample_count(alpha: float, d: int) -> int:
    """`n = round(alpha d)`; raises `ValueError` when it is below 1 (`alpha d < 1`)."""
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise ValueError(f"alpha must be a finite number > 0, got alpha={alpha!r}") from None
    if not np.isfinite(a) or a <= 0:
        raise ValueError(f"alpha must be finite and > 0, got alpha={alpha}")
    d = check_positive_int(d, "d")
    n = int(round(a * d))
    if a * d < 1 or n < 1:
        raise ValueError(f"alpha * d must be >= 1 (at least one sample), got alpha={alpha}, d={d}")
    return n


def checked_size(alphas, d) -> int:
    """`d` checked as a positive integer at which every `alpha` of a grid gives at least one sample
    (`sample_count`); returns it as an `int`."""
    d = check_positive_int(d, "d")
    for a in alphas:
        sample_count(a, d)
    return d


def standard_normal(key: Array, shape: tuple, dtype=jnp.float32) -> Array:
    """iid `N(0, 1)` entries drawn in float32 and returned in `dtype`.

    JAX draws different numbers for different dtypes from one key; drawing in
    float32 always makes a float64 run see exactly the (rounded) data of the
    float32 run with the same seed, so the two precisions can be compared run
    by run.
    """
    return jax.random.normal(key, shape, jnp.float32).astype(check_float_dtype(dtype))


def sample_tokens(key: Array, sigma: Array, d: int, n: int, dtype=jnp.float32) -> Array:
    """Tokens `x (n, L, d)`, `x_l ~ N(0, sigma_l^2 I_d)` in `dtype`; sample `mu` from `fold_in(key, mu)` (prefix-stable)."""
    sigma = jnp.asarray(sigma).astype(dtype)
    z = jax.vmap(lambda i: standard_normal(jax.random.fold_in(key, i), (sigma.shape[-1], d), dtype))(
        jnp.arange(n))
    return sigma[None, :, None] * z


def teacher_labels(x: Array, Qstar: Array, params: TiedAttentionParams) -> Array:
    """`y = T(x Q* / sqrt(d)) x`, shape `(n, L, d)` for `x (n, L, d)`, `Q* (d, t)` (theory notes, section 1)."""
    hstar = jnp.einsum("nld,dt->nlt", x, Qstar) / jnp.sqrt(jnp.asarray(x.shape[-1], x.dtype))
    T = jax.vmap(lambda h: params.target(h, params))(hstar)
    return jnp.einsum("nij,njd->nid", T, x)


def generate_data(key: Array, params: TiedAttentionParams, d: int, n: int, *,
                  dtype=jnp.float32) -> TiedAttentionData:
    """Draw a data set of `n` sequences in dimension `d` (theory notes, section 1), arrays in `dtype`.

    `params.alpha` is ignored (use `n = alpha d`, `sample_count`); `omega`,
    `sigma`, `A`, `C`, `t` and the target come from `params`. Pure and
    jittable (`d`, `n`, `dtype` static); `omega` may be traced.

    Example:
      >>> import jax
      >>> from phasejax.theory import make_params
      >>> data = generate_data(jax.random.PRNGKey(0), make_params(1.0, 0.3), d=50, n=20)
      >>> data.x.shape, data.x.dtype
      ((20, 2, 50), dtype('float32'))
    """
    d = check_positive_int(d, "d")
    n = check_positive_int(n, "n")
    dtype = check_float_dtype(dtype)
    validate_params(params.replace(alpha=jnp.ones_like(params.alpha)))
    with dtype_scope(dtype):
        params = cast_params(params, dtype)
        k_x, k_q = jax.random.split(key)
        x = sample_tokens(k_x, params.sigma, d, n, dtype)
        Qstar = standard_normal(k_q, (d, params.t), dtype)
        u = positional_directions(d, params.K, dtype)
        return TiedAttentionData(x=x, y=teacher_labels(x, Qstar, params), p=params.C @ u, u=u, Qstar=Qstar)


def teacher_norm(seed, d: int, t: int = 1) -> Array:
    """`tr(Q*^T Q*) / (d t)` of run `seed`'s teacher, shape `()` float32 (mean 1, standard deviation
    `sqrt(2 / (d t))`).

    Draws only the teacher, with the keys `generate_data(run_keys(seed)["data"], ...)` uses, so it equals
    `jnp.sum(data.Qstar ** 2) / (d t)` of every run of `seed` at size `d` (any `alpha`, `L`, dtype: the teacher is
    drawn in float32 first) without building the tokens. `seed` may be traced (vmap over seeds); `d`, `t` static.
    Used as a control variate for seed means (`phasejax.empirics.teacher_adjusted_mean`).
    """
    d = check_positive_int(d, "d")
    t = check_positive_int(t, "t")
    _, k_q = jax.random.split(run_keys(seed)["data"])
    Qstar = standard_normal(k_q, (d, t), jnp.float32)
    return jnp.sum(Qstar**2) / (d * t)


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
    return dict(q0=Q.T @ Q / d, m=u @ Q / jnp.sqrt(jnp.asarray(d, Q.dtype)), theta0=Qstar.T @ Q / d)


def overlaps_of(Q: Array, data: TiedAttentionData) -> dict[str, Array]:
    """`overlaps` with the positional directions and teacher of `data`."""
    return overlaps(Q, data.u, data.Qstar)
