"""Two replicas: pairs of tied students trained on the same data from two inits of one branch; q12 / q against 1/d.

    phasejax replicas                                  # CPU preset: d = 250, 500, 1000, 6 seeds
    phasejax replicas --preset gpu                     # d = 500 ... 8000, 64 seeds
    phasejax replicas --ds 4000 --seeds 16 --alphas 1.5 --lams 0.01 --branches positional
    phasejax replicas --replot                         # redo summary and figure from <out>/two_replicas.csv
    phasejax replicas --replot --merge DIR --out OUT --overwrite   # add DIR's pairs (another d) to OUT's

Each pair (`phasejax.empirics.replicas.replica_pair`): one data set per seed, two inits of the branch (the
branch init plus noise as large as the init, so the replicas start at `q12 / q ~ 1/2`), L-BFGS to the
gradient tolerance, the mutual overlap `q12` modulo `Q -> -Q`, the smallest Hessian eigenvalue (Lanczos),
and a continuation run of `--long-steps` more steps. The replica-symmetric theory predicts
`q12 / q -> 1` as `d -> inf`. Writes --out (default runs/replicas/): two_replicas.csv (one row per pair,
`phasejax.empirics.replicas.PAIR_COLUMNS`), summary.csv (per `(alpha, lambda, branch, d)`: pair counts, means
and standard errors over the pairs whose replicas stayed in the branch, less those with `q12 / q` undefined
(`q = 0` or a diverged replica), counted in `n_dropped` and printed), summary.json (the same with the totals
`n_pairs_dropped`, `n_pairs_dropped_long_run`, `n_pairs_averaged`, the
`d -> inf` extrapolations (`a + b / d`) of `1 - q12 / q` and of the smallest Hessian eigenvalue, and the state
evolution's `q`, `m`, `theta`), q12_over_q.png.
"""

from __future__ import annotations

import os
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import (
    UsageError, nonnegative_int, positive_float, positive_int, refuse_duplicates, run_options_from,
)

NAME = "replicas"
HELP = "two students on the same data from two inits of one branch: mutual overlap q12 / q against 1/d"

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
    flags.add_replot(ap, "only redo summary.csv, summary.json and q12_over_q.png from <out>/two_replicas.csv",
                     uses=("merge", "no_se", "sigma"))
    ap.add_argument("--merge", nargs="+", default=None, metavar="DIR",
                    help="with --replot: first add the pairs of DIR/two_replicas.csv (other sizes or seeds; a pair "
                         "present twice is refused) to <out>/two_replicas.csv")
    flags.add_sweep(ap, NAME, chunk_size=16)


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


