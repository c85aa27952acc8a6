"""The Huber loss of the outputs: the paper's attention model trained with a loss none of its results covers.

The student and the data are the main model's; only the training loss changes, from `||y - f||^2 / (2d)` to
`sum_{l, k} huber_delta(y_lk - f_lk) / d` (`huber_delta(u) = u^2/2` for `|u| <= delta`, `delta (|u| - delta/2)`
beyond). The loss is declared once, `phasejax.theory.HuberLoss(delta)`, a static field of the parameters
(`huber_params`): in the limit every output coordinate of token `l`'s residual is Gaussian with variance `s_l^2 =
sum_j (T - S)_lj^2 sigma_j^2` given the fields, so the per-sample loss is `sum_l E[huber_delta(s_l z)]`
(`phasejax.theory.losses.gaussian_huber`); the state evolution, its derivatives and the replicon follow from it,
and the students of `phasejax.empirics` minimise `HuberLoss.output_risk` of their residuals. The test error stays
the square error.

`compute` solves both branches along alpha (`continuation_table`, the default `SplitProductRule` with its
replicas' errors) for the Huber loss and, beside it, the square loss; trains tied students at `d >= 800` from both
inits with each loss on the same data sets (`phasejax.empirics.train_students`); and derives `alpha_c` of each loss
in theory (`branch_thresholds`) and from the students (the seed mean of the paired `e_t(semantic) -
e_t(positional)` crossing zero, `empirical_alpha_c`, with the Huber crossing's shift from the square one paired
by seed). Results: `results/extensions/huber/`; page: docs/extensions/huber.md.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from phasejax.extensions._figures import draw_band, finite_err
from phasejax.extensions._presets import ExtensionPreset, ExtensionRun, alpha_range, preset_value
from phasejax.extensions._tables import (
    EXTENSION_SE_CONFIG, ExtensionResult, attach_reached_branch, continuation_table, ordered, relative_gaps,
    scheme_config, seed_means, train_tied,
)
from phasejax.extensions._thresholds import branch_thresholds, empirical_alpha_c, mark_global_minimum, paired_gap
from phasejax.io import concat_tables, json_ready
from phasejax.precision import float64_scope
from phasejax.sweep import RunOptions
from phasejax.theory.branches import branch_init
from phasejax.theory.losses import HuberLoss, SquareLoss
from phasejax.theory.params import TiedAttentionParams, make_params
from phasejax.theory.quadrature import SplitProductRule
from phasejax.theory.replicon import JUMP_TOL

NAME = "huber"
INITS = ("positional", "semantic")
LOSSES = ("huber", "square")
"""The two training losses of every table (column `loss`): the Huber loss of the preset's `delta`, and the square
loss beside it (what the Huber loss changes)."""

DELTA = 0.1
"""The Huber threshold of the presets. At the square loss's fixed points of the paper's setting (`omega = 0.3`,
alpha 0.6-3) the root-mean-square output residual per coordinate, `sqrt(E s_l^2)`, is 0.025-0.079 on the training
data (`e_t - lambda q0 / 2` per token) and 0.020-0.044 on fresh data (`eps_g / L`); `s_l` varies from sample to
sample, so `delta = 0.1` (1.3-4 times the RMS) leaves most coordinates in the quadratic part and makes the loss
linear for the samples whose attention is most wrong."""


def huber_params(alpha=1.0, omega=0.3, *, delta: float = DELTA, sigma=0.5, lam=0.01) -> TiedAttentionParams:
    """The paper's setting trained with `HuberLoss(delta)`."""
    return make_params(alpha, omega, sigma=sigma, lam=lam, loss=HuberLoss(delta))


def loss_params(loss: str, delta: float = DELTA) -> TiedAttentionParams:
    """The problem of one of `LOSSES`: `huber_params(delta=delta)`, or the paper's square-loss setting."""
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    return huber_params(delta=delta) if loss == "huber" else make_params(1.0, 0.3, loss=SquareLoss())


@dataclasses.dataclass(frozen=True, kw_only=True)
class HuberPreset(ExtensionPreset):
    """`ExtensionPreset` with the theory's `omegas`, the students' `train_omega` and the Huber `delta`. The
    quadrature (`log2_n` None) is the default `SplitProductRule` with its replicas."""

    omegas: tuple[float, ...]
    train_omega: float
    delta: float = DELTA


