"""The paper's second positional matrix `A = [[0.3, 0.7], [0.8, 0.2]]` (paper appendix E.2, Fig. 9).

This `A` is not token-swap symmetric (`P A P^T != A` with `P` the swap), so
`phasejax.theory.branch_init("semantic", ...)` leaves `m` free. It does not
need to: **`m = 0` is invariant for every `A`**. The reason is the sign flip
`(h, h*) -> (-h, -h*)`, not the token swap:

* the loss `ell(h, h*) = 1/2 tr[(T(h*) - S(h)) D (T(h*) - S(h))^T]` is even in
  `h` (`S(h) = softmax(h h^T) = S(-h)`) and in `h*` (the same for the
  softmax part of `T`; `omega A` does not depend on `h*`), whatever `A`;
* at `m = 0` the fields `omega_l = sigma_l q0^{1/2} xi_l`,
  `h*_l = sigma_l (B xi_l + Rn^{1/2} eta_l)` are odd in `(xi, eta)`, whose law is
  invariant under `(xi, eta) -> (-xi, -eta)`;
* so the proximal minimiser is odd, `h_hat(-omega, -h*) = -h_hat(omega, h*)`
  (the set of minimisers is mapped to its negative), `f_l` is odd and
  `mhat_l = alpha E[f_l] = 0`: the entropic update then gives `m = Mhat G^{-1} = 0`.

`mhat_at_zero_m` evaluates the map's `mhat` at `m = 0` with a quadrature that
is symmetric under negation (tensor Gauss-Hermite): it vanishes to rounding for
the asymmetric `A` (test in `tests/extensions/test_second_A.py`), while at
`m != 0` the two matrices give different `mhat`. The semantic branch of this
`A` is therefore solved inside `m = 0` here (`semantic_branch_init`), which
is also what the free-`m` solve converges to where it is stable.

`compute` builds the phase diagram (`phasejax.phase.phase_diagram`) of the second
`A`, compares its thresholds with the standard `A`'s, and trains tied students
from positional and semantic inits at `omega = 0.3` (`phasejax.empirics.train_students`).
Outputs and thresholds come from `phasejax.extensions.framework`.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.extensions._figures import draw_band, finite_err

from phasejax.extensions._presets import ExtensionPreset, ExtensionRun, alpha_range, sobol_rule

from phasejax.extensions._tables import (

    attach_reached_branch, diagram_tables, ExtensionResult, relative_gaps, seed_means, train_tied,

)

from phasejax.extensions._thresholds import tied_thresholds

from phasejax.io import concat_tables, json_ready
from phasejax.phase import PHASE_BRANCHES, PhaseConfig, PhaseDiagram, PhaseGrid, phase_diagram
from phasejax.precision import uses_float64
from phasejax.sweep import RunOptions
from phasejax.theory.census import CENSUS_SEEDS
from phasejax.theory.fields import Overlaps
from phasejax.theory.params import PAPER_A, PAPER_A_ASYMMETRIC, TiedAttentionParams, make_params
from phasejax.theory.quadrature import gauss_hermite
from phasejax.theory.se_map import state_evolution_map
from phasejax.theory.branches import branch_init

NAME = "second_A"

def second_A_params(alpha=1.0, omega=0.3, *, A=PAPER_A_ASYMMETRIC, sigma=0.5, lam=0.01) -> TiedAttentionParams:
    """The paper's setting with the second matrix `A` (`(2, 2)`, rows summing to one)."""
    A_arr = np.asarray(A, float)
    if A_arr.shape != (2, 2):
        raise ValueError(f"A must be a (2, 2) matrix, got shape {A_arr.shape}")
    if np.any(A_arr < 0) or not np.allclose(A_arr.sum(1), 1.0):
        raise ValueError(f"A must be row-stochastic (entries >= 0, rows summing to 1), got A={A_arr.tolist()}")
    return make_params(alpha, omega, A=A, sigma=sigma, lam=lam)


@functools.partial(jax.jit, static_argnames=("order",))
def mhat_at(params: TiedAttentionParams, overlaps: Overlaps, order: int = 10) -> jax.Array:
    """The energetic update `Mhat = C^T (alpha E[f_l])_l` (`(K, r)`) at `overlaps`, with a tensor
    Gauss-Hermite rule of `order` nodes per dimension (symmetric under `z -> -z`; docs/theory.md, section 4).

    Computes in float64 (call inside `phasejax.float64_scope`)."""
    rule = gauss_hermite(params.L * (params.r + params.t), order)
    return params.C.T @ state_evolution_map(params, overlaps, rule, rounds=6)[1].hats.mhat


@uses_float64
def semantic_branch_init(params: TiedAttentionParams):
    """The semantic branch's init with `m` held at 0 (invariant for every `A`, see the module docstring)."""
    init = branch_init("semantic", params)
    return init._replace(hold_m=jnp.asarray(True), overlaps=init.overlaps.replace(m=jnp.zeros_like(init.overlaps.m)))


