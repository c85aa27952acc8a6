"""Tied rank-1 attention as a sequence multi-index model: Bayes-optimal thresholds, SE and AMP, two or three layers.

    phasejax depth                     # two layers, CPU preset (see PRESETS)
    phasejax depth --skip-grid 0,1,4   # only these skip strengths for the thresholds
    phasejax depth --layers 3          # three layers (THREE_PRESETS)

Writes --out (default runs/depth/; the committed results: --out results/depth --overwrite, and for three layers
--layers 3 --out results/depth/three_layers --overwrite).

Two layers:
  thresholds.csv   per skip: alpha_1, alpha_2 (layer 1, layer 2 weak recovery) with their errors (Monte Carlo,
                   interpolation, the grid rule's own error), the independent rule's paired difference and its error,
                   the layer learned first, the learned layer's overlap at the second threshold, layer 1's threshold
                   at Q = 0, the draws used
  convergence.csv  the rule study (gpu preset; the CPU preset has no study skips): each threshold at skips 0, 1, 4
                   with grid rules of several steps and independent rules of several orders (`independent_rule`),
                   paired against the finest grid
  estimators.csv   the draws study (gpu preset): per-sample mean and spread of every estimator of M_l and E|g_l|^2
  se.csv           per (skip, alpha): q1, q2 from the uninformative and an informative start (convergence test,
                   status), the exact fixed point of layer 2 with layer 1 held at zero, test error, free entropies
  amp.csv          per (skip, alpha, d, seed): AMP's overlaps and the SE's
  thresholds.png, convergence.png (gpu preset), overlaps.png, amp.png, summary.json
Three layers: `run_three`.
"""

from __future__ import annotations

import dataclasses
import os
import time

from phasejax.commands.argtypes import float_list, nonnegative_int
from phasejax.commands.flags import (add_mode, add_output, add_preset, add_progress, default_out, environment,
                                     print_paths)

NAME = "depth"
HELP = "deep tied attention as a sequence multi-index model: per-layer thresholds vs skip, Bayes-optimal SE, AMP"

SKIP_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)


@dataclasses.dataclass(frozen=True)
class Preset:
    """What `phasejax depth` (two layers) computes.

    Thresholds: `target` (Monte Carlo error aimed at per threshold), the draws and rules of `ThresholdSettings`.
    Rule study: `study_skips`, grid `study_steps` and mixture `study_orders` against a grid of `study_reference`,
    on `study_draws` draws. Estimator study: `estimator_draws`. SE curves: `se_skips`, `se_alphas`, `se_order`,
    `se_draws`, and the branch of layer 2 alone on `branch_draws`. AMP: `amp_skip`, `amp_alphas`, `amp_d`,
    `amp_seeds`, `amp_order`.
    """

    target: float = 0.0019
    draws_first: int = 8192
    draws_second: int = 8192
    max_draws: int = 131072
    step: float = 0.16
    rule_draws: int = 256
    check_order: int = 32
    check_draws: int = 256
    max_check_draws: int = 1024
    study_skips: tuple = ()
    study_steps: tuple = (0.32, 0.24, 0.16)
    study_orders: tuple = (16, 32, 48)
    study_reference: float = 0.08
    study_draws: int = 128
    estimator_draws: int = 4096
    se_skips: tuple = (1.0,)
    se_alphas: tuple = (0.1, 0.2, 0.3, 0.45, 0.6, 0.7, 0.8, 0.9, 1.2)
    se_order: int = 16
    se_draws: int = 512
    branch_draws: int = 2048
    amp_skip: float = 1.0
    amp_alphas: tuple = (0.45, 1.2)
    amp_d: tuple = (1000, 2000)
    amp_seeds: int = 2
    amp_order: int = 12


