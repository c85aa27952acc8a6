"""The hallucination plateau, capacity fits, and the experiment's `FactualResult`."""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from phasejax.bundle import BundleFile, ResultBundle
from phasejax.solvers import status_names
from phasejax.sweep import RunOptions, run_options
from phasejax.io import concat_tables, json_ready
from phasejax.tasks._common import mean_se
from phasejax.tasks.factual.data import MODEL_KINDS, FactualTask, model_kind
from phasejax.tasks.factual.model import factual_parameter_count
from phasejax.tasks.factual.sweep import FactualGrid, factual_sweep
from phasejax.tasks.factual.train import FactualTraining, curve_steps


# ----------------------------------------------------------------------------
# The hallucination plateau
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Plateau:
    """The intermediate plateau of one learning curve (`find_plateau`).

    `loss` at the flattest interior point `step`; `decades`: the span in
    `log10(step)` of the contiguous stretch around it where the curve stays
    within `band` (relative) of `loss`; `index` into the curve; `found`: an
    interior point existed (else the values are NaN).
    """

    loss: float
    step: float
    decades: float
    index: int
    found: bool


def find_plateau(steps, loss, *, margin: float = 0.1, band: float = 0.05) -> Plateau:
    """Flattest interior point of a learning curve in log-time (numpy; no reference value is used).

    Interior: losses strictly between `L_end + margin (L_0 - L_end)` and
    `L_0 - margin (L_0 - L_end)`, with `L_0`, `L_end` the first and last points.
    The slope at point `k` is the centred difference `(L_{k+1} - L_{k-1}) /
    (log10 t_{k+1} - log10 t_{k-1})`; the plateau is the interior point of
    smallest `|slope|`.
    """
    t = np.asarray(steps, float) + 1.0             # t = updates made + 1 > 0
    L = np.asarray(loss, float)
    if t.shape != L.shape or L.ndim != 1 or L.size < 3:
        raise ValueError(f"steps and loss must be 1-d of equal length >= 3, got {t.shape} and {L.shape}")
    lt = np.log10(t)
    hi_cut = L[0] - margin * (L[0] - L[-1])
    lo_cut = L[-1] + margin * (L[0] - L[-1])
    k = np.arange(1, L.size - 1)
    slope = (L[k + 1] - L[k - 1]) / (lt[k + 1] - lt[k - 1])
    ok = (L[k] < hi_cut) & (L[k] > lo_cut) & np.isfinite(slope)
    if not np.any(ok):
        return Plateau(float("nan"), float("nan"), float("nan"), -1, False)
    i = int(k[ok][np.argmin(np.abs(slope[ok]))])
    inside = np.abs(L - L[i]) <= band * abs(L[i])
    a = i
    while a > 0 and inside[a - 1]:
        a -= 1
    b = i
    while b < L.size - 1 and inside[b + 1]:
        b += 1
    return Plateau(float(L[i]), float(steps[i]), float(lt[b] - lt[a]), i, True)


# ----------------------------------------------------------------------------
# Capacity: facts stored against parameters
# ----------------------------------------------------------------------------

CENSORING = ("none", "below", "above")
"""`recall_capacity` censoring: `"below"`: recall < threshold already at the grid's
smallest fact count (capacity < that count); `"above"`: recall >= threshold at every
fact count (capacity >= the largest)."""


