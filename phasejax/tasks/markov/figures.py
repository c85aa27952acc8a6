"""Figures of the Markov-chain sandbox."""

from __future__ import annotations

import numpy as np

from phasejax.tasks.markov.critical import CriticalPointCheck
from phasejax.tasks.markov.sweep import MarkovSweep, reference_losses


# ----------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------


def _cell_grid(cells: list[dict], tied: int, key: str):
    ps = sorted({c["p"] for c in cells})
    qs = sorted({c["q"] for c in cells})
    grid = np.full((len(qs), len(ps)), np.nan)
    for c in cells:
        if c["tied"] == tied:
            grid[qs.index(c["q"]), ps.index(c["p"])] = c[key]
    return np.asarray(ps), np.asarray(qs), grid


def _pq_lines(ax, ps, qs):
    x = np.linspace(0, 1, 50)
    for level, style, lab in ((1.0, "k-", "$p+q=1$ (theory)"), (0.8, "k:", "$p+q=0.8,\\ 1.2$"), (1.2, "k:", None)):
        px = np.interp(x, [0, 1], [ps[0] - 0.5 * _step(ps), ps[-1] + 0.5 * _step(ps)])
        qv = level - px
        ax.plot(px, qv, style, lw=1.2, label=lab)
    ax.set_xlim(ps[0] - 0.5 * _step(ps), ps[-1] + 0.5 * _step(ps))
    ax.set_ylim(qs[0] - 0.5 * _step(qs), qs[-1] + 0.5 * _step(qs))


def _step(v):
    return float(np.min(np.diff(v))) if len(v) > 1 else 0.1


def plot_markov_phase_diagrams(sweep: MarkovSweep, path: str) -> str:
    """Phase diagrams over `(p, q)`: mean `final loss - entropy rate` (log scale) and fraction of seeds stuck at
    `H(pi)`, tied (top) and untied (bottom)."""
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    cells = sweep.summary["cells"]
    tr = sweep.summary["training"]
    n_seeds = max(c["n_seeds"] for c in cells)
    tieds = sorted({c["tied"] for c in cells}, reverse=True)
    fig = Figure(figsize=(10.5, 4.3 * len(tieds)))
    axes = np.asarray(fig.subplots(len(tieds), 2, squeeze=False, gridspec_kw=dict(wspace=0.28, hspace=0.45)))
    floor = 1e-5
    tol = sweep.summary["tol"]
    for i, tied in enumerate(tieds):
        ps, qs, gap = _cell_grid(cells, tied, "mean_gap")
        _, _, stuck = _cell_grid(cells, tied, "fraction_stuck")
        _, _, entropy_gap = _cell_grid(cells, tied, "entropy_gap")
        stuck = np.where(entropy_gap < tol, np.nan, stuck)      # H(pi) and the optimum indistinguishable
        name = "tied ($a = e$)" if tied else "untied"
        axes[i, 1].set_facecolor("0.75")
        ax = axes[i, 0]
        m = ax.pcolormesh(ps, qs, np.clip(gap, floor, None), shading="nearest", cmap="magma",
                          norm=LogNorm(floor, max(0.3, np.nanmax(gap))))
        cb = fig.colorbar(m, ax=ax)
        cb.set_label("final loss $-$ entropy rate (nats, mean over seeds)")
        ax.set_title(f"{name}: excess loss", fontsize=10)
        ax = axes[i, 1]
        m = ax.pcolormesh(ps, qs, stuck, shading="nearest", cmap="RdBu_r", vmin=0, vmax=1)
        for a, p in enumerate(ps):
            for b, q in enumerate(qs):
                if np.isfinite(stuck[b, a]):
                    ax.text(p, q, f"{stuck[b, a]:.1f}", ha="center", va="center", fontsize=7,
                            color="w" if abs(stuck[b, a] - 0.5) > 0.3 else "k")
        cb = fig.colorbar(m, ax=ax)
        cb.set_label(r"fraction of seeds stuck at $H(\pi)$")
        ax.set_title(f"{name}: stuck at the stationary predictor", fontsize=10)
        for ax in axes[i]:
            _pq_lines(ax, ps, qs)
            ax.set_xlabel("$p = P(1 \\mid 0)$")
            ax.set_ylabel("$q = P(0 \\mid 1)$")
            ax.set_aspect("equal")
        for ax in axes[i]:     # below the axes: inside, it would cover cells
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=7, frameon=False)
    fig.suptitle(f"Single-layer transformer on binary Markov chains: {tr['optimizer']} lr={tr['learning_rate']:g}, "
                 f"{tr['steps']} steps, batch {tr['batch_size']}, N={tr['length']}, d={tr['d']}, "
                 f"init std {tr['init_std']:g}, {n_seeds} seeds per cell\n(stuck: final loss within "
                 f"{tol:g} nats of $H(\\pi)$; grey: $H(\\pi) -$ entropy rate < {tol:g}, the two outcomes coincide)",
                 fontsize=9)
    return save_figure(fig, path, dpi=100)


