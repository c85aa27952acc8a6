"""Gaussian quadrature rules for expectations over standard normal vectors (docs/theory.md, section 8).

A `Quadrature` holds `points` of shape `(N, D)` and `weights` of shape `(N,)`
summing to one, such that `E[g(z)] ~ sum_i weights[i] g(points[i])` for
`z ~ N(0, I_D)`. The state evolution draws `(xi, eta)` in `D = L (r + t)`
dimensions from one rule. Two rules share the interface:

* `gauss_hermite(dim, order)`: tensor Gauss-Hermite, exact for polynomials of
  degree `<= 2 order - 1` in each coordinate; `order ** dim` nodes, right for
  `dim <= 4` (docs/theory.md, section 8).
* `quasi_monte_carlo(dim, n_points)`: a fixed Halton sequence (deterministic,
  no seed) mapped through the normal quantile; error `~ log(N)^D / N`, for
  higher dimensions.

`default_quadrature(dim)` picks Gauss-Hermite with 10 nodes per dimension for
`dim <= 4` and 8192 Halton points beyond.
"""

from __future__ import annotations

import abc

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.scipy.special import ndtr, ndtri

Array = jax.Array


@struct.dataclass
class Quadrature:
    """A quadrature rule for `N(0, I_D)`: `points (N, D)`, `weights (N,)`, sum of weights 1; optionally
    `encodings (N, L, K)`, every node's own positional encodings (a mixture over label configurations, whose
    weights are part of `weights`; `None`: every node has the model's `C`)."""

    points: Array
    weights: Array
    encodings: Array | None = None

    @property
    def dim(self) -> int:
        return self.points.shape[-1]

    @property
    def size(self) -> int:
        return self.points.shape[-2]

    def expect(self, values: Array) -> Array:
        """`sum_i w_i values[i]` over the leading node axis of `values` `(N, ...)`."""
        return jnp.tensordot(self.weights, values, axes=1)


def gauss_hermite(dim: int, order: int) -> Quadrature:
    """Tensor-product Gauss-Hermite rule for `N(0, I_dim)` with `order` nodes per dimension.

    Returns `order ** dim` nodes (float64). Raises `ValueError` for `dim < 1`,
    `order < 1`, or more than 10 million nodes.
    """
    if int(dim) != dim or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim}")
    if int(order) != order or order < 1:
        raise ValueError(f"order (nodes per dimension) must be a positive integer, got {order}")
    if order**dim > 10_000_000:
        raise ValueError(
            f"gauss_hermite with order={order} in dim={dim} needs {order**dim} nodes; "
            "use quasi_monte_carlo for this dimension"
        )
    x, w = np.polynomial.hermite_e.hermegauss(int(order))  # weight exp(-x^2/2)
    w = w / w.sum()
    grids = np.meshgrid(*([x] * dim), indexing="ij")
    wgrids = np.meshgrid(*([w] * dim), indexing="ij")
    points = np.stack([g.ravel() for g in grids], axis=-1)
    weights = np.prod(np.stack([g.ravel() for g in wgrids], axis=-1), axis=-1)
    # numpy float64: the rule keeps its precision whatever the caller's JAX precision (it is converted where used)
    return Quadrature(points=np.asarray(points, np.float64), weights=np.asarray(weights, np.float64))


def quasi_monte_carlo(dim: int, n_points: int) -> Quadrature:
    """Fixed quasi-Monte-Carlo rule for `N(0, I_dim)`: Halton points through `ndtri`.

    Deterministic (the same rule every call); equal weights `1 / n_points`.
    The first 20 Halton points are skipped (the low-index points of large
    prime bases are strongly correlated).
    """
    if int(dim) != dim or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim}")
    if int(n_points) != n_points or n_points < 2:
        raise ValueError(f"n_points must be an integer >= 2, got {n_points}")
    from scipy.special import ndtri as np_ndtri
    from scipy.stats import qmc

    sampler = qmc.Halton(int(dim), scramble=False)
    sampler.fast_forward(20)
    points = np_ndtri(sampler.random(int(n_points)))
    weights = np.full((int(n_points),), 1.0 / n_points, dtype=np.float64)
    return Quadrature(points=points, weights=weights)


def default_quadrature(dim: int, order: int = 10, n_qmc: int = 8192) -> Quadrature:
    """Gauss-Hermite (`order` per dimension) for `dim <= 4`, else `n_qmc` Halton points."""
    if dim <= 4:
        return gauss_hermite(dim, order)
    return quasi_monte_carlo(dim, n_qmc)


