"""Factual recall in a one-layer transformer: the hallucination plateau and facts stored against parameters.

Two parts (Nichani, Lee, Bietti 2024):

* learning curves of an attention + MLP and an attention-only model on the
  factual-recall task (S subjects, R relations, |A_r| attributes per relation,
  noise tokens; frozen random embeddings), with the plateau where the model
  predicts from the relation alone (loss near log |A_r|) before it uses the
  subject; with `extra_attributes` also for other |A_r|;
* capacity sweeps: recall over (facts S*R, parameters) for families of
  architectures (heads H, MLP width m, dimension d varied), the facts stored
  N* (recall >= threshold) per parameter count and log-log fits.

Presets: `cpu` (default; about 11 minutes on 2 CPU cores) and `gpu` (20000
steps, 6 seeds, up to 4096 facts, more architectures; for one GPU).
Writes into --out: curves.csv, recall.csv, capacity.csv, summary.json,
curves.png, phase_diagram.png, facts_vs_params.png.
"""

from __future__ import annotations

import time

from phasejax.commands import flags
from phasejax.commands.argtypes import positive_float, run_options_from

NAME = "factual"
HELP = "factual recall: hallucination plateau near log|A_r| and facts stored against parameter count"


def presets() -> dict:
    """The `cpu` and `gpu` settings (tasks, training, sweep families, curve runs)."""
    from phasejax.tasks.factual import FactualGrid, FactualTask, FactualTraining

    cpu_subjects = (4, 8, 16, 32, 48, 64, 96, 128)                 # facts S R = 16 ... 512
    gpu_subjects = (4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
    cpu_seeds, gpu_seeds = (0, 1, 2), tuple(range(6))
    return {
        "cpu": dict(
            task=FactualTask(n_subjects=max(cpu_subjects), n_relations=4, n_attributes=4, n_noise=16, length=8),
            training=FactualTraining(steps=3000, batch_size=128, learning_rate=3e-3, d_head=8, n_contexts=16,
                                     curve_points=60),
            families={
                "heads": FactualGrid(cpu_subjects, ((32, 0, 1), (32, 0, 2), (32, 0, 4), (32, 0, 8)), cpu_seeds),
                "width": FactualGrid(cpu_subjects, ((32, 32, 2), (32, 64, 2), (32, 128, 2), (32, 256, 2)),
                                     cpu_seeds),
                "dim": FactualGrid(cpu_subjects, ((16, 0, 2), (32, 0, 2), (64, 0, 2)), cpu_seeds),
            },
            curve_task=FactualTask(n_subjects=256, n_relations=4, n_attributes=4, n_noise=16, length=8),
            curve_training=FactualTraining(steps=3000, batch_size=128, learning_rate=3e-3, d_head=16, n_contexts=16,
                                           curve_points=60),
            curve_archs=((64, 128, 4), (64, 0, 4)), curve_seeds=(0, 1, 2, 3), extra_attributes=(2, 8)),
        "gpu": dict(
            task=FactualTask(n_subjects=max(gpu_subjects), n_relations=4, n_attributes=4, n_noise=16, length=8),
            training=FactualTraining(steps=20000, batch_size=256, learning_rate=3e-3, d_head=8, n_contexts=16,
                                     curve_points=80),
            families={
                "heads": FactualGrid(gpu_subjects, tuple((32, 0, h) for h in (1, 2, 4, 8, 16, 32)), gpu_seeds),
                "width": FactualGrid(gpu_subjects, tuple((32, m, 4) for m in (32, 64, 128, 256, 512, 1024)),
                                     gpu_seeds),
                "dim": FactualGrid(gpu_subjects, tuple((d, 0, 2) for d in (16, 32, 64, 128)), gpu_seeds),
            },
            curve_task=FactualTask(n_subjects=512, n_relations=4, n_attributes=4, n_noise=16, length=8),
            curve_training=FactualTraining(steps=20000, batch_size=256, learning_rate=3e-3, d_head=16, n_contexts=16,
                                           curve_points=80),
            curve_archs=((64, 256, 4), (64, 0, 8)), curve_seeds=tuple(range(8)), extra_attributes=(2, 8, 16)),
    }


def add_arguments(parser) -> None:
    flags.add_preset(parser, "cpu: small grid for 2 CPU cores (< 15 min); gpu: more steps, seeds, facts, architectures")
    flags.add_steps(parser, help="online steps per run, curves and sweeps")
    flags.add_optimizer(parser, optimizers=("adam",), learning_rate=None,
                        learning_rate_help="learning rate (default: the preset's)")
    parser.add_argument("--threshold", type=positive_float, default=0.99,
                        help="recall a model must reach to store N facts (capacity N*)")
    flags.add_leave_out(parser, {"extra-attributes": "the learning curves at other |A_r| (plateau against log|A_r|)"})
    flags.add_sweep(parser, NAME, chunk_size=16)


def run(args) -> int:
    from phasejax.tasks.factual import factual_experiment
    from phasejax.tasks.factual.figures import plot_factual_figures

    if not args.threshold <= 1.0:
        raise SystemExit(f"error: --threshold must lie in (0, 1], got {args.threshold}")
    p = presets()[args.preset]
    training, curve_training = p["training"], p["curve_training"]
    changes = {}
    if args.steps is not None:
        changes["steps"] = args.steps
    if args.learning_rate is not None:
        changes["learning_rate"] = args.learning_rate
    if changes:
        training, curve_training = training.replace(**changes), curve_training.replace(**changes)
    options = run_options_from(args, args.out)
    t0, c0 = time.perf_counter(), time.process_time()
    result = factual_experiment(p["task"], training, families=p["families"], curve_task=p["curve_task"],
                                curve_archs=p["curve_archs"], curve_seeds=p["curve_seeds"],
                                curve_training=curve_training,
                                extra_attributes=() if args.no_extra_attributes else p["extra_attributes"],
                                options=options, threshold=args.threshold)
    if result is None:
        print(f"not every chunk is on disk yet (other processes); re-run to collect: {options.run_dir}")
        return 0
    result.summary.update(preset=args.preset, wall_seconds=time.perf_counter() - t0,
                          cpu_seconds=time.process_time() - c0, **flags.environment())
    paths = result.write(args.out) + plot_factual_figures(result, args.out)
    s = result.summary
    print(f"plateau loss {s['plateau_loss']:.4f} ± {s['plateau_loss_se'] or float('nan'):.4f} (s.e.) vs log|A_r| = "
          f"{s['log_A_r']:.4f}: relative error {100 * s['plateau_relative_error']:+.2f}% "
          f"({'within' if s['plateau_within_5_percent'] else 'NOT within'} 5%)")
    for fam, fit in s["facts_vs_params_fit"].items():
        num = {k: float("nan") if fit[k] is None else fit[k] for k in ("exponent", "ci_low", "ci_high")}
        print(f"facts stored vs parameters, {fam} ({fit['varied']} varied): slope {num['exponent']:.3f} "
              f"[{num['ci_low']:.3f}, {num['ci_high']:.3f}] from {fit['n']} per-seed capacities")
    print(f"{s['wall_seconds']:.0f} s wall, {s['cpu_seconds']:.0f} s CPU\nwrote:\n  " + "\n  ".join(paths))
    return 0
