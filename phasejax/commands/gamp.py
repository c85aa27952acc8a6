"""GAMP on finite data against the converged state evolution, both branches, both Onsager terms.

    phasejax gamp                         # CPU preset: d = 100, 200, 400; 4 seeds; 80 iterations; float64
    phasejax gamp --preset gpu            # d = 250 ... 2000; 10 seeds; 200 iterations (not run yet)
    phasejax gamp --replot                # redraw gamp.png, summary.json and the verdict columns from <out>/*.csv

At alpha, omega (default the paper's check point 2, 0.3; lambda = 0.01) GAMP
(`phasejax.empirics.gamp.gamp_sweep`) runs from a positional-side and a
semantic-side init on `seeds` data sets per dimension, once with the pointwise
Onsager term and once with the across-sample Stein one (one vmapped, chunked,
resumable sweep per (d, Onsager form)). The analysis is
`phasejax.empirics.gamp_analysis`: the converged SE fixed point of each branch
with its replicon (`se_references`, cached in `<out>/se_reference.json`), the
per-run verdicts (`GAMPSweep.with_verdicts`), the summary
(`summarize_gamp_sweep`) and the figure (`plot_gamp_sweep`). Writes --out
(default runs/gamp/; the committed results with `--out results/gamp
--overwrite`): fixed_points.csv (per run: status, the verdict converged /
unstable / diverged with the measured instability, iterations, final and
tail-averaged overlaps, tail residual, basin-flip fraction and share, the SE
branch's replicon at that point), trajectories.csv (per run and iteration),
gamp_config.json, se_reference.json, summary.json (verdicts and convergence
counts, the replicons, gaps vs d with standard errors and fitted exponents,
the chattering statistics) and gamp.png.
"""

from __future__ import annotations

import os
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import check_fits, open_unit_interval, positive_int, refuse_duplicates, run_options_from

NAME = "gamp"
HELP = "GAMP on finite data vs the converged SE: convergence, chattering (basin flips), gaps vs d"

PRESETS = {
    "cpu": dict(ds=[100, 200, 400], seeds=4, max_steps=80),
    "gpu": dict(ds=[250, 500, 1000, 2000], seeds=10, max_steps=200),
}


def add_arguments(ap) -> None:
    flags.add_preset(ap, "cpu: d = 100, 200, 400, 4 seeds, 80 iterations (about 15 min on 2 CPU cores); "
                         "gpu: d = 250, 500, 1000, 2000, 10 seeds, 200 iterations")
    flags.add_sizes(ap, d="many", seeds="data sets per d and branch (default: the preset's)")
    flags.add_hidden_alias(ap, "--dims", "ds", type=positive_int, nargs="+")
    ap.add_argument("--max-steps", type=positive_int, default=None, help="GAMP iterations cap (default: the preset's)")
    flags.add_hidden_alias(ap, "--max-iter", "max_steps", type=positive_int)
    flags.add_point(ap, alpha=2.0, omega=0.3, omega_type=open_unit_interval)
    flags.add_model(ap, sigma=False)
    ap.add_argument("--onsager", choices=("both", "stein", "pointwise"), default="both",
                    help="Onsager term(s) to run")
    ap.add_argument("--tail", type=positive_int, default=20, help="iterations averaged for the tail statistics")
    flags.add_dtype(ap, default="float64")
    flags.add_replot(ap, "only redraw gamp.png and summary.json from --out (the SE reference is computed when "
                         "se_reference.json is absent)")
    flags.add_sweep(ap, NAME, chunk_size=8)


REPLOT_READS = {
    "fixed_points.csv": ("d", "branch", "seed", "onsager", "damping", "C", "iterations", "status", "grad_norm", "q",
                         "m", "theta", "q_tail_mean", "m_tail_mean", "theta_tail_mean", "residual_tail",
                         "flip_fraction_tail", "flip_share_tail", "instability", "replicon", "replicon_err",
                         "replicon_regular", "replicon_jump", "verdict"),
    "trajectories.csv": ("d", "branch", "seed", "onsager", "iteration", "q", "m", "theta", "residual",
                         "flip_fraction", "flip_share"),
    "gamp_config.json": ("alpha", "omega", "lam"),
    "se_reference.json": (),
}
"""The columns (keys) of the files `--replot` reads (`phasejax.empirics.gamp.GAMPSweep.load`, the summary and the
figure); se_reference.json is computed when absent."""


def reads(args) -> list:
    """The files the command reads back: those of `REPLOT_READS` with `--replot`."""
    return flags.replot_reads(args, REPLOT_READS, optional=("se_reference.json",))


def run(args) -> int:
    import numpy as np

    from phasejax.empirics.gamp import GAMPSweep, gamp_memory_estimate, gamp_sweep
    from phasejax.empirics.gamp_analysis import BRANCHES, plot_gamp_sweep, se_references, summarize_gamp_sweep
    from phasejax.io import atomic_write_json
    from phasejax.theory import make_params

    t0 = time.perf_counter()
    preset = PRESETS[args.preset]
    os.makedirs(args.out, exist_ok=True)
    params = make_params(args.alpha, args.omega, lam=args.lam)
    if args.replot:
        sweep = GAMPSweep.load(args.out)
        params = make_params(sweep.config["alpha"], sweep.config["omega"], lam=sweep.config["lam"])
    else:
        onsagers = ("stein", "pointwise") if args.onsager == "both" else (args.onsager,)
        ds = flags.pick(args, "ds", preset)
        refuse_duplicates(ds, "--ds")
        check_fits(gamp_memory_estimate(max(ds), args.alpha, chunk_size=args.chunk_size, dtype=flags.dtype_from(args)),
                   f"a chunk of {args.chunk_size} GAMP runs at d = {max(ds)} (n = {round(args.alpha * max(ds))})",
                   "the largest of --ds (or --chunk-size, or --alpha)")
        sweep = gamp_sweep(params, ds, np.arange(flags.pick(args, "seeds", preset)),
                           onsagers=onsagers, max_iter=flags.pick(args, "max_steps", preset), tail=args.tail,
                           dtype=flags.dtype_from(args), options=run_options_from(args, args.out))
    se_path = os.path.join(args.out, "se_reference.json")
    se = se_references(params, se_path)
    # per run: converged / unstable / diverged, the measured instability and the SE branch's replicon there
    sweep = sweep.with_verdicts({b: se[b] for b in BRANCHES})
    paths = [] if args.replot else sweep.write(args.out)     # a replot rewrites the summary and figure, not the data
    summary = summarize_gamp_sweep(sweep, se)
    summary.update(se_reference=se, config=sweep.config, environment=flags.environment(),
                   runtime_s=time.perf_counter() - t0)
    paths += [se_path, atomic_write_json(os.path.join(args.out, "summary.json"), summary),
              plot_gamp_sweep(sweep, se, summary, os.path.join(args.out, "gamp.png"))]
    for key, counts in summary["verdicts"].items():
        rep = se[key.split("/")[1]]
        print(f"{key:22s} " + "; ".join(f"d={d}: " + ", ".join(f"{v} {k}" for v, k in cnt.items() if k)
                                        for d, cnt in counts.items())
              + f" | SE replicon {rep['replicon']:.3g} +- {rep['replicon_err']:.2g} (regular "
                f"{rep['replicon_regular']:.3g}, jump {rep['replicon_jump']:.2g}): RS "
              + ("stable" if rep["rs_stable"] else "unstable"))
    flags.print_paths(paths)
    return 0
