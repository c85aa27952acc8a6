"""The paper's second positional matrix `A = [[0.3, 0.7], [0.8, 0.2]]` (issue 12, item 6; paper appendix E.2, Fig. 9).

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

`main` builds the phase diagram (`phasejax.phase.phase_diagram`) of the second
`A`, compares its thresholds with the standard `A`'s, and trains tied students
from positional and semantic inits at `omega = 0.3` (`phasejax.empirics.train_students`).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.empirics.metrics import adjusted_seed_mean, has_relative_scale
from phasejax.empirics.sweep import TrainingGrid, TrainingRuns, train_students
from phasejax.empirics.training import TrainConfig
from phasejax.io import atomic_write_json, read_csv, read_json, write_csv
from phasejax.phase.diagram import PHASE_BRANCHES, PhaseConfig, PhaseDiagram, PhaseGrid, phase_diagram
from phasejax.precision import uses_float64
from phasejax.solvers import status_names
from phasejax.sweep import RunOptions
from phasejax.theory.census import CENSUS_SEEDS
from phasejax.theory.fields import Overlaps
from phasejax.theory.params import PAPER_A, PAPER_A_ASYMMETRIC, TiedAttentionParams, make_params
from phasejax.theory.quadrature import SobolRule, gauss_hermite
from phasejax.theory.solver import SEConfig, branch_init
from phasejax.theory.updates import hats_from_nodes, node_values

NAME = "second_A"

PRESETS = {
    "cpu": dict(
        alphas=(0.3, 0.6, 0.9, 1.05, 1.2, 1.5, 2.0, 2.5),
        omegas=(0.0, 0.2, 0.3, 0.4),
        log2_n=10, n_replicas=4,
        train_alphas=(0.6, 1.05, 1.5, 2.0),
        train_omega=0.3,
        seeds=tuple(range(8)),
        ds=(200, 400, 800, 1600),
    ),
    "gpu": dict(
        alphas=tuple(np.round(np.arange(0.2, 3.01, 0.1), 6)),
        omegas=tuple(np.round(np.arange(0.0, 0.61, 0.05), 6)),
        log2_n=None, n_replicas=None,
        train_alphas=(0.5, 0.7, 1.0, 1.3, 1.5, 1.7, 2.0, 2.5),
        train_omega=0.3,
        seeds=tuple(range(16)),
        ds=(200, 400, 800, 1600, 3200),
    ),
}
"""`cpu`: the committed results (8 alpha x 4 omega theory with `SobolRule(4, 2^10 x 4)`; 4 alpha x 2 inits x
8 seeds x d in {200, 400, 800, 1600}); `gpu`: a finer theory grid (29 x 13) with the converged default rule
(`SplitProductRule`, `log2_n=None`) and 16 seeds at five sizes up to 3200 (not run)."""


def second_A_params(alpha=1.0, omega=0.3, *, A=PAPER_A_ASYMMETRIC, sigma=0.5, lam=0.01) -> TiedAttentionParams:
    """The paper's setting with the second matrix `A` (`(2, 2)`, rows summing to one)."""
    A_arr = np.asarray(A, float)
    if A_arr.shape != (2, 2):
        raise ValueError(f"A must be a (2, 2) matrix, got shape {A_arr.shape}")
    if np.any(A_arr < 0) or not np.allclose(A_arr.sum(1), 1.0):
        raise ValueError(f"A must be row-stochastic (entries >= 0, rows summing to 1), got A={A_arr.tolist()}")
    return make_params(alpha, omega, A=A, sigma=sigma, lam=lam)


