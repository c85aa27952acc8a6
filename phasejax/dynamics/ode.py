"""High-dimensional ODEs of online spherical SGD in the overlaps `(m, e)` (docs/dynamics.md, section 3).

One SGD step on a fresh sample, `w <- sqrt(d) (w - lr g) / ||w - lr g||` with `g = grad_w ell`, moves the
overlaps by `O(1/d)`; in time `t = steps / d` and for `d -> inf` at fixed `lr` they follow

    dm/dt = -lr [(1 - m^2) R_m - m e R_e] - lr^2 / 2 * m * Gamma
    de/dt = -lr [(1 - e^2) R_e - m e R_m] - lr^2 / 2 * e * Gamma

(first term: the population gradient projected on the sphere; second: the renormalisation after a step
whose squared length `lr^2 Gamma` is of the same order, `Gamma = sigma^2 E sum_l (d ell / d h_l)^2`).
`R_m`, `R_e`, `Gamma` come from a `PopulationTable`.

`sgd_ode_solve` integrates with diffrax (Tsit5, adaptive steps) in two legs: from the initial overlaps
until they leave the plateau (an event: `sqrt(m^2 + e^2) = r_escape`, located by root finding), then to a
steady state (an event on the drift's size) or `t_max`. Every argument one might sweep (`omega`, `lr`,
`m0`, `e0`) is an array: vmap over them.
"""

from __future__ import annotations

from typing import NamedTuple

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from phasejax.dynamics.population import PopulationTable, in_table_range, spherical_gradient, table_terms
from phasejax.solvers import HasStatus, Status

Array = jax.Array

MECHANISMS = ("none", "positional", "semantic", "mixed")
"""Mechanism labels (index = code): no overlap, positional (`e`), semantic (`m`), both."""


def classify_mechanism(m: Array, e: Array, threshold: float = 0.2) -> Array:
    """Mechanism code (index into `MECHANISMS`) of overlaps `(m, e)`: an overlap counts when `|.| > threshold`."""
    pos = jnp.abs(e) > threshold
    sem = jnp.abs(m) > threshold
    return jnp.where(pos & sem, 3, jnp.where(sem, 2, jnp.where(pos, 1, 0))).astype(jnp.int32)


def sgd_drift(m: Array, e: Array, omega: Array, lr: Array, table: PopulationTable) -> tuple[Array, Array]:
    """Right-hand side `(dm/dt, de/dt)` of the online-SGD ODEs at `(m, e)` (time `t = steps / d`)."""
    terms = table_terms(table, m, e, omega)
    gm, ge = spherical_gradient(m, e, terms.dR_dm, terms.dR_de)
    shrink = 0.5 * lr**2 * terms.gamma
    return -lr * gm - shrink * m, -lr * ge - shrink * e


def gradient_flow_drift(m: Array, e: Array, omega: Array, table: PopulationTable) -> tuple[Array, Array]:
    """Spherical gradient flow of the population loss, `-(P grad R)` (the `lr -> 0` limit per unit `lr t`)."""
    terms = table_terms(table, m, e, omega)
    gm, ge = spherical_gradient(m, e, terms.dR_dm, terms.dR_de)
    return -gm, -ge


def _vector_field(t, y, args):
    table, omega, lr = args
    dm, de = sgd_drift(y[0], y[1], omega, lr, table)
    return jnp.stack([dm, de])


class ODEResult(NamedTuple):
    """Outcome of `sgd_ode_solve` (scalars; batch axes from vmap).

    `escape_time`: first `t` with `sqrt(m^2 + e^2) = r_escape` (`inf` if never before `t_max`); `t_end`,
    `m`, `e`: where the second leg stopped; `residual`: size of the drift there; `mechanism`: code into
    `MECHANISMS`; `iterations`: solver steps of both legs; `in_table`: whether every step stayed in the
    table's range (`in_table_range`; always so for a table with `m_max = 1`); `status`: `Status.CONVERGED`
    at a steady state, `MAX_ITERATIONS` at `t_max` or the step cap, `INVALID_ITERATE` where the trajectory
    left the table's range (it stops there: beyond it the table only extrapolates), `DIVERGED` if
    non-finite."""

    escape_time: Array
    t_end: Array
    m: Array
    e: Array
    loss: Array
    residual: Array
    mechanism: Array
    iterations: Array
    in_table: Array
    status: Array

    status_name = HasStatus.status_name


def _solver_options(rtol, atol):
    return dict(solver=diffrax.Tsit5(), stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
                throw=False)


