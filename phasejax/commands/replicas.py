"""Two replicas: tied students trained on the same data from two inits of one branch; the distribution of q12 / q.

    phasejax replicas                                  # CPU preset: d = 250, 500, 1000, 6 seeds
    phasejax replicas --preset gpu                     # d = 500 ... 8000, 64 seeds
    phasejax replicas --ds 4000 --seeds 16 --alphas 1.5 --lams 0.01 --branches positional
    phasejax replicas --replot                         # redo summary and figures from <out>/two_replicas.csv
    phasejax replicas --replot --merge DIR --out OUT --overwrite   # add DIR's pairs (another d) to OUT's

Each pair (`phasejax.empirics.replicas.replica_pair`): one data set per seed, two inits of the branch (the
branch init plus noise as large as the init, so the replicas start at `q12 / q ~ 1/2`), L-BFGS to the
gradient tolerance, the mutual overlap `q12` modulo `Q -> -Q`, the smallest Hessian eigenvalue (Lanczos),
and a continuation run of `--long-steps` more steps. The replica-symmetric theory predicts
`q12 / q -> 1` as `d -> inf`. Writes --out (default runs/replicas/): two_replicas.csv (one row per pair,
`phasejax.empirics.replicas.PAIR_COLUMNS`), summary.csv (per `(alpha, lambda, branch, d)`, over the pairs whose
replicas stayed in the branch less those with `q12 / q` undefined (`q = 0` or a diverged replica, counted in
`n_dropped` and printed): the distribution of `q12 / q` (quantiles, the fraction of pairs that meet), its slope
on the initial overlap, the Hessian verdicts (minimum, saddle, undecided) and means with standard errors),
summary.json (the same; per `(alpha, lambda, branch)` over the sizes: the within-size slopes on the initial
overlap, the verdict counts, the mean smallest Hessian eigenvalue fitted against `1 / d` and against
`1 / sqrt(d)` with `chi^2 / dof` and inflated errors, the state evolution's `q`, `m`, `theta`; the pairs that
are not a minimum; the totals), q12_over_q_ecdf.png and q12_over_q_vs_init.png.
"""

from __future__ import annotations

import os
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import (
    UsageError, nonnegative_int, positive_float, positive_int, refuse_duplicates, run_options_from,
)

NAME = "replicas"
HELP = "two students on the same data from two inits of one branch: the distribution of q12 / q"

PRESETS = {
    "cpu": dict(ds=[250, 500, 1000], seeds=6, long_steps=2000),
    "gpu": dict(ds=[500, 1000, 2000, 4000, 8000], seeds=64, long_steps=20000),
}

NAMED = ("branch", "solution_1", "solution_2")


def add_arguments(ap) -> None:
    flags.add_preset(ap, "cpu: d = 250, 500, 1000, 6 seeds, 2000 continuation steps; "
                         "gpu: d = 500 ... 8000, 64 seeds, 20000 continuation steps")
    flags.add_sizes(ap, d="many", seeds="pairs per point (default: the preset's)")
    flags.add_hidden_alias(ap, "--d", "ds", type=positive_int, nargs="+")
    ap.add_argument("--alphas", type=positive_float, nargs="+", default=[0.8, 1.5], help="sample complexities n / d")
    flags.add_point(ap, omega=0.3)
    flags.add_model(ap, lams=True)
    ap.add_argument("--branches", nargs="+", choices=("positional", "semantic"), default=["positional", "semantic"])
    ap.add_argument("--noise", type=positive_float, default=1.0,
                    help="init noise relative to the branch init's RMS entry (1: replicas start at q12/q ~ 1/2)")
    flags.add_optimizer(ap, optimizers=("lbfgs",), learning_rate=..., max_steps=5000, gtol=True)
    ap.add_argument("--lanczos-steps", type=positive_int, default=40, help="Lanczos steps per Hessian")
    ap.add_argument("--long-steps", type=nonnegative_int, default=None,
                    help="continuation steps at gtol / 100 after convergence (0: none; default: the preset's)")
    flags.add_leave_out(ap, {"se": "the state-evolution values in summary.json"})
    flags.add_dtype(ap)
    flags.add_replot(ap, "only redo summary.csv, summary.json and the figures from <out>/two_replicas.csv",
                     uses=("merge", "no_se", "sigma"))
    ap.add_argument("--merge", nargs="+", default=None, metavar="DIR",
                    help="with --replot: first add the pairs of DIR/two_replicas.csv (other sizes or seeds; a pair "
                         "present twice is refused) to <out>/two_replicas.csv")
    flags.add_mode(ap, "without --replot", lambda args: not args.replot, ignores=("merge",),
                   why="it adds pairs to <out>/two_replicas.csv before a replot", alternative=", or add --replot")
    flags.add_sweep(ap, NAME, chunk_size=16)