PRESETS = {
    "cpu": Preset(),
    "gpu": Preset(target=0.001, draws_first=65536, draws_second=65536, max_draws=1048576, rule_draws=2048,
                  check_order=96, check_draws=4096, max_check_draws=32768, study_steps=(0.32, 0.24, 0.16, 0.12),
                  study_orders=(16, 32, 64, 96), study_draws=2048, estimator_draws=65536, branch_draws=16384,
                  study_skips=(0.0, 1.0, 4.0), amp_d=(1000, 2000, 4000, 8000), amp_seeds=5, se_skips=(0.5, 1.0, 2.0),
                  se_alphas=tuple(round(0.05 * k, 2) for k in range(1, 41)), se_order=32, se_draws=4096,
                  amp_alphas=(0.3, 0.45, 0.75, 1.2)),
}


def skip_grid(text: str) -> tuple[float, ...]:
    """`--skip-grid`: comma-separated finite skip strengths >= 0, each once (`argtypes.float_list`)."""
    return float_list(text, ok=lambda v: v >= 0, rule="non-negative numbers")


def add_arguments(ap) -> None:
    add_preset(ap, "cpu: 9 skips, thresholds to a Monte Carlo error of 0.0019, SE at skip 1, AMP d <= 2000; "
                   "gpu: error 0.001, SE at skips 0.5, 1, 2, AMP d <= 8000 (three layers: THREE_PRESETS)")
    ap.add_argument("--layers", type=int, choices=(2, 3), default=2, help="two or three attention layers")
    ap.add_argument("--skip-grid", type=skip_grid, default=None, metavar="C1,C2,...",
                    help="comma-separated skip strengths >= 0 for the thresholds, each once (three layers: > 0; "
                         "default: the preset's)")
    ap.add_argument("--seed", type=nonnegative_int, default=1, help="seed of the Monte Carlo draws and of AMP")
    ap.add_argument("--no-amp", action="store_true", help="skip the AMP runs")
    ap.add_argument("--no-study", action="store_true", help="skip the rule and estimator studies (two layers)")
    add_mode(ap, "with --layers 3", lambda args: args.layers == 3, ignores=("no_study",),
             why="the three-layer run has no rule or estimator studies")
    add_progress(ap)
    add_output(ap, default_out(NAME))


def thresholds_table(skips, preset: Preset, seed: int, progress=None) -> tuple[dict, list]:
    """Per-skip thresholds (`phasejax.depth.layer_thresholds`) as columns, and the per-skip results."""
    import numpy as np

    from phasejax.depth import ThresholdSettings, layer_thresholds

    settings = ThresholdSettings(target=preset.target, draws_first=preset.draws_first,
                                 draws_second=preset.draws_second, max_draws=preset.max_draws, step=preset.step,
                                 rule_draws=preset.rule_draws, check_order=preset.check_order, check_draws=preset.check_draws,
                                 max_check_draws=preset.max_check_draws, seed=seed)
    rows, results = [], []
    for c in skips:
        lt = layer_thresholds(c, settings)
        results.append(lt)
        first, other = lt.first_layer + 1, 2 - lt.first_layer
        a_first, e_first = lt.alpha_first
        a_second, e_second = lt.alpha_second
        s = lt.second
        values = {first: (a_first, e_first), other: (a_second, e_second)}
        row = dict(skip=c, alpha_1=values[1][0], alpha_1_err=values[1][1], alpha_2=values[2][0],
                   alpha_2_err=values[2][1], first_layer=first)
        for layer, (mc, grid, check) in ((first, (float(lt.first.alpha0_err[lt.first_layer]), lt.first_grid,
                                                  lt.first_check)),
                                         (other, (float(s.alpha_mc), lt.second_grid, lt.second_check))):
            row[f"alpha_{layer}_mc"] = mc
            row[f"alpha_{layer}_grid_diff"] = float(grid.difference)
            row[f"alpha_{layer}_check_diff"] = float(check.difference)
            row[f"alpha_{layer}_check_se"] = float(check.difference_se)
            row[f"alpha_{layer}_check_draws"] = check.n_draws
        row[f"alpha_{other}_interp"] = float(s.alpha_interp)
        row[f"q{first}_at_alpha_{other}"] = float(s.q)
        row[f"q{first}_at_alpha_{other}_err"] = float(s.q_err)
        row["branch_monotone"] = bool(s.branch_monotone)
        row[f"alpha_{other}_uninformed"] = float(lt.first.alpha0[1 - lt.first_layer])
        row[f"alpha_{other}_uninformed_err"] = float(lt.first.alpha0_err[1 - lt.first_layer])
        row["M_1"], row["M_1_se"] = float(lt.first.M[0]), float(lt.first.M_se[0])
        row["M_2"], row["M_2_se"] = float(lt.first.M[1]), float(lt.first.M_se[1])
        row["draws_first"], row["draws_second"] = lt.first.n_draws, s.n_draws
        rows.append(row)
        if progress is not None:
            progress.update(1)
    names = list(dict.fromkeys(k for r in rows for k in r))
    return {k: np.asarray([r.get(k, np.nan) for r in rows]) for k in names}, results


