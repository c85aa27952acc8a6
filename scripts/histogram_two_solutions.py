#!/usr/bin/env python3
"""Histogram task, part A: the same transformer trained with semantic-only or positional-only attention.

    python scripts/histogram_two_solutions.py                 # T = 15, L = 10, d = 64, p = 128, 10 seeds
    python scripts/histogram_two_solutions.py --steps 20000   # longer training (GPU)

Phase 1: Adam (lr 1e-3, fresh batches) with the attention's queries and keys
restricted to the token half ("only semantic") or the positional half ("only
positional") of the embedding, vmapped over seeds. Phase 2: lift the mask
without changing the function (`lift_mask`), perturb every weight with
N(0, --noise^2) and keep training all of it with SGD. Reported per seed:
accuracy after each phase, the relative weight movement in phase 2
(`||W_end - W_start|| / ||W_start||`, from the perturbed start) and the
distance to the masked solution, and the
attention's kind before and after (`attention_kind`: attention mass on equal
tokens vs chance, and input dependence). Writes --out (default
results/histogram/): two_solutions.csv, accuracy.csv (mean/min/max per
solution), attention.png (the same sequences under both solutions, before and
after unfreezing) and summary.json.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=15)
    ap.add_argument("--L", type=int, default=10)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--p", type=int, default=128)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=3000, help="Adam steps with the mask")
    ap.add_argument("--sgd-steps", type=int, default=1000, help="SGD steps after lifting the mask")
    ap.add_argument("--sgd-lr", type=float, default=0.01)
    ap.add_argument("--noise", type=float, default=0.01, help="std of the perturbation after lifting")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--out", default="results/histogram")
    args = ap.parse_args(argv)

    import jax
    import optax
    from flax import nnx

    from phasejax.phase.diagram import _fmt, _write_csv
    from phasejax.phase.sweep import atomic_write_json
    from phasejax.plotting import plot_attention_matrices
    from phasejax.tasks.histogram import HistogramTask, sample_batch
    from phasejax.tasks.transformer import (
        attention_kind,
        lift_mask,
        make_transformer,
        perturb,
        relative_distance,
        train_transformer,
        transformer_accuracy,
    )

    task = HistogramTask(args.T, args.L)
    seeds = jax.random.split(jax.random.PRNGKey(0), args.seeds)
    probe_tokens, _ = sample_batch(jax.random.PRNGKey(777), task, 2048)
    show = probe_tokens[:3]
    rows, attn_show, t0 = [], {}, time.perf_counter()
    for solution in ("semantic", "positional"):
        graphdef, _, frozen = make_transformer(seeds[0], task, args.d, args.p, solution)

        def phase1(key, graphdef=graphdef, frozen=frozen, solution=solution):
            k_init, k_train, k_test = jax.random.split(key, 3)
            params = make_transformer(k_init, task, args.d, args.p, solution)[1]
            params, _ = train_transformer(graphdef, params, frozen, k_train, task, steps=args.steps,
                                          batch_size=args.batch_size, optimizer=optax.adam(1e-3))
            return params, transformer_accuracy(graphdef, params, frozen, k_test, task)

        def phase2(params, key, graphdef=graphdef, frozen=frozen):
            k_noise, k_train, k_test = jax.random.split(jax.random.fold_in(key, 1), 3)
            lifted, open_mask = lift_mask(params, frozen)
            start = perturb(lifted, k_noise, args.noise)
            after, _ = train_transformer(graphdef, start, open_mask, k_train, task, steps=args.sgd_steps,
                                         batch_size=args.batch_size, optimizer=optax.sgd(args.sgd_lr))
            return after, transformer_accuracy(graphdef, after, open_mask, k_test, task), \
                relative_distance(after, start), relative_distance(after, lifted)

        def kind(params, frozen_state, graphdef=graphdef):
            model = nnx.merge(graphdef, params, frozen_state)
            return attention_kind(model.attention(probe_tokens), probe_tokens), model.attention(show)

        params, acc1 = jax.jit(jax.vmap(phase1))(seeds)
        after, acc2, moved, from_masked = jax.jit(jax.vmap(phase2))(params, seeds)
        open_mask = lift_mask(jax.tree_util.tree_map(lambda x: x[0], params), frozen)[1]
        k_before, a_before = jax.jit(jax.vmap(lambda p: kind(p, frozen)))(params)
        k_after, a_after = jax.jit(jax.vmap(lambda p: kind(p, open_mask)))(after)
        attn_show[solution, "before"] = np.asarray(a_before[0])
        attn_show[solution, "after"] = np.asarray(a_after[0])
        for s in range(args.seeds):
            rows.append(dict(solution=solution, seed=s, accuracy_masked=float(acc1[s]), accuracy_after=float(acc2[s]),
                             weight_move_sgd=float(moved[s]), distance_to_masked_solution=float(from_masked[s]),
                             same_token_mass_before=float(k_before["same_token_mass"][s]),
                             same_token_mass_after=float(k_after["same_token_mass"][s]),
                             chance=float(k_before["chance"][s]),
                             input_dependence_before=float(k_before["input_dependence"][s]),
                             input_dependence_after=float(k_after["input_dependence"][s])))
        print(f"{solution:10s}: accuracy {np.mean(acc1):.4f} -> {np.mean(acc2):.4f} after unfreezing; "
              f"SGD moved the weights {np.mean(moved):.4f} (relative), {np.mean(from_masked):.4f} from the masked "
              f"solution; same-token mass "
              f"{np.mean(k_before['same_token_mass']):.3f} -> {np.mean(k_after['same_token_mass']):.3f} "
              f"(chance {np.mean(k_before['chance']):.3f})")
    cols = list(rows[0])
    paths = [_write_csv(os.path.join(args.out, "two_solutions.csv"), cols,
                        [[r[c] if isinstance(r[c], str) else _fmt(r[c]) for c in cols] for r in rows])]
    acc_rows = []
    for solution in ("semantic", "positional"):
        for phase in ("accuracy_masked", "accuracy_after"):
            v = np.array([r[phase] for r in rows if r["solution"] == solution])
            acc_rows.append([solution, phase, _fmt(v.mean()), _fmt(v.min()), _fmt(v.max())])
    paths.append(_write_csv(os.path.join(args.out, "accuracy.csv"), ["solution", "phase", "mean", "min", "max"],
                            acc_rows))
    paths.append(plot_attention_matrices(attn_show, np.asarray(show), os.path.join(args.out, "attention.png")))
    paths.append(atomic_write_json(os.path.join(args.out, "summary.json"), dict(
        args=vars(args), seconds=time.perf_counter() - t0, device=str(jax.devices()[0].device_kind),
        jax=jax.__version__)))
    print("wrote:\n  " + "\n  ".join(paths))


if __name__ == "__main__":
    main()
