"""The thresholds of an extension: `alpha_c` and `alpha_l` from the public root finders of `phasejax.phase`
(local cubic roots, errors from the curves shifted by their error bars, the bracket on fewer than 4 alphas), for
theory tables (`branch_thresholds`) and trained students (`empirical_alpha_c`: bootstrap over seeds), and the tied
model's thresholds beside them (`with_tied_thresholds`)."""

from __future__ import annotations

import os

import jax.numpy as jnp
import numpy as np

from phasejax.extensions._tables import read_table
from phasejax.phase import alpha_c_with_error, crossing_status, root_with_error
from phasejax.phase.thresholds import first_downcrossing
from phasejax.phase.thresholds import bracket_error
from phasejax.precision import float64_scope

MAX_SOLVER_SHIFT = 0.05
"""Largest `solver_shift` (scaled first-order distance to the fixed point) of a solve that stopped at
`max_iterations` for its training loss to enter the comparisons of branches (`resolved_rows`)."""


def resolved_rows(table: dict, max_shift: float = MAX_SOLVER_SHIFT) -> tuple[np.ndarray, np.ndarray]:
    """`(usable, e_t uncertainty)` per row of a theory table.

    Usable: converged, or stopped at `max_iterations` with `solver_shift <= max_shift` (the solver's part of
    the errors, scaled like the residual: relative to entries above 1, absolute below; e.g. the rank-2 semantic
    rows, whose finite-rule map jumps by one node's weight near the fixed point). A converged row without a
    quadrature error (NaN) leaves every comparison with a stopped row unresolved. The uncertainty of
    `train_loss` is its `train_loss_err`, plus, for a row that did not converge, `|train_loss -
    energetic_loss|` (the two agree at a fixed point and separate at first order in the distance from it).
    Tables without `status`/`solver_shift` use converged rows only.
    """
    conv = np.asarray(table["converged"]).astype(bool)
    finite = np.isfinite(np.asarray(table["train_loss"], float))
    err = np.asarray(table["train_loss_err"], float)
    if "solver_shift" not in table or "status" not in table:
        return conv & finite, err
    stalled = (np.asarray(table["status"]).astype(str) == "max_iterations") & (
        np.asarray(table["solver_shift"], float) <= max_shift)
    gap = np.abs(np.asarray(table["train_loss"], float) - np.asarray(table["energetic_loss"], float))
    return (conv | stalled) & finite, np.where(conv, err, err + gap)


def mark_global_minimum(table: dict) -> dict:
    """Add `global_min` (bool) per `(alpha, omega)`: where every row converged, the row with the lowest
    `train_loss`; where some only stopped near their fixed points (`resolved_rows`), the lowest only if its
    `train_loss` lies below every other's by more than their uncertainties. Nothing is marked where a row
    is unusable (its fixed point could be the lowest) or the lowest is not resolved."""
    gm = np.zeros(len(table["alpha"]), bool)
    ok, unc = resolved_rows(table)
    conv = np.asarray(table["converged"]).astype(bool)
    e = np.asarray(table["train_loss"], float)
    for key in set(zip(table["alpha"].tolist(), table["omega"].tolist())):
        idx = np.flatnonzero((table["alpha"] == key[0]) & (table["omega"] == key[1]))
        if not np.all(ok[idx]):
            continue
        low = idx[np.argmin(e[idx])]
        rest = idx[idx != low]
        if np.all(conv[idx]) or np.all(e[low] + unc[low] < e[rest] - unc[rest]):
            gm[low] = True
    return {**table, "global_min": gm}


def branch_thresholds(table: dict, params, *, positional: str = "positional",
                      semantic: str = "semantic") -> dict[str, np.ndarray]:
    """Per omega of a `continuation_table`: `alpha_c` where the `semantic` rows' `e_t` drops below the
    `positional` rows' (rows usable by `resolved_rows`, error bars their two `e_t` uncertainties), and
    `alpha_l` where the global minimum's (`mark_global_minimum`) test error drops below the linear baseline's
    `eps_lin` (theory notes, sections 5-6). Roots, errors and statuses: `phasejax.phase.root_with_error`."""
    from phasejax.theory.baselines import linear_baseline_error

    out = {k: [] for k in ("omega", "alpha_c", "alpha_c_err", "alpha_c_status", "alpha_l", "alpha_l_err",
                           "alpha_l_status", "eps_lin")}
    usable, unc = resolved_rows(table)
    init = np.asarray(table["init"]).astype(str)
    with float64_scope():
        for om in np.unique(table["omega"]):
            eps_lin = float(linear_baseline_error(params.replace(omega=jnp.asarray(om))))
            pos, sem = (table["omega"] == om) & (init == positional), (table["omega"] == om) & (init == semantic)
            alphas = table["alpha"][pos]
            ac, ac_err, ac_status = alpha_c_with_error(alphas, table["train_loss"][pos], table["train_loss"][sem],
                                                       np.hypot(unc[sem], unc[pos]), usable[pos] & usable[sem])
            # the global minimum's test error on the alpha grid (NaN where no global minimum is determined)
            gm = (table["omega"] == om) & np.asarray(table["global_min"]).astype(bool)
            gm_err, gm_err_err = np.full(len(alphas), np.nan), np.full(len(alphas), np.nan)
            for j, a in enumerate(alphas):
                row = np.flatnonzero(gm & (table["alpha"] == a))
                if row.size:
                    gm_err[j], gm_err_err[j] = table["test_error"][row[0]], table["test_error_err"][row[0]]
            al, al_err, al_status = root_with_error(alphas, gm_err - eps_lin, gm_err_err)
            for k, v in dict(omega=om, alpha_c=ac, alpha_c_err=ac_err, alpha_c_status=ac_status, alpha_l=al,
                             alpha_l_err=al_err, alpha_l_status=al_status, eps_lin=eps_lin).items():
                out[k].append(v)
    return {k: np.asarray(v) for k, v in out.items()}