def recall_capacity(n_facts, accuracy, threshold: float = 0.99) -> tuple[float, str]:
    """Facts stored: the number of facts `N*` at which recall first drops below `threshold` (numpy).

    Over the fact counts `n_facts` (sorted), `N*` interpolates linearly in
    `log N` between the last count with recall `>= threshold` and the first with
    recall `< threshold`. Returns `(N*, "none")`, or `(smallest N, "below")`,
    or `(largest N, "above")` when the crossing lies outside the grid (`CENSORING`).
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must lie in (0, 1], got threshold={threshold}")
    n = np.asarray(n_facts, float)
    acc = np.asarray(accuracy, float)
    if n.ndim != 1 or n.shape != acc.shape or n.size == 0 or np.any(n <= 0):
        raise ValueError(f"n_facts must be positive and match accuracy in shape, got {n.shape} and {acc.shape}")
    order = np.argsort(n)
    n, acc = n[order], acc[order]
    below = np.flatnonzero(acc < threshold)
    if below.size == 0:
        return float(n[-1]), "above"
    i = int(below[0])
    if i == 0:
        return float(n[0]), "below"
    frac = (acc[i - 1] - threshold) / (acc[i - 1] - acc[i])
    return float(np.exp(np.log(n[i - 1]) + frac * (np.log(n[i]) - np.log(n[i - 1])))), "none"


def capacity_table(runs: dict, threshold: float = 0.99) -> dict[str, np.ndarray]:
    """Facts stored per architecture, from a runs table (`FactualResult.runs`).

    One row per `(family, d, m, n_heads)`: `facts_stored` = `recall_capacity`
    of the seed-mean recall, `censored` its censoring, `facts_stored_se` the
    standard error of the per-seed capacities (NaN if fewer than two seeds or
    any seed censored), `capacity_grid` the largest grid fact count with
    seed-mean recall `>= threshold` (0 if none), and `seed_capacities` (a
    space-separated list, `seed:N*:censoring`).
    """
    fam = np.asarray(runs["family"]).astype(str)
    keys = sorted({(f, int(d), int(m), int(h)) for f, d, m, h in zip(fam, runs["d"], runs["m"], runs["n_heads"])},
                  key=lambda k: (k[0], factual_parameter_count(k[1], k[2], k[3], 1), k))
    cols = ("family", "model", "d", "m", "n_heads", "n_params", "facts_stored", "facts_stored_se", "censored",
            "capacity_grid", "seed_capacities")
    out = {k: [] for k in cols}
    for f, d, m, h in keys:
        sel = (fam == f) & (runs["d"] == d) & (runs["m"] == m) & (runs["n_heads"] == h)
        nf = np.unique(runs["n_facts"][sel])
        mean_acc = np.asarray([np.mean(np.asarray(runs["accuracy"][sel & (runs["n_facts"] == n)], float))
                               for n in nf])
        cap, cens = recall_capacity(nf, mean_acc, threshold)
        per_seed = []
        for seed in np.unique(runs["seed"][sel]):
            ss = sel & (runs["seed"] == seed)
            per_seed.append((int(seed),) + recall_capacity(runs["n_facts"][ss], runs["accuracy"][ss], threshold))
        vals = [c for _, c, z in per_seed if z == "none"]
        se = (float(np.std(vals, ddof=1) / np.sqrt(len(vals)))
              if len(vals) == len(per_seed) and len(vals) > 1 else float("nan"))
        ok = mean_acc >= threshold
        row = dict(family=f, model=model_kind(m), d=d, m=m, n_heads=h, n_params=int(runs["n_params"][sel][0]),
                   facts_stored=cap, facts_stored_se=se, censored=cens,
                   capacity_grid=int(nf[ok].max()) if np.any(ok) else 0,
                   seed_capacities=" ".join(f"{s}:{c:.6g}:{z}" for s, c, z in per_seed))
        for k in cols:
            out[k].append(row[k])
    return {k: np.asarray(v) for k, v in out.items()}


def fit_log_log(x, y, *, n_boot: int = 2000, seed: int = 0) -> dict:
    """Least-squares fit `log y = a + b log x`, 95% interval of `b` by resampling the points (numpy).

    Non-positive points are dropped. Returns `exponent, intercept, ci_low, ci_high, n`
    (NaN where fewer than two distinct `x`).
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    lx, ly = np.log(x[keep]), np.log(y[keep])
    nan = float("nan")
    if lx.size < 2 or np.ptp(lx) == 0:
        return dict(exponent=nan, intercept=nan, ci_low=nan, ci_high=nan, n=int(lx.size))
    b, a = np.polyfit(lx, ly, 1)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        idx = rng.integers(0, lx.size, lx.size)
        if np.ptp(lx[idx]) > 0:
            boots.append(np.polyfit(lx[idx], ly[idx], 1)[0])
    lo, hi = np.percentile(boots, [2.5, 97.5]) if boots else (nan, nan)
    return dict(exponent=float(b), intercept=float(a), ci_low=float(lo), ci_high=float(hi), n=int(lx.size))


