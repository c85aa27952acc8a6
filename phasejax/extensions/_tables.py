"""The tables of an extension: the result bundle, theory rows, trained students, and runs matched to theory.

* `ExtensionResult`: the bundle `theory.csv`, `runs.csv`, `thresholds.csv`, `summary.json` (plus named extra
  tables, e.g. `gaps.csv`), written atomically and read back with its columns checked (a missing column is a
  `ValueError` naming the file and the column).
* `continuation_table`: the fixed point reached from each of several inits followed along alpha
  (`phasejax.theory.solve_along_alpha`), one resumable row per `(omega, init)`; `diagram_tables` turns a
  `phasejax.phase.PhaseDiagram` into the same kind of table.
* `attach_theory`: the theory row of each trained run (matched on its grid point and branch).
* `seed_means`, `agreement`, `relative_gaps`: experiments averaged over seeds and compared with the theory.
* `run_tasks`, `train_table`, `train_tied`: the task table of a sweep of trained students and its resumable run.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.bundle import BundleFile, ResultBundle, read_bundle, read_file
from phasejax.io import read_json
from phasejax.phase import PHASE_BRANCHES
from phasejax.precision import float64_scope
from phasejax.solvers import status_names
from phasejax.sweep import RunOptions, run_chunked, run_options
from phasejax.theory import MapApproximation, SEConfig, result_columns, solve_along_alpha
from phasejax.theory.params import validate_params

EXTENSION_SE_CONFIG = SEConfig(max_iter=150, max_iter_warm=100)
"""Solver caps of the extensions' continuation rows: a cold solve of the stacked rank-2 problems takes
40-50 Newton iterations (more than `SEConfig()`'s 40), a warm one up to ~30."""


# ----------------------------------------------------------------------------
# Tables and the result bundle
# ----------------------------------------------------------------------------


def ordered(table: dict, first, *, only: bool = False) -> dict:
    """`table` with the columns of `first` that it has in front (with `only`, nothing else)."""
    head = [k for k in first if k in table]
    return {k: table[k] for k in head + ([] if only else [k for k in table if k not in head])}


def read_table(path: str, columns=()) -> dict[str, np.ndarray]:
    """`read_csv(path)` with the `columns` checked: `ValueError` naming the file and the missing columns."""
    return read_file(path, BundleFile("table.csv", required=tuple(columns)))


@dataclasses.dataclass
class ExtensionResult(ResultBundle):
    """Outputs of an extension: `theory` (one row per fixed point), `runs` (one row per trained student),
    `thresholds`, a JSON `summary`, named extra `tables` (`{"gaps": table}` is written as `gaps.csv`) and
    named extra JSON `documents` (`{"value_runs": {...}}`: `value_runs.json`).

    Tables are dicts of numpy columns written in their order (`ordered` puts chosen columns first).
    `write(out_dir)` returns the paths (`theory.csv`, `runs.csv`, `thresholds.csv`, the extra tables and
    documents, `summary.json`); `load(out_dir)` reads a bundle back and checks `REQUIRED` columns.
    """

    theory: dict
    runs: dict
    thresholds: dict
    summary: dict
    tables: dict = dataclasses.field(default_factory=dict)
    documents: dict = dataclasses.field(default_factory=dict)

    REQUIRED = {"theory": ("alpha", "omega"), "runs": ("alpha", "seed"), "thresholds": ("alpha_c",)}
    """Columns every bundle's files have (`load` checks them)."""

    @classmethod
    def files(cls, tables=(), documents=(), required: dict | None = None) -> tuple[BundleFile, ...]:
        """The bundle's files with the extra `tables` and `documents` (names; their contents go by file name,
        e.g. `gaps.csv`), the columns of `REQUIRED` and `required` checked on load."""
        need = lambda name: tuple(cls.REQUIRED.get(name, ())) + tuple((required or {}).get(name, ()))  # noqa: E731
        return (*(BundleFile(f"{name}.csv", required=need(name)) for name in ("theory", "runs", "thresholds")),
                *(BundleFile(f"{name}.csv", field=f"{name}.csv", required=need(name)) for name in tables),
                *(BundleFile(f"{name}.json", field=f"{name}.json") for name in documents),
                BundleFile("summary.json"))

    def bundle_files(self) -> tuple[BundleFile, ...]:
        """`files` with this result's extra tables and documents."""
        return self.files(self.tables, self.documents)

    def to_files(self) -> dict:
        """The contents, the extra tables and documents by file name."""
        return dict(theory=self.theory, runs=self.runs, thresholds=self.thresholds, summary=self.summary,
                    **{f"{name}.csv": t for name, t in self.tables.items()},
                    **{f"{name}.json": doc for name, doc in self.documents.items()})

    @classmethod
    def load(cls, out_dir: str, *, tables=(), documents=(), required: dict | None = None) -> "ExtensionResult":
        """Read `out_dir`'s bundle (and the extra `tables` and `documents` by name); `required` adds columns to
        check per file, e.g. `{"runs": ("init", "d")}`. A missing file or column is an error naming it."""
        got = read_bundle(out_dir, cls.files(tables, documents, required))
        return cls(theory=got["theory"], runs=got["runs"], thresholds=got["thresholds"], summary=got["summary"],
                   tables={name: got[f"{name}.csv"] for name in tables},
                   documents={name: got[f"{name}.json"] for name in documents})


def read_document(path: str) -> dict:
    """A JSON object from `path`; `ValueError` naming the file when it is not one."""
    return read_json(path, kind=dict)


# ----------------------------------------------------------------------------
# Theory tables
# ----------------------------------------------------------------------------


def scheme_config(scheme) -> dict:
    """JSON description of a quadrature scheme (for fingerprints)."""
    fields = dict(type=type(scheme).__name__)
    for k in ("dim", "log2_n", "n_replicas", "seed"):
        if hasattr(scheme, k):
            fields[k] = int(getattr(scheme, k))
    return fields


def _problem_config(params) -> dict:
    from phasejax.empirics.sweep import problem_config

    return problem_config(params)


def continuation_table(params, alphas, omegas, inits: dict, *, quadrature, down=(), se_config: SEConfig = SEConfig(),
                       approximation: MapApproximation = MapApproximation(), extra=None,
                       kind: str = "extension_theory", options: RunOptions | None = None) -> dict[str, np.ndarray]:
    """Follow the fixed point reached from each init along `alphas` for every `omega` (continuation rows,
    `phasejax.theory.solve_along_alpha`).

    Args:
      params: the problem (`alpha`, `omega` replaced per point).
      alphas: `(A,)` increasing; omegas: `(W,)`.
      inits: `{name: BranchInit}` (same pytree structure, stacked and selected by code inside the jit).
      quadrature: a scheme or a `Quadrature`.
      down: init names whose rows run from the largest alpha downwards (branches that end at small alpha).
      se_config: the solver's `SEConfig`; approximation: the map's `MapApproximation`.
      extra: `extra(SEResult, params) -> dict of scalars` added to every row (vmappable).
      options: `RunOptions` (one chunk per row by default: a killed run resumes row by row).
    Returns:
      flat table, one row per `(omega, init, alpha)`: `alpha, omega, init` (name) and `result_columns`
      (+ `extra`), `status` as names.
    """
    a = np.asarray(alphas, np.float64)
    if a.ndim != 1 or a.size == 0 or (a.size > 1 and not np.all(np.diff(a) > 0)):
        raise ValueError(f"alphas must be a non-empty increasing sequence, got {alphas}")
    w = np.atleast_1d(np.asarray(omegas, np.float64))
    names = tuple(inits)
    with float64_scope():
        validate_params(params.replace(alpha=jnp.asarray(a)))
        validate_params(params.replace(omega=jnp.asarray(w)))
        stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *[inits[n] for n in names])
        is_down = jnp.asarray([n in down for n in names])
        alphas_j = jnp.asarray(a)

        def row(omega_code):
            omega, code = omega_code
            p = params.replace(omega=omega)
            init = jax.tree_util.tree_map(lambda x: x[code], stacked)
            res = jax.lax.cond(
                is_down[code],
                lambda: jax.tree_util.tree_map(lambda x: x[::-1], solve_along_alpha(p, a[::-1], init, quadrature,
                                                                                    se_config, approximation)),
                lambda: solve_along_alpha(p, a, init, quadrature, se_config, approximation))

            def columns(r, al):
                pa = p.replace(alpha=al)
                cols = result_columns(r, pa)
                if extra is not None:
                    cols.update(extra(r, pa))
                return cols

            return jax.vmap(columns)(res, alphas_j)

        def fn(chunk):    # rows one after another: each runs only its own direction
            return jax.lax.map(row, (jnp.asarray(chunk["omega"]), jnp.asarray(chunk["init"])))

        W, I = np.meshgrid(w, np.arange(len(names)), indexing="ij")
        tasks = dict(omega=W.ravel(), init=I.ravel().astype(np.int32))
        cfg = dict(kind=kind, alphas=a.tolist(), inits=list(names), down=list(down), se=dataclasses.asdict(se_config),
                   approximation=dataclasses.asdict(approximation),
                   scheme=scheme_config(quadrature), problem=_problem_config(params),
                   init_values={n: {k: np.asarray(v).tolist() for k, v in
                                    zip(("q0", "m", "V0", "theta0"), jax.tree_util.tree_leaves(inits[n].overlaps))}
                                for n in names})
        rows = run_chunked(fn, tasks, cfg, run_options(options) if options is not None
                           else RunOptions(chunk_size=1, progress=False))
    n_rows, n_a = len(tasks["omega"]), len(a)
    table = dict(alpha=np.tile(a, n_rows), omega=np.repeat(tasks["omega"], n_a),
                 init=np.repeat(np.asarray(names)[tasks["init"]], n_a))
    for k, v in rows.items():
        table[k] = np.asarray(v).reshape(n_rows * n_a, *np.shape(v)[2:])
    table["status"] = np.asarray(status_names(table["status"]))
    return table


