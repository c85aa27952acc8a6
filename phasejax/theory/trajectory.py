"""The state evolution as a dynamical system: its trajectory under damped iteration (to compare with GAMP).

`state_evolution_trajectory` iterates `x <- damping x + (1 - damping) F(x)`
from given overlaps, without subspace holds, and returns every iterate.
GAMP on finite data follows this trajectory iteration by iteration as
`d -> inf` (theory notes, section 7); with `damping = 0` the two iterations
are the same map.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from phasejax.precision import uses_float64
from phasejax.theory.fields import Overlaps
from phasejax.theory.params import TiedAttentionParams, validate_params
from phasejax.theory.branches import BranchInit
from phasejax.theory.se_map import MapApproximation, SEProblem, initial_warm, se_map
from phasejax.theory.solver import resolve_scheme


@functools.partial(jax.jit, static_argnames=("n_iter", "approximation"))
def _trajectory(params, init: Overlaps, scheme, n_iter: int, damping, approximation: MapApproximation) -> Overlaps:
    x0, unravel = ravel_pytree(init)
    no = jnp.asarray(False)
    problem = SEProblem(params, scheme, BranchInit(overlaps=init, hold_m=no, hold_theta=no), None, approximation)

    def body(carry, k):
        x, warm = carry
        ev = se_map(problem, x, warm, k % 2, extra_starts=True)
        nxt = damping * x + (1.0 - damping) * ev.Fx
        return (nxt, ev.h), nxt

    warm0 = initial_warm(params, scheme, init)
    _, traj = jax.lax.scan(body, (x0, warm0), jnp.arange(n_iter))
    return jax.vmap(unravel)(jnp.concatenate([x0[None], traj]))


@uses_float64
def state_evolution_trajectory(params: TiedAttentionParams, init: Overlaps, quadrature=None, n_iter: int = 30,
                               damping: float = 0.5, approximation: MapApproximation = MapApproximation()) -> Overlaps:
    """Damped SE iteration from `init` for `n_iter` steps; `Overlaps` with a leading axis `n_iter + 1` (init first)."""
    validate_params(params)
    if int(n_iter) != n_iter or n_iter < 1:
        raise ValueError(f"n_iter must be a positive integer, got {n_iter}")
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must lie in [0, 1), got {damping}")
    scheme = resolve_scheme(quadrature, params)
    return _trajectory(params, init, scheme, int(n_iter), jnp.asarray(damping, jnp.float64), approximation)
