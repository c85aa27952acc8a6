"""Which mechanism online SGD finds: the high-dimensional SGD ODEs of the single-direction attention
student against finite-`d` online SGD, and the dynamical phase diagram over omega (docs/dynamics.md).

    phasejax dynamics                    # CPU preset (square loss, lr 0.5 and 0.05, d = 100..400 SGD)
    phasejax dynamics --preset gpu       # finer table, more angles, d up to 1000, more seeds

Writes --out (default runs/dynamics/; the committed results with --out results/dynamics --overwrite):
table.npz (the population table on the whole range |m|, |e| <= 1), ode.csv (ODE trajectories:
omega, lr, t, m, e, loss, in_table), sgd_trajectories.csv (finite-d SGD from the same init), runs.csv (finite-d SGD
from random inits at both learning rates: omega, d, lr, seed, mechanism, escape time, the ODE's prediction
from the run's own init, and whether that ODE trajectory stayed in the table's range: ode_in_table),
phase_diagram.csv (ODE: omega, lr, d, mechanism fractions, escape times, n_outside_table; population minima),
summary.json,
and trajectories.png, phase_diagram.png, escape_time.png. The SGD sweeps are chunked and resumable
(--run-dir, default <out>/run).
"""

from __future__ import annotations

import os
import sys
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import positive_float, positive_int, run_options_from

NAME = "dynamics"
HELP = "online-SGD ODEs vs finite-d SGD: escape times, mechanism reached and the dynamical phase diagram in omega"

PRESETS = {
    "cpu": dict(n_grid=21, order=16, order_check=12, curvature_orders=(12, 16, 20, 24, 28), n_angles=16, sgd_d=100,
                sgd_seeds=24, compare_ds=(100, 200, 400),
                compare_seeds=16, scaling_ds=(100, 200, 400), scaling_seeds=8,
                sgd_omegas=(0.5, 0.6, 0.62, 0.64, 0.66, 0.68, 0.7, 0.8),
                paper_lr_omegas=(0.62, 0.7), paper_lr_seeds=12, paper_lr_t=2500.0),
    "gpu": dict(n_grid=31, order=24, order_check=20, curvature_orders=(16, 24, 32, 40), n_angles=48, sgd_d=1000,
                sgd_seeds=64,
                compare_ds=(100, 300, 1000), compare_seeds=64, scaling_ds=(100, 300, 1000, 3000), scaling_seeds=32,
                sgd_omegas=(0.5, 0.58, 0.6, 0.62, 0.63, 0.64, 0.65, 0.66, 0.67, 0.68, 0.7, 0.8),
                paper_lr_omegas=(0.6, 0.62, 0.64, 0.66, 0.68, 0.7), paper_lr_seeds=64, paper_lr_t=2500.0),
}
FINE = tuple(round(0.58 + 0.01 * i, 2) for i in range(13))      # the fine grid of the published experiments


def add_arguments(ap) -> None:
    flags.add_preset(ap, "cpu: 21x21 table at GH order 16, SGD at d = 100 (fractions) and d <= 400 (comparisons); "
                         "gpu: 31x31 table at order 24, SGD at d = 1000")
    flags.add_optimizer(ap, optimizers=("sgd",), learning_rate=0.5,
                        learning_rate_help="SGD learning rate of the SGD runs and ODE traces (the first of the ODE "
                                           "diagram)")
    ap.add_argument("--learning-rate-paper", type=positive_float, default=0.05,
                    help="second learning rate of the ODE phase diagram (the published experiments' value)")
    ap.add_argument("--sgd-seeds", type=positive_int, default=None, help="seeds per omega of the SGD fractions")
    ap.add_argument("--t-sgd", type=positive_float, default=250.0, help="SGD time (steps / d) of the fraction runs")
    flags.add_replot(ap, "only redo the figures from the CSV files in --out")
    flags.add_sweep(ap, NAME, chunk_size=24)


REPLOT_READS = {
    "ode.csv": ("omega", "t", "m", "e"),
    "sgd_trajectories.csv": ("omega", "d", "t", "m", "e"),
    "phase_diagram.csv": ("omega", "lr", "d", "fraction_positional", "escape_time", "loss_positional",
                          "loss_semantic"),
    "runs.csv": ("kind", "omega", "d", "mechanism", "escape_time", "escape_time_ode"),
    "summary.json": ("lr", "lr_paper"),
}
"""The columns (keys) of the files `--replot` reads (`phasejax.dynamics.plots.plot_all`)."""


