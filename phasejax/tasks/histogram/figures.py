"""Figures of the counting sandbox: the maps in the paper's layout, the proposition's column, the loss curves.

The paper's layout (Behrens, Biggio & Zdeborova 2024, Figs. 1-2): three columns (dot-product attention with a
BOS token, dot-product attention, linear mixing), softmax in the top row, none in the bottom row; hidden size
`p` across, embedding size `d` up, both on log scales; lines at `d = T` and `p = T`; colours from 0 to 100%
("Spectral"). Best maps: the best held-out accuracy over the epochs and the seeds; mean maps: the mean over the
seeds of the accuracy after the last epoch, a star where some seed reached 100% at some epoch, a dot where the
best reached 99%.
"""

from __future__ import annotations

import numpy as np

from phasejax.tasks.histogram.counting import CountingRuns

LAYOUT = {"dot+BOS+softmax": (0, 0), "dot+softmax": (0, 1), "linear+softmax": (0, 2),
          "dot+BOS": (1, 0), "dot": (1, 1), "linear": (1, 2)}
"""Panel `(row, column)` of each configuration in the paper's layout."""

COLUMN_TITLES = ("[bos]\ndot-product attention & BOS token", "[dot]\ndot-product attention", "[lin]\nlinear mixing")


def cell_table(runs: dict) -> dict:
    """Per `(d, p)` cell of one configuration's runs: `ds`, `ps` (sorted) and `(len(ds), len(ps))` arrays `best`
    (max over seeds of `best_accuracy`), `mean` (mean over seeds of `accuracy`), `seeds` (runs per cell)."""
    d, p = np.asarray(runs["d"]), np.asarray(runs["p"])
    ds, ps = np.unique(d), np.unique(p)
    best = np.full((len(ds), len(ps)), np.nan)
    mean, n = np.full_like(best, np.nan), np.zeros(best.shape, int)
    for i, dv in enumerate(ds):
        for j, pv in enumerate(ps):
            sel = (d == dv) & (p == pv)
            if sel.any():
                best[i, j] = np.max(np.asarray(runs["best_accuracy"])[sel])
                mean[i, j] = np.mean(np.asarray(runs["accuracy"])[sel])
                n[i, j] = int(sel.sum())
    return dict(ds=ds, ps=ps, best=best, mean=mean, seeds=n)


def _edges(values: np.ndarray) -> np.ndarray:
    """Cell edges on a log axis: geometric midpoints, the ends mirrored."""
    v = np.log(np.asarray(values, float))
    if len(v) == 1:
        return np.exp(np.array([v[0] - 0.35, v[0] + 0.35]))
    mid = (v[1:] + v[:-1]) / 2
    return np.exp(np.concatenate([[2 * v[0] - mid[0]], mid, [2 * v[-1] - mid[-1]]]))


