"""An empirical bracket of `alpha_c`: paired ERM on the same data with the branch constrained.

The positional-to-semantic threshold `alpha_c(omega)` is where the two branches' training losses per dimension
`e_t = R / d` (theory notes, sections 1 and 5) cross. This module measures the crossing on finite data without
either theory (replica-symmetric or not):

* for each data set, a **positional student** trained with the semantic direction projected out (the component
  of `Q` along the teacher's columns `Q*` removed, so `theta0 = 0` throughout training) and a **semantic
  student** with the positional directions projected out (the component along `u` removed, `m = 0`);
  `constrained_risk(risk, basis)` is `R(P Q)` with `P = I - B B^T`, whose gradient lies in the kept subspace,
  so an init inside it stays inside it (up to rounding, which the optimiser may let drift along the removed
  directions: they are flat for the constrained risk, and the student is `P Q`, the drift projected out);
* each branch's `e_t` is the lowest of `restarts` L-BFGS runs (`replica_init` plus noise, projected): an upper
  bound of that branch's minimum on the data. The two branches are trained on the **same** data set, so their
  difference `Delta e_t = e_t(semantic) - e_t(positional)` cancels most of the data's fluctuations
  (`paired_task`, vmapped over branches and restarts; `bracket_sweep` runs the `(alpha, dataset)` table of one
  `d` through `phasejax.sweep.run_chunked`, resumable);
* the task rows carry two control variates of exactly known mean (`expected_zero_loss`: the loss of the zero
  student given the teacher; the teacher's norm); their summaries, the extrapolation in `1 / d` and the
  crossing in `alpha` are `phasejax.empirics.bracket_analysis` (`bracket_report`);
* `restricted_hessian_min_eig`: the bottom of the Hessian spectrum of the found minima within their branch
  (Lanczos on Hessian-vector products of `R` restricted to the kept subspace), the smallest Ritz value and its
  Ritz residual.

What it measures is the minima these algorithms reach, an upper side of the ground state: each branch's `e_t`
is an upper bound of that branch's minimum on the data, so the measured `Delta e_t` is the true one plus the
difference of the two branches' optimisation gaps.

Data and keys: the data set of a task is `generate_data(bracket_keys(dataset, alpha_key(alpha), d)["data"],
params, d, n_max)` (its first `n` samples): every `(dataset, alpha, d)` has its own data; restart `k` of branch
`b` starts from `replica_init(b, fold_in(fold_in(bracket_keys(...)["init"], b), k), ...)`, projected.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.empirics.data import cast_params, check_positive_int, checked_size, generate_data, sample_count
from phasejax.empirics.metrics import _gauss_hermite_in, classify_solution
from phasejax.empirics.replicas import LanczosResult, hessian_vector_product, lanczos_min_eig, replica_init
from phasejax.empirics.sweep import problem_config
from phasejax.empirics.training import TrainConfig, check_trainable, minimize, tied_risk
from phasejax.precision import check_float_dtype, dtype_scope
from phasejax.sweep import RunOptions, canonical_config, run_chunked, run_options
from phasejax.theory.params import TiedAttentionParams, make_params, validate_params

Array = jax.Array

BRACKET_BRANCHES = ("positional", "semantic")
"""Branches of a bracket task (codes 0, 1, the order of `phasejax.empirics.INITS` and of `classify_solution`):
positional students have the teacher's directions projected out, semantic ones the positional directions."""