@functools.partial(jax.jit, static_argnames=("rounds",))
def se_map_at(params: TiedAttentionParams, overlaps: Overlaps, rule, rounds: int = 3) -> tuple[Overlaps, object]:
    """One state-evolution map at `overlaps` with the fixed rule `rule` (a `Quadrature`: `points (N, L (r + t))`,
    `weights (N,)`): energetic ("hat") then entropic update, nothing held (docs/theory.md, section 4).

    Each node's prox starts from its field `omega` and is refined `rounds` times from both alternatives
    (mirror and field). Returns the new `Overlaps` and the `Hats`. Computes in float64 (inside
    `phasejax.float64_scope`)."""
    from phasejax.theory.fields import field_maps
    from phasejax.theory.updates import overlap_updates

    L, r = params.L, params.r
    xi = rule.points[:, : L * r].reshape(-1, L, r)
    maps = field_maps(overlaps, params)
    warm = (params.sigma[None, :, None] * jnp.einsum("nla,ba->nlb", xi, maps.sqrt_q0)
            + maps.m_tokens[None]).reshape(-1, L * r)
    cfg = SEConfig()
    nodes = None
    for _ in range(rounds):
        for alt in (0, 1):
            nodes = node_values(overlaps, params, rule.points, warm, jnp.asarray(alt), n_steps=cfg.prox_steps,
                                psd_tol=cfg.psd_tol, prox_tol=cfg.prox_tol, extra_starts=True,
                                prox_starts=cfg.prox_starts, hat_form=cfg.hat_form)
            warm = nodes.h
    hats = hats_from_nodes(overlaps, params, nodes, rule.weights, hat_form=cfg.hat_form)
    return overlap_updates(hats, params), hats


def mhat_at(params: TiedAttentionParams, overlaps: Overlaps, order: int = 10) -> jax.Array:
    """The energetic update `Mhat = C^T (alpha E[f_l])_l` (`(K, r)`) at `overlaps`, with a tensor
    Gauss-Hermite rule of `order` nodes per dimension (symmetric under `z -> -z`; docs/theory.md, section 4).

    Computes in float64 (call inside `phasejax.float64_scope`)."""
    rule = gauss_hermite(params.L * (params.r + params.t), order)
    _, hats = se_map_at(params, overlaps, rule)
    return params.C.T @ hats.mhat


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
# Outputs shared by the extensions of this module and `general_L`
# ----------------------------------------------------------------------------

SE_KEYS = ("q", "m", "theta", "V", "train_loss", "test_error")
"""Theory columns attached to every trained run as `<key>_se` and `<key>_se_err` (`NaN`: no fixed point there)."""


@dataclasses.dataclass
class ExtensionOutputs:
    """The contract of an extension's outputs (numpy columns): `theory` (one row per SE fixed point),
    `runs` (one row per trained student), `thresholds` (per `omega`) and a JSON `summary`.

    `write(out_dir)` writes `theory.csv`, `runs.csv`, `thresholds.csv`, `summary.json`;
    `ExtensionOutputs.load(out_dir)` reads them back (string columns stay strings)."""

    theory: dict
    runs: dict
    thresholds: dict
    summary: dict

    FILES = ("theory.csv", "runs.csv", "thresholds.csv")

    def write(self, out_dir: str) -> list[str]:
        os.makedirs(out_dir, exist_ok=True)
        paths = [write_csv(os.path.join(out_dir, name), table)
                 for name, table in zip(self.FILES, (self.theory, self.runs, self.thresholds))]
        paths.append(atomic_write_json(os.path.join(out_dir, "summary.json"), self.summary))
        return paths

    @classmethod
    def load(cls, out_dir: str) -> "ExtensionOutputs":
        tables = [read_csv(os.path.join(out_dir, name)) for name in cls.FILES]
        return cls(*tables, summary=read_json(os.path.join(out_dir, "summary.json")))


