"""Extensions of the main model (theory and experiments), one at a time.

    phasejax extension untied                        # CPU preset, into runs/extensions/untied/
    phasejax extension rank2 --preset gpu --out runs/rank2_gpu
    phasejax extension untied --out results/extensions/untied --replot   # thresholds, summary, figure from the CSVs

Each extension (`phasejax.extensions.<name>`) writes theory.csv (state evolution with 95% quadrature errors,
where the extension has a theory), runs.csv (one row per trained student), thresholds.csv, summary.json and a
figure (`phasejax.extensions.framework.ExtensionResult`). Chunks go to --run-dir (default <out>/run): a killed
run resumes there. An --out folder that holds results of another configuration (or files of unknown origin,
such as the committed results/) is refused unless --overwrite.
"""

from __future__ import annotations

import importlib
import os
import time

import numpy as np

from phasejax.commands.argtypes import UsageError, add_output, guard_output, output_identity
from phasejax.extensions import EXTENSIONS

NAME = "extension"
HELP = "untied / correlated / rank-2 / value / general-L / second-A extensions: theory and experiments"


def _train(max_steps: int):
    from phasejax.empirics.training import TrainConfig

    return TrainConfig(max_steps=max_steps)


def presets(name: str) -> dict:
    """`{"cpu": ..., "gpu": ...}` of extension `name`. `cpu`: the committed results (minutes to a quarter of an
    hour on 2 cores); `gpu`: larger grids, more seeds and sizes."""
    grid = lambda lo, hi, step, nd=6: tuple(np.round(np.arange(lo, hi, step), nd))  # noqa: E731
    if name == "untied":
        return {"cpu": dict(alphas=(0.9, 1.3, 1.7, 2.1, 2.5, 2.9), omegas=(0.1, 0.3), log2_n=11, n_replicas=4,
                            run_alphas=(1.3, 2.1, 2.9), run_omegas=(0.3,), seeds=tuple(range(8)), dims=(200, 800)),
                "gpu": dict(alphas=grid(0.2, 3.01, 0.2, 10), omegas=(0.0, 0.1, 0.2, 0.3, 0.4), log2_n=12,
                            n_replicas=4, run_alphas=(0.6, 1.0, 1.4, 1.8, 2.2, 2.6), run_omegas=(0.0, 0.3),
                            seeds=(0, 1, 2, 3, 4), dims=(200, 400, 800, 1600))}
    if name == "rank2":
        return {"cpu": dict(alphas=(0.8, 1.3, 1.8, 2.3), omegas=(0.3,), log2_n=11, n_replicas=4,
                            run_alphas=(1.3, 2.3), run_omegas=(0.3,), seeds=(0, 1, 2), dims=(200, 800)),
                "gpu": dict(alphas=grid(0.2, 3.01, 0.2, 10), omegas=(0.0, 0.15, 0.3, 0.45), log2_n=12,
                            n_replicas=4, run_alphas=(0.6, 1.0, 1.4, 1.8, 2.2, 2.6), run_omegas=(0.0, 0.3),
                            seeds=(0, 1, 2, 3, 4), dims=(200, 400, 800, 1600))}
    if name == "correlated":
        return {"cpu": dict(alphas=(0.5, 0.75, 1.0, 1.25, 1.5, 2.0), omega=0.3, rhos=(0.0, 0.9), mean_norm=1.0,
                            train_alphas=(0.75, 1.0, 1.25, 1.5, 2.0), seeds=(0, 1, 2, 3), ds=(200, 800),
                            gain_log2_n=11),
                "gpu": dict(alphas=grid(0.3, 2.51, 0.1), omega=0.3, rhos=(-0.9, -0.5, 0.0, 0.5, 0.9), mean_norm=1.0,
                            train_alphas=(0.5, 0.75, 1.0, 1.125, 1.25, 1.375, 1.5, 1.75, 2.0, 2.5),
                            seeds=tuple(range(10)), ds=(200, 400, 800, 1600), gain_log2_n=13)}
    if name == "value":
        # cpu: one omega, 5 alphas around the tied alpha_c(0.3) = 1.25, d in {200, 800}; the value runs stop at
        # max_steps (status max_iterations): the unpenalised value map converges slowly along low-curvature
        # directions while the loss has long settled
        return {"cpu": dict(omegas=(0.3,), alphas=(0.75, 1.0, 1.25, 1.5, 1.75), seeds={200: (0, 1, 2, 3),
                                                                                      800: (0, 1, 2)},
                            alphas_by_d={800: (1.0, 1.25, 1.5)}, theory_alphas=grid(0.5, 2.01, 0.1, 2), value_rank=1,
                            train=_train(1500)),
                "gpu": dict(omegas=(0.1, 0.2, 0.3, 0.4), alphas=grid(0.5, 2.51, 0.125, 3),
                            seeds={200: tuple(range(8)), 800: tuple(range(8)), 1600: tuple(range(5))},
                            theory_alphas=grid(0.3, 2.51, 0.05, 2), value_rank=1, train=_train(10000))}
    if name == "general_L":
        sigmas = {"equal": (0.5, 0.5, 0.5), "unequal": (0.5, 0.4, 0.6)}
        return {"cpu": dict(alphas=(0.6, 1.1, 1.6, 2.1), omega=0.3, sigmas=sigmas, log2_n=10, n_replicas=4,
                            train_alphas=(1.1, 2.1), seeds=tuple(range(8)), ds=(200, 400, 800)),
                "gpu": dict(alphas=grid(0.3, 3.01, 0.15), omega=0.3, sigmas=sigmas, log2_n=14, n_replicas=4,
                            train_alphas=(0.5, 1.1, 1.7, 2.0, 2.6), seeds=tuple(range(8)),
                            ds=(200, 400, 800, 1600, 3200))}
    if name == "second_A":
        return {"cpu": dict(alphas=(0.3, 0.6, 0.9, 1.05, 1.2, 1.5, 2.0, 2.5), omegas=(0.0, 0.2, 0.3, 0.4),
                            log2_n=10, n_replicas=4, train_alphas=(0.6, 1.05, 1.5, 2.0), train_omega=0.3,
                            seeds=tuple(range(8)), ds=(200, 400, 800, 1600)),
                # the converged default rule (SplitProductRule, log2_n=None)
                "gpu": dict(alphas=grid(0.2, 3.01, 0.1), omegas=grid(0.0, 0.61, 0.05), log2_n=None, n_replicas=None,
                            train_alphas=(0.5, 0.7, 1.0, 1.3, 1.5, 1.7, 2.0, 2.5), train_omega=0.3,
                            seeds=tuple(range(16)), ds=(200, 400, 800, 1600, 3200))}
    raise ValueError(f"name must be one of {EXTENSIONS}, got {name!r}")


