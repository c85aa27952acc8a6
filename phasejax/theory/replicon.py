"""The replicon (de Almeida-Thouless) eigenvalue of a replica-symmetric fixed point (theory notes, section 12).

At an RS fixed point, a perturbation of the weights `dQ (d x r)` in a
direction uncorrelated with the teacher, the positional encodings and the
fixed point (the replicon direction: the two replicas of the replica method
moving apart) has the Gram matrix `Delta = dQ^T dQ / d (r x r)`. It moves
every sample's fields by `d omega_l = x_l dQ / sqrt(d)`, Gaussian with
covariance `sigma_l^2 Delta` and independent across tokens, and `f` by
`J d omega` with `J = d f / d omega (L r x L r)` the Jacobian of
`f = V^{-1}(prox(omega) - omega)` (all blocks, cross-token ones included).
The ridge denoiser maps the fresh part of that change back through
`V0 = G^{-1}`. One round:

    Delta' = R(Delta) = alpha V0 [ sum_{l, l'} sigma_l^2 sigma_l'^2 E( J_{l l'} Delta J_{l l'}^T ) ] V0

a completely positive map on `r x r` matrices. Its spectral radius is the
replicon eigenvalue; RS is locally stable (and GAMP's fixed point attracts
undamped iterations in the replicon direction, at rate `sqrt(R)` per step)
when it is below 1. For `L = r = 1`, `sigma = 1` it is the textbook
`alpha E[(1 - d prox / d omega)^2] = alpha E[((1 - d prox / d omega)/V)^2] / (lambda + Vhat)^2`.

Where a node's global minimiser jumps between two basins, `J` carries a
delta function on the jump surface and `E[J (x) J]` its square: the
replicon is infinite. It is computed at a finite smoothing `tie_width`
(`tau`, an energy): the node's minima `k` are blended with weights
`w_k = softmax(-M_k / tau)` (`phasejax.theory.prox.tie_weights`), so

    f = sum_k w_k f_k,   J = sum_k w_k J_k + (1 / tau) sum_k w_k (f_k - f)(f_k - f)^T

(`d M_k / d omega = -f_k`, envelope theorem). As `tau -> 0` the second term
tends to the delta, and `E[J (x) J]` grows like `1 / tau`:
`R(tau) = R_regular + A / tau + O(1)`, with `R_regular` the replicon of the
pointwise Jacobians (`tau = 0`: no jump term) and `A >= 0` the jump
strength (`A = 0` where no node of the rule has two minima within reach).
`replicon` returns both and the value at `tau`, each with its quadrature
error from the scheme's replicas.

Everything is vectorised over quadrature nodes (main rule and replicas); the
cost is the prox's Newton steps from the starts of every node. Most starts
converge in a few steps and a few need many, so every start runs until it has
converged, at most `REPLICON_MAX_STEPS` steps, and the converged ones leave
the batch (`phasejax.theory.prox.minimize_lanes`). Call it once per
converged fixed point (`phasejax bench` measures its cost).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax import xla
from phasejax.precision import float64_scope
from phasejax.theory.fields import Overlaps
from phasejax.theory.params import TiedAttentionParams
from phasejax.theory.prox import closed_form_prox, tie_weights
from phasejax.theory.results import spread_error
from phasejax.theory.updates import NodeMinima, node_fields, node_minima

Array = jax.Array

DEFAULT_TIE_WIDTH = 1e-3
"""The reference smoothing of the `replicon` column (an energy; the `tie_width` of the smoothed SE rows)."""


@struct.dataclass
class RepliconResult:
    """The replicon eigenvalue of one fixed point, with 95% quadrature half-widths (`_err`, NaN without replicas).

    Attributes:
      value: `()` the replicon at smoothing `tie_width` (the regular value where `tie_width = 0`).
      regular: `()` the replicon of the pointwise Jacobians (no jump term): the `tie_width -> 0` limit where no
        node's minimiser jumps.
      jump: `()` `A = tie_width (value - regular)`, the coefficient of `1 / tie_width` (0 at `tie_width = 0`);
        `> 0` means the replicon diverges as the smoothing goes to zero.
      two_minima: `()` weight fraction of nodes with a second (converged, distinct) prox minimum whose envelope is
        within about `400 tie_width` of the lowest (weight above `1e-9` in a blend of width `20 tie_width`).
      prox_unconverged: `()` weight fraction of nodes whose lowest minimiser has gradient above `prox_tol`.
      tie_width: `()` the smoothing used.
    """

    value: Array
    regular: Array
    jump: Array
    two_minima: Array
    prox_unconverged: Array
    tie_width: Array
    value_err: Array
    regular_err: Array
    jump_err: Array


def replicon_operator(second_moment: Array, V0: Array, params: TiedAttentionParams) -> Array:
    """The matrix `(r^2, r^2)` of `Delta -> R(Delta)` (row-major `vec`) from `second_moment (L, L, r^2, r^2)`,
    the Gaussian average of `J_{l l'} (x) J_{l l'}` (Kronecker product of the Jacobian's blocks), and the
    penalty's response `V0 (r, r)` (`Penalty.replicon_factor`: `V0` for ridge)."""
    s2 = params.sigma**2
    inner = jnp.einsum("l,m,lmab->ab", s2, s2, second_moment)
    return params.alpha * jnp.kron(V0, V0) @ inner


def spectral_radius(M: Array) -> Array:
    """Largest modulus of the eigenvalues of a square matrix (closed form for `1 x 1`)."""
    if M.shape == (1, 1):
        return jnp.abs(M[0, 0])
    return jnp.max(jnp.abs(jnp.linalg.eigvals(M)))


@jax.named_scope("replicon")
def minima_jacobians(minima: NodeMinima, params: TiedAttentionParams, tie_width, prox_tol: float = 1e-8):
    """Per node `(N,)`, from its minima (`phasejax.theory.updates.node_minima`): the Jacobian `d f / d omega
    (N, L r, L r)` of the hard selection (the lowest minimum), the smoothed one at `tie_width` (equal where
    `tie_width = 0`), a flag for a second minimum (`RepliconResult.two_minima`), and the lowest minimiser's
    gradient norm.

    `J_k = V^{-1}(H_k^{-1} V^{-1} - I)` at every minimum `k` (implicit function theorem, `H_k` the objective's
    Hessian there), blended as in the module docstring; a minimum counts when its gradient is below `prox_tol`
    or it is the lowest.
    """
    L, r = params.L, params.r
    n = L * r
    fd = minima.fields
    V_inv = fd.V_inv
    Vb = jax.scipy.linalg.block_diag(*[V_inv[l] for l in range(L)])
    objective, derivatives = closed_form_prox(params)
    hess = (lambda h, th: derivatives(h, th)[2]) if derivatives is not None else jax.hessian(objective)
    eye = jnp.eye(n, dtype=V_inv.dtype)
    tau = jnp.asarray(tie_width, V_inv.dtype)

    def node(omega, T, hs, values, gnorms):
        theta = (omega, T, V_inv, params)
        w = omega.reshape(-1)
        best = jnp.argmin(values)
        Js = jax.vmap(lambda h: Vb @ (jnp.linalg.solve(0.5 * (hess(h, theta) + hess(h, theta).T), Vb) - eye))(hs)
        fk = (hs - w[None]) @ Vb.T                                         # (S, n): V^{-1}(h_k - omega)
        counted = (gnorms <= prox_tol) | (jnp.arange(values.shape[0]) == best)
        wts = tie_weights(jnp.where(counted, values, jnp.inf), jnp.maximum(tau, 1e-300), hs)
        wts = jnp.where(tau > 0, wts, jax.nn.one_hot(best, values.shape[0], dtype=wts.dtype))
        fbar = wts @ fk
        dev = fk - fbar[None]
        J_smooth = (jnp.einsum("k,kab->ab", wts, Js)
                    + jnp.where(tau > 0, jnp.einsum("k,ka,kb->ab", wts, dev, dev) / jnp.maximum(tau, 1e-300), 0.0))
        # a second distinct, converged minimum close in energy (the weights count one start per basin)
        near = tie_weights(jnp.where(counted, values, jnp.inf), 20.0 * jnp.maximum(tau, 1e-12), hs)
        two = jnp.sum(near > 1e-9) > 1
        return Js[best], J_smooth, two, gnorms[best]

    return jax.vmap(node)(fd.omega, fd.T, minima.hs, minima.values, minima.grad_norms)


def node_jacobians(ov: Overlaps, params: TiedAttentionParams, points: Array, tie_width, *, warm: Array | None = None,
                   n_steps: int = 30, prox_tol: float = 1e-8, max_steps: int | None = None,
                   mu0: float = 1e-10) -> tuple[Array, Array, Array, Array]:
    """`minima_jacobians` of the nodes `points`, every node's proximal problem solved by damped Newton
    (`phasejax.theory.prox.minimize_lanes`, each start until it has converged, at most `max(n_steps, max_steps)`
    steps; `mu0`: the initial damping) from `omega`, `-omega` (the mirror basin: the dot-product student is even)
    and (optionally) `warm (N, L r)`, and then from the mirror of the lowest minimum found: the starts the state
    evolution's own prox tries at a fixed point (its minimiser, the mirror of it and the field)."""
    fd = node_fields(ov, params, points)
    N = points.shape[0]
    w_all = fd.omega.reshape(N, -1)
    starts = jnp.stack([w_all, -w_all] + ([] if warm is None else [warm]), axis=1)      # (N, S, n)
    cap = max(int(n_steps), int(max_steps or 0))
    first = node_minima(ov, params, points, starts, jnp.ones((starts.shape[1],), bool), n_steps=cap,
                        prox_tol=prox_tol, mu0=mu0)
    best = jnp.take_along_axis(first.hs, jnp.argmin(first.values, axis=1)[:, None, None], axis=1)
    mirror = node_minima(ov, params, points, -best, jnp.ones((1,), bool), n_steps=cap, prox_tol=prox_tol, mu0=mu0)
    minima = first._replace(hs=jnp.concatenate([first.hs, mirror.hs], axis=1),
                            values=jnp.concatenate([first.values, mirror.values], axis=1),
                            grad_norms=jnp.concatenate([first.grad_norms, mirror.grad_norms], axis=1))
    return minima_jacobians(minima, params, tie_width, prox_tol)


def _second_moments(J: Array, L: int, r: int) -> Array:
    """Per node `J_{l l'} (x) J_{l l'}`: `(N, L, L, r^2, r^2)`."""
    Jb = J.reshape(J.shape[0], L, r, L, r).transpose(0, 1, 3, 2, 4)          # (N, L, L, r, r)
    return jnp.einsum("nlmac,nlmbd->nlmabcd", Jb, Jb).reshape(J.shape[0], L, L, r * r, r * r)


def replicon_from_nodes(J: Array, weights: Array, ov: Overlaps, params: TiedAttentionParams) -> Array:
    """The replicon eigenvalue from per-node Jacobians `J (N, L r, L r)` and quadrature `weights (N,)`."""
    M = jnp.tensordot(weights, _second_moments(J, params.L, params.r), axes=1)
    return spectral_radius(replicon_operator(M, params.penalty.replicon_factor(ov, params), params))


def replicon(ov: Overlaps, params: TiedAttentionParams, scheme, *, tie_width: float = DEFAULT_TIE_WIDTH,
             frame=None, n_steps: int = 30, prox_tol: float = 1e-8, max_steps: int | None = None,
             mu0: float = 1e-10) -> RepliconResult:
    """The replicon eigenvalue of the fixed point `ov` (module docstring), with errors from the scheme's replicas.

    Args:
      ov: the fixed point's overlaps (a converged SE solution; elsewhere the number has no meaning).
      params: model parameters (`alpha`, `lam` included).
      scheme: quadrature scheme (`SplitProductRule`, `SobolRule`, `FixedRule`; see `phasejax.theory.quadrature`).
      tie_width: smoothing `tau >= 0` of the jump term (an energy); `0`: the regular part only. A concrete
        Python number, not an array: it is static (it decides whether the jump term is computed), so under
        `jit` or `vmap` close over it rather than passing it as a traced argument.
      frame: the scheme's orientation (default: computed at `ov`).
      n_steps: damped Newton steps every start of every node's prox takes (cold starts `omega`, `-omega`).
      prox_tol: gradient tolerance for a prox minimum to count.
      max_steps: `None` (default): exactly `n_steps` steps. Else the starts still above `prox_tol` continue
        up to `max_steps` (`converge_lanes`): `replicon_columns` takes 6 steps then up to 30, which costs
        about half of 16 fixed steps and converges the starts that 16 leave unconverged.
      mu0: initial damping of the Newton steps (`REPLICON_MU0`).
    The default (30 fixed steps) is the reference the faster settings are checked against.
    Jittable and vmappable over `ov` and `params` (with a static `scheme`); runs in float64.
    """
    if not (isinstance(tie_width, (int, float)) and tie_width >= 0):
        raise ValueError(f"tie_width must be a number >= 0, got {tie_width!r}")
    with float64_scope():
        ov = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64), ov)
        frame = jax.lax.stop_gradient(scheme.frame(ov, params)) if frame is None else frame
        points, w_main, W_rep, shares = replicon_nodes(scheme, ov, params, frame)
        jac = node_jacobians(ov, params, points, tie_width, n_steps=n_steps, prox_tol=prox_tol, max_steps=max_steps,
                             mu0=mu0)
        return replicon_from_jacobians(jac, w_main, W_rep, shares, ov, params, tie_width, prox_tol)


