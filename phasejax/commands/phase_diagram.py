"""Phase diagram of positional vs semantic tied attention: the library's main job.

    phasejax phase-diagram                                # the main job: the map on 23 x 11 points and the lines
                                                          # at 51 omegas, into runs/phase_diagram
    phasejax phase-diagram --alpha-min 0.1 --n-alpha 40 --omega-max 0.95 --n-omega 20 --tracks 2 --out runs/paper
                                                          # the paper's full diagram, two census tracks
    phasejax phase-diagram --n-alpha 12 --n-omega 4 --out runs/quick    # a quick one
    phasejax phase-diagram --out results/phase_diagram --overwrite      # rewrite the committed main job

Writes to --out (default runs/phase_diagram; a folder holding another configuration's results is refused
unless --overwrite): points.csv (every fixed point found, with errors, stability, status), diagram.csv (per point:
both branches, Delta e_t with its error, the global minimum, the linear baseline, gains, number of fixed
points), thresholds.csv (omega, alpha_c, alpha_l with 95% errors and statuses, spinodals), summary.json,
grid.json, phase_map.png and a slice plot; and the lines solved directly (`phasejax boundary`) at --n-boundary
omegas over the same range: boundary.csv (with the grid's thresholds as a cross-check column), boundary.json.
A killed run resumes from --run-dir (the lines from its `boundary` folder). Every cell gets a verdict per
subspace (converged; absent, with where the branch collapses onto its invariant plane; unresolved): the
command exits 1 when any cell is unresolved.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import (
    RunError, UsageError, grid_range, nonnegative_int, positive_int, run_options_from, unit_interval, was_given,
)

NAME = "phase-diagram"
HELP = "the (alpha, omega) phase diagram with thresholds, error bars and spinodals (main job)"


def add_arguments(ap) -> None:
    flags.add_range(ap, "alpha", 0.3, 2.5, 23)
    flags.add_range(ap, "omega", 0.0, 0.5, 11, kind=unit_interval)
    ap.add_argument("--n-boundary", type=nonnegative_int, default=51,
                    help="omegas of the lines solved directly over the omega range (0: the grid's thresholds only)")
    flags.add_model(ap, A=True)
    ap.add_argument("--tracks", type=positive_int, default=1,
                    help="fixed-point tracks (census seeds) per subspace, followed along alpha")
    ap.add_argument("--slice-omega", type=unit_interval, default=0.3, help="omega of the slice plot")
    flags.add_sweep(ap, NAME, chunk_size=None)   # None: `auto_chunk_rows` (2 on a CPU, as many as fit on an accelerator)


MAX_POINTS = 10**6
"""The largest grid (`n_alpha * n_omega`) the command accepts: about 2 s a point and subspace on a CPU core."""


ROW_BYTES = 6e7
"""Memory of one row program (one omega, one subspace, one track) with the default quadrature, whatever its number
of alphas: the error bars and the replicon come from passes of the solver's own loop, per point inside the row's
scan, so only the outputs grow with the row. XLA's memory analysis of the compiled chunk of one 40-alpha row with
the replicon columns on a CPU: 46 MB (`phasejax bench --parts program`; the slow test of
`tests/theory/test_solver.py` checks that a longer row needs no more)."""

ALPHA_BYTES = 1e4
"""The outputs of one point of a row (a few hundred numbers), with room to spare."""


def row_memory_estimate(n_alpha: int, side_by_side: int = 1) -> float:
    """Bytes of `side_by_side` row programs of `n_alpha` alphas, about (`ROW_BYTES`, `ALPHA_BYTES`). A CPU runs the
    rows and tracks of a chunk one after the other (1); an accelerator side by side (rows times tracks)."""
    return (ROW_BYTES + ALPHA_BYTES * n_alpha) * side_by_side


CPU_CHUNK_ROWS = 2
"""Rows per compiled call on a CPU, where a chunk's rows run one after the other (a chunk is the unit of resume)."""


