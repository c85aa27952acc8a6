"""Benchmark figures of phase diagrams: the default `phasejax phase-diagram` (`main_job`) and the paper's
diagram, run in full or projected from a few omega rows (`paper_diagram`)."""

from __future__ import annotations

import os
import tempfile

import numpy as np

from phasejax.benchmarks.record import figure_entry, rule_name, status_counts, timed

PAPER_GRID = dict(alpha_min=0.1, alpha_max=2.5, n_alpha=40, omega_min=0.0, omega_max=0.95, n_omega=20, tracks=1)


def main_job_settings() -> dict:
    """The `phasejax phase-diagram` defaults (read from the command's own flags, so the two cannot drift)."""
    import argparse

    from phasejax.commands import phase_diagram as command

    ap = argparse.ArgumentParser()
    command.add_arguments(ap)
    a = ap.parse_args([])
    return dict(alphas=np.linspace(a.alpha_min, a.alpha_max, a.n_alpha).tolist(),
                omegas=np.linspace(a.omega_min, a.omega_max, a.n_omega).tolist(), tracks=a.tracks,
                chunk_size=a.chunk_size, sigma=a.sigma, lam=a.lam, A=list(a.A), n_boundary=a.n_boundary)


def time_phase_diagram(alphas, omegas, *, tracks: int = 1, chunk_size: int | None = None, sigma: float = 0.5,
                       lam: float = 0.01, A=(0.6, 0.4, 0.4, 0.6), quadrature=None, progress: bool = False) -> dict:
    """`phase_diagram` on `alphas x omegas` (both subspaces, `tracks` census seeds each) in a temporary run
    directory, compilation included: seconds, compile seconds, solves and their statuses. `chunk_size` rows
    per compiled call (None: the command's `auto_chunk_rows`)."""
    from phasejax.commands.phase_diagram import auto_chunk_rows
    from phasejax.phase import PHASE_BRANCHES, PhaseConfig, PhaseGrid, phase_diagram
    from phasejax.sweep import RunOptions
    from phasejax.theory import make_params
    from phasejax.theory.census import CENSUS_SEEDS

    grid = PhaseGrid.from_ranges(np.asarray(alphas, np.float64), np.asarray(omegas, np.float64))
    config = PhaseConfig(seeds={b: CENSUS_SEEDS[b][:tracks] for b in PHASE_BRANCHES})
    params = make_params(1.0, 0.0, sigma=sigma, lam=lam, A=np.reshape(A, (2, 2)))
    if chunk_size is None:
        chunk_size = auto_chunk_rows(len(grid.alphas), 2 * len(grid.omegas), tracks)
    with tempfile.TemporaryDirectory(prefix="phasejax-bench-") as run_dir:
        options = RunOptions(run_dir=run_dir, chunk_size=chunk_size, progress=progress)
        pd, seconds, compile_s = timed(
            lambda: phase_diagram(grid, params, quadrature=quadrature, config=config, options=options))
    status = np.asarray(pd.points["status"])
    return dict(seconds=seconds, compile_seconds=compile_s, solves=int(status.size), statuses=status_counts(status),
                grid=dict(n_alpha=len(grid.alphas), alpha_min=float(grid.alphas[0]), alpha_max=float(grid.alphas[-1]),
                          omegas=[float(w) for w in grid.omegas], subspaces=list(PHASE_BRANCHES), tracks=tracks),
                chunk_size=chunk_size)


def run_command(argv, *, cache: str | None = None, host_devices: int | None = None) -> dict:
    """`phasejax <argv>` in a fresh process: its wall seconds, exit code and the last lines it printed. `cache`:
    JAX's persistent compilation cache folder (`None`: none, every program compiled afresh); `host_devices`: CPU
    devices to simulate (`--host-devices`)."""
    import subprocess
    import sys
    import time

    from phasejax.benchmarks.record import repository_root

    env = dict(os.environ, PHASEJAX_COMPILE_CACHE="1" if cache else "0")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    if cache:
        env["JAX_COMPILATION_CACHE_DIR"] = cache
    env["PYTHONPATH"] = repository_root() + os.pathsep + env.get("PYTHONPATH", "")
    extra = ["--host-devices", str(host_devices)] if host_devices else []
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "phasejax.cli", *argv, *extra], capture_output=True, text=True, env=env,
                         cwd=repository_root())
    seconds = time.perf_counter() - t0
    if out.returncode not in (0, 1):
        raise RuntimeError(f"phasejax {' '.join(argv)} failed: {out.stderr.strip().splitlines()[-1:]}")
    return dict(seconds=seconds, returncode=out.returncode, tail=out.stdout.strip().splitlines()[-3:])


def _statuses(path: str, column: str) -> dict:
    from phasejax.io import read_csv

    values, counts = np.unique(np.asarray(read_csv(path)[column], str), return_counts=True)
    return {str(v): int(c) for v, c in zip(values, counts)}