def convergence_table(results, preset: Preset, seed: int) -> dict:
    """The rule study at `preset.study_skips` (those among `results`): each threshold with every studied rule,
    paired against the finest grid on the same draws."""
    import numpy as np

    from phasejax.depth import check_first, check_second, se_draws
    from phasejax.depth.se import independent_rule
    from phasejax.depth.thresholds import threshold_grid

    rows = []
    for lt in results:
        if not np.any(np.isclose(lt.skip, preset.study_skips)):
            continue
        draws = se_draws(preset.study_draws, seed + 5)
        reference = threshold_grid(preset.study_reference, lt.skip)
        rules = [("grid", h, threshold_grid(h, lt.skip)) for h in preset.study_steps]
        rules += [("mixture", k, independent_rule(k, lt.skip)) for k in preset.study_orders]
        for kind, param, rule in rules:
            for which in ("first", "second"):
                t0 = time.perf_counter()
                if which == "first":
                    res = check_first(lt.skip, lt.first_layer, draws, reference, rule)
                    layer = lt.first_layer + 1
                else:
                    res = check_second(lt.skip, lt.second, draws, reference, rule)
                    layer = 2 - lt.first_layer
                nodes = rule.size if hasattr(rule, "size") else int(rule.nodes.shape[0])
                rows.append(dict(skip=lt.skip, threshold=f"alpha_{layer}", rule=kind, step_or_order=param,
                                 nodes_per_component=nodes, reference=float(res.primary), value=float(res.other),
                                 difference=float(res.difference), difference_se=float(res.difference_se),
                                 draws=res.n_draws, seconds=time.perf_counter() - t0))
    return {k: np.asarray([r[k] for r in rows]) for k in rows[0]} if rows else {}


def estimators_table(results, preset: Preset, seed: int) -> dict:
    """The estimator study at the study skips: at `Q = 0` and at the second threshold's middle point."""
    import numpy as np

    from phasejax.depth import estimator_study, se_draws

    rows = []
    draws = se_draws(preset.estimator_draws, seed + 6)
    for lt in results:
        if not np.any(np.isclose(lt.skip, preset.study_skips)):
            continue
        q_mid = np.zeros(2)
        q_mid[lt.first_layer] = 1 - float(lt.second.V[1])
        for point, q in (("Q=0", np.zeros(2)), ("second threshold", q_mid)):
            for (quantity, name), (mean, std) in estimator_study(lt.skip, q, draws).items():
                rows.append(dict(skip=lt.skip, point=point, q1=q[0], q2=q[1], quantity=quantity, estimator=name,
                                 mean=mean, std=std, se=std / np.sqrt(draws.xi.shape[0]),
                                 draws=draws.xi.shape[0]))
    return {k: np.asarray([r[k] for r in rows]) for k in rows[0]} if rows else {}


