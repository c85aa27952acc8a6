"""Counting sweeps: every `(d, p, seed)` of a grid trained for one or more configurations, in resumable chunks.

The runs of a configuration are cut into groups that share their parameter shapes (`SweepPlan.grouping`):

* `"cell"`: one group per `(d, p)`, the exact shapes;
* `"d"` (the default): one group per `d`, the hidden layer zero-padded to the group's largest `p`;
* `"all"`: one group, padded to the grid's largest `d` and `p` (fewest programs: for accelerators).

Zero padding is exact (`phasejax.tasks.histogram.model`), so the grouping changes the rounding of the results,
not the results. Each group is one compiled `vmap` of `train_epochs` over its runs, called segment by segment
(`SweepPlan.segment_epochs` epochs each); after every segment the group's state (parameters, Adam's moments) and
its per-epoch outputs so far are written atomically to `run_dir/<config>/chunks/group_<g>.npz`, sealed with the
run's fingerprint (`phasejax.sweep.seal_chunk`), so a sweep cut short resumes from its last finished segment. A
run's epoch `e` draws its sequences from `fold_in(data_key, e)`, so the segmenting does not change the results
either, and a resumed sweep may use another `segment_epochs`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.io import atomic_save_npz, load_npz
from phasejax.precision import dtype_scope
from phasejax.sweep import RunOptions, canonical_config, chunk_problem, claim_run_dir, run_dir_lock, run_options, \
    run_record, seal_chunk
from phasejax.tasks.histogram.counting import (COUNTING_CONFIGS, CURVE_COLUMNS, RUN_COLUMNS, CountingConfig,
                                               CountingGrid, CountingRuns)
from phasejax.tasks.histogram.data import HistogramTask
from phasejax.tasks.histogram.train import CountingProtocol, group_trainer, init_group, run_keys

__all__ = ["GROUPINGS", "SweepPlan", "plan_groups", "counting_sweep", "counting_phase_diagrams"]

GROUPINGS = ("cell", "d", "all")
"""How the runs of a configuration are grouped into compiled programs (see the module docstring)."""


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """How a sweep is cut into programs and chunks (none of it changes the results beyond rounding).

    Attributes:
      grouping: one of `GROUPINGS`.
      max_runs: split a group into parts of at most this many runs (`None`: no limit).
      segment_epochs: epochs per chunk (one call of a group's program; `None`: all of them).
    """

    grouping: str = "d"
    max_runs: int | None = None
    segment_epochs: int | None = None

    def __post_init__(self):
        if self.grouping not in GROUPINGS:
            raise ValueError(f"grouping must be one of {GROUPINGS}, got grouping={self.grouping!r}")
        for name in ("max_runs", "segment_epochs"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1):
                raise ValueError(f"{name} must be an integer >= 1 or None, got {name}={v!r}")


def plan_groups(grid: CountingGrid, grouping: str = "d", max_runs: int | None = None) -> list[dict]:
    """The groups of `grid.tasks()`: each `dict(runs=(R,) row indices, width=d, hidden=p)` with the padded shapes
    (`width`, `hidden`) its runs share; every row in exactly one group, in row order within a group."""
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping must be one of {GROUPINGS}, got grouping={grouping!r}")
    tasks = grid.tasks()
    d, p = tasks["d"], tasks["p"]
    key = {"cell": lambda i: (d[i], p[i]), "d": lambda i: (d[i],), "all": lambda i: ()}[grouping]
    groups: dict = {}
    for i in range(len(d)):
        groups.setdefault(key(i), []).append(i)
    out = []
    for rows in groups.values():
        size = len(rows) if max_runs is None else int(max_runs)
        for start in range(0, len(rows), size):
            part = np.asarray(rows[start:start + size], np.int64)
            out.append(dict(runs=part, width=int(d[part].max()), hidden=int(p[part].max())))
    return out


def sweep_config(grid: CountingGrid, task: HistogramTask, cfg: CountingConfig, protocol: CountingProtocol,
                 plan: SweepPlan) -> dict:
    """What `run_dir/config.json` records of one configuration's sweep (the segmenting is left out: it does not
    change the chunk files' content)."""
    return dict(kind="counting_sweep", config=cfg.name, task=dataclasses.asdict(cfg.task(task)), **grid.to_json(),
                protocol=protocol.to_json(), grouping=plan.grouping, max_runs=plan.max_runs)


def _flat(prefix: str, tree) -> dict:
    leaves = jax.tree_util.tree_leaves(tree)
    return {f"{prefix}{i:03d}": np.asarray(x) for i, x in enumerate(leaves)}


def _unflat(prefix: str, chunk: dict, like):
    leaves, treedef = jax.tree_util.tree_flatten(like)
    return jax.tree_util.tree_unflatten(treedef, [jnp.asarray(chunk[f"{prefix}{i:03d}"]) for i in range(len(leaves))])


def _set_aside(path: str, problem: str, log: Callable[[str], None]) -> None:
    aside = path + ".rejected"
    os.replace(path, aside)
    log(f"phasejax: warning: chunk {path} {problem}; moved to {aside}, computing its group again")


def counting_sweep(grid: CountingGrid, task: HistogramTask, cfg: CountingConfig | str,
                   protocol: CountingProtocol = CountingProtocol(), plan: SweepPlan = SweepPlan(), *,
                   options: RunOptions | None = None, log: Callable[[str], None] | None = None) -> CountingRuns | None:
    """Train every `(d, p, seed)` of `grid` for the configuration `cfg` (`task.law` the data; `cfg.bos` decides
    the BOS token) under `protocol`, grouped and cut into chunks by `plan` (see the module docstring).

    Returns `CountingRuns` with one row per run (`RUN_COLUMNS`) and the per-epoch curves (`CURVE_COLUMNS`), or
    `None` while groups are unfinished (`options.max_chunks` segments computed, or other processes' groups).
    `log` gets a line per segment."""
    if not isinstance(grid, CountingGrid):
        raise ValueError(f"grid must be a CountingGrid, got {type(grid).__name__}")
    if not isinstance(task, HistogramTask):
        raise ValueError(f"task must be a HistogramTask, got {type(task).__name__}")
    cfg = CountingConfig.from_name(cfg) if isinstance(cfg, str) else cfg
    if not isinstance(cfg, CountingConfig):
        raise ValueError(f"cfg must be a CountingConfig or a configuration name, got {cfg!r}")
    if not isinstance(protocol, CountingProtocol):
        raise ValueError(f"protocol must be a CountingProtocol, got {type(protocol).__name__}")
    if not isinstance(plan, SweepPlan):
        raise ValueError(f"plan must be a SweepPlan, got {type(plan).__name__}")
    options = run_options(options)
    log = log or (lambda line: None)
    if options.run_dir is None:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            return counting_sweep(grid, task, cfg, protocol, plan, options=options.replace(run_dir=tmp), log=log)
    with run_dir_lock(options.run_dir, options.process_index), dtype_scope(np.float32):
        return _sweep(grid, cfg.task(task), cfg, protocol, plan, options, log)


def _sweep(grid, task, cfg, protocol, plan, options, log):
    tasks = grid.tasks()
    config = sweep_config(grid, task, cfg, protocol, plan)
    record = claim_run_dir(options.run_dir, run_record(config, tasks, len(tasks["d"])))
    fingerprint = record["fingerprint"]
    os.makedirs(os.path.join(options.run_dir, "chunks"), exist_ok=True)
    groups = plan_groups(grid, plan.grouping, plan.max_runs)
    E = protocol.epochs
    segment = plan.segment_epochs or E
    opt = protocol.optimizer()
    program = None
    computed, results = 0, {}
    for g, group in enumerate(groups):
        rows = group["runs"]
        path = os.path.join(options.run_dir, "chunks", f"group_{g:04d}.npz")
        chunk = None
        if os.path.exists(path):
            chunk = load_npz(path)
            problem = chunk_problem(chunk, fingerprint, g, rows)
            if problem is not None:
                _set_aside(path, problem, log)
                chunk = None
        done = int(chunk["epochs_done"][0]) if chunk is not None else 0
        if done == E:
            results[g] = chunk
            continue
        if g % options.process_count != options.process_index:
            continue
        cells = list(zip(tasks["d"][rows], tasks["p"][rows]))
        params = init_group(task, cfg.mixing, cells, tasks["seed"][rows], group["width"], group["hidden"],
                            protocol.init)
        opt_state = jax.vmap(opt.init)(params)
        loss = np.full((len(rows), E), np.nan, np.float32)
        acc = np.full((len(rows), E), np.nan, np.float32)
        if chunk is not None:
            params, opt_state = _unflat("params_", chunk, params), _unflat("opt_", chunk, opt_state)
            loss[:, :done], acc[:, :done] = chunk["loss"][:, :done], chunk["accuracy"][:, :done]
        keys = jnp.stack([run_keys(int(s))[1] for s in tasks["seed"][rows]])
        ds = jnp.asarray(tasks["d"][rows], jnp.float32)
        if program is None:
            program = group_trainer(task, cfg.mixing, cfg.softmax, protocol)
        while done < E:
            if options.max_chunks is not None and computed >= options.max_chunks:
                return None
            stop = min(done + segment, E)
            t0 = time.perf_counter()
            params, opt_state, out = program(params, opt_state, keys, ds, jnp.arange(done, stop))
            loss[:, done:stop], acc[:, done:stop] = np.asarray(out["loss"]), np.asarray(out["accuracy"])
            done = stop
            sealed = seal_chunk(dict(_flat("params_", params), **_flat("opt_", opt_state), loss=loss, accuracy=acc,
                                     epochs_done=np.full(len(rows), done, np.int64)), fingerprint, g, rows)
            atomic_save_npz(path, sealed)
            computed += 1
            log(f"{cfg.name}: group {g + 1}/{len(groups)} (d <= {group['width']}, p <= {group['hidden']}, "
                f"{len(rows)} runs) epochs {done}/{E} in {time.perf_counter() - t0:.1f} s")
        results[g] = sealed
    if len(results) < len(groups):
        return None
    return _collect(grid, task, cfg, protocol, groups, results, config)


def _collect(grid, task, cfg, protocol, groups, results, config) -> CountingRuns:
    tasks = grid.tasks()
    n, E = len(tasks["d"]), protocol.epochs
    loss = np.empty((n, E), np.float64)
    acc = np.empty((n, E), np.float64)
    for g, group in enumerate(groups):
        loss[group["runs"]] = results[g]["loss"]
        acc[group["runs"]] = results[g]["accuracy"]
    runs = dict(config=np.full(n, cfg.name), T=np.full(n, task.T, np.int32), L=np.full(n, task.L, np.int32),
                d=tasks["d"], p=tasks["p"], seed=tasks["seed"], accuracy=acc[:, -1], final_loss=loss[:, -1],
                data=np.full(n, task.law), steps=np.full(n, protocol.steps, np.int64),
                batch_size=np.full(n, protocol.batch_size, np.int32), best_accuracy=np.nanmax(acc, axis=1))
    rep = lambda v: np.repeat(np.asarray(v), E)      # noqa: E731
    epoch = np.tile(np.arange(1, E + 1), n)
    curves = dict(config=np.full(n * E, cfg.name), d=rep(tasks["d"]), p=rep(tasks["p"]), seed=rep(tasks["seed"]),
                  epoch=epoch, step=epoch.astype(np.int64) * protocol.steps_per_epoch, loss=loss.ravel(),
                  accuracy=acc.ravel())
    return CountingRuns(runs={k: runs[k] for k in RUN_COLUMNS}, config={cfg.name: canonical_config(config)},
                        curves={k: curves[k] for k in CURVE_COLUMNS})


def counting_phase_diagrams(grid: CountingGrid, task: HistogramTask, configs=None,
                            protocol: CountingProtocol = CountingProtocol(), plan: SweepPlan = SweepPlan(), *,
                            options: RunOptions | None = None,
                            log: Callable[[str], None] | None = None) -> CountingRuns | None:
    """`counting_sweep` for each configuration (default: all six), one after the other.

    With `options.run_dir`, configuration `c` resumes in `run_dir/<c.dir_name>` (`dot_BOS_softmax`). Returns the
    concatenated `CountingRuns`, or `None` while any configuration is unfinished (`options.max_chunks` counts
    the segments of each configuration)."""
    names = list(COUNTING_CONFIGS) if configs is None else [configs] if isinstance(configs, str) else list(configs)
    cfgs = [c if isinstance(c, CountingConfig) else CountingConfig.from_name(c) for c in names]
    if not cfgs:
        raise ValueError("configs must name at least one configuration")
    if len({c.name for c in cfgs}) != len(cfgs):
        raise ValueError(f"configs must not repeat a configuration, got {[c.name for c in cfgs]}")
    options = run_options(options)
    parts = []
    for cfg in cfgs:
        opts = options if options.run_dir is None else options.replace(
            run_dir=os.path.join(options.run_dir, cfg.dir_name))
        parts.append(counting_sweep(grid, task, cfg, protocol, plan, options=opts, log=log))
    if any(p is None for p in parts):
        return None
    return CountingRuns.concatenate(parts)
