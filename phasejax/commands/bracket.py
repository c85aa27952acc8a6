"""Empirical bracket of alpha_c: paired ERM on the same data with the branch constrained, against 1/d.

    phasejax bracket                                   # CPU preset: d = 250 ... 2000, 4 restarts
    phasejax bracket --preset gpu                      # d = 1000 ... 16000, 8 restarts
    phasejax bracket --ds 500 1000 --datasets 32 16 --alphas 1.2 1.3
    phasejax bracket --replot --out results/rsb --overwrite    # redo the summary and figure from the tasks

For each data set (`phasejax.empirics.bracket.paired_task`): a positional student with the teacher's direction
projected out and a semantic student with the positional direction projected out, each the best (lowest
training loss) of --restarts L-BFGS runs to the gradient tolerance, on the same data; their difference
`Delta e_t = e_t(semantic) - e_t(positional)` is paired, so most of the data's scatter cancels, and two control
variates of exactly known mean remove part of the rest. Per alpha, `Delta e_t` is extrapolated in 1/d (weighted,
chi^2/dof reported, errors inflated when it is above 1) and the empirical alpha_c is its zero; the bottom of the
restricted Hessian spectrum (Lanczos) of the minima found is reported against d. Each branch's `e_t` is an upper
bound of that branch's minimum on the data: the bracket measures the minima these algorithms reach, an upper side
of the ground state, independently of the replica-symmetric or any other theory.

Each d is computed in blocks of --block-size data sets per alpha, each block a resumable sweep under
<run-dir>/d<d>/datasets<first>-<last>/ (--run-dir default: <out>/bracket_run; raising --datasets later adds
blocks and reuses the finished ones).
Writes into --out (default runs/bracket/) these files only, so --out may be a folder that holds other results:
bracket_tasks.csv (one row per data set, `phasejax.empirics.bracket.TASK_COLUMNS`), bracket.csv (per alpha, d
and branch, `SUMMARY_COLUMNS`), bracket_summary.json (the extrapolations, alpha_c with its error, the achieved
standard errors, the Hessian bottoms and, from --rs-dir, the replica-symmetric values) and bracket.png. An
existing one of them is replaced only with --overwrite.
"""

from __future__ import annotations

import os
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import (
    UsageError, guard_output_files, positive_float, positive_int, refuse_duplicates, run_options_from,
)

NAME = "bracket"
HELP = "empirical alpha_c: paired constrained ERM on the same data, best of K restarts, extrapolated in 1/d"

PRESETS = {
    "cpu": dict(ds=[250, 500, 1000, 2000], datasets=[32, 16, 16, 2], restarts=4),
    "gpu": dict(ds=[1000, 2000, 4000, 8000, 16000], datasets=[96, 64, 40, 24, 16], restarts=8),
}
"""Data sets per alpha at each d. `cpu`: the committed results/rsb/bracket*; `gpu`:
sized from their measured scatter so that the standard error of `Delta e_t` is at most `1e-5` at every d and
alpha without the control variates (the measured scatter of `Delta e_t` per data set falls about like `d^-0.4`;
a task costs about `d^2`): docs/replica_symmetry.md, section "The empirical bracket of alpha_c"."""

ALPHAS = [1.15, 1.2, 1.25, 1.3, 1.35]
FILES = ("bracket_tasks.csv", "bracket.csv", "bracket_summary.json", "bracket.png")
BRANCHES = ("positional", "semantic")
ESTIMATORS = ("cv", "plain")


