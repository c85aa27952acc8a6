"""Counting (histogram task) phase diagrams over embedding size d and MLP width p (--widths), six configurations.

    phasejax counting                      # CPU preset: d, width in {4, 16, 64}, 2 seeds, 2500 steps
    phasejax counting --preset gpu         # the paper's grid: d, width in 1..128, 5 seeds, 20000 steps
    phasejax counting --replot             # redraw phase_diagrams.png from <out>/runs.csv, no training
    phasejax counting --preset proposition # d = T = 32, p = 1 (the relation-based proposition's point), all six
                                           # configurations, 4 seeds, 20000 steps, loss curves recorded;
                                           # into runs/counting/proposition/ (about 10 min on 2 cores)

For every configuration (linear, linear+softmax, dot, dot+softmax, dot+BOS,
dot+BOS+softmax) the whole (d, p, seed) grid is padded to its largest d and p
and trained in vmapped chunks (online Adam, a fresh batch per step), resumable
under --run-dir/<config>/. Writes --out (default runs/counting/): runs.csv
(config, T, L, d, p, seed, accuracy, final_loss), counting.json (the
configurations), phase_diagrams.png (best and mean accuracy over seeds; colour
scale from the majority-class accuracy), constructions.csv (the explicit
constructions' accuracy on fresh sequences) and summary.json. The proposition preset also writes
curves.csv (block means of every run's training loss) and loss_curves.png.
"""

from __future__ import annotations

import argparse
import os
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import UsageError, positive_float, positive_int, refuse_duplicates, run_options_from

NAME = "counting"
HELP = "counting (histogram task) accuracy over (d, width) for the six attention configurations"

PRESETS = {
    # sized to run in under 15 minutes on 2 CPU cores; T and L are the paper's, the grid and the steps are not
    "cpu": dict(ds=[4, 16, 64], widths=[4, 16, 64], seeds=2, steps=2500, batch_size=128),
    "gpu": dict(ds=[2**k for k in range(8)], widths=[2**k for k in range(8)], seeds=5, steps=20000, batch_size=128),
    # the relation-based proposition's point (d >= T = 32, p = 1), trained long enough for the loss to flatten
    "proposition": dict(ds=[32], widths=[1], seeds=4, steps=20000, batch_size=128, curve_points=100),
}


def _config_name(text: str) -> str:
    import argparse

    from phasejax.tasks.histogram import COUNTING_CONFIGS

    try:
        return COUNTING_CONFIGS[text].name
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(ap) -> None:
    flags.add_preset(ap, "cpu: d, width in {4, 16, 64}, 2 seeds, 2500 steps (< 15 min on 2 cores); gpu: d, width "
                         "in 1..128, 5 seeds, 20000 steps; proposition: d = 32, width 1, 4 seeds, 20000 steps with "
                         "loss curves, into runs/counting/proposition by default", choices=tuple(PRESETS))
    ap.add_argument("--configs", nargs="+", type=_config_name, default=None,
                    help="subset of the six configurations (case-insensitive; default: all six)")
    flags.add_histogram_task(ap, T=32)
    flags.add_sizes(ap, d="many", seeds="seeds per grid point (default: the preset's)")
    ap.add_argument("--widths", type=positive_int, nargs="+", default=None,
                    help="MLP widths (hidden sizes p; default: the preset's)")
    flags.add_hidden_alias(ap, "--ps", "widths", type=positive_int, nargs="+")
    flags.add_steps(ap, batch_size=True, help="online Adam steps")
    flags.add_optimizer(ap, optimizers=("adam",), learning_rate=1e-3, learning_rate_help="Adam learning rate")
    flags.add_hidden_alias(ap, "--lr", "learning_rate", type=positive_float)
    flags.add_n_test(ap, 4096)
    flags.add_dtype(ap)
    flags.add_replot(ap, "only redraw the figure from <out>/runs.csv")
    flags.add_output(ap, _default_out, help="output folder (default runs/counting, runs/counting/proposition for that "
                                            "preset)")
    flags.add_run_options(ap, chunk_size=64)


def reads(args) -> list:
    """The files the command reads back with `--replot`: runs.csv (`phasejax.tasks.histogram.CountingRuns`'s
    columns); summary.json when there is one."""
    if not args.replot:
        return []
    from phasejax.tasks.histogram.counting import RUN_COLUMNS

    return flags.replot_reads(args, {"runs.csv": RUN_COLUMNS, "summary.json": ()}, optional=("summary.json",))


def _default_out(args) -> str:
    return os.path.join(flags.default_out(NAME), *(("proposition",) if args.preset == "proposition" else ()))


def _plot(runs, out: str, title: str, T: int, L: int) -> str:
    from phasejax.plotting_experiments import plot_counting_phase_diagrams

    results = {name: runs.select(name) for name in runs.names}
    return plot_counting_phase_diagrams(results, os.path.join(out, "phase_diagrams.png"), title, T=T, L=L)


def _title(T, L, steps, batch, seeds) -> str:
    return (f"Histogram task T={T}, L={L}: test accuracy after {steps} online Adam steps (batch {batch}); "
            f"best and mean over {seeds} seeds")


