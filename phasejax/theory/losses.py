"""Per-sample losses of the attention model, declared (docs/model.md; theory notes, sections 1 and 3).

A loss is a small frozen object with two pure functions, the two faces of one training loss:

* `loss(h, target, params) -> ()`: the loss of one sample in the high-dimensional limit, a function of the
  student's fields `h (L, r)` and the target's attention matrix `target (L, L)` (the tokens concentrate, so
  the `d`-dimensional outputs enter only through their Gaussian statistics). The state evolution's proximal
  problem is `1/2 sum_l (h_l - omega_l)^T V_l^{-1} (h_l - omega_l) + loss(h, T)`; the free energy's training loss
  is its average at the minimiser.
* `loss.output_risk(residual) -> (...)`: the same loss on a finite sample's output residual `y - f(x)`
  (`(..., L, d)`), summed over tokens and dimensions and divided by `d`: what a student trained by ERM
  minimises (`phasejax.empirics.training`).

`SampleLoss` is the interface (an abstract class: a subclass that lacks a member cannot be made, and the error
names it); `prox_derivatives` may give the proximal objective's value, gradient and Hessian in closed form (the
default, `None`, lets the solver differentiate `loss` itself). The model's loss is the static field
`TiedAttentionParams.loss` (`make_params(..., loss=HuberLoss(1.0))`); everything the state evolution computes
(the map, its Jacobian, the replicon, the derivatives of a fixed point) follows from it. The test error is the
square error whatever the training loss (`square_error`).

Example: declaring a loss (here the square loss scaled by a half, whose fixed points are those of the square
loss at twice `lambda`):

  >>> import dataclasses, jax.numpy as jnp
  >>> from phasejax.theory.losses import SampleLoss, SquareLoss
  >>> @dataclasses.dataclass(frozen=True)
  ... class HalfSquare(SampleLoss):
  ...     def __call__(self, h, target, params):
  ...         return 0.5 * SquareLoss()(h, target, params)
  ...     def output_risk(self, residual):
  ...         return 0.5 * SquareLoss().output_risk(residual)
  >>> from phasejax.theory import make_params
  >>> p = make_params(2.0, 0.3, loss=HalfSquare())
  >>> float(p.loss(jnp.zeros((2, 1)), jnp.eye(2), p))        # 1/2 * 1/2 * sum (T - S)^2 sigma^2
  0.0625
"""

from __future__ import annotations

import abc
import dataclasses
import math

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtr

from phasejax.theory.attention import dot_product_student

Array = jax.Array


class SampleLoss(abc.ABC):
    """The interface of a per-sample loss (module docstring). Subclasses are frozen dataclasses (hashable: the
    loss is part of the compilation key)."""

    @abc.abstractmethod
    def __call__(self, h: Array, target: Array, params) -> Array:
        """The loss of one sample in the limit: `h (L, r)` the student's fields, `target (L, L)`; shape `()`."""

    @abc.abstractmethod
    def output_risk(self, residual: Array) -> Array:
        """The loss of finite samples' output residuals `residual (..., L, d)`, summed over `L` and `d` and divided
        by `d`: shape `(...)`."""

    def prox_derivatives(self, params):
        """`None` (the solver differentiates the proximal objective), or `(objective, derivatives)` in closed form
        for `params` (`phasejax.theory.prox.closed_form_prox`)."""
        return None


def token_residual_power(h: Array, target: Array, params) -> Array:
    """`s_l^2 = sum_j (T - S(h))_{l j}^2 sigma_j^2`, shape `(L,)`: the variance of each output coordinate of token `l`'s
    residual `y_l - f_l` (independent Gaussian tokens of variances `sigma_j^2`)."""
    diff = target - params.student(h, params)
    return jnp.sum(diff**2 * (params.sigma**2)[None, :], axis=1)


@dataclasses.dataclass(frozen=True)
class SquareLoss(SampleLoss):
    """The square loss: `1/2 tr[(T - S) D (T - S)^T]`, `D = diag(sigma^2)` in the limit; `||y - f||^2 / (2 d)` on
    outputs (the paper's loss; spec section 1)."""

    def __call__(self, h: Array, target: Array, params) -> Array:
        return 0.5 * jnp.sum(token_residual_power(h, target, params))

    def output_risk(self, residual: Array) -> Array:
        return jnp.sum(residual**2, axis=(-2, -1)) / (2.0 * residual.shape[-1])

    def prox_derivatives(self, params):
        return pair_closed_forms(params)


