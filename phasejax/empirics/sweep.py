"""Empirical sweeps: train students over `(omega, alpha, init, seed)` in one compiled, vmapped call.

`train_students(grid, params, ...)` builds the task table of a `TrainingGrid`
and runs it through `phasejax.phase.run_chunked`: each chunk is one jitted
`vmap` of `train_run` (data generation, init, Optax training, metrics),
sharded over the local devices, written atomically and resumed after a kill.
Different `alpha` means different `n`: every run draws `n_max = round(max alpha d)`
samples and masks the ones beyond its own `n = round(alpha d)`; sample `mu`
is drawn from its own key, so the masked run is exactly the unpadded one.

Per run the data depend only on `(seed, omega)` (tokens and teacher only on
`seed`): the inits of one seed see the same data set, and a larger `alpha`
adds samples to a smaller one's.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from phasejax.empirics.data import overlaps, positional_directions, sample_count, sample_tokens, teacher_labels
from phasejax.empirics.metrics import SOLUTIONS, classify_solution, fresh_test_error, test_error_from_overlaps
from phasejax.empirics.students import INITS, STUDENTS, init_weights, make_student, query_weights
from phasejax.empirics.training import TrainConfig, minimize, student_risk
from phasejax.phase.diagram import _fmt, _write_csv
from phasejax.sweep import RunOptions, run_chunked, run_options
from phasejax.theory.baselines import linear_baseline_error
from phasejax.theory.gram import gram_inputs, gram_risk
from phasejax.theory.params import TiedAttentionParams, make_params, validate_params
from phasejax.theory.quadrature import gauss_hermite

RUN_COLUMNS = ("alpha", "omega", "seed", "init", "d", "m", "theta", "q", "train_loss", "test_error",
               "test_error_theory", "n", "grad_norm", "steps", "status", "converged", "cos_m", "cos_theta",
               "solution")
"""Columns of `runs.csv`: `m, theta, q` per token (`m = u_1^T Q / sqrt(d)`, `theta = sigma_1^2 theta0`,
`q = sigma_1^2 q0`, first entries for `r, t > 1`) as in `scripts/solve_se.py`; `train_loss = R / d`;
`test_error` on fresh samples, `test_error_theory` from the overlaps (spec section 5; linear student:
spec section 6); `solution` by `classify_solution` (`SOLUTIONS` names); `status` of `minimize`."""


@dataclasses.dataclass(frozen=True)
class TrainingGrid:
    """A grid of training runs: `alphas`, `omegas`, `seeds`, `inits` (names in `INITS`) at dimension `d`.

    Validated on construction (`ValueError` naming the field). `tasks()` is the
    flat table in order `(omega, alpha, init, seed)`.
    """

    alphas: tuple[float, ...]
    omegas: tuple[float, ...]
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    inits: tuple[str, ...] = ("positional", "semantic")
    d: int = 1000

    def __post_init__(self):
        object.__setattr__(self, "alphas", tuple(float(a) for a in np.atleast_1d(self.alphas)))
        object.__setattr__(self, "omegas", tuple(float(w) for w in np.atleast_1d(self.omegas)))
        object.__setattr__(self, "seeds", tuple(int(s) for s in np.atleast_1d(self.seeds)))
        object.__setattr__(self, "inits", tuple(self.inits))
        if int(self.d) != self.d or self.d < 1:
            raise ValueError(f"d must be a positive integer, got d={self.d}")
        if not self.alphas or not self.omegas or not self.seeds or not self.inits:
            raise ValueError("alphas, omegas, seeds and inits must each hold at least one value")
        for a in self.alphas:
            sample_count(a, self.d)   # alpha > 0 and alpha d >= 1
        w = np.asarray(self.omegas)
        if not np.all(np.isfinite(w)) or np.any((w < 0) | (w > 1)):
            raise ValueError(f"omega values must lie in [0, 1], got {self.omegas}")
        if any(s < 0 for s in self.seeds):
            raise ValueError(f"seeds must be >= 0, got {self.seeds}")
        bad = [i for i in self.inits if i not in INITS]
        if bad:
            raise ValueError(f"inits must be among {INITS}, got {bad}")

    @property
    def n_max(self) -> int:
        return max(sample_count(a, self.d) for a in self.alphas)

    def tasks(self) -> dict[str, np.ndarray]:
        codes = [INITS.index(i) for i in self.inits]
        w, a, i, s = np.meshgrid(self.omegas, self.alphas, codes, self.seeds, indexing="ij")
        return dict(omega=w.ravel(), alpha=a.ravel(), init=i.ravel().astype(np.int32),
                    seed=s.ravel().astype(np.int64))


def train_run(seed, alpha, omega, init, *, params: TiedAttentionParams, d: int, n_max: int,
              student: str = "tied", config: TrainConfig = TrainConfig(), n_test: int = 1000,
              quadrature_order: int = 8, value_rank: int = 0) -> dict[str, jax.Array]:
    """One run: draw data, init, train, measure. Pure in the array arguments (vmap over them).

    Args:
      seed: `()` int; alpha, omega: `()`; init: `()` int code into `INITS`.
      params: the problem (its `alpha`, `omega` are replaced by the arguments).
      d, n_max: dimension and padded sample count (static); the run uses the
        first `round(alpha d)` samples.
      quadrature_order: Gauss-Hermite nodes per dimension of `test_error_theory`
        (`L (r + t)` dimensions; twice as many over the `L t` of the linear baseline).
    Returns: scalar metrics, keys `RUN_COLUMNS` minus the task columns.
    """
    p_ = params.replace(alpha=jnp.asarray(alpha, jnp.float64), omega=jnp.asarray(omega, jnp.float64))
    k_teacher, k_x, k_test, k_init = jax.random.split(jax.random.PRNGKey(seed), 4)
    Qstar = jax.random.normal(k_teacher, (d, params.t), jnp.float64)
    u = positional_directions(d, params.K)
    p = params.C @ u
    x = sample_tokens(k_x, params.sigma, d, n_max)
    y = teacher_labels(x, Qstar, p_)
    n = jnp.round(alpha * d).astype(jnp.int32)
    mask = jnp.arange(n_max) < n

    Q0 = init_weights(init, k_init, u, Qstar, params.r)
    graphdef, weights = nnx.split(make_student(student, Q0, L=params.L, value_rank=value_rank, key=k_init),
                                  nnx.Param)
    if student == "tied":   # same R through per-sample Gram matrices: one pass over the data per evaluation
        inputs = gram_inputs(x, y, p)
        risk = lambda w: gram_risk(w["Q"][...], inputs, p_, mask)  # noqa: E731
    else:
        risk = lambda w: student_risk(graphdef, w, x, y, p, mask, params.lam)  # noqa: E731
    res = minimize(risk, weights, config)
    model = nnx.merge(graphdef, res.params)

    x_test = sample_tokens(k_test, params.sigma, d, n_test)
    test_error = fresh_test_error(model, x_test, teacher_labels(x_test, Qstar, p_), p)

    Q = query_weights(res.params)
    s1 = params.sigma[0] ** 2
    nan = jnp.asarray(jnp.nan, jnp.float64)
    if Q is None:   # linear baseline: no overlaps; its theory is spec section 6
        q = m = theta = cos_m = cos_theta = nan
        theory = linear_baseline_error(p_, gauss_hermite(params.L * params.t, 2 * quadrature_order))
    else:
        ov = overlaps(Q, u, Qstar)
        q0, m_, theta0 = ov["q0"], ov["m"], ov["theta0"]
        q, m, theta = s1 * q0[0, 0], m_[0, 0], s1 * theta0[0, 0]
        norm = jnp.sqrt(jnp.maximum(q0[0, 0], 1e-300))
        cos_m = jnp.abs(m_[0, 0]) / norm
        cos_theta = jnp.abs(theta0[0, 0]) / (norm * jnp.linalg.norm(Qstar[:, 0]) / jnp.sqrt(d))
        quadrature = gauss_hermite(params.L * (params.r + params.t), quadrature_order)
        theory = (test_error_from_overlaps(q0, m_, theta0, p_, quadrature, rho0=Qstar.T @ Qstar / d)
                  if student == "tied" else nan)
    return dict(n=n, m=m, theta=theta, q=q, train_loss=res.loss / d, test_error=test_error,
                test_error_theory=theory, grad_norm=res.grad_norm, steps=res.steps, status=res.status,
                converged=res.converged, cos_m=cos_m, cos_theta=cos_theta,
                solution=jnp.where(jnp.isnan(cos_m), 2, classify_solution(cos_m, cos_theta)))


def make_run_fn(grid: TrainingGrid, params: TiedAttentionParams, **kwargs):
    """`train_run` bound to the grid's `d`, `n_max` and the options: `(seed, alpha, omega, init) -> metrics`."""
    return functools.partial(train_run, params=params, d=grid.d, n_max=grid.n_max, **kwargs)


