"""Finite-size scaling of the trained overlaps m (positional init) and theta (semantic init) towards the SE.

    phasejax scaling                         # CPU preset: alpha = 1.5, omega = 0.3, d = 10 ... 4000, 16 seeds
    phasejax scaling --ds 20 100 500 --seeds 4
    phasejax scaling --preset gpu            # d up to 4000, 40 seeds
    phasejax scaling --replot                # redraw scaling.png and summary.csv from <out>/runs.csv, se.json

One vmapped sweep over (init, seed) per dimension d (the shapes change with d),
each resumable under --run-dir/d<d>/; the SE fixed points of both subspaces
(with their quadrature errors) are the d -> inf reference. Writes --out
(default runs/scaling/): runs.csv (every run, all d; `read_runs_csv` loads it),
summary.csv (per overlap and d: mean, standard deviation, standard error,
distance to the SE, and the teacher-norm adjusted mean and its distance), se.json, scaling.png and summary.json.
"""

from __future__ import annotations

import os
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import refuse_duplicates, run_options_from

NAME = "scaling"
HELP = "finite-size scaling of the trained overlaps towards the state-evolution fixed points"

PRESETS = {
    "cpu": dict(ds=[10, 20, 50, 100, 200, 500, 1000, 2000, 4000], seeds=16),
    "gpu": dict(ds=[10, 20, 50, 100, 200, 500, 1000, 2000, 4000], seeds=40),
}


def add_arguments(ap) -> None:
    flags.add_preset(ap, "cpu: d = 10 ... 4000, 16 seeds; gpu: d = 10 ... 4000, 40 seeds")
    flags.add_point(ap, alpha=1.5, omega=0.3)
    flags.add_sizes(ap, d="many", seeds="seeds per d and init (default: the preset's)")
    flags.add_dtype(ap)
    flags.add_replot(ap, "only redo summary.csv and scaling.png from <out>/runs.csv and <out>/se.json (no training)")
    flags.add_sweep(ap, NAME, chunk_size=20)


SE_KEYS = ("alpha", "m", "theta")
"""The keys of se.json that `--replot` reads."""


def reads(args) -> list:
    """The files the command reads back with `--replot`: runs.csv (`phasejax.empirics.RUN_COLUMNS`) and se.json
    (`SE_KEYS`)."""
    if not args.replot:
        return []
    from phasejax.empirics.sweep import RUN_COLUMNS

    return flags.replot_reads(args, {"runs.csv": RUN_COLUMNS, "se.json": SE_KEYS})


def summarize(runs: dict, se: dict, out: str, alpha: float) -> list[str]:
    """Per overlap (`m` from the positional init, `theta` from the semantic one) and `d`: mean, standard
    deviation and error over seeds, the distance to the SE value `se[key]`, and the same mean with the
    teacher's norm as control variate (`adj_mean`, `adj_sem`, `abs_dev_adj`;
    `phasejax.empirics.adjusted_seed_mean`: NaN below `MIN_ADJUSTED_SEEDS` seeds or with a NaN run); writes
    summary.csv and scaling.png into `out` and returns their paths."""
    import numpy as np

    from phasejax.empirics.metrics import adjusted_seed_mean
    from phasejax.io import write_csv
    from phasejax.plotting_experiments import plot_finite_size_scaling

    ds = np.unique(np.asarray(runs["d"]))
    summary = dict(overlap=[], d=[], mean=[], std=[], sem=[], abs_dev_from_se=[], adj_mean=[], adj_sem=[],
                   abs_dev_adj=[], se=[], se_err=[], n=[])
    stats, adjusted = {}, {}
    for key, code in (("m", 0), ("theta", 1)):
        mean, std, count, adj = [], [], [], []
        for d in ds:
            sel = (np.asarray(runs["init"]) == code) & (np.asarray(runs["d"]) == d)
            v = np.asarray(runs[key], float)[sel]
            mean.append(v.mean())
            std.append(v.std(ddof=1) if v.size > 1 else np.nan)
            count.append(v.size)
            adj.append(adjusted_seed_mean(v, np.asarray(runs["seed"])[sel], int(d)))
            for name, value in (("overlap", key), ("d", int(d)), ("mean", mean[-1]), ("std", std[-1]),
                                ("sem", std[-1] / np.sqrt(v.size)), ("abs_dev_from_se", abs(mean[-1] - se[key])),
                                ("adj_mean", adj[-1][0]), ("adj_sem", adj[-1][1]),
                                ("abs_dev_adj", abs(adj[-1][0] - se[key])),
                                ("se", se[key]), ("se_err", se.get(key + "_err", np.nan)), ("n", v.size)):
                summary[name].append(value)
        stats[key, code] = (np.asarray(mean), np.asarray(std), np.asarray(count))
        adjusted[key, code] = np.asarray(adj, float)
    return [write_csv(os.path.join(out, "summary.csv"), summary),
            plot_finite_size_scaling(ds, stats, se, os.path.join(out, "scaling.png"), alpha, adjusted=adjusted)]