def capacity_fits(runs: dict, threshold: float = 0.99, *, n_boot: int = 1000, seed: int = 0) -> dict:
    """Per family: log-log fit of the facts stored `N*` (seed-mean recall) against the parameter count.

    The exponent is the least-squares slope over the architectures whose `N*`
    is inside the grid (`censored == "none"`); its 95% interval comes from
    resampling the seeds with replacement, independently per architecture,
    and refitting (architectures whose resampled `N*` leaves the grid are
    dropped from that refit). Returns `{family: dict(exponent, intercept,
    ci_low, ci_high, n, n_boot_used, varied)}`.
    """
    fam_col = np.asarray(runs["family"]).astype(str)
    rng = np.random.default_rng(seed)
    nan = float("nan")
    fits = {}
    for fam in map(str, dict.fromkeys(fam_col)):
        sel = fam_col == fam
        archs = sorted({(int(d), int(m), int(h)) for d, m, h in zip(runs["d"][sel], runs["m"][sel],
                                                                     runs["n_heads"][sel])})
        per_arch = []                     # (n_params, fact counts, accuracy (n_seeds, n_counts))
        for d, m, h in archs:
            sa = sel & (runs["d"] == d) & (runs["m"] == m) & (runs["n_heads"] == h)
            nf = np.unique(runs["n_facts"][sa])
            seeds = np.unique(runs["seed"][sa])
            acc = np.full((seeds.size, nf.size), np.nan)
            for i, sd in enumerate(seeds):
                for j, n in enumerate(nf):
                    hit = sa & (runs["seed"] == sd) & (runs["n_facts"] == n)
                    if np.any(hit):
                        acc[i, j] = float(np.mean(np.asarray(runs["accuracy"][hit], float)))
            per_arch.append((int(runs["n_params"][sa][0]), nf, acc))

        def fit_of(capacities):
            xs = [p for (p, _, _), (c, z) in zip(per_arch, capacities) if z == "none"]
            ys = [c for c, z in capacities if z == "none"]
            if len(xs) < 2 or np.ptp(np.log(xs)) == 0:
                return nan, nan, len(xs)
            b, a = np.polyfit(np.log(xs), np.log(ys), 1)
            return float(b), float(a), len(xs)

        b, a, n = fit_of([recall_capacity(nf, np.nanmean(acc, 0), threshold) for _, nf, acc in per_arch])
        boots = []
        for _ in range(n_boot):
            caps = [recall_capacity(nf, np.nanmean(acc[rng.integers(0, acc.shape[0], acc.shape[0])], 0), threshold)
                    for _, nf, acc in per_arch]
            bb, _, _ = fit_of(caps)
            if np.isfinite(bb):
                boots.append(bb)
        lo, hi = np.percentile(boots, [2.5, 97.5]) if boots else (nan, nan)
        fits[fam] = dict(exponent=b, intercept=a, ci_low=float(lo), ci_high=float(hi), n=n, n_boot_used=len(boots),
                         varied=_varied_archs(archs))
    return fits


def _varied_archs(archs) -> str:
    names = [k for i, k in enumerate(("d", "m", "n_heads")) if len({a[i] for a in archs}) > 1]
    return ",".join(names) if names else "none"


# ----------------------------------------------------------------------------
# The experiment and its result
# ----------------------------------------------------------------------------

RUN_COLUMNS = ("family", "model", "d", "m", "n_heads", "d_head", "n_params", "n_subjects", "n_facts", "seed",
               "accuracy", "facts_recalled", "final_loss", "status")