USES_TIED = ("untied", "second_A")
"""Extensions that compare their thresholds with the tied model's (`--tied-thresholds`)."""


def add_arguments(ap) -> None:
    ap.add_argument("name", choices=EXTENSIONS, help="which extension")
    ap.add_argument("--preset", choices=("cpu", "gpu"), default="cpu",
                    help="cpu: the committed results (minutes on 2 cores); gpu: larger grids and sizes")
    add_output(ap, None, guard=False, help="output folder (default runs/extensions/<name>; refused when it holds "
                                           "another configuration's results unless --overwrite)")
    ap.add_argument("--run-dir", default=None,
                    help="chunk folder; re-running with the same flags resumes there (default: <out>/run)")
    ap.add_argument("--tied-thresholds", default=None,
                    help="the tied model's thresholds.csv that untied and second_A compare with (default: the "
                         "repository's results/phase_diagram/thresholds.csv)")
    ap.add_argument("--replot", action="store_true",
                    help="no training or solving: read <out>'s theory.csv and runs.csv, derive the thresholds, "
                         "summary and extra tables again and redraw the figure (a theory.csv without the replicon "
                         "columns gets them, about 2 s a row)")
    ap.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run_extension(name: str, preset: str, out: str, *, run_dir: str | None = None, progress: bool = True,
                  tied_path: str | None = None, replot: bool = False) -> list[str]:
    """Compute (or, with `replot`, re-derive from `out`'s CSVs) extension `name`'s preset and write its bundle
    and figure into `out`; returns the paths written."""
    from phasejax.extensions.framework import ExtensionResult, read_table, tied_thresholds
    from phasejax.plotting import save_figure

    module = importlib.import_module(f"phasejax.extensions.{name}")
    table = presets(name)
    if preset not in table:
        raise ValueError(f"preset must be one of {tuple(table)}, got {preset!r}")
    tied = {}
    if name in USES_TIED:
        tied = dict(tied=read_table(tied_path, ("omega", "alpha_c", "alpha_c_err")) if tied_path
                    else tied_thresholds())
    if replot:
        result = ExtensionResult.load(out, documents=getattr(module, "DOCUMENTS", ()))
        result = module.finish(result, **tied) if name == "untied" else module.finish(result)
    else:
        result = module.compute(preset, table[preset], run_dir=run_dir, progress=progress, **tied)
    problem = getattr(module, "replicon_problem", None)
    if problem is not None:
        result = add_replicon(result, problem(result.summary.get("presets") or table[preset]), progress=progress)
    paths = result.write(out)
    paths += [save_figure(fig, os.path.join(out, file)) for file, fig in module.figures(result).items()]
    return paths


def add_replicon(result, problem, *, progress: bool = True):
    """`result` with the replicon columns in its theory table (computed where missing:
    `phasejax.extensions.stability.with_replicon`) and their summary (`replicon_summary`)."""
    import dataclasses

    from phasejax.extensions.stability import replicon_summary, with_replicon

    from tqdm.auto import tqdm

    with tqdm(total=len(result.theory["alpha"]), desc="replicon", unit="row", leave=False,
              disable=not progress) as bar:
        theory = with_replicon(result.theory, problem, progress=lambda done, total: bar.update(done - bar.n))
    return dataclasses.replace(result, theory=theory, summary=dict(result.summary, replicon=replicon_summary(theory)))


def run(args) -> int:
    out = args.out or os.path.join("runs", "extensions", args.name)
    if args.replot:
        if not os.path.exists(os.path.join(out, "runs.csv")):
            raise UsageError(f"--replot needs {os.path.join(out, 'runs.csv')}; run the command first, or pass the "
                             "--out that holds it")
    else:
        guard_output(out, args.overwrite, output_identity(args))
    start = time.time()
    paths = run_extension(args.name, args.preset, out, run_dir=args.run_dir or os.path.join(out, "run"),
                          progress=not args.no_progress, tied_path=args.tied_thresholds, replot=args.replot)
    for p in paths:
        print(p)
    print(f"extension {args.name} ({args.preset} preset) done in {time.time() - start:.0f} s")
    return 0
