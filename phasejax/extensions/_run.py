"""`run_extension`: compute (or re-derive) one extension's preset and write its bundle and figures."""

from __future__ import annotations

import dataclasses
import importlib
import os

from phasejax.extensions._presets import ExtensionRun

EXTENSIONS = ("untied", "correlated", "rank2", "value", "general_L", "second_A", "huber")
"""The extensions, each a module `phasejax.extensions.<name>`."""

USES_TIED = ("untied", "second_A")
"""Extensions that compare their thresholds with the tied model's (`tied_path`)."""


def extension_module(name: str):
    """The module `phasejax.extensions.<name>`; `ValueError` naming `name` when it is not one of `EXTENSIONS`."""
    if name not in EXTENSIONS:
        raise ValueError(f"name must be one of {EXTENSIONS}, got {name!r}")
    return importlib.import_module(f"phasejax.extensions.{name}")


def extension_presets(name: str) -> dict:
    """`{"cpu": ..., "gpu": ...}`: extension `name`'s presets (each module's `PRESETS`)."""
    return extension_module(name).PRESETS


def run_extension(name: str, preset: str, out: str, *, run: ExtensionRun = ExtensionRun(),
                  tied_path: str | None = None, replot: bool = False, command: str | None = None,
                  versions: dict | None = None) -> list[str]:
    """Compute extension `name`'s `preset` (`"cpu"` or `"gpu"`), or with `replot` re-derive the thresholds,
    summary and extra tables from the `theory.csv` and `runs.csv` in `out`; add the replicon columns where they
    are missing; write the bundle and the figures into `out` (a replot writes what it derives: the thresholds, the
    extra tables, the summary and the figures, and theory.csv only when it added the replicon columns; the data
    files stay as they are). `run`: the run directory, progress bars and chunk size of the sweeps; `tied_path`: the
    tied model's `thresholds.csv` that untied and second_A compare with (default: the repository's); `command` and
    `versions`: the command line that computes it and the package versions, recorded in `summary.json` (a replot
    keeps those its folder records and adds its own as `replotted_by`). Returns the paths written."""
    from phasejax.bundle import write_bundle
    from phasejax.extensions._tables import ExtensionResult, read_table
    from phasejax.extensions._thresholds import tied_thresholds
    from phasejax.plotting import save_figure

    module = extension_module(name)
    if preset not in module.PRESETS:
        raise ValueError(f"preset must be one of {tuple(module.PRESETS)}, got {preset!r}")
    if tied_path is not None and name not in USES_TIED:
        raise ValueError(f"tied_path is used by {' and '.join(USES_TIED)} only, not {name}")
    tied = {}
    if name in USES_TIED:
        tied = dict(tied=read_table(tied_path, ("omega", "alpha_c", "alpha_c_err")) if tied_path
                    else tied_thresholds())
    record = {k: v for k, v in dict(command=command, versions=versions).items() if v is not None}
    if replot:
        result = ExtensionResult.load(out, documents=getattr(module, "DOCUMENTS", ()))
        result = module.finish(result, **tied) if name == "untied" else module.finish(result)
        if record:
            result = dataclasses.replace(result, summary=dict(result.summary, replotted_by=record))
    else:
        result = module.compute(preset, module.PRESETS[preset], run=run, **tied)
        result = dataclasses.replace(result, summary=dict(result.summary, **record))
    columns = set(result.theory)
    problem = getattr(module, "replicon_problem", None)
    if problem is not None:
        recorded = result.summary.get("presets") or module.PRESETS[preset]
        result = add_replicon(result, problem(recorded), progress=run.progress,
                              summarize=getattr(module, "summarize_replicon", None))
    files = result.bundle_files()
    if replot:        # what the replot derived; the data files (and theory.csv, unless it gained columns) stay
        data = {"runs", *(f"{d}.json" for d in result.documents)} | ({"theory"} if set(result.theory) <= columns
                                                                      else set())
        files = tuple(f for f in files if f.field not in data)
    paths = write_bundle(out, files, result.to_files())
    paths += [save_figure(fig, os.path.join(out, file)) for file, fig in module.figures(result).items()]
    return paths


def add_replicon(result, problem, *, progress: bool = True, summarize=None):
    """`result` with the replicon columns in its theory table (computed where missing:
    `phasejax.extensions.stability.with_replicon`) and their summary (`summarize(theory)`, a module's own
    `summarize_replicon` where it has one, else `replicon_summary`)."""
    from tqdm.auto import tqdm

    from phasejax.extensions.stability import replicon_summary, with_replicon

    with tqdm(total=len(result.theory["alpha"]), desc="replicon", unit="row", leave=False,
              disable=None if progress else True) as bar:       # None: a bar on a terminal only
        theory = with_replicon(result.theory, problem, progress=lambda done, total: bar.update(done - bar.n))
    summary = (summarize or replicon_summary)(theory)
    return dataclasses.replace(result, theory=theory, summary=dict(result.summary, replicon=summary))
