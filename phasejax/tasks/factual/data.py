"""The factual-recall task: facts, sequences, batches and the relation-only predictor."""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.tasks._common import F32, Array, check_int, concrete


MODEL_KINDS = ("attention+MLP", "attention-only")
"""Model names: `m > 0` is attention + MLP, `m = 0` attention only."""


def _check_concrete_range(name: str, value, low: int, high: int) -> None:
    """Raise if a concrete (non-traced) `value` lies outside `[low, high]`; traced values are not checked."""
    v = concrete(value)
    if v is None:
        return
    if v.size and (np.any(v < low) or np.any(v > high) or not np.all(v == np.round(v))):
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {name}={value!r}")


def model_kind(m) -> str:
    """`"attention-only"` for MLP width `m = 0`, else `"attention+MLP"`."""
    return MODEL_KINDS[1] if int(m) == 0 else MODEL_KINDS[0]


# ----------------------------------------------------------------------------
# Task
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FactualTask:
    """Subjects `S`, relations `R`, attributes per relation `D = |A_r|`, noise tokens, sequence length `T`.

    Attributes:
      n_subjects: `S`, subject tokens allocated (a run may use only the first
        `n_subjects <= S`, see `sample_factual_batch`).
      n_relations: `R`.
      n_attributes: `D = |A_r|` for every relation (the sets `A_r` are disjoint).
      n_noise: noise tokens `|N|` (>= 1 when `length > 2`).
      length: `T`, tokens before `EOS` (one subject, one relation, `T - 2` noise).
      balanced: draw every `a*(., r)` so that each attribute of `A_r` answers
        exactly `S / D` subjects (needs `D | S`); else i.i.d. uniform on `A_r`.
    """

    n_subjects: int = 64
    n_relations: int = 4
    n_attributes: int = 4
    n_noise: int = 16
    length: int = 8
    balanced: bool = True

    def __post_init__(self):
        check_int("n_subjects", self.n_subjects, 1)
        check_int("n_relations", self.n_relations, 1)
        check_int("n_attributes", self.n_attributes, 1)
        check_int("n_noise", self.n_noise, 0)
        check_int("length", self.length, 2)
        if self.length > 2 and self.n_noise < 1:
            raise ValueError(f"n_noise must be >= 1 when length > 2, got n_noise={self.n_noise}, length={self.length}")
        if self.balanced and self.n_subjects % self.n_attributes:
            raise ValueError(f"n_subjects must be a multiple of n_attributes for a balanced fact table, got "
                             f"n_subjects={self.n_subjects}, n_attributes={self.n_attributes}")

    @property
    def vocab(self) -> int:
        """Input token ids: `S + R + N_noise + 1` (with `EOS`)."""
        return self.n_subjects + self.n_relations + self.n_noise + 1

    @property
    def eos(self) -> int:
        return self.n_subjects + self.n_relations + self.n_noise

    @property
    def noise_start(self) -> int:
        return self.n_subjects + self.n_relations

    @property
    def n_outputs(self) -> int:
        """Attribute vocabulary `|A| = R D` (the model's output classes)."""
        return self.n_relations * self.n_attributes

    @property
    def log_A_r(self) -> float:
        """`log |A_r| = log D`: the loss of the relation-only predictor on a balanced fact table."""
        return math.log(self.n_attributes)

    @property
    def log_A(self) -> float:
        """`log |A| = log (R D)`: the loss of the uniform predictor (the loss at initialisation)."""
        return math.log(self.n_outputs)

    def replace(self, **changes) -> "FactualTask":
        return dataclasses.replace(self, **changes)


