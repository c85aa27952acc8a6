"""Figures of phase diagrams and GAMP (PNG files written atomically); the experiments' figures are in
`phasejax.plotting_experiments`.

Figures are built as `matplotlib.figure.Figure` objects, without pyplot, so
importing this module leaves the user's matplotlib backend and state alone.
"""

from __future__ import annotations

import io

import numpy as np
from matplotlib.figure import Figure

from phasejax.phase.diagram import branch_table
from phasejax.io import atomic_write_bytes


def save_figure(fig: Figure, path: str, dpi: int = 130) -> str:
    """Render a `matplotlib.figure.Figure` to PNG at `path` atomically (no pyplot, no global backend); returns `path`."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())
    return path


def _replicon_overlay(ax, pd, a, w) -> None:
    """Hatch the cells where the global minimum's replica-symmetric fixed point is unstable (replicon above 1 at
    zero smoothing: `phasejax.theory.replicon.rs_stable`) and draw their boundary, the replicon line; cells
    without a replicon value (not computed) are left out of both (the line is drawn on the alpha columns where
    every cell with a global minimum has one)."""
    stable = pd.table.get("rs_stable_global")
    if stable is None:
        return
    s = np.asarray(stable, float)
    if not np.any(np.isfinite(s)):
        return
    W, A = np.meshgrid(w, a, indexing="ij")
    unstable = s < 0.5
    ax.scatter(A[unstable], W[unstable], s=150, marker="s", facecolors="none", edgecolors="m", hatch="////",
               linewidths=0.0, zorder=2)
    has_global = np.asarray(pd.table["global_branch"]) >= 0
    cols = np.all(np.isfinite(s) | ~has_global, axis=0) & np.any(np.isfinite(s), axis=0)
    z = np.where(np.isfinite(s), 1.0 - s, np.nan)[:, cols]
    if cols.sum() > 1 and w.size > 1 and np.nanmin(z) < 0.5 < np.nanmax(z):
        z = np.where(np.isfinite(z), z, 0.0)
        ax.contour(A[:, cols], W[:, cols], z, levels=[0.5], colors="m", linewidths=2.5, zorder=4)
    ax.scatter([], [], s=80, marker="s", facecolors="none", edgecolors="m", hatch="////", linewidths=0.0,
               label="RS unstable at the global minimum (replicon > 1 at zero smoothing)")
    ax.plot([], [], color="m", lw=2.5, label="replicon line (replicon = 1 at the global minimum)")


def cell_edges(values, half_width: float) -> np.ndarray:
    """Edges of the cells centred on the sorted grid `values (n,)`: midpoints between neighbours, the ends half a
    spacing out; a grid of one value gets the cell `value -+ half_width` (the map of a one-row grid is drawn,
    not left empty)."""
    v = np.asarray(values, float)
    if v.size == 1:
        return np.asarray([v[0] - half_width, v[0] + half_width])
    mid = 0.5 * (v[1:] + v[:-1])
    return np.concatenate([[v[0] - (mid[0] - v[0])], mid, [v[-1] + (v[-1] - mid[-1])]])


MISSING_COLOUR = "0.75"
"""Colour of the phase map's cells without a value (`Delta e_t` is NaN: a branch has no converged fixed point)."""


