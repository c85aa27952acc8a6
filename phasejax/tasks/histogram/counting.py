"""The six configurations of Behrens, Biggio & Zdeborova (2024), the `(d, p, seed)` grid, the runs' result
bundle, and the explicit constructions.

A configuration is the token mixing (`"dot"` product attention or `"linear"` position-only mixing), with or
without a row softmax, with or without a BOS token (`CountingConfig`; `COUNTING_CONFIGS` by name). The model
itself is `phasejax.tasks.histogram.model`, its training `phasejax.tasks.histogram.train`, the sweeps
`phasejax.tasks.histogram.sweep`. Explicit constructions: `relation_counting_params` (dot + BOS + softmax,
`d >= T`, `p = 1`) and `inventory_counting_params` (linear mixing, `d >= T`, `p = T`), checked at 100% by
`construction_accuracy`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np

from phasejax.bundle import BundleFile, ResultBundle, read_file
from phasejax.precision import check_float_dtype
from phasejax.tasks._common import Array
from phasejax.tasks.histogram.data import HistogramTask, masked_accuracy, model_inputs
from phasejax.tasks.histogram.model import counting_logits


@dataclasses.dataclass(frozen=True)
class CountingConfig:
    """Token mixing `"dot"` or `"linear"`, with or without softmax, with or without BOS."""

    mixing: str = "dot"
    softmax: bool = True
    bos: bool = False

    def __post_init__(self):
        if self.mixing not in ("dot", "linear"):
            raise ValueError(f"mixing must be 'dot' or 'linear', got mixing={self.mixing!r}")
        for name in ("softmax", "bos"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False, got {name}={getattr(self, name)!r}")

    @property
    def name(self) -> str:
        return self.mixing + ("+BOS" if self.bos else "") + ("+softmax" if self.softmax else "")

    def task(self, task: HistogramTask) -> HistogramTask:
        """`task` with this configuration's BOS switch."""
        return dataclasses.replace(task, bos=self.bos)

    @property
    def dir_name(self) -> str:
        """`name` with `_` for `+` (a folder name: `dot_BOS_softmax`)."""
        return self.name.replace("+", "_")

    @classmethod
    def from_name(cls, name: str) -> "CountingConfig":
        """The configuration called `name`: case-insensitive, `_` or `+` (`"DOT+bos"`, `"dot_BOS_softmax"`)."""
        return COUNTING_CONFIGS[name]


class UnknownConfigError(KeyError, ValueError):
    """An unknown counting configuration name (a `ValueError`, and a `KeyError` for mapping lookups)."""

    def __str__(self) -> str:
        return str(self.args[0])


class CountingConfigs(Mapping):
    """The configurations by name; lookups ignore case and accept `_` for `+` (unknown: `UnknownConfigError`)."""

    def __init__(self, configs):
        self._configs = {c.name: c for c in configs}

    @staticmethod
    def _key(name) -> str:
        return str(name).strip().lower().replace("_", "+")

    def __getitem__(self, name) -> CountingConfig:
        if not isinstance(name, str):
            raise UnknownConfigError(f"configuration names are strings, got {name!r}")
        for k, c in self._configs.items():
            if self._key(k) == self._key(name):
                return c
        raise UnknownConfigError(f"unknown configuration {name!r}; choose from {tuple(self._configs)} "
                                 "(case-insensitive, '_' for '+')")

    def __iter__(self):
        return iter(self._configs)

    def __len__(self) -> int:
        return len(self._configs)

    def __repr__(self) -> str:
        return f"CountingConfigs({tuple(self._configs)})"


COUNTING_CONFIGS = CountingConfigs((
    CountingConfig("linear", False), CountingConfig("linear", True), CountingConfig("dot", False),
    CountingConfig("dot", True), CountingConfig("dot", False, True), CountingConfig("dot", True, True)))
"""The six configurations of the paper: linear, linear+softmax, dot, dot+softmax, dot+BOS, dot+BOS+softmax."""


def _int_tuple(values, name: str, minimum: int) -> tuple[int, ...]:
    vals = np.atleast_1d(np.asarray(values, dtype=object))
    if vals.ndim != 1 or vals.size == 0:
        raise ValueError(f"{name} must be a non-empty sequence of integers >= {minimum}, got {values!r}")
    for v in vals:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer, float, np.floating)) \
                or not np.isfinite(v) or int(v) != v or v < minimum:
            raise ValueError(f"{name} must hold integers >= {minimum}, got {v!r} in {name}={values!r}")
    return tuple(int(v) for v in vals)


