"""Figure 2 of the paper: trained tied-attention students from both informed inits against the state evolution.

    phasejax fig2                            # CPU preset: d = 1000, omega = 0.3, 20 alphas in [0.1, 2], 5 seeds
    phasejax fig2 --d 200 --seeds 3          # a quick look
    phasejax fig2 --preset gpu               # d = 2000, 40 alphas, 10 seeds
    phasejax fig2 --replot                   # redraw fig2.png from <out>/runs.csv and <out>/theory/

Every (alpha, init, seed) run is one entry of a single vmapped, chunked,
resumable sweep (`phasejax.empirics.train_students`, L-BFGS to the RMS-gradient
tolerance of the dtype); the SE curves come from `phasejax.phase.phase_diagram`
on the same alphas (both subspaces, the linear baseline, alpha_c with its error).
Writes --out (default runs/fig2/): runs.csv and training.json (one row per
run), theory/ (the phase diagram at this omega), fig2.png (points: mean over
seeds, error bars: one standard deviation over seeds) and summary.json.
"""

from __future__ import annotations

import dataclasses
import os
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import grid_range, run_options_from

NAME = "fig2"
HELP = "paper Fig. 2: trained students from positional and semantic inits vs the state evolution"

PRESETS = {
    "cpu": dict(d=1000, n_alpha=20, seeds=5),
    "gpu": dict(d=2000, n_alpha=40, seeds=10),
}


def add_arguments(ap) -> None:
    flags.add_preset(ap, "cpu: d = 1000, 20 alphas, 5 seeds (about 7 min on 2 CPU cores); "
                         "gpu: d = 2000, 40 alphas, 10 seeds")
    flags.add_alpha_curve(ap, 0.1, 2.0, seeds="seeds per (alpha, init) (default: the preset's)")
    flags.add_model(ap)
    flags.add_optimizer(ap, learning_rate=..., gtol=True)
    flags.add_dtype(ap)
    flags.add_replot(ap, "only redraw fig2.png from <out>/runs.csv and <out>/theory/ (no training)")
    flags.add_sweep(ap, NAME, chunk_size=20)


THEORY_READS = {
    "theory/points.csv": ("omega", "alpha", "branch", "distinct", "is_branch", "status", "converged", "m", "theta",
                          "train_loss", "test_error"),
    "theory/diagram.csv": ("omega", "alpha", "delta_e", "eps_lin"),
    "theory/thresholds.csv": ("omega", "alpha_c", "alpha_l"),
    "theory/summary.json": ("config",),
    "theory/grid.json": ("alphas", "omegas"),
}
"""What `--replot` reads of the phase diagram in `<out>/theory/` (`phasejax.phase.PhaseDiagram.load` and the figure)."""


def reads(args) -> list:
    """The files the command reads back with `--replot`: runs.csv (`phasejax.empirics.RUN_COLUMNS`) and
    `THEORY_READS`."""
    if not args.replot:
        return []
    from phasejax.empirics.sweep import RUN_COLUMNS

    return flags.replot_reads(args, {"runs.csv": RUN_COLUMNS, **THEORY_READS})


def run(args) -> int:
    import numpy as np

    from phasejax.empirics import TrainConfig, TrainingGrid, TrainingRuns, sample_count, train_students
    from phasejax.io import atomic_write_json
    from phasejax.phase import PhaseDiagram, PhaseGrid, phase_diagram
    from phasejax.plotting_experiments import paired_loss_difference, plot_training_vs_theory
    from phasejax.theory import make_params

    if args.replot:
        for need in ("runs.csv", "theory"):
            if not os.path.exists(os.path.join(args.out, need)):
                raise SystemExit(f"error: --replot needs {os.path.join(args.out, need)}")
        runs = TrainingRuns.from_csv(os.path.join(args.out, "runs.csv"))
        theory = PhaseDiagram.load(os.path.join(args.out, "theory"))
        omega = float(runs.runs["omega"][0])       # the omega the runs were trained at
        flags.print_paths([plot_training_vs_theory(runs.runs, theory, os.path.join(args.out, "fig2.png"), omega)])
        return 0
    preset = PRESETS[args.preset]
    d, n_alpha, seeds = flags.pick(args, "d", preset), flags.pick(args, "n_alpha", preset), flags.pick(args, "seeds", preset)
    alphas = grid_range(args, "alpha", n_alpha)
    try:
        sample_count(alphas[0], d)
    except ValueError as e:
        raise SystemExit(f"error: --alpha-min with --d: {e}") from None
    params = make_params(1.0, args.omega, sigma=args.sigma, lam=args.lam)
    grid = TrainingGrid(alphas=alphas, omegas=(args.omega,), seeds=tuple(range(seeds)),
                        inits=("positional", "semantic"), d=d)
    options = run_options_from(args, args.out)
    t0 = time.perf_counter()
    runs = train_students(grid, params, config=TrainConfig(args.optimizer, gtol=args.gtol), dtype=flags.dtype_from(args),
                          options=flags.sub_options(options, "train"))
    t_train = time.perf_counter() - t0
    t0 = time.perf_counter()
    theory = phase_diagram(PhaseGrid(tuple(alphas), (args.omega,)), params,
                           options=flags.sub_options(options, "theory").replace(chunk_size=8))
    t_theory = time.perf_counter() - t0
    if runs is None or theory is None:
        return flags.not_finished(options)
    paths = runs.write(args.out)
    paths += dataclasses.replace(theory, **flags.provenance()).write(os.path.join(args.out, "theory"))
    paths.append(plot_training_vs_theory(runs.runs, theory, os.path.join(args.out, "fig2.png"), args.omega))
    r = runs.runs
    diff, diff_sd = paired_loss_difference(r, grid.alphas, args.omega)
    ac = float(theory.thresholds["alpha_c"][0])
    paths.append(atomic_write_json(os.path.join(args.out, "summary.json"), dict(
        preset=args.preset, d=d, omega=args.omega, alphas=list(grid.alphas), seeds=seeds, dtype=args.dtype,
        optimizer=args.optimizer, n_runs=int(len(r["alpha"])), n_converged=int(np.sum(r["converged"])),
        train_seconds=t_train, theory_seconds=t_theory, se_alpha_c=ac,
        se_alpha_c_err=float(theory.thresholds["alpha_c_err"][0]),
        trained_loss_difference=dict(alpha=list(grid.alphas), mean=diff.tolist(), std=diff_sd.tolist()),
        **flags.environment())))
    print(f"{len(r['alpha'])} runs at d={d} in {t_train:.1f} s ({int(np.sum(r['converged']))} converged); "
          f"SE phase diagram at omega={args.omega:g} in {t_theory:.1f} s: alpha_c = {ac:.4f}")
    flags.print_paths(paths)
    holes = theory.unresolved()
    return flags.finish(NAME, flags.run_failures(r["status"], hint=flags.TRAINING_HINT) or (
        f"{len(holes)} theory cells have neither a converged fixed point nor a verdict of absence (see "
        "theory/diagram.csv)" if holes else None))