def reads(args) -> list:
    """The files the command reads back with `--replot`: `<out>/two_replicas.csv` and that of every `--merge`
    folder (`phasejax.empirics.replicas.PAIR_COLUMNS`; `lambda` may be spelled `lam`, as older files do)."""
    if not args.replot:
        return []
    from phasejax.commands.argtypes import Reads
    from phasejax.empirics.replicas import PAIR_COLUMNS

    columns = tuple("lambda|lam" if k == "lam" else k for k in PAIR_COLUMNS)
    return flags.replot_reads(args, {"two_replicas.csv": columns}) + [
        Reads(os.path.join(m, "two_replicas.csv"), columns, flag="--merge", fix="pass folders written by phasejax "
              "replicas") for m in args.merge or ()]


def write_pairs(pairs: dict, path: str) -> str:
    """`two_replicas.csv`: `PAIR_COLUMNS` with branch / solution names and status names."""
    import numpy as np

    from phasejax.empirics import SOLUTIONS
    from phasejax.empirics.replicas import PAIR_COLUMNS, REPLICA_BRANCHES
    from phasejax.io import write_csv
    from phasejax.solvers import status_names

    cols = {}
    for k in PAIR_COLUMNS:
        v = np.asarray(pairs[k])
        if k == "branch":
            v = np.asarray(REPLICA_BRANCHES)[v.astype(int)]
        elif k.startswith("solution_"):
            v = np.asarray(SOLUTIONS)[v.astype(int)]
        elif k.startswith("status_") or k == "hessian_status":
            v = status_names(v)
        cols[k] = v
    return write_csv(path, _with_lambda(cols), [CSV_NAMES.get(k, k) for k in PAIR_COLUMNS])


CSV_NAMES = {"lam": "lambda"}
"""Columns named otherwise in the CSV files than in the tables (`lam` is the ridge penalty `lambda`)."""


def _with_lambda(table: dict) -> dict:
    return {CSV_NAMES.get(k, k): v for k, v in table.items()}


def read_pairs(path: str) -> dict:
    """Inverse of `write_pairs` (codes for branch, solutions and statuses; booleans for converged, same_branch)."""
    import numpy as np

    from phasejax.solvers import status_code

    from phasejax.empirics import SOLUTIONS
    from phasejax.empirics.replicas import PAIR_COLUMNS, REPLICA_BRANCHES
    from phasejax.io import read_csv

    from_csv = {v: k for k, v in CSV_NAMES.items()}
    raw = {from_csv.get(k, k): v for k, v in read_csv(path).items()}   # older files have the table names
    missing = [k for k in PAIR_COLUMNS if k not in raw]
    if missing:
        raise UsageError(f"{path} is not a two_replicas.csv: missing columns {missing}")
    pairs = dict(raw)
    pairs["branch"] = np.asarray([REPLICA_BRANCHES.index(str(b)) for b in raw["branch"]])
    for k in ("solution_1", "solution_2"):
        pairs[k] = np.asarray([SOLUTIONS.index(str(s)) for s in raw[k]])
    for k in ("converged", "same_branch"):
        pairs[k] = np.asarray(raw[k]).astype(bool)
    for k in ("status_1", "status_2", "hessian_status"):
        pairs[k] = np.asarray([status_code(str(v)) for v in raw[k]], np.int32)
    return pairs


def merge_pairs(tables: list) -> dict:
    """Concatenate pair tables (rows sorted by `d, alpha, lam, branch, seed`); `UsageError` on a pair present
    twice."""
    import numpy as np

    pairs = {k: np.concatenate([np.asarray(t[k]) for t in tables]) for k in tables[0]}
    keys = list(zip(*(pairs[k].tolist() for k in ("d", "alpha", "lam", "branch", "seed", "omega"))))
    if len(set(keys)) != len(keys):
        raise UsageError("--merge: a pair (d, alpha, lambda, branch, seed, omega) appears twice; merge other "
                         "sizes or seeds only")
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    return {k: v[order] for k, v in pairs.items()}