"""Columns of `recall.csv` (one row per trained run of the capacity sweeps)."""

CURVE_COLUMNS = ("run", "model", "d", "m", "n_heads", "n_subjects", "n_attributes", "seed", "step", "loss",
                 "accuracy", "mass_A_r")
"""Columns of `curves.csv` (one row per run and curve point; `step`: mean updates made over the point's window)."""

CAPACITY_COLUMNS = ("family", "model", "d", "m", "n_heads", "n_params", "facts_stored", "facts_stored_se",
                    "censored", "capacity_grid", "seed_capacities")
"""Columns of `capacity.csv` (`capacity_table`)."""

DEFAULT_FAMILIES = {
    "heads": FactualGrid(subjects=(4, 8, 16, 32, 64, 128), archs=((32, 0, 1), (32, 0, 2), (32, 0, 4), (32, 0, 8)),
                         seeds=(0, 1)),
    "width": FactualGrid(subjects=(4, 8, 16, 32, 64, 128), archs=((32, 32, 2), (32, 64, 2), (32, 128, 2),
                                                                  (32, 256, 2)), seeds=(0, 1)),
}
"""Capacity sweep families: attention only with `H` varied, attention + MLP with `m` varied."""


@dataclasses.dataclass
class FactualResult(ResultBundle):
    """Outputs of `factual_experiment` (numpy columns and a JSON-ready summary).

    Attributes:
      runs: capacity sweeps, one row per run, columns `RUN_COLUMNS` (`status` as names).
      curves: learning curves, columns `CURVE_COLUMNS`.
      capacity: facts stored per architecture, columns `CAPACITY_COLUMNS`.
      summary: `plateau_loss`, `log_A_r`, `facts_stored_per_parameter_count`, fits, settings.
    """

    runs: dict
    curves: dict
    capacity: dict
    summary: dict

    FILES = (BundleFile("curves.csv", columns=CURVE_COLUMNS),
             BundleFile("recall.csv", field="runs", columns=RUN_COLUMNS),
             BundleFile("capacity.csv", columns=CAPACITY_COLUMNS),
             BundleFile("summary.json"))
    """`write` writes `recall.csv`, `curves.csv`, `capacity.csv`, `summary.json`; `load` reads them back (numeric
    columns as int64 / float64, text columns as strings); the figures are
    `phasejax.tasks.factual.figures.plot_factual_figures`."""


def _runs_table(sweep: dict, family: str, d_head: int) -> dict:
    n = len(sweep["seed"])
    return dict(family=np.asarray([family] * n), model=np.asarray([model_kind(m) for m in sweep["m"]]),
                d=sweep["d"], m=sweep["m"], n_heads=sweep["n_heads"], d_head=np.full(n, d_head),
                n_params=sweep["n_params"], n_subjects=sweep["n_subjects"], n_facts=sweep["n_facts"],
                seed=sweep["seed"], accuracy=np.asarray(sweep["accuracy"], float),
                facts_recalled=np.asarray(sweep["facts_recalled"], float),
                final_loss=np.asarray(sweep["final_loss"], float), status=status_names(sweep["status"]))


def _curves_table(sweep: dict, task: FactualTask, training: FactualTraining, first_run: int = 0) -> dict:
    steps = curve_steps(training.steps, training.curve_points)
    n, p = sweep["curve_loss"].shape
    rep = lambda v: np.repeat(np.asarray(v), p)  # noqa: E731
    return dict(run=np.repeat(np.arange(first_run, first_run + n), p),
                model=rep([model_kind(m) for m in sweep["m"]]), d=rep(sweep["d"]), m=rep(sweep["m"]),
                n_heads=rep(sweep["n_heads"]), n_subjects=rep(sweep["n_subjects"]),
                n_attributes=np.full(n * p, task.n_attributes), seed=rep(sweep["seed"]), step=np.tile(steps, n),
                loss=np.asarray(sweep["curve_loss"], float).ravel(),
                accuracy=np.asarray(sweep["curve_accuracy"], float).ravel(),
                mass_A_r=np.asarray(sweep["curve_mass_A_r"], float).ravel())