def auto_chunk_rows(n_alpha: int, n_rows: int, n_tracks: int = 1, *, platform: str | None = None,
                    memory: float | None = None, share: float = 0.4) -> int:
    """Rows (omega x subspace) per compiled call when `--chunk-size` is not given: `CPU_CHUNK_ROWS` on a CPU;
    on an accelerator, where a chunk's rows run side by side, as many as fit in `share` of its memory
    (`row_memory_estimate`), at most all `n_rows`, split into chunks of equal size."""
    import jax

    from phasejax.sweep import available_memory

    if n_rows < 1:
        raise ValueError(f"n_rows must be at least 1, got {n_rows}")
    if (platform or jax.default_backend()) == "cpu":
        return min(CPU_CHUNK_ROWS, n_rows)
    have = available_memory() if memory is None else memory
    fit = max(1, int(share * have // row_memory_estimate(n_alpha, n_tracks)))
    n_chunks = -(-n_rows // min(fit, n_rows))
    return -(-n_rows // n_chunks)


def check_size(args, n_tracks: int) -> None:
    """Refuse, before any compile, a grid whose row programs would not fit in memory (`RunError` with the
    estimate and the flags that shrink it) or that is beyond `MAX_POINTS` (`UsageError`)."""
    from phasejax.sweep import available_memory

    points = args.n_alpha * args.n_omega
    if points > MAX_POINTS:
        raise UsageError(f"{args.n_alpha} x {args.n_omega} = {points} points is beyond {MAX_POINTS} (at about "
                         f"2 s a point and subspace); shrink --n-alpha or --n-omega")
    import jax

    rows = min(args.chunk_size, 2 * args.n_omega)
    side_by_side = 1 if jax.default_backend() == "cpu" else rows * n_tracks
    need = row_memory_estimate(args.n_alpha, side_by_side)
    have = available_memory()
    if need > have:
        raise RunError(f"{side_by_side} row program{'s' if side_by_side > 1 else ''} of {args.n_alpha} alphas "
                       f"need about {need / 2**30:.3g} GiB, {have / 2**30:.3g} GiB available; shrink --n-alpha"
                       + (" (or --chunk-size or --tracks)" if side_by_side > 1 else ""))


def slice_omega(args, omegas) -> float:
    """The grid omega of the slice plot: `--slice-omega` when it is on the grid (`UsageError` listing the grid's
    omegas when an explicit one is not); without the flag, the grid omega nearest to its default."""
    import numpy as np

    w = np.asarray(omegas, float)
    near = int(np.argmin(np.abs(w - args.slice_omega)))
    if was_given(args, "slice_omega") and not np.isclose(w[near], args.slice_omega, rtol=0, atol=1e-9):
        raise UsageError(f"--slice-omega {args.slice_omega:g} is not an omega of the grid "
                         f"({', '.join(f'{v:g}' for v in w[:12])}{' ...' if len(w) > 12 else ''}); pass one of them")
    return float(w[near])


def run(args) -> int:
    import numpy as np

    alphas = grid_range(args, "alpha", args.n_alpha, digits=None)
    omegas = grid_range(args, "omega", args.n_omega, digits=None)
    w_slice = slice_omega(args, omegas)
    from phasejax.phase import PhaseConfig, PhaseGrid, phase_diagram
    from phasejax.plotting import plot_omega_slice, plot_phase_map
    from phasejax.theory import make_params
    from phasejax.theory.census import CENSUS_SEEDS

    grid = PhaseGrid.from_ranges(alphas, omegas)
    if max(args.tracks, 1) > min(len(CENSUS_SEEDS["positional"]), len(CENSUS_SEEDS["semantic"])):
        raise UsageError(f"--tracks must be at most {min(len(v) for v in CENSUS_SEEDS.values() if len(v) > 1)}")
    config = PhaseConfig(seeds={b: CENSUS_SEEDS[b][: args.tracks] for b in ("positional", "semantic")})
    params = make_params(1.0, 0.0, sigma=args.sigma, lam=args.lam, A=np.reshape(args.A, (2, 2)))
    if args.chunk_size is None:
        args.chunk_size = auto_chunk_rows(args.n_alpha, 2 * args.n_omega, config.n_tracks)
    options = run_options_from(args, args.out)
    check_size(args, config.n_tracks)
    t0 = time.perf_counter()
    pd = phase_diagram(grid, params, config=config, options=options)
    if pd is None:
        print("not every chunk is finished yet (other processes, or --max-chunks); run again to assemble")
        return 0
    boundary = None
    if args.n_boundary:
        from phasejax.phase.boundary import BoundaryConfig, phase_boundary, with_grid

        w_lines = np.linspace(args.omega_min, args.omega_max, args.n_boundary)
        boundary = phase_boundary(params, w_lines, config=BoundaryConfig(alpha_min=args.alpha_min, alpha_max=max(
            args.alpha_max, 3.0)), options=flags.sub_options(options, "boundary"))
        if boundary is None:
            return flags.not_finished(options)
        boundary = dataclasses.replace(with_grid(boundary, pd.thresholds), **flags.provenance())
    elapsed = time.perf_counter() - t0
    paths = dataclasses.replace(pd, **flags.provenance()).write(args.out)
    if boundary is not None:
        paths += boundary.write(args.out)
    paths.append(plot_phase_map(pd, os.path.join(args.out, "phase_map.png"), boundary))
    paths.append(plot_omega_slice(pd, w_slice, os.path.join(args.out, f"slice_omega_{w_slice:g}.png")))
    print(f"{len(grid.alphas)} x {len(grid.omegas)} points, 2 subspaces x {config.n_tracks} tracks"
          + (f", and the lines at {args.n_boundary} omegas" if boundary is not None else "") + f", in {elapsed:.1f} s")
    th = pd.thresholds
    for i, om in enumerate(th["omega"]):
        print(f"omega={om:.3f}  alpha_c={th['alpha_c'][i]:.4f} +- {th['alpha_c_err'][i]:.4f} ({th['alpha_c_status'][i]})"
              f"  alpha_l={th['alpha_l'][i]:.4f} +- {th['alpha_l_err'][i]:.4f} ({th['alpha_l_status'][i]})")
    print("wrote:\n  " + "\n  ".join(paths))
    holes = pd.unresolved()
    if holes:
        listed = "; ".join(f"omega={w:g} alpha={a:g} {b}: {v}" for w, a, b, v in holes[:8])
        more = f" and {len(holes) - 8} more" if len(holes) > 8 else ""
        print(f"phasejax phase-diagram: error: {len(holes)} cells have neither a converged fixed point nor a "
              f"verdict of absence ({listed}{more}); see the verdict columns of diagram.csv", file=sys.stderr)
        return 1
    return 0