TASK_COLUMNS = (
    "n", "delta_e", "zero_loss", "zero_loss_expected", "teacher_norm",
    *(f"{k}_{b}" for b in ("positional", "semantic") for k in (
        "e", "e_half", "e_worst", "n_converged", "grad_norm", "steps", "q", "m", "theta", "solution", "leak",
        "hessian_min_eig", "hessian_min_eig_error")),
)
"""Outputs of `paired_task` (one row per data set), per branch `<b>`: `e_<b>`, the best restart's `e_t = R / d`;
`e_half_<b>`, the best of the first half of the restarts (how much doubling the restarts gained); `e_worst_<b>`;
`n_converged_<b>` restarts; the best restart's RMS gradient `grad_norm_<b>`; `steps_<b>` (the most of the
branch's restarts); the best one's overlaps per token (`q = sigma_1^2 |Q|^2 / d`, `m = u_1 . Q / sqrt(d)`,
`theta = sigma_1^2 Q*_1 . Q / d`, the sign fixed by the branch direction) and `solution_<b>` by
`classify_solution` (a diagnostic: a positional minimum with a large `q` can read "neither");
`leak_<b>`, the largest relative component along the removed directions over the restarts before the final
projection (rounding and its drift along the removed directions, flat for the constrained risk: the risk and the
student are of `P Q`, so the drift changes nothing); the smallest Ritz value of the restricted Hessian `R` at the
best restart
(`hessian_min_eig_<b>`) with its Ritz residual (`hessian_min_eig_error_<b>`). `delta_e = e_semantic -
e_positional`, `n` the sample count; the control variates' inputs `zero_loss = R(0) / d`, its exact
conditional mean given the teacher `zero_loss_expected = (n / d) expected_zero_loss` and `teacher_norm =
|Q*|^2 / (d t)` (mean 1)."""


# ----------------------------------------------------------------------------
# The constraint
# ----------------------------------------------------------------------------


def orthonormal_columns(M: Array) -> Array:
    """An orthonormal basis `(d, k)` of the column span of `M (d, k)` (reduced QR; `M` of full column rank)."""
    return jnp.linalg.qr(M, mode="reduced")[0]


def removed_basis(branch: Array, u: Array, Qstar: Array) -> Array:
    """Orthonormal basis `B (d, k)`, `k = max(K, t)`, of the directions a student of `branch` may not use.

    Positional (code 0): the teacher's columns `Q* (d, t)` (so `theta0 = Q*^T Q / d = 0`); semantic (1): the
    positional directions `u (K, d)` (so `m = u Q / sqrt(d) = 0`). The shorter set is padded with zero columns
    (they remove nothing), so both branches have one shape and `branch` may be traced (vmap over branches).
    """
    d, t = Qstar.shape
    K = u.shape[0]
    k = max(K, t)
    pad = lambda B: jnp.concatenate([B, jnp.zeros((d, k - B.shape[1]), B.dtype)], axis=1)  # noqa: E731
    return jnp.where(branch == 0, pad(orthonormal_columns(Qstar)), pad(u.T))


def project_out(Q: Array, B: Array) -> Array:
    """`P Q = Q - B (B^T Q)` for `Q (d, r)` and an orthonormal (or zero-padded) `B (d, k)`."""
    return Q - B @ (B.T @ Q)


def constrained_risk(risk, B: Array):
    """`Q -> risk(P Q)`, `P = I - B B^T`: the risk of a student confined to the complement of `B (d, k)`.

    Its gradient `P grad risk(P Q)` has no component along `B`, so a gradient method started at `P Q0` keeps
    `B^T Q = 0` up to rounding (the removed directions are flat for it, so rounding may drift there; the student
    is `P Q` either way); at a critical point `P Q` is a critical point of `risk` within the subspace.
    """
    return lambda Q: risk(project_out(Q, B))


def leak(Q: Array, B: Array) -> Array:
    """`|B^T Q|_F / |Q|_F`: the relative component of `Q (d, r)` along the removed directions (0 for `Q = 0`)."""
    norm = jnp.linalg.norm(Q)
    return jnp.linalg.norm(B.T @ Q) / jnp.where(norm > 0, norm, 1.0)


