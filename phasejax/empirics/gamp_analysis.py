"""Analysis of GAMP sweeps (`phasejax.empirics.gamp.gamp_sweep`) against the converged state evolution.

Pure numpy functions on the columns of a `GAMPSweep` (one entry per run) and
the SE reference of both branches, composed by `summarize_gamp_sweep` into what
`phasejax gamp` writes to `summary.json`:

* per run: `run_verdicts` (converged / unstable / diverged and the measured
  instability) from the status, the final relative gradient of `R` and the
  tail residual; `tail_means` averages a history over a run's last iterations;
* per `(onsager, branch)` group and dimension `d`: `verdict_counts`,
  `hit_counts` (runs meeting a criterion), `gap_statistics` (relative RMS gap
  of the tail-averaged overlaps to the SE, mean and standard error over seeds),
  `chattering_statistics`; across `d`: `power_law_fit` (fitted exponent of the
  gap vs `d` with its standard error);
* the SE reference: `se_references` (both branches' converged SE fixed points
  and their replicons, `branch_replicon`; optionally cached in a JSON file);
* the figure: `plot_gamp_sweep`.

On a finished sweep (the files `phasejax gamp` writes):

```python
from phasejax.empirics.gamp import GAMPSweep
from phasejax.empirics.gamp_analysis import se_references, summarize_gamp_sweep
from phasejax.theory import make_params

sweep = GAMPSweep.load("results/gamp")
cfg = sweep.config
se = se_references(make_params(cfg["alpha"], cfg["omega"], lam=cfg["lam"]), "results/gamp/se_reference.json")
summary = summarize_gamp_sweep(sweep.with_verdicts(se), se)
print(summary["verdicts"], summary["exponents"])
```

Example (a hand-made table of three runs):
  >>> import numpy as np
  >>> verdict, instability = run_verdicts(["converged", "max_iterations", "diverged"],
  ...                                     [1e-9, 0.3, np.nan], [1e-9, 0.5, np.nan])
  >>> verdict_counts([100, 100, 200], verdict)
  {'100': {'converged': 1, 'unstable': 1, 'diverged': 0}, '200': {'converged': 0, 'unstable': 0, 'diverged': 1}}
  >>> round(power_law_fit([100, 200, 400], [0.3, 0.3 / 2**0.5, 0.15])["slope"], 9)
  -0.5
"""

from __future__ import annotations

import os

import numpy as np

BRANCHES = ("positional", "semantic")
"""The two SE branches a GAMP sweep starts next to (`phasejax.empirics.gamp.BRANCH_INITS`)."""

VERDICTS = ("converged", "unstable", "diverged")
"""Per-run verdicts of `run_verdicts`."""

CRITICAL_GRAD = 1e-6
"""A run whose final relative gradient of `R` is below this ended at a critical point of `R`."""

SE_FIELDS = ("q", "m", "theta", "V", "q_err", "m_err", "theta_err", "train_loss", "test_error", "stability",
             "subspace_gain")
"""Per-token values of `phasejax.theory.solve_state_evolution`'s result kept in an SE reference entry."""

REPLICON_SUMMARY = ("replicon", "replicon_err", "replicon_regular", "replicon_regular_err", "replicon_jump",
                    "replicon_jump_err", "rs_stable")
"""Replicon values of an SE reference entry copied into `summarize_gamp_sweep`'s `replicon` section."""

CHATTERING = ("residual", "flip_fraction", "flip_share")
"""Tail statistics of `chattering_statistics` (columns `<name>_tail` of a `GAMPSweep`)."""

