"""Capacity and Zipf sweeps through `phasejax.sweep.run_chunked`, and their fits."""

from __future__ import annotations

import dataclasses
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.precision import check_float_dtype
from phasejax.sweep import RunOptions, run_chunked, run_options
from phasejax.tasks._common import F32, Array, is_int
from phasejax.tasks.memory.capacity import (
    bootstrap_exponents,
    capacity_from_recall,
    fit_power_law,
    predicted_recall,
    predicted_recall_given_map,
)
from phasejax.tasks.memory.data import (
    KINDS,
    RECALL_THRESHOLD,
    TRAINED_KINDS,
    MemoryShape,
    check_sizes,
    input_distribution,
    outputs_label,
    sample_problem,
    target_map,
)
from phasejax.tasks.memory.model import factored_scores, one_step_rows, outer_product_rows, recall, weighted_error
from phasejax.tasks.memory.train import memory_run


# ----------------------------------------------------------------------------
# Sweeps
# ----------------------------------------------------------------------------


def padded_size(N, minimum: int = 32, factor: int = 2) -> np.ndarray:
    """Padded input count of a problem with `N` inputs: `minimum * factor^k`, the smallest such value `>= N`.

    Tasks of a sweep are grouped by it (one compiled call per group): `factor` 2 for trained memories (cost
    grows with the padded size), 4 for the closed-form ones (compilation dominates).
    """
    N = np.maximum(np.asarray(N, np.float64), 1.0)
    k = np.ceil(np.log(np.maximum(N / minimum, 1.0)) / np.log(factor) - 1e-12)
    return (minimum * float(factor) ** np.maximum(k, 0)).astype(np.int64)


def geometric_ints(lo: float, hi: float, points_per_octave: float) -> tuple[int, ...]:
    """Distinct integers on a geometric grid from `lo` to `hi` with about `points_per_octave` points per doubling."""
    n = max(2, int(round(points_per_octave * np.log2(hi / lo))) + 1)
    return tuple(int(v) for v in np.unique(np.round(np.geomspace(lo, hi, n)).astype(np.int64)))


@dataclasses.dataclass(frozen=True)
class CapacityGrid:
    """`(N, d, m, seed)` grid of one memory: a shared geometric `Ns` lattice, cut to a window per column.

    A column is a `d` (and an `m` for the MLP; `ms=(0,)` means no hidden
    layer). With `window=(lo, hi, power)` only `N` with
    `lo x^power <= N <= hi x^power` are run, `x = d` (or `m d`), so compute goes
    where the transition is; the window is wide and the capacity search
    reports when a crossing falls outside it.
    """

    ds: tuple[int, ...]
    Ns: tuple[int, ...]
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    ms: tuple[int, ...] = (0,)
    window: tuple[float, float, float] | None = None

    def __post_init__(self):
        for name in ("ds", "Ns", "seeds", "ms"):
            vals = tuple(int(v) for v in np.atleast_1d(getattr(self, name)))
            object.__setattr__(self, name, vals)
            if not vals:
                raise ValueError(f"{name} must not be empty")
        check_sizes(N=np.asarray(self.Ns), d=np.asarray(self.ds))
        if min(self.ms) < 0 or (0 in self.ms and len(self.ms) > 1):
            raise ValueError(f"m must be >= 1 (or ms=(0,) for memories without hidden layer), got ms={self.ms}")
        if min(self.seeds) < 0:
            raise ValueError(f"seeds must be >= 0, got seeds={self.seeds}")
        if list(self.Ns) != sorted(set(self.Ns)):
            raise ValueError(f"Ns must be strictly increasing, got Ns={self.Ns}")
        if self.window is not None:
            lo, hi, pw = (float(v) for v in self.window)
            if not (0 < lo < hi and np.isfinite(hi) and np.isfinite(pw)):
                raise ValueError(f"window must be (lo, hi, power) with 0 < lo < hi, got window={self.window}")
            object.__setattr__(self, "window", (lo, hi, pw))

    def columns(self) -> list[tuple[int, int]]:
        """`(d, m)` pairs, in order."""
        return [(d, m) for d in self.ds for m in self.ms]

    def column_Ns(self, d: int, m: int) -> tuple[int, ...]:
        """The `N` values run for column `(d, m)`."""
        if self.window is None:
            return self.Ns
        lo, hi, pw = self.window
        x = float(d * m if m > 0 else d) ** pw
        return tuple(N for N in self.Ns if lo * x <= N <= hi * x)

    def tasks(self) -> dict[str, np.ndarray]:
        """Flat task table, ordered `(d, m, N, seed)`."""
        rows = [(N, d, m, s) for d, m in self.columns() for N in self.column_Ns(d, m) for s in self.seeds]
        if not rows:
            raise ValueError("the grid holds no task (window excludes every N)")
        a = np.asarray(rows, np.int64)
        return dict(N=a[:, 0], d=a[:, 1], m=a[:, 2], seed=a[:, 3])


