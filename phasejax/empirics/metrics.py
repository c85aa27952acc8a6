"""Metrics of a trained student: overlaps, fresh-sample test error and the test error its overlaps predict.

`test_error_from_overlaps` is theory notes section 5 evaluated at a student's
finite-`d` overlaps `(q0, m, theta0)` and the teacher's actual norm
`rho0 = Q*^T Q* / d`: for fresh tokens the fields `h = (x + p) Q / sqrt(d)` and
`h* = x Q* / sqrt(d)` are exactly jointly Gaussian with those second moments,
so the estimator is exact up to the `O(1/d)` concentration of `x_l . x_k / d`
(and needs no test set).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.empirics.data import cast_params, teacher_norm
from phasejax.precision import check_float_dtype, float64_scope
from phasejax.theory.fields import Overlaps
from phasejax.theory.params import TiedAttentionParams
from phasejax.theory.quadrature import Quadrature, gauss_hermite
from phasejax.theory.updates import test_error

Array = jax.Array


def quadrature_in(quadrature: Quadrature, dtype) -> Quadrature:
    """`quadrature` with points and weights in `dtype` (concrete rules only; rounded once, in numpy)."""
    dtype = check_float_dtype(dtype)
    return Quadrature(points=jnp.asarray(np.asarray(quadrature.points), dtype),
                      weights=jnp.asarray(np.asarray(quadrature.weights), dtype))


@functools.lru_cache(maxsize=32)
def _gauss_hermite_numpy(dim: int, order: int) -> tuple[np.ndarray, np.ndarray]:
    with float64_scope(), jax.ensure_compile_time_eval():
        rule = gauss_hermite(dim, order)
        return np.asarray(rule.points), np.asarray(rule.weights)


def _gauss_hermite_in(dim: int, order: int, dtype=jnp.float32) -> Quadrature:
    """`phasejax.theory.gauss_hermite(dim, order)` built in float64 and returned in `dtype`: a compile-time
    constant, safe inside `jit`/`vmap` traced in float32."""
    points, weights = _gauss_hermite_numpy(int(dim), int(order))
    dtype = check_float_dtype(dtype)
    return Quadrature(points=jnp.asarray(points, dtype), weights=jnp.asarray(weights, dtype))


def test_error_from_overlaps(q0: Array, m: Array, theta0: Array, params: TiedAttentionParams,
                             quadrature: Quadrature, rho0: Array | None = None) -> Array:
    """`eps_g` of a student with overlaps `q0 (r, r)`, `m (K, r)`, `theta0 (t, r)` (theory notes, section 5).

    Computes in the dtype of `q0` (float32 overlaps give a float32 error; the
    parameters, the rule and `rho0` are cast to it), so it can be traced
    inside a float32 training sweep. `rho0 (t, t)` is the teacher's
    `Q*^T Q* / d` (default `I_t`, the `d -> inf` value); see
    `phasejax.theory.updates.test_error`.
    """
    q0 = jnp.asarray(q0)
    dtype = q0.dtype if jnp.issubdtype(q0.dtype, jnp.floating) else jnp.float32
    params = cast_params(params, dtype)
    quadrature = jax.tree_util.tree_map(lambda a: jnp.asarray(a).astype(dtype), quadrature)
    ov = Overlaps(q0=q0.astype(dtype), m=jnp.asarray(m).astype(dtype), V0=jnp.eye(params.r, dtype=dtype),
                  theta0=jnp.asarray(theta0).astype(dtype))
    rho0 = None if rho0 is None else jnp.asarray(rho0).astype(dtype)
    return test_error(ov, params, quadrature, rho0)


test_error_from_overlaps.__test__ = False  # not a pytest test


def fresh_test_error(model_fn, x: Array, y: Array, p: Array) -> Array:
    """`1/(d L n) sum ||y - f(x)||^2` over a fresh test set `x, y (n, L, d)` (theory notes, section 1)."""
    pred = model_fn(x, p)
    return jnp.mean((y - pred) ** 2)


SOLUTIONS = ("positional", "semantic", "neither")


def classify_solution(cos_m: Array, cos_theta: Array, threshold: float = 0.5) -> Array:
    """Kind of a trained student from its direction cosines; codes index `SOLUTIONS`.

    `cos_m = |u_1 . Q| / ||Q||` (alignment with the positional direction) and
    `cos_theta = |Q* . Q| / (||Q*|| ||Q||)` (alignment with the teacher), for
    `r = t = K = 1`. Positional (0) if `cos_m` exceeds `threshold` and
    `cos_theta`, semantic (1) in the mirror case, neither (2) otherwise. At the
    SE fixed points of the paper's setting `cos_m ~ 0.6` (positional) and
    `cos_theta ~ 0.94` (semantic), the other cosine `O(d^-1/2)`.
    """
    positional = (cos_m > threshold) & (cos_m > cos_theta)
    semantic = (cos_theta > threshold) & (cos_theta >= cos_m)
    return jnp.where(positional, 0, jnp.where(semantic, 1, 2))


def teacher_norms(seeds, d: int, t: int = 1) -> np.ndarray:
    """`teacher_norm(seed, d, t)` for each of `seeds (S,)` (one vmapped call), as a float64 numpy array `(S,)`."""
    seeds = jnp.asarray(np.asarray(seeds, np.int64).ravel(), jnp.int32)
    return np.asarray(jax.vmap(lambda s: teacher_norm(s, int(d), int(t)))(seeds), float)


def teacher_adjusted_mean(values, rho) -> tuple[float, float]:
    """Mean over seeds of a run metric with the teacher's norm as control variate, and its standard error.

    `values (S,)`: one value per seed (a data set each); `rho (S,)`: that seed's `tr(Q*^T Q*) / (d t)`
    (`teacher_norm`), whose expectation is exactly 1. Overlaps scale with the teacher's norm (at `alpha = 2`,
    `d = 1000`, 32 seeds, `rho` explains about 75% of the seed-to-seed variance of `q` and 85% of `theta`'s),
    so this estimate of `E[value]` is 2-3 times tighter than the plain mean at the same cost. It fits
    `value = a + b (rho - 1) + noise` by least squares (`scipy.stats.linregress`) and returns `a`, the fitted
    value at the mean `E[rho] = 1`, with its standard error `s sqrt(1/S + mean(rho - 1)^2 / S_rr)` (the
    intercept's). Unbiased whatever the true relation when `b` is known; with `b` fitted, the bias is
    `O(1/S)`. Needs `S >= 3` seeds and `rho` not all equal, else `ValueError`.
    """
    from scipy import stats

    y = np.asarray(values, float).ravel()
    r = np.asarray(rho, float).ravel()
    if y.shape != r.shape:
        raise ValueError(f"values and rho must have one entry per seed, got shapes {y.shape} and {r.shape}")
    if y.size < 3:
        raise ValueError(f"values needs at least 3 seeds for a fitted control variate, got {y.size}")
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(r))):
        raise ValueError("values and rho must be finite")
    if np.ptp(r) == 0:
        raise ValueError("rho must not be constant across seeds")
    fit = stats.linregress(r - 1.0, y)
    return float(fit.intercept), float(fit.intercept_stderr)


ZERO_OVERLAP_TOL = 5e-3
"""Below this magnitude a theory value of the overlaps `m` or `theta` counts as zero (e.g. `m` on the semantic
branch) and has no relative gap (`has_relative_scale`)."""


def has_relative_scale(key: str, theory) -> np.ndarray:
    """Whether the theory values of column `key` can divide a relative gap: finite and non-zero, and for the
    overlaps `m`, `theta` (zero in the limit on the other branch) above `ZERO_OVERLAP_TOL` in magnitude. Shape
    of `theory`, bool."""
    th = np.asarray(theory, float)
    return np.isfinite(th) & (np.abs(th) > (ZERO_OVERLAP_TOL if key in ("m", "theta") else 0.0))


MIN_ADJUSTED_SEEDS = 5
"""Fewest distinct seeds for which the tables report a teacher-adjusted mean (`adjusted_seed_mean`): the
fit leaves `S - 2` degrees of freedom for its standard error, 3 at the minimum."""


def adjusted_seed_mean(values, seeds, d: int, *, t: int = 1,
                       min_seeds: int = MIN_ADJUSTED_SEEDS) -> tuple[float, float]:
    """`teacher_adjusted_mean` of one group of runs, for result tables: `(mean, standard error)` or NaNs.

    `values (R,)` and `seeds (R,)`: the group's runs; runs of one seed (one data set, e.g. two inits that
    reach the same minimum) are averaged first. Returns `(nan, nan)` when fewer than `min_seeds` distinct
    seeds remain or a value is not finite, instead of raising, so a table can hold every group. `d`, `t`:
    the runs' size and teacher rank (`teacher_norms`).
    """
    values = np.asarray(values, float).ravel()
    seeds = np.asarray(seeds).ravel()
    if values.shape != seeds.shape:
        raise ValueError(f"values and seeds must have one entry per run, got shapes {values.shape} and "
                         f"{seeds.shape}")
    unique = np.unique(seeds)
    if unique.size < min_seeds or not np.all(np.isfinite(values)):
        return float("nan"), float("nan")
    per_seed = np.asarray([values[seeds == s].mean() for s in unique])
    return teacher_adjusted_mean(per_seed, teacher_norms(unique, d, t))