def sgd_ode_solve(table: PopulationTable, omega, lr, m0, e0, *, t_max: float = 1e4, r_escape: float = 0.2,
                  steady_tol: float = 1e-7, threshold: float = 0.2, rtol: float = 1e-7, atol: float = 1e-10,
                  max_steps: int = 16384) -> ODEResult:
    """Integrate the online-SGD ODEs from `(m0, e0)`: escape time from the plateau and the state reached.

    Leg 1 stops at the escape event `sqrt(m^2 + e^2) = r_escape` (escape time 0 for an init already beyond it;
    located by Newton root finding on the dense output); leg 2 runs from there until the drift's max-norm,
    divided by `lr`, is below `steady_tol` (a steady state: status converged) or until `t_max`. Both legs also
    stop at the end of a step that leaves the table's range (`in_table = False`, status invalid iterate).
    Scalars `omega, lr, m0, e0`; vmap for grids.
    """
    omega, lr, m0, e0 = (jnp.asarray(v, table.coefficients.dtype) for v in (omega, lr, m0, e0))
    args = (table, omega, lr)
    term = diffrax.ODETerm(_vector_field)
    y0 = jnp.stack([m0, e0])

    def escaped(t, y, args, **kw):
        return jnp.sqrt(y[0] ** 2 + y[1] ** 2) - r_escape

    def left_table(t, y, args, **kw):
        return ~in_table_range(table, y[0], y[1])

    # an init already outside the plateau has escape time 0 (leg 1 then only takes a vanishing step)
    started_out = jnp.sqrt(m0**2 + e0**2) >= r_escape
    leg1 = diffrax.diffeqsolve(term, t0=0.0, t1=jnp.where(started_out, 1e-9, t_max), dt0=None, y0=y0, args=args,
                               event=diffrax.Event((escaped, left_table),
                                                   root_finder=optx.Newton(rtol=1e-10, atol=1e-10)),
                               max_steps=max_steps, **_solver_options(rtol, atol))
    t_esc = jnp.where(started_out, 0.0, leg1.ts[-1])
    y_esc = jnp.where(started_out, y0, leg1.ys[-1])
    did_escape = jnp.sqrt(y_esc[0] ** 2 + y_esc[1] ** 2) >= r_escape * (1 - 1e-6)

    def steady(t, y, args, **kw):
        return jnp.max(jnp.abs(_vector_field(t, y, args))) < steady_tol * lr

    leg2 = diffrax.diffeqsolve(term, t0=t_esc, t1=jnp.maximum(t_max, t_esc + 1.0), dt0=None, y0=y_esc, args=args,
                               event=diffrax.Event((steady, left_table)), max_steps=max_steps,
                               **_solver_options(rtol, atol))
    y_end = leg2.ys[-1]
    inside = in_table_range(table, y0[0], y0[1]) & in_table_range(table, y_esc[0], y_esc[1]) \
        & in_table_range(table, y_end[0], y_end[1])
    drift = jnp.max(jnp.abs(_vector_field(0.0, y_end, args))) / lr
    converged = drift < steady_tol * 1.0001
    status = jnp.where(converged, Status.CONVERGED, Status.MAX_ITERATIONS).astype(jnp.int32)
    status = jnp.where(inside, status, jnp.int32(Status.INVALID_ITERATE))
    status = jnp.where(jnp.all(jnp.isfinite(y_end)), status, jnp.int32(Status.DIVERGED))
    return ODEResult(
        escape_time=jnp.where(did_escape, t_esc, jnp.inf),
        t_end=leg2.ts[-1], m=y_end[0], e=y_end[1],
        loss=table_terms(table, y_end[0], y_end[1], omega).loss,
        residual=drift, mechanism=classify_mechanism(y_end[0], y_end[1], threshold),
        iterations=(leg1.stats["num_steps"] + leg2.stats["num_steps"]).astype(jnp.int32), in_table=inside,
        status=status)


def sgd_ode_trajectory(table: PopulationTable, omega, lr, m0, e0, ts: Array, *, rtol: float = 1e-7,
                       atol: float = 1e-10, max_steps: int = 16384) -> tuple[Array, Array]:
    """`(m(ts), e(ts))`, each `(len(ts),)`, of the online-SGD ODEs from `(m0, e0)` at `t = 0`."""
    omega, lr, m0, e0 = (jnp.asarray(v, table.coefficients.dtype) for v in (omega, lr, m0, e0))
    ts = jnp.asarray(ts, table.coefficients.dtype)
    sol = diffrax.diffeqsolve(diffrax.ODETerm(_vector_field), t0=0.0, t1=ts[-1], dt0=None,
                              y0=jnp.stack([m0, e0]), args=(table, omega, lr), saveat=diffrax.SaveAt(ts=ts),
                              max_steps=max_steps, **_solver_options(rtol, atol))
    return sol.ys[:, 0], sol.ys[:, 1]


def plateau_rates(table: PopulationTable, omega, lr) -> tuple[Array, Array]:
    """Linear growth rates `(lambda_m, lambda_e)` of `m` and `e` at the uninformative point `(0, 0)`:
    `lambda = -lr * d^2R/dx^2 (0, 0) - lr^2 Gamma(0, 0) / 2`, from the curvatures the table stores
    (`PopulationTable.plateau`, exact to its quadrature rule; the ODE's own linearisation interpolates the
    table and differs from them by its interpolation error, `O(grid step^2)`)."""
    if table.plateau is None:
        raise ValueError("table.plateau is missing: build the table with build_population_table")
    c = table.plateau[0] + omega * table.plateau[1] + omega**2 * table.plateau[2]
    shrink = 0.5 * lr**2 * c[2]
    return -lr * c[0] - shrink, -lr * c[1] - shrink


def escape_time_estimate(rate: Array, r0: Array, r_escape: float = 0.2) -> Array:
    """Linear-growth escape time `log(r_escape / r0) / rate` from overlap size `r0` (`inf` if `rate <= 0`)."""
    return jnp.where(rate > 0, jnp.log(r_escape / r0) / jnp.where(rate > 0, rate, 1.0), jnp.inf)


def random_init_angles(n: int) -> np.ndarray:
    """`n` angles, midpoints of equal arcs of `[0, pi/2]`: the quadrant of `(m0, e0) = r0 (cos, sin)` that, by
    the parities of `R`, represents every direction of a random init."""
    return (np.arange(n) + 0.5) * (np.pi / 2) / n
