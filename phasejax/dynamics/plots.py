"""Figures of `phasejax dynamics` from the CSV files it wrote (no pyplot; `phasejax.plotting.save_figure`)."""

from __future__ import annotations

import os

import numpy as np


def _landscape_alpha_c():
    """`(omega, alpha_c)` of the main model's landscape from the committed phase diagram, or `None`."""
    from phasejax.io import read_csv

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "results", "phase_diagram", "thresholds.csv")
    if not os.path.exists(path):
        return None
    t = read_csv(path)
    return np.asarray(t["omega"], float), np.asarray(t["alpha_c"], float)


def _sgd_fractions(ax, runs, kind, fmt, color, lr, wilson_interval) -> None:
    """SGD fractions ending positional per omega, with 68% Wilson intervals, for the runs of `kind`."""
    sel = runs["kind"] == kind
    if not np.any(sel):
        return
    oms = np.unique(runs["omega"][sel])
    k = np.asarray([np.sum(runs["mechanism"][sel & (runs["omega"] == o)] == "positional") for o in oms])
    n = np.asarray([np.sum(sel & (runs["omega"] == o)) for o in oms])
    lo, hi = wilson_interval(k, n)
    yerr = [np.clip(k / n - lo, 0, None), np.clip(hi - k / n, 0, None)]
    d0 = int(runs["d"][sel][0])
    ax.errorbar(oms, k / n, yerr=yerr, fmt=fmt, color=color, ms=4, capsize=2,
                label=f"SGD d={d0}, lr={lr:g}, {int(n.min())} runs (68% Wilson)")


