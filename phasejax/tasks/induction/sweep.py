"""Sweeps of induction runs over `(model, layers, T, S, beta, seed)` through `phasejax.sweep.run_chunked`."""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.sweep import RunOptions, run_chunked, run_options
from phasejax.tasks._common import F32
from phasejax.tasks.induction.data import _check_dtype, _check_int, _check_positive
from phasejax.tasks.induction.model import InductionModel
from phasejax.tasks.induction.references import _evaluation_set, induction_reference_table
from phasejax.tasks.induction.result import InductionResult
from phasejax.tasks.induction.train import induction_run


@dataclasses.dataclass(frozen=True)
class InductionTraining:
    """Optimisation and evaluation settings shared by every run of a sweep.

    Adam (`learning_rate`) on `steps` fresh batches of `batch_size` chains;
    initial scale `init_scale`; curves averaged over `n_records` geometric
    blocks of steps (`record_steps`); evaluation on `n_eval` chains drawn
    from `eval_seed`.
    """

    steps: int = 1500
    batch_size: int = 32
    learning_rate: float = 0.03
    init_scale: float = 0.02
    n_records: int = 60
    n_eval: int = 512
    eval_seed: int = 12345

    def __post_init__(self):
        for name in ("steps", "batch_size", "n_records", "n_eval"):
            _check_int(name, getattr(self, name), 1)
        _check_int("eval_seed", self.eval_seed, 0)
        _check_positive("learning_rate", self.learning_rate)
        _check_positive("init_scale", self.init_scale)


@dataclasses.dataclass(frozen=True)
class InductionGrid:
    """Runs `models x Ts x Ss x betas x seeds`; `S_max` (default `max(Ss)`) is the padded state count.

    `(S, beta, seed)` are vmapped (`tasks()`); each `(model, T)` is one
    compiled sweep (`groups()`), since the model and `T` set the array shapes.
    """

    models: tuple[InductionModel, ...] = (InductionModel(layers=1), InductionModel(layers=2))
    Ss: tuple[int, ...] = (2, 3, 5)
    Ts: tuple[int, ...] = (16, 32, 64)
    betas: tuple[float, ...] = (1.0,)
    seeds: tuple[int, ...] = (0, 1)
    S_max: int | None = None

    def __post_init__(self):
        models = tuple(self.models) if isinstance(self.models, (tuple, list)) else (self.models,)
        if not models or not all(isinstance(m, InductionModel) for m in models):
            raise ValueError(f"models must be a non-empty tuple of InductionModel, got {self.models!r}")
        object.__setattr__(self, "models", models)
        for name, kind in (("Ss", int), ("Ts", int), ("betas", float), ("seeds", int)):
            vals = tuple(kind(v) for v in np.atleast_1d(getattr(self, name)))
            if not vals:
                raise ValueError(f"{name} must not be empty")
            object.__setattr__(self, name, vals)
        for S in self.Ss:
            _check_int("S", S, 2)
        for T in self.Ts:
            _check_int("T", T, 2)
        for b in self.betas:
            _check_positive("beta", b)
        for s in self.seeds:
            _check_int("seed", s, 0)
        if self.S_max is not None:
            _check_int("S_max", self.S_max, 2)
            if self.S_max < max(self.Ss):
                raise ValueError(f"S_max must be >= max(Ss)={max(self.Ss)}, got S_max={self.S_max}")

    @property
    def padded_S(self) -> int:
        return max(self.Ss) if self.S_max is None else int(self.S_max)

    def tasks(self) -> dict[str, np.ndarray]:
        """Flat table `S, beta, seed` (order `S, beta, seed`) and `point`, the index of `(S, beta)` in `points()`."""
        S, b, s = np.meshgrid(self.Ss, self.betas, self.seeds, indexing="ij")
        point = np.meshgrid(np.arange(len(self.Ss) * len(self.betas)), self.seeds, indexing="ij")[0]
        return dict(S=S.ravel().astype(np.int32), beta=b.ravel().astype(np.float64), seed=s.ravel().astype(np.int64),
                    point=point.ravel().astype(np.int32))

    @property
    def point_index(self) -> np.ndarray:
        """Row of `tasks()` of the first seed of each point `(S, beta)` (in the order of `point`)."""
        return np.arange(len(self.Ss) * len(self.betas)) * len(self.seeds)

    def groups(self) -> list[tuple[InductionModel, int]]:
        return [(m, T) for m in self.models for T in self.Ts]


