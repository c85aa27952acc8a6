"""Counting phase diagrams over embedding size `d` and hidden size `p` (Behrens, Biggio, Zdeborová 2024).

Model (pure functions on a parameter dict): token embedding `x_i = E[t_i]`
of size `d`; token mixing `A` either by dot-product attention
`a_ij = <x_i W_Q, x_j W_K> / sqrt(d)` or by a learned position-only matrix
`a_ij = c_ij` ("linear"), with or without a row softmax; residual
`h = x + A x`; feed-forward `ReLU(h W_1 + b_1) W_2 + b_2` of hidden size `p`
giving logits over the classes `0..L`. An optional BOS token is prepended.
No positional embeddings: the linear mixing is the only positional path.

Padding: parameters are allocated at `(d_max, p_max)` and the first `d`
embedding and `p` hidden units are used; the rest is multiplied by 0 in the
forward pass, so it gets zero gradient and Adam never moves it (its update is
`0 / (sqrt(0) + eps) = 0`). A padded run is the unpadded run (same init
draws: the unpadded init is the top-left slice of the padded one), which is
what lets a configuration's whole `(d, p)` grid be one vmapped call.

`counting_run(seed, d, p, ...)` trains one model online (a fresh batch every
step, Adam) and measures its accuracy on fresh sequences; `counting_sweep`
vmaps it over `(d, p, seed)` in resumable chunks. Explicit constructions:
`relation_counting_params` (dot + BOS + softmax, `d >= T`, `p = 1`) and
`inventory_counting_params` (linear mixing, `d >= T`, `p = T`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

from phasejax.bundle import BundleFile, ResultBundle, read_file
from phasejax.precision import check_float_dtype, dtype_scope
from phasejax.sweep import RunOptions, canonical_config, run_chunked, run_options
from phasejax.empirics.data import check_positive_int
from phasejax.tasks._common import Array, train_online
from phasejax.tasks.histogram.data import HistogramTask, masked_accuracy, masked_cross_entropy, model_inputs, sample_batch


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


def _task_for(task: HistogramTask, cfg: CountingConfig) -> HistogramTask:
    return dataclasses.replace(task, bos=cfg.bos)


def init_counting_params(key: Array, task: HistogramTask, cfg: CountingConfig, d, p, d_max: int, p_max: int,
                         dtype=jnp.float32) -> dict:
    """Initial parameters at padded shapes `(d_max, p_max)` in `dtype`; `d`, `p` (may be traced) set the scales.

    `E ~ N(0, 1)`, `W_Q, W_K, W_1 ~ N(0, 1/d)`, `W_2 ~ N(0, 1/p)`, `C ~ N(0, 1/L)`, biases 0.
    Normal draws are made in float32 and cast, so float32 and float64 runs start from the same weights.
    """
    dtype = check_float_dtype(dtype)
    tk = _task_for(task, cfg)
    kE, kQ, kK, kC, k1, k2 = jax.random.split(key, 6)
    d_s, p_s = jnp.sqrt(jnp.asarray(d, dtype)), jnp.sqrt(jnp.asarray(p, dtype))

    def normal(k, shape):
        return jax.random.normal(k, shape, jnp.float32).astype(dtype)

    params = dict(
        E=normal(kE, (tk.vocab, d_max)),
        W1=normal(k1, (d_max, p_max)) / d_s,
        b1=jnp.zeros((p_max,), dtype),
        W2=normal(k2, (p_max, tk.n_classes)) / p_s,
        b2=jnp.zeros((tk.n_classes,), dtype),
    )
    if cfg.mixing == "dot":
        params["WQ"] = normal(kQ, (d_max, d_max)) / d_s
        params["WK"] = normal(kK, (d_max, d_max)) / d_s
    else:
        params["C"] = normal(kC, (tk.length, tk.length)) / np.sqrt(tk.length)
    return params


def unpad(params: dict, d: int, p: int) -> dict:
    """The top-left `(d, p)` slice of padded parameters (the unpadded model of the same init)."""
    out = dict(params)
    out["E"] = params["E"][:, :d]
    out["W1"] = params["W1"][:d, :p]
    out["b1"] = params["b1"][:p]
    out["W2"] = params["W2"][:p]
    for k in ("WQ", "WK"):
        if k in params:
            out[k] = params[k][:d, :d]
    return out


def mixing_matrix(params: dict, x: Array, cfg: CountingConfig, d) -> Array:
    """`A (..., length, length)`: attention scores or `C`, row-softmaxed if `cfg.softmax` (stable)."""
    if cfg.mixing == "dot":
        md = (jnp.arange(params["WQ"].shape[0]) < d).astype(x.dtype)
        mask2 = md[:, None] * md[None, :]
        q = x @ (params["WQ"] * mask2)
        k = x @ (params["WK"] * mask2)
        scores = q @ jnp.swapaxes(k, -1, -2) / jnp.sqrt(jnp.asarray(d, x.dtype))
    else:
        scores = jnp.broadcast_to(params["C"], x.shape[:-2] + params["C"].shape)
    return jax.nn.softmax(scores, axis=-1) if cfg.softmax else scores


def counting_logits(params: dict, tokens: Array, cfg: CountingConfig, d, p) -> Array:
    """Logits `(n, length, L + 1)` for model tokens `(n, length)`, using the first `d` / `p` units (dtype of `params`)."""
    d_max, p_max = params["E"].shape[1], params["b1"].shape[0]
    dtype = params["E"].dtype
    md = (jnp.arange(d_max) < d).astype(dtype)
    mp = (jnp.arange(p_max) < p).astype(dtype)
    x = params["E"][tokens] * md
    h = x + mixing_matrix(params, x, cfg, d) @ x
    z = jax.nn.relu(h @ (params["W1"] * md[:, None] * mp[None, :]) + params["b1"] * mp)
    return z @ (params["W2"] * mp[:, None]) + params["b2"]


def train_counting(params0: dict, key: Array, task: HistogramTask, cfg: CountingConfig, d, p, *, steps: int,
                   batch_size: int = 128, learning_rate: float = 1e-3) -> tuple[dict, Array]:
    """Adam on fresh batches (online: one new batch per step). Returns `(params, losses (steps,))`."""
    tk = _task_for(task, cfg)
    return train_online(lambda prm, tokens, labels: masked_cross_entropy(counting_logits(prm, tokens, cfg, d, p),
                                                                        labels),
                        params0, key, lambda k: sample_batch(k, tk, batch_size), steps=steps,
                        optimizer=optax.adam(learning_rate))


def counting_accuracy(params: dict, key: Array, task: HistogramTask, cfg: CountingConfig, d, p,
                      n_test: int = 4096) -> Array:
    """Per-token accuracy on `n_test` fresh sequences (BOS position not scored)."""
    tokens, labels = sample_batch(key, _task_for(task, cfg), n_test)
    return masked_accuracy(counting_logits(params, tokens, cfg, d, p), labels)


def loss_curve(losses: Array, points: int) -> Array:
    """Block means of a training-loss trace `losses (steps,)`: `(points,)`, block `b` the mean over steps
    `[b s, (b + 1) s)` with `s = steps // points` (the last `steps mod points` steps are left out)."""
    size = losses.shape[0] // points
    return jnp.mean(losses[: size * points].reshape(points, size), axis=1)


def counting_run(seed, d, p, *, task: HistogramTask, cfg: CountingConfig, d_max: int, p_max: int, steps: int,
                 batch_size: int = 128, learning_rate: float = 1e-3, n_test: int = 4096, curve_points: int = 0,
                 dtype=jnp.float32) -> dict[str, Array]:
    """One run (pure in `seed`, `d`, `p`; vmap over them): init, online Adam, fresh-sample accuracy, in `dtype`.

    Returns `accuracy`, `final_loss` (mean over the last tenth of the steps) and, when `curve_points > 0`,
    `loss_curve (curve_points,)` (`loss_curve` of the trace: block means of the training loss).
    """
    k_init, k_train, k_test = jax.random.split(jax.random.PRNGKey(seed), 3)
    params0 = init_counting_params(k_init, task, cfg, d, p, d_max, p_max, dtype)
    params, losses = train_counting(params0, k_train, task, cfg, d, p, steps=steps, batch_size=batch_size,
                                    learning_rate=learning_rate)
    tail = max(1, steps // 10)
    out = dict(accuracy=counting_accuracy(params, k_test, task, cfg, d, p, n_test),
               final_loss=jnp.mean(losses[-tail:]))
    if curve_points:
        out["loss_curve"] = loss_curve(losses, curve_points)
    return out


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


RUN_COLUMNS = ("config", "T", "L", "d", "p", "seed", "accuracy", "final_loss")
"""Columns of a counting `runs.csv`: configuration name, task, grid point, fresh-sample accuracy and the
mean training loss over the last tenth of the steps."""

CURVE_COLUMNS = ("config", "d", "p", "seed", "step", "loss")
"""Columns of a counting `curves.csv` (written when the sweep recorded loss curves): one row per run and
block, `step` the block's last step (1-based), `loss` the block mean of the online training loss."""


