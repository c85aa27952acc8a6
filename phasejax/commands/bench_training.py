"""Benchmark of the empirical sweeps and of the solvers that train one student.

    phasejax bench-training                  # CPU preset: d = 200, 500 runs x 50 GD steps in one call
    phasejax bench-training --preset gpu     # d = 1000, 100 steps

1. Sweep throughput: the whole (seed, alpha, omega) grid of tied students,
   `--steps` full-batch GD steps each (fixed, so every run does the same
   work), in one compiled vmapped call per chunk (one call when
   `--chunk-size` >= the grid), in runs x steps per second; against the same
   runs in a Python loop, one jitted run at a time (`--loop-runs` of them are
   timed and the rate extrapolated). Compilation is timed separately and
   excluded from both rates; a 1-step run isolates the cost of the steps.
2. Solvers to convergence on the same data and init (semantic init,
   `alpha = 1.5`, `omega = 0.3`, `--solver-seeds` data sets): L-BFGS, GD and
   Adam stopped at RMS gradient `--gtol`, and GAMP (theory notes, section 7)
   stopped on its relative change of `Q`; steps, seconds and the risk reached.
Writes a JSON record to --out (default results/bench/training_<platform>.json).
"""

from __future__ import annotations

import datetime
import os
import time

import numpy as np

from phasejax.commands.argtypes import positive_float, positive_int
from phasejax.commands.experiment_flags import add_dtype, add_preset, dtype_from, environment, pick, print_paths
from phasejax.io import atomic_write_json

NAME = "bench-training"
HELP = "benchmark: vmapped training sweep vs a Python loop; L-BFGS, GD, Adam and GAMP to convergence"

PRESETS = {
    "cpu": dict(d=200, steps=50, chunk_size=500),
    "gpu": dict(d=1000, steps=100, chunk_size=500),
}


def _gamp_functions():
    """`(gamp, empirical_risk)` of GAMP on finite data (`phasejax.empirics.gamp`)."""
    from phasejax.empirics.gamp import empirical_risk, gamp

    return gamp, empirical_risk


def _timed(fn, *args):
    import jax

    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t0


def add_arguments(ap) -> None:
    add_preset(ap, "cpu: d = 200, 50 GD steps, one chunk of 500 runs (the numbers in results/bench/training_cpu.json); "
                   "gpu: d = 1000, 100 steps")
    ap.add_argument("--d", type=positive_int, default=None, help="dimension (default: the preset's)")
    ap.add_argument("--seeds", type=positive_int, default=5)
    ap.add_argument("--n-alpha", type=positive_int, default=20)
    ap.add_argument("--n-omega", type=positive_int, default=5)
    ap.add_argument("--steps", type=positive_int, default=None, help="GD steps per run in the throughput test (>= 2; default: the preset's)")
    ap.add_argument("--chunk-size", type=positive_int, default=None, help="runs per compiled call (default: the preset's)")
    ap.add_argument("--loop-runs", type=positive_int, default=10, help="runs timed one at a time")
    ap.add_argument("--solver-seeds", type=positive_int, default=3, help="data sets of the solver comparison")
    ap.add_argument("--gtol", type=positive_float, default=1e-7, help="RMS-gradient tolerance of the solvers")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--skip-solvers", action="store_true")
    ap.add_argument("--skip-gamp", action="store_true", help="leave GAMP out of the solver comparison")
    add_dtype(ap, default="float64")
    ap.add_argument("--out", default=None, help="JSON record (default: results/bench/training_<platform>.json)")


def run(args) -> int:
    from phasejax.precision import dtype_scope

    with dtype_scope(dtype_from(args)):
        return measure(args)