def se_table(skips, alphas, preset: Preset, seed: int) -> tuple[dict, list]:
    """SE curves: both branches with the convergence test, the exact branch of layer 2 alone, test errors."""
    import numpy as np

    from phasejax.depth import bayes_test_error, branch_scan, learned_branch, rule_for, se_draws
    from phasejax.solvers import status_names

    draws = se_draws(preset.se_draws, seed + 2)
    rows, jumps = [], []
    V_branch = np.geomspace(0.995, 5e-4, 48)
    for c in skips:
        rule = rule_for(preset.se_order, c)
        bs = branch_scan(c, alphas, draws, rule, tol=1e-3)
        a_star, a_se = learned_branch(c, V_branch, 1, se_draws(preset.branch_draws, seed + 7))
        ok = np.concatenate([[True], np.diff(a_star) > 0])
        ok = np.cumprod(ok).astype(bool)  # the increasing part of the branch (one fixed point per alpha)
        slope = np.gradient(1 - V_branch[ok], a_star[ok]) if ok.sum() > 1 else np.zeros(1)
        low = bs.low
        for i, a in enumerate(alphas):
            err, err_se = bayes_test_error(np.asarray(low.q[i]), c, n_samples=4000, seed=seed + 3)
            if a <= a_star[ok][0]:
                q2_alone, q2_alone_se = 0.0, 0.0
            elif a >= a_star[ok][-1]:
                q2_alone, q2_alone_se = np.nan, np.nan
            else:
                q2_alone = float(np.interp(a, a_star[ok], 1 - V_branch[ok]))
                q2_alone_se = float(np.interp(a, a_star[ok], np.abs(slope) * a_se[ok]))
            rows.append(dict(skip=c, alpha=a, q1=float(low.q[i, 0]), q2=float(low.q[i, 1]),
                             q1_se=float(low.q_se[i, 0]), q2_se=float(low.q_se[i, 1]),
                             q2_layer1_at_zero=q2_alone, q2_layer1_at_zero_se=q2_alone_se,
                             q1_informed=float(bs.q_high[i, 0]), q2_informed=float(bs.q_high[i, 1]),
                             coexist=bool(bs.coexist[i]), phi_uninformed=float(bs.phi_low[i]),
                             phi_informed=float(bs.phi_high[i]), phi_diff_se=float(bs.phi_se[i]),
                             status_informed=str(status_names(bs.high.status[i])),
                             test_error=float(err), test_error_se=float(err_se),
                             residual=float(low.residual[i]), error=float(low.error[i]),
                             iterations=int(low.iterations[i]), status=str(status_names(low.status[i])),
                             clipped=bool(np.any(low.clipped[i]))))
        jumps.append(dict(skip=c, alpha_jump=float(bs.alpha_jump), n_coexisting=int(np.sum(bs.coexist))))
    return {k: np.asarray([r[k] for r in rows]) for k in rows[0]}, jumps


def amp_table(preset: Preset, seed: int) -> dict:
    import jax
    import numpy as np

    from phasejax.depth import continuation, rule_for, run_amp, sample_data, se_draws
    from phasejax.depth.amp import amp_keys
    from phasejax.solvers import status_name

    skip, alphas = preset.amp_skip, np.asarray(preset.amp_alphas)
    rule = rule_for(preset.amp_order, skip)
    se = continuation(alphas, skip, draws=se_draws(preset.se_draws, seed + 2), rule=rule_for(preset.se_order, skip))
    rows = []
    for i, a in enumerate(alphas):
        for d in preset.amp_d:
            for s in range(preset.amp_seeds):
                data_key, start_key = amp_keys(jax.random.PRNGKey(1000 * seed + 7 * s + d))
                data = sample_data(data_key, d, a, skip)
                res = run_amp(data, skip, start_key, q_init=0.1, m_init=0.1, rule=rule,
                              max_iterations=80)
                rows.append(dict(skip=skip, alpha=a, d=d, seed=s, m1=float(res.m[0]), m2=float(res.m[1]),
                                 q1_amp=float(res.q[0]), q2_amp=float(res.q[1]), w1_norm=float(res.teacher_norm[0]),
                                 w2_norm=float(res.teacher_norm[1]), se_q1=float(se.q[i, 0]),
                                 se_q2=float(se.q[i, 1]), se_q1_se=float(se.q_se[i, 0]),
                                 se_q2_se=float(se.q_se[i, 1]), iterations=int(res.iterations),
                                 status=status_name(res.status)))
    return {k: np.asarray([r[k] for r in rows]) for k in rows[0]}


