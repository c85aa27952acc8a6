"""Longer sequences: `L = 3` tokens, unequal `sigma_l`, rank `r = 2` (paper appendix C.10).

The state evolution of docs/theory.md, sections 2-5, is written for any `L`,
`r`, `t`: every Gaussian average is over `L (r + t)` standard normals, and the
proximal problem is solved by the generic Newton method (autodiff Hessian)
wherever the closed form of `L = 2, r = 1` does not apply. The quadrature is
`SobolRule` (scrambled Sobol points with independent replicas; the `_err`
columns are 95% half-widths from the replicas' spread).

The problem here: `L = 3`, positional encodings `C = [1, 0, -1]^T` (one
direction `u`; token 2 carries none), a symmetric row-stochastic `A` with
`a` on the diagonal and `(1 - a) / 2` elsewhere (`general_L_A`), and equal
`sigma_l = 0.5` (the reversal `l -> 4 - l` with `p -> -p` is then a symmetry
and the semantic branch is solved inside `m = 0`) or unequal
`sigma = (0.5, 0.4, 0.6)` (the symmetry is broken and `m` is left free; it
still converges to `m = 0`, which is invariant for any `sigma` and `A` by the
sign flip `(h, h*) -> (-h, -h*)`, see `phasejax.extensions.second_A`).

Exact facts tested in `tests/extensions/test_general_L.py`:

* the `L = 2` problem through the generic code path (a student function that
  is not `dot_product_student`, so the generic autodiff prox) gives the same
  map and the same fixed point as the closed-form `L = 2` path with the same
  rule;
* token reversal: the map of `(sigma, A, C)` at a state equals the map of the
  reversed problem `(P sigma, P A P^T, P C)` with the quadrature's token
  blocks reversed (to rounding).

`compute` computes an SE curve along `alpha` at `omega = 0.3` for both branches
(with the thresholds where they fall in the grid) for equal and unequal
`sigma`, and trains tied students from positional and semantic inits at
`d in {200, 400, 800}` with L-BFGS to `||grad|| < gtol`, reporting the gap
between seed-averaged experiments and the SE against `d`.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from phasejax.empirics.metrics import MIN_ADJUSTED_SEEDS
from phasejax.extensions._figures import draw_band
from phasejax.extensions._presets import ExtensionPreset, ExtensionRun, alpha_range, preset_value
from phasejax.extensions._tables import (
    attach_reached_branch, diagram_tables, ExtensionResult, relative_gaps, seed_means, train_tied,
)
from phasejax.io import concat_tables
from phasejax.phase import PHASE_BRANCHES, PhaseConfig, PhaseDiagram, PhaseGrid, phase_diagram
from phasejax.sweep import RunOptions
from phasejax.theory.census import CENSUS_SEEDS
from phasejax.theory.params import TiedAttentionParams, dot_product_attention, make_params
from phasejax.theory.quadrature import Quadrature, SobolRule

NAME = "general_L"

LATEX_NAMES = {"theta": "$\\theta_1$", "train_loss": "$e_t$", "test_error": "$\\epsilon_g$"}
"""Axis labels of the table columns in the gap panels."""

C3 = ((1.0,), (0.0,), (-1.0,))
"""Positional encodings of the three tokens, `p_l = C[l] u` (`(3, 1)`)."""


def general_L_A(L: int = 3, diagonal: float = 0.6) -> np.ndarray:
    """Symmetric row-stochastic `(L, L)` matrix: `diagonal` on the diagonal, `(1 - diagonal) / (L - 1)` elsewhere."""
    if isinstance(L, bool) or int(L) != L or L < 2:
        raise ValueError(f"L must be an integer >= 2, got L={L!r}")
    if not 0.0 <= diagonal <= 1.0:
        raise ValueError(f"diagonal must lie in [0, 1], got diagonal={diagonal}")
    L = int(L)
    return np.full((L, L), (1.0 - diagonal) / (L - 1)) + (diagonal - (1.0 - diagonal) / (L - 1)) * np.eye(L)


def general_L_params(alpha=1.0, omega=0.3, *, sigma=(0.5, 0.5, 0.5), diagonal: float = 0.6, C=C3, r: int = 1,
                     lam: float = 0.01, student=None) -> TiedAttentionParams:
    """`L = len(sigma)` tokens with `A = general_L_A(L, diagonal)`, encodings `C (L, K)`, student rank `r`."""
    sigma = np.atleast_1d(np.asarray(sigma, float))
    L = sigma.shape[0]
    C = np.asarray(C, float)
    if C.ndim != 2 or C.shape[0] != L:
        raise ValueError(f"C must have shape (L, K) with L = len(sigma) = {L}, got shape {C.shape}")
    kw = {} if student is None else dict(student=student)
    return make_params(alpha, omega, sigma=sigma, A=general_L_A(L, diagonal), C=C, r=r, lam=lam, **kw)


def generic_dot_product_student(h, params):
    """`softmax(h h^T)` like `phasejax.theory.params.dot_product_student`, as a distinct function: the theory then
    uses its generic (autodiff Newton) proximal step even for `L = 2, r = 1` (for the reduction test)."""
    del params
    return dot_product_attention(h)


def reversed_problem(params: TiedAttentionParams) -> TiedAttentionParams:
    """The token-reversed problem `(P sigma, P A P^T, P C)`, `P: l -> L - 1 - l`."""
    return params.replace(sigma=params.sigma[::-1], A=params.A[::-1, ::-1], C=params.C[::-1])


def reversed_rule(rule: Quadrature, params: TiedAttentionParams) -> Quadrature:
    """`rule` with the token blocks of its points reversed (`xi (L, r)` and `eta (L, t)` each), same weights."""
    L, r, t = params.L, params.r, params.t
    pts = rule.points
    xi = pts[:, : L * r].reshape(-1, L, r)[:, ::-1].reshape(-1, L * r)
    eta = pts[:, L * r:].reshape(-1, L, t)[:, ::-1].reshape(-1, L * t)
    return Quadrature(points=jnp.concatenate([xi, eta], axis=1), weights=rule.weights)


def general_L_rule(params: TiedAttentionParams, log2_n: int, n_replicas: int) -> SobolRule:
    """Scrambled Sobol in the `L (r + t)` dimensions of `params`: `2^log2_n` points, `n_replicas` replicas."""
    return SobolRule.create(params.L * (params.r + params.t), log2_n=log2_n, n_replicas=n_replicas)


def theory_curve(alphas, omega: float, params: TiedAttentionParams, *, log2_n: int = 11, n_replicas: int = 4,
                 options: RunOptions | None = None) -> PhaseDiagram | None:
    """Both branches along `alphas` at one `omega` (one continuation track per subspace), with `alpha_c`,
    `alpha_l` where they fall in the grid; quadrature `general_L_rule`."""
    rule = general_L_rule(params, log2_n, n_replicas)
    config = PhaseConfig(seeds={b: CENSUS_SEEDS[b][:1] for b in PHASE_BRANCHES})
    return phase_diagram(PhaseGrid.from_ranges(alphas, (omega,)), params, quadrature=rule, config=config,
                         options=options)


def plot(outputs: ExtensionResult):
    """Left: SE test error and training loss along alpha (both branches, equal and unequal sigma; 95% bands)
    with experiments (mean +- standard error over seeds). Right: signed relative gap (experiment - SE) / |SE|
    of q, m (positional) or theta (semantic), e_t and eps_g against d, the experiments' seed mean adjusted for
    each seed's teacher norm (`relative_gaps(..., teacher_adjusted=True)`), +- 1 standard error."""
    from matplotlib.figure import Figure

    th, runs = outputs.theory, outputs.runs
    fig = Figure(figsize=(21, 4.8), layout="constrained")
    ax_err, ax_ov, ax_gap_sem, ax_gap_pos = fig.subplots(1, 4)
    gap_axes = {"semantic": ax_gap_sem, "positional": ax_gap_pos}
    colors = {"positional": "C1", "semantic": "C0"}
    for setting, style in (("equal", "-"), ("unequal", "--")):
        for b in PHASE_BRANCHES:
            s = (np.asarray(th["sigma_setting"]) == setting) & (np.asarray(th["branch"]) == b) \
                & (np.asarray(th["status"]) == "converged")
            if not s.any():
                continue
            a = np.asarray(th["alpha"], float)[s]
            for ax, key in ((ax_err, "test_error"), (ax_ov, "m" if b == "positional" else "theta")):
                draw_band(ax, a, np.asarray(th[key], float)[s], np.asarray(th[key + "_err"], float)[s],
                          color=colors[b], label=f"SE {b}, {setting} $\\sigma_l$", style=style, band_lw=None,
                          marker=".")
    means = seed_means(runs, by=("d", "se_branch", "alpha", "omega"))
    ds = sorted(set(int(x) for x in means["d"]))
    dmax = max(ds)
    for b in PHASE_BRANCHES:
        s = (means["d"] == dmax) & (means["se_branch"] == b)
        if not s.any():
            continue
        kw = dict(color=colors[b], marker="o", ls="none", capsize=3, ms=5)
        a = means["alpha"][s].astype(float)
        ax_err.errorbar(a, means["test_error_mean"][s], yerr=means["test_error_sem"][s],
                        label=f"L-BFGS, ended {b}, d={dmax}", **kw)
        key = "m" if b == "positional" else "theta"
        ax_ov.errorbar(a, means[key + "_mean"][s], yerr=means[key + "_sem"][s], **kw)
    ax_err.set(xlabel=r"$\alpha = n/d$", ylabel=r"test error $\epsilon_g$", title=r"L = 3, $\omega$ = 0.3: test error")
    ax_ov.set(xlabel=r"$\alpha$", ylabel="overlap", title=r"$m$ (positional branch), $\theta_1$ (semantic branch)")
    ax_err.legend(fontsize=7, loc="upper right")
    ax_ov.legend(fontsize=7, loc="best")
    gaps = relative_gaps(runs, teacher_adjusted=True)
    markers = {"q": "o", "m": "s", "theta": "^", "train_loss": "D", "test_error": "v"}
    alphas = sorted(set(gaps["alpha"].astype(float)))
    ds_all = np.asarray(sorted(set(gaps["d"].astype(float))))
    for b in PHASE_BRANCHES:
        ax = gap_axes[b]
        for key in ("q", "m" if b == "positional" else "theta", "train_loss", "test_error"):
            sel = (gaps["se_branch"] == b) & np.isfinite(gaps[key + "_adj_gap"])
            for j, a in enumerate(alphas):
                s = sel & np.isclose(gaps["alpha"].astype(float), a)
                if not s.any():
                    continue
                o = np.argsort(gaps["d"][s].astype(float))
                # small horizontal offsets keep the error bars apart
                shift = 1.0 + 0.03 * (list(markers).index(key) - 2) + 0.12 * j
                name = LATEX_NAMES.get(key, f"${key}$")
                color = f"C{list(markers).index(key)}"
                ax.errorbar(gaps["d"][s].astype(float)[o] * shift, 100 * gaps[key + "_adj_gap"][s][o],
                            100 * gaps[key + "_adj_gap_err"][s][o], marker=markers[key], color=color,
                            ls="-" if a == max(alphas) else ":", capsize=2, ms=5, lw=1,
                            mfc=color if a == max(alphas) else "white", label=f"{name}, $\\alpha$={a:g}")
        few = (gaps["se_branch"] == b) & (gaps["n_seeds"] < MIN_ADJUSTED_SEEDS)
        if few.any():   # groups too small for the teacher-adjusted mean are not drawn: say which
            ax.text(0.98, 0.02, "not drawn (fewer than %d seeds): " % MIN_ADJUSTED_SEEDS + ", ".join(
                f"d={int(d)}, $\\alpha$={float(a):g} ({int(n)})"
                for d, a, n in zip(gaps["d"][few], gaps["alpha"][few], gaps["n_seeds"][few])),
                transform=ax.transAxes, fontsize=7, va="bottom", ha="right")
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_xticks(ds_all, [f"{int(x)}" for x in ds_all])
        ax.set_xticks([], minor=True)
        ax.set(xlabel="d", ylabel="(adjusted seed mean - SE) / |SE|  [%]",
               title=f"{b} branch: gap to the SE against d ($\\pm$ 1 s.e.)")
        ax.legend(fontsize=7, loc="best", ncol=2)
    fig.suptitle("L = 3 tokens, C = [1, 0, -1], A = 0.6 I + 0.2 (off-diagonal): SE (Sobol, 95% quadrature bands) "
                 "and trained students grouped by the branch they reached (mean $\\pm$ standard error over seeds)", fontsize=10)
    return fig


