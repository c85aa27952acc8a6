"""Results of the state evolution: values, diagnostics and quadrature error estimates (theory notes, section 8).

`SEResult` holds a fixed point (`overlaps`, `hats`), the training loss
`e_t`, the test error `eps_g`, solver diagnostics (residual, iterations,
status from `phasejax.solvers.Status`), its stability (inside its subspace:
the largest real part of the eigenvalues of `dF/dx`; out of it:
`subspace_gain`) and `errors`, an `SEErrors` of quadrature error estimates.

How errors are estimated: a scheme with replicas (`SplitProductRule`,
`SobolRule`) provides `K` randomised rules. At the fixed point `x*` of the
main rule, replica `k` moves the fixed point by the Newton correction
`delta_k = (I - J)^{-1} (F_k(x*) - x*)` (first order in the rule's error).
Its training loss is the free energy with replica `k`'s hats at `x*` (the
free energy is stationary, so the shift of `x*` enters only at second
order); its test error is `eps_g(x* + delta_k)`. The quadrature error of
the reported value is `t * s`, with `s` the standard deviation of the main
and replica values (`SplitProductRule`: the main rule is one more draw of
the same randomised family; `SobolRule`: the main rule is the replicas'
union, so `s` is their standard error) and `t` the 97.5% Student quantile:
a 95% confidence half-width. `NaN` where no replicas exist.

A solve that stops short of its fixed point (status `MAX_ITERATIONS`, e.g.
where a node's minimiser jumps between iterations and the finite rule's map
has no exact fixed point) is off by the Newton correction of the main rule,
`delta = (I - J)^{-1} (F(x) - x)`, to first order. Its size (and the test
error's change along it) is the solver's error; the reported errors are
the quadrature half-width plus it (`SEErrors`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.solvers import HasStatus, Status
from phasejax.theory.fields import Hats, Overlaps

Array = jax.Array


def t_quantile_975(dof: int) -> float:
    """The 97.5% quantile of Student's t with `dof` degrees of freedom (a 95% two-sided interval)."""
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


@struct.dataclass
class SEErrors:
    """Error bars of a result, same shapes as the values.

    `overlaps`, `train_loss`, `test_error`: the 95% confidence half-width of
    the quadrature error plus the solver's part below (NaN: the quadrature
    error was not estimated). `solver_overlaps`, `solver_test_error`: the
    solver's part alone, the first-order distance of the returned point from
    the main rule's fixed point, `|delta|` with `delta = (I - J)^{-1} (F(x) - x)`
    and `|eps_g(x + delta) - eps_g(x)|` (negligible for a converged solve; the
    training loss has no such term: the free energy is stationary at the
    fixed point, so `delta` enters it at second order). `train_loss_replicas`,
    `test_error_replicas`: `(K,)` each replica's value (NaN without replicas):
    a difference of two results on the same rule has the spread of the
    replicas' differences (`spread_error`), smaller than either's where their
    quadrature errors move together.
    """

    overlaps: Overlaps
    train_loss: Array
    test_error: Array
    solver_overlaps: Overlaps
    solver_test_error: Array
    train_loss_replicas: Array
    test_error_replicas: Array
    n_replicas: int = struct.field(pytree_node=False, default=0)


@struct.dataclass
class SEResult(HasStatus):
    """Fixed point of the state evolution and its diagnostics.

    Attributes:
      overlaps: `Overlaps` at the returned point (the last valid evaluation).
      hats: `Hats` evaluated there.
      test_error: `()` `eps_g`; NaN when `status` is `INVALID_ITERATE` or `INVALID_INPUT`.
      train_loss: `()` `e_t = R(Q_hat) / d` from the free energy; NaN likewise.
      energetic_loss: `()` the same from the proximal points, `alpha E[ell(h_hat)] + lambda/2 tr q0`;
        equal to `train_loss` at a fixed point (a consistency check).
      residual: `()` scaled residual `max |F(x) - x| / max(1, |x|)`.
      iterations: `()` map evaluations; status: `()` a `phasejax.solvers.Status` code; converged: `()` bool.
      stability: `()` largest real part of the eigenvalues of `dF/dx` inside the branch's subspace
        (`< 1`: the fixed point attracts a suitably damped iteration; `> 1`: unstable).
      subspace_gain: `()` largest real part of the eigenvalues of `dF/dx` on the held coordinates
        (perturbations out of the invariant subspace; `> 1`: the branch is unstable out of it, past a
        spinodal); NaN for an unconstrained solve.
      prox_grad_norm: `()` largest node prox residual; prox_unconverged: `()` weight fraction above `prox_tol`.
      sigma: `(L,)` token scales, for the per-token properties.
      errors: `SEErrors`.
    """

    overlaps: Overlaps
    hats: Hats
    test_error: Array
    train_loss: Array
    energetic_loss: Array
    residual: Array
    iterations: Array
    status: Array
    converged: Array
    stability: Array
    subspace_gain: Array
    prox_grad_norm: Array
    prox_unconverged: Array
    sigma: Array
    errors: SEErrors

    @property
    def q(self) -> Array:
        """Per-token `q_l = sigma_l^2 q0`, shape `(..., L, r, r)`; `(..., L)` when `r = 1`."""
        return per_token(self.sigma, self.overlaps.q0)

    @property
    def V(self) -> Array:
        """Per-token `V_l = sigma_l^2 V0`, shape `(..., L, r, r)`; `(..., L)` when `r = 1`."""
        return per_token(self.sigma, self.overlaps.V0)

    @property
    def theta(self) -> Array:
        """Per-token `theta_l = sigma_l^2 theta0`, shape `(..., L, t, r)`; `(..., L)` when `t = r = 1`."""
        return per_token(self.sigma, self.overlaps.theta0)

    @property
    def m(self) -> Array:
        """`m (..., K, r)`."""
        return self.overlaps.m

    @property
    def q_err(self) -> Array:
        return per_token(self.sigma, self.errors.overlaps.q0)

    @property
    def V_err(self) -> Array:
        return per_token(self.sigma, self.errors.overlaps.V0)

    @property
    def theta_err(self) -> Array:
        return per_token(self.sigma, self.errors.overlaps.theta0)

    @property
    def m_err(self) -> Array:
        return self.errors.overlaps.m