def run(args) -> int:
    import numpy as np

    from phasejax.empirics import TrainingGrid, sample_count, train_students
    from phasejax.empirics.sweep import read_runs_csv, write_runs_csv
    from phasejax.io import atomic_write_json, number, read_json
    from phasejax.solvers import status_name
    from phasejax.theory import make_params, result_columns, solve_state_evolution

    if args.replot:
        for need in ("runs.csv", "se.json"):
            if not os.path.exists(os.path.join(args.out, need)):
                raise SystemExit(f"error: --replot needs {os.path.join(args.out, need)}")
        se = {k: number(v) if k in ("m", "m_err", "theta", "theta_err", "alpha", "omega") else v
              for k, v in read_json(os.path.join(args.out, "se.json")).items()}     # null: NaN
        flags.print_paths(summarize(read_runs_csv(os.path.join(args.out, "runs.csv")), se, args.out, float(se["alpha"])))
        return 0
    preset = PRESETS[args.preset]
    refuse_duplicates(flags.pick(args, "ds", preset), "--ds")
    ds, seeds = sorted(flags.pick(args, "ds", preset)), flags.pick(args, "seeds", preset)
    for d in ds:
        try:
            sample_count(args.alpha, d)
        except ValueError as e:
            raise SystemExit(f"error: --alpha {args.alpha} with --ds {d}: {e}") from None
    params = make_params(args.alpha, args.omega)
    t0 = time.perf_counter()
    se = dict(alpha=args.alpha, omega=args.omega)
    for branch, key in (("positional", "m"), ("semantic", "theta")):
        res = solve_state_evolution(params, init=branch)
        cols = result_columns(res, params)
        se[key], se[key + "_err"] = float(cols[key]), float(cols[key + "_err"])
        se[f"{branch}_status"] = status_name(res.status)
    t_se = time.perf_counter() - t0
    options = run_options_from(args, args.out)
    parts = []
    t0 = time.perf_counter()
    for d in ds:
        grid = TrainingGrid(alphas=(args.alpha,), omegas=(args.omega,), seeds=tuple(range(seeds)), d=d)
        out = train_students(grid, params, dtype=flags.dtype_from(args), options=flags.sub_options(options, f"d{d}"))
        if out is None:
            return flags.not_finished(options)
        parts.append(out)
        print(f"d={d}: {len(out.runs['alpha'])} runs, {int(np.sum(out.runs['converged']))} converged")
    t_train = time.perf_counter() - t0
    runs = {k: np.concatenate([p.runs[k] for p in parts]) for k in parts[0].runs}
    paths = [write_runs_csv(runs, os.path.join(args.out, "runs.csv")),
             atomic_write_json(os.path.join(args.out, "se.json"), se)]
    paths += summarize(runs, se, args.out, args.alpha)
    paths.append(atomic_write_json(os.path.join(args.out, "summary.json"), dict(
        preset=args.preset, ds=ds, seeds=seeds, dtype=args.dtype, se_seconds=t_se, train_seconds=t_train,
        training_config_per_d=[p.config for p in parts], **flags.environment())))
    flags.print_paths(paths)
    return flags.finish(NAME, flags.run_failures(runs["status"], hint=flags.TRAINING_HINT))
