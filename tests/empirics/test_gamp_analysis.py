"""The analysis of GAMP sweeps (`phasejax.empirics.gamp_analysis`) on small hand-made tables with known outcomes."""

import math

import numpy as np
import pytest

from phasejax.empirics.gamp import GAMPSweep
from phasejax.empirics.gamp_analysis import (
    CRITICAL_GRAD,
    SUMMARY_NOTES,
    chattering_statistics,
    gap_statistics,
    hit_counts,
    plot_gamp_sweep,
    power_law_fit,
    tail_gaps,
    run_verdicts,
    se_references,
    summarize_gamp_sweep,
    tail_means,
    tail_window,
    verdict_counts,
)


def test_tail_window_covers_the_last_iterations():
    """Per iterate (entry 0 the init): iterates it - tail + 1 ... it; per iteration: updates it - tail ... it - 1."""
    assert tail_window(30, 20, per_iterate=True) == slice(11, 31)
    assert tail_window(30, 20, per_iterate=False) == slice(10, 30)
    assert tail_window(5, 20, per_iterate=True) == slice(1, 6)       # a short run: every iterate but the init
    assert tail_window(0, 20, per_iterate=False) == slice(0, 1)
    with pytest.raises(ValueError, match="tail"):
        tail_window(5, 0, per_iterate=True)


def test_verdicts_of_hand_made_trajectories():
    """Three runs of T = 40 iterations, tail 10: one whose residual halves per iteration and meets the stopping
    criterion at iteration 27 (converged, instability ~ 2^-22), one that alternates 0.4 / 0.6 for all 40
    iterations (unstable, instability 0.5 exactly), one that blew up at iteration 6 (diverged)."""
    T, tail = 40, 10
    residual = np.full((3, T), np.nan)
    residual[0, :27] = 0.5 ** np.arange(1, 28)
    residual[1] = np.where(np.arange(T) % 2 == 0, 0.4, 0.6)
    residual[2, :6] = [0.3, 0.5, 1.0, 3.0, 10.0, 40.0]
    iterations = np.array([27, 40, 6])
    tails = tail_means(residual, iterations, tail, per_iterate=False)
    assert tails[0] == pytest.approx(np.mean(0.5 ** np.arange(18, 28)))
    assert tails[1] == pytest.approx(0.5, abs=1e-15)
    assert np.all(np.isfinite(tails))            # the NaN after the stop is never in the window
    verdict, instability = run_verdicts(["converged", "max_iterations", "diverged"], [1e-3, 0.2, np.nan], tails)
    assert verdict.tolist() == ["converged", "unstable", "diverged"]
    assert instability[1] == pytest.approx(0.5) and instability[0] < 1e-5
    # a run that did not meet the stopping criterion but ends at a critical point of R is converged too
    verdict, _ = run_verdicts(["max_iterations"], [0.5 * CRITICAL_GRAD], [1e-9])
    assert verdict.tolist() == ["converged"]


def test_tail_means_of_overlaps_skip_the_init():
    q = np.array([[100.0, 1.0, 2.0, 3.0, 4.0, 4.0]])          # init, then 5 iterates (the last one repeated)
    assert tail_means(q, [4], 2, per_iterate=True)[0] == pytest.approx(3.5)
    assert tail_means(q, [4], 10, per_iterate=True)[0] == pytest.approx(2.5)
    with pytest.raises(ValueError, match="history"):
        tail_means(q[0], [4], 2, per_iterate=True)


def test_counts_per_dimension():
    d = np.array([200, 100, 100, 200, 100, 200, 200])
    verdict = np.array(["converged", "unstable", "converged", "diverged", "converged", "converged", "unstable"])
    assert verdict_counts(d, verdict) == {"100": dict(converged=2, unstable=1, diverged=0),
                                          "200": dict(converged=2, unstable=1, diverged=1)}
    assert list(verdict_counts(d, verdict)) == ["100", "200"]                      # sorted by d
    assert hit_counts(d, verdict == "converged") == {"100": [2, 3], "200": [2, 4]}


