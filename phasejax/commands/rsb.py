"""One-step RSB of the positional branch at zero temperature against RS: training loss, test error, alpha_c.

    phasejax rsb                                          # omega = 0, 0.15, 0.3, 0.45; writes runs/rsb/
    phasejax rsb --omegas 0.3 --log2-n 11 --inner-order 3 --ys 30 300 3000
    phasejax rsb --omegas 0 --semantic                    # the semantic branch's 1RSB too
    phasejax rsb --out results/rsb --overwrite

Per omega, at the two alphas of the replica-symmetric (RS) diagram (--rs-dir) on either side of its alpha_c, the
positional branch is solved on one nested rule (`phasejax.theory.rsb`): RS (`Delta = 0`) and 1RSB at each fixed
Parisi parameter of the scan --ys. The ground-state energy is `Phi` at its maximum over `y` (where
`Sigma = y^2 dPhi/dy` changes sign); the scan's state of highest `Phi` stands for it (solution `1rsb_scan_max`:
a lower bound of the maximum, and, as the largest of noisy values, biased up by up to the spread of the
replicas). Its difference to RS, with errors from the rule's replicas (paired: the same nodes), is the 1RSB
correction `delta e` of the positional training loss (and of its test error); added to the RS diagram's converged
positional `e_t`, it gives the 1RSB positional `e_t`. The replicons of the chosen state (within and between the
states, `attention_replicon`) and of RS on the same rule are written with it. The semantic branch is taken RS
(its `e_t` from --rs-dir; its jump mass `replicon_jump_semantic` at these alphas is written alongside: the RS
answer is exact only where it is zero) unless --semantic, which solves its RS and 1RSB the same way and
corrects its `e_t` too.
alpha_c is where `Delta e_t` crosses zero, linear between the two alphas, RS and 1RSB, with errors propagated
from both ends.

Writes into --out only these files (so --out may hold other results): rsb_points.csv (per omega, alpha and
solution: q0, Delta, q1, V0, m, y, Phi, e, Sigma, test error, with errors, and the paired corrections),
rsb_thresholds.csv (per omega: alpha_c RS and 1RSB with errors), rsb_summary.json and rsb.png (both boundaries,
with the empirical bracket of bracket_summary.json when --out holds one); an existing one is replaced only with
--overwrite.
"""

from __future__ import annotations

import os

from phasejax.commands import flags
from phasejax.commands.argtypes import (UsageError, guard_output_files, int_between, positive_float, positive_int,
                                        refuse_duplicates, unit_interval)

NAME = "rsb"
HELP = "one-step RSB at zero temperature: the positional branch's training loss, test error and alpha_c vs RS"

OMEGAS = (0.0, 0.15, 0.3, 0.45)
MAX_LOG2_N = 20
"""The largest `--log2-n` (`phasejax.theory.rsb.attention_rule` takes at most 2**20 points per replica)."""
FILES = ("rsb_points.csv", "rsb_thresholds.csv", "rsb_summary.json", "rsb.png")
POINT_COLUMNS = ("omega", "alpha", "branch", "solution", "status", "iterations", "q0", "q0_err", "delta", "delta_err", "q1",
                 "q1_err", "V0", "V0_err", "m", "m_err", "y", "y_err", "phi", "phi_err", "e_t", "e_t_err", "sigma",
                 "sigma_err", "test_error", "test_error_err", "missed_minima", "residual", "delta_phi", "delta_phi_err",
                 "within", "within_err", "within_jump", "within_jump_err", "between", "between_err", "two_minima")
THRESHOLD_COLUMNS = ("omega", "alpha_lo", "alpha_hi", "e_positional_rs_lo", "e_positional_rs_hi",
                     "delta_e_rsb_lo", "delta_e_rsb_lo_err", "delta_e_rsb_hi", "delta_e_rsb_hi_err",
                     "delta_test_error_rsb_lo", "delta_test_error_rsb_hi", "y_rsb_lo", "y_rsb_hi",
                     "replicon_within_lo", "replicon_within_hi", "replicon_within_jump_lo", "replicon_within_jump_hi",
                     "replicon_between_lo", "replicon_between_hi", "delta_e_semantic_lo", "delta_e_semantic_lo_err",
                     "delta_e_semantic_hi", "delta_e_semantic_hi_err", "e_positional_1rsb_lo",
                     "e_positional_1rsb_hi", "e_semantic_rs_lo", "e_semantic_rs_hi", "jump_semantic_lo",
                     "jump_semantic_hi", "alpha_c_rs", "alpha_c_rs_err", "alpha_c_1rsb", "alpha_c_1rsb_err",
                     "alpha_c_shift", "alpha_c_shift_err", "alpha_c_rs_diagram", "alpha_c_rs_diagram_err")


