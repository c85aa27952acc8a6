"""Population loss of the single-direction attention student in its two sufficient statistics (docs/dynamics.md, 1-2).

Model (the sequence single-index setting of the dynamics): tokens
`x_l ~ N(0, sigma^2 I_d / d)`, `l = 1..L`; a teacher direction `w*` and a
student `w` on the sphere `||w||^2 = d`; positional encodings
`p_l = s_l u / sqrt(d)` with a unit vector `u` orthogonal to `w*`
("opposite" encodings: `s = (+1, -1)`). Fields

    h*_l = x_l . w*,        h_l = (x_l + p_l) . w,

target `T(h*) = (1 - omega) softmax(h* h*^T) + omega A`, student
`S(h) = softmax(h h^T)` (row-wise), per-sample loss `ell = 1/2 ||T - S||_F^2`
(`loss="square"`) or `ell = ||T - S||_F` (`loss="frobenius"`, the loss of the
published SGD experiments). For `d -> inf` the population loss depends on `w`
only through the semantic overlap `m = w . w* / d` and the positional overlap
`e = w . u / sqrt(d)` (`m^2 + e^2 <= 1`): with independent `z*, xi ~ N(0, I_L)`,

    h*_l = sigma z*_l,    h_l = sigma (m z*_l + sqrt(1 - m^2) xi_l) + s_l e,

so `R(m, e) = E ell` is a `2L`-dimensional Gaussian expectation, done here by
tensor Gauss-Hermite quadrature (`order ** (2L)` nodes) with an error estimate
from a second, finer rule.

All functions are pure and jittable; `m`, `e` and the fields of
`DynamicsParams` are arrays, so `jax.vmap` over any of them works.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.precision import uses_float64
from phasejax.theory.quadrature import Quadrature, gauss_hermite

Array = jax.Array

LOSSES = ("square", "frobenius")
PAPER_PRE_SOFTMAX_A = ((1.0, -1.0), (-1.0, 1.0))
"""Pre-softmax positional matrix of the published SGD experiments (`A = softmax` of it, row-wise)."""


@struct.dataclass
class DynamicsParams:
    """Setting of the dynamics. `omega ()`, `A (L, L)` row-stochastic, `sigma ()` token scale, `signs (L,)`
    positional-encoding coefficients `s_l`; `loss` (static) is `"square"` or `"frobenius"`."""

    omega: Array
    A: Array
    sigma: Array
    signs: Array
    loss: str = struct.field(pytree_node=False, default="square")

    @property
    def L(self) -> int:
        return int(np.shape(self.signs)[-1])


def make_dynamics_params(omega=0.5, *, pre_softmax_A=PAPER_PRE_SOFTMAX_A, A=None, sigma=1.0, signs=(1.0, -1.0),
                         loss: str = "square") -> DynamicsParams:
    """`DynamicsParams` from concrete values; `A` defaults to the row-wise softmax of `pre_softmax_A`.

    Raises `ValueError` naming the parameter for `omega` outside `[0, 1]`, a non-square or non-stochastic `A`,
    `sigma <= 0`, `signs` of the wrong length, or an unknown `loss`.
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    om = np.asarray(omega, np.float64)
    if om.ndim != 0 or not 0.0 <= float(om) <= 1.0:
        raise ValueError(f"omega must be a scalar in [0, 1], got {omega!r}")
    if A is None:
        pre = np.asarray(pre_softmax_A, np.float64)
        if pre.ndim != 2 or pre.shape[0] != pre.shape[1]:
            raise ValueError(f"pre_softmax_A must be a square matrix, got shape {pre.shape}")
        A = np.exp(pre - pre.max(-1, keepdims=True))
        A = A / A.sum(-1, keepdims=True)
    A = np.asarray(A, np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or np.any(A < 0) or not np.allclose(A.sum(-1), 1.0):
        raise ValueError(f"A must be a square row-stochastic matrix, got {A.tolist()}")
    s = np.asarray(signs, np.float64)
    if s.shape != (A.shape[0],):
        raise ValueError(f"signs must have length L = {A.shape[0]}, got shape {s.shape}")
    sg = float(sigma)
    if not sg > 0:
        raise ValueError(f"sigma must be positive, got {sigma!r}")
    return DynamicsParams(omega=om, A=A, sigma=np.asarray(sg), signs=s, loss=loss)


def attention(h: Array) -> Array:
    """Tied dot-product attention `softmax(h h^T)` (row-wise) of fields `h (..., L)` -> `(..., L, L)`."""
    return jax.nn.softmax(h[..., :, None] * h[..., None, :], axis=-1)


def target(hstar: Array, params: DynamicsParams) -> Array:
    """`T(h*) = (1 - omega) softmax(h* h*^T) + omega A` for teacher fields `hstar (..., L)`."""
    return (1.0 - params.omega) * attention(hstar) + params.omega * params.A


def sample_loss(hstar: Array, h: Array, params: DynamicsParams) -> Array:
    """Per-sample loss `ell(h*, h)` for fields `hstar (L,)`, `h (L,)` (square: `1/2 ||T - S||_F^2`;
    frobenius: `||T - S||_F`, with a zero gradient where `T = S` exactly)."""
    sq = jnp.sum((target(hstar, params) - attention(h)) ** 2, axis=(-2, -1))
    if params.loss == "square":
        return 0.5 * sq
    tiny = jnp.finfo(sq.dtype).tiny
    return jnp.where(sq > tiny, jnp.sqrt(jnp.maximum(sq, tiny)), 0.0)


def fields(m: Array, e: Array, z: Array, params: DynamicsParams) -> tuple[Array, Array]:
    """Teacher and student fields `(h*, h)`, each `(..., L)`, from standard normals `z (..., 2L)` = `(z*, xi)`."""
    L = params.L
    zs, xi = z[..., :L], z[..., L:]
    hstar = params.sigma * zs
    h = params.sigma * (m * zs + jnp.sqrt(jnp.clip(1.0 - m**2, 0.0)) * xi) + params.signs * e
    return hstar, h


def quadrature_rule(L: int = 2, order: int = 14) -> Quadrature:
    """Tensor Gauss-Hermite rule in `2L` dimensions (`order ** (2L)` nodes) for the population expectations."""
    return gauss_hermite(2 * int(L), int(order))


def _node_values(m, e, z, params):
    """Per node: the loss and `sum_l (d ell / d h_l)^2` (the squared gradient norm of SGD's noise term)."""
    hstar, h = fields(m, e, z, params)
    ell, dell = jax.value_and_grad(lambda hh: sample_loss(hstar, hh, params))(h)
    return ell, jnp.sum(dell**2)


def population_loss(m: Array, e: Array, params: DynamicsParams, rule: Quadrature) -> Array:
    """`R(m, e) = E ell(h*, h)` by the quadrature `rule` (`2L` dimensions). Scalar `m`, `e`; vmap for grids."""
    z = jnp.asarray(rule.points)
    ell = jax.vmap(lambda zz: sample_loss(*fields(m, e, zz, params), params))(z)
    return jnp.dot(jnp.asarray(rule.weights), ell)


class PopulationTerms(NamedTuple):
    """What the SGD ODE needs at `(m, e)`: the loss `R`, its partial derivatives `R_m`, `R_e` (at unit student
    norm) and `Gamma = sigma^2 E sum_l (d ell / d h_l)^2` (the per-step squared gradient norm)."""

    loss: Array
    dR_dm: Array
    dR_de: Array
    gamma: Array


def population_terms(m: Array, e: Array, params: DynamicsParams, rule: Quadrature) -> PopulationTerms:
    """`PopulationTerms` at scalar `(m, e)` by quadrature; derivatives by autodiff through the nodes."""
    z = jnp.asarray(rule.points)
    w = jnp.asarray(rule.weights)

    def averaged(mm, ee):
        ell, g2 = jax.vmap(lambda zz: _node_values(mm, ee, zz, params))(z)
        return jnp.dot(w, ell), jnp.dot(w, g2)

    (R, g2), vjp = jax.vjp(averaged, m, e)
    dm, de = vjp((jnp.ones_like(R), jnp.zeros_like(g2)))
    return PopulationTerms(loss=R, dR_dm=dm, dR_de=de, gamma=params.sigma**2 * g2)


def spherical_gradient(m: Array, e: Array, dR_dm: Array, dR_de: Array) -> tuple[Array, Array]:
    """Gradient of `R` on the sphere, written in the overlaps: `P (R_m, R_e)` with `P = I - (m, e)(m, e)^T`."""
    gm = (1.0 - m**2) * dR_dm - m * e * dR_de
    ge = (1.0 - e**2) * dR_de - m * e * dR_dm
    return gm, ge


class LossWithError(NamedTuple):
    """Population loss by a rule of `order` nodes per dimension and `error = |R(order) - R(order + 6)|`."""

    loss: Array
    error: Array


@uses_float64
def population_loss_with_error(m, e, params: DynamicsParams, order: int = 14) -> LossWithError:
    """`R(m, e)` (float64) with a quadrature error estimate: the difference to a rule with 6 more nodes per
    dimension (the finer value is returned). `m`, `e` may be arrays of one shape (evaluated pointwise)."""
    m = jnp.asarray(m, jnp.float64)
    e = jnp.asarray(e, jnp.float64)
    fine = quadrature_rule(params.L, order + 6)
    coarse = quadrature_rule(params.L, order)
    Rf = jax.jit(jnp.vectorize(lambda a, b: population_loss(a, b, params, fine)))(m, e)
    Rc = jax.jit(jnp.vectorize(lambda a, b: population_loss(a, b, params, coarse)))(m, e)
    return LossWithError(loss=Rf, error=jnp.abs(Rf - Rc))


# ----------------------------------------------------------------------------
# Tabulated population terms: R, R_m, R_e and Gamma on an (m, e) grid, as polynomials in omega

@struct.dataclass
class PopulationTable:
    """`PopulationTerms` on the grid `m_grid x e_grid` (both `(n,)`, uniform), for every `omega` at once.

    For the square loss every term is a polynomial of degree 2 in `omega` (the target is affine in it), so
    `coefficients (3, 4, n_m, n_e)` holds, per power of `omega`, the values of `(R, R_m, R_e, Gamma)`.
    `order` is the Gauss-Hermite order per dimension it was built with; `params` the setting (its `omega`
    is unused). Interpolated by `table_terms` (tensor cubic convolution). `plateau (3, 3)`: per power of
    `omega`, the curvatures `R_mm(0, 0)`, `R_ee(0, 0)` (second derivatives by autodiff of the same rule) and
    `Gamma(0, 0)` at the uninformative point, for `plateau_rates` (exact to the rule, where interpolating
    `R_m`, `R_e` to `O(h)` next to the origin errs by `O(grid step^2)`)."""

    m_grid: Array
    e_grid: Array
    coefficients: Array
    params: DynamicsParams
    plateau: Array | None = None
    order: int = struct.field(pytree_node=False, default=0)


_EDGE = 1e-12
"""Offset of the table's nodes at `|m| = 1` (`build_population_table`)."""


def _swap_symmetric(params: DynamicsParams) -> bool:
    A = np.asarray(params.A)
    s = np.asarray(params.signs)
    return params.L == 2 and np.allclose(A[::-1, ::-1], A) and np.allclose(s[::-1], -s)


@uses_float64
def build_population_table(params: DynamicsParams, n_grid: int = 26, order: int = 14, m_max: float = 1.0,
                           progress: bool = False) -> PopulationTable:
    """Tabulate `(R, R_m, R_e, Gamma)` for the square loss on `[-m_max, m_max] x [-1, 1]` in `(m, e)`.

    The table holds every `omega` at once. The default `m_max = 1` covers the whole sphere (`|m|, |e| <= 1`;
    the ODEs keep `m^2 + e^2 <= 1`), so no trajectory leaves it. At `|m| = 1` the nodes' derivative of
    `sqrt(1 - m^2)` is singular although `R` is smooth there (the rule is symmetric in `xi`, so the quadrature
    is a function of `1 - m^2`): the nodes at `|m| = 1` are evaluated at `|m| = 1 - 1e-12` (a shift of
    `1e-12` in `m`, and a cancellation error of about `1e-10` in `R_m`). A smaller `m_max` gives a table
    that trajectories can leave: `sgd_ode_solve` flags those (`in_table`, `Status.INVALID_ITERATE`), and
    `in_table_range` tests points; beyond the grid `table_terms` extrapolates linearly.

    Uses the parity of `R` in `m` (the softmax teacher is even in `h*`) and, where the problem is symmetric
    under swapping the two tokens together with `p -> -p` (`L = 2`, `A` swap-invariant, opposite encodings),
    its parity in `e`: the quadrature then runs on `n_grid x n_grid` nodes of `[0, 1]^2` only, each at three
    values of `omega` (the terms are exactly quadratic in `omega`). Raises `ValueError` for another loss.
    """
    if params.loss != "square":
        raise ValueError(f"params.loss must be 'square' to tabulate in omega (got {params.loss!r}); use "
                         "population_terms directly for the frobenius loss")
    if int(n_grid) < 4:
        raise ValueError(f"n_grid must be at least 4, got {n_grid}")
    rule = quadrature_rule(params.L, order)
    if not 0.5 <= float(m_max) <= 1.0:
        raise ValueError(f"m_max must be in [0.5, 1], got {m_max}")
    half_m = np.linspace(0.0, float(m_max), int(n_grid))
    m_nodes = np.minimum(half_m, 1.0 - _EDGE)       # the quadrature at |m| = 1 - 1e-12 (see above)
    half = np.linspace(0.0, 1.0, int(n_grid))
    sym_e = _swap_symmetric(params)
    e_nodes = half if sym_e else np.concatenate([-half[:0:-1], half])
    omegas = jnp.asarray([0.0, 0.5, 1.0])

    def at_node(me):
        def one(om):
            t = population_terms(me[0], me[1], params.replace(omega=om), rule)
            return jnp.stack([t.loss, t.dR_dm, t.dR_de, t.gamma])
        return jax.vmap(one)(omegas)  # (3 omegas, 4)

    mm, ee = np.meshgrid(m_nodes, e_nodes, indexing="ij")
    nodes = jnp.asarray(np.stack([mm.ravel(), ee.ravel()], -1))
    compute = jax.jit(lambda nd: jax.lax.map(at_node, nd))
    if progress:
        from tqdm.auto import tqdm
        step = len(e_nodes)
        parts = [np.asarray(compute(nodes[i:i + step])) for i in tqdm(range(0, len(nodes), step),
                                                                      desc="population table", unit="row")]
        vals = np.concatenate(parts)
    else:
        vals = np.asarray(compute(nodes))
    vals = vals.reshape(len(half_m), len(e_nodes), 3, 4)
    # values at omega = 0, 1/2, 1 -> coefficients of 1, omega, omega^2
    coef = _omega_powers(vals[..., 0, :], vals[..., 1, :], vals[..., 2, :])  # (3, n_m_half, n_e, 4)
    plateau = _omega_powers(*(np.asarray(jax.jit(lambda om: plateau_terms(params.replace(omega=om), rule))(om))
                              for om in (0.0, 0.5, 1.0)))
    parity_m = np.array([1.0, -1.0, 1.0, 1.0])   # R, R_m, R_e, Gamma under m -> -m
    parity_e = np.array([1.0, 1.0, -1.0, 1.0])   # under e -> -e
    coef = np.concatenate([coef[:, :0:-1] * parity_m, coef], axis=1)
    if sym_e:
        coef = np.concatenate([coef[:, :, :0:-1] * parity_e, coef], axis=2)
    return PopulationTable(m_grid=jnp.asarray(np.concatenate([-half_m[:0:-1], half_m])),
                           e_grid=jnp.asarray(np.concatenate([-half[:0:-1], half])),
                           coefficients=jnp.asarray(np.moveaxis(coef, -1, 1)), params=params,
                           plateau=jnp.asarray(plateau), order=int(order))


def _omega_powers(v0, vh, v1):
    """Coefficients `(3, ...)` of `1, omega, omega^2` of a quadratic from its values at `omega = 0, 1/2, 1`."""
    c2 = 2.0 * (v0 + v1) - 4.0 * vh
    return np.stack([v0, v1 - v0 - c2, c2], 0)


def plateau_terms(params: DynamicsParams, rule: Quadrature) -> Array:
    """`(R_mm, R_ee, Gamma)` at the uninformative point `(m, e) = (0, 0)` by the quadrature `rule`, the second
    derivatives by autodiff (`(3,)`)."""
    loss = lambda m, e: population_loss(m, e, params, rule)
    zero = jnp.zeros((), jnp.asarray(rule.points).dtype)
    Rmm = jax.grad(jax.grad(loss, 0), 0)(zero, zero)
    Ree = jax.grad(jax.grad(loss, 1), 1)(zero, zero)
    return jnp.stack([Rmm, Ree, population_terms(zero, zero, params, rule).gamma])


def _cubic_weights(x: Array, grid: Array) -> tuple[Array, Array]:
    """Indices `(4,)` and cubic-convolution (Catmull-Rom) weights `(4,)` at `x` on the uniform `grid`."""
    n = grid.shape[0]
    h = grid[1] - grid[0]
    s = (x - grid[0]) / h
    i = jnp.clip(jnp.floor(s).astype(jnp.int32), 0, n - 2)
    t = s - i
    w = jnp.stack([(-t + 2 * t**2 - t**3) / 2, (2 - 5 * t**2 + 3 * t**3) / 2,
                   (t + 4 * t**2 - 3 * t**3) / 2, (-t**2 + t**3) / 2])
    idx = i + jnp.arange(-1, 3)
    # beyond the ends, a ghost node extrapolates linearly: f[-1] = 2 f[0] - f[1], f[n] = 2 f[n-1] - f[n-2]
    lo = (idx[0] < 0).astype(w.dtype) * w[0]
    hi = (idx[3] > n - 1).astype(w.dtype) * w[3]
    w = w.at[0].add(-lo).at[1].add(2 * lo - hi).at[2].add(2 * hi - lo).at[3].add(-hi)
    idx = jnp.clip(idx, 0, n - 1)
    return idx, w


def in_table_range(table: PopulationTable, m: Array, e: Array) -> Array:
    """Whether `(m, e)` lies in the tabulated range `|m| <= m_grid[-1]`, `|e| <= e_grid[-1]` (where
    `table_terms` interpolates; outside it extrapolates)."""
    return (jnp.abs(m) <= table.m_grid[-1]) & (jnp.abs(e) <= table.e_grid[-1])


def table_terms(table: PopulationTable, m: Array, e: Array, omega: Array) -> PopulationTerms:
    """`PopulationTerms` at scalar `(m, e, omega)` interpolated from `table` (cubic convolution per axis)."""
    im, wm = _cubic_weights(m, table.m_grid)
    ie, we = _cubic_weights(e, table.e_grid)
    block = table.coefficients[:, :, im][:, :, :, ie]          # (3, 4, 4, 4)
    vals = jnp.einsum("pkab,a,b->pk", block, wm, we)           # (3 powers, 4 terms)
    v = vals[0] + omega * vals[1] + omega**2 * vals[2]
    return PopulationTerms(loss=v[0], dR_dm=v[1], dR_de=v[2], gamma=v[3])
