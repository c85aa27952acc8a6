"""Two-layer tied rank-1 attention as a sequence multi-index model: Bayes-optimal thresholds, SE and AMP.

    phasejax depth                    # CPU preset (see PRESETS)
    phasejax depth --preset gpu       # more Monte Carlo draws, finer rules, larger d
    phasejax depth --skip-grid 0,1,2  # only these skip strengths for the thresholds

Writes --out (default runs/depth/; the committed results with --out results/depth --overwrite):
  thresholds.csv  per skip: alpha_1, alpha_2 (layer 1, layer 2 weak recovery) and their errors, which layer is
                  learned first, alpha_1_uninformed (layer 1's threshold at Q = 0), q_first_at_second
  se.csv          per (skip, alpha): q1, q2 from the uninformative and an informative start, Monte Carlo errors,
                  the test error of the plug-in predictor, free entropies where the branches differ, status
  amp.csv         per (skip, alpha, d, seed): AMP's overlaps m1, m2 (start on the Nishimori line at m = q = 0.1),
                  iterations, status, and the SE's q1, q2
  thresholds.png, overlaps.png, amp.png, summary.json (settings, timings, the first-order jump if any)
"""

from __future__ import annotations

import os
import time

from phasejax.commands.argtypes import add_output, default_out, positive_int
from phasejax.commands.experiment_flags import add_preset, environment, print_paths

NAME = "depth"
HELP = "two-layer attention as a sequence multi-index model: per-layer thresholds vs skip, Bayes-optimal SE, AMP"

SKIP_GRID = (0.0, 0.25, 0.5, 0.625, 0.75, 0.875, 1.0, 1.125, 1.25, 1.5, 2.0, 3.0, 4.0)

PRESETS = {
    "cpu": dict(draws_stability=1024, draws_scan=128, draws_se=256, order=10, n_scan=5, se_skips=(1.0,),
                se_alphas=(0.1, 0.2, 0.3, 0.45, 0.6, 0.75, 0.9, 1.2, 1.6), amp_d=(500, 1000, 2000, 4000),
                amp_alphas=(0.45, 1.2), amp_seeds=2, max_iterations=60),
    "gpu": dict(draws_stability=16384, draws_scan=2048, draws_se=4096, order=20, n_scan=10,
                se_skips=(0.5, 1.0, 2.0), se_alphas=tuple(round(0.05 * k, 2) for k in range(1, 41)),
                amp_d=(1000, 2000, 4000, 8000), amp_alphas=(0.3, 0.45, 0.75, 1.2), amp_seeds=5, max_iterations=200),
}


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise ValueError(f"expected non-negative numbers, got {text!r}")
    return values


def add_arguments(ap) -> None:
    add_preset(ap, "cpu: 13 skips, 1024/128/256 draws, GH order 10, SE at skip 1, AMP d <= 4000; "
                   "gpu: 16384/2048/4096 draws, order 20, SE at skips 0.5, 1, 2, AMP d <= 8000")
    ap.add_argument("--skip-grid", type=_floats, default=SKIP_GRID, help="comma-separated skip strengths")
    ap.add_argument("--seed", type=positive_int, default=1, help="seed of the Monte Carlo draws and of AMP")
    ap.add_argument("--no-amp", action="store_true", help="skip the AMP runs")
    add_output(ap, default_out(NAME))


def thresholds_table(skips, preset, seed, progress=None) -> dict:
    """The per-skip thresholds (module docstring) as columns."""
    import numpy as np

    from phasejax.depth import conditional_threshold, inner_rule, se_draws, uninformed_thresholds

    rule = inner_rule(preset["order"])
    d_stab, d_scan = se_draws(preset["draws_stability"], seed), se_draws(preset["draws_scan"], seed + 1)
    cols = {k: [] for k in ("skip", "alpha_1", "alpha_1_err", "alpha_2", "alpha_2_err", "first_layer",
                            "alpha_1_uninformed", "alpha_1_uninformed_err", "q_first_at_second", "scan_status")}
    for c in skips:
        th = uninformed_thresholds(c, d_stab, rule)
        a0, e0 = np.asarray(th.alpha0), np.asarray(th.alpha0_err)
        first = int(np.argmin(a0))
        lo = a0[first]
        grid = np.geomspace(1.15 * lo, max(2.0, 12 * lo), preset["n_scan"])
        ct = conditional_threshold(c, grid, first, d_scan, rule, tol=1e-6, max_iterations=preset["max_iterations"])
        second = np.asarray(ct.alpha)
        a = {first: (lo, e0[first]), 1 - first: (float(second), float(ct.alpha_err))}
        cols["skip"].append(c)
        cols["alpha_1"].append(a[0][0])
        cols["alpha_1_err"].append(a[0][1])
        cols["alpha_2"].append(a[1][0])
        cols["alpha_2_err"].append(a[1][1])
        cols["first_layer"].append(first + 1)
        cols["alpha_1_uninformed"].append(a0[0])
        cols["alpha_1_uninformed_err"].append(e0[0])
        cols["q_first_at_second"].append(float(ct.q_learned))
        cols["scan_status"].append(int(np.max(ct.status)))
        if progress is not None:
            progress.update(1)
    return {k: np.asarray(v) for k, v in cols.items()}


