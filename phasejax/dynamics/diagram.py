"""The dynamical phase diagram: which mechanism online SGD reaches, against the population minimum
(docs/dynamics.md, section 5).

From a random init the overlaps start at `(m0, e0) = r0 (cos phi, sin phi)` with `r0 ~ 1/sqrt(d)` and a
uniformly random angle `phi`; by the parities of `R` the quadrant `phi in [0, pi/2]` represents every
direction. `ode_phase_diagram` integrates the SGD ODEs from `n_angles` equal arcs of it for every
`(omega, lr, r0)` and returns, per point, the fraction of angles ending in each mechanism (the basin's
measure), the mean escape time and the overlaps reached. `population_minimum` finds the global minimum
of `R` on the disk `m^2 + e^2 <= 1`; `rate_crossing` the `omega` where the plateau's two growth rates are
equal (where, for `d -> inf`, the mechanism SGD reaches switches).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.dynamics.ode import MECHANISMS, classify_mechanism, plateau_rates, random_init_angles, sgd_ode_solve
from phasejax.dynamics.population import PopulationTable, table_terms
from phasejax.solvers import Status


def ode_phase_diagram(table: PopulationTable, omegas, lrs, r0s, *, n_angles: int = 16, t_max: float = 1e4,
                      r_escape: float = 0.2, threshold: float = 0.2, batch_size: int = 8) -> dict[str, np.ndarray]:
    """ODE phase diagram on the grid `omegas x lrs x r0s` (1-d arrays) with `n_angles` init angles per point.

    Returns flat columns (one row per grid point): `omega, lr, r0`, `fraction_<mechanism>` for each of
    `MECHANISMS`, `mechanism` (the majority's name), `escape_time` (mean over angles; `inf` if any stayed on
    the plateau), `escape_time_min`, `escape_time_max`, `m_end`, `e_end` (mean `|m|`, `|e|` at the end),
    `n_converged` (angles whose second leg reached a steady state), `n_outside_table` (angles whose trajectory
    left the table's range and stopped there: `ODEResult.in_table`; 0 for a table with `m_max = 1`).
    """
    omegas, lrs, r0s = (np.atleast_1d(np.asarray(v, np.float64)) for v in (omegas, lrs, r0s))
    phis = jnp.asarray(random_init_angles(int(n_angles)))
    O, LR, R0 = (g.ravel() for g in np.meshgrid(omegas, lrs, r0s, indexing="ij"))

    def point(om, lr, r0):
        res = jax.vmap(lambda p: sgd_ode_solve(table, om, lr, r0 * jnp.cos(p), r0 * jnp.sin(p), t_max=t_max,
                                               r_escape=r_escape, threshold=threshold))(phis)
        frac = jnp.stack([jnp.mean(res.mechanism == k) for k in range(len(MECHANISMS))])
        return dict(fractions=frac, escape_time=jnp.mean(res.escape_time),
                    escape_time_min=jnp.min(res.escape_time), escape_time_max=jnp.max(res.escape_time),
                    m_end=jnp.mean(jnp.abs(res.m)), e_end=jnp.mean(jnp.abs(res.e)),
                    n_converged=jnp.sum(res.status == Status.CONVERGED), n_outside_table=jnp.sum(~res.in_table))

    # lax.map in batches keeps memory bounded (each point vmaps n_angles two-leg diffrax solves)
    out = jax.jit(lambda o, lr, r0: jax.lax.map(lambda x: point(*x), (o, lr, r0), batch_size=batch_size))(
        jnp.asarray(O), jnp.asarray(LR), jnp.asarray(R0))
    out = jax.tree_util.tree_map(np.asarray, out)
    cols = dict(omega=O, lr=LR, r0=R0)
    for k, name in enumerate(MECHANISMS):
        cols[f"fraction_{name}"] = out["fractions"][:, k]
    cols["mechanism"] = np.asarray(MECHANISMS)[np.argmax(out["fractions"], axis=1)]
    for key in ("escape_time", "escape_time_min", "escape_time_max", "m_end", "e_end", "n_converged",
                "n_outside_table"):
        cols[key] = out[key]
    return cols


def population_minimum(table: PopulationTable, omega, n_radial: int = 60, n_angular: int = 91,
                       threshold: float = 0.2) -> dict[str, np.ndarray]:
    """Global minimum of `R(m, e)` on the quarter disk (a polar grid search on the table) for each `omega`.

    Returns `omega, m, e, loss, mechanism` (name), and `loss_semantic` / `loss_positional`: the minima along
    the invariant axes `e = 0` and `m = 0` (the two mechanisms' best losses)."""
    omega = np.atleast_1d(np.asarray(omega, np.float64))
    r = np.linspace(0.0, 1.0, n_radial)
    a = np.linspace(0.0, np.pi / 2, n_angular)
    rr, aa = np.meshgrid(r, a, indexing="ij")
    mm, ee = jnp.asarray((rr * np.cos(aa)).ravel()), jnp.asarray((rr * np.sin(aa)).ravel())

    def one(om):
        loss = jax.vmap(lambda m, e: table_terms(table, m, e, om).loss)(mm, ee)
        i = jnp.argmin(loss)
        sem = jax.vmap(lambda x: table_terms(table, x, 0.0, om).loss)(jnp.asarray(r))
        pos = jax.vmap(lambda x: table_terms(table, 0.0, x, om).loss)(jnp.asarray(r))
        return mm[i], ee[i], loss[i], jnp.min(sem), jnp.min(pos)

    m, e, loss, ls, lp = (np.asarray(v) for v in jax.jit(jax.vmap(one))(jnp.asarray(omega)))
    mech = np.asarray(MECHANISMS)[np.asarray(classify_mechanism(m, e, threshold))]
    return dict(omega=omega, m=m, e=e, loss=loss, mechanism=mech, loss_semantic=ls, loss_positional=lp)


def rate_crossing(table: PopulationTable, lr, lo: float = 0.0, hi: float = 1.0, iterations: int = 60) -> float:
    """The `omega` in `[lo, hi]` where the plateau growth rates of `m` and `e` are equal (bisection on
    `lambda_m - lambda_e`, which decreases with `omega`); NaN if it does not change sign there."""
    def gap(om):
        lm, le = plateau_rates(table, om, lr)
        return float(lm - le)

    g_lo, g_hi = gap(lo), gap(hi)
    if not g_lo * g_hi < 0:
        return float("nan")
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        g = gap(mid)
        if g * g_lo > 0:
            lo, g_lo = mid, g
        else:
            hi = mid
    return 0.5 * (lo + hi)


def axis_losses(params, r_grid, order: int = 16) -> dict[str, np.ndarray]:
    """Population loss along the two invariant axes, by direct quadrature (no table), for every `omega`.

    Returns `r (n,)` and `semantic`, `positional`: coefficients `(3, n)` of `1, omega, omega^2` of `R(r, 0)`
    and `R(0, r)` (the square loss is quadratic in `omega`), including the end points `|m| = 1`, `|e| = 1`.
    """
    from phasejax.dynamics.population import population_loss, quadrature_rule
    from phasejax.precision import float64_scope

    with float64_scope():
        rule = quadrature_rule(params.L, order)
        r = jnp.asarray(np.asarray(r_grid, np.float64))
        out = {}
        for name, along in (("semantic", lambda x: (x, 0.0)), ("positional", lambda x: (0.0, x))):
            def vals(om):
                p = params.replace(omega=om)
                return jax.lax.map(lambda x: population_loss(*along(x), p, rule), r)
            v0, vh, v1 = (np.asarray(jax.jit(vals)(jnp.asarray(om))) for om in (0.0, 0.5, 1.0))
            c2 = 2.0 * (v0 + v1) - 4.0 * vh
            out[name] = np.stack([v0, v1 - v0 - c2, c2])
        out["r"] = np.asarray(r)
    return out


def mechanism_minima(axis: dict, omega) -> dict[str, np.ndarray]:
    """Per `omega`: the best loss of each mechanism along its axis (`loss_semantic`, `loss_positional`),
    where it sits (`m_semantic`, `e_positional`), and the global one's name (`population_minimum`)."""
    omega = np.atleast_1d(np.asarray(omega, np.float64))
    powers = np.stack([np.ones_like(omega), omega, omega**2], 1)       # (W, 3)
    sem = powers @ axis["semantic"]
    pos = powers @ axis["positional"]
    i_s, i_p = np.argmin(sem, 1), np.argmin(pos, 1)
    ls, lp = sem[np.arange(len(omega)), i_s], pos[np.arange(len(omega)), i_p]
    return dict(omega=omega, loss_semantic=ls, loss_positional=lp, m_semantic=axis["r"][i_s],
                e_positional=axis["r"][i_p], population_minimum=np.where(ls <= lp, "semantic", "positional"))


def minimum_switch(axis: dict) -> float:
    """The `omega` where the semantic and positional axis minima have equal loss (bisection); NaN if none."""
    def gap(om):
        mm = mechanism_minima(axis, om)
        return float(mm["loss_semantic"][0] - mm["loss_positional"][0])

    lo, hi = 0.0, 1.0
    g_lo = gap(lo)
    if not g_lo * gap(hi) < 0:
        return float("nan")
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if gap(mid) * g_lo > 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def plateau_curvatures(params, order: int = 20, h: float = 1e-3) -> dict[str, np.ndarray]:
    """Curvatures `R_mm(0, 0)`, `R_ee(0, 0)` and `Gamma(0, 0)` at the uninformative point by direct quadrature
    of `order` nodes per dimension (no table), as coefficients `(3,)` of `1, omega, omega^2` (square loss).

    `R_xx(0, 0) = R_x(h e_x) / h` (the first derivatives vanish at the origin by parity; error `O(h^2)`)."""
    from phasejax.dynamics.population import population_terms, quadrature_rule
    from phasejax.precision import float64_scope

    with float64_scope():
        rule = quadrature_rule(params.L, order)

        def vals(om):
            p = params.replace(omega=om)
            a = population_terms(h, 0.0, p, rule)
            b = population_terms(0.0, h, p, rule)
            return jnp.stack([a.dR_dm / h, b.dR_de / h, population_terms(0.0, 0.0, p, rule).gamma])
        f = jax.jit(vals)
        v0, vh, v1 = (np.asarray(f(jnp.asarray(om))) for om in (0.0, 0.5, 1.0))
    c2 = 2.0 * (v0 + v1) - 4.0 * vh
    c = np.stack([v0, v1 - v0 - c2, c2], 0)   # (3 powers, 3 quantities)
    return dict(R_mm=c[:, 0], R_ee=c[:, 1], gamma=c[:, 2])


def curvature_crossing(curv: dict) -> float:
    """The `omega` in `[0, 1]` where `R_mm(0, 0) = R_ee(0, 0)` (equal plateau growth rates for every `lr`: the
    learning-rate term `-lr^2 Gamma / 2` is the same for both); NaN if none."""
    c = np.asarray(curv["R_mm"]) - np.asarray(curv["R_ee"])
    roots = np.roots(c[::-1]) if abs(c[2]) > 1e-14 else np.asarray([-c[0] / c[1]])
    roots = [float(r.real) for r in np.atleast_1d(roots) if abs(r.imag) < 1e-12 and 0.0 <= r.real <= 1.0]
    return roots[0] if roots else float("nan")
