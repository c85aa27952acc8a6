"""The histogram task's data laws: the composition law against its exact distribution and an independent sampler."""

import itertools
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax.tasks.histogram.data import (
    HistogramTask,
    draw_parts,
    draw_sequences,
    histogram_labels,
    label_distribution,
    majority_accuracy,
    parts_to_positions,
)


def compositions(L: int):
    """Every split sequence the composition law can draw for `L`, with its exact probability: part `j` takes
    `k` of the `n` positions left with probability `1 / (n - 1)` while `n >= 2`; the last part is the last one."""
    out = []

    def walk(n, parts, prob):
        if n == 1:
            out.append((tuple(parts) + (1,), prob))
            return
        for k in range(1, n):
            walk(n - k, parts + [k], prob / (n - 1))

    walk(L, [], Fraction(1))
    return out


def reference_sequences(rng: np.random.Generator, T: int, L: int, n: int) -> np.ndarray:
    """The law as the paper's code describes it, in numpy: split off uniform parts, one distinct token per part
    (drawn without replacement), shuffle."""
    out = np.empty((n, L), np.int64)
    for i in range(n):
        left, parts = L, []
        while left > 1:
            k = int(rng.integers(1, left))
            parts.append(k)
            left -= k
        parts.append(1)
        seq = np.repeat(rng.choice(T, size=len(parts), replace=False), parts)
        rng.shuffle(seq)
        out[i] = seq
    return out


@pytest.mark.parametrize("L", [1, 2, 3, 5, 10, 13])
def test_label_distribution_is_the_closed_form_and_the_enumeration(L):
    p = label_distribution(HistogramTask(T=max(L, 2), L=L))
    exact = np.zeros(L + 1)
    for parts, prob in compositions(L):
        for k in parts:
            exact[k] += float(prob) * k / L
    np.testing.assert_allclose(p, exact, atol=1e-12)
    closed = np.zeros(L + 1)
    if L == 1:
        closed[1] = 1.0
    else:
        closed[1] = 2 / L
        closed[2:L] = 1 / L
    np.testing.assert_allclose(p, closed, atol=1e-12)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)


def test_majority_accuracy_of_both_laws():
    assert majority_accuracy(HistogramTask(32, 10)) == pytest.approx(0.2, abs=1e-12)
    assert majority_accuracy(HistogramTask(32, 10, law="uniform")) == pytest.approx((31 / 32) ** 9, abs=1e-12)
    uniform = label_distribution(HistogramTask(5, 4, law="uniform"))
    brute = np.zeros(5)     # every sequence of 5 tokens of length 4
    for seq in itertools.product(range(5), repeat=4):
        for t in seq:
            brute[seq.count(t)] += 1 / (4 * 5**4)
    np.testing.assert_allclose(uniform, brute, atol=1e-12)


def test_the_composition_law_needs_as_many_tokens_as_positions():
    with pytest.raises(ValueError, match="L <= T"):
        HistogramTask(T=5, L=6)
    HistogramTask(T=5, L=6, law="uniform")
    with pytest.raises(ValueError, match="law"):
        HistogramTask(law="zipf")


def test_sampled_compositions_follow_the_exact_law():
    """The parts' sizes of 60,000 draws against the exact probability of every composition of L = 5 (8 of
    them): each frequency within 4.5 binomial standard errors."""
    L, n = 5, 60_000
    sizes, tokens = (np.asarray(a) for a in draw_parts(jax.random.PRNGKey(3), 7, L, n))
    assert (sizes.sum(0) == L).all()
    drawn = [tuple(int(k) for k in col if k > 0) for col in sizes.T]
    for parts, prob in compositions(L):
        freq = np.mean([c == parts for c in drawn])
        se = np.sqrt(float(prob) * (1 - float(prob)) / n)
        assert abs(freq - float(prob)) < 4.5 * se, (parts, freq, float(prob))
    used = sizes > 0                         # tokens of the parts are distinct, and uniform over 0..T-1
    for col in range(2000):
        t = tokens[used[:, col], col]
        assert len(set(t.tolist())) == len(t)
    freq = np.bincount(tokens[used], minlength=7) / used.sum()
    np.testing.assert_allclose(freq, 1 / 7, atol=4.5 * np.sqrt((1 / 7) * (6 / 7) / used.sum()))


def test_sampled_sequences_match_the_exact_labels_and_an_independent_sampler():
    """300,000 JAX sequences (T = 32, L = 10): labels are the histogram, each label's frequency is the exact
    one at every position (the shuffle) within 0.006, and so are 30,000 sequences of the numpy sampler;
    the mean number of distinct tokens is `2 + sum_{c=2}^{L-1} 1/c` for both."""
    task = HistogramTask(32, 10)
    tokens, labels = (np.asarray(a) for a in draw_sequences(jax.random.PRNGKey(0), task, 300_000))
    np.testing.assert_array_equal(np.asarray(histogram_labels(jnp.asarray(tokens))), labels)
    exact = label_distribution(task)
    for i in range(10):
        np.testing.assert_allclose(np.bincount(labels[:, i], minlength=11) / len(labels), exact, atol=0.006)
    np.testing.assert_allclose(np.bincount(labels.ravel(), minlength=11) / labels.size, exact, atol=0.002)
    ref = reference_sequences(np.random.default_rng(1), 32, 10, 30_000)
    ref_labels = np.asarray(histogram_labels(jnp.asarray(ref)))
    np.testing.assert_allclose(np.bincount(ref_labels.ravel(), minlength=11) / ref_labels.size, exact, atol=0.006)
    parts = 2 + sum(1 / c for c in range(2, 10))
    for seqs, tol in ((tokens, 0.01), (ref, 0.03)):
        assert np.mean([len(set(s.tolist())) for s in seqs[:30_000]]) == pytest.approx(parts, abs=tol)


def test_parts_to_positions_is_a_permutation_of_the_blocks():
    sizes, tokens = draw_parts(jax.random.PRNGKey(5), 12, 8, 500)
    seq, lab = (np.asarray(a) for a in parts_to_positions(jax.random.PRNGKey(6), sizes, tokens))
    sizes, tokens = np.asarray(sizes), np.asarray(tokens)
    for b in range(500):
        blocks = np.repeat(tokens[:, b], sizes[:, b])
        assert sorted(seq[:, b].tolist()) == sorted(blocks.tolist())
        np.testing.assert_array_equal(lab[:, b], [np.sum(seq[:, b] == t) for t in seq[:, b]])


def test_uniform_law_draws_independent_uniform_tokens():
    tokens, labels = (np.asarray(a) for a in draw_sequences(jax.random.PRNGKey(2), HistogramTask(6, 4, law="uniform"),
                                                            60_000))
    np.testing.assert_allclose(np.bincount(tokens.ravel(), minlength=6) / tokens.size, 1 / 6, atol=0.005)
    np.testing.assert_allclose(np.bincount(labels.ravel(), minlength=5) / labels.size,
                               label_distribution(HistogramTask(6, 4, law="uniform")), atol=0.005)