THEORY_FIRST = ("alpha", "omega", "branch", "q", "m", "theta", "V", "train_loss", "test_error", "q_err", "m_err",
                "theta_err", "V_err", "train_loss_err", "test_error_err", "status")
"""Leading columns of a theory table made from a phase diagram (`diagram_tables`)."""


def diagram_tables(pd, *, first=THEORY_FIRST) -> tuple[dict, dict]:
    """`(theory, thresholds)` of a `phasejax.phase.PhaseDiagram`: the fixed point that is each subspace's branch
    (`is_branch`) at each `(omega, alpha)`, with branch and status as names and the columns of `first` in
    front, and the diagram's per-omega thresholds."""
    pts = {k: np.asarray(v) for k, v in pd.points.items()}
    sel = pts["is_branch"].astype(bool)
    out = {k: v[sel] for k, v in pts.items()}
    out["branch"] = np.asarray(PHASE_BRANCHES)[out["branch"].astype(int)]
    out["status"] = status_names(out["status"])
    return ordered(out, first), {k: np.asarray(v) for k, v in pd.thresholds.items()}


# ----------------------------------------------------------------------------
# Runs against theory
# ----------------------------------------------------------------------------


def theory_rows(runs: dict, theory: dict, *, on=("alpha", "omega"), branch=None, branch_column: str = "branch",
                usable=None) -> np.ndarray:
    """Index of the theory row of each run (`-1`: none): equal `on` columns (to 9 decimals) and, with `branch`
    (`(n_runs,)` names), `theory[branch_column] == branch`; only rows where `usable` (default all)."""
    ok = np.ones(len(theory[on[0]]), bool) if usable is None else np.asarray(usable, bool)
    key = lambda cols, i: tuple(round(float(cols[c][i]), 9) for c in on)  # noqa: E731
    index = {}
    for i in np.flatnonzero(ok):
        index.setdefault(key(theory, i) + ((str(theory[branch_column][i]),) if branch is not None else ()), int(i))
    return np.asarray([index.get(key(runs, j) + ((str(branch[j]),) if branch is not None else ()), -1)
                       for j in range(len(runs[on[0]]))], dtype=int)


