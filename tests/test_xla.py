"""`phasejax.xla`: the theory's programs compile with their XLA options, a user's do not, and an option the
installed XLA does not know is left out."""

import jax
import jax.numpy as jnp
import numpy as np

from phasejax import xla


def test_the_cpu_options_are_known_and_a_call_gives_what_jax_jit_gives():
    options = xla.compiler_options("cpu")
    assert options is not None and set(options) <= set(xla.CPU_COMPILER_OPTIONS)
    assert xla.compiler_options("gpu") is None              # nothing asked of an accelerator

    def f(x):
        return jnp.sin(x) @ jnp.cos(x).T + jnp.exp(-x).sum()

    x = jnp.linspace(0.0, 1.0, 12).reshape(3, 4)
    fast = xla.jit(f)
    np.testing.assert_array_equal(np.asarray(fast(x)), np.asarray(jax.jit(f)(x)))
    assert "fusion" in fast.lower(x).compile().as_text()


def test_inside_another_program_it_is_a_plain_jit():
    inner = xla.jit(lambda x: 2.0 * x)
    outer = jax.jit(lambda x: inner(x) + 1.0)          # the options belong to the outer program: no error
    np.testing.assert_array_equal(np.asarray(outer(jnp.arange(3.0))), [1.0, 3.0, 5.0])
    np.testing.assert_array_equal(np.asarray(jax.vmap(inner)(jnp.arange(3.0))), [0.0, 2.0, 4.0])


def test_an_option_xla_does_not_know_is_left_out(monkeypatch):
    monkeypatch.setattr(xla, "CPU_COMPILER_OPTIONS", {"xla_no_such_option_anywhere": True,
                                                      **xla.CPU_COMPILER_OPTIONS})
    xla._known.cache_clear()
    try:
        options = xla.compiler_options("cpu")
        assert options is not None and "xla_no_such_option_anywhere" not in options
    finally:
        xla._known.cache_clear()
