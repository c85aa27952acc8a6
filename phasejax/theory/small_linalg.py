"""Linear algebra for the tiny matrices of per-node problems (`n = L r`, usually 2).

Batched LAPACK calls on millions of 2 x 2 matrices are slow on CPU, and a
product of 2 x 2 matrices under `vmap` becomes a batched `dot` that XLA does
not fuse with the arithmetic around it (one more kernel to compile and run);
these use closed forms written component by component for `n <= 2` and fall
back to `jnp.linalg` beyond.
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
        return jnp.stack([A[1, 1] * B[0] - A[0, 1] * B[1], A[0, 0] * B[1] - A[1, 0] * B[0]]) / det
    return jnp.linalg.solve(A, B)


def dot(a: Array, b: Array) -> Array:
    """`a . b` for vectors `(n,)`, written out for `n <= 4`."""
    n = a.shape[-1]
    if n <= 4:
        out = a[0] * b[0]
        for i in range(1, n):
            out = out + a[i] * b[i]
        return out
    return a @ b


def inv(A: Array) -> Array:
    """`A^{-1}` for a square `A (n, n)`, written out for `n <= 2`."""
    n = A.shape[-1]
    if n == 1:
        return 1.0 / A
    if n == 2:
        det = A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]
        return jnp.stack([jnp.stack([A[1, 1], -A[0, 1]]), jnp.stack([-A[1, 0], A[0, 0]])]) / det
    return jnp.linalg.inv(A)


def eigh(M: Array) -> tuple[Array, Array]:
    """`jnp.linalg.eigh` of a symmetric `M (n, n)`, without a library call for `n = 1`."""
    if M.shape[-1] == 1:
        return M[0], jnp.ones_like(M)
    return jnp.linalg.eigh(M)