# ----------------------------------------------------------------------------
# Quadrature schemes: rules that may adapt to the state, with replicas for error estimates
# ----------------------------------------------------------------------------
#
# A scheme provides `frame(ov, params)` (state-dependent orientation data of
# the rule, computed once per solve and not differentiated; `None` for fixed
# rules), `main(ov, params, frame) -> Quadrature` (the rule the state
# evolution iterates with; it may depend on the overlaps) and
# `replicas(ov, params, frame) -> (Quadrature, weights (K, N))`: K randomised
# versions of the rule (each a row of weights over the returned nodes) whose
# spread estimates the main rule's error. `shares_main_nodes` says whether the
# replica nodes are the main rule's (then no new proximal problems are solved).


@jax.custom_jvp
def _ndtri(p: Array) -> Array:
    """`ndtri` (the standard normal quantile) whose derivative is the closed form `1 / phi(ndtri(p))`; JAX would
    differentiate the rational approximations themselves, a large program for one line of calculus."""
    return ndtri(p)


@_ndtri.defjvp
def _ndtri_jvp(primals, tangents):
    (p,), (dp,) = primals, tangents
    s = ndtri(p)
    return s, dp * jnp.sqrt(2.0 * jnp.pi) * jnp.exp(0.5 * s * s)


def _de_piece(lo: Array, hi: Array, n: int, shift, U: float) -> tuple[Array, Array]:
    """Nodes `s` and weights of `int g(s) phi(s) ds` over `s in (Phi^{-1}(lo), Phi^{-1}(hi))`, `0 <= lo < hi <= 1`.

    Double-exponential (tanh-sinh) rule in `t = Phi(s)`: `t = lo + (hi - lo) sigmoid(pi sinh u)` on a
    uniform grid `u_j = -U + (j + shift) 2U/n`; `1 - t` is formed without cancellation, so nodes deep in
    either tail are exact. The rule clusters nodes double-exponentially at both ends of the piece.
    The weights are normalised to the piece's mass `hi - lo`. A random `shift` in [0, 1) makes it an
    estimate of the piece's integral whose spread over shifts measures the rule's error.
    """
    hu = 2.0 * U / n
    u = -U + (jnp.arange(n) + shift) * hu
    a = jnp.pi * jnp.sinh(u)
    sp, sm = jax.nn.sigmoid(a), jax.nn.sigmoid(-a)
    t = lo + (hi - lo) * sp
    tc = (1.0 - hi) + (hi - lo) * sm
    tiny = jnp.finfo(t.dtype).tiny
    lower = t < 0.5
    # each branch sees a harmless argument where it is not selected: the other branch's quantile near 1 has an
    # infinite derivative, which reverse mode would multiply by the zero cotangent of the unselected branch (NaN)
    s = jnp.where(lower, _ndtri(jnp.maximum(jnp.where(lower, t, 0.25), tiny)),
                  -_ndtri(jnp.maximum(jnp.where(lower, 0.25, tc), tiny)))
    w = hu * jnp.pi * jnp.cosh(u) * sp * sm
    # normalised so that the piece's mass `hi - lo` is exact (a jump on the split is integrated exactly)
    return s, (hi - lo) * w / jnp.sum(w)


PIVOT_STARTS = ((0.7, -0.7), (0.7, 0.7), (1.5, -1.5), (1.5, 1.5), (2.5, -0.5), (0.5, -2.5))
"""Starts of the search for the minimiser at the pivot (`_pivot_normals`)."""


def _pivot_problem(params, ov, hstar):
    """The proximal problems at the pivot `omega = 0` for the teacher's fields `hstar (K, L, 1)`: `(objective,
    (value, gradient, Hessian), node data (K, ...))` as `phasejax.theory.prox.minimize_dense` takes them."""
    from phasejax.theory import small_linalg
    from phasejax.theory.prox import closed_form_prox, lane_derivatives

    objective, derivatives = closed_form_prox(params)
    T = jax.vmap(lambda h: params.target(h, params))(hstar)                       # (K, L, L)
    V_inv = small_linalg.inv(0.5 * (ov.V0 + ov.V0.T))[None] / (params.sigma**2)[:, None, None]
    zero = jnp.zeros((params.L, 1), hstar.dtype)
    obj = lambda h, th: objective(h, (zero, th[0], th[1], params))  # noqa: E731
    der = lane_derivatives(obj, None if derivatives is None else
                           (lambda h, th: derivatives(h, (zero, th[0], th[1], params))))
    return obj, der, (T, jnp.broadcast_to(V_inv, (T.shape[0],) + V_inv.shape))