def plot_maps(runs: CountingRuns, path: str, stat: str, *, T: int, title: str, majority: float | None = None,
              numbers: bool | None = None, reference: dict | None = None) -> str:
    """The best (`stat="best"`) or mean (`stat="mean"`) accuracy maps of `runs` in the paper's layout (module
    docstring); `numbers` prints each cell's percentage (default: for grids of at most 8 x 8); `reference`
    (`{config: {(d, p): value}}`, e.g. the published maps) adds its value under ours, in parentheses."""
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    if stat not in ("best", "mean"):
        raise ValueError(f"stat must be 'best' or 'mean', got stat={stat!r}")
    fig = Figure(figsize=(11.5, 6.6))
    axes = np.asarray(fig.subplots(2, 3, sharex=True, sharey=True, gridspec_kw=dict(wspace=0.12, hspace=0.14)))
    norm = Normalize(0, 100)
    mesh = None
    for name, (r, c) in LAYOUT.items():
        ax = axes[r, c]
        if name not in runs.names:
            ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes, fontsize=9)
            continue
        cells = cell_table(runs.select(name))
        grid = 100 * cells[stat]
        mesh = ax.pcolormesh(_edges(cells["ps"]), _edges(cells["ds"]), grid, cmap="Spectral", norm=norm)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.axvline(T, color="w", lw=0.8)
        ax.axhline(T, color="w", lw=0.8)
        show = numbers if numbers is not None else len(cells["ds"]) <= 8 and len(cells["ps"]) <= 8
        for i, dv in enumerate(cells["ds"]):
            for j, pv in enumerate(cells["ps"]):
                if stat == "mean" and cells["best"][i, j] >= 1.0:
                    ax.scatter([pv], [dv * (1.22 if show else 1.0)], marker="*", s=26, c="w", zorder=3)
                elif stat == "mean" and cells["best"][i, j] >= 0.99:
                    ax.scatter([pv], [dv * (1.22 if show else 1.0)], marker=".", s=14, c="w", zorder=3)
                if show and np.isfinite(grid[i, j]):
                    text = f"{np.floor(10 * grid[i, j]) / 10:.1f}" if grid[i, j] < 100 else "100"
                    ref = (reference or {}).get(name, {}).get((int(dv), int(pv)))
                    if ref is not None:
                        text += f"\n({100 * ref:.0f})"
                    ax.text(pv, dv / (1.1 if stat == "mean" else 1.0), text, ha="center", va="center",
                            fontsize=5.0 if ref is not None else 5.5, color="k", linespacing=0.9)
        ax.set_xticks(cells["ps"], [str(int(v)) for v in cells["ps"]], fontsize=7)
        ax.set_yticks(cells["ds"], [str(int(v)) for v in cells["ds"]], fontsize=7)
        ax.minorticks_off()
    for c, t in enumerate(COLUMN_TITLES):
        axes[0, c].set_title(t, fontsize=9)
    axes[0, 0].set_ylabel("with softmax\nembedding dimension $d$", fontsize=9)
    axes[1, 0].set_ylabel("no softmax\nembedding dimension $d$", fontsize=9)
    for c in range(3):
        axes[1, c].set_xlabel("hidden layer size $p$", fontsize=9)
    if mesh is not None:
        label = ("best out of the seeds and epochs, accuracy [%]" if stat == "best"
                 else "mean over the seeds, final accuracy [%]\nstar: a seed reached 100%, dot: 99% (best epoch)")
        cb = fig.colorbar(mesh, ax=axes.ravel().tolist(), shrink=0.55, label=label)
        if majority is not None:
            cb.ax.axhline(100 * majority, color="k", lw=1.0)
            cb.ax.text(0.5, 100 * majority, f"{100 * majority:.0f}%: majority", fontsize=6, va="bottom",
                       ha="center", rotation=90, color="k", transform=cb.ax.get_yaxis_transform())
    fig.suptitle(_wrap(title), fontsize=10)
    return save_figure(fig, path)


def _wrap(title: str, width: int = 110) -> str:
    """`title` broken into lines of at most about `width` characters, at its "; " separators."""
    lines = [""]
    for part in title.split("; "):
        if lines[-1] and len(lines[-1]) + len(part) + 2 > width:
            lines.append(part)
        else:
            lines[-1] = f"{lines[-1]}; {part}" if lines[-1] else part
    return "\n".join(lines)


