"""Two replicas: two tied students trained on the same data from different inits inside one branch.

The replica-symmetric (RS) theory describes the minimiser of the empirical
risk `R` (theory notes, section 1) as unique within a branch: two students
trained on the same data set from different starting points of the same
basin reach the same weights up to `o(1)` per coordinate, so their mutual
overlap `q12 = sigma_1^2 Q_1 . Q_2 / d` tends to the self-overlap `q` and
`q12 / q -> 1` as `d -> inf`. A persistent `q12 / q < 1` means many
minimisers (replica-symmetry breaking, or plain rugged landscape); one that
closes with `d` is a finite-size effect.

* `replica_init(branch, key, u, Qstar, r, noise)`: a branch init (`positional`
  or `semantic`, `phasejax.empirics.students`) plus iid Gaussian noise of
  `noise` times the init's RMS entry, one key per replica.
* `mutual_overlaps(Q1, Q2, sigma1)`: `q1, q2, q12` and the distance; `overlap_ratio(q12, q)`: `q12 / q`,
  NaN where undefined (`q = 0`, a diverged replica).
* `lanczos_min_eig(matvec, v0, steps)`: the smallest eigenvalue of a symmetric
  operator (Lanczos with full reorthogonalisation) with its Ritz residual, a
  bound on its error; `hessian_min_eig(loss, Q, key, steps)` applies it to the
  Hessian-vector product `jax.jvp(jax.grad(loss))`.
* `replica_pair(seed, alpha, omega, lam, branch, ...)`: one pair (data, two
  inits, training vmapped over the replicas, overlaps, gradient norm, smallest
  Hessian eigenvalue, a much longer continuation run); pure in its array
  arguments, vmapped over pairs by `replica_sweep`, which runs the task table
  through `phasejax.sweep.run_chunked` (resumable chunks).
* The analysis of a pair table, numpy only: `overlap_distribution` (quantiles of `q12 / q`, the fraction of
  pairs that meet), `initial_overlap_slope` (does the final overlap remember the initial one?),
  `hessian_verdict` (minimum, saddle or undecided, by the smallest Hessian eigenvalue against its error);
  `summarize_pairs` per `(alpha, omega, lam, branch, d)`, `summarize_points` over the sizes together.

The data of a pair are those of `phasejax.empirics.train_students` for the
same seed (`generate_data(run_keys(seed)["data"], ...)`); the replicas' keys
are `fold_in(run_keys(seed)["init"], 1 or 2)`.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.empirics.data import cast_params, check_positive_int, checked_size, generate_data, run_keys, sample_count
from phasejax.empirics.metrics import classify_solution
from phasejax.empirics.students import positional_init, semantic_init
from phasejax.empirics.sweep import problem_config
from phasejax.empirics.training import TrainConfig, check_trainable, minimize, tied_risk
from phasejax.precision import check_float_dtype, dtype_scope
from phasejax.solvers import HasStatus, Status
from phasejax.sweep import RunOptions, canonical_config, run_chunked, run_options
from phasejax.theory.params import TiedAttentionParams, make_params, validate_params

Array = jax.Array

REPLICA_BRANCHES = ("positional", "semantic")
"""Branches a pair starts in (codes 0, 1: the order of `phasejax.empirics.INITS`, so a code is also the
`classify_solution` code of that branch)."""

PAIR_COLUMNS = (
    "alpha", "omega", "lam", "branch", "d", "seed", "n", "q", "q1", "q2", "q12", "q12_over_q", "distance", "m",
    "theta", "init_q12_over_q", "train_loss_1", "train_loss_2", "grad_norm", "steps_1", "steps_2", "status_1",
    "status_2", "converged", "solution_1", "solution_2", "same_branch", "hessian_min_eig",
    "hessian_min_eig_error", "hessian_status", "long_run_loss_1", "long_run_loss_2", "long_run_grad_norm",
    "long_run_q12_over_q", "long_run_drift",
)
"""Columns of `two_replicas.csv`, one row per pair. Overlaps per token as in `runs.csv`: `q = (q1 + q2) / 2`
with `qa = sigma_1^2 |Q_a|^2 / d`, `q12` the mutual overlap modulo the model's symmetry `Q -> -Q`
(`mutual_overlaps`), `distance = q1 + q2 - 2 q12`; `m`, `theta` the replicas' means, each replica's sign
fixed by its branch direction; `init_q12_over_q` at the inits; `train_loss_a = R / d`; `grad_norm` the
larger RMS gradient entry of the two; `solution_a` by `classify_solution`, `same_branch` both in the pair's
branch; `hessian_min_eig` the smaller of the two replicas' smallest Hessian eigenvalues of `R` (Lanczos),
`hessian_min_eig_error` its Ritz residual (a bound on its error); `long_run_*` after continuing both
replicas for `long_steps` more steps: losses, larger gradient norm, `q12 / q` and
`long_run_drift = sigma_1^2 ||Q_long - Q||^2 / d` (larger of the two)."""


# ----------------------------------------------------------------------------
# Inits and overlaps
# ----------------------------------------------------------------------------


def replica_init(branch: Array, key: Array, u: Array, Qstar: Array, r: int, noise: float = 1.0) -> Array:
    """`Q0 (d, r)`: the init of `branch` (0 positional, 1 semantic; may be traced) plus noise.

    The noise is iid `N(0, s^2)` with `s = noise * RMS entry of the branch init`, so at `noise = 1` the
    init's own direction carries half of `|Q0|^2` and two replicas start at `q12 / q ~ 1/2` (direction
    cosines with the branch's direction `~ 0.7`, inside the branch by `classify_solution`).
    """
    base = jnp.where(branch == 0, positional_init(u, r), semantic_init(Qstar, r))
    scale = jnp.sqrt(jnp.mean(base**2))
    z = jax.random.normal(key, base.shape, jnp.float32).astype(base.dtype)
    return base + noise * scale * z


def mutual_overlaps(Q1: Array, Q2: Array, sigma1: Array | float = 1.0) -> dict[str, Array]:
    """Overlaps of two students `Q1, Q2 (d, r)`, each times `sigma1^2` (per token, as `q` in `runs.csv`).

    The tied student is invariant under `Q -> Q O` for every orthogonal `O (r, r)` (`S` sees `h h^T`; for
    `r = 1` the sign `Q -> -Q`), so the mutual overlap is taken modulo that symmetry:
    `q12 = max_O tr(O^T Q1^T Q2) / d = ||Q1^T Q2||_* / d` (nuclear norm; `|Q1 . Q2| / d` for `r = 1`),
    `qa = tr(Qa^T Qa) / d` and `distance = q1 + q2 - 2 q12 = min_O ||Q1 - Q2 O||_F^2 / d >= 0`.
    """
    d = Q1.shape[0]
    s1 = jnp.asarray(sigma1, Q1.dtype) ** 2
    q1, q2 = s1 * jnp.sum(Q1**2) / d, s1 * jnp.sum(Q2**2) / d
    q12 = s1 * jnp.sum(jnp.linalg.svd(Q1.T @ Q2, compute_uv=False)) / d
    return dict(q1=q1, q2=q2, q12=q12, distance=jnp.maximum(q1 + q2 - 2.0 * q12, 0.0))


def overlap_ratio(q12: Array, q: Array) -> Array:
    """`q12 / q` where it is defined (`q > 0` and both finite), NaN elsewhere (`q = 0`: both replicas at
    `Q = 0`; a non-finite `q`: a diverged replica). `summarize_pairs` drops and counts those pairs."""
    ok = jnp.isfinite(q) & jnp.isfinite(q12) & (q > 0)
    return jnp.where(ok, q12 / jnp.where(ok, q, 1.0), jnp.nan)


# ----------------------------------------------------------------------------
# Lanczos
# ----------------------------------------------------------------------------


@struct.dataclass
class LanczosResult(HasStatus):
    """Result of `lanczos_min_eig`: `value ()` the smallest Ritz value, `residual ()` its Ritz residual
    `|beta_k s_k|` (some eigenvalue lies within it of `value`), `iterations ()` and `status ()`
    (`Status.CONVERGED` when `residual <= rtol * spectral scale`, else `MAX_ITERATIONS`)."""

    value: Array
    residual: Array
    iterations: Array
    status: Array


def lanczos_min_eig(matvec, v0: Array, steps: int = 40, *, key: Array | None = None,
                    rtol: float = 1e-3) -> LanczosResult:
    """Smallest eigenvalue of a symmetric operator `matvec: (N,) -> (N,)` by `steps` Lanczos steps from `v0 (N,)`.

    Full reorthogonalisation (twice, against every earlier Lanczos vector), so the tridiagonal matrix has no
    spurious copies; on breakdown (an invariant subspace found) the next vector is a fresh random one
    (`key`) orthogonal to the earlier ones, which keeps every Ritz value an eigenvalue estimate of the
    operator. `steps` is capped at `N` (static). Jittable and vmappable.
    """
    n = v0.shape[0]
    steps = int(min(check_positive_int(steps, "steps"), n))
    key = jax.random.PRNGKey(0) if key is None else key
    dtype = v0.dtype
    tiny = jnp.sqrt(jnp.finfo(dtype).eps)

    def orthogonalise(V, w):
        w = w - V.T @ (V @ w)
        return w - V.T @ (V @ w)

    V0 = jnp.zeros((steps + 1, n), dtype).at[0].set(v0 / jnp.linalg.norm(v0))

    def body(j, carry):
        V, a, b, scale = carry
        w = matvec(V[j])
        a_j = w @ V[j]
        w = orthogonalise(V, w)
        b_j = jnp.linalg.norm(w)
        fresh = orthogonalise(V, jax.random.normal(jax.random.fold_in(key, j), (n,), jnp.float32).astype(dtype))
        broke = b_j <= tiny * jnp.maximum(scale, jnp.abs(a_j))
        nxt = jnp.where(broke, fresh / jnp.linalg.norm(fresh), w / jnp.where(broke, 1.0, b_j))
        V = V.at[j + 1].set(nxt)
        return V, a.at[j].set(a_j), b.at[j].set(jnp.where(broke, 0.0, b_j)), jnp.maximum(scale, jnp.abs(a_j) + b_j)

    _, a, b, scale = jax.lax.fori_loop(0, steps, body, (V0, jnp.zeros(steps, dtype), jnp.zeros(steps, dtype),
                                                        jnp.asarray(0.0, dtype)))
    T = jnp.diag(a) + jnp.diag(b[:-1], 1) + jnp.diag(b[:-1], -1)
    theta, S = jnp.linalg.eigh(T)
    residual = jnp.abs(b[-1] * S[-1, 0])
    converged = residual <= rtol * jnp.maximum(scale, jnp.finfo(dtype).tiny)
    return LanczosResult(value=theta[0], residual=residual, iterations=jnp.asarray(steps),
                         status=jnp.where(converged, Status.CONVERGED, Status.MAX_ITERATIONS).astype(jnp.int32))


def hessian_vector_product(loss, w: Array):
    """`v -> H v` of `loss` at `w` (any shape; `v` flat), by forward-over-reverse `jax.jvp(jax.grad(loss))`."""
    grad = jax.grad(loss)

    def hvp(v):
        return jax.jvp(grad, (w,), (v.reshape(w.shape),))[1].ravel()

    return hvp


def hessian_min_eig(loss, w: Array, key: Array, steps: int = 40) -> LanczosResult:
    """Smallest eigenvalue of the Hessian of `loss` at `w` (`lanczos_min_eig` on `hessian_vector_product`,
    random start from `key`)."""
    k0, k1 = jax.random.split(key)
    v0 = jax.random.normal(k0, (w.size,), jnp.float32).astype(w.dtype)
    return lanczos_min_eig(hessian_vector_product(loss, w), v0, steps, key=k1)


# ----------------------------------------------------------------------------
# One pair
# ----------------------------------------------------------------------------


def _long_config(config: TrainConfig, long_steps: int, dtype) -> TrainConfig:
    """The continuation run: `long_steps` more steps of the same optimiser, stopped only at `gtol / 100`."""
    return dataclasses.replace(config, max_steps=int(long_steps), gtol=config.tolerance(dtype) / 100.0)


def replica_pair(seed, alpha, omega, lam, branch, *, params: TiedAttentionParams, d: int, n_max: int,
                 config: TrainConfig = TrainConfig(), noise: float = 1.0, lanczos_steps: int = 40,
                 long_steps: int = 5000, n=None, dtype=jnp.float32) -> dict[str, Array]:
    """Train two tied students on the same data from two inits of `branch`; measure the pair.

    Args:
      seed: `()` int (data and the replicas' keys); alpha, omega, lam: `()`; branch: `()` int code into
        `REPLICA_BRANCHES`.
      params: the problem (its `alpha`, `omega`, `lam` replaced by the arguments; `params.student` is the
        student's attention map, so a custom one trains another tied model).
      d, n_max: dimension and padded sample count (static); the pair uses the first `n` samples.
      config: training options (both replicas; vmapped over the two).
      noise: init noise relative to the branch init's RMS entry (`replica_init`).
      lanczos_steps: Lanczos steps per Hessian (static).
      long_steps: steps of the continuation run (`gtol / 100`); 0 skips it (NaN columns).
      dtype: float dtype of data, weights and metrics (static).
    Returns: scalar metrics, keys `PAIR_COLUMNS` minus the task columns (`alpha, omega, lam, branch, d, seed`).
    """
    dtype = check_float_dtype(dtype)
    p_ = cast_params(params, dtype).replace(alpha=jnp.asarray(alpha).astype(dtype),
                                            omega=jnp.asarray(omega).astype(dtype),
                                            lam=jnp.asarray(lam).astype(dtype))
    keys = run_keys(seed)
    data = generate_data(keys["data"], p_, d, n_max, dtype=dtype)
    n = jnp.round(jnp.asarray(alpha, dtype) * d).astype(jnp.int32) if n is None else jnp.asarray(n, jnp.int32)
    mask = jnp.arange(n_max) < n
    u, Qstar = data.u, data.Qstar
    risk = tied_risk(data.x, data.y, data.p, p_, mask)

    replica_keys = jnp.stack([jax.random.fold_in(keys["init"], 1), jax.random.fold_in(keys["init"], 2)])
    Q0 = jax.vmap(lambda k: replica_init(branch, k, u, Qstar, params.r, noise))(replica_keys)
    s1 = jnp.sqrt(p_.sigma[0] ** 2)
    ov0 = mutual_overlaps(Q0[0], Q0[1], s1)

    res = jax.vmap(lambda q0: minimize(risk, q0, config))(Q0)
    Q1, Q2 = res.params[0], res.params[1]
    ov = mutual_overlaps(Q1, Q2, s1)
    q = 0.5 * (ov["q1"] + ov["q2"])

    # first columns, each replica's sign fixed by its branch direction (u_1 positional, Q*_1 semantic)
    m_a = jax.vmap(lambda Q: u[0] @ Q[:, 0] / jnp.sqrt(jnp.asarray(d, dtype)))(res.params)
    theta_a = jax.vmap(lambda Q: Qstar[:, 0] @ Q[:, 0] / d)(res.params)
    sign = jnp.where(jnp.where(branch == 0, m_a, theta_a) < 0, -1.0, 1.0).astype(dtype)
    m, theta = jnp.mean(sign * m_a), s1**2 * jnp.mean(sign * theta_a)

    def solution(Q):
        norm = jnp.linalg.norm(Q[:, 0])
        cos_m = jnp.abs(u[0] @ Q[:, 0]) / jnp.maximum(norm, jnp.finfo(dtype).tiny)
        cos_theta = jnp.abs(Qstar[:, 0] @ Q[:, 0]) / jnp.maximum(norm * jnp.linalg.norm(Qstar[:, 0]),
                                                                 jnp.finfo(dtype).tiny)
        return classify_solution(cos_m, cos_theta)

    sol = jax.vmap(solution)(res.params)
    hess = jax.vmap(lambda Q, k: hessian_min_eig(risk, Q, k, lanczos_steps))(
        res.params, jax.vmap(lambda k: jax.random.fold_in(k, 3))(replica_keys))
    worst = jnp.argmin(hess.value)

    nan = jnp.asarray(jnp.nan, dtype)
    if long_steps > 0:
        long = jax.vmap(lambda Q: minimize(risk, Q, _long_config(config, long_steps, dtype)))(res.params)
        ovl = mutual_overlaps(long.params[0], long.params[1], s1)
        drift = jnp.maximum(mutual_overlaps(long.params[0], Q1, s1)["distance"],
                            mutual_overlaps(long.params[1], Q2, s1)["distance"])
        long_cols = dict(long_run_loss_1=long.loss[0] / d, long_run_loss_2=long.loss[1] / d,
                         long_run_grad_norm=jnp.max(long.grad_norm),
                         long_run_q12_over_q=overlap_ratio(ovl["q12"], 0.5 * (ovl["q1"] + ovl["q2"])),
                         long_run_drift=drift)
    else:
        long_cols = dict(long_run_loss_1=nan, long_run_loss_2=nan, long_run_grad_norm=nan, long_run_q12_over_q=nan,
                         long_run_drift=nan)
    return dict(n=n, q=q, q1=ov["q1"], q2=ov["q2"], q12=ov["q12"], q12_over_q=overlap_ratio(ov["q12"], q),
                distance=ov["distance"], m=m, theta=theta,
                init_q12_over_q=overlap_ratio(ov0["q12"], 0.5 * (ov0["q1"] + ov0["q2"])),
                train_loss_1=res.loss[0] / d, train_loss_2=res.loss[1] / d, grad_norm=jnp.max(res.grad_norm),
                steps_1=res.steps[0], steps_2=res.steps[1], status_1=res.status[0], status_2=res.status[1],
                converged=jnp.all(res.converged), solution_1=sol[0], solution_2=sol[1],
                same_branch=(sol[0] == branch) & (sol[1] == branch),
                hessian_min_eig=hess.value[worst], hessian_min_eig_error=hess.residual[worst],
                hessian_status=hess.status[worst], **long_cols)


# ----------------------------------------------------------------------------
# Sweeps and summaries
# ----------------------------------------------------------------------------


def _round12(values) -> tuple[float, ...]:
    return tuple(float(f"{float(x):.12g}") for x in np.atleast_1d(np.asarray(values, dtype=float)))


@dataclasses.dataclass(frozen=True)
class ReplicaGrid:
    """Pairs of replicas over `alphas`, `lams`, `branches` (names in `REPLICA_BRANCHES`) and `seeds` at one
    `omega` and dimension `d`. Validated on construction (`ValueError` naming the field); `tasks()` is the
    flat table in order `(alpha, lam, branch, seed)`."""

    alphas: tuple[float, ...]
    lams: tuple[float, ...] = (0.01, 0.1)
    branches: tuple[str, ...] = REPLICA_BRANCHES
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    omega: float = 0.3
    d: int = 1000

    def __post_init__(self):
        for name in ("alphas", "lams"):
            try:
                v = _round12(getattr(self, name))
            except (TypeError, ValueError):
                raise ValueError(f"{name} must be a sequence of numbers, got {getattr(self, name)!r}") from None
            if not v or not np.all(np.isfinite(v)):
                raise ValueError(f"{name} must be a non-empty sequence of finite numbers, got {v}")
            object.__setattr__(self, name, v)
        if min(self.lams) < 0:
            raise ValueError(f"lams must be >= 0, got lams={self.lams}")
        branches = (self.branches,) if isinstance(self.branches, str) else tuple(self.branches)
        if not branches or any(b not in REPLICA_BRANCHES for b in branches):
            raise ValueError(f"branches must be names from {REPLICA_BRANCHES}, got {self.branches!r}")
        object.__setattr__(self, "branches", branches)
        seeds = tuple(np.atleast_1d(np.asarray(self.seeds, dtype=object)))
        if not seeds or any(isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer))
                            or s < 0 for s in seeds):
            raise ValueError(f"seeds must be a non-empty sequence of integers >= 0, got {self.seeds!r}")
        object.__setattr__(self, "seeds", tuple(int(s) for s in seeds))
        if not np.isfinite(self.omega) or not 0.0 <= float(self.omega) <= 1.0:
            raise ValueError(f"omega must lie in [0, 1], got omega={self.omega!r}")
        object.__setattr__(self, "omega", float(f"{float(self.omega):.12g}"))
        object.__setattr__(self, "d", checked_size(self.alphas, self.d))   # alpha d >= 1 at every alpha

    @property
    def n_max(self) -> int:
        return max(sample_count(a, self.d) for a in self.alphas)

    def tasks(self) -> dict[str, np.ndarray]:
        """Columns `alpha, lam, branch (code), seed, n = round(alpha d)`."""
        codes = [REPLICA_BRANCHES.index(b) for b in self.branches]
        a, lam, b, s = np.meshgrid(self.alphas, self.lams, codes, self.seeds, indexing="ij")
        n = np.asarray([sample_count(x, self.d) for x in a.ravel()], np.int32)
        return dict(alpha=a.ravel(), lam=lam.ravel(), branch=b.ravel().astype(np.int32),
                    seed=s.ravel().astype(np.int64), n=n)

    def to_json(self) -> dict:
        return dict(alphas=list(self.alphas), lams=list(self.lams), branches=list(self.branches),
                    seeds=list(self.seeds), omega=self.omega, d=self.d)


PAIR_BYTES = 2**32
"""Memory cap of one vmapped chunk of pairs (4 GiB): about `4 n_max L d * itemsize` bytes per pair."""


def replica_sweep(grid: ReplicaGrid, params: TiedAttentionParams | None = None, *,
                  config: TrainConfig = TrainConfig(), noise: float = 1.0, lanczos_steps: int = 40,
                  long_steps: int = 5000, dtype=jnp.float32, options: RunOptions | None = None,
                  chunk_bytes: int = PAIR_BYTES) -> dict[str, np.ndarray] | None:
    """Every pair of `grid`, vmapped and chunked through `run_chunked` (resumable with `options.run_dir`).

    `params`: problem template (default `make_params(1, 0)`, the paper's setting; its `alpha`, `omega`,
    `lam` are replaced per pair). Returns the columns `PAIR_COLUMNS` (codes for `branch`, `solution_*`,
    `status_*`), or `None` while chunks are missing.
    """
    if not isinstance(grid, ReplicaGrid):
        raise ValueError(f"grid must be a ReplicaGrid, got {type(grid).__name__}")
    params = make_params(1.0, 0.0) if params is None else check_trainable(validate_params(params))
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    if not np.isfinite(noise) or noise <= 0:
        raise ValueError(f"noise must be a finite number > 0, got noise={noise!r}")
    lanczos_steps = check_positive_int(lanczos_steps, "lanczos_steps")
    if isinstance(long_steps, bool) or int(long_steps) != long_steps or long_steps < 0:
        raise ValueError(f"long_steps must be an integer >= 0, got long_steps={long_steps!r}")
    dtype = check_float_dtype(dtype)
    options = run_options(options)
    per_pair = 4 * grid.n_max * params.L * grid.d * np.dtype(dtype).itemsize
    options = options.replace(chunk_size=max(1, min(options.chunk_size, int(chunk_bytes // per_pair))))
    one = functools.partial(replica_pair, params=params, d=grid.d, n_max=grid.n_max, config=config,
                            noise=float(noise), lanczos_steps=lanczos_steps, long_steps=int(long_steps), dtype=dtype)

    def fn(chunk):
        return jax.vmap(lambda s, a, lam, b, n: one(s, a, grid.omega, lam, b, n=n))(
            jnp.asarray(chunk["seed"]), jnp.asarray(chunk["alpha"]), jnp.asarray(chunk["lam"]),
            jnp.asarray(chunk["branch"]), jnp.asarray(chunk["n"]))

    cfg = dict(kind="replica_sweep", grid=grid.to_json(), train=dataclasses.asdict(config), noise=float(noise),
               lanczos_steps=lanczos_steps, long_steps=int(long_steps), dtype=str(np.dtype(dtype)),
               **{k: v for k, v in problem_config(params).items() if k != "lam"})    # lam: one per task
    tasks = grid.tasks()
    with dtype_scope(dtype):
        out = run_chunked(fn, tasks, canonical_config(cfg), options)
    if out is None:
        return None
    pairs = {k: np.asarray(v) for k, v in out.items()}
    pairs.update(tasks)
    size = len(tasks["alpha"])
    pairs["omega"] = np.full(size, grid.omega)
    pairs["d"] = np.full(size, grid.d)
    for k in ("converged", "same_branch"):
        pairs[k] = pairs[k].astype(bool)
    return pairs


MEET_TOLERANCE = 1e-6
"""Two replicas *meet* when `q12 / q > 1 - MEET_TOLERANCE`: at one minimum to the training tolerance (a pair
stopped at RMS gradient `1e-6` with curvature `>= lambda` is within `1 - q12 / q ~ 1e-8` of it; float32
rounding of `q12 / q` is `~ 1e-7`)."""

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
"""Quantiles of `q12 / q` reported per group (`overlap_distribution`), besides the minimum and maximum."""

HESSIAN_VERDICTS = ("minimum", "saddle", "undecided")
"""What the smallest Hessian eigenvalue says about a stopping point (`hessian_verdict`)."""

HESSIAN_SIGMAS = 2.0
"""Default margin of `hessian_verdict`, in units of the eigenvalue's error bound."""

SUMMARY_KEYS = ("q", "q12", "q12_over_q", "distance", "m", "theta", "train_loss", "loss_gap", "grad_norm",
                "hessian_min_eig", "long_run_q12_over_q", "long_run_drift")
"""Per-group means and standard errors of `summarize_pairs` (`<key>`, `<key>_err`) over the pairs whose
replicas both ended in the group's branch and whose `q12 / q` is defined. `train_loss` is the replicas' mean
`R / d`, `loss_gap` `|R_1 - R_2| / d`. (`q12 / q` is not one number per group: its distribution is in
`DISTRIBUTION_KEYS`.)"""

LONG_RUN_KEYS = ("long_run_q12_over_q", "long_run_drift")
"""Statistics of the continuation run: averaged over the pairs whose continuation `q12 / q` is defined too
(none when `long_steps = 0`: NaN)."""


def _quantile_name(p: float) -> str:
    return f"q12_over_q_p{round(100 * p):02d}"


DISTRIBUTION_KEYS = ("q12_over_q_min",) + tuple(_quantile_name(p) for p in QUANTILES) + (
    "q12_over_q_max", "n_meet", "meet_fraction", "apart_median")
"""Keys of `overlap_distribution` besides `n`: quantiles of `q12 / q` (`p10` ... `p90`, numpy's linear
interpolation between order statistics), the number and fraction of pairs that meet, and the median
`q12 / q` of the pairs that do not (NaN when every pair meets)."""


def overlap_distribution(ratios, *, meet_tol: float = MEET_TOLERANCE,
                         quantiles: tuple[float, ...] = QUANTILES) -> dict[str, float]:
    """The distribution of `q12 / q` over the pairs of one group: `ratios (n,)`, finite.

    Returns `n`, `q12_over_q_min`, `q12_over_q_p<100 p>` for each `p` in `quantiles` (numpy's default linear
    interpolation between order statistics), `q12_over_q_max`, `n_meet` and `meet_fraction` (pairs with
    `q12 / q > 1 - meet_tol`) and `apart_median` (median over the pairs that do not meet; NaN when none).
    With no pair every value is NaN and the counts 0.
    """
    r = np.asarray(ratios, float)
    if r.ndim != 1:
        raise ValueError(f"ratios must be one-dimensional, got shape {r.shape}")
    if not np.all(np.isfinite(r)):
        raise ValueError("ratios must be finite (drop the pairs whose q12 / q is undefined first)")
    if not (np.isfinite(meet_tol) and 0.0 < meet_tol < 1.0):
        raise ValueError(f"meet_tol must lie in (0, 1), got meet_tol={meet_tol!r}")
    qs = np.asarray(quantiles, float)
    if qs.ndim != 1 or not np.all((qs >= 0) & (qs <= 1)):
        raise ValueError(f"quantiles must be numbers in [0, 1], got quantiles={quantiles!r}")
    nan = float("nan")
    out = dict(n=int(r.size), q12_over_q_min=float(r.min()) if r.size else nan)
    for p, v in zip(qs, np.quantile(r, qs) if r.size else np.full(qs.size, nan)):
        out[_quantile_name(float(p))] = float(v)
    meet = r > 1.0 - meet_tol
    out.update(q12_over_q_max=float(r.max()) if r.size else nan, n_meet=int(meet.sum()),
               meet_fraction=float(meet.mean()) if r.size else nan,
               apart_median=float(np.median(r[~meet])) if (~meet).any() else nan)
    return out


def initial_overlap_slope(init, final, strata=None) -> dict[str, float]:
    """Does the final overlap remember the initial one? Ordinary least squares `final = c_s + slope * init`.

    Args:
      init, final: `(n,)` per pair (`init_q12_over_q`, and `q12_over_q` or any per-pair quantity, e.g. a 0/1
        "the pair meets").
      strata: `(n,)` labels (e.g. `d`) with one intercept `c_s` each, so the slope is measured within strata
        (a size's mean does not pass for a dependence on `init`); `None`: one intercept.
    Returns `slope`, `slope_err` (its standard error, `sqrt(s^2 / S_xx)` with `s^2` the residual variance on
    `dof = n - n_strata - 1` degrees of freedom), `n` and `dof`; NaN slope when `init` does not vary within a
    stratum, NaN error when `dof < 1`.
    """
    x, y = np.asarray(init, float), np.asarray(final, float)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"init and final must be one-dimensional of one length, got shapes {x.shape}, {y.shape}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("init and final must be finite")
    labels = np.zeros(x.size) if strata is None else np.asarray(strata)
    if labels.shape != x.shape:
        raise ValueError(f"strata must have one label per pair, got shape {labels.shape} for {x.size} pairs")
    xd, yd = x.copy(), y.copy()
    levels = np.unique(labels)
    for s in levels:
        sel = labels == s
        xd[sel] -= x[sel].mean()
        yd[sel] -= y[sel].mean()
    sxx = float(np.sum(xd**2))
    dof = int(x.size - levels.size - 1)
    nan = float("nan")
    if sxx <= 0.0:
        return dict(slope=nan, slope_err=nan, n=int(x.size), dof=dof)
    slope = float(np.sum(xd * yd) / sxx)
    err = float(np.sqrt(np.sum((yd - slope * xd) ** 2) / dof / sxx)) if dof >= 1 else nan
    return dict(slope=slope, slope_err=err, n=int(x.size), dof=dof)


def hessian_verdict(eig, error, n_sigma: float = HESSIAN_SIGMAS) -> np.ndarray:
    """`'minimum'` where `eig > n_sigma * error`, `'saddle'` where `eig < -n_sigma * error`, else `'undecided'`.

    `eig, error`: the smallest Hessian eigenvalue of a stopping point and its error bound (`hessian_min_eig`,
    `hessian_min_eig_error`: the Lanczos Ritz residual), any shape; a NaN eigenvalue is undecided. Returns
    strings from `HESSIAN_VERDICTS`, the shape of `eig`.
    """
    e, err = np.asarray(eig, float), np.asarray(error, float)
    if not (np.isfinite(n_sigma) and n_sigma > 0):
        raise ValueError(f"n_sigma must be a finite number > 0, got n_sigma={n_sigma!r}")
    if np.any(err < 0):
        raise ValueError("error must be >= 0 (an error bound)")
    e, err = np.broadcast_arrays(e, err)
    out = np.full(e.shape, "undecided", dtype=object)
    out[e > n_sigma * err] = "minimum"
    out[e < -n_sigma * err] = "saddle"
    return out.astype(str)


def _analysed(pairs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masks over pairs: both replicas in the pair's branch; `q12 / q` defined; its continuation `q12 / q`
    defined."""
    q, q12, ratio = (np.asarray(pairs[k], float) for k in ("q", "q12", "q12_over_q"))
    defined = np.isfinite(q) & np.isfinite(q12) & np.isfinite(ratio) & (q > 0)
    return (np.asarray(pairs["same_branch"]).astype(bool), defined,
            np.isfinite(np.asarray(pairs["long_run_q12_over_q"], float)))


def _groups(pairs: dict[str, np.ndarray], keys: tuple[str, ...]):
    """`(values, mask)` per distinct value of the columns `keys`, sorted."""
    cols = {k: np.asarray(pairs[k]).astype(float) for k in keys}
    groups = sorted({tuple(float(cols[k][i]) for k in keys) for i in range(len(cols[keys[0]]))})
    return [(g, np.all([np.isclose(cols[k], v) for k, v in zip(keys, g)], axis=0)) for g in groups]


def _verdict_counts(verdicts: np.ndarray) -> dict[str, int]:
    return {f"n_{v}": int(np.sum(verdicts == v)) for v in HESSIAN_VERDICTS}


def summarize_pairs(pairs: dict[str, np.ndarray], *, n_sigma: float = HESSIAN_SIGMAS) -> dict[str, np.ndarray]:
    """One row per `(alpha, omega, lam, branch, d)`: pair counts, the distribution of `q12 / q`
    (`overlap_distribution`), its slope on the initial overlap (`initial_overlap_slope`: `init_slope`,
    `init_slope_err`), the Hessian verdicts (`hessian_verdict`: `n_minimum`, `n_saddle`, `n_undecided`) and
    `SUMMARY_KEYS` means +- standard errors.

    Everything runs over the pairs whose replicas both stayed in the branch (`n_same_branch`) less those whose
    `q12 / q` is undefined (`q <= 0` or a non-finite `q`, `q12`, `q12 / q`: a replica at `Q = 0` or diverged),
    which are dropped and counted in `n_dropped`; `LONG_RUN_KEYS` also drop the pairs whose continuation
    `q12 / q` is undefined (`n_dropped_long_run`; every pair when there was no continuation run). A NaN left in
    any other key of an analysed pair makes that mean NaN (nothing else is dropped).
    """
    keys = ("alpha", "omega", "lam", "branch", "d")
    in_branch_all, defined, long_defined = _analysed(pairs)
    derived = dict(train_loss=0.5 * (np.asarray(pairs["train_loss_1"]) + np.asarray(pairs["train_loss_2"])),
                   loss_gap=np.abs(np.asarray(pairs["train_loss_1"]) - np.asarray(pairs["train_loss_2"])))
    verdicts = hessian_verdict(pairs["hessian_min_eig"], np.abs(np.asarray(pairs["hessian_min_eig_error"], float)),
                               n_sigma)
    ratio, init = np.asarray(pairs["q12_over_q"], float), np.asarray(pairs["init_q12_over_q"], float)
    out: dict[str, list] = {k: [] for k in keys}
    out.update(n_pairs=[], n_same_branch=[], n_converged=[], n_dropped=[], n_dropped_long_run=[], n=[])
    for k in DISTRIBUTION_KEYS + ("init_slope", "init_slope_err") + tuple(f"n_{v}" for v in HESSIAN_VERDICTS):
        out[k] = []
    for k in SUMMARY_KEYS:
        out[k], out[k + "_err"] = [], []
    for g, sel in _groups(pairs, keys):
        in_branch = sel & in_branch_all
        kept = in_branch & defined
        kept_long = kept & long_defined
        for k, v in zip(keys, g):
            out[k].append(v)
        out["n_pairs"].append(int(sel.sum()))
        out["n_same_branch"].append(int(in_branch.sum()))
        out["n_converged"].append(int(np.sum(np.asarray(pairs["converged"]).astype(bool) & in_branch)))
        out["n_dropped"].append(int(np.sum(in_branch & ~defined)))
        out["n_dropped_long_run"].append(int(np.sum(kept & ~long_defined)))
        for k, v in overlap_distribution(ratio[kept]).items():
            out[k].append(v)
        good = kept & np.isfinite(init)
        fit = initial_overlap_slope(init[good], ratio[good]) if good.sum() > 2 else dict(slope=np.nan,
                                                                                         slope_err=np.nan)
        out["init_slope"].append(fit["slope"])
        out["init_slope_err"].append(fit["slope_err"])
        for k, v in _verdict_counts(verdicts[kept]).items():
            out[k].append(v)
        for k in SUMMARY_KEYS:
            v = np.asarray(derived[k] if k in derived else pairs[k], float)[kept_long if k in LONG_RUN_KEYS else kept]
            out[k].append(float(v.mean()) if v.size else np.nan)
            out[k + "_err"].append(float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else np.nan)
    table = {k: np.asarray(v) for k, v in out.items()}
    for k in ("branch", "d", "n", "n_meet") + tuple(f"n_{v}" for v in HESSIAN_VERDICTS):
        table[k] = table[k].astype(int)
    return table


def summarize_points(pairs: dict[str, np.ndarray], *, n_sigma: float = HESSIAN_SIGMAS) -> dict[str, np.ndarray]:
    """One row per `(alpha, omega, lam, branch)`, all sizes together, over the same pairs as `summarize_pairs`:

    * `init_slope`, `init_slope_err`: `q12 / q` against `init_q12_over_q` with one intercept per `d`
      (`initial_overlap_slope`), all pairs;
    * `init_slope_apart`, `init_slope_apart_err`: the same over the pairs that do not meet;
    * `meet_init_slope`, `meet_init_slope_err`: the 0/1 "the pair meets" against `init_q12_over_q` (a linear
      probability slope), one intercept per `d`;
    * `n`, `n_meet`, the Hessian verdict counts `n_minimum`, `n_saddle`, `n_undecided`.
    """
    in_branch_all, defined, _ = _analysed(pairs)
    verdicts = hessian_verdict(pairs["hessian_min_eig"], np.abs(np.asarray(pairs["hessian_min_eig_error"], float)),
                               n_sigma)
    ratio, init = np.asarray(pairs["q12_over_q"], float), np.asarray(pairs["init_q12_over_q"], float)
    d = np.asarray(pairs["d"])
    meet = ratio > 1.0 - MEET_TOLERANCE
    keys = ("alpha", "omega", "lam", "branch")
    rows: dict[str, list] = {k: [] for k in keys + ("n", "n_meet") + tuple(f"n_{v}" for v in HESSIAN_VERDICTS)}
    for name in ("init_slope", "init_slope_apart", "meet_init_slope"):
        rows[name], rows[name + "_err"] = [], []

    def slope(sel, y):
        if sel.sum() < 3:
            return np.nan, np.nan
        fit = initial_overlap_slope(init[sel], y[sel], strata=d[sel])
        return fit["slope"], fit["slope_err"]

    for g, sel in _groups(pairs, keys):
        kept = sel & in_branch_all & defined & np.isfinite(init)
        for k, v in zip(keys, g):
            rows[k].append(v)
        rows["n"].append(int(kept.sum()))
        rows["n_meet"].append(int(np.sum(kept & meet)))
        for k, v in _verdict_counts(verdicts[kept]).items():
            rows[k].append(v)
        for name, s, y in (("init_slope", kept, ratio), ("init_slope_apart", kept & ~meet, ratio),
                           ("meet_init_slope", kept, meet.astype(float))):
            v, e = slope(s, y)
            rows[name].append(v)
            rows[name + "_err"].append(e)
    table = {k: np.asarray(v) for k, v in rows.items()}
    for k in ("branch", "n", "n_meet") + tuple(f"n_{v}" for v in HESSIAN_VERDICTS):
        table[k] = table[k].astype(int)
    return table
