"""The nested quadrature rule of the 1RSB free energy (docs/rsb.md): the outer average over the fields
`(xi, eta)` on `n_replicas` independently scrambled Sobol rules (the state is solved on their union; the spread of
the replicas' estimates gives the errors), the inner average over the fluctuation `z` within a state on a tensor
Gauss-Hermite rule; the default rules of the two models (`attention_rule`, `perceptron_rule`) and one replica
alone (`replica_rule`)."""

from __future__ import annotations

import jax
import numpy as np
from flax import struct

from phasejax.theory.params import TiedAttentionParams
from phasejax.theory.quadrature import gauss_hermite, scrambled_sobol_points

Array = jax.Array


@struct.dataclass
class RSBRule:
    """Nested rule: `outer (No, D)` nodes with `outer_weights (No,)` (the union of the replicas) and
    `replica_weights (R, No)` (each replica alone), `inner (Ni, L)` nodes of `z` with `inner_weights (Ni,)`."""

    outer: Array
    outer_weights: Array
    replica_weights: Array
    inner: Array
    inner_weights: Array

    @property
    def n_nodes(self) -> int:
        return self.outer.shape[0] * self.inner.shape[0]

    def rs(self) -> "RSBRule":
        """The same outer rule with a single inner node `z = 0` (the RS energy: `Delta = 0`)."""
        L = self.inner.shape[1]
        return self.replace(inner=np.zeros((1, L)), inner_weights=np.ones((1,)))


def rsb_rule(outer_dim: int, inner_dim: int, *, log2_n: int = 10, n_replicas: int = 4, inner_order: int = 5,
             seed: int = 0, outer_scale: float = 1.0) -> RSBRule:
    """`n_replicas` Owen-scrambled Sobol rules of `2**log2_n` points in `outer_dim` dimensions (outer) and a tensor
    Gauss-Hermite rule of `inner_order` nodes per dimension in `inner_dim` dimensions (inner).

    `outer_scale = s > 1` draws the outer points from `N(0, s^2 I)` and weights them by the density ratio
    `prod_d s exp(-x_d^2 (1 - 1 / s^2) / 2)`, normalised within each replica (importance sampling with a wider
    proposal). For integrands that grow in the Gaussian tails (an envelope quadratic in the field) the plain rule's
    error is dominated by its outermost strata and falls like `1 / N`; the weighted integrand decays in the tails and
    the stratification error falls faster. `s = 1`: the plain rule."""
    for name, v, lo in (("outer_dim", outer_dim, 1), ("inner_dim", inner_dim, 1), ("log2_n", log2_n, 1),
                        ("n_replicas", n_replicas, 2), ("inner_order", inner_order, 1)):
        if isinstance(v, bool) or int(v) != v or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    if log2_n > 20:
        raise ValueError(f"log2_n must be <= 20, got {log2_n}")
    if not (isinstance(outer_scale, (int, float)) and not isinstance(outer_scale, bool) and outer_scale >= 1.0):
        raise ValueError(f"outer_scale must be a number >= 1, got {outer_scale!r}")
    per = 2 ** int(log2_n)
    R = int(n_replicas)
    seeds = [seed * 1009 + 7919 + k for k in range(R)]
    inner = gauss_hermite(int(inner_dim), int(inner_order))
    if outer_scale == 1.0:
        pts = np.concatenate([scrambled_sobol_points(int(outer_dim), int(log2_n), sd) for sd in seeds])
        W = np.repeat(np.eye(R), per, axis=1) / per
        w_outer = np.full((pts.shape[0],), 1.0 / pts.shape[0])
    else:
        from scipy.special import ndtri
        from scipy.stats import qmc

        s = float(outer_scale)
        u = np.concatenate([qmc.Sobol(int(outer_dim), scramble=True, seed=sd).random_base2(int(log2_n))
                            for sd in seeds])
        pts = s * ndtri(np.clip(u, 1e-16, 1.0 - 1e-16))
        logw = np.sum(np.log(s) - 0.5 * pts ** 2 * (1.0 - 1.0 / s ** 2), axis=1).reshape(R, per)
        w = np.exp(logw - logw.max(axis=1, keepdims=True))
        w = w / w.sum(axis=1, keepdims=True)                                                 # (R, per)
        W = np.zeros((R, R * per))
        for k in range(R):
            W[k, k * per:(k + 1) * per] = w[k]
        w_outer = w.reshape(-1) / R
    return RSBRule(outer=np.asarray(pts, np.float64), outer_weights=np.asarray(w_outer, np.float64),
                   replica_weights=np.asarray(W, np.float64), inner=np.asarray(inner.points),
                   inner_weights=np.asarray(inner.weights))


def replica_rule(rule: RSBRule, r: int) -> RSBRule:
    """Replica `r` of `rule` alone: its outer nodes and weights (its two `replica_weights` rows identical, so that
    the solver's own error estimates are zero), the same inner rule."""
    w = np.asarray(rule.replica_weights)[int(r)]
    idx = np.nonzero(w)[0]
    ww = w[idx] / w[idx].sum()
    return RSBRule(outer=np.asarray(rule.outer)[idx], outer_weights=ww, replica_weights=np.stack([ww, ww]),
                   inner=rule.inner, inner_weights=rule.inner_weights)


def attention_rule(params: TiedAttentionParams, *, log2_n: int = 10, n_replicas: int = 4, inner_order: int = 5,
                   seed: int = 0) -> RSBRule:
    """The default nested rule of the attention model: `n_replicas x 2**log2_n` Sobol points in the `2 L` dimensions
    of `(xi, eta)`, Gauss-Hermite with `inner_order` nodes per token for `z`."""
    return rsb_rule(2 * params.L, params.L, log2_n=log2_n, n_replicas=n_replicas, inner_order=inner_order,
                    seed=seed)


def perceptron_rule(*, log2_n: int = 11, n_replicas: int = 4, inner_order: int = 32, seed: int = 0,
                    outer_scale: float = 2.5) -> RSBRule:
    """The reference model's default rule: scrambled Sobol in the pattern's field drawn from `N(0, outer_scale^2)`
    and importance-weighted (`rsb_rule`), `inner_order` Gauss-Hermite nodes in `z`."""
    return rsb_rule(1, 1, log2_n=log2_n, n_replicas=n_replicas, inner_order=inner_order, seed=seed,
                    outer_scale=outer_scale)