def plot_phase_map(pd, path: str, boundary=None) -> str:
    """`(alpha, omega)` map of `Delta e_t = e_sem - e_pos` with `alpha_c`, `alpha_l` (error bars), the spinodals,
    and the replicon line (where the global minimum's replica-symmetric fixed point turns unstable, hatched).
    With `boundary` (a `phasejax.phase.PhaseBoundary`) the lines are its curves with their error bands, and the
    grid's thresholds are drawn as markers beside them (a cross-check).

    The colour scale is symmetric-logarithmic around 0 (linear within the
    typical quadrature error), so the small `|Delta e_t|` of the positional
    phase at low alpha is as visible as the large ones of the semantic phase.
    """
    from matplotlib.colors import SymLogNorm

    a, w = np.asarray(pd.grid.alphas), np.asarray(pd.grid.omegas)
    d = np.asarray(pd.table["delta_e"], float)
    lim = np.nanmax(np.abs(d)) if np.any(np.isfinite(d)) else 1.0
    derr = np.asarray(pd.table.get("delta_e_err", np.full_like(d, np.nan)), float)
    lin = np.nanmedian(derr) if np.any(np.isfinite(derr) & (derr > 0)) else lim * 1e-3
    lin = float(np.clip(lin, lim * 1e-5, lim * 1e-1))
    fig = Figure(figsize=(7.6, 5.4))
    ax = fig.subplots()
    ax.set_facecolor(MISSING_COLOUR)   # cells without a value show grey, never the white of Delta e_t ~ 0
    mesh = ax.pcolormesh(cell_edges(a, 0.1), cell_edges(w, 0.05), d, shading="flat", cmap="RdBu_r",
                         norm=SymLogNorm(linthresh=lin, vmin=-lim, vmax=lim, base=10))
    extra = []                         # legend entries without an artist of their own
    if not np.all(np.isfinite(d)):
        from matplotlib.patches import Patch

        extra.append(Patch(facecolor=MISSING_COLOUR, edgecolor="0.5",
                           label=r"grey: no $\Delta e_t$ (a branch without a converged fixed point)"))
    cb = fig.colorbar(mesh, ax=ax, pad=0.02)
    cb.set_label(r"$\Delta e_t = e_t^{\rm sem} - e_t^{\rm pos}$ (symlog)" "\n"
                 r"red: positional is the global minimum, blue: semantic")
    th = pd.thresholds
    if boundary is not None:
        draw_lines(ax, boundary)
    for key, style, label in (("alpha_c", dict(color="k", marker="o"), r"$\alpha_c(\omega)$: training losses cross"),
                              ("alpha_l", dict(color="g", marker="s", ls="--"),
                               r"$\alpha_l(\omega)$: attention beats linear")):
        x = np.asarray(th[key], float)
        xe = np.asarray(th.get(key + "_err", np.full_like(x, np.nan)), float)
        xe = np.where(np.isfinite(xe), xe, 0.0)
        if boundary is None:
            ax.errorbar(x, w, xerr=xe, ms=4, capsize=2, label=label + " (95% error bars)", **style)
        else:
            ax.errorbar(x, w, xerr=xe, ms=3, capsize=1.5, ls="none", color=style["color"], marker=style["marker"],
                        mfc="white", label="grid's " + key + " (cross-check)")
    for key, style, label in (("spinodal_positional", dict(color="C1", ls=":", marker="v"),
                               "positional branch unstable out of its subspace beyond"),
                              ("spinodal_semantic", dict(color="C0", ls=":", marker="^"),
                               "semantic branch unstable out of its subspace beyond")):
        if boundary is None and key in th and np.any(np.isfinite(np.asarray(th[key], float))):
            ax.plot(np.asarray(th[key], float), w, ms=5, label=label, **style)
    multi = (np.asarray(pd.table.get("n_fixed_points_positional", 0)) > 1) | \
            (np.asarray(pd.table.get("n_fixed_points_semantic", 0)) > 1)
    none = np.asarray(pd.table["global_branch"]) < 0
    W, A = np.meshgrid(w, a, indexing="ij")
    if np.any(multi):
        ax.plot(A[multi], W[multi], ".", color="0.3", ms=3, label="several fixed points in a subspace")
    for key, style, label in (("end_positional", dict(color="C1", ls="-.", marker="<"),
                               r"positional branch ends (collapses onto $m = 0$)"),
                              ("end_semantic", dict(color="C0", ls="-.", marker=">"),
                               r"semantic branch ends (collapses onto $\theta = 0$)")):
        if key in th and np.any(np.isfinite(np.asarray(th[key], float))):
            ax.plot(np.asarray(th[key], float), w, ms=5, label=label, **style)
    verdict = {b: np.asarray(pd.table.get(f"verdict_{b}", np.full(W.shape, "converged")), str)
               for b in ("positional", "semantic")}
    for b, marker in (("positional", "|"), ("semantic", "_")):
        absent = np.char.startswith(verdict[b], "absent")
        if np.any(absent):
            ax.plot(A[absent], W[absent], marker, color="0.35", ms=5, label=f"{b} branch absent (on its plane)")
    unresolved = np.char.startswith(verdict["positional"], "unresolved") | \
        np.char.startswith(verdict["semantic"], "unresolved") | none
    if np.any(unresolved):
        ax.plot(A[unresolved], W[unresolved], "x", color="orange", label="unresolved: no converged fixed point")
    _replicon_overlay(ax, pd, a, w)
    ax.set_xlabel(r"sample complexity $\alpha = n/d$")
    ax.set_ylabel(r"positional share of the target $\omega$")
    ax.set_xlim(a[0] - 0.5 * (a[1] - a[0]) if a.size > 1 else a[0] - 0.1,
                a[-1] + 0.5 * (a[-1] - a[-2]) if a.size > 1 else a[0] + 0.1)
    cfg = pd.config
    ax.set_title(rf"Tied attention, $L=2$: $\sigma={cfg['sigma'][0]:g}$, $\lambda={cfg['lam']:g}$, "
                 rf"$A={np.asarray(cfg['A']).round(2).tolist()}$", fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles + extra, labels + [h.get_label() for h in extra], loc="upper center",
              bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=7, frameon=False)
    return save_figure(fig, path)