def main_job(*, host_devices: int | None = None, quick: bool = False) -> dict:
    """The main job as a newcomer runs it (`phasejax phase-diagram` with its defaults: the map on the grid and the
    lines), in a fresh process with no compilation cache: wall seconds, everything included. `quick`: a 4 x 2 grid
    and 5 omegas of lines."""
    args = ["--n-alpha", "4", "--n-omega", "2", "--n-boundary", "5"] if quick else []
    with tempfile.TemporaryDirectory(prefix="phasejax-bench-") as out:
        run = run_command(["phase-diagram", "--out", os.path.join(out, "pd"), "--no-progress", *args],
                          host_devices=host_devices)
        points = _statuses(os.path.join(out, "pd", "points.csv"), "status")
        lines = _statuses(os.path.join(out, "pd", "boundary.csv"), "alpha_c_status")
    s = main_job_settings()
    return figure_entry(
        "main_job",
        f"the main job, `phasejax phase-diagram` at its defaults ({'shrunk: ' + ' '.join(args) if quick else 'the map on ' + str(len(s['alphas'])) + ' x ' + str(len(s['omegas'])) + ' points and the lines at ' + str(s['n_boundary']) + ' omegas'})"
        f"{', ' + str(host_devices) + ' host devices' if host_devices else ''}, in a fresh process with no compilation "
        "cache: wall time, imports and compilation included",
        seconds=run["seconds"], points=sum(points.values()), compilation_included=True, statuses=points,
        line_statuses=lines, host_devices=host_devices, returncode=run["returncode"])


def lines(*, host_devices: int | None = None, quick: bool = False) -> dict:
    """The lines alone (`phasejax boundary` at its defaults: 51 omegas), in a fresh process: with no compilation
    cache, and once more with the persistent cache the first run filled (its programs loaded, not compiled)."""
    args = ["--n-omega", "5"] if quick else []
    with tempfile.TemporaryDirectory(prefix="phasejax-bench-") as out:
        cache = os.path.join(out, "cache")
        cold = run_command(["boundary", "--out", os.path.join(out, "b1"), "--no-progress", *args],
                           host_devices=host_devices)
        run_command(["boundary", "--out", os.path.join(out, "b2"), "--no-progress", *args], cache=cache,
                    host_devices=host_devices)
        warm = run_command(["boundary", "--out", os.path.join(out, "b3"), "--no-progress", *args], cache=cache,
                           host_devices=host_devices)
        statuses = _statuses(os.path.join(out, "b1", "boundary.csv"), "alpha_c_status")
    n = sum(statuses.values())
    return figure_entry(
        "lines",
        f"the lines alone, `phasejax boundary` ({n} omegas{', ' + str(host_devices) + ' host devices' if host_devices else ''}), "
        "in a fresh process with no compilation cache (seconds) and with a filled one (cached_seconds): wall time, "
        "imports and compilation included",
        seconds=cold["seconds"], points=n, compilation_included=True, statuses=statuses,
        cached_seconds=warm["seconds"], host_devices=host_devices, returncode=cold["returncode"])


def measured_rows(n_omega: int, rows: int) -> np.ndarray:
    """Indices of `rows` omega rows spread over `n_omega` (the middle of each of `rows` equal blocks)."""
    rows = max(1, min(rows, n_omega))
    return np.unique(((np.arange(rows) + 0.5) * n_omega / rows).astype(int))


def paper_diagram(*, quadrature=None, n_alpha: int = PAPER_GRID["n_alpha"], n_omega: int = PAPER_GRID["n_omega"],
                  project_rows: int | None = None, chunk_size: int | None = None, progress: bool = False) -> dict:
    """The paper's diagram (`PAPER_GRID`: 40 alpha in [0.1, 2.5] x 20 omega in [0, 0.95] x 2 subspaces, one
    track), compilation included. With `project_rows`, only that many omega rows (`measured_rows`) are run
    and the full time is projected: compile seconds + the rest x (all rows / measured rows)."""
    g = PAPER_GRID
    alphas = np.linspace(g["alpha_min"], g["alpha_max"], n_alpha)
    all_omegas = np.linspace(g["omega_min"], g["omega_max"], n_omega)
    idx = measured_rows(n_omega, project_rows) if project_rows else np.arange(n_omega)
    run = time_phase_diagram(alphas, all_omegas[idx], tracks=g["tracks"], chunk_size=chunk_size,
                             quadrature=quadrature, progress=progress)
    full_solves = n_alpha * n_omega * 2 * g["tracks"]
    shape = f"{n_alpha} alpha x {n_omega} omega x 2 subspaces x {g['tracks']} track"
    extra = {}
    seconds = run["seconds"]
    if project_rows:
        compile_s = run["compile_seconds"]
        if compile_s is not None:       # nested tracing may be reported twice: never more than the whole run
            compile_s = min(compile_s, run["seconds"])
        scale = n_omega / len(idx)
        if compile_s is None:
            seconds = run["seconds"] * scale
            how = "measured seconds x (all omega rows / measured rows), compilation scaled too"
        else:
            seconds = compile_s + (run["seconds"] - compile_s) * scale
            how = "compile seconds + (measured seconds - compile seconds) x (all omega rows / measured rows)"
        extra = dict(projected=True, projection=dict(
            how=how, measured_omegas=run["grid"]["omegas"], measured_rows=len(idx), all_rows=n_omega,
            measured_seconds=run["seconds"], measured_compile_seconds=compile_s, measured_solves=run["solves"],
            statuses_of="the measured solves"))
    else:
        extra = dict(projected=False)
    return figure_entry(
        "paper_diagram",
        f"the paper's phase diagram ({shape}, chunk size {run['chunk_size']}), {rule_name(quadrature)}, in a temporary "
        f"run directory, compilation included"
        + (f"; projected from {len(idx)} of the {n_omega} omega rows (both subspaces, every alpha)"
           if project_rows else ""),
        seconds=seconds, points=full_solves, compilation_included=True, statuses=run["statuses"],
        compile_seconds=run["compile_seconds"], grid=dict(run["grid"], omegas=all_omegas.tolist()),
        chunk_size=run["chunk_size"], quadrature=rule_name(quadrature), **extra)