def test_gap_statistics_of_known_gaps():
    """Tail overlaps 10% and 30% above the SE in q and 10% / 30% below in |theta| (the sign of theta is a
    symmetry): relative RMS gaps 0.1 and 0.3, mean 0.2, standard error 0.1 (s.d. 0.1414 over sqrt 2)."""
    q_se, th_se = 0.1, -0.2
    q_tail = np.array([0.11, 0.13, 0.1])
    th_tail = np.array([0.18, -0.14, -0.2])
    g, dq, d2 = tail_gaps(q_tail, th_tail, q_se, th_se)
    np.testing.assert_allclose(g, [0.1, 0.3, 0.0], atol=1e-14)
    np.testing.assert_allclose(dq, [0.1, 0.3, 0.0], atol=1e-14)
    np.testing.assert_allclose(d2, [-0.1, -0.3, 0.0], atol=1e-14)
    stats = gap_statistics([100, 100, 200], q_tail, th_tail, q_se, th_se)
    assert stats["100"]["mean"] == pytest.approx(0.2) and stats["100"]["stderr"] == pytest.approx(0.1)
    assert stats["100"]["q_rel"] == pytest.approx(0.2) and stats["100"]["second_rel"] == pytest.approx(-0.2)
    assert stats["100"]["runs"] == 2 and stats["200"]["runs"] == 1
    assert np.isnan(stats["200"]["stderr"]) and stats["200"]["mean"] == pytest.approx(0.0, abs=1e-14)


def test_chattering_statistics_mean_and_sd():
    stats = chattering_statistics([100, 100, 200], dict(residual=[0.2, 0.4, 1e-9], flip_fraction=[0.0, 0.1, 0.0]))
    assert stats["100"]["residual"] == pytest.approx([0.3, 0.1])
    assert stats["100"]["flip_fraction"] == pytest.approx([0.05, 0.05])
    assert stats["200"]["residual"] == pytest.approx([1e-9, 0.0])


def test_power_law_fit_recovers_a_known_exponent():
    """An exact power law 0.7 d^-0.5 gives the slope -0.5 with zero error; with lognormal noise (s.d. 0.1 in
    log) the spread of the fitted slopes over 2000 data sets is the least-squares standard error
    `0.1 / sqrt(sum (log d - mean)^2)`, and the reported standard errors average to it times E[sqrt(chi^2_3 / 3)] = 0.921."""
    d = np.array([100.0, 200.0, 400.0, 800.0, 1600.0])
    exact = power_law_fit(d, 0.7 * d**-0.5)
    assert exact["slope"] == pytest.approx(-0.5, abs=1e-12) and exact["stderr"] < 1e-12
    assert np.isnan(power_law_fit(d[:2], d[:2] ** 1.5)["stderr"])
    assert power_law_fit(d[:2], d[:2] ** 1.5)["slope"] == pytest.approx(1.5)
    rng = np.random.default_rng(0)
    fits = [power_law_fit(d, 0.7 * d**-0.5 * np.exp(0.1 * rng.standard_normal(len(d)))) for _ in range(2000)]
    slopes = np.array([f["slope"] for f in fits])
    expected = 0.1 / np.sqrt(np.sum((np.log(d) - np.log(d).mean()) ** 2))
    assert np.mean(slopes) == pytest.approx(-0.5, abs=3 * expected / np.sqrt(len(slopes)))
    assert np.std(slopes) == pytest.approx(expected, rel=0.05)
    # E[stderr] = (sigma / sqrt(Sxx)) E[sqrt(chi^2_nu / nu)], nu = k - 2 = 3 residual degrees of freedom
    nu = len(d) - 2
    bias = np.sqrt(2 / nu) * math.gamma((nu + 1) / 2) / math.gamma(nu / 2)        # 0.921
    assert np.mean([f["stderr"] for f in fits]) == pytest.approx(bias * expected, rel=0.03)
    with pytest.raises(ValueError, match="k >= 2"):
        power_law_fit([100.0], [0.1])


SE = {"params": dict(alpha=2.0, omega=0.3, lam=0.01),
      "positional": dict(q=0.05, m=0.25, theta=0.0, replicon=0.5, replicon_err=0.3, replicon_regular=0.44,
                         replicon_regular_err=0.01, replicon_jump=1e-4, replicon_jump_err=3e-5, rs_stable=False),
      "semantic": dict(q=0.1, m=0.0, theta=0.2, replicon=0.24, replicon_err=2e-4, replicon_regular=0.24,
                       replicon_regular_err=2e-4, replicon_jump=0.0, replicon_jump_err=0.0, rs_stable=True)}