PRESETS = {
    "cpu": HuberPreset(alphas=alpha_range(0.6, 3.01, 0.2), omegas=(0.3,), train_alphas=alpha_range(1.0, 2.01, 0.2),
                       train_omega=0.3, seeds=tuple(range(10)), ds=(800,)),
    "gpu": HuberPreset(alphas=alpha_range(0.4, 3.01, 0.1), omegas=(0.1, 0.2, 0.3, 0.4),
                       train_alphas=alpha_range(0.6, 2.61, 0.2), train_omega=0.3, seeds=tuple(range(16)),
                       ds=(800, 1600, 3200)),
}
"""`cpu`: the committed results; `gpu`: larger grids, more seeds and sizes. Every training alpha is on the theory's
grid (each run is compared with the SE at its own alpha)."""


def preset_rule(P) -> SplitProductRule:
    """The quadrature of the theory rows and their replicon: the default scheme of the two-token model
    (`SplitProductRule()`, converged, errors from its replicas). `P` is unused (every preset takes it)."""
    del P
    return SplitProductRule()


def huber_theory(alphas, omegas, *, delta: float = DELTA, quadrature=None,
                 options: dict[str, RunOptions] | None = None) -> dict[str, np.ndarray]:
    """SE table of both branches on `omegas x alphas` for each of `LOSSES` (column `loss`; positional rows upwards,
    semantic rows downwards in alpha, each in its invariant subspace; `branch` = `init`; `global_min` marks the
    lower `e_t` per loss). `options`: `{loss: RunOptions}` (resumable per loss)."""
    quadrature = SplitProductRule() if quadrature is None else quadrature
    tables = []
    for loss in LOSSES:
        params = loss_params(loss, delta)
        with float64_scope():
            inits = {n: branch_init(n, params) for n in INITS}
        table = continuation_table(params, alphas, omegas, inits, quadrature=quadrature, down=("semantic",),
                                   se_config=EXTENSION_SE_CONFIG, kind="huber_theory",
                                   options=(options or {}).get(loss))
        table["branch"] = table["init"].copy()
        table["loss"] = np.full(len(table["alpha"]), loss)
        tables.append(mark_global_minimum(table))
    return concat_tables(tables)


def train_losses(alphas, omega: float, seeds, d: int, *, delta: float = DELTA,
                 options: dict[str, RunOptions] | None = None) -> dict[str, np.ndarray]:
    """Tied students (L-BFGS, float32, `phasejax.empirics.train_students`) from both inits on `alphas x seeds` at
    size `d`, trained with each of `LOSSES` (column `loss`) on the same data sets (the data depend on the seed
    only)."""
    tables = []
    for loss in LOSSES:
        runs = train_tied(loss_params(loss, delta), alphas, omega, seeds, INITS, d, options=(options or {}).get(loss))
        runs["loss"] = np.full(len(runs["alpha"]), loss)
        tables.append(runs)
    return concat_tables(tables)


def compute(preset: str, P: HuberPreset, *, run: ExtensionRun = ExtensionRun()) -> ExtensionResult:
    """Theory (both branches of both losses on `alphas x omegas`) and students (both inits, both losses,
    `train_alphas x seeds` at `train_omega`, each of `ds`) of the preset `P` (named `preset`), resumable under
    `run.run_dir`."""
    rule = preset_rule(P)
    theory = huber_theory(P.alphas, P.omegas, delta=P.delta, quadrature=rule,
                          options={loss: run.options(f"theory_{loss}", 1) for loss in LOSSES})
    runs = concat_tables([train_losses(P.train_alphas, P.train_omega, P.seeds, d, delta=P.delta,
                                       options={loss: run.options(f"train_{loss}_d{d}") for loss in LOSSES})
                          for d in P.ds])
    summary = dict(extension=NAME, preset=preset, presets=P.to_json(), delta=P.delta, losses=list(LOSSES),
                   train_omega=P.train_omega, rule=scheme_config(rule))
    return finish(ExtensionResult(theory=theory, runs=runs, thresholds={}, summary=summary))


def replicon_problem(P):
    """`phasejax.extensions.stability.Problem` of the preset `P`'s theory rows: each row's loss (`loss_params` with
    the preset's `delta`) and the rule they were solved with. `P`: a preset or the mapping a summary recorded."""
    rule = preset_rule(P)
    params = {loss: loss_params(loss, preset_value(P, "delta")) for loss in LOSSES}
    return lambda row: (params[str(row["loss"])], rule)


def summarize_replicon(theory: dict) -> dict:
    """`phasejax.extensions.stability.replicon_summary` per loss (`{loss: {branch: ...}}`): the converged rows of
    each branch and those where replica symmetry is locally stable."""
    from phasejax.extensions.stability import replicon_summary

    return {loss: replicon_summary(_rows(theory, loss), "branch") for loss in LOSSES}


