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
from phasejax.theory.state_evolution import Overlaps, test_error

Array = jax.Array


def test_error_from_overlaps(q0: Array, m: Array, theta0: Array, params: TiedAttentionParams,
                             quadrature: Quadrature, rho0: Array | None = None) -> Array:
    """`eps_g` of a student with overlaps `q0 (r, r)`, `m (K, r)`, `theta0 (t, r)` (spec section 5).

    `rho0 (t, t)` is the teacher's `Q*^T Q* / d` (default `I_t`, the `d -> inf` value); see
    `phasejax.theory.state_evolution.test_error`.
    """
    ov = Overlaps(q0=q0, m=m, V0=jnp.eye(params.r, dtype=q0.dtype), theta0=theta0)
    return test_error(ov, params, quadrature, rho0)


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