def theory_diagram(alphas, omegas, params: TiedAttentionParams | None = None, *, quadrature=None,
                   options: RunOptions | None = None) -> PhaseDiagram | None:
    """Phase diagram of the second `A` on `alphas x omegas` (one continuation track per subspace).

    The semantic subspace is `m = 0` (held by `phase_diagram` only when the problem is token-swap
    symmetric; here it is free, and converges to `m = 0` where the branch is stable in `m`)."""
    params = second_A_params() if params is None else params
    config = PhaseConfig(seeds={b: CENSUS_SEEDS[b][:1] for b in PHASE_BRANCHES})
    return phase_diagram(PhaseGrid.from_ranges(alphas, omegas), params, quadrature=quadrature, config=config,
                         options=options)


# ----------------------------------------------------------------------------
# Outputs, figure
# ----------------------------------------------------------------------------


def plot(outputs: ExtensionResult, standard: dict | None = None, omega: float = 0.3):
    """Three panels: test error and overlaps along alpha at `omega` (SE lines, 95% quadrature bands;
    experiments: mean +- standard error over seeds), and `alpha_c(omega)`, `alpha_l(omega)` of both `A`."""
    from matplotlib.figure import Figure

    th, runs = outputs.theory, outputs.runs
    fig = Figure(figsize=(15, 5.0), layout="constrained")
    ax_err, ax_ov, ax_th = fig.subplots(1, 3)
    colors = {"positional": "C1", "semantic": "C0"}
    sel_w = np.isclose(np.asarray(th["omega"], float), omega)
    for b in PHASE_BRANCHES:
        s = sel_w & (np.asarray(th["branch"]) == b) & (np.asarray(th["status"]) == "converged")
        a = np.asarray(th["alpha"], float)[s]
        for ax, key, style in ((ax_err, "test_error", "-"),
                               (ax_ov, "m" if b == "positional" else "theta", "-"),
                               (ax_ov, "q", ":")):
            lab = f"SE {b}" if ax is ax_err else f"SE {b}: ${key if key != 'theta' else chr(92) + 'theta'}$"
            draw_band(ax, a, np.asarray(th[key], float)[s], np.asarray(th[key + "_err"], float)[s], color=colors[b],
                      label=lab, style=style, band_lw=None)
    means = seed_means(runs, by=("d", "se_branch", "alpha", "omega"))
    ds = sorted(set(int(x) for x in means["d"]))
    markers = dict(zip(ds, ("s", "o", "^", "D")))
    for d in ds:
        for b in PHASE_BRANCHES:
            s = (means["d"] == d) & (means["se_branch"] == b) & np.isclose(means["omega"].astype(float), omega)
            if not s.any():
                continue
            a = means["alpha"][s].astype(float)
            kw = dict(color=colors[b], marker=markers[d], ls="none", capsize=2, ms=5,
                      mfc="white" if d < max(ds) else colors[b])
            ax_err.errorbar(a, means["test_error_mean"][s], yerr=means["test_error_sem"][s],
                            label=f"L-BFGS, ended {b}, d={d}", **kw)
            key = "m" if b == "positional" else "theta"
            ax_ov.errorbar(a, means[key + "_mean"][s], yerr=means[key + "_sem"][s], **kw)
            ax_ov.errorbar(a, means["q_mean"][s], yerr=means["q_sem"][s], **{**kw, "alpha": 0.6})
    ax_err.set(xlabel=r"sample complexity $\alpha = n/d$", ylabel=r"test error $\epsilon_g$",
               title=f"Second A, $\\omega$={omega}: test error")
    ax_ov.set(xlabel=r"$\alpha$", ylabel="overlap (per token)",
              title=r"$m$ (positional), $\theta$ (semantic); dotted: $q$")
    ax_err.legend(fontsize=7, loc="upper right")
    ax_ov.legend(fontsize=7, loc="center right")
    ts = outputs.thresholds
    w = np.asarray(ts["omega"], float)
    for key, marker in (("alpha_c", "o"), ("alpha_l", "s")):
        v = np.asarray(ts[key], float)
        e = finite_err(np.asarray(ts[key + "_err"], float))
        ax_th.errorbar(v, w, xerr=e, color="C3", marker=marker, capsize=2,
                       label=f"second A: ${key.replace('alpha', chr(92) + 'alpha')}$")
        if standard is not None:
            ws = np.asarray(standard["omega"], float)
            keep = ws <= w.max() + 1e-9
            ax_th.errorbar(np.asarray(standard[key], float)[keep], ws[keep],
                           xerr=finite_err(np.asarray(standard[key + "_err"], float))[keep], color="0.4",
                           marker=marker, mfc="white", ls="--", capsize=2,
                           label=f"standard A: ${key.replace('alpha', chr(92) + 'alpha')}$")
    ax_th.set(xlabel=r"$\alpha$", ylabel=r"$\omega$",
              title=r"thresholds ($\alpha_c$: $e_t$ cross; $\alpha_l$: beats linear)")
    ax_th.legend(fontsize=7, loc="lower right")
    ax_th.text(0.02, 0.98, "second A: $\\alpha_c(0.2) < 0.6$ (below grid),\n$\\alpha_l$ above the grid at every $\\omega$",
               transform=ax_th.transAxes, va="top", fontsize=7)
    fig.suptitle("Second positional matrix A = [[0.3, 0.7], [0.8, 0.2]]: SE lines with 95% quadrature bands;\n"
                 "markers: trained students grouped by the branch they reached, mean $\\pm$ standard error over "
                 "seeds (filled: largest d)", fontsize=10)
    return fig