def measure(args) -> int:
    """The benchmark (run inside the dtype's precision scope)."""

    import jax
    import jax.numpy as jnp

    from phasejax.empirics import TrainConfig, TrainingGrid, cast_params, generate_data, semantic_init
    from phasejax.empirics.sweep import make_run_fn, make_training_fn
    from phasejax.empirics.training import minimize
    from phasejax.theory import make_params
    from phasejax.theory.gram import gram_inputs, gram_risk

    preset = PRESETS[args.preset]
    args.d, args.steps, args.chunk_size = (pick(args, k, preset) for k in ("d", "steps", "chunk_size"))
    if args.steps < 2:
        raise SystemExit(f"error: --steps must be >= 2 (the 1-step run is subtracted), got {args.steps}")
    dtype = dtype_from(args)
    params = make_params(1.0, 0.3)
    record = dict(date=datetime.date.today().isoformat(), args={k: v for k, v in vars(args).items() if k != "_run"},
                  **environment())

    # ---------------------------------------------------------------- 1. sweep vs loop
    if not args.skip_sweep:
        grid = TrainingGrid(alphas=np.round(np.linspace(0.1, 2.0, args.n_alpha), 10),
                            omegas=np.round(np.linspace(0.0, 0.5, args.n_omega), 10),
                            seeds=tuple(range(args.seeds)), inits=("semantic",), d=args.d)
        tasks = grid.tasks()
        n_runs = len(tasks["alpha"])
        chunk = min(args.chunk_size, n_runs)
        k = min(args.loop_runs, n_runs)
        idx = np.linspace(0, n_runs - 1, k).astype(int)
        timing = {}
        for steps in (1, args.steps):   # the difference isolates the cost of the steps from data and metrics
            config = TrainConfig("gd", max_steps=steps, gtol=1e-300)   # fixed work per run
            batch = jax.jit(make_training_fn(grid, params, config=config, dtype=dtype))
            t0 = time.perf_counter()
            compiled = batch.lower({k_: v[:chunk] for k_, v in tasks.items()}).compile()
            t_compile = time.perf_counter() - t0
            t_run = 0.0
            for start in range(0, n_runs, chunk):
                part = {k_: np.resize(v[start:start + chunk], chunk) for k_, v in tasks.items()}  # last chunk padded
                out, dt = _timed(compiled, part)
                t_run += dt
            assert int(np.min(out["steps"])) == steps
            one = jax.jit(make_run_fn(grid, params, config=config, dtype=dtype))
            one_c = one.lower(tasks["seed"][0], tasks["alpha"][0], tasks["omega"][0], tasks["init"][0]).compile()
            t0 = time.perf_counter()
            for i in idx:
                jax.block_until_ready(one_c(tasks["seed"][i], tasks["alpha"][i], tasks["omega"][i], tasks["init"][i]))
            timing[steps] = dict(compile_s=t_compile, run_s=t_run, loop_s_per_run=(time.perf_counter() - t0) / k)
        S, t1, tS = args.steps, timing[1], timing[args.steps]
        sweep_rate = n_runs * S / tS["run_s"]
        loop_rate = S / tS["loop_s_per_run"]
        sweep_step_rate = n_runs * (S - 1) / max(tS["run_s"] - t1["run_s"], 1e-9)
        loop_step_rate = (S - 1) / max(tS["loop_s_per_run"] - t1["loop_s_per_run"], 1e-9)
        record["sweep"] = dict(
            runs=n_runs, steps_per_run=S, d=args.d, n_max=grid.n_max, chunk_size=chunk,
            n_calls=int(np.ceil(n_runs / chunk)), compile_s=tS["compile_s"], run_s=tS["run_s"],
            runs_x_steps_per_s=sweep_rate, loop_runs_timed=k, loop_s_per_run=tS["loop_s_per_run"],
            loop_runs_x_steps_per_s=loop_rate, speedup=sweep_rate / loop_rate,
            fixed_cost_s_per_run=dict(sweep=t1["run_s"] / n_runs, loop=t1["loop_s_per_run"]),
            steps_only_runs_x_steps_per_s=dict(sweep=sweep_step_rate, loop=loop_step_rate),
            steps_only_speedup=sweep_step_rate / loop_step_rate,
        )
        print(f"sweep: {n_runs} runs x {S} GD steps at d={args.d} in {int(np.ceil(n_runs / chunk))} call(s): "
              f"{tS['run_s']:.1f} s (+{tS['compile_s']:.1f} s compile) = {sweep_rate:.0f} runs x steps / s")
        print(f"loop:  {tS['loop_s_per_run']:.3f} s per run = {loop_rate:.0f} runs x steps / s;  "
              f"ratio {sweep_rate / loop_rate:.2f}x")
        print(f"per run, data + metrics (1 step): sweep {t1['run_s'] / n_runs * 1e3:.1f} ms, loop "
              f"{t1['loop_s_per_run'] * 1e3:.1f} ms; steps only: sweep {sweep_step_rate:.0f}, loop "
              f"{loop_step_rate:.0f} runs x steps / s (ratio {sweep_step_rate / loop_step_rate:.2f}x)")

    # ---------------------------------------------------------------- 2. solvers to convergence
    if not args.skip_solvers:
        d = args.d
        p15 = make_params(1.5, 0.3)
        n = int(round(1.5 * d))
        solvers = ("lbfgs", "gd", "adam") + (() if args.skip_gamp else ("gamp",))
        rows = {name: [] for name in solvers}
        p15_d = cast_params(p15, dtype)
        for seed in range(args.solver_seeds):
            data = generate_data(jax.random.PRNGKey(1000 + seed), p15, d, n, dtype=dtype)
            inputs = gram_inputs(data.x, data.y, data.p)
            Q0 = semantic_init(data.Qstar, 1)
            for name in ("lbfgs", "gd", "adam"):
                cfg = TrainConfig(name, max_steps=50000, gtol=args.gtol)
                solve = jax.jit(lambda Q, inputs=inputs, cfg=cfg: minimize(lambda q: gram_risk(q, inputs, p15_d), Q, cfg))
                solve.lower(Q0).compile()
                res, dt = _timed(solve, Q0)
                rows[name].append(dict(steps=int(res.steps), seconds=dt, risk_per_d=float(res.loss) / d,
                                       grad_rms=float(res.grad_norm), converged=bool(res.converged), Q=res.params))
            if args.skip_gamp:
                continue
            gamp, empirical_risk = _gamp_functions()
            run_gamp = lambda Q, data=data: gamp(data, p15_d, Q, jnp.array([[50.0]], dtype), max_iter=500,  # noqa: E731
                                                 damping=0.5, tol=1e-8)
            run_gamp(Q0)   # compile
            res, dt = _timed(run_gamp, Q0)
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
                max_risk_gap_per_d=float(max(abs(r["risk_per_d"] - q["risk_per_d"]) for r, q in zip(rs, ref))),
                max_rel_distance_to_lbfgs=max(dist),
                max_grad_rms=max(r["grad_rms"] for r in rs),
            )
            s = summary[name]
            print(f"{name:6s} steps {s['median_steps']:7.0f}  {s['median_seconds']:7.3f} s  converged {s['all_converged']}  "
                  f"|risk - lbfgs|/d {s['max_risk_gap_per_d']:.1e}  |Q - Q_lbfgs|/|Q| {s['max_rel_distance_to_lbfgs']:.1e}")
        record["solvers"] = dict(alpha=1.5, omega=0.3, d=d, n=n, init="semantic", gtol_rms=args.gtol,
                                 gamp=dict(damping=0.5, tol=1e-8, C0=50.0), results=summary)
    out = args.out or os.path.join("results", "bench", f"training_{jax.default_backend()}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    print_paths([atomic_write_json(out, record)])
    return 0