def plot_proposition(runs: CountingRuns, path: str, *, d: int, title: str, majority: float | None = None,
                     paper: dict | None = None) -> str:
    """The proposition's column: accuracy against `p` at embedding size `d`, every seed (dots), their mean
    (line), the best over epochs (open circles), one panel per configuration in the paper's layout; `paper`:
    optional `{config: (ps, best, mean)}` read off the paper's maps, drawn as crosses."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    fig = Figure(figsize=(11.5, 6.2))
    axes = np.asarray(fig.subplots(2, 3, sharex=True, sharey=True, gridspec_kw=dict(wspace=0.08, hspace=0.22)))
    for name, (r, c) in LAYOUT.items():
        ax = axes[r, c]
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3, lw=0.4)
        if majority is not None:
            ax.axhline(100 * majority, color="0.5", lw=0.8, ls=":")
        if name not in runs.names:
            continue
        sel = runs.select(name)
        keep = np.asarray(sel["d"]) == d
        p, acc, best = (np.asarray(sel[k])[keep] for k in ("p", "accuracy", "best_accuracy"))
        ps = np.unique(p)
        wide = ps.max() > 8 * ps.min()           # a log axis for a wide range of p
        jitter = {s: 0.025 * (k - 2) for k, s in enumerate(np.unique(np.asarray(sel["seed"])[keep]))}
        xs = np.array([v * (1 + jitter[s]) if wide else v + 1.6 * jitter[s]
                       for v, s in zip(p, np.asarray(sel["seed"])[keep])])
        if wide:
            ax.set_xscale("log")
        ax.scatter(xs, 100 * acc, s=14, c="C0", label="each seed, final")
        ax.scatter(xs, 100 * best, s=22, facecolors="none", edgecolors="C1", label="each seed, best epoch")
        ax.plot(ps, [100 * np.mean(acc[p == v]) for v in ps], "C0-", lw=1.2, label="mean over seeds")
        if paper and name in paper:
            pp, pb, pm = paper[name]
            ax.scatter(pp, 100 * np.asarray(pb), marker="x", c="C3", s=30, label="paper: best (read off)")
            ax.scatter(pp, 100 * np.asarray(pm), marker="+", c="C2", s=40, label="paper: mean (read off)")
        ax.set_xticks(ps, [str(int(v)) for v in ps])
        ax.minorticks_off()
    for ax in axes[1]:
        ax.set_xlabel("hidden layer size $p$", fontsize=9)
    for ax in axes[:, 0]:
        ax.set_ylabel("held-out accuracy [%]", fontsize=9)
    axes[0, 0].set_ylim(0, 102)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if majority is not None:
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], color="0.5", lw=0.8, ls=":"))
        labels.append(f"majority class ({100 * majority:.0f}%)")
    fig.legend(handles, labels, loc="lower center", ncol=6, fontsize=7.5, frameon=False)
    fig.suptitle(_wrap(title), fontsize=10)
    return save_figure(fig, path)


def still_learning(curves: dict, name: str, tail: float = 0.125, drop: float = 0.05) -> tuple[float, int]:
    """The fraction of the runs of configuration `name` whose training loss fell by more than `drop` (relative)
    over the last `tail` of the recorded epochs of `curves` (`CURVE_COLUMNS`), and that span in epochs."""
    c = {k: np.asarray(v) for k, v in curves.items()}
    sel = c["config"] == name
    epochs = np.unique(c["epoch"][sel])
    last = epochs[-1]
    ref = epochs[np.searchsorted(epochs, last - max(1, int(round(tail * last))))]

    def loss_at(epoch):
        m = sel & (c["epoch"] == epoch)
        return {(d, p, s): v for d, p, s, v in zip(c["d"][m], c["p"][m], c["seed"][m], c["loss"][m])}

    before, after = loss_at(ref), loss_at(last)
    falls = np.array([(before[k] - after[k]) / after[k] > drop for k in after])
    return float(np.mean(falls)), int(last - ref)


def plot_loss_curves(runs: CountingRuns, path: str, *, title: str, color_by: str = "d") -> str:
    """Training loss per epoch (log scale) of every run, one panel per configuration in the paper's layout,
    coloured by `color_by` (`"d"` or `"p"`): whether the runs have finished learning is whether the curves
    have flattened by the last epoch; each panel says which fraction still fell by more than 5% over the last
    eighth of the epochs (`still_learning`)."""
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    if runs.curves is None:
        raise ValueError("runs hold no loss curves (curves.csv)")
    c = {k: np.asarray(v) for k, v in runs.curves.items()}
    fig = Figure(figsize=(11.5, 6.4))
    axes = np.asarray(fig.subplots(2, 3, sharex=True, sharey=True, gridspec_kw=dict(wspace=0.08, hspace=0.2)))
    values = np.unique(c[color_by])
    norm = LogNorm(max(values.min(), 1), max(values.max(), 2))
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    for name, (r, col) in LAYOUT.items():
        ax = axes[r, col]
        ax.set_title(name, fontsize=9)
        sel = c["config"] == name
        if not sel.any():
            continue
        run_id = np.stack([c["d"][sel], c["p"][sel], c["seed"][sel]], 1)
        keys, inv = np.unique(run_id, axis=0, return_inverse=True)
        epochs, loss = c["epoch"][sel], c["loss"][sel]
        for k, key in enumerate(keys):
            m = inv.ravel() == k
            order = np.argsort(epochs[m])
            ax.plot(epochs[m][order], loss[m][order], lw=0.5, alpha=0.55,
                    color=cmap(norm(key[0] if color_by == "d" else key[1])))
        ax.set_yscale("log")
        ax.grid(alpha=0.3, lw=0.4, which="both")
        frac, span = still_learning(c, name)
        ax.text(0.03, 0.03, f"{100 * frac:.0f}% of the runs: loss still\nfalling > 5% over the last {span} epochs",
                transform=ax.transAxes, ha="left", va="bottom", fontsize=7,
                bbox=dict(facecolor="w", alpha=0.8, lw=0))
    for ax in axes[1]:
        ax.set_xlabel("epoch (fresh sequences each)", fontsize=9)
    for ax in axes[:, 0]:
        ax.set_ylabel("training cross-entropy (nats)", fontsize=9)
    from matplotlib.cm import ScalarMappable

    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes.ravel().tolist(), shrink=0.55,
                 label=f"${color_by}$")
    fig.suptitle(_wrap(title), fontsize=10)
    return save_figure(fig, path)
