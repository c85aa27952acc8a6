"""The figures of an extension: theory lines with 95% quadrature bands, seed means with standard errors."""

from __future__ import annotations

import numpy as np

from phasejax.extensions._tables import ExtensionResult, seed_means
from phasejax.extensions._thresholds import resolved_rows

INIT_COLOURS = {"positional": "tab:blue", "semantic": "tab:red", "mixed": "tab:green"}


def finite_err(err) -> np.ndarray:
    """Error bars for plotting: non-finite half-widths (undetermined) drawn as 0."""
    err = np.asarray(err, float)
    return np.where(np.isfinite(err), err, 0.0)


def draw_band(ax, alpha, value, err, *, color, label=None, style="-", band_alpha: float = 0.25, band_lw=0,
              **kw) -> None:
    """A theory curve sorted by alpha (`ax.plot(..., style, **kw)`) with its 95% quadrature band (opacity
    `band_alpha`, edge width `band_lw`, None: matplotlib's; NaN errors drawn as none)."""
    a, v, e = (np.asarray(x, float) for x in (alpha, value, err))
    o = np.argsort(a, kind="stable")
    ax.plot(a[o], v[o], style, color=color, label=label, **kw)
    edge = {} if band_lw is None else dict(lw=band_lw)
    ax.fill_between(a[o], (v - finite_err(e))[o], (v + finite_err(e))[o], color=color, alpha=band_alpha, **edge)


def branch_figure(result: ExtensionResult, *, title: str, inits, keys=("train_loss", "test_error"),
                  labels=("training loss $e_t$", "test error $\\epsilon_g$"), thresholds: bool = False):
    """Theory lines (with 95% quadrature-error bands) per init and omega of a `continuation_table`, experiment
    markers (seed mean, error bars: standard error over seeds) per d; one column per omega, one row per key.
    With `thresholds`, a last column shows `alpha_c(omega)` (and the tied model's, when `result.thresholds` has
    `alpha_c_tied`) with 95% error bars."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    th, runs = result.theory, result.runs
    omegas = np.unique(th["omega"])
    ncol = len(omegas) + int(thresholds)
    fig = Figure(figsize=(4.6 * ncol + 4.0, 3.6 * len(keys)), layout="constrained")
    axes = fig.subplots(len(keys), ncol, squeeze=False)
    dims = np.unique(runs["d"]) if len(runs.get("d", [])) else []
    markers = ["o", "s", "^", "D"]
    usable, e_t_unc = resolved_rows(th)
    conv = th["converged"].astype(bool)
    for j, om in enumerate(omegas):
        for i, key in enumerate(keys):
            ax = axes[i, j]
            for name in inits:
                c = INIT_COLOURS.get(name, None)
                at = (th["omega"] == om) & (th["init"] == name)
                near = at & usable & ~conv & np.isfinite(th[key])
                if near.any():   # stopped at the iteration cap near its fixed point: drawn with its error bars
                    err = e_t_unc[near] if key == "train_loss" else th[f"{key}_err"][near]
                    ax.errorbar(th["alpha"][near], th[key][near], yerr=err, fmt="x", color=c, ms=7, capsize=2,
                                label=f"SE, {name} init, stopped near its fixed point (+- solver and quadrature)")
                sel = at & conv
                if not sel.any():
                    continue
                draw_band(ax, th["alpha"][sel], th[key][sel], th[f"{key}_err"][sel], color=c, style=".-",
                          label=f"theory, {name} init (converged solves)")
                for k, d in enumerate(dims):
                    rs = {kk: vv[(runs["omega"] == om) & (runs["init"] == name) & (runs["d"] == d)]
                          for kk, vv in runs.items()}
                    if not len(rs["alpha"]):
                        continue
                    sm = seed_means(rs, key, ("alpha",), sort=True)
                    off = (k - (len(dims) - 1) / 2) * 0.02
                    ax.errorbar(sm["alpha"] + off, sm[f"{key}_mean"], yerr=sm[f"{key}_sem"], fmt=markers[k % 4],
                                color=c, mfc="white" if k == 0 else c, ms=5, capsize=2, lw=1,
                                label=f"L-BFGS, {name} init, d={d}")
            ax.set_xlabel(r"sample complexity $\alpha = n/d$")
            ax.set_ylabel(labels[i])
            ax.set_title(f"$\\omega$ = {om:g}")
            ax.grid(alpha=0.3)
    if thresholds:
        gs = axes[0, -1].get_gridspec()
        for ax in axes[:, -1]:
            ax.remove()
        ax = fig.add_subplot(gs[:, -1])
        ts = result.thresholds
        w = np.asarray(ts["omega"], float)
        for key, c, lab in (("alpha_c", "k", "this model"), ("alpha_c_tied", "0.55", "tied model (main job)")):
            if key in ts:
                v, e = np.asarray(ts[key], float), np.asarray(ts[f"{key}_err"], float)
                ax.errorbar(v, w, xerr=finite_err(e), fmt="o-", color=c, capsize=3, label=f"$\\alpha_c$, {lab}")
        ax.set(xlabel=r"$\alpha$", ylabel=r"$\omega$", title=r"$\alpha_c(\omega)$: $e_t$ of the branches cross")
        ax.set_ylim(0, max(0.4, float(np.nanmax(w)) + 0.1))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    seen = {}
    for ax in axes[:, :len(omegas)].ravel():
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    far = int(np.sum(~usable & ~conv))
    if far:     # solves that stopped far from any fixed point have no meaningful value: not drawn, but counted
        seen[f"not drawn: {far} SE solve(s) stopped far from a fixed point (theory.csv)"] = Line2D([], [], ls="none")
    fig.legend(list(seen.values()), list(seen), loc="outside right center", fontsize=7)
    fig.suptitle(title + "\n(bands: 95% quadrature error; markers: mean over seeds, bars: standard error)",
                 fontsize=10)
    return fig