# ----------------------------------------------------------------------------
# Derived tables
# ----------------------------------------------------------------------------

THEORY_FIRST = ("loss", "alpha", "omega", "branch", "status", "q", "m", "theta", "V", "train_loss", "train_loss_err",
                "test_error", "test_error_err", "energetic_loss", "global_min")
RUNS_FIRST = ("loss", "alpha", "omega", "seed", "init", "d", "solution", "q", "m", "theta", "train_loss",
              "test_error", "train_loss_se", "test_error_se", "se_branch")
THRESHOLD_COLUMNS = ("source", "loss", "omega", "d", "alpha_c", "alpha_c_err", "alpha_c_status", "shift", "shift_err",
                     "alpha_l", "alpha_l_err", "alpha_l_status", "eps_lin")
"""Columns of `thresholds.csv`: one row per loss and omega from the theory (`source` `theory`, `d` NaN) and per
loss, omega and `d` from the students (`students`; `alpha_l` NaN); `shift = alpha_c - alpha_c(square)` (theory:
errors in quadrature; students: paired by seed, bootstrap)."""


def _rows(table: dict, loss: str) -> dict:
    sel = np.asarray(table["loss"]).astype(str) == loss
    return {k: np.asarray(v)[sel] for k, v in table.items()}


def theory_thresholds(theory: dict, delta: float) -> list[dict]:
    """Per loss and omega: `alpha_c` (and `alpha_l` against the linear baseline's square error) of the theory rows
    (`branch_thresholds`), with the shift of `alpha_c` from the square loss's."""
    found = {loss: branch_thresholds(_rows(theory, loss), loss_params(loss, delta)) for loss in LOSSES}
    rows = []
    for loss in LOSSES:
        t, ref = found[loss], found["square"]
        for i, om in enumerate(t["omega"]):
            j = np.flatnonzero(np.isclose(ref["omega"], om))
            shift = shift_err = np.nan
            if j.size:
                shift = float(t["alpha_c"][i] - ref["alpha_c"][j[0]])
                shift_err = float(np.hypot(t["alpha_c_err"][i], ref["alpha_c_err"][j[0]]))
            rows.append(dict(source="theory", loss=loss, omega=float(om), d=np.nan, alpha_c=float(t["alpha_c"][i]),
                             alpha_c_err=float(t["alpha_c_err"][i]), alpha_c_status=str(t["alpha_c_status"][i]),
                             shift=shift, shift_err=shift_err, alpha_l=float(t["alpha_l"][i]),
                             alpha_l_err=float(t["alpha_l_err"][i]), alpha_l_status=str(t["alpha_l_status"][i]),
                             eps_lin=float(t["eps_lin"][i])))
    return rows


def student_thresholds(runs: dict) -> list[dict]:
    """Per loss, omega and `d`: where the seed mean of `e_t(semantic) - e_t(positional)` (each seed's two runs,
    `paired_gap`) crosses zero, its 95% bootstrap error over seeds, and the shift from the square loss's crossing
    (the same seeds, hence the same data sets, and the same resamples: `empirical_alpha_c`)."""
    rows = []
    loss_col = np.asarray(runs["loss"]).astype(str)
    for om in np.unique(np.asarray(runs["omega"], float)):
        for d in np.unique(np.asarray(runs["d"])):
            at = np.isclose(np.asarray(runs["omega"], float), om) & (np.asarray(runs["d"]) == d)
            gaps = {loss: paired_gap(runs, at & (loss_col == loss)) for loss in LOSSES}
            for loss in LOSSES:
                alphas, delta = gaps[loss]
                found = empirical_alpha_c(alphas, delta, gaps["square"][1])
                rows.append(dict(source="students", loss=loss, omega=float(om), d=float(d), alpha_c=found["alpha_c"],
                                 alpha_c_err=found["alpha_c_err"], alpha_c_status=found["alpha_c_status"],
                                 shift=found["shift"], shift_err=found["shift_err"], alpha_l=np.nan,
                                 alpha_l_err=np.nan, alpha_l_status="none", eps_lin=np.nan))
    return rows


