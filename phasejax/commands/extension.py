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
from phasejax.commands.argtypes import run_dir_from

NAME = "extension"
HELP = "untied / correlated / rank-2 / value / general-L / second-A / Huber-loss extensions: theory and experiments"

EXTENSION_NAMES = ("untied", "correlated", "rank2", "value", "general_L", "second_A", "huber")
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
                   "them, about 2 s a row; the data files are not rewritten); the preset is the one the folder "
                   "records", uses=("name", "tied_thresholds"), owner={"name": "extension"})
    flags.add_mode(ap, f"with an extension other than {' or '.join(USES_TIED)}",
                   lambda args: args.name not in USES_TIED, ignores=("tied_thresholds",),
                   why=f"only {' and '.join(USES_TIED)} compare with the tied model's thresholds")
    flags.add_run_options(ap, chunk_size=None, multi_host=False,
                    chunk_help="tasks per compiled call of every sweep (default: each sweep's own)")


USES_TIED = ("untied", "second_A")
"""`phasejax.extensions.USES_TIED`, spelled here so that parsing the command line does not import JAX."""

REPLOT_READS = {
    "untied": {"theory.csv": ("alpha", "omega", "init", "converged", "q", "m", "theta", "train_loss",
                              "train_loss_err", "test_error", "test_error_err", "energetic_loss", "global_min"),
               "runs.csv": ("alpha", "omega", "seed", "init", "d", "q", "m", "theta", "train_loss", "test_error"),
               "thresholds.csv": ("alpha_c",)},
    "rank2": {"theory.csv": ("alpha", "omega", "init", "branch", "converged", "train_loss", "train_loss_err",
                             "test_error", "test_error_err", "energetic_loss", "global_min"),
              "runs.csv": ("alpha", "omega", "seed", "init", "d", "train_loss", "test_error"),
              "thresholds.csv": ("alpha_c",)},
    "correlated": {"theory.csv": ("alpha", "omega", "rho", "branch", "mean_norm", "train_loss", "train_loss_err",
                                  "test_error", "test_error_err", "cluster_gain", "cluster_gain_err"),
                   "runs.csv": ("alpha", "rho", "seed", "init", "d", "m_cluster", "train_loss", "test_error"),
                   "thresholds.csv": ("source", "d", "alpha_c")},
    "value": {"theory.csv": ("alpha", "omega", "branch", "m", "theta", "train_loss", "test_error"),
              "runs.csv": ("alpha", "omega", "seed", "init", "d", "model", "m", "theta", "train_loss", "test_error"),
              "thresholds.csv": ("source", "model", "d", "omega", "alpha_c"),
              "summary.json": ("omegas", "value_rank"),
              "value_runs.json": ()},
    "general_L": {"theory.csv": ("alpha", "omega", "sigma_setting", "branch", "status", "q", "m", "theta", "V",
                                 "q_err", "m_err", "theta_err", "V_err", "train_loss", "train_loss_err", "test_error",
                                 "test_error_err"),
                  "runs.csv": ("alpha", "omega", "seed", "init", "d", "q", "m", "theta", "train_loss", "test_error"),
                  "thresholds.csv": ("alpha_c",)},
    "second_A": {"theory.csv": ("alpha", "omega", "branch", "status", "q", "m", "theta", "V", "q_err", "m_err",
                                "theta_err", "V_err", "train_loss", "train_loss_err", "test_error", "test_error_err"),
                 "runs.csv": ("alpha", "omega", "seed", "init", "d", "q", "m", "theta", "train_loss", "test_error"),
                 "thresholds.csv": ("omega", "alpha_c", "alpha_c_err", "alpha_l", "alpha_l_err"),
                 "summary.json": ("train_omega",)},
    "huber": {"theory.csv": ("loss", "alpha", "omega", "init", "branch", "status", "converged", "q", "m", "theta", "V",
                             "q_err", "m_err", "theta_err", "V_err", "train_loss", "train_loss_err", "test_error",
                             "test_error_err", "energetic_loss", "global_min"),
              "runs.csv": ("loss", "alpha", "omega", "seed", "init", "d", "solution", "q", "m", "theta", "train_loss",
                           "test_error"),
              "thresholds.csv": ("alpha_c",),
              "summary.json": ("delta", "train_omega")},
}
"""The columns (keys) of the files a `--replot` of each extension reads (its `finish`, `figures` and
`phasejax.extensions.ExtensionResult.load`; the replicon columns of theory.csv are computed where absent)."""


def reads(args) -> list:
    """The files the command reads back: `REPLOT_READS[name]` and the summary with `--replot`, and the file of
    `--tied-thresholds`."""
    from phasejax.commands.argtypes import Reads

    out = flags.replot_reads(args, {"summary.json": (), **REPLOT_READS[args.name]})
    if args.tied_thresholds is not None:
        out.append(Reads(args.tied_thresholds, ("omega", "alpha_c", "alpha_c_err"), flag="--tied-thresholds",
                         reader=f"extension {args.name}", fix="pass the thresholds.csv of a phase diagram"))
    return out


def recorded_preset(out: str, default: str) -> str:
    """The preset the results in `out` were computed with (their summary.json's), else `default`."""
    from phasejax.io import read_json

    try:
        preset = read_json(os.path.join(out, "summary.json"), kind=dict).get("preset")
    except (OSError, ValueError):
        return default
    return preset if isinstance(preset, str) else default


def run(args) -> int:
    from phasejax.extensions import ExtensionRun, run_extension

    start = time.time()
    run = ExtensionRun(run_dir=None if args.replot else run_dir_from(args, args.out), progress=not args.no_progress,
                       chunk_size=args.chunk_size)
    preset = recorded_preset(args.out, args.preset) if args.replot else args.preset
    record = flags.provenance()
    paths = run_extension(args.name, preset, args.out, run=run, tied_path=args.tied_thresholds,
                          replot=args.replot, command=record["command"], versions=record["versions"])
    flags.print_paths(paths)
    what = "replotted" if args.replot else "done"
    print(f"extension {args.name} ({preset} preset) {what} in {time.time() - start:.0f} s")
    return 0
