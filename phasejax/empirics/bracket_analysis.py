"""The analysis of an empirical bracket of `alpha_c` (`phasejax.empirics.bracket`): from the task rows of
`bracket_sweep` to the crossing.

* `summarize_bracket` gives per `(alpha, d)` the branches' means and the paired and unpaired standard errors
  of `Delta e_t`, and the means with two control variates of exactly known mean (`controls`: the loss of the
  zero student given the teacher against `expected_zero_loss`; the teacher's norm), by a regression with one
  intercept per alpha (`control_variate_means`);
* `fit_inverse_d` fits `Delta e_t = a + b / d` per `alpha` (weighted, `chi^2 / dof` reported and the errors
  inflated by `sqrt(chi^2 / dof)` when it is above 1; `weighted_polyfit`), `crossing` is the root of a weighted
  polynomial fit in `alpha` with its error, `hessian_bottoms` pools the restricted Hessians' smallest Ritz
  values, and `bracket_report` puts them together.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from phasejax.empirics.bracket import BRACKET_BRANCHES


# ----------------------------------------------------------------------------
# Summaries and fits
# ----------------------------------------------------------------------------

SUMMARY_COLUMNS = (
    "alpha", "omega", "lam", "d", "branch", "n_datasets", "restarts", "e_t", "e_t_err", "delta_e", "delta_e_err",
    "delta_e_err_unpaired", "e_t_cv", "e_t_cv_err", "delta_e_cv", "delta_e_cv_err", "restart_gain",
    "restart_gain_err", "hessian_min_eig", "hessian_min_eig_err",
    "hessian_min_eig_lowest", "hessian_min_eig_lowest_error", "n_below_zero", "q", "q_err", "m", "m_err", "theta",
    "theta_err", "n_converged", "n_runs", "grad_norm_max", "leak_max", "n_in_branch",
)
"""Columns of `bracket.csv`, one row per `(alpha, d, branch)` (means and standard errors over the data sets
whose two branches both ended finite, `n_datasets` of them): `e_t` the mean of the branch's best-of-`restarts`
`R / d`; `delta_e = e_t(semantic) - e_t(positional)` paired on the same data (both rows of an `(alpha, d)`
carry it) with its standard error, and `delta_e_err_unpaired`, the error the two means would give without the
pairing (`sqrt(e_err_pos^2 + e_err_sem^2)`); `e_t_cv`, `delta_e_cv`: the same means with the control
variates of `control_variate_means` (pooled over the alphas of one `d`), with their errors; `restart_gain`: mean
of the best of the first half of the
restarts minus the best of all (what the second half lowered `e_t` by); `hessian_min_eig`: mean over data
sets of the smallest Ritz value of the restricted Hessian at the best restart, `hessian_min_eig_lowest` the
lowest of them with its Ritz residual, `n_below_zero` the data sets whose value lies below zero by more than
its residual (saddles within the gradient tolerance); overlaps per token; `n_converged` of `n_runs` restarts;
the largest RMS gradient of a best restart; the largest `leak`; `n_in_branch` best restarts that
`classify_solution` calls the branch's."""