def reads(args) -> list:
    """The files the command reads back: those of `REPLOT_READS` with `--replot`."""
    return flags.replot_reads(args, REPLOT_READS)


def check_learning_rates(args) -> None:
    """The ODE phase diagram compares two learning rates: `UsageError` when `--learning-rate-paper` equals
    `--learning-rate`."""
    from phasejax.commands.argtypes import UsageError

    if args.learning_rate == args.learning_rate_paper:
        raise UsageError(f"--learning-rate and --learning-rate-paper are both {args.learning_rate:g}: the ODE phase "
                         "diagram compares two learning rates; pass two different ones")


def _table(params, n_grid, order, path, progress=True):
    """The population table, cached in `path` (NPZ) keyed by its grid size and order (a bar per row of nodes with
    `progress`, on a terminal only)."""
    import jax.numpy as jnp
    import numpy as np

    from phasejax.dynamics import PopulationTable, build_population_table
    from phasejax.io import atomic_save_npz, load_npz

    old = load_npz(path) if os.path.exists(path) else None
    if (old is not None and int(old["order"]) == order and old["m_grid"].shape[0] == 2 * n_grid - 1
            and float(old["m_grid"][-1]) == 1.0 and "plateau" in old):
        return PopulationTable(m_grid=jnp.asarray(old["m_grid"]), e_grid=jnp.asarray(old["e_grid"]),
                               coefficients=jnp.asarray(old["coefficients"]), params=params,
                               plateau=jnp.asarray(old["plateau"]), order=order)
    tab = build_population_table(params, n_grid=n_grid, order=order, m_max=1.0,
                                 progress=progress and sys.stderr.isatty())
    atomic_save_npz(path, dict(m_grid=np.asarray(tab.m_grid), e_grid=np.asarray(tab.e_grid),
                               coefficients=np.asarray(tab.coefficients), plateau=np.asarray(tab.plateau),
                               order=np.asarray(order)))
    return tab


def _sgd_sweep(params, tasks, d, n_steps, record_every, lr, options, name, m0=None, e0=None, keep_traj=False):
    """Online SGD over the tasks (omega, seed), chunked and resumable; final overlaps, escape time, trajectory."""
    import jax
    import jax.numpy as jnp

    from phasejax.dynamics import online_sgd
    from phasejax.sweep import run_chunked

    def fn(chunk):
        def one(om, seed):
            p = params.replace(omega=om)
            key = jax.random.PRNGKey(seed)
            run = online_sgd(p, key, lr, d=d, n_steps=n_steps, record_every=record_every,
                             m0=jnp.nan if m0 is None else m0, e0=jnp.nan if e0 is None else e0)
            r = jnp.sqrt(run.m**2 + run.e**2)
            first = jnp.argmax(r > 0.2)
            t_esc = jnp.where(jnp.any(r > 0.2), run.t[first], jnp.inf)
            out = dict(m0=run.m[0], e0=run.e[0], m_end=run.m[-1], e_end=run.e[-1], escape_time=t_esc,
                       loss_end=jnp.mean(run.loss[-10:]))
            if keep_traj:
                out.update(m=run.m, e=run.e, t=run.t)
            return out
        return jax.vmap(one)(jnp.asarray(chunk["omega"], jnp.float32), jnp.asarray(chunk["seed"]))

    config = dict(kind=name, d=d, n_steps=n_steps, record_every=record_every, lr=lr, m0=m0, e0=e0,
                  A=params.A.tolist(), sigma=float(params.sigma), loss=params.loss, traj=keep_traj)
    return run_chunked(fn, tasks, config, flags.sub_options(options, name))