def counting_config(grid: CountingGrid, task: HistogramTask, cfg: CountingConfig, *, steps: int, batch_size: int,
                    learning_rate: float, n_test: int, dtype, curve_points: int = 0) -> dict:
    """The complete configuration of one counting sweep (the one builder; what `run_dir/config.json` records).

    `curve_points` enters only when > 0 (sweeps without curves keep their fingerprint)."""
    extra = dict(curve_points=int(curve_points)) if curve_points else {}
    return dict(kind="counting_sweep", config=cfg.name, T=task.T, L=task.L, **grid.to_json(), steps=int(steps),
                batch_size=int(batch_size), learning_rate=float(learning_rate), n_test=int(n_test),
                optimizer="adam", data="online (fresh batch per step)", dtype=str(np.dtype(dtype)), **extra)


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
                        dtypes=dict(config=str, T=np.int32, L=np.int32, d=np.int32, p=np.int32, seed=np.int64)),
             BundleFile("counting.json", field="config", required=("config",)),
             BundleFile("curves.csv", columns=CURVE_COLUMNS, required=CURVE_COLUMNS,
                        dtypes=dict(config=str, d=np.int32, p=np.int32, step=np.int32, seed=np.int64), optional=True))
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


def _check_training(steps, batch_size, n_test, learning_rate) -> None:
    for name, value in (("steps", steps), ("batch_size", batch_size), ("n_test", n_test)):
        check_positive_int(value, name)
    if isinstance(learning_rate, (bool, np.bool_)) or not isinstance(learning_rate, (int, float, np.number)) \
            or not np.isfinite(learning_rate) or learning_rate <= 0:
        raise ValueError(f"learning_rate must be a finite number > 0, got learning_rate={learning_rate!r}")


