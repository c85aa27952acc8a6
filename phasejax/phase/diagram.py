"""The positional-vs-semantic phase diagram of tied attention (issue 3; spec sections 4-6).

`phase_diagram` solves the state evolution on both branches (positional,
semantic) at every `(alpha, omega)` of a grid, chunk by chunk (each chunk one
compiled vmapped call, sharded over devices, written atomically, resumable),
then derives per point the global minimum (lower training loss), `Delta e_t`,
the linear baseline, and per `omega` the thresholds `alpha_c` and `alpha_l`.

Example (a small grid; about a minute on a laptop CPU):
  >>> from phasejax.phase import PhaseGrid, phase_diagram
  >>> from phasejax.theory import make_params, gauss_hermite
  >>> grid = PhaseGrid.from_ranges(alphas=[0.4, 0.6, 0.8, 1.0], omegas=[0.0])
  >>> pd = phase_diagram(grid, make_params(1.0, 0.0), quadrature=gauss_hermite(4, 6),
  ...                    run_dir="/tmp/pd_demo")          # doctest: +SKIP
  >>> pd.thresholds["alpha_c"]                           # doctest: +SKIP
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np

import phasejax
from phasejax.io import atomic_write_json, atomic_write_text
from phasejax.sweep import RunOptions, run_chunked, run_options
from phasejax.phase.thresholds import alpha_c, alpha_l
from phasejax.theory import (
    SEConfig,
    TiedAttentionParams,
    branch_init,
    gauss_hermite,
    linear_baseline_error,
    stack_inits,
    validate_params,
)
from phasejax.theory.state_evolution import STATUS_NAMES, _solve, result_columns

PHASE_BRANCHES = ("positional", "semantic")


@dataclasses.dataclass(frozen=True)
class PhaseGrid:
    """An `(alpha, omega)` grid: strictly increasing `alphas > 0`, `omegas` in [0, 1]."""

    alphas: tuple
    omegas: tuple

    def __post_init__(self):
        a = np.asarray(self.alphas, float)
        w = np.asarray(self.omegas, float)
        if a.ndim != 1 or a.size == 0 or w.ndim != 1 or w.size == 0:
            raise ValueError("alphas and omegas must be non-empty 1-d sequences")
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
        return cls(tuple(float(x) for x in alphas), tuple(float(x) for x in omegas))

    def tasks(self) -> dict[str, np.ndarray]:
        """Flat task table, order `(omega, alpha, branch)`, branch code 0 positional / 1 semantic."""
        w, a, b = np.meshgrid(self.omegas, self.alphas, np.arange(len(PHASE_BRANCHES)), indexing="ij")
        return dict(omega=w.ravel(), alpha=a.ravel(), branch=b.ravel().astype(np.int32))


def make_chunk_fn(params: TiedAttentionParams, quadrature, config: SEConfig):
    """Pure batch function `{alpha, omega, branch} (C,) -> columns (C,)` for `run_chunked`."""
    inits = stack_inits([branch_init(b, params) for b in PHASE_BRANCHES])

    def one(alpha, omega, code):
        p = params.replace(alpha=alpha, omega=omega)
        init = jax.tree_util.tree_map(lambda x: x[code], inits)
        return result_columns(_solve(p, init, quadrature, config), p)

    def fn(chunk):
        return jax.vmap(one)(jnp.asarray(chunk["alpha"]), jnp.asarray(chunk["omega"]), jnp.asarray(chunk["branch"]))

    return fn


@dataclasses.dataclass
class PhaseDiagram:
    """Outputs of `phase_diagram`, as numpy arrays.

    Attributes:
      grid: the `PhaseGrid`.
      points: per task (order `(omega, alpha, branch)`): `omega, alpha, branch`
        and every column of the SE result (order parameters, conjugates,
        errors, losses, residual, iterations, status, converged, ...).
      table: per `(omega, alpha)`, shape `(n_omega, n_alpha)`: `e_positional`,
        `e_semantic`, `delta_e` (= e_sem - e_pos), `err_positional`,
        `err_semantic`, `global_branch` (0/1), `global_test_error`, `eps_lin`,
        `converged_positional`, `converged_semantic`, `collapsed` (the two
        branches coincide).
      thresholds: `omega, alpha_c, alpha_l` (NaN where absent in the grid).
      config: the run's configuration (JSON-serialisable).
    """

    grid: PhaseGrid
    points: dict
    table: dict
    thresholds: dict
    config: dict

    def write(self, run_dir: str) -> list[str]:
        """Write `points.csv`, `diagram.csv`, `thresholds.csv`, `summary.json`; returns the paths."""
        os.makedirs(run_dir, exist_ok=True)
        paths = []
        names = list(self.points)
        rows = [[_fmt(self.points[k][i]) if k != "branch" else PHASE_BRANCHES[int(self.points[k][i])]
                 for k in names] for i in range(len(self.points["alpha"]))]
        paths.append(_write_csv(os.path.join(run_dir, "points.csv"), names, rows))
        W, A = np.meshgrid(self.grid.omegas, self.grid.alphas, indexing="ij")
        tnames = ["omega", "alpha"] + list(self.table)
        cols = [W.ravel(), A.ravel()] + [np.asarray(self.table[k]).ravel() for k in self.table]
        trows = [[_fmt(c[i]) if n != "global_branch" else PHASE_BRANCHES[int(c[i])] for n, c in zip(tnames, cols)]
                 for i in range(W.size)]
        paths.append(_write_csv(os.path.join(run_dir, "diagram.csv"), tnames, trows))
        th = self.thresholds
        hrows = [[_fmt(th["omega"][i]), _fmt_opt(th["alpha_c"][i]), _fmt_opt(th["alpha_l"][i])]
                 for i in range(len(th["omega"]))]
        paths.append(_write_csv(os.path.join(run_dir, "thresholds.csv"), ["omega", "alpha_c", "alpha_l"], hrows))
        summary = dict(config=self.config, version=phasejax.__version__,
                       thresholds={k: [None if not np.isfinite(v) else float(v) for v in th[k]] for k in th},
                       n_unconverged=int(np.sum(~self.points["converged"].astype(bool))),
                       status_names=STATUS_NAMES)
        return paths + [atomic_write_json(os.path.join(run_dir, "summary.json"), summary)]


def _fmt(x) -> str:
    x = np.asarray(x)
    if x.dtype == bool:
        return "1" if bool(x) else "0"
    if np.issubdtype(x.dtype, np.integer):
        return str(int(x))
    return repr(float(x))


def _fmt_opt(x) -> str:
    return "" if not np.isfinite(x) else repr(float(x))


def _write_csv(path: str, header, rows) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())
    return path


def by_branch(grid: PhaseGrid, points: Mapping[str, np.ndarray], key: str) -> np.ndarray:
    """Column `key` of the task table as `(n_omega, n_alpha, n_branch)` (task order of `PhaseGrid.tasks`)."""
    return np.asarray(points[key]).reshape(len(grid.omegas), len(grid.alphas), len(PHASE_BRANCHES))


def derive_table(grid: PhaseGrid, points: Mapping[str, np.ndarray], eps_lin: np.ndarray) -> tuple[dict, dict]:
    """Per-point global minimum and per-omega thresholds from the branch solutions."""
    nw, na = len(grid.omegas), len(grid.alphas)
    get = lambda k: by_branch(grid, points, k)
    e, err, conv = get("train_loss"), get("test_error"), get("converged").astype(bool)
    q, m, th = get("q"), get("m"), get("theta")
    both = conv[..., 0] & conv[..., 1]
    delta = e[..., 1] - e[..., 0]
    glob = np.where(conv[..., 1] & (~conv[..., 0] | (delta < 0)), 1, 0)
    collapsed = (np.abs(q[..., 0] - q[..., 1]) + np.abs(np.abs(m[..., 0]) - np.abs(m[..., 1]))
                 + np.abs(th[..., 0] - th[..., 1])) < 1e-6
    table = dict(
        e_positional=e[..., 0], e_semantic=e[..., 1], delta_e=delta,
        err_positional=err[..., 0], err_semantic=err[..., 1], global_branch=glob,
        global_test_error=np.take_along_axis(err, glob[..., None], -1)[..., 0],
        eps_lin=np.repeat(np.asarray(eps_lin)[:, None], na, 1),
        converged_positional=conv[..., 0], converged_semantic=conv[..., 1], collapsed=collapsed,
    )
    a = np.asarray(grid.alphas)
    ac = [alpha_c(a, e[i, :, 0], e[i, :, 1], both[i]) for i in range(nw)]
    al = [alpha_l(a, err[i, :, 0], err[i, :, 1], e[i, :, 0], e[i, :, 1], eps_lin[i], both[i]) for i in range(nw)]
    thresholds = dict(omega=np.asarray(grid.omegas), alpha_c=np.asarray(ac), alpha_l=np.asarray(al))
    return table, thresholds


def phase_diagram(
    grid: PhaseGrid,
    params: TiedAttentionParams,
    *,
    quadrature=None,
    se_config: SEConfig = SEConfig(),
    options: RunOptions | None = None,
) -> PhaseDiagram | None:
    """Solve both branches on every grid point and derive the phase diagram.

    Args:
      grid: `PhaseGrid` (validated before any compute).
      params: model parameters; `alpha` and `omega` are replaced per point.
      quadrature: rule in `L (r + t)` dimensions (default Gauss-Hermite, 8 per dimension).
      se_config: `SEConfig` for every solve.
      options: `phasejax.sweep.RunOptions` (run directory: a re-run with the same
        config resumes, a different config is refused; chunk size, devices, hosts, progress).
    Returns:
      `PhaseDiagram`, or `None` if stopped early (`max_chunks`) or if other
      processes' chunks are not finished yet.
    """
    if not isinstance(grid, PhaseGrid):
        raise ValueError(f"grid must be a PhaseGrid, got {type(grid).__name__}")
    validate_params(params)
    dim = params.L * (params.r + params.t)
    quadrature = gauss_hermite(dim, 8) if quadrature is None else quadrature
    if quadrature.dim != dim:
        raise ValueError(f"quadrature has dimension {quadrature.dim}, but L (r + t) = {dim}")
    config = dict(
        kind="tied_attention_phase_diagram",
        alphas=list(grid.alphas), omegas=list(grid.omegas),
        sigma=np.asarray(params.sigma).tolist(), lam=float(params.lam), A=np.asarray(params.A).tolist(),
        C=np.asarray(params.C).tolist(), r=params.r, t=params.t,
        target=getattr(params.target, "__qualname__", str(params.target)),
        student=getattr(params.student, "__qualname__", str(params.student)),
        quadrature=dict(size=int(quadrature.size), dim=int(quadrature.dim),
                        points_sha=_digest(quadrature.points)),
        se_config=dataclasses.asdict(se_config),
    )
    tasks = grid.tasks()
    fn = make_chunk_fn(params, quadrature, se_config)
    points = run_chunked(fn, tasks, config, run_options(options))
    if points is None:
        return None
    points = {**tasks, **points}
    eps_lin = np.asarray(jax.vmap(lambda w: linear_baseline_error(params.replace(omega=w)))(
        jnp.asarray(grid.omegas)))
    table, thresholds = derive_table(grid, points, eps_lin)
    return PhaseDiagram(grid=grid, points=points, table=table, thresholds=thresholds, config=config)


def _digest(x) -> str:
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(np.asarray(x)).tobytes()).hexdigest()[:16]