def mean_and_error(values) -> tuple[float, float]:
    """Mean and standard error (`std(ddof=1) / sqrt(N)`) of the finite entries; NaN error for fewer than 2."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")


def summarize_bracket(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`SUMMARY_COLUMNS` from the task rows of `bracket_sweep` (any number of `d`, `alpha`, data sets).

    Averages run over the data sets where both branches' best `e_t` is finite (a data set where every restart
    of a branch diverged is dropped from both branches, keeping the pairing; `n_datasets` counts the rest).
    `branch` holds the names of `BRACKET_BRANCHES`."""
    keys = ("alpha", "omega", "lam", "d")
    cols = {k: np.asarray(rows[k], float) for k in keys}
    groups = sorted({tuple(cols[k][i] for k in keys) for i in range(len(cols["alpha"]))})
    out: dict[str, list] = {k: [] for k in SUMMARY_COLUMNS}
    for g in groups:
        sel = np.all([cols[k] == v for k, v in zip(keys, g)], axis=0)
        ok = sel & np.isfinite(np.asarray(rows["e_positional"], float)) & \
            np.isfinite(np.asarray(rows["e_semantic"], float))
        delta, delta_err = mean_and_error(np.asarray(rows["delta_e"], float)[ok])
        errs = {}
        for name in BRACKET_BRANCHES:
            errs[name] = mean_and_error(np.asarray(rows[f"e_{name}"], float)[ok])
        for name in BRACKET_BRANCHES:
            col = lambda k: np.asarray(rows[f"{k}_{name}"], float)[ok]  # noqa: E731
            hess, hess_res = col("hessian_min_eig"), col("hessian_min_eig_error")
            lowest = int(np.argmin(np.where(np.isfinite(hess), hess, np.inf))) if hess.size else 0
            for k, v in zip(keys, g):
                out[k].append(v)
            out["branch"].append(name)
            out["n_datasets"].append(int(ok.sum()))
            out["restarts"].append(int(np.max(np.asarray(rows["restarts"])[sel])))
            out["e_t"].append(errs[name][0])
            out["e_t_err"].append(errs[name][1])
            out["delta_e"].append(delta)
            out["delta_e_err"].append(delta_err)
            out["delta_e_err_unpaired"].append(float(np.hypot(errs["positional"][1], errs["semantic"][1])))
            gain = mean_and_error(col("e_half") - col("e"))
            out["restart_gain"].append(gain[0])
            out["restart_gain_err"].append(gain[1])
            h = mean_and_error(hess)
            out["hessian_min_eig"].append(h[0])
            out["hessian_min_eig_err"].append(h[1])
            out["hessian_min_eig_lowest"].append(float(hess[lowest]) if hess.size else float("nan"))
            out["hessian_min_eig_lowest_error"].append(float(hess_res[lowest]) if hess.size else float("nan"))
            out["n_below_zero"].append(int(np.sum(hess + hess_res < 0)))
            for k in ("q", "m", "theta"):
                mv = mean_and_error(col(k))
                out[k].append(mv[0])
                out[k + "_err"].append(mv[1])
            out["n_converged"].append(int(np.sum(np.asarray(rows[f"n_converged_{name}"])[sel])))
            out["n_runs"].append(int(np.sum(np.asarray(rows["restarts"])[sel])))
            gn = np.asarray(rows[f"grad_norm_{name}"], float)[sel]
            out["grad_norm_max"].append(float(np.max(gn)) if gn.size else float("nan"))
            out["leak_max"].append(float(np.max(np.asarray(rows[f"leak_{name}"], float)[sel])))
            out["n_in_branch"].append(int(np.sum(col("solution") == BRACKET_BRANCHES.index(name))))
    table = {k: np.asarray(v) for k, v in out.items() if k not in ("e_t_cv", "e_t_cv_err", "delta_e_cv",
                                                                    "delta_e_cv_err")}
    table = _with_control_variates(table, rows)
    table = {k: table[k] for k in SUMMARY_COLUMNS}
    for k in ("d", "n_datasets", "restarts", "n_below_zero", "n_converged", "n_runs", "n_in_branch"):
        table[k] = table[k].astype(int)
    return table


@dataclasses.dataclass(frozen=True)
class WeightedFit:
    """A weighted least-squares polynomial fit `y = sum_k coef[k] x^k`: coefficients and covariance (already
    multiplied by `scale^2`), `chi2`, `dof`, `chi2_per_dof` (NaN when `dof = 0`) and `scale = sqrt(max(1,
    chi2 / dof))`, the factor the errors were inflated by (1 when `dof = 0`: nothing to judge the scatter by)."""

    coef: np.ndarray
    cov: np.ndarray
    chi2: float
    dof: int
    chi2_per_dof: float
    scale: float

    @property
    def errors(self) -> np.ndarray:
        return np.sqrt(np.diag(self.cov))

    def __call__(self, x) -> np.ndarray:
        return np.polynomial.polynomial.polyval(np.asarray(x, float), self.coef)

    def error_at(self, x) -> np.ndarray:
        """Standard error of the fitted curve at `x` (from `cov`)."""
        X = np.vander(np.atleast_1d(np.asarray(x, float)), len(self.coef), increasing=True)
        return np.sqrt(np.einsum("ij,jk,ik->i", X, self.cov, X))


