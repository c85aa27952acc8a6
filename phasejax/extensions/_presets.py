"""What every extension's presets share: the fields of `ExtensionPreset` and the run options of its sweeps.

Each extension module defines its own preset dataclass (a subclass with the fields that are its own) and a
`PRESETS` dict, `{"cpu": ..., "gpu": ...}`: `cpu` the committed results (minutes to a quarter of an hour on 2
cores), `gpu` larger grids, more seeds and sizes.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping

import numpy as np

from phasejax.sweep import RunOptions


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExtensionPreset:
    """The sizes of one run of an extension; every extension's preset has these fields.

    Attributes:
      alphas: the alphas of the theory rows.
      train_alphas: the alphas of the trained students.
      seeds: the students' seeds (data sets) at each dimension.
      ds: the students' dimensions.
      log2_n, n_replicas: the theory's quadrature, scrambled Sobol with `2^log2_n` points and `n_replicas`
        replicas (`None`: the extension's default scheme).
    """

    alphas: tuple[float, ...]
    train_alphas: tuple[float, ...]
    seeds: tuple[int, ...]
    ds: tuple[int, ...]
    log2_n: int | None = None
    n_replicas: int | None = None

    def seeds_at(self, d: int) -> tuple[int, ...]:
        """The seeds trained at dimension `d`."""
        return self.seeds

    def train_alphas_at(self, d: int) -> tuple[float, ...]:
        """The alphas trained at dimension `d`."""
        return self.train_alphas

    def to_json(self) -> dict:
        """The preset as JSON data (for `summary.json`)."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class OmegaGridPreset(ExtensionPreset):
    """`ExtensionPreset` with the theory on `alphas x omegas` and the students on `train_alphas x train_omegas`."""

    omegas: tuple[float, ...]
    train_omegas: tuple[float, ...]


def sobol_rule(preset, dim: int):
    """The preset's quadrature in `dim` dimensions: scrambled Sobol with `2^log2_n` points and `n_replicas`
    replicas, or `None` (the default scheme) where `log2_n` is None. `preset`: an `ExtensionPreset`, or the
    mapping an older summary recorded."""
    from phasejax.theory.quadrature import SobolRule

    log2_n = preset_value(preset, "log2_n")
    return None if log2_n is None else SobolRule.create(dim, log2_n=log2_n, n_replicas=preset_value(preset, "n_replicas"))


def preset_value(preset, name: str):
    """Field `name` of a preset: an `ExtensionPreset`, or the mapping an older `summary.json` recorded."""
    return preset[name] if isinstance(preset, Mapping) else getattr(preset, name)


def alpha_range(lo: float, hi: float, step: float, digits: int = 6) -> tuple[float, ...]:
    """`lo, lo + step, ...` below `hi`, rounded to `digits`."""
    return tuple(np.round(np.arange(lo, hi, step), digits).tolist())


def sub_options(run_dir: str | None, name: str, progress: bool = True, chunk_size: int = 16) -> RunOptions:
    """`RunOptions` of one sweep of an extension: chunks under `run_dir/name` (no run directory: not resumable)."""
    return RunOptions(run_dir=None if run_dir is None else os.path.join(run_dir, name), progress=progress,
                      chunk_size=chunk_size)


@dataclasses.dataclass(frozen=True)
class ExtensionRun:
    """How an extension's sweeps run (none of it changes the results): the run directory they resume under, the
    progress bars, and the tasks per compiled call (`None`: each sweep's own default)."""

    run_dir: str | None = None
    progress: bool = True
    chunk_size: int | None = None

    def options(self, name: str, default_chunk_size: int = 16) -> RunOptions:
        """`RunOptions` of the sweep `name`: chunks under `run_dir/name`."""
        return sub_options(self.run_dir, name, self.progress, self.chunk_size or default_chunk_size)
