"""Extensions of the main model (theory and experiments), one at a time.

    phasejax extension untied                        # CPU preset, into runs/extensions/untied/
    phasejax extension rank2 --preset gpu --out runs/rank2_gpu
    phasejax extension untied --out results/extensions/untied --replot --overwrite   # re-derive from the CSVs

Each extension (`phasejax.extensions.<name>`, its presets in its `PRESETS`) writes theory.csv (state evolution
with 95% quadrature errors, where the extension has a theory), runs.csv (one row per trained student),
thresholds.csv, summary.json and a figure (`phasejax.extensions.run_extension`). Chunks go to --run-dir
(default <out>/run): a killed run resumes there. An --out folder that holds results of another configuration
(or files of unknown origin, such as the committed results/) is refused unless --overwrite.
"""

from __future__ import annotations

import os
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import UsageError, run_dir_from

NAME = "extension"
HELP = "untied / correlated / rank-2 / value / general-L / second-A extensions: theory and experiments"

EXTENSION_NAMES = ("untied", "correlated", "rank2", "value", "general_L", "second_A")
"""`phasejax.extensions.EXTENSIONS`, spelled here so that parsing the command line does not import JAX (a test
checks that the two agree)."""


def _default_out(args) -> str:
    return os.path.join("runs", "extensions", args.name)


def add_arguments(ap) -> None:
    ap.add_argument("name", choices=EXTENSION_NAMES, help="which extension")
    flags.add_preset(ap, "cpu: the committed results (minutes on 2 cores); gpu: larger grids, more seeds and sizes")
    flags.add_output(ap, _default_out, help="output folder (default runs/extensions/<name>; refused when it holds "
                                      "another configuration's results unless --overwrite)")
    ap.add_argument("--tied-thresholds", default=None,
                    help="the tied model's thresholds.csv that untied and second_A compare with (default: the "
                         "repository's results/phase_diagram/thresholds.csv)")
    flags.add_replot(ap, "no training or solving: read <out>'s theory.csv and runs.csv, derive the thresholds, summary "
                   "and extra tables again and redraw the figure (a theory.csv without the replicon columns gets "
                   "them, about 2 s a row)", uses=("name", "preset", "tied_thresholds"))
    flags.add_run_options(ap, chunk_size=None, multi_host=False,
                    chunk_help="tasks per compiled call of every sweep (default: each sweep's own)")


def run(args) -> int:
    from phasejax.extensions import USES_TIED, ExtensionRun, run_extension

    if args.tied_thresholds is not None and args.name not in USES_TIED:
        raise UsageError(f"--tied-thresholds is used by {' and '.join(USES_TIED)} only, not {args.name}; drop it")
    if args.replot and not os.path.exists(os.path.join(args.out, "runs.csv")):
        raise UsageError(f"--replot needs {os.path.join(args.out, 'runs.csv')}; run the command first, or pass the "
                         "--out that holds it")
    start = time.time()
    run = ExtensionRun(run_dir=run_dir_from(args, args.out), progress=not args.no_progress,
                       chunk_size=args.chunk_size)
    paths = run_extension(args.name, args.preset, args.out, run=run, tied_path=args.tied_thresholds,
                          replot=args.replot, command=flags.command_line())
    flags.print_paths(paths)
    print(f"extension {args.name} ({args.preset} preset) done in {time.time() - start:.0f} s")
    return 0
