"""Penalties of the attention model's weights, declared: the entropic half of the state evolution (docs/model.md;
theory notes, sections 4, 5 and 12).

The energetic half (the quadrature nodes' proximal problems) ends in the conjugate parameters, which reach the
overlaps only through their token sums, the effective hats (`EffectiveHats`: `Vhat`, `qhat`, `thetahat` summed
with weights `sigma_l^2`, and `Mhat`). A penalty maps those to the new overlaps (`overlaps`), gives the
entropic term of the free energy (`free_entropy`, in the training loss) and its own value at the overlaps
(`value`, in the energetic loss), and the factor the replicon's round trip passes through (`replicon_factor`).
`Penalty` is the interface (an abstract class); `Ridge` (`lambda/2 ||Q||^2`, with `lambda = params.lam`) the
paper's. The model's penalty is the static field `TiedAttentionParams.penalty`.
"""

from __future__ import annotations

import abc
import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from phasejax.theory import small_linalg

Array = jax.Array


@struct.dataclass
class EffectiveHats:
    """The conjugate parameters summed over tokens: `Vhat (r, r) = sum_l sigma_l^2 Vhat_l`,
    `qhat (r, r) = sum_l sigma_l^2 qhat_l`, `thetahat (t, r) = sum_l sigma_l^2 thetahat_l^T`, `Mhat (K, r)` (`C^T mhat`,
    or the label average of `C_cfg^T mhat_cfg` for a rule with per-node encodings)."""

    Vhat: Array
    qhat: Array
    thetahat: Array
    Mhat: Array


def effective_hats(hats, params) -> EffectiveHats:
    """The effective hats of per-token `hats` (`hats.Mhat` where the energetic step gave it, else `C^T mhat`)."""
    s2 = params.sigma**2
    Mhat = params.C.T @ hats.mhat if hats.Mhat is None else hats.Mhat
    return EffectiveHats(Vhat=jnp.einsum("l,lab->ab", s2, hats.Vhat), qhat=jnp.einsum("l,lab->ab", s2, hats.qhat),
                         thetahat=jnp.einsum("l,lat->ta", s2, hats.thetahat), Mhat=Mhat)


class Penalty(abc.ABC):
    """The interface of a penalty (module docstring). Subclasses are frozen dataclasses (hashable)."""

    @abc.abstractmethod
    def overlaps(self, eff: EffectiveHats, params):
        """The entropic update: the new `Overlaps` from the effective hats."""

    @abc.abstractmethod
    def free_entropy(self, eff: EffectiveHats, params) -> Array:
        """The entropic term of the zero-temperature free energy at the effective hats, shape `()`."""

    @abc.abstractmethod
    def value(self, ov, params) -> Array:
        """The penalty per dimension at the overlaps, shape `()` (the energetic loss's second term)."""

    @abc.abstractmethod
    def replicon_factor(self, ov, params) -> Array:
        """`(r, r)`: the entropic denoiser's linear response along the replicon direction (`phasejax.theory.replicon`)."""


@dataclasses.dataclass(frozen=True)
class Ridge(Penalty):
    """`lambda/2 ||Q||_F^2` with `lambda = params.lam` (spec section 4): with `G = lambda I + Vhat`,
    `V0 = G^{-1}`, `m = Mhat G^{-1}`, `theta0 = thetahat G^{-1}`,
    `q0 = G^{-1} (qhat + Mhat^T Mhat + thetahat^T thetahat) G^{-1}`; free entropy `1/2 tr G^{-1} (qhat + ...)`."""

    @staticmethod
    def _G(eff: EffectiveHats, params) -> Array:
        return params.lam * jnp.eye(eff.Vhat.shape[0], dtype=eff.Vhat.dtype) + eff.Vhat

    @staticmethod
    def _inner(eff: EffectiveHats) -> Array:
        return eff.qhat + eff.Mhat.T @ eff.Mhat + eff.thetahat.T @ eff.thetahat

    def overlaps(self, eff: EffectiveHats, params):
        from phasejax.theory.fields import Overlaps

        G_inv = small_linalg.inv(self._G(eff, params))
        G_inv = 0.5 * (G_inv + G_inv.T)
        q0 = G_inv @ self._inner(eff) @ G_inv
        return Overlaps(q0=0.5 * (q0 + q0.T), m=eff.Mhat @ G_inv, V0=G_inv, theta0=eff.thetahat @ G_inv)

    def free_entropy(self, eff: EffectiveHats, params) -> Array:
        return 0.5 * jnp.trace(jnp.linalg.solve(self._G(eff, params), self._inner(eff)))

    def value(self, ov, params) -> Array:
        return 0.5 * params.lam * jnp.trace(ov.q0)

    def replicon_factor(self, ov, params) -> Array:
        return ov.V0