def finish(result: ExtensionResult) -> ExtensionResult:
    """The parts derived from `theory` and `runs`: the SE of each run (the branch it reached, its own loss), the
    gaps of the seed means to the SE per `(loss, d, branch, alpha)` (`gaps.csv`), the thresholds of both losses in
    theory and from the students (`thresholds.csv`), and their summary."""
    th, delta = result.theory, float(result.summary["delta"])
    runs = concat_tables([attach_reached_branch(_rows(result.runs, loss), _rows(th, loss)) for loss in LOSSES])
    rows = theory_thresholds(th, delta) + student_thresholds(runs)
    thresholds = {k: np.asarray([row[k] for row in rows]) for k in THRESHOLD_COLUMNS}
    gaps = concat_tables([relative_gaps(_rows(runs, loss), by=("loss", "d", "se_branch", "alpha", "omega"),
                                        teacher_adjusted=True) for loss in LOSSES])
    summary = dict(result.summary, thresholds=json_ready(thresholds))
    return dataclasses.replace(result, theory=ordered(th, THEORY_FIRST), runs=ordered(runs, RUNS_FIRST),
                               thresholds=thresholds, summary=summary, tables=dict(gaps=gaps))


# ----------------------------------------------------------------------------
# Figure
# ----------------------------------------------------------------------------

COLOURS = {"positional": "tab:blue", "semantic": "tab:red"}
STYLES = {"huber": "-", "square": "--"}
MARKERS = {"huber": "o", "square": "s"}
OFFSETS = {"huber": -0.012, "square": 0.012}


def _converged(th: dict, loss: str, branch: str, omega: float) -> np.ndarray:
    return ((np.asarray(th["loss"]).astype(str) == loss) & (np.asarray(th["branch"]).astype(str) == branch)
            & np.isclose(np.asarray(th["omega"], float), omega) & (np.asarray(th["status"]).astype(str) == "converged"))