def add_arguments(ap) -> None:
    flags.add_preset(ap, "cpu: d = 250, 500, 1000, 2000 with 32, 16, 16, 2 data sets per alpha, 4 restarts (the "
                         "committed results); gpu: d = 1000 ... 16000 with 96 ... 16 data sets per alpha, 8 restarts")
    flags.add_sizes(ap, d="many", seeds=None)
    ap.add_argument("--datasets", type=positive_int, nargs="+", default=None,
                    help="data sets per alpha: one number for every d, or one per --ds (default: the preset's)")
    flags.allow_repeats(ap, "datasets")          # counts, one per d: 16 16 is two sizes of 16 data sets
    ap.add_argument("--alphas", type=positive_float, nargs="+", default=ALPHAS, help="sample complexities n / d")
    flags.add_point(ap, omega=0.3)
    flags.add_model(ap)
    ap.add_argument("--restarts", type=positive_int, default=None,
                    help="L-BFGS runs per branch and data set; the lowest loss is kept (default: the preset's)")
    ap.add_argument("--noise", type=positive_float, default=1.0,
                    help="restart noise relative to the branch init's RMS entry")
    flags.add_optimizer(ap, optimizers=("lbfgs",), learning_rate=..., max_steps=5000, gtol=True)
    ap.add_argument("--lanczos-steps", type=positive_int, default=40,
                    help="Lanczos steps for the bottom of the Hessian spectrum")
    ap.add_argument("--degree", type=positive_int, default=1, help="degree of the fit of Delta e_t in alpha")
    ap.add_argument("--estimator", choices=ESTIMATORS, default="cv",
                    help="cv: paired means with the control variates; plain: paired means alone (the summary "
                         "holds alpha_c of the other one as a check)")
    ap.add_argument("--block-size", type=positive_int, default=8,
                    help="data sets per alpha in one resumable sweep")
    ap.add_argument("--rs-dir", default=None,
                    help="a phase-diagram folder (diagram.csv, thresholds.csv, summary.json) with the "
                         "replica-symmetric Delta e_t and alpha_c to compare with (default: the repository's "
                         "results/phase_diagram, whatever the working directory)")
    flags.add_leave_out(ap, {"rs": "the replica-symmetric values of --rs-dir"})
    flags.add_mode(ap, "with --no-rs", lambda args: args.no_rs, ignores=("rs_dir",),
                   why="--no-rs leaves the replica-symmetric comparison out")
    flags.add_dtype(ap)
    flags.add_replot(ap, "only redo bracket.csv, bracket_summary.json and bracket.png from <out>/bracket_tasks.csv",
                     uses=("degree", "estimator", "rs_dir", "no_rs"), summary=FILES[2])
    flags.add_output(ap, flags.default_out(NAME), guard=False,
                     help="output folder (created); it may hold other results: only the files "
                          + ", ".join(FILES) + " are written, an existing one only with --overwrite")
    flags.add_run_options(ap, chunk_size=8)


# ----------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------

TASK_KEYS = ("alpha", "omega", "lam", "d", "dataset", "restarts")

RS_READS = {"diagram.csv": ("omega", "alpha", "delta_e", "delta_e_err"),
            "thresholds.csv": ("omega", "alpha_c", "alpha_c_err"), "summary.json": ("config",)}
"""What the command reads of the phase-diagram folder --rs-dir (`rs_reference`)."""


def rs_dir_from(args) -> str:
    """`--rs-dir`, by default the repository's results/phase_diagram (found next to the package)."""
    return args.rs_dir if args.rs_dir is not None else flags.repository_results("phase_diagram")


def reads(args) -> list:
    """The files the command reads back: with `--replot`, bracket_tasks.csv (`TASK_KEYS`, `TASK_COLUMNS`) and
    bracket_summary.json when there is one; unless `--no-rs`, the phase diagram of --rs-dir (`RS_READS`)."""
    out = []
    if args.replot:
        from phasejax.empirics.bracket import TASK_COLUMNS

        out += flags.replot_reads(args, {FILES[0]: TASK_KEYS + TASK_COLUMNS, FILES[2]: ()}, optional=(FILES[2],))
    if not args.no_rs:
        out += flags.rs_dir_reads(rs_dir_from(args), RS_READS, given=args.rs_dir is not None, reader=NAME,
                                  alternative=", or --no-rs")
    return out


def write_tasks(rows: dict, path: str) -> str:
    """bracket_tasks.csv: the task columns, then `TASK_COLUMNS` (solutions as names)."""
    import numpy as np

    from phasejax.empirics import SOLUTIONS
    from phasejax.empirics.bracket import TASK_COLUMNS
    from phasejax.io import write_csv

    cols = {k: np.asarray(rows[k]) for k in TASK_KEYS + TASK_COLUMNS}
    for b in BRANCHES:
        cols[f"solution_{b}"] = np.asarray(SOLUTIONS)[cols[f"solution_{b}"].astype(int)]
    return write_csv(path, cols, list(TASK_KEYS + TASK_COLUMNS))