@dataclasses.dataclass(frozen=True, kw_only=True)
class GeneralLPreset(ExtensionPreset):
    """`ExtensionPreset` at one `omega`, with the token standard deviations of each setting (`sigmas`)."""

    omega: float
    sigmas: dict


SIGMAS = {"equal": (0.5, 0.5, 0.5), "unequal": (0.5, 0.4, 0.6)}
"""The two settings of the token standard deviations `sigma_l`."""

PRESETS = {
    "cpu": GeneralLPreset(alphas=(0.6, 1.1, 1.6, 2.1), omega=0.3, sigmas=SIGMAS, log2_n=10, n_replicas=4,
                          train_alphas=(1.1, 2.1), seeds=tuple(range(8)), ds=(200, 400, 800)),
    "gpu": GeneralLPreset(alphas=alpha_range(0.3, 3.01, 0.15), omega=0.3, sigmas=SIGMAS, log2_n=14, n_replicas=4,
                          train_alphas=(0.5, 1.1, 1.7, 2.0, 2.6), seeds=tuple(range(8)), ds=(200, 400, 800, 1600, 3200)),
}
"""`cpu`: the committed results; `gpu`: larger grids, more seeds and sizes."""


def compute(preset: str, P: GeneralLPreset, *, run: ExtensionRun = ExtensionRun()) -> ExtensionResult:
    """SE curves (both branches along `alphas` at `omega`, for each of `sigmas`) and students (equal sigma; both
    inits, `train_alphas x seeds` at each of `ds`) of the preset `P` (named `preset`), resumable under
    `run.run_dir`."""
    theories, thresholds, configs = [], [], {}
    for setting, sigma in P.sigmas.items():
        params = general_L_params(sigma=sigma)
        pd = theory_curve(P.alphas, P.omega, params, log2_n=P.log2_n, n_replicas=P.n_replicas,
                          options=run.options(f"theory_{setting}", 1))
        t, ts = diagram_tables(pd)
        t["sigma_setting"] = np.full(len(t["alpha"]), setting)
        ts["sigma_setting"] = np.full(len(ts["omega"]), setting)
        theories.append(t)
        thresholds.append(ts)
        configs[setting] = pd.config
    params = general_L_params(sigma=P.sigmas["equal"])
    runs = concat_tables([train_tied(params, P.train_alphas, P.omega, P.seeds, ("positional", "semantic"), d,
                                     quadrature_order=4, options=run.options(f"train_d{d}")) for d in P.ds])
    runs["sigma_setting"] = np.full(len(runs["alpha"]), "equal")
    summary = dict(extension=NAME, preset=preset, L=3, C=[list(c) for c in C3], A=general_L_A(3).tolist(),
                   sigmas={k: list(v) for k, v in P.sigmas.items()}, alphas=list(P.alphas), omega=P.omega,
                   quadrature=dict(kind="SobolRule", log2_n=P.log2_n, n_replicas=P.n_replicas),
                   train_alphas=list(P.train_alphas), seeds=list(P.seeds), ds=list(P.ds),
                   phase_configs=configs)
    return finish(ExtensionResult(theory=concat_tables(theories), runs=runs, thresholds=concat_tables(thresholds),
                                  summary=summary))


def replicon_problem(P):
    """`phasejax.extensions.stability.Problem` of the preset `P`'s theory rows: `general_L_params` of the row's
    `sigma_setting` and the Sobol rule it was solved with (one per setting)."""
    problems = {}
    for setting, sigma in preset_value(P, "sigmas").items():
        params = general_L_params(sigma=tuple(sigma))
        problems[setting] = (params, general_L_rule(params, preset_value(P, "log2_n"), preset_value(P, "n_replicas")))
    return lambda row: problems[str(row["sigma_setting"])]


def finish(result: ExtensionResult) -> ExtensionResult:
    """The parts derived from `theory` and `runs`: the equal-sigma SE at each run (of the branch it reached) and
    the gaps of the seed means to it (`gaps.csv`)."""
    th = result.theory
    equal = {k: np.asarray(v)[np.asarray(th["sigma_setting"]) == "equal"] for k, v in th.items()}
    runs = attach_reached_branch(result.runs, equal)
    return dataclasses.replace(result, runs=runs, tables=dict(gaps=relative_gaps(runs, teacher_adjusted=True)))


def figures(result: ExtensionResult) -> dict:
    """`general_L.png` (`plot`)."""
    return {"general_L.png": plot(result)}
