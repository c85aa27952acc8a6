"""XLA settings of phasejax's own compiled programs (the theory's solves, rows and phase-diagram chunks).

On a CPU, XLA compiles every kernel of a program separately, and the theory's programs hold about a thousand
kernels: their compilation, not their running, is most of a first call. Two options shorten it at the same
results (bit for bit) and the same running time: XLA's older CPU fusion emitter compiles the kernels in about
two thirds of the time of its newer MLIR-based one, and leaving out LLVM's expensive passes takes another 15%
off (a 6-alpha phase-diagram row: compile 21.0 -> 17.8 CPU seconds, its run 11.0 -> 9.2; an optimisation level
of 1 or 0 instead compiles faster still but changes the rounding, and level 0 runs 2.5 times slower). The
theory's programs ask for both (`CPU_COMPILER_OPTIONS`). The options are passed per program (`jax.jit(..., compiler_options=...)`); nothing global changes, and a user's own
programs are compiled with XLA's defaults. Where the installed XLA does not know an option, the programs are
compiled without it (`compiler_options` checks once per backend).
"""

from __future__ import annotations

import functools
from typing import Callable

CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False, "xla_llvm_disable_expensive_passes": True}
"""XLA options for the theory's programs on a CPU (see the module docstring); none on an accelerator."""


@functools.lru_cache(maxsize=None)
def _known(backend: str) -> tuple:
    """The options of `CPU_COMPILER_OPTIONS` that XLA accepts on `backend` (a one-line program is compiled with
    each, once)."""
    if backend != "cpu":
        return ()
    import jax
    import jax.numpy as jnp

    known = []
    for key, value in CPU_COMPILER_OPTIONS.items():
        try:
            jax.jit(lambda x: x + 1, compiler_options={key: value}).lower(jnp.zeros(1)).compile()
        except Exception:  # noqa: BLE001 - an XLA without the option: compile without it
            continue
        known.append((key, value))
    return tuple(known)


def compiler_options(backend: str | None = None) -> dict | None:
    """The XLA options phasejax compiles its theory programs with on `backend` (default: JAX's default backend),
    or `None` for none."""
    import jax

    known = _known(backend or jax.default_backend())
    return dict(known) or None


def _tracing(args, kwargs) -> bool:
    """Whether a call is being traced into another program: an argument is a tracer, or JAX's trace state is not
    the top level's."""
    import jax

    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((args, kwargs))):
        return True
    try:
        from jax._src import core

        return not core.trace_state_clean()
    except (ImportError, AttributeError):   # a JAX without it: the arguments decide
        return False


def jit(fun: Callable, **jit_kwargs) -> Callable:
    """`jax.jit(fun, **jit_kwargs)` with `compiler_options()` of the backend it runs on (decided at the first call
    on each backend). Called inside another traced function (a `jax.jit`, `vmap` or loop body), it is a plain
    `jax.jit` (XLA's options belong to the program being compiled, which is the caller's). The returned function
    also has `lower` (the same arguments)."""
    import jax

    compiled: dict = {}

    def for_backend(args, kwargs):
        key = "traced" if _tracing(args, kwargs) else jax.default_backend()
        if key not in compiled:
            options = None if key == "traced" else compiler_options(key)
            compiled[key] = jax.jit(fun, compiler_options=options, **jit_kwargs)
        return compiled[key]

    @functools.wraps(fun)
    def call(*args, **kwargs):
        return for_backend(args, kwargs)(*args, **kwargs)

    call.lower = lambda *args, **kwargs: for_backend(args, kwargs).lower(*args, **kwargs)
    return call
