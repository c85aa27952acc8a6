"""Extensions of the main model (theory and experiments), one at a time.

    phasejax extension untied                 # CPU preset, into results/extensions/untied/
    phasejax extension general_L --preset gpu --run-dir runs/general_L

Each extension (`phasejax.extensions.<name>`) writes theory.csv (state evolution with 95% quadrature errors,
where the extension has a theory), runs.csv (one row per trained student), thresholds.csv and a figure.
A killed run resumes from --run-dir.
"""

from __future__ import annotations

import importlib
import os
import time

from phasejax.extensions import EXTENSIONS

NAME = "extension"
HELP = "untied / correlated / rank-2 / value / general-L / second-A extensions: theory and experiments"


def add_arguments(ap) -> None:
    ap.add_argument("name", choices=EXTENSIONS, help="which extension")
    ap.add_argument("--preset", choices=("cpu", "gpu"), default="cpu",
                    help="cpu: the committed results (minutes on 2 cores); gpu: larger grids and sizes")
    ap.add_argument("--out", default=None, help="output directory (default results/extensions/<name>)")
    ap.add_argument("--run-dir", default=None, help="chunk directory for resuming (default: a temporary one)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args) -> int:
    module = importlib.import_module(f"phasejax.extensions.{args.name}")
    out = args.out or os.path.join("results", "extensions", args.name)
    start = time.time()
    paths = module.main(out, preset=args.preset, run_dir=args.run_dir, progress=not args.no_progress)
    for p in paths:
        print(p)
    print(f"extension {args.name} ({args.preset} preset) done in {time.time() - start:.0f} s")
    return 0