def add_arguments(ap) -> None:
    ap.add_argument("--omegas", type=unit_interval, nargs="+", default=list(OMEGAS), help="target mixes")
    ap.add_argument("--rs-dir", default=None,
                    help="the RS phase diagram (diagram.csv, points.csv, thresholds.csv, summary.json): its alpha "
                         "grid, its converged e_t of both branches and the starts of the solves (default: the "
                         "repository's results/phase_diagram, whatever the working directory)")
    ap.add_argument("--log2-n", type=int_between(1, MAX_LOG2_N), default=9,
                    help=f"Sobol points per replica of the outer rule over (xi, eta): 2**log2_n (at most {MAX_LOG2_N})")
    ap.add_argument("--replicas", type=int_between(2, 64), default=4,
                    help="scrambled replicas of the outer rule (2 to 64)")
    ap.add_argument("--inner-order", type=positive_int, default=3,
                    help="Gauss-Hermite nodes per token of the inner rule over z")
    ap.add_argument("--ys", type=positive_float, nargs="+", default=[30.0, 100.0, 1000.0],
                    help="the scan of Parisi parameters y (inverse energies per sample): one fixed-y solve each; "
                         "the state of highest Phi stands for the ground state")
    ap.add_argument("--semantic", action="store_true",
                    help="solve the semantic branch's 1RSB too (else it is taken RS)")
    ap.add_argument("--delta0", type=positive_float, default=0.003, help="start of Delta = q1 - q0 (units of q0)")
    ap.add_argument("--max-iter", type=positive_int, default=10,
                    help="cap on the evaluations of each stage of a solve (two stages: solve, dense check, solve)")
    flags.add_output(ap, flags.default_out(NAME), guard=False,
                     help="output folder (created); it may hold other results: only the files "
                          + ", ".join(FILES) + " are written, an existing one only with --overwrite")


RS_READS = {
    "diagram.csv": ("omega", "alpha", "delta_e", "e_positional", "e_positional_err", "e_semantic", "e_semantic_err",
                    "replicon_jump_semantic"),
    "points.csv": ("omega", "alpha", "branch", "is_branch", "q0_0", "m0_0", "V0_0", "theta0_0"),
    "thresholds.csv": ("omega", "alpha_c", "alpha_c_err"),
    "summary.json": ("config.sigma", "config.lam", "config.A"),
}
"""What the command reads of the phase-diagram folder --rs-dir."""


def rs_dir_from(args) -> str:
    """`--rs-dir`, by default the repository's results/phase_diagram (found next to the package)."""
    return args.rs_dir if args.rs_dir is not None else flags.repository_results("phase_diagram")


def reads(args) -> list:
    """The files the command reads: the phase diagram of --rs-dir (`RS_READS`), checked before any compute."""
    return flags.rs_dir_reads(rs_dir_from(args), RS_READS, given=args.rs_dir is not None, reader=NAME)


def read_rs(rs_dir: str) -> dict:
    """The RS diagram's tables and configuration (`RS_READS`, checked by the command line before the run)."""
    from phasejax.io import read_csv, read_json

    paths = {k: os.path.join(rs_dir, k + ext) for k, ext in
             (("diagram", ".csv"), ("points", ".csv"), ("thresholds", ".csv"), ("summary", ".json"))}
    config = read_json(paths["summary"], kind=dict)["config"]
    return dict(diagram=read_csv(paths["diagram"]), points=read_csv(paths["points"]),
                thresholds=read_csv(paths["thresholds"]), config=config)


def bracketing_alphas(rs: dict, omega: float) -> tuple[float, float, dict]:
    """The two alphas of the RS grid on either side of `alpha_c(omega)` (where `delta_e` changes sign) and the
    diagram's rows there."""
    import numpy as np

    d = rs["diagram"]
    sel = np.flatnonzero(np.isclose(np.asarray(d["omega"], float), omega))
    if sel.size == 0:
        raise UsageError(f"--rs-dir has no omega = {omega:g} (its omegas: {sorted(set(map(float, d['omega'])))})")
    alphas = np.asarray(d["alpha"], float)[sel]
    de = np.asarray(d["delta_e"], float)[sel]
    order = np.argsort(alphas)
    alphas, de, sel = alphas[order], de[order], sel[order]
    flips = np.flatnonzero((de[:-1] > 0) & (de[1:] <= 0) & np.isfinite(de[:-1]) & np.isfinite(de[1:]))
    if flips.size == 0:
        raise UsageError(f"the RS Delta e_t at omega = {omega:g} does not change sign on the grid of --rs-dir")
    i = int(flips[0])
    rows = {k: (np.asarray(d[k])[sel[i]], np.asarray(d[k])[sel[i + 1]]) for k in d}
    return float(alphas[i]), float(alphas[i + 1]), rows