def run(args) -> int:
    if args.layers == 3:
        return run_three(args)
    import numpy as np

    from phasejax.depth.plots import plot_amp, plot_convergence, plot_overlaps, plot_thresholds
    from phasejax.progress import bar_or_lines
    from phasejax.io import atomic_write_json, write_csv

    preset = PRESETS[args.preset]
    skips = SKIP_GRID if args.skip_grid is None else args.skip_grid
    os.makedirs(args.out, exist_ok=True)
    paths, timings = [], {}
    t0 = time.perf_counter()
    with bar_or_lines(len(skips), "thresholds", not args.no_progress) as bar:
        th, results = thresholds_table(skips, preset, args.seed, bar)
    timings["thresholds_s"] = time.perf_counter() - t0
    paths.append(write_csv(os.path.join(args.out, "thresholds.csv"), th))
    paths.append(plot_thresholds(th, os.path.join(args.out, "thresholds.png")))
    if not args.no_study:
        t0 = time.perf_counter()
        conv = convergence_table(results, preset, args.seed)
        est = estimators_table(results, preset, args.seed)
        timings["studies_s"] = time.perf_counter() - t0
        if conv:
            paths.append(write_csv(os.path.join(args.out, "convergence.csv"), conv))
            paths.append(plot_convergence(conv, preset.target, os.path.join(args.out, "convergence.png")))
        if est:
            paths.append(write_csv(os.path.join(args.out, "estimators.csv"), est))
    t0 = time.perf_counter()
    se, jumps = se_table(preset.se_skips, np.asarray(preset.se_alphas), preset, args.seed)
    timings["se_s"] = time.perf_counter() - t0
    paths.append(write_csv(os.path.join(args.out, "se.csv"), se))
    paths.append(plot_overlaps(se, th, os.path.join(args.out, "overlaps.png")))
    if not args.no_amp:
        t0 = time.perf_counter()
        amp = amp_table(preset, args.seed)
        timings["amp_s"] = time.perf_counter() - t0
        paths.append(write_csv(os.path.join(args.out, "amp.csv"), amp))
        paths.append(plot_amp(amp, os.path.join(args.out, "amp.png")))
    settings = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(preset).items()}
    paths.append(atomic_write_json(os.path.join(args.out, "summary.json"), dict(
        layers=2, preset=args.preset, settings=settings, skip_grid=list(skips), seed=args.seed, jumps=jumps,
        timings=timings, **environment())))
    print_paths(paths)
    return 0


@dataclasses.dataclass(frozen=True)
class ThreePreset:
    """What `phasejax depth --layers 3` computes: thresholds at `skips` (`phasejax.depth.ThreeSettings` from the
    rule orders and draws below), SE curves at `se_skip` over `se_alphas` (rule `se_outer`, `se_inner`, `se_draws`
    draws), and AMP at `amp_alphas`, `amp_d`, `amp_seeds` with the SE's rule, at most `amp_iterations` steps.
    The rule study of AMP (`amp_rules.csv`): at `rules_alpha`, on the first seed's data at the smallest `d`, AMP
    from each of `rules_starts` (`m = q` per layer) with the SE's rule and with the finer `rules_fine`
    (outer, inner order), `rules_iterations` steps each, against the SE from the same starts."""

    skips: tuple = (0.5, 1.0, 2.0)
    outer_order: int = 4
    inner_order: int = 6
    draws_first: int = 2048
    draws: int = 256
    pilot_draws: int = 96
    check_outer: int = 6
    check_inner: int = 10
    check_draws: int = 96
    se_skip: float = 1.0
    se_alphas: tuple = (0.1, 0.2, 0.3, 0.5, 0.8, 1.1, 1.6)
    se_outer: int = 4
    se_inner: int = 6
    se_draws: int = 128
    amp_alphas: tuple = (0.5, 0.8, 1.6)
    amp_d: tuple = (1000,)
    amp_seeds: int = 3
    amp_iterations: int = 100
    rules_alpha: float = 1.6
    rules_starts: tuple = ((0.1, 0.1, 0.1), (0.9, 0.1, 0.99))
    rules_fine: tuple = (8, 8)
    rules_iterations: int = 25