def read_tasks(path: str) -> dict:
    """Inverse of `write_tasks` (solution codes); `UsageError` naming the file when a column is missing."""
    import numpy as np

    from phasejax.empirics import SOLUTIONS
    from phasejax.empirics.bracket import TASK_COLUMNS
    from phasejax.io import read_csv

    raw = read_csv(path, min_rows=1)
    missing = [k for k in TASK_KEYS + TASK_COLUMNS if k not in raw]
    if missing:
        raise UsageError(f"{path} is not a bracket_tasks.csv: missing columns {missing}")
    rows = dict(raw)
    for b in BRANCHES:
        names = [str(s) for s in raw[f"solution_{b}"]]
        bad = sorted(set(names) - set(SOLUTIONS))
        if bad:
            raise UsageError(f"{path}, column solution_{b}: {bad} are not among {list(SOLUTIONS)}")
        rows[f"solution_{b}"] = np.asarray([SOLUTIONS.index(s) for s in names])
    return rows


def rs_reference(rs_dir: str, omega: float, lam: float, sigma: float) -> dict | None:
    """The replica-symmetric `Delta e_t(alpha)` (with errors) and `alpha_c` at `omega` from a phase-diagram
    folder, or None (with a note) when its files are missing or it was computed for another `lambda`, `sigma`
    or `omega` grid."""
    import numpy as np

    from phasejax.io import read_csv, read_json

    paths = [os.path.join(rs_dir, f) for f in ("diagram.csv", "thresholds.csv", "summary.json")]
    if not all(os.path.exists(p) for p in paths):
        print(f"note: no replica-symmetric reference ({rs_dir} lacks diagram.csv, thresholds.csv or summary.json)")
        return None
    config = read_json(paths[2], kind=dict).get("config", {})
    if not (np.isclose(config.get("lam", np.nan), lam) and np.allclose(config.get("sigma", np.nan), sigma)):
        print(f"note: {rs_dir} is for lambda = {config.get('lam')}, sigma = {config.get('sigma')}, not "
              f"{lam}, {sigma}: no replica-symmetric reference")
        return None
    diagram, thresholds = read_csv(paths[0]), read_csv(paths[1])
    sel = np.isclose(np.asarray(diagram["omega"], float), omega)
    tsel = np.isclose(np.asarray(thresholds["omega"], float), omega)
    if not sel.any() or not tsel.any():
        print(f"note: {rs_dir} has no omega = {omega}: no replica-symmetric reference")
        return None
    i = int(np.flatnonzero(tsel)[0])
    return dict(source=rs_dir, alpha=np.asarray(diagram["alpha"], float)[sel].tolist(),
                delta_e=np.asarray(diagram["delta_e"], float)[sel].tolist(),
                delta_e_err=np.asarray(diagram["delta_e_err"], float)[sel].tolist(),
                alpha_c=float(thresholds["alpha_c"][i]), alpha_c_err=float(thresholds["alpha_c_err"][i]))


def write_results(rows: dict, out: str, *, degree: int, estimator: str, rs: dict | None, meta: dict) -> list[str]:
    """bracket.csv, bracket_summary.json and bracket.png from the task rows (`meta`: how they were computed,
    under "run")."""
    from phasejax.empirics.bracket_analysis import SUMMARY_COLUMNS, bracket_report
    from phasejax.io import atomic_write_json, write_csv

    table, report = bracket_report(rows, degree=degree, estimator=estimator)
    paths = [write_csv(os.path.join(out, "bracket.csv"), table, list(SUMMARY_COLUMNS))]
    if rs is not None:
        rs = dict(rs, alpha_c_shift_empirical_minus_rs=(
            None if report["alpha_c"]["alpha_c"] is None else report["alpha_c"]["alpha_c"] - rs["alpha_c"]))
    summary = dict(what=("the minima that paired, branch-constrained L-BFGS (best of the restarts) reaches on "
                         "finite data: each branch's e_t is an upper bound of that branch's minimum on the data, "
                         "an upper side of the ground state; alpha_c is where the extrapolated Delta e_t = "
                         "e_t(semantic) - e_t(positional) crosses zero"),
                   **report, replica_symmetric=rs, n_tasks=int(len(rows["alpha"])), run=meta)
    paths.append(atomic_write_json(os.path.join(out, "bracket_summary.json"), summary))
    paths.append(plot_bracket(table, report, rs, os.path.join(out, "bracket.png")))
    alpha_c = report["alpha_c"]
    if alpha_c["alpha_c"] is not None:
        print(f"alpha_c(omega = {report['omega']:g}) = {alpha_c['alpha_c']:.4f} +- {alpha_c['alpha_c_err']:.4f} "
              f"(d -> inf, {estimator}; fit chi2/dof {alpha_c['chi2_per_dof']})"
              + (f"; replica-symmetric {rs['alpha_c']:.4f} +- {rs['alpha_c_err']:.4f}" if rs else ""))
    for a in report["achieved_errors"]:
        counts = f"{min(a['n_datasets_per_alpha'])}-{max(a['n_datasets_per_alpha'])} data sets per alpha"
        if a["largest_delta_e_err"] is None:
            print(f"d = {a['d']}: no standard error of Delta e_t with {counts} (two or more are needed)")
            continue
        print(f"d = {a['d']}: standard error of Delta e_t {a['smallest_delta_e_err']:.2g} ... "
              f"{a['largest_delta_e_err']:.2g} with {counts} (target {report['target_error']:.0e})")
    return paths


