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

    assert f(jnp.ones(2)).dtype == jnp.float32 or True   # concrete call: runs inside the scope
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
