"""`phasejax.xla`: the theory's programs compile with their XLA options, a user's do not, and an option the
installed XLA does not know is left out; a stored lowered program is found again by its key and gives the
traced program's results bit for bit."""

import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

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


# ----------------------------------------------------------------------------------------------------------
# Lowered programs kept beside the persistent compilation cache
# ----------------------------------------------------------------------------------------------------------

class _Point(NamedTuple):
    x: jax.Array
    scale: jax.Array


@struct.dataclass
class _Summary:
    values: jax.Array
    total: jax.Array
    n_terms: int = struct.field(pytree_node=False, default=0)


def _program(point, rule, power):
    v = rule(point.x) ** power * point.scale
    return _Summary(values=v, total=jnp.sum(jnp.cumsum(v)), n_terms=int(point.x.shape[0])), v[::-1]


_stored = xla.jit(_program, static_argnames=("rule", "power"), store=True)


@pytest.fixture
def store(tmp_path, monkeypatch):
    folder = str(tmp_path / "programs")
    monkeypatch.setattr(xla, "store_folder", lambda: folder)
    monkeypatch.setattr(xla, "_LOADED", {})
    return folder


def _entries(folder):
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def _same(a, b):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for u, v in zip(la, lb):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def test_a_stored_program_is_kept_and_loaded_again_with_the_same_results(store, monkeypatch):
    point = _Point(jnp.linspace(0.1, 2.0, 7), jnp.asarray(1.5))
    plain = jax.jit(_program, static_argnames=("rule", "power"))(point, jnp.sin, 3)
    _same(_stored(point, jnp.sin, 3), plain)
    assert [e.rsplit(".", 1)[1] for e in _entries(store)] == ["bin", "json"]
    # a later process: nothing traced, the program comes from the folder
    monkeypatch.setattr(xla, "_LOADED", {})
    monkeypatch.setattr(jax.export, "export", lambda *a, **k: pytest.fail("traced again"))
    _same(_stored(point, jnp.sin, 3), plain)
    _same(_stored(_Point(point.x + 1.0, jnp.asarray(-2.0)), jnp.sin, 3),
          jax.jit(_program, static_argnames=("rule", "power"))(_Point(point.x + 1.0, jnp.asarray(-2.0)), jnp.sin, 3))


def test_every_part_of_the_key_makes_another_program(store):
    point = _Point(jnp.linspace(0.1, 2.0, 7), jnp.asarray(1.5))
    _stored(point, jnp.sin, 3)
    _stored(point, jnp.cos, 3)                                   # another static function
    _stored(point, jnp.sin, 2)                                   # another static value
    _stored(_Point(jnp.linspace(0.1, 2.0, 5), jnp.asarray(1.5)), jnp.sin, 3)     # another shape
    _stored(_Point(jnp.linspace(0.1, 2.0, 7, dtype=jnp.int32), jnp.asarray(1.5)), jnp.sin, 3)   # another dtype
    assert len(_entries(store)) == 2 * 5


def test_what_has_no_stable_key_runs_as_jax_jit(store):
    point = _Point(jnp.linspace(0.1, 2.0, 7), jnp.asarray(1.5))
    rule = lambda x: x + 1.0  # noqa: E731 - a lambda has no name another process could find
    _same(_stored(point, rule, 2), jax.jit(_program, static_argnames=("rule", "power"))(point, rule, 2))
    assert _entries(store) == []


def test_a_damaged_entry_is_made_again(store, monkeypatch):
    point = _Point(jnp.linspace(0.1, 2.0, 7), jnp.asarray(1.5))
    first = _stored(point, jnp.sin, 3)
    (program,) = [e for e in _entries(store) if e.endswith(".bin")]
    with open(os.path.join(store, program), "wb") as fh:
        fh.write(b"not a program")
    monkeypatch.setattr(xla, "_LOADED", {})
    _same(_stored(point, jnp.sin, 3), first)
    with open(os.path.join(store, program), "rb") as fh:
        assert fh.read() != b"not a program"


def test_the_store_lives_in_a_local_compilation_cache_folder():
    assert xla.store_folder("") is None
    assert xla.store_folder("gs://bucket/cache") is None
    assert xla.store_folder("/some/cache") == os.path.join("/some/cache", xla.STORE_FOLDER)