def plot_markov_curves(sweep: MarkovSweep, path: str, cells: list[tuple[float, float]] | None = None) -> str:
    """Training-loss curves (binned, one thin line per seed) of tied and untied runs at a few `(p, q)`, with the
    entropy rate and `H(pi)` levels."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    runs, curves = sweep.runs, sweep.curves
    pq = np.stack([np.asarray(runs["p"], np.float64), np.asarray(runs["q"], np.float64)], -1)
    if cells is None:   # the lowest and the highest p + q of the grid, and one on each side of 1 near it
        uniq = sorted({(float(a), float(b)) for a, b in pq}, key=lambda c: c[0] + c[1])
        below = [c for c in uniq if c[0] + c[1] < 0.95]
        above = [c for c in uniq if c[0] + c[1] > 1.15]
        picks = (uniq[0], below[-1] if below else None, above[0] if above else None, uniq[-1])
        cells = list(dict.fromkeys(c for c in picks if c is not None))
    fig = Figure(figsize=(3.6 * len(cells), 3.9))
    axes = np.atleast_1d(fig.subplots(1, len(cells), sharey=False, gridspec_kw=dict(wspace=0.33)))
    run_idx, steps, loss = np.asarray(curves["run"]), np.asarray(curves["step"]), np.asarray(curves["loss"])
    for ax, (p, q) in zip(axes, cells):
        sel_cell = np.isclose(pq[:, 0], p) & np.isclose(pq[:, 1], q)
        for tied, color, lab in ((1, "C3", "tied"), (0, "C0", "untied")):
            idx = np.flatnonzero(sel_cell & (np.asarray(runs["tied"]) == tied))
            for j, r in enumerate(idx):
                m = run_idx == r
                ax.plot(steps[m], loss[m], color=color, lw=0.8, alpha=0.7, label=f"{lab} (one line per seed)"
                        if j == 0 else None)
        h_rate, h_pi = reference_losses(p, q)
        ax.axhline(float(h_pi), color="k", ls="--", lw=1, label=r"$H(\pi)$ (stationary predictor)")
        ax.axhline(float(h_rate), color="k", ls=":", lw=1, label="entropy rate (optimum)")
        lo, hi = float(h_rate), float(max(h_pi, np.max(loss[np.isin(run_idx, np.flatnonzero(sel_cell))])))
        ax.set_ylim(lo - 0.1 * (hi - lo) - 1e-3, hi + 0.05 * (hi - lo) + 1e-3)
        ax.set_title(f"p = {p:g}, q = {q:g} (p + q = {p + q:g})", fontsize=9)
        ax.set_xlabel("training step")
        ax.set_ylabel("training loss (nats, binned)")
    axes[0].legend(fontsize=7, loc="center right")
    tr = sweep.summary["training"]
    fig.suptitle(f"Training curves ({tr['optimizer']}, lr {tr['learning_rate']:g}, batch {tr['batch_size']} x "
                 f"N={tr['length']}), {tr['steps']} steps: tied (red) and untied (blue) runs, one line per seed; "
                 f"theory: the tied model stays at $H(\\pi)$ when p + q > 1", fontsize=9, y=1.03)
    return save_figure(fig, path, dpi=100)


def plot_critical_spectra(checks: list[CriticalPointCheck], path: str) -> str:
    """Exact Hessian eigenvalues at `bad_critical_point` (dots) against the closed form (line), one panel per check."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    fig = Figure(figsize=(3.4 * len(checks), 3.4))
    axes = np.atleast_1d(fig.subplots(1, len(checks), gridspec_kw=dict(wspace=0.35)))
    for ax, c in zip(axes, checks):
        k = np.arange(c.eigenvalues.size)
        nz = np.abs(c.predicted) > 1e-12
        ax.plot(k, c.predicted, "k-", lw=1, label="closed form")
        ax.plot(k[nz], c.eigenvalues[nz], "o", ms=4, color="C3" if c.min_eigenvalue < -1e-9 else "C2",
                label="exact Hessian (non-zero)")
        ax.plot(k[~nz], c.eigenvalues[~nz], ".", ms=2, color="0.5", label="exact Hessian (zero)")
        ax.axhline(0, color="0.6", lw=0.6)
        verdict = "saddle" if c.min_eigenvalue < -1e-9 else "PSD (local min.)"
        ax.set_title(f"{'tied' if c.tied else 'untied'}, p = {c.p:g}, q = {c.q:g}: {verdict}\n"
                     f"max|grad| = {c.grad_max:.1e}, min eig = {c.min_eigenvalue:.3g}", fontsize=8)
        ax.set_xlabel("eigenvalue index (ascending)")
        ax.set_ylabel("Hessian eigenvalue")
        ax.legend(fontsize=6, loc="upper left")
    fig.suptitle(r"Hessian of the exact population loss at $\theta_\pi$ ($e = a = 0$, $W_O = W_2 = 0$, "
                 r"$b = \log(p/q)$, other weights random), float64, all $2^N$ chains", fontsize=9, y=1.06)
    return save_figure(fig, path, dpi=100)
