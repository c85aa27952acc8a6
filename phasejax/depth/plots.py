"""Figures of `phasejax depth` (thresholds vs skip, overlaps vs alpha, AMP vs SE)."""

from __future__ import annotations

import numpy as np


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: str) -> str:
    """Lay out `fig`, write it to `path` (120 dpi), close it; returns `path`."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _threshold_panel(ax) -> None:
    """The parts every thresholds-against-skip panel shares: the bound `1 / (T^2 + T)` and the axis labels."""
    ax.axhline(1 / 6, color="k", lw=0.6, ls="--", label=r"$1/6 = 1/(T^2+T)$: bound on every threshold")
    ax.set_xlabel("skip strength $c$")
    ax.set_ylabel(r"weak-recovery threshold $\alpha$")


def plot_thresholds(th: dict, path: str) -> str:
    """`alpha_1`, `alpha_2` (and layer 1's threshold at `Q = 0`) against the skip strength, with error bars."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    c = np.asarray(th["skip"])
    ax.errorbar(c, th["alpha_2"], yerr=th["alpha_2_err"], marker="o", ms=4, capsize=2, label=r"$\alpha_2$ (layer 2)")
    ax.errorbar(c, th["alpha_1"], yerr=th["alpha_1_err"], marker="s", ms=4, capsize=2,
                label=r"$\alpha_1$ (layer 1, next to layer 2's fixed point)")
    if "alpha_1_uninformed" in th:
        ax.plot(c, th["alpha_1_uninformed"], ":", color="gray", label=r"layer 1 at $Q=0$ ($1/M_1$)")
    _threshold_panel(ax)
    ax.set_yscale("log")
    ax.set_title("Two-layer tied attention, $T=2$: Bayes-optimal thresholds")
    ax.legend(fontsize=7)
    return _save(plt, fig, path)


def plot_overlaps(se: dict, th: dict, path: str) -> str:
    """`q_1, q_2` against alpha per skip (uninformative start; informative start dashed), test error below."""
    plt = _plt()
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(6, 6), sharex=True)
    for c in np.unique(se["skip"]):
        s = se["skip"] == c
        a = se["alpha"][s]
        for l, mk in ((1, "s"), (2, "o")):
            line, = ax.plot(a, se[f"q{l}"][s], marker=mk, ms=3, label=f"$q_{l}$, $c={c:g}$")
            ax.plot(a, se[f"q{l}_informed"][s], "--", color=line.get_color(), lw=0.8)
        if "q2_layer1_at_zero" in se:
            ax.plot(a, se["q2_layer1_at_zero"][s], "k:", lw=1.0, label=f"$q_2$ with $q_1=0$ (exact), $c={c:g}$")
        bx.errorbar(a, se["test_error"][s], yerr=se["test_error_se"][s], marker="o", ms=3, label=f"$c={c:g}$")
        k = np.nonzero(np.isclose(th["skip"], c))[0]
        for j in k:
            for name in ("alpha_1", "alpha_2"):
                if np.isfinite(th[name][j]):
                    ax.axvline(th[name][j], color="gray", lw=0.6, ls=":")
    ax.set_ylabel("overlap")
    ax.legend(fontsize=7)
    ax.set_title("Bayes-optimal SE (dashed: informative start; dotted: thresholds)")
    bx.set_xlabel(r"$\alpha = n/d$")
    bx.set_ylabel(r"test error $E|y-\hat y|^2$")
    bx.legend(fontsize=7)
    return _save(plt, fig, path)