def plot_all(out: str) -> list[str]:
    """trajectories.png, phase_diagram.png and escape_time.png in `out`; returns their paths."""
    from matplotlib.figure import Figure

    from phasejax.io import read_csv, read_json
    from phasejax.plotting import save_figure
    from phasejax.plotting_experiments import wilson_interval

    ode = read_csv(os.path.join(out, "ode.csv"))
    sgd = read_csv(os.path.join(out, "sgd_trajectories.csv"))
    pd = read_csv(os.path.join(out, "phase_diagram.csv"))
    runs = read_csv(os.path.join(out, "runs.csv"))
    summary = read_json(os.path.join(out, "summary.json"))
    paths = []

    # trajectories: ODE vs SGD (mean and standard deviation over seeds) per d
    fig = Figure(figsize=(10, 4))
    omegas = np.unique(sgd["omega"])
    ds = np.unique(sgd["d"])
    colors = ["tab:orange", "tab:green", "tab:purple", "tab:brown"]
    for j, om in enumerate(omegas):
        ax = fig.add_subplot(1, len(omegas), j + 1)
        for k, d in enumerate(ds):
            s = (sgd["omega"] == om) & (sgd["d"] == d)
            t = np.unique(sgd["t"][s])
            for name, ls in (("m", "-"), ("e", "--")):
                v = np.asarray(sgd[name][s]).reshape(-1, len(t))
                mu, sd = v.mean(0), v.std(0)
                ax.fill_between(t, mu - sd, mu + sd, color=colors[k % 4], alpha=0.2, lw=0)
                ax.plot(t, mu, ls, color=colors[k % 4], lw=1, label=f"SGD d={int(d)} ({name})")
        s = np.isclose(ode["omega"], om)
        ax.plot(ode["t"][s], ode["m"][s], "k-", lw=1.5, label="ODE m")
        ax.plot(ode["t"][s], ode["e"][s], "k--", lw=1.5, label="ODE e")
        ax.set_xlabel("t = steps / d")
        ax.set_ylabel("overlap")
        ax.set_title(rf"$\omega={om:g}$, lr={summary['lr']:g}: m (solid), e (dashed)")
        if j == 0:
            ax.legend(fontsize=6, ncol=2)
    paths.append(save_figure(fig, os.path.join(out, "trajectories.png")))

    # dynamical phase diagram
    fig = Figure(figsize=(11.5, 4.2))
    fig.subplots_adjust(wspace=0.3)
    ax = fig.add_subplot(1, 2, 1)
    lrs = np.unique(pd["lr"])
    for i, lr in enumerate(lrs):
        for k, d in enumerate(np.unique(pd["d"])):
            s = (pd["lr"] == lr) & (pd["d"] == d)
            ax.plot(pd["omega"][s], pd["fraction_positional"][s], ["-", ":"][i % 2], color=colors[k % 4], lw=1.2,
                    label=f"ODE lr={lr:g}, d={int(d)}")
    for kind, fmt, color, lr_key in (("fractions", "o", "k", "lr"), ("fractions_lr_paper", "D", "tab:red", "lr_paper")):
        _sgd_fractions(ax, runs, kind, fmt, color, summary.get(lr_key), wilson_interval)
    sw = summary.get("population_switch_omega")
    if sw is not None and np.isfinite(sw):
        ax.axvline(sw, color="tab:red", lw=1, label=rf"population minimum switches ($\omega$={sw:.3f})")
    conv = summary.get("rate_crossing_omega_converged")
    if conv is not None:
        ax.axvline(conv["value"], color="tab:blue", lw=0.8, ls="--",
                   label=rf"equal plateau growth rates, any lr ($\omega$={conv['value']:.4f})")
    ax.set_xlabel(r"$\omega$")
    ax.set_ylabel("fraction of random inits ending positional")
    ax.set_title("mechanism online SGD reaches (square loss)", fontsize=10)
    ax.legend(fontsize=6)
    ax2 = fig.add_subplot(1, 2, 2)
    s = (pd["lr"] == lrs[0]) & (pd["d"] == np.unique(pd["d"])[0])
    ax2.plot(pd["omega"][s], pd["loss_semantic"][s], label="population loss, semantic minimum")
    ax2.plot(pd["omega"][s], pd["loss_positional"][s], label="population loss, positional minimum")
    ax2.set_xlabel(r"$\omega$")
    ax2.set_ylabel("R")
    ax2.legend(fontsize=7, loc="upper left")
    lc = _landscape_alpha_c()
    if lc is not None:
        ax3 = ax2.twinx()
        ax3.plot(lc[0], lc[1], "k:", lw=1)
        ax3.set_ylabel(r"ERM landscape $\alpha_c(\omega)$ (dotted; another $A$, $\sigma$)", fontsize=8)
    ax2.set_title("best population loss of each mechanism", fontsize=10)
    paths.append(save_figure(fig, os.path.join(out, "phase_diagram.png")))

    # escape time vs d: ODE from r0 = 1/sqrt(d) (per lr), SGD from random inits
    fig = Figure(figsize=(5.8, 4.2))
    ax = fig.add_subplot(1, 1, 1)
    for i, lr in enumerate(lrs):
        s = (pd["lr"] == lr) & np.isclose(pd["omega"], 0.3)
        ax.plot(pd["d"][s], pd["escape_time"][s] * lr, "o-", label=f"ODE from r0 = 1/sqrt(d), lr={lr:g} "
                                                                   "(mean over init angles)")
    sel = runs["kind"] == "scaling"
    if np.any(sel):
        ds = np.unique(runs["d"][sel])
        lr0 = summary["lr"]
        q = np.asarray([np.percentile(runs["escape_time"][sel & (runs["d"] == d)], [25, 50, 75]) for d in ds]) * lr0
        qo = np.asarray([np.percentile(runs["escape_time_ode"][sel & (runs["d"] == d)], [25, 50, 75])
                         for d in ds]) * lr0
        ax.errorbar(ds, q[:, 1], yerr=[q[:, 1] - q[:, 0], q[:, 2] - q[:, 1]], fmt="s", color="k", capsize=2,
                    label=f"SGD from random inits, lr={lr0:g} (median, quartiles)")
        ax.errorbar(ds * 1.08, qo[:, 1], yerr=[qo[:, 1] - qo[:, 0], qo[:, 2] - qo[:, 1]], fmt="x", color="tab:red",
                    capsize=2, label="ODE from each SGD run's own init (median, quartiles)")
    ax.set_xscale("log")
    ax.set_xlabel("d")
    ax.set_ylabel(r"lr $\times$ escape time (first $\sqrt{m^2+e^2}$ = 0.2)")
    ax.set_title(r"escape from the plateau, $\omega = 0.3$ (linear in log d)")
    ax.legend(fontsize=6.5)
    paths.append(save_figure(fig, os.path.join(out, "escape_time.png")))
    return paths
