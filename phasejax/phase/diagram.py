"""The positional-vs-semantic phase diagram of tied attention (theory notes, sections 4-6).

`phase_diagram(grid, params)` follows, for every `omega` of the grid and
each subspace (positional: `theta0 = 0`; semantic: `m = 0`), several
fixed-point tracks along the `alpha` grid by continuation (one track per
census seed, `PhaseConfig.seeds`). Every fixed point carries its training
loss, test error, stability and quadrature error bars. Per point and
subspace the tracks are deduplicated and the lowest-`e_t` fixed point is the
branch; the global minimum is the branch of lower `e_t`. Per `omega` it
derives `alpha_c` (the branches' training losses cross), `alpha_l` (the
global minimum's test error drops below the linear baseline's), both with
error bars and a status saying whether they lie in, below or above the
grid, and the spinodals where a branch loses stability out of its subspace.

A row `(omega, subspace)` is one task of `phasejax.sweep.run_chunked`
(chunked, resumable, sharded over devices, multi-host). The work of a row
is a `lax.scan` over `alpha` of Newton solves warm-started from the
previous point; the tracks and rows of a chunk go through `map_points` (one
at a time on a CPU, vmapped side by side on an accelerator).

Example (a small grid, a minute or two on a laptop CPU):
  >>> from phasejax.phase import PhaseGrid, phase_diagram
  >>> from phasejax.theory import make_params
  >>> pd = phase_diagram(PhaseGrid.from_ranges([0.5, 0.75, 1.0, 1.25, 1.5], [0.3]), make_params(1.0, 0.3))  # doctest: +SKIP
  >>> pd.thresholds["alpha_c"], pd.thresholds["alpha_c_err"]                                              # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from phasejax import xla
from phasejax.bundle import BundleFile, ResultBundle
from phasejax.phase.thresholds import alpha_c_with_error, alpha_l_with_error, first_upcrossing
from phasejax.precision import float64_scope
from phasejax.solvers import STATUS_NAMES, status_code, status_names
from phasejax.sweep import RunOptions, run_chunked, run_options
from phasejax.theory.census import CENSUS_SEEDS, census_seeds
from phasejax.theory.baselines import linear_baseline_error
from phasejax.theory.params import TiedAttentionParams, validate_params
from phasejax.theory.replicon import (
    DEFAULT_TIE_WIDTH,
    REPLICON_COLUMNS,
    replicon_result_columns,
    rs_stable,
)
from phasejax.theory.results import result_columns
from phasejax.theory.continuation import continuation
from phasejax.theory.newton import SEConfig
from phasejax.theory.se_map import MapApproximation
from phasejax.theory.solver import map_points, resolve_scheme

PHASE_BRANCHES = ("positional", "semantic")

REPLICON_CONFIG = dict(tie_width=DEFAULT_TIE_WIDTH, minima="the error replicas' (every node started from its main "
                       "node's minima)")
"""The replicon columns' settings, recorded in a run's configuration: the smoothing, and where the prox minima come
from (`phasejax.theory.newton`: the error passes that give the error replicas, over the main rule's nodes
too)."""


@dataclasses.dataclass(frozen=True)
class PhaseGrid:
    """An `(alpha, omega)` grid: strictly increasing `alphas > 0`, strictly increasing `omegas` in [0, 1].

    Values are rounded to 12 significant digits, so grids built with
    `np.arange` (`0.6000000000000001`) and with literals (`0.6`) are the same
    grid (same files, same fingerprint).
    """

    alphas: tuple
    omegas: tuple

    def __post_init__(self):
        for name in ("alphas", "omegas"):
            v = np.asarray(getattr(self, name), float)
            if v.ndim != 1 or v.size == 0:
                raise ValueError(f"{name} must be a non-empty 1-d sequence")
            object.__setattr__(self, name, tuple(float(f"{x:.12g}") for x in v))
        a, w = np.asarray(self.alphas), np.asarray(self.omegas)
        if not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise ValueError(f"alpha values must be finite and > 0, got {a}")
        if not np.all(np.isfinite(w)) or np.any((w < 0) | (w > 1)):
            raise ValueError(f"omega values must lie in [0, 1], got {w}")
        if np.any(np.diff(a) <= 0):
            raise ValueError("alpha values must be strictly increasing")
        if np.any(np.diff(w) <= 0):
            raise ValueError("omega values must be strictly increasing")

    @classmethod
    def from_ranges(cls, alphas, omegas) -> "PhaseGrid":
        return cls(tuple(alphas), tuple(omegas))

    def tasks(self) -> dict[str, np.ndarray]:
        """Row table `(omega, subspace)`, subspace code 0 positional / 1 semantic."""
        w, b = np.meshgrid(self.omegas, np.arange(len(PHASE_BRANCHES)), indexing="ij")
        return dict(omega=w.ravel(), branch=b.ravel().astype(np.int32))


@dataclasses.dataclass(frozen=True)
class PhaseConfig:
    """What a phase diagram computes besides the grid (all of it enters the run's fingerprint).

    Attributes:
      seeds: per subspace, the per-token `(q, m, V, theta)` census seeds; each is followed along alpha
        (default: the first two of `phasejax.theory.census.CENSUS_SEEDS` per subspace).
      se: `SEConfig` of every solve (the solver's settings).
      approximation: `MapApproximation` of every solve (how the map is computed at the nodes).
      replicon: compute the replicon columns of every fixed point (`REPLICON_COLUMNS` of
        `phasejax.theory.replicon`, at the smoothing `DEFAULT_TIE_WIDTH`): no solve of its own, it comes from
        the solver's error passes (`phasejax.theory.newton`), which evaluate the map at the fixed point on the
        main rule and on each error replica with every node started from the solve's minimiser and from where
        its alternative starts ended, and read the replicon's node averages off the minima found (their
        Jacobians, the tied minima blended at that smoothing); the continuation row carries it along with the
        result (`phasejax.theory.continuation`). NaN where the point did not converge. `False` leaves the columns
        out (and the passes compute only the error bars).
    """

    seeds: Mapping = dataclasses.field(default_factory=lambda: {b: CENSUS_SEEDS[b][:2] for b in PHASE_BRANCHES})
    se: SEConfig = SEConfig()
    approximation: MapApproximation = MapApproximation()
    replicon: bool = True

    def __post_init__(self):
        seeds = {b: tuple(tuple(float(v) for v in s) for s in self.seeds.get(b, ())) for b in PHASE_BRANCHES}
        sizes = {len(v) for v in seeds.values()}
        if 0 in sizes or len(sizes) != 1:
            raise ValueError(f"seeds must give the same positive number of seeds for {PHASE_BRANCHES}, got "
                             f"{ {b: len(v) for b, v in seeds.items()} }")
        object.__setattr__(self, "seeds", seeds)

    @property
    def n_tracks(self) -> int:
        return len(self.seeds[PHASE_BRANCHES[0]])


def make_row_fn(grid: PhaseGrid, params: TiedAttentionParams, scheme, config: PhaseConfig):
    """Pure batch function `{omega, branch} (C,) -> columns (C, tracks, n_alpha)` for `run_chunked`."""
    alphas = jnp.asarray(grid.alphas)
    inits = [census_seeds(b, params, config.seeds[b]) for b in PHASE_BRANCHES]
    inits = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *inits)        # (branch, track, ...)
    tie_width = DEFAULT_TIE_WIDTH if config.replicon else None

    def row(omega, code):
        p = params.replace(omega=omega)
        track_inits = jax.tree_util.tree_map(lambda x: x[code], inits)
        # the semantic branch exists at large alpha and ends at small alpha (it collapses onto theta = 0): its
        # rows run downwards from alpha_max, the positional ones upwards from alpha_min
        down = code == PHASE_BRANCHES.index("semantic")
        order = jnp.where(down, alphas[::-1], alphas)

        def track(init):
            # the solves, their error bars and (with the replicon) every fixed point's replicon: one scan
            out = continuation(p, order, init, scheme, config.se, config.approximation,
                               replicon_tie_width=tie_width)[0]
            out = jax.tree_util.tree_map(lambda x: jnp.where(down, x[::-1], x), out)
            res, rep = out if config.replicon else (out, None)
            cols = jax.vmap(lambda r, a: result_columns(r, p.replace(alpha=a)))(res, alphas)
            if rep is not None:
                cols.update(replicon_result_columns(rep, res.converged))
            return cols

        return map_points(track, track_inits)

    def fn(chunk):   # traced inside phase_diagram's float64 scope
        # rows and tracks: one at a time on a CPU (a vmapped group waits for its slowest row), side by side on
        # an accelerator (`map_points`)
        return map_points(lambda oc: row(*oc), (jnp.asarray(chunk["omega"]), jnp.asarray(chunk["branch"])))

    return fn


# ----------------------------------------------------------------------------
# Tables
# ----------------------------------------------------------------------------


def points_table(grid: PhaseGrid, rows: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Flatten row outputs `(n_rows, tracks, n_alpha)` to one row per fixed point found.

    Order `(omega, branch, track, alpha)`; adds `omega, alpha, branch, track`, `distinct` (a converged
    fixed point not equal to one of an earlier track at the same point) and `is_branch` (the lowest-`e_t`
    distinct one of its subspace: the branch).
    """
    n_rows, T, A = np.asarray(rows["q"]).shape
    cols = {k: np.asarray(v) for k, v in rows.items() if np.asarray(v).shape[:3] == (n_rows, T, A)}
    omega = np.broadcast_to(np.asarray(rows["omega"])[:, None, None], (n_rows, T, A))
    branch = np.broadcast_to(np.asarray(rows["branch"])[:, None, None], (n_rows, T, A))
    track = np.broadcast_to(np.arange(T)[None, :, None], (n_rows, T, A))
    alpha = np.broadcast_to(np.asarray(grid.alphas)[None, None, :], (n_rows, T, A))
    # dedupe tracks per (row, alpha) on the overlaps; branch = lowest e_t among distinct converged
    keys = sorted(k for k in cols if k.split("_")[0] in ("q0", "m0", "V0", "theta0") and k[-1].isdigit())
    X = np.stack([cols[k] for k in keys], -1)                       # (rows, T, A, n)
    ok = cols["converged"].astype(bool) & np.isfinite(cols["train_loss"])
    distinct = np.zeros_like(ok)
    is_branch = np.zeros_like(ok)
    for i in range(n_rows):
        for j in range(A):
            seen = []
            for t in range(T):
                if not ok[i, t, j]:
                    continue
                x = X[i, t, j]
                if any(np.all(np.abs(x - y) <= 1e-4 * np.maximum(1.0, np.maximum(np.abs(x), np.abs(y))))
                       for y in seen):
                    continue
                seen.append(x)
                distinct[i, t, j] = True
            if distinct[i, :, j].any():
                e = np.where(distinct[i, :, j], cols["train_loss"][i, :, j], np.inf)
                is_branch[i, int(np.argmin(e)), j] = True
    out = dict(omega=omega.ravel(), alpha=alpha.ravel(), branch=branch.ravel().astype(np.int32),
               track=track.ravel().astype(np.int32), distinct=distinct.ravel(), is_branch=is_branch.ravel())
    out.update({k: v.ravel() for k, v in cols.items()})
    return out


def branch_table(grid: PhaseGrid, points: Mapping[str, np.ndarray], key: str) -> np.ndarray:
    """Column `key` of each subspace's branch, shape `(n_omega, n_alpha, 2)` (NaN where no fixed point converged)."""
    nw, na = len(grid.omegas), len(grid.alphas)
    out = np.full((nw, na, len(PHASE_BRANCHES)), np.nan)
    w_index = {w: i for i, w in enumerate(grid.omegas)}
    a_index = {a: j for j, a in enumerate(grid.alphas)}
    sel = np.asarray(points["is_branch"]).astype(bool)
    for w, a, b, v in zip(np.asarray(points["omega"])[sel], np.asarray(points["alpha"])[sel],
                          np.asarray(points["branch"])[sel], np.asarray(points[key], float)[sel]):
        out[w_index[float(w)], a_index[float(a)], int(b)] = v
    return out


# The order parameter each subspace's branch needs non-zero: the positional branch lives in theta0 = 0 and
# ends where it merges with the plane m = 0; the semantic branch lives in m = 0 and ends on theta = 0.
ORDER_PARAMETER = ("m", "theta")
COLLAPSE_TOL = 1e-5     # |m| or |theta| (per token) below this: the fixed point lies on the invariant plane


def branch_verdicts(grid: PhaseGrid, points: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A verdict per `(omega, alpha, subspace)` and where each branch ends by collapsing.

    Verdicts, shape `(n_omega, n_alpha, 2)` (strings):

    * `"converged"`: the subspace's branch (lowest-`e_t` converged fixed point) exists there, with its order
      parameter (`m` positional, `theta` semantic) away from zero (`> COLLAPSE_TOL`).
    * `"absent: collapses onto theta = 0 at alpha = X (between a1 and a2)"` (or `m = 0`): the subspace's
      fixed point converged onto the invariant plane (it is the agnostic fixed point), so the branch does not
      exist there. The branches end by a pitchfork (the target is even in `h*`, and in the token-swap
      symmetric problem the fields are symmetric under `m -> -m`): the order parameter squared falls
      linearly to zero at `X`, found from the two converged branch points nearest the collapse (with one,
      halfway to the first collapsed point), within the grid interval `[a1, a2]` it lies in.
    * `"unresolved: <status>"`: no fixed point converged there (the phase-diagram command exits non-zero).

    Also returns `ends (n_omega, 2)`: per row and subspace the `alpha` of the first collapse (NaN: none).
    """
    a = np.asarray(grid.alphas)
    out = np.full((len(grid.omegas), len(a), len(PHASE_BRANCHES)), "", dtype=object)
    ends = np.full((len(grid.omegas), len(PHASE_BRANCHES)), np.nan)
    for b, name in enumerate(ORDER_PARAMETER):
        v = np.abs(branch_table(grid, points, name)[..., b])
        for i in range(len(grid.omegas)):
            found = np.isfinite(v[i])
            live = found & (v[i] > COLLAPSE_TOL)
            for j in range(len(a)):
                if not found[j]:
                    out[i, j, b] = "unresolved: " + _status_text(points, grid, i, j, b)
                elif live[j]:
                    out[i, j, b] = "converged"
                else:
                    end = collapse_point(a, v[i], live, j)
                    if end is None:
                        out[i, j, b] = f"absent: on {name} = 0 everywhere on this row of the grid"
                        continue
                    x, lo, hi = end
                    out[i, j, b] = f"absent: collapses onto {name} = 0 at alpha = {x:.3f} (between {lo:g} and {hi:g})"
                    if not np.isfinite(ends[i, b]):
                        ends[i, b] = x
    return out, ends


def collapse_point(a: np.ndarray, v: np.ndarray, live: np.ndarray, j: int) -> tuple[float, float, float] | None:
    """Where a branch ends by a pitchfork next to the collapsed grid point `j`: `(x, lo, hi)` with `x` in the
    grid interval `[lo, hi]`; `None` if the row has no live branch point.

    `a (n,)` the alphas, `v (n,)` the order parameter's magnitude, `live (n,)` where the branch exists. The
    collapse is taken beyond the live point nearest to `j`; `v^2` is linear in `alpha` near a pitchfork, so
    `x` is the root of the line through `v^2` at the two live points nearest the collapse, clipped to the
    interval (with one live point, the interval's midpoint).
    """
    idx = np.flatnonzero(live)
    if idx.size == 0:
        return None
    k = int(idx[np.argmin(np.abs(idx - j))])
    step = 1 if j > k else -1
    edge = k + step
    lo, hi = sorted((float(a[k]), float(a[edge])))
    x = 0.5 * (lo + hi)
    k2 = k - step
    if 0 <= k2 < a.size and live[k2]:
        slope = (v[k] ** 2 - v[k2] ** 2) / (a[k] - a[k2])
        if slope != 0 and np.isfinite(slope):
            x = float(np.clip(a[k] - v[k] ** 2 / slope, lo, hi))
    return x, lo, hi


def _status_text(points, grid, i, j, b) -> str:
    """The status names of the tracks at `(omega_i, alpha_j, subspace b)`, e.g. `"max_iterations"`."""
    sel = ((np.asarray(points["omega"]) == grid.omegas[i]) & (np.asarray(points["alpha"]) == grid.alphas[j])
           & (np.asarray(points["branch"]) == b))
    codes = np.asarray(points["status"])[sel]
    names = sorted({STATUS_NAMES.get(int(c), str(c)) if not isinstance(c, str) else c for c in codes})
    return "/".join(names) if names else "not computed"


def point_verdicts(grid: PhaseGrid, points: Mapping[str, np.ndarray], cells: np.ndarray) -> np.ndarray:
    """Per row of `points`: its cell's verdict (`branch_verdicts`) for the branch's row; `"converged (another
    fixed point)"` for a converged row that is not the branch; `"unresolved: <status>"` for one that failed."""
    w_index = {w: i for i, w in enumerate(grid.omegas)}
    a_index = {a: j for j, a in enumerate(grid.alphas)}
    out = []
    for w, a, b, br, conv, st in zip(points["omega"], points["alpha"], points["branch"], points["is_branch"],
                                     points["converged"], points["status"]):
        if bool(br):
            out.append(cells[w_index[float(w)], a_index[float(a)], int(b)])
        elif bool(conv):
            out.append("converged (another fixed point)")
        else:
            out.append("unresolved: " + (st if isinstance(st, str) else STATUS_NAMES.get(int(st), str(st))))
    return np.asarray(out, dtype=object)


def count_fixed_points(grid: PhaseGrid, points: Mapping[str, np.ndarray]) -> np.ndarray:
    """Number of distinct fixed points found per `(omega, alpha, subspace)`, shape `(n_omega, n_alpha, 2)`."""
    nw, na = len(grid.omegas), len(grid.alphas)
    out = np.zeros((nw, na, len(PHASE_BRANCHES)), int)
    w_index = {w: i for i, w in enumerate(grid.omegas)}
    a_index = {a: j for j, a in enumerate(grid.alphas)}
    sel = np.asarray(points["distinct"]).astype(bool)
    for w, a, b in zip(np.asarray(points["omega"])[sel], np.asarray(points["alpha"])[sel],
                       np.asarray(points["branch"])[sel]):
        out[w_index[float(w)], a_index[float(a)], int(b)] += 1
    return out


def derive_table(grid: PhaseGrid, points: Mapping[str, np.ndarray], eps_lin: np.ndarray) -> tuple[dict, dict]:
    """Per-point global minimum and per-omega thresholds (with errors, statuses and spinodals)."""
    get = lambda k: branch_table(grid, points, k)  # noqa: E731
    e, e_err = get("train_loss"), get("train_loss_err")
    err, err_err = get("test_error"), get("test_error_err")
    gain, stab = get("subspace_gain"), get("stability")
    found = np.isfinite(e)
    delta = e[..., 1] - e[..., 0]
    delta_err = np.sqrt(e_err[..., 0] ** 2 + e_err[..., 1] ** 2)
    sem = found[..., 1] & (~found[..., 0] | (delta < 0))
    glob = np.where(found[..., 0] | found[..., 1], np.where(sem, 1, 0), -1)
    pick = lambda arr: np.where(glob == 1, arr[..., 1], np.where(glob == 0, arr[..., 0], np.nan))  # noqa: E731
    na = len(grid.alphas)
    n_fixed = count_fixed_points(grid, points)
    table = dict(
        e_positional=e[..., 0], e_positional_err=e_err[..., 0], e_semantic=e[..., 1], e_semantic_err=e_err[..., 1],
        delta_e=delta, delta_e_err=delta_err,
        err_positional=err[..., 0], err_positional_err=err_err[..., 0],
        err_semantic=err[..., 1], err_semantic_err=err_err[..., 1],
        global_branch=glob, global_test_error=pick(err), global_test_error_err=pick(err_err),
        eps_lin=np.repeat(np.asarray(eps_lin)[:, None], na, 1),
        gain_positional=gain[..., 0], gain_semantic=gain[..., 1],
        stability_positional=stab[..., 0], stability_semantic=stab[..., 1],
        n_fixed_points_positional=n_fixed[..., 0],
        n_fixed_points_semantic=n_fixed[..., 1],
    )
    if "replicon" in points:      # the replicon of each branch and whether RS is stable there (zero smoothing)
        for key in ("replicon", "replicon_regular", "replicon_jump"):
            v = get(key)
            table[f"{key}_positional"], table[f"{key}_semantic"] = v[..., 0], v[..., 1]
        stable = np.asarray(rs_stable(get("replicon_regular"), get("replicon_jump"), get("replicon_regular_err")))
        stable = np.where(found & np.isfinite(get("replicon_regular")), stable.astype(float), np.nan)
        table["rs_stable_positional"], table["rs_stable_semantic"] = stable[..., 0], stable[..., 1]
        table["rs_stable_global"] = pick(stable)
    verdicts, ends = branch_verdicts(grid, points)
    table["verdict_positional"], table["verdict_semantic"] = verdicts[..., 0], verdicts[..., 1]
    a = np.asarray(grid.alphas)
    th = {k: [] for k in ("alpha_c", "alpha_c_err", "alpha_c_status", "alpha_l", "alpha_l_err", "alpha_l_status",
                          "spinodal_positional", "spinodal_semantic")}
    for i in range(len(grid.omegas)):
        both = found[i, :, 0] & found[i, :, 1]
        ac = alpha_c_with_error(a, e[i, :, 0], e[i, :, 1], delta_err[i], both)
        al = alpha_l_with_error(a, err[i, :, 0], err[i, :, 1], e[i, :, 0], e[i, :, 1], eps_lin[i],
                                err_err[i, :, 0], err_err[i, :, 1], both)
        for name, (v, dv, status) in (("alpha_c", ac), ("alpha_l", al)):
            th[name].append(v)
            th[name + "_err"].append(dv)
            th[name + "_status"].append(status)
        # spinodals: where a branch's out-of-subspace gain first rises above 1 (loses stability out of it)
        th["spinodal_positional"].append(first_upcrossing(a, gain[i, :, 0] - 1.0))
        th["spinodal_semantic"].append(first_upcrossing(a, gain[i, :, 1] - 1.0))
    thresholds = {k: np.asarray(v) for k, v in th.items()}
    thresholds["omega"] = np.asarray(grid.omegas)
    thresholds["end_positional"], thresholds["end_semantic"] = ends[:, 0], ends[:, 1]
    return table, thresholds


THRESHOLD_ERRORS = ("alpha_c_err and alpha_l_err are 95% errors of the replica-symmetric thresholds: the quadrature "
                    "error of both branches' fixed points and the interpolation between grid points. They do not "
                    "cover replica symmetry breaking (the positional branch is RS-unstable at lambda = 0.01): "
                    "docs/replica_symmetry.md, 'The error budget of alpha_c', gives the 1RSB shift (phasejax rsb) "
                    "and the empirical bracket (phasejax bracket).")
"""What the thresholds' errors cover, written into a phase diagram's `summary.json`."""

THRESHOLD_COLUMNS = ("omega", "alpha_c", "alpha_l", "alpha_c_err", "alpha_l_err", "alpha_c_status", "alpha_l_status",
                     "spinodal_positional", "spinodal_semantic", "end_positional", "end_semantic")


@dataclasses.dataclass
class PhaseDiagram(ResultBundle):
    """A computed phase diagram (numpy arrays); `write(out_dir)` and `PhaseDiagram.load(out_dir)`.

    Attributes:
      grid: the `PhaseGrid`.
      points: one row per fixed point found (order `(omega, branch, track, alpha)`): the task columns,
        `distinct`, `is_branch`, every column of `phasejax.theory.result_columns` and the replicon's
        (`phasejax.theory.replicon.REPLICON_COLUMNS`: `replicon` at the reference smoothing with `replicon_err`,
        `replicon_regular`, `replicon_jump` with errors, `two_minima`).
      table: per `(omega, alpha)`, arrays `(n_omega, n_alpha)`: both branches' `e_t`, test errors, gains,
        stabilities (with `_err` columns), `delta_e = e_sem - e_pos`, the global branch (0/1, -1: none),
        its test error, `eps_lin`, the number of fixed points found per subspace, each branch's replicon
        (`replicon_<branch>`, its regular part and jump strength; `rs_stable_<branch>` and `rs_stable_global`:
        1 where replica symmetry is locally stable at zero smoothing, `phasejax.theory.replicon.rs_stable`),
        and each subspace's verdict
        (`verdict_positional`, `verdict_semantic`: converged, absent with where the branch collapses, or
        unresolved; `branch_verdicts`).
      thresholds: per `omega`: `alpha_c`, `alpha_l` with `_err` (95% half-widths) and `_status`
        (`in_grid`, `below_grid`, `above_grid`, `undetermined`), the spinodals, and where each branch ends by
        collapsing onto its invariant plane (`end_positional`, `end_semantic`; NaN: not in the grid).
      config: the run's configuration (JSON).
      command: the command line that computed it (shell-quoted), or `None` (a diagram computed from Python).
      versions: the package versions that computed it (`phasejax.bench.versions`), or `None`; written beside
        `command` in summary.json.
    """

    grid: PhaseGrid
    points: dict
    table: dict
    thresholds: dict
    config: dict
    command: str | None = None
    versions: dict | None = None

    FILES = (
        BundleFile("points.csv", required=dict(omega="number", alpha="number", branch="str", status="str",
                                               converged="bool", distinct="bool", is_branch="bool",
                                               train_loss="number", test_error="number"), min_rows=1),
        BundleFile("diagram.csv", field="table", required=dict(omega="number", alpha="number", delta_e="number")),
        BundleFile("thresholds.csv", columns=THRESHOLD_COLUMNS,
                   required=dict(omega="number", alpha_c="number", alpha_l="number")),
        BundleFile("summary.json", required=("config",)),
        BundleFile("grid.json", required=("alphas", "omegas")),
    )
    """`points.csv`, `diagram.csv`, `thresholds.csv`, `summary.json` (the config and a digest), `grid.json`."""

    def to_files(self) -> dict:
        pts = dict(self.points)
        pts["branch"] = np.asarray(PHASE_BRANCHES)[np.asarray(pts["branch"], int)]
        pts["status"] = status_names(pts["status"])
        first = ["omega", "alpha", "branch", "track", "distinct", "is_branch", "verdict"]
        W, A = np.meshgrid(self.grid.omegas, self.grid.alphas, indexing="ij")
        diag = dict(omega=W.ravel(), alpha=A.ravel())
        for k, v in self.table.items():
            v = np.asarray(v).ravel()
            diag[k] = np.where(v >= 0, np.asarray(PHASE_BRANCHES + ("none",))[np.clip(v, -1, 1)], "none") \
                if k == "global_branch" else v
        from phasejax import __version__

        th = self.thresholds
        summary = dict(
            config=self.config, version=__version__, status_names=STATUS_NAMES,
            thresholds={k: [None if isinstance(v, float) and not np.isfinite(v) else
                            (v if isinstance(v, str) else float(v)) for v in np.asarray(th[k]).tolist()]
                        for k in THRESHOLD_COLUMNS},
            n_fixed_points=int(np.sum(np.asarray(self.points["distinct"]).astype(bool))),
            n_unconverged_branches=int(np.sum(np.asarray(self.table["global_branch"]) < 0)),
            verdicts={kind: int(sum(np.sum(np.char.startswith(np.asarray(self.table[f"verdict_{b}"], str), kind))
                                    for b in PHASE_BRANCHES)) for kind in ("converged", "absent", "unresolved")},
            max_relative_error=dict(
                q=_max_rel(self.points, "q"), m=_max_rel(self.points, "m"), V=_max_rel(self.points, "V"),
                theta=_max_rel(self.points, "theta"), train_loss_abs=_max_abs(self.points, "train_loss_err")),
            threshold_errors=THRESHOLD_ERRORS,
        )
        if self.command is not None:
            summary["command"] = self.command
        if self.versions is not None:
            summary["versions"] = self.versions
        return dict(points={k: pts[k] for k in first + [k for k in pts if k not in first] if k in pts},
                    table=diag, thresholds=self.thresholds, summary=summary,
                    grid=dict(alphas=list(self.grid.alphas), omegas=list(self.grid.omegas)))

    @classmethod
    def from_files(cls, contents: dict, out_dir: str) -> "PhaseDiagram":
        g = contents["grid"]
        if not all(isinstance(g.get(k), list) and g.get(k) for k in ("alphas", "omegas")):
            raise ValueError(f"{os.path.join(out_dir, 'grid.json')} must hold non-empty lists 'alphas' and 'omegas'")
        grid = PhaseGrid(tuple(g["alphas"]), tuple(g["omegas"]))
        pts = contents["points"]
        pts["branch"] = np.asarray([PHASE_BRANCHES.index(b) for b in pts["branch"]], np.int32)
        pts["status"] = np.asarray([status_code(s) for s in pts["status"]], np.int32)
        for k in ("distinct", "is_branch", "converged"):
            pts[k] = pts[k].astype(bool)
        shape = (len(grid.omegas), len(grid.alphas))
        for name, rows, need in (("diagram.csv", len(contents["table"]["omega"]), shape[0] * shape[1]),
                                 ("thresholds.csv", len(contents["thresholds"]["omega"]), shape[0])):
            if rows < need:
                raise ValueError(f"{os.path.join(out_dir, name)} has {rows} data rows, fewer than the {need} of "
                                 f"the grid in grid.json")
        table = {}
        for k, v in contents["table"].items():
            if k in ("omega", "alpha"):
                continue
            if k == "global_branch":
                v = np.asarray([(PHASE_BRANCHES + ("none",)).index(s) if s != "none" else -1 for s in v])
            table[k] = np.asarray(v).reshape(shape)
        return cls(grid=grid, points=pts, table=table, thresholds=contents["thresholds"],
                   config=contents["summary"]["config"], command=contents["summary"].get("command"),
                   versions=contents["summary"].get("versions"))

    def unresolved(self) -> list[tuple[float, float, str, str]]:
        """`(omega, alpha, subspace, verdict)` of every cell whose subspace has neither a converged fixed point
        nor a verdict of absence (empty when the diagram has no holes)."""
        out = []
        if any(f"verdict_{b}" not in self.table for b in PHASE_BRANCHES):     # a diagram written before verdicts
            cells = branch_verdicts(self.grid, self.points)[0]
            table = {f"verdict_{b}": cells[..., k] for k, b in enumerate(PHASE_BRANCHES)}
        else:
            table = self.table
        for b in PHASE_BRANCHES:
            v = np.asarray(table[f"verdict_{b}"], str)
            for i, j in zip(*np.nonzero(np.char.startswith(v, "unresolved"))):
                out.append((self.grid.omegas[i], self.grid.alphas[j], b, str(v[i, j])))
        return sorted(out)


def _max_rel(points, key) -> float | None:
    """The largest `error / |value|` of `key` over the branch points whose value is resolved (larger than its
    error): a coordinate held at zero, or at rounding level on a collapsed branch, has no relative error."""
    v, e = np.asarray(points[key], float), np.asarray(points.get(key + "_err", np.nan), float)
    sel = np.asarray(points["is_branch"]).astype(bool) & np.isfinite(e) & (np.abs(v) > np.maximum(e, 1e-12))
    return float(np.max(np.abs(e[sel] / v[sel]))) if sel.any() else None


def _max_abs(points, key) -> float | None:
    e = np.asarray(points[key], float)
    sel = np.asarray(points["is_branch"]).astype(bool) & np.isfinite(e)
    return float(np.max(np.abs(e[sel]))) if sel.any() else None


def diagram_config(grid: PhaseGrid, params: TiedAttentionParams, scheme, config: PhaseConfig) -> dict:
    """The complete configuration of a phase-diagram run (JSON; functions by content in the fingerprint)."""
    cfg = dict(kind="tied_attention_phase_diagram", alphas=list(grid.alphas), omegas=list(grid.omegas),
               sigma=np.asarray(params.sigma).tolist(), lam=float(params.lam), A=np.asarray(params.A).tolist(),
               C=np.asarray(params.C).tolist(), r=params.r, t=params.t, target=params.target,
               student=params.student, quadrature=dict(kind=type(scheme).__name__, **scheme_fields(scheme)),
               seeds={b: [list(s) for s in config.seeds[b]] for b in PHASE_BRANCHES},
               se_config=dataclasses.asdict(config.se), map_approximation=dataclasses.asdict(config.approximation))
    if config.replicon:
        cfg["replicon"] = REPLICON_CONFIG
    return cfg


def scheme_fields(scheme) -> dict:
    """A scheme's settings (JSON; an array field by a digest of its content), for a run's configuration."""
    out = {}
    for f in dataclasses.fields(scheme):
        v = getattr(scheme, f.name)
        if hasattr(v, "shape"):
            import hashlib

            out[f.name + "_sha"] = hashlib.sha256(np.ascontiguousarray(np.asarray(v)).tobytes()).hexdigest()[:16]
        elif dataclasses.is_dataclass(v):
            out[f.name] = scheme_fields(v)
        else:
            out[f.name] = v
    return out


def phase_diagram(
    grid: PhaseGrid,
    params: TiedAttentionParams,
    *,
    quadrature=None,
    config: PhaseConfig = PhaseConfig(),
    options: RunOptions | None = None,
) -> PhaseDiagram | None:
    """Follow the fixed points of both subspaces along alpha for every omega and derive the phase diagram.

    Args:
      grid: `PhaseGrid` (validated before any compute).
      params: model parameters; `alpha` and `omega` are replaced per point.
      quadrature: scheme (default `default_scheme(params)`: converged, with replicas for error bars).
      config: `PhaseConfig` (census seeds per subspace, `SEConfig`, `MapApproximation`).
      options: `phasejax.sweep.RunOptions` (run directory: resume; chunk size in rows; devices; hosts).
    Returns:
      `PhaseDiagram`, or `None` while chunks are missing (`max_chunks`, or other hosts).
    """
    if not isinstance(grid, PhaseGrid):
        raise ValueError(f"grid must be a PhaseGrid, got {type(grid).__name__}")
    if not isinstance(config, PhaseConfig):
        raise ValueError(f"config must be a PhaseConfig, got {type(config).__name__}")
    with float64_scope():
        validate_params(params)
        scheme = resolve_scheme(quadrature, params)
        cfg = diagram_config(grid, params, scheme, config)
        tasks = grid.tasks()
        fn = make_row_fn(grid, params, scheme, config)
        rows = run_chunked(fn, tasks, cfg, run_options(options), compiler_options=xla.compiler_options(),
                           store_program=True)
        if rows is None:
            return None
        rows = {**tasks, **rows}
        points = points_table(grid, rows)
        eps_lin = np.asarray(jax.vmap(lambda w: linear_baseline_error(params.replace(omega=w)))(
            jnp.asarray(grid.omegas)))
    table, thresholds = derive_table(grid, points, eps_lin)
    points["verdict"] = point_verdicts(grid, points, np.stack([table["verdict_positional"],
                                                               table["verdict_semantic"]], -1))
    cfg_json = {k: (v if not callable(v) else getattr(v, "__qualname__", str(v))) for k, v in cfg.items()}
    return PhaseDiagram(grid=grid, points=points, table=table, thresholds=thresholds, config=cfg_json)
