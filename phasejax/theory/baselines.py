"""Purely positional linear baseline `f_B(x) = B x` (docs/theory.md, section 6, the paper's Result 5.1).

In the limit the empirical minimiser equals the population one,
`B_hat = E[T(h*)]` with `h*_l ~ N(0, sigma_l^2 I_t)` independent, and
`L eps_lin = E tr[(T(h*) - B_hat) D (T(h*) - B_hat)^T]`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from phasejax.precision import uses_float64
from phasejax.theory.params import TiedAttentionParams, validate_params
from phasejax.theory.quadrature import Quadrature, default_quadrature

Array = jax.Array


def _target_at_nodes(params: TiedAttentionParams, quadrature: Quadrature) -> Array:
    L, t = params.L, params.t

    def node(z):
        hstar = params.sigma[:, None] * z.reshape(L, t)
        return params.target(hstar, params)

    return jax.vmap(node)(quadrature.points)  # (N, L, L)


@uses_float64
def linear_baseline_weights(params: TiedAttentionParams, quadrature: Quadrature | None = None) -> Array:
    """`B_hat = E[T(h*)]`, shape `(L, L)` (theory notes, section 6)."""
    validate_params(params)
    quadrature = default_quadrature(params.L * params.t) if quadrature is None else quadrature
    return quadrature.expect(_target_at_nodes(params, quadrature))


@uses_float64
def linear_baseline_error(params: TiedAttentionParams, quadrature: Quadrature | None = None) -> Array:
    """Test error `eps_lin` of the optimal positional linear model, shape `()` (docs/theory.md, section 6).

    `quadrature` is over `h*` only, in `L t` dimensions (default: 10
    Gauss-Hermite nodes per dimension). Vanishes at `omega = 1`.
    """
    validate_params(params)
    quadrature = default_quadrature(params.L * params.t) if quadrature is None else quadrature
    if quadrature.dim != params.L * params.t:
        raise ValueError(f"quadrature has dimension {quadrature.dim}, but L t = {params.L * params.t}")
    T = _target_at_nodes(params, quadrature)
    B = quadrature.expect(T)
    diff = T - B[None]
    per_node = jnp.sum(diff**2 * (params.sigma**2)[None, None, :], axis=(1, 2))
    return quadrature.expect(per_node) / params.L