def _synthetic_sweep(gap_exponent=-0.5):
    """Two Onsager forms x two branches x d = 100, 400 x 3 seeds; the tail overlaps sit at a relative gap
    `0.3 (d / 100)^gap_exponent` from the SE (q above it, the second overlap below), every seed alike."""
    rows = []
    for d in (100, 400):
        for onsager in ("pointwise", "stein"):
            for branch in ("positional", "semantic"):
                for seed in range(3):
                    gap = 0.3 * (d / 100) ** gap_exponent
                    ref = SE[branch]
                    converged = branch == "semantic" and seed > 0
                    rows.append(dict(d=d, onsager=onsager, branch=branch, seed=seed,
                                     status="converged" if converged else "max_iterations",
                                     grad_norm=1e-9 if converged else 0.3,
                                     residual_tail=1e-9 if converged else 0.5,
                                     flip_fraction_tail=0.0 if converged else 0.04, flip_share_tail=0.95,
                                     q_tail_mean=ref["q"] * (1 + gap), m_tail_mean=ref["m"] * (1 - gap),
                                     theta_tail_mean=-ref["theta"] * (1 - gap)))
    cols = {k: np.asarray([r[k] for r in rows]) for k in rows[0]}
    T = 6
    hist = {k: np.tile(np.linspace(0.2, 0.1, T + 1), (len(rows), 1)) for k in ("q_hist", "m_hist", "theta_hist")}
    hist.update({k: np.full((len(rows), T), 0.3) for k in ("residual", "flip_fraction", "flip_share")})
    return GAMPSweep(columns=cols, histories=hist, config=dict(alpha=2.0, omega=0.3, lam=0.01)).with_verdicts(SE)


def test_summarize_a_synthetic_sweep():
    summary = summarize_gamp_sweep(_synthetic_sweep(), SE)
    assert set(summary["verdicts"]) == {"pointwise/positional", "pointwise/semantic", "stein/positional",
                                        "stein/semantic"}
    assert summary["verdicts"]["stein/semantic"] == {"100": dict(converged=2, unstable=1, diverged=0),
                                                     "400": dict(converged=2, unstable=1, diverged=0)}
    assert summary["verdicts"]["stein/positional"]["400"] == dict(converged=0, unstable=3, diverged=0)
    assert summary["counts"]["pointwise/semantic"] == {"100": [2, 3], "400": [2, 3]}
    assert summary["critical_points"]["pointwise/positional"] == {"100": [0, 3], "400": [0, 3]}
    for key, gaps in summary["gaps"].items():
        assert gaps["100"]["mean"] == pytest.approx(0.3) and gaps["400"]["mean"] == pytest.approx(0.15)
        assert gaps["100"]["stderr"] == pytest.approx(0.0, abs=1e-12)
        assert summary["exponents"][key]["slope"] == pytest.approx(-0.5)     # two sizes: no error on the slope
        assert np.isnan(summary["exponents"][key]["stderr"])
    assert summary["chattering"]["stein/positional"]["100"]["residual"] == pytest.approx([0.5, 0.0])
    assert summary["replicon"]["positional"]["rs_stable"] is False
    assert summary["replicon"]["semantic"]["replicon"] == 0.24
    assert summary["notes"] == SUMMARY_NOTES


def test_plot_writes_a_png(tmp_path):
    sweep = _synthetic_sweep()
    path = plot_gamp_sweep(sweep, SE, summarize_gamp_sweep(sweep, SE), str(tmp_path / "gamp.png"))
    with open(path, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_se_references_returns_a_cached_reference_for_the_same_parameters(tmp_path):
    """A reference on disk for the same (alpha, omega, lambda), replicons included, is returned as it is."""
    from phasejax.io import atomic_write_json
    from phasejax.theory import make_params

    path = str(tmp_path / "se_reference.json")
    atomic_write_json(path, SE)
    before = open(path).read()
    assert se_references(make_params(2.0, 0.3, lam=0.01), path) == SE
    assert open(path).read() == before