def attach_theory(runs: dict, theory: dict, keys=("train_loss", "test_error"), *, suffix: str = "_theory",
                  errors: bool = False, **match) -> dict:
    """`runs` with `<key><suffix>` for each of `keys` (and `<key><suffix>_err` with `errors`): the value of the
    run's theory row (`theory_rows(runs, theory, **match)`), NaN where there is none."""
    idx = theory_rows(runs, theory, **match)
    found = idx >= 0
    out = dict(runs)
    for k in keys:
        for col, name in ((k, k + suffix),) + (((k + "_err", k + suffix + "_err"),) if errors else ()):
            v = np.full(len(idx), np.nan)
            v[found] = np.asarray(theory[col], float)[idx[found]]
            out[name] = v
    return out


def seed_means(runs: dict, keys=("q", "m", "theta", "train_loss", "test_error"), by=("d", "alpha", "omega"), *,
               teacher_adjusted: bool = False, sort: bool = False) -> dict[str, np.ndarray]:
    """Mean and standard error over seeds of `keys`, grouped by `by` (groups in order of appearance, or sorted):
    a table with `<key>_mean`, `<key>_sem`, `n_seeds` (distinct seeds; runs of one seed in a group, e.g. two
    inits reaching the same minimum, are averaged first).

    `teacher_adjusted=True` adds `<key>_adj_mean`, `<key>_adj_sem`: the seed mean with the teacher's norm as
    control variate (`phasejax.empirics.adjusted_seed_mean`; the norm of each seed's rank-1 teacher is
    recomputed from `seed` and `d`, so `runs` must have `seed` and `by` must hold `"d"`). NaN for groups with
    fewer than `MIN_ADJUSTED_SEEDS` seeds. When `by` holds an outcome of the run (e.g. the branch it reached),
    the group's seeds are selected by it and their mean `rho` need not be 1: the adjusted mean is then the
    fit's value at `rho = 1`, an extrapolation rather than a control variate of known mean."""
    from phasejax.empirics.metrics import adjusted_seed_mean

    keys, by = ((keys,) if isinstance(keys, str) else tuple(keys)), tuple(by)
    if teacher_adjusted and ("d" not in by or "seed" not in runs):
        raise ValueError(f"teacher_adjusted needs a 'seed' column and 'd' among the grouping columns, got "
                         f"by={by!r}, columns {sorted(runs)}")
    groups = {}
    for j in range(len(runs[by[0]])):
        groups.setdefault(tuple(np.asarray(runs[b])[j].item() for b in by), []).append(j)
    order = sorted(groups) if sort else list(groups)
    out = {b: [] for b in by}
    stats = ("mean", "sem", "adj_mean", "adj_sem") if teacher_adjusted else ("mean", "sem")
    out.update({f"{k}_{s}": [] for k in keys for s in stats})
    out["n_seeds"] = []
    for g in order:
        idx = groups[g]
        for b, v in zip(by, g):
            out[b].append(v)
        seeds = np.asarray(runs["seed"])[idx] if "seed" in runs else np.arange(len(idx))
        unique = np.unique(seeds)
        for k in keys:
            v_runs = np.asarray(runs[k], float)[idx]
            v = np.asarray([np.mean(v_runs[seeds == s]) for s in unique])
            out[k + "_mean"].append(np.mean(v))
            out[k + "_sem"].append(np.std(v, ddof=1) / np.sqrt(len(v)) if len(v) > 1 else np.nan)
            if teacher_adjusted:
                a, e = adjusted_seed_mean(v_runs, seeds, int(g[by.index("d")]))
                out[k + "_adj_mean"].append(a)
                out[k + "_adj_sem"].append(e)
        out["n_seeds"].append(len(unique))
    return {k: np.asarray(v) for k, v in out.items()}