THREE_PRESETS = {
    "cpu": ThreePreset(),
    "gpu": ThreePreset(skips=(0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0), outer_order=8, inner_order=10,
                       draws_first=65536, draws=8192, pilot_draws=1024, check_outer=10, check_inner=14,
                       check_draws=2048, se_outer=6, se_inner=8, se_draws=4096, amp_d=(1000, 2000, 4000), amp_seeds=4),
}


def three_thresholds_table(preset: ThreePreset, skips, seed: int, progress=None) -> dict:
    """Per-skip thresholds of the three layers (`phasejax.depth.three_thresholds`) as columns."""
    import numpy as np

    from phasejax.depth import ThreeSettings, three_thresholds

    settings = ThreeSettings(outer_order=preset.outer_order, inner_order=preset.inner_order,
                             draws_first=preset.draws_first, draws=preset.draws, pilot_draws=preset.pilot_draws,
                             check_outer=preset.check_outer, check_inner=preset.check_inner,
                             check_draws=preset.check_draws, seed=seed)
    rows = []
    for c in skips:
        tt = three_thresholds(c, settings)
        f, s, l = tt.order
        second, third = tt.second, tt.third
        values = {f: (float(tt.first.alpha0[f]), float(tt.first.alpha0_err[f])),
                  s: (float(second.alpha), float(np.hypot(second.alpha_mc, second.alpha_interp))),
                  l: (float(third.alpha), float(np.hypot(third.alpha_mc, third.alpha_interp)))}
        row = dict(skip=c)
        for k in range(3):
            row[f"alpha_{k + 1}"], row[f"alpha_{k + 1}_err"] = values[k]
        row["order"] = ",".join(str(k + 1) for k in (f, s, l))
        row["simultaneous"] = bool(third.simultaneous)
        row[f"q{f + 1}_at_alpha_{s + 1}"] = float(second.q)
        row[f"q{f + 1}_at_alpha_{s + 1}_err"] = float(second.q_err)
        row["q_first_at_third"] = float(third.q_first)
        row["q_second_at_third"] = float(third.q_second)
        row["root_residual"] = float(np.max(third.root_residual))
        for k in range(3):
            row[f"alpha_{k + 1}_uninformed"] = float(tt.first.alpha0[k])
            row[f"alpha_{k + 1}_uninformed_err"] = float(tt.first.alpha0_err[k])
        row[f"alpha_{f + 1}_check_diff"] = float(tt.first_check.difference)
        row[f"alpha_{f + 1}_check_se"] = float(tt.first_check.difference_se)
        row[f"alpha_{s + 1}_check_diff"] = float(tt.second_check.difference)
        row[f"alpha_{s + 1}_check_se"] = float(tt.second_check.difference_se)
        row["draws_first"], row["draws"] = tt.first.n_draws, third.n_draws
        rows.append(row)
        if progress is not None:
            progress.update(1)
    names = list(dict.fromkeys(k for r in rows for k in r))
    return {k: np.asarray([r.get(k, np.nan) for r in rows]) for k in names}


def three_se_table(preset: ThreePreset, seed: int) -> dict:
    """SE curves of three layers at `preset.se_skip` (continuation from the uninformative start)."""
    import numpy as np

    from phasejax.depth import bayes_test_error, continuation, se_draws, three_rule
    from phasejax.solvers import status_names

    c = preset.se_skip
    draws = se_draws(preset.se_draws, seed + 2, layers=3)
    res = continuation(np.asarray(preset.se_alphas), c, draws=draws, rule=three_rule(preset.se_outer, preset.se_inner),
                       tol=1e-4)
    rows = []
    for i, a in enumerate(preset.se_alphas):
        err, err_se = bayes_test_error(np.asarray(res.q[i]), c, n_samples=4000, seed=seed + 3)
        row = dict(skip=c, alpha=a)
        for k in range(3):
            row[f"q{k + 1}"], row[f"q{k + 1}_se"] = float(res.q[i, k]), float(res.q_se[i, k])
        row.update(test_error=float(err), test_error_se=float(err_se), residual=float(res.residual[i]),
                   error=float(res.error[i]), iterations=int(res.iterations[i]),
                   status=str(status_names(res.status[i])), clipped=bool(np.any(res.clipped[i])))
        rows.append(row)
    return {k: np.asarray([r[k] for r in rows]) for k in rows[0]}


