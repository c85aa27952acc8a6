"""Figures of an induction sweep."""

from __future__ import annotations

import os

import numpy as np

from phasejax.tasks.induction.result import FORMATION_THRESHOLD, InductionResult, _prev_token_profile


# ----------------------------------------------------------------------------

_STYLE = {("disentangled", 1): ("C0", "disentangled, 1 layer"), ("disentangled", 2): ("C3", "disentangled, 2 layers"),
          ("disentangled-linear", 1): ("C9", "disentangled (linear readout), 1 layer"),
          ("disentangled-linear", 2): ("C1", "disentangled (linear readout), 2 layers"),
          ("standard", 1): ("C2", "standard, 1 layer"), ("standard", 2): ("C4", "standard, 2 layers")}


def _style(model: str, layers: int) -> tuple[str, str]:
    return _STYLE.get((model, layers), ("C7", f"{model}, {layers} layers"))


def _models_in(result: InductionResult, idx) -> list[tuple[str, int]]:
    pairs = dict.fromkeys(zip(result.runs["model"][idx].tolist(), result.runs["layers"][idx].tolist()))
    return sorted(pairs, key=lambda p: (p[0] != "disentangled", p[0], p[1]))


def _default_S(result: InductionResult) -> int:
    Ss = np.unique(result.runs["S"])
    return int(Ss[len(Ss) // 2])


def plot_induction_curves(result: InductionResult, path: str, S: int | None = None, beta: float | None = None) -> str:
    """Training loss (top) and first-layer previous-token attention (bottom) vs step, one column per `T`.

    Thin lines: one per seed (block means of the training loss); dashed:
    the uniform, in-context unigram and Bayes (bigram) levels on the evaluation chains.
    """
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    S = _default_S(result) if S is None else S
    beta = float(result.runs["beta"][0]) if beta is None else beta
    Ts = np.unique(result.runs["T"][result.select(S=S, beta=beta)])
    fig = Figure(figsize=(4.2 * len(Ts), 7.0))
    axes = np.asarray(fig.subplots(2, len(Ts), squeeze=False, gridspec_kw=dict(hspace=0.28, wspace=0.25)))
    c = result.curves
    for j, T in enumerate(Ts):
        idx = result.select(S=S, T=T, beta=beta)
        ax, ax2 = axes[0, j], axes[1, j]
        for model, L in _models_in(result, idx):
            color, label = _style(model, L)
            for n, i in enumerate(idx[(result.runs["model"][idx] == model) & (result.runs["layers"][idx] == L)]):
                sel = c["run"] == i
                ax.plot(c["step"][sel], c["loss"][sel], color=color, lw=1.0, alpha=0.8, label=label if n == 0 else None)
                ax2.plot(c["step"][sel], c["prev_token_attention_1"][sel], color=color, lw=1.0, alpha=0.8,
                         label=label if n == 0 else None)
        r0 = idx[0]
        for name, ls, lab in (("uniform", ":", "uniform"), ("unigram", "--", "in-context unigram"),
                              ("bayes", "-.", "Bayes = bigram")):
            ax.axhline(result.runs[f"{name}_loss"][r0], color="k", ls=ls, lw=1.0, label=f"{lab} level")
        lo, hi = result.runs["bayes_loss"][r0], result.runs["uniform_loss"][r0]
        data = np.concatenate([c["loss"][c["run"] == i] for i in idx])
        ax.set_ylim(min(lo - 0.15 * (hi - lo), float(np.min(data)) - 0.02 * (hi - lo)),
                    max(hi + 0.25 * (hi - lo), float(np.max(data)) + 0.02 * (hi - lo)))
        ax.set_xscale("log")
        ax2.set_xscale("log")
        ax.set_title(f"S={S}, T={T}, beta={beta:g}", fontsize=9)
        ax.set_ylabel("training loss (nats / token)")
        ax2.axhline(0.9, color="gray", ls="--", lw=0.8, label="0.9")
        ax2.axhline(FORMATION_THRESHOLD, color="gray", ls=":", lw=0.8, label=f"{FORMATION_THRESHOLD} (formation)")
        ax2.set_ylim(0, 1)
        ax2.set_xlabel("training step (log scale)")
        ax2.set_ylabel("layer-1 mass on previous token")
    # one legend per row, right of the panels (the curves span their whole height); every column's entries
    for row in (0, 1):
        entries = {}
        for ax in axes[row]:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                entries.setdefault(label, handle)
        box = axes[row, -1].get_position()
        fig.legend(list(entries.values()), list(entries), fontsize=7, loc="center left",
                   bbox_to_anchor=(box.x1 + 0.01, 0.5 * (box.y0 + box.y1)), frameon=False)
    n_seeds = len(np.unique(result.runs["seed"]))
    fig.suptitle(f"Training on in-context Markov chains: loss and previous-token attention ({n_seeds} seeds, "
                 f"one line each; curves are means over blocks of steps)", fontsize=10)
    return save_figure(fig, path)


def plot_induction_attention(result: InductionResult, path: str, S: int | None = None, T: int | None = None,
                             beta: float | None = None) -> str:
    """Attention patterns of the first seed's models on one evaluation chain, and the per-position
    previous-token mass `A_1[t, t-1]` (mean over the evaluation chains)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    from phasejax.plotting import save_figure

    S = _default_S(result) if S is None else S
    T = int(np.max(result.runs["T"])) if T is None else T
    beta = float(result.runs["beta"][0]) if beta is None else beta
    idx = [i for i in result.select(S=S, T=T, beta=beta) if f"run{i}_tokens" in result.attention]
    panels = [(i, l) for i in idx for l in range(1, int(result.runs["layers"][i]) + 1)]
    fig = Figure(figsize=(3.3 * len(panels) + 4.6, 3.9))
    axes = fig.subplots(1, len(panels) + 1, gridspec_kw=dict(wspace=0.35, width_ratios=[1] * len(panels) + [1.3]))
    im = None
    for ax, (i, l) in zip(axes, panels):
        a = result.attention[f"run{i}_layer{l}"]
        im = ax.imshow(a, vmin=0, vmax=1, cmap="Greys", interpolation="nearest")
        _, label = _style(str(result.runs["model"][i]), int(result.runs["layers"][i]))
        ax.set_title(f"{label}\nlayer {l}", fontsize=8)
        ax.set_xlabel("key position", fontsize=8)
        ax.set_ylabel("query position", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if im is not None:
        cb = fig.colorbar(im, ax=list(axes[:-1]), shrink=0.8, pad=0.02)
        cb.set_label("attention weight")
    ax = axes[-1]
    p = result.positions
    for i in idx:
        model, L = str(result.runs["model"][i]), int(result.runs["layers"][i])
        color, label = _style(model, L)
        sel = p["run"] == i
        ax.plot(p["position"][sel], p["prev_token_attention_1"][sel], color=color, lw=1.2, label=label)
    ax.axhline(0.9, color="gray", ls="--", lw=0.8)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("query position t", fontsize=8)
    ax.set_ylabel("layer-1 mass on t-1 (mean over eval chains)", fontsize=8)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title("previous-token attention by position", fontsize=8)
    seed = int(np.min(result.runs["seed"]))
    fig.suptitle(f"Attention on one evaluation chain (S={S}, T={T}, beta={beta:g}, seed {seed})", fontsize=10)
    return save_figure(fig, path)


def plot_induction_phase_diagram(result: InductionResult, path: str, beta: float | None = None,
                                 model: str = "disentangled") -> str:
    """Relative gap to the Bayes loss over `(S, T)` for each layer count of `model`, and the 2-layer formation step.

    Cells: mean over seeds; text: mean +- standard deviation over seeds.
    """
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    beta = float(result.runs["beta"][0]) if beta is None else beta
    sel = result.select(model=model, beta=beta)
    Ls = np.unique(result.runs["layers"][sel])
    Ss, Ts = np.unique(result.runs["S"][sel]), np.unique(result.runs["T"][sel])
    has_step = np.any(Ls >= 2)
    fig = Figure(figsize=(4.4 * (len(Ls) + has_step), 3.9))
    axes = np.atleast_1d(fig.subplots(1, len(Ls) + has_step, gridspec_kw=dict(wspace=0.45)))

    def grid(col, layers):
        mean, sd = np.full((len(Ss), len(Ts)), np.nan), np.full((len(Ss), len(Ts)), np.nan)
        for a, S in enumerate(Ss):
            for b, T in enumerate(Ts):
                v = np.asarray(result.runs[col], float)[result.select(model=model, beta=beta, layers=layers, S=S, T=T)]
                v = v[v >= 0] if col.endswith("_step") else v
                if len(v):
                    mean[a, b], sd[a, b] = np.mean(v), np.std(v)
        return mean, sd

    gaps = {L: grid("relative_gap", L) for L in Ls}
    allg = np.concatenate([100 * g[0].ravel() for g in gaps.values()])
    pos = allg[np.isfinite(allg) & (allg > 0)]
    norm = LogNorm(vmin=max(0.05, float(np.min(pos))) if len(pos) else 0.05,
                   vmax=max(float(np.max(pos)) if len(pos) else 1.0, 1.0))
    for ax, L in zip(axes, Ls):
        mean, sd = gaps[L]
        mesh = ax.pcolormesh(np.arange(len(Ts)), np.arange(len(Ss)), np.clip(100 * mean, norm.vmin, None),
                             norm=norm, cmap="magma_r", shading="nearest")
        for a in range(len(Ss)):
            for b in range(len(Ts)):
                if np.isfinite(mean[a, b]):
                    ax.text(b, a, f"{100 * mean[a, b]:.1f}\n±{100 * sd[a, b]:.1f}", ha="center", va="center",
                            fontsize=7, color="w" if 100 * mean[a, b] > np.sqrt(norm.vmin * norm.vmax) else "k")
        ax.set_xticks(np.arange(len(Ts)), [str(t) for t in Ts])
        ax.set_yticks(np.arange(len(Ss)), [str(s) for s in Ss])
        ax.set_xlabel("sequence length T")
        ax.set_ylabel("number of states S")
        ax.set_title(f"{model}, {L} layer{'s' if L > 1 else ''}: (loss - Bayes) / Bayes", fontsize=9)
        cb = fig.colorbar(mesh, ax=ax, shrink=0.85)
        cb.set_label("relative gap to Bayes (%)")
    if has_step:
        ax = axes[-1]
        mean, sd = grid("induction_step", int(np.max(Ls)))
        mesh = ax.pcolormesh(np.arange(len(Ts)), np.arange(len(Ss)), mean, cmap="viridis", shading="nearest")
        for a in range(len(Ss)):
            for b in range(len(Ts)):
                txt = f"{mean[a, b]:.0f}\n±{sd[a, b]:.0f}" if np.isfinite(mean[a, b]) else "never"
                bright = np.isfinite(mean[a, b]) and mean[a, b] > np.nanmean(mean)
                ax.text(b, a, txt, ha="center", va="center", fontsize=7, color="k" if bright else "w")
        ax.set_xticks(np.arange(len(Ts)), [str(t) for t in Ts])
        ax.set_yticks(np.arange(len(Ss)), [str(s) for s in Ss])
        ax.set_xlabel("sequence length T")
        ax.set_ylabel("number of states S")
        ax.set_title(f"{int(np.max(Ls))} layers: step at which layer-1 previous-token\nmass reaches "
                     f"{FORMATION_THRESHOLD}", fontsize=9)
        cb = fig.colorbar(mesh, ax=ax, shrink=0.85)
        cb.set_label("training step")
    n_seeds = len(np.unique(result.runs["seed"][sel]))
    fig.suptitle(f"Final gap to the Bayes (Dirichlet posterior predictive) loss, beta={beta:g}; cells: mean ± std "
                 f"over {n_seeds} seeds (gaps below {norm.vmin:.2g}% get the lightest colour)", fontsize=10, y=1.06)
    return save_figure(fig, path)


def plot_induction_positions(result: InductionResult, path: str, S: int | None = None,
                             beta: float | None = None) -> str:
    """Evaluation loss at each position `t` (in-context learning curve), one panel per `T`, seed means."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    from phasejax.plotting import save_figure

    S = _default_S(result) if S is None else S
    beta = float(result.runs["beta"][0]) if beta is None else beta
    Ts = np.unique(result.runs["T"][result.select(S=S, beta=beta)])
    fig = Figure(figsize=(4.2 * len(Ts), 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(Ts), gridspec_kw=dict(wspace=0.25)))
    p = result.positions
    for ax, T in zip(axes, Ts):
        idx = result.select(S=S, T=T, beta=beta)
        pos = np.arange(1, T + 1)
        for model, L in _models_in(result, idx):
            color, label = _style(model, L)
            runs = idx[(result.runs["model"][idx] == model) & (result.runs["layers"][idx] == L)]
            ax.plot(pos, np.mean([p["loss"][p["run"] == i] for i in runs], 0), color=color, lw=1.3, label=label)
        ref = lambda k: np.mean([p[k][p["run"] == i] for i in idx], 0)  # noqa: E731
        ax.plot(pos, ref("unigram"), "k--", lw=1.0, label="in-context unigram")
        ax.plot(pos, ref("bayes"), "k-.", lw=1.0, label="Bayes = bigram")
        ax.axhline(float(result.runs["uniform_loss"][idx[0]]), color="k", ls=":", lw=1.0, label="uniform")
        ax.set_xlabel("position t (tokens seen)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("expected next-token loss (nats)")
        ax.set_title(f"S={S}, T={T}", fontsize=9)
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    box = axes[-1].get_position()
    fig.legend(list(entries.values()), list(entries), fontsize=7, loc="center left",
               bbox_to_anchor=(box.x1 + 0.01, 0.5 * (box.y0 + box.y1)), frameon=False)
    fig.suptitle(f"In-context learning: loss at each position on the evaluation chains (beta={beta:g}; "
                 "model curves are seed means)", fontsize=10)
    return save_figure(fig, path)


def plot_prev_token_by_position(result: InductionResult, path: str, T: int | None = None,
                                threshold: float = 0.9) -> str:
    """First-layer mass `A_1[t, t-1]` against the query position `t` for the 2-layer disentangled runs at `T`
    (default: the largest), one line per `(chains per step, S)`: the seed mean, with the seeds' range shaded."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    r = result.runs
    two = np.flatnonzero((r["model"] == "disentangled") & (r["layers"] == 2))
    if two.size == 0:
        raise ValueError("the result has no 2-layer disentangled runs")
    T = int(np.max(r["T"][two])) if T is None else int(T)
    two = two[r["T"][two] == T]
    if two.size == 0:
        raise ValueError(f"no 2-layer disentangled run has T = {T}")
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    batches, Ss = np.unique(r["batch_size"][two]), np.unique(r["S"][two])
    styles = ("-", "--", ":", "-.")
    t = np.arange(1, T)                                               # 0-based query t = 1 .. T-1
    for b, batch in enumerate(batches):
        for k, S in enumerate(Ss):
            runs = two[(r["batch_size"][two] == batch) & (r["S"][two] == S)]
            if runs.size == 0:
                continue
            prof = np.stack([_prev_token_profile(result, i) for i in runs])
            mean = float(prof.mean())
            line, = ax.plot(t, prof.mean(0), color=f"C{b}", ls=styles[k % len(styles)], lw=1.3,
                            label=f"{int(batch)} chains/step, S={int(S)}: mean {mean:.3f}")
            ax.fill_between(t, prof.min(0), prof.max(0), color=line.get_color(), alpha=0.15, lw=0)
    ax.axhline(threshold, color="k", lw=0.8, ls=":", label=f"{threshold:g}")
    ax.set_xlabel("query position t (attends to key t-1)")
    ax.set_ylabel("first-layer attention on the previous token")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, loc="lower left")
    n_seeds = len(np.unique(r["seed"][two]))
    ax.set_title(f"2-layer disentangled model, T={T}: previous-token head by position\n"
                 f"(lines: mean over {n_seeds} seeds and the evaluation chains; bands: range over seeds)", fontsize=9)
    return save_figure(fig, path)


def plot_induction_figures(result: InductionResult, out_dir: str, S: int | None = None) -> list[str]:
    """All figures of a sweep into `out_dir`: curves, attention, phase diagram, positions (from the runs of the
    most common number of chains per step: the main grid) and the previous-token mass by position (all runs)."""
    sizes, counts = np.unique(result.runs["batch_size"], return_counts=True)
    main = result.subset(result.select(batch_size=int(sizes[np.argmax(counts)])))
    paths = [plot_induction_curves(main, os.path.join(out_dir, "curves.png"), S),
             plot_induction_attention(main, os.path.join(out_dir, "attention.png"), S),
             plot_induction_phase_diagram(main, os.path.join(out_dir, "phase_diagram.png")),
             plot_induction_positions(main, os.path.join(out_dir, "position_losses.png"), S)]
    if np.any((result.runs["model"] == "disentangled") & (result.runs["layers"] == 2)):
        paths.append(plot_prev_token_by_position(result, os.path.join(out_dir, "prev_token.png")))
    return paths