def plateau_summary(curves: dict) -> dict:
    """`find_plateau` of every curve run, and per `|A_r|` and model the mean and s.e. against `log |A_r|`.

    The reference `log |A_r|` is used only to report the relative error, never to locate the plateau.
    """
    per_run = []
    for run in np.unique(curves["run"]):
        sel = curves["run"] == run
        pl = find_plateau(curves["step"][sel], curves["loss"][sel])
        i = pl.index
        D = int(curves["n_attributes"][sel][0])
        per_run.append(dict(run=int(run), model=str(curves["model"][sel][0]), n_attributes=D,
                            seed=int(curves["seed"][sel][0]), found=pl.found, plateau_loss=pl.loss,
                            log_A_r=math.log(D), step=pl.step, decades=pl.decades,
                            accuracy_at_plateau=float(curves["accuracy"][sel][i]) if pl.found else float("nan"),
                            mass_A_r_at_plateau=float(curves["mass_A_r"][sel][i]) if pl.found else float("nan"),
                            final_loss=float(curves["loss"][sel][-1]),
                            final_accuracy=float(curves["accuracy"][sel][-1])))
    groups = {}
    for D in sorted({r["n_attributes"] for r in per_run}):
        for name in ("all",) + MODEL_KINDS:
            rows = [r for r in per_run if r["found"] and r["n_attributes"] == D and name in ("all", r["model"])]
            if not rows:
                continue
            mean, se = mean_se([r["plateau_loss"] for r in rows])
            log_A_r = math.log(D)
            groups[f"|A_r|={D}, {name}"] = dict(
                n_attributes=D, model=name, log_A_r=log_A_r, plateau_loss=mean, plateau_loss_se=se,
                relative_error=(mean - log_A_r) / log_A_r, within_5_percent=bool(abs(mean - log_A_r) <= 0.05 * log_A_r),
                decades=mean_se([r["decades"] for r in rows])[0],
                accuracy_at_plateau=mean_se([r["accuracy_at_plateau"] for r in rows])[0],
                mass_A_r_at_plateau=mean_se([r["mass_A_r_at_plateau"] for r in rows])[0], n_runs=len(rows))
    return dict(per_run=per_run, groups=groups, n_runs=len(per_run), n_found=sum(r["found"] for r in per_run))