# ----------------------------------------------------------------------------
# The square loss's proximal objective in closed form (L = 2, r = 1, the dot-product student)
# ----------------------------------------------------------------------------


def _pair_parts(h_flat: Array, theta):
    """The scalars both closed forms share: `h = (a, b)`, `u_i = S_ii = sigmoid(z_i)` with `z_1 = a (a - b)`,
    `z_2 = b (b - a)`, the quadratic term's weights `v_l = V_inv[l]` and offsets `dh_l = h_l - omega_l`, and
    the loss `1/2 sum_ij (T_ij - S_ij)^2 sigma_j^2` (written out component by component: no small matrix
    products, so that a vectorised caller compiles to a few fused loops)."""
    omega, T, V_inv, params = theta
    s2 = params.sigma**2
    a, b = h_flat[0], h_flat[1]
    u1, u2 = jax.nn.sigmoid(a * (a - b)), jax.nn.sigmoid(b * (b - a))
    v1, v2 = V_inv[0, 0, 0], V_inv[1, 0, 0]
    d1, d2 = a - omega[0, 0], b - omega[1, 0]
    loss = 0.5 * ((T[0, 0] - u1) ** 2 * s2[0] + (T[0, 1] - (1.0 - u1)) ** 2 * s2[1]
                  + (T[1, 0] - (1.0 - u2)) ** 2 * s2[0] + (T[1, 1] - u2) ** 2 * s2[1])
    return a, b, u1, u2, v1, v2, d1, d2, loss


def pair_dot_product_derivatives(h_flat: Array, theta) -> tuple[Array, Array, Array]:
    """Closed-form value, gradient `(2,)` and Hessian `(2, 2)` of `moreau_objective` for `L = 2`, `r = 1`
    and the dot-product student `S(h) = softmax(h h^T)`.

    With `h = (a, b)`, `S_11 = sigmoid(z_1)`, `z_1 = a (a - b)`, `S_22 = sigmoid(z_2)`,
    `z_2 = b (b - a)` and rows summing to one, the loss is
    `ell = 1/2 Sigma [(S_11 - c_1)^2 + (S_22 - c_2)^2] + const` with `Sigma = sigma_1^2 + sigma_2^2`,
    `c_1 = (T_11 sigma_1^2 + (1 - T_12) sigma_2^2) / Sigma`, `c_2 = ((1 - T_21) sigma_1^2 + T_22 sigma_2^2) / Sigma`;
    the chain rule through `z_1, z_2` (gradients `(2a - b, -a)` and `(-b, 2b - a)`, Hessians
    `[[2, -1], [-1, 0]]` and `[[0, -1], [-1, 2]]`) gives the gradient and Hessian. The value is computed directly.
    """
    omega, T, V_inv, params = theta
    s2 = params.sigma**2
    Sig = s2[0] + s2[1]
    a, b, u1, u2, v1, v2, d1, d2, loss = _pair_parts(h_flat, theta)
    c1 = (T[0, 0] * s2[0] + (1.0 - T[0, 1]) * s2[1]) / Sig
    c2 = ((1.0 - T[1, 0]) * s2[0] + T[1, 1] * s2[1]) / Sig
    du1, du2 = u1 * (1.0 - u1), u2 * (1.0 - u2)
    p1, p2 = Sig * (u1 - c1) * du1, Sig * (u2 - c2) * du2                          # d ell / d z_i
    q1 = Sig * (du1**2 + (u1 - c1) * du1 * (1.0 - 2.0 * u1))                         # d2 ell / d z_i^2
    q2 = Sig * (du2**2 + (u2 - c2) * du2 * (1.0 - 2.0 * u2))
    ga, gb = 2.0 * a - b, 2.0 * b - a                                                # z_1' = (ga, -a), z_2' = (-b, gb)
    grad = jnp.stack([p1 * ga - p2 * b + v1 * d1, -p1 * a + p2 * gb + v2 * d2])
    h_aa = q1 * ga * ga + q2 * b * b + 2.0 * p1 + v1
    h_ab = -q1 * ga * a - q2 * b * gb - p1 - p2
    h_bb = q1 * a * a + q2 * gb * gb + 2.0 * p2 + v2
    hess = jnp.stack([jnp.stack([h_aa, h_ab]), jnp.stack([h_ab, h_bb])])
    value = 0.5 * (v1 * d1 * d1 + v2 * d2 * d2) + loss
    return value, grad, hess