def per_token(sigma: Array, x: Array) -> Array:
    """`sigma_l^2 x` per token: `(..., L, a, b)`, squeezed to `(..., L)` when `a = b = 1`."""
    out = (sigma**2)[..., :, None, None] * x[..., None, :, :]
    if x.shape[-2:] == (1, 1):
        return out[..., 0, 0]
    return out


def spread_error(main: Array, replicas: Array, *, main_is_mean: bool) -> Array:
    """95% half-width from `main (...)` and `replicas (K, ...)` (see the module docstring)."""
    K = replicas.shape[0]
    if main_is_mean:
        s = jnp.std(replicas, axis=0, ddof=1) / np.sqrt(K)
        return t_quantile_975(K - 1) * s
    allv = jnp.concatenate([main[None], replicas])
    return t_quantile_975(K) * jnp.std(allv, axis=0, ddof=1)


def _max_scaled(shift: Overlaps, ov: Overlaps) -> Array:
    """`max_i |shift_i| / max(1, |x_i|)` over the entries of the overlaps (the residual's scaling)."""
    leaves = zip(jax.tree_util.tree_leaves(shift), jax.tree_util.tree_leaves(ov))
    return jnp.max(jnp.stack([jnp.max(jnp.abs(d) / jnp.maximum(1.0, jnp.abs(x))) for d, x in leaves]))


def result_columns(res: SEResult, params) -> dict[str, Array]:
    """Flatten one `SEResult` to named scalar columns (for CSV / JSON); vmappable.

    `q, V, theta` are token 1's per-token values (first entry for `r, t > 1`),
    `m` the first entry of `m`; each has `<name>_err`. Then `test_error`,
    `train_loss` (with `_err`), `test_error_solver_err` and `solver_shift` (the
    solver's part of the errors: `SEErrors`; `solver_shift` is the largest
    scaled entry of `|delta|`), `energetic_loss`, solver diagnostics, and every
    entry of the overlaps and hats as `q0_i, m0_i, V0_i, theta0_i, qhat_i, mhat_i, Vhat_i, thetahat_i`.
    """
    s1 = params.sigma[0] ** 2
    ov, hats, err = res.overlaps, res.hats, res.errors
    cols = dict(
        q=s1 * ov.q0.ravel()[0], m=ov.m.ravel()[0], V=s1 * ov.V0.ravel()[0], theta=s1 * ov.theta0.ravel()[0],
        q_err=s1 * err.overlaps.q0.ravel()[0], m_err=err.overlaps.m.ravel()[0], V_err=s1 * err.overlaps.V0.ravel()[0],
        theta_err=s1 * err.overlaps.theta0.ravel()[0],
        test_error=res.test_error, test_error_err=err.test_error,
        test_error_solver_err=err.solver_test_error, solver_shift=_max_scaled(err.solver_overlaps, ov),
        train_loss=res.train_loss, train_loss_err=err.train_loss, energetic_loss=res.energetic_loss,
        residual=res.residual, iterations=res.iterations, status=res.status, converged=res.converged,
        stability=res.stability, subspace_gain=res.subspace_gain, prox_unconverged=res.prox_unconverged,
    )
    for name, arr in [("q0", ov.q0), ("m0", ov.m), ("V0", ov.V0), ("theta0", ov.theta0), ("qhat", hats.qhat),
                      ("mhat", hats.mhat), ("Vhat", hats.Vhat), ("thetahat", hats.thetahat)]:
        flat = arr.ravel()
        for i in range(flat.shape[0]):
            cols[f"{name}_{i}"] = flat[i]
    return cols


INVALID = (int(Status.INVALID_ITERATE), int(Status.INVALID_INPUT))