def theory_table(pd: PhaseDiagram, *, branch_only: bool = True) -> dict[str, np.ndarray]:
    """`PhaseDiagram.points` as the `theory.csv` table: branch and status as names; by default only the
    fixed point that is each subspace's branch (`is_branch`) at each `(omega, alpha)`."""
    pts = {k: np.asarray(v) for k, v in pd.points.items()}
    sel = pts["is_branch"].astype(bool) if branch_only else np.ones(len(pts["alpha"]), bool)
    out = {k: v[sel] for k, v in pts.items()}
    out["branch"] = np.asarray(PHASE_BRANCHES)[out["branch"].astype(int)]
    out["status"] = status_names(out["status"])
    first = ["alpha", "omega", "branch", "q", "m", "theta", "V", "train_loss", "test_error", "q_err", "m_err",
             "theta_err", "V_err", "train_loss_err", "test_error_err", "status"]
    return {k: out[k] for k in first + [k for k in out if k not in first]}


def thresholds_table(pd: PhaseDiagram) -> dict[str, np.ndarray]:
    """Per-`omega` thresholds of a diagram (`alpha_c`, `alpha_l`, errors, statuses, spinodals)."""
    return {k: np.asarray(v) for k, v in pd.thresholds.items()}


def attach_theory(runs: dict, theory: dict, branch_of_init=None) -> dict:
    """Add `<key>_se`, `<key>_se_err` (`SE_KEYS`) and `se_branch` to `runs`: the SE fixed point at the run's
    `(alpha, omega)` of the branch the run *reached* (its `solution` column, `classify_solution`: positional or
    semantic), else of the branch named like its `init` (or `branch_of_init[init]`). NaN where the theory has
    no converged fixed point there. (A run started positionally can escape an SE fixed point that is unstable
    out of its subspace and end on the other branch: it is compared with the branch it reached.)"""
    out = dict(runs)
    n = len(runs["alpha"])
    index = {(round(float(a), 9), round(float(w), 9), str(b)): i
             for i, (a, w, b) in enumerate(zip(theory["alpha"], theory["omega"], theory["branch"]))}
    for k in SE_KEYS:
        out[k + "_se"] = np.full(n, np.nan)
        out[k + "_se_err"] = np.full(n, np.nan)
    out["se_branch"] = np.full(n, "none", dtype=object)
    for j in range(n):
        b = str(runs["init"][j])
        b = branch_of_init.get(b, b) if branch_of_init else b
        if "solution" in runs and str(runs["solution"][j]) in PHASE_BRANCHES:
            b = str(runs["solution"][j])
        i = index.get((round(float(runs["alpha"][j]), 9), round(float(runs["omega"][j]), 9), b))
        if i is None or str(theory["status"][i]) != "converged":
            continue
        out["se_branch"][j] = b
        for k in SE_KEYS:
            out[k + "_se"][j] = theory[k][i]
            out[k + "_se_err"][j] = theory[k + "_err"][i]
    out["se_branch"] = out["se_branch"].astype(str)
    return out


def runs_table(training: TrainingRuns) -> dict[str, np.ndarray]:
    """`TrainingRuns.runs` with names for `init`, `status`, `solution`; the overlap-based test error renamed
    `test_error_from_overlaps` (the SE value is `test_error_se`); `m`, `theta` sign-fixed (`Q -> -Q` is a
    symmetry): positive `theta` on semantic solutions, positive `m` otherwise."""
    from phasejax.empirics.metrics import SOLUTIONS
    from phasejax.empirics.students import INITS

    r = {k: np.asarray(v) for k, v in training.runs.items()}
    first = ["alpha", "omega", "seed", "init", "d", "q", "m", "theta", "train_loss", "test_error"]
    out = {k: r[k] for k in first}
    out["init"] = np.asarray(INITS)[r["init"].astype(int)]
    # Q and -Q are the same student (S(h) = S(-h)): fix the sign so that the overlap of the mechanism reached
    # is positive (theta on semantic solutions, m otherwise); q, losses and errors do not depend on it
    semantic = np.asarray(SOLUTIONS)[r["solution"].astype(int)] == "semantic"
    sign = np.where(semantic, np.sign(r["theta"]), np.sign(r["m"]))
    sign = np.where(sign == 0, 1.0, sign)
    out["m"], out["theta"] = sign * r["m"], sign * r["theta"]
    out["test_error_from_overlaps"] = r["test_error_theory"]
    for k in ("n", "grad_norm", "steps", "converged", "cos_m", "cos_theta"):
        out[k] = r[k]
    out["status"] = status_names(r["status"])
    out["solution"] = np.asarray(SOLUTIONS)[r["solution"].astype(int)]
    return out


