"""Fixed-point census: every fixed point a subspace holds, not just the one an init happens to reach.

An invariant subspace of the state evolution (positional: `theta0 = 0`;
semantic: `m = 0` in the token-swap-symmetric problem) can hold several
fixed points at one `(alpha, omega)`: at `omega = 0`, `alpha = 0.6` the
positional subspace of the paper's setting holds three (`m` about 0.16,
0.085 and 0.016). `fixed_point_census` solves from several seeds (each
with the continuation-friendly pseudo-transient method, which reaches fixed
points a damped iteration can reach, and with plain Newton, which also finds
unstable ones), merges duplicates, and reports all distinct fixed points
with their training loss `e_t` and stability; the *branch* is the
lowest-`e_t` converged fixed point.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.flatten_util import ravel_pytree

from phasejax.precision import uses_float64
from phasejax import xla
from phasejax.theory.params import TiedAttentionParams, validate_params
from phasejax.theory.results import SEResult
from phasejax.theory.branches import BranchInit, branch_init, stack_inits
from phasejax.theory.solver import MapApproximation, SEConfig, map_points, resolve_scheme, solve_jit

Array = jax.Array

CENSUS_SEEDS = {
    # per-token (q, m, V, theta) seeds spanning each subspace, from large to small overlaps
    "positional": ((0.02, 0.20, 14.6, 0.0), (0.03, 0.30, 14.6, 0.0), (0.008, 0.08, 14.6, 0.0),
                   (0.002, 0.02, 14.6, 0.0)),
    "semantic": ((0.9, 0.0, 14.6, 0.35), (0.2, 0.0, 14.6, 0.15), (0.03, 0.0, 14.6, 0.04)),
    "agnostic": ((0.02, 0.0, 14.6, 0.0),),
}


def census_seeds(branch: str, params: TiedAttentionParams, seeds=None) -> BranchInit:
    """Stacked `BranchInit`s (leading axis `K`) of the subspace of `branch`, from per-token `(q, m, V, theta)` tuples.

    Default seeds: `CENSUS_SEEDS[branch]` (the first is the branch's default init).
    """
    seeds = CENSUS_SEEDS[branch] if seeds is None else seeds
    if len(seeds) == 0:
        raise ValueError("seeds must hold at least one (q, m, V, theta) tuple")
    s2 = float(np.mean(np.asarray(params.sigma) ** 2))
    r, t, K = params.r, params.t, params.K
    inits = []
    for seed in seeds:
        if len(seed) != 4:
            raise ValueError(f"each seed is a per-token (q, m, V, theta) tuple, got {seed!r}")
        q, m, V, th = (float(v) for v in seed)
        inits.append(branch_init(branch, params, q0=q / s2 * np.eye(r), m=m * np.eye(K, r), V0=V / s2 * np.eye(r),
                                 theta0=th / s2 * np.eye(t, r)))
    return stack_inits(inits)


@struct.dataclass
class FixedPointCensus:
    """All fixed points found in one subspace at one point.

    Attributes:
      results: `SEResult` with a leading axis `S` (one per solve: seeds x methods).
      distinct: `(S,)` bool, a converged fixed point not equal to an earlier one.
      branch_index: `()` the lowest-`e_t` distinct fixed point (the branch), -1 if none converged.
      n_distinct: `()`.
    """

    results: SEResult
    distinct: Array
    branch_index: Array
    n_distinct: Array

    @property
    def branch(self) -> SEResult:
        """The `SEResult` of the branch (the lowest-`e_t` converged fixed point)."""
        i = jnp.maximum(self.branch_index, 0)
        return jax.tree_util.tree_map(lambda x: x[i], self.results)


def dedupe(results: SEResult, rtol: float = 1e-4) -> tuple[Array, Array]:
    """`(distinct (S,), branch_index ())` of a stack of results (leading axis `S`).

    Two converged fixed points are the same when every overlap agrees within
    `rtol * max(1, |x|)`; the branch is the distinct one with the lowest `e_t`.
    """
    X = jax.vmap(lambda ov: ravel_pytree(ov)[0])(results.overlaps)
    ok = results.converged & jnp.isfinite(results.train_loss)
    S = X.shape[0]
    scale = jnp.maximum(1.0, jnp.maximum(jnp.abs(X)[:, None], jnp.abs(X)[None, :]))
    same = jnp.all(jnp.abs(X[:, None] - X[None, :]) <= rtol * scale, axis=-1)
    earlier = jnp.tril(jnp.ones((S, S), bool), -1)
    dup = jnp.any(same & earlier & ok[None, :], axis=1)
    distinct = ok & ~dup
    e = jnp.where(distinct, results.train_loss, jnp.inf)
    branch = jnp.where(jnp.any(distinct), jnp.argmin(e), -1)
    return distinct, branch


def _census(params, inits: BranchInit, scheme, config: SEConfig, approximation: MapApproximation, newton_too: bool,
            batch_size="auto"):
    # pseudo-transient (config.kappa) solves, then plain Newton (kappa = 0) ones: one compiled solve, kappa traced
    n = jax.tree_util.tree_leaves(inits.overlaps)[0].shape[0]
    kappas = [jnp.full((n,), config.kappa)] + ([jnp.zeros((n,))] if newton_too else [])
    inits = jax.tree_util.tree_map(lambda x: jnp.concatenate([x] * len(kappas)), inits)
    results = map_points(lambda ik: solve_jit(params, ik[0], scheme, config, approximation, kappa=ik[1])[0],
                         (inits, jnp.concatenate(kappas)), batch_size)
    distinct, branch = dedupe(results)
    return FixedPointCensus(results=results, distinct=distinct, branch_index=branch, n_distinct=jnp.sum(distinct))


census_jit = xla.jit(_census, static_argnames=("config", "approximation", "newton_too", "batch_size"), store=True)


@uses_float64
def fixed_point_census(params: TiedAttentionParams, branch: str = "positional", seeds=None, quadrature=None,
                       config: SEConfig = SEConfig(), newton_too: bool = True,
                       batch_size: int | str = "auto",
                       approximation: MapApproximation = MapApproximation()) -> FixedPointCensus:
    """Solve the subspace of `branch` from every seed (`census_seeds`), with pseudo-transient continuation and
    (with `newton_too`) plain Newton; merge duplicates; the branch is the lowest-`e_t` fixed point.

    The solves go through `map_points` (`batch_size`: `"auto"` is one at a time on a CPU, all side by side on
    an accelerator; see `solve_state_evolution_batch`); a bad `batch_size` raises while tracing, before any
    solve runs.

    Example (the three positional fixed points at `omega = 0`, `alpha = 0.6`):
      >>> from phasejax.theory import make_params, fixed_point_census
      >>> c = fixed_point_census(make_params(0.6, 0.0), "positional")      # doctest: +SKIP
      >>> int(c.n_distinct), c.results.m[c.distinct, 0, 0]                    # doctest: +SKIP
    """
    validate_params(params)
    inits = census_seeds(branch, params, seeds)
    scheme = resolve_scheme(quadrature, params)
    return census_jit(params, inits, scheme, config, approximation, newton_too, batch_size)