def _group_name(model: InductionModel, T: int, batch_size: int) -> str:
    return f"{model.name}-L{model.layers}-T{T}-B{batch_size}"


def induction_sweep(grid: InductionGrid, training: InductionTraining = InductionTraining(), *,
                    reference_sequences: int = 4096, n_exact: int = 32, n_samples: int = 256, dtype=F32,
                    options: RunOptions | None = None) -> "InductionResult | None":
    """Train every run of `grid` and measure it; reference losses by simulation on every `(S, T, beta)`.

    Every run of a point `(S, T, beta)` is scored on the same `training.n_eval`
    chains (`evaluation_chains`), on which the reference losses are computed
    once; the gaps to them are paired by chain. The references by simulation
    (`induction_reference_table` with `reference_sequences` fresh chains,
    `n_exact`, `n_samples`; `reference_sequences=0` skips it) are computed
    after the runs.

    Each `(model, T)` group goes through `phasejax.sweep.run_chunked` (vmap of
    `induction_run` over `(S, beta, seed)`, chunk files under
    `run_dir/<model>-L<layers>-T<T>-B<batch_size>/`); `options` as there, default
    `RunOptions(chunk_size=64)` (one chunk per group on small grids).
    Returns an `InductionResult`, or `None` while some chunk is missing.
    """
    options = run_options(options if options is not None else RunOptions(chunk_size=64))
    if not isinstance(training, InductionTraining):
        raise ValueError(f"training must be an InductionTraining, got {type(training).__name__}")
    _check_int("reference_sequences", reference_sequences, 0)
    dt = _check_dtype(dtype)
    S_max = grid.padded_S
    tasks = grid.tasks()
    pieces, missing = [], False
    for T in grid.Ts:
        # the evaluation chains and the references on them, once per point (S, beta)
        eval_tokens, eval_P, eval_refs = _evaluation_set(
            jnp.asarray(tasks["S"][grid.point_index]), jnp.asarray(tasks["beta"][grid.point_index], dt), T=T,
            S_max=S_max, n_eval=training.n_eval, eval_seed=training.eval_seed, dtype=dt.name)
        eval_refs = {k: np.asarray(v) for k, v in jax.device_get(eval_refs).items()}
        for model in grid.models:
            def fn(chunk, model=model, T=T, eval_tokens=eval_tokens, eval_P=eval_P):
                one = lambda seed, S, beta, point: induction_run(  # noqa: E731
                    seed, S, beta, eval_tokens[point], eval_P[point], model=model, T=T, S_max=S_max,
                    steps=training.steps, batch_size=training.batch_size, learning_rate=training.learning_rate,
                    init_scale=training.init_scale, n_records=training.n_records, dtype=dt)
                return jax.vmap(one)(jnp.asarray(chunk["seed"]), jnp.asarray(chunk["S"]),
                                     jnp.asarray(chunk["beta"], dt), jnp.asarray(chunk["point"]))

            config = dict(kind="induction_sweep", model=dataclasses.asdict(model), T=T, S_max=S_max,
                          training=dataclasses.asdict(training), dtype=str(dt),
                          data="Dirichlet(beta) rows, stationary start, fresh batch per step",
                          loss="expected next-token log loss over the T positions", optimizer="adam")
            sub = None if options.run_dir is None else os.path.join(options.run_dir,
                                                                    _group_name(model, T, training.batch_size))
            out = run_chunked(fn, tasks, config, options.replace(run_dir=sub))
            if out is None:
                missing = True
                continue
            pieces.append((model, T, out, eval_refs))
    if missing:
        return None
    if reference_sequences:
        references = induction_reference_table(grid.Ss, grid.Ts, grid.betas, n_sequences=reference_sequences,
                                               n_exact=n_exact, n_samples=n_samples, seed=training.eval_seed,
                                               dtype=dt)
    else:
        references = {}
    config = dict(grid=dict(models=[dataclasses.asdict(m) for m in grid.models], Ss=list(grid.Ss),
                            Ts=list(grid.Ts), betas=list(grid.betas), seeds=list(grid.seeds), S_max=S_max),
                  training=dataclasses.asdict(training), reference_sequences=reference_sequences,
                  n_exact=n_exact, n_samples=n_samples, dtype=str(dt))
    return InductionResult.from_runs(pieces, tasks, references, config)


# ----------------------------------------------------------------------------
# Result
