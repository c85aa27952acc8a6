"""Single-layer transformer on binary first-order Markov chains (Makkuva et al. 2024): phase diagrams over (p, q).

Trains Gaussian-initialised one-layer transformers (embedding, learned positions,
causal softmax attention, ReLU feed-forward, readout tied to the embedding or not)
on stationary chains with P = [[1-p, p], [q, 1-q]], over a (p, q) grid x tied/untied
x seeds (vmapped, resumable chunks), and compares the final population loss with the
entropy rate (the optimum) and H(pi) (the stationary predictor). Also checks the
bad critical point exactly (gradient and Hessian spectrum, float64, all 2^N chains)
and integrates the gradient flow of the reduced (rank-one) model.

Presets:
  cpu (default)  6 x 6 (p, q) grid, 5 seeds, tied and untied, d = 8, N = 32, batch 16,
                 1000 SGD steps (lr 0.5, cosine); reduced model on a 19 x 19 grid.
                 About 4 minutes on 2 CPU cores.
  gpu            19 x 19 grid (p, q = 0.05 .. 0.95), 10 seeds, N = 128, batch 64, 4000 steps,
                 chunk size 512 (see docs/sandboxes/markov.md).

Writes into --out (default runs/markov/): runs.csv, curves.csv, summary.json,
phase_diagram.png, curves.png, critical_points.csv, critical_spectra.png,
trace.csv, trace.png (tied runs at --high: loss, |e| and the curvature along e
at the stationary point vs step), reduced_cells.csv, reduced_summary.json, reduced_flow.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import (
    check_fits, nonnegative_float, open_unit_interval, positive_float, positive_int, refuse_duplicates,
    run_options_from,
)

NAME = "markov"
HELP = "single-layer transformer on binary Markov chains: (p, q) phase diagrams, bad critical point, reduced flow"

_CPU_PQ = (0.1, 0.25, 0.4, 0.55, 0.7, 0.85)
_GPU_PQ = tuple(round(0.05 * k, 2) for k in range(1, 20))

PRESETS = {
    "cpu": dict(ps=_CPU_PQ, qs=_CPU_PQ, seeds=5, d=8, length=32, batch_size=16, steps=1000, chunk_size=72,
                reduced_seeds=5, basin_points=41),
    "gpu": dict(ps=_GPU_PQ, qs=_GPU_PQ, seeds=10, d=8, length=128, batch_size=64, steps=4000, chunk_size=512,
                reduced_seeds=20, basin_points=101),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    flags.add_preset(parser, "grid and training size", choices=tuple(PRESETS))
    g = parser.add_argument_group("grid (default: the preset's)")
    g.add_argument("--ps", type=open_unit_interval, nargs="+", default=None, help="values of p = P(1 | 0)")
    g.add_argument("--qs", type=open_unit_interval, nargs="+", default=None, help="values of q = P(0 | 1)")
    flags.add_sizes(g, seeds="seeds per (p, q, tied) cell")
    g.add_argument("--tied", choices=("both", "tied", "untied"), default="both", help="readout tied to the embedding")
    t = parser.add_argument_group("model and training (default: the preset's)")
    flags.add_sizes(t, d="one", seeds=None)
    t.add_argument("--length", type=positive_int, default=None, help="chain length N (>= 2)")
    flags.add_steps(t, batch_size=True, help="training steps")
    t.add_argument("--init-std", type=nonnegative_float, default=0.02, help="std of the Gaussian initialisation")
    flags.add_optimizer(t, optimizers=("sgd", "adamw"),
                        learning_rate_help="peak learning rate (default 0.5 for sgd, 2e-3 for adamw)")
    t.add_argument("--weight-decay", type=nonnegative_float, default=None,
                   help="decoupled weight decay (default 0 for sgd, 1e-3 for adamw)")
    t.add_argument("--schedule", choices=("cosine", "constant"), default="cosine", help="after a 2%% linear warm-up")
    t.add_argument("--grad-clip", type=nonnegative_float, default=0.0, help="clip gradients to this norm (0: off)")
    t.add_argument("--n-eval", type=positive_int, default=4096, help="fresh chains for the final population loss")
    t.add_argument("--tol", type=positive_float, default=1e-3,
                   help="stuck: |final loss - H(pi)| < tol (nats); at the optimum: |final loss - entropy rate| < tol")
    r = parser.add_argument_group("checks and the reduced model")
    flags.add_leave_out(r, {"critical": "the exact Hessian check of the bad point",
                            "reduced": "the reduced-model flow picture",
                            "trace": "the trace (loss, |e|, curvature along e) of tied runs at --high"}, older="skip")
    r.add_argument("--reduced-init-std", type=positive_float, default=0.1, help="Gaussian init std of the reduced flow")
    r.add_argument("--reduced-t-max", type=positive_float, default=600.0, help="gradient-flow horizon")
    r.add_argument("--low", type=open_unit_interval, nargs=2, default=(0.2, 0.3), metavar=("P", "Q"),
                   help="(p, q) with p + q < 1 for the basin picture and the critical-point check")
    r.add_argument("--high", type=open_unit_interval, nargs=2, default=(0.7, 0.8), metavar=("P", "Q"),
                   help="(p, q) with p + q > 1 for the basin picture and the critical-point check")
    flags.add_sweep(parser, NAME, chunk_size=None)   # None: the preset's (cpu 72, gpu 512)


def run(args) -> int:
    preset = PRESETS[args.preset]
    if args.length is not None and args.length < 2:
        raise SystemExit(f"error: --length must be >= 2, got {args.length}")
    if args.low[0] + args.low[1] >= 1 or args.high[0] + args.high[1] <= 1:
        raise SystemExit("error: --low needs p + q < 1 and --high needs p + q > 1")

    import jax
    import jax.numpy as jnp
    import numpy as np

    from phasejax.io import write_csv
    from phasejax.tasks.markov import (
        MarkovGrid, MarkovTraining, critical_point_check, markov_memory_estimate, markov_sweep, markov_trace,
    )
    from phasejax.tasks.markov.figures import plot_critical_spectra, plot_markov_curves, plot_markov_phase_diagrams
    from phasejax.tasks.markov.sweep import plot_markov_trace, shortest_float64
    from phasejax.tasks.markov_reduced import ReducedSettings, plot_reduced_flow, reduced_picture

    out = args.out
    os.makedirs(out, exist_ok=True)
    adam = args.optimizer == "adamw"
    training = MarkovTraining(
        d=args.d or preset["d"], length=args.length or preset["length"], init_std=args.init_std,
        steps=args.steps or preset["steps"], batch_size=args.batch_size or preset["batch_size"],
        optimizer=args.optimizer,
        learning_rate=args.learning_rate if args.learning_rate is not None else (2e-3 if adam else 0.5),
        weight_decay=args.weight_decay if args.weight_decay is not None else (1e-3 if adam else 0.0),
        schedule=args.schedule, grad_clip=args.grad_clip, n_eval=args.n_eval,
        n_curve=min(25, args.steps or preset["steps"]))
    tied = {"both": (1, 0), "tied": (1,), "untied": (0,)}[args.tied]
    refuse_duplicates(args.ps or preset["ps"], "--ps")
    refuse_duplicates(args.qs or preset["qs"], "--qs")
    grid = MarkovGrid(ps=tuple(args.ps or preset["ps"]), qs=tuple(args.qs or preset["qs"]), tied=tied,
                      seeds=tuple(range(args.seeds or preset["seeds"])))
    args.chunk_size = args.chunk_size or preset["chunk_size"]
    check_fits(markov_memory_estimate(training, args.chunk_size),
               f"a chunk of {args.chunk_size} training runs (chains of length {training.length}, {training.n_eval} "
               f"evaluation chains)", "--length (or --n-eval, --batch-size, --chunk-size)")
    options = run_options_from(args, out)
    timings = {}
    written = []

    t0 = time.perf_counter()
    sweep = markov_sweep(grid, training, tol=args.tol, options=options)
    timings["sweep_s"] = time.perf_counter() - t0
    if sweep is None:
        print(f"chunks are still missing under {options.run_dir} (other processes, or --max-chunks); re-run to finish")
        return 0

    checks = []
    if not args.no_critical:
        t0 = time.perf_counter()
        for p, q in (tuple(args.high), tuple(args.low)):
            for t in (True, False):
                checks.append(critical_point_check(p, q, t, dtype=jnp.float64))
        rows = [c.row() for c in checks]
        written.append(write_csv(os.path.join(out, "critical_points.csv"),
                                 {k: np.asarray([r[k] for r in rows]) for k in rows[0]}))
        written.append(plot_critical_spectra(checks, os.path.join(out, "critical_spectra.png")))
        sweep.summary["critical_points"] = rows
        timings["critical_s"] = time.perf_counter() - t0

    if not args.no_trace:
        t0 = time.perf_counter()
        p, q = args.high
        n_points = max(k for k in range(1, 26) if training.steps % k == 0)
        one = lambda s: markov_trace(s, p, q, 1.0, training, n_points)  # noqa: E731
        tr = {k: np.asarray(v) for k, v in jax.jit(jax.vmap(one))(jnp.asarray(grid.seeds)).items()}
        n = len(grid.seeds)
        written.append(write_csv(os.path.join(out, "trace.csv"), dict(
            seed=np.repeat(np.asarray(grid.seeds), n_points), step=tr["step"].ravel(),
            loss=shortest_float64(tr["loss"]).ravel(), e_norm=shortest_float64(tr["e_norm"]).ravel(),
            curvature=shortest_float64(tr["curvature"]).ravel())))
        written.append(plot_markov_trace(tr, p, q, training, os.path.join(out, "trace.png")))
        sweep.summary["trace"] = dict(p=p, q=q, tied=1, seeds=n, final_curvature=tr["curvature"][:, -1].tolist(),
                                      min_curvature=tr["curvature"].min(1).tolist(),
                                      final_e_norm=tr["e_norm"][:, -1].tolist())
        timings["trace_s"] = time.perf_counter() - t0

    if not args.no_reduced:
        t0 = time.perf_counter()
        settings = ReducedSettings(init_std=args.reduced_init_std, t_max=args.reduced_t_max, tol=args.tol)
        pic = reduced_picture(settings, seeds=preset["reduced_seeds"], basin_points=preset["basin_points"],
                              low=tuple(args.low), high=tuple(args.high))
        written += pic.write(out)
        written.append(plot_reduced_flow(pic, os.path.join(out, "reduced_flow.png")))
        sweep.summary["reduced"] = pic.summary()
        timings["reduced_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    written.append(plot_markov_phase_diagrams(sweep, os.path.join(out, "phase_diagram.png")))
    written.append(plot_markov_curves(sweep, os.path.join(out, "curves.png")))
    timings["plots_s"] = time.perf_counter() - t0
    sweep.summary["command"] = dict(preset=args.preset, timings=timings, run_dir=options.run_dir,
                                    training=dataclasses.asdict(training))
    sweep.summary["environment"] = flags.environment()
    written = sweep.write(out) + written
    for path in written:
        print(path)
    facts = sweep.summary["facts"]
    for name, f in facts.items():
        print(f"{name}: {f['cells_passing']}/{f['cells']} cells (mean fraction {f['mean_fraction']:.2f})")
    print("timings: " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
    return 0
