"""The training benchmark: the vmapped training sweep against a Python loop of jitted runs, and L-BFGS, GD,
Adam and GAMP to convergence on the same data (`training_benchmark`; the figure `training`)."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from phasejax.benchmarks.record import figure_entry


TRAINING_PRESETS = {
    "cpu": dict(d=200, steps=50, chunk_size=500),
    "gpu": dict(d=1000, steps=100, chunk_size=500),
}
TRAINING_DEFAULTS = dict(seeds=5, n_alpha=20, n_omega=5, loop_runs=10, solver_seeds=3, gtol=1e-7)
TRAINING_QUICK = dict(d=20, steps=3, chunk_size=8, seeds=1, n_alpha=2, n_omega=2, loop_runs=2, solver_seeds=1,
                      gtol=1e-6)


def _time_compiled(fn, *args):
    import jax

    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t0


def training_benchmark(*, d: int, steps: int, chunk_size: int, seeds: int = 5, n_alpha: int = 20, n_omega: int = 5,
                       loop_runs: int = 10, solver_seeds: int = 3, gtol: float = 1e-7, sweep: bool = True,
                       solvers: bool = True, gamp: bool = True, dtype="float64",
                       log: Callable[[str], None] = print) -> dict:
    """The training benchmark: `{"sweep": ..., "solvers": ...}` (the parts asked for).

    1. Sweep throughput: the whole (seed, alpha, omega) grid of tied students, `steps` full-batch GD steps
       each (fixed, so every run does the same work), in one compiled vmapped call per chunk, in runs x steps
       per second; against the same runs in a Python loop, one jitted run at a time (`loop_runs` of them are
       timed and the rate extrapolated). Compilation is timed separately and excluded from both rates; a
       1-step run isolates the cost of the steps.
    2. Solvers to convergence on the same data and init (semantic init, `alpha = 1.5`, `omega = 0.3`,
       `solver_seeds` data sets): L-BFGS, GD and Adam stopped at RMS gradient `gtol`, and GAMP (theory notes,
       section 7) stopped on its relative change of `Q`; steps, seconds and the risk reached.
    Runs in `dtype` (float64 inside a scoped switch); `log` gets one line per result.
    """
    from phasejax.precision import dtype_scope

    if steps < 2:
        raise ValueError(f"steps must be >= 2 (the 1-step run is subtracted), got {steps}")
    with dtype_scope(dtype):
        return _training(d=d, steps=steps, chunk_size=chunk_size, seeds=seeds, n_alpha=n_alpha, n_omega=n_omega,
                         loop_runs=loop_runs, solver_seeds=solver_seeds, gtol=gtol, sweep=sweep, solvers=solvers,
                         gamp=gamp, dtype=dtype, log=log)


def _training(*, d, steps, chunk_size, seeds, n_alpha, n_omega, loop_runs, solver_seeds, gtol, sweep, solvers,
              gamp, dtype, log) -> dict:
    import jax
    import jax.numpy as jnp

    from phasejax.empirics import TrainConfig, TrainingGrid, cast_params, generate_data, semantic_init
    from phasejax.empirics.sweep import make_run_fn, make_training_fn
    from phasejax.empirics.training import minimize
    from phasejax.theory import make_params
    from phasejax.theory.gram import gram_inputs, gram_risk

    dtype = jnp.dtype(dtype)
    params = make_params(1.0, 0.3)
    record = {}

    # ---------------------------------------------------------------- 1. sweep vs loop
    if sweep:
        grid = TrainingGrid(alphas=np.round(np.linspace(0.1, 2.0, n_alpha), 10),
                            omegas=np.round(np.linspace(0.0, 0.5, n_omega), 10),
                            seeds=tuple(range(seeds)), inits=("semantic",), d=d)
        tasks = grid.tasks()
        n_runs = len(tasks["alpha"])
        chunk = min(chunk_size, n_runs)
        k = min(loop_runs, n_runs)
        idx = np.linspace(0, n_runs - 1, k).astype(int)
        timing = {}
        for n_steps in (1, steps):   # the difference isolates the cost of the steps from data and metrics
            config = TrainConfig("gd", max_steps=n_steps, gtol=1e-300)   # fixed work per run
            batch_fn = jax.jit(make_training_fn(grid, params, config=config, dtype=dtype))
            t0 = time.perf_counter()
            compiled = batch_fn.lower({k_: v[:chunk] for k_, v in tasks.items()}).compile()
            t_compile = time.perf_counter() - t0
            t_run = 0.0
            for start in range(0, n_runs, chunk):
                part = {k_: np.resize(v[start:start + chunk], chunk) for k_, v in tasks.items()}  # last chunk padded
                out, dt = _time_compiled(compiled, part)
                t_run += dt
            assert int(np.min(out["steps"])) == n_steps
            one = jax.jit(make_run_fn(grid, params, config=config, dtype=dtype))
            one_c = one.lower(tasks["seed"][0], tasks["alpha"][0], tasks["omega"][0], tasks["init"][0]).compile()
            t0 = time.perf_counter()
            for i in idx:
                jax.block_until_ready(one_c(tasks["seed"][i], tasks["alpha"][i], tasks["omega"][i], tasks["init"][i]))
            timing[n_steps] = dict(compile_s=t_compile, run_s=t_run, loop_s_per_run=(time.perf_counter() - t0) / k)
        S, t1, tS = steps, timing[1], timing[steps]
        sweep_rate = n_runs * S / tS["run_s"]
        loop_rate = S / tS["loop_s_per_run"]
        sweep_step_rate = n_runs * (S - 1) / max(tS["run_s"] - t1["run_s"], 1e-9)
        loop_step_rate = (S - 1) / max(tS["loop_s_per_run"] - t1["loop_s_per_run"], 1e-9)
        record["sweep"] = dict(
            runs=n_runs, steps_per_run=S, d=d, n_max=grid.n_max, chunk_size=chunk,
            n_calls=int(np.ceil(n_runs / chunk)), compile_s=tS["compile_s"], run_s=tS["run_s"],
            runs_x_steps_per_s=sweep_rate, loop_runs_timed=k, loop_s_per_run=tS["loop_s_per_run"],
            loop_runs_x_steps_per_s=loop_rate, speedup=sweep_rate / loop_rate,
            fixed_cost_s_per_run=dict(sweep=t1["run_s"] / n_runs, loop=t1["loop_s_per_run"]),
            steps_only_runs_x_steps_per_s=dict(sweep=sweep_step_rate, loop=loop_step_rate),
            steps_only_speedup=sweep_step_rate / loop_step_rate,
        )
        log(f"sweep: {n_runs} runs x {S} GD steps at d={d} in {int(np.ceil(n_runs / chunk))} call(s): "
            f"{tS['run_s']:.1f} s (+{tS['compile_s']:.1f} s compile) = {sweep_rate:.0f} runs x steps / s")
        log(f"loop:  {tS['loop_s_per_run']:.3f} s per run = {loop_rate:.0f} runs x steps / s;  "
            f"ratio {sweep_rate / loop_rate:.2f}x")
        log(f"per run, data + metrics (1 step): sweep {t1['run_s'] / n_runs * 1e3:.1f} ms, loop "
            f"{t1['loop_s_per_run'] * 1e3:.1f} ms; steps only: sweep {sweep_step_rate:.0f}, loop "
            f"{loop_step_rate:.0f} runs x steps / s (ratio {sweep_step_rate / loop_step_rate:.2f}x)")

    # ---------------------------------------------------------------- 2. solvers to convergence
    if solvers:
        from phasejax.empirics.gamp import empirical_risk, gamp as run_gamp_solver

        p15 = make_params(1.5, 0.3)
        n = int(round(1.5 * d))
        names = ("lbfgs", "gd", "adam") + (("gamp",) if gamp else ())
        rows = {name: [] for name in names}
        p15_d = cast_params(p15, dtype)
        for seed in range(solver_seeds):
            data = generate_data(jax.random.PRNGKey(1000 + seed), p15, d, n, dtype=dtype)
            inputs = gram_inputs(data.x, data.y, data.p)
            Q0 = semantic_init(data.Qstar, 1)
            for name in ("lbfgs", "gd", "adam"):
                cfg = TrainConfig(name, max_steps=50000, gtol=gtol)
                solve = jax.jit(lambda Q, inputs=inputs, cfg=cfg:
                                minimize(lambda q: gram_risk(q, inputs, p15_d), Q, cfg))
                solve.lower(Q0).compile()
                res, dt = _time_compiled(solve, Q0)
                rows[name].append(dict(steps=int(res.steps), seconds=dt, risk_per_d=float(res.loss) / d,
                                       grad_rms=float(res.grad_norm), converged=bool(res.converged), Q=res.params))
            if not gamp:
                continue
            run_gamp = lambda Q, data=data: run_gamp_solver(data, p15_d, Q, jnp.array([[50.0]], dtype),  # noqa: E731
                                                             max_iter=500, damping=0.5, tol=1e-8)
            run_gamp(Q0)   # compile
            res, dt = _time_compiled(run_gamp, Q0)
            rows["gamp"].append(dict(steps=int(res.iterations), seconds=dt,
                                     risk_per_d=float(empirical_risk(res.Q, data, p15_d)) / d,
                                     grad_rms=float(jnp.linalg.norm(jax.grad(empirical_risk)(res.Q, data, p15_d))
                                                    / np.sqrt(d)),
                                     converged=bool(res.converged), Q=res.Q))
        ref = rows["lbfgs"]
        summary = {}
        for name, rs in rows.items():
            dist = [float(jnp.linalg.norm(r["Q"] - q["Q"]) / jnp.linalg.norm(q["Q"])) for r, q in zip(rs, ref)]
            summary[name] = dict(
                median_steps=float(np.median([r["steps"] for r in rs])),
                median_seconds=float(np.median([r["seconds"] for r in rs])),
                all_converged=all(r["converged"] for r in rs),
                n_converged=sum(r["converged"] for r in rs), n_runs=len(rs),
                max_risk_gap_per_d=float(max(abs(r["risk_per_d"] - q["risk_per_d"]) for r, q in zip(rs, ref))),
                max_rel_distance_to_lbfgs=max(dist),
                max_grad_rms=max(r["grad_rms"] for r in rs),
            )
            s = summary[name]
            log(f"{name:6s} steps {s['median_steps']:7.0f}  {s['median_seconds']:7.3f} s  "
                f"converged {s['all_converged']}  |risk - lbfgs|/d {s['max_risk_gap_per_d']:.1e}  "
                f"|Q - Q_lbfgs|/|Q| {s['max_rel_distance_to_lbfgs']:.1e}")
        record["solvers"] = dict(alpha=1.5, omega=0.3, d=d, n=n, init="semantic", gtol_rms=gtol,
                                 gamp=dict(damping=0.5, tol=1e-8, C0=50.0), results=summary)
    return record


def training(*, quick: bool = False, preset: str | None = None, log: Callable[[str], None] = print) -> dict:
    """The training figure: `training_benchmark` at `preset` (default: `gpu` on an accelerator, else `cpu`) or
    at the `TRAINING_QUICK` sizes; `seconds` is the vmapped sweep's run time (compilation excluded)."""
    import jax

    preset = preset or ("cpu" if jax.default_backend() == "cpu" else "gpu")
    sizes = dict(TRAINING_QUICK) if quick else dict(TRAINING_DEFAULTS, **TRAINING_PRESETS[preset])
    record = training_benchmark(**sizes, log=log)
    sw, solv = record["sweep"], record["solvers"]["results"]
    statuses = {"converged": sum(s["n_converged"] for s in solv.values()),
                "not_converged": sum(s["n_runs"] - s["n_converged"] for s in solv.values())}
    statuses = {k: v for k, v in statuses.items() if v}
    return figure_entry(
        "training",
        f"the vmapped training sweep ({sw['runs']} tied students x {sw['steps_per_run']} full-batch GD steps at "
        f"d={sw['d']}, float64) in {sw['n_calls']} compiled call(s), compilation excluded, against a Python loop "
        f"of jitted runs (loop_speedup); then L-BFGS, GD, Adam and GAMP to convergence (statuses count those "
        f"solver runs)",
        seconds=sw["run_s"], points=sw["runs"], solves=sum(s["n_runs"] for s in solv.values()),
        compilation_included=False, statuses=statuses, loop_speedup=sw["speedup"],
        preset="quick" if quick else preset, sizes=sizes, details=record)
