"""Counting (histogram task) phase diagrams over embedding size d and MLP width p, six configurations, as
Behrens, Biggio & Zdeborova ran them.

    phasejax counting                        # CPU preset: d in {2..64}, p in {1..32}, 5 seeds, the paper's
                                             # protocol for 64 epochs (about an hour of 2 cores)
    phasejax counting --preset paper         # the paper's run (also --preset gpu): d, p in {1, 2, 3, 4, 6, ...,
                                             # 91, 128}, 5 seeds, 500 epochs of 10,000 fresh sequences (an
                                             # accelerator's job), into runs/counting/paper/
    phasejax counting --preset proposition   # d = T = 32, p = 1..4 (the relation-based proposition's column)
    phasejax counting --replot               # redraw the figures from <out>/runs.csv and curves.csv

The data are the paper's law (`--data composition`: a random composition of L, one distinct token per part,
shuffled) or i.i.d. uniform tokens (`--data uniform`); the model the paper's (token embeddings, dot or
linear mixing, optional softmax, residual, Linear-ReLU-Linear over L + 1 classes); the protocol the paper's
(online Adam, learning rate 1e-3, betas 0.9 0.98, eps 1e-9, batch 32, epochs of 10,000 fresh sequences, the
held-out accuracy on 3,000 sequences after every epoch). Every part of it is a flag. Runs are grouped by
shape (--grouping) and trained in resumable chunks of --segment-epochs epochs under --run-dir/<config>/.

Writes --out (default runs/counting/, runs/counting/paper/ or runs/counting/proposition/ for those presets): runs.csv (config, T, L, d,
p, seed, accuracy, final_loss, data, steps, batch_size, best_accuracy), curves.csv (training loss and held-out
accuracy per epoch, every --curve-every epochs), counting.json (each configuration's sweep), maps_best.png and
maps_mean.png (the paper's layout), proposition.png (the column at d = T when the grid has it),
loss_curves.png, constructions.csv (the explicit constructions at 100%) and summary.json (the command, the
versions, the protocol, the majority-class accuracy, the run time).
"""

from __future__ import annotations

import os
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import UsageError, positive_float, positive_int, refuse_duplicates, run_options_from

NAME = "counting"
HELP = "counting (histogram task) accuracy over (d, width) for the six attention configurations, as the paper ran it"

PAPER_SIZES = [1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 128]
"""The paper's `d` and `p` values (its scripts `exps/run_approx_*.sh`)."""

PRESETS = {
    # the paper's subgrid at powers of 2, its law, model, optimiser and batch; epochs sized to an hour of 2 cores
    "cpu": dict(ds=[2, 4, 8, 16, 32, 64], widths=[1, 2, 4, 8, 16, 32], seeds=5, epochs=64, grouping="d",
                segment_epochs=8, curve_every=1, steps=None),
    # the paper's run: 6 configurations x 196 cells x 5 seeds x 500 epochs; one program per configuration
    "gpu": dict(ds=PAPER_SIZES, widths=PAPER_SIZES, seeds=5, epochs=500, grouping="all", segment_epochs=25,
                curve_every=5, steps=None),
    "paper": dict(ds=PAPER_SIZES, widths=PAPER_SIZES, seeds=5, epochs=500, grouping="all", segment_epochs=25,
                  curve_every=5, steps=None),
    # the relation-based proposition's column (d = T = 32, p = 1..4), trained longer than the CPU grid
    "proposition": dict(ds=[32], widths=[1, 2, 3, 4], seeds=5, epochs=256, grouping="all", segment_epochs=64,
                        curve_every=2, steps=None),
}


def _config_name(text: str) -> str:
    import argparse

    from phasejax.tasks.histogram import COUNTING_CONFIGS

    try:
        return COUNTING_CONFIGS[text].name
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _unit(text: str) -> float:
    import argparse

    v = float(text)
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1), got {text}")
    return v