def three_amp_table(preset: ThreePreset, se: dict, seed: int) -> dict:
    """AMP on three-layer data at `preset.amp_alphas` (skip `preset.se_skip`, the SE's rule), with the SE's overlaps
    at the same alpha from `se` (`three_se_table`; NaN where `se` lacks that alpha)."""
    import jax
    import numpy as np

    from phasejax.depth import run_amp, sample_data, three_rule
    from phasejax.solvers import status_name

    c = preset.se_skip
    rule = three_rule(preset.se_outer, preset.se_inner)
    rows = []
    for a in preset.amp_alphas:
        at = np.nonzero(np.isclose(se["alpha"], a))[0]
        for d in preset.amp_d:
            for s in range(preset.amp_seeds):
                data_key, start_key = three_amp_keys(seed, s, d)
                data = sample_data(data_key, d, a, c, layers=3)
                res = run_amp(data, c, start_key, q_init=0.1, m_init=0.1, rule=rule,
                              max_iterations=preset.amp_iterations)
                row = dict(skip=c, alpha=a, d=d, seed=s)
                for k in range(3):
                    row[f"m{k + 1}"] = float(res.m[k])
                for k in range(3):
                    row[f"q{k + 1}_amp"] = float(res.q[k])
                for k in range(3):
                    row[f"w{k + 1}_norm"] = float(res.teacher_norm[k])
                for k in range(3):
                    for name in (f"q{k + 1}", f"q{k + 1}_se"):
                        row[f"se_{name}"] = float(se[name][at[0]]) if at.size else np.nan
                row.update(iterations=int(res.iterations), status=status_name(res.status))
                rows.append(row)
    return {k: np.asarray([r[k] for r in rows]) for k in rows[0]}


def three_amp_keys(seed: int, s: int, d: int):
    """The data's and AMP's start keys of the three-layer run of seed index `s` at dimension `d` (`amp_keys`)."""
    import jax

    from phasejax.depth.amp import amp_keys

    return amp_keys(jax.random.PRNGKey(1000 * seed + 7 * s + d + 3))


def three_amp_rules(preset: ThreePreset, seed: int) -> dict:
    """The rule study of AMP (`ThreePreset`): per start, rule and step, AMP's overlaps `m1..3` (with the teacher's
    norms `w1..3_norm`) and the SE's from the same start after as many steps, with the SE's rule (`se_q1..3`) and
    with the finer rule (`se_fine_q1..3`), on the same draws."""
    import numpy as np

    from phasejax.depth import run_amp, sample_data, se_draws, three_rule
    from phasejax.depth.se import se_trajectory
    from phasejax.solvers import status_name

    c, a, d, steps = preset.se_skip, preset.rules_alpha, min(preset.amp_d), preset.rules_iterations
    draws = se_draws(preset.se_draws, seed + 2, layers=3)
    data_key, start_key = three_amp_keys(seed, 0, d)
    data = sample_data(data_key, d, a, c, layers=3)
    rules = {"se": three_rule(preset.se_outer, preset.se_inner), "fine": three_rule(*preset.rules_fine)}
    orders = {"se": (preset.se_outer, preset.se_inner), "fine": tuple(preset.rules_fine)}
    rows = []
    for start in preset.rules_starts:
        se = {name: np.asarray(se_trajectory(a, c, start, draws, r, steps)) for name, r in rules.items()}
        for name, r in rules.items():
            res = run_amp(data, c, start_key, q_init=start, m_init=start, rule=r, max_iterations=steps, tol=0.0)
            hist = np.asarray(res.m_history)
            for t in range(steps):
                row = dict(skip=c, alpha=a, d=d, start=",".join(f"{v:g}" for v in start), rule=name,
                           outer=orders[name][0], inner=orders[name][1], step=t + 1)
                for k in range(3):
                    row[f"m{k + 1}"] = float(hist[t, k])
                for k in range(3):
                    row[f"w{k + 1}_norm"] = float(res.teacher_norm[k])
                for k in range(3):
                    row[f"se_q{k + 1}"] = float(se["se"][t, k])
                for k in range(3):
                    row[f"se_fine_q{k + 1}"] = float(se["fine"][t, k])
                row["status"] = status_name(res.status)
                rows.append(row)
    return {k: np.asarray([r[k] for r in rows]) for k in rows[0]}


