"""Two-replica experiments: overlaps modulo the model's symmetry, Lanczos against dense eigendecompositions, a
convex problem where the two replicas must meet, the sweep's table and summary, and the analysis of a pair table
(the distribution of q12 / q, its slope on the initial overlap, the Hessian verdicts)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.empirics import generate_data, sample_count
from phasejax.empirics.data import run_keys
from phasejax.empirics.replicas import (
    DISTRIBUTION_KEYS,
    MEET_TOLERANCE,
    PAIR_COLUMNS,
    REPLICA_BRANCHES,
    SUMMARY_KEYS,
    ReplicaGrid,
    hessian_min_eig,
    hessian_verdict,
    initial_overlap_slope,
    lanczos_min_eig,
    mutual_overlaps,
    overlap_distribution,
    overlap_ratio,
    replica_init,
    replica_sweep,
    summarize_pairs,
    summarize_points,
)
from phasejax.solvers import Status
from phasejax.sweep import RunOptions
from phasejax.theory import make_params
from phasejax.theory.gram import gram_inputs, gram_risk


def test_mutual_overlaps_identity_sign_and_rotation():
    Q = jax.random.normal(jax.random.PRNGKey(0), (400, 1))
    ov = mutual_overlaps(Q, -Q, 0.5)
    assert np.isclose(ov["q12"], ov["q1"], rtol=1e-6) and np.isclose(ov["q1"], 0.25 * np.sum(Q**2) / 400)
    assert abs(float(ov["distance"])) < 1e-6
    # rank 2: a rotation of the columns is the same student
    Q2 = jax.random.normal(jax.random.PRNGKey(1), (400, 2))
    c, s = np.cos(0.7), np.sin(0.7)
    ov2 = mutual_overlaps(Q2, Q2 @ jnp.asarray([[c, -s], [s, c]]))
    assert np.isclose(ov2["q12"], ov2["q1"], rtol=1e-5) and float(ov2["distance"]) < 1e-4


def test_independent_students_have_small_mutual_overlap():
    d = 20000
    k1, k2 = jax.random.split(jax.random.PRNGKey(2))
    ov = mutual_overlaps(jax.random.normal(k1, (d, 1)), jax.random.normal(k2, (d, 1)))
    assert abs(float(ov["q12"])) < 4 / np.sqrt(d)   # |N(0, 1/d)|, 4 standard deviations
    assert np.isclose(float(ov["q1"]), 1.0, atol=4 * np.sqrt(2 / d))


def test_replica_init_stays_in_branch_and_starts_apart():
    params = make_params(1.0, 0.3)
    data = generate_data(run_keys(0)["data"], params, d=2000, n=4)
    for code in (0, 1):
        Q0 = jnp.stack([replica_init(code, jax.random.PRNGKey(k), data.u, data.Qstar, 1) for k in (1, 2)])
        ov = mutual_overlaps(Q0[0], Q0[1])
        # half the squared norm along the branch direction: q12 / q = 1/2 up to O(d^-1/2)
        assert abs(float(ov["q12"] / (0.5 * (ov["q1"] + ov["q2"]))) - 0.5) < 0.05
        direction = data.u[0] if code == 0 else data.Qstar[:, 0] / jnp.linalg.norm(data.Qstar[:, 0])
        cos = jnp.abs(Q0[:, :, 0] @ direction) / jnp.linalg.norm(Q0[:, :, 0], axis=1)
        assert np.all(np.abs(np.asarray(cos) - 1 / np.sqrt(2)) < 0.05)


def test_lanczos_on_a_known_spectrum():
    with float64_scope():
        eigs = jnp.concatenate([jnp.asarray([-0.3, 0.01]), jnp.linspace(0.5, 5.0, 298)])
        U, _ = jnp.linalg.qr(jax.random.normal(jax.random.PRNGKey(3), (300, 300)))
        A = (U * eigs) @ U.T
        res = lanczos_min_eig(lambda v: A @ v, jnp.ones(300), steps=40)
        assert int(res.status) == Status.CONVERGED
        assert abs(float(res.value) + 0.3) <= max(float(res.residual), 1e-10)
        assert float(res.residual) < 1e-6
        # a Krylov space that closes early (rank-one start in a 2-d invariant subspace) still gives the minimum
        small = jnp.diag(jnp.asarray([2.0, 1.0, -1.0]))
        res3 = lanczos_min_eig(lambda v: small @ v, jnp.asarray([1.0, 0.0, 0.0]), steps=3)
        assert np.isclose(float(res3.value), -1.0, atol=1e-10)


def test_hessian_min_eig_against_dense_eigendecomposition():
    with float64_scope():
        params = make_params(1.5, 0.3, lam=0.01)
        d = 40
        n = sample_count(1.5, d)
        data = generate_data(run_keys(4)["data"], params, d, n, dtype=jnp.float64)
        inputs = gram_inputs(data.x, data.y, data.p)
        Q = 0.5 * data.u.T + 0.3 * jax.random.normal(jax.random.PRNGKey(5), (d, 1), jnp.float64)

        def risk(Q):
            return gram_risk(Q, inputs, params)

        dense = np.linalg.eigvalsh(np.asarray(jax.hessian(risk)(Q)).reshape(d, d))
        res = jax.jit(lambda Q: hessian_min_eig(risk, Q, jax.random.PRNGKey(6), steps=30))(Q)
        err = max(float(res.residual), 1e-9)
        assert abs(float(res.value) - dense[0]) <= err
        assert err < 1e-3 * (dense[-1] - dense[0])


def _linear_student(h, params):
    """An attention map linear in the fields: `f = S(h) xt` is linear in `Q`, so the ridge risk is convex."""
    L = h.shape[0]
    return jnp.eye(L) + 0.5 * h[:, :1] * jnp.ones((1, L))


def test_replicas_meet_on_a_convex_problem_and_the_sweep_table():
    # f linear in Q plus a ridge: a strictly convex risk with one minimiser, whatever the inits
    params = make_params(1.0, 0.3, student=_linear_student)
    grid = ReplicaGrid(alphas=(1.5,), lams=(0.01,), seeds=(0, 1, 2), d=200)
    pairs = replica_sweep(grid, params, long_steps=5, lanczos_steps=30,
                          options=RunOptions(progress=False, chunk_size=6))
    assert set(PAIR_COLUMNS) <= set(pairs) and all(len(pairs[k]) == 6 for k in PAIR_COLUMNS)
    assert pairs["branch"].tolist() == [0, 0, 0, 1, 1, 1]
    assert np.all(pairs["converged"]) and np.all(pairs["init_q12_over_q"] < 0.7)
    np.testing.assert_allclose(pairs["distance"], pairs["q1"] + pairs["q2"] - 2 * pairs["q12"], atol=1e-6)
    # stopped at RMS gradient <= 1e-6 with every Hessian eigenvalue >= lam: |Q1 - Q2| / sqrt(d) <= 2e-6 / lam
    # = 2e-4 per entry, so sigma_1^2 |Q1 - Q2|^2 / d <= 1e-8, against q ~ 1e-2
    assert np.all(pairs["distance"] < 1e-7) and np.all(1 - pairs["q12_over_q"] < 1e-5)
    assert np.all(np.abs(pairs["train_loss_1"] - pairs["train_loss_2"]) < 1e-6)
    # both branches' inits reach the same (the only) minimum: same q for a seed
    np.testing.assert_allclose(pairs["q"][:3], pairs["q"][3:], rtol=1e-4)
    # convexity: the smallest Hessian eigenvalue is at least the ridge (to its Lanczos error)
    assert np.all(pairs["hessian_min_eig"] >= 0.01 - pairs["hessian_min_eig_error"] - 1e-4)
    assert np.all(pairs["long_run_drift"] < 1e-7) and np.all(1 - pairs["long_run_q12_over_q"] < 1e-5)
    s = summarize_pairs(pairs)
    assert s["n_pairs"].tolist() == [3, 3] and s["branch"].tolist() == [0, 1]
    assert all(k in s and k + "_err" in s for k in SUMMARY_KEYS)
    # the convex problem's one minimiser is neither branch's solution (classify_solution), so no pair counts
    # as staying in its branch and every mean is over no pair: NaN (the averaging itself is checked on a
    # constructed table in test_undefined_overlap_ratios_are_dropped_and_counted)
    assert not np.any(pairs["same_branch"]), pairs["solution_1"]
    assert s["n_same_branch"].tolist() == [0, 0] and s["n_dropped"].tolist() == [0, 0]
    assert np.all(np.isnan(s["q"])) and np.all(np.isnan(s["q12_over_q_err"]))


def test_overlap_distribution_quantiles_and_meeting_fraction():
    rng = np.random.default_rng(0)
    # pairs apart: q12 / q = 1 - 0.2 U, U uniform, whose p-quantile is 1 - 0.2 (1 - p); pairs that meet: 1 up to
    # float32 rounding of the ratio
    n_apart, n_meet = 40000, 10000
    apart = 1.0 - 0.2 * rng.uniform(size=n_apart)
    met = 1.0 + rng.uniform(-1.2e-7, 1.2e-7, size=n_meet)
    ratios = rng.permutation(np.concatenate([apart, met]))
    out = overlap_distribution(ratios, quantiles=(0.1, 0.25, 0.5, 0.75))
    assert set(out) == {"n", "q12_over_q_min", "q12_over_q_p10", "q12_over_q_p25", "q12_over_q_p50",
                        "q12_over_q_p75", "q12_over_q_max", "n_meet", "meet_fraction", "apart_median"}
    assert out["n"] == n_apart + n_meet and out["n_meet"] == n_meet
    assert out["meet_fraction"] == pytest.approx(n_meet / (n_apart + n_meet))
    # the mixture's p-quantile, for p below the apart mass w: 1 - 0.2 (1 - p / w); DKW bound (failure 1e-6) on
    # the empirical distribution function, in units of the ratio: 0.2 / w * eps
    w = n_apart / (n_apart + n_meet)
    eps = np.sqrt(np.log(2 / 1e-6) / (2 * (n_apart + n_meet)))
    for p in (0.1, 0.25, 0.5, 0.75):
        assert abs(out[f"q12_over_q_p{round(100 * p):02d}"] - (1 - 0.2 * (1 - p / w))) < 0.2 / w * eps
    assert abs(out["apart_median"] - 0.9) < 0.2 * np.sqrt(np.log(2 / 1e-6) / (2 * n_apart))
    assert out["q12_over_q_min"] == ratios.min() and out["q12_over_q_max"] == ratios.max()
    # a small table: with 101 distinct values the k/100-quantile is the k-th order statistic
    small = rng.permutation(np.linspace(0.7, 0.95, 101))
    got = overlap_distribution(small, quantiles=(0.1, 0.25, 0.5, 0.9))
    for k in (10, 25, 50, 90):
        assert got[f"q12_over_q_p{k:02d}"] == pytest.approx(np.sort(small)[k], abs=1e-15)
    assert got["n_meet"] == 0 and got["apart_median"] == pytest.approx(np.sort(small)[50], abs=1e-15)
    # every pair meets: no apart median; no pair: NaNs and zero counts
    assert np.isnan(overlap_distribution(np.ones(5))["apart_median"])
    empty = overlap_distribution(np.zeros(0))
    assert empty["n"] == 0 and empty["n_meet"] == 0 and np.isnan(empty["q12_over_q_p50"])
    assert set(empty) == {"n", *DISTRIBUTION_KEYS}
    # the meeting threshold: just inside and just outside 1 - MEET_TOLERANCE
    edge = overlap_distribution([1 - 0.5 * MEET_TOLERANCE, 1 - 2 * MEET_TOLERANCE])
    assert edge["n_meet"] == 1


@pytest.mark.parametrize("kwargs,name", [(dict(ratios=[0.9, np.nan]), "ratios"), (dict(ratios=[[0.9]]), "ratios"),
                                         (dict(ratios=[0.9], meet_tol=0.0), "meet_tol"),
                                         (dict(ratios=[0.9], quantiles=(0.5, 1.5)), "quantiles")])
def test_overlap_distribution_validation(kwargs, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        overlap_distribution(**kwargs)


def test_initial_overlap_slope_recovers_a_known_slope_within_sizes():
    rng = np.random.default_rng(1)
    # three sizes with their own means (intercepts) and init ranges that move with the size: a regression with
    # one intercept would mix the sizes' means into the slope, the within-size one must not
    slope, noise = 0.6, 0.02
    d = np.repeat([250, 1000, 4000], 700)
    init = 0.5 + 0.3 * np.log(d / 1000) / np.log(16) + rng.normal(0, 0.03, d.size)
    intercept = {250: 0.2, 1000: 0.5, 4000: 0.05}
    final = np.asarray([intercept[k] for k in d]) + slope * init + rng.normal(0, noise, d.size)
    fit = initial_overlap_slope(init, final, strata=d)
    assert fit["n"] == d.size and fit["dof"] == d.size - 4
    # the standard error is the OLS one, noise / sqrt(S_xx) with S_xx the within-size spread of init
    sxx = sum(np.sum((init[d == k] - init[d == k].mean()) ** 2) for k in intercept)
    assert fit["slope_err"] == pytest.approx(noise / np.sqrt(sxx), rel=0.1)
    assert abs(fit["slope"] - slope) < 4 * fit["slope_err"]
    pooled = initial_overlap_slope(init, final)
    assert abs(pooled["slope"] - slope) > 10 * pooled["slope_err"]
    # no noise: the slope exactly, a zero error; a final overlap that ignores the init: slope within its error of 0
    exact = initial_overlap_slope(init, 0.3 + slope * init, strata=d)
    assert exact["slope"] == pytest.approx(slope, rel=1e-12) and exact["slope_err"] < 1e-12
    flat = initial_overlap_slope(init, rng.normal(0.9, noise, d.size), strata=d)
    assert abs(flat["slope"]) < 4 * flat["slope_err"]
    # an init that does not vary inside a size: no slope
    assert np.isnan(initial_overlap_slope([0.5, 0.5, 0.4, 0.4], [0.9, 0.8, 0.7, 0.6], strata=[1, 1, 2, 2])["slope"])
    with pytest.raises(ValueError, match=r"\bstrata\b"):
        initial_overlap_slope([0.5, 0.4, 0.3], [0.9, 0.8, 0.7], strata=[1, 2])
    with pytest.raises(ValueError, match=r"\binit\b"):
        initial_overlap_slope([0.5, 0.4], [0.9, 0.8, 0.7])


def test_hessian_verdict_thresholds():
    err = np.full(7, 1e-4)
    eig = np.asarray([2.01e-4, 1.99e-4, 0.0, -1.99e-4, -2.01e-4, np.nan, 5e-2])
    assert hessian_verdict(eig, err).tolist() == ["minimum", "undecided", "undecided", "undecided", "saddle",
                                                  "undecided", "minimum"]
    # the margin is in units of the error bound: one error bound at n_sigma = 1
    assert hessian_verdict(1.5e-4, 1e-4, n_sigma=1.0).tolist() == "minimum"
    assert hessian_verdict(-1.5e-4, 1e-4, n_sigma=1.0).tolist() == "saddle"
    # a negative Ritz value inside its error is undecided, not a minimum nor a saddle
    assert hessian_verdict(-4.8e-5, 1.1e-4).tolist() == "undecided"
    # an exact eigenvalue (zero error) decides by its sign
    assert hessian_verdict([1e-9, -1e-9, 0.0], 0.0).tolist() == ["minimum", "saddle", "undecided"]
    with pytest.raises(ValueError, match=r"\bn_sigma\b"):
        hessian_verdict(1.0, 0.1, n_sigma=0.0)
    with pytest.raises(ValueError, match=r"\berror\b"):
        hessian_verdict(1.0, -0.1)


@pytest.mark.parametrize("bad,name", [(dict(alphas=()), "alphas"), (dict(alphas=(1.0,), lams=(-0.1,)), "lams"),
                                      (dict(alphas=(1.0,), branches=("random",)), "branches"),
                                      (dict(alphas=(1.0,), seeds=(1.5,)), "seeds"),
                                      (dict(alphas=(1.0,), omega=1.5), "omega"), (dict(alphas=(1.0,), d=0), "d")])
def test_grid_validation(bad, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        ReplicaGrid(**bad)


def _synthetic_pairs(q, q12, long_ratio):
    """A pair table of one group (alpha 1.5, positional, d 100) with the given overlaps; every pair in branch."""
    q, q12 = np.asarray(q, float), np.asarray(q12, float)
    n = len(q)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.asarray(overlap_ratio(jnp.asarray(q12), jnp.asarray(q)))
    pairs = {k: np.zeros(n) for k in PAIR_COLUMNS}
    pairs.update(alpha=np.full(n, 1.5), omega=np.full(n, 0.3), lam=np.full(n, 0.01), branch=np.zeros(n, int),
                 d=np.full(n, 100), seed=np.arange(n), q=q, q12=q12, q12_over_q=ratio,
                 train_loss_1=np.arange(n, dtype=float), train_loss_2=np.arange(n, dtype=float),
                 long_run_q12_over_q=np.asarray(long_ratio, float), converged=np.ones(n, bool),
                 same_branch=np.ones(n, bool), distance=q - q12)
    return pairs


def test_undefined_overlap_ratios_are_dropped_and_counted(tmp_path, capsys):
    # q = 0 (both replicas at Q = 0) and a diverged replica (q = inf, q12 = nan): q12 / q is undefined
    assert np.isnan(float(overlap_ratio(0.0, 0.0))) and np.isnan(float(overlap_ratio(jnp.nan, jnp.inf)))
    assert float(overlap_ratio(0.3, 0.4)) == pytest.approx(0.75)
    pairs = _synthetic_pairs([0.4, 0.5, 0.0, np.inf, 0.2, 0.3], [0.36, 0.5, 0.0, np.nan, 0.1, 0.3],
                             [0.9, np.nan, 1.0, 1.0, 0.5, 1.0])
    pairs["same_branch"][5] = False                           # left its branch: in no average, not "dropped"
    s = summarize_pairs(pairs)
    assert s["n_pairs"].tolist() == [6] and s["n_same_branch"].tolist() == [5]
    assert s["n_dropped"].tolist() == [2] and s["n_dropped_long_run"].tolist() == [1]
    kept = np.asarray([0.9, 1.0, 0.5])                       # q12 / q of the three defined pairs
    assert s["q12_over_q"][0] == pytest.approx(kept.mean())
    assert s["q12_over_q_err"][0] == pytest.approx(kept.std(ddof=1) / np.sqrt(3))
    assert s["q"][0] == pytest.approx(np.mean([0.4, 0.5, 0.2])) and s["train_loss"][0] == pytest.approx(
        np.mean([0, 1, 4]))
    assert s["long_run_q12_over_q"][0] == pytest.approx(np.mean([0.9, 0.5]))   # pair 2 has no continuation ratio
    # the command reports the counts: printed and in summary.json
    from phasejax.commands.replicas import summarize

    summarize(pairs, str(tmp_path), se=None, meta={})
    printed = capsys.readouterr().out
    assert "dropped 2 with q12 / q undefined" in printed and "1 more" in printed
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["n_pairs_dropped"] == 2 and summary["n_pairs_dropped_long_run"] == 1
    assert summary["n_pairs_averaged"] == 3 and summary["groups"]["n_dropped"] == [2]


def test_summaries_of_a_pair_table(tmp_path):
    rng = np.random.default_rng(2)
    # one point (alpha 1.5, positional) at two sizes: 6 pairs each, 2 of them meeting at d = 100; one pair left
    # its branch (in no statistic)
    ratio = np.asarray([1.0, 1.0, 0.93, 0.95, 0.91, 0.97, 0.88, 0.90, 0.92, 0.94, 0.96, 0.99])
    pairs = _synthetic_pairs(0.05 * np.ones(12), 0.05 * ratio, ratio)
    pairs["d"] = np.repeat([100, 400], 6)
    pairs["init_q12_over_q"] = rng.uniform(0.4, 0.6, 12)
    pairs["same_branch"][11] = False
    pairs["hessian_min_eig"] = np.asarray([1e-3, 2e-3, -5e-4, 2e-5, 1e-3, 1e-3, 1e-3, 1.1e-3, 9e-4, 1.2e-3, 1e-3, -1.0])
    pairs["hessian_min_eig_error"] = np.full(12, 1e-4)
    ratio = np.asarray(pairs["q12_over_q"], float)          # as the table holds it (float32 q12 / q)
    s = summarize_pairs(pairs)
    assert s["d"].tolist() == [100, 400] and s["n"].tolist() == [6, 5] and s["n_meet"].tolist() == [2, 0]
    for row, kept in ((0, np.arange(6)), (1, np.arange(6, 11))):
        want = overlap_distribution(ratio[kept])
        assert all(s[k][row] == pytest.approx(want[k], nan_ok=True) for k in DISTRIBUTION_KEYS)
        fit = initial_overlap_slope(pairs["init_q12_over_q"][kept], ratio[kept])
        assert s["init_slope"][row] == pytest.approx(fit["slope"])
    # minimum: eig > 2e-4; saddle: eig < -2e-4; else undecided (the pair outside its branch is not counted)
    assert s["n_minimum"].tolist() == [4, 5] and s["n_saddle"].tolist() == [1, 0]
    assert s["n_undecided"].tolist() == [1, 0]
    pts = summarize_points(pairs)
    assert pts["n"].tolist() == [11] and pts["n_meet"].tolist() == [2] and pts["n_saddle"].tolist() == [1]
    kept = np.arange(11)
    fit = initial_overlap_slope(pairs["init_q12_over_q"][kept], ratio[kept], strata=pairs["d"][kept])
    assert pts["init_slope"][0] == pytest.approx(fit["slope"]) and pts["init_slope_err"][0] == pytest.approx(
        fit["slope_err"])
    apart = kept[ratio[kept] < 1]
    fit_apart = initial_overlap_slope(pairs["init_q12_over_q"][apart], ratio[apart], strata=pairs["d"][apart])
    assert pts["init_slope_apart"][0] == pytest.approx(fit_apart["slope"])
    # the command: strict JSON (null, never NaN), the pairs that are not a minimum listed, both figures
    from phasejax.commands.replicas import FIGURES, summarize

    summarize(pairs, str(tmp_path), se=None, meta={})

    def refuse(token):
        raise AssertionError(f"summary.json holds {token}")

    summary = json.loads((tmp_path / "summary.json").read_text(), parse_constant=refuse)
    assert [p["verdict"] for p in summary["hessian_not_minimum"]] == ["saddle", "undecided"]
    assert summary["n_pairs_minimum"] == 9 and summary["n_pairs_saddle"] == 1 and summary["n_pairs_undecided"] == 1
    point = summary["points"][0]
    assert point["init_slope"] == pytest.approx(fit["slope"])
    for law in ("1_over_d", "1_over_sqrt_d"):
        assert point[f"hessian_min_eig_fit_{law}"]["error_scale"] >= 1.0
        assert "chi2_per_dof" in point[f"hessian_min_eig_fit_{law}"]
    assert all((tmp_path / f).stat().st_size > 0 for f in FIGURES)


@pytest.mark.slow
def test_replicas_command_and_replot(run_cli, tmp_path):
    out = str(tmp_path / "rep")
    code, stdout, err = run_cli(["replicas", "--ds", "80", "120", "--seeds", "3", "--alphas", "1.5", "--lams", "0.01",
                                 "--long-steps", "10", "--lanczos-steps", "10", "--no-se", "--no-progress",
                                 "--out", out])
    assert code == 0, err
    from phasejax.commands.replicas import read_pairs

    pairs = read_pairs(f"{out}/two_replicas.csv")
    assert len(pairs["alpha"]) == 12 and sorted(set(pairs["d"].tolist())) == [80, 120]
    assert pairs["status_1"].dtype.kind == "i" and pairs["branch"].tolist()[:3] == [0, 0, 0]
    code, _, err = run_cli(["replicas", "--replot", "--no-se", "--out", out])
    assert code == 0, err
    from phasejax.commands.replicas import FIGURES

    assert all((tmp_path / "rep" / f).exists() for f in FIGURES) and (tmp_path / "rep" / "summary.json").exists()