def add_arguments(ap) -> None:
    flags.add_preset(ap, "cpu: d in {2..64}, p in {1..32} (powers of 2), 5 seeds, 64 epochs; paper (or gpu): the "
                         "paper's 14 x 14 grid, 5 seeds, 500 epochs (an accelerator's job); proposition: d = 32, "
                         "p = 1..4, 5 seeds, 256 epochs", choices=tuple(PRESETS))
    ap.add_argument("--configs", nargs="+", type=_config_name, default=None,
                    help="subset of the six configurations (case-insensitive; default: all six)")
    flags.add_histogram_task(ap, T=32)
    ap.add_argument("--data", choices=("composition", "uniform"), default="composition",
                    help="the data law: composition (the paper's: a random composition of L, one distinct token "
                         "per part, shuffled) or uniform (i.i.d. tokens)")
    flags.add_sizes(ap, d="many", seeds="seeds per grid point (default: the preset's)")
    ap.add_argument("--widths", type=positive_int, nargs="+", default=None,
                    help="MLP widths (hidden sizes p; default: the preset's)")
    flags.add_hidden_alias(ap, "--ps", "widths", type=positive_int, nargs="+")
    g = ap.add_argument_group("protocol (default: the paper's)")
    g.add_argument("--epochs", type=positive_int, default=None, help="epochs of fresh sequences (default: the preset's)")
    g.add_argument("--steps", type=positive_int, default=None,
                   help="Adam steps instead of --epochs (rounded up to whole epochs)")
    g.add_argument("--epoch-size", type=positive_int, default=10_000, help="fresh sequences per epoch")
    g.add_argument("--batch-size", type=positive_int, default=32, help="sequences per Adam step")
    g.add_argument("--learning-rate", type=positive_float, default=1e-3, help="Adam's learning rate")
    flags.add_hidden_alias(g, "--lr", "learning_rate", type=positive_float)
    g.add_argument("--betas", type=_unit, nargs=2, default=[0.9, 0.98], metavar=("B1", "B2"), help="Adam's betas")
    g.add_argument("--eps", type=positive_float, default=1e-9, help="Adam's epsilon (outside the square root)")
    g.add_argument("--init", choices=("paper", "normal"), default="paper",
                   help="initial weights: paper (PyTorch's defaults) or normal (N(0, 1/fan-in), zero biases)")
    g.add_argument("--n-test", type=positive_int, default=3000, help="held-out sequences, shared by every run")
    g.add_argument("--test-seed", type=int, default=12, help="seed of the held-out sequences")
    g.add_argument("--eval-every", type=positive_int, default=1, help="epochs between two held-out accuracies")
    flags.add_dtype(g)
    g = ap.add_argument_group("grouping and chunks (the results do not depend on them)")
    g.add_argument("--grouping", choices=("cell", "d", "all"), default=None,
                   help="runs per compiled program: one (d, p) cell, one d (p padded), or all (padded; default: "
                        "the preset's)")
    g.add_argument("--segment-epochs", type=positive_int, default=None,
                   help="epochs per resumable chunk (default: the preset's)")
    g.add_argument("--curve-every", type=positive_int, default=None,
                   help="epochs between two rows of curves.csv (default: the preset's)")
    ap.add_argument("--published", default=None, metavar="CSV",
                    help="the paper's maps read off its figures (results/counting/published_maps.csv): print them "
                         "under ours in the maps and write comparison.csv")
    flags.add_replot(ap, "only redraw the figures from <out>/runs.csv and curves.csv", uses=("published",))
    flags.add_output(ap, _default_out, help="output folder (default runs/counting, runs/counting/<preset> for the "
                                            "paper and proposition presets)")
    flags.add_run_options(ap, chunk_size=4096, chunk_help="runs per compiled program at most (a larger group is "
                                                          "split; the results do not change)")


def reads(args) -> list:
    """The files the command reads: `--published` (the paper's maps, `PUBLISHED_COLUMNS`) when given; with
    `--replot`, runs.csv (`phasejax.tasks.histogram.CountingRuns`'s columns), curves.csv and summary.json when
    they are there."""
    from phasejax.commands.argtypes import Reads
    from phasejax.tasks.histogram.counting import CURVE_COLUMNS, RUN_COLUMNS
    from phasejax.tasks.histogram.published import PUBLISHED_COLUMNS

    out = []
    if args.published is not None:
        out.append(Reads(args.published, tuple(PUBLISHED_COLUMNS), flag="--published", reader="counting",
                         fix="pass the paper's maps as read off its figures (results/counting/published_maps.csv)"))
    return out + flags.replot_reads(args, {"runs.csv": RUN_COLUMNS, "curves.csv": CURVE_COLUMNS, "summary.json": ()},
                                    optional=("curves.csv", "summary.json"))


def _default_out(args) -> str:
    sub = {"proposition": ("proposition",), "paper": ("paper",), "gpu": ("paper",)}.get(args.preset, ())
    return os.path.join(flags.default_out(NAME), *sub)


