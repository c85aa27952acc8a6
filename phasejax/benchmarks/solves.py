"""Benchmark figures of the state evolution: a cold solve per subspace (`cold_solve`), one point of a warm
continuation row (`warm_point`), and a continuation grid against the published method on one point (`batch`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

from phasejax.benchmarks.record import figure_entry, repository_root, rule_name, status_counts, timed

REFERENCE_RELPATH = os.path.join("shared", "reference_method", "se_scipy_loop.py")


def cold_solve(*, quadrature=None, alpha: float = 1.5, second_alpha: float = 1.6, omega: float = 0.3,
               branches=("positional", "semantic")) -> dict:
    """One cold `solve_state_evolution` per subspace, twice: at `alpha` (the figure's first calls,
    compilation included) and at `second_alpha` (after compilation). `seconds` is the first calls' total."""
    from phasejax.theory import make_params, solve_state_evolution

    calls = []
    for branch in branches:
        for call, a in ((1, alpha), (2, second_alpha)):
            res, dt, dc = timed(lambda a=a, b=branch: solve_state_evolution(make_params(a, omega), b, quadrature))
            calls.append(dict(branch=branch, alpha=a, omega=omega, call=call, seconds=dt, compile_seconds=dc,
                              iterations=int(res.iterations), status=res.status_name))
    first = [c for c in calls if c["call"] == 1]
    second = [c for c in calls if c["call"] == 2]
    codes = [c["status"] for c in calls]
    statuses = {s: codes.count(s) for s in sorted(set(codes))}
    return figure_entry(
        "cold_solve",
        f"one cold solve_state_evolution per subspace ({', '.join(branches)}) at alpha={alpha}, omega={omega}, "
        f"{rule_name(quadrature)}: the first call of each subspace in the process (compilation included; the "
        f"subspaces share most of the compiled program, see compile_seconds), then a second call at "
        f"alpha={second_alpha} (after compilation)",
        seconds=sum(c["seconds"] for c in first), points=len(first), solves=len(calls), compilation_included=True,
        statuses=statuses, calls=calls,
        after_compilation=dict(seconds=sum(c["seconds"] for c in second),
                               seconds_per_point=sum(c["seconds"] for c in second) / len(second)),
        quadrature=rule_name(quadrature))


def warm_point(*, quadrature=None, alphas=tuple(np.linspace(1.2, 1.9, 8)), omega: float = 0.3,
               branch: str = "positional") -> dict:
    """One continuation row (`solve_along_alpha`) called twice with the same shapes; `seconds` is the second
    call (after compilation), per point its share; with the mean Newton iterations per point."""
    from phasejax.theory import make_params, solve_along_alpha

    alphas = np.asarray(alphas, dtype=np.float64)
    params = make_params(1.0, omega)
    _, t_first, c_first = timed(lambda: solve_along_alpha(params, alphas, branch, quadrature))
    res, seconds, c_second = timed(lambda: solve_along_alpha(params, alphas, branch, quadrature))
    its = np.asarray(res.iterations)
    return figure_entry(
        "warm_point",
        f"one point of a continuation row after compilation: solve_along_alpha over {len(alphas)} alphas in "
        f"[{alphas[0]:g}, {alphas[-1]:g}] at omega={omega} ({branch}), {rule_name(quadrature)}, timed on its "
        f"second call and divided by the number of points (the row's first point is a cold solve)",
        seconds=seconds, points=len(alphas), compilation_included=False, statuses=status_counts(res.status),
        mean_iterations=float(its.mean()), mean_iterations_warm=float(its[1:].mean()) if len(its) > 1 else None,
        iterations=its.tolist(), compile_seconds=c_second,
        first_call=dict(seconds=t_first, seconds_per_point=t_first / len(alphas), compile_seconds=c_first,
                        compilation_included=True),
        alphas=alphas.tolist(), omega=omega, branch=branch, quadrature=rule_name(quadrature))


