"""Empirical sweeps: train students over `(omega, alpha, init, seed)` in one compiled, vmapped call.

`train_students(grid, params, ...)` builds the task table of a `TrainingGrid`
and runs it through `phasejax.sweep.run_chunked`: each chunk is one jitted
`vmap` of `train_run` (data generation, init, Optax training, metrics),
sharded over the local devices, written atomically and resumed after a kill.
Different `alpha` means different `n`: every run draws `n_max = round(max alpha d)`
samples with `generate_data` and masks the ones beyond its own
`n = round(alpha d)`; sample `mu` is drawn from its own key, so the masked run
is exactly the unpadded one.

Per run the data depend only on `(seed, omega)` (tokens and teacher only on
`seed`, through `run_keys(seed)["data"]`): the inits of one seed see the same
data set, a larger `alpha` adds samples to a smaller one's, and
`generate_data(run_keys(seed)["data"], params, d, n)` reproduces a run's data.

Results come back as `TrainingRuns` (`write(out_dir)`, `TrainingRuns.load(out_dir)`,
`TrainingRuns.from_csv(path)`). Everything computes in `dtype` (float32 by
default; `jnp.float64` runs the sweep inside `phasejax.precision.dtype_scope`).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from phasejax.empirics.data import (
    cast_params,
    check_positive_int,
    checked_size,
    generate_data,
    overlaps,
    run_keys,
    sample_count,
    sample_tokens,
    teacher_labels,
)
from phasejax.empirics.metrics import (
    SOLUTIONS,
    _gauss_hermite_in,
    classify_solution,
    fresh_test_error,
    test_error_from_overlaps,
)
from phasejax.empirics.students import INITS, STUDENTS, init_weights, make_student, query_weights
from phasejax.empirics.training import TrainConfig, check_trainable, minimize, student_risk, tied_risk
from phasejax.bundle import BundleFile, ResultBundle
from phasejax.io import read_csv, write_csv
from phasejax.precision import check_float_dtype, dtype_scope, float64_scope
from phasejax.solvers import status_code, status_names
from phasejax.sweep import RunOptions, available_memory, canonical_config, run_chunked, run_options
from phasejax.theory.baselines import linear_baseline_error
from phasejax.theory.params import TiedAttentionParams, make_params, validate_params
from phasejax.theory.quadrature import gauss_hermite

RUN_COLUMNS = ("alpha", "omega", "seed", "init", "d", "m", "theta", "q", "train_loss", "test_error",
               "test_error_theory", "n", "grad_norm", "steps", "status", "converged", "cos_m", "cos_theta",
               "solution")
"""Columns of `runs.csv`: `m, theta, q` per token (`m = u_1^T Q / sqrt(d)`, `theta = sigma_1^2 theta0`,
`q = sigma_1^2 q0`, first entries for `r, t > 1`) as in `phasejax solve`; `train_loss = R / d`;
`test_error` on fresh samples, `test_error_theory` from the overlaps (theory notes, section 5; linear
student: the `d -> inf` baseline of section 6); `solution` by `classify_solution` (`SOLUTIONS` names);
`status` of `minimize` (a `phasejax.solvers.Status` name in the CSV)."""

_NAMED = {"init": INITS, "solution": SOLUTIONS}

RUN_COLUMN_KINDS = dict(alpha="number", omega="number", seed="int", init="str", d="int", n="int", steps="int",
                        status="str", converged="bool", solution="str")
"""Kinds (`phasejax.io.COLUMN_KINDS`) of the columns of `runs.csv` that are not plain numbers."""


def _column_kinds(columns, named, integers) -> dict:
    kinds = {k: RUN_COLUMN_KINDS.get(k, "number") if columns is RUN_COLUMNS or k in RUN_COLUMN_KINDS else None
             for k in columns}
    kinds.update({k: "str" for k in columns if k in named or k == "status"})
    kinds.update({k: "int" for k in columns if k in integers})
    return kinds


_RUN_KINDS = _column_kinds(RUN_COLUMNS, _NAMED, ())
"""Kind of every column of a `runs.csv` of `RUN_COLUMNS` (what `read_runs_csv` checks by default)."""


def _round12(values) -> tuple[float, ...]:
    return tuple(float(f"{float(x):.12g}") for x in values)


@dataclasses.dataclass(frozen=True)
class TrainingGrid:
    """A grid of training runs: `alphas`, `omegas`, `seeds`, `inits` (names in `INITS`) at dimension `d`.

    Validated on construction (`ValueError` naming the field): seeds must be
    integers >= 0 (`1.5` is refused, not truncated), `inits` a name or names
    from `INITS` (`inits="semantic"` is the one init), `d` a positive integer.
    Values are rounded to 12 significant digits, so `np.arange` grids
    (`0.6000000000000001`) and literals (`0.6`) are the same grid.
    `tasks()` is the flat table in order `(omega, alpha, init, seed)`.
    """

    alphas: tuple[float, ...]
    omegas: tuple[float, ...]
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    inits: tuple[str, ...] = ("positional", "semantic")
    d: int = 1000

    def __post_init__(self):
        for name in ("alphas", "omegas"):
            try:
                v = np.atleast_1d(np.asarray(getattr(self, name), dtype=float))
            except (TypeError, ValueError):
                raise ValueError(f"{name} must be a sequence of numbers, got {getattr(self, name)!r}") from None
            if v.ndim != 1 or v.size == 0:
                raise ValueError(f"{name} must be a non-empty 1-d sequence of numbers, got {getattr(self, name)!r}")
            if not np.all(np.isfinite(v)):
                raise ValueError(f"{name} must be finite, got {v.tolist()}")
            object.__setattr__(self, name, _round12(v))
        seeds = np.atleast_1d(np.asarray(self.seeds, dtype=object))
        if seeds.ndim != 1 or seeds.size == 0:
            raise ValueError(f"seeds must be a non-empty sequence of integers >= 0, got {self.seeds!r}")
        for s in seeds:
            if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer, float, np.floating)) \
                    or not np.isfinite(s) or int(s) != s or s < 0:
                raise ValueError(f"seeds must be integers >= 0, got {s!r} in seeds={self.seeds!r}")
        object.__setattr__(self, "seeds", tuple(int(s) for s in seeds))
        inits = (self.inits,) if isinstance(self.inits, str) else tuple(self.inits)
        bad = [i for i in inits if i not in INITS]
        if bad or not inits:
            raise ValueError(f"inits must be names from {INITS} (a name or a sequence of names), got {self.inits!r}")
        object.__setattr__(self, "inits", inits)
        object.__setattr__(self, "d", checked_size(self.alphas, self.d))   # alpha d >= 1 at every alpha
        w = np.asarray(self.omegas)
        if np.any((w < 0) | (w > 1)):
            raise ValueError(f"omega values must lie in [0, 1], got omegas={self.omegas}")

    @property
    def n_max(self) -> int:
        return max(sample_count(a, self.d) for a in self.alphas)

    def tasks(self) -> dict[str, np.ndarray]:
        """Columns `omega, alpha, init (code), seed, n = round(alpha d)` (exact, computed in float64)."""
        codes = [INITS.index(i) for i in self.inits]
        w, a, i, s = np.meshgrid(self.omegas, self.alphas, codes, self.seeds, indexing="ij")
        n = np.asarray([sample_count(x, self.d) for x in a.ravel()], np.int32)
        return dict(omega=w.ravel(), alpha=a.ravel(), init=i.ravel().astype(np.int32),
                    seed=s.ravel().astype(np.int64), n=n)

    def to_json(self) -> dict:
        return dict(alphas=list(self.alphas), omegas=list(self.omegas), seeds=list(self.seeds),
                    inits=list(self.inits), d=self.d)


CHUNK_BYTES = 2**32
"""Memory cap of one vmapped chunk of training runs (4 GiB): `train_students` puts fewer runs in a chunk
than `RunOptions.chunk_size` when `chunk_size * 5 * n_max L d * itemsize` would exceed it."""


def run_memory_estimate(grid: TrainingGrid, *, n_test: int = 1000, L: int = 2, dtype=jnp.float32) -> int:
    """Bytes one training run needs, about: `5 (n_max + n_test) L d * itemsize` (data, its masked copy, the
    forward pass and its gradient). `train_students` refuses, before any compile, a grid whose single run
    exceeds `phasejax.sweep.available_memory()`."""
    return int(5 * (grid.n_max + int(n_test)) * L * grid.d * np.dtype(dtype).itemsize)


def train_run(seed, alpha, omega, init, *, params: TiedAttentionParams, d: int, n_max: int,
              student: str = "tied", config: TrainConfig = TrainConfig(), n_test: int = 1000,
              quadrature_order: int = 8, value_rank: int = 0, n=None, dtype=jnp.float32) -> dict[str, jax.Array]:
    """One run: draw data, init, train, measure. Pure in the array arguments (vmap over them).

    Args:
      seed: `()` int; alpha, omega: `()`; init: `()` int code into `INITS`.
      params: the problem (its `alpha`, `omega` are replaced by the arguments).
      d, n_max: dimension and padded sample count (static); the run uses the
        first `n` samples of `generate_data(run_keys(seed)["data"], params, d, n_max)`.
      n: `()` int sample count (default `round(alpha d)` computed in `dtype`;
        the sweeps pass the exact count).
      quadrature_order: Gauss-Hermite nodes per dimension of `test_error_theory`
        (`L (r + t)` dimensions).
      dtype: float dtype of the data, the weights and every metric (static).
    Returns: scalar metrics, keys `RUN_COLUMNS` minus the task columns. The
      linear student's `test_error_theory` is NaN here (`train_students` fills
      in the `d -> inf` baseline, a float64 theory quantity).
    """
    dtype = check_float_dtype(dtype)
    p_ = cast_params(params, dtype)
    p_ = p_.replace(alpha=jnp.asarray(alpha).astype(dtype), omega=jnp.asarray(omega).astype(dtype))
    keys = run_keys(seed)
    data = generate_data(keys["data"], p_, d, n_max, dtype=dtype)
    x, y, p, u, Qstar = data.x, data.y, data.p, data.u, data.Qstar
    n = jnp.round(jnp.asarray(alpha, dtype) * d).astype(jnp.int32) if n is None else jnp.asarray(n, jnp.int32)
    mask = jnp.arange(n_max) < n

    Q0 = init_weights(init, keys["init"], u, Qstar, params.r)
    graphdef, weights = nnx.split(make_student(student, Q0, L=params.L, value_rank=value_rank, key=keys["init"]),
                                  nnx.Param)
    if student == "tied":   # the same R as a function of Q (the square loss through per-sample Gram matrices)
        tied = tied_risk(x, y, p, p_, mask)
        risk = lambda w: tied(w["Q"][...])  # noqa: E731
    else:
        risk = lambda w: student_risk(graphdef, w, x, y, p, mask, p_.lam, p_.loss)  # noqa: E731
    res = minimize(risk, weights, config)
    model = nnx.merge(graphdef, res.params)

    x_test = sample_tokens(keys["test"], p_.sigma, d, n_test, dtype)
    test_error = fresh_test_error(model, x_test, teacher_labels(x_test, Qstar, p_), p)

    Q = query_weights(res.params)
    s1 = p_.sigma[0] ** 2
    nan = jnp.asarray(jnp.nan, dtype)
    if Q is None:   # linear baseline: no overlaps; its d -> inf theory (section 6) is filled in by train_students
        q = m = theta = cos_m = cos_theta = theory = nan
    else:
        ov = overlaps(Q, u, Qstar)
        q0, m_, theta0 = ov["q0"], ov["m"], ov["theta0"]
        q, m, theta = s1 * q0[0, 0], m_[0, 0], s1 * theta0[0, 0]
        norm = jnp.sqrt(jnp.maximum(q0[0, 0], jnp.finfo(dtype).tiny))
        cos_m = jnp.abs(m_[0, 0]) / norm
        cos_theta = jnp.abs(theta0[0, 0]) / (norm * jnp.linalg.norm(Qstar[:, 0]) / np.sqrt(d))
        quadrature = _gauss_hermite_in(params.L * (params.r + params.t), quadrature_order, dtype)
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
    """Pure batch function `{seed, alpha, omega, init, n} (C,) -> metrics (C,)` for `run_chunked`."""
    one = make_run_fn(grid, params, **kwargs)

    def fn(chunk):
        return jax.vmap(lambda s, a, w, i, n: one(s, a, w, i, n=n))(
            jnp.asarray(chunk["seed"]), jnp.asarray(chunk["alpha"]), jnp.asarray(chunk["omega"]),
            jnp.asarray(chunk["init"]), jnp.asarray(chunk["n"]))

    return fn


def declared_config(piece) -> dict:
    """JSON description of a declared piece of the model (its loss or penalty, frozen dataclasses): its class
    (module and name) and fields."""
    return dict(type=f"{type(piece).__module__}.{type(piece).__qualname__}",
                **{f.name: getattr(piece, f.name) for f in dataclasses.fields(piece)})


def problem_config(params: TiedAttentionParams) -> dict:
    """The problem part of a run configuration: `sigma, lam, A, C, r, t`, the target and student
    functions themselves (`target`, `student_fn`; fingerprinted by content through
    `phasejax.sweep.callable_identity`), the loss and the penalty (`declared_config`)."""
    return dict(sigma=np.asarray(params.sigma).tolist(), lam=float(np.asarray(params.lam)),
                A=np.asarray(params.A).tolist(), C=np.asarray(params.C).tolist(), r=params.r, t=params.t,
                target=params.target, student_fn=params.student, loss=declared_config(params.loss),
                penalty=declared_config(params.penalty))


def training_config(grid: TrainingGrid, params: TiedAttentionParams, *, student: str, config: TrainConfig,
                    n_test: int, quadrature_order: int, value_rank: int, dtype) -> dict:
    """The complete configuration of a training sweep (the one builder; what `run_dir/config.json` records)."""
    return dict(kind="train_students", grid=grid.to_json(), student=student, train=dataclasses.asdict(config),
                n_test=int(n_test), quadrature_order=int(quadrature_order), value_rank=int(value_rank),
                dtype=str(np.dtype(dtype)), data="generate_data(run_keys(seed)['data'], params, d, n_max)",
                **problem_config(params))


@dataclasses.dataclass
class TrainingRuns(ResultBundle):
    """Outputs of `train_students`: the grid, `runs` (columns `RUN_COLUMNS`, numpy, task order) and the config.

    `write(out_dir)` writes `runs.csv` and `training.json` (grid and
    configuration); `TrainingRuns.load(out_dir)` reads them back;
    `TrainingRuns.from_csv(path)` rebuilds from a `runs.csv` alone (the grid
    from its columns, no configuration).
    """

    grid: TrainingGrid
    runs: dict[str, np.ndarray]
    config: dict

    FILES = (BundleFile("runs.csv", columns=RUN_COLUMNS, required=_RUN_KINDS, min_rows=1),
             BundleFile("training.json", field="meta"))
    """`write` writes `runs.csv` (`write_runs_csv`) and `training.json` (`{"grid": ..., "config": ...}`)."""

    def to_files(self) -> dict:
        """`runs` with names for codes (`encode_runs`), the grid and the configuration as JSON."""
        return dict(runs=encode_runs(self.runs), meta=dict(grid=self.grid.to_json(),
                                                            config=canonical_config(self.config)))

    @classmethod
    def from_files(cls, contents: dict, out_dir: str) -> "TrainingRuns":
        """The runs (codes for names, `decode_runs`) with the grid of `training.json` (validated, and of as many
        tasks as `runs.csv` has rows)."""
        path = os.path.join(out_dir, "training.json")
        meta = contents["meta"]
        missing = [k for k in ("grid", "config") if k not in meta]
        if missing or not isinstance(meta["grid"], dict):
            raise ValueError(f"{path} is not a training.json: it needs the keys 'grid' (an object) and 'config'")
        try:
            grid = TrainingGrid(**meta["grid"])
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: its grid is not valid ({e})") from None
        runs = decode_runs(contents["runs"], os.path.join(out_dir, "runs.csv"))
        if len(runs["alpha"]) != len(grid.tasks()["alpha"]):
            raise ValueError(f"{os.path.join(out_dir, 'runs.csv')} has {len(runs['alpha'])} rows, its grid in "
                             f"{path} {len(grid.tasks()['alpha'])}")
        return cls(grid=grid, runs=runs, config=meta["config"])

    def write_csv(self, path: str) -> str:
        """Write `runs.csv` alone (see `write_runs_csv`)."""
        return write_runs_csv(self.runs, path)

    @classmethod
    def from_csv(cls, path: str) -> "TrainingRuns":
        """Rebuild from a `runs.csv` alone: the grid from the unique values of its columns, `config={}`."""
        runs = read_runs_csv(path)
        grid = TrainingGrid(alphas=tuple(np.unique(runs["alpha"])), omegas=tuple(np.unique(runs["omega"])),
                            seeds=tuple(int(s) for s in np.unique(runs["seed"])),
                            inits=tuple(INITS[c] for c in np.unique(runs["init"])), d=int(runs["d"][0]))
        return cls(grid=grid, runs=runs, config={})


def encode_runs(runs: dict[str, np.ndarray], *, columns=None, named=None) -> dict[str, np.ndarray]:
    """The table `write_runs_csv` writes: `columns` (default `RUN_COLUMNS`), integer codes of the `named` columns
    (default: `init`, `solution`) and `status` as names."""
    columns = RUN_COLUMNS if columns is None else tuple(columns)
    named = _NAMED if named is None else named
    cols = {}
    for k in columns:
        v = np.asarray(runs[k])
        if k in named:
            v = np.asarray(named[k])[v.astype(int)]
        elif k == "status":
            v = status_names(v)
        cols[k] = v
    return cols


def write_runs_csv(runs: dict[str, np.ndarray], path: str, *, columns=None, named=None) -> str:
    """Write runs (one row each) to CSV atomically: `columns` (default `RUN_COLUMNS`), integer codes of the
    `named` columns (default: `init`, `solution`) and `status` written as names."""
    columns = RUN_COLUMNS if columns is None else tuple(columns)
    return write_csv(path, encode_runs(runs, columns=columns, named=named), columns)


def decode_runs(raw: dict[str, np.ndarray], path: str, *, columns=None, named=None,
                integers=()) -> dict[str, np.ndarray]:
    """Inverse of `encode_runs` on a table read from `path` (named in the errors): codes for the named columns and
    `status` (a `ValueError` naming the file, the column and the line for a name not in its list), `converged`
    boolean, the `integers` columns as int64."""
    columns = RUN_COLUMNS if columns is None else tuple(columns)
    named = _NAMED if named is None else named
    runs = {}
    for k in columns:
        v = raw[k]
        if k in named or k == "status":
            names = list(named[k]) if k in named else None
            codes = []
            for line, cell in enumerate(str(c) for c in np.asarray(v).astype(str)):
                try:
                    codes.append(names.index(cell) if names is not None else status_code(cell))
                except (ValueError, KeyError):
                    allowed = names if names is not None else "the phasejax.solvers.Status names"
                    raise ValueError(f"{path}, column {k!r}, line {line + 2}: {cell!r} is not one of {allowed}") \
                        from None
            v = np.asarray(codes, np.int32)
        elif k == "converged":
            v = np.asarray(v).astype(bool)
        elif k in integers:
            v = np.asarray(v).astype(np.int64)
        runs[k] = v
    return runs


def read_runs_csv(path: str, *, columns=None, named=None, integers=()) -> dict[str, np.ndarray]:
    """Inverse of `write_runs_csv` (same `columns`, `named`): codes for the named columns and `status`,
    `converged` boolean, the `integers` columns as int64. Validates the file: every column present, numbers
    where numbers belong, names from their lists, at least one row; a `ValueError` names the file, the column
    and the line otherwise."""
    columns = RUN_COLUMNS if columns is None else tuple(columns)
    named = _NAMED if named is None else named
    raw = read_csv(path, required=_column_kinds(columns, named, integers), min_rows=1)
    return decode_runs(raw, path, columns=columns, named=named, integers=integers)


def _linear_baseline(params: TiedAttentionParams, omegas: np.ndarray, quadrature_order: int) -> np.ndarray:
    """`eps_lin(omega)` (theory notes, section 6) in float64 for each entry of `omegas`."""
    unique, inverse = np.unique(omegas, return_inverse=True)
    with float64_scope():
        rule = gauss_hermite(params.L * params.t, 2 * quadrature_order)
        values = [float(linear_baseline_error(params.replace(omega=jnp.asarray(w, jnp.float64)), rule))
                  for w in unique]
    return np.asarray(values)[inverse]


def train_students(
    grid: TrainingGrid,
    params: TiedAttentionParams | None = None,
    *,
    student: str = "tied",
    config: TrainConfig = TrainConfig(),
    n_test: int = 1000,
    quadrature_order: int = 8,
    value_rank: int = 0,
    dtype=jnp.float32,
    options: RunOptions | None = None,
) -> TrainingRuns | None:
    """Train every run of `grid`, vmapped and chunked; resumable when `options.run_dir` is given.

    Args:
      grid: the `TrainingGrid` (`alpha`, `omega`, seeds, inits, `d`).
      params: problem template (default `make_params(1, 0)`: the paper's setting);
        its `alpha` and `omega` are replaced per run.
      student: one of `STUDENTS` (`"tied"`, `"untied"`, `"linear"`).
      config: `TrainConfig` (optimizer, learning rate, step cap, gradient tolerance).
      n_test: fresh test sequences per run.
      quadrature_order: Gauss-Hermite nodes per dimension of the overlap-based test error.
      value_rank: rank of the trainable value map of the untied student.
      dtype: `jnp.float32` (default) or `jnp.float64` (the sweep then runs inside `dtype_scope`).
      options: `phasejax.sweep.RunOptions` (run directory for resume and multi-host,
        chunk size: memory is about `chunk_size * 5 * n_max L d * itemsize` bytes, capped at `CHUNK_BYTES`
        by using fewer runs per chunk; devices, progress).
    Returns:
      `TrainingRuns`, or `None` while chunks are missing (`max_chunks` or other hosts).

    Example:
      >>> grid = TrainingGrid(alphas=(0.5, 1.0), omegas=(0.3,), seeds=(0, 1), d=100)
      >>> runs = train_students(grid)
      >>> runs.runs["m"].shape
      (8,)
    """
    if not isinstance(grid, TrainingGrid):
        raise ValueError(f"grid must be a TrainingGrid, got {type(grid).__name__}")
    params = make_params(1.0, 0.0) if params is None else check_trainable(validate_params(params))
    if student not in STUDENTS:
        raise ValueError(f"student must be one of {STUDENTS}, got {student!r}")
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    n_test = check_positive_int(n_test, "n_test")
    if check_positive_int(quadrature_order, "quadrature_order") < 2:
        raise ValueError(f"quadrature_order must be >= 2, got quadrature_order={quadrature_order}")
    if isinstance(value_rank, bool) or int(value_rank) != value_rank or value_rank < 0:
        raise ValueError(f"value_rank must be an integer >= 0, got value_rank={value_rank!r}")
    dtype = check_float_dtype(dtype)
    options = run_options(options)
    need = run_memory_estimate(grid, n_test=n_test, L=params.L, dtype=dtype)
    have = available_memory(options.devices[0] if options.devices else None)
    if need > have:
        raise ValueError(f"one run of the grid (d={grid.d}, n_max={grid.n_max}, n_test={n_test}) needs about "
                         f"{need / 2**30:.3g} GiB, {have / 2**30:.3g} GiB available; lower d, the largest alpha "
                         "or n_test")
    # about 5 n L d numbers per run in a chunk: at large d a chunk holds fewer runs than options.chunk_size
    per_run = 5 * grid.n_max * params.L * grid.d * np.dtype(dtype).itemsize
    options = options.replace(chunk_size=max(1, min(options.chunk_size, int(CHUNK_BYTES // per_run))))
    kw = dict(student=student, config=config, n_test=n_test, quadrature_order=quadrature_order,
              value_rank=int(value_rank))
    cfg = training_config(grid, params, dtype=dtype, **kw)
    tasks = grid.tasks()
    with dtype_scope(dtype):
        out = run_chunked(make_training_fn(grid, params, dtype=dtype, **kw), tasks, cfg, options)
    if out is None:
        return None
    runs = {k: np.asarray(v) for k, v in out.items()}
    runs.update({k: v for k, v in tasks.items()})
    runs["d"] = np.full(len(tasks["alpha"]), grid.d)
    runs["converged"] = runs["converged"].astype(bool)
    if student == "linear":
        runs["test_error_theory"] = _linear_baseline(params, tasks["omega"], quadrature_order)
    return TrainingRuns(grid=grid, runs=runs, config=canonical_config(cfg))