def plot_bracket(table: dict, report: dict, rs: dict | None, path: str) -> str:
    """Three panels: Delta e_t against alpha per d with the d -> inf extrapolation, its linear fit and alpha_c
    (and the replica-symmetric curve and alpha_c); Delta e_t against 1/d per alpha with the fits; the bottom of
    the restricted Hessian spectrum against d per branch."""
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    col = "delta_e_cv" if report["estimator"] == "cv" else "delta_e"
    pos = np.asarray(table["branch"]) == "positional"
    ds = np.unique(table["d"][pos])
    alphas = np.unique(table["alpha"][pos])
    fig = Figure(figsize=(15, 4.4))
    axes = fig.subplots(1, 3)
    ax = axes[0]
    cmap = colormaps["viridis"]
    width = 0.004 * (len(ds) + 1)
    for k, d in enumerate(ds):
        sel = pos & (table["d"] == d)
        ax.errorbar(table["alpha"][sel] + width * (k / max(len(ds) - 1, 1) - 0.5), table[col][sel],
                    table[col + "_err"][sel], fmt="o", ms=3, capsize=2, color=cmap(k / max(len(ds), 1)),
                    label=f"d = {int(d)}")
    ext = report["extrapolation"]
    inf = np.asarray([np.nan if r["value_at_infinite_d"] is None else r["value_at_infinite_d"] for r in ext])
    inf_err = np.asarray([np.nan if r["value_at_infinite_d_err"] is None else r["value_at_infinite_d_err"]
                          for r in ext])
    ax.errorbar([r["alpha"] for r in ext], inf, inf_err, fmt="s", ms=5, capsize=3, color="k",
                label=r"$d\to\infty$ (fit in $1/d$)")
    ac = report["alpha_c"]
    if ac.get("alpha_c") is not None:
        x = np.linspace(alphas.min() - 0.03, alphas.max() + 0.03, 50)
        coef, center = np.asarray(ac["coef"]), ac["center"]
        ax.plot(x, np.polynomial.polynomial.polyval(x - center, coef), "k-", lw=0.8)
        ax.axvspan(ac["alpha_c"] - ac["alpha_c_err"], ac["alpha_c"] + ac["alpha_c_err"], color="k", alpha=0.12,
                   label=rf"empirical $\alpha_c$ = {ac['alpha_c']:.3f} $\pm$ {ac['alpha_c_err']:.3f}")
    if rs is not None:
        a, y, e = (np.asarray(rs[k], float) for k in ("alpha", "delta_e", "delta_e_err"))
        near = (a >= alphas.min() - 0.16) & (a <= alphas.max() + 0.16)
        ax.plot(a[near], y[near], "--", color="tab:red", lw=1.2, label="replica-symmetric theory")
        ax.fill_between(a[near], y[near] - e[near], y[near] + e[near], color="tab:red", alpha=0.2)
        ax.axvline(rs["alpha_c"], color="tab:red", lw=0.8, ls=":",
                   label=rf"RS $\alpha_c$ = {rs['alpha_c']:.4f} $\pm$ {rs['alpha_c_err']:.4f}")
    ax.axhline(0.0, color="grey", lw=0.6)
    ax.set_xlim(alphas.min() - 0.04, alphas.max() + 0.04)
    ax.set_xlabel(r"$\alpha$")
    ax.set_ylabel(r"$\Delta e_t = e_t^{\rm sem} - e_t^{\rm pos}$")
    ax.set_title(rf"Paired, branch-constrained ERM ($\omega$ = {report['omega']:g}, $\lambda$ = {report['lam']:g})",
                 fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1]
    for k, r in enumerate(ext):
        color = colormaps["coolwarm"](k / max(len(ext) - 1, 1))
        x = 1.0 / np.asarray(r["ds"], float)
        ax.errorbar(x, r["delta_e"], r["delta_e_err"], fmt="o", ms=3, capsize=2, color=color,
                    label=rf"$\alpha$ = {r['alpha']:g}" + (f" ($\\chi^2$/dof {r['chi2_per_dof']:.2g})"
                                                          if r["chi2_per_dof"] is not None else ""))
        if r["value_at_infinite_d"] is not None:
            xx = np.linspace(0, x.max() * 1.05, 20)
            ax.plot(xx, r["value_at_infinite_d"] + r["slope_in_1_over_d"] * xx, "-", lw=0.8, color=color)
    ax.axhline(0.0, color="grey", lw=0.6)
    ax.set_xlim(left=0)
    ax.set_xlabel(r"$1/d$")
    ax.set_ylabel(r"$\Delta e_t$")
    ax.set_title(r"Extrapolation $\Delta e_t = a + b/d$ (errors inflated where $\chi^2$/dof > 1)", fontsize=9)
    ax.legend(fontsize=6)
    ax = axes[2]
    for name, color in zip(BRANCHES, ("tab:blue", "tab:orange")):
        rows = [h for h in report["hessian_bottom"] if h["branch"] == name and h["n"] > 0]
        if not rows:
            continue
        d = np.asarray([h["d"] for h in rows], float)
        ax.errorbar(d, [h["mean"] for h in rows], [np.nan_to_num(h["mean_err"] or 0.0) for h in rows], fmt="o-",
                    capsize=3, color=color, label=f"{name}: mean over data sets")
        ax.errorbar(d * 1.04, [h["lowest"] for h in rows], [h["lowest_ritz_residual"] for h in rows], fmt="v",
                    mfc="none", capsize=2, color=color, label=f"{name}: lowest (Ritz residual)")
    ax.axhline(0.0, color="grey", lw=0.6)
    ax.axhline(report["lam"], color="grey", lw=0.6, ls="--", label=r"ridge $\lambda$")
    ax.set_xscale("log")
    sizes = sorted({h["d"] for h in report["hessian_bottom"]})
    ax.set_xticks(sizes, [str(d) for d in sizes])
    ax.minorticks_off()
    ax.set_xlabel(r"$d$")
    ax.set_ylabel("smallest Hessian eigenvalue (restricted)")
    ax.set_title("Bottom of the Hessian spectrum of the minima found (Lanczos)", fontsize=9)
    ax.legend(fontsize=6)
    fig.tight_layout()
    return save_figure(fig, path)


