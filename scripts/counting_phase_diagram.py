#!/usr/bin/env python3
"""Counting (histogram task) phase diagrams over embedding size d and hidden size p, six configurations.

    python scripts/counting_phase_diagram.py                  # CPU preset: reduced grid, < 15 min on 2 cores
    python scripts/counting_phase_diagram.py --preset full    # the paper's grid: d, p in 1..128, 5 seeds (GPU)

For every configuration (linear, linear+softmax, dot, dot+softmax, dot+BOS,
dot+BOS+softmax) the whole (d, p, seed) grid is padded to its largest d and p
and trained in vmapped chunks (online Adam, lr 1e-3, a fresh batch per step),
resumable under --out/<config>/. Writes --out (default results/counting/):
runs.csv (config, T, L, d, p, seed, accuracy, final_loss), phase_diagrams.png
(best and mean accuracy over seeds; 100% and > 99% marked), constructions.csv
(the explicit constructions' accuracy on fresh sequences) and summary.json
(timings, settings).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

PRESETS = {
    # fits the 15-minute CPU budget; T and L are the paper's, the grid and the steps are not
    "cpu": dict(ds=[4, 16, 64], ps=[4, 16, 64], seeds=2, steps=2500, batch_size=128),
    "full": dict(ds=[2**k for k in range(8)], ps=[2**k for k in range(8)], seeds=5, steps=20000, batch_size=128),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    ap.add_argument("--configs", nargs="+", default=None, help="subset of the six configurations")
    ap.add_argument("--T", type=int, default=32)
    ap.add_argument("--L", type=int, default=10)
    ap.add_argument("--ds", type=int, nargs="+", default=None)
    ap.add_argument("--ps", type=int, nargs="+", default=None)
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--n-test", type=int, default=4096)
    ap.add_argument("--chunk-size", type=int, default=64, help="runs per compiled call (hundreds on a GPU)")
    ap.add_argument("--out", default="results/counting")
    args = ap.parse_args(argv)
    preset = PRESETS[args.preset]
    ds = args.ds or preset["ds"]
    ps = args.ps or preset["ps"]
    seeds = args.seeds or preset["seeds"]
    steps = args.steps or preset["steps"]
    batch = args.batch_size or preset["batch_size"]

    import jax
    import jax.numpy as jnp

    from phasejax.phase.diagram import _fmt, _write_csv
    from phasejax.phase.sweep import atomic_write_json
    from phasejax.plotting import plot_counting_phase_diagrams
    from phasejax.tasks import (
        COUNTING_CONFIGS,
        CountingConfig,
        CountingGrid,
        HistogramTask,
        counting_logits,
        counting_sweep,
        inventory_counting_params,
        masked_accuracy,
        model_inputs,
        relation_counting_params,
        sample_sequences,
    )

    names = args.configs or list(COUNTING_CONFIGS)
    configs = [CountingConfig.from_name(n) for n in names]
    task = HistogramTask(args.T, args.L)
    grid = CountingGrid(ds=ds, ps=ps, seeds=tuple(range(seeds)))
    results, timings = {}, {}
    for cfg in configs:
        t0 = time.perf_counter()
        results[cfg.name] = counting_sweep(grid, task, cfg, steps=steps, batch_size=batch, learning_rate=args.lr,
                                           n_test=args.n_test, run_dir=os.path.join(args.out, cfg.name.replace("+", "_")),
                                           chunk_size=args.chunk_size, progress=True)
        timings[cfg.name] = time.perf_counter() - t0
        acc = results[cfg.name]["accuracy"]
        print(f"{cfg.name:16s} {len(acc)} runs in {timings[cfg.name]:.0f} s; best {acc.max():.4f}, "
              f"runs at 100%: {int(np.sum(acc >= 1.0))}")

    rows = []
    for name, r in results.items():
        for i in range(len(r["d"])):
            rows.append([name, args.T, args.L, int(r["d"][i]), int(r["p"][i]), int(r["seed"][i]), _fmt(r["accuracy"][i]),
                         _fmt(r["final_loss"][i])])
    paths = [_write_csv(os.path.join(args.out, "runs.csv"), ["config", "T", "L", "d", "p", "seed", "accuracy",
                                                              "final_loss"], rows)]
    paths.append(plot_counting_phase_diagrams(
        results, os.path.join(args.out, "phase_diagrams.png"),
        f"Histogram task T={args.T}, L={args.L}: accuracy after {steps} online Adam steps (batch {batch}), "
        f"{seeds} seeds"))

    # explicit constructions on fresh sequences
    seqs = sample_sequences(jax.random.PRNGKey(12345), task, 20000)
    cons = []
    for label, cfg_name, params in (
            ("relation (d=T, p=1)", "dot+BOS+softmax", relation_counting_params(HistogramTask(args.T, args.L, True))),
            ("inventory (d=T, p=T)", "linear", inventory_counting_params(task))):
        cfg = COUNTING_CONFIGS[cfg_name]
        mt, lab = model_inputs(jnp.asarray(seqs), HistogramTask(args.T, args.L, cfg.bos))
        acc = float(masked_accuracy(counting_logits(params, mt, cfg, params["E"].shape[1], params["b1"].shape[0]),
                                    lab))
        cons.append([label, cfg_name, params["E"].shape[1], params["b1"].shape[0], _fmt(acc)])
    paths.append(_write_csv(os.path.join(args.out, "constructions.csv"), ["construction", "config", "d", "p",
                                                                           "accuracy"], cons))
    paths.append(atomic_write_json(os.path.join(args.out, "summary.json"), dict(
        preset=args.preset, T=args.T, L=args.L, ds=list(ds), ps=list(ps), seeds=seeds, steps=steps, batch_size=batch,
        learning_rate=args.lr, n_test=args.n_test, seconds_per_config=timings, total_seconds=sum(timings.values()),
        device=str(jax.devices()[0].device_kind), platform=jax.default_backend(), jax=jax.__version__)))
    print(f"total {sum(timings.values()):.0f} s\nwrote:\n  " + "\n  ".join(paths))


if __name__ == "__main__":
    main()