@dataclasses.dataclass(frozen=True)
class CountingGrid:
    """`(d, p, seed)` grid of one configuration; `tasks()` is the flat table (order `d, p, seed`).

    Validated on construction: `ds`, `ps` integers >= 1, `seeds` integers >= 0 (`ValueError` naming the field).
    """

    ds: tuple[int, ...] = tuple(2**k for k in range(8))
    ps: tuple[int, ...] = tuple(2**k for k in range(8))
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)

    def __post_init__(self):
        object.__setattr__(self, "ds", _int_tuple(self.ds, "ds", 1))
        object.__setattr__(self, "ps", _int_tuple(self.ps, "ps", 1))
        object.__setattr__(self, "seeds", _int_tuple(self.seeds, "seeds", 0))

    def tasks(self) -> dict[str, np.ndarray]:
        d, p, s = np.meshgrid(self.ds, self.ps, self.seeds, indexing="ij")
        return dict(d=d.ravel().astype(np.int32), p=p.ravel().astype(np.int32), seed=s.ravel().astype(np.int64))

    def to_json(self) -> dict:
        return dict(ds=list(self.ds), ps=list(self.ps), seeds=list(self.seeds))


RUN_COLUMNS = ("config", "T", "L", "d", "p", "seed", "accuracy", "final_loss", "data", "steps", "batch_size",
               "best_accuracy")
"""Columns of a counting `runs.csv`: configuration name, task, grid point, the held-out accuracy after the last
epoch, the mean training loss of the last epoch, the data law, the Adam steps and the batch size of the run,
and the best held-out accuracy over the scored epochs (the paper's "best" maps take it, over seeds too)."""

CURVE_COLUMNS = ("config", "d", "p", "seed", "epoch", "step", "loss", "accuracy")
"""Columns of a counting `curves.csv`: one row per run and recorded epoch (from 1), `step` the epoch's last Adam
step, `loss` the epoch's mean training loss, `accuracy` the held-out accuracy after it (empty where not scored)."""


@dataclasses.dataclass
class CountingRuns(ResultBundle):
    """Counting runs of one or more configurations: `runs` (columns `RUN_COLUMNS`), `config[name]` and,
    when the sweep recorded them, `curves` (columns `CURVE_COLUMNS`, one row per run and block).

    `write(out_dir)` writes `runs.csv`, `counting.json` and `curves.csv` (if any); `CountingRuns.load(out_dir)`
    reads them back; `CountingRuns.from_csv(path)` rebuilds from `runs.csv` alone (`config={}`).
    """

    runs: dict[str, np.ndarray]
    config: dict
    curves: dict | None = None

    @property
    def names(self) -> list[str]:
        """Configuration names in order of appearance."""
        return list(dict.fromkeys(np.asarray(self.runs["config"]).tolist()))

    def select(self, name: str) -> dict[str, np.ndarray]:
        """The columns of configuration `name` (case-insensitive, `_` for `+`)."""
        name = CountingConfig.from_name(name).name
        sel = np.asarray(self.runs["config"]) == name
        if not sel.any():
            raise ValueError(f"no runs of configuration {name!r}; have {self.names}")
        return {k: np.asarray(v)[sel] for k, v in self.runs.items()}

    @classmethod
    def concatenate(cls, parts) -> "CountingRuns":
        parts = list(parts)
        if not parts:
            raise ValueError("parts must hold at least one CountingRuns")
        runs = {k: np.concatenate([np.asarray(p.runs[k]) for p in parts]) for k in RUN_COLUMNS}
        config = {}
        for p in parts:
            config.update(p.config)
        with_curves = [p.curves for p in parts if p.curves is not None]
        if with_curves and len(with_curves) != len(parts):
            raise ValueError("parts must all have loss curves or none")
        curves = ({k: np.concatenate([np.asarray(c[k]) for c in with_curves]) for k in CURVE_COLUMNS}
                  if with_curves else None)
        return cls(runs=runs, config=config, curves=curves)

    FILES = (BundleFile("runs.csv", columns=RUN_COLUMNS, required=RUN_COLUMNS,
                        dtypes=dict(config=str, T=np.int32, L=np.int32, d=np.int32, p=np.int32, seed=np.int64,
                                    data=str, steps=np.int64, batch_size=np.int32)),
             BundleFile("counting.json", field="config", required=("config",)),
             BundleFile("curves.csv", columns=CURVE_COLUMNS, required=CURVE_COLUMNS,
                        dtypes=dict(config=str, d=np.int32, p=np.int32, epoch=np.int32, step=np.int64, seed=np.int64),
                        optional=True))
    """`write` writes `runs.csv`, `counting.json` (`{"config": config}`) and `curves.csv` (if any)."""

    def to_files(self) -> dict:
        """The contents (the configurations under the key `config` of `counting.json`)."""
        return dict(runs=self.runs, config=dict(config=self.config), curves=self.curves)

    @classmethod
    def from_files(cls, contents: dict, out_dir: str) -> "CountingRuns":
        """The runs (the columns `RUN_COLUMNS`), configurations and curves (`None` without `curves.csv`)."""
        curves = contents.get("curves")
        return cls(runs={k: contents["runs"][k] for k in RUN_COLUMNS}, config=contents["config"]["config"],
                   curves={k: curves[k] for k in CURVE_COLUMNS} if curves else None)

    @classmethod
    def from_csv(cls, path: str) -> "CountingRuns":
        """Rebuild from a `runs.csv` alone (`config={}`)."""
        return cls.from_files(dict(runs=read_file(path, cls.FILES[0]), config=dict(config={})), os.path.dirname(path))