# ----------------------------------------------------------------------------
# Run
# ----------------------------------------------------------------------------


def blocks(n: int, size: int) -> list[range]:
    """Data-set indices `0 ... n - 1` in consecutive blocks of `size` (the last one shorter)."""
    return [range(s, min(s + size, n)) for s in range(0, n, size)]


def run(args) -> int:
    import numpy as np

    meta = dict(preset=args.preset, **flags.environment())
    rs = None
    if args.replot:
        path = os.path.join(args.out, FILES[0])
        if not os.path.exists(path):
            raise UsageError(f"--replot needs {path}")
        guard_output_files(args.out, args.overwrite, FILES[1:])
        rows = read_tasks(path)
        if not args.no_rs:
            rs = rs_reference(rs_dir_from(args), float(rows["omega"][0]), float(rows["lam"][0]), _sigma_of(args.out))
        flags.print_paths(write_results(rows, args.out, degree=args.degree, estimator=args.estimator, rs=rs,
                                        meta=dict(_previous_run(args.out), replotted_by=meta)))
        return 0
    preset = PRESETS[args.preset]
    ds = flags.pick(args, "ds", preset)
    datasets = flags.pick(args, "datasets", preset)
    restarts = flags.pick(args, "restarts", preset)
    for values, flag in ((ds, "--ds"), (args.alphas, "--alphas")):
        refuse_duplicates(values, flag)
    if len(datasets) == 1:
        datasets = datasets * len(ds)
    if len(datasets) != len(ds):
        raise UsageError(f"--datasets takes one number for every d or one per --ds ({len(ds)}), got {len(datasets)}")
    if args.degree + 1 > len(args.alphas):
        raise UsageError(f"--degree {args.degree} needs at least {args.degree + 1} --alphas, got {len(args.alphas)}")
    guard_output_files(args.out, args.overwrite, FILES)
    from phasejax.empirics import TrainConfig
    from phasejax.empirics.bracket import BracketGrid, bracket_sweep
    from phasejax.theory import make_params

    try:
        params = make_params(1.0, args.omega, sigma=args.sigma, lam=args.lam)
        plan = [(b, d, BracketGrid(alphas=tuple(args.alphas), datasets=tuple(rng), d=d))
                for b in range(max(len(blocks(n, args.block_size)) for n in datasets))
                for d, n in zip(ds, datasets) for k, rng in enumerate(blocks(n, args.block_size)) if k == b]
    except ValueError as e:
        raise UsageError(str(e)) from None
    config = TrainConfig("lbfgs", max_steps=args.max_steps, gtol=args.gtol)
    if args.run_dir is None:      # --out may hold another command's run/ (results/rsb does): a folder of our own
        args.run_dir = os.path.join(args.out, "bracket_run")
    options = run_options_from(args, args.out)
    t0, c0 = time.perf_counter(), time.process_time()
    parts, seconds = [], {}
    for _, d, grid in plan:
        sub = flags.sub_options(options, f"d{d}/datasets{grid.datasets[0]}-{grid.datasets[-1]}")
        t_part = time.perf_counter()
        part = bracket_sweep(grid, params, restarts=restarts, config=config, noise=args.noise,
                             lanczos_steps=args.lanczos_steps, dtype=flags.dtype_from(args), options=sub)
        if part is None:
            return flags.not_finished(options)
        parts.append(part)
        spent = seconds.setdefault(int(d), [0.0, 0])
        spent[0] += time.perf_counter() - t_part
        spent[1] += len(part["alpha"])
        print(f"d = {d}, data sets {grid.datasets[0]}-{grid.datasets[-1]}: {len(part['alpha'])} tasks, "
              f"{time.perf_counter() - t0:.0f} s so far", flush=True)
    rows = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.lexsort((rows["dataset"], rows["alpha"], rows["d"]))
    rows = {k: v[order] for k, v in rows.items()}
    paths = [write_tasks(rows, os.path.join(args.out, FILES[0]))]
    meta.update(ds=list(ds), datasets_per_alpha=list(datasets), alphas=list(args.alphas), omega=args.omega,
                lam=args.lam, sigma=args.sigma, restarts_per_branch=restarts, noise=args.noise,
                max_steps=args.max_steps, gtol=args.gtol, lanczos_steps=args.lanczos_steps, dtype=args.dtype,
                block_size=args.block_size, seconds=time.perf_counter() - t0,
                seconds_per_task={str(d): (t / n if n else None) for d, (t, n) in seconds.items()},
                cpu_seconds_this_process=time.process_time() - c0)
    if not args.no_rs:
        rs = rs_reference(rs_dir_from(args), args.omega, args.lam, args.sigma)
    paths += write_results(rows, args.out, degree=args.degree, estimator=args.estimator, rs=rs, meta=meta)
    flags.print_paths(paths)
    converged = np.concatenate([rows[f"n_converged_{b}"] for b in BRANCHES])
    if np.all(converged == 0):
        return flags.finish(NAME, f"no restart of any of the {len(rows['alpha'])} tasks converged{flags.TRAINING_HINT}")
    finite = np.isfinite(rows["delta_e"])
    if not finite.any():
        return flags.finish(NAME, f"every restart diverged in all {len(finite)} tasks{flags.TRAINING_HINT}")
    return 0


def _previous_run(out: str) -> dict:
    """The "run" record of the bracket_summary.json in `out` (how its tasks were computed; kept by --replot), or
    {}."""
    from phasejax.io import read_json

    path = os.path.join(out, FILES[2])
    if not os.path.exists(path):
        return {}
    run = read_json(path, kind=dict).get("run")
    if not isinstance(run, dict):
        return {}
    run.pop("replotted_by", None)
    return run


def _sigma_of(out: str) -> float:
    """The token standard deviation of the run in `out` (from its bracket_summary.json; 0.5 without one)."""
    return float(_previous_run(out).get("sigma", 0.5))
