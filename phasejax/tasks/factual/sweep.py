"""Sweeps of factual-recall runs through `phasejax.sweep.run_chunked`."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.sweep import RunOptions, run_chunked, run_options
from phasejax.tasks._common import F32
from phasejax.tasks.factual.data import FactualTask
from phasejax.tasks.factual.model import factual_parameter_count
from phasejax.tasks.factual.train import FactualTraining, factual_run


# ----------------------------------------------------------------------------
# Sweeps
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FactualGrid:
    """Runs to train: every `n_subjects` in `subjects` x architecture `(d, m, H)` in `archs` x seed.

    `m = 0` is the attention-only model. `tasks()` is the flat table in order
    `(arch, n_subjects, seed)` with columns `d, m, n_heads, n_subjects, seed`.
    """

    subjects: tuple[int, ...] = (16, 32, 64)
    archs: tuple[tuple[int, int, int], ...] = ((32, 0, 2), (32, 64, 2))
    seeds: tuple[int, ...] = (0, 1)

    def __post_init__(self):
        subjects = tuple(int(v) for v in np.atleast_1d(self.subjects))
        seeds = tuple(int(v) for v in np.atleast_1d(self.seeds))
        archs = tuple(tuple(int(x) for x in a) for a in self.archs)
        if not subjects or min(subjects) < 1:
            raise ValueError(f"subjects must be non-empty integers >= 1, got subjects={self.subjects!r}")
        if not seeds or min(seeds) < 0:
            raise ValueError(f"seeds must be non-empty integers >= 0, got seeds={self.seeds!r}")
        if not archs or any(len(a) != 3 for a in archs):
            raise ValueError(f"archs must be non-empty (d, m, n_heads) triples, got archs={self.archs!r}")
        for d, m, h in archs:
            if d < 1:
                raise ValueError(f"d must be >= 1, got d={d} in archs")
            if m < 0:
                raise ValueError(f"m must be >= 0 (0: attention only), got m={m} in archs")
            if h < 1:
                raise ValueError(f"n_heads must be >= 1, got n_heads={h} in archs")
        object.__setattr__(self, "subjects", subjects)
        object.__setattr__(self, "seeds", seeds)
        object.__setattr__(self, "archs", archs)

    def tasks(self) -> dict[str, np.ndarray]:
        rows = [(d, m, h, s, seed) for (d, m, h) in self.archs for s in self.subjects for seed in self.seeds]
        cols = np.asarray(rows, dtype=np.int64).T
        return dict(d=cols[0].astype(np.int32), m=cols[1].astype(np.int32), n_heads=cols[2].astype(np.int32),
                    n_subjects=cols[3].astype(np.int32), seed=cols[4])


def factual_sweep(grid: FactualGrid, task: FactualTask, training: FactualTraining = FactualTraining(), *,
                  options: RunOptions | None = None, dtype=F32) -> dict[str, np.ndarray] | None:
    """Train every run of `grid` in padded, vmapped chunks (`phasejax.sweep.run_chunked`).

    Padded to the grid's largest `d`, `m`, `H`; every `n_subjects` must lie in
    `[1, task.n_subjects]` (and be a multiple of `D` for a balanced table).
    Returns the task columns, `n_facts = n_subjects R`, `n_params`
    (`factual_parameter_count`) and the outputs of `factual_run` (curves as `(runs, P)`
    arrays), or `None` while chunks are missing (`options.max_chunks`, other hosts).
    `options` as in `run_chunked`; default `RunOptions(chunk_size=16)`.
    """
    options = run_options(options)
    for s in grid.subjects:
        if s > task.n_subjects:
            raise ValueError(f"n_subjects must be <= task.n_subjects={task.n_subjects}, got n_subjects={s} in grid")
        if task.balanced and s % task.n_attributes:
            raise ValueError(f"n_subjects must be a multiple of n_attributes={task.n_attributes} for a balanced "
                             f"fact table, got n_subjects={s} in grid")
    d_max = max(a[0] for a in grid.archs)
    m_max = max(max(a[1] for a in grid.archs), 1)
    heads_max = max(a[2] for a in grid.archs)

    def fn(chunk):
        def one(seed, s, d, m, h):
            return factual_run(seed, s, d, m, h, task=task, training=training, d_max=d_max, m_max=m_max,
                               heads_max=heads_max, dtype=dtype)

        return jax.vmap(one)(*(jnp.asarray(chunk[k]) for k in ("seed", "n_subjects", "d", "m", "n_heads")))

    config = dict(kind="factual_sweep", task=dataclasses.asdict(task), training=dataclasses.asdict(training),
                  subjects=list(grid.subjects), archs=[list(a) for a in grid.archs], seeds=list(grid.seeds),
                  dtype=str(jnp.dtype(dtype)), data="online (fresh batch per step)")
    tasks = grid.tasks()
    out = run_chunked(fn, tasks, config, options)
    if out is None:
        return None
    out = dict(out)
    out.update(tasks)
    out["n_facts"] = tasks["n_subjects"].astype(np.int64) * task.n_relations
    out["n_params"] = np.asarray([factual_parameter_count(d, m, h, training.d_head)
                                  for d, m, h in zip(tasks["d"], tasks["m"], tasks["n_heads"])], np.int64)
    return out