def _title(T: int, L: int, law: str, epochs, steps, batch, seeds) -> str:
    return (f"Histogram task T={T}, L={L}, {law} law: {epochs} epochs ({steps} online Adam steps, batch {batch}); "
            f"{seeds} seeds per cell")


def figures(runs, out: str, summary: dict, published: str | None = None) -> list[str]:
    """The figures of a counting run (`runs`: `CountingRuns`) into `out`; `summary`: its `summary.json`;
    `published`: a table of the paper's maps (`published_maps.csv`), also compared in `comparison.csv`."""
    import numpy as np

    from phasejax.io import read_csv, write_csv
    from phasejax.tasks.histogram import HistogramTask, majority_accuracy
    from phasejax.tasks.histogram.figures import plot_loss_curves, plot_maps, plot_proposition
    from phasejax.tasks.histogram.published import PUBLISHED_COLUMNS, compare_with_published, published_lookup

    T, L = int(runs.runs["T"][0]), int(runs.runs["L"][0])
    law = str(runs.runs["data"][0])
    base = majority_accuracy(HistogramTask(T, L, law=law))
    seeds = len(np.unique(runs.runs["seed"]))
    title = _title(T, L, law, summary.get("epochs", "?"), int(runs.runs["steps"][0]), int(runs.runs["batch_size"][0]),
                   seeds)
    paths = []
    table = read_csv(published, PUBLISHED_COLUMNS) if published else None
    loss_title = title
    if table is not None:
        paths.append(write_csv(os.path.join(out, "comparison.csv"), compare_with_published(runs, table)))
        title += "; with the paper's values (500 epochs), read off its figures"
    ds, ps = np.unique(runs.runs["d"]), np.unique(runs.runs["p"])
    if len(ds) > 1 and len(ps) > 1:
        for stat in ("best", "mean"):
            paths.append(plot_maps(runs, os.path.join(out, f"maps_{stat}.png"), stat, T=T, majority=base,
                                   title=f"{stat} accuracy: " + title,
                                   reference=published_lookup(table, stat) if table is not None else None))
    if T in ds:
        ref = None
        if table is not None:
            best, mean = published_lookup(table, "best"), published_lookup(table, "mean")
            ref = {n: (list(ps), [best.get(n, {}).get((T, int(p)), np.nan) for p in ps],
                       [mean.get(n, {}).get((T, int(p)), np.nan) for p in ps]) for n in best}
        paths.append(plot_proposition(runs, os.path.join(out, "proposition.png"), d=T, majority=base, paper=ref,
                                      title=f"d = T = {T}, every seed: " + title))
    if runs.curves is not None:
        paths.append(plot_loss_curves(runs, os.path.join(out, "loss_curves.png"),
                                      color_by="d" if len(ds) > 1 else "p",
                                      title="training loss per epoch: " + loss_title))
    return paths


def _constructions(T: int, L: int, law: str) -> dict:
    import jax
    import jax.numpy as jnp

    from phasejax.tasks.histogram import (COUNTING_CONFIGS, HistogramTask, construction_accuracy,
                                          inventory_counting_params, relation_counting_params, sample_sequences)

    task = HistogramTask(T, L, law=law)
    seqs = sample_sequences(jax.random.PRNGKey(12345), task, 20000)
    cons = dict(construction=[], config=[], d=[], p=[], accuracy=[])
    for label, cfg_name, params in (
            ("relation (d=T, p=1)", "dot+BOS+softmax", relation_counting_params(HistogramTask(T, L, True, law))),
            ("inventory (d=T, p=T)", "linear", inventory_counting_params(task))):
        acc = float(construction_accuracy(params, task, COUNTING_CONFIGS[cfg_name], jnp.asarray(seqs)))
        for k, v in zip(cons, (label, cfg_name, params["E"].shape[1], params["b1"].shape[0], acc)):
            cons[k].append(v)
    return cons


