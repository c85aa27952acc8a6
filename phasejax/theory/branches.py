"""Branches of the state evolution: where a solve starts and which invariant subspace it stays in.

A branch is a start (`Overlaps`) and the order parameters held at zero throughout: `theta0` on the positional
branch (invariant for a target even in `h*`), `m` on the semantic one where the problem is token-swap
symmetric, both on the agnostic one (`branch_init`). `BranchInit`s are arrays, so inits of several branches or
census seeds stack (`stack_inits`) and vmap; `free_mask` says which coordinates of the flattened overlaps a
solve moves.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from phasejax.theory.fields import Overlaps
from phasejax.theory.params import TiedAttentionParams, token_swap_symmetric

Array = jax.Array

BRANCHES = ("positional", "semantic", "agnostic")

class BranchInit(NamedTuple):
    """Initial overlaps and the invariant subspace to solve in.

    `hold_m`, `hold_theta`: `()` bool arrays; when true, `m` (with `mhat`) or
    `theta0` (with `thetahat`) is held at zero throughout. Being arrays, inits
    of different branches can be stacked (`stack_inits`) and vmapped.
    `gauge`: optional `(n,)` bool over `ravel(Overlaps)`: coordinates held at
    their init value *without* touching the hats (a gauge fixing where the SE
    has a continuous symmetry, e.g. the rotations `Q -> Q R` of a tied student
    of rank `r > 1`: fixed points form orbits and `I - J` is singular along
    them). They are neither updated nor part of the residual or the stability.
    """

    overlaps: Overlaps
    hold_m: Array
    hold_theta: Array
    gauge: Array | None = None


# Default inits in per-token units (q, V, theta per token; m), those of the
# published method for the paper's setting; converted with the mean sigma^2.
BRANCH_DEFAULTS = {
    "positional": dict(q=0.02, m=0.2, V=14.6, theta=0.0),
    "semantic": dict(q=0.9, m=0.0, V=14.6, theta=0.35),
    "agnostic": dict(q=0.02, m=0.0, V=14.6, theta=0.0),
}


def branch_init(branch: str, params: TiedAttentionParams, *, q0=None, m=None, V0=None, theta0=None) -> BranchInit:
    """Init and invariant subspace of a branch.

    * `"positional"`: `theta0` held at 0 (invariant for a target even in `h*`); init with `m` large.
    * `"semantic"`: init with `theta0 > 0`, `m = 0`; `m` held at 0 when the
      problem is token-swap symmetric (`token_swap_symmetric`), else free.
    * `"agnostic"`: both held at 0.

    Default overlaps: `BRANCH_DEFAULTS` (per-token values divided by the mean
    `sigma^2`, on the leading diagonal for `r, t, K > 1`); any of `q0 (r, r)`,
    `m (K, r)`, `V0 (r, r)`, `theta0 (t, r)` can be given instead.
    """
    if branch not in BRANCHES:
        raise ValueError(f"branch must be one of {BRANCHES}, got {branch!r}")
    r, t, K = params.r, params.t, params.K
    dt = params.sigma.dtype
    d = BRANCH_DEFAULTS[branch]
    s2 = jnp.mean(params.sigma**2)
    chosen = dict(
        q0=d["q"] / s2 * jnp.eye(r, dtype=dt) if q0 is None else jnp.asarray(q0, dt).reshape(r, r),
        m=d["m"] * jnp.eye(K, r, dtype=dt) if m is None else jnp.asarray(m, dt).reshape(K, r),
        V0=d["V"] / s2 * jnp.eye(r, dtype=dt) if V0 is None else jnp.asarray(V0, dt).reshape(r, r),
        theta0=d["theta"] / s2 * jnp.eye(t, r, dtype=dt) if theta0 is None else jnp.asarray(theta0, dt).reshape(t, r),
    )
    hold_theta = jnp.asarray(branch in ("positional", "agnostic"))
    hold_m = token_swap_symmetric(params) if branch == "semantic" else jnp.asarray(branch == "agnostic")
    ov = Overlaps(**chosen)
    ov = ov.replace(m=jnp.where(hold_m, 0.0, ov.m), theta0=jnp.where(hold_theta, 0.0, ov.theta0))
    return BranchInit(overlaps=ov, hold_m=hold_m, hold_theta=hold_theta)


def stack_inits(inits: list[BranchInit]) -> BranchInit:
    """Stack `BranchInit`s along a new leading axis (to vmap over branches or census seeds)."""
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *inits)


def free_mask(init: BranchInit, with_gauge: bool = True) -> Array:
    """`(n,)` bool over `ravel(Overlaps)`: the coordinates the branch solves for (held ones are False;
    with `with_gauge`, gauge-fixed ones too)."""
    ov = init.overlaps
    masks = Overlaps(q0=jnp.ones_like(ov.q0, bool), m=jnp.broadcast_to(~init.hold_m, ov.m.shape),
                     V0=jnp.ones_like(ov.V0, bool), theta0=jnp.broadcast_to(~init.hold_theta, ov.theta0.shape))
    mask = jnp.concatenate([jnp.ravel(x) for x in jax.tree_util.tree_leaves(masks)])
    if with_gauge and init.gauge is not None:
        mask = mask & ~init.gauge
    return mask