def factual_experiment(task: FactualTask, training: FactualTraining, *, families=None,
                       curve_task: FactualTask | None = None, curve_archs=((64, 128, 4), (64, 0, 4)),
                       curve_seeds=(0, 1, 2, 3), curve_training: FactualTraining | None = None,
                       extra_attributes=(), options: RunOptions | None = None,
                       threshold: float = 0.99) -> FactualResult | None:
    """Learning curves (the hallucination plateau) and the capacity sweeps, with their summary.

    Sweeps, each one `factual_sweep` (resumable under `run_dir/<name>` when
    `options.run_dir` is set): `curves` (`curve_archs` x `curve_seeds` on
    `curve_task`, default `task`, with `curve_training`, default `training`);
    `curves_A<D>` for every `D` in `extra_attributes` (the first curve
    architecture on `curve_task` with `|A_r| = D`: does the plateau follow
    `log |A_r|`?); and one capacity sweep per entry of `families` (name ->
    `FactualGrid` on `task`; default `DEFAULT_FAMILIES`). Returns `None` while
    chunks are missing.
    """
    options = run_options(options)
    families = DEFAULT_FAMILIES if families is None else dict(families)
    if not families:
        raise ValueError("families must name at least one FactualGrid")
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must lie in (0, 1], got threshold={threshold}")
    curve_task = task if curve_task is None else curve_task
    curve_training = training if curve_training is None else curve_training
    sub = lambda name: options if options.run_dir is None else options.replace(  # noqa: E731
        run_dir=os.path.join(options.run_dir, name))

    curve_jobs = [("curves", curve_task, FactualGrid(subjects=(curve_task.n_subjects,), archs=curve_archs,
                                                     seeds=curve_seeds))]
    for D in extra_attributes:
        t = curve_task.replace(n_attributes=int(D))
        curve_jobs.append((f"curves_A{int(D)}", t, FactualGrid(subjects=(t.n_subjects,), archs=curve_archs[:1],
                                                               seeds=curve_seeds)))
    curve_sweeps = []
    for name, t, g in curve_jobs:
        out = factual_sweep(g, t, curve_training, options=sub(name))
        if out is None:
            return None
        curve_sweeps.append((t, out))
    capacity_sweeps = {}
    for name, g in families.items():
        out = factual_sweep(g, task, training, options=sub(f"capacity_{name}"))
        if out is None:
            return None
        capacity_sweeps[name] = out
    settings = dict(
        task=dataclasses.asdict(task), training=dataclasses.asdict(training),
        families={k: dict(subjects=list(g.subjects), archs=[list(a) for a in g.archs], seeds=list(g.seeds))
                  for k, g in families.items()},
        curve_archs=[list(a) for a in curve_jobs[0][2].archs], curve_seeds=list(curve_jobs[0][2].seeds),
        extra_attributes=[int(D) for D in extra_attributes])
    return factual_result(curve_sweeps, capacity_sweeps, curve_training=curve_training, d_head=training.d_head,
                          threshold=threshold, settings=settings)


def factual_result(curve_sweeps, capacity_sweeps, *, curve_training: FactualTraining, d_head: int,
                   threshold: float = 0.99, settings: dict | None = None) -> FactualResult:
    """Assemble a `FactualResult` from sweep outputs (`factual_sweep`).

    Args:
      curve_sweeps: list of `(FactualTask, sweep)` for the learning curves (all
        trained with `curve_training`); the first task is the main one, whose
        `log |A_r|` is the summary's `log_A_r`.
      capacity_sweeps: `{family name: sweep}` (all with head dimension `d_head`).
      threshold: recall needed to store a number of facts (`recall_capacity`).
      settings: JSON-ready settings copied into the summary.
    """
    if not curve_sweeps or not capacity_sweeps:
        raise ValueError("curve_sweeps and capacity_sweeps must not be empty")
    curve_tables, first = [], 0
    for t, out in curve_sweeps:
        curve_tables.append(_curves_table(out, t, curve_training, first))
        first += len(out["seed"])
    curves = concat_tables(curve_tables)
    runs = concat_tables([_runs_table(out, name, d_head) for name, out in capacity_sweeps.items()])
    curve_task = curve_sweeps[0][0]
    plateau = plateau_summary(curves)
    table = capacity_table(runs, threshold)
    main = plateau["groups"].get(f"|A_r|={curve_task.n_attributes}, all", {})
    nan = float("nan")
    summary = dict(
        plateau_loss=main.get("plateau_loss", nan), plateau_loss_se=main.get("plateau_loss_se", nan),
        log_A_r=curve_task.log_A_r, log_A=curve_task.log_A,
        plateau_relative_error=main.get("relative_error", nan),
        plateau_within_5_percent=bool(main.get("within_5_percent", False)),
        plateau=plateau,
        facts_stored_per_parameter_count=[{k: table[k][i] for k in CAPACITY_COLUMNS} for i in range(len(table["d"]))],
        facts_vs_params_fit=capacity_fits(runs, threshold),
        capacity_threshold=threshold, d_head=d_head, curve_task=dataclasses.asdict(curve_task),
        curve_training=dataclasses.asdict(curve_training),
        status_counts={str(k): int(np.sum(runs["status"] == k)) for k in np.unique(runs["status"])},
        **(settings or {}))
    return FactualResult(runs=runs, curves=curves, capacity=table, summary=json_ready(summary))