def plot_amp(amp: dict, path: str) -> str:
    """AMP's overlaps (mean and standard deviation over seeds) against `d`, with the SE's values."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for a in np.unique(amp["alpha"]):
        s = amp["alpha"] == a
        ds = np.unique(amp["d"][s])
        for l in (1, 2):
            m = [amp[f"m{l}"][s & (amp["d"] == d)] for d in ds]
            eb = ax.errorbar(ds, [x.mean() for x in m], yerr=[x.std(ddof=1) if x.size > 1 else 0 for x in m],
                             marker="o", ms=3, capsize=2, label=rf"AMP $m_{l}$, $\alpha={a:g}$")
            ax.axhline(amp[f"se_q{l}"][s][0], color=eb[0].get_color(), ls="--", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("$d$")
    ax.set_ylabel("overlap with the teacher")
    ax.set_title("AMP on finite data (dashed: state evolution), skip $c = 1$")
    ax.legend(fontsize=7)
    return _save(plt, fig, path)


def plot_convergence(conv: dict, target: float, path: str) -> str:
    """The rule study: |threshold - finest grid's| against the rule's step (grid) or order (mixture), per skip."""
    plt = _plt()
    thresholds = list(dict.fromkeys(conv["threshold"].tolist()))
    fig, axes = plt.subplots(1, 2 * len(thresholds), figsize=(3.2 * 2 * len(thresholds), 3.4))
    for j, name in enumerate(thresholds):
        for k, kind in enumerate(("grid", "mixture")):
            ax = axes[2 * j + k]
            for c in np.unique(conv["skip"]):
                s = (conv["threshold"] == name) & (conv["rule"] == kind) & (conv["skip"] == c)
                x = conv["step_or_order"][s].astype(float)
                y = np.maximum(np.abs(conv["difference"][s]), 1e-16)
                ax.errorbar(x, y, yerr=conv["difference_se"][s], marker="o", ms=3, capsize=2, label=f"$c={c:g}$")
            ax.axhline(target, color="k", ls="--", lw=0.6, label="error target")
            ax.set_yscale("log")
            ax.set_xlabel("grid step" if kind == "grid" else "Gauss-Hermite order")
            ax.set_title(f"{name}: {'graded grid' if kind == 'grid' else 'GH mixture'}", fontsize=9)
            if kind == "grid":
                ax.invert_xaxis()
            if j == 0 and k == 0:
                ax.set_ylabel("|difference to the finest grid|")
            ax.legend(fontsize=6)
    return _save(plt, fig, path)


def plot_three_thresholds(th: dict, path: str) -> str:
    """Three layers: each layer's threshold against the skip strength, in the order they are learned."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    c = np.asarray(th["skip"])
    for k, mk in ((1, "s"), (2, "^"), (3, "o")):
        ax.errorbar(c, th[f"alpha_{k}"], yerr=th[f"alpha_{k}_err"], marker=mk, ms=4, capsize=2,
                    label=rf"$\alpha_{k}$ (layer {k})")
    _threshold_panel(ax)
    ax.set_xscale("log")
    ax.set_title(f"Three-layer tied attention, $T=2$; learning order {_orders(th)}", fontsize=9)
    ax.legend(fontsize=7)
    return _save(plt, fig, path)


def _orders(th: dict) -> str:
    """The learning order per group of skips, e.g. `3,1,2 (c = 0.5, 1); 3,2,1 (c = 2)`."""
    orders = [str(o) for o in th["order"]]
    groups = {o: [f"{c:g}" for c, x in zip(th["skip"], orders) if x == o] for o in dict.fromkeys(orders)}
    return "; ".join(f"{o} ($c$ = {', '.join(cs)})" for o, cs in groups.items())