def capacity_sweep(kind: str, grid: CapacityGrid, *, M: int | None = None, injective: bool = True, steps: int = 0,
                   learning_rate: float = 0.1, dtype=F32, options: RunOptions | None = None,
                   bucket_factor: int | None = None) -> dict | None:
    """Build and measure the memory `kind` at every `(N, d, m, seed)` of `grid`.

    Tasks are grouped by `padded_size(N, factor=bucket_factor)` (default 2 for
    trained memories, 4 for the closed-form ones); each group is one vmapped
    `memory_run` padded to `(n_pad, max d, max m)` and runs through
    `run_chunked` (in `run_dir/n<n_pad>` when `options.run_dir` is set; default
    `RunOptions(chunk_size=32)`). Returns the task table with `kind`, `outputs`,
    `M` (the value used: `N` when `M` is None) and `accuracy, error, loss, steps,
    status`, or `None` while chunks are missing.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got kind={kind!r}")
    options = run_options(options if options is not None else RunOptions(chunk_size=32))
    dtype = check_float_dtype(dtype)
    tasks = grid.tasks()
    check_sizes(N=tasks["N"], d=tasks["d"], M=M, injective=injective)
    if kind == "mlp":
        if grid.ms == (0,):
            raise ValueError("m must be >= 1 for the mlp memory; give the grid ms=(...)")
        check_sizes(m=np.asarray(grid.ms))
    if kind in TRAINED_KINDS:
        if not is_int(steps) or steps < 1:
            raise ValueError(f"steps must be a positive integer for trained memories, got steps={steps!r}")
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got learning_rate={learning_rate!r}")
    else:
        steps, learning_rate = 0, 0.0
    d_max, m_max = max(grid.ds), max(max(grid.ms), 1)
    if bucket_factor is None:
        bucket_factor = 2 if kind in TRAINED_KINDS else 4
    pads = padded_size(tasks["N"], factor=bucket_factor)
    outputs = {k: np.zeros(len(tasks["N"]), np.float64) for k in ("accuracy", "error", "loss")}
    outputs.update(steps=np.zeros(len(tasks["N"]), np.int64), status=np.zeros(len(tasks["N"]), np.int64))
    for n_pad in np.unique(pads):
        sel = np.nonzero(pads == n_pad)[0]
        shape = MemoryShape(n_max=int(n_pad), d_max=d_max, M=M, injective=injective, m_max=m_max)
        out = _run_group(kind, shape, {k: v[sel] for k, v in tasks.items()}, steps, learning_rate, dtype, options)
        if out is None:
            return None
        for k in outputs:
            outputs[k][sel] = out[k]
    n = len(tasks["N"])
    table = dict(kind=np.full(n, kind), outputs=np.full(n, outputs_label(M, injective)),
                 M=tasks["N"] if M is None else np.full(n, int(M)), d=tasks["d"], m=tasks["m"], N=tasks["N"],
                 seed=tasks["seed"])
    table.update(outputs)
    return table


def _run_group(kind, shape: MemoryShape, tasks: dict, steps, learning_rate, dtype, options: RunOptions):
    def fn(chunk):
        one = lambda s, N, d, m: memory_run(s, N, d, m, kind=kind, shape=shape, steps=steps,  # noqa: E731
                                            learning_rate=learning_rate, dtype=dtype)
        return jax.vmap(one)(jnp.asarray(chunk["seed"]), jnp.asarray(chunk["N"]), jnp.asarray(chunk["d"]),
                             jnp.asarray(chunk["m"]))

    config = dict(kind="memory_capacity", memory=kind, shape=dataclasses.asdict(shape), steps=int(steps),
                  learning_rate=float(learning_rate), optimizer="adam (full batch)" if kind in TRAINED_KINDS else None,
                  dtype=str(np.dtype(dtype)), embeddings="uniform on the unit sphere")
    opts = options
    if options.run_dir is not None:
        opts = options.replace(run_dir=os.path.join(options.run_dir, f"{kind}_{shape.outputs}_n{shape.n_max}"
                                                    .replace(",", "_").replace("=", "")))
    return run_chunked(fn, tasks, config, opts)


def recall_cube(table: dict, kind: str, outputs: str) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray]:
    """Rows of one `(kind, outputs)` as `(columns [(d, m)], Ns (K,), recall (C, K, S))`, NaN where not run."""
    sel = (np.asarray(table["kind"]) == kind) & (np.asarray(table["outputs"]) == outputs)
    if not sel.any():
        raise ValueError(f"no rows with kind={kind!r} and outputs={outputs!r}")
    d, m, N, s, acc = (np.asarray(table[k])[sel] for k in ("d", "m", "N", "seed", "accuracy"))
    cols = sorted(set(zip(d.tolist(), m.tolist())))
    Ns, seeds = np.unique(N), np.unique(s)
    cube = np.full((len(cols), len(Ns), len(seeds)), np.nan)
    ci = {c: i for i, c in enumerate(cols)}
    cube[[ci[c] for c in zip(d.tolist(), m.tolist())], np.searchsorted(Ns, N), np.searchsorted(seeds, s)] = acc
    return cols, Ns, cube


def capacity_fit(table: dict, kind: str, outputs: str, *, n_boot: int = 2000, seed: int = 0,
                 expected: tuple[float, float] | None = None) -> dict:
    """`N*` per column (mean recall over seeds) and the fit of `log N*` on `log d` (`log m d` for the MLP).

    Returns a JSON-ready dict: columns, `N*` and flags, the OLS exponent with its
    t-interval, the seed-bootstrap interval, local exponents between
    neighbouring columns, the exponent of `N* ln N*` (a capacity `~ x^b / log N`
    has `N* ln N* ~ x^b`), and `expected` / `in_expected_range` when given.
    """
    cols, Ns, cube = recall_cube(table, kind, outputs)
    x = np.asarray([d * m if m > 0 else d for d, m in cols], np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)               # cells outside the window stay NaN
        mean = np.nanmean(cube, axis=-1)
    n_star, flag = capacity_from_recall(Ns, mean)
    fit = fit_power_law(x, n_star)
    fit_log = fit_power_law(x, n_star * np.log(n_star))
    boot = bootstrap_exponents(Ns, cube, x, n_boot=n_boot, seed=seed)
    order = np.argsort(x, kind="stable")
    lx, ly = np.log(x[order]), np.log(n_star[order])
    with np.errstate(divide="ignore", invalid="ignore"):      # equal abscissae (MLP: same m d) give no slope
        local = np.where(lx[1:] > lx[:-1], (ly[1:] - ly[:-1]) / (lx[1:] - lx[:-1]), np.nan)
    out = dict(kind=kind, outputs=outputs, x="m*d" if kind == "mlp" else "d",
               d=[c[0] for c in cols], m=[c[1] for c in cols], x_values=x.tolist(),
               N_star=[float(v) if np.isfinite(v) else None for v in n_star],
               N_star_ci95_bootstrap=[[float(a) if np.isfinite(a) else None for a in row] for row in boot["column_ci"]],
               flag=[["bracketed", "above_grid", "below_grid"][int(f)] for f in flag],
               exponent=fit["exponent"], prefactor=fit["prefactor"], ci95_ols=fit["ci"],
               ci95_bootstrap=boot["ci"], bootstrap_median=boot["median"], n_points=fit["n_points"],
               local_exponents=[float(v) if np.isfinite(v) else None for v in local],
               exponent_log_corrected=fit_log["exponent"], ci95_ols_log_corrected=fit_log["ci"],
               n_seeds=int(cube.shape[-1]), threshold=RECALL_THRESHOLD)
    if expected is not None:
        out["expected"] = list(expected)
        out["in_expected_range"] = bool(expected[0] <= fit["exponent"] <= expected[1])
    return out


# ----------------------------------------------------------------------------
# Zipf-distributed inputs
# ----------------------------------------------------------------------------


def problem_map(seed, N, shape: MemoryShape) -> Array:
    """The target map `(n_max,)` of `sample_problem(jax.random.PRNGKey(seed), N, d, shape)` (independent of `d`)."""
    return target_map(jax.random.split(jax.random.PRNGKey(seed), 3)[2], N, shape)


def zipf_run(seed, d, k, *, shape: MemoryShape, dtype=F32) -> dict[str, Array]:
    """Zipf-weighted errors of the one-step memory (`q = p`) and of the outer product of the `k` most frequent inputs.

    `shape.n_max` inputs, all used (`N = n_max`); pure in `seed, d, k`.
    """
    problem = sample_problem(jax.random.PRNGKey(seed), shape.n_max, d, shape, dtype)
    one = factored_scores(one_step_rows(problem), problem)
    q_top = (jnp.arange(shape.n_max) < k).astype(problem.E.dtype)
    top = factored_scores(outer_product_rows(problem, q_top), problem)
    return dict(error_one_step=weighted_error(one, problem), error_top_k=weighted_error(top, problem),
                recall_one_step=recall(one, problem))


def zipf_tail(k, N: int, alpha: float) -> np.ndarray:
    """`sum_{x >= k} p_x` for `p_x ∝ (x + 1)^-alpha` on `[N]` (the error of storing exactly the top `k`)."""
    w = np.arange(1, N + 1, dtype=np.float64) ** (-alpha)
    c = np.concatenate([[0.0], np.cumsum(w)]) / w.sum()
    return 1.0 - c[np.clip(np.asarray(k), 0, N)]


@dataclasses.dataclass(frozen=True)
class ZipfGrid:
    """Zipf experiment: `N` inputs with `p_x ∝ (x+1)^-alpha`, `M` outputs (random map), dimensions `ds`, `seeds`."""

    ds: tuple[int, ...] = (16, 32, 64, 128, 256)
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    N: int = 4096
    M: int = 8
    alpha: float = 2.0

    def __post_init__(self):
        for name in ("ds", "seeds"):
            object.__setattr__(self, name, tuple(int(v) for v in np.atleast_1d(getattr(self, name))))
        check_sizes(N=self.N, d=np.asarray(self.ds), M=self.M)
        if not (np.isfinite(self.alpha) and self.alpha > 1):
            raise ValueError(f"alpha must be > 1 (a normalisable Zipf law as N grows), got alpha={self.alpha!r}")


def zipf_top_k(ds, grid: ZipfGrid, *, n_k: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """`(k*(d), predicted error)`: the number of most frequent inputs to store that minimises the closed-form error.

    Uses the expected recall of a uniform-weight outer product over `k` inputs
    with `M` outputs (`predicted_recall`) for the stored inputs and chance
    `1 - 1/M` for the rest: `err(k) = (1 - tail(k)) (1 - R(k, d)) + tail(k) (1 - 1/M)`.
    """
    ds = np.atleast_1d(np.asarray(ds))
    ks = np.asarray(geometric_ints(1, grid.N, n_k / np.log2(grid.N)), np.int64)
    R = predicted_recall(ks[None, :], ds[:, None], grid.M, False)
    # stored inputs are the most frequent ones, so weight their errors by their own (larger) mass
    tail = zipf_tail(ks, grid.N, grid.alpha)
    err = (1.0 - tail)[None, :] * (1.0 - R) + tail[None, :] * (1.0 - 1.0 / grid.M)
    best = np.argmin(err, axis=-1)
    return ks[best], err[np.arange(len(ds)), best]


def zipf_sweep(grid: ZipfGrid, *, dtype=F32, options: RunOptions | None = None) -> dict | None:
    """Measured and predicted Zipf-weighted errors against `d` (one task per `(d, seed)`, `run_chunked`).

    Returns columns `d, seed, k, error_one_step, error_top_k, predicted_one_step,
    predicted_top_k` (`None` while chunks are missing). The predictions are the
    closed form given each seed's map (`predicted_recall_given_map`).
    """
    options = run_options(options if options is not None else RunOptions(chunk_size=8))
    shape = MemoryShape(n_max=grid.N, d_max=max(grid.ds), M=grid.M, injective=False, zipf_alpha=grid.alpha)
    k_star, _ = zipf_top_k(grid.ds, grid)
    kd = dict(zip(grid.ds, k_star.tolist()))
    d, s = np.meshgrid(np.asarray(grid.ds), np.asarray(grid.seeds), indexing="ij")
    tasks = dict(d=d.ravel().astype(np.int64), seed=s.ravel().astype(np.int64))
    tasks["k"] = np.asarray([kd[int(v)] for v in tasks["d"]], np.int64)

    def fn(chunk):
        one = lambda s_, d_, k_: zipf_run(s_, d_, k_, shape=shape, dtype=dtype)  # noqa: E731
        return jax.vmap(one)(jnp.asarray(chunk["seed"]), jnp.asarray(chunk["d"]), jnp.asarray(chunk["k"]))

    config = dict(kind="memory_zipf", grid=dataclasses.asdict(grid), shape=dataclasses.asdict(shape),
                  dtype=str(np.dtype(dtype)))
    out = run_chunked(fn, tasks, config, options)
    if out is None:
        return None
    # closed form given each task's map (the map depends on the seed only), vectorised over tasks
    maps = np.asarray(jax.vmap(lambda s_: problem_map(s_, grid.N, shape))(jnp.asarray(tasks["seed"])))
    p = np.asarray(input_distribution(grid.N, grid.N, grid.alpha, jnp.float32), np.float64)
    p = p / p.sum()
    xv, yv = np.ones(grid.N, bool), np.ones(grid.M, bool)
    top = (np.arange(grid.N)[None, :] < tasks["k"][:, None]).astype(np.float64)
    n_t = len(tasks["d"])                     # one call: the one-step problems, then the top-k ones
    P = predicted_recall_given_map(np.concatenate([maps, maps]), np.concatenate([np.broadcast_to(p, top.shape), top]),
                                   xv, yv, np.concatenate([tasks["d"], tasks["d"]]),
                                   one_step=np.arange(2 * n_t) < n_t)
    P1, Pk = P[:n_t], P[n_t:]
    preds_one, preds_top = np.sum(p * (1 - P1), -1), np.sum(p * (1 - Pk), -1)
    table = dict(tasks)
    table.update({k: np.asarray(v, np.float64) for k, v in out.items()})
    table["predicted_one_step"] = np.asarray(preds_one)
    table["predicted_top_k"] = np.asarray(preds_top)
    return table


def zipf_fits(table: dict, grid: ZipfGrid) -> dict:
    """Power-law fits of the mean Zipf error against `d`.

    Asymptotic exponents: `-(alpha-1)/(2 alpha)` (one step), `-(alpha-1)` (top k).
    """
    ds = np.unique(table["d"])
    out = dict(alpha=grid.alpha, N=grid.N, M=grid.M)
    for name, pred_exp in (("one_step", -(grid.alpha - 1) / (2 * grid.alpha)), ("top_k", -(grid.alpha - 1))):
        err = np.asarray([np.mean(table[f"error_{name}"][table["d"] == d]) for d in ds])
        pred = np.asarray([np.mean(table[f"predicted_{name}"][table["d"] == d]) for d in ds])
        fm, fp = fit_power_law(ds, err), fit_power_law(ds, pred)
        out[name] = dict(d=ds.tolist(), error=err.tolist(), predicted_error=pred.tolist(),
                         exponent=fm["exponent"], ci95_ols=fm["ci"], exponent_closed_form=fp["exponent"],
                         asymptotic_exponent=float(pred_exp),
                         max_relative_gap_to_closed_form=float(np.max(np.abs(err - pred) / pred)))
    return out