def replicon_nodes(scheme, ov: Overlaps, params: TiedAttentionParams, frame=None, replica_frames=None):
    """The nodes the replicon is averaged on and its weights: `(points (M, D), w_main (M,), W_rep (K, M) or None,
    shares)`: the main rule's nodes followed by its replicas' (or, for a scheme whose replicas share the main
    rule's nodes, those nodes), the main rule's weights on them and each replica's (`shares`: the scheme's
    `shares_main_nodes`)."""
    rule = scheme.main(ov, params, frame)
    n_rep = int(scheme.n_replicas)
    if n_rep < 2:
        return rule.points, rule.weights, None, False
    quad_all, W = scheme.replicas(ov, params, frame, replica_frames)
    if scheme.shares_main_nodes:
        return quad_all.points, quad_all.weights, W, True
    N = rule.points.shape[0]
    points = jnp.concatenate([rule.points, quad_all.points])
    w_main = jnp.concatenate([rule.weights, jnp.zeros(quad_all.points.shape[0], rule.weights.dtype)])
    W_rep = jnp.concatenate([jnp.zeros((W.shape[0], N), W.dtype), W], axis=1)
    return points, w_main, W_rep, False


class RepliconMoments(NamedTuple):
    """Node averages behind the replicon, one per row of weights `(R,)` (the main rule's and its replicas'):
    `regular (R, L, L, r^2, r^2)` and `smoothed` (the same) Gaussian averages of `J_{l l'} (x) J_{l l'}` of the
    pointwise and the smoothed Jacobians, `two_minima (R,)` and `prox_unconverged (R,)` weight fractions."""

    regular: Array
    smoothed: Array
    two_minima: Array
    prox_unconverged: Array