def weighted_polyfit(x, y, errors, degree: int = 1) -> WeightedFit:
    """Weighted least squares `y = sum_{k <= degree} c_k x^k` with weights `1 / errors^2`, `chi^2 / dof`, and
    the covariance inflated by `chi^2 / dof` when that is above 1 (the points scatter more than their errors
    say). Points with a non-finite value or a non-positive error are left out; fewer than `degree + 1` left:
    `ValueError`."""
    x, y, e = (np.asarray(v, float).ravel() for v in (x, y, errors))
    if not x.shape == y.shape == e.shape:
        raise ValueError(f"x, values and errors must have one entry per point, got {x.shape}, {y.shape}, {e.shape}")
    degree = int(degree)
    if degree < 0:
        raise ValueError(f"degree must be >= 0, got degree={degree}")
    ok = np.isfinite(x) & np.isfinite(y) & np.isfinite(e) & (e > 0)
    if np.unique(x[ok]).size < degree + 1:
        raise ValueError(f"a fit of degree {degree} needs {degree + 1} distinct points with finite values and "
                         f"errors > 0, got {np.unique(x[ok]).size}")
    X = np.vander(x[ok], degree + 1, increasing=True)
    w = 1.0 / e[ok] ** 2
    cov = np.linalg.inv(X.T @ (w[:, None] * X))
    coef = cov @ (X.T @ (w * y[ok]))
    chi2 = float(np.sum(w * (y[ok] - X @ coef) ** 2))
    dof = int(ok.sum() - (degree + 1))
    per = chi2 / dof if dof > 0 else float("nan")
    scale = float(np.sqrt(per)) if dof > 0 and per > 1 else 1.0
    return WeightedFit(coef=coef, cov=cov * scale**2, chi2=chi2, dof=dof, chi2_per_dof=per, scale=scale)


def fit_inverse_d(d, values, errors) -> WeightedFit:
    """`value = a + b / d` (weighted, `weighted_polyfit` in `x = 1 / d`): `coef = (a, b)`, `a` the `d -> inf`
    limit; errors inflated by `sqrt(chi^2 / dof)` when it is above 1."""
    d = np.asarray(d, float)
    if np.any(d <= 0):
        raise ValueError(f"d must be > 0, got {d.tolist()}")
    return weighted_polyfit(1.0 / d, values, errors, degree=1)


@dataclasses.dataclass(frozen=True)
class Crossing:
    """The zero of a weighted polynomial fit of `Delta e_t` in `alpha` (`crossing`): `alpha_c` and its standard
    error (from the fit's covariance, inflated with it), the fit, the `alpha` it was centred on, and `bracketed`:
    whether the data change sign (else the root is an extrapolation, or NaN when the fit has no real root in
    reach)."""

    alpha_c: float
    alpha_c_err: float
    fit: WeightedFit
    center: float
    bracketed: bool

    def to_json(self) -> dict:
        return dict(alpha_c=self.alpha_c, alpha_c_err=self.alpha_c_err, bracketed=self.bracketed,
                    degree=len(self.fit.coef) - 1, center=self.center, coef=self.fit.coef.tolist(),
                    coef_err=self.fit.errors.tolist(), chi2=self.fit.chi2, dof=self.fit.dof,
                    chi2_per_dof=self.fit.chi2_per_dof, error_scale=self.fit.scale)


def crossing(alphas, values, errors, degree: int = 1) -> Crossing:
    """Where `Delta e_t(alpha)` crosses zero: a weighted polynomial fit of `degree` in `alpha - center` (`center`
    the error-weighted mean of the alphas) and its real root nearest to `center`, with the standard error
    `sqrt(g^T C g) / |p'(alpha_c)|`, `g = (1, x, x^2, ...)` at the root and `C` the fit's (inflated) covariance
    (first-order propagation of the fit's errors).

    >>> c = crossing([1.0, 1.2, 1.4], [2e-4, 0.0, -2e-4], [1e-5, 1e-5, 1e-5])
    >>> round(c.alpha_c, 6), round(c.alpha_c_err, 4)
    (1.2, 0.0058)
    """
    a, y, e = (np.asarray(v, float).ravel() for v in (alphas, values, errors))
    ok = np.isfinite(a) & np.isfinite(y) & np.isfinite(e) & (e > 0)
    if not ok.any():
        raise ValueError("values and errors hold no finite point with an error > 0")
    w = 1.0 / e[ok] ** 2
    center = float(np.sum(w * a[ok]) / np.sum(w))
    fit = weighted_polyfit(a - center, y, e, degree)
    roots = np.polynomial.polynomial.polyroots(fit.coef) if degree >= 1 else np.array([])
    real = roots[np.abs(np.imag(roots)) < 1e-12].real if roots.size else roots
    bracketed = bool(np.any(y[ok] > 0) and np.any(y[ok] < 0))
    if real.size == 0:
        return Crossing(float("nan"), float("nan"), fit, center, bracketed)
    x0 = float(real[np.argmin(np.abs(real))])
    slope = float(np.polynomial.polynomial.polyval(x0, np.polynomial.polynomial.polyder(fit.coef)))
    g = x0 ** np.arange(len(fit.coef))
    err = float(np.sqrt(g @ fit.cov @ g) / abs(slope)) if slope != 0 else float("inf")
    return Crossing(center + x0, err, fit, center, bracketed)