@jax.custom_jvp
def _pivot_minimisers(params, ov, hstar):
    """`(h (K, 2), soft (K, 2))`: the lowest minimiser of the proximal problem at the pivot for every teacher
    field `hstar (K, L, 1)` (damped Newton from `PIVOT_STARTS`, to rounding), and the softest eigenvector of the
    Hessian there. `h` is differentiable by the implicit function theorem (`soft` is not)."""
    from phasejax.theory.prox import minimize_dense

    obj, der, (T, V_inv) = _pivot_problem(params, ov, hstar)
    K = hstar.shape[0]
    starts = jnp.asarray(PIVOT_STARTS, hstar.dtype)
    S = starts.shape[0]
    lanes = minimize_dense(obj, der, jnp.tile(starts, (K, 1)), (jnp.repeat(T, S, axis=0), jnp.repeat(V_inv, S, axis=0)),
                           40, stop_tol=1e-12)
    values = jnp.where(jnp.isfinite(lanes.f), lanes.f, jnp.inf).reshape(K, S)
    best = jnp.argmin(values, axis=1)
    h = lanes.h.reshape(K, S, 2)[jnp.arange(K), best]
    H = lanes.H.reshape(K, S, 2, 2)[jnp.arange(K), best]
    _, evecs = jnp.linalg.eigh(0.5 * (H + jnp.swapaxes(H, 1, 2)))
    return h, evecs[:, :, 0]


@_pivot_minimisers.defjvp
def _pivot_minimisers_jvp(primals, tangents):
    params, ov, hstar = primals
    h, soft = _pivot_minimisers(params, ov, hstar)
    obj, der, _ = _pivot_problem(params, ov, hstar)
    grad = lambda hk, th: der(hk, th)[1]  # noqa: E731
    data_of = lambda p, o, hs: _pivot_problem(p, o, hs)[2]  # noqa: E731
    data, d_data = jax.jvp(data_of, primals, tangents)

    def one(hk, th, dth):
        H = der(hk, th)[2]
        usable = jnp.all(jnp.isfinite(H)) & jnp.all(jnp.isfinite(hk))        # primal only: no tangent in a predicate
        H = jnp.where(usable, 0.5 * (H + H.T), jnp.eye(H.shape[0], dtype=H.dtype))
        _, dgrad = jax.jvp(lambda t: grad(hk, t), (th,), (dth,))
        return jnp.where(usable, -jnp.linalg.solve(H, dgrad), 0.0)

    dh = jax.vmap(one)(h, data, d_data)
    return (h, soft), (dh, jnp.zeros_like(soft))


def _pivot_normals(params, ov, hstar):
    """Unit normals `(K, 2)` in `xi` space of the jump surface through the pivot (where `omega = 0`), for the
    teacher's fields `hstar (K, L, 1)`.

    At `omega = 0` the dot-product student's loss is even in `h`, so the proximal problem has mirror minima
    `+-h_V` of equal value, and near the pivot the global minimiser switches between them across the plane
    `omega . h_V = 0`. `h_V` is found by damped Newton (`phasejax.theory.prox.minimize_dense`, to rounding)
    from the starts `PIVOT_STARTS`, the lowest kept; where it vanishes (one basin at `h = 0`), the direction of
    steepest change is the softest eigenvector of the Hessian there. Mapped to `xi` coordinates
    (`omega_l = sigma_l sqrt(q0) xi_l + m_l`), the normal is proportional to `sigma_l h_V,l`. A plane's normal has
    no sign, and which of the mirror minima is the lower is decided by rounding: the normal is returned with a
    non-negative first component (`n_0` is far from zero for the dot-product student's `h_V`), so the rule is
    the same whatever the rounding. Differentiable in `params`, `ov` and `hstar` (`h_V` by the implicit function
    theorem; the softest eigenvector, where it is used, is held fixed).
    """
    h, soft = _pivot_minimisers(params, ov, hstar)
    norm_h = jnp.linalg.norm(h, axis=1, keepdims=True)
    direction = jnp.where(norm_h > 1e-6, h / jnp.maximum(norm_h, 1e-300), soft)
    n = params.sigma[None] * direction
    n = n / jnp.linalg.norm(n, axis=1, keepdims=True)
    return jnp.where(n[:, :1] < 0, -n, n)