def replicon_moments(jacobians, rows: Array, params: TiedAttentionParams, prox_tol: float = 1e-8) -> RepliconMoments:
    """`RepliconMoments` of the per-node `(J_regular, J_smoothed, two_minima, grad_norm)` of `minima_jacobians`
    under the weights `rows (R, N)`."""
    J_reg, J_tau, two, gnorm = jacobians
    L, r = params.L, params.r
    return RepliconMoments(regular=jnp.tensordot(rows, _second_moments(J_reg, L, r), axes=1),
                           smoothed=jnp.tensordot(rows, _second_moments(J_tau, L, r), axes=1),
                           two_minima=rows @ two.astype(rows.dtype),
                           prox_unconverged=rows @ (gnorm > prox_tol).astype(rows.dtype))


def replicon_from_moments(moments: RepliconMoments, shares: bool, ov: Overlaps, params: TiedAttentionParams,
                          tie_width: float) -> RepliconResult:
    """`RepliconResult` from `RepliconMoments` whose row 0 is the main rule's and rows `1..K` (if any) its
    replicas' (`shares`: the scheme's `shares_main_nodes`, for the error's form)."""
    dtype = moments.two_minima.dtype
    tau = jnp.asarray(tie_width, dtype)
    factor = params.penalty.replicon_factor(ov, params)
    radius = lambda M: spectral_radius(replicon_operator(M, factor, params))  # noqa: E731

    def evaluate(m_reg, m_tau):
        reg = radius(m_reg)
        val = radius(m_tau) if tie_width > 0 else reg
        return val, reg, tau * (val - reg)

    val, reg, jump = evaluate(moments.regular[0], moments.smoothed[0])
    nan = jnp.full((), jnp.nan, dtype)
    errs = (nan, nan, nan)
    if moments.two_minima.shape[0] > 1:
        reps = jax.vmap(evaluate)(moments.regular[1:], moments.smoothed[1:])
        errs = tuple(spread_error(m, k, main_is_mean=shares) for m, k in zip((val, reg, jump), reps))
    return RepliconResult(value=val, regular=reg, jump=jump, two_minima=moments.two_minima[0],
                          prox_unconverged=moments.prox_unconverged[0], tie_width=tau,
                          value_err=errs[0], regular_err=errs[1], jump_err=errs[2])


