"""Capacity of associative memories.

Random unit embeddings e_x, u_y in R^d, a map f*: [N] -> [M] and argmax
decoding f(x) = argmax_y u_y^T F(e_x). Sweeps recall over (N, d, seed) for the
outer-product memory W = sum_x u_f*(x) e_x^T, the one-gradient-step memory, a
linear W trained by cross-entropy, and (N, m, d, seed) for an MLP memory
F(z) = V^T relu(U z); finds the capacity N* (largest N with >= 99% mean
recall), fits N* against d (or m d) with confidence intervals, compares with
the closed-form Gaussian-crosstalk prediction, and measures the Zipf-weighted
error against d.

Writes capacity.csv (kind, d, m, N, seed, accuracy, ...), fits.json, zipf.csv
and the figures phase_diagrams.png, capacity_fits.png, zipf_error.png.

Presets: cpu (default; a few minutes on 2 cores) and gpu (larger d, m, N and
more seeds; see phasejax.tasks.memory.memory_preset).
"""

from __future__ import annotations

import os
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import positive_int, run_options_from

NAME = "memory"
HELP = "capacity of associative memories (outer product, one step, trained linear, MLP) and Zipf scaling"


def add_arguments(parser) -> None:
    flags.add_preset(parser, "grid size: cpu (minutes on 2 cores) or gpu (larger d, m, N, more seeds)")
    flags.add_sizes(parser, seeds="seeds for every sweep (default: the preset's, 8 for closed-form and 4 for "
                                  "trained memories)")
    parser.add_argument("--n-boot", type=positive_int, default=2000, help="bootstrap resamples for the exponent CIs")
    flags.add_dtype(parser)
    flags.add_leave_out(parser, {"zipf": "the Zipf experiment", "plots": "the figures (the tables only)"})
    flags.add_sweep(parser, NAME, chunk_size=32)


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def run(args) -> int:
    import numpy as np

    from phasejax.precision import dtype_scope
    from phasejax.tasks.memory import memory_preset, run_memory_study
    from phasejax.tasks.memory.figures import plot_capacity_fits, plot_phase_diagrams, plot_zipf

    t0 = time.time()
    options = run_options_from(args, args.out)
    seeds = None if args.seeds is None else tuple(range(args.seeds))
    specs, zipf = memory_preset(args.preset, seeds)
    dtype = np.dtype(args.dtype)
    with dtype_scope(dtype):
        result = run_memory_study(specs, None if args.no_zipf else zipf, n_boot=args.n_boot, dtype=dtype,
                                  options=options, log=lambda msg: print(f"[{time.time() - t0:6.0f}s] {msg}",
                                                                         flush=True))
    if result is None:
        print("not every chunk is on disk yet (other processes, or max_chunks); re-run to finish")
        return 0
    result.fits["config"]["preset"] = args.preset
    result.fits["config"]["dtype"] = args.dtype
    result.fits["config"]["environment"] = flags.environment()
    result.fits["config"]["wall_seconds_this_invocation"] = round(time.time() - t0, 1)   # chunks on disk are reused
    paths = result.write(args.out)
    if not args.no_plots:
        paths.append(plot_phase_diagrams(result, os.path.join(args.out, "phase_diagrams.png")))
        paths.append(plot_capacity_fits(result, os.path.join(args.out, "capacity_fits.png")))
        if result.zipf:
            paths.append(plot_zipf(result, os.path.join(args.out, "zipf_error.png")))
    for key, fit in result.fits.items():
        if isinstance(fit, dict) and "kind" in fit:
            exp = fit.get("expected")
            print(f"{key:20s} N* ~ ({fit['x']})^b: {_fmt(fit['exponent'])} (bootstrap 95% CI "
                  f"[{_fmt(fit['ci95_bootstrap'][0])}, {_fmt(fit['ci95_bootstrap'][1])}]"
                  + (f"; expected {exp[0]}-{exp[1]}" if exp else "") + ")")
    if "zipf" in result.fits:
        z = result.fits["zipf"]
        for name in ("one_step", "top_k"):
            print(f"zipf {name:9s} error ~ d^{_fmt(z[name]['exponent'])} (closed form "
                  f"d^{_fmt(z[name]['exponent_closed_form'])}, asymptotic d^{_fmt(z[name]['asymptotic_exponent'])})")
    for p in paths:
        print("wrote", p)
    print(f"total {time.time() - t0:.0f}s")
    return 0