def se_table(skips, alphas, preset, seed) -> tuple[dict, list]:
    import numpy as np

    from phasejax.depth import bayes_test_error, branch_scan, inner_rule, se_draws
    from phasejax.solvers import status_names

    rule = inner_rule(preset["order"])
    draws = se_draws(preset["draws_se"], seed + 2)
    rows, jumps = [], []
    for c in skips:
        bs = branch_scan(c, alphas, draws, rule, tol=1e-3, max_iterations=preset["max_iterations"])
        low = bs.low
        for i, a in enumerate(alphas):
            err, err_se = bayes_test_error(np.asarray(low.q[i]), c, n_samples=4000, seed=seed + 3)
            rows.append(dict(skip=c, alpha=a, q1=float(low.q[i, 0]), q2=float(low.q[i, 1]),
                             q1_se=float(low.q_se[i, 0]), q2_se=float(low.q_se[i, 1]),
                             q1_informed=float(bs.q_high[i, 0]), q2_informed=float(bs.q_high[i, 1]),
                             coexist=bool(bs.coexist[i]), phi_uninformed=float(bs.phi_low[i]),
                             phi_informed=float(bs.phi_high[i]), phi_diff_se=float(bs.phi_se[i]),
                             status_informed=str(status_names(bs.high.status[i])),
                             test_error=float(err), test_error_se=float(err_se),
                             residual=float(low.residual[i]), iterations=int(low.iterations[i]),
                             status=str(status_names(low.status[i])), clipped=bool(np.any(low.clipped[i]))))
        jumps.append(dict(skip=c, alpha_jump=float(bs.alpha_jump), n_coexisting=int(np.sum(bs.coexist))))
    return {k: np.asarray([r[k] for r in rows]) for k in rows[0]}, jumps


def amp_table(skip, alphas, ds, seeds, preset, seed, se_rows) -> dict:
    import jax
    import numpy as np

    from phasejax.depth import continuation, inner_rule, run_amp, sample_data, se_draws
    from phasejax.solvers import status_name

    rule = inner_rule(preset["order"])
    se = continuation(np.asarray(alphas), skip, draws=se_draws(preset["draws_se"], seed + 2), rule=rule,
                      tol=1e-6, max_iterations=preset["max_iterations"])
    rows = []
    for i, a in enumerate(alphas):
        for d in ds:
            for s in range(seeds):
                key = jax.random.PRNGKey(1000 * seed + 7 * s + d)
                data = sample_data(key, d, a, skip)
                res = run_amp(data, skip, jax.random.fold_in(key, 1), q_init=0.1, m_init=0.1, rule=rule,
                              max_iterations=80)
                rows.append(dict(skip=skip, alpha=a, d=d, seed=s, m1=float(res.m[0]), m2=float(res.m[1]),
                                 q1_amp=float(res.q[0]), q2_amp=float(res.q[1]), se_q1=float(se.q[i, 0]),
                                 se_q2=float(se.q[i, 1]), iterations=int(res.iterations),
                                 status=status_name(res.status)))
    return {k: np.asarray([r[k] for r in rows]) for k in rows[0]}


def run(args) -> int:
    import numpy as np
    from tqdm import tqdm

    from phasejax.io import atomic_write_json, write_csv
    from phasejax.depth.plots import plot_amp, plot_overlaps, plot_thresholds

    preset = PRESETS[args.preset]
    os.makedirs(args.out, exist_ok=True)
    paths, timings = [], {}
    t0 = time.perf_counter()
    with tqdm(total=len(args.skip_grid), desc="thresholds", disable=None) as bar:
        th = thresholds_table(args.skip_grid, preset, args.seed, bar)
    timings["thresholds_s"] = time.perf_counter() - t0
    paths.append(write_csv(os.path.join(args.out, "thresholds.csv"), th))
    paths.append(plot_thresholds(th, os.path.join(args.out, "thresholds.png")))
    t0 = time.perf_counter()
    se, jumps = se_table(preset["se_skips"], np.asarray(preset["se_alphas"]), preset, args.seed)
    timings["se_s"] = time.perf_counter() - t0
    paths.append(write_csv(os.path.join(args.out, "se.csv"), se))
    paths.append(plot_overlaps(se, th, os.path.join(args.out, "overlaps.png")))
    if not args.no_amp:
        t0 = time.perf_counter()
        amp = amp_table(1.0, preset["amp_alphas"], preset["amp_d"], preset["amp_seeds"], preset, args.seed, se)
        timings["amp_s"] = time.perf_counter() - t0
        paths.append(write_csv(os.path.join(args.out, "amp.csv"), amp))
        paths.append(plot_amp(amp, os.path.join(args.out, "amp.png")))
    paths.append(atomic_write_json(os.path.join(args.out, "summary.json"), dict(
        preset=args.preset, settings={k: list(v) if isinstance(v, tuple) else v for k, v in preset.items()},
        skip_grid=list(args.skip_grid), seed=args.seed, jumps=jumps, timings=timings, **environment())))
    print_paths(paths)
    return 0