@dataclasses.dataclass(frozen=True, kw_only=True)
class SecondAPreset(ExtensionPreset):
    """`ExtensionPreset` with the theory's omegas and the students' `train_omega`."""

    omegas: tuple[float, ...]
    train_omega: float


PRESETS = {
    "cpu": SecondAPreset(alphas=(0.3, 0.6, 0.9, 1.05, 1.2, 1.5, 2.0, 2.5), omegas=(0.0, 0.2, 0.3, 0.4), log2_n=10,
                         n_replicas=4, train_alphas=(0.6, 1.05, 1.5, 2.0), train_omega=0.3, seeds=tuple(range(8)),
                         ds=(200, 400, 800, 1600)),
    # the converged default rule (SplitProductRule, log2_n None)
    "gpu": SecondAPreset(alphas=alpha_range(0.2, 3.01, 0.1), omegas=alpha_range(0.0, 0.61, 0.05), log2_n=None,
                         n_replicas=None, train_alphas=(0.5, 0.7, 1.0, 1.3, 1.5, 1.7, 2.0, 2.5), train_omega=0.3,
                         seeds=tuple(range(16)), ds=(200, 400, 800, 1600, 3200)),
}
"""`cpu`: the committed results; `gpu`: larger grids, more seeds and sizes."""


def preset_rule(P):
    """The preset `P`'s quadrature: scrambled Sobol in 4 dimensions (`2^log2_n` points, `n_replicas` replicas), or
    the default scheme (`None`) where `log2_n` is None. Its theory rows are solved with it, and their replicon
    computed with it. `P`: a `SecondAPreset`, or the mapping an older summary recorded."""
    return sobol_rule(P, 4)


def compute(preset: str, P: SecondAPreset, *, run: ExtensionRun = ExtensionRun(),
            tied: dict | None = None) -> ExtensionResult:
    """Theory (phase diagram of the second `A` on `alphas x omegas`), students at `train_omega` (both inits,
    `train_alphas x seeds` at each of `ds`) of the preset `P` (named `preset`), resumable under `run.run_dir`;
    `tied`: the standard `A`'s thresholds to compare with (default `tied_thresholds()`)."""
    params = second_A_params()
    rule = preset_rule(P)
    pd = theory_diagram(P.alphas, P.omegas, params, quadrature=rule, options=run.options("theory", 4))
    theory, thresholds = diagram_tables(pd)
    inits = ("positional", "semantic")
    runs = concat_tables([train_tied(params, P.train_alphas, P.train_omega, P.seeds, inits, d,
                                     options=run.options(f"train_d{d}")) for d in P.ds])
    standard = tied_thresholds() if tied is None else tied
    summary = dict(
        extension=NAME, preset=preset, A=[list(r) for r in PAPER_A_ASYMMETRIC], standard_A=[list(r) for r in PAPER_A],
        alphas=list(P.alphas), omegas=list(P.omegas), train_alphas=list(P.train_alphas),
        train_omega=P.train_omega, seeds=list(P.seeds), ds=list(P.ds), semantic_max_abs_m=None,
        phase_config=pd.config, standard_thresholds=json_ready(standard) if standard else None)
    return finish(ExtensionResult(theory=theory, runs=runs, thresholds=thresholds, summary=summary))


def replicon_problem(P):
    """`phasejax.extensions.stability.Problem` of the preset `P`'s theory rows: `second_A_params()` and the rule
    they were solved with (the default scheme where `log2_n` is None)."""
    rule = preset_rule(P)
    params = second_A_params()
    return lambda row: (params, rule)


def finish(result: ExtensionResult) -> ExtensionResult:
    """The parts derived from `theory` and `runs`: the SE at each run (of the branch it reached), the gaps of the
    seed means to the SE per `(d, branch, alpha)` (`gaps.csv`), the largest `|m|` on the semantic branch."""
    th = result.theory
    runs = attach_reached_branch(result.runs, th)
    semantic = np.asarray(th["branch"]) == "semantic"
    summary = dict(result.summary, semantic_max_abs_m=float(np.nanmax(np.abs(th["m"][semantic])))
                   if semantic.any() else None)
    return dataclasses.replace(result, runs=runs, summary=summary,
                               tables=dict(gaps=relative_gaps(runs, teacher_adjusted=True)))


def figures(result: ExtensionResult) -> dict:
    """`second_A.png` (`plot`), against the standard `A`'s thresholds recorded in the summary."""
    standard = result.summary.get("standard_thresholds")
    standard = {k: np.asarray([np.nan if x is None else x for x in v]) for k, v in standard.items()} if standard \
        else None      # JSON writes NaN as null
    return {"second_A.png": plot(result, standard, result.summary["train_omega"])}