def run(args) -> int:
    if not args.replot:
        check_learning_rates(args)
    import jax
    import jax.numpy as jnp
    import numpy as np

    from phasejax import float64_scope
    from phasejax.dynamics import (
        MECHANISMS, classify_mechanism, make_dynamics_params, ode_phase_diagram, population_minimum,
        sgd_ode_solve, sgd_ode_trajectory,
    )
    from phasejax.dynamics.diagram import (
        axis_losses, curvature_crossing, mechanism_minima, minimum_switch, plateau_curvatures, rate_crossing,
    )
    from phasejax.dynamics.ode import plateau_rates
    from phasejax.dynamics.population import in_table_range, table_terms
    from phasejax.io import atomic_write_json, write_csv

    if args.replot:
        from phasejax.dynamics.plots import plot_all
        flags.print_paths(plot_all(args.out))
        return 0
    preset = PRESETS[args.preset]
    seeds = flags.pick(args, "sgd_seeds", dict(sgd_seeds=preset["sgd_seeds"]))
    os.makedirs(args.out, exist_ok=True)
    options = run_options_from(args, args.out)
    params = make_dynamics_params(0.5, loss="square")
    t0 = time.perf_counter()
    paths = []
    summary = dict(preset=args.preset, lr=args.learning_rate, lr_paper=args.learning_rate_paper, loss="square",
                   A=np.asarray(params.A).tolist(), sigma=1.0, signs=[1.0, -1.0])

    with float64_scope():
        # 1. population table and its quadrature error
        bar = not args.no_progress
        tab = _table(params, preset["n_grid"], preset["order"], os.path.join(args.out, "table.npz"), bar)
        check = _table(params, preset["n_grid"], preset["order_check"], os.path.join(args.out, "table_check.npz"),
                       bar)
        diff = np.max(np.abs(np.asarray(tab.coefficients) - np.asarray(check.coefficients)), axis=(0, 2, 3))
        summary["table"] = dict(n_grid=preset["n_grid"], order=preset["order"], order_check=preset["order_check"],
                                m_max=float(tab.m_grid[-1]), e_max=float(tab.e_grid[-1]),
                                max_abs_diff_R_Rm_Re_Gamma=diff.tolist())
        paths += [os.path.join(args.out, "table.npz"), os.path.join(args.out, "table_check.npz")]

        # 2. population minima (direct quadrature along the axes) and the plateau's growth rates
        axis = axis_losses(params, np.linspace(0.0, 1.0, 51), order=preset["order"] + 4)
        omegas = np.unique(np.round(np.concatenate([np.linspace(0, 1, 21), FINE]), 4))
        # is the global minimum on one of the two axes? a polar grid search on the table, off the axes included,
        # against the table's own axis minima (the same quadrature order: the direct axis losses above use a
        # higher order and differ from the table by its quadrature error, 2e-5 at (m, e) = (1, 0))
        grid_min = population_minimum(tab, omegas)
        best_axis = np.minimum(grid_min["loss_semantic"], grid_min["loss_positional"])
        summary["off_axis_gain_max"] = float(np.max(best_axis - grid_min["loss"]))
        summary["off_axis_grid_minimum_mechanisms"] = sorted(set(grid_min["mechanism"].tolist()))
        crossing = {str(lr): rate_crossing(tab, lr) for lr in (args.learning_rate, args.learning_rate_paper)}
        crossing_check = {str(lr): rate_crossing(check, lr) for lr in (args.learning_rate, args.learning_rate_paper)}
        summary["rate_crossing_omega"] = crossing
        summary["rate_crossing_omega_check_table"] = crossing_check
        summary["population_switch_omega"] = minimum_switch(axis)
        # the plateau's curvatures by direct quadrature at increasing order: where the growth rates cross
        curv = {}
        for order in preset["curvature_orders"]:
            c = plateau_curvatures(params, order)
            curv[str(order)] = dict(crossing_omega=curvature_crossing(c), **{k: v.tolist() for k, v in c.items()})
        summary["plateau_curvatures_by_order"] = curv
        last = [curv[str(o)]["crossing_omega"] for o in preset["curvature_orders"][-2:]]
        summary["rate_crossing_omega_converged"] = dict(value=last[1], error=abs(last[1] - last[0]))

        # 3. ODE phase diagram: omega x lr x r0 (= 1/sqrt(d))
        ds = np.asarray([1e2, 1e3, 1e4, 1e5])
        print("ODE phase diagram ...", flush=True)
        cols = ode_phase_diagram(tab, omegas, [args.learning_rate, args.learning_rate_paper], 1 / np.sqrt(ds),
                                 n_angles=preset["n_angles"],
                                 t_max=2e4)
        cols["d"] = np.rint(1 / cols["r0"] ** 2).astype(int)
        mm = mechanism_minima(axis, cols["omega"])
        for k in ("population_minimum", "loss_semantic", "loss_positional"):
            cols[k] = mm[k]
        lm, le = jax.vmap(lambda o, lr: plateau_rates(tab, o, lr))(jnp.asarray(cols["omega"]), jnp.asarray(cols["lr"]))
        cols["rate_m"], cols["rate_e"] = np.asarray(lm), np.asarray(le)
        paths.append(write_csv(os.path.join(args.out, "phase_diagram.csv"), cols))
        # where half of the random inits go positional, per (lr, d)
        half = {}
        for lr in (args.learning_rate, args.learning_rate_paper):
            for d in ds.astype(int):
                sel = (cols["lr"] == lr) & (cols["d"] == d)
                o, f = cols["omega"][sel], cols["fraction_positional"][sel]
                j = np.nonzero((f[:-1] < 0.5) & (f[1:] >= 0.5))[0]
                half[f"lr={lr:g},d={d}"] = (float(o[j[0]] + (0.5 - f[j[0]]) * (o[j[0] + 1] - o[j[0]])
                                                  / (f[j[0] + 1] - f[j[0]])) if len(j) else float("nan"))
        summary["omega_half_positional_ode"] = half

        # 4. ODE trajectories (also the reference of the SGD comparison)
        trace_omegas = (0.3, 0.6, 0.65, 0.7, 0.9)
        m0 = e0 = 0.1
        ts = np.linspace(0.0, 150.0, 301)
        m_t, e_t = jax.vmap(lambda o: sgd_ode_trajectory(tab, o, args.learning_rate, m0, e0, jnp.asarray(ts)))(
            jnp.asarray(trace_omegas))
        loss_t = jax.vmap(jax.vmap(lambda a, b, o: table_terms(tab, a, b, o).loss, (0, 0, None)))(
            m_t, e_t, jnp.asarray(trace_omegas))
        n_t = len(ts)
        paths.append(write_csv(os.path.join(args.out, "ode.csv"), dict(
            omega=np.repeat(trace_omegas, n_t), lr=np.full(n_t * len(trace_omegas), args.learning_rate),
            m0=np.full(n_t * len(trace_omegas), m0), e0=np.full(n_t * len(trace_omegas), e0),
            t=np.tile(ts, len(trace_omegas)), m=np.asarray(m_t).ravel(), e=np.asarray(e_t).ravel(),
            loss=np.asarray(loss_t).ravel(),
            in_table=np.asarray(in_table_range(tab, m_t, e_t)).ravel())))
        summary["ode_outside_table"] = dict(phase_diagram_angles=int(np.sum(cols["n_outside_table"])),
                                            trajectory_points=int(np.sum(~np.asarray(in_table_range(tab, m_t, e_t)))))

    # 5. finite-d SGD from the same init, several d
    compare_omegas = (0.3, 0.9)
    traj = {}
    for d in preset["compare_ds"]:
        tasks = dict(omega=np.repeat(compare_omegas, preset["compare_seeds"]).astype(np.float64),
                     seed=np.tile(np.arange(preset["compare_seeds"]), len(compare_omegas)) + 1000 * d)
        out = _sgd_sweep(params, tasks, d, int(150 * d), d // 2, args.learning_rate, options, f"compare_d{d}",
                         m0=m0, e0=e0,
                         keep_traj=True)
        if out is None:
            return flags.not_finished(options)
        traj[d] = (tasks, out)
    rows = {k: [] for k in ("omega", "d", "seed", "t", "m", "e")}
    for d, (tasks, out) in traj.items():
        T = out["t"].shape[1]
        rows["omega"].append(np.repeat(tasks["omega"], T))
        rows["d"].append(np.full(T * len(tasks["omega"]), d))
        rows["seed"].append(np.repeat(tasks["seed"], T))
        for k in ("t", "m", "e"):
            rows[k].append(np.asarray(out[k], np.float64).ravel())
    paths.append(write_csv(os.path.join(args.out, "sgd_trajectories.csv"),
                           {k: np.concatenate(v) for k, v in rows.items()}))

    # deviation from the ODE, per d (RMS over seeds and time, both overlaps)
    with float64_scope():
        dev = {}
        for d, (tasks, out) in traj.items():
            t_s = np.asarray(out["t"][0], np.float64)
            for om in compare_omegas:
                sel = tasks["omega"] == om
                mo, eo = sgd_ode_trajectory(tab, om, args.learning_rate, m0, e0, jnp.asarray(t_s))
                err = np.sqrt(np.mean((np.asarray(out["m"])[sel] - np.asarray(mo)) ** 2
                                      + (np.asarray(out["e"])[sel] - np.asarray(eo)) ** 2))
                dev[f"omega={om:g},d={d}"] = float(err)
        summary["sgd_vs_ode_rms_deviation"] = dev

    # 6. finite-d SGD from random inits: mechanism fractions over omega; escape-time scaling with d
    runs = {k: [] for k in ("kind", "omega", "d", "lr", "seed", "m0", "e0", "m_end", "e_end", "loss_end", "mechanism",
                            "escape_time", "escape_time_ode", "mechanism_ode", "ode_in_table")}

    def add_runs(kind, d, tasks, out, lr=args.learning_rate):
        with float64_scope():
            res = jax.vmap(lambda o, a, b: sgd_ode_solve(tab, o, lr, a, b, t_max=2e4))(
                jnp.asarray(tasks["omega"]), jnp.asarray(out["m0"], jnp.float64), jnp.asarray(out["e0"], jnp.float64))
        n = len(tasks["omega"])
        runs["kind"].append(np.full(n, kind))
        runs["omega"].append(tasks["omega"])
        runs["d"].append(np.full(n, d))
        runs["lr"].append(np.full(n, lr))
        runs["seed"].append(tasks["seed"])
        for k in ("m0", "e0", "m_end", "e_end", "loss_end", "escape_time"):
            runs[k].append(np.asarray(out[k], np.float64))
        runs["mechanism"].append(np.asarray(MECHANISMS)[np.asarray(classify_mechanism(out["m_end"], out["e_end"]))])
        runs["escape_time_ode"].append(np.asarray(res.escape_time))
        runs["mechanism_ode"].append(np.asarray(MECHANISMS)[np.asarray(res.mechanism)])
        runs["ode_in_table"].append(np.asarray(res.in_table))

    d = preset["sgd_d"]
    tasks = dict(omega=np.repeat(preset["sgd_omegas"], seeds).astype(np.float64),
                 seed=np.tile(np.arange(seeds), len(preset["sgd_omegas"])))
    print("SGD fractions ...", flush=True)
    out = _sgd_sweep(params, tasks, d, int(args.t_sgd * d), d, args.learning_rate, options, f"fractions_d{d}")
    if out is None:
        return flags.not_finished(options)
    add_runs("fractions", d, tasks, out)
    # the same at the published learning rate (fewer omegas and seeds: ten times more steps per unit time)
    tasks = dict(omega=np.repeat(preset["paper_lr_omegas"], preset["paper_lr_seeds"]).astype(np.float64),
                 seed=np.tile(np.arange(preset["paper_lr_seeds"]), len(preset["paper_lr_omegas"])) + 500)
    out = _sgd_sweep(params, tasks, d, int(preset["paper_lr_t"] * d), 5 * d, args.learning_rate_paper, options,
                     f"fractions_lr_paper_d{d}")
    if out is None:
        return flags.not_finished(options)
    add_runs("fractions_lr_paper", d, tasks, out, lr=args.learning_rate_paper)
    for d in preset["scaling_ds"]:
        tasks = dict(omega=np.full(preset["scaling_seeds"], 0.3), seed=np.arange(preset["scaling_seeds"]) + 7 * d)
        out = _sgd_sweep(params, tasks, d, int(100 * d), max(d // 10, 1), args.learning_rate, options, f"scaling_d{d}")
        if out is None:
            return flags.not_finished(options)
        add_runs("scaling", d, tasks, out)
    runs = {k: np.concatenate(v) for k, v in runs.items()}
    summary["ode_outside_table"]["runs"] = int(np.sum(~runs["ode_in_table"]))
    print("ODE trajectories outside the table's range (|m| <= {m_max:g}, |e| <= {e_max:g}): {phase_diagram_angles} "
          "phase-diagram angles, {trajectory_points} trace points, {runs} runs".format(
              **summary["ode_outside_table"], **{k: summary["table"][k] for k in ("m_max", "e_max")}), flush=True)
    paths.append(write_csv(os.path.join(args.out, "runs.csv"), runs))
    summary["sgd_fractions"] = _fractions(runs, "fractions")
    summary["sgd_fractions_lr_paper"] = _fractions(runs, "fractions_lr_paper")
    summary["seconds"] = time.perf_counter() - t0
    summary.update(flags.environment())
    paths.append(atomic_write_json(os.path.join(args.out, "summary.json"), summary))
    from phasejax.dynamics.plots import plot_all
    paths += plot_all(args.out)
    flags.print_paths(paths)
    return 0


def _fractions(runs, kind: str) -> dict:
    import numpy as np

    from phasejax.plotting_experiments import wilson_interval

    sel = runs["kind"] == kind
    out = {}
    for om in np.unique(runs["omega"][sel]):
        s = sel & (runs["omega"] == om)
        k = int(np.sum(runs["mechanism"][s] == "positional"))
        n = int(np.sum(s))
        lo, hi = wilson_interval(k, n)
        out[f"{om:g}"] = dict(n=n, positional=k / n, positional_low68=float(lo), positional_high68=float(hi),
                              semantic=float(np.mean(runs["mechanism"][s] == "semantic")),
                              agree_with_ode_from_same_init=float(np.mean(runs["mechanism"][s]
                                                                          == runs["mechanism_ode"][s])))
    return out