def replicon_from_jacobians(jacobians, w_main: Array, W_rep: Array | None, shares: bool, ov: Overlaps,
                            params: TiedAttentionParams, tie_width: float, prox_tol: float = 1e-8) -> RepliconResult:
    """`RepliconResult` from the per-node `(J_regular, J_smoothed, two_minima, grad_norm)` of `minima_jacobians`
    on the nodes of `replicon_nodes` (weights `w_main` and, for the errors, `W_rep`)."""
    rows = w_main[None] if W_rep is None else jnp.concatenate([w_main[None], W_rep])
    return replicon_from_moments(replicon_moments(jacobians, rows, params, prox_tol), shares, ov, params, tie_width)


JUMP_TOL = 1e-7
"""A jump strength `A` above this counts as a jump (the replicon diverges as the smoothing goes to zero): at the
reference smoothing `1e-3` such an `A` adds `1e-4` to the replicon, and it breaks replica symmetry below the
smoothing (energy) `tau* = A / (1 - R_regular) ~ 1e-7`. `A` varies smoothly across a phase diagram while its
replica error is heavy-tailed (a few nodes near a tie carry it), so the test is on `A` itself: on the semantic
branch of the main setting `A` falls by about one decade per 0.1 in alpha where it crosses this value."""

REPLICON_STEPS = 6
"""Damped Newton steps every start of every node's prox takes in `replicon_columns` (then `REPLICON_MAX_STEPS`)."""