# ----------------------------------------------------------------------------
# Explicit constructions
# ----------------------------------------------------------------------------


def construction_accuracy(params: dict, task: HistogramTask, cfg: CountingConfig, tokens: Array) -> Array:
    """Accuracy of parameters `params` on sequences `tokens (n, L)` (BOS added if `cfg.bos`)."""
    mt, labels = model_inputs(jnp.asarray(tokens), cfg.task(task))
    return masked_accuracy(counting_logits(params, mt, cfg.softmax), labels)


def relation_counting_params(task: HistogramTask, d: int | None = None, scale: float = 30.0,
                             dtype=jnp.float32) -> dict:
    """Relation-based counting, dot + BOS + softmax, `d >= T`, `p = 1` (unpadded parameters).

    Tokens embed one-hot `e_t`, BOS embeds `1_T` (ones on the token dims), and
    `W_Q = W_K = c I` with `c^2 / sqrt(d) = scale`: a token scores `scale` on
    every copy of itself and on BOS, 0 elsewhere, so the softmax puts `1/(k+1)`
    on BOS for a token occurring `k` times. Then `1_T . h = 2 + (T-1)/(k+1)`;
    one ReLU unit reads `z = (T-1)/(k+1)` and the logits `2 g_c z - g_c^2`,
    `g_c = (T-1)/(c+1)`, peak at `c = k`.
    """
    T, L = task.T, task.L
    d = T if d is None else d
    if d < T:
        raise ValueError(f"the relation construction needs d >= T, got d={d}, T={T}")
    if T < 2:
        raise ValueError("the relation construction needs T >= 2")
    E = np.zeros((T + 1, d), np.float32)
    E[np.arange(T), np.arange(T)] = 1.0
    E[T, :T] = 1.0
    c = np.sqrt(scale * np.sqrt(d))
    ones = np.zeros((d, 1), np.float32)
    ones[:T, 0] = 1.0
    g = np.array([0.0] + [(T - 1) / (k + 1) for k in range(1, L + 1)], np.float32)
    b2 = -(g**2)
    b2[0] = -1e3   # count 0 never occurs
    dtype = check_float_dtype(dtype)
    eye = c * np.eye(d)
    return {k: jnp.asarray(v, dtype) for k, v in dict(E=E, WQ=eye, WK=eye, W1=ones, b1=np.asarray([-2.0]),
                                                         W2=2 * g[None, :], b2=b2).items()}


def inventory_counting_params(task: HistogramTask, d: int | None = None, softmax: bool = False,
                              dtype=jnp.float32) -> dict:
    """Inventory-based counting, linear mixing, `d >= T`, `p = T` (unpadded parameters).

    One-hot tokens; uniform mixing `a_ij = 1/L` (`A = 1/L`, or `A = 0` under a
    softmax) puts the sequence's histogram `sum_t n_t e_t / L` in every
    position; hidden unit `t` computes `ReLU(L h_t - L) = n_t [t = t_i]`, so
    the units sum to the count `k`, and the logits `2 c k - c^2` peak at `c = k`.
    """
    T, L = task.T, task.L
    d = T if d is None else d
    if d < T:
        raise ValueError(f"the inventory construction needs d >= T, got d={d}, T={T}")
    E = np.zeros((T, d), np.float32)
    E[np.arange(T), np.arange(T)] = 1.0
    W1 = np.zeros((d, T), np.float32)
    W1[np.arange(T), np.arange(T)] = L
    cls = np.arange(L + 1, dtype=np.float32)
    A = np.zeros((L, L), np.float32) if softmax else np.full((L, L), 1.0 / L, np.float32)
    dtype = check_float_dtype(dtype)
    return {k: jnp.asarray(v, dtype) for k, v in dict(E=E, A=A, W1=W1, b1=np.full((T,), -float(L)),
                                                         W2=np.tile(2 * cls[None, :], (T, 1)), b2=-(cls**2)).items()}
