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
from phasejax.io import atomic_write_bytes


def save_figure(fig: Figure, path: str, dpi: int = 130) -> str:
    """Render a `matplotlib.figure.Figure` to PNG at `path` atomically (no pyplot, no global backend); returns `path`."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
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
    return save_figure(fig, path)


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
    return save_figure(fig, path)


# ----------------------------------------------------------------------------
# Experiments against theory (issue 4)
# ----------------------------------------------------------------------------


def _seed_stats(runs, key: str, init_code: int, alphas: np.ndarray, omega: float | None = None):
    """Mean and standard deviation over seeds of column `key`, per alpha, for one init."""
    sel_base = np.asarray(runs["init"]) == init_code
    if omega is not None:
        sel_base &= np.isclose(np.asarray(runs["omega"]), omega)
    mean, std = [], []
    for a in alphas:
        v = np.asarray(runs[key], float)[sel_base & np.isclose(np.asarray(runs["alpha"]), a)]
        mean.append(np.mean(v) if v.size else np.nan)
        std.append(np.std(v) if v.size else np.nan)
    return np.asarray(mean), np.asarray(std)


def plot_training_vs_theory(runs, theory, path: str, omega: float) -> str:
    """Figure 2 of the paper: trained students (dots, mean +- std over seeds) against the SE (lines).

    Args:
      runs: `TrainingRuns.runs` (informed inits 0 positional, 1 semantic).
      theory: a `PhaseDiagram` at this `omega` (both branches, linear baseline, thresholds).
    """
    alphas = np.unique(np.asarray(runs["alpha"]))
    i = int(np.argmin(np.abs(np.asarray(theory.grid.omegas) - omega)))
    ta = np.asarray(theory.grid.alphas)
    get = lambda k: by_branch(theory.grid, theory.points, k)[i]  # noqa: E731
    fig = Figure(figsize=(14, 3.9))
    ax1, ax2, ax3 = fig.subplots(1, 3, gridspec_kw=dict(wspace=0.34))
    styles = {0: ("C1", "positional"), 1: ("C0", "semantic")}
    for code, (c, name) in styles.items():
        for key, marker, lab in (("m", "o", r"$m$"), ("theta", "s", r"$\theta$")):
            mu, sd = _seed_stats(runs, key, code, alphas, omega)
            if (code == 0) == (key == "m"):
                ax1.errorbar(alphas, mu, sd, fmt=marker, color=c, ms=4, capsize=2, label=f"{lab}, {name} init")
        mu, sd = _seed_stats(runs, "test_error", code, alphas, omega)
        ax2.errorbar(alphas, mu, sd, fmt="o", color=c, ms=4, capsize=2, label=f"trained, {name} init")
    ax1.plot(ta, np.abs(get("m")[:, 0]), "C1-", label=r"SE $m$, positional")
    ax1.plot(ta, get("theta")[:, 1], "C0-", label=r"SE $\theta$, semantic")
    ax1.set_ylabel("overlap (per token)")
    ax2.plot(ta, get("test_error")[:, 0], "C1-", label="SE positional")
    ax2.plot(ta, get("test_error")[:, 1], "C0-", label="SE semantic")
    ax2.axhline(theory.table["eps_lin"][i, 0], color="k", ls=":", label="linear baseline (spec 6)")
    ax2.set_ylabel(r"test error $\epsilon_g$")
    # same data for both inits of a seed: paired difference of the training losses
    d_mu, d_sd = [], []
    sel_w = np.isclose(np.asarray(runs["omega"]), omega)
    for a in alphas:
        sel = sel_w & np.isclose(np.asarray(runs["alpha"]), a)
        seeds = np.unique(np.asarray(runs["seed"])[sel])
        diffs = []
        for s in seeds:
            e = {int(k): float(v) for k, v, ss in zip(np.asarray(runs["init"])[sel], np.asarray(runs["train_loss"])[sel],
                                                    np.asarray(runs["seed"])[sel]) if ss == s}
            if 0 in e and 1 in e:
                diffs.append(e[1] - e[0])
        d_mu.append(np.mean(diffs) if diffs else np.nan)
        d_sd.append(np.std(diffs) if diffs else np.nan)
    ax3.errorbar(alphas, d_mu, d_sd, fmt="ko", ms=4, capsize=2, label="trained (paired per seed)")
    ax3.plot(ta, theory.table["delta_e"][i], "k-", label="SE")
    ax3.axhline(0.0, color="gray", lw=0.8)
    ax3.set_ylabel(r"$e_t^{\rm sem} - e_t^{\rm pos}$")
    ac = theory.thresholds["alpha_c"][i]
    for ax in (ax1, ax2, ax3):
        if np.isfinite(ac):
            ax.axvline(ac, color="gray", ls="--", lw=1, label=rf"SE $\alpha_c={ac:.2f}$")
        ax.set_xlabel(r"$\alpha$")
        ax.legend(fontsize=7)
    d = int(np.asarray(runs["d"])[0])
    n_seeds = len(np.unique(np.asarray(runs["seed"])))
    fig.suptitle(rf"Trained tied attention ($d={d}$, {n_seeds} seeds) vs state evolution, $\omega={omega:g}$",
                 fontsize=10)
    return save_figure(fig, path)


def plot_finite_size_scaling(ds, stats: dict, se: dict, path: str, alpha: float) -> str:
    """`m` (positional init) and `theta` (semantic init) vs `d`, and their distance to the SE, log-log.

    `stats[(key, init)] = (mean (D,), std (D,), n_seeds)`; `se[key]` the SE value.
    """
    ds = np.asarray(ds, float)
    fig = Figure(figsize=(10.5, 3.8))
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw=dict(wspace=0.3))
    for (key, code), c, lab in ((("m", 0), "C1", r"$m$ (positional init)"), (("theta", 1), "C0",
                                                                            r"$\theta$ (semantic init)")):
        mu, sd, ns = stats[key, code]
        ax1.errorbar(ds, mu, sd, fmt="o-", color=c, capsize=2, ms=4, label=lab)
        ax1.axhline(se[key], color=c, ls="--", lw=1, label=f"SE {lab.split()[0]}")
        ax2.errorbar(ds, np.abs(mu - se[key]), sd / np.sqrt(ns), fmt="o-", color=c, capsize=2, ms=4,
                     label=f"|mean - SE|, {lab}")
        ax2.plot(ds, sd, ":", color=c, label=f"seed std, {lab.split()[0]}")
    ax2.plot(ds, 0.5 * ds**-0.5, "k--", lw=1, label=r"$\propto d^{-1/2}$")
    ax1.set_xscale("log")
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    for ax in (ax1, ax2):
        ax.set_xlabel("$d$")
        ax.legend(fontsize=7)
    ax1.set_ylabel("overlap (per token)")
    fig.suptitle(rf"Finite-size scaling at $\alpha={alpha:g}$", fontsize=10)
    return save_figure(fig, path)


def plot_solution_fractions(alphas, fractions: np.ndarray, names, path: str, title: str) -> str:
    """Stacked fractions (`fractions (A, K)`) of runs ending in each solution kind vs alpha."""
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    bottom = np.zeros(len(alphas))
    colors = {"positional": "C1", "semantic": "C0", "neither": "0.7"}
    width = 0.8 * np.min(np.diff(alphas)) if len(alphas) > 1 else 0.1
    for k, name in enumerate(names):
        ax.bar(alphas, fractions[:, k], width, bottom=bottom, color=colors.get(name, f"C{k + 2}"), label=name)
        bottom = bottom + fractions[:, k]
    ax.set_xlabel(r"$\alpha$")
    ax.set_ylabel("fraction of runs")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    return save_figure(fig, path)


def plot_gamp_vs_se(traj: dict, fixed_rows: list, cols: list, path: str, *, d: int, fp_d: int, alpha: float,
                    damping, sigma2: float = 0.25) -> str:
    """GAMP per-iteration overlaps (thin lines, one per seed) vs the SE trajectory, and fixed points vs alpha.

    `traj[(branch, seed)]` are `GAMPResult`s, `traj[("se", branch, form)]` SE `Overlaps` trajectories;
    `fixed_rows` rows of `fixed_points.csv` with header `cols`.
    """
    fig = Figure(figsize=(15, 7))
    axes = fig.subplots(2, 4, gridspec_kw=dict(wspace=0.3, hspace=0.35))
    keys = (("q0", r"$q$", sigma2), ("m", r"$m$", 1.0), ("theta0", r"$\theta$", sigma2))
    col = {c: i for i, c in enumerate(cols)}
    for row, branch in enumerate(("semantic", "positional")):
        color = "C0" if branch == "semantic" else "C1"
        for j, (key, lab, scale) in enumerate(keys):
            ax = axes[row, j]
            seeds = sorted(s for (b, s) in [k for k in traj if len(k) == 2] if b == branch)
            for s in seeds:
                res = traj[branch, s]
                it = int(res.iterations)
                y = scale * np.asarray(getattr(res, key))[: it + 1, 0, 0]
                ax.plot(np.arange(it + 1), y, color=color, lw=0.9, alpha=0.7,
                        label="GAMP (one line per seed)" if s == seeds[0] else None)
            for form, ls in (("implicit", "k-"), ("stein", "k--")):
                tr = traj.get(("se", branch, form))
                if tr is not None:
                    y = scale * np.asarray(getattr(tr, key))[:, 0, 0]
                    ax.plot(np.arange(len(y)), y, ls, lw=1.2, label=f"SE trajectory ({form})")
            ax.set_title(f"{branch} init: {lab}", fontsize=9)
            ax.set_xlabel("iteration")
            if j == 0:
                ax.legend(fontsize=7)
        ax = axes[row, 3]
        rows = [r for r in fixed_rows if r[col["branch"]] == branch]
        a = np.array([r[col["alpha"]] for r in rows])
        for key, marker, c in (("q", "o", "C2"), ("m", "s", "C1"), ("theta", "^", "C0")):
            ax.plot(a, [r[col[key]] for r in rows], marker, color=c, ms=4, ls="none", label=f"GAMP {key}")
            ua = np.unique(a)
            se = [next(r[col["se_" + key]] for r in rows if r[col["alpha"]] == x) for x in ua]
            ax.plot(ua, se, "-", color=c, lw=1, label=f"SE {key}")
        bad = [r for r in rows if not r[col["converged"]]]
        if bad:
            ax.plot([r[col["alpha"]] for r in bad], [r[col["q"]] for r in bad], "rx", ms=8, label="not converged")
        ax.set_title(f"{branch} init: fixed points vs $\\alpha$ ($d={fp_d}$)", fontsize=9)
        ax.set_xlabel(r"$\alpha$")
        ax.legend(fontsize=7)
    fig.suptitle(rf"GAMP vs state evolution: trajectories at $d={d}$, $\alpha={alpha:g}$; damping (semantic, "
                 rf"positional) = {tuple(damping)}",
                 fontsize=10)
    return save_figure(fig, path)


# ----------------------------------------------------------------------------
# Counting phase diagrams (issue 6)
# ----------------------------------------------------------------------------


def plot_counting_phase_diagrams(results: dict, path: str, title: str) -> str:
    """Best (top) and mean (bottom) accuracy over seeds on the `(d, p)` grid, one column per configuration.

    `results[config] = dict(d, p, seed, accuracy)` arrays. Cells: `*` 100% (best row: some seed; mean row:
    every seed), `+` > 99%.
    """
    names = list(results)
    fig = Figure(figsize=(3.0 * len(names) + 1.2, 6.4))
    axes = np.asarray(fig.subplots(2, len(names), squeeze=False, gridspec_kw=dict(wspace=0.25, hspace=0.3)))
    mesh = None
    lo = min(float(np.min(results[n]["accuracy"])) for n in names)
    vmin = min(0.7, np.floor(10 * lo) / 10)
    for j, name in enumerate(names):
        r = results[name]
        ds, ps = np.unique(r["d"]), np.unique(r["p"])
        best = np.full((len(ps), len(ds)), np.nan)
        mean = np.full_like(best, np.nan)
        for a, d in enumerate(ds):
            for b, p in enumerate(ps):
                acc = np.asarray(r["accuracy"])[(r["d"] == d) & (r["p"] == p)]
                best[b, a], mean[b, a] = acc.max(), acc.mean()
        for i, (grid, lab) in enumerate(((best, "best"), (mean, "mean"))):
            ax = axes[i, j]
            mesh = ax.pcolormesh(np.arange(len(ds)), np.arange(len(ps)), grid, vmin=vmin, vmax=1.0, cmap="viridis",
                                 shading="nearest")
            for b in range(len(ps)):
                for a in range(len(ds)):
                    mark = "*" if grid[b, a] >= 1.0 else ("+" if grid[b, a] > 0.99 else "")
                    if mark:
                        ax.text(a, b, mark, ha="center", va="center", color="w" if mark == "+" else "r", fontsize=11)
            ax.set_xticks(np.arange(len(ds)), [str(int(x)) for x in ds], fontsize=7)
            ax.set_yticks(np.arange(len(ps)), [str(int(x)) for x in ps], fontsize=7)
            ax.set_xlabel("embedding size $d$", fontsize=8)
            if j == 0:
                ax.set_ylabel(f"{lab} over seeds\nhidden size $p$", fontsize=8)
            ax.set_title(name if i == 0 else "", fontsize=9)
    cb = fig.colorbar(mesh, ax=axes.ravel().tolist(), shrink=0.8)
    cb.set_label("test accuracy  (red *: 100%, white +: > 99%)")
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def plot_attention_matrices(attn: dict, tokens: np.ndarray, path: str) -> str:
    """Attention matrices of the same sequences: rows `(solution, phase)` of `attn[(solution, phase)] (S, L, L)`."""
    keys = list(attn)
    n_seq = tokens.shape[0]
    fig = Figure(figsize=(3.1 * n_seq, 2.9 * len(keys)))
    axes = np.asarray(fig.subplots(len(keys), n_seq, squeeze=False))
    for i, key in enumerate(keys):
        for j in range(n_seq):
            ax = axes[i, j]
            ax.imshow(attn[key][j], vmin=0, vmax=1, cmap="Greys")
            labels = [str(int(t)) for t in tokens[j]]
            ax.set_xticks(range(len(labels)), labels, fontsize=6)
            ax.set_yticks(range(len(labels)), labels, fontsize=6)
            if j == 0:
                ax.set_ylabel(f"{key[0]}, {key[1]} unfreezing\nquery token", fontsize=8)
            if i == len(keys) - 1:
                ax.set_xlabel("key token", fontsize=8)
            if i == 0:
                ax.set_title(f"sequence {j + 1}", fontsize=9)
    fig.suptitle("Attention matrices (seed 0): semantic = equal tokens attend to each other; "
                 "positional = input-independent", fontsize=9)
    return save_figure(fig, path)
