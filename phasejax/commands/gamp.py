"""GAMP on finite data against the converged state evolution, both branches, both Onsager terms.

    phasejax gamp                         # CPU preset: d = 100, 200, 400; 4 seeds; 80 iterations; float64
    phasejax gamp --preset gpu            # d = 250 ... 2000; 10 seeds; 200 iterations (not run yet)
    phasejax gamp --replot                # redraw gamp.png, summary.json and the verdict columns from <out>/*.csv

At alpha, omega (default the paper's check point 2, 0.3; lambda = 0.01) GAMP
(`phasejax.empirics.gamp`) runs from a positional-side and a semantic-side
init on `seeds` data sets per dimension, once with the pointwise Onsager term
and once with the across-sample Stein one (one vmapped, chunked, resumable
sweep per (d, Onsager form)). Compared with the converged SE fixed point of
each branch (`phasejax.theory.solve_state_evolution`, cached in
`<out>/se_reference.json`). Writes --out (default runs/gamp/; the committed results with
`--out results/gamp --overwrite`):
fixed_points.csv (per run: status, the verdict converged / unstable /
diverged with the measured instability, iterations, final and tail-averaged
overlaps, tail residual, basin-flip fraction and share, the SE branch's
replicon at that point), trajectories.csv
(per run and iteration), gamp_config.json, se_reference.json, summary.json
(verdicts and convergence counts, the replicons, gaps vs d with standard errors and fitted exponents,
the chattering statistics) and gamp.png.
"""

from __future__ import annotations

import argparse
import os
import time

