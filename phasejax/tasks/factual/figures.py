"""Figures of a factual-recall experiment (`plot_factual_figures`: all three of a `FactualResult`)."""

from __future__ import annotations

import math
import os

import numpy as np

from phasejax.tasks.factual.data import MODEL_KINDS, model_kind
from phasejax.tasks.factual.result import FactualResult


# ----------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------

_COLORS = {MODEL_KINDS[0]: "C0", MODEL_KINDS[1]: "C3"}


def _num(x) -> float:
    """A summary number (`None` written for NaN) as a float."""
    return float("nan") if x is None else float(x)


def plot_learning_curves(result: FactualResult, path: str) -> str:
    """Loss (top) and accuracy / mass on `A_r` (bottom) against steps, per model, with `log |A_r|` and `log |A|`.

    Curves with other `|A_r|` (`extra_attributes`) are drawn in the top panel with their own `log |A_r|` lines.
    """
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    c, s = result.curves, result.summary
    ct = s["curve_task"]
    D0 = ct["n_attributes"]
    fig = Figure(figsize=(8.4, 7.6))
    ax1, ax2 = fig.subplots(2, 1, sharex=True, gridspec_kw=dict(hspace=0.06, height_ratios=(1.5, 1)))
    per_run = {r["run"]: r for r in s["plateau"]["per_run"]}
    extra_styles = ["C2", "C4", "C5", "C6"]
    for gi, ((D, mk), group) in enumerate(_curve_groups(c).items()):
        main = D == D0
        color = _COLORS[mk] if main else extra_styles[gi % len(extra_styles)]
        runs = group
        t = c["step"][c["run"] == runs[0]] + 1
        L = np.stack([c["loss"][c["run"] == r] for r in runs])
        sel0 = c["run"] == runs[0]
        d, m, h = int(c["d"][sel0][0]), int(c["m"][sel0][0]), int(c["n_heads"][sel0][0])
        label = f"{mk} (d={d}, m={m}, H={h}), |A_r|={D}; {len(runs)} seeds"
        for row in L:
            ax1.plot(t, row, color=color, lw=0.6, alpha=0.35)
        ax1.plot(t, L.mean(0), color=color, lw=2 if main else 1.4, label=label)
        for r in runs:
            pr = per_run.get(int(r))
            if pr and pr["found"]:
                ax1.plot(pr["step"] + 1, pr["plateau_loss"], "o", ms=6, mfc="none", mew=1.2, color=color)
        if not main:
            ax1.axhline(math.log(D), color=color, ls="--", lw=0.9)
            continue
        acc = np.stack([c["accuracy"][c["run"] == r] for r in runs]).mean(0)
        mass = np.stack([c["mass_A_r"][c["run"] == r] for r in runs]).mean(0)
        ax2.plot(t, acc, color=color, lw=2, label=f"accuracy, {mk}")
        ax2.plot(t, mass, color=color, lw=1.5, ls="--", label=f"probability on $A_r$, {mk}")
    ax1.axhline(s["log_A_r"], color="k", ls="--", lw=1,
                label=rf"$\log|A_r|$ = {s['log_A_r']:.3f}: relation only (uniform on $A_r$)")
    ax1.axhline(s["log_A"], color="gray", ls=":", lw=1,
                label=rf"$\log|A|$ = {s['log_A']:.3f}: uniform on all attributes")
    ax1.set_xscale("log")
    ax1.set_ylabel("cross-entropy (nats)")
    ax1.set_ylim(bottom=0)
    ax1.legend(fontsize=7, loc="lower left", framealpha=0.92)
    ax1.set_title(f"Factual recall, S={ct['n_subjects']}, R={ct['n_relations']}, |A_r|={D0}, T={ct['length']}, "
                  f"{ct['n_noise']} noise tokens; online {s['curve_training']['optimizer']}, batch "
                  f"{s['curve_training']['batch_size']}, lr {s['curve_training']['learning_rate']:g}\n"
                  f"thin: seeds, thick: seed mean, circles: plateau (flattest interior point); |A_r|={D0}: "
                  f"plateau {_num(s['plateau_loss']):.3f} ± {_num(s['plateau_loss_se']):.3f} (s.e.) vs log|A_r| "
                  f"{s['log_A_r']:.3f}", fontsize=8.5)
    ax2.axhline(1.0 / D0, color="k", ls="--", lw=1, label=rf"$1/|A_r|$ = {1 / D0:.2f}: guessing within $A_r$")
    ax2.set_xlabel("training step (each point: mean of the fresh-batch metrics over a log-spaced window)")
    ax2.set_ylabel(f"fraction (|A_r|={D0})")
    ax2.set_ylim(-0.02, 1.02)
    ax2.legend(fontsize=7, loc="center right", framealpha=0.92)
    return save_figure(fig, path)