def pair_dot_product_objective(h_flat: Array, theta) -> Array:
    """`moreau_objective` in closed form for `L = 2`, `r = 1` and the dot-product student (see
    `pair_dot_product_derivatives`); equal to the generic one, cheaper."""
    _, _, _, _, v1, v2, d1, d2, loss = _pair_parts(h_flat, theta)
    return 0.5 * (v1 * d1 * d1 + v2 * d2 * d2) + loss


def pair_closed_forms(params):
    """`(pair_dot_product_objective, pair_dot_product_derivatives)` where they apply to `params` (the square loss with
    `L = 2`, `r = 1` and the dot-product student: `SquareLoss.prox_derivatives`), else `None`."""
    if params.L == 2 and params.r == 1 and params.student is dot_product_student:
        return pair_dot_product_objective, pair_dot_product_derivatives
    return None


def square_error(h: Array, target: Array, params) -> Array:
    """The square error `tr[(T - S) D (T - S)^T]` of one sample (twice `SquareLoss`): the test error's integrand."""
    return jnp.sum(token_residual_power(h, target, params))


def _huber(u: Array, delta) -> Array:
    a = jnp.abs(u)
    return jnp.where(a <= delta, 0.5 * u**2, delta * (a - 0.5 * delta))


def gaussian_huber(power: Array, delta) -> Array:
    """`E[huber_delta(s z)]` for `z ~ N(0, 1)` and `s^2 = power >= 0`: with `a = delta / s`,
    `s^2/2 (2 Phi(a) - 1) + delta s phi(a) - delta^2 (1 - Phi(a))`; `s^2 / 2` as `delta -> inf`. Smooth in `power`
    (written with `s^2` where it can be, and safe at `power = 0`, where it is `power / 2` to all orders)."""
    # below (delta / 40)^2 every Gaussian tail term is below exp(-800): the quadratic part is exact there, and the
    # general form sees a harmless argument (its derivative at power -> 0 is 0 * inf)
    small = power < (delta / 40.0) ** 2
    p = jnp.where(small, (delta / 40.0) ** 2, power)
    s = jnp.sqrt(p)
    a = delta / s
    phi = jnp.exp(-0.5 * a * a) / jnp.sqrt(2.0 * jnp.pi)
    value = 0.5 * p * (2.0 * ndtr(a) - 1.0) + delta * s * phi - delta**2 * ndtr(-a)
    return jnp.where(small, 0.5 * power, value)


@dataclasses.dataclass(frozen=True)
class HuberLoss(SampleLoss):
    """The Huber loss of the outputs, `huber_delta(u) = u^2/2` for `|u| <= delta`, `delta (|u| - delta/2)` beyond,
    summed over the output coordinates and divided by `d`. In the limit each output coordinate of token `l`'s
    residual is Gaussian with variance `s_l^2` (`token_residual_power`), so the per-sample loss is
    `sum_l E[huber_delta(s_l z)]` (`gaussian_huber`): the square loss as `delta -> inf`, linear in `s_l` (robust)
    for `s_l >> delta`."""

    delta: float = 1.0

    def __post_init__(self):
        if not (isinstance(self.delta, (int, float)) and math.isfinite(self.delta) and self.delta > 0):
            raise ValueError(f"delta must be a finite number > 0, got delta={self.delta!r}")

    def __call__(self, h: Array, target: Array, params) -> Array:
        return jnp.sum(gaussian_huber(token_residual_power(h, target, params), self.delta))

    def output_risk(self, residual: Array) -> Array:
        return jnp.sum(_huber(residual, self.delta), axis=(-2, -1)) / residual.shape[-1]
