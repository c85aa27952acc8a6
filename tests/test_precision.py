"""Precision without global side effects: importing phasejax leaves jax_enable_x64 alone; the theory is float64."""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import phasejax
from phasejax.precision import check_float_dtype, dtype_scope, float64_scope, uses_float64


def test_import_leaves_the_global_setting_and_theory_returns_float64():
    code = textwrap.dedent("""
        import jax
        before = bool(jax.config.jax_enable_x64)
        import phasejax, phasejax.theory, phasejax.phase, phasejax.empirics, phasejax.tasks
        from phasejax.theory import make_params, linear_baseline_error
        p = make_params(1.0, 0.3)
        e = linear_baseline_error(p)
        assert bool(jax.config.jax_enable_x64) == before, "import changed jax_enable_x64"
        assert p.alpha.dtype == jax.numpy.float64 and e.dtype == jax.numpy.float64, (p.alpha.dtype, e.dtype)
        assert jax.numpy.ones(2).dtype == jax.numpy.float32     # the user's own arrays stay float32
        print("OK", before)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "OK False" in out.stdout


def test_scope_is_restored_and_nested_calls_work():
    assert not jax.config.jax_enable_x64
    with float64_scope():
        assert jax.config.jax_enable_x64
        with float64_scope():
            assert jnp.ones(1).dtype == jnp.float64
        assert jax.config.jax_enable_x64
    assert not jax.config.jax_enable_x64
    with dtype_scope(np.float32):
        assert not jax.config.jax_enable_x64
    with dtype_scope(np.float64):
        assert jax.config.jax_enable_x64


def test_dtype_scope_asks_for_full_precision_matmuls_and_restores_the_default():
    before = jax.config.jax_default_matmul_precision
    with dtype_scope(np.float32):
        assert jax.config.jax_default_matmul_precision == "highest"
        x = jnp.full((64, 64), 1.0001, jnp.float32)
        assert float((x @ jnp.ones((64, 1), jnp.float32))[0, 0]) == pytest.approx(64 * 1.0001, rel=1e-6)
    with dtype_scope(np.float32, matmul_precision=None):
        assert jax.config.jax_default_matmul_precision == before
    assert jax.config.jax_default_matmul_precision == before and not jax.config.jax_enable_x64


def test_traced_call_without_float64_explains_how_to_enable_it():
    @uses_float64
    def f(x):
        return x * 2

    assert f(np.ones(2)).dtype == jnp.float64     # a concrete call runs inside the scope: numpy's float64 is kept
    with pytest.raises(ValueError, match="float64_scope"):
        jax.jit(f)(jnp.ones(2))
    with float64_scope():
        assert jax.jit(f)(jnp.ones(2, jnp.float64)).dtype == jnp.float64


@pytest.mark.parametrize("bad", ["int32", "float16", "banana", None])
def test_dtype_checks_name_the_parameter(bad):
    with pytest.raises(ValueError, match="dtype"):
        check_float_dtype(bad)


def test_float64_scope_is_exported():
    assert phasejax.float64_scope is float64_scope


def test_a_float32_prox_with_a_float64_tolerance_warns_and_a_reachable_one_does_not():
    """The prox outside the float64 scope: float32 starts with the default tolerance (1e-13, below float32's
    resolution) warn; a tolerance float32 resolves, or float64 starts inside the scope, do not; the minimiser
    is the closed form's either way (a quadratic's minimum, to float32's precision)."""
    import warnings

    from phasejax.precision import PrecisionWarning
    from phasejax.theory.prox import moreau_minimizer

    target = np.array([0.3, -1.2])
    objective = lambda h, _: 0.5 * jnp.sum((h - target) ** 2) + 0.25 * jnp.sum(h ** 4)  # noqa: E731
    starts = jnp.zeros((2, 2), jnp.float32)
    with pytest.warns(PrecisionWarning, match="float64_scope"):
        h32 = moreau_minimizer(objective, (), starts, n_steps=40)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        moreau_minimizer(objective, (), starts, n_steps=40, tol=1e-5)
        with float64_scope():
            h64 = moreau_minimizer(objective, (), jnp.zeros((2, 2), jnp.float64), n_steps=40)[0]
    assert h32.dtype == jnp.float32 and h64.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(h64) + np.asarray(h64) ** 3, target, rtol=1e-12)     # stationarity
    np.testing.assert_allclose(np.asarray(h32), np.asarray(h64), rtol=1e-5)
