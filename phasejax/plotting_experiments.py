"""Figures of the experiments: trained students against the theory, finite-size scaling, random inits,
counting phase diagrams and attention matrices (PNG files written atomically, no pyplot).

Every figure states what its points and error bars are (mean over seeds and
one standard deviation, or a binomial interval) and puts legends where they
do not cover data.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from phasejax.plotting import save_figure


def _seed_stats(runs, key: str, init_code: int, alphas: np.ndarray, omega: float | None = None):
    """Mean, standard deviation and count over seeds of column `key`, per alpha, for one init."""
    sel_base = np.asarray(runs["init"]) == init_code
    if omega is not None:
        sel_base &= np.isclose(np.asarray(runs["omega"]), omega)
    mean, std, count = [], [], []
    for a in alphas:
        v = np.asarray(runs[key], float)[sel_base & np.isclose(np.asarray(runs["alpha"]), a)]
        mean.append(np.mean(v) if v.size else np.nan)
        std.append(np.std(v, ddof=1) if v.size > 1 else np.nan)
        count.append(v.size)
    return np.asarray(mean), np.asarray(std), np.asarray(count)


def paired_loss_difference(runs, alphas: np.ndarray, omega: float):
    """Per alpha: mean and standard deviation over seeds of `train_loss(semantic init) - train_loss(positional init)`.

    Both inits of a seed train on the same data set, so the difference is paired per seed.
    """
    mean, std = [], []
    sel_w = np.isclose(np.asarray(runs["omega"]), omega)
    init, seed, loss = (np.asarray(runs[k]) for k in ("init", "seed", "train_loss"))
    for a in alphas:
        sel = sel_w & np.isclose(np.asarray(runs["alpha"]), a)
        diffs = []
        for s in np.unique(seed[sel]):
            e = {int(i): float(v) for i, v in zip(init[sel & (seed == s)], loss[sel & (seed == s)])}
            if 0 in e and 1 in e:
                diffs.append(e[1] - e[0])
        mean.append(np.mean(diffs) if diffs else np.nan)
        std.append(np.std(diffs, ddof=1) if len(diffs) > 1 else np.nan)
    return np.asarray(mean), np.asarray(std)


def plot_training_vs_theory(runs, theory, path: str, omega: float) -> str:
    """Figure 2 of the paper: trained students (points: mean over seeds, error bars: one standard deviation
    over seeds) against the state evolution (lines).

    Args:
      runs: `TrainingRuns.runs` (informed inits 0 positional, 1 semantic).
      theory: a `PhaseDiagram` at this `omega` (both branches, linear baseline, thresholds).
    """
    from phasejax.phase.diagram import branch_table

    alphas = np.unique(np.asarray(runs["alpha"]))
    i = int(np.argmin(np.abs(np.asarray(theory.grid.omegas) - omega)))
    ta = np.asarray(theory.grid.alphas)
    get = lambda k: branch_table(theory.grid, theory.points, k)[i]  # noqa: E731
    fig = Figure(figsize=(14, 4.4))
    ax1, ax2, ax3 = fig.subplots(1, 3, gridspec_kw=dict(wspace=0.34))
    styles = {0: ("C1", "positional"), 1: ("C0", "semantic")}
    n_seeds = len(np.unique(np.asarray(runs["seed"])))
    for code, (c, name) in styles.items():
        key, marker, lab = (("m", "o", r"$m$") if code == 0 else ("theta", "s", r"$\theta$"))
        mu, sd, _ = _seed_stats(runs, key, code, alphas, omega)
        ax1.errorbar(alphas, mu, sd, fmt=marker, color=c, ms=4, capsize=2, label=f"{lab}, trained from {name} init")
        mu, sd, _ = _seed_stats(runs, "test_error", code, alphas, omega)
        ax2.errorbar(alphas, mu, sd, fmt="o", color=c, ms=4, capsize=2, label=f"trained, {name} init")
    ax1.plot(ta, np.abs(get("m")[:, 0]), "C1-", label=r"SE $m$, positional branch")
    ax1.plot(ta, get("theta")[:, 1], "C0-", label=r"SE $\theta$, semantic branch")
    ax1.set_ylabel("overlap (per token)")
    ax2.plot(ta, get("test_error")[:, 0], "C1-", label="SE, positional branch")
    ax2.plot(ta, get("test_error")[:, 1], "C0-", label="SE, semantic branch")
    ax2.axhline(theory.table["eps_lin"][i, 0], color="k", ls=":", label="linear positional baseline")
    ax2.set_ylabel(r"test error $\epsilon_g$")
    d_mu, d_sd = paired_loss_difference(runs, alphas, omega)
    ax3.errorbar(alphas, d_mu, d_sd, fmt="ko", ms=4, capsize=2, label="trained (paired per seed)")
    ax3.plot(ta, theory.table["delta_e"][i], "k-", label="SE")
    ax3.axhline(0.0, color="gray", lw=0.8)
    ax3.set_ylabel(r"training loss $e_t^{\rm sem} - e_t^{\rm pos}$")
    ac = theory.thresholds["alpha_c"][i]
    for ax in (ax1, ax2, ax3):
        if np.isfinite(ac):
            ax.axvline(ac, color="gray", ls="--", lw=1, label=rf"SE $\alpha_c={ac:.2f}$")
        ax.set_xlabel(r"sample complexity $\alpha = n/d$")
        ax.legend(fontsize=7, loc="best")
    d = int(np.asarray(runs["d"])[0])
    fig.suptitle(rf"Trained tied attention ($d={d}$) vs state evolution (lines), $\omega={omega:g}$. "
                 f"Points: mean over {n_seeds} seeds; error bars: $\\pm 1$ standard deviation over seeds "
                 "(seed-to-seed spread, not the error of the mean)", fontsize=9.5)
    return save_figure(fig, path)


def plot_finite_size_scaling(ds, stats: dict, se: dict, path: str, alpha: float, adjusted: dict | None = None) -> str:
    """`m` (positional init) and `theta` (semantic init) vs `d`, and their distance to the SE, log-log.

    `stats[(key, init)] = (mean (D,), std (D,), n_seeds)` (`n_seeds` an int or a `(D,)` array of
    counts); `se[key]` the SE value; `adjusted[(key, init)] = (D, 2)` teacher-norm adjusted means and their
    standard errors (`phasejax.empirics.teacher_adjusted_mean`), drawn as open markers on the right.
    """
    ds = np.asarray(ds, float)
    fig = Figure(figsize=(11.5, 4.3))
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw=dict(wspace=0.3))
    counts = []
    for (key, code), c, lab in ((("m", 0), "C1", r"$m$ (positional init)"), (("theta", 1), "C0",
                                                                            r"$\theta$ (semantic init)")):
        mu, sd, ns = stats[key, code]
        ns = np.broadcast_to(np.asarray(ns, float), np.shape(mu))
        counts.append(ns)
        ax1.errorbar(ds, mu, sd, fmt="o-", color=c, capsize=2, ms=4, label=lab + r", mean $\pm$ 1 s.d.")
        ax1.axhline(se[key], color=c, ls="--", lw=1, label=f"SE {lab.split()[0]} ($d \\to \\infty$)")
        ax2.errorbar(ds, np.abs(mu - se[key]), sd / np.sqrt(ns), fmt="o-", color=c, capsize=2, ms=4,
                     label=f"|mean - SE| $\\pm$ s.e., {lab.split()[0]}")
        if adjusted is not None:
            adj = np.asarray(adjusted[key, code], float)
            ax2.errorbar(ds * 1.06, np.abs(adj[:, 0] - se[key]), adj[:, 1], fmt="s--", color=c, mfc="white",
                         capsize=2, ms=4, lw=1, label=f"same, teacher-norm adjusted, {lab.split()[0]}")
        ax2.plot(ds, sd, ":", color=c, label=f"seed s.d., {lab.split()[0]}")
    ax2.plot(ds, 0.5 * ds**-0.5, "k--", lw=1, label=r"$\propto d^{-1/2}$")
    ax1.set_xscale("log")
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    for ax in (ax1, ax2):
        ax.set_xlabel("dimension $d$")
    ax1.set_ylabel("overlap (per token)")
    ax2.set_ylabel("distance to the SE fixed point")
    ax1.legend(fontsize=7, loc="lower right")
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    counts = np.concatenate(counts)
    n_seeds = f"{int(counts.min())}" if counts.min() == counts.max() else f"{int(counts.min())} to {int(counts.max())}"
    fig.suptitle(rf"Finite-size scaling at $\alpha={alpha:g}$, {n_seeds} seeds per $d$ and init. Left: mean $\pm$ 1 "
                 "standard deviation over seeds; right: error bars are standard errors of the mean", fontsize=9.5)
    return save_figure(fig, path)


def wilson_interval(k, n, z: float = 1.0):
    """Wilson score interval `(low, high)` of a binomial proportion `k / n` (`z = 1`: about 68%)."""
    k, n = np.asarray(k, float), np.asarray(n, float)
    p = np.where(n > 0, k / np.maximum(n, 1), np.nan)
    denom = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    return centre - half, centre + half


def plot_solution_fractions(alphas, fractions: np.ndarray, names, path: str, title: str,
                            n_runs=None) -> str:
    """Stacked fractions (`fractions (A, K)`) of runs ending in each solution kind vs alpha.

    With `n_runs (A,)` the boundaries between the stacked kinds (cumulative
    fractions, each a binomial proportion) get 68% Wilson intervals.
    """
    alphas = np.asarray(alphas, float)
    fig = Figure(figsize=(7.8, 4.0))
    ax = fig.subplots()
    bottom = np.zeros(len(alphas))
    colors = {"positional": "C1", "semantic": "C0", "neither": "0.7"}
    width = 0.8 * np.min(np.diff(alphas)) if len(alphas) > 1 else 0.1
    boundaries = []
    for k, name in enumerate(names):
        ax.bar(alphas, fractions[:, k], width, bottom=bottom, color=colors.get(name, f"C{k + 2}"), label=name)
        bottom = bottom + fractions[:, k]
        boundaries.append(bottom)
    if n_runs is not None:
        n = np.asarray(n_runs, float)
        for k, b in enumerate(boundaries[:-1]):
            lo, hi = wilson_interval(np.round(b * n), n)
            ax.errorbar(alphas, b, yerr=[b - lo, hi - b], fmt="none", ecolor="k", capsize=3, lw=1,
                        label="68% Wilson interval of a boundary" if k == 0 else None)
    ax.set_xlabel(r"sample complexity $\alpha = n/d$")
    ax.set_ylabel("fraction of runs")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(title, fontsize=9)
    return save_figure(fig, path)


def majority_accuracy(T: int, L: int) -> float:
    """Accuracy of always predicting count 1 on the histogram task: `P(a token is unique) = ((T-1)/T)^(L-1)`."""
    return float(((T - 1) / T) ** (L - 1))


def plot_counting_phase_diagrams(results: dict, path: str, title: str, *, T: int | None = None,
                                 L: int | None = None) -> str:
    """Best (top) and mean (bottom) accuracy over seeds on the `(d, p)` grid, one column per configuration.

    `results[config] = dict(d, p, seed, accuracy)` arrays. Each cell prints its accuracy in percent;
    `*` marks 100% (best row: some seed; mean row: every seed); other cells are truncated to 0.1%. With `T` and `L` the colour scale starts
    at the majority-class accuracy (always predicting count 1), marked on the colour bar.
    """
    names = list(results)
    fig = Figure(figsize=(3.0 * len(names) + 1.6, 6.6))
    axes = np.asarray(fig.subplots(2, len(names), squeeze=False, gridspec_kw=dict(wspace=0.25, hspace=0.3)))
    mesh = None
    lo = min(float(np.min(results[n]["accuracy"])) for n in names)
    base = majority_accuracy(T, L) if T is not None and L is not None else None
    vmin = base if base is not None else float(np.floor(10 * lo) / 10)
    for j, name in enumerate(names):
        r = results[name]
        ds, ps = np.unique(r["d"]), np.unique(r["p"])
        best = np.full((len(ps), len(ds)), np.nan)
        mean = np.full_like(best, np.nan)
        for a, d in enumerate(ds):
            for b, p in enumerate(ps):
                acc = np.asarray(r["accuracy"])[(np.asarray(r["d"]) == d) & (np.asarray(r["p"]) == p)]
                if acc.size:
                    best[b, a], mean[b, a] = acc.max(), acc.mean()
        for i, (grid, lab) in enumerate(((best, "best"), (mean, "mean"))):
            ax = axes[i, j]
            mesh = ax.pcolormesh(np.arange(len(ds)), np.arange(len(ps)), grid, vmin=vmin, vmax=1.0, cmap="viridis",
                                 shading="nearest")
            small = len(ds) * len(ps) <= 64
            for b in range(len(ps)):
                for a in range(len(ds)):
                    v = grid[b, a]
                    if not np.isfinite(v):
                        continue
                    # truncated, not rounded: 99.96% reads 99.9, and only an exact 100% reads 100*
                    text = "100*" if v >= 1.0 else (f"{np.floor(1000 * v) / 10:.1f}" if small else "")
                    if text:
                        ax.text(a, b, text, ha="center", va="center", fontsize=7 if len(ds) <= 4 else 5,
                                color="k" if v > vmin + 0.6 * (1 - vmin) else "w")
            ax.set_xticks(np.arange(len(ds)), [str(int(x)) for x in ds], fontsize=7)
            ax.set_yticks(np.arange(len(ps)), [str(int(x)) for x in ps], fontsize=7)
            ax.set_xlabel("embedding size $d$", fontsize=8)
            if j == 0:
                ax.set_ylabel(f"{lab} over seeds\nhidden size $p$", fontsize=8)
            ax.set_title(name if i == 0 else "", fontsize=9)
    extend = "min" if lo < vmin else "neither"
    cb = fig.colorbar(mesh, ax=axes.ravel().tolist(), shrink=0.8, extend=extend)
    if base is not None:
        cb.set_label(f"test accuracy (cells: percent; *: 100%)\ncolour scale from the majority-class accuracy "
                     f"{base:.3f}\n(always predicting count 1) to 1", fontsize=8)
        cb.set_ticks(np.unique(np.round(np.r_[base, np.linspace(np.ceil(base * 20) / 20, 1.0,
                                                                int(round((1 - np.ceil(base * 20) / 20) / 0.05)) + 1)],
                                        3)))
    else:
        cb.set_label("test accuracy (cells: percent; *: 100%)", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def plot_attention_matrices(attn: dict, tokens: np.ndarray, path: str, seed: int = 0) -> str:
    """Attention matrices of the same sequences: rows `(solution, phase)` of `attn[(solution, phase)] (S, L, L)`,
    one colour scale (0 to the largest weight) with a colour bar."""
    keys = list(attn)
    n_seq = tokens.shape[0]
    vmax = float(max(np.max(attn[k]) for k in keys))
    fig = Figure(figsize=(3.1 * n_seq + 1.2, 2.9 * len(keys)))
    axes = np.asarray(fig.subplots(len(keys), n_seq, squeeze=False))
    im = None
    for i, key in enumerate(keys):
        for j in range(n_seq):
            ax = axes[i, j]
            im = ax.imshow(attn[key][j], vmin=0, vmax=vmax, cmap="magma_r")
            labels = [str(int(t)) for t in tokens[j]]
            ax.set_xticks(range(len(labels)), labels, fontsize=6)
            ax.set_yticks(range(len(labels)), labels, fontsize=6)
            if j == 0:
                ax.set_ylabel(f"{key[0]} mask, {key[1]} unfreezing\nquery token", fontsize=8)
            if i == len(keys) - 1:
                ax.set_xlabel("key token", fontsize=8)
            if i == 0:
                ax.set_title(f"probe sequence {j + 1}", fontsize=9)
    cb = fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.6, pad=0.02)
    cb.set_label("attention weight (row-normalised: each row sums to 1)", fontsize=8)
    fig.suptitle(f"Attention matrices of the histogram transformer (seed {seed}) on the same sequences: semantic = "
                 "equal tokens attend to each other; positional = the same pattern for every sequence",
                 fontsize=9, y=0.995)
    return save_figure(fig, path)