from phasejax.commands.argtypes import (
    add_output,
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
    ap.add_argument("--replot", action="store_true", help="only redraw gamp.png and summary.json from --out")
    add_run_options(ap, chunk_size=8)


def se_references(params, path: str) -> dict:
    """Converged SE fixed points of both branches (Stein form), cached in `path` (JSON) keyed by the parameters."""
    import numpy as np

    from phasejax.io import atomic_write_json, read_json

    key = dict(alpha=float(np.asarray(params.alpha)), omega=float(np.asarray(params.omega)),
               lam=float(np.asarray(params.lam)))
    if os.path.exists(path):
        cached = read_json(path)
        if cached.get("params") == key:
            if all("replicon" in cached.get(b, {}) for b in ("positional", "semantic")):
                return cached
            for branch in ("positional", "semantic"):     # a reference written before the replicon: add it
                cached[branch].update(branch_replicon(params, cached[branch]))
            atomic_write_json(path, cached)
            return cached
    import phasejax
    from phasejax.theory import solve_state_evolution

    out = dict(params=key)
    with phasejax.float64_scope():
        for branch in ("positional", "semantic"):
            res = solve_state_evolution(params, branch)
            out[branch] = {k: float(np.asarray(getattr(res, k)).ravel()[0])
                           for k in ("q", "m", "theta", "V", "q_err", "m_err", "theta_err", "train_loss",
                                     "test_error", "stability", "subspace_gain")}
            out[branch]["status"] = res.status_name
            out[branch].update(branch_replicon(params, out[branch]))
    atomic_write_json(path, out)
    return out


def branch_replicon(params, ref: dict) -> dict:
    """The replicon of an SE reference entry (`phasejax.theory.replicon`, `r = t = K = 1`, overlaps from the
    per-token `q, m, V, theta`): `replicon` at the reference smoothing with its error, its regular part, the jump
    strength and whether RS is stable at zero smoothing (`rs_stable`)."""
    import jax.numpy as jnp
    import numpy as np

    import phasejax
    from phasejax.theory import Overlaps, default_scheme
    from phasejax.theory.replicon import replicon, rs_stable

    s2 = float(np.asarray(params.sigma)[0]) ** 2
    with phasejax.float64_scope():
        ov = Overlaps(q0=jnp.array([[ref["q"] / s2]]), m=jnp.array([[ref["m"]]]), V0=jnp.array([[ref["V"] / s2]]),
                      theta0=jnp.array([[ref["theta"] / s2]]))
        r = replicon(ov, params, default_scheme(params))
        out = dict(replicon=r.value, replicon_err=r.value_err, replicon_regular=r.regular,
                   replicon_regular_err=r.regular_err, replicon_jump=r.jump, replicon_jump_err=r.jump_err,
                   replicon_tie_width=r.tie_width, two_minima=r.two_minima)
        out = {k: float(v) for k, v in out.items()}
        out["rs_stable"] = bool(rs_stable(out["replicon_regular"], out["replicon_jump"], out["replicon_regular_err"]))
    return out


def summarize(sweep, se: dict) -> dict:
    """Convergence counts, relative gaps to the SE vs d (mean, standard error, fitted exponent), chattering."""
    import numpy as np

    c = sweep.columns
    out = dict(verdicts={}, counts={}, critical_points={}, gaps={}, exponents={}, chattering={},
               replicon={b: {k: se[b].get(k) for k in ("replicon", "replicon_err", "replicon_regular",
                                                        "replicon_regular_err", "replicon_jump", "replicon_jump_err",
                                                        "rs_stable")} for b in ("positional", "semantic")},
               notes=dict(verdicts="runs per verdict: converged (stopping criterion or a critical point of R), "
                                   "unstable (neither converged nor diverged: chatters), diverged",
                          replicon="the SE branch's replicon at this point (phasejax.theory.replicon): at the "
                                   "reference smoothing, its regular part, the jump strength; rs_stable: replicon "
                                   "below 1 at zero smoothing",counts="[runs meeting the stopping criterion (relative change < tol), runs]",
                          critical_points="[runs ending at a critical point of R (relative gradient < 1e-6), runs]",
                          gaps="relative RMS gap of the tail-averaged (q, m) (positional) or (q, |theta|) "
                               "(semantic) to the SE; mean and standard error over seeds",
                          chattering="tail residual, basin-flip fraction and flip share: [mean, s.d.] over seeds"))
    for onsager in sorted(set(c["onsager"])):
        for branch in sorted(set(c["branch"])):
            ref = se[branch]
            second = "m" if branch == "positional" else "theta"
            rows = (c["onsager"] == onsager) & (c["branch"] == branch)
            key = f"{onsager}/{branch}"
            dims = sorted(set(c["d"][rows].tolist()))
            out["verdicts"][key] = {str(d): {v: int(np.sum((c["verdict"] == v) & rows & (c["d"] == d)))
                                             for v in ("converged", "unstable", "diverged")} for d in dims}
            out["counts"][key] = {str(d): [int(np.sum((c["status"] == "converged") & rows & (c["d"] == d))),
                                           int(np.sum(rows & (c["d"] == d)))] for d in dims}
            out["critical_points"][key] = {str(d): [int(np.sum((c["grad_norm"] < 1e-6) & rows & (c["d"] == d))),
                                                    int(np.sum(rows & (c["d"] == d)))] for d in dims}
            gaps, chat = {}, {}
            for d in dims:
                sel = rows & (c["d"] == d)
                dq = (c["q_tail_mean"][sel] - ref["q"]) / ref["q"]
                d2 = (np.abs(c[f"{second}_tail_mean"][sel]) - abs(ref[second])) / abs(ref[second])
                g = np.sqrt(0.5 * (dq**2 + d2**2))
                k = len(g)
                gaps[str(d)] = dict(mean=float(np.mean(g)), stderr=float(np.std(g, ddof=1) / np.sqrt(k)) if k > 1
                                    else float("nan"), q_rel=float(np.mean(dq)), second_rel=float(np.mean(d2)), runs=k)
                chat[str(d)] = {s: [float(np.mean(c[f"{s}_tail"][sel])), float(np.std(c[f"{s}_tail"][sel]))]
                                for s in ("residual", "flip_fraction", "flip_share")}
            out["gaps"][key] = gaps
            out["chattering"][key] = chat
            if len(dims) >= 2:
                x, y = np.log(dims), np.log([gaps[str(d)]["mean"] for d in dims])
                A = np.stack([x, np.ones_like(x)], 1)
                coef, *_ = np.linalg.lstsq(A, y, rcond=None)
                resid = y - A @ coef
                se_slope = (float(np.sqrt(np.sum(resid**2) / (len(x) - 2) / np.sum((x - x.mean()) ** 2)))
                            if len(x) > 2 else float("nan"))
                out["exponents"][key] = dict(slope=float(coef[0]), stderr=se_slope)
    return out


def plot(sweep, se: dict, summary: dict, path: str) -> str:
    """Four panels: q per iteration, residual and flip fraction per iteration, gap vs d, tail residual vs d."""
    import numpy as np
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    c, h = sweep.columns, sweep.histories
    d_max = int(np.max(c["d"]))
    fig = Figure(figsize=(13, 9.5), layout="constrained")
    axes = fig.subplots(2, 2)
    colors = {"positional": "tab:blue", "semantic": "tab:red"}
    styles = {"stein": "-", "pointwise": ":"}
    ax = axes[0, 0]
    for i in np.flatnonzero(c["d"] == d_max):
        b, o = c["branch"][i], c["onsager"][i]
        ax.plot(h["q_hist"][i], color=colors[b], ls=styles[o], lw=0.9, alpha=0.7)
    for b in colors:
        ax.axhline(se[b]["q"], color=colors[b], ls="--", lw=2, label=f"SE {b}: q = {se[b]['q']:.4f}")
    ax.plot([], [], "k-", label="GAMP, Stein Onsager"); ax.plot([], [], "k:", label="GAMP, pointwise Onsager")
    ax.set(xlabel="iteration", ylabel=r"$q = \sigma^2 Q^\top Q / d$",
           title=f"(a) overlap q per iteration, d = {d_max} (one line per seed)")
    ax.legend(fontsize=8, loc="center right")
    ax = axes[0, 1]
    for i in np.flatnonzero((c["d"] == d_max) & (c["onsager"] == "stein")):
        b = c["branch"][i]
        ax.semilogy(np.arange(1, h["residual"].shape[1] + 1), h["residual"][i], color=colors[b], lw=0.8, alpha=0.7)
        ax.semilogy(np.arange(1, h["residual"].shape[1] + 1), np.maximum(h["flip_fraction"][i], 1e-4),
                    color=colors[b], lw=0.8, ls="--", alpha=0.7)
    ax.plot([], [], "k-", label=r"residual $\|Q_{new} - Q\| / \|Q\|$")
    ax.plot([], [], "k--", label="fraction of samples jumping basin (floored at 1e-4)")
    for b in colors:
        ax.plot([], [], color=colors[b], label=f"{b} init")
    ax.set(xlabel="iteration", ylabel="per-iteration value (log)",
           title=f"(b) Stein Onsager, d = {d_max}: residual and basin flips")
    ax.legend(fontsize=8, loc="lower left")
    ax = axes[1, 0]
    for key, gaps in summary["gaps"].items():
        o, b = key.split("/")
        dims = np.array(sorted(int(d) for d in gaps))
        m = np.array([gaps[str(d)]["mean"] for d in dims])
        e = np.array([gaps[str(d)]["stderr"] for d in dims])
        shift = 1.03 if o == "stein" else 0.97
        slope = summary["exponents"].get(key, {}).get("slope", float("nan"))
        ax.errorbar(dims * shift, m, yerr=e, color=colors[b], ls=styles[o], marker="o", capsize=3,
                    label=f"{b}, {o} (slope {slope:.2f})")
    dims = np.array(sorted(set(c["d"].tolist())))
    ref = summary["gaps"][next(iter(summary["gaps"]))][str(dims[0])]["mean"]
    ax.loglog(dims, ref * (dims / dims[0]) ** -0.5, "k--", lw=1, label=r"$\propto d^{-1/2}$")
    ax.set(xscale="log", yscale="log", xlabel="dimension d", ylabel="relative RMS gap to the SE fixed point",
           title="(c) relative gap of tail-averaged overlaps to the SE (mean +- s.e.)")
    ax.legend(fontsize=8, loc="lower left")
    ax = axes[1, 1]
    floor = 1e-9
    for key, chat in summary["chattering"].items():
        o, b = key.split("/")
        dd = np.array(sorted(int(d) for d in chat))
        shift = 1.03 if o == "stein" else 0.97
        for stat, marker, alpha in (("residual", "s", 1.0), ("flip_fraction", "^", 0.5)):
            mean = np.array([chat[str(d)][stat][0] for d in dd])
            sd = np.array([chat[str(d)][stat][1] for d in dd])
            shown = np.maximum(mean, floor)
            yerr = np.stack([np.minimum(sd, shown - floor), sd])
            ax.errorbar(dd * shift, shown, yerr=yerr, color=colors[b], ls=styles[o], marker=marker, capsize=3,
                        alpha=alpha, label=f"{b}, {o}" if stat == "residual" else None)
    ax.plot([], [], "ks", label="tail residual"); ax.plot([], [], "k^", alpha=0.5, label="basin-flip fraction")
    ax.set(xscale="log", yscale="log", xlabel="dimension d", ylabel=f"tail average (last iterations; floored at {floor:g})",
           title="(d) chattering vs d: tail residual and fraction of samples flipping (mean +- s.d.)")
    ax.legend(fontsize=7, loc="center right")
    cfg = sweep.config
    fig.suptitle(f"GAMP vs state evolution at alpha = {cfg['alpha']}, omega = {cfg['omega']}, lambda = {cfg['lam']} "
                 f"(dashed: converged SE)")
    return save_figure(fig, path)


def run(args) -> int:
    import jax.numpy as jnp
    import numpy as np

    from phasejax.empirics.gamp import GAMPSweep, gamp_sweep
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
        sweep = gamp_sweep(params, ds, np.arange(pick(args, "seeds", preset)),
                           onsagers=onsagers, max_iter=pick(args, "max_steps", preset), tail=args.tail,
                           dtype=dtype_from(args), options=run_options_from(args, args.out))
    se_path = os.path.join(args.out, "se_reference.json")
    se = se_references(params, se_path)
    # per run: converged / unstable / diverged, the measured instability and the SE branch's replicon there
    sweep = sweep.with_verdicts({b: se[b] for b in ("positional", "semantic")})
    paths = sweep.write(args.out)
    summary = summarize(sweep, se)
    summary.update(se_reference=se, config=sweep.config, environment=environment(),
                   runtime_s=time.perf_counter() - t0)
    paths += [se_path, atomic_write_json(os.path.join(args.out, "summary.json"), summary),
              plot(sweep, se, summary, os.path.join(args.out, "gamp.png"))]
    for key, counts in summary["verdicts"].items():
        b = key.split("/")[1]
        rep = se[b]
        print(f"{key:22s} " + "; ".join(f"d={d}: " + ", ".join(f"{v} {k}" for v, k in cnt.items() if k)
                                        for d, cnt in counts.items())
              + f" | SE replicon {rep['replicon']:.3g} +- {rep['replicon_err']:.2g} (regular "
                f"{rep['replicon_regular']:.3g}, jump {rep['replicon_jump']:.2g}): RS "
              + ("stable" if rep["rs_stable"] else "unstable"))
    print_paths(paths)
    del jnp
    return 0