def make_training_fn(grid: TrainingGrid, params: TiedAttentionParams, **kwargs):
    """Pure batch function `{seed, alpha, omega, init} (C,) -> metrics (C,)` for `run_chunked`."""
    one = make_run_fn(grid, params, **kwargs)

    def fn(chunk):
        return jax.vmap(one)(jnp.asarray(chunk["seed"]), jnp.asarray(chunk["alpha"]), jnp.asarray(chunk["omega"]),
                             jnp.asarray(chunk["init"]))

    return fn


@dataclasses.dataclass
class TrainingRuns:
    """Outputs of `train_students`: the grid, the config and `runs` (columns `RUN_COLUMNS`, numpy, task order)."""

    grid: TrainingGrid
    runs: dict[str, np.ndarray]
    config: dict

    def write_csv(self, path: str) -> str:
        """Write `runs.csv` (see `write_runs_csv`)."""
        return write_runs_csv(self.runs, path)


def write_runs_csv(runs: dict[str, np.ndarray], path: str) -> str:
    """Write runs (one row each, columns `RUN_COLUMNS`, names for `init` and `solution`) to CSV atomically."""
    names = {"init": INITS, "solution": SOLUTIONS}
    rows = [[names[k][int(runs[k][i])] if k in names else _fmt(runs[k][i]) for k in RUN_COLUMNS]
            for i in range(len(runs["alpha"]))]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return _write_csv(path, RUN_COLUMNS, rows)