class QuadratureScheme(abc.ABC):
    """The interface of a state-evolution quadrature scheme: how the solver gets its nodes, their error replicas
    and, for an adapted scheme, their orientation (theory notes, section 8).

    A scheme is a frozen pytree (`flax.struct.dataclass`): its settings are static fields. What a subclass gives:

    * `dim` (the dimension `L (r + t)` it integrates) and `size` (its number of nodes);
    * `main(ov, params, frame=None) -> Quadrature`: the rule the solver iterates with, at overlaps `ov`;
    * `copy_rule(ov, params, frame, copy) -> Quadrature`: copy `copy` of the rule (`0` the main rule, `k >= 1`
      replica `k`; `copy` may be traced) whose nodes an error pass solves;
    * `pass_copies(replicon) -> tuple[int, ...]`: the copies a solution's error passes solve, in order (with the
      replicon, the main rule too where its minima are not otherwise at hand);
    * `pass_rows(weights, copy) -> (rows (n_replicas + 1, N), owned (n_replicas + 1,))`: the weights of the main
      rule (row 0) and of every replica on copy `copy`'s nodes, and which rows that copy holds;
    * `replicas(ov, params, frame=None, replica_frames=None) -> (Quadrature, W (n_replicas, M))`: every replica's
      nodes as one rule and each replica's weights on them (`None` without replicas).

    and may override (the defaults describe a fixed, non-adapted rule without replicas):

    * `n_replicas` (`0`: no error estimate), `shares_main_nodes` (the replicas are sub-rules of the main rule,
      so the error analysis solves no new proximal problems), `adaptive` (oriented at the overlaps: a cold solve
      takes two stages);
    * `applies_to(params) -> bool` (which models it is built for);
    * `frame(ov, params)` and `orientations(ov, params) -> (frame, replica frames)` (an adapted scheme's
      orientation; `None` otherwise).

    `as_scheme` accepts any instance; a subclass that lacks a required member cannot be made (the error names
    it).
    """

    n_replicas = 0
    shares_main_nodes = True
    adaptive = False

    @property
    @abc.abstractmethod
    def dim(self) -> int:
        """The dimension `L (r + t)` the scheme integrates."""

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """The number of nodes of the main rule."""

    def applies_to(self, params) -> bool:
        """Whether the scheme is built for `params`' model (default: any)."""
        return True

    def frame(self, ov, params):
        """The orientation at the overlaps `ov` (`None`: not adapted)."""
        return None

    def orientations(self, ov, params):
        """`(frame, replica frames)` at `ov` (`None`: not adapted)."""
        return None

    @abc.abstractmethod
    def main(self, ov, params, frame=None) -> Quadrature:
        """The main rule at `ov` (oriented by `frame` where the scheme is adapted)."""

    @abc.abstractmethod
    def copy_rule(self, ov, params, frame, copy) -> Quadrature:
        """Copy `copy` of the rule (`0` main, `k >= 1` replica `k`)."""

    @abc.abstractmethod
    def pass_copies(self, replicon: bool) -> tuple[int, ...]:
        """The copies whose nodes a solution's error passes solve."""

    @abc.abstractmethod
    def pass_rows(self, weights: Array, copy) -> tuple[Array, Array]:
        """`(rows, owned)`: every row of weights on copy `copy`'s nodes `weights (N,)`, and which rows it holds."""

    @abc.abstractmethod
    def replicas(self, ov, params, frame=None, replica_frames=None):
        """`(Quadrature, W (n_replicas, M))` of every replica, or `None`."""


