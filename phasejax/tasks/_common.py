"""Small helpers shared by the sandboxes: integer checks, column tables, strict JSON, and the online-training loop."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from phasejax.progress import tick_batch

Array = jax.Array
F32 = jnp.float32


def concrete(x) -> np.ndarray | None:
    """`x` as a numpy array when it is concrete, `None` when it (or a leaf of it) is a tracer."""
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(x)):
        return None
    return np.asarray(x)


def is_int(value) -> bool:
    """Whether `value` is a Python or numpy integer (not a bool)."""
    return not isinstance(value, bool) and isinstance(value, (int, np.integer))


def check_int(name: str, value, minimum: int = 1) -> int:
    """`int(value)` if it is an integer `>= minimum`, else `ValueError` naming `name`."""
    if not is_int(value) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {name}={value!r}")
    return int(value)


def mean_se(values) -> tuple[float, float]:
    """Mean and standard error of the finite entries of `values` (NaN where there are none, s.e. NaN for one)."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return float("nan"), float("nan")
    return float(v.mean()), (float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan"))


def online_step(loss_fn, sample, optimizer: optax.GradientTransformation, *, has_aux: bool = False):
    """The `lax.scan` body `((params, opt_state), key) -> ((params, opt_state), out)` of online training.

    Each step draws a fresh batch `sample(key) -> tuple` and takes one
    optimiser step on `loss_fn(params, *batch)`; `out` is the loss, or
    `(loss, aux)` with `has_aux`, of the parameters before the update.
    """
    def step(carry, k):
        params, state = carry
        batch = sample(k)
        out, grad = jax.value_and_grad(loss_fn, has_aux=has_aux)(params, *batch)
        updates, state = optimizer.update(grad, state, params)
        return (optax.apply_updates(params, updates), state), out

    return step


def train_online(loss_fn, params0, key: Array, sample, *, steps: int, optimizer: optax.GradientTransformation,
                 has_aux: bool = False) -> tuple[object, object]:
    """`steps` optimiser steps, each on a fresh batch `sample(key_t) -> (tokens, labels)` (`lax.scan`).

    `loss_fn(params, *batch)`; returns `(params, out)` with `out` the
    per-step losses `(steps,)` (or `(losses, aux)` with `has_aux`, see
    `online_step`). Pure; vmap over seeds. Each step reports `1 / steps` of a task to an active sweep's
    progress bar (`phasejax.progress.tick_batch`; nothing is compiled in without one).
    """
    step = online_step(loss_fn, sample, optimizer, has_aux=has_aux)

    def reporting(carry, k):
        tick_batch(1.0 / steps)
        return step(carry, k)

    (params, _), out = jax.lax.scan(reporting, (params0, optimizer.init(params0)), jax.random.split(key, steps))
    return params, out
