"""Training throughput of the counting sweeps: run-steps and sequences per second, and the FLOP rate they imply.

`counting_throughput` times the training programs of `phasejax.tasks.histogram.train` after compilation at
batch 32: one `(d, p)` cell (`d = p = 32`, every configuration) and the whole CPU preset's grid (its groups by
`d`, every configuration), each a fixed number of Adam steps on the composition law and on the uniform law.
Given a checkout of an earlier phasejax (`baseline`, a folder holding its `phasejax` package), it times that
version's training path the same way in a fresh process of the same run: its vmapped `counting_run` on the
uniform law (the only law it has), a cell at `d = p = 32` and the preset's grid padded to its largest `d` and
`p` in chunks of 64 runs, as its sweep ran it. `phasejax bench --parts counting [--baseline PATH]` records it.

FLOP rates are the model's: the floating-point operations of the paper's forward pass of one sequence
(`model_flops`; the literal formulation, `phasejax.tasks.histogram.model.reference_logits`) times 3 for the
backward pass, times the sequences per second; `executed_flops_per_step` is XLA's count for one compiled step.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Callable


__all__ = ["model_flops", "counting_throughput", "BENCH_SIZES", "QUICK_SIZES"]

BENCH_SIZES = dict(T=32, L=10, batch=32, cell=(32, 32), cell_runs=30, steps=150, repeats=3,
                   preset_ds=(2, 4, 8, 16, 32, 64), preset_ps=(1, 2, 4, 8, 16, 32), preset_seeds=5,
                   configs=("linear", "linear+softmax", "dot", "dot+softmax", "dot+BOS", "dot+BOS+softmax"))
"""What `counting_throughput` times by default (the CPU preset's grid and seeds)."""

QUICK_SIZES = dict(BENCH_SIZES, cell=(8, 8), cell_runs=4, steps=8, repeats=1, preset_ds=(2, 4), preset_ps=(1, 2),
                   preset_seeds=2, configs=("dot+BOS+softmax", "linear"))
"""A smoke test's sizes (`phasejax bench --quick`)."""


def model_flops(mixing: str, T: int, L: int, d: int, p: int, bos: bool = False) -> int:
    """Floating-point operations of the paper's forward pass of one sequence (matrix products, 2 per
    multiply-add): the query and key projections and the scores (dot), the mixing, the two layers."""
    n = L + int(bos)
    mix = 2 * n * n * d
    attention = (2 * 2 * n * d * d + 2 * n * n * d) if mixing == "dot" else 0
    return int(attention + mix + 2 * n * d * p + 2 * n * p * (L + 1))


def program_size(compiled) -> dict:
    """Lines of a compiled program's optimised HLO and its temporary memory (`memory_analysis`)."""
    mem = compiled.memory_analysis()
    return dict(hlo_lines=len(compiled.as_text().splitlines()),
                temp_bytes=int(getattr(mem, "temp_size_in_bytes", 0) or 0) if mem is not None else None)


def _new_call(task, cfg, cells, seeds, width, hidden, steps, batch):
    """The compiled training program of a group (one epoch of `steps` steps, a held-out set of one block), its
    arguments, its compile seconds and XLA's flops of one step."""
    import jax
    import jax.numpy as jnp

    from phasejax.tasks.histogram.train import CountingProtocol, batch_loss, group_trainer, init_group, run_keys, \
        slot_batch

    protocol = CountingProtocol(epochs=1, epoch_size=steps * batch, batch_size=batch, n_test=32)
    fn = group_trainer(task, cfg.mixing, cfg.softmax, protocol)
    params = init_group(task, cfg.mixing, cells, seeds, width, hidden, protocol.init)
    opt = protocol.optimizer()
    state = jax.vmap(opt.init)(params)
    keys = jnp.stack([run_keys(int(s))[1] for s in seeds])
    args = (params, state, keys, jnp.asarray([c[0] for c in cells], jnp.float32), jnp.arange(1))
    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    compile_s = time.perf_counter() - t0

    def one_step(params, state, key, d):
        batch_ = slot_batch(key, task, batch, cfg.mixing)
        grad = jax.grad(batch_loss)(params, batch_, cfg.softmax, d)
        return opt.update(grad, state, params)

    cost = jax.jit(jax.vmap(one_step)).lower(params, state, keys, args[3]).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return compiled, args, compile_s, float((cost or {}).get("flops", float("nan")))


def _best_of(call, args, repeats: int) -> float:
    import jax

    jax.block_until_ready(call(*args))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(call(*args))
        best = min(best, time.perf_counter() - t0)
    return best


def _new_path(sizes: dict, law: str, log: Callable[[str], None]) -> dict:
    """The present training path: the cell and the preset's grid on `law`."""
    from phasejax.tasks.histogram import COUNTING_CONFIGS, CountingGrid, HistogramTask
    from phasejax.tasks.histogram.sweep import plan_groups

    T, L, B, steps = sizes["T"], sizes["L"], sizes["batch"], sizes["steps"]
    d, p = sizes["cell"]
    cell = dict(seconds=0.0, compile_seconds=0.0, run_steps=0, model_flops=0.0, executed_flops=0.0, programs={})
    preset = dict(seconds=0.0, compile_seconds=0.0, run_steps=0, model_flops=0.0, groups=0)
    grid = CountingGrid(ds=sizes["preset_ds"], ps=sizes["preset_ps"], seeds=tuple(range(sizes["preset_seeds"])))
    tasks = grid.tasks()
    for name in sizes["configs"]:
        cfg = COUNTING_CONFIGS[name]
        task = HistogramTask(T, L, cfg.bos, law)
        R = sizes["cell_runs"]
        call, args, c_s, flops = _new_call(task, cfg, [(d, p)] * R, list(range(R)), d, p, steps, B)
        s = _best_of(call, args, sizes["repeats"])
        cell["seconds"] += s
        cell["compile_seconds"] += c_s
        cell["run_steps"] += R * steps
        cell["model_flops"] += 3.0 * model_flops(cfg.mixing, T, L, d, p, cfg.bos) * B * R * steps
        cell["executed_flops"] += flops * steps
        cell["programs"][name] = program_size(call)
        for group in plan_groups(grid, "d"):
            rows = group["runs"]
            cells = list(zip(tasks["d"][rows], tasks["p"][rows]))
            call, args, c_s, _ = _new_call(task, cfg, cells, tasks["seed"][rows], group["width"], group["hidden"],
                                           steps, B)
            preset["seconds"] += _best_of(call, args, sizes["repeats"])
            preset["compile_seconds"] += c_s
            preset["run_steps"] += len(rows) * steps
            preset["model_flops"] += sum(3.0 * model_flops(cfg.mixing, T, L, dv, pv, cfg.bos) * B * steps
                                         for dv, pv in cells)
            preset["groups"] += 1
        log(f"counting ({law}): {name} timed")
    return dict(cell=_rates(cell, B), preset=_rates(preset, B))


def _rates(rec: dict, batch: int) -> dict:
    out = dict(rec)
    out["run_steps_per_second"] = rec["run_steps"] / rec["seconds"]
    out["sequences_per_second"] = batch * rec["run_steps"] / rec["seconds"]
    out["model_gflops_per_second"] = rec["model_flops"] / rec["seconds"] / 1e9
    if "executed_flops" in rec:
        out["executed_gflops_per_second"] = rec["executed_flops"] / rec["seconds"] / 1e9
        out["executed_flops_per_run_step"] = rec["executed_flops"] / rec["run_steps"]
    return out


_BASELINE_CODE = """
import json, sys, time
import jax, jax.numpy as jnp
from phasejax.tasks.histogram.counting import COUNTING_CONFIGS, counting_run
from phasejax.tasks.histogram.data import HistogramTask
s = json.loads(sys.argv[1])
programs = {}
def best(fn, *a, name=None):
    c = jax.jit(fn).lower(*a).compile()
    if name:
        m = c.memory_analysis()
        programs[name] = dict(hlo_lines=len(c.as_text().splitlines()),
                              temp_bytes=int(getattr(m, "temp_size_in_bytes", 0) or 0) if m is not None else None)
    jax.block_until_ready(c(*a)); b = 1e9
    for _ in range(s["repeats"]):
        t0 = time.perf_counter(); jax.block_until_ready(c(*a)); b = min(b, time.perf_counter() - t0)
    return b
try:
    make = lambda bos: HistogramTask(s["T"], s["L"], bos, law="uniform")
    make(False)
except TypeError:
    make = lambda bos: HistogramTask(s["T"], s["L"], bos)
d, p = s["cell"]; R = s["cell_runs"]; steps = s["steps"]; B = s["batch"]
ds = [x for x in s["preset_ds"] for _ in s["preset_ps"] for _ in range(s["preset_seeds"])]
ps = [y for _ in s["preset_ds"] for y in s["preset_ps"] for _ in range(s["preset_seeds"])]
seeds = [z for _ in s["preset_ds"] for _ in s["preset_ps"] for z in range(s["preset_seeds"])]
chunk = min(64, len(ds)); calls = -(-len(ds) // chunk)
out = dict(cell=dict(seconds=0.0, run_steps=0), preset=dict(seconds=0.0, run_steps=0, calls=0))
for name in s["configs"]:
    cfg = COUNTING_CONFIGS[name]
    task = make(False)
    kw = dict(task=task, cfg=cfg, steps=steps, batch_size=B, n_test=32)
    out["cell"]["seconds"] += best(jax.vmap(lambda x: counting_run(x, d, p, d_max=d, p_max=p, **kw)), jnp.arange(R),
                                   name=name)
    out["cell"]["run_steps"] += R * steps
    dm, pm = max(s["preset_ds"]), max(s["preset_ps"])
    f = jax.vmap(lambda x, dd, pp: counting_run(x, dd, pp, d_max=dm, p_max=pm, **kw))
    t = best(f, jnp.asarray(seeds[:chunk]), jnp.asarray(ds[:chunk]), jnp.asarray(ps[:chunk]))
    out["preset"]["seconds"] += calls * t
    out["preset"]["run_steps"] += len(ds) * steps
    out["preset"]["calls"] += calls
out["cell"]["programs"] = programs
print(json.dumps(out))
"""


def _baseline_path(sizes: dict, baseline: str, timeout: float = 3600) -> dict:
    """The baseline checkout's training path timed in a fresh Python process
    (`phasejax.benchmarks.record.fresh_process`, the baseline's package imported)."""
    from phasejax.benchmarks.record import fresh_process
    from phasejax.tasks.histogram import COUNTING_CONFIGS

    rec = fresh_process(_BASELINE_CODE, json.dumps(sizes), source=os.path.abspath(baseline), timeout=timeout)
    T, L, B, steps = sizes["T"], sizes["L"], sizes["batch"], sizes["steps"]
    d, p = sizes["cell"]
    configs = [COUNTING_CONFIGS[n] for n in sizes["configs"]]
    cell_flops = sum(3.0 * model_flops(c.mixing, T, L, d, p, c.bos) for c in configs) * B * sizes["cell_runs"] * steps
    preset_flops = sum(3.0 * model_flops(c.mixing, T, L, dv, pv, c.bos) for c in configs
                       for dv in sizes["preset_ds"] for pv in sizes["preset_ps"]) * B * sizes["preset_seeds"] * steps
    rec["cell"]["model_flops"], rec["preset"]["model_flops"] = cell_flops, preset_flops
    return dict(cell=_rates(rec["cell"], B), preset=_rates(rec["preset"], B))


def counting_throughput(*, quick: bool = False, baseline: str | None = None,
                        log: Callable[[str], None] = lambda line: None) -> dict:
    """The bench record of the counting training (see the module docstring): `present[law]["cell" | "preset"]`
    with seconds, run-steps, `run_steps_per_second`, `sequences_per_second`, `model_gflops_per_second`, and,
    given `baseline`, `baseline` timed the same way before and after the present path (the faster kept;
    both in `baseline_runs`) and `speedup` (present over baseline, same law: uniform)."""
    sizes = dict(QUICK_SIZES if quick else BENCH_SIZES)
    plain = {k: list(v) if isinstance(v, tuple) else v for k, v in sizes.items()}
    before = _baseline_path(plain, baseline) if baseline is not None else None
    if before is not None:
        log("counting: the baseline timed (before)")
    present = {law: _new_path(sizes, law, log) for law in ("composition", "uniform")}
    record = dict(sizes=plain, present=present)
    if baseline is not None:
        after = _baseline_path(plain, baseline)
        # the baseline is timed before and after the present path; the faster of the two is kept (a drift of the
        # machine's load then works against the present path's speedup, not for it)
        old = {part: min(before[part], after[part], key=lambda r: r["seconds"]) for part in ("cell", "preset")}
        record["baseline_runs"] = dict(before=before, after=after)
        commit = subprocess.run(["git", "-C", baseline, "rev-parse", "HEAD"], capture_output=True, text=True)
        record["baseline"] = dict(source=os.path.abspath(baseline), commit=commit.stdout.strip() or None, **old)
        record["speedup"] = {part: present["uniform"][part]["run_steps_per_second"]
                             / old[part]["run_steps_per_second"] for part in ("cell", "preset")}
        record["speedup_composition_over_baseline_uniform"] = {
            part: present["composition"][part]["run_steps_per_second"] / old[part]["run_steps_per_second"]
            for part in ("cell", "preset")}
    return record


def counting_entry(*, quick: bool = False, baseline: str | None = None,
                   log: Callable[[str], None] = lambda line: None) -> dict:
    """`counting_throughput` as a figure of `phasejax bench` (the keys every figure's record has)."""
    rec = counting_throughput(quick=quick, baseline=baseline, log=log)
    pre = rec["present"]["composition"]["preset"]
    points = int(pre["run_steps"])
    what = ("counting training after compilation, batch 32: run-steps per second of one cell (d = p = 32, every "
            "configuration) and of the CPU preset's grid (groups by d), on the composition and uniform laws"
            + ("; the baseline checkout's path on the uniform law in the same run (speedup)" if baseline else ""))
    return dict(name="counting", what=what, seconds=float(pre["seconds"]), seconds_per_point=pre["seconds"] / points,
                points=points, solves=points, compilation_included=False, statuses={}, converged=0,
                ratio=None, details=rec)
