"""Metrics of a trained student: overlaps, fresh-sample test error and the test error its overlaps predict.

`test_error_from_overlaps` is spec section 5 evaluated at a student's
finite-`d` overlaps `(q0, m, theta0)` and the teacher's actual norm
`rho0 = Q*^T Q* / d`: for fresh tokens the fields `h = (x + p) Q / sqrt(d)` and
`h* = x Q* / sqrt(d)` are exactly jointly Gaussian with those second moments,
so the estimator is exact up to the `O(1/d)` concentration of `x_l . x_k / d`
(and needs no test set).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from phasejax.theory.params import TiedAttentionParams
from phasejax.theory.quadrature import Quadrature
from phasejax.theory.state_evolution import Overlaps, field_maps, gaussian_fields, sample_loss, split_node

Array = jax.Array


def _sym_power(M: Array, power: float) -> Array:
    evals, evecs = jnp.linalg.eigh(0.5 * (M + M.T))
    return (evecs * jnp.clip(evals, 1e-300, None) ** power) @ evecs.T


def test_error_from_overlaps(q0: Array, m: Array, theta0: Array, params: TiedAttentionParams,
                             quadrature: Quadrature, rho0: Array | None = None) -> Array:
    """`eps_g` of a student with overlaps `q0 (r, r)`, `m (K, r)`, `theta0 (t, r)` (spec section 5).

    `rho0 (t, t)` is the teacher's `Q*^T Q* / d` (default `I_t`, the `d -> inf` value).
    The teacher field is written `h* = rho0^{1/2} h*'` with `h*'` of unit
    covariance, so the spec's field maps apply to `theta0' = rho0^{-1/2} theta0`.
    """
    t = params.t
    rho0 = jnp.eye(t, dtype=q0.dtype) if rho0 is None else rho0
    theta_n = _sym_power(rho0, -0.5) @ theta0
    sqrt_rho = _sym_power(rho0, 0.5)
    ov = Overlaps(q0=q0, m=m, V0=jnp.eye(params.r, dtype=q0.dtype), theta0=theta_n)
    maps = field_maps(ov, params)

    def node(z):
        xi, eta = split_node(z, params)
        h, hstar = gaussian_fields(maps, params, xi, eta)
        return 2.0 * sample_loss(h, params.target(hstar @ sqrt_rho, params), params)

    return quadrature.expect(jax.vmap(node)(quadrature.points)) / params.L


test_error_from_overlaps.__test__ = False  # not a pytest test


def fresh_test_error(model_fn, x: Array, y: Array, p: Array) -> Array:
    """`1/(d L n) sum ||y - f(x)||^2` over a fresh test set `x, y (n, L, d)` (spec section 1)."""
    pred = model_fn(x, p)
    return jnp.mean((y - pred) ** 2)


SOLUTIONS = ("positional", "semantic", "neither")


def classify_solution(cos_m: Array, cos_theta: Array, threshold: float = 0.5) -> Array:
    """Kind of a trained student from its direction cosines; codes index `SOLUTIONS`.

    `cos_m = |u_1 . Q| / ||Q||` (alignment with the positional direction) and
    `cos_theta = |Q* . Q| / (||Q*|| ||Q||)` (alignment with the teacher), for
    `r = t = K = 1`. Positional (0) if `cos_m` exceeds `threshold` and
    `cos_theta`, semantic (1) in the mirror case, neither (2) otherwise. At the
    SE fixed points of the paper's setting `cos_m ~ 0.6` (positional) and
    `cos_theta ~ 0.94` (semantic), the other cosine `O(d^-1/2)`.
    """
    positional = (cos_m > threshold) & (cos_m > cos_theta)
    semantic = (cos_theta > threshold) & (cos_theta >= cos_m)
    return jnp.where(positional, 0, jnp.where(semantic, 1, 2))
