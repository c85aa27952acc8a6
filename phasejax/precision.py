"""Floating-point precision without global side effects.

phasejax never changes `jax_enable_x64` for the process. The theory needs
float64 (branch comparisons resolve `|Delta e_t| ~ 1e-6`), so its entry
points run inside `float64_scope()` (JAX's scoped `enable_x64`) and return
float64 arrays; the user's own models keep their precision. Arithmetic on
those arrays *outside* a float64 scope follows JAX's rules (it computes in
float32); convert with `numpy.asarray` to keep float64.

Called under a transformation (`jax.jit`, `jax.vmap`, `jax.grad`) traced
without float64, a theory entry point cannot switch precision for the
surrounding trace and raises a `ValueError` that says how to enable it:
wrap the transformed call in `with phasejax.float64_scope():` (or
`jax.enable_x64(True)`), or set `JAX_ENABLE_X64=1` for the whole program.

The closed-form functions of the theory (`phasejax.theory.test_error`, `training_loss`) compute in their inputs'
dtype (a float32 training sweep evaluates the theory's test error at its students' overlaps); the iterative
ones either run in float64 (the solvers) or warn with a `PrecisionWarning` when asked for a tolerance their
inputs' type cannot reach (`phasejax.theory.prox.moreau_minimizer` on float32 starts: `reachable_tol`).

Empirics and tasks take a `dtype` argument instead (float32 is the right
choice on accelerators); `dtype_scope(dtype)` enables float64 only when a
64-bit dtype is asked for, and computes float32 matrix products at full
precision (`MATMUL_PRECISION`: no TF32 on GPUs).
"""

from __future__ import annotations

import contextlib
import functools

import jax
import numpy as np


def x64_enabled() -> bool:
    """Whether float64 is enabled in the current (possibly scoped) configuration."""
    return bool(jax.config.jax_enable_x64)


@contextlib.contextmanager
def float64_scope():
    """Context manager: float64 enabled inside, the previous setting restored on exit."""
    if hasattr(jax, "enable_x64"):  # jax >= 0.7: a scoped config state
        with jax.enable_x64(True):
            yield
    else:  # pragma: no cover - older jax
        from jax.experimental import enable_x64

        with enable_x64():
            yield


MATMUL_PRECISION = "highest"
"""Matrix products inside `dtype_scope`: full float32 precision. JAX's default leans to speed (TF32 tensor cores on
recent NVIDIA GPUs, bfloat16 passes on TPUs: about 3 significant digits), which stalls a float32 L-BFGS run above
a gradient tolerance of `1e-6` and biases overlaps and Hessian eigenvalues; on a CPU the setting changes nothing."""


@contextlib.contextmanager
def dtype_scope(dtype, matmul_precision: str | None = MATMUL_PRECISION):
    """The numerics of an experiment in `dtype`: float64 enabled for a 64-bit `dtype` (`float64_scope`), and float32
    matrix products at `matmul_precision` (`jax.default_matmul_precision`; default full precision,
    `MATMUL_PRECISION`; `None` keeps JAX's default). Both restored on exit."""
    with contextlib.ExitStack() as stack:
        if np.dtype(dtype).itemsize == 8:
            stack.enter_context(float64_scope())
        if matmul_precision is not None:
            stack.enter_context(jax.default_matmul_precision(matmul_precision))
        yield


def check_float_dtype(dtype, name: str = "dtype") -> np.dtype:
    """`np.dtype(dtype)` if it is float32 or float64, else `ValueError` naming `name`."""
    if dtype is None:
        raise ValueError(f"{name} must be float32 or float64, got None")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"{name} must be float32 or float64, got {dtype!r}") from None
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"{name} must be float32 or float64, got {dt}")
    return dt


_TRACED_HINT = (
    "{name} computes in float64, but it was called inside a JAX transformation (jit, vmap, grad, ...) traced "
    "without float64. Wrap the transformed call in `with phasejax.float64_scope():` (or "
    "`with jax.enable_x64(True):`), or set JAX_ENABLE_X64=1 for the whole program."
)


def _is_tracer(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def uses_float64(fn):
    """Decorator for theory entry points: run `fn` in `float64_scope()`.

    If float64 is already enabled (globally or by an enclosing scope) `fn`
    runs as is. If not, and an argument is a JAX tracer (the call is inside a
    transformation traced in float32), raise a `ValueError` explaining how to
    enable float64 instead of silently computing in float32.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if x64_enabled():
            return fn(*args, **kwargs)
        if any(_is_tracer(leaf) for leaf in jax.tree_util.tree_leaves((args, kwargs))):
            raise ValueError(_TRACED_HINT.format(name=getattr(fn, "__qualname__", "this function")))
        with float64_scope():
            return fn(*args, **kwargs)

    return wrapper


class PrecisionWarning(UserWarning):
    """A computation asked for a tolerance its floating-point type cannot reach (float32 with a float64-sized
    tolerance): its convergence flags would be meaningless."""


def reachable_tol(tol: float, dtype, name: str = "tol", *, factor: float = 10.0) -> None:
    """Warn (`PrecisionWarning`) when `tol` is below `factor` times the machine epsilon of `dtype`, so that a
    solver run in float32 with a tolerance meant for float64 does not silently report (or miss) convergence.
    Called at trace time: `dtype` is static under `jax.jit`."""
    eps = float(np.finfo(np.dtype(dtype)).eps)
    if float(tol) < factor * eps:
        import warnings

        warnings.warn(f"{name} = {float(tol):.3g} is below what {np.dtype(dtype)} resolves (machine epsilon "
                      f"{eps:.3g}): compute inside `phasejax.float64_scope()` with float64 inputs, or pass "
                      f"{name} >= {factor * eps:.1g}", PrecisionWarning, stacklevel=3)
