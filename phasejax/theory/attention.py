"""The attention maps of the model (docs/theory.md, section 1): the row-wise softmax of dot products, the tied
student and the paper's mixed target. Plain functions `fn(H, params) -> (L, L)` (they read array fields of the
parameters, never import them)."""

from __future__ import annotations

import jax

Array = jax.Array


def dot_product_attention(H: Array) -> Array:
    """Row-wise softmax of `H H^T` for `H` of shape `(L, k)`; stable (max-subtracted)."""
    return jax.nn.softmax(H @ H.T, axis=-1)


def mixed_target(hstar: Array, params: "TiedAttentionParams") -> Array:
    """Paper's target `T(H) = (1 - omega) softmax(H H^T) + omega A`, shape `(L, L)`."""
    return (1.0 - params.omega) * dot_product_attention(hstar) + params.omega * params.A


def dot_product_student(h: Array, params: "TiedAttentionParams") -> Array:
    """Tied dot-product attention student `S(H) = softmax(H H^T)`, shape `(L, L)`."""
    del params
    return dot_product_attention(h)