REPLICON_MAX_STEPS = 30
"""`replicon_columns`: a start still above the gradient tolerance after `REPLICON_STEPS` continues up to this many
steps (`converge_lanes`); 13-16% of the starts need more than 6 steps, under 0.1% more than 16."""

REPLICON_MU0 = 1e-4
"""Initial Levenberg-Marquardt damping of the prox's Newton steps in `replicon_columns` (the SE solver's prox
starts at `1e-10`: from a start where the Hessian is indefinite, the steps are then rejected until the damping
has grown to about this size). Much larger values bias the value (they steer starts into the same basin:
at `1e-1` 7-10% of the nodes with two minima lose their second one)."""


def rs_stable(regular, jump, regular_err=0.0):
    """Where the replica-symmetric fixed point is locally stable in the limit of zero smoothing: the regular
    replicon below 1 by more than its error, and no jump term (`jump <= JUMP_TOL`). NaN values give `False`;
    a NaN error counts as 0."""
    regular, jump = jnp.asarray(regular), jnp.asarray(jump)
    r_err = jnp.nan_to_num(jnp.asarray(regular_err), nan=0.0)
    return (regular + r_err < 1.0) & (jump <= JUMP_TOL)


REPLICON_COLUMNS = ("replicon", "replicon_err", "replicon_regular", "replicon_regular_err", "replicon_jump",
                    "replicon_jump_err", "two_minima")


def replicon_result_columns(r: RepliconResult, converged) -> dict:
    """`REPLICON_COLUMNS` of a `RepliconResult` (any leading shape), NaN where not `converged`."""
    vals = dict(replicon=r.value, replicon_err=r.value_err, replicon_regular=r.regular,
                replicon_regular_err=r.regular_err, replicon_jump=r.jump, replicon_jump_err=r.jump_err,
                two_minima=r.two_minima)
    return {k: jnp.where(converged, v, jnp.nan) for k, v in vals.items()}