def sample_facts(key: Array, task: FactualTask) -> Array:
    """Fact table `a*(s, r)`, shape `(S, R)` int32, `a*(s, r) in A_r = {r D, ..., r D + D - 1}`.

    Balanced: the subjects are cut into blocks of `D` consecutive ids; within
    each block and relation the answers are a uniformly random bijection onto
    `A_r` (so `a*(s, r)` is uniform on `A_r` and the first `S'` subjects form a
    balanced table whenever `D | S'`). Otherwise i.i.d. uniform on `A_r`.
    Subject `s`'s row depends only on `(key, s // D)` or `(key, s)`, not on `S`.
    """
    S, R, D = task.n_subjects, task.n_relations, task.n_attributes
    s = np.arange(S)
    if task.balanced:
        n_blocks = -(-S // D)
        block, rel = np.meshgrid(np.arange(n_blocks), np.arange(R), indexing="ij")
        perms = jax.vmap(lambda b, r: jax.random.permutation(jax.random.fold_in(jax.random.fold_in(key, b), r), D))(
            jnp.asarray(block.ravel()), jnp.asarray(rel.ravel())).reshape(n_blocks, R, D)
        offset = perms[s // D, :, s % D]                                   # (S, R)
    else:
        offset = jax.vmap(lambda i: jax.random.randint(jax.random.fold_in(key, i), (R,), 0, D, dtype=jnp.int32))(
            jnp.asarray(s))
    return (jnp.arange(R, dtype=jnp.int32)[None, :] * D + offset).astype(jnp.int32)


class FactualBatch(NamedTuple):
    """Sequences and their targets: `tokens (n, T + 1)` (last is `EOS`), `labels (n,) = a*(s, r)`,
    `subjects (n,)`, `relations (n,)` (relation index `r`, token id `S + r`)."""

    tokens: Array
    labels: Array
    subjects: Array
    relations: Array


def _draw_columns(key: Array, n: int, low, high) -> Array:
    """`(n, len(low))` int32, column `c` uniform on `[low[c], high[c])` (one `randint` call; bounds may be traced)."""
    low = jnp.asarray(low, jnp.int32)
    high = jnp.asarray(high, jnp.int32)
    return jax.random.randint(key, (n, low.shape[0]), low, high, dtype=jnp.int32)


def _place(task: FactualTask, subjects: Array, relations: Array, draws: Array) -> Array:
    """Sequences `(n, T + 1)` from `draws (n, 2 + T)` = (position i, offset j, T noise tokens); then `EOS`."""
    T = task.length
    i, j, noise = draws[:, 0], draws[:, 1], draws[:, 2:]
    j = j + (j >= i)                                       # uniform over the positions != i
    pos = jnp.arange(T, dtype=jnp.int32)[None, :]
    rel_tok = (task.n_subjects + relations).astype(jnp.int32)
    tokens = jnp.where(pos == i[:, None], subjects[:, None].astype(jnp.int32),
                       jnp.where(pos == j[:, None], rel_tok[:, None], noise))
    return jnp.concatenate([tokens, jnp.full((subjects.shape[0], 1), task.eos, jnp.int32)], axis=1)


def _context_bounds(task: FactualTask) -> tuple[list, list]:
    lo = [0, 0] + [task.noise_start] * task.length
    hi = [task.length, task.length - 1] + [task.noise_start + max(task.n_noise, 1)] * task.length
    return lo, hi


def factual_sequences(key: Array, task: FactualTask, subjects: Array, relations: Array) -> Array:
    """Token sequences `(n, T + 1)` holding `subjects[i]`, relation token `S + relations[i]` and noise, then `EOS`.

    The positions of the subject and the relation are a uniformly random
    ordered pair of distinct positions in `0..T-1`; the other `T - 2`
    positions hold i.i.d. uniform noise tokens.
    """
    lo, hi = _context_bounds(task)
    return _place(task, subjects, relations, _draw_columns(key, subjects.shape[0], lo, hi))


def sample_factual_batch(key: Array, task: FactualTask, facts: Array, n: int, n_subjects=None) -> FactualBatch:
    """`n` fresh sequences: `(s, r)` uniform over `[n_subjects] x [R]` (default `n_subjects = S`), target `a*(s, r)`.

    Each sequence as in `factual_sequences`. `n_subjects` may be traced (a padded
    sweep); a concrete value must lie in `[1, S]`.
    """
    n_subjects = task.n_subjects if n_subjects is None else n_subjects
    _check_concrete_range("n_subjects", n_subjects, 1, task.n_subjects)
    lo, hi = _context_bounds(task)
    draws = _draw_columns(key, n, [0, 0] + lo, [n_subjects, task.n_relations] + hi)
    s, r = draws[:, 0], draws[:, 1]
    return FactualBatch(_place(task, s, r, draws[:, 2:]), facts[s, r], s, r)


# ----------------------------------------------------------------------------
# The relation-only ("hallucinating") predictor: closed forms
# ----------------------------------------------------------------------------


def relation_only_log_probs(task: FactualTask, facts: Array, n_subjects=None, dtype=F32) -> Array:
    """`log p(a | r)` of the Bayes predictor that sees only the relation, shape `(R, R D)`.

    `p(a | r) = #{s < n_subjects : a*(s, r) = a} / n_subjects` (`-inf` off the support).
    """
    n_subjects = task.n_subjects if n_subjects is None else n_subjects
    _check_concrete_range("n_subjects", n_subjects, 1, task.n_subjects)
    used = (jnp.arange(task.n_subjects) < n_subjects).astype(dtype)
    onehot = jax.nn.one_hot(facts, task.n_outputs, dtype=dtype)            # (S, R, |A|)
    counts = jnp.einsum("s,sra->ra", used, onehot)
    return jnp.log(counts / jnp.asarray(n_subjects, dtype))


def relation_only_loss(task: FactualTask, facts: Array, n_subjects=None, dtype=F32) -> Array:
    """Population cross-entropy of the relation-only predictor: `E_{s,r} [-log p(a*(s, r) | r)]` (scalar).

    Computed from the fact table (the noise and the order do not enter this
    predictor). On a balanced table it equals `log D` exactly (`FactualTask.log_A_r`).
    """
    n_subjects = task.n_subjects if n_subjects is None else n_subjects
    logp = relation_only_log_probs(task, facts, n_subjects, dtype)
    used = (jnp.arange(task.n_subjects) < n_subjects).astype(dtype)
    picked = jnp.take_along_axis(logp.T[None, :, :].repeat(task.n_subjects, 0),
                                 facts[:, None, :], axis=1)[:, 0, :]       # (S, R): log p(a*(s, r) | r)
    return -jnp.sum(used[:, None] * picked) / (jnp.asarray(n_subjects, dtype) * task.n_relations)


def relation_only_entropy(facts, n_subjects: int | None = None) -> float:
    """Closed form in float64 (numpy): `H(a | r) = mean_r [-sum_a p(a|r) log p(a|r)]` of a fact table `(S, R)`.

    Equals `log D` for a balanced table; the relation-only predictor's loss is this entropy.
    """
    f = np.asarray(facts)
    f = f if n_subjects is None else f[:int(n_subjects)]
    out = 0.0
    for r in range(f.shape[1]):
        _, counts = np.unique(f[:, r], return_counts=True)
        p = counts / counts.sum()
        out += float(-(p * np.log(p)).sum())
    return out / f.shape[1]
