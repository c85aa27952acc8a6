"""`MemoryResult`, the study presets and `run_memory_study`."""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from phasejax.bundle import BundleFile, ResultBundle
from phasejax.solvers import status_code, status_names
from phasejax.sweep import RunOptions, run_options
from phasejax.io import concat_tables, json_ready
from phasejax.tasks._common import F32
from phasejax.tasks.memory.capacity import fit_power_law, predicted_capacity
from phasejax.tasks.memory.data import RECALL_THRESHOLD, outputs_label
from phasejax.tasks.memory.sweep import (
    CapacityGrid,
    ZipfGrid,
    capacity_fit,
    capacity_sweep,
    geometric_ints,
    zipf_fits,
    zipf_sweep,
)


# ----------------------------------------------------------------------------
# Result type
# ----------------------------------------------------------------------------


CAPACITY_COLUMNS = ("kind", "d", "m", "N", "seed", "accuracy", "outputs", "M", "error", "loss", "steps", "status")
ZIPF_COLUMNS = ("d", "seed", "k", "error_one_step", "error_top_k", "predicted_one_step", "predicted_top_k",
                "recall_one_step")


@dataclasses.dataclass
class MemoryResult(ResultBundle):
    """Capacity table, Zipf table and fits of a memory study; `write` / `load` as CSV + JSON.

    Attributes:
      capacity: columns `CAPACITY_COLUMNS` (`status` as names, e.g. `"converged"`).
      fits: JSON-ready dict (per `"<kind>|<outputs>"` a `capacity_fit`, `"zipf"`, `"config"`).
      zipf: columns `ZIPF_COLUMNS` (may be empty).
    """

    capacity: dict
    fits: dict
    zipf: dict = dataclasses.field(default_factory=dict)

    FILES = (BundleFile("capacity.csv", columns=CAPACITY_COLUMNS),
             BundleFile("fits.json"),
             BundleFile("zipf.csv", columns=ZIPF_COLUMNS, optional=True))
    """`write` writes `capacity.csv`, `fits.json` and (if any) `zipf.csv`; `load` reads them back."""

    def to_files(self) -> dict:
        """The contents, `status` of `capacity` written as names."""
        cap = dict(self.capacity)
        if np.asarray(cap["status"]).dtype.kind in "iu":
            cap["status"] = status_names(cap["status"])
        return dict(super().to_files(), capacity=cap)

    def status_codes(self) -> np.ndarray:
        """`status` column as `Status` codes."""
        st = np.asarray(self.capacity["status"])
        return st if st.dtype.kind in "iu" else np.asarray([status_code(s) for s in st])


# ----------------------------------------------------------------------------
# Studies (presets)
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """One capacity sweep of a study: memory `kind`, output rule, grid, training budget, expected exponent range."""

    kind: str
    M: int | None
    injective: bool
    grid: CapacityGrid
    steps: int = 0
    learning_rate: float = 0.1
    expected: tuple[float, float] | None = None

    @property
    def key(self) -> str:
        return f"{self.kind}|{outputs_label(self.M, self.injective)}"


