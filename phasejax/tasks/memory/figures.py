"""Figures of a memory study."""

from __future__ import annotations

import warnings

import numpy as np

from phasejax.tasks.memory.data import KINDS
from phasejax.tasks.memory.result import MemoryResult
from phasejax.tasks.memory.sweep import recall_cube


# ----------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------


def _edges(values: np.ndarray) -> np.ndarray:
    """Cell edges (geometric midpoints) around increasing positive `values`."""
    v = np.asarray(values, np.float64)
    if len(v) == 1:
        return np.array([v[0] / 1.2, v[0] * 1.2])
    mid = np.sqrt(v[1:] * v[:-1])
    return np.concatenate([[v[0] ** 2 / mid[0]], mid, [v[-1] ** 2 / mid[-1]]])


def _fit_keys(result: MemoryResult) -> list[str]:
    """Capacity-fit keys in the order outer product, one step, linear, MLP (fixed M before M = N)."""
    keys = [k for k, v in result.fits.items() if isinstance(v, dict) and "exponent" in v and "kind" in v]
    return sorted(keys, key=lambda k: (KINDS.index(result.fits[k]["kind"]), "=N" in result.fits[k]["outputs"], k))


def _plain_log_y(ax, axes: str = "y") -> None:
    """Plain-number labels on log axes (`"x"`, `"y"` or `"xy"`): decades, plus 2 and 5 times a decade."""
    def minor(v, _):
        m = v / 10 ** np.floor(np.log10(v))
        return f"{v:g}" if np.isclose(m, 2) or np.isclose(m, 5) else ""

    for name in axes:
        axis = getattr(ax, f"{name}axis")
        axis.set_major_formatter(lambda v, _: f"{v:g}")
        axis.set_minor_formatter(minor)
        ax.tick_params(axis=name, which="both", labelsize=8)


_TITLES = {"outer_product": "outer product", "one_step": "one gradient step", "linear": "trained linear",
           "mlp": "trained MLP"}


def _exponent_text(fit: dict, short: bool = False) -> str:
    if fit.get("exponent") is None:
        return "no fit"
    lo, hi = fit["ci95_bootstrap"]
    ci = f"[{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "[n/a]"
    return f"{fit['exponent']:.2f} {ci}" if short else f"exponent {fit['exponent']:.2f}, boot. 95% CI {ci}"


def _recall_map_panel(ax, Ns, xs, grid, fit, xlabel):
    from matplotlib.colors import Normalize

    mesh = ax.pcolormesh(_edges(xs), _edges(Ns), np.ma.masked_invalid(grid.T), cmap="viridis",
                         norm=Normalize(0.0, 1.0), shading="flat")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_ticks(ax.xaxis, xs)
    ax.set_facecolor("0.85")
    ax.set_xlabel(xlabel)
    return mesh


