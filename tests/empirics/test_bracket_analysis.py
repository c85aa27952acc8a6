"""The analysis of the empirical bracket (phasejax.empirics.bracket_analysis): control-variate means against the
explained scatter, paired against unpaired errors, the weighted fits in 1/d against numpy's and a Monte Carlo of
their errors, the crossing's error against the spread of roots, and the report on synthetic task rows."""

import json

import numpy as np
import pytest

from phasejax.empirics.bracket import BRACKET_BRANCHES, TASK_COLUMNS
from phasejax.empirics.bracket_analysis import (
    SUMMARY_COLUMNS,
    bracket_report,
    control_variate_means,
    crossing,
    fit_inverse_d,
    summarize_bracket,
    weighted_polyfit,
)
from phasejax.io import to_json


# ----------------------------------------------------------------------------
# Control variates
# ----------------------------------------------------------------------------


def test_control_variate_means_remove_the_explained_scatter():
    rng = np.random.default_rng(0)
    groups = np.repeat([1.0, 2.0, 3.0], 400)
    z = rng.normal(size=(1200, 2))
    truth = {1.0: 0.3, 2.0: -0.1, 3.0: 0.05}
    y = np.asarray([truth[g] for g in groups]) + z @ np.asarray([2.0, -1.0]) + 0.1 * rng.normal(size=1200)
    labels, means, errors = control_variate_means(y, groups, z)
    assert labels.tolist() == [1.0, 2.0, 3.0]
    for lab, mu, err in zip(labels, means, errors):
        plain = y[groups == lab]
        assert abs(mu - truth[lab]) < 4 * err
        assert err < 0.1 * plain.std(ddof=1) / np.sqrt(plain.size)     # residual scatter 0.1 against sqrt(5.01)
        assert err == pytest.approx(0.1 / np.sqrt(400), rel=0.15)


# ----------------------------------------------------------------------------
# Summaries and fits
# ----------------------------------------------------------------------------


def _synthetic_rows(n_per, alphas=(1.2, 1.3), d=500, seed=0):
    """Task rows with a shared per-data-set fluctuation in both branches (what pairing cancels)."""
    rng = np.random.default_rng(seed)
    N = n_per * len(alphas)
    alpha = np.repeat(np.asarray(alphas, float), n_per)
    shared = 3e-4 * rng.normal(size=N)
    rows = {k: np.zeros(N) for k in TASK_COLUMNS}
    rows.update(alpha=alpha, omega=np.full(N, 0.3), lam=np.full(N, 0.01), d=np.full(N, d),
                dataset=np.tile(np.arange(n_per), len(alphas)), restarts=np.full(N, 4))
    rows["e_positional"] = 3.3e-3 + shared + 2e-5 * rng.normal(size=N)
    rows["e_semantic"] = 3.3e-3 - 8e-4 * (alpha - 1.25) + shared + 2e-5 * rng.normal(size=N)
    rows["delta_e"] = rows["e_semantic"] - rows["e_positional"]
    for b in BRACKET_BRANCHES:
        rows[f"e_half_{b}"] = rows[f"e_{b}"] + 1e-6
        rows[f"e_worst_{b}"] = rows[f"e_{b}"] + 2e-6
        rows[f"solution_{b}"] = np.full(N, BRACKET_BRANCHES.index(b))
        rows[f"hessian_min_eig_{b}"] = np.full(N, 3e-3)
        rows[f"hessian_min_eig_error_{b}"] = np.full(N, 1e-6)
    rows["zero_loss"] = 6e-3 + rng.normal(size=N) * 1e-4
    rows["zero_loss_expected"] = np.full(N, 6e-3)
    rows["teacher_norm"] = 1 + np.sqrt(2 / d) * rng.normal(size=N)
    return rows


def test_paired_standard_error_against_unpaired():
    rows = _synthetic_rows(40)
    table = summarize_bracket(rows)
    assert set(table) == set(SUMMARY_COLUMNS) and len(table["alpha"]) == 4
    for a in (1.2, 1.3):
        sel = rows["alpha"] == a
        delta = rows["e_semantic"][sel] - rows["e_positional"][sel]
        paired = delta.std(ddof=1) / np.sqrt(sel.sum())
        unpaired = np.hypot(*(rows[f"e_{b}"][sel].std(ddof=1) / np.sqrt(sel.sum()) for b in BRACKET_BRANCHES))
        t = table["alpha"] == a
        np.testing.assert_allclose(table["delta_e"][t], delta.mean(), rtol=1e-12)
        np.testing.assert_allclose(table["delta_e_err"][t], paired, rtol=1e-12)
        np.testing.assert_allclose(table["delta_e_err_unpaired"][t], unpaired, rtol=1e-12)
        # the shared fluctuation (3e-4) cancels in the pairs; the rest (2e-5 per branch) does not
        assert table["delta_e_err"][t][0] < 0.2 * table["delta_e_err_unpaired"][t][0]
        assert table["n_datasets"][t].tolist() == [40, 40]
    # a data set where every restart of one branch diverged is dropped from both branches (keeps the pairing)
    rows["e_semantic"][0] = np.nan
    rows["delta_e"][0] = np.nan
    table = summarize_bracket(rows)
    assert table["n_datasets"][table["alpha"] == 1.2].tolist() == [39, 39]
    np.testing.assert_allclose(table["e_t"][(table["alpha"] == 1.2) & (table["branch"] == "positional")],
                               rows["e_positional"][1:40].mean(), rtol=1e-12)