def agreement(runs: dict, keys=("test_error", "train_loss"), *, by=("d", "omega", "alpha", "init"),
              teacher_adjusted: bool = False) -> list[dict]:
    """Per group `by` (sorted) and quantity in `keys`: seed mean and standard error against the theory
    (`<key>_theory`, `attach_theory`), `rel_dev = |mean / theory - 1|` (NaN where the theory is missing or, for
    the overlaps `m` and `theta`, `|theory| < ZERO_OVERLAP_TOL`: an overlap that is zero in the limit has no
    relative deviation).

    `teacher_adjusted=True` adds `adj_mean`, `adj_sem` (the seed mean with each seed's teacher norm as control
    variate, `phasejax.empirics.adjusted_seed_mean`; NaN below `MIN_ADJUSTED_SEEDS` seeds) and the signed
    `adj_signed_dev = adj_mean / theory - 1` (NaN where `rel_dev` is)."""
    from phasejax.empirics.metrics import has_relative_scale

    out = []
    for key in keys:
        sm = seed_means(runs, key, by, teacher_adjusted=teacher_adjusted, sort=True)
        th = seed_means(runs, f"{key}_theory", by, sort=True)
        for i in range(len(sm["n_seeds"])):
            theory = float(th[f"{key}_theory_mean"][i])
            relative = bool(has_relative_scale(key, theory))
            mean = float(sm[f"{key}_mean"][i])
            row = dict(quantity=key, **{b: _plain(sm[b][i]) for b in by}, mean=mean, sem=float(sm[f"{key}_sem"][i]),
                       theory=theory, rel_dev=float(abs(mean / theory - 1)) if relative else float("nan"))
            if teacher_adjusted:
                a = float(sm[f"{key}_adj_mean"][i])
                row.update(adj_mean=a, adj_sem=float(sm[f"{key}_adj_sem"][i]),
                           adj_signed_dev=float(a / theory - 1) if relative else float("nan"))
            out.append(row)
    return out


