"""The teacher-norm control variate for seed means (`phasejax.empirics.metrics.teacher_adjusted_mean`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax.empirics import generate_data
from phasejax.empirics.data import run_keys, teacher_norm
from phasejax.empirics.metrics import adjusted_seed_mean, teacher_adjusted_mean, teacher_norms
from phasejax.theory import make_params


@pytest.mark.parametrize("t", [1, pytest.param(2, marks=pytest.mark.slow)])   # t = 2: 7 s more of eager draws
def test_teacher_norm_is_the_norm_of_the_generated_teacher(t):
    """The teacher alone, redrawn from the seed, is the one `generate_data` builds for that seed (any alpha, n)."""
    params = make_params(1.0, 0.3, t=t)
    d = 24
    for seed in (0, 3):
        data = generate_data(run_keys(seed)["data"], params, d, 5)
        np.testing.assert_allclose(teacher_norm(seed, d, t), jnp.sum(data.Qstar**2) / (d * t), rtol=1e-6)
    swept = jax.vmap(lambda s: teacher_norm(s, d, t))(jnp.arange(4))
    np.testing.assert_allclose(swept, [teacher_norm(s, d, t) for s in range(4)], rtol=1e-6)
    # the numpy helper the tables use (int64 seeds in, one vmapped call) draws the same teachers
    seeds = np.array([0, 3, 11], np.int64)
    direct = [float(jnp.sum(generate_data(run_keys(int(s))["data"], params, d, 2).Qstar ** 2)) / (d * t) for s in seeds]
    np.testing.assert_allclose(teacher_norms(seeds, d, t), direct, rtol=1e-6)


def test_teacher_norm_has_mean_one_and_variance_two_over_d():
    """`rho = |Q*|^2 / d` of a standard Gaussian teacher: mean 1, variance 2/d (chi-square with d degrees)."""
    d = 50
    rho = np.asarray(jax.vmap(lambda s: teacher_norm(s, d))(jnp.arange(4000)), float)
    assert abs(rho.mean() - 1.0) < 4 * np.sqrt(2 / d / rho.size)
    assert rho.var(ddof=1) == pytest.approx(2 / d, rel=0.1)


def test_an_exact_linear_relation_is_recovered_exactly():
    rho = np.array([0.93, 1.02, 1.10, 0.97, 1.05])
    y = 0.3 + 0.7 * (rho - 1.0)
    a, err = teacher_adjusted_mean(y, rho)
    assert a == pytest.approx(0.3, abs=1e-12) and err < 1e-8
    assert abs(y.mean() - 0.3) > 1e-3   # the plain mean carries the draw of rho


def test_estimate_is_unbiased_and_its_standard_error_is_calibrated():
    """Many synthetic experiments of 16 seeds, `y = 2 + 3 (rho - 1) + noise`, `rho ~ 1 + sqrt(2/d) N(0, 1)`:
    the estimates average to 2, their spread equals the reported standard error (mean of its square), and
    it is smaller than the plain mean's by the factor `sqrt(1 - r^2)` that the correlation allows."""
    rng = np.random.default_rng(0)
    reps, S, d, noise = 3000, 16, 200, 0.05
    rho = 1 + np.sqrt(2 / d) * rng.standard_normal((reps, S))
    y = 2.0 + 3.0 * (rho - 1) + noise * rng.standard_normal((reps, S))
    est = np.array([teacher_adjusted_mean(y[i], rho[i]) for i in range(reps)])
    a, err = est[:, 0], est[:, 1]
    assert abs(a.mean() - 2.0) < 4 * a.std() / np.sqrt(reps)
    assert a.var() == pytest.approx(np.mean(err**2), rel=0.1)
    plain = y.mean(axis=1)
    slope_var = 9 * 2 / d
    assert a.var() / plain.var() == pytest.approx(noise**2 / (noise**2 + slope_var), rel=0.25)


def test_bad_inputs_raise_value_errors_naming_them():
    with pytest.raises(ValueError, match="at least 3 seeds"):
        teacher_adjusted_mean([1.0, 2.0], [0.9, 1.1])
    with pytest.raises(ValueError, match="one entry per seed"):
        teacher_adjusted_mean([1.0, 2.0, 3.0], [0.9, 1.1])
    with pytest.raises(ValueError, match="rho must not be constant"):
        teacher_adjusted_mean([1.0, 2.0, 3.0], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="finite"):
        teacher_adjusted_mean([1.0, np.nan, 3.0], [0.9, 1.0, 1.1])
    with pytest.raises(ValueError, match="d must be"):
        teacher_norm(0, 0)


def test_adjusted_seed_mean_averages_a_seeds_runs_and_reports_nan_when_it_cannot_fit():
    """Table helper: runs of one seed count once (two inits on one data set), too few seeds or a NaN run
    give NaN instead of an error, and mismatched inputs raise."""
    d = 40
    seeds = np.arange(6)
    rho = teacher_norms(seeds, d)
    values = 0.2 * rho
    a, e = adjusted_seed_mean(values, seeds, d)
    assert a == pytest.approx(0.2, rel=1e-6) and e < 1e-7
    # seed 0 twice, its two runs 0.1 apart around its exact value: averaged first, the fit is unchanged
    dup_values = np.concatenate([values, [values[0] + 0.05]])
    dup_values[0] -= 0.05
    a2, _ = adjusted_seed_mean(dup_values, np.concatenate([seeds, [0]]), d)
    assert a2 == pytest.approx(0.2, rel=1e-6)
    assert np.isnan(adjusted_seed_mean(values[:4], seeds[:4], d)).all()          # 4 < MIN_ADJUSTED_SEEDS
    assert not np.isnan(adjusted_seed_mean(values[:4], seeds[:4], d, min_seeds=3)).any()
    with_nan = values.copy()
    with_nan[2] = np.nan
    assert np.isnan(adjusted_seed_mean(with_nan, seeds, d)).all()
    with pytest.raises(ValueError, match="one entry per run"):
        adjusted_seed_mean(values, seeds[:3], d)

