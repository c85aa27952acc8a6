"""The histogram (counting) task: its two data laws, labels, the exact label distribution and the masked scores.

For a sequence of `L` tokens over an alphabet of size `T`, the label of
position `i` is how many times token `x_i` occurs in the sequence
(`[B, A, A, D, E] -> [1, 2, 2, 1, 1]`); labels are classes `0..L` (0 never
occurs for a real token). With a BOS token (id `T`) prepended, sequences
have length `L + 1` and the BOS position carries no label (`IGNORE`), so it
is excluded from the loss and the accuracy.

Two laws of the sequences (`HistogramTask.law`):

* `"composition"` (the default; the law of Behrens, Biggio & Zdeborova's
  experiments): a random composition of `L` is drawn by splitting off a part
  of size `k`, uniform in `1..n-1`, from the `n` positions still left, until
  one position is left (which is the last part, so the last part always has
  size 1); each part gets its own token, drawn without replacement from the
  `T` tokens; the sequence is then shuffled. Every count from 1 to `L - 1`
  occurs: a scored position has label `c` with probability `2 / L` for
  `c = 1` and `1 / L` for `c = 2..L-1` (`label_distribution`), so always
  answering "1" scores `2 / L` (0.2 at `L = 10`).
* `"uniform"`: every token drawn uniformly and independently from `0..T-1`;
  a label is `1 + Binomial(L - 1, 1 / T)`, and always answering "1" scores
  `((T - 1) / T)^(L - 1)` (0.751 at `T = 32, L = 10`).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from math import comb

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.empirics.data import check_positive_int
from phasejax.tasks._common import Array


__all__ = ["IGNORE", "LAWS", "HistogramTask", "all_sequences", "draw_sequences", "histogram_labels",
           "label_distribution", "majority_accuracy", "masked_accuracy", "masked_cross_entropy", "model_inputs",
           "draw_parts", "parts_from_bits", "parts_to_positions", "sample_batch", "sample_sequences", "shuffle_parts"]

IGNORE = -1
"""Label of positions that are not scored (the BOS token)."""

LAWS = ("composition", "uniform")
"""The data laws of the histogram task (see the module docstring)."""


@dataclasses.dataclass(frozen=True)
class HistogramTask:
    """Alphabet size `T`, sequence length `L`, optional BOS token (id `T`, prepended) and the data law
    (`"composition"`, the default, needs `L <= T`; or `"uniform"`)."""

    T: int = 32
    L: int = 10
    bos: bool = False
    law: str = "composition"

    def __post_init__(self):
        object.__setattr__(self, "T", check_positive_int(self.T, "T"))
        object.__setattr__(self, "L", check_positive_int(self.L, "L"))
        if not isinstance(self.bos, (bool, np.bool_)):
            raise ValueError(f"bos must be True or False, got bos={self.bos!r}")
        object.__setattr__(self, "bos", bool(self.bos))
        if self.law not in LAWS:
            raise ValueError(f"law must be one of {LAWS}, got law={self.law!r}")
        if self.law == "composition" and self.L > self.T:
            raise ValueError(f"the composition law gives every part its own token, so it needs L <= T; got L={self.L}, "
                             f"T={self.T} (use law='uniform', or a larger T)")

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


def _below(bits: Array, n) -> Array:
    """An integer uniform in `0..n-1` from uniform 32-bit words (`bits mod n`; bias below `n / 2^32`)."""
    return (bits % jnp.asarray(n, jnp.uint32)).astype(jnp.int32)


def draw_parts(key: Array, T: int, L: int, n: int) -> tuple[Array, Array]:
    """The parts of `n` sequences of the composition law, slot-major: `sizes (L, n)` (part `j`'s size, 0 after
    the last part) and `tokens (L, n)` (part `j`'s token; distinct within a sequence), int32 (`parts_from_bits`
    of `2 L` random words per sequence)."""
    return parts_from_bits(jax.random.bits(key, (2 * L, n), jnp.uint32), T)


def parts_from_bits(bits: Array, T: int) -> tuple[Array, Array]:
    """`draw_parts` from uniform 32-bit words `bits (2 L, n)`.

    Part `j` splits off `1 + (uniform in 0..left-2)` of the `left` positions still left while `left >= 2`, then
    the last position is the last part. Token `j` is the `r`-th (from 0) token not yet taken, `r` uniform in
    `0..T-j-1`, found by walking the taken tokens in increasing order. Elementwise chains over `n` only."""
    L, n = bits.shape[0] // 2, bits.shape[1]
    left = jnp.full((n,), L, jnp.int32)
    sizes = []
    for j in range(L):
        size = jnp.where(left >= 2, 1 + _below(bits[j], jnp.maximum(left - 1, 1)), left)
        sizes.append(size)
        left = left - size
    taken, tokens = [], []                    # taken: the tokens drawn so far, in increasing order
    for j in range(L):
        v = _below(bits[L + j], T - j)
        for s in taken:
            v = v + (s <= v).astype(jnp.int32)
        tokens.append(v)
        at = sum((s < v).astype(jnp.int32) for s in taken) if taken else jnp.zeros_like(v)
        taken = [jnp.where(i < at, taken[i] if i < j else v, jnp.where(i == at, v, taken[i - 1] if i else v))
                 for i in range(j + 1)]
    return jnp.stack(sizes), jnp.stack(tokens)


def parts_to_positions(key: Array, sizes: Array, tokens: Array) -> tuple[Array, Array]:
    """Sequences from their parts `(L, n)`: each part's token repeated `size` times, then the positions
    shuffled (a uniformly random permutation per sequence: ranks of random 32-bit keys, ties broken by
    position). Returns tokens and labels `(L, n)` int32, position-major (`shuffle_parts` of `L` random words
    per sequence)."""
    return shuffle_parts(jax.random.bits(key, sizes.shape, jnp.uint32), sizes, tokens)


def shuffle_parts(keys: Array, sizes: Array, tokens: Array) -> tuple[Array, Array]:
    """`parts_to_positions` with the random 32-bit keys `keys (L, n)` of the positions."""
    L, n = sizes.shape
    ends, total = [], jnp.zeros((n,), jnp.int32)
    for j in range(L):
        total = total + sizes[j]
        ends.append(total)
    q = jnp.arange(L)[:, None]
    part = sum((e[None, :] <= q).astype(jnp.int32) for e in ends)             # (L, n): part of block position q
    before = (keys[None, :, :] < keys[:, None, :]) | ((keys[None, :, :] == keys[:, None, :])
                                                      & (q[None, :, :] < q[:, None, :]))
    rank = jnp.sum(before, 1)                                                  # (L, n): new place of position q
    moved = jnp.sum(jnp.where(rank[:, None, :] == q[None, :, :], part[:, None, :], 0), 0)   # (L, n): part at i
    pick = moved[None, :, :] == jnp.arange(L)[:, None, None]                   # (j, i, n)
    return (jnp.sum(jnp.where(pick, tokens[:, None, :], 0), 0).astype(jnp.int32),
            jnp.sum(jnp.where(pick, sizes[:, None, :], 0), 0).astype(jnp.int32))


def draw_sequences(key: Array, task: HistogramTask, n: int) -> tuple[Array, Array]:
    """`n` sequences of `task.law` and their labels, `(n, L)` int32 each (no BOS)."""
    if task.law == "uniform":
        tokens = jax.random.randint(key, (n, task.L), 0, task.T, dtype=jnp.int32)
        return tokens, histogram_labels(tokens)
    k_parts, k_order = jax.random.split(key)
    tokens, labels = parts_to_positions(k_order, *draw_parts(k_parts, task.T, task.L, n))
    return tokens.T, labels.T


def sample_sequences(key: Array, task: HistogramTask, n: int) -> Array:
    """`n` sequences of `task.law`, shape `(n, L)` int32 (no BOS)."""
    return draw_sequences(key, task, n)[0]


def histogram_labels(tokens: Array) -> Array:
    """Counts `(n, L)`: label `[mu, i]` = number of `j` with `tokens[mu, j] == tokens[mu, i]`."""
    return jnp.sum(tokens[:, :, None] == tokens[:, None, :], axis=-1).astype(jnp.int32)


def model_inputs(tokens: Array, task: HistogramTask, labels: Array | None = None) -> tuple[Array, Array]:
    """Model tokens `(n, length)` (BOS id `T` prepended if `task.bos`) and labels `(n, length)` (`IGNORE` at BOS);
    `labels` default to `histogram_labels(tokens)`."""
    labels = histogram_labels(tokens) if labels is None else labels
    if not task.bos:
        return tokens, labels
    n = tokens.shape[0]
    bos = jnp.full((n, 1), task.T, tokens.dtype)
    return jnp.concatenate([bos, tokens], 1), jnp.concatenate([jnp.full((n, 1), IGNORE, labels.dtype), labels], 1)


def sample_batch(key: Array, task: HistogramTask, n: int) -> tuple[Array, Array]:
    """Fresh model inputs and labels, `(n, length)` each."""
    tokens, labels = draw_sequences(key, task, n)
    return model_inputs(tokens, task, labels)


def _part_counts(L: int) -> list[Fraction]:
    """`E[number of parts of size c]`, `c = 0..L`, of the composition law's split of `L` (exact recursion:
    `E_n = (1 / (n - 1)) sum_k (e_k + E_{n-k})`, `E_1 = e_1`)."""
    counts = {1: [Fraction(0), Fraction(1)] + [Fraction(0)] * (L - 1)}
    for n in range(2, L + 1):
        e = [Fraction(0)] * (L + 1)
        for k in range(1, n):
            e[k] += Fraction(1, n - 1)
            for c, v in enumerate(counts[n - k]):
                e[c] += v / (n - 1)
        counts[n] = e
    return counts[L]


def label_distribution(task: HistogramTask) -> np.ndarray:
    """`P(label = c)`, `c = 0..L`, of a scored position under `task.law`, exactly, `(L + 1,)` float64.

    Composition law: `c E[parts of size c] / L` (exact rational recursion; equals `2 / L` at `c = 1` and `1 / L`
    at `c = 2..L-1` for `L >= 2`). Uniform law: `c - 1 ~ Binomial(L - 1, 1 / T)`."""
    L, T = task.L, task.T
    if task.law == "uniform":
        return np.array([0.0] + [comb(L - 1, c - 1) * (1 / T) ** (c - 1) * (1 - 1 / T) ** (L - c)
                                 for c in range(1, L + 1)])
    counts = _part_counts(L)
    return np.array([float(c * counts[c] / L) for c in range(L + 1)])


def majority_accuracy(task: HistogramTask) -> float:
    """Accuracy of the best input-blind answer (always the most frequent label): `max_c P(label = c)`."""
    return float(np.max(label_distribution(task)))


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