def plot(result: ExtensionResult, omega: float):
    """Four panels at `omega`: (a) `e_t` of both branches, (b) `e_t(semantic) - e_t(positional)`, whose zero is
    `alpha_c`, (c) the test error, (d) the replicon; SE lines of the Huber loss (solid) and the square loss
    (dashed) with 95% quadrature bands, students as seed means with standard errors (largest d)."""
    from matplotlib.figure import Figure

    th, runs = result.theory, result.runs
    fig = Figure(figsize=(13, 9.5), layout="constrained")
    (ax_e, ax_gap), (ax_err, ax_rep) = fig.subplots(2, 2)
    d = int(np.max(np.asarray(runs["d"]))) if len(runs["d"]) else None
    run_loss, run_init = np.asarray(runs["loss"]).astype(str), np.asarray(runs["init"]).astype(str)
    at_d = (np.asarray(runs["d"]) == d) & np.isclose(np.asarray(runs["omega"], float), omega)
    shown = []          # (alpha, value) drawn in (b): its limits are the students' alphas, where the crossings are
    for loss in LOSSES:
        lab = f"Huber $\\delta$={result.summary['delta']:g}" if loss == "huber" else "square"
        for b in INITS:
            s = _converged(th, loss, b, omega)
            a = np.asarray(th["alpha"], float)[s]
            for ax, key in ((ax_e, "train_loss"), (ax_err, "test_error")):
                draw_band(ax, a, np.asarray(th[key], float)[s], np.asarray(th[key + "_err"], float)[s],
                          color=COLOURS[b], style=STYLES[loss], label=f"SE {b}, {lab}", lw=1.2 if loss == "huber" else 1)
            for ax, key in ((ax_e, "train_loss"), (ax_err, "test_error")):
                sel = at_d & (run_loss == loss) & (run_init == b)
                if sel.any():
                    sm = seed_means({k: np.asarray(v)[sel] for k, v in runs.items()}, key, ("alpha",), sort=True)
                    ax.errorbar(sm["alpha"] + OFFSETS[loss], sm[f"{key}_mean"], yerr=sm[f"{key}_sem"], fmt=MARKERS[loss],
                                color=COLOURS[b], mfc="white" if loss == "huber" else COLOURS[b], ms=5, capsize=2,
                                label=f"L-BFGS, {b} init, {lab}, d={d}")
            if "replicon" in th:
                ax_rep.errorbar(a, np.asarray(th["replicon"], float)[s],
                                yerr=finite_err(np.asarray(th["replicon_err"], float)[s]), color=COLOURS[b],
                                ls=STYLES[loss], marker=MARKERS[loss], ms=3, capsize=2, label=f"{b}, {lab}")
                jump = s & (np.asarray(th["replicon_jump"], float) > JUMP_TOL)
                ax_rep.plot(np.asarray(th["alpha"], float)[jump], np.asarray(th["replicon"], float)[jump], "x",
                            color=COLOURS[b], ms=9)
        branch_rows = {b: np.flatnonzero(_converged(th, loss, b, omega)) for b in INITS}
        by_alpha = {b: dict(zip(np.asarray(th["alpha"], float)[i].tolist(), i)) for b, i in branch_rows.items()}
        common = sorted(set(by_alpha["positional"]) & set(by_alpha["semantic"]))
        ip = np.asarray([by_alpha["positional"][x] for x in common], int)
        isem = np.asarray([by_alpha["semantic"][x] for x in common], int)
        e, e_err = np.asarray(th["train_loss"], float), np.asarray(th["train_loss_err"], float)
        draw_band(ax_gap, common, e[isem] - e[ip], np.hypot(e_err[isem], e_err[ip]), color="k", style=STYLES[loss],
                  label=f"SE, {lab}")
        shown.append((np.asarray(common, float), e[isem] - e[ip]))
        sel = at_d & (run_loss == loss)
        if sel.any():
            alphas, delta = paired_gap(runs, sel)
            ok = np.isfinite(delta).all(axis=0)
            mean = delta[:, ok].mean(axis=0)
            err = delta[:, ok].std(axis=0, ddof=1) / np.sqrt(delta.shape[0]) if delta.shape[0] > 1 else None
            shown.append((alphas[ok], mean - (0 if err is None else err)))
            shown.append((alphas[ok], mean + (0 if err is None else err)))
            ax_gap.errorbar(alphas[ok] + OFFSETS[loss], mean, yerr=err, fmt=MARKERS[loss], color="0.3",
                            mfc="white" if loss == "huber" else "0.3", ms=5, capsize=2,
                            label=f"L-BFGS, paired by seed, {lab}, d={d}")
    ts = result.thresholds
    for i in range(len(ts["alpha_c"])):
        if str(ts["source"][i]) == "theory" and np.isclose(float(ts["omega"][i]), omega):
            ac, err = float(ts["alpha_c"][i]), float(ts["alpha_c_err"][i])
            ax_gap.axvline(ac, color="0.5", ls=STYLES[str(ts["loss"][i])], lw=0.8)
            ax_gap.text(ac, 0.02, f" $\\alpha_c$ = {ac:.3f}$\\pm${err:.3f}", rotation=90, fontsize=7,
                        transform=ax_gap.get_xaxis_transform(), va="bottom")
    ax_gap.axhline(0.0, color="k", lw=0.5)
    if len(runs["alpha"]):
        lo, hi = float(np.min(runs["alpha"])) - 0.3, float(np.max(runs["alpha"])) + 0.3
        y = np.concatenate([v[(a >= lo) & (a <= hi)] for a, v in shown] + [np.zeros(1)])
        pad = 0.08 * (np.nanmax(y) - np.nanmin(y))
        ax_gap.set(xlim=(lo, hi), ylim=(np.nanmin(y) - pad, np.nanmax(y) + pad))
    ax_rep.axhline(1.0, color="k", lw=0.5)
    ax_rep.set_yscale("log")
    ax_e.set(xlabel=r"$\alpha$", ylabel=r"training loss $e_t$ (each loss its own)",
             title=f"(a) training loss, $\\omega$ = {omega:g}")
    ax_gap.set(xlabel=r"$\alpha$", ylabel=r"$e_t$(semantic) $-$ $e_t$(positional)",
               title=r"(b) the branches' gap: $\alpha_c$ where it turns negative")
    ax_err.set(xlabel=r"$\alpha$", ylabel=r"test error $\epsilon_g$ (square error)", title="(c) test error")
    ax_rep.set(xlabel=r"$\alpha$", ylabel="replicon (x: jump term, nodes with two minima)",
               title="(d) replicon: replica symmetry locally stable below 1")
    ax_rep.plot([], [], "x", color="0.3", ms=9, label="a jump term (nodes with two minima): RS unstable")
    for ax in (ax_e, ax_gap, ax_err, ax_rep):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5)
    fig.suptitle(f"Huber loss of the outputs ($\\delta$ = {result.summary['delta']:g}) against the square loss: "
                 "SE lines (solid Huber, dashed square) with 95% quadrature bands;\nmarkers: trained students, mean "
                 "$\\pm$ standard error over seeds (Huber and square students drawn 0.012 apart in alpha)", fontsize=10)
    return fig


def figures(result: ExtensionResult) -> dict:
    """`huber.png` (`plot`) at the students' omega."""
    return {"huber.png": plot(result, float(result.summary["train_omega"]))}
