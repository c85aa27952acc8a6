"""Gaussian quadrature rules for expectations over standard normal vectors (spec section 8).

A `Quadrature` holds `points` of shape `(N, D)` and `weights` of shape `(N,)`
summing to one, such that `E[g(z)] ~ sum_i weights[i] g(points[i])` for
`z ~ N(0, I_D)`. The state evolution draws `(xi, eta)` in `D = L (r + t)`
dimensions from one rule. Two rules share the interface:

* `gauss_hermite(dim, order)`: tensor Gauss-Hermite, exact for polynomials of
  degree `<= 2 order - 1` in each coordinate; `order ** dim` nodes, right for
  `dim <= 4` (spec section 8).
* `quasi_monte_carlo(dim, n_points)`: a fixed Halton sequence (deterministic,
  no seed) mapped through the normal quantile; error `~ log(N)^D / N`, for
  higher dimensions.

`default_quadrature(dim)` picks Gauss-Hermite with 10 nodes per dimension for
`dim <= 4` and 8192 Halton points beyond.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.scipy.special import ndtri

Array = jax.Array


@struct.dataclass
class Quadrature:
    """A quadrature rule for `N(0, I_D)`: `points (N, D)`, `weights (N,)`, sum of weights 1."""

    points: Array
    weights: Array

    @property
    def dim(self) -> int:
        return self.points.shape[-1]

    @property
    def size(self) -> int:
        return self.points.shape[-2]

    def expect(self, values: Array) -> Array:
        """`sum_i w_i values[i]` over the leading node axis of `values` `(N, ...)`."""
        return jnp.tensordot(self.weights, values, axes=1)


def gauss_hermite(dim: int, order: int) -> Quadrature:
    """Tensor-product Gauss-Hermite rule for `N(0, I_dim)` with `order` nodes per dimension.

    Returns `order ** dim` nodes (float64). Raises `ValueError` for `dim < 1`,
    `order < 1`, or more than 10 million nodes.
    """
    if int(dim) != dim or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim}")
    if int(order) != order or order < 1:
        raise ValueError(f"order (nodes per dimension) must be a positive integer, got {order}")
    if order**dim > 10_000_000:
        raise ValueError(
            f"gauss_hermite with order={order} in dim={dim} needs {order**dim} nodes; "
            "use quasi_monte_carlo for this dimension"
        )
    x, w = np.polynomial.hermite_e.hermegauss(int(order))  # weight exp(-x^2/2)
    w = w / w.sum()
    grids = np.meshgrid(*([x] * dim), indexing="ij")
    wgrids = np.meshgrid(*([w] * dim), indexing="ij")
    points = np.stack([g.ravel() for g in grids], axis=-1)
    weights = np.prod(np.stack([g.ravel() for g in wgrids], axis=-1), axis=-1)
    return Quadrature(points=jnp.asarray(points, jnp.float64), weights=jnp.asarray(weights, jnp.float64))


def _first_primes(n: int) -> list[int]:
    primes: list[int] = []
    k = 2
    while len(primes) < n:
        if all(k % p for p in primes):
            primes.append(k)
        k += 1
    return primes


def _radical_inverse(indices: np.ndarray, base: int) -> np.ndarray:
    result = np.zeros(indices.shape, dtype=np.float64)
    scale = 1.0 / base
    i = indices.copy()
    while np.any(i > 0):
        result += (i % base) * scale
        i //= base
        scale /= base
    return result


def quasi_monte_carlo(dim: int, n_points: int) -> Quadrature:
    """Fixed quasi-Monte-Carlo rule for `N(0, I_dim)`: Halton points through `ndtri`.

    Deterministic (the same rule every call); equal weights `1 / n_points`.
    The first 20 Halton points are skipped (the low-index points of large
    prime bases are strongly correlated).
    """
    if int(dim) != dim or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim}")
    if int(n_points) != n_points or n_points < 2:
        raise ValueError(f"n_points must be an integer >= 2, got {n_points}")
    idx = np.arange(20, 20 + int(n_points), dtype=np.int64)
    u = np.stack([_radical_inverse(idx, b) for b in _first_primes(dim)], axis=-1)
    points = ndtri(jnp.asarray(u, jnp.float64))
    weights = jnp.full((int(n_points),), 1.0 / n_points, dtype=jnp.float64)
    return Quadrature(points=points, weights=weights)


def default_quadrature(dim: int, order: int = 10, n_qmc: int = 8192) -> Quadrature:
    """Gauss-Hermite (`order` per dimension) for `dim <= 4`, else `n_qmc` Halton points."""
    if dim <= 4:
        return gauss_hermite(dim, order)
    return quasi_monte_carlo(dim, n_qmc)