def restricted_hessian_min_eig(risk, Q: Array, B: Array, key: Array, steps: int = 40) -> LanczosResult:
    """Smallest eigenvalue of the Hessian of `risk` at `Q (d, r)` restricted to the complement of `B (d, k)`.

    Lanczos (`lanczos_min_eig`) on `v -> P H P v + c (I - P) v`: on the kept subspace the restricted Hessian
    `P H P`, on the removed directions the constant `c`, the Rayleigh quotient of `P H P` at a random vector of
    the kept subspace (an interior point of its spectrum), so the removed directions neither set the bottom nor
    widen the spectrum. Returns the smallest Ritz value and its Ritz residual (some eigenvalue lies within it).
    """
    k0, k1 = jax.random.split(key)
    hvp = hessian_vector_product(risk, Q)
    flat = lambda v: v.reshape(Q.shape)  # noqa: E731

    def restricted(v):
        return project_out(hvp(project_out(flat(v), B).ravel()).reshape(Q.shape), B).ravel()

    z = project_out(flat(jax.random.normal(k0, (Q.size,), jnp.float32).astype(Q.dtype)), B).ravel()
    z = z / jnp.linalg.norm(z)
    c = z @ restricted(z)

    def matvec(v):
        removed = v - project_out(flat(v), B).ravel()
        return restricted(v) + c * removed

    return lanczos_min_eig(matvec, z, steps, key=k1)


# ----------------------------------------------------------------------------
# Control variates with exactly known means
# ----------------------------------------------------------------------------

ZERO_LOSS_ORDER = 24
"""Gauss-Hermite nodes per dimension of `expected_zero_loss` (`L t` dimensions)."""


def expected_zero_loss(Qstar: Array, p: Array, params: TiedAttentionParams, quadrature) -> Array:
    """`E[ell_mu(Q = 0) | Q*]`: the expected per-sample loss of the student at `Q = 0` over fresh tokens, given
    the teacher `Q* (d, 1)` and the encodings `p (L, d)` (theory notes, section 1; exact at finite `d`).

    With `a_l = x_l . Q*/|Q*|` (`~ N(0, sigma_l^2)`), `h*_l = a_l sqrt(rho)`, `rho = |Q*|^2 / d`,
    `M = T(h*) - S(0)` and `x_l = a_l Q*/|Q*| + x_l^perp`, the loss `|M x - S(0) p|^2 / (2d)` has the
    conditional mean `[a^T M^T M a + (d - 1) sum_l sigma_l^2 (M^T M)_ll - 2 sum_ij M_ij a_j (Q*/|Q*| . (S(0) p)_i)
    + |S(0) p|^2] / (2d)`, integrated over `a` with `quadrature` (points `N(0, I_L)`). So `R(0) / d - (n / d)
    expected_zero_loss` has mean zero exactly: a control variate for `Delta e_t` (`summarize_bracket`), not a
    theory of the trained students.
    """
    d = Qstar.shape[0]
    dtype = Qstar.dtype
    L = params.L
    norm = jnp.linalg.norm(Qstar[:, 0])
    rho = norm**2 / d
    qhat = Qstar[:, 0] / norm
    S0 = params.student(jnp.zeros((L, params.r), dtype), params)
    s0p = S0 @ p                                             # (L, d)
    proj = s0p @ qhat                                        # (L,)
    sigma = jnp.broadcast_to(jnp.asarray(params.sigma, dtype), (L,))

    def at(z):
        a = sigma * z                                        # (L,)
        M = params.target((a * jnp.sqrt(rho))[:, None], params) - S0
        MtM = M.T @ M
        return a @ MtM @ a + (d - 1) * jnp.sum(sigma**2 * jnp.diag(MtM)) - 2.0 * proj @ (M @ a) \
            + jnp.sum(s0p**2)

    values = jax.vmap(at)(jnp.asarray(quadrature.points, dtype))
    return jnp.sum(jnp.asarray(quadrature.weights, dtype) * values) / (2.0 * d)