def summarize(pairs: dict, out: str, *, se: dict | None, meta: dict) -> list[str]:
    """summary.csv, summary.json (with `1 - q12/q` extrapolated to `d -> inf`) and q12_over_q.png."""
    import numpy as np

    from phasejax.empirics.replicas import REPLICA_BRANCHES, extrapolate_in_d, summarize_pairs
    from phasejax.io import atomic_write_json, write_csv

    table = summarize_pairs(pairs)
    names = dict(table)
    names["branch"] = np.asarray(REPLICA_BRANCHES)[table["branch"]]
    paths = [write_csv(os.path.join(out, "summary.csv"), _with_lambda(names))]
    limits = []
    keys = sorted({(a, w, lam, b) for a, w, lam, b in zip(table["alpha"], table["omega"], table["lam"],
                                                           table["branch"])})
    for a, w, lam, b in keys:
        sel = (table["alpha"] == a) & (table["omega"] == w) & (table["lam"] == lam) & (table["branch"] == b)
        rows = dict(alpha=a, omega=w, lam=lam, branch=REPLICA_BRANCHES[int(b)])
        for key, label, sign in (("q12_over_q", "one_minus_q12_over_q", -1.0),
                                 ("long_run_q12_over_q", "long_run_one_minus_q12_over_q", -1.0),
                                 ("hessian_min_eig", "hessian_min_eig", 1.0)):
            value = table[key][sel] if sign > 0 else 1.0 - table[key][sel]
            c, c_err, slope, slope_err = extrapolate_in_d(table["d"][sel], value, table[key + "_err"][sel])
            rows[label + "_at_infinite_d"] = c
            rows[label + "_at_infinite_d_err"] = c_err
            rows[label + "_slope_in_1_over_d"] = slope
            rows[label + "_slope_in_1_over_d_err"] = slope_err
        if se is not None and (a, w, lam, b) in se:
            rows.update(zip(("se_q", "se_m", "se_theta", "se_status"), se[(a, w, lam, b)]))
        limits.append(rows)
    dropped = dict(n_pairs_dropped=int(np.sum(table["n_dropped"])),
                   n_pairs_dropped_long_run=int(np.sum(table["n_dropped_long_run"])),
                   n_pairs_averaged=int(np.sum(table["n_same_branch"]) - np.sum(table["n_dropped"])))
    print(f"averages over {dropped['n_pairs_averaged']} pairs that stayed in their branch; dropped "
          f"{dropped['n_pairs_dropped']} with q12 / q undefined (q = 0 or a diverged replica) and, from the "
          f"continuation averages, {dropped['n_pairs_dropped_long_run']} more (summary.csv: n_dropped, "
          f"n_dropped_long_run)", flush=True)
    paths.append(atomic_write_json(os.path.join(out, "summary.json"), dict(
        groups={k: np.asarray(v).tolist() for k, v in names.items()}, limits=limits, **dropped, **meta)))
    paths.append(plot_q12_over_q(table, os.path.join(out, "q12_over_q.png")))
    return paths


def plot_q12_over_q(table: dict, path: str) -> str:
    """`q12 / q` (filled, after training; open, after the continuation run) against `1 / d`, one panel per
    `(alpha, lambda)`, one colour per branch, error bars one standard error over pairs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from phasejax.empirics.replicas import REPLICA_BRANCHES

    alphas, lams = np.unique(table["alpha"]), np.unique(table["lam"])
    fig, axes = plt.subplots(len(alphas), len(lams), figsize=(4.2 * len(lams), 3.2 * len(alphas)), squeeze=False,
                             sharex=True)
    colours = {0: "tab:blue", 1: "tab:orange"}
    for i, a in enumerate(alphas):
        for j, lam in enumerate(lams):
            ax = axes[i, j]
            ax.axhline(1.0, color="k", lw=0.8, ls="--")
            lowest = 0.9
            for b in np.unique(table["branch"]):
                sel = (table["alpha"] == a) & (table["lam"] == lam) & (table["branch"] == b) & \
                      np.isfinite(table["q12_over_q"])
                if not sel.any():
                    continue
                x = 1.0 / table["d"][sel]
                n = table["n_same_branch"][sel]
                y, e = table["q12_over_q"][sel], np.nan_to_num(table["q12_over_q_err"][sel])
                lowest = min(lowest, float(np.min(y - e)))
                ax.errorbar(x, y, e, marker="o", capsize=3, color=colours[int(b)],
                            label=f"{REPLICA_BRANCHES[int(b)]} ({int(n.min())}-{int(n.max())} pairs)")
                ax.errorbar(x * 1.04, table["long_run_q12_over_q"][sel],
                            np.nan_to_num(table["long_run_q12_over_q_err"][sel]), marker="o", mfc="none", ls=":",
                            capsize=2, color=colours[int(b)])
            ax.set_title(rf"$\alpha={a:g}$, $\lambda={lam:g}$", fontsize=10)
            ax.set_xlim(left=0)
            ax.set_ylim(lowest - 0.02, 1.02)
            ax.ticklabel_format(axis="y", useOffset=False)
            if i == len(alphas) - 1:
                ax.set_xlabel(r"$1/d$")
            if j == 0:
                ax.set_ylabel(r"$q_{12}/q$")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="best")
            else:
                ax.text(0.5, 0.5, "no pair stayed in its branch\n(here the minimiser is Q = 0)", ha="center",
                        va="center", transform=ax.transAxes, fontsize=8)
    fig.suptitle(r"Two replicas on the same data: $q_{12}/q$ (filled: trained; open: after the continuation run)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


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