def state_evolution_values(groups, sigma: float) -> dict:
    """`{(alpha, omega, lam, branch): (q, m, theta, status)}` from `solve_state_evolution` on each branch."""
    import numpy as np

    from phasejax.empirics.replicas import REPLICA_BRANCHES
    from phasejax.theory import make_params, solve_state_evolution

    out = {}
    for alpha, omega, lam, branch in groups:
        res = solve_state_evolution(make_params(alpha, omega, lam=lam, sigma=sigma), REPLICA_BRANCHES[int(branch)])
        out[(alpha, omega, lam, branch)] = (float(np.ravel(res.q)[0]), float(np.ravel(res.m)[0]),
                                            float(np.ravel(res.theta)[0]), res.status_name)
    return out


FIGURES = ("q12_over_q_ecdf.png", "q12_over_q_vs_init.png")
"""The command's figures: the distribution of `q12 / q` per size, and `q12 / q` against the initial overlap."""


def summarize(pairs: dict, out: str, *, se: dict | None, meta: dict) -> list[str]:
    """summary.csv (per `(alpha, lambda, branch, d)`), summary.json (the same, per point over the sizes, the pairs
    that are not a minimum, totals) and the `FIGURES`."""
    import numpy as np

    from phasejax.empirics.bracket_analysis import weighted_polyfit
    from phasejax.empirics.replicas import (
        HESSIAN_SIGMAS, REPLICA_BRANCHES, hessian_verdict, summarize_pairs, summarize_points,
    )
    from phasejax.io import atomic_write_json, write_csv

    table = summarize_pairs(pairs)
    names = dict(table)
    names["branch"] = np.asarray(REPLICA_BRANCHES)[table["branch"]]
    paths = [write_csv(os.path.join(out, "summary.csv"), _with_lambda(names))]
    per_point = summarize_points(pairs)
    points = []
    for i in range(len(per_point["alpha"])):
        row = {k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in per_point.items()}
        a, w, lam, b = (row[k] for k in ("alpha", "omega", "lam", "branch"))
        row["branch"] = REPLICA_BRANCHES[int(b)]
        sel = (table["alpha"] == a) & (table["omega"] == w) & (table["lam"] == lam) & (table["branch"] == b)
        # the mean smallest Hessian eigenvalue against 1 / d and against 1 / sqrt(d) (two laws the sizes may not
        # tell apart), errors inflated by sqrt(chi^2 / dof) when above 1
        d, h, h_err = table["d"][sel].astype(float), table["hessian_min_eig"][sel], table["hessian_min_eig_err"][sel]
        for label, x in (("1_over_d", 1.0 / d), ("1_over_sqrt_d", 1.0 / np.sqrt(d))):
            try:
                fit = weighted_polyfit(x, h, h_err)
            except ValueError:
                continue
            row.update({f"hessian_min_eig_fit_{label}": dict(
                at_infinite_d=float(fit.coef[0]), at_infinite_d_err=float(fit.errors[0]), slope=float(fit.coef[1]),
                slope_err=float(fit.errors[1]), chi2_per_dof=fit.chi2_per_dof, dof=fit.dof, error_scale=fit.scale)})
        if se is not None and (a, w, lam, b) in se:
            row.update(zip(("se_q", "se_m", "se_theta", "se_status"), se[(a, w, lam, b)]))
        points.append(row)
    verdicts = hessian_verdict(pairs["hessian_min_eig"], np.abs(np.asarray(pairs["hessian_min_eig_error"], float)))
    analysed = np.asarray(pairs["same_branch"]).astype(bool) & np.isfinite(np.asarray(pairs["q12_over_q"], float))
    not_minimum = [dict(alpha=float(pairs["alpha"][i]), lam=float(pairs["lam"][i]),
                        branch=REPLICA_BRANCHES[int(pairs["branch"][i])], d=int(pairs["d"][i]),
                        seed=int(pairs["seed"][i]), hessian_min_eig=float(pairs["hessian_min_eig"][i]),
                        hessian_min_eig_error=float(pairs["hessian_min_eig_error"][i]), verdict=str(verdicts[i]),
                        q12_over_q=float(pairs["q12_over_q"][i]))
                   for i in np.flatnonzero(analysed & (verdicts != "minimum"))]
    totals = dict(n_pairs_dropped=int(np.sum(table["n_dropped"])),
                  n_pairs_dropped_long_run=int(np.sum(table["n_dropped_long_run"])),
                  n_pairs_averaged=int(np.sum(table["n"])),
                  **{f"n_pairs_{v}": int(np.sum(table[f"n_{v}"])) for v in ("minimum", "saddle", "undecided")})
    print(f"analysed {totals['n_pairs_averaged']} pairs that stayed in their branch; dropped "
          f"{totals['n_pairs_dropped']} with q12 / q undefined (q = 0 or a diverged replica) and, from the "
          f"continuation averages, {totals['n_pairs_dropped_long_run']} more (summary.csv: n_dropped, "
          f"n_dropped_long_run); Hessian: {totals['n_pairs_minimum']} minima, {totals['n_pairs_saddle']} saddles, "
          f"{totals['n_pairs_undecided']} undecided", flush=True)
    paths.append(atomic_write_json(os.path.join(out, "summary.json"), dict(
        groups={k: np.asarray(v).tolist() for k, v in names.items()}, points=points,
        hessian_not_minimum=not_minimum, hessian_sigmas=HESSIAN_SIGMAS, **totals, **meta)))
    paths.append(plot_overlap_ecdf(pairs, os.path.join(out, FIGURES[0])))
    paths.append(plot_overlap_vs_init(pairs, per_point, os.path.join(out, FIGURES[1])))
    return paths