def _plain(x):
    x = np.asarray(x).item()
    return float(x) if isinstance(x, float) else x


def relative_gaps(runs: dict, keys=("q", "m", "theta", "train_loss", "test_error"), by=("d", "se_branch", "alpha",
                  "omega"), *, teacher_adjusted: bool = False, theory_suffix: str = "_se") -> dict:
    """Per group `by` (default: `d`, the branch reached, `alpha`, `omega`): `|mean over seeds - SE| / |SE|` for
    each key with a theory value (`<key><theory_suffix>`; columns `<key>_gap`; NaN where the theory is missing
    or, for `m` and `theta`, `|SE| < ZERO_OVERLAP_TOL`: an overlap that is zero in the limit has no relative
    gap).

    `teacher_adjusted=True` adds, from `seed_means(..., teacher_adjusted=True)`, the signed relative gap of the
    teacher-adjusted mean `<key>_adj_gap = (adj_mean - SE) / |SE|` and its standard error `<key>_adj_gap_err =
    adj_sem / |SE|` (the experiments' statistical error only; the SE's quadrature error is in `<key>_se_err`)."""
    from phasejax.empirics.metrics import has_relative_scale

    means = seed_means(runs, keys, by, teacher_adjusted=teacher_adjusted)
    se = seed_means({**runs, **{k: runs[k + theory_suffix] for k in keys}}, keys, by)
    out = {k: means[k] for k in tuple(by) + ("n_seeds",)}
    for k in keys:
        th, ex = se[k + "_mean"], means[k + "_mean"]
        big = has_relative_scale(k, th)
        den = np.where(big, np.abs(th), 1.0)
        out[k + "_mean"], out[k + "_sem"], out[k + "_se"] = ex, means[k + "_sem"], th
        out[k + "_gap"] = np.where(big, np.abs(ex - th) / den, np.nan)
        if teacher_adjusted:
            out[k + "_adj_mean"], out[k + "_adj_sem"] = means[k + "_adj_mean"], means[k + "_adj_sem"]
            out[k + "_adj_gap"] = np.where(big, (means[k + "_adj_mean"] - th) / den, np.nan)
            out[k + "_adj_gap_err"] = np.where(big, means[k + "_adj_sem"] / den, np.nan)
    return out