def rs_start(rs: dict, omega: float, alpha: float, branch: str = "positional") -> tuple[float, float, float, float]:
    """`(q0, m, V0, theta0)` of `branch` of the RS diagram at `(omega, alpha)`."""
    import numpy as np

    p = rs["points"]
    sel = (np.isclose(np.asarray(p["omega"], float), omega) & np.isclose(np.asarray(p["alpha"], float), alpha)
           & (np.asarray(p["branch"]) == branch) & (np.asarray(p["is_branch"], float) > 0.5))
    idx = np.flatnonzero(sel)
    if idx.size == 0:
        raise UsageError(f"--rs-dir has no {branch} branch point at omega = {omega:g}, alpha = {alpha:g}")
    i = int(idx[0])
    return float(p["q0_0"][i]), float(p["m0_0"][i]), float(p["V0_0"][i]), float(p["theta0_0"][i])


def crossing(alpha_lo, alpha_hi, d_lo, d_hi, err_lo, err_hi):
    """Zero of the line through `(alpha_lo, d_lo)`, `(alpha_hi, d_hi)` and its error from the ends' errors
    (independent): `alpha_c = alpha_lo + d_lo (alpha_hi - alpha_lo) / (d_lo - d_hi)`."""
    import numpy as np

    span = alpha_hi - alpha_lo
    den = d_lo - d_hi
    a = alpha_lo + d_lo * span / den
    da_dlo = span * (-d_hi) / den**2
    da_dhi = span * d_lo / den**2
    return float(a), float(np.hypot(da_dlo * err_lo, da_dhi * err_hi))


def point_row(omega, alpha, branch, solution, r, rs=None, replicon=None) -> dict:
    """One row of rsb_points.csv from an `RSBResult` (`rs`: the RS result on the same rule, for the paired
    `delta_phi`; `replicon`: an `RSBReplicon` of the state)."""
    import numpy as np

    from phasejax.theory.rsb import paired_difference

    f = lambda x: float(np.asarray(x))  # noqa: E731
    m_i = 3 if branch == "positional" else len(np.asarray(r.u)) - 2          # m (positional) or theta0 (semantic)
    row = dict(omega=omega, alpha=alpha, branch=branch, solution=solution, status=r.status_name,
               iterations=int(r.iterations), q0=f(r.q0), q0_err=f(r.q0_err), delta=f(r.delta),
               delta_err=f(r.delta_err), q1=f(r.q1), q1_err=f(r.q1_err), V0=f(r.V0), V0_err=f(r.V0_err),
               m=f(r.u[m_i]), m_err=f(r.u_err[m_i]), y=f(r.y), y_err=f(r.y_err), phi=f(r.phi), phi_err=f(r.phi_err),
               e_t=f(r.energy), e_t_err=f(r.energy_err), sigma=f(r.complexity), sigma_err=f(r.complexity_err),
               test_error=f(r.test_error), test_error_err=f(r.test_error_err), missed_minima=int(r.missed_minima),
               residual=f(r.residual))
    d, d_err = paired_difference(r, rs, "phi") if rs is not None else (0.0, 0.0)
    row.update(delta_phi=float(d), delta_phi_err=float(d_err))
    nan = float("nan")
    row.update({k: (f(getattr(replicon, k)) if replicon is not None else nan) for k in REPLICON_KEYS})
    return row


REPLICON_KEYS = ("within", "within_err", "within_jump", "within_jump_err", "between", "between_err", "two_minima")