def _panels(pairs: dict):
    """`(alpha, lam, branch, mask)` of the points with analysed pairs (both replicas in the branch, `q12 / q`
    defined), and the labels of those without."""
    import numpy as np

    from phasejax.empirics.replicas import REPLICA_BRANCHES

    ratio = np.asarray(pairs["q12_over_q"], float)
    analysed = np.asarray(pairs["same_branch"]).astype(bool) & np.isfinite(ratio)
    keys = sorted({(float(a), float(lam), int(b)) for a, lam, b in zip(pairs["alpha"], pairs["lam"],
                                                                       pairs["branch"])})
    full, empty = [], []
    for a, lam, b in keys:
        sel = np.isclose(pairs["alpha"], a) & np.isclose(pairs["lam"], lam) & (np.asarray(pairs["branch"]) == b)
        if np.any(sel & analysed):
            full.append((a, lam, b, sel & analysed))
        else:
            empty.append(rf"$\alpha={a:g}$, $\lambda={lam:g}$, {REPLICA_BRANCHES[b]}")
    return full, empty


def _figure(n_panels: int):
    from matplotlib.figure import Figure

    ncols = min(3, max(1, n_panels))
    nrows = -(-max(1, n_panels) // ncols)
    fig = Figure(figsize=(4.3 * ncols, 3.3 * nrows))
    return fig, fig.subplots(nrows, ncols, squeeze=False).ravel()


def _size_colours(ds):
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return {d: cmap(i / max(1, len(ds) - 1) * 0.9) for i, d in enumerate(ds)}


def _empty_note(ax, empty: list) -> None:
    ax.axis("off")
    if empty:
        ax.text(0.02, 0.25, "no pair stayed in its branch at\n" + "\n".join(empty), ha="left", va="center",
                transform=ax.transAxes, fontsize=8)


def plot_overlap_ecdf(pairs: dict, path: str) -> str:
    """The empirical distribution function of `q12 / q`, one panel per `(alpha, lambda, branch)`, one curve per
    `d`; pairs that meet (`q12 / q > 1 - MEET_TOLERANCE`) are the jump at 1 (their fraction in the legend)."""
    import numpy as np

    from phasejax.empirics.replicas import MEET_TOLERANCE, REPLICA_BRANCHES
    from phasejax.plotting import save_figure

    full, empty = _panels(pairs)
    fig, axes = _figure(len(full) + (1 if empty else 0))
    ratio, d = np.asarray(pairs["q12_over_q"], float), np.asarray(pairs["d"]).astype(int)
    colours = _size_colours(sorted(set(d.tolist())))
    for ax, (a, lam, b, sel) in zip(axes, full):
        lowest = 1.0
        for size in sorted(set(d[sel].tolist())):
            r = np.sort(np.minimum(ratio[sel & (d == size)], 1.0))
            meet = np.mean(r > 1.0 - MEET_TOLERANCE)
            x = np.concatenate([[r[0]], r, [1.0]])
            y = np.concatenate([[0.0], np.arange(1, r.size + 1) / r.size, [1.0]])
            ax.step(x, y, where="post", color=colours[size], lw=1.4,
                    label=f"d = {size}: {r.size} pairs, {meet:.0%} meet")
            lowest = min(lowest, float(r[0]))
        ax.axvline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xlim(min(lowest, 0.98) - 0.02, 1.005)
        ax.set_ylim(0, 1.02)
        ax.set_title(rf"$\alpha={a:g}$, $\lambda={lam:g}$, {REPLICA_BRANCHES[b]}", fontsize=10)
        ax.set_xlabel(r"$x = q_{12}/q$")
        ax.set_ylabel(r"fraction of pairs with $q_{12}/q \leq x$")
        ax.legend(fontsize=6.5, loc="upper left")
    for ax in axes[len(full):]:
        _empty_note(ax, empty)
        empty = []
    fig.suptitle(r"Two replicas on the same data: distribution of $q_{12}/q$ per size (pairs that meet: the jump "
                 r"at 1)", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_overlap_vs_init(pairs: dict, per_point: dict, path: str) -> str:
    """`q12 / q` after training against `q12 / q` at the inits, one panel per `(alpha, lambda, branch)`, colour
    by `d`, marker by the Hessian verdict; the within-size slope (`summarize_points`) in the title."""
    import numpy as np

    from phasejax.empirics.replicas import REPLICA_BRANCHES, hessian_verdict
    from phasejax.plotting import save_figure

    full, empty = _panels(pairs)
    fig, axes = _figure(len(full) + (1 if empty else 0))
    ratio, init = np.asarray(pairs["q12_over_q"], float), np.asarray(pairs["init_q12_over_q"], float)
    d = np.asarray(pairs["d"]).astype(int)
    verdicts = hessian_verdict(pairs["hessian_min_eig"], np.abs(np.asarray(pairs["hessian_min_eig_error"], float)))
    colours = _size_colours(sorted(set(d.tolist())))
    markers = dict(minimum="o", saddle="x", undecided="^")
    for ax, (a, lam, b, sel) in zip(axes, full):
        for size in sorted(set(d[sel].tolist())):
            label = f"d = {size}"
            for v, mk in markers.items():
                s = sel & (d == size) & (verdicts == v)
                if s.any():
                    ax.scatter(init[s], ratio[s], s=18 if v == "minimum" else 34, marker=mk, color=colours[size],
                               label=label, alpha=0.85)
                    label = None
        ax.set_ylim(min(float(np.min(ratio[sel])) - 0.01, 0.98), 1.005)
        k = int(np.flatnonzero(np.isclose(per_point["alpha"], a) & np.isclose(per_point["lam"], lam)
                               & (per_point["branch"] == b))[0])
        ax.set_title(rf"$\alpha={a:g}$, $\lambda={lam:g}$, {REPLICA_BRANCHES[b]}: slope "
                     f"{per_point['init_slope'][k]:.2f} +- {per_point['init_slope_err'][k]:.2f}", fontsize=9)
        ax.set_xlabel(r"$q_{12}/q$ at the inits")
        ax.set_ylabel(r"$q_{12}/q$ trained")
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.ticklabel_format(axis="y", useOffset=False)
    # one legend for every panel (sizes by colour, verdicts by marker): in the spare panel, else the first one
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker="o", color=c, label=f"d = {size}") for size, c in colours.items()]
    handles += [Line2D([], [], ls="", marker=mk, color="0.4", label=f"Hessian: {v}") for v, mk in markers.items()]
    if len(axes) > len(full):
        _empty_note(axes[len(full)], empty)
        axes[len(full)].legend(handles=handles, fontsize=7, loc="upper left", ncol=2)
        for ax in axes[len(full) + 1:]:
            ax.axis("off")
    else:
        axes[0].legend(handles=handles, fontsize=6.5, loc="best", ncol=2)
    fig.suptitle("Two replicas: final against initial overlap (o minimum, x saddle, ^ undecided by the Hessian's "
                 "bottom against 2 error bounds; slope within sizes, +- one standard error)", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path)