# ----------------------------------------------------------------------------
# Trained students
# ----------------------------------------------------------------------------


def run_tasks(alphas, omegas, seeds, inits, d: int, init_names) -> dict[str, np.ndarray]:
    """Task table in order `(omega, alpha, init, seed)`: `seed, alpha, omega, init (code into init_names),
    n = round(alpha d)`."""
    from phasejax.empirics.data import check_positive_int

    d = check_positive_int(d, "d")
    bad = [i for i in inits if i not in init_names]
    if bad or not len(inits):
        raise ValueError(f"inits must be names from {init_names}, got {inits}")
    codes = [init_names.index(i) for i in inits]
    w_, a_, i_, s_ = np.meshgrid(np.asarray(omegas, float), np.asarray(alphas, float), codes,
                                 np.asarray(seeds), indexing="ij")
    n = np.rint(a_.ravel() * d).astype(np.int32)
    if np.any(n < 1):
        raise ValueError(f"alpha * d must be >= 1, got alphas={list(alphas)}, d={d}")
    if np.any(s_ < 0):
        raise ValueError(f"seeds must be >= 0, got {list(seeds)}")
    return dict(seed=s_.ravel().astype(np.int64), alpha=a_.ravel(), omega=w_.ravel(),
                init=i_.ravel().astype(np.int32), n=n)


def train_table(run_fn, tasks: dict, cfg: dict, d: int, init_names, options: RunOptions | None = None,
                columns=("seed", "alpha", "omega", "init", "n")) -> dict:
    """Run `run_fn(*task columns) -> metrics` over `tasks` through `run_chunked` (one jitted vmap per chunk);
    returns the task columns (init as names, d) and the metrics (status as names)."""

    def fn(chunk):
        return jax.vmap(run_fn)(*(jnp.asarray(chunk[k]) for k in columns))

    out = run_chunked(fn, tasks, cfg, run_options(options) if options is not None else RunOptions(progress=False))
    table = {**tasks, **{k: np.asarray(v) for k, v in out.items() if k not in tasks}}
    table["init"] = np.asarray(init_names)[tasks["init"]]
    table["d"] = np.full(len(tasks["seed"]), d)
    table["status"] = np.asarray(status_names(table["status"]))
    return table


def train_students_table(run_fn, params, alphas, omegas, seeds, *, d: int, inits, init_names, kind: str, config,
                         n_test: int = 1000, options: RunOptions | None = None) -> dict[str, np.ndarray]:
    """Train students for every `(omega, alpha, init, seed)` at dimension `d` (`run_tasks`, `train_table`):
    `run_fn(seed, alpha, omega, init, n, *, params, d, n_max, config, n_test) -> metrics` is one run, pure in
    its first five arguments; `kind` names the sweep in its fingerprint."""
    validate_params(params)
    for om in np.atleast_1d(omegas):
        validate_params(params.replace(omega=jnp.asarray(float(om))))
    tasks = run_tasks(alphas, omegas, seeds, inits, d, init_names)
    n_max = int(tasks["n"].max())
    one = functools.partial(run_fn, params=params, d=d, n_max=n_max, config=config, n_test=n_test)
    cfg = dict(kind=kind, d=d, n_max=n_max, n_test=n_test, train=dataclasses.asdict(config),
               problem=_problem_config(params))
    return train_table(one, tasks, cfg, d, init_names, options)