def solve_scan(params, start, rule, ys, delta0: float, config, branch: str):
    """RS and 1RSB of `branch` on `rule` from the RS start `(q0, m, V0, theta0)`: RS (`Delta = 0`) and 1RSB at each
    fixed `y` of `ys` (from the RS solution with `Delta = delta0`). Returns `(rs, [fixed ...], best)`, `best` the
    fixed-`y` state of highest `Phi` (paired with RS), converged ones preferred."""
    import numpy as np

    from phasejax.theory.rsb import attention_state, paired_difference, solve_rsb

    q0, m, V0, th = start
    if branch == "positional":
        th = 0.0
    else:
        m = 0.0
    rs = solve_rsb(params, attention_state(q0, 0.0, V0, m, th, 1.0), branch=branch, mode="rs", rule=rule,
                   config=config)
    u = np.asarray(rs.u)
    K = params.K
    m_now, th_now = u[3:3 + K], u[3 + K]
    fixed = [solve_rsb(params, attention_state(max(u[0] - delta0, 0.5 * u[0]), delta0, u[2], m_now, th_now, y),
                       branch=branch, mode="fixed_y", rule=rule, config=config) for y in ys]
    ok = [f for f in fixed if f.status_name == "converged"] or fixed
    best = max(ok, key=lambda f: float(paired_difference(f, rs, "phi")[0]))
    return rs, fixed, best


def plot_boundaries(thresholds: dict, rs: dict, bracket: dict | None, path: str) -> str:
    """alpha_c(omega): the RS diagram's curve with its errors, and at the computed omegas RS (same interpolation)
    and 1RSB with errors; the empirical bracket's alpha_c when there is one."""
    import numpy as np
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    t = rs["thresholds"]
    w_all = np.asarray(t["omega"], float)
    a_all = np.asarray(t["alpha_c"], float)
    e_all = np.asarray(t["alpha_c_err"], float)
    fig = Figure(figsize=(11.5, 4.2))
    ax, ax2 = fig.subplots(1, 2, gridspec_kw=dict(wspace=0.32))
    ok = np.isfinite(a_all)
    ax.fill_between(w_all[ok], a_all[ok] - e_all[ok], a_all[ok] + e_all[ok], color="0.8", label="RS diagram, 95%")
    ax.plot(w_all[ok], a_all[ok], "k-", lw=1)
    w = np.asarray(thresholds["omega"], float)
    ax.errorbar(w - 0.004, thresholds["alpha_c_rs"], thresholds["alpha_c_rs_err"], fmt="o", color="C0", capsize=3,
                ms=4, label="RS (two grid points)")
    ax.errorbar(w + 0.004, thresholds["alpha_c_1rsb"], thresholds["alpha_c_1rsb_err"], fmt="s", color="C3",
                capsize=3, ms=4, label="1RSB positional, RS semantic")
    if bracket is not None:
        ax.errorbar([bracket["omega"]], [bracket["alpha_c"]], [bracket["alpha_c_err"]], fmt="D", color="C2",
                    capsize=3, ms=5, label="empirical bracket (d -> inf)")
    ax.set_xlabel(r"$\omega$")
    ax.set_ylabel(r"$\alpha_c$")
    ax.set_title(r"$\alpha_c(\omega)$: where the branches' training losses cross")
    ax.legend(fontsize=8)
    shift = np.asarray(thresholds["alpha_c_shift"], float)
    ax2.errorbar(w, shift, thresholds["alpha_c_shift_err"], fmt="s", color="C3", capsize=3)
    ax2.axhline(0.0, color="k", lw=0.8)
    ax2.errorbar(w + 0.006, np.zeros_like(w), thresholds["alpha_c_rs_err"], fmt="none", color="C0", capsize=3,
                 label="RS alpha_c's own error")
    ax2.set_xlabel(r"$\omega$")
    ax2.set_ylabel(r"$\alpha_c^{1RSB} - \alpha_c^{RS}$")
    ax2.set_title("shift of alpha_c by 1RSB of the positional branch")
    ax2.legend(fontsize=8)
    return save_figure(fig, path)