SUMMARY_NOTES = dict(
    verdicts="runs per verdict: converged (stopping criterion or a critical point of R), "
             "unstable (neither converged nor diverged: chatters), diverged",
    replicon="the SE branch's replicon at this point (phasejax.theory.replicon): at the "
             "reference smoothing, its regular part, the jump strength; rs_stable: replicon "
             "below 1 at zero smoothing",
    counts="[runs meeting the stopping criterion (relative change < tol), runs]",
    critical_points="[runs ending at a critical point of R (relative gradient < 1e-6), runs]",
    gaps="relative RMS gap of the tail-averaged (q, m) (positional) or (q, |theta|) "
         "(semantic) to the SE; mean and standard error over seeds",
    chattering="tail residual, basin-flip fraction and flip share: [mean, s.d.] over seeds")
"""What each section of `summarize_gamp_sweep`'s result holds (written with it)."""


# ---------------------------------------------------------------------------------------------------------------
# Per run


def tail_window(iterations: int, tail: int, *, per_iterate: bool) -> slice:
    """The last `tail` entries of one run's history that stopped after `iterations` iterations.

    `per_iterate=True`: a history of the iterates, `(T + 1,)` with entry 0 the
    init: iterates `max(iterations - tail, 0) + 1 ... iterations` (the init is
    never in the window). `per_iterate=False`: a history per iteration,
    `(T,)` (entry `t` the update that led to iterate `t + 1`): entries
    `max(iterations - tail, 0) ... iterations - 1` (entry 0 if no iteration ran).
    """
    iterations, tail = int(iterations), int(tail)
    if tail < 1:
        raise ValueError(f"tail must be >= 1, got tail={tail}")
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got iterations={iterations}")
    start = max(iterations - tail, 0)
    if per_iterate:
        return slice(start + 1, iterations + 1)
    return slice(start, max(iterations, 1))


def tail_means(history, iterations, tail: int, *, per_iterate: bool) -> np.ndarray:
    """`(runs,)` mean of each run's history over its `tail_window`.

    Args: `history (runs, T + 1)` (`per_iterate=True`, e.g. `q_hist`) or
    `(runs, T)` (`per_iterate=False`, e.g. `residual`); `iterations (runs,)`
    the iterations each run made. The tail averages of a chattering run's
    overlaps and residual (`GAMPSweep` columns `*_tail_mean`, `*_tail`).
    """
    history = np.asarray(history, np.float64)
    iterations = np.asarray(iterations)
    if history.ndim != 2 or iterations.shape != history.shape[:1]:
        raise ValueError(f"history must be (runs, T) and iterations (runs,), got history {history.shape}, "
                         f"iterations {iterations.shape}")
    return np.asarray([float(np.mean(h[tail_window(it, tail, per_iterate=per_iterate)]))
                       for h, it in zip(history, iterations)])


def run_verdicts(status, grad_norm, residual_tail) -> tuple[np.ndarray, np.ndarray]:
    """Per run: `"converged"` (the stopping criterion met, or a critical point of `R`: relative gradient below
    `CRITICAL_GRAD`), `"diverged"` (status `diverged`: non-finite or exploding iterates), else `"unstable"`
    (GAMP neither converged nor diverged: it moves around its fixed point at every iteration); and the measured
    instability, the tail-averaged relative change of `Q` per iteration (`residual_tail`; tiny for a converged
    run, O(0.1-1) for a chattering one). Args `(runs,)`: `status` (str, `phasejax.solvers.Status` names in lower
    case), `grad_norm`, `residual_tail` (float)."""
    status = np.asarray(status).astype(str)
    grad = np.asarray(grad_norm, float)
    conv = (status == "converged") | (np.isfinite(grad) & (grad < CRITICAL_GRAD))
    verdict = np.where(status == "diverged", "diverged", np.where(conv, "converged", "unstable"))
    return verdict, np.asarray(residual_tail, float)


# ---------------------------------------------------------------------------------------------------------------
# Per (onsager, branch) group and dimension d


def _dims(d) -> list[int]:
    return sorted(set(np.asarray(d).tolist()))