def run(args) -> int:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from phasejax.io import atomic_write_json, read_json
    from phasejax.tasks.histogram import (
        COUNTING_CONFIGS,
        CountingGrid,
        CountingRuns,
        HistogramTask,
        construction_accuracy,
        counting_phase_diagrams,
        inventory_counting_params,
        relation_counting_params,
        sample_sequences,
    )

    if args.replot:
        path = os.path.join(args.out, "runs.csv")
        if not os.path.exists(path):
            raise UsageError(f"--replot needs {path}; run the command first, or pass the --out that holds it")
        runs = CountingRuns.from_csv(path)
        s = read_json(os.path.join(args.out, "summary.json")) if os.path.exists(
            os.path.join(args.out, "summary.json")) else {}
        T, L = int(runs.runs["T"][0]), int(runs.runs["L"][0])
        seeds = len(np.unique(runs.runs["seed"]))
        flags.print_paths([_plot(runs, args.out, _title(T, L, s.get("steps", "?"), s.get("batch_size", "?"), seeds), T, L)])
        return 0

    preset = PRESETS[args.preset]
    ds, ps = flags.pick(args, "ds", preset), flags.pick(args, "widths", preset)
    refuse_duplicates(ds, "--ds")
    refuse_duplicates(ps, "--widths")
    seeds, steps, batch = flags.pick(args, "seeds", preset), flags.pick(args, "steps", preset), flags.pick(args, "batch_size", preset)
    names = args.configs or list(COUNTING_CONFIGS)
    if len(set(names)) != len(names):
        raise UsageError(f"--configs repeats a configuration: {names}; give each once")
    task = HistogramTask(args.T, args.L)
    grid = CountingGrid(ds=ds, ps=ps, seeds=tuple(range(seeds)))
    options = run_options_from(args, args.out)
    t0 = time.perf_counter()
    curve_points = preset.get("curve_points", 0)
    if curve_points and steps % curve_points:
        curve_points = next(c for c in range(min(curve_points, steps), 0, -1) if steps % c == 0)
    runs = counting_phase_diagrams(grid, task, names, steps=steps, batch_size=batch, learning_rate=args.learning_rate,
                                   n_test=args.n_test, curve_points=curve_points, dtype=flags.dtype_from(args),
                                   options=options)
    if runs is None:
        return flags.not_finished(options)
    seconds = time.perf_counter() - t0
    for name in runs.names:
        acc = runs.select(name)["accuracy"]
        print(f"{name:16s} {len(acc)} runs; best {acc.max():.4f}, runs at 100%: {int(np.sum(acc >= 1.0))}")
    paths = runs.write(args.out)
    if len(ds) * len(ps) > 1:
        paths.append(_plot(runs, args.out, _title(args.T, args.L, steps, batch, seeds), args.T, args.L))
    if runs.curves is not None:
        paths.append(plot_loss_curves(runs, os.path.join(args.out, "loss_curves.png"), T=args.T, L=args.L,
                                      batch=batch))

    # explicit constructions on fresh sequences
    seqs = sample_sequences(jax.random.PRNGKey(12345), task, 20000)
    cons = dict(construction=[], config=[], d=[], p=[], accuracy=[])
    for label, cfg_name, params in (
            ("relation (d=T, p=1)", "dot+BOS+softmax", relation_counting_params(HistogramTask(args.T, args.L, True))),
            ("inventory (d=T, p=T)", "linear", inventory_counting_params(task))):
        acc = float(construction_accuracy(params, task, COUNTING_CONFIGS[cfg_name], jnp.asarray(seqs)))
        for k, v in zip(cons, (label, cfg_name, params["E"].shape[1], params["b1"].shape[0], acc)):
            cons[k].append(v)
    from phasejax.io import write_csv

    paths.append(write_csv(os.path.join(args.out, "constructions.csv"), cons))
    paths.append(atomic_write_json(os.path.join(args.out, "summary.json"), dict(
        preset=args.preset, T=args.T, L=args.L, ds=list(ds), ps=list(ps), seeds=seeds, steps=steps, batch_size=batch,
        learning_rate=args.learning_rate, n_test=args.n_test, dtype=args.dtype, curve_points=curve_points,
        total_seconds=seconds, accuracy={n: dict(mean=float(np.mean(runs.select(n)["accuracy"])),
                                                 min=float(np.min(runs.select(n)["accuracy"])),
                                                 max=float(np.max(runs.select(n)["accuracy"])))
                                         for n in runs.names}, **flags.environment())))
    print(f"total {seconds:.0f} s")
    flags.print_paths(paths)
    return 0


def plot_loss_curves(runs, path: str, *, T: int, L: int, batch: int) -> str:
    """Training-loss curves (block means, log scale), one panel per configuration, one line per seed;
    the legend gives each seed's final test accuracy."""
    import numpy as np
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    curves = runs.curves
    names = runs.names
    cols = 3
    rows = -(-len(names) // cols)
    fig = Figure(figsize=(4.2 * cols, 3.2 * rows))
    axes = np.asarray(fig.subplots(rows, cols, squeeze=False, sharex=True, sharey=True))
    for ax, name in zip(axes.ravel(), names):
        sel = np.asarray(curves["config"]) == name
        acc = runs.select(name)
        for s in np.unique(curves["seed"][sel]):
            m = sel & (np.asarray(curves["seed"]) == s)
            a = float(acc["accuracy"][acc["seed"] == s][0])
            ax.plot(curves["step"][m], curves["loss"][m], lw=1.2, label=f"seed {int(s)}: acc {100 * a:.2f}%")
        d, p = int(curves["d"][sel][0]), int(curves["p"][sel][0])
        ax.set_title(f"{name} (d={d}, p={p})", fontsize=9)
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both", lw=0.4)
        ax.legend(fontsize=7, loc="lower left")
    for ax in axes[-1]:
        ax.set_xlabel("Adam step (fresh batch each)")
    for ax in axes[:, 0]:
        ax.set_ylabel("training cross-entropy (nats)")
    for ax in axes.ravel()[len(names):]:
        ax.set_visible(False)
    block = int(curves["step"][1] - curves["step"][0]) if len(curves["step"]) > 1 else 1
    fig.suptitle(f"Histogram task T={T}, L={L}: online training loss (means over blocks of {block} steps, "
                 f"batch {batch}); legend: final test accuracy per seed", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)
