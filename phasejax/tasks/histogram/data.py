"""The histogram (counting) task: data, labels and exact accuracy.

For a sequence of `L` tokens over an alphabet of size `T`, the label of
position `i` is how many times token `x_i` occurs in the sequence
(`[B, A, A, D, E] -> [1, 2, 2, 1, 1]`); labels are classes `0..L` (0 never
occurs for a real token). With a BOS token (id `T`) prepended, sequences
have length `L + 1` and the BOS position carries no label (`IGNORE`), so it
is excluded from the loss and the accuracy.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.empirics.data import check_positive_int
from phasejax.tasks._common import Array


__all__ = ["IGNORE", "HistogramTask", "all_sequences", "histogram_labels", "masked_accuracy", "masked_cross_entropy",
           "model_inputs", "sample_batch", "sample_sequences"]

IGNORE = -1
"""Label of positions that are not scored (the BOS token)."""


@dataclasses.dataclass(frozen=True)
class HistogramTask:
    """Alphabet size `T`, sequence length `L`, optional BOS token (id `T`, prepended)."""

    T: int = 32
    L: int = 10
    bos: bool = False

    def __post_init__(self):
        object.__setattr__(self, "T", check_positive_int(self.T, "T"))
        object.__setattr__(self, "L", check_positive_int(self.L, "L"))
        if not isinstance(self.bos, (bool, np.bool_)):
            raise ValueError(f"bos must be True or False, got bos={self.bos!r}")
        object.__setattr__(self, "bos", bool(self.bos))

    @property
    def vocab(self) -> int:
        """Number of token ids (`T`, plus one for BOS)."""
        return self.T + int(self.bos)

    @property
    def length(self) -> int:
        """Model sequence length (`L`, plus one for BOS)."""
        return self.L + int(self.bos)

    @property
    def n_classes(self) -> int:
        return self.L + 1


def sample_sequences(key: Array, task: HistogramTask, n: int) -> Array:
    """`n` sequences of `L` tokens drawn uniformly from `0..T-1`, shape `(n, L)` int32 (no BOS)."""
    return jax.random.randint(key, (n, task.L), 0, task.T, dtype=jnp.int32)


def histogram_labels(tokens: Array) -> Array:
    """Counts `(n, L)`: label `[mu, i]` = number of `j` with `tokens[mu, j] == tokens[mu, i]`."""
    return jnp.sum(tokens[:, :, None] == tokens[:, None, :], axis=-1).astype(jnp.int32)


def model_inputs(tokens: Array, task: HistogramTask) -> tuple[Array, Array]:
    """Model tokens `(n, length)` (BOS id `T` prepended if `task.bos`) and labels `(n, length)` (`IGNORE` at BOS)."""
    labels = histogram_labels(tokens)
    if not task.bos:
        return tokens, labels
    n = tokens.shape[0]
    bos = jnp.full((n, 1), task.T, tokens.dtype)
    return jnp.concatenate([bos, tokens], 1), jnp.concatenate([jnp.full((n, 1), IGNORE, labels.dtype), labels], 1)


def sample_batch(key: Array, task: HistogramTask, n: int) -> tuple[Array, Array]:
    """Fresh model inputs and labels, `(n, length)` each."""
    return model_inputs(sample_sequences(key, task, n), task)


def all_sequences(task: HistogramTask, max_count: int = 2_000_000) -> np.ndarray:
    """Every sequence of the task, `(T^L, L)` (for exhaustive tests; refuses more than `max_count`)."""
    total = task.T ** task.L
    if total > max_count:
        raise ValueError(f"T^L = {total} sequences exceed max_count={max_count}; use a random test set")
    idx = np.arange(total)
    digits = [(idx // task.T**k) % task.T for k in range(task.L - 1, -1, -1)]
    return np.stack(digits, axis=1).astype(np.int32)


def masked_accuracy(logits: Array, labels: Array) -> Array:
    """Fraction of scored positions (`labels != IGNORE`) whose argmax is the label."""
    scored = labels != IGNORE
    hit = (jnp.argmax(logits, -1) == labels) & scored
    return jnp.sum(hit) / jnp.maximum(jnp.sum(scored), 1)


def masked_cross_entropy(logits: Array, labels: Array) -> Array:
    """Mean cross-entropy over scored positions (stable: `optax.softmax_cross_entropy_with_integer_labels`)."""
    import optax

    scored = labels != IGNORE
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.where(scored, labels, 0))
    return jnp.sum(jnp.where(scored, ce, 0.0)) / jnp.maximum(jnp.sum(scored), 1)