def run(args) -> int:
    import numpy as np

    from phasejax.io import atomic_write_json, read_json, write_csv
    from phasejax.tasks.histogram import (COUNTING_CONFIGS, CountingGrid, CountingProtocol, CountingRuns,
                                          HistogramTask, SweepPlan, counting_phase_diagrams, label_distribution,
                                          majority_accuracy)

    if args.replot:
        path = os.path.join(args.out, "runs.csv")
        if not os.path.exists(path):
            raise UsageError(f"--replot needs {path}; run the command first, or pass the --out that holds it")
        runs = CountingRuns.load(args.out) if os.path.exists(os.path.join(args.out, "counting.json")) \
            else CountingRuns.from_csv(path)
        s_path = os.path.join(args.out, "summary.json")
        flags.print_paths(figures(runs, args.out, read_json(s_path) if os.path.exists(s_path) else {},
                                  args.published))
        return 0

    if args.published is not None and not os.path.isfile(args.published):
        raise UsageError(f"--published {args.published}: no such file")
    if args.dtype != "float32":
        raise UsageError(f"--dtype {args.dtype}: the counting runs are float32 throughout (as the paper's)")
    preset = PRESETS[args.preset]
    ds, ps = flags.pick(args, "ds", preset), flags.pick(args, "widths", preset)
    refuse_duplicates(ds, "--ds")
    refuse_duplicates(ps, "--widths")
    seeds = flags.pick(args, "seeds", preset)
    names = args.configs or list(COUNTING_CONFIGS)
    if len(set(names)) != len(names):
        raise UsageError(f"--configs repeats a configuration: {names}; give each once")
    try:
        task = HistogramTask(args.T, args.L, law=args.data)
        protocol = CountingProtocol(epochs=1, epoch_size=args.epoch_size, batch_size=args.batch_size,
                                    learning_rate=args.learning_rate, b1=args.betas[0], b2=args.betas[1],
                                    eps=args.eps, init=args.init, n_test=args.n_test, test_seed=args.test_seed,
                                    eval_every=args.eval_every)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.steps is not None and args.epochs is not None:
        raise UsageError("give --epochs or --steps, not both")
    epochs = -(-args.steps // protocol.steps_per_epoch) if args.steps is not None else flags.pick(args, "epochs", preset)
    protocol = protocol.replace(epochs=epochs)
    plan = SweepPlan(grouping=flags.pick(args, "grouping", preset), max_runs=args.chunk_size,
                     segment_epochs=min(flags.pick(args, "segment_epochs", preset), epochs))
    curve_every = flags.pick(args, "curve_every", preset)
    grid = CountingGrid(ds=ds, ps=ps, seeds=tuple(range(seeds)))
    options = run_options_from(args, args.out)
    log = (lambda line: print(line, flush=True)) if not args.no_progress else None
    t0 = time.perf_counter()
    runs = counting_phase_diagrams(grid, task, names, protocol, plan, options=options, log=log)
    if runs is None:
        return flags.not_finished(options)
    seconds = time.perf_counter() - t0
    for name in runs.names:
        acc = runs.select(name)["accuracy"]
        print(f"{name:16s} {len(acc)} runs; best {acc.max():.4f}, runs at 100%: {int(np.sum(acc >= 1.0))}")
    keep = (np.asarray(runs.curves["epoch"]) % curve_every == 0) | (np.asarray(runs.curves["epoch"]) == epochs)
    written = CountingRuns(runs=runs.runs, config=runs.config,
                           curves={k: np.asarray(v)[keep] for k, v in runs.curves.items()})
    paths = written.write(args.out)
    summary = dict(
        preset=args.preset, T=args.T, L=args.L, data=args.data, configs=runs.names, ds=list(ds), ps=list(ps),
        seeds=seeds, epochs=epochs, steps=protocol.steps, protocol=protocol.to_json(),
        grouping=plan.grouping, segment_epochs=plan.segment_epochs, curve_every=curve_every,
        label_distribution=[float(v) for v in label_distribution(task)], majority_accuracy=majority_accuracy(task),
        total_seconds=seconds, run_steps=int(len(runs.runs["d"]) * protocol.steps),
        accuracy={n: dict(mean=float(np.mean(runs.select(n)["accuracy"])),
                          max=float(np.max(runs.select(n)["accuracy"])),
                          best=float(np.max(runs.select(n)["best_accuracy"])),
                          runs_at_100=int(np.sum(runs.select(n)["best_accuracy"] >= 1.0))) for n in runs.names},
        **_provenance())
    paths += figures(written, args.out, summary, args.published)
    paths.append(write_csv(os.path.join(args.out, "constructions.csv"), _constructions(args.T, args.L, args.data)))
    paths.append(atomic_write_json(os.path.join(args.out, "summary.json"), summary))
    print(f"total {seconds:.0f} s")
    flags.print_paths(paths)
    return 0


def _provenance() -> dict:
    """The command line, the package versions and the device (as `phasejax bench` records them)."""
    from phasejax.bench import environment

    env = environment()
    return dict(command=env["command"], versions=env["versions"], device=env["device"], date=env["date"])