@struct.dataclass
class SplitProductRule(QuadratureScheme):
    """The adapted rule of the two-token, rank-one model (`L = 2`, `r = t = 1`): converged and cheap.

    Where the prox's global minimiser switches basin (or moves steeply) the
    integrand jumps. For the dot-product student the loss is even in `h`, so
    at the pivot `omega = 0` the two mirror minima are degenerate, and near it
    the switch happens across the plane `omega . h_V = 0` (`h_V` the minimiser
    at `omega = 0`; it depends on the teacher's field, i.e. on `eta`). The rule
    integrates `eta` on a grid and, for every `eta` node, rotates the student's
    plane `xi` so that one axis is normal to that plane:

    * `eta`, in sum and difference coordinates `u = (sigma_1, -sigma_2)/|sigma|`
      (`eta_-`) and its orthogonal (`eta_+`): Gauss-Hermite with `n_smooth` nodes
      on `eta_+`, a trapezoid rule of step `eta_step` on `[-eta_range, eta_range]`
      on `eta_-` (uniform nodes reach the tails, where the target is far from
      uniform and most of `E[f^2]` sits);
    * `xi`, per `eta` node, in coordinates along and across the switch plane:
      Gauss-Hermite (`n_smooth`) along it; across it, the real line split where
      the plane passes (through the pivot `xi0`, `omega(xi0) = 0`) and a tanh-sinh
      rule of `n_piece` nodes on each side in `Phi(xi_perp)` (nodes cluster
      double-exponentially at the split, resolving the jump and the steep
      transition next to it from both sides).

    `n_smooth^2 * ceil(2 eta_range / eta_step) * 2 n_piece` nodes (20736 by
    default). Replicas (`n_replicas`, drawn from `seed`) shift the trapezoid
    and tanh-sinh grids by uniform random offsets, which makes those parts
    unbiased estimates.

    `teacher_coordinates` (default): the construction above is done in the
    coordinates `(xi', eta')` of every token's `(xi_l, eta_l)` plane rotated by
    the angle of `c = theta0 q0^{-1/2}`, `xi = s xi' + c eta'`,
    `eta = -c xi' + s eta'` (`s = (1 - c^2)^{1/2}`), in which the teacher's field
    is `h* = sigma eta'`. With `theta0 > 0` (the semantic branch) the teacher's
    field moves with `xi`, and at fixed `eta` the switch sheet is curved; at
    fixed `eta'` it is the plane through the pivot `xi'_0 = (xi0 - c eta') / s`
    with normal `sigma h_V(sigma eta')`, and the split sits on it
    (docs/theory.md, section 8.2: 5-30x smaller errors on the semantic branch
    at the same node count). Where `theta0 = 0` the two layouts have the same
    nodes. `False`: the plain layout in `(xi, eta)`.
    """

    n_smooth: int = struct.field(pytree_node=False, default=6)
    eta_step: float = struct.field(pytree_node=False, default=0.6)
    eta_range: float = struct.field(pytree_node=False, default=7.0)
    n_piece: int = struct.field(pytree_node=False, default=12)
    piece_range: float = struct.field(pytree_node=False, default=3.0)
    n_replicas: int = struct.field(pytree_node=False, default=4)
    seed: int = struct.field(pytree_node=False, default=0)
    teacher_coordinates: bool = struct.field(pytree_node=False, default=True)

    dim = 4
    shares_main_nodes = False
    adaptive = True          # oriented at the overlaps (`frame`): a cold solve takes two stages

    def __post_init__(self):
        for name in ("n_smooth", "n_piece", "n_replicas"):
            v = getattr(self, name)
            if int(v) != v or v < (2 if name == "n_replicas" else 1):
                raise ValueError(f"{name} must be an integer >= {2 if name == 'n_replicas' else 1}, got {v}")
        for name in ("eta_step", "eta_range", "piece_range"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")

    @property
    def n_eta(self) -> int:
        return int(np.ceil(2 * self.eta_range / self.eta_step))

    @property
    def size(self) -> int:
        return self.n_smooth**2 * self.n_eta * 2 * self.n_piece

    @staticmethod
    def applies_to(params) -> bool:
        """The rule is built for `L = 2`, `r = t = 1`."""
        return params.L == 2 and params.r == 1 and params.t == 1

    def _shifts(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        return rng.uniform(size=(self.n_replicas, 2))

    def eta_nodes(self, dtype, eta_shift=0.5):
        """`eta (K, 2)` nodes and weights `(K,)` of the teacher plane (Gauss-Hermite x shifted trapezoid)."""
        x, w = np.polynomial.hermite_e.hermegauss(self.n_smooth)
        x, w = jnp.asarray(x, dtype), jnp.asarray(w / w.sum(), dtype)
        n_e = self.n_eta
        eta_m = (jnp.arange(n_e, dtype=dtype) - 0.5 * n_e + eta_shift) * self.eta_step
        w_e = jnp.exp(-0.5 * eta_m**2) / jnp.sqrt(2 * jnp.pi) * self.eta_step
        EP, EM = jnp.meshgrid(x, eta_m, indexing="ij")
        return EP.ravel(), EM.ravel(), (w[:, None] * w_e[None, :]).ravel()

    def frame(self, ov, params, eta_shift=0.5):
        """The switch-plane normals `(K, 2)` at the `eta` nodes for overlaps `ov`. Differentiable (the normals follow
        the jump surface); the solver holds a frame fixed during a solve (the orientation changes only the rule's
        error, not the integral), the adjoint differentiates it (`phasejax.theory.adjoint`)."""
        from phasejax.theory.fields import field_maps, gaussian_fields

        dtype = ov.q0.dtype
        u, v = self._uv(params)
        EP, EM, _ = self.eta_nodes(dtype, eta_shift)
        eta = EP[:, None] * v[None] + EM[:, None] * u[None]
        if self.teacher_coordinates:
            hstar = params.sigma[None, :, None] * eta[:, :, None]           # the teacher nodes are h* / sigma
        else:
            maps = field_maps(ov, params)
            xi0 = self._pivot(ov, params)
            hstar = jax.vmap(lambda e: gaussian_fields(maps, params, xi0[:, None], e[:, None])[1])(eta)
        return _pivot_normals(params, ov, hstar)

    def orientations(self, ov, params):
        """`(frame, replica frames (n_replicas, K, 2))`: the main rule's normals and those of every replica's
        shifted `eta` nodes (`frame` at each replica's `eta` offset), found in one batch."""
        shifts = jnp.concatenate([jnp.asarray([0.5], ov.q0.dtype), jnp.asarray(self._shifts()[:, 0], ov.q0.dtype)])
        frames = jax.vmap(lambda sh: self.frame(ov, params, sh))(shifts)
        return frames[0], frames[1:]

    def _rotation(self, ov, params):
        """`(c, s)`: the rule's teacher and student coordinates `(eta', xi')` give `xi = s xi' + c eta'`,
        `eta = -c xi' + s eta'` (a rotation of each token's `(xi_l, eta_l)` plane). `teacher_coordinates`:
        `c = theta0 q0^{-1/2}`, `s = (1 - c^2)^{1/2}`, so that `eta' = h* / sigma`; else `(0, 1)`."""
        dtype = ov.q0.dtype
        if not self.teacher_coordinates:
            return jnp.zeros((), dtype), jnp.ones((), dtype)
        from phasejax.theory.fields import field_maps

        maps = field_maps(ov, params)
        return maps.B[0, 0], maps.sqrt_Rn[0, 0]

    @staticmethod
    def _uv(params):
        sig = params.sigma
        norm_s = jnp.sqrt(jnp.sum(sig**2))
        return jnp.stack([sig[0], -sig[1]]) / norm_s, jnp.stack([sig[1], sig[0]]) / norm_s

    @staticmethod
    def _pivot(ov, params):
        """`xi0 (2,)` where `omega = 0` (clipped to [-8, 8])."""
        q0 = ov.q0[0, 0]
        sq = jnp.sqrt(jnp.maximum(q0, 1e-300))
        m_tok = (params.C @ ov.m)[:, 0]
        return jnp.clip(jnp.where(q0 > 1e-300, -m_tok / (params.sigma * sq), 0.0), -8.0, 8.0)

    def rule(self, ov, params, frame=None, eta_shift=0.5, piece_shift=0.5) -> Quadrature:
        """The rule at overlaps `ov` for the switch-plane normals `frame (K, 2)` (default: computed at `ov`) and
        the given grid offsets in [0, 1) (main rule: midpoints)."""
        if not self.applies_to(params):
            raise ValueError(f"SplitProductRule needs L = 2 and r = t = 1, got L={params.L}, r={params.r}, "
                             f"t={params.t}; use SobolRule")
        dtype = ov.q0.dtype
        u, v = self._uv(params)
        x, w = np.polynomial.hermite_e.hermegauss(self.n_smooth)
        x, w = jnp.asarray(x, dtype), jnp.asarray(w / w.sum(), dtype)
        EP, EM, W_eta = self.eta_nodes(dtype, eta_shift)
        eta = EP[:, None] * v[None] + EM[:, None] * u[None]                         # (K, 2)
        # the rule oriented at `ov` is a constant of the solve; a given frame is differentiated as given
        normal = jax.lax.stop_gradient(self.frame(ov, params, eta_shift)) if frame is None else frame  # (K, 2)
        xi0 = self._pivot(ov, params)
        rot_c, rot_s = self._rotation(ov, params)
        along = jnp.stack([-normal[:, 1], normal[:, 0]], axis=1)
        if self.teacher_coordinates:
            # the pivot in the rotated student plane, per teacher node: s xi' + c eta' = xi0
            pivot = (xi0[None, :] - rot_c * eta) / jnp.maximum(rot_s, 1e-12)
            cut = jnp.clip(jnp.sum(normal * pivot, axis=1), -8.0, 8.0)             # (K,) split position
        else:
            cut = normal @ xi0                                                      # (K,) split position

        def across(c):
            lo = ndtr(c)
            s1, w1 = _de_piece(jnp.zeros((), dtype), lo, self.n_piece, piece_shift, self.piece_range)
            s2, w2 = _de_piece(lo, jnp.ones((), dtype), self.n_piece, piece_shift, self.piece_range)
            return jnp.concatenate([s1, s2]), jnp.concatenate([w1, w2])

        S, WS = jax.vmap(across)(cut)                                               # (K, 2 n_piece)
        K, P, G = eta.shape[0], S.shape[1], x.shape[0]
        xi = (x[None, :, None, None] * along[:, None, None, :]
              + S[:, None, :, None] * normal[:, None, None, :])                   # (K, G, P, 2)
        W = W_eta[:, None, None] * w[None, :, None] * WS[:, None, :]
        eta_full = jnp.broadcast_to(eta[:, None, None, :], (K, G, P, 2))
        if self.teacher_coordinates:                # (xi, eta_full) were built as (xi', eta'): rotate back
            xi, eta_full = rot_s * xi + rot_c * eta_full, rot_s * eta_full - rot_c * xi
        points = jnp.concatenate([xi, eta_full], axis=-1).reshape(-1, 4)
        return Quadrature(points=points, weights=W.ravel())

    def main(self, ov, params, frame=None) -> Quadrature:
        return self.rule(ov, params, frame)

    def _copy_shifts(self, dtype) -> Array:
        """The grid offsets `(n_replicas + 1, 2)` of the main rule (midpoints) and of every replica."""
        return jnp.concatenate([jnp.full((1, 2), 0.5, dtype), jnp.asarray(self._shifts(), dtype)])

    def copy_rule(self, ov, params, frame, copy) -> Quadrature:
        """Copy `copy` (may be traced) of the rule: `0` the main rule, `k >= 1` replica `k`, for the normals
        `frame` (the main rule's frame, or replica `k`'s from `orientations`)."""
        shift = self._copy_shifts(ov.q0.dtype)[copy]
        return self.rule(ov, params, frame, shift[0], shift[1])

    def pass_copies(self, replicon: bool) -> tuple[int, ...]:
        """The copies whose nodes a solution's error pass solves (`phasejax.theory.newton`): every replica, and
        the main rule too for the replicon (which needs all of a node's minima)."""
        return ((0,) if replicon else ()) + tuple(range(1, self.n_replicas + 1))

    def pass_rows(self, weights: Array, copy) -> tuple[Array, Array]:
        """`(rows (n_replicas + 1, N), owned (n_replicas + 1,))`: the weights of the main rule (row 0) and of every
        replica (row `k`) on the nodes of copy `copy` (weights `(N,)`), and which rows that copy holds (its own)."""
        owned = jnp.arange(self.n_replicas + 1) == copy
        return jnp.where(owned[:, None], weights[None], 0.0), owned

    def replicas(self, ov, params, frame=None, replica_frames=None) -> tuple[Quadrature, Array]:
        """The `n_replicas` shifted rules (`replica_frames`: their normals, `orientations`; computed if `None`)
        as one `Quadrature` of `n_replicas N` nodes and their weights `(n_replicas, n_replicas N)`."""
        sh = jnp.asarray(self._shifts(), ov.q0.dtype)
        if replica_frames is None:                # the eta offsets move the eta nodes: every replica has its own
            replica_frames = jax.lax.stop_gradient(self.orientations(ov, params)[1])
        rules = jax.vmap(lambda f, e, p: self.rule(ov, params, f, e, p))(replica_frames, sh[:, 0], sh[:, 1])
        K, N = rules.weights.shape
        points = rules.points.reshape(K * N, -1)
        W = (jnp.eye(K, dtype=points.dtype)[:, :, None] * rules.weights[None]).reshape(K, K * N)
        return Quadrature(points=points, weights=jnp.sum(W, 0) / K), W


def scrambled_sobol_points(dim: int, log2_n: int, seed: int) -> np.ndarray:
    """`2**log2_n` Owen-scrambled Sobol points mapped to `N(0, I_dim)` (scipy.stats.qmc), shape `(N, dim)`."""
    from scipy.stats import qmc

    u = qmc.Sobol(dim, scramble=True, seed=seed).random_base2(log2_n)
    return np.asarray(ndtri(jnp.asarray(np.clip(u, 1e-16, 1 - 1e-16))))


@struct.dataclass
class SobolRule(QuadratureScheme):
    """Randomised quasi-Monte Carlo: the union of `n_replicas` independently scrambled Sobol rules.

    The state evolution iterates with the union (`n_replicas * 2**log2_n`
    equally weighted nodes); each scramble is an unbiased estimate, so the
    spread of the `n_replicas` sub-rules gives a statistically valid error
    (`shares_main_nodes`: the error analysis solves no new proximal problems).
    The general-purpose scheme, for any `L`, `r`, `t`; its error decays like
    `N^{-1/2}` to `N^{-1}` where the integrand jumps.
    """

    points: Array
    dim: int = struct.field(pytree_node=False, default=4)
    log2_n: int = struct.field(pytree_node=False, default=12)
    n_replicas: int = struct.field(pytree_node=False, default=4)
    seed: int = struct.field(pytree_node=False, default=0)


    @classmethod
    def create(cls, dim: int, log2_n: int = 12, n_replicas: int = 4, seed: int = 0) -> "SobolRule":
        """`n_replicas` scrambles of `2**log2_n` Sobol points in `dim` dimensions."""
        if int(dim) != dim or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim}")
        if int(log2_n) != log2_n or not 1 <= log2_n <= 24:
            raise ValueError(f"log2_n must be an integer in [1, 24], got {log2_n}")
        if int(n_replicas) != n_replicas or n_replicas < 2:
            raise ValueError(f"n_replicas must be an integer >= 2, got {n_replicas}")
        pts = np.concatenate([scrambled_sobol_points(dim, log2_n, seed * 1009 + k) for k in range(n_replicas)])
        return cls(points=np.asarray(pts, np.float64), dim=int(dim), log2_n=int(log2_n),
                   n_replicas=int(n_replicas), seed=int(seed))

    @property
    def size(self) -> int:
        return self.n_replicas * 2**self.log2_n

    def main(self, ov, params, frame=None) -> Quadrature:
        n = self.points.shape[0]
        return Quadrature(points=self.points.astype(ov.q0.dtype), weights=jnp.full((n,), 1.0 / n, ov.q0.dtype))

    def copy_rule(self, ov, params, frame, copy) -> Quadrature:
        """The main rule (its replicas share its nodes)."""
        return self.main(ov, params)

    def pass_copies(self, replicon: bool) -> tuple[int, ...]:
        """One pass over the main nodes (the replicas are sub-rules of it)."""
        return (0,)

    def pass_rows(self, weights: Array, copy) -> tuple[Array, Array]:
        """`(rows (n_replicas + 1, N), owned)`: the main weights `weights (N,)` and every scramble's."""
        per = 2**self.log2_n
        W = jnp.repeat(jnp.eye(self.n_replicas, dtype=weights.dtype), per, axis=1) / per
        return jnp.concatenate([weights[None], W]), jnp.ones((self.n_replicas + 1,), bool)

    def replicas(self, ov, params, frame=None, replica_frames=None) -> tuple[Quadrature, Array]:
        q = self.main(ov, params)
        per = 2**self.log2_n
        W = jnp.repeat(jnp.eye(self.n_replicas, dtype=q.weights.dtype), per, axis=1) / per
        return q, W


@struct.dataclass
class FixedRule(QuadratureScheme):
    """A fixed `Quadrature` used as a scheme (no adaptation, no replicas: errors are not estimated)."""

    quadrature: Quadrature

    @property
    def dim(self) -> int:
        return self.quadrature.dim

    @property
    def size(self) -> int:
        return self.quadrature.size

    def main(self, ov, params, frame=None) -> Quadrature:
        return self.quadrature

    def copy_rule(self, ov, params, frame, copy) -> Quadrature:
        return self.quadrature

    def pass_copies(self, replicon: bool) -> tuple[int, ...]:
        """One pass over the nodes for the replicon; none otherwise (no replicas)."""
        return (0,) if replicon else ()

    def pass_rows(self, weights: Array, copy) -> tuple[Array, Array]:
        return weights[None], jnp.ones((1,), bool)

    def replicas(self, ov, params, frame=None, replica_frames=None):
        return None


def as_scheme(rule):
    """A scheme from a `Quadrature` (wrapped in `FixedRule`) or a `QuadratureScheme` (returned as is)."""
    if isinstance(rule, Quadrature):
        return FixedRule(rule)
    if isinstance(rule, QuadratureScheme):
        return rule
    raise ValueError(f"quadrature must be a Quadrature or a QuadratureScheme (SplitProductRule, SobolRule, "
                     f"FixedRule, or a subclass), got {type(rule).__name__}")


def default_scheme(params):
    """The converged default: `SplitProductRule()` for `L = 2, r = t = 1`, else `SobolRule` with 4 x 4096 points."""
    if SplitProductRule.applies_to(params):
        return SplitProductRule()
    return SobolRule.create(params.L * (params.r + params.t), log2_n=12, n_replicas=4)


def resolve_scheme(quadrature, params):
    """The quadrature scheme: `default_scheme(params)` for `None`, a `Quadrature` as a `FixedRule`, or a scheme."""
    scheme = default_scheme(params) if quadrature is None else as_scheme(quadrature)
    dim = params.L * (params.r + params.t)
    if scheme.dim != dim:
        raise ValueError(f"quadrature has dimension {scheme.dim}, but L (r + t) = {dim}")
    if not scheme.applies_to(params):
        raise ValueError(f"quadrature {type(scheme).__name__} does not apply to L={params.L}, r={params.r}, "
                         f"t={params.t}; use SobolRule")
    return scheme
