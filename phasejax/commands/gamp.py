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

import argparse
import os
import time

from phasejax.commands.argtypes import (
    add_output,
    check_fits,
    add_replot,
    add_run_options,
    default_out,
    nonnegative_float,
    open_unit_interval,
    positive_float,
    positive_int,
    refuse_duplicates,
    run_options_from,
)
from phasejax.commands.experiment_flags import add_dtype, add_preset, dtype_from, environment, pick, print_paths

NAME = "gamp"
HELP = "GAMP on finite data vs the converged SE: convergence, chattering (basin flips), gaps vs d"

PRESETS = {
    "cpu": dict(ds=[100, 200, 400], seeds=4, max_steps=80),
    "gpu": dict(ds=[250, 500, 1000, 2000], seeds=10, max_steps=200),
}


def add_arguments(ap) -> None:
    add_preset(ap, "cpu: d = 100, 200, 400, 4 seeds, 80 iterations (about 15 min on 2 CPU cores); "
                   "gpu: d = 250, 500, 1000, 2000, 10 seeds, 200 iterations")
    ap.add_argument("--ds", type=positive_int, nargs="+", default=None, help="dimensions d (default: preset)")
    ap.add_argument("--dims", type=positive_int, nargs="+", dest="ds", help=argparse.SUPPRESS)
    ap.add_argument("--seeds", type=positive_int, default=None, help="data sets per d and branch (default: preset)")
    ap.add_argument("--max-steps", type=positive_int, default=None, help="GAMP iterations cap (default: preset)")
    ap.add_argument("--max-iter", type=positive_int, dest="max_steps", help=argparse.SUPPRESS)
    ap.add_argument("--alpha", type=positive_float, default=2.0, help="samples per dimension n / d")
    ap.add_argument("--omega", type=open_unit_interval, default=0.3, help="weight of the positional target part")
    ap.add_argument("--lam", type=nonnegative_float, default=0.01, help="ridge penalty lambda")
    ap.add_argument("--onsager", choices=("both", "stein", "pointwise"), default="both",
                    help="Onsager term(s) to run")
    ap.add_argument("--tail", type=positive_int, default=20, help="iterations averaged for the tail statistics")
    add_dtype(ap, default="float64")
    add_output(ap, default_out(NAME))
    add_replot(ap, "only redraw gamp.png and summary.json from --out")
    add_run_options(ap, chunk_size=8)


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
        ds = pick(args, "ds", preset)
        refuse_duplicates(ds, "--ds")
        check_fits(gamp_memory_estimate(max(ds), args.alpha, chunk_size=args.chunk_size, dtype=dtype_from(args)),
                   f"a chunk of {args.chunk_size} GAMP runs at d = {max(ds)} (n = {round(args.alpha * max(ds))})",
                   "the largest of --ds (or --chunk-size, or --alpha)")
        sweep = gamp_sweep(params, ds, np.arange(pick(args, "seeds", preset)),
                           onsagers=onsagers, max_iter=pick(args, "max_steps", preset), tail=args.tail,
                           dtype=dtype_from(args), options=run_options_from(args, args.out))
    se_path = os.path.join(args.out, "se_reference.json")
    se = se_references(params, se_path)
    # per run: converged / unstable / diverged, the measured instability and the SE branch's replicon there
    sweep = sweep.with_verdicts({b: se[b] for b in BRANCHES})
    paths = sweep.write(args.out)
    summary = summarize_gamp_sweep(sweep, se)
    summary.update(se_reference=se, config=sweep.config, environment=environment(),
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
    print_paths(paths)
    return 0