CONTROL_NAMES = ("zero_loss", "teacher_norm")
"""The control variates of `controls`: `R(0) / d` minus its exact conditional mean, and `|Q*|^2 / (d t) - 1`."""


def controls(rows: dict[str, np.ndarray]) -> np.ndarray:
    """`(N, 2)` control variates of the task rows, each of mean zero exactly: `zero_loss - zero_loss_expected`
    (`expected_zero_loss`) and `teacher_norm - 1`."""
    return np.stack([np.asarray(rows["zero_loss"], float) - np.asarray(rows["zero_loss_expected"], float),
                     np.asarray(rows["teacher_norm"], float) - 1.0], axis=1)


def control_variate_means(values, groups, z) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group means of `values (N,)` adjusted by control variates `z (N, k)` of mean zero, with standard errors.

    Least squares `value_i = a_{group(i)} + beta . z_i + noise` with one intercept per group and the slopes
    `beta` shared by the groups: the intercepts `a_g` are the group means at `z = 0`, the controls' exact mean,
    so they estimate `E[value]` with the part of the scatter that the controls explain removed (unbiased when
    the relation is linear, `O(1/N)` otherwise). Errors from the residual variance with `N - G - k` degrees of
    freedom. Rows with a non-finite value or control are left out. Returns `(unique groups, means, errors)`;
    NaN where a group has no row or fewer than one degree of freedom is left.
    """
    y = np.asarray(values, float).ravel()
    g = np.asarray(groups).ravel()
    z = np.asarray(z, float).reshape(len(y), -1)
    if g.shape != y.shape:
        raise ValueError(f"values and groups must have one entry per row, got {y.shape} and {g.shape}")
    labels = np.unique(g)
    means = np.full(labels.size, np.nan)
    errors = np.full(labels.size, np.nan)
    ok = np.isfinite(y) & np.all(np.isfinite(z), axis=1)
    present = np.asarray([np.any(ok & (g == lab)) for lab in labels])
    X = np.concatenate([(g[ok][:, None] == labels[present][None, :]).astype(float), z[ok]], axis=1)
    dof = int(ok.sum()) - X.shape[1]
    if dof < 1 or np.linalg.matrix_rank(X) < X.shape[1]:
        return labels, means, errors
    cov = np.linalg.inv(X.T @ X)
    coef = cov @ (X.T @ y[ok])
    s2 = float(np.sum((y[ok] - X @ coef) ** 2) / dof)
    means[present] = coef[:present.sum()]
    errors[present] = np.sqrt(s2 * np.diag(cov)[:present.sum()])
    return labels, means, errors


def _with_control_variates(table: dict, rows: dict) -> dict:
    """Fill `e_t_cv`, `delta_e_cv` (and errors) of `table` from the task `rows`: one regression per `(omega, lam,
    d)` with the alphas as groups (`control_variate_means`)."""
    z = controls(rows)
    both = np.isfinite(np.asarray(rows["e_positional"], float)) & np.isfinite(np.asarray(rows["e_semantic"], float))
    keys = ("omega", "lam", "d")
    for k in ("e_t_cv", "e_t_cv_err", "delta_e_cv", "delta_e_cv_err"):
        table[k] = np.full(len(table["alpha"]), np.nan)
    for g in sorted({tuple(float(rows[k][i]) for k in keys) for i in range(len(rows["alpha"]))}):
        sel = both & np.all([np.asarray(rows[k], float) == v for k, v in zip(keys, g)], axis=0)
        tsel = np.all([np.asarray(table[k], float) == v for k, v in zip(keys, g)], axis=0)
        alphas = np.asarray(rows["alpha"], float)[sel]
        for column, values in (("delta_e", rows["delta_e"]), *((f"e_{b}", rows[f"e_{b}"]) for b in BRACKET_BRANCHES)):
            labels, means, errors = control_variate_means(np.asarray(values, float)[sel], alphas, z[sel])
            for lab, mu, err in zip(labels, means, errors):
                at = tsel & (np.asarray(table["alpha"], float) == lab)
                if column == "delta_e":
                    table["delta_e_cv"][at], table["delta_e_cv_err"][at] = mu, err
                else:
                    at = at & (np.asarray(table["branch"]) == column[2:])
                    table["e_t_cv"][at], table["e_t_cv_err"][at] = mu, err
    return table


TARGET_ERROR = 1e-5
"""The standard error of `Delta e_t` per `(alpha, d)` the bracket aims at: `Delta e_t` changes by about `8e-4` per
unit `alpha` at `alpha_c(0.3)`, so `1e-5` is `alpha_c` to about 0.012 from one alpha."""

ESTIMATORS = ("cv", "plain")
"""`cv`: the paired means adjusted by the control variates (`delta_e_cv`); `plain`: the paired means alone."""


def _fit_json(fit: WeightedFit | None, names=("value_at_infinite_d", "slope_in_1_over_d")) -> dict:
    if fit is None:
        return {names[0]: None, names[0] + "_err": None, names[1]: None, names[1] + "_err": None, "chi2": None,
                "dof": None, "chi2_per_dof": None, "error_scale": None}
    return {names[0]: float(fit.coef[0]), names[0] + "_err": float(fit.errors[0]), names[1]: float(fit.coef[1]),
            names[1] + "_err": float(fit.errors[1]), "chi2": fit.chi2, "dof": fit.dof,
            "chi2_per_dof": fit.chi2_per_dof, "error_scale": fit.scale}


def _try_fit(d, y, e) -> WeightedFit | None:
    d, y, e = (np.asarray(v, float) for v in (d, y, e))
    ok = np.isfinite(y) & np.isfinite(e) & (e > 0)
    return fit_inverse_d(d[ok], y[ok], e[ok]) if np.unique(d[ok]).size >= 2 else None


def _try_crossing(alphas, y, e, degree: int) -> dict:
    a, y, e = (np.asarray(v, float) for v in (alphas, y, e))
    ok = np.isfinite(y) & np.isfinite(e) & (e > 0)
    if np.unique(a[ok]).size < degree + 1:
        return dict(alpha_c=None, alpha_c_err=None, bracketed=None, n_alphas=int(np.unique(a[ok]).size))
    return dict(crossing(a[ok], y[ok], e[ok], degree).to_json(), n_alphas=int(np.unique(a[ok]).size))


def hessian_bottoms(rows: dict[str, np.ndarray]) -> list[dict]:
    """The bottom of the restricted Hessian spectrum per `(branch, d)`, pooled over the alphas: mean and standard
    error of the data sets' smallest Ritz values, the lowest one with its Ritz residual, the largest residual,
    how many lie below zero by more than their residual, and the count."""
    out = []
    for name in BRACKET_BRANCHES:
        for d in np.unique(np.asarray(rows["d"])):
            sel = np.asarray(rows["d"]) == d
            v = np.asarray(rows[f"hessian_min_eig_{name}"], float)[sel]
            r = np.asarray(rows[f"hessian_min_eig_error_{name}"], float)[sel]
            ok = np.isfinite(v)
            mean, err = mean_and_error(v[ok])
            i = int(np.argmin(np.where(ok, v, np.inf))) if ok.any() else 0
            out.append(dict(branch=name, d=int(d), n=int(ok.sum()), mean=mean, mean_err=err,
                            lowest=float(v[i]) if ok.any() else None,
                            lowest_ritz_residual=float(r[i]) if ok.any() else None,
                            largest_ritz_residual=float(np.max(r[ok])) if ok.any() else None,
                            n_below_zero=int(np.sum(v[ok] + r[ok] < 0))))
    return out


def bracket_report(rows: dict[str, np.ndarray], *, degree: int = 1, estimator: str = "cv") -> tuple[dict, dict]:
    """`(table, report)`: `summarize_bracket(rows)` and the extrapolation and the empirical `alpha_c`.

    Per `alpha`, `Delta e_t(d) = a + b / d` (`fit_inverse_d`, over the sizes with an error) gives the `d -> inf`
    value `a` with its error (inflated by `sqrt(chi^2 / dof)` when that is above 1); the same for each branch's
    `e_t`. `alpha_c` is the `crossing` (degree `degree` in `alpha`) of the extrapolated `Delta e_t`, and of each
    size's `Delta e_t` (`alpha_c_per_d`). `estimator`: `"cv"` (control variates, `delta_e_cv`) or `"plain"`
    (paired means); the report also holds `alpha_c` of the other one as a check. Also: the achieved standard
    errors against `TARGET_ERROR` and `hessian_bottoms`. One `(omega, lambda)` per call (`ValueError` else).
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    points = {(float(w), float(lam)) for w, lam in zip(rows["omega"], rows["lam"])}
    if len(points) != 1:
        raise ValueError(f"rows must hold one (omega, lam), got {sorted(points)}")
    (omega, lam), = points
    table = summarize_bracket(rows)
    pos = np.asarray(table["branch"]) == "positional"
    alphas = np.unique(table["alpha"][pos])
    ds = np.unique(table["d"][pos])
    report = dict(omega=omega, lam=lam, estimator=estimator, degree=int(degree), target_error=TARGET_ERROR,
                  alphas=alphas.tolist(), ds=ds.tolist())
    for est in (estimator,) + tuple(e for e in ESTIMATORS if e != estimator):
        col = "delta_e_cv" if est == "cv" else "delta_e"
        extrap = []
        for a in alphas:
            sel = pos & (table["alpha"] == a)
            rec = dict(alpha=float(a), ds=table["d"][sel].tolist(), delta_e=table[col][sel].tolist(),
                       delta_e_err=table[col + "_err"][sel].tolist(), n_datasets=table["n_datasets"][sel].tolist())
            rec.update(_fit_json(_try_fit(table["d"][sel], table[col][sel], table[col + "_err"][sel])))
            for name in BRACKET_BRANCHES:
                bsel = (np.asarray(table["branch"]) == name) & (table["alpha"] == a)
                ecol = "e_t_cv" if est == "cv" else "e_t"
                rec[f"e_{name}"] = _fit_json(_try_fit(table["d"][bsel], table[ecol][bsel], table[ecol + "_err"][bsel]))
            extrap.append(rec)
        inf = _try_crossing([r["alpha"] for r in extrap], [np.nan if r["value_at_infinite_d"] is None
                                                           else r["value_at_infinite_d"] for r in extrap],
                            [np.nan if r["value_at_infinite_d_err"] is None else r["value_at_infinite_d_err"]
                             for r in extrap], degree)
        per_d = []
        for d in ds:
            sel = pos & (table["d"] == d)
            per_d.append(dict(d=int(d), **_try_crossing(table["alpha"][sel], table[col][sel], table[col + "_err"][sel],
                                                         degree)))
        block = dict(extrapolation=extrap, alpha_c=inf, alpha_c_per_d=per_d)
        if est == estimator:
            report.update(block)
        else:
            report[f"check_{est}"] = dict(alpha_c=inf, alpha_c_per_d=per_d)
    achieved = []
    for d in ds:
        sel = pos & (table["d"] == d)
        errs = table["delta_e_cv_err" if estimator == "cv" else "delta_e_err"][sel]
        achieved.append(dict(d=int(d), largest_delta_e_err=float(np.nanmax(errs)) if np.isfinite(errs).any() else None,
                             smallest_delta_e_err=float(np.nanmin(errs)) if np.isfinite(errs).any() else None,
                             n_datasets_per_alpha=table["n_datasets"][sel].tolist(),
                             meets_target=bool(np.all(errs <= TARGET_ERROR))))
    report["achieved_errors"] = achieved
    report["hessian_bottom"] = hessian_bottoms(rows)
    report["restarts"] = sorted({int(r) for r in np.asarray(rows["restarts"])})
    return table, report
