"""Order parameters and the Gaussian fields they define (theory notes `docs/theory.md`, sections 2-3).

State of the state evolution: `q0 (r, r)`, `m (K, r)`, `V0 (r, r)`, `theta0 (t, r)`
(`Overlaps`); their conjugates per token `qhat (L, r, r)`, `mhat (L, r)`,
`Vhat (L, r, r)`, `thetahat (L, r, t)` (`Hats`). Per token `l`:
`q_l = sigma_l^2 q0`, `V_l = sigma_l^2 V0`, `theta_l = sigma_l^2 theta0`,
`m_l = sum_k C[l, k] m_k`.

For standard normal `xi_l (r)`, `eta_l (t)` the fields of token `l` are

    omega_l = sigma_l q0^{1/2} xi_l + m_l
    h*_l    = sigma_l (B xi_l + Rn^{1/2} eta_l),   B = theta0 q0^{-1/2},  Rn = I_t - B B^T

(`h*_l` has covariance `sigma_l^2 I_t`, and `E[h*_l omega_l^T] = theta_l`).
`field_maps` builds these maps once per state, with a validity flag
(`q0` PSD, `V0` PD, `Rn` PSD, `theta0` in the range of `q0`, all finite).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import struct

from phasejax.theory import small_linalg

Array = jax.Array


@struct.dataclass
class Overlaps:
    """Order parameters: `q0 (r, r)`, `m (K, r)`, `V0 (r, r)`, `theta0 (t, r)`."""

    q0: Array
    m: Array
    V0: Array
    theta0: Array


@struct.dataclass
class Hats:
    """Conjugate parameters per token: `qhat (L, r, r)`, `mhat (L, r)`, `Vhat (L, r, r)`, `thetahat (L, r, t)`; and
    `Mhat (K, r)` where the quadrature's nodes carry their own positional encodings (a label mixture: then
    `Mhat` is the average of `C_node^T f_node`, not `C^T mhat`), else `None`."""

    qhat: Array
    mhat: Array
    Vhat: Array
    thetahat: Array
    Mhat: Array | None = None


def zero_hats(params: TiedAttentionParams, dtype=jnp.float64) -> Hats:
    """All-zero `Hats` of the shapes of `params`."""
    L, r, t = params.L, params.r, params.t
    return Hats(qhat=jnp.zeros((L, r, r), dtype), mhat=jnp.zeros((L, r), dtype),
                Vhat=jnp.zeros((L, r, r), dtype), thetahat=jnp.zeros((L, r, t), dtype))


def _divided_differences(lam: Array, f: Array, fprime: Array) -> Array:
    """First divided differences `(f(l_i) - f(l_j)) / (l_i - l_j)` of a function at eigenvalues `lam (n,)`,
    `f'` at the mean where two eigenvalues (nearly) coincide (Daleckii-Krein), shape `(n, n)`."""
    li, lj = lam[:, None], lam[None, :]
    diff = li - lj
    close = jnp.abs(diff) <= 1e-9 * jnp.maximum(jnp.maximum(jnp.abs(li), jnp.abs(lj)), 1e-30)
    mean_prime = 0.5 * (fprime[:, None] + fprime[None, :])
    return jnp.where(close, mean_prime, (f[:, None] - f[None, :]) / jnp.where(close, 1.0, diff))


def _root_functions(evals: Array, eps: float) -> tuple[Array, Array, Array, Array]:
    """`sqrt`, pseudo-inverse `sqrt` (zero below `eps`) of clipped eigenvalues and their derivatives."""
    clipped = jnp.clip(evals, 0.0, None)
    pos = clipped > eps
    safe = jnp.where(pos, clipped, 1.0)
    sqrt = jnp.sqrt(clipped)
    inv = jnp.where(pos, 1.0 / jnp.sqrt(safe), 0.0)
    dsqrt = jnp.where(pos, 0.5 / jnp.sqrt(safe), 0.0)
    dinv = jnp.where(pos, -0.5 / (safe * jnp.sqrt(safe)), 0.0)
    return sqrt, inv, dsqrt, dinv


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _sym_roots(M: Array, eps: float) -> tuple[Array, Array, Array]:
    evals, evecs = small_linalg.eigh(M)
    sqrt, inv, _, _ = _root_functions(evals, eps)
    return (evecs * sqrt) @ evecs.T, (evecs * inv) @ evecs.T, evals[0]


@_sym_roots.defjvp
def _sym_roots_jvp(eps, primals, tangents):
    # Matrix-function derivative by divided differences (Daleckii-Krein): well defined where eigenvalues
    # coincide (e.g. q0 = c I for r > 1), where differentiating `eigh`'s eigenvectors gives NaN.
    (M,), (dM,) = primals, tangents
    evals, evecs = small_linalg.eigh(M)
    sqrt, inv, dsqrt, dinv = _root_functions(evals, eps)
    dMt = evecs.T @ dM @ evecs
    back = lambda K: evecs @ (K * dMt) @ evecs.T  # noqa: E731
    out = ((evecs * sqrt) @ evecs.T, (evecs * inv) @ evecs.T, evals[0])
    d_out = (back(_divided_differences(evals, sqrt, dsqrt)), back(_divided_differences(evals, inv, dinv)), dMt[0, 0])
    return out, d_out


def sym_sqrt_pinv(M: Array, eps: float = 1e-14) -> tuple[Array, Array, Array]:
    """Symmetric square root, pseudo-inverse square root and smallest eigenvalue of a symmetric `M (n, n)`.

    Eigenvalues below zero are clipped for the roots (the smallest is
    returned unclipped, for validity checks); those below `eps` get a zero
    inverse root. Differentiable also where eigenvalues coincide (the JVP is
    the Daleckii-Krein divided-difference formula, not `eigh`'s eigenvector
    derivative, which is undefined there).
    """
    return _sym_roots(0.5 * (M + M.T), eps)


@struct.dataclass
class FieldMaps:
    """Linear maps from `(xi, eta)` to the fields, in token-free units (see the module docstring).

    Attributes:
      sqrt_q0, pinv_sqrt_q0: `(r, r)`; B: `(t, r)` `theta0 q0^{-1/2}`;
      sqrt_Rn, pinv_sqrt_Rn: `(t, t)`; m_tokens: `(L, r)` `C m`; m: `(K, r)` (for nodes with their own
      encodings); valid: `()` bool, the state is a valid Gaussian-field state.
    """

    sqrt_q0: Array
    pinv_sqrt_q0: Array
    B: Array
    sqrt_Rn: Array
    pinv_sqrt_Rn: Array
    m_tokens: Array
    m: Array
    valid: Array


def overlaps_valid(ov: Overlaps, psd_tol: float = 1e-10) -> Array:
    """`()` bool: `q0` PSD, `V0` PD, `I - theta0 q0^+ theta0^T` PSD, `theta0` in the range of `q0`, finite."""
    return field_maps(ov, None, psd_tol).valid


def field_maps(ov: Overlaps, params: TiedAttentionParams | None, psd_tol: float = 1e-10) -> FieldMaps:
    """Build the `(xi, eta) -> (omega, h*)` maps and the validity flag (`params` only for `C m`)."""
    sqrt_q0, pinv_sqrt_q0, q0_min = sym_sqrt_pinv(ov.q0)
    B = ov.theta0 @ pinv_sqrt_q0
    t = ov.theta0.shape[0]
    Rn = jnp.eye(t, dtype=ov.q0.dtype) - B @ B.T
    sqrt_Rn, pinv_sqrt_Rn, Rn_min = sym_sqrt_pinv(Rn)
    V0_min = small_linalg.min_eigenvalue(0.5 * (ov.V0 + ov.V0.T))
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(ov)]))
    # theta0 must lie in the range of q0 (else h* is not a valid Gaussian field).
    theta_in_range = jnp.all(jnp.abs(ov.theta0 - ov.theta0 @ pinv_sqrt_q0 @ sqrt_q0) <= 1e-8 + psd_tol)
    valid = finite & (q0_min >= -psd_tol) & (Rn_min >= -psd_tol) & (V0_min > 0) & theta_in_range
    m_tokens = ov.m if params is None else params.C @ ov.m
    return FieldMaps(sqrt_q0=sqrt_q0, pinv_sqrt_q0=pinv_sqrt_q0, B=B, sqrt_Rn=sqrt_Rn,
                     pinv_sqrt_Rn=pinv_sqrt_Rn, m_tokens=m_tokens, m=ov.m, valid=valid)


def split_node(z: Array, params: TiedAttentionParams) -> tuple[Array, Array]:
    """Split a quadrature point `z (L (r + t),)` into `xi (L, r)` and `eta (L, t)`."""
    L, r, t = params.L, params.r, params.t
    return z[: L * r].reshape(L, r), z[L * r:].reshape(L, t)


def student_field(maps: FieldMaps, params: TiedAttentionParams, xi: Array, encoding: Array | None = None) -> Array:
    """`omega (L, r) = sigma_l q0^{1/2} xi_l + m_l` at one node `xi (L, r)` (the module docstring's formula, the only
    place it is written); `m_l = (C m)_l`, or `(encoding m)_l` for a node with its own encodings `encoding (L, K)`."""
    m_tokens = maps.m_tokens if encoding is None else encoding @ maps.m
    return params.sigma[:, None] * (xi @ maps.sqrt_q0.T) + m_tokens


def gaussian_fields(maps: FieldMaps, params: TiedAttentionParams, xi: Array, eta: Array,
                    encoding: Array | None = None) -> tuple[Array, Array]:
    """`omega (L, r)` (`student_field`) and `h* (L, t) = sigma_l (B xi_l + Rn^{1/2} eta_l)` at one node `xi (L, r)`,
    `eta (L, t)`."""
    hstar = params.sigma[:, None] * (xi @ maps.B.T + eta @ maps.sqrt_Rn.T)
    return student_field(maps, params, xi, encoding), hstar