def run(args) -> int:
    import numpy as np

    from phasejax.empirics import TrainConfig
    from phasejax.empirics.replicas import ReplicaGrid, replica_sweep
    from phasejax.theory import make_params

    meta = dict(preset=args.preset, **flags.environment())
    if args.merge and not args.replot:
        raise UsageError("--merge works with --replot only; add --replot")
    if args.replot:
        path = os.path.join(args.out, "two_replicas.csv")
        if not os.path.exists(path):
            raise UsageError(f"--replot needs {path}")
        pairs = read_pairs(path)
        paths = []
        if args.merge:
            pairs = merge_pairs([pairs] + [read_pairs(os.path.join(m, "two_replicas.csv")) for m in args.merge])
            paths.append(write_pairs(pairs, path))
        flags.print_paths(paths + summarize(pairs, args.out, se=None if args.no_se else _se(pairs, args.sigma), meta=meta))
        return 0
    preset = PRESETS[args.preset]
    ds, seeds = flags.pick(args, "ds", preset), flags.pick(args, "seeds", preset)
    long_steps = flags.pick(args, "long_steps", preset)
    for values, flag in ((ds, "--ds"), (args.alphas, "--alphas"), (args.lams, "--lams"), (args.branches, "--branches")):
        refuse_duplicates(values, flag)
    try:
        grids = [ReplicaGrid(alphas=tuple(args.alphas), lams=tuple(args.lams), branches=tuple(args.branches),
                             seeds=tuple(range(seeds)), omega=args.omega, d=d) for d in sorted(ds)]
    except ValueError as e:
        raise UsageError(str(e)) from None
    config = TrainConfig("lbfgs", max_steps=args.max_steps, gtol=args.gtol)
    options = run_options_from(args, args.out)
    params = make_params(1.0, args.omega, sigma=args.sigma)
    t0 = time.perf_counter()
    parts = []
    for grid in grids:
        part = replica_sweep(grid, params, config=config, noise=args.noise, lanczos_steps=args.lanczos_steps,
                             long_steps=long_steps, dtype=flags.dtype_from(args),
                             options=flags.sub_options(options, f"d{grid.d}"))
        if part is None:
            return flags.not_finished(options)
        parts.append(part)
        print(f"d = {grid.d}: {len(part['alpha'])} pairs, {time.perf_counter() - t0:.0f} s so far", flush=True)
    pairs = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    seconds = time.perf_counter() - t0
    os.makedirs(args.out, exist_ok=True)
    paths = [write_pairs(pairs, os.path.join(args.out, "two_replicas.csv"))]
    meta.update(d=sorted(ds), seeds=seeds, alphas=args.alphas, lams=args.lams, omega=args.omega,
                noise=args.noise, lanczos_steps=args.lanczos_steps, long_steps=long_steps, max_steps=args.max_steps,
                dtype=args.dtype, n_pairs=int(len(pairs["alpha"])), seconds_pairs=seconds)
    se = None if args.no_se else _se(pairs, args.sigma)
    meta["seconds"] = time.perf_counter() - t0
    paths += summarize(pairs, args.out, se=se, meta=meta)
    print(f"{len(pairs['alpha'])} pairs in {seconds:.1f} s ({int(np.sum(pairs['same_branch']))} stayed in their "
          f"branch)")
    flags.print_paths(paths)
    statuses = np.concatenate([pairs["status_1"], pairs["status_2"]])
    return flags.finish(NAME, flags.run_failures(statuses, "replicas", hint=flags.TRAINING_HINT))


def _se(pairs: dict, sigma: float) -> dict:
    import numpy as np

    groups = sorted({(float(a), float(w), float(lam), int(b)) for a, w, lam, b in
                     zip(pairs["alpha"], pairs["omega"], pairs["lam"], pairs["branch"])})
    se = state_evolution_values(groups, sigma)
    return {k: v for k, v in se.items() if np.isfinite(v[0])}
