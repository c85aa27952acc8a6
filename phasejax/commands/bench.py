"""Time every benchmark figure of phasejax on the device JAX sees and write one JSON record.

    phasejax bench                                   # every figure; runs/bench/<cpu|gpu|tpu>.json
    phasejax bench --out results/bench               # the committed record (refused if one exists: --overwrite)
    phasejax bench --parts cold_solve warm_point     # some figures
    phasejax bench --quick --out /tmp/bench          # every figure shrunk to a tiny size (a smoke test)

Figures (`phasejax.bench`): program (the compiled program of a 40-alpha phase-diagram chunk in a fresh
process: lowering and compile seconds, HLO lines, kernels, memory; --baseline PATH measures another checkout in
the same run), cold_solve (one cold solve per subspace, compilation included, then after compilation),
cached_solve (a cold solve in two fresh processes sharing a persistent compilation cache), warm_point (one
continuation point after compilation), batch (a 32-point continuation grid per point, against the published
method on one point timed in the same run), gradient (jax.value_and_grad of a solve against the solve),
vmapped_batch (jax.vmap of 4 solves against a loop of them), lines (`phasejax boundary` in a fresh process, with
no compilation cache and with a filled one), main_job (`phasejax phase-diagram` at its defaults, the map and the
lines, in a fresh process with no compilation cache; --lines-host-devices N runs both commands on N simulated
CPU devices), paper_diagram (the paper's 40 x 20 x 2 diagram; with --project, the default on a CPU,
projected from 2 of its 20 omega rows), training (the vmapped training sweep and the solvers, as
`phasejax bench-training`), counting (the counting training's run-steps per second at batch 32, one cell
`d = p = 32` and the CPU preset's grid; --baseline PATH times that checkout's training path in the same run).
The record holds the UTC date, the device, the versions and git commit, and per
figure: seconds, seconds per point, points, whether compilation is included, statuses, and for batch the
published method's time and the ratio. The figures run in the order --parts names them, and the record is
written after each one (`"complete": false` until the last), so a run cut short keeps the figures it finished.
An existing record is never replaced without --overwrite.
"""

from __future__ import annotations

import argparse
import os
import sys

from phasejax.commands.argtypes import UsageError, guard_output_file, positive_int
from phasejax.commands.flags import add_mode, add_output, default_out

NAME = "bench"
HELP = "time every benchmark figure on the device JAX sees; writes <out>/<device>.json"


def add_arguments(ap) -> None:
    from phasejax.bench import FIGURES, PROJECT_ROWS

    ap.add_argument("--parts", nargs="+", choices=FIGURES, default=list(FIGURES), metavar="PART",
                    help=f"figures to time, of: {', '.join(FIGURES)}")
    ap.add_argument("--quick", action="store_true",
                    help="shrink every figure to a tiny size (few points, 4 Gauss-Hermite nodes per dimension, the "
                         "published method at 2): a smoke test, not a measurement; the record says quick: true")
    ap.add_argument("--project", action=argparse.BooleanOptionalAction, default=None,
                    help=f"paper_diagram: run {PROJECT_ROWS} of its omega rows and project the full diagram's time "
                         f"(default: on a CPU, where the full diagram takes over an hour); --no-project runs it all")
    ap.add_argument("--reference", default=None,
                    help="the published method's script (default: shared/reference_method/se_scipy_loop.py inside "
                         "or beside the repository; batch records it as missing if there is none)")
    ap.add_argument("--baseline", default=None, metavar="PATH",
                    help="program: also measure the compiled program of this checkout of another phasejax version (a "
                         "folder holding its phasejax package, e.g. a git worktree of an older commit), in the same run")
    ap.add_argument("--lines-host-devices", type=positive_int, default=None, metavar="N",
                    help="lines, main_job: run the commands with --host-devices N (default: their own default)")
    add_output(ap, default_out(NAME), help="folder of the record <device>.json", guard=False)
    ap.add_argument("--no-progress", action="store_true", help="no progress lines (stderr) or progress bars")
    for dest, parts in (("project", ("paper_diagram",)), ("reference", ("batch",)), ("baseline", ("program", "counting")),
                        ("lines_host_devices", ("lines", "main_job"))):
        add_mode(ap, f"with --parts without {' or '.join(parts)}",
                 lambda args, parts=parts: not set(parts) & set(args.parts),
                 ignores=(dest,), why=f"only {' and '.join(parts)} read{'s' if len(parts) == 1 else ''} it")


def record_path(out: str, device: str) -> str:
    """`<out>/<device>.json`."""
    return os.path.join(out, f"{device}.json")


def refuse_existing(path: str, overwrite: bool) -> None:
    """Exit with a one-line error if `path` exists and `overwrite` is off."""
    if os.path.exists(path) and not overwrite:
        raise UsageError(f"{path} exists; pass another --out, or --overwrite to replace it")


def run(args) -> int:
    from phasejax import bench
    from phasejax.io import atomic_write_json

    reference = args.reference
    if reference is not None and not os.path.isfile(reference):
        raise UsageError(f"--reference {reference}: no such file; pass the published method's script")
    if args.baseline is not None and not os.path.isdir(os.path.join(args.baseline, "phasejax")):
        raise UsageError(f"--baseline {args.baseline}: no phasejax package there; pass a checkout of phasejax")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out} is a file, not a folder; pass a folder to --out (the record is written "
                         "as <out>/<device>.json)")
    path = guard_output_file(record_path(args.out, bench.device_name()), args.overwrite)   # before any compute
    import jax
    plan = bench.BenchPlan(quick=args.quick, reference=reference or bench.find_reference(), baseline=args.baseline,
                           project=(jax.default_backend() == "cpu") if args.project is None else args.project,
                           progress=not args.no_progress, host_devices=args.lines_host_devices)

    def progress(line: str) -> None:
        if not args.no_progress:
            print(line, file=sys.stderr, flush=True)

    def keep(report: dict) -> None:   # the record so far after every figure: a run cut short keeps what is done
        atomic_write_json(path, report)

    report = bench.benchmark_report(args.parts, plan, progress=progress, on_figure=keep)
    for entry in report["figures"]:
        print(f"{entry['name']}: {bench.summary_line(entry)}")
    print(f"wrote: {path}")
    return 0
