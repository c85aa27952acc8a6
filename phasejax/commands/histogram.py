"""Histogram task, part A: the same transformer trained with semantic-only or positional-only attention.

    phasejax histogram                      # CPU preset: T = 15, L = 10, d = 64, p = 128, 10 seeds, 3000 + 1000 steps
    phasejax histogram --preset gpu         # 20 seeds, 20000 Adam + 5000 SGD steps (GPU)
    phasejax histogram --replot             # redraw attention.png from <out>/attention.npz

Phase 1: Adam (fresh batches) with the attention's queries and keys restricted
to the token half ("semantic") or the positional half ("positional") of the
embedding. Phase 2: lift the mask without changing the function, perturb every
weight with N(0, --noise^2) and keep training all of it with SGD. Every
(solution, seed) is one entry of a single vmapped, chunked, resumable sweep
(`phasejax.tasks.histogram.two_solutions.two_solutions`). Writes --out (default
runs/histogram/): two_solutions.csv (per run: accuracies, weight movement,
attention diagnostics), accuracy.csv (mean/min/max per solution and phase),
attention.npz and attention.png (the same probe sequences under both solutions,
before and after unfreezing), two_solutions.json and summary.json.
"""

from __future__ import annotations

import os
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import check_fits, nonnegative_float, positive_float, positive_int, run_options_from

NAME = "histogram"
HELP = "histogram task: one transformer, a semantic and a positional solution, stable after unfreezing"

PRESETS = {
    "cpu": dict(seeds=10, steps=3000, sgd_steps=1000),
    "gpu": dict(seeds=20, steps=20000, sgd_steps=5000),
}


def even_positive_int(text: str) -> int:
    import argparse

    value = positive_int(text)
    if value % 2:
        raise argparse.ArgumentTypeError(f"must be even (a token half and a positional half), got {value}")
    return value


def add_arguments(ap) -> None:
    flags.add_preset(ap, "cpu: 10 seeds, 3000 Adam + 1000 SGD steps (about 5 min on 2 CPU cores); "
                         "gpu: 20 seeds, 20000 + 5000 steps")
    flags.add_histogram_task(ap, T=15)
    ap.add_argument("--d", type=even_positive_int, default=64, help="model width (even: token and positional halves)")
    ap.add_argument("--width", type=positive_int, default=128, help="MLP width")
    flags.add_hidden_alias(ap, "--p", "width", type=positive_int)
    flags.add_sizes(ap, seeds="seeds per solution (default: the preset's)")
    flags.add_steps(ap, help="Adam steps with the mask")
    ap.add_argument("--sgd-steps", type=positive_int, default=None,
                    help="SGD steps after lifting the mask (default: the preset's)")
    flags.add_optimizer(ap, optimizers=("adam",), learning_rate=1e-3, learning_rate_help="Adam learning rate")
    ap.add_argument("--sgd-learning-rate", type=positive_float, default=0.01, help="SGD learning rate")
    ap.add_argument("--noise", type=nonnegative_float, default=0.01, help="std of the perturbation after lifting")
    ap.add_argument("--batch-size", type=positive_int, default=128, help="sequences per step")
    flags.add_n_test(ap, 4096)
    flags.add_dtype(ap)
    flags.add_replot(ap, "only redraw attention.png from <out>/attention.npz")
    flags.add_sweep(ap, NAME, chunk_size=20)


REPLOT_READS = {
    "two_solutions.csv": ("seed", "solution", "accuracy_masked", "accuracy_after", "weight_move_sgd",
                          "distance_to_masked_solution", "same_token_mass_before", "same_token_mass_after",
                          "input_dependence_before", "input_dependence_after", "chance"),
    "attention.npz": ("tokens", "semantic_before", "semantic_after", "positional_before", "positional_after"),
    "two_solutions.json": ("config",),
}
"""What `--replot` reads (`phasejax.tasks.histogram.TwoSolutions.load` and the figure)."""


def reads(args) -> list:
    """The files the command reads back: those of `REPLOT_READS` with `--replot`."""
    return flags.replot_reads(args, REPLOT_READS)


def _plot(result, out: str) -> str:
    from phasejax.plotting_experiments import plot_attention_matrices

    seed = int(result.runs["seed"][0])
    first = {k: v[0] for k, v in result.attention.items()}
    return plot_attention_matrices(first, result.tokens, os.path.join(out, "attention.png"), seed=seed)


def run(args) -> int:
    import numpy as np

    from phasejax.io import atomic_write_json
    from phasejax.tasks.histogram import (HistogramTask, TwoSolutions, TwoSolutionsConfig, two_solutions,
                                          two_solutions_memory_estimate)

    if args.replot:
        flags.print_paths([_plot(TwoSolutions.load(args.out), args.out)])
        return 0
    preset = PRESETS[args.preset]
    config = TwoSolutionsConfig(task=HistogramTask(args.T, args.L, law="uniform"), d=args.d, p=args.width,
                                steps=flags.pick(args, "steps", preset), learning_rate=args.learning_rate,
                                sgd_steps=flags.pick(args, "sgd_steps", preset), sgd_learning_rate=args.sgd_learning_rate,
                                noise=args.noise, batch_size=args.batch_size, n_test=args.n_test)
    seeds = tuple(range(flags.pick(args, "seeds", preset)))
    check_fits(two_solutions_memory_estimate(config, min(args.chunk_size, 2 * len(seeds)), flags.dtype_from(args)),
               f"a chunk of {min(args.chunk_size, 2 * len(seeds))} runs (--d {args.d}, --width {args.width}, --L {args.L}, "
               f"{config.n_test} test sequences)", "--d or --width (or --n-test, --L, --chunk-size)")
    options = run_options_from(args, args.out)
    t0, c0 = time.perf_counter(), time.process_time()
    result = two_solutions(config, seeds, dtype=flags.dtype_from(args), options=options)
    if result is None:
        return flags.not_finished(options)
    seconds = time.perf_counter() - t0
    r = result.runs
    for solution in ("semantic", "positional"):
        sel = r["solution"] == solution
        print(f"{solution:10s}: accuracy {np.mean(r['accuracy_masked'][sel]):.4f} -> "
              f"{np.mean(r['accuracy_after'][sel]):.4f} after unfreezing; SGD moved the weights "
              f"{np.mean(r['weight_move_sgd'][sel]):.4f} (relative), {np.mean(r['distance_to_masked_solution'][sel]):.4f} "
              f"from the masked solution; same-token mass {np.mean(r['same_token_mass_before'][sel]):.3f} -> "
              f"{np.mean(r['same_token_mass_after'][sel]):.3f} (chance {np.mean(r['chance'][sel]):.3f})")
    paths = result.write(args.out)
    paths.append(_plot(result, args.out))
    paths.append(atomic_write_json(os.path.join(args.out, "summary.json"), dict(
        preset=args.preset, seeds=len(seeds), dtype=args.dtype, seconds=seconds,
        cpu_seconds=time.process_time() - c0, **flags.environment())))
    print(f"{seconds:.0f} s")
    flags.print_paths(paths)
    return 0