def draw_lines(ax, boundary, *, errors: bool = True) -> None:
    """The lines of a `PhaseBoundary` on `ax` (`alpha` horizontal, `omega` vertical): `alpha_c` and `alpha_l` as
    curves with their 95% error bands, the spinodals dotted."""
    ln = boundary.lines
    w = np.asarray(ln["omega"], float)
    for key, colour, ls, label in (("alpha_c", "k", "-", r"$\alpha_c(\omega)$: training losses cross"),
                                   ("alpha_l", "g", "--", r"$\alpha_l(\omega)$: attention beats linear")):
        x = np.asarray(ln[key], float)
        ax.plot(x, w, color=colour, ls=ls, lw=1.6, label=label + (" (95% band)" if errors else ""))
        if errors:
            e = np.asarray(ln[key + "_err"], float)
            ax.fill_betweenx(w, x - e, x + e, color=colour, alpha=0.25, lw=0)
    for key, colour, label in (("spinodal_positional", "C1", "positional branch unstable out of its subspace beyond"),
                               ("spinodal_semantic", "C0", "semantic branch unstable out of its subspace beyond")):
        x = np.asarray(ln[key], float)
        if np.any(np.isfinite(x)):
            ax.plot(x, w, color=colour, ls=":", lw=1.8, label=label)


def plot_boundary(boundary, path: str) -> str:
    """The lines of a `PhaseBoundary` alone, with their error bands, and their errors against omega."""
    ln = boundary.lines
    fig = Figure(figsize=(11, 4.4))
    ax, ax2 = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=(1.5, 1), wspace=0.28))
    draw_lines(ax, boundary)
    ax.set_xlabel(r"sample complexity $\alpha = n/d$")
    ax.set_ylabel(r"positional share of the target $\omega$")
    ax.legend(fontsize=7, loc="lower right")
    w = np.asarray(ln["omega"], float)
    for key, style in (("alpha_c", "k-o"), ("alpha_l", "g--s"), ("spinodal_positional", "C1:v")):
        e = np.asarray(ln[key + "_err"], float)
        if np.any(np.isfinite(e) & (e > 0)):
            ax2.semilogy(w, e, style, ms=3, label=key)
    ax2.set_xlabel(r"$\omega$")
    ax2.set_ylabel("95% error of the line (in alpha)")
    ax2.legend(fontsize=7)
    cfg = boundary.config
    fig.suptitle(rf"Tied attention, $L=2$: $\sigma={cfg['sigma'][0]:g}$, $\lambda={cfg['lam']:g}$: the lines solved "
                 "directly", fontsize=9)
    return save_figure(fig, path)