def three_se_at_steps(preset: ThreePreset, amp: dict, seed: int) -> dict:
    """`amp` (`three_amp_table`) with the SE's overlaps after as many steps as each AMP run took, from AMP's start
    (`q = 0.1` on every layer, the Nishimori line of `m_init = q_init = 0.1`): columns `se_t_q1..3`. AMP tracks the
    SE step by step, so a run stopped before its fixed point is compared with the SE at the same step."""
    import numpy as np

    from phasejax.depth import se_draws, three_rule
    from phasejax.depth.se import se_trajectory

    c = preset.se_skip
    draws = se_draws(preset.se_draws, seed + 2, layers=3)
    rule = three_rule(preset.se_outer, preset.se_inner)
    out = {k: np.asarray(v) for k, v in amp.items()}
    cols = np.full((len(out["alpha"]), 3), np.nan)
    for a in np.unique(out["alpha"]):
        rows = out["alpha"] == a
        trajectory = np.asarray(se_trajectory(float(a), c, (0.1, 0.1, 0.1), draws, rule,
                                              int(out["iterations"][rows].max())))
        cols[rows] = trajectory[out["iterations"][rows] - 1]
    for k in range(3):
        out[f"se_t_q{k + 1}"] = cols[:, k]
    return out


def run_three(args) -> int:
    """`phasejax depth --layers 3`: thresholds.csv, se.csv, amp.csv, amp_rules.csv, thresholds.png, overlaps.png,
    amp_rules.png, summary.json."""
    from phasejax.depth.plots import plot_amp_rules, plot_three_overlaps, plot_three_thresholds
    from phasejax.progress import bar_or_lines
    from phasejax.io import atomic_write_json, write_csv

    preset = THREE_PRESETS[args.preset]
    skips = preset.skips if args.skip_grid is None else args.skip_grid
    if any(c <= 0 for c in skips):
        from phasejax.commands.argtypes import UsageError

        raise UsageError(f"--skip-grid {','.join(f'{c:g}' for c in skips)}: three layers need skip strengths > 0")
    os.makedirs(args.out, exist_ok=True)
    paths, timings = [], {}
    t0 = time.perf_counter()
    with bar_or_lines(len(skips), "thresholds", not args.no_progress) as bar:
        th = three_thresholds_table(preset, skips, args.seed, bar)
    timings["thresholds_s"] = time.perf_counter() - t0
    paths.append(write_csv(os.path.join(args.out, "thresholds.csv"), th))
    paths.append(plot_three_thresholds(th, os.path.join(args.out, "thresholds.png")))
    t0 = time.perf_counter()
    se = three_se_table(preset, args.seed)
    timings["se_s"] = time.perf_counter() - t0
    paths.append(write_csv(os.path.join(args.out, "se.csv"), se))
    amp = None
    if not args.no_amp:
        t0 = time.perf_counter()
        amp = three_se_at_steps(preset, three_amp_table(preset, se, args.seed), args.seed)
        timings["amp_s"] = time.perf_counter() - t0
        paths.append(write_csv(os.path.join(args.out, "amp.csv"), amp))
        t0 = time.perf_counter()
        rules = three_amp_rules(preset, args.seed)
        timings["amp_rules_s"] = time.perf_counter() - t0
        paths.append(write_csv(os.path.join(args.out, "amp_rules.csv"), rules))
        paths.append(plot_amp_rules(rules, os.path.join(args.out, "amp_rules.png")))
    paths.append(plot_three_overlaps(se, th, amp, os.path.join(args.out, "overlaps.png")))
    settings = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(preset).items()}
    paths.append(atomic_write_json(os.path.join(args.out, "summary.json"), dict(
        layers=3, preset=args.preset, settings=settings, skip_grid=list(skips), seed=args.seed, timings=timings,
        **environment())))
    print_paths(paths)
    return 0