def concat_tables(tables: list[dict]) -> dict:
    """Row-concatenate tables with the same columns."""
    return {k: np.concatenate([np.asarray(t[k]) for t in tables]) for k in tables[0]}


BY_BRANCH = ("d", "se_branch", "alpha", "omega")
"""Default grouping of runs: size, the branch the run reached (`attach_theory`), alpha, omega."""


def seed_means(runs: dict, keys=("q", "m", "theta", "train_loss", "test_error"), by=BY_BRANCH, *,
               teacher_adjusted: bool = False):
    """Mean and standard error over seeds of `keys`, grouped by `by`: a table with `<key>_mean`, `<key>_sem`,
    `n_seeds` (distinct seeds; runs of one seed in a group, e.g. two inits reaching the same minimum, are
    averaged first).

    `teacher_adjusted=True` adds `<key>_adj_mean`, `<key>_adj_sem`: the seed mean with the teacher's norm as
    control variate (`phasejax.empirics.adjusted_seed_mean`; the norm of each seed's rank-1 teacher is
    recomputed from `seed` and `d`, so `runs` must have `seed` and `by` must hold `"d"`). NaN for groups with
    fewer than `MIN_ADJUSTED_SEEDS` seeds. When `by` holds an outcome of the run (the default's
    `se_branch`), the group's seeds are selected by it and their mean `rho` need not be 1: the adjusted
    mean is then the fit's value at `rho = 1`, an extrapolation rather than a control variate of known
    mean."""
    if teacher_adjusted and ("d" not in by or "seed" not in runs):
        raise ValueError(f"teacher_adjusted needs a 'seed' column and 'd' among the grouping columns, got "
                         f"by={by!r}, columns {sorted(runs)}")
    groups = {}
    for j in range(len(runs["alpha"])):
        groups.setdefault(tuple(runs[b][j] for b in by), []).append(j)
    out = {b: [] for b in by}
    stats = ("mean", "sem", "adj_mean", "adj_sem") if teacher_adjusted else ("mean", "sem")
    out.update({f"{k}_{s}": [] for k in keys for s in stats})
    out["n_seeds"] = []
    for g, idx in groups.items():
        for b, v in zip(by, g):
            out[b].append(v)
        # runs of one seed share the data set: two inits of a seed that reach the same minimum count once
        seeds = np.asarray(runs["seed"])[idx] if "seed" in runs else np.arange(len(idx))
        unique = np.unique(seeds)
        for k in keys:
            v_runs = np.asarray(runs[k], float)[idx]
            v = np.asarray([np.mean(v_runs[seeds == s]) for s in unique])
            out[k + "_mean"].append(np.mean(v))
            out[k + "_sem"].append(np.std(v, ddof=1) / np.sqrt(len(v)) if len(v) > 1 else np.nan)
            if teacher_adjusted:
                a, e = adjusted_seed_mean(v_runs, seeds, int(g[by.index("d")]))
                out[k + "_adj_mean"].append(a)
                out[k + "_adj_sem"].append(e)
        out["n_seeds"].append(len(unique))
    return {k: np.asarray(v) for k, v in out.items()}