# ----------------------------------------------------------------------------
# Tied students of the main model's kind (`phasejax.empirics.train_students`)
# ----------------------------------------------------------------------------

SE_KEYS = ("q", "m", "theta", "V", "train_loss", "test_error")
"""Theory columns `attach_reached_branch` adds to every trained run as `<key>_se` and `<key>_se_err`."""


def attach_reached_branch(runs: dict, theory: dict) -> dict:
    """Add `<key>_se`, `<key>_se_err` (`SE_KEYS`) and `se_branch` to `runs`: the SE fixed point (a `diagram_tables`
    row) at the run's `(alpha, omega)` of the branch the run *reached* (its `solution` column, positional or
    semantic), else of the branch named like its `init`. NaN (and `se_branch` `none`) where the theory has no
    converged fixed point there. (A run started positionally can escape an SE fixed point that is unstable out
    of its subspace and end on the other branch: it is compared with the branch it reached.)"""
    init = np.asarray(runs["init"]).astype(str)
    reached = np.asarray(runs["solution"]).astype(str) if "solution" in runs else init
    branch = np.where(np.isin(reached, PHASE_BRANCHES), reached, init)
    match = dict(branch=branch, usable=np.asarray(theory["status"]).astype(str) == "converged")
    out = attach_theory(runs, theory, SE_KEYS, suffix="_se", errors=True, **match)
    out["se_branch"] = np.where(theory_rows(runs, theory, **match) >= 0, branch, "none").astype(str)
    return out


def tied_runs_table(training) -> dict[str, np.ndarray]:
    """`TrainingRuns.runs` with names for `init`, `status`, `solution`; the overlap-based test error renamed
    `test_error_from_overlaps` (the SE value is `test_error_se`); `m`, `theta` sign-fixed (`Q -> -Q` is a
    symmetry): positive `theta` on semantic solutions, positive `m` otherwise."""
    from phasejax.empirics.metrics import SOLUTIONS
    from phasejax.empirics.students import INITS

    r = {k: np.asarray(v) for k, v in training.runs.items()}
    first = ["alpha", "omega", "seed", "init", "d", "q", "m", "theta", "train_loss", "test_error"]
    out = {k: r[k] for k in first}
    out["init"] = np.asarray(INITS)[r["init"].astype(int)]
    # Q and -Q are the same student (S(h) = S(-h)): fix the sign so that the overlap of the mechanism reached
    # is positive (theta on semantic solutions, m otherwise); q, losses and errors do not depend on it
    semantic = np.asarray(SOLUTIONS)[r["solution"].astype(int)] == "semantic"
    sign = np.where(semantic, np.sign(r["theta"]), np.sign(r["m"]))
    sign = np.where(sign == 0, 1.0, sign)
    out["m"], out["theta"] = sign * r["m"], sign * r["theta"]
    out["test_error_from_overlaps"] = r["test_error_theory"]
    for k in ("n", "grad_norm", "steps", "converged", "cos_m", "cos_theta"):
        out[k] = r[k]
    out["status"] = status_names(r["status"])
    out["solution"] = np.asarray(SOLUTIONS)[r["solution"].astype(int)]
    return out


def train_tied(params, alphas, omega: float, seeds, inits, d: int, *, config=None, quadrature_order: int = 8,
               options: RunOptions | None = None) -> dict | None:
    """Train tied students (L-BFGS to `||grad|| < gtol`) on `alphas x (omega,) x inits x seeds` at size `d`
    (`phasejax.empirics.train_students`); returns the `tied_runs_table` or `None` while chunks are missing."""
    from phasejax.empirics.sweep import TrainingGrid, train_students
    from phasejax.empirics.training import TrainConfig

    grid = TrainingGrid(alphas=tuple(alphas), omegas=(float(omega),), seeds=tuple(seeds), inits=tuple(inits), d=d)
    out = train_students(grid, params, config=TrainConfig() if config is None else config,
                         quadrature_order=quadrature_order, options=options)
    return None if out is None else tied_runs_table(out)