def plot_three_overlaps(se: dict, th: dict, amp: dict | None, path: str) -> str:
    """Three layers: the SE's overlaps against alpha with AMP's (mean and spread over seeds, per d; in units of the
    teacher's norm, `m_l / (|w_l|^2 / d)`, where `amp` has the norms)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    colors = {}
    for k, mk in ((1, "s"), (2, "^"), (3, "o")):
        line, = ax.plot(se["alpha"], se[f"q{k}"], marker=mk, ms=3, label=f"SE $q_{k}$")
        colors[k] = line.get_color()
    if amp is not None:
        for j, d in enumerate(np.unique(amp["d"])):
            for k in (1, 2, 3):
                s = amp["d"] == d
                a = np.unique(amp["alpha"][s])
                normed = f"w{k}_norm" in amp
                norm = amp[f"w{k}_norm"] if normed else np.ones_like(amp[f"m{k}"])
                m = [(amp[f"m{k}"] / norm)[s & (amp["alpha"] == x)] for x in a]
                name = f"AMP $m_{k}/(|w_{k}|^2/d)$" if normed else f"AMP $m_{k}$"
                ax.errorbar(a + 0.015 * (j - 0.5), [v.mean() for v in m],
                            yerr=[v.std(ddof=1) if v.size > 1 else 0 for v in m], fmt="x" if j else "+",
                            color=colors[k], ms=6, capsize=2, label=f"{name}, $d={d}$")
    s = np.isclose(th["skip"], se["skip"][0])
    for k in (1, 2, 3):
        for v in th[f"alpha_{k}"][s]:
            ax.axvline(v, color=colors[k], lw=0.6, ls=":")
    ax.set_xlabel(r"$\alpha = n/d$")
    ax.set_ylabel("overlap")
    ax.set_title(f"Three layers, skip $c = {se['skip'][0]:g}$: SE (lines), AMP (crosses), thresholds (dotted)",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left")  # the curves rise to the right of the thresholds; the corner is empty
    return _save(plt, fig, path)


def plot_amp_rules(rules: dict, path: str) -> str:
    """The rule study of three-layer AMP: per start, `m_l / (|w_l|^2 / d)` against the step with the SE's rule (dashed)
    and the finer rule (solid), and the SE from the same start (dotted: the SE's rule; thin: the finer rule)."""
    plt = _plt()
    starts = list(dict.fromkeys(rules["start"].tolist()))
    fig, axes = plt.subplots(1, len(starts), figsize=(5.2 * len(starts), 4), sharey=True, squeeze=False)
    for ax, start in zip(axes[0], starts):
        colors = {}
        for name, ls in (("se", "--"), ("fine", "-")):
            s = (rules["start"] == start) & (rules["rule"] == name)
            t = rules["step"][s]
            order = f"{int(rules['outer'][s][0])},{int(rules['inner'][s][0])}"
            for k in (1, 2, 3):
                y = rules[f"m{k}"][s] / rules[f"w{k}_norm"][s]
                line, = ax.plot(t, y, ls, color=colors.get(k), lw=1.2, label=f"AMP $m_{k}$, rule ({order})")
                colors[k] = line.get_color()
        s = (rules["start"] == start) & (rules["rule"] == "se")
        fine = f"{int(rules['outer'][rules['rule'] == 'fine'][0])},{int(rules['inner'][rules['rule'] == 'fine'][0])}"
        for k in (1, 2, 3):
            ax.plot(rules["step"][s], rules[f"se_q{k}"][s], ":", color=colors[k], lw=1.5)
            ax.plot(rules["step"][s], rules[f"se_fine_q{k}"][s], "-", color=colors[k], lw=0.5, alpha=0.6)
        coarse = f"{int(rules['outer'][s][0])},{int(rules['inner'][s][0])}"
        ax.plot([], [], ":", color="k", lw=1.5, label=f"SE, rule ({coarse})")
        ax.plot([], [], "-", color="k", lw=0.5, label=f"SE, rule ({fine})")
        ax.set_xlabel("step")
        ax.set_title(rf"start $m = q = ({start})$, $\alpha = {rules['alpha'][0]:g}$, $d = {int(rules['d'][0])}$",
                     fontsize=9)
        ax.legend(fontsize=6, ncol=2)
    axes[0][0].set_ylabel(r"AMP: $m_l / (|w_l|^2/d)$;  SE: $q_l$")
    return _save(plt, fig, path)