def run(args) -> int:
    import time

    import numpy as np

    from phasejax.io import atomic_write_json, read_json, write_csv
    from phasejax.theory import make_params
    from phasejax.theory.rsb import RSBConfig, attention_replicon, attention_rule, paired_difference

    refuse_duplicates(args.omegas, "--omegas")
    refuse_duplicates(args.ys, "--ys")
    rs = read_rs(rs_dir_from(args))
    plan = [(omega,) + bracketing_alphas(rs, omega) for omega in args.omegas]     # refuse before any compute
    guard_output_files(args.out, args.overwrite, FILES)
    cfg = rs["config"]
    A = np.asarray(cfg["A"], float).reshape(2, 2)
    points, thresholds = [], {k: [] for k in THRESHOLD_COLUMNS}
    started = time.time()
    for omega, a_lo, a_hi, rows in plan:
        de, dt, ys_best, reps, de_sem = {}, {}, {}, {}, {}
        for alpha in (a_lo, a_hi):
            params = make_params(alpha, omega, sigma=cfg["sigma"], lam=cfg["lam"], A=A)
            rule = attention_rule(params, log2_n=args.log2_n, n_replicas=args.replicas, inner_order=args.inner_order)
            config = RSBConfig(max_iter=args.max_iter)
            branches = ("positional", "semantic") if args.semantic else ("positional",)
            for branch in branches:
                rs_res, fixed, best = solve_scan(params, rs_start(rs, omega, alpha, branch), rule, args.ys,
                                                 args.delta0, config, branch)
                rep_rs = attention_replicon(params, rs_res, rule.rs())
                rep_best = attention_replicon(params, best, rule)
                points.append(point_row(omega, alpha, branch, "rs", rs_res, rs_res, rep_rs))
                for y, f in zip(args.ys, fixed):
                    points.append(point_row(omega, alpha, branch, f"1rsb_y{y:g}", f, rs_res,
                                            rep_best if f is best else None))
                points.append(point_row(omega, alpha, branch, "1rsb_scan_max", best, rs_res, rep_best))
                d, d_err = paired_difference(best, rs_res, "phi")  # the ground energy is Phi at its maximum over y
                if branch == "semantic":
                    de_sem[alpha] = (float(d), float(d_err))
                    continue
                de[alpha] = (float(d), float(d_err))
                dt[alpha] = float(np.asarray(best.test_error, np.float64) - np.asarray(rs_res.test_error, np.float64))
                ys_best[alpha] = float(best.y)
                reps[alpha] = rep_best
                print(f"omega = {omega:g}, alpha = {alpha:g}, {branch}: scan max at y = {float(best.y):.4g} "
                      f"({best.status_name}), Delta = {float(best.delta):.3g}, Sigma = {float(best.complexity):.2g}, "
                      f"delta e_t = {d:.3g} +- {d_err:.2g}, replicon within {float(rep_best.within):.3g} "
                      f"(jump {float(rep_best.within_jump):.2g}), between {float(rep_best.between):.3g} "
                      f"({time.time() - started:.0f} s)", flush=True)
        lo, hi = 0, 1
        e_pos = [float(rows["e_positional"][k]) for k in (lo, hi)]
        e_pos_err = [float(rows["e_positional_err"][k]) for k in (lo, hi)]
        e_sem = [float(rows["e_semantic"][k]) for k in (lo, hi)]
        e_sem_err = [float(rows["e_semantic_err"][k]) for k in (lo, hi)]
        d_rs = [e_sem[k] - e_pos[k] for k in (lo, hi)]
        d_rs_err = [float(np.hypot(e_sem_err[k], e_pos_err[k])) for k in (lo, hi)]
        sem = [de_sem.get(a, (0.0, 0.0)) for a in (a_lo, a_hi)]
        corr = [(de[a][0] - s[0], float(np.hypot(de[a][1], s[1]))) for a, s in zip((a_lo, a_hi), sem)]
        d_1 = [d_rs[k] - corr[k][0] for k in (lo, hi)]
        d_1_err = [float(np.hypot(d_rs_err[k], corr[k][1])) for k in (lo, hi)]
        ac_rs, ac_rs_err = crossing(a_lo, a_hi, d_rs[0], d_rs[1], d_rs_err[0], d_rs_err[1])
        ac_1, ac_1_err = crossing(a_lo, a_hi, d_1[0], d_1[1], d_1_err[0], d_1_err[1])
        # the shift alone: the RS errors are common to both crossings, the corrections' errors are not
        shift_err = crossing(a_lo, a_hi, d_rs[0] - corr[0][0], d_rs[1] - corr[1][0], corr[0][1], corr[1][1])[1]
        t = rs["thresholds"]
        ti = int(np.flatnonzero(np.isclose(np.asarray(t["omega"], float), omega))[0])
        row = dict(omega=omega, alpha_lo=a_lo, alpha_hi=a_hi, e_positional_rs_lo=e_pos[0], e_positional_rs_hi=e_pos[1],
                   delta_e_rsb_lo=de[a_lo][0], delta_e_rsb_lo_err=de[a_lo][1], delta_e_rsb_hi=de[a_hi][0],
                   delta_e_rsb_hi_err=de[a_hi][1], delta_test_error_rsb_lo=dt[a_lo], delta_test_error_rsb_hi=dt[a_hi],
                   y_rsb_lo=ys_best[a_lo], y_rsb_hi=ys_best[a_hi],
                   replicon_within_lo=float(reps[a_lo].within), replicon_within_hi=float(reps[a_hi].within),
                   replicon_within_jump_lo=float(reps[a_lo].within_jump),
                   replicon_within_jump_hi=float(reps[a_hi].within_jump),
                   replicon_between_lo=float(reps[a_lo].between), replicon_between_hi=float(reps[a_hi].between),
                   delta_e_semantic_lo=sem[0][0] if args.semantic else float("nan"),
                   delta_e_semantic_lo_err=sem[0][1] if args.semantic else float("nan"),
                   delta_e_semantic_hi=sem[1][0] if args.semantic else float("nan"),
                   delta_e_semantic_hi_err=sem[1][1] if args.semantic else float("nan"),
                   e_positional_1rsb_lo=e_pos[0] + de[a_lo][0], e_positional_1rsb_hi=e_pos[1] + de[a_hi][0],
                   e_semantic_rs_lo=e_sem[0], e_semantic_rs_hi=e_sem[1],
                   jump_semantic_lo=float(rows["replicon_jump_semantic"][0]),
                   jump_semantic_hi=float(rows["replicon_jump_semantic"][1]), alpha_c_rs=ac_rs,
                   alpha_c_rs_err=ac_rs_err, alpha_c_1rsb=ac_1, alpha_c_1rsb_err=ac_1_err, alpha_c_shift=ac_1 - ac_rs,
                   alpha_c_shift_err=shift_err, alpha_c_rs_diagram=float(t["alpha_c"][ti]),
                   alpha_c_rs_diagram_err=float(t["alpha_c_err"][ti]))
        for k in THRESHOLD_COLUMNS:
            thresholds[k].append(row[k])
        print(f"omega = {omega:g}: alpha_c RS {ac_rs:.4f} +- {ac_rs_err:.4f}, 1RSB {ac_1:.4f} +- {ac_1_err:.4f} "
              f"(shift {ac_1 - ac_rs:.2g} +- {shift_err:.2g})", flush=True)
    cols = {k: [p[k] for p in points] for k in POINT_COLUMNS}
    paths = [write_csv(os.path.join(args.out, "rsb_points.csv"), cols, list(POINT_COLUMNS)),
             write_csv(os.path.join(args.out, "rsb_thresholds.csv"), thresholds, list(THRESHOLD_COLUMNS))]
    bracket = None
    bpath = os.path.join(args.out, "bracket_summary.json")
    if os.path.exists(bpath):
        b = read_json(bpath, kind=dict)
        ac = (b.get("alpha_c") or {})
        if ac.get("alpha_c") is not None:
            bracket = dict(omega=float(b.get("omega", 0.3)), alpha_c=float(ac["alpha_c"]),
                           alpha_c_err=float(ac.get("alpha_c_err") or 0.0))
    summary = dict(
        what=("one-step RSB at zero temperature of the positional branch against RS on the same nested rule: fixed-y "
              "solves on the scan ys, the state of highest Phi standing for the ground state (Phi at its maximum "
              "over y); delta e = Phi(1RSB) - Phi(RS) from the paired replicas, added to the RS diagram's "
              "positional e_t; the semantic branch is taken RS unless semantic is true (its jump mass at the two "
              "alphas is listed: RS is exact for it only where that is zero); the replicons of the chosen state; "
              "alpha_c linear between the two alphas of the RS grid"),
        rule=dict(outer="scrambled Sobol over (xi, eta)", log2_n=args.log2_n, replicas=args.replicas,
                  inner="Gauss-Hermite over z", inner_order=args.inner_order),
        starts=dict(ys=args.ys, delta0=args.delta0), semantic=bool(args.semantic), max_iter=args.max_iter,
        rs_dir=rs_dir_from(args), config=cfg,
        thresholds=[{k: thresholds[k][i] for k in THRESHOLD_COLUMNS} for i in range(len(args.omegas))],
        bracket=bracket, seconds=round(time.time() - started, 1), run=dict(environment=flags.environment(),
                                                                           command=flags.command_line()))
    paths.append(atomic_write_json(os.path.join(args.out, "rsb_summary.json"), summary))
    paths.append(plot_boundaries(thresholds, rs, bracket, os.path.join(args.out, "rsb.png")))
    flags.print_paths(paths)
    bad = [p for p in points if p["status"] != "converged"]
    return flags.finish(NAME, None if not bad else f"{len(bad)} of {len(points)} solves did not converge")