def relative_gaps(runs: dict, keys=("q", "m", "theta", "train_loss", "test_error"), by=BY_BRANCH, *,
                  teacher_adjusted: bool = False) -> dict:
    """Per group `by` (default: `d`, the branch reached, `alpha`, `omega`): `|mean over seeds - SE| / |SE|` for
    each key with a theory value (columns `<key>_gap`; NaN where the theory is missing or, for `m` and
    `theta`, `|SE| < ZERO_OVERLAP_TOL`: an overlap that is zero in the limit, e.g. `m` on the semantic branch, has no
    relative gap).

    `teacher_adjusted=True` adds, from `seed_means(..., teacher_adjusted=True)`, the signed relative gap of the
    teacher-adjusted mean `<key>_adj_gap = (adj_mean - SE) / |SE|` and its standard error `<key>_adj_gap_err =
    adj_sem / |SE|` (the experiments' statistical error only; the SE's quadrature error is in `<key>_se_err`)."""
    means = seed_means(runs, keys, by, teacher_adjusted=teacher_adjusted)
    se = seed_means({**runs, **{k: runs[k + "_se"] for k in keys}}, keys, by)
    out = {k: means[k] for k in tuple(by) + ("n_seeds",)}
    for k in keys:
        th, ex = se[k + "_mean"], means[k + "_mean"]
        big = has_relative_scale(k, th)
        den = np.where(big, np.abs(th), 1.0)
        out[k + "_mean"], out[k + "_sem"], out[k + "_se"] = ex, means[k + "_sem"], th
        out[k + "_gap"] = np.where(big, np.abs(ex - th) / den, np.nan)
        if teacher_adjusted:
            out[k + "_adj_mean"], out[k + "_adj_sem"] = means[k + "_adj_mean"], means[k + "_adj_sem"]
            out[k + "_adj_gap"] = np.where(big, (means[k + "_adj_mean"] - th) / den, np.nan)
            out[k + "_adj_gap_err"] = np.where(big, means[k + "_adj_sem"] / den, np.nan)
    return out


# ----------------------------------------------------------------------------
# Experiments, figure, entry point
# ----------------------------------------------------------------------------


def train(params: TiedAttentionParams, alphas, omega: float, seeds, inits, d: int, *,
          config: TrainConfig = TrainConfig(), quadrature_order: int = 8,
          options: RunOptions | None = None) -> dict | None:
    """Train tied students (L-BFGS to `||grad|| < gtol`) on `alphas x (omega,) x inits x seeds` at size `d`
    (`phasejax.empirics.train_students`); returns the `runs_table` or `None` while chunks are missing."""
    grid = TrainingGrid(alphas=tuple(alphas), omegas=(float(omega),), seeds=tuple(seeds), inits=tuple(inits), d=d)
    out = train_students(grid, params, config=config, quadrature_order=quadrature_order, options=options)
    return None if out is None else runs_table(out)


def _sub_options(run_dir, name: str, progress: bool, chunk_size: int = 16) -> RunOptions:
    return RunOptions(run_dir=None if run_dir is None else os.path.join(run_dir, name), progress=progress,
                      chunk_size=chunk_size)


def standard_thresholds(path: str = os.path.join("results", "phase_diagram", "thresholds.csv")) -> dict | None:
    """The standard `A`'s committed thresholds (`phasejax phase-diagram`), or `None` when the file is absent."""
    return read_csv(path) if os.path.exists(path) else None


def _finite(err) -> np.ndarray:
    """Error bars for plotting: non-finite half-widths (undetermined) drawn as 0."""
    err = np.asarray(err, float)
    return np.where(np.isfinite(err), err, 0.0)