# ----------------------------------------------------------------------------
# One data set: both branches, best of K restarts
# ----------------------------------------------------------------------------


def alpha_key(alpha) -> int:
    """The integer that tells the data sets of one `alpha` from another's: `round(1e6 alpha)` (`alpha` in
    `(0, 4000)`, so it fits the 32 bits of `jax.random.fold_in`)."""
    a = float(alpha)
    if not np.isfinite(a) or a <= 0 or a >= 4000:
        raise ValueError(f"alpha must be finite and in (0, 4000), got alpha={alpha!r}")
    return int(round(1e6 * a))


def bracket_keys(dataset, alpha_code, d: int) -> dict[str, Array]:
    """Keys of data set `dataset` at `alpha_code = alpha_key(alpha)` and dimension `d`: `data` (for
    `generate_data`) and `init` (the restarts'). Every `(dataset, alpha, d)` has its own data, independent of the
    others' (independent errors across `alpha` and `d`, as the fits in `alpha` and `1 / d` assume); the two
    branches and all restarts of a task share one data set. `dataset`, `alpha_code` may be traced."""
    base = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(dataset), alpha_code), int(d))
    k_data, k_init = jax.random.split(base)
    return dict(data=k_data, init=k_init)


def paired_task(dataset, alpha, alpha_code, *, params: TiedAttentionParams, d: int, n_max: int, restarts: int = 4,
                config: TrainConfig = TrainConfig(), noise: float = 1.0, lanczos_steps: int = 40, n=None,
                dtype=jnp.float32) -> dict[str, Array]:
    """Both constrained branches on one data set, each the best of `restarts` L-BFGS runs: `TASK_COLUMNS`.

    Args:
      dataset: `()` int, the data set's index; alpha: `()` sample complexity; alpha_code: `()` int,
        `alpha_key(alpha)` (with `dataset` and `d` it picks the data: `bracket_keys`).
      params: the problem (`omega`, `lam`, `sigma`, `A`, ...; its `alpha` is replaced).
      d, n_max: dimension and padded sample count (static); the task uses the first `n` samples.
      restarts: runs per branch (static), vmapped with the branches (`2 restarts` runs side by side, sharing
        the data: the forward pass is one matrix product with `2 restarts r` columns).
      config: training options (`TrainConfig`, L-BFGS to the gradient tolerance).
      noise: init noise relative to the branch init's RMS entry (`replica_init`; restarts differ by it).
      lanczos_steps: Lanczos steps of the restricted Hessian at each branch's best restart (static).
      n: `()` int sample count (default `round(alpha d)`; the sweeps pass the exact one).
      dtype: float dtype of data, weights and metrics (static).
    Pure in `dataset`, `alpha`, `alpha_code`, `n` (vmap over them). Restart `k` of branch `b` starts from
    `replica_init(b, fold_in(fold_in(init_key, b), k), ...)` projected onto the branch's subspace.
    """
    dtype = check_float_dtype(dtype)
    p_ = cast_params(params, dtype).replace(alpha=jnp.asarray(alpha).astype(dtype))
    keys = bracket_keys(dataset, alpha_code, d)
    data = generate_data(keys["data"], p_, d, n_max, dtype=dtype)
    n = jnp.round(jnp.asarray(alpha, dtype) * d).astype(jnp.int32) if n is None else jnp.asarray(n, jnp.int32)
    mask = jnp.arange(n_max) < n
    u, Qstar = data.u, data.Qstar
    risk = tied_risk(data.x, data.y, data.p, p_, mask)

    rule = _gauss_hermite_in(params.L * params.t, ZERO_LOSS_ORDER, dtype)
    zero_loss = risk(jnp.zeros((d, params.r), dtype)) / d
    zero_loss_expected = n.astype(dtype) / d * expected_zero_loss(Qstar, data.p, p_, rule)
    teacher_norm = jnp.sum(Qstar**2) / (d * params.t)

    branches = jnp.repeat(jnp.arange(2), restarts)
    lane_keys = jax.vmap(lambda b, k: jax.random.fold_in(jax.random.fold_in(keys["init"], b), k))(
        branches, jnp.tile(jnp.arange(restarts), 2))

    def train(b, key):
        B = removed_basis(b, u, Qstar)
        Q0 = project_out(replica_init(b, key, u, Qstar, params.r, noise), B)
        res = minimize(constrained_risk(risk, B), Q0, config)
        return res, leak(res.params, B), project_out(res.params, B)

    res, leaks, Qs = jax.vmap(train)(branches, lane_keys)
    e = (res.loss / d).reshape(2, restarts)
    e_ranked = jnp.where(jnp.isfinite(e), e, jnp.inf)
    best = jnp.argmin(e_ranked, axis=1)                          # (2,) restart index per branch
    lane = jnp.arange(2) * restarts + best
    Q_best = Qs[lane]                                            # (2, d, r)
    e_best = jnp.min(e_ranked, axis=1)
    e_best = jnp.where(jnp.isfinite(e_best), e_best, jnp.nan)   # every restart diverged: NaN
    half = max(restarts // 2, 1)
    e_half = jnp.min(e_ranked[:, :half], axis=1)
    e_half = jnp.where(jnp.isfinite(e_half), e_half, jnp.nan)
    e_worst = jnp.max(jnp.where(jnp.isfinite(e), e, -jnp.inf), axis=1)
    e_worst = jnp.where(jnp.isfinite(e_worst), e_worst, jnp.nan)

    s1 = p_.sigma[0] ** 2
    sqrt_d = jnp.sqrt(jnp.asarray(d, dtype))
    tiny = jnp.finfo(dtype).tiny

    def measure(b, Q):
        m = u[0] @ Q[:, 0] / sqrt_d
        theta0 = Qstar[:, 0] @ Q[:, 0] / d
        sign = jnp.where(jnp.where(b == 0, m, theta0) < 0, -1.0, 1.0).astype(dtype)
        norm = jnp.linalg.norm(Q[:, 0])
        cos_m = jnp.abs(u[0] @ Q[:, 0]) / jnp.maximum(norm, tiny)
        cos_theta = jnp.abs(Qstar[:, 0] @ Q[:, 0]) / jnp.maximum(norm * jnp.linalg.norm(Qstar[:, 0]), tiny)
        return dict(q=s1 * jnp.sum(Q[:, 0] ** 2) / d, m=sign * m, theta=s1 * sign * theta0,
                    solution=classify_solution(cos_m, cos_theta))

    ov = jax.vmap(measure)(jnp.arange(2), Q_best)
    hessian_keys = jax.vmap(lambda b: jax.random.fold_in(jax.random.fold_in(keys["init"], b), restarts))(
        jnp.arange(2))
    hess = jax.vmap(lambda b, Q, k: restricted_hessian_min_eig(risk, Q, removed_basis(b, u, Qstar), k,
                                                               lanczos_steps))(jnp.arange(2), Q_best, hessian_keys)
    conv = res.converged.reshape(2, restarts)
    leaks = leaks.reshape(2, restarts)
    out = dict(n=n, delta_e=e_best[1] - e_best[0], zero_loss=zero_loss, zero_loss_expected=zero_loss_expected,
               teacher_norm=teacher_norm)
    for b, name in enumerate(BRACKET_BRANCHES):
        out.update({
            f"e_{name}": e_best[b], f"e_half_{name}": e_half[b], f"e_worst_{name}": e_worst[b],
            f"n_converged_{name}": jnp.sum(conv[b]).astype(jnp.int32),
            f"grad_norm_{name}": res.grad_norm[lane[b]], f"steps_{name}": jnp.max(res.steps.reshape(2, restarts)[b]),
            f"q_{name}": ov["q"][b], f"m_{name}": ov["m"][b], f"theta_{name}": ov["theta"][b],
            f"solution_{name}": ov["solution"][b], f"leak_{name}": jnp.max(leaks[b]),
            f"hessian_min_eig_{name}": hess.value[b], f"hessian_min_eig_error_{name}": hess.residual[b],
        })
    return out


# ----------------------------------------------------------------------------
# Sweeps
# ----------------------------------------------------------------------------


def _round12(values) -> tuple[float, ...]:
    return tuple(float(f"{float(x):.12g}") for x in np.atleast_1d(np.asarray(values, dtype=float)))


@dataclasses.dataclass(frozen=True)
class BracketGrid:
    """Paired tasks over `alphas` and data sets `datasets` (indices) at dimension `d`. Validated on construction
    (`ValueError` naming the field); `tasks()` is the flat table in order `(alpha, dataset)`."""

    alphas: tuple[float, ...]
    datasets: tuple[int, ...] = tuple(range(8))
    d: int = 1000

    def __post_init__(self):
        try:
            alphas = _round12(self.alphas)
        except (TypeError, ValueError):
            raise ValueError(f"alphas must be a sequence of numbers, got {self.alphas!r}") from None
        if not alphas or not np.all(np.isfinite(alphas)):
            raise ValueError(f"alphas must be a non-empty sequence of finite numbers, got {self.alphas!r}")
        codes = [alpha_key(a) for a in alphas]
        if len(set(codes)) != len(codes):
            raise ValueError(f"alphas must differ by at least 1e-6 (each has its own data sets), got {alphas}")
        object.__setattr__(self, "alphas", alphas)
        datasets = tuple(np.atleast_1d(np.asarray(self.datasets, dtype=object)))
        if not datasets or any(isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer))
                               or not 0 <= s < 2**31 for s in datasets):
            raise ValueError(f"datasets must be a non-empty sequence of integers in [0, 2^31), got {self.datasets!r}")
        if len(set(datasets)) != len(datasets):
            raise ValueError(f"datasets must not repeat an index, got {self.datasets!r}")
        object.__setattr__(self, "datasets", tuple(int(s) for s in datasets))
        object.__setattr__(self, "d", checked_size(self.alphas, self.d))   # alpha d >= 1 at every alpha

    @property
    def n_max(self) -> int:
        return max(sample_count(a, self.d) for a in self.alphas)

    def tasks(self) -> dict[str, np.ndarray]:
        """Columns `alpha, alpha_code (alpha_key), dataset, n = round(alpha d)`."""
        a, s = np.meshgrid(np.asarray(self.alphas), np.asarray(self.datasets), indexing="ij")
        a, s = a.ravel(), s.ravel()
        return dict(alpha=a, alpha_code=np.asarray([alpha_key(x) for x in a], np.int64), dataset=s.astype(np.int64),
                    n=np.asarray([sample_count(x, self.d) for x in a], np.int32))

    def to_json(self) -> dict:
        return dict(alphas=list(self.alphas), datasets=list(self.datasets), d=self.d)