def memory_preset(name: str, seeds: tuple[int, ...] | None = None) -> tuple[list[SweepSpec], ZipfGrid]:
    """The sweeps of the `cpu` (default, minutes on 2 cores) or `gpu` (larger grids) study."""
    if name not in ("cpu", "gpu"):
        raise ValueError(f"preset must be 'cpu' or 'gpu', got preset={name!r}")
    big = name == "gpu"
    s_cheap = tuple(range(16 if big else 8)) if seeds is None else tuple(seeds)
    s_train = tuple(range(8 if big else 4)) if seeds is None else tuple(seeds)
    M_fixed = 8
    per_octave = 6 if big else 4
    ds_op = (16, 32, 64, 128, 256, 512, 1024, 2048) if big else (16, 32, 64, 128, 256, 512)
    ds_inj = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384) if big else (16, 24, 32, 48, 64, 96, 128)
    lattice = geometric_ints(2, 40_000 if big else 4_000, per_octave)
    op_fixed = CapacityGrid(ds_op, lattice, s_cheap, window=(0.05, 1.5, 1.0))       # N* ~ 0.45 d (M = 8)
    op_inj = CapacityGrid(ds_inj, lattice, s_cheap, window=(0.004, 0.08, 2.0))       # N* ~ 0.023 d^2 (M = N)
    specs = [SweepSpec("outer_product", M_fixed, False, op_fixed, expected=(0.8, 1.2)),
             SweepSpec("one_step", M_fixed, False, op_fixed),
             SweepSpec("outer_product", None, True, op_inj),
             SweepSpec("one_step", None, True, op_inj)]
    steps_lin = 1500 if big else 300        # 1500 steps reach the plateau of N*; 300 give 10-15% less, same exponent
    ds_lin = (8, 12, 16, 24, 32, 48, 64) if big else (8, 12, 16, 24, 32)
    specs.append(SweepSpec("linear", None, True, CapacityGrid(ds_lin, geometric_ints(2, 4_000, per_octave), s_train,
                                                              window=(0.06, 0.45, 2.0)),            # N* ~ 0.2 d^2
                           steps=steps_lin, learning_rate=0.1, expected=(1.5, 2.1)))
    ds_lin8 = (8, 16, 32, 64, 128) if big else (8, 16, 32, 64)
    specs.append(SweepSpec("linear", M_fixed, False, CapacityGrid(ds_lin8, geometric_ints(2, 4_000, per_octave),
                                                                  s_train, window=(1.0, 6.0, 1.0)),  # N* ~ 3 d
                           steps=steps_lin, learning_rate=0.1))
    ds_mlp, ms_mlp = ((8, 16, 32), (16, 32, 64, 128)) if big else ((8, 16), (16, 32, 64))
    specs.append(SweepSpec("mlp", M_fixed, False, CapacityGrid(ds_mlp, geometric_ints(2, 20_000, per_octave), s_train,
                                                               ms=ms_mlp, window=(0.3, 2.0, 1.0)),   # N* ~ m d
                           steps=4000 if big else 1500, learning_rate=0.02, expected=(0.8, 1.2)))
    zipf = ZipfGrid(ds=(16, 32, 64, 128, 256, 512, 1024, 2048) if big else (16, 32, 64, 128, 256, 512),
                    seeds=s_cheap, N=32768 if big else 8192, M=M_fixed, alpha=2.0)
    return specs, zipf


def run_memory_study(specs: list[SweepSpec], zipf: ZipfGrid | None, *, n_boot: int = 2000, dtype=F32,
                     options: RunOptions | None = None, log=None) -> MemoryResult | None:
    """Run every sweep of `specs` (and the Zipf experiment), fit the capacities; `None` while chunks are missing."""
    options = run_options(options)
    tables, fits = [], {}
    for spec in specs:
        if log:
            log(f"sweep {spec.key} ({len(spec.grid.tasks()['N'])} tasks)")
        opts = options if options.run_dir is None else options.replace(
            run_dir=os.path.join(options.run_dir, "capacity"))
        t = capacity_sweep(spec.kind, spec.grid, M=spec.M, injective=spec.injective, steps=spec.steps,
                           learning_rate=spec.learning_rate, dtype=dtype, options=opts)
        if t is None:
            return None
        tables.append(t)
        fit = capacity_fit(t, spec.kind, outputs_label(spec.M, spec.injective), n_boot=n_boot, expected=spec.expected)
        if spec.kind in ("outer_product", "one_step"):
            xs = np.asarray(fit["d"])
            hi = 4 * max(spec.grid.Ns) if (spec.M is None or not spec.injective) else spec.M
            pred = predicted_capacity(xs, spec.M, spec.injective, one_step=spec.kind == "one_step", n_max=hi)
            fit["N_star_closed_form"] = [float(v) if np.isfinite(v) else None for v in pred]
            fit["exponent_closed_form"] = fit_power_law(xs, pred)["exponent"]
        fit.update(steps=spec.steps, learning_rate=spec.learning_rate)
        fits[spec.key] = fit
    ztable = {}
    if zipf is not None:
        if log:
            log(f"zipf sweep ({len(zipf.ds) * len(zipf.seeds)} tasks)")
        opts = options if options.run_dir is None else options.replace(run_dir=os.path.join(options.run_dir, "zipf"))
        ztable = zipf_sweep(zipf, dtype=dtype, options=opts)
        if ztable is None:
            return None
        fits["zipf"] = zipf_fits(ztable, zipf)
    fits["config"] = dict(threshold=RECALL_THRESHOLD, embeddings="uniform on the unit sphere of R^d",
                          sweeps={s.key: dict(kind=s.kind, M=s.M, injective=s.injective, ds=list(s.grid.ds),
                                              ms=list(s.grid.ms), seeds=list(s.grid.seeds), window=s.grid.window,
                                              steps=s.steps, learning_rate=s.learning_rate) for s in specs},
                          zipf=dataclasses.asdict(zipf) if zipf is not None else None, n_boot=n_boot)
    return MemoryResult(capacity=concat_tables(tables), fits=json_ready(fits), zipf=ztable)