def counting_sweep(grid: CountingGrid, task: HistogramTask, cfg: CountingConfig | str, *, steps: int,
                   batch_size: int = 128, learning_rate: float = 1e-3, n_test: int = 4096, curve_points: int = 0,
                   dtype=jnp.float32, options: RunOptions | None = None) -> CountingRuns | None:
    """Train every `(d, p, seed)` of `grid` for one configuration, padded to the grid's largest `d`, `p`.

    Each chunk is one compiled `vmap` of `counting_run`, sharded over the devices,
    written atomically under `options.run_dir` and skipped on a re-run; multi-host
    through `options.process_index/process_count` (see `phasejax.sweep.run_chunked`).
    `dtype` float32 (default) or float64 (run inside `dtype_scope`). `curve_points > 0` also records each
    run's training-loss curve as that many block means (`CountingRuns.curves`; `steps` must be a multiple).
    Returns `CountingRuns` (task columns plus `accuracy` and `final_loss`), or `None` while chunks are missing.
    """
    if not isinstance(grid, CountingGrid):
        raise ValueError(f"grid must be a CountingGrid, got {type(grid).__name__}")
    if not isinstance(task, HistogramTask):
        raise ValueError(f"task must be a HistogramTask, got {type(task).__name__}")
    cfg = CountingConfig.from_name(cfg) if isinstance(cfg, str) else cfg
    if not isinstance(cfg, CountingConfig):
        raise ValueError(f"cfg must be a CountingConfig or a configuration name, got {cfg!r}")
    _check_training(steps, batch_size, n_test, learning_rate)
    if isinstance(curve_points, (bool, np.bool_)) or not isinstance(curve_points, (int, np.integer)) \
            or curve_points < 0 or (curve_points and steps % curve_points):
        raise ValueError(f"curve_points must be an integer >= 0 dividing steps={steps}, got "
                         f"curve_points={curve_points!r}")
    dtype = check_float_dtype(dtype)
    options = run_options(options)
    d_max, p_max = max(grid.ds), max(grid.ps)
    kw = dict(steps=int(steps), batch_size=int(batch_size), learning_rate=float(learning_rate), n_test=int(n_test),
              curve_points=int(curve_points))

    def fn(chunk):
        one = lambda s, d, p: counting_run(s, d, p, task=task, cfg=cfg, d_max=d_max, p_max=p_max,  # noqa: E731
                                           dtype=dtype, **kw)
        return jax.vmap(one)(jnp.asarray(chunk["seed"]), jnp.asarray(chunk["d"]), jnp.asarray(chunk["p"]))

    config = counting_config(grid, task, cfg, dtype=dtype, **kw)
    tasks = grid.tasks()
    with dtype_scope(dtype):
        out = run_chunked(fn, tasks, config, options)
    if out is None:
        return None
    n = len(tasks["d"])
    runs = dict(config=np.full(n, cfg.name), T=np.full(n, task.T, np.int32), L=np.full(n, task.L, np.int32),
                **tasks, accuracy=np.asarray(out["accuracy"], np.float64),
                final_loss=np.asarray(out["final_loss"], np.float64))
    curves = None
    if curve_points:
        loss = np.asarray(out["loss_curve"], np.float64)            # (runs, curve_points)
        block = int(steps) // int(curve_points)
        rep = lambda v: np.repeat(np.asarray(v), curve_points)      # noqa: E731
        curves = dict(config=np.full(loss.size, cfg.name), d=rep(tasks["d"]), p=rep(tasks["p"]),
                      seed=rep(tasks["seed"]), step=np.tile(block * np.arange(1, curve_points + 1), n),
                      loss=loss.ravel())
    return CountingRuns(runs={k: runs[k] for k in RUN_COLUMNS}, config={cfg.name: canonical_config(config)},
                        curves=curves)


