"""Figures of phase diagrams (PNG files written atomically).

Figures are built as `matplotlib.figure.Figure` objects, without pyplot, so
importing this module leaves the user's matplotlib backend and state alone.
"""

from __future__ import annotations

import io

import numpy as np
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure

from phasejax.phase.diagram import by_branch
from phasejax.phase.sweep import atomic_write_bytes


def _save(fig: Figure, path: str) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=130, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())
    return path


def plot_phase_map(pd, path: str) -> str:
    """`(alpha, omega)` map coloured by `Delta e_t = e_sem - e_pos`, with `alpha_c` and `alpha_l` lines."""
    a, w = np.asarray(pd.grid.alphas), np.asarray(pd.grid.omegas)
    d = np.asarray(pd.table["delta_e"], float)
    ok = np.asarray(pd.table["converged_positional"]) & np.asarray(pd.table["converged_semantic"])
    d = np.where(ok, d, np.nan)
    lim = np.nanmax(np.abs(d)) if np.any(np.isfinite(d)) else 1.0
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.subplots()
    mesh = ax.pcolormesh(a, w, d, shading="nearest", cmap="RdBu_r", norm=TwoSlopeNorm(0.0, -lim, lim))
    cb = fig.colorbar(mesh, ax=ax)
    cb.set_label(r"$\Delta e_t = e_t^{\rm sem} - e_t^{\rm pos}$   (blue: semantic is the global min.)")
    th = pd.thresholds
    ax.plot(th["alpha_c"], th["omega"], "k-o", ms=4, label=r"$\alpha_c(\omega)$: training losses cross")
    ax.plot(th["alpha_l"], th["omega"], "g--s", ms=4, label=r"$\alpha_l(\omega)$: attention beats linear")
    bad = ~ok
    if np.any(bad):
        W, A = np.meshgrid(w, a, indexing="ij")
        ax.plot(A[bad], W[bad], "x", color="orange", label="not converged")
    ax.set_xlabel(r"sample complexity $\alpha = n/d$")
    ax.set_ylabel(r"positional share of the target $\omega$")
    cfg = pd.config
    ax.set_title(rf"Tied attention: $\sigma={cfg['sigma'][0]:g}$, $\lambda={cfg['lam']:g}$, "
                 rf"$A={np.asarray(cfg['A']).round(2).tolist()}$", fontsize=9)
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
    return _save(fig, path)


def plot_omega_slice(pd, omega: float, path: str) -> str:
    """At the grid `omega` nearest to `omega`: `m`, `theta` and test errors of both branches vs alpha."""
    w = np.asarray(pd.grid.omegas)
    i = int(np.argmin(np.abs(w - omega)))
    a = np.asarray(pd.grid.alphas)
    get = lambda k: by_branch(pd.grid, pd.points, k)[i]
    m, th, err, conv = get("m"), get("theta"), get("test_error"), get("converged").astype(bool)
    ac, al = pd.thresholds["alpha_c"][i], pd.thresholds["alpha_l"][i]
    eps_lin = pd.table["eps_lin"][i, 0]
    fig = Figure(figsize=(10.5, 3.8))
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw=dict(wspace=0.3))
    ax1.plot(a, np.abs(m[:, 0]), "C1-o", ms=3, label=r"$|m|$ positional branch")
    ax1.plot(a, th[:, 1], "C0-o", ms=3, label=r"$\theta$ semantic branch")
    ax1.set_ylabel("overlap (per token)")
    ax2.plot(a, err[:, 0], "C1-o", ms=3, label="positional branch")
    ax2.plot(a, err[:, 1], "C0-o", ms=3, label="semantic branch")
    ax2.axhline(eps_lin, color="k", ls=":", label="linear positional baseline")
    # global minimum: positional below alpha_c, semantic above, with the jump at alpha_c
    if np.isfinite(ac):
        lo, hi = a < ac, a > ac
        xg = np.concatenate([a[lo], [ac, ac], a[hi]])
        yg = np.concatenate([err[lo, 0], [np.interp(ac, a, err[:, 0]), np.interp(ac, a, err[:, 1])], err[hi, 1]])
    else:
        xg, yg = a, pd.table["global_test_error"][i]
    ax2.plot(xg, yg, "k-", lw=4, alpha=0.25, label="global minimum")
    ax2.set_ylabel(r"test error $\epsilon_g$")
    for ax in (ax1, ax2):
        for x in a[~(conv[:, 0] & conv[:, 1])]:
            ax.axvline(x, color="orange", lw=0.8)
        if np.isfinite(ac):
            ax.axvline(ac, color="k", ls="--", lw=1, label=rf"$\alpha_c={ac:.3f}$")
        if np.isfinite(al):
            ax.axvline(al, color="g", ls="--", lw=1, label=rf"$\alpha_l={al:.3f}$")
        ax.set_xlabel(r"$\alpha$")
        ax.legend(fontsize=7)
    fig.suptitle(rf"$\omega = {w[i]:g}$", fontsize=10)
    return _save(fig, path)
