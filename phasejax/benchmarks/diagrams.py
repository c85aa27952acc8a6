"""Benchmark figures of phase diagrams: the default `phasejax phase-diagram` (`main_job`) and the paper's
diagram, run in full or projected from a few omega rows (`paper_diagram`)."""

from __future__ import annotations

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
                chunk_size=a.chunk_size, sigma=a.sigma, lam=a.lam, A=list(a.A))


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


def main_job(*, quadrature=None, n_alpha: int | None = None, n_omega: int | None = None,
             progress: bool = False) -> dict:
    """The default phase diagram (`main_job_settings`), compilation included; `n_alpha`, `n_omega` shrink it
    (same ranges)."""
    s = main_job_settings()
    alphas, omegas = s.pop("alphas"), s.pop("omegas")
    if n_alpha is not None:
        alphas = np.linspace(alphas[0], alphas[-1], n_alpha).tolist()
    if n_omega is not None:
        omegas = np.linspace(omegas[0], omegas[-1], n_omega).tolist()
    run = time_phase_diagram(alphas, omegas, quadrature=quadrature, progress=progress, **s)
    shape = f"{len(alphas)} alpha x {len(omegas)} omega x 2 subspaces x {s['tracks']} track(s)"
    return figure_entry(
        "main_job",
        f"the main job, phase_diagram at the `phasejax phase-diagram` defaults "
        f"({'shrunk to ' if n_alpha or n_omega else ''}{shape}, chunk size {run['chunk_size']}), "
        f"{rule_name(quadrature)}, in a temporary run directory; total time, compilation included",
        seconds=run["seconds"], points=run["solves"], compilation_included=True, statuses=run["statuses"],
        compile_seconds=run["compile_seconds"], grid=run["grid"], chunk_size=run["chunk_size"],
        quadrature=rule_name(quadrature))


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
