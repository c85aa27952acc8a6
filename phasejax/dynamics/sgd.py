"""Finite-`d` online SGD of the single-direction attention student (docs/dynamics.md, section 4).

Each step draws a fresh sequence `x (L, d)` with rows `N(0, sigma^2 I_d / d)`, takes an `optax.sgd` step
on the per-sample loss of `phasejax.dynamics.population.sample_loss` and projects the weights back onto the
sphere `||w||^2 = d` (spherical SGD, as in the published experiments). By rotation invariance the teacher
is `w* = sqrt(d) e_1` and the positional direction `u = e_2`, so the overlaps are read off two coordinates:
`m = w_1 / sqrt(d)`, `e = w_2 / sqrt(d)`.

`online_sgd` is pure and jittable; `omega`, `lr`, the seed and the initial overlaps are arrays (vmap over
them); `d`, the number of steps and the recording interval are static.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from phasejax.dynamics.population import DynamicsParams, sample_loss

Array = jax.Array


class SGDRun(NamedTuple):
    """Overlaps recorded every `record_every` steps (the first entry is the initial state): `t (T,)` in units
    of `steps / d`, `m (T,)`, `e (T,)`, and the per-sample loss averaged over each recording interval."""

    t: Array
    m: Array
    e: Array
    loss: Array


NORM_SLACK = 1e-6
"""Rounding allowance of the init check `m0^2 + e0^2 <= 1 + NORM_SLACK` (e.g. `(0.6, 0.8)` in float32)."""


def check_initial_overlaps(m0, e0) -> None:
    """`ValueError` naming `m0, e0` unless, where concrete, both are NaN (a random init) or both finite with
    `m0^2 + e0^2 <= 1` (up to `NORM_SLACK`): overlaps of a student on the sphere. Traced values pass."""
    if isinstance(m0, jax.core.Tracer) or isinstance(e0, jax.core.Tracer):
        return
    m, e = np.asarray(m0, np.float64), np.asarray(e0, np.float64)
    nan_m, nan_e = np.isnan(m), np.isnan(e)
    if np.any(nan_m != nan_e):
        raise ValueError(f"m0 and e0 must both be NaN (a random init) or both be numbers, got m0={m0!r}, e0={e0!r}")
    r2 = np.where(nan_m, 0.0, m**2 + e**2)
    if np.any(~np.isfinite(r2)) or np.any(r2 > 1.0 + NORM_SLACK):
        raise ValueError(f"m0, e0 must be overlaps of a unit vector, m0**2 + e0**2 <= 1, got m0={m0!r}, e0={e0!r} "
                         f"(m0**2 + e0**2 = {np.max(r2):.6g})")


def initial_weights(key: Array, d: int, m0, e0, dtype=jnp.float32) -> Array:
    """A student on the sphere `||w||^2 = d` with overlaps `(m0, e0)` and a uniformly random remainder.

    `m0 = e0 = NaN` (the default of `online_sgd`) means a uniformly random direction (overlaps of order
    `1/sqrt(d)`). Concrete overlaps off the unit disk raise `ValueError` naming `m0, e0`
    (`check_initial_overlaps`); traced ones give NaN weights (and NaN overlaps downstream)."""
    check_initial_overlaps(m0, e0)
    v = jax.random.normal(key, (d,), dtype)
    rest = v.at[:2].set(0.0)
    rest = rest / jnp.linalg.norm(rest)
    m0 = jnp.asarray(m0, dtype)
    e0 = jnp.asarray(e0, dtype)
    r2 = m0**2 + e0**2
    # only the rounding allowance is clipped; beyond it the (traced) init is invalid: NaN
    remainder = jnp.where(r2 <= 1.0 + NORM_SLACK, jnp.sqrt(jnp.clip(1.0 - r2, 0.0)), jnp.nan)
    given = jnp.sqrt(d) * (remainder * rest + m0 * jnp.eye(d, dtype=dtype)[0] + e0 * jnp.eye(d, dtype=dtype)[1])
    random = jnp.sqrt(d) * v / jnp.linalg.norm(v)
    return jnp.where(jnp.isnan(m0) & jnp.isnan(e0), random, given)


def online_sgd(params: DynamicsParams, key: Array, lr, *, d: int, n_steps: int, record_every: int,
               m0=jnp.nan, e0=jnp.nan, dtype=jnp.float32) -> SGDRun:
    """Online spherical SGD for `n_steps` steps at dimension `d`; overlaps every `record_every` steps.

    `params.omega` and `lr` may be traced (vmap over them and over `key`, `m0`, `e0`). `n_steps` must be a
    multiple of `record_every`. Raises `ValueError` for non-positive sizes and for concrete `m0, e0` off the
    unit disk (`check_initial_overlaps`).
    """
    for name, v in (("d", d), ("n_steps", n_steps), ("record_every", record_every)):
        if int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if d < 3:
        raise ValueError(f"d must be at least 3, got {d}")
    if n_steps % record_every:
        raise ValueError(f"n_steps ({n_steps}) must be a multiple of record_every ({record_every})")
    check_initial_overlaps(m0, e0)
    L = params.L
    k_init, k_data = jax.random.split(key)
    w = initial_weights(k_init, d, m0, e0, dtype)
    sqrt_d = jnp.sqrt(jnp.asarray(d, dtype))
    wstar = jnp.zeros((d,), dtype).at[0].set(sqrt_d)
    pos = jnp.zeros((L, d), dtype).at[:, 1].set(jnp.asarray(params.signs, dtype) / sqrt_d)
    opt = optax.sgd(lr)
    opt_state = opt.init(w)

    def loss_fn(w, x):
        hstar = x @ wstar
        h = (x + pos) @ w
        return sample_loss(hstar, h, params)

    def step(carry, k):
        w, opt_state = carry
        x = jnp.asarray(params.sigma, dtype) * jax.random.normal(k, (L, d), dtype) / sqrt_d
        ell, g = jax.value_and_grad(loss_fn)(w, x)
        upd, opt_state = opt.update(g, opt_state, w)
        w = optax.apply_updates(w, upd)
        w = w * (sqrt_d / jnp.linalg.norm(w))
        return (w, opt_state), ell

    def block(carry, k):
        carry, ells = jax.lax.scan(step, carry, jax.random.split(k, record_every))
        w = carry[0]
        return carry, (w[0] / sqrt_d, w[1] / sqrt_d, jnp.mean(ells))

    n_rec = n_steps // record_every
    _, (m, e, ell) = jax.lax.scan(block, (w, opt_state), jax.random.split(k_data, n_rec))
    t = jnp.arange(n_rec + 1) * (record_every / d)
    return SGDRun(t=t, m=jnp.concatenate([w[:1] / sqrt_d, m]), e=jnp.concatenate([w[1:2] / sqrt_d, e]),
                  loss=jnp.concatenate([jnp.full((1,), jnp.nan, ell.dtype), ell]))
