"""Per-sample Gram matrices of the tied-attention data and the risk written through them (docs/theory.md, sections 1, 7).

For one sample, `ell_mu(h) = 1/(2d) ||y - S(h) xt||^2` depends on the data only
through `G = xt xt^T / d`, `Y = xt y^T / d` (`L x L`) and `c = ||y||^2 / d`.
Used by GAMP's proximal steps and by the training of tied students (one pass
over the `(n, L, d)` data per evaluation). No dependence on `phasejax.empirics`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from phasejax.theory.params import TiedAttentionParams

Array = jax.Array


@struct.dataclass
class GAMPInputs:
    """Per-sample precomputations: `xt = x + p (n, L, d)`, `G = xt xt^T / d (n, L, L)`,
    `Y = xt y^T / d (n, L, L)` (`Y[j, i] = xt_j . y_i / d`), `c = ||y||^2 / d (n,)`."""

    xt: Array
    G: Array
    Y: Array
    c: Array


def gram_inputs(x: Array, y: Array, p: Array) -> GAMPInputs:
    """Per-sample Gram matrices of tokens `x (n, L, d)`, labels `y (n, L, d)` and encodings `p (L, d)`."""
    xt = x + p[None]
    d = x.shape[-1]
    return GAMPInputs(xt=xt, G=jnp.einsum("nld,nkd->nlk", xt, xt) / d, Y=jnp.einsum("nld,nkd->nlk", xt, y) / d,
                      c=jnp.sum(y**2, axis=(1, 2)) / d)


def sample_loss_gram(h: Array, G: Array, Y: Array, c: Array, params: TiedAttentionParams) -> Array:
    """`ell_mu(h) = 1/2 [c - 2 tr(S Y) + tr(S G S^T)] = 1/(2d) ||y - S(h) xt||^2` for one sample."""
    S = params.student(h, params)
    return 0.5 * (c - 2.0 * jnp.sum(S * Y.T) + jnp.sum((S @ G) * S))


def gram_risk(Q: Array, inputs: GAMPInputs, params: TiedAttentionParams, mask: Array | None = None) -> Array:
    """`R(Q)` of the tied student through the per-sample Gram matrices (docs/theory.md, sections 1, 7).

    Equal to `phasejax.empirics.gamp.empirical_risk` but touches the `(n, L, d)` data once per
    evaluation (`h = xt Q / sqrt(d)`) instead of forming `(n, L, d)`
    predictions; `mask (n,)` drops padded samples (`where`, so their values
    never enter).
    """
    h = jnp.einsum("nld,dr->nlr", inputs.xt, Q) / jnp.sqrt(inputs.xt.shape[-1])
    per_sample = jax.vmap(lambda hh, G, Y, c: sample_loss_gram(hh, G, Y, c, params))(h, inputs.G, inputs.Y, inputs.c)
    if mask is not None:
        per_sample = jnp.where(mask, per_sample, 0.0)
    return jnp.sum(per_sample) + 0.5 * params.lam * jnp.sum(Q**2)