def verdict_counts(d, verdict, *, verdicts=VERDICTS) -> dict:
    """`{str(d): {verdict: runs}}` per dimension (sorted) of runs with `d (runs,)` and `verdict (runs,)`."""
    d, verdict = np.asarray(d), np.asarray(verdict)
    return {str(k): {v: int(np.sum((verdict == v) & (d == k))) for v in verdicts} for k in _dims(d)}


def hit_counts(d, hit) -> dict:
    """`{str(d): [runs with hit, runs]}` per dimension (sorted); `hit (runs,)` bool (e.g. a criterion met)."""
    d, hit = np.asarray(d), np.asarray(hit, bool)
    return {str(k): [int(np.sum(hit & (d == k))), int(np.sum(d == k))] for k in _dims(d)}


def tail_gaps(q_tail, second_tail, q_se: float, second_se: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Relative gaps of tail-averaged overlaps to the SE: `dq = (q - q_se) / q_se`, `d2 = (|s| - |s_se|) / |s_se|`
    for the branch's second overlap `s` (`m` positional, `theta` semantic; its sign is a symmetry) and the
    relative RMS gap `g = sqrt((dq^2 + d2^2) / 2)`; each `(runs,)`."""
    dq = (np.asarray(q_tail, float) - q_se) / q_se
    d2 = (np.abs(np.asarray(second_tail, float)) - abs(second_se)) / abs(second_se)
    return np.sqrt(0.5 * (dq**2 + d2**2)), dq, d2


def gap_statistics(d, q_tail, second_tail, q_se: float, second_se: float) -> dict:
    """Per dimension (sorted), `{str(d): dict(mean, stderr, q_rel, second_rel, runs)}`: the mean over runs of the
    relative RMS gap (`tail_gaps`) with its standard error (`s.d. / sqrt(runs)`, `ddof=1`; NaN for one run)
    and the mean signed relative gaps of `q` and of the second overlap."""
    d = np.asarray(d)
    q_tail, second_tail = np.asarray(q_tail, float), np.asarray(second_tail, float)
    out = {}
    for k in _dims(d):
        sel = d == k
        g, dq, d2 = tail_gaps(q_tail[sel], second_tail[sel], q_se, second_se)
        n = len(g)
        out[str(k)] = dict(mean=float(np.mean(g)), stderr=float(np.std(g, ddof=1) / np.sqrt(n)) if n > 1
                           else float("nan"), q_rel=float(np.mean(dq)), second_rel=float(np.mean(d2)), runs=n)
    return out


def chattering_statistics(d, tails: dict) -> dict:
    """`{str(d): {name: [mean, s.d.]}}` per dimension (sorted) of the tail statistics `tails = {name: (runs,)}`
    (e.g. `residual`, `flip_fraction`, `flip_share`: a `GAMPSweep`'s `<name>_tail` columns); s.d. with `ddof=0`."""
    d = np.asarray(d)
    tails = {s: np.asarray(v, float) for s, v in tails.items()}
    return {str(k): {s: [float(np.mean(v[d == k])), float(np.std(v[d == k]))] for s, v in tails.items()}
            for k in _dims(d)}


def power_law_fit(x, y) -> dict:
    """Least-squares fit of `log y = slope log x + c`: `dict(slope, stderr)`, the standard error of the slope
    from the residuals (`sqrt(RSS / (k - 2) / sum (log x - mean)^2)`, NaN for `k = 2` points). `x, y (k,)`
    positive, `k >= 2` (e.g. the mean gap to the SE vs `d`: its exponent)."""
    x, y = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise ValueError(f"x and y must be two (k,) arrays with k >= 2, got {x.shape} and {y.shape}")
    A = np.stack([x, np.ones_like(x)], 1)
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    resid = y - A @ coef
    stderr = (float(np.sqrt(np.sum(resid**2) / (len(x) - 2) / np.sum((x - x.mean()) ** 2)))
              if len(x) > 2 else float("nan"))
    return dict(slope=float(coef[0]), stderr=stderr)


def replicon_summary(se: dict) -> dict:
    """`{branch: {k: se[branch][k]}}` for `k` in `REPLICON_SUMMARY` (None where an entry lacks it)."""
    return {b: {k: se[b].get(k) for k in REPLICON_SUMMARY} for b in BRANCHES}


def summarize_gamp_sweep(sweep, se: dict) -> dict:
    """The summary of a GAMP sweep against the SE reference (`summary.json` of `phasejax gamp`).

    Args: `sweep`, a `GAMPSweep` with its verdicts (`with_verdicts`); `se`,
    `{branch: {"q", "m", "theta", replicon values ...}}` (`se_references`).
    Per group `"<onsager>/<branch>"` and `d`: `verdicts` (`verdict_counts`),
    `counts` (runs meeting the stopping criterion), `critical_points` (final
    relative gradient below `CRITICAL_GRAD`), `gaps` (`gap_statistics` of the
    tail-averaged `(q, m)` positional or `(q, theta)` semantic), `chattering`
    (`chattering_statistics`); per group with two or more `d`: `exponents`
    (`power_law_fit` of the mean gap vs `d`); `replicon` (`replicon_summary`);
    `notes` (`SUMMARY_NOTES`).
    """
    c = sweep.columns
    out = dict(verdicts={}, counts={}, critical_points={}, gaps={}, exponents={}, chattering={},
               replicon=replicon_summary(se), notes=dict(SUMMARY_NOTES))
    for onsager in sorted(set(c["onsager"])):
        for branch in sorted(set(c["branch"])):
            ref = se[branch]
            second = "m" if branch == "positional" else "theta"
            rows = (c["onsager"] == onsager) & (c["branch"] == branch)
            key = f"{onsager}/{branch}"
            d = c["d"][rows]
            out["verdicts"][key] = verdict_counts(d, c["verdict"][rows])
            out["counts"][key] = hit_counts(d, c["status"][rows] == "converged")
            out["critical_points"][key] = hit_counts(d, c["grad_norm"][rows] < CRITICAL_GRAD)
            gaps = gap_statistics(d, c["q_tail_mean"][rows], c[f"{second}_tail_mean"][rows], ref["q"], ref[second])
            out["gaps"][key] = gaps
            out["chattering"][key] = chattering_statistics(d, {s: c[f"{s}_tail"][rows] for s in CHATTERING})
            dims = _dims(d)
            if len(dims) >= 2:
                out["exponents"][key] = power_law_fit(dims, [gaps[str(k)]["mean"] for k in dims])
    return out


# ---------------------------------------------------------------------------------------------------------------
# The SE reference


def branch_replicon(params, ref: dict) -> dict:
    """The replicon of an SE reference entry (`phasejax.theory.replicon`, `r = t = K = 1`, overlaps from the
    per-token `q, m, V, theta`): `replicon` at the reference smoothing with its error, its regular part, the jump
    strength and whether RS is stable at zero smoothing (`rs_stable`). Computed in float64."""
    import jax.numpy as jnp

    import phasejax
    from phasejax.theory import default_scheme
    from phasejax.theory.fields import Overlaps
    from phasejax.theory.replicon import replicon, rs_stable

    s2 = float(np.asarray(params.sigma)[0]) ** 2
    with phasejax.float64_scope():
        ov = Overlaps(q0=jnp.array([[ref["q"] / s2]]), m=jnp.array([[ref["m"]]]), V0=jnp.array([[ref["V"] / s2]]),
                      theta0=jnp.array([[ref["theta"] / s2]]))
        r = replicon(ov, params, default_scheme(params))
        out = dict(replicon=r.value, replicon_err=r.value_err, replicon_regular=r.regular,
                   replicon_regular_err=r.regular_err, replicon_jump=r.jump, replicon_jump_err=r.jump_err,
                   replicon_tie_width=r.tie_width, two_minima=r.two_minima)
        out = {k: float(v) for k, v in out.items()}
        out["rs_stable"] = bool(rs_stable(out["replicon_regular"], out["replicon_jump"], out["replicon_regular_err"]))
    return out


def se_reference_key(params) -> dict:
    """`dict(alpha, omega, lam)` of `params` (floats): what an SE reference is computed for."""
    return dict(alpha=float(np.asarray(params.alpha)), omega=float(np.asarray(params.omega)),
                lam=float(np.asarray(params.lam)))


def se_references(params, path: str | None = None) -> dict:
    """Converged SE fixed points of both branches (Stein form, `phasejax.theory.solve_state_evolution`, float64)
    with their replicons (`branch_replicon`).

    Returns `{"params": se_reference_key(params), branch: {SE_FIELDS..., "status", replicon values...}}` for
    `branch` in `BRANCHES`. With `path` (a JSON file), a reference already there for the same parameters is
    returned as it is (one written before the replicon existed gets it added and is rewritten); otherwise the
    reference is computed and written there.
    """
    from phasejax.io import atomic_write_json, read_json

    key = se_reference_key(params)
    if path is not None and os.path.exists(path):
        cached = read_json(path)
        for branch in BRANCHES:    # JSON writes NaN as null: back to NaN
            if isinstance(cached.get(branch), dict):
                cached[branch] = {k: float("nan") if v is None else v for k, v in cached[branch].items()}
        if cached.get("params") == key:
            if all("replicon" in cached.get(b, {}) for b in BRANCHES):
                return cached
            for branch in BRANCHES:     # a reference written before the replicon: add it
                cached[branch].update(branch_replicon(params, cached[branch]))
            atomic_write_json(path, cached)
            return cached
    import phasejax
    from phasejax.theory import solve_state_evolution

    out = dict(params=key)
    with phasejax.float64_scope():
        for branch in BRANCHES:
            res = solve_state_evolution(params, branch)
            out[branch] = {k: float(np.asarray(getattr(res, k)).ravel()[0]) for k in SE_FIELDS}
            out[branch]["status"] = res.status_name
            out[branch].update(branch_replicon(params, out[branch]))
    if path is not None:
        atomic_write_json(path, out)
    return out


# ---------------------------------------------------------------------------------------------------------------
# The figure


def plot_gamp_sweep(sweep, se: dict, summary: dict, path: str) -> str:
    """Four panels, written to the PNG `path` (returned): (a) `q` per iteration at the largest `d` against the SE
    of each branch, (b) residual and basin-flip fraction per iteration (Stein Onsager, largest `d`), (c) the gap
    to the SE vs `d` with its fitted exponent, (d) tail residual and flip fraction vs `d`. Args: a `GAMPSweep`,
    the SE reference (`se_references`) and its `summarize_gamp_sweep` result."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    c, h = sweep.columns, sweep.histories
    d_max = int(np.max(c["d"]))
    fig = Figure(figsize=(13, 9.5), layout="constrained")
    axes = fig.subplots(2, 2)
    colors = {"positional": "tab:blue", "semantic": "tab:red"}
    styles = {"stein": "-", "pointwise": ":"}
    ax = axes[0, 0]
    for i in np.flatnonzero(c["d"] == d_max):
        b, o = c["branch"][i], c["onsager"][i]
        ax.plot(h["q_hist"][i], color=colors[b], ls=styles[o], lw=0.9, alpha=0.7)
    for b in colors:
        ax.axhline(se[b]["q"], color=colors[b], ls="--", lw=2, label=f"SE {b}: q = {se[b]['q']:.4f}")
    ax.plot([], [], "k-", label="GAMP, Stein Onsager")
    ax.plot([], [], "k:", label="GAMP, pointwise Onsager")
    ax.set(xlabel="iteration", ylabel=r"$q = \sigma^2 Q^\top Q / d$",
           title=f"(a) overlap q per iteration, d = {d_max} (one line per seed)")
    ax.legend(fontsize=8, loc="center right")
    ax = axes[0, 1]
    for i in np.flatnonzero((c["d"] == d_max) & (c["onsager"] == "stein")):
        b = c["branch"][i]
        ax.semilogy(np.arange(1, h["residual"].shape[1] + 1), h["residual"][i], color=colors[b], lw=0.8, alpha=0.7)
        ax.semilogy(np.arange(1, h["residual"].shape[1] + 1), np.maximum(h["flip_fraction"][i], 1e-4),
                    color=colors[b], lw=0.8, ls="--", alpha=0.7)
    ax.plot([], [], "k-", label=r"residual $\|Q_{new} - Q\| / \|Q\|$")
    ax.plot([], [], "k--", label="fraction of samples jumping basin (floored at 1e-4)")
    for b in colors:
        ax.plot([], [], color=colors[b], label=f"{b} init")
    ax.set(xlabel="iteration", ylabel="per-iteration value (log)",
           title=f"(b) Stein Onsager, d = {d_max}: residual and basin flips")
    ax.legend(fontsize=8, loc="lower left")
    ax = axes[1, 0]
    for key, gaps in summary["gaps"].items():
        o, b = key.split("/")
        dims = np.array(sorted(int(d) for d in gaps))
        m = np.array([gaps[str(d)]["mean"] for d in dims])
        e = np.array([gaps[str(d)]["stderr"] for d in dims])
        shift = 1.03 if o == "stein" else 0.97
        slope = summary["exponents"].get(key, {}).get("slope", float("nan"))
        ax.errorbar(dims * shift, m, yerr=e, color=colors[b], ls=styles[o], marker="o", capsize=3,
                    label=f"{b}, {o} (slope {slope:.2f})")
    dims = np.array(sorted(set(c["d"].tolist())))
    ref = summary["gaps"][next(iter(summary["gaps"]))][str(dims[0])]["mean"]
    ax.loglog(dims, ref * (dims / dims[0]) ** -0.5, "k--", lw=1, label=r"$\propto d^{-1/2}$")
    ax.set(xscale="log", yscale="log", xlabel="dimension d", ylabel="relative RMS gap to the SE fixed point",
           title="(c) relative gap of tail-averaged overlaps to the SE (mean +- s.e.)")
    ax.legend(fontsize=8, loc="lower left")
    ax = axes[1, 1]
    floor = 1e-9
    for key, chat in summary["chattering"].items():
        o, b = key.split("/")
        dd = np.array(sorted(int(d) for d in chat))
        shift = 1.03 if o == "stein" else 0.97
        for stat, marker, alpha in (("residual", "s", 1.0), ("flip_fraction", "^", 0.5)):
            mean = np.array([chat[str(d)][stat][0] for d in dd])
            sd = np.array([chat[str(d)][stat][1] for d in dd])
            shown = np.maximum(mean, floor)
            yerr = np.stack([np.minimum(sd, shown - floor), sd])
            ax.errorbar(dd * shift, shown, yerr=yerr, color=colors[b], ls=styles[o], marker=marker, capsize=3,
                        alpha=alpha, label=f"{b}, {o}" if stat == "residual" else None)
    ax.plot([], [], "ks", label="tail residual")
    ax.plot([], [], "k^", alpha=0.5, label="basin-flip fraction")
    ax.set(xscale="log", yscale="log", xlabel="dimension d",
           ylabel=f"tail average (last iterations; floored at {floor:g})",
           title="(d) chattering vs d: tail residual and fraction of samples flipping (mean +- s.d.)")
    ax.legend(fontsize=7, loc="center right")
    cfg = sweep.config
    fig.suptitle(f"GAMP vs state evolution at alpha = {cfg['alpha']}, omega = {cfg['omega']}, lambda = {cfg['lam']} "
                 f"(dashed: converged SE)")
    return save_figure(fig, path)
