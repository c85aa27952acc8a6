"""Rank-2 tied student learning a rank-1 teacher (issue 12 item 3; paper appendix E.3, Fig. 11).

Theory: the state evolution of docs/theory.md sections 2-4 with `r = 2, t = 1`
(`q0, V0 (2, 2)`, `m (1, 2)`, `theta0 (1, 2)`), solved from the paper's three
initialisations of the two columns of `Q`:

* `"positional"`: both columns positional (`theta0` held at 0, its invariant subspace);
* `"semantic"`: both columns semantic (`m` held at 0 in the token-swap-symmetric problem);
* `"mixed"`: one column of each (`m` and `theta0` free).

**Gauge.** The tied student depends on `Q` only through `Q Q^T`, so the SE is
invariant under `Q -> Q R` (`R` orthogonal 2 x 2):
`(q0, m, V0, theta0) -> (R^T q0 R, m R, R^T V0 R, theta0 R)` (`rotate_overlaps`).
Fixed points form orbits, `I - J` is singular along them, and an unfixed Newton
solve drifts along the orbit (the quadrature breaks the symmetry only at the
level of its error, so the residual never drops below tolerance). Every init
here fixes the gauge (`BranchInit.gauge`, coordinates held at their init
value without touching the hats): `m_2 = 0` (positional), `theta0_2 = 0`
(semantic), `q0_12 = 0` (mixed: the columns orthogonal). Reported overlaps
are rotation invariants: `q = sigma_1^2 tr q0`, `m = |m|`,
`theta = sigma_1^2 |theta0|`, plus `q_eig1 >= q_eig2` (per token) and the
raw entries in the gauge frame (`q0_i, m0_i, theta0_i`).

Experiments: tied rank-2 students (`phasejax.empirics.TiedAttention`, `r = 2`)
trained by L-BFGS from the same three inits (`init_columns`, plus a small
random part that breaks the column-swap symmetry), swept with `run_chunked`.

The run/table/figure plumbing here (`continuation_table`, `thresholds_table`,
`ExtensionResult`) is shared with `phasejax.extensions.untied`.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from phasejax.empirics.data import check_positive_int, generate_data, run_keys, sample_tokens, teacher_labels
from phasejax.empirics.metrics import adjusted_seed_mean, has_relative_scale
from phasejax.empirics.students import positional_init, random_init, semantic_init
from phasejax.empirics.sweep import problem_config
from phasejax.empirics.training import TrainConfig, minimize
from phasejax.io import atomic_write_json, read_csv, read_json, write_csv
from phasejax.plotting import save_figure
from phasejax.precision import float64_scope
from phasejax.solvers import status_names
from phasejax.sweep import RunOptions, run_chunked, run_options
from phasejax.theory.baselines import linear_baseline_error
from phasejax.theory.fields import Overlaps
from phasejax.theory.gram import gram_inputs, gram_risk
from phasejax.theory.params import TiedAttentionParams, make_params, token_swap_symmetric, validate_params
from phasejax.theory.quadrature import SobolRule
from phasejax.theory.results import result_columns
from phasejax.theory.solver import BranchInit, SEConfig, resolve_scheme, solve_row_jit, stack_inits

Array = jax.Array

NAME = "rank2"
INITS = ("positional", "semantic", "mixed")
"""The three initialisations of the two columns of `Q` (both positional, both semantic, one of each)."""

PRESETS = {
    "cpu": dict(alphas=(0.8, 1.3, 1.8, 2.3), omegas=(0.3,), log2_n=11, n_replicas=4,
                run_alphas=(1.3, 2.3), run_omegas=(0.3,), seeds=(0, 1, 2), dims=(200, 800)),
    "gpu": dict(alphas=tuple(np.round(np.arange(0.2, 3.01, 0.2), 10)), omegas=(0.0, 0.15, 0.3, 0.45),
                log2_n=12, n_replicas=4, run_alphas=(0.6, 1.0, 1.4, 1.8, 2.2, 2.6), run_omegas=(0.0, 0.3),
                seeds=(0, 1, 2, 3, 4), dims=(200, 400, 800, 1600)),
}
"""`cpu`: the committed results (2 cores); `gpu`: a larger grid (documented, not run)."""

EXTENSION_SE_CONFIG = SEConfig(max_iter=150, max_iter_warm=100)
"""Solver caps of the extensions' continuation rows: a cold solve of the stacked rank-2 problems takes
40-50 Newton iterations (more than `SEConfig()`'s 40), a warm one up to ~30."""

RANK2_SE_CONFIG = dataclasses.replace(EXTENSION_SE_CONFIG, tie_width=1e-3)
"""The rank-2 rows' solver: `EXTENSION_SE_CONFIG` with the smoothed selection of each node's prox minima
(`tie_width = 1e-3`, theory notes section 8.5). With the hard selection the semantic row and the mixed
point at `alpha = 2.3` stopped at the iteration cap: on the `2^11`-point rule a node or two switch minimum
between iterations, and the map has no exact fixed point."""


# ----------------------------------------------------------------------------
# Parameters, inits, the rotation symmetry
# ----------------------------------------------------------------------------


def rank2_params(alpha=1.0, omega=0.3, *, sigma=0.5, lam=0.01, A=((0.6, 0.4), (0.4, 0.6))) -> TiedAttentionParams:
    """The paper's setting with a rank-2 student and a rank-1 teacher (`r = 2, t = 1`)."""
    return make_params(alpha, omega, sigma=sigma, lam=lam, A=A, r=2, t=1)


def overlap_mask(ov: Overlaps, **entries) -> Array:
    """`(n,)` bool over `ravel(ov)`, True at the given entries, e.g. `overlap_mask(ov, m=[(0, 1)])`."""
    masks = {k: np.zeros(np.shape(getattr(ov, k)), bool) for k in ("q0", "m", "V0", "theta0")}
    for name, idx in entries.items():
        for i in idx:
            masks[name][i] = True
    return ravel_pytree(Overlaps(**{k: jnp.asarray(v) for k, v in masks.items()}))[0].astype(bool)


def rank2_init(name: str, params: TiedAttentionParams) -> BranchInit:
    """Init, invariant subspace and gauge of one of `INITS` for `r = 2, t = 1, K = 1` (module docstring).

    Per-token defaults as `phasejax.theory.BRANCH_DEFAULTS`: positional columns `q = 0.02, m = 0.2`,
    semantic columns `q = 0.9, theta = 0.35`, `V = 14.6`, divided by the mean `sigma^2`.
    """
    if name not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {name!r}")
    if params.r != 2 or params.t != 1 or params.K != 1:
        raise ValueError(f"rank2 inits need r=2, t=1, K=1, got r={params.r}, t={params.t}, K={params.K}")
    dt = params.sigma.dtype
    s2 = float(np.mean(np.asarray(params.sigma) ** 2))
    V0 = 14.6 / s2 * jnp.eye(2, dtype=dt)
    if name == "positional":
        ov = Overlaps(q0=0.02 / s2 * jnp.eye(2, dtype=dt), m=jnp.asarray([[0.2, 0.0]], dt), V0=V0,
                      theta0=jnp.zeros((1, 2), dt))
        hold_m, hold_theta, gauge = jnp.asarray(False), jnp.asarray(True), dict(m=[(0, 1)])
    elif name == "semantic":
        ov = Overlaps(q0=jnp.diag(jnp.asarray([0.9, 0.02], dt)) / s2, m=jnp.zeros((1, 2), dt), V0=V0,
                      theta0=jnp.asarray([[0.35 / s2, 0.0]], dt))
        hold_m, hold_theta, gauge = token_swap_symmetric(params), jnp.asarray(False), dict(theta0=[(0, 1)])
    else:
        ov = Overlaps(q0=jnp.diag(jnp.asarray([0.02, 0.9], dt)) / s2, m=jnp.asarray([[0.2, 0.0]], dt), V0=V0,
                      theta0=jnp.asarray([[0.0, 0.35 / s2]], dt))
        hold_m, hold_theta, gauge = jnp.asarray(False), jnp.asarray(False), dict(q0=[(0, 1), (1, 0)])
    return BranchInit(overlaps=ov, hold_m=hold_m, hold_theta=hold_theta, gauge=overlap_mask(ov, **gauge))


def rotation(angle, dtype=jnp.float32) -> Array:
    """`(2, 2)` rotation matrix by `angle` (radians) in `dtype` (float64 inside `phasejax.float64_scope`)."""
    angle = jnp.asarray(angle, dtype)
    c, s = jnp.cos(angle), jnp.sin(angle)
    return jnp.stack([jnp.stack([c, -s]), jnp.stack([s, c])])


def rotate_overlaps(ov: Overlaps, R: Array) -> Overlaps:
    """The overlaps of `Q R`: `(R^T q0 R, m R, R^T V0 R, theta0 R)` (the tied student's symmetry)."""
    return Overlaps(q0=R.T @ ov.q0 @ R, m=ov.m @ R, V0=R.T @ ov.V0 @ R, theta0=ov.theta0 @ R)


def rotate_nodes(points: Array, R: Array, params: TiedAttentionParams) -> Array:
    """Quadrature nodes `(N, L (r + t))` with every token's `xi_l` mapped to `R^T xi_l` (eta unchanged): the
    rule under which `F(rotate(x)) = rotate(F(x))` holds exactly, node by node."""
    L, r = params.L, params.r
    xi = points[:, : L * r].reshape(-1, L, r) @ R      # row vectors: xi_l^T R = (R^T xi_l)^T
    return jnp.concatenate([xi.reshape(-1, L * r), points[:, L * r:]], axis=1)


def invariant_columns(ov: Overlaps, sigma: Array, err: Overlaps | None = None) -> dict[str, Array]:
    """Rotation invariants: `q = s1 tr q0`, `m = |m|`, `theta = s1 |theta0|`, `q_eig1 >= q_eig2 = s1 eig(q0)`
    (`s1 = sigma_1^2`); with `err` also `q_err, m_err, theta_err` (root-sum-square of the entries' errors)."""
    s1 = sigma[0] ** 2
    ev = jnp.linalg.eigvalsh(0.5 * (ov.q0 + ov.q0.T))
    cols = dict(q=s1 * jnp.trace(ov.q0), m=jnp.linalg.norm(ov.m), theta=s1 * jnp.linalg.norm(ov.theta0),
                q_eig1=s1 * ev[-1], q_eig2=s1 * ev[0])
    if err is not None:
        cols.update(q_err=s1 * jnp.sqrt(jnp.sum(jnp.diag(err.q0) ** 2)), m_err=jnp.linalg.norm(err.m),
                    theta_err=s1 * jnp.linalg.norm(err.theta0))
    return cols


def classify_fixed_point(m_norm, theta_norm, tol: float = 1e-4) -> np.ndarray:
    """Name of a fixed point from `|m|`, `|theta|`: positional / semantic / mixed / agnostic."""
    pos, sem = np.asarray(m_norm) > tol, np.asarray(theta_norm) > tol
    return np.where(pos & sem, "mixed", np.where(pos, "positional", np.where(sem, "semantic", "agnostic")))


# ----------------------------------------------------------------------------
# Theory: continuation rows through run_chunked (shared with `untied`)
# ----------------------------------------------------------------------------


def scheme_config(scheme) -> dict:
    """JSON description of a quadrature scheme (for fingerprints)."""
    fields = dict(type=type(scheme).__name__)
    for k in ("dim", "log2_n", "n_replicas", "seed"):
        if hasattr(scheme, k):
            fields[k] = int(getattr(scheme, k))
    return fields


def continuation_table(params: TiedAttentionParams, alphas, omegas, inits: dict, *, quadrature, down=(),
                       se_config: SEConfig = SEConfig(), extra=None, kind: str = "extension_theory",
                       options: RunOptions | None = None) -> dict[str, np.ndarray]:
    """Follow the fixed point reached from each init along `alphas` for every `omega` (continuation rows).

    Args:
      params: the problem (`alpha`, `omega` replaced per point).
      alphas: `(A,)` increasing; omegas: `(W,)`.
      inits: `{name: BranchInit}` (same pytree structure, stacked and selected by code inside the jit).
      quadrature: scheme or `Quadrature` (`resolve_scheme`).
      down: init names whose rows run from the largest alpha downwards (branches that end at small alpha).
      extra: `extra(SEResult, params) -> dict of scalars` added to every row (vmappable).
      options: `RunOptions` (one chunk per row by default: a killed run resumes row by row).
    Returns:
      flat table, one row per `(omega, init, alpha)`: `alpha, omega, init` (name) and `result_columns`
      (+ `extra`), `status` as names.
    """
    a = np.asarray(alphas, np.float64)
    if a.ndim != 1 or a.size == 0 or (a.size > 1 and not np.all(np.diff(a) > 0)):
        raise ValueError(f"alphas must be a non-empty increasing sequence, got {alphas}")
    w = np.atleast_1d(np.asarray(omegas, np.float64))
    names = tuple(inits)
    with float64_scope():
        validate_params(params.replace(alpha=jnp.asarray(a)))
        validate_params(params.replace(omega=jnp.asarray(w)))
        scheme = resolve_scheme(quadrature, params)
        stacked = stack_inits([inits[n] for n in names])
        is_down = jnp.asarray([n in down for n in names])
        alphas_j = jnp.asarray(a)

        def row(omega, code):
            p = params.replace(omega=omega)
            init = jax.tree_util.tree_map(lambda x: x[code], stacked)
            flip = is_down[code]
            res = solve_row_jit(p, jnp.where(flip, alphas_j[::-1], alphas_j), init, scheme, se_config)
            res = jax.tree_util.tree_map(lambda x: jnp.where(flip, x[::-1], x), res)

            def columns(r, al):
                pa = p.replace(alpha=al)
                cols = result_columns(r, pa)
                if extra is not None:
                    cols.update(extra(r, pa))
                return cols

            return jax.vmap(columns)(res, alphas_j)

        def fn(chunk):
            return jax.vmap(row)(jnp.asarray(chunk["omega"]), jnp.asarray(chunk["init"]))

        W, I = np.meshgrid(w, np.arange(len(names)), indexing="ij")
        tasks = dict(omega=W.ravel(), init=I.ravel().astype(np.int32))
        cfg = dict(kind=kind, alphas=a.tolist(), inits=list(names), down=list(down), se=dataclasses.asdict(se_config),
                   scheme=scheme_config(scheme), problem=problem_config(params),
                   init_values={n: {k: np.asarray(v).tolist() for k, v in
                                    zip(("q0", "m", "V0", "theta0"), jax.tree_util.tree_leaves(inits[n].overlaps))}
                                for n in names})
        rows = run_chunked(fn, tasks, cfg, run_options(options) if options is not None
                           else RunOptions(chunk_size=1, progress=False))
    n_rows, n_a = len(tasks["omega"]), len(a)
    table = dict(alpha=np.tile(a, n_rows), omega=np.repeat(tasks["omega"], n_a),
                 init=np.repeat(np.asarray(names)[tasks["init"]], n_a))
    for k, v in rows.items():
        table[k] = np.asarray(v).reshape(n_rows * n_a, *np.shape(v)[2:])
    table["status"] = np.asarray(status_names(table["status"]))
    return table


MAX_SOLVER_SHIFT = 0.05
"""Largest `solver_shift` (scaled first-order distance to the fixed point) of a solve that stopped at
`max_iterations` for its training loss to enter the comparisons of branches (`resolved_rows`)."""


def resolved_rows(table: dict, max_shift: float = MAX_SOLVER_SHIFT) -> tuple[np.ndarray, np.ndarray]:
    """`(usable, e_t uncertainty)` per row of a theory table.

    Usable: converged, or stopped at `max_iterations` with `solver_shift <= max_shift` (the solver's part of
    the errors, scaled like the residual: relative to entries above 1, absolute below; the rank-2 semantic
    rows, whose finite-rule map jumps by one node's weight near the fixed point). A converged row without
    a quadrature error (NaN) leaves every comparison with a stopped row unresolved. The uncertainty of
    `train_loss` is its `train_loss_err`, plus, for a row that did not converge, `|train_loss -
    energetic_loss|` (the two agree at a fixed point and separate at first order in the distance from it).
    Tables without `status`/`solver_shift` use converged rows only.
    """
    conv = np.asarray(table["converged"]).astype(bool)
    finite = np.isfinite(np.asarray(table["train_loss"], float))
    err = np.asarray(table["train_loss_err"], float)
    if "solver_shift" not in table or "status" not in table:
        return conv & finite, err
    stalled = (np.asarray(table["status"]).astype(str) == "max_iterations") & (
        np.asarray(table["solver_shift"], float) <= max_shift)
    gap = np.abs(np.asarray(table["train_loss"], float) - np.asarray(table["energetic_loss"], float))
    return (conv | stalled) & finite, np.where(conv, err, err + gap)


def mark_global_minimum(table: dict) -> dict:
    """Add `global_min` (bool) per `(alpha, omega)`: where every row converged, the row with the lowest
    `train_loss`; where some only stopped near their fixed points (`resolved_rows`), the lowest only if its
    `train_loss` lies below every other's by more than their uncertainties. Nothing is marked where a row
    is unusable (its fixed point could be the lowest) or the lowest is not resolved."""
    gm = np.zeros(len(table["alpha"]), bool)
    ok, unc = resolved_rows(table)
    conv = np.asarray(table["converged"]).astype(bool)
    e = np.asarray(table["train_loss"], float)
    for key in set(zip(table["alpha"].tolist(), table["omega"].tolist())):
        idx = np.flatnonzero((table["alpha"] == key[0]) & (table["omega"] == key[1]))
        if not np.all(ok[idx]):
            continue
        low = idx[np.argmin(e[idx])]
        rest = idx[idx != low]
        if np.all(conv[idx]) or np.all(e[low] + unc[low] < e[rest] - unc[rest]):
            gm[low] = True
    return {**table, "global_min": gm}


def crossing_with_error(alphas, delta, delta_err) -> tuple[float, float]:
    """First alpha where `delta` goes from > 0 to <= 0 (linear interpolation) and its error
    `|delta_err| / |slope|` (the errors at the two bracketing points, interpolated); NaNs if none."""
    alphas, delta, delta_err = (np.asarray(x, float) for x in (alphas, delta, delta_err))
    for i in range(len(alphas) - 1):
        if np.isfinite(delta[i]) and np.isfinite(delta[i + 1]) and delta[i] > 0 and delta[i + 1] <= 0:
            f = delta[i] / (delta[i] - delta[i + 1])
            slope = (delta[i + 1] - delta[i]) / (alphas[i + 1] - alphas[i])
            err = ((1 - f) * delta_err[i] + f * delta_err[i + 1]) / abs(slope)
            return float(alphas[i] + f * (alphas[i + 1] - alphas[i])), float(err)
    return float("nan"), float("nan")


def crossing_status(root: float, delta) -> str:
    """Where a threshold lies: `in_grid` (a root was found), `below_grid` (`delta <= 0` at every finite grid
    point: the crossing is at a smaller alpha), `above_grid` (`delta > 0` everywhere), `undetermined` (no
    crossing among the finite points but some points are missing, e.g. not converged), `no_crossing`
    (signs that change without a `+ -> -` crossing)."""
    if np.isfinite(root):
        return "in_grid"
    d = np.asarray(delta, float)
    if not np.all(np.isfinite(d)):
        return "undetermined"
    d = d[np.isfinite(d)]
    if d.size and np.all(d <= 0):
        return "below_grid"
    if d.size and np.all(d > 0):
        return "above_grid"
    return "no_crossing"


def thresholds_table(table: dict, params: TiedAttentionParams, *, positional: str = "positional",
                     semantic: str = "semantic") -> dict[str, np.ndarray]:
    """Per omega: `alpha_c` where the `semantic` rows' `e_t` drops below the `positional` rows' (rows usable by
    `resolved_rows`, the error from their two `e_t` uncertainties), and `alpha_l` where the global minimum's
    test error drops below the linear baseline's `eps_lin` (theory notes, sections 5-6). Status:
    `crossing_status`."""
    out = {k: [] for k in ("omega", "alpha_c", "alpha_c_err", "alpha_c_status", "alpha_l", "alpha_l_err",
                           "alpha_l_status", "eps_lin")}
    usable, unc = resolved_rows(table)
    with float64_scope():
        for om in np.unique(table["omega"]):
            eps_lin = float(linear_baseline_error(params.replace(omega=jnp.asarray(om))))
            sel = lambda name: (table["omega"] == om) & (table["init"] == name)  # noqa: E731
            pos, sem = sel(positional), sel(semantic)
            alphas = table["alpha"][pos]
            ok = usable[pos] & usable[sem]
            delta = np.where(ok, table["train_loss"][sem] - table["train_loss"][pos], np.nan)
            derr = np.hypot(unc[sem], unc[pos])
            ac, ac_err = crossing_with_error(alphas, delta, derr)
            # the global minimum's test error on the alpha grid (NaN where no global minimum is determined)
            gm = (table["omega"] == om) & np.asarray(table["global_min"]).astype(bool)
            gm_err, gm_err_err = np.full(len(alphas), np.nan), np.full(len(alphas), np.nan)
            for j, a in enumerate(alphas):
                row = np.flatnonzero(gm & (table["alpha"] == a))
                if row.size:
                    gm_err[j], gm_err_err[j] = table["test_error"][row[0]], table["test_error_err"][row[0]]
            al, al_err = crossing_with_error(alphas, gm_err - eps_lin, gm_err_err)
            for k, v in dict(omega=om, alpha_c=ac, alpha_c_err=ac_err, alpha_c_status=crossing_status(ac, delta),
                             alpha_l=al, alpha_l_err=al_err,
                             alpha_l_status=crossing_status(al, gm_err - eps_lin),
                             eps_lin=eps_lin).items():
                out[k].append(v)
    return {k: np.asarray(v) for k, v in out.items()}


# ----------------------------------------------------------------------------
# Experiments
# ----------------------------------------------------------------------------


def init_columns(code, key: Array, u: Array, Qstar: Array, *, m0: float = 0.5, noise: float = 0.1) -> Array:
    """`Q0 (d, 2)` for init code (index into `INITS`): columns positional (`m0 sqrt(d) u`) or semantic (`Q*`),
    both / both / one of each, plus iid `N(0, noise^2)` entries (break the column-swap symmetry, which
    gradient descent would otherwise keep). `code` may be traced."""
    pos = positional_init(u, 1, m0)[:, 0]
    sem = semantic_init(Qstar, 1)[:, 0]
    cols = jnp.stack([jnp.stack([pos, pos], 1), jnp.stack([sem, sem], 1), jnp.stack([pos, sem], 1)])[code]
    return cols + random_init(key, u.shape[1], 2, noise, Qstar.dtype)


RUN_COLUMNS = ("alpha", "omega", "seed", "init", "d", "q", "m", "theta", "q_eig1", "q_eig2", "q0_0", "q0_1",
               "q0_3", "m0_0", "m0_1", "theta0_0", "theta0_1", "train_loss", "test_error", "train_loss_theory",
               "test_error_theory", "n", "grad_norm", "steps", "status")


def rank2_run(seed, alpha, omega, init, n, *, params: TiedAttentionParams, d: int, n_max: int,
              config: TrainConfig = TrainConfig(), n_test: int = 1000, dtype=jnp.float32) -> dict[str, Array]:
    """One run: data of `seed` (`generate_data(run_keys(seed)["data"], ...)`), init `init_columns(init)`,
    L-BFGS on the tied rank-2 risk over the first `n` samples, overlaps and fresh test error.
    Pure in `(seed, alpha, omega, init, n)` (vmap over them)."""
    p_ = params.replace(alpha=jnp.asarray(alpha, dtype), omega=jnp.asarray(omega, dtype),
                        lam=params.lam.astype(dtype), sigma=params.sigma.astype(dtype), A=params.A.astype(dtype),
                        C=params.C.astype(dtype))
    keys = run_keys(seed)
    data = generate_data(keys["data"], p_, d, n_max, dtype=dtype)
    mask = jnp.arange(n_max) < n
    Q0 = init_columns(init, keys["init"], data.u, data.Qstar)
    inputs = gram_inputs(data.x, data.y, data.p)
    res = minimize(lambda w: gram_risk(w["Q"], inputs, p_, mask), {"Q": Q0}, config)
    Q = res.params["Q"]
    x_test = sample_tokens(keys["test"], p_.sigma, d, n_test, dtype)
    xt = x_test + data.p
    pred = jax.nn.softmax(jnp.einsum("nla,nka->nlk", xt @ Q, xt @ Q) / d, axis=-1) @ xt
    err = jnp.mean((teacher_labels(x_test, data.Qstar, p_) - pred) ** 2)
    ov = Overlaps(q0=Q.T @ Q / d, m=data.u @ Q / jnp.sqrt(jnp.asarray(d, dtype)), V0=jnp.eye(2, dtype=dtype),
                  theta0=data.Qstar.T @ Q / d)
    cols = invariant_columns(ov, p_.sigma)
    s1 = p_.sigma[0] ** 2
    cols.update(q0_0=s1 * ov.q0[0, 0], q0_1=s1 * ov.q0[0, 1], q0_3=s1 * ov.q0[1, 1], m0_0=ov.m[0, 0],
                m0_1=ov.m[0, 1], theta0_0=s1 * ov.theta0[0, 0], theta0_1=s1 * ov.theta0[0, 1])
    return dict(cols, train_loss=res.loss / d, test_error=err, n=n, grad_norm=res.grad_norm, steps=res.steps,
                status=res.status)


def run_tasks(alphas, omegas, seeds, inits, d: int, init_names=INITS) -> dict[str, np.ndarray]:
    """Task table in order `(omega, alpha, init, seed)`: `seed, alpha, omega, init (code), n = round(alpha d)`."""
    d = check_positive_int(d, "d")
    bad = [i for i in inits if i not in init_names]
    if bad or not len(inits):
        raise ValueError(f"inits must be names from {init_names}, got {inits}")
    codes = [init_names.index(i) for i in inits]
    w_, a_, i_, s_ = np.meshgrid(np.asarray(omegas, float), np.asarray(alphas, float), codes,
                                 np.asarray(seeds), indexing="ij")
    n = np.rint(a_.ravel() * d).astype(np.int32)
    if np.any(n < 1):
        raise ValueError(f"alpha * d must be >= 1, got alphas={list(alphas)}, d={d}")
    if np.any(s_ < 0):
        raise ValueError(f"seeds must be >= 0, got {list(seeds)}")
    return dict(seed=s_.ravel().astype(np.int64), alpha=a_.ravel(), omega=w_.ravel(),
                init=i_.ravel().astype(np.int32), n=n)


def train_table(run_fn, tasks: dict, cfg: dict, d: int, init_names, options: RunOptions | None = None) -> dict:
    """Run `run_fn(seed, alpha, omega, init, n) -> metrics` over `tasks` through `run_chunked` (one jitted
    vmap per chunk); returns the task columns (init as names, d) and the metrics (status as names)."""

    def fn(chunk):
        return jax.vmap(run_fn)(*(jnp.asarray(chunk[k]) for k in ("seed", "alpha", "omega", "init", "n")))

    out = run_chunked(fn, tasks, cfg, run_options(options) if options is not None else RunOptions(progress=False))
    table = {**tasks, **{k: np.asarray(v) for k, v in out.items() if k not in tasks}}
    table["init"] = np.asarray(init_names)[tasks["init"]]
    table["d"] = np.full(len(tasks["seed"]), d)
    table["status"] = np.asarray(status_names(table["status"]))
    return table


def train_rank2(alphas, omegas, seeds, *, d: int, params: TiedAttentionParams | None = None, inits=INITS,
                config: TrainConfig = TrainConfig(), n_test: int = 1000,
                options: RunOptions | None = None) -> dict[str, np.ndarray]:
    """Train rank-2 tied students for every `(omega, alpha, init, seed)` at dimension `d` (`rank2_run`)."""
    params = rank2_params() if params is None else params
    validate_params(params)
    for om in np.atleast_1d(omegas):
        validate_params(params.replace(omega=jnp.asarray(float(om))))
    tasks = run_tasks(alphas, omegas, seeds, inits, d)
    n_max = int(tasks["n"].max())
    one = functools.partial(rank2_run, params=params, d=d, n_max=n_max, config=config, n_test=n_test)
    cfg = dict(kind="rank2_runs", d=d, n_max=n_max, n_test=n_test, train=dataclasses.asdict(config),
               problem=problem_config(params))
    return train_table(one, tasks, cfg, d, INITS, options)


def attach_theory(runs: dict, theory: dict, keys=("train_loss", "test_error")) -> dict:
    """Add `<key>_theory` for each of `keys` (default `train_loss_theory`, `test_error_theory`): the theory row
    of the run's `(alpha, omega, init)` (NaN if there is none or it did not converge)."""
    out = {f"{k}_theory": np.full(len(runs["alpha"]), np.nan) for k in keys}
    for i in range(len(runs["alpha"])):
        sel = (np.isclose(theory["alpha"], runs["alpha"][i]) & np.isclose(theory["omega"], runs["omega"][i])
               & (theory["init"] == runs["init"][i]) & theory["converged"].astype(bool))
        if sel.any():
            j = np.flatnonzero(sel)[0]
            for k in keys:
                out[f"{k}_theory"][i] = theory[k][j]
    return {**runs, **out}


def seed_means(runs: dict, key: str, group=("d", "omega", "alpha", "init")) -> dict[str, np.ndarray]:
    """Mean and standard error over seeds of `runs[key]` per group: columns `group..., mean, sem, n`."""
    keys = sorted(set(zip(*(runs[g].tolist() for g in group))))
    out = {g: [] for g in group} | dict(mean=[], sem=[], n=[])
    for kk in keys:
        sel = np.ones(len(runs[key]), bool)
        for g, v in zip(group, kk):
            sel &= runs[g] == v
        v = np.asarray(runs[key][sel], float)
        for g, x in zip(group, kk):
            out[g].append(x)
        out["mean"].append(v.mean())
        out["sem"].append(v.std(ddof=1) / np.sqrt(v.size) if v.size > 1 else np.nan)
        out["n"].append(v.size)
    return {k: np.asarray(v) for k, v in out.items()}


# ----------------------------------------------------------------------------
# Result, figure, main
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class ExtensionResult:
    """Outputs of an extension: `theory` (one row per fixed point), `runs` (one row per trained student),
    `thresholds` (per omega), `summary` (JSON: configuration and key numbers)."""

    theory: dict
    runs: dict
    thresholds: dict
    summary: dict

    def write(self, out_dir: str) -> list[str]:
        os.makedirs(out_dir, exist_ok=True)
        first = ["alpha", "omega", "init", "branch"]
        paths = [write_csv(os.path.join(out_dir, "theory.csv"), self.theory,
                           [k for k in first if k in self.theory] + [k for k in self.theory if k not in first])]
        rfirst = [k for k in RUN_COLUMNS if k in self.runs]
        paths.append(write_csv(os.path.join(out_dir, "runs.csv"), self.runs,
                               rfirst + [k for k in self.runs if k not in rfirst]))
        paths.append(write_csv(os.path.join(out_dir, "thresholds.csv"), self.thresholds))
        paths.append(atomic_write_json(os.path.join(out_dir, "summary.json"), self.summary))
        return paths

    @classmethod
    def load(cls, out_dir: str) -> "ExtensionResult":
        return cls(theory=read_csv(os.path.join(out_dir, "theory.csv")),
                   runs=read_csv(os.path.join(out_dir, "runs.csv")),
                   thresholds=read_csv(os.path.join(out_dir, "thresholds.csv")),
                   summary=read_json(os.path.join(out_dir, "summary.json")))


INIT_COLOURS = {"positional": "tab:blue", "semantic": "tab:red", "mixed": "tab:green"}


def make_figure(result: ExtensionResult, *, title: str, inits=INITS, keys=("train_loss", "test_error"),
                labels=("training loss $e_t$", "test error $\\epsilon_g$"), thresholds: bool = False) -> Figure:
    """Theory lines (with 95% quadrature-error bands) per init and omega, experiment markers (seed mean,
    error bars: standard error over seeds) per d; one column per omega, one row per key. With `thresholds`,
    a last column shows `alpha_c(omega)` (and the tied model's, when `result.thresholds` has
    `alpha_c_tied`) with 95% error bars."""
    th, runs = result.theory, result.runs
    omegas = np.unique(th["omega"])
    ncol = len(omegas) + int(thresholds)
    fig = Figure(figsize=(4.6 * ncol + 4.0, 3.6 * len(keys)), layout="constrained")
    axes = fig.subplots(len(keys), ncol, squeeze=False)
    dims = np.unique(runs["d"]) if len(runs.get("d", [])) else []
    markers = ["o", "s", "^", "D"]
    usable, e_t_unc = resolved_rows(th)
    conv = th["converged"].astype(bool)
    for j, om in enumerate(omegas):
        for i, key in enumerate(keys):
            ax = axes[i, j]
            for name in inits:
                c = INIT_COLOURS.get(name, None)
                at = (th["omega"] == om) & (th["init"] == name)
                near = at & usable & ~conv & np.isfinite(th[key])
                if near.any():   # stopped at the iteration cap near its fixed point: drawn with its error bars
                    err = e_t_unc[near] if key == "train_loss" else th[f"{key}_err"][near]
                    ax.errorbar(th["alpha"][near], th[key][near], yerr=err, fmt="x", color=c, ms=7, capsize=2,
                                label=f"SE, {name} init, stopped near its fixed point (+- solver and quadrature)")
                sel = at & conv
                if not sel.any():
                    continue
                a, v, e = th["alpha"][sel], th[key][sel], th[f"{key}_err"][sel]
                ax.plot(a, v, ".-", color=c, label=f"theory, {name} init (converged solves)")
                ax.fill_between(a, v - e, v + e, color=c, alpha=0.25, lw=0)
                for k, d in enumerate(dims):
                    rs = {kk: vv[(runs["omega"] == om) & (runs["init"] == name) & (runs["d"] == d)]
                          for kk, vv in runs.items()}
                    if not len(rs["alpha"]):
                        continue
                    sm = seed_means(rs, key, ("alpha",))
                    off = (k - (len(dims) - 1) / 2) * 0.02
                    ax.errorbar(sm["alpha"] + off, sm["mean"], yerr=sm["sem"], fmt=markers[k % 4], color=c,
                                mfc="white" if k == 0 else c, ms=5, capsize=2, lw=1,
                                label=f"L-BFGS, {name} init, d={d}")
            ax.set_xlabel(r"sample complexity $\alpha = n/d$")
            ax.set_ylabel(labels[i])
            ax.set_title(f"$\\omega$ = {om:g}")
            ax.grid(alpha=0.3)
    if thresholds:
        gs = axes[0, -1].get_gridspec()
        for ax in axes[:, -1]:
            ax.remove()
        ax = fig.add_subplot(gs[:, -1])
        ts = result.thresholds
        w = np.asarray(ts["omega"], float)
        for key, c, lab in (("alpha_c", "k", "this model"), ("alpha_c_tied", "0.55", "tied model (main job)")):
            if key in ts:
                v, e = np.asarray(ts[key], float), np.asarray(ts[f"{key}_err"], float)
                ax.errorbar(v, w, xerr=np.where(np.isfinite(e), e, 0), fmt="o-", color=c, capsize=3,
                            label=f"$\\alpha_c$, {lab}")
        ax.set(xlabel=r"$\alpha$", ylabel=r"$\omega$", title=r"$\alpha_c(\omega)$: $e_t$ of the branches cross")
        ax.set_ylim(0, max(0.4, float(np.nanmax(w)) + 0.1))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    seen = {}
    for ax in axes[:, :len(omegas)].ravel():
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    far = int(np.sum(~usable & ~conv))
    if far:     # solves that stopped far from any fixed point have no meaningful value: not drawn, but counted
        seen[f"not drawn: {far} SE solve(s) stopped far from a fixed point (theory.csv)"] = Line2D([], [], ls="none")
    fig.legend(list(seen.values()), list(seen), loc="outside right center", fontsize=7)
    fig.suptitle(title + "\n(bands: 95% quadrature error; markers: mean over seeds, bars: standard error)",
                 fontsize=10)
    return fig


def theory_extra(res, params) -> dict:
    """Rotation-invariant overlaps (`invariant_columns`) of an SE result, overriding `q, m, theta` and errors."""
    return invariant_columns(res.overlaps, params.sigma, res.errors.overlaps)


def rank2_theory(alphas, omegas, *, params: TiedAttentionParams | None = None, quadrature=None,
                 se_config: SEConfig = RANK2_SE_CONFIG, options: RunOptions | None = None) -> dict[str, np.ndarray]:
    """SE table from the three inits (`INITS`) on `omegas x alphas`: `init`, `branch` (what the fixed point
    is: `classify_fixed_point`), `global_min`, rotation invariants and all `result_columns`."""
    params = rank2_params() if params is None else params
    with float64_scope():
        inits = {n: rank2_init(n, params) for n in INITS}
    quadrature = SobolRule.create(params.L * (params.r + params.t), 10, 4) if quadrature is None else quadrature
    table = continuation_table(params, alphas, omegas, inits, quadrature=quadrature, down=("semantic",),
                               se_config=se_config, extra=theory_extra, kind="rank2_theory", options=options)
    table["branch"] = classify_fixed_point(table["m"], table["theta"])
    return mark_global_minimum(table)


def main(out_dir: str, *, preset: str = "cpu", run_dir: str | None = None, progress: bool = True) -> list[str]:
    """Theory (three inits), experiments (three inits, `dims`), thresholds, figure into `out_dir`."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {tuple(PRESETS)}, got {preset!r}")
    P = PRESETS[preset]
    params = rank2_params()
    opts = lambda sub, chunk: RunOptions(run_dir=None if run_dir is None else os.path.join(run_dir, sub),  # noqa
                                          chunk_size=chunk, progress=progress)
    rule = SobolRule.create(6, P["log2_n"], P["n_replicas"])
    theory = rank2_theory(P["alphas"], P["omegas"], params=params, quadrature=rule, options=opts("theory", 1))
    runs = [train_rank2(P["run_alphas"], P["run_omegas"], P["seeds"], d=d, params=params,
                        options=opts(f"runs_d{d}", 18)) for d in P["dims"]]
    runs = {k: np.concatenate([r[k] for r in runs]) for k in runs[0]}
    runs = attach_theory(runs, theory)
    thresholds = thresholds_table(theory, params)
    summary = dict(extension=NAME, preset=preset, presets=P, rule=scheme_config(rule),
                   agreement=agreement(runs), global_minimum=global_minimum_summary(theory))
    result = ExtensionResult(theory=theory, runs=runs, thresholds=thresholds, summary=summary)
    paths = result.write(out_dir)
    fig = make_figure(result, title="Rank-2 tied student, rank-1 teacher: three initialisations of the columns "
                                    f"(SE: tie_width {RANK2_SE_CONFIG.tie_width:g})")
    paths.append(save_figure(fig, os.path.join(out_dir, "rank2.png")))
    return paths


def agreement(runs: dict, keys=("test_error", "train_loss"), *, teacher_adjusted: bool = False) -> list[dict]:
    """Per `(d, omega, alpha, init)` and quantity in `keys`: seed mean and standard error against the theory
    (`<key>_theory`, `attach_theory`), `rel_dev = |mean / theory - 1|` (NaN where the theory is missing or,
    for the overlaps `m` and `theta`, `|theory| < ZERO_OVERLAP_TOL`: an overlap that is zero in the limit has no
    relative deviation).

    `teacher_adjusted=True` adds `adj_mean`, `adj_sem` (the seed mean with each seed's teacher norm as control
    variate, `phasejax.empirics.adjusted_seed_mean`; NaN below `MIN_ADJUSTED_SEEDS` seeds) and the signed
    `adj_signed_dev = adj_mean / theory - 1` (NaN where `rel_dev` is)."""
    out = []
    for key in keys:
        sm = seed_means(runs, key)
        th = seed_means(runs, f"{key}_theory")
        for i in range(len(sm["mean"])):
            theory = float(th["mean"][i])
            relative = bool(has_relative_scale(key, theory))
            row = dict(quantity=key, d=int(sm["d"][i]), omega=float(sm["omega"][i]),
                       alpha=float(sm["alpha"][i]), init=str(sm["init"][i]), mean=float(sm["mean"][i]),
                       sem=float(sm["sem"][i]), theory=theory,
                       rel_dev=float(abs(sm["mean"][i] / theory - 1)) if relative else float("nan"))
            if teacher_adjusted:
                sel = ((runs["d"] == sm["d"][i]) & (runs["omega"] == sm["omega"][i])
                       & (runs["alpha"] == sm["alpha"][i]) & (runs["init"] == sm["init"][i]))
                a, e = adjusted_seed_mean(np.asarray(runs[key], float)[sel], np.asarray(runs["seed"])[sel],
                                          int(sm["d"][i]))
                row.update(adj_mean=float(a), adj_sem=float(e),
                           adj_signed_dev=float(a / theory - 1) if relative else float("nan"))
            out.append(row)
    return out


def global_minimum_summary(theory: dict) -> list[dict]:
    """Per `(alpha, omega)`: which init's fixed point is the global minimum, what it is, and its `e_t`."""
    sel = theory["global_min"]
    return [dict(alpha=float(a), omega=float(w), init=str(i), branch=str(b), train_loss=float(e))
            for a, w, i, b, e in zip(theory["alpha"][sel], theory["omega"][sel], theory["init"][sel],
                                     theory["branch"][sel], theory["train_loss"][sel])]
