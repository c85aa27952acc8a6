"""Deep tied rank-1 attention as a sequence multi-index model (docs/depth.md, section 1).

The network. A sequence `X (T, d)` of `T` tokens goes through `L` self-attention
layers with tied rank-1 weights `w_l (d,)` and skip strength `c`:

    X_0 = X,    X_l = [c I_T + softmax(X_{l-1} w_l w_l^T X_{l-1}^T / d)] X_{l-1},

and the output is the last layer's attention matrix
`y = softmax(X_{L-1} w_L w_L^T X_{L-1}^T / d)  (T, T)` (row-wise softmax).

The model. Every `X_l` is `X` multiplied on the left by a `T x T` matrix that
depends on `X` only through the projections `z_l = X w_l / sqrt(d)  (T,)`:
`X_{l-1} w_l / sqrt(d) = M_{l-1} z_l` with `M_0 = I`,
`M_l = (c I + softmax(h_l h_l^T)) M_{l-1}` and `h_l = M_{l-1} z_l`. So
`y = g(Z)` with `Z = (z_1, ..., z_L)  (L, T)`: a sequence multi-index model with
one index per layer. For `L = 2`, `h_1 = z_1` and `y = softmax(u u^T)` with the
*sequence index* `u = A(z_1) z_2`, `A(z) = c I + softmax(z z^T)`.

For `T = 2` the output determines `u` up to its sign (`sequence_index_from_output`);
the channel is deterministic and even in each layer's projection separately
(`softmax(h h^T)` is even in `h`), which makes the Bayes-optimal overlap matrix
diagonal (docs/depth.md, section 2).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def attention(h: Array) -> Array:
    """Row-wise `softmax(h h^T)` of a projection `h (..., T)`; returns `(..., T, T)`."""
    return jax.nn.softmax(h[..., :, None] * h[..., None, :], axis=-1)


def mixing_matrix(z: Array, skip) -> Array:
    """`A(z) = skip I + softmax(z z^T)`, `z (..., T)` -> `(..., T, T)`: one attention layer with its skip."""
    T = z.shape[-1]
    return skip * jnp.eye(T, dtype=z.dtype) + attention(z)


def sequence_index(Z: Array, skip) -> Array:
    """The last layer's projection `h_L (..., T)` of `Z (..., L, T)`: `h_1 = z_1`, `h_l = M_{l-1} z_l`.

    `M_l = A(h_l) M_{l-1}`; for `L = 2` this is `u = A(z_1) z_2`.
    """
    L = Z.shape[-2]
    T = Z.shape[-1]
    M = jnp.broadcast_to(jnp.eye(T, dtype=Z.dtype), Z.shape[:-2] + (T, T))
    h = Z[..., 0, :]
    for layer in range(1, L):
        M = mixing_matrix(h, skip) @ M
        h = jnp.einsum("...ij,...j->...i", M, Z[..., layer, :])
    return h


def model_output(Z: Array, skip) -> Array:
    """The sequence multi-index model `y = g(Z) = softmax(h_L h_L^T)`, `Z (..., L, T)` -> `(..., T, T)`."""
    return attention(sequence_index(Z, skip))


def network_output(X: Array, W: Array, skip) -> Array:
    """The attention network itself, `X (..., T, d)`, `W (L, d)` -> `y (..., T, T)` (module docstring).

    Computed layer by layer on the `d`-dimensional tokens, independently of
    `model_output`; the two agree (tested), which is the network -> model mapping.
    """
    d = X.shape[-1]
    L = W.shape[0]
    T = X.shape[-2]
    Xl = X
    for layer in range(L - 1):
        h = Xl @ W[layer] / jnp.sqrt(d)
        Xl = (skip * jnp.eye(T, dtype=X.dtype) + attention(h)) @ Xl
    return attention(Xl @ W[L - 1] / jnp.sqrt(d))


def sequence_index_from_output(y: Array) -> Array:
    """For `T = 2`: the `u (..., 2)` with `softmax(u u^T) = y (..., 2, 2)`; the other solution is `-u`.

    With `a = log(y_00 / y_01) = u_0 (u_0 - u_1)` and `b = log(y_11 / y_10) = u_1 (u_1 - u_0)`,
    `(u_0 - u_1)^2 = a + b`, so `u = (a, -b) / sqrt(a + b)` (the sign is the model's symmetry). Each log-ratio
    is read from both entries of its row, not as `logit(1 - y_01)`: where a row saturates (`y_00` rounds to 1),
    `1 - y_00` has lost the small entry that `y_01` still holds to full relative precision.
    """
    a = jnp.log(y[..., 0, 0]) - jnp.log(y[..., 0, 1])
    b = jnp.log(y[..., 1, 1]) - jnp.log(y[..., 1, 0])
    s = jnp.sqrt(jnp.maximum(a + b, jnp.finfo(y.dtype).tiny))
    return jnp.stack([a / s, -b / s], axis=-1)