def test_weighted_fit_in_inverse_d_recovers_a_known_line():
    d = np.asarray([250.0, 500.0, 1000.0, 2000.0, 4000.0])
    a, b = -3e-5, 0.02
    err = np.asarray([4e-5, 3e-5, 2e-5, 1.5e-5, 1e-5])
    exact = fit_inverse_d(d, a + b / d, err)
    assert exact.coef[0] == pytest.approx(a, abs=1e-15) and exact.coef[1] == pytest.approx(b, rel=1e-10)
    assert exact.chi2 < 1e-20 and exact.dof == 3 and exact.scale == 1.0
    # against numpy's weighted polyfit (another implementation) and a Monte Carlo of the errors
    rng = np.random.default_rng(1)
    pulls, scales = [], []
    for _ in range(400):
        y = a + b / d + err * rng.normal(size=d.size)
        fit = fit_inverse_d(d, y, err)
        ref, cov = np.polyfit(1 / d, y, 1, w=1 / err, cov="unscaled")
        np.testing.assert_allclose(fit.coef[::-1], ref, rtol=1e-8, atol=1e-14)
        raw_err = np.sqrt(cov[1, 1])
        np.testing.assert_allclose(fit.errors[0], raw_err * fit.scale, rtol=1e-8)
        pulls.append((fit.coef[0] - a) / raw_err)
        scales.append(fit.scale)
    assert abs(np.mean(pulls)) < 0.15 and 0.88 < np.std(pulls) < 1.12
    assert np.all(np.asarray(scales) >= 1.0)
    # errors understated threefold: chi^2 / dof about 9, the errors inflated by its square root
    y = a + b / d + 3 * err * rng.normal(size=d.size)
    fit = fit_inverse_d(d, y, err)
    _, cov = np.polyfit(1 / d, y, 1, w=1 / err, cov="unscaled")
    assert fit.scale == pytest.approx(np.sqrt(fit.chi2 / fit.dof)) or fit.chi2 / fit.dof <= 1
    np.testing.assert_allclose(fit.errors[0], np.sqrt(cov[1, 1]) * fit.scale, rtol=1e-8)
    with pytest.raises(ValueError, match="d must be > 0"):
        fit_inverse_d([0.0, 1.0], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="degree 1 needs 2 distinct points"):
        weighted_polyfit([1.0, 1.0], [1.0, 2.0], [1.0, 1.0])


def test_crossing_of_a_known_line_and_its_error():
    alphas = np.asarray([1.15, 1.2, 1.25, 1.3, 1.35])
    err = np.full(5, 1e-5)
    c = crossing(alphas, -8e-4 * (alphas - 1.27), err)
    assert c.alpha_c == pytest.approx(1.27, abs=1e-12) and c.bracketed
    rng = np.random.default_rng(2)
    roots = [crossing(alphas, -8e-4 * (alphas - 1.27) + err * rng.normal(size=5), err).alpha_c for _ in range(500)]
    # first-order propagation of the fit's errors against the Monte Carlo spread of the roots
    assert np.std(roots) == pytest.approx(c.alpha_c_err, rel=0.12)
    assert abs(np.mean(roots) - 1.27) < 3 * c.alpha_c_err / np.sqrt(500) + 1e-4


def test_report_extrapolates_per_alpha_and_finds_the_crossing():
    parts = [_synthetic_rows(30, alphas=(1.15, 1.25, 1.35), d=d, seed=k) for k, d in enumerate((250, 500, 1000))]
    rows = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    table, report = bracket_report(rows, estimator="plain")
    assert report["ds"] == [250, 500, 1000] and len(report["extrapolation"]) == 3
    rec = report["extrapolation"][1]
    sel = (table["alpha"] == 1.25) & (table["branch"] == "positional")
    fit = fit_inverse_d(table["d"][sel], table["delta_e"][sel], table["delta_e_err"][sel])
    assert rec["value_at_infinite_d"] == pytest.approx(fit.coef[0]) and rec["dof"] == 1
    assert abs(report["alpha_c"]["alpha_c"] - 1.25) < 4 * report["alpha_c"]["alpha_c_err"]
    json.loads(to_json(report))      # strict JSON throughout (null where a fit is undefined)
    with pytest.raises(ValueError, match="estimator"):
        bracket_report(rows, estimator="best")