def _curve_groups(c: dict) -> dict:
    groups = {}
    for r in np.unique(c["run"]):
        sel = c["run"] == r
        groups.setdefault((int(c["n_attributes"][sel][0]), str(c["model"][sel][0])), []).append(int(r))
    return dict(sorted(groups.items(), key=lambda kv: (kv[0][0], MODEL_KINDS.index(kv[0][1]))))


def _log_index(values, grid) -> np.ndarray:
    """Position of `values` on a categorical axis whose ticks are `grid`, interpolated in log scale."""
    return np.interp(np.log(np.asarray(values, float)), np.log(np.asarray(grid, float)), np.arange(len(grid)))


def plot_recall_phase_diagram(result: FactualResult, path: str) -> str:
    """Seed-mean recall over (parameters, facts), one panel per sweep family, with the capacity `N*` curve."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    r, cap = result.runs, result.capacity
    thr = result.summary["capacity_threshold"]
    fams = list(dict.fromkeys(np.asarray(r["family"]).astype(str)))
    fig = Figure(figsize=(4.6 * len(fams) + 1.2, 5.4))
    axes = fig.subplots(1, len(fams), squeeze=False)[0]
    mesh = None
    for ax, fam in zip(axes, fams):
        sel = np.asarray(r["family"]).astype(str) == fam
        params = np.unique(r["n_params"][sel])
        facts = np.unique(r["n_facts"][sel])
        acc = np.full((facts.size, params.size), np.nan)
        for i, nf in enumerate(facts):
            for j, npar in enumerate(params):
                s = sel & (r["n_facts"] == nf) & (r["n_params"] == npar)
                if np.any(s):
                    acc[i, j] = np.asarray(r["accuracy"][s], float).mean()
        mesh = ax.pcolormesh(np.arange(params.size), np.arange(facts.size), acc, shading="nearest",
                             cmap="viridis", vmin=0, vmax=1)
        for i in range(facts.size):
            for j in range(params.size):
                if np.isfinite(acc[i, j]):
                    ax.text(j, i, f"{acc[i, j]:.2f}", ha="center", va="center", fontsize=7,
                            color="w" if acc[i, j] < 0.6 else "k")
        cs = np.asarray(cap["family"]).astype(str) == fam
        order = np.argsort(cap["n_params"][cs])
        xs = _log_index(cap["n_params"][cs][order], params)
        ys = _log_index(cap["facts_stored"][cs][order], facts)
        cens = np.asarray(cap["censored"][cs][order]).astype(str)
        ok = cens == "none"
        ax.plot(xs[ok], ys[ok], "r-o", lw=2, ms=5, label=f"facts stored N*: seed-mean recall crosses {thr:g}")
        if np.any(cens == "above"):
            ax.plot(xs[cens == "above"], np.full(np.sum(cens == "above"), facts.size - 0.5), "r^", ms=9,
                    clip_on=False, label="N* above the grid")
        if np.any(cens == "below"):
            ax.plot(xs[cens == "below"], np.full(np.sum(cens == "below"), -0.5), "rv", ms=9, clip_on=False,
                    label="N* below the grid")
        labels = []
        for npar in params:
            s = sel & (r["n_params"] == npar)
            labels.append(f"{npar}\nd={int(r['d'][s][0])} m={int(r['m'][s][0])}\nH={int(r['n_heads'][s][0])}")
        ax.set_xticks(np.arange(params.size), labels, fontsize=6.5)
        ax.set_yticks(np.arange(facts.size), [str(int(f)) for f in facts])
        ax.set_xlabel("trainable parameters (architecture)")
        ax.set_ylabel("facts S·R")
        varied = result.summary.get("facts_vs_params_fit", {}).get(fam, {}).get("varied", "")
        ax.set_title(f"{fam}: {model_kind(int(r['m'][sel][0]))}, {varied} varied\nrecall (mean over seeds)",
                     fontsize=9)
        ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.24), ncol=1, frameon=False)
    cb = fig.colorbar(mesh, ax=list(axes), fraction=0.03, pad=0.02)
    cb.set_label("recall accuracy (all facts × random contexts)")
    return save_figure(fig, path)


def plot_facts_vs_params(result: FactualResult, path: str) -> str:
    """Facts stored (`N*`) against parameters, log-log, per sweep family, with the fitted power laws."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    s, cap = result.summary, result.capacity
    fig = Figure(figsize=(6.6, 4.8))
    ax = fig.subplots()
    fams = list(dict.fromkeys(np.asarray(cap["family"]).astype(str)))
    markers = ["o", "s", "D", "^", "v"]
    xs_all, ys_all = [], []
    for k, fam in enumerate(fams):
        sel = np.asarray(cap["family"]).astype(str) == fam
        x = np.asarray(cap["n_params"][sel], float)
        y = np.asarray(cap["facts_stored"][sel], float)
        e = np.nan_to_num(np.asarray([_num(v) for v in cap["facts_stored_se"][sel]], float))
        cens = np.asarray(cap["censored"][sel]).astype(str)
        color = f"C{k}"
        fit = s["facts_vs_params_fit"].get(fam, {})
        lab = f"{fam} ({model_kind(int(cap['m'][sel][0]))}, {fit.get('varied', '')} varied)"
        ok = cens == "none"
        if fit and np.isfinite(_num(fit.get("exponent"))):
            lab += f": slope {fit['exponent']:.2f} [{_num(fit['ci_low']):.2f}, {_num(fit['ci_high']):.2f}]"
            xx = np.geomspace(x[ok].min(), x[ok].max(), 50)                   # over the fitted points only
            ax.plot(xx, np.exp(fit["intercept"]) * xx ** fit["exponent"], color=color, lw=1)
        ax.errorbar(x[ok], y[ok], yerr=e[ok], fmt=markers[k % len(markers)], color=color, capsize=3, label=lab)
        if np.any(~ok):
            ax.plot(x[cens == "above"], y[cens == "above"], "^", color=color, ms=8, mfc="none")
            ax.plot(x[cens == "below"], y[cens == "below"], "v", color=color, ms=8, mfc="none")
        xs_all.extend(x)
        ys_all.extend(y[ok])
    if xs_all and ys_all:
        xx = np.geomspace(min(xs_all), max(xs_all), 10)
        c0 = np.exp(np.median(np.log(ys_all)) - np.log(np.median(xs_all)))
        ax.plot(xx, c0 * xx, "k:", lw=1, label="slope 1 (facts ∝ parameters)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("trainable parameters  4 H d_h d + 2 m d")
    ax.set_ylabel("facts stored N* (facts S·R)")
    steps = s.get("training", {}).get("steps", "?")
    ax.set_title(f"Facts stored N* (seed-mean recall crosses {s['capacity_threshold']:g}) against parameter count, "
                 f"{steps} online steps per run\nerror bars: s.e. of the per-seed N*; brackets: 95% interval of the "
                 "slope (seeds resampled); open triangles: N* outside the grid", fontsize=8)
    ax.legend(fontsize=7, loc="upper left", framealpha=0.9)
    return save_figure(fig, path)


def plot_factual_figures(result: FactualResult, out_dir: str) -> list[str]:
    """Write `curves.png`, `phase_diagram.png`, `facts_vs_params.png` of `result` into `out_dir`; returns the
    paths."""
    return [plot_learning_curves(result, os.path.join(out_dir, "curves.png")),
            plot_recall_phase_diagram(result, os.path.join(out_dir, "phase_diagram.png")),
            plot_facts_vs_params(result, os.path.join(out_dir, "facts_vs_params.png"))]