def train_students(
    grid: TrainingGrid,
    params: TiedAttentionParams | None = None,
    *,
    student: str = "tied",
    config: TrainConfig = TrainConfig(),
    n_test: int = 1000,
    quadrature_order: int = 8,
    value_rank: int = 0,
    options: RunOptions | None = None,
) -> TrainingRuns | None:
    """Train every run of `grid`, vmapped and chunked; resumable when `run_dir` is given.

    Args:
      grid: the `TrainingGrid` (`alpha`, `omega`, seeds, inits, `d`).
      params: problem template (default `make_params(1, 0)`: the paper's setting);
        its `alpha` and `omega` are replaced per run.
      student: one of `STUDENTS` (`"tied"`, `"untied"`, `"linear"`).
      config: `TrainConfig` (optimizer, learning rate, step cap, gradient tolerance).
      n_test: fresh test sequences per run.
      quadrature_order: Gauss-Hermite nodes per dimension of the overlap-based test error.
      options: `phasejax.sweep.RunOptions` (run directory for resume and multi-host,
        chunk size: memory is about `chunk_size * 5 * n_max L d * 8` bytes, devices, progress).
    Returns:
      `TrainingRuns`, or `None` while chunks are missing (`max_chunks` or other hosts).

    Example:
      >>> grid = TrainingGrid(alphas=(0.5, 1.0), omegas=(0.3,), seeds=(0, 1), d=100)
      >>> runs = train_students(grid)
      >>> runs.runs["m"].shape
      (8,)
    """
    params = make_params(1.0, 0.0) if params is None else validate_params(params)
    if student not in STUDENTS:
        raise ValueError(f"student must be one of {STUDENTS}, got {student!r}")
    if n_test < 1:
        raise ValueError(f"n_test must be >= 1, got {n_test}")
    if quadrature_order < 2:
        raise ValueError(f"quadrature_order must be >= 2, got {quadrature_order}")
    fn = make_training_fn(grid, params, student=student, config=config, n_test=n_test,
                          quadrature_order=quadrature_order, value_rank=value_rank)
    cfg = dict(kind="train_students", grid=dataclasses.asdict(grid), student=student,
               train=dataclasses.asdict(config), n_test=n_test, quadrature_order=quadrature_order,
               value_rank=value_rank, lam=float(params.lam), sigma=np.asarray(params.sigma).tolist(),
               A=np.asarray(params.A).tolist(), C=np.asarray(params.C).tolist(), r=params.r, t=params.t,
               target=getattr(params.target, "__name__", repr(params.target)),
               student_fn=getattr(params.student, "__name__", repr(params.student)))
    tasks = grid.tasks()
    out = run_chunked(fn, tasks, cfg, run_options(options))
    if out is None:
        return None
    out = dict(out)
    out.update({k: v for k, v in tasks.items()})
    out["d"] = np.full(len(tasks["alpha"]), grid.d)
    return TrainingRuns(grid=grid, runs=out, config=cfg)