TASK_BYTES = 2**32
"""Memory cap of one vmapped chunk of tasks (4 GiB): about `4 n_max L d * itemsize` bytes per task."""


def task_memory_estimate(grid: BracketGrid, *, L: int = 2, dtype=jnp.float32) -> int:
    """Bytes one task needs, about: `4 n_max L d * itemsize` (tokens, labels, `x + p` and the forward pass;
    the `2 restarts` weight vectors and the L-BFGS history are `O(d)` each)."""
    return int(4 * grid.n_max * L * grid.d * np.dtype(dtype).itemsize)


def bracket_sweep(grid: BracketGrid, params: TiedAttentionParams | None = None, *, restarts: int = 4,
                  config: TrainConfig = TrainConfig(), noise: float = 1.0, lanczos_steps: int = 40,
                  dtype=jnp.float32, options: RunOptions | None = None,
                  chunk_bytes: int = TASK_BYTES) -> dict[str, np.ndarray] | None:
    """Every task of `grid` (`paired_task`), vmapped and chunked through `run_chunked` (resumable with
    `options.run_dir`).

    `params`: the problem (default `make_params(1, 0.3)`: the paper's setting at `omega = 0.3`, `lambda = 0.01`;
    its `alpha` is replaced per task). A chunk holds fewer tasks than `options.chunk_size` when
    `chunk_size * task_memory_estimate` would exceed `chunk_bytes`; a grid whose single task does not fit the
    device's memory is refused before any compile. Returns the task columns (`alpha, alpha_code, dataset, n`),
    `omega`, `lam`, `d`, `restarts` and `TASK_COLUMNS`, or `None` while chunks are missing.

    Example (the task table of a grid; `bracket_sweep(grid, restarts=4)` trains them):
      >>> grid = BracketGrid(alphas=(1.2, 1.3), datasets=(0, 1, 2), d=400)
      >>> grid.n_max, grid.tasks()["n"].tolist()
      (520, [480, 480, 480, 520, 520, 520])
    """
    from phasejax.sweep import available_memory

    if not isinstance(grid, BracketGrid):
        raise ValueError(f"grid must be a BracketGrid, got {type(grid).__name__}")
    params = make_params(1.0, 0.3) if params is None else check_trainable(validate_params(params),
                                                                          square_loss_for="bracket_sweep")
    if params.r != 1 or params.t != 1 or params.K != 1:
        raise ValueError(f"the bracket is for rank r = t = K = 1 (the paper's model), got r={params.r}, "
                         f"t={params.t}, K={params.K}")
    restarts = check_positive_int(restarts, "restarts")
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    if isinstance(noise, bool) or not np.isfinite(noise) or noise <= 0:
        raise ValueError(f"noise must be a finite number > 0, got noise={noise!r}")
    lanczos_steps = check_positive_int(lanczos_steps, "lanczos_steps")
    dtype = check_float_dtype(dtype)
    options = run_options(options)
    need = task_memory_estimate(grid, L=params.L, dtype=dtype)
    have = available_memory(options.devices[0] if options.devices else None)
    if need > have:
        raise ValueError(f"one task (d={grid.d}, n_max={grid.n_max}) needs about {need / 2**30:.3g} GiB, "
                         f"{have / 2**30:.3g} GiB available; lower d or the largest alpha")
    options = options.replace(chunk_size=max(1, min(options.chunk_size, int(chunk_bytes // need))))
    one = functools.partial(paired_task, params=params, d=grid.d, n_max=grid.n_max, restarts=restarts,
                            config=config, noise=float(noise), lanczos_steps=lanczos_steps, dtype=dtype)

    def fn(chunk):
        return jax.vmap(lambda s, a, c, n: one(s, a, c, n=n))(
            jnp.asarray(chunk["dataset"]), jnp.asarray(chunk["alpha"]), jnp.asarray(chunk["alpha_code"]),
            jnp.asarray(chunk["n"]))

    cfg = dict(kind="bracket_sweep", grid=grid.to_json(), restarts=restarts, train=dataclasses.asdict(config),
               noise=float(noise), lanczos_steps=lanczos_steps, dtype=str(np.dtype(dtype)),
               omega=float(np.asarray(params.omega)), **problem_config(params))
    tasks = grid.tasks()
    with dtype_scope(dtype):
        out = run_chunked(fn, tasks, canonical_config(cfg), options)
    if out is None:
        return None
    rows = {k: np.asarray(v) for k, v in out.items()}
    rows.update(tasks)
    size = len(tasks["alpha"])
    rows.update(omega=np.full(size, float(np.asarray(params.omega))), lam=np.full(size, float(np.asarray(params.lam))),
                d=np.full(size, grid.d), restarts=np.full(size, restarts))
    return rows