def counting_phase_diagrams(grid: CountingGrid, task: HistogramTask, configs=None, *, steps: int,
                            batch_size: int = 128, learning_rate: float = 1e-3, n_test: int = 4096,
                            curve_points: int = 0, dtype=jnp.float32,
                            options: RunOptions | None = None) -> CountingRuns | None:
    """`counting_sweep` for each configuration (default: all six), one after the other.

    With `options.run_dir`, configuration `c` resumes in `run_dir/<c.dir_name>`
    (`dot_BOS_softmax`). Returns the concatenated `CountingRuns`, or `None`
    while any configuration has chunks missing (other hosts, `max_chunks`).
    """
    names = list(COUNTING_CONFIGS) if configs is None else [configs] if isinstance(configs, str) else list(configs)
    cfgs = [c if isinstance(c, CountingConfig) else CountingConfig.from_name(c) for c in names]
    if not cfgs:
        raise ValueError("configs must name at least one configuration")
    if len({c.name for c in cfgs}) != len(cfgs):
        raise ValueError(f"configs must not repeat a configuration, got {[c.name for c in cfgs]}")
    options = run_options(options)
    parts = []
    for cfg in cfgs:
        opts = options if options.run_dir is None else options.replace(
            run_dir=os.path.join(options.run_dir, cfg.dir_name))
        parts.append(counting_sweep(grid, task, cfg, steps=steps, batch_size=batch_size, learning_rate=learning_rate,
                                    n_test=n_test, curve_points=curve_points, dtype=dtype, options=opts))
    if any(p is None for p in parts):
        return None
    return CountingRuns.concatenate(parts)


def construction_accuracy(params: dict, task: HistogramTask, cfg: CountingConfig, tokens: Array) -> Array:
    """Accuracy of (unpadded) parameters `params` on sequences `tokens (n, L)` (BOS added if `cfg.bos`)."""
    mt, labels = model_inputs(jnp.asarray(tokens), dataclasses.replace(task, bos=cfg.bos))
    return masked_accuracy(counting_logits(params, mt, cfg, params["E"].shape[1], params["b1"].shape[0]), labels)


# ----------------------------------------------------------------------------
# Explicit constructions
# ----------------------------------------------------------------------------


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

    One-hot tokens; uniform mixing `a_ij = 1/L` (`C = 1/L`, or `C = 0` under a
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
    C = np.zeros((L, L), np.float32) if softmax else np.full((L, L), 1.0 / L, np.float32)
    dtype = check_float_dtype(dtype)
    return {k: jnp.asarray(v, dtype) for k, v in dict(E=E, C=C, W1=W1, b1=np.full((T,), -float(L)),
                                                         W2=np.tile(2 * cls[None, :], (T, 1)), b2=-(cls**2)).items()}