def replicon_columns(ov: Overlaps, params: TiedAttentionParams, scheme, converged,
                     tie_width: float = DEFAULT_TIE_WIDTH, n_steps: int = REPLICON_STEPS,
                     max_steps: int | None = REPLICON_MAX_STEPS, mu0: float = REPLICON_MU0) -> dict:
    """`REPLICON_COLUMNS` of one fixed point (NaN where not `converged`): `replicon` at `tie_width` with its
    error, the regular part and the jump strength with theirs, the weight fraction of nodes with two minima.
    Every start takes `n_steps` damped Newton steps and, where still above the tolerance, up to `max_steps`
    (`replicon`)."""
    r = replicon(ov, params, scheme, tie_width=tie_width, n_steps=n_steps, max_steps=max_steps, mu0=mu0)
    return replicon_result_columns(r, converged)


def overlaps_from_columns(table, i: int, params: TiedAttentionParams) -> Overlaps:
    """The fixed point of row `i` of a table from its flattened overlap columns (`result_columns`' `q0_*, m0_*,
    V0_*, theta0_*`, row-major), shaped for `params` (`q0, V0 (r, r)`, `m (K, r)`, `theta0 (t, r)`), float64."""
    r, K, t = int(params.r), int(params.K), int(params.t)
    vals = {}
    for name, shape in dict(q0=(r, r), m0=(K, r), V0=(r, r), theta0=(t, r)).items():
        keys = [f"{name}_{j}" for j in range(int(np.prod(shape)))]
        missing = [k for k in keys if k not in table]
        if missing:
            raise ValueError(f"table: no column {missing[0]} (the fixed point's {name} for r={r}, K={K}, t={t})")
        vals[name] = np.asarray([float(np.asarray(table[k])[i]) for k in keys], np.float64).reshape(shape)
    with float64_scope():
        return Overlaps(q0=jnp.asarray(vals["q0"]), m=jnp.asarray(vals["m0"]), V0=jnp.asarray(vals["V0"]),
                        theta0=jnp.asarray(vals["theta0"]))


def replicon_table(table, problem, *, converged=None, progress=None) -> dict:
    """`REPLICON_COLUMNS` (numpy, one value per row) of every fixed point of a table of `result_columns` rows,
    from its overlap columns (`overlaps_from_columns`); NaN where a row did not converge.

    Args:
      table: mapping of column names to `(n,)` arrays with `alpha`, `omega` and the overlap columns.
      problem: `problem(row) -> (params, quadrature)`, the problem of one row (`row`: column name -> that row's
        value; `alpha`, `omega` are set from the row afterwards) and the quadrature its fixed point was solved
        with (`None`: the default scheme; the errors come from its replicas). Return the same quadrature
        object for rows that share it: there is one compiled program per quadrature object.
      converged: `(n,)` bools (default: the `converged` column, else `status == "converged"`).
      progress: `progress(done, total)` after each row.
    """
    from phasejax.theory.quadrature import resolve_scheme

    n = len(np.asarray(table["alpha"]))
    if converged is None:
        converged = (np.asarray(table["converged"]).astype(bool) if "converged" in table
                     else np.asarray(table["status"]).astype(str) == "converged")
    converged = np.asarray(converged, bool)
    out = {k: np.full(n, np.nan) for k in REPLICON_COLUMNS}
    compiled = {}
    with float64_scope():
        for i in range(n):
            if converged[i]:
                row = {k: np.asarray(v)[i] for k, v in table.items() if np.ndim(v) == 1}
                params, quadrature = problem(row)
                params = params.replace(alpha=jnp.asarray(float(row["alpha"]), jnp.float64),
                                        omega=jnp.asarray(float(row["omega"]), jnp.float64))
                if id(quadrature) not in compiled:            # the scheme is static: one program per scheme
                    scheme = resolve_scheme(quadrature, params)
                    compiled[id(quadrature)] = (quadrature, xla.jit(
                        lambda ov, p, s=scheme: replicon_columns(ov, p, s, True)))
                cols = compiled[id(quadrature)][1](overlaps_from_columns(table, i, params), params)
                for k in REPLICON_COLUMNS:
                    out[k][i] = float(cols[k])
            if progress is not None:
                progress(i + 1, n)
    return out