def find_reference() -> str | None:
    """The published method's script (`shared/reference_method/se_scipy_loop.py`) inside or beside the
    repository, or beside the working directory; `None` if there is none."""
    for base in (repository_root(), os.path.dirname(repository_root()), os.getcwd(), os.path.dirname(os.getcwd())):
        path = os.path.join(base, REFERENCE_RELPATH)
        if os.path.isfile(path):
            return os.path.abspath(path)
    return None


def reference_solve(path: str, *, alpha: float = 2.0, omega: float = 0.3, branch: str = "positional",
                    nodes: int = 4) -> dict:
    """The published method (scipy BFGS per quadrature node in Python loops) on one point, in a fresh
    interpreter: its own solve time (`seconds`) and the wall time with interpreter start-up (`wall_seconds`)."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, path, "--branch", branch, "--alpha", str(alpha), "--omega", str(omega),
                          "--nodes", str(nodes)], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    line = [ln for ln in out.stdout.splitlines() if ln.strip().startswith("{")][-1]
    rec = json.loads(line)
    return dict(path=os.path.abspath(path), nodes_per_dimension=nodes, alpha=alpha, omega=omega, branch=branch,
                seconds=float(rec["seconds"]), wall_seconds=wall, iterations=int(rec["iterations"]),
                converged=bool(rec["converged"]), prox_solves=int(rec["prox_solves"]))


def batch(*, quadrature=None, alphas=tuple(np.linspace(0.5, 2.0, 16)), omegas=(0.0, 0.3),
          branch: str = "positional", reference: str | None = None, reference_nodes: int = 4) -> dict:
    """A continuation grid (`solve_state_evolution_grid`, one row per omega) called twice; `seconds` is the
    second call (after compilation). With `reference` (the published method's script), that method on one
    point in the same run and `ratio` = its seconds / ours per point."""
    from phasejax.theory import make_params, solve_state_evolution_grid

    alphas = np.asarray(alphas, dtype=np.float64)
    omegas = np.asarray(omegas, dtype=np.float64)
    params = make_params(1.0, 0.0)
    n = len(alphas) * len(omegas)
    _, t_first, c_first = timed(lambda: solve_state_evolution_grid(params, alphas, omegas, branch, quadrature))
    res, seconds, c_second = timed(lambda: solve_state_evolution_grid(params, alphas, omegas, branch, quadrature))
    entry = figure_entry(
        "batch",
        f"a {n}-point continuation batch: solve_state_evolution_grid over {len(alphas)} alphas in "
        f"[{alphas[0]:g}, {alphas[-1]:g}] x omega in {omegas.tolist()} ({branch}), {rule_name(quadrature)}, "
        f"timed on its second call (after compilation), per point; first_call includes compilation",
        seconds=seconds, points=n, compilation_included=False, statuses=status_counts(res.status),
        iterations=np.asarray(res.iterations).tolist(), compile_seconds=c_second,
        first_call=dict(seconds=t_first, seconds_per_point=t_first / n, compile_seconds=c_first,
                        compilation_included=True),
        quadrature=rule_name(quadrature), reference=None, ratio=None)
    if reference is None:
        entry["reference"] = dict(missing=f"no published method found ({REFERENCE_RELPATH})")
        return entry
    ref = reference_solve(reference, nodes=reference_nodes, branch=branch)
    ref["method"] = (f"the published method (se_scipy_loop.py: scipy BFGS per quadrature node in Python loops, "
                     f"damped fixed-point iteration), {reference_nodes} Gauss-Hermite nodes per dimension "
                     f"({reference_nodes ** 4} nodes), one point, in a fresh interpreter")
    entry["reference"] = ref
    entry["ratio"] = ref["seconds"] / entry["seconds_per_point"]
    entry["ratio_first_call"] = ref["wall_seconds"] / (t_first / n)
    entry["ratio_meaning"] = ("ratio: the published method's seconds for its one point over phasejax's seconds per "
                              "point after compilation (above 1: phasejax is faster); ratio_first_call: its wall "
                              "time with interpreter start-up over phasejax's first call per point, compilation "
                              "included")
    return entry