def plot(outputs: ExtensionOutputs, path: str, standard: dict | None = None, omega: float = 0.3) -> str:
    """Three panels: test error and overlaps along alpha at `omega` (SE lines, 95% quadrature bands;
    experiments: mean +- standard error over seeds), and `alpha_c(omega)`, `alpha_l(omega)` of both `A`."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    th, runs = outputs.theory, outputs.runs
    fig = Figure(figsize=(15, 5.0), layout="constrained")
    ax_err, ax_ov, ax_th = fig.subplots(1, 3)
    colors = {"positional": "C1", "semantic": "C0"}
    sel_w = np.isclose(np.asarray(th["omega"], float), omega)
    for b in PHASE_BRANCHES:
        s = sel_w & (np.asarray(th["branch"]) == b) & (np.asarray(th["status"]) == "converged")
        a = np.asarray(th["alpha"], float)[s]
        o = np.argsort(a)
        for ax, key, style in ((ax_err, "test_error", "-"),
                               (ax_ov, "m" if b == "positional" else "theta", "-"),
                               (ax_ov, "q", ":")):
            v = np.asarray(th[key], float)[s][o]
            e = np.asarray(th[key + "_err"], float)[s][o]
            lab = f"SE {b}" if ax is ax_err else f"SE {b}: ${key if key != 'theta' else chr(92) + 'theta'}$"
            ax.plot(a[o], v, style, color=colors[b], label=lab)
            ax.fill_between(a[o], v - _finite(e), v + _finite(e), color=colors[b], alpha=0.25)
    means = seed_means(runs)
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
        e = _finite(np.asarray(ts[key + "_err"], float))
        ax_th.errorbar(v, w, xerr=e, color="C3", marker=marker, capsize=2,
                       label=f"second A: ${key.replace('alpha', chr(92) + 'alpha')}$")
        if standard is not None:
            ws = np.asarray(standard["omega"], float)
            keep = ws <= w.max() + 1e-9
            ax_th.errorbar(np.asarray(standard[key], float)[keep], ws[keep],
                           xerr=_finite(np.asarray(standard[key + "_err"], float))[keep], color="0.4",
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
    return save_figure(fig, path)


def main(out_dir: str, *, preset: str = "cpu", run_dir: str | None = None, progress: bool = True) -> list[str]:
    """Theory (phase diagram and thresholds of the second `A`), experiments at `omega = 0.3`, figure.

    Writes `theory.csv`, `runs.csv`, `thresholds.csv`, `summary.json`, `gaps.csv` (seed-averaged experiments
    against SE per `(d, init, alpha)`) and `second_A.png` into `out_dir`; returns the paths."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {tuple(PRESETS)}, got {preset!r}")
    P = PRESETS[preset]
    params = second_A_params()
    rule = None if P["log2_n"] is None else SobolRule.create(4, log2_n=P["log2_n"], n_replicas=P["n_replicas"])
    pd = theory_diagram(P["alphas"], P["omegas"], params, quadrature=rule,
                        options=_sub_options(run_dir, "theory", progress, 4))
    theory = theory_table(pd)
    runs = concat_tables([train(params, P["train_alphas"], P["train_omega"], P["seeds"],
                                ("positional", "semantic"), d, options=_sub_options(run_dir, f"train_d{d}", progress))
                          for d in P["ds"]])
    runs = attach_theory(runs, theory)
    semantic = theory["branch"] == "semantic"
    standard = standard_thresholds()
    summary = dict(
        extension=NAME, preset=preset, A=[list(r) for r in PAPER_A_ASYMMETRIC], standard_A=[list(r) for r in PAPER_A],
        alphas=list(P["alphas"]), omegas=list(P["omegas"]), train_alphas=list(P["train_alphas"]),
        train_omega=P["train_omega"], seeds=list(P["seeds"]), ds=list(P["ds"]),
        semantic_max_abs_m=float(np.nanmax(np.abs(theory["m"][semantic]))) if semantic.any() else None,
        phase_config=pd.config,
        standard_thresholds={k: np.asarray(v).tolist() for k, v in standard.items()} if standard else None,
    )
    outputs = ExtensionOutputs(theory=theory, runs=runs, thresholds=thresholds_table(pd), summary=summary)
    paths = outputs.write(out_dir)
    paths.append(write_csv(os.path.join(out_dir, "gaps.csv"), relative_gaps(runs, teacher_adjusted=True)))
    paths.append(plot(outputs, os.path.join(out_dir, "second_A.png"), standard, P["train_omega"]))
    return paths