def _plain_log_ticks(axis, values) -> None:
    """Major ticks at `values` (thinned to at most 7), plain integer labels, no minor labels."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    v = np.unique(np.asarray(values, float))
    if len(v) > 7:
        v = v[:: int(np.ceil(len(v) / 7))]
    axis.set_major_locator(FixedLocator(v))
    axis.set_major_formatter(lambda x, _: f"{x:g}")
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def plot_phase_diagrams(result: MemoryResult, path: str) -> str:
    """Mean recall over seeds on the `(d, N)` grid of every sweep (MLP: `(m, N)` per `d`) with the capacity curves.

    White dots: measured `N*` with bootstrap 95% intervals; black line: power-law fit; dashed: closed form.
    Grey cells were not run (outside the sweep's window).
    """
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    keys = _fit_keys(result)
    panels = []
    for key in keys:
        fit = result.fits[key]
        if fit["kind"] == "mlp":
            for d in sorted(set(fit["d"])):
                panels.append((key, d))
        else:
            panels.append((key, None))
    ncol = 4
    nrow = int(np.ceil(len(panels) / ncol))
    fig = Figure(figsize=(4.1 * ncol, 3.6 * nrow + 1.5))
    axes = np.atleast_1d(fig.subplots(nrow, ncol, squeeze=False)).ravel()
    mesh = None
    for ax, (key, d_fixed) in zip(axes, panels):
        fit = result.fits[key]
        kind, outputs = fit["kind"], fit["outputs"]
        cols, Ns, cube = recall_cube(result.capacity, kind, outputs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(cube, axis=-1)                          # (C, K)
        nstar = np.asarray([np.nan if v is None else v for v in fit["N_star"]], float)
        ci = np.asarray([[np.nan if a is None else a for a in row] for row in fit["N_star_ci95_bootstrap"]], float)
        if d_fixed is None:
            xs = np.asarray([c[0] for c in cols], float)
            sel = np.arange(len(cols))
            xlabel = "embedding dimension $d$"
        else:
            sel = np.asarray([i for i, c in enumerate(cols) if c[0] == d_fixed])
            xs = np.asarray([cols[i][1] for i in sel], float)
            xlabel = f"MLP width $m$  ($d={d_fixed}$)"
        mesh = _recall_map_panel(ax, Ns, xs, mean[sel], fit, xlabel)
        ok = np.isfinite(nstar[sel])
        yerr = np.abs(ci[sel][ok].T - nstar[sel][ok][None, :])
        ax.errorbar(xs[ok], nstar[sel][ok], yerr=np.nan_to_num(yerr), fmt="o", color="w", mec="k", ms=5, capsize=2.5,
                    ecolor="k", elinewidth=1.2, label="measured capacity $N^*$ (bars: seed-bootstrap 95%)")
        if fit["exponent"] is not None:
            xx = np.geomspace(xs.min(), xs.max(), 50)
            scale = xx if d_fixed is None else xx * d_fixed
            ax.plot(xx, fit["prefactor"] * scale ** fit["exponent"], "k-", lw=1.2,
                    label=r"power-law fit of $N^*$ (exponent in the panel title)")
        if "N_star_closed_form" in fit:
            pred = np.asarray([np.nan if v is None else v for v in fit["N_star_closed_form"]], float)
            ax.plot(xs, pred[sel], "--", color="C1", lw=1.5, label="closed form (Gaussian crosstalk)")
        ax.set_ylabel("number of stored pairs $N$")
        _plain_log_y(ax)
        ax.set_title(f"{_TITLES[kind]}, {outputs}" + ("" if d_fixed is None else f", $d={d_fixed}$")
                     + f"\n{_exponent_text(fit)}", fontsize=9)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    top, bottom = 1.0 - 1.05 / fig.get_figheight(), 0.95 / fig.get_figheight()
    fig.subplots_adjust(left=0.05, right=0.9, top=top, bottom=bottom, wspace=0.32, hspace=0.5)
    cb = fig.colorbar(mesh, cax=fig.add_axes([0.915, bottom + 0.1 * (top - bottom), 0.012, 0.8 * (top - bottom)]))
    cb.set_label("mean recall over seeds (fraction of the $N$ pairs recalled)")
    handles, labels = {}, {}
    for ax in axes[: len(panels)]:                       # one legend for the figure, below the panels (off the data)
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=3, fontsize=8, frameon=False,
               bbox_to_anchor=(0.47, 0.0))
    fig.suptitle("Associative-memory recall over (embedding dimension $d$, stored pairs $N$), mean over seeds\n"
                 "capacity $N^*$ = largest $N$ with mean recall $\\geq$ 99%; grey cells: not run (outside each "
                 "sweep's window around its transition)", fontsize=10, y=1.0 - 0.15 / fig.get_figheight())
    return save_figure(fig, path)


def plot_capacity_fits(result: MemoryResult, path: str) -> str:
    """`N*` against `d` (left) and against `m d` (right, MLP), log-log, with bootstrap 95% intervals and fits."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    fig = Figure(figsize=(12, 4.6))
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw=dict(wspace=0.25))
    markers = dict(outer_product="o", one_step="s", linear="^", mlp="D")
    for i, key in enumerate(_fit_keys(result)):
        fit = result.fits[key]
        ax = ax2 if fit["kind"] == "mlp" else ax1
        x = np.asarray(fit["x_values"], float)
        y = np.asarray([np.nan if v is None else v for v in fit["N_star"]], float)
        ci = np.asarray([[np.nan if a is None else a for a in row] for row in fit["N_star_ci95_bootstrap"]], float)
        ok = np.isfinite(y)
        color = f"C{i}"
        ax.errorbar(x[ok], y[ok], yerr=np.nan_to_num(np.abs(ci[ok].T - y[ok][None, :])), fmt=markers[fit["kind"]],
                    color=color, ms=5, capsize=2, mfc="none" if fit["kind"] == "one_step" else color,
                    label=f"{_TITLES[fit['kind']]}, {fit['outputs']}: {_exponent_text(fit, short=True)}")
        if fit["exponent"] is not None and ok.any():
            xx = np.geomspace(x[ok].min(), x[ok].max(), 50)
            ax.plot(xx, fit["prefactor"] * xx ** fit["exponent"], "-", color=color, lw=1)
        if "N_star_closed_form" in fit:
            pred = np.asarray([np.nan if v is None else v for v in fit["N_star_closed_form"]], float)
            ax.plot(x, pred, ":", color=color, lw=1.5)
    mlp = [result.fits[k] for k in _fit_keys(result) if result.fits[k]["kind"] == "mlp"]
    if mlp and mlp[0]["N_star"]:
        x = np.asarray(mlp[0]["x_values"], float)
        y = np.asarray([np.nan if v is None else v for v in mlp[0]["N_star"]], float)
        c = np.exp(np.nanmean(np.log(y / x)))                      # geometric-mean N* / (m d)
        xx = np.geomspace(x.min(), x.max(), 20)
        ax2.plot(xx, c * xx, "k--", lw=1, label=f"reference $N^* = {c:.2f}\\, m d$ (exponent 1)")
    for ax, xl in ((ax1, "embedding dimension $d$"), (ax2, "MLP parameters per layer $m d$")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xl)
        _plain_log_y(ax, "xy")
        ax.set_ylabel("capacity $N^*$ (99% mean recall)")
        ax.grid(True, which="both", alpha=0.3)
        if ax is ax1:   # many entries: below the axes, off the data
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2,
                      title="memory, outputs: exponent [boot. 95% CI]", title_fontsize=7)
        else:
            ax.legend(fontsize=7, loc="lower right", title="memory, outputs: exponent [boot. 95% CI]",
                      title_fontsize=7)
    ax1.set_title("capacity vs $d$ (lines: fits; dotted: closed form)", fontsize=9)
    ax2.set_title("MLP memory $F(z) = V^T \\mathrm{relu}(U z)$: capacity vs $m d$", fontsize=9)
    fig.suptitle("Capacity scaling of associative memories (error bars: seed-bootstrap 95% intervals of $N^*$)",
                 fontsize=10)
    return save_figure(fig, path)


