"""Linear algebra for the tiny matrices of per-node problems (`n = L r`, usually 2).

Batched LAPACK calls on millions of 2 x 2 matrices are slow on CPU; these
use closed forms for `n <= 2` and fall back to `jnp.linalg` beyond.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def min_eigenvalue(H: Array) -> Array:
    """Smallest eigenvalue of a symmetric `(n, n)` matrix, shape `()`."""
    n = H.shape[-1]
    if n == 1:
        return H[0, 0]
    if n == 2:
        a, b, c = H[0, 0], 0.5 * (H[0, 1] + H[1, 0]), H[1, 1]
        return 0.5 * (a + c) - jnp.sqrt(0.25 * (a - c) ** 2 + b**2)
    return jnp.linalg.eigvalsh(H)[0]


def solve(A: Array, B: Array) -> Array:
    """`A^{-1} B` for `A (n, n)` and `B (n,)` or `(n, k)`."""
    n = A.shape[-1]
    if n == 1:
        return B / A[0, 0]
    if n == 2:
        det = A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]
        adj = jnp.array([[A[1, 1], -A[0, 1]], [-A[1, 0], A[0, 0]]])
        return (adj @ B) / det
    return jnp.linalg.solve(A, B)