def plot_omega_slice(pd, omega: float, path: str) -> str:
    """At the grid `omega` nearest to `omega`: both branches' overlaps, test errors and `Delta e_t`, with error bars."""
    w = np.asarray(pd.grid.omegas)
    i = int(np.argmin(np.abs(w - omega)))
    a = np.asarray(pd.grid.alphas)
    get = lambda k: branch_table(pd.grid, pd.points, k)[i]  # noqa: E731
    ac, al = pd.thresholds["alpha_c"][i], pd.thresholds["alpha_l"][i]
    ac_e = pd.thresholds["alpha_c_err"][i] if "alpha_c_err" in pd.thresholds else np.nan
    fig = Figure(figsize=(15, 4.2))
    ax1, ax2, ax3 = fig.subplots(1, 3, gridspec_kw=dict(wspace=0.3))
    ax1.errorbar(a, np.abs(get("m")[:, 0]), get("m_err")[:, 0], fmt="C1-o", ms=3, capsize=2,
                 label=r"$|m|$, positional branch")
    ax1.errorbar(a, get("theta")[:, 1], get("theta_err")[:, 1], fmt="C0-o", ms=3, capsize=2,
                 label=r"$\theta$, semantic branch")
    # where a branch is absent its subspace's fixed point is the agnostic one: open markers
    absent = {b: np.char.startswith(np.asarray(pd.table.get(f"verdict_{b}", np.full((len(w), a.size), "")),
                                               str)[i], "absent") for b in ("positional", "semantic")}
    curves = {ax1: dict(positional=np.abs(get("m")[:, 0]), semantic=get("theta")[:, 1]),
              ax2: dict(positional=get("test_error")[:, 0], semantic=get("test_error")[:, 1])}
    for ax, ys in curves.items():
        for b, c in (("positional", "C1"), ("semantic", "C0")):
            if np.any(absent[b]):
                ax.plot(a[absent[b]], ys[b][absent[b]], "o", mfc="white", mec=c, ms=6, zorder=3,
                        label=f"{b} branch absent (agnostic fixed point)")
    ax1.set_ylabel("overlap (per token)")
    ax2.errorbar(a, get("test_error")[:, 0], get("test_error_err")[:, 0], fmt="C1-o", ms=3, capsize=2,
                 label="positional branch")
    ax2.errorbar(a, get("test_error")[:, 1], get("test_error_err")[:, 1], fmt="C0-o", ms=3, capsize=2,
                 label="semantic branch")
    ax2.axhline(pd.table["eps_lin"][i, 0], color="k", ls=":", label="linear positional baseline")
    ax2.set_ylabel(r"test error $\epsilon_g$")
    d, de = pd.table["delta_e"][i], pd.table.get("delta_e_err", np.full_like(a, np.nan))[i]
    ax3.plot(a, d, "k-o", ms=3, label=r"$e_t^{\rm sem} - e_t^{\rm pos}$")
    ax3.fill_between(a, d - de, d + de, color="k", alpha=0.2, lw=0, label="95% quadrature error")
    ax3.axhline(0.0, color="gray", lw=0.8)
    ax3.set_yscale("symlog", linthresh=max(float(np.nanmax(np.abs(d))) * 1e-3, 1e-9))
    ax3.set_ylabel(r"$\Delta e_t$ (symlog)")
    for ax in (ax1, ax2, ax3):
        if np.isfinite(ac):
            ax.axvline(ac, color="k", ls="--", lw=1,
                       label=rf"$\alpha_c={ac:.3f}\pm{ac_e:.3f}$" if np.isfinite(ac_e) else rf"$\alpha_c={ac:.3f}$")
        if np.isfinite(al):
            ax.axvline(al, color="g", ls="--", lw=1, label=rf"$\alpha_l={al:.3f}$")
        ax.set_xlabel(r"$\alpha$")
        ax.legend(fontsize=7)
    fig.suptitle(rf"$\omega = {w[i]:g}$: branches (lowest-$e_t$ fixed point of each subspace), error bars: 95% "
                 "quadrature half-widths", fontsize=10)
    return save_figure(fig, path)