def plot_zipf(result: MemoryResult, path: str) -> str:
    """Zipf-weighted error against `d`: measured (mean and seed std), closed form, and the asymptotic power laws."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    z = result.zipf
    info = result.fits["zipf"]
    fig = Figure(figsize=(6.8, 4.8))
    ax = fig.subplots()
    ds = np.unique(z["d"])
    for name, color, label in (("one_step", "C0", "one gradient step ($q = p$)"),
                               ("top_k", "C3", "outer product of the $k^*(d)$ most frequent")):
        err = np.asarray([np.mean(z[f"error_{name}"][z["d"] == d]) for d in ds])
        sd = np.asarray([np.std(z[f"error_{name}"][z["d"] == d]) for d in ds])
        pred = np.asarray([np.mean(z[f"predicted_{name}"][z["d"] == d]) for d in ds])
        f = info[name]
        ax.errorbar(ds, err, sd, fmt="o", color=color, capsize=2, ms=5,
                    label=f"{label}: measured, slope {f['exponent']:.2f}")
        ax.plot(ds, pred, "-", color=color, lw=1.2, label=f"closed form, slope {f['exponent_closed_form']:.2f}")
        ref = pred[-1] * (ds / ds[-1]) ** f["asymptotic_exponent"]
        ax.plot(ds, ref, "--", color=color, lw=1, alpha=0.7,
                label=f"$d^{{{f['asymptotic_exponent']:.2f}}}$ (asymptotic law)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("embedding dimension $d$")
    _plain_log_y(ax, "xy")
    ax.set_ylabel(r"error $\sum_x p_x 1\{f(x) \neq f^*(x)\}$")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
              title="markers: measured (mean over seeds)\nsolid: closed form given each map", title_fontsize=7)
    ax.set_title(f"Zipf inputs $p_x \\propto x^{{-{info['alpha']:g}}}$, N = {info['N']}, M = {info['M']} "
                 f"(error bars: std over {len(np.unique(z['seed']))} seeds)", fontsize=9)
    return save_figure(fig, path)