def paired_gap(runs: dict, sel, *, key: str = "train_loss", column: str = "init", positional="positional",
               semantic="semantic") -> tuple[np.ndarray, np.ndarray]:
    """`(alphas, delta (n_seeds, n_alpha))`: `runs[key]` of the `semantic` minus the `positional` run of each
    seed (runs `sel`, paired by seed and alpha; NaN where one is missing)."""
    r = {k: np.asarray(runs[k]) for k in ("alpha", "seed", key, column)}
    alphas, seeds = np.unique(r["alpha"][sel]), np.unique(r["seed"][sel])
    delta = np.full((len(seeds), len(alphas)), np.nan)
    for i, s in enumerate(seeds):
        for j, a in enumerate(alphas):
            m = sel & (r["seed"] == s) & (r["alpha"] == a)
            pos, sem = m & (r[column] == positional), m & (r[column] == semantic)
            if pos.any() and sem.any():
                delta[i, j] = r[key][sem][0] - r[key][pos][0]
    return alphas, delta


N_BOOT = 2000
"""Bootstrap resamples of the seeds for the error of an empirical threshold."""


def empirical_alpha_c(alphas, delta, reference=None, *, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """`alpha_c` where the seed mean of `delta (n_seeds, n_alpha)` (e.g. `e_t(semantic) - e_t(positional)`,
    `paired_gap`) crosses zero downwards (`phasejax.phase.first_downcrossing`), with its 95% error (half the
    2.5-97.5% range of `n_boot` resamples of the seeds with replacement, with the bracket around the crossing
    added on fewer than 4 alphas, `phasejax.phase.thresholds.bracket_error`; NaN when fewer than half of them
    cross in the grid, or with one seed) and status.

    With `reference` (another `(n_seeds, n_alpha)` table of the same seeds, e.g. an uncorrelated baseline) also
    the paired `shift = alpha_c - alpha_c(reference)` and its error from the same resamples."""
    delta = np.asarray(delta, float)
    mean = delta.mean(axis=0)
    picks = np.random.default_rng(seed).integers(0, delta.shape[0], size=(n_boot, delta.shape[0]))
    root = lambda t: first_downcrossing(alphas, t.mean(axis=0))  # noqa: E731
    boot = np.asarray([root(delta[k]) for k in picks])

    def half_width(samples):
        ok = np.isfinite(samples)
        if ok.mean() < 0.5 or delta.shape[0] < 2:
            return float("nan")
        lo, hi = np.percentile(samples[ok], [2.5, 97.5])
        return float((hi - lo) / 2)

    ac = root(delta)
    # on fewer than MIN_FIT_POINTS alphas the interpolation error is the bracket around the crossing
    out = dict(alpha_c=ac, alpha_c_err=float(np.hypot(half_width(boot), bracket_error(alphas, ac))),
               alpha_c_status=crossing_status(mean))
    if reference is not None:
        reference = np.asarray(reference, float)
        out["shift"] = out["alpha_c"] - root(reference)
        out["shift_err"] = half_width(boot - np.asarray([root(reference[k]) for k in picks]))
    return out


def with_tied_thresholds(thresholds: dict, tied: dict | None) -> dict[str, np.ndarray]:
    """`thresholds` with the tied model's `alpha_c` at the same omega (`alpha_c_tied`, `alpha_c_tied_err`) and the
    shift `alpha_c - alpha_c_tied` (error: the two errors added in quadrature); NaN where `tied` has no row."""
    out = dict(thresholds)
    n = len(thresholds["omega"])
    tied_ac, tied_err = np.full(n, np.nan), np.full(n, np.nan)
    if tied is not None:
        for i, om in enumerate(thresholds["omega"]):
            j = np.flatnonzero(np.isclose(np.asarray(tied["omega"], float), om))
            if j.size:
                tied_ac[i] = float(tied["alpha_c"][j[0]])
                tied_err[i] = float(tied["alpha_c_err"][j[0]])
    out.update(alpha_c_tied=tied_ac, alpha_c_tied_err=tied_err, shift=np.asarray(thresholds["alpha_c"]) - tied_ac,
               shift_err=np.hypot(np.asarray(thresholds["alpha_c_err"], float), tied_err))
    return out


TIED_THRESHOLDS = os.path.join("results", "phase_diagram", "thresholds.csv")
"""The tied model's committed thresholds (`phasejax phase-diagram`), relative to the repository root."""


def tied_thresholds(path: str | None = None) -> dict | None:
    """The tied model's `alpha_c(omega)`, `alpha_l(omega)` with errors: `path`, by default the repository's
    `TIED_THRESHOLDS` (found next to the package, whatever the working directory); None when it is absent."""
    if path is None:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.path.join(root, TIED_THRESHOLDS)
    return read_table(path, ("omega", "alpha_c", "alpha_c_err")) if os.path.exists(path) else None
