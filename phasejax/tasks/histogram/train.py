"""Training the counting model as the paper's code does: online Adam on fresh sequences, epoch by epoch.

`CountingProtocol` is the paper's protocol by default (Behrens, Biggio & Zdeborova's `memory_exp.py` as their
phase-diagram scripts call it): each of 500 epochs draws 10,000 fresh sequences, cut into batches of 32 (the
last batch of an epoch holds the remaining 16), one Adam step per batch (learning rate 1e-3, betas
(0.9, 0.98), eps 1e-9) on the cross-entropy over every scored position; after every epoch the accuracy on
3,000 held-out sequences of the same law, drawn once and shared by every run. Every field is a named option.

`train_epochs` is one run's training over a range of epochs (pure; `jax.vmap` it over runs): the data of epoch
`e` come from `fold_in(data_key, e)`, so a run cut into segments of epochs is the run trained in one go.
`group_trainer` compiles it for a group of runs of one configuration that share their (padded) shapes.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from phasejax.empirics.data import check_positive_int
from phasejax.tasks._common import Array
from phasejax.tasks.histogram.data import HistogramTask, parts_from_bits, shuffle_parts
from phasejax.tasks.histogram.model import INITS, init_counting_params, pad_params, slot_logits

__all__ = ["CountingProtocol", "batch_loss", "batch_words", "slot_batch", "slot_batch_from_bits", "heldout_accuracy",
           "heldout_set", "train_epochs", "group_trainer",
           "init_group", "run_keys"]

TEST_BLOCK = 500
"""Test sequences per block of the accuracy (the test set is scored block by block to bound memory)."""


def _positive_number(value, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)) \
            or not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {name}={value!r}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class CountingProtocol:
    """How every run is trained and scored (defaults: the paper's code).

    Attributes:
      epochs: epochs of online training; epoch_size: fresh sequences per epoch; batch_size: sequences per Adam
        step (an epoch takes `ceil(epoch_size / batch_size)` steps, its last batch the remainder).
      learning_rate, b1, b2, eps: Adam's (PyTorch's and optax's update rule: `eps` outside the square root).
      init: initial parameters, `"paper"` (PyTorch's defaults) or `"normal"` (`phasejax.tasks.histogram.model`).
      n_test: held-out sequences, drawn once from `test_seed` and shared by every run; eval_every: epochs between
        two accuracies (the last epoch is always scored).
    """

    epochs: int = 500
    epoch_size: int = 10_000
    batch_size: int = 32
    learning_rate: float = 1e-3
    b1: float = 0.9
    b2: float = 0.98
    eps: float = 1e-9
    init: str = "paper"
    n_test: int = 3000
    test_seed: int = 12
    eval_every: int = 1

    def __post_init__(self):
        for name in ("epochs", "epoch_size", "batch_size", "n_test", "eval_every"):
            object.__setattr__(self, name, check_positive_int(getattr(self, name), name))
        for name in ("learning_rate", "eps"):
            object.__setattr__(self, name, _positive_number(getattr(self, name), name))
        for name in ("b1", "b2"):
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)) or not 0 <= v < 1:
                raise ValueError(f"{name} must be a number in [0, 1), got {name}={v!r}")
            object.__setattr__(self, name, float(v))
        if self.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got init={self.init!r}")
        if isinstance(self.test_seed, (bool, np.bool_)) or not isinstance(self.test_seed, (int, np.integer)) \
                or self.test_seed < 0:
            raise ValueError(f"test_seed must be an integer >= 0, got test_seed={self.test_seed!r}")

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.epoch_size / self.batch_size)

    @property
    def last_batch(self) -> int:
        """Sequences in the last batch of an epoch."""
        return self.epoch_size - (self.steps_per_epoch - 1) * self.batch_size

    @property
    def steps(self) -> int:
        """Adam steps of a run."""
        return self.epochs * self.steps_per_epoch

    def replace(self, **changes) -> "CountingProtocol":
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def optimizer(self) -> optax.GradientTransformation:
        return optax.adam(self.learning_rate, b1=self.b1, b2=self.b2, eps=self.eps)


def run_keys(seed) -> tuple[Array, Array]:
    """`(init_key, data_key)` of the run of `seed` (a run's sequences depend on its seed only)."""
    k_init, k_data = jax.random.split(jax.random.PRNGKey(seed))
    return k_init, k_data


def batch_words(task: HistogramTask, mixing: str) -> int:
    """Random 32-bit words per sequence of `slot_batch`: `2 L` for the composition law's parts, `L` more for the
    shuffle (linear mixing), `L` for the uniform law."""
    if task.law == "uniform":
        return task.L
    return 2 * task.L + (task.L if mixing == "linear" else 0)


def slot_batch(key: Array, task: HistogramTask, n: int, mixing: str) -> dict:
    """`n` fresh sequences of `task` as the slots the model scores (`slot_batch_from_bits` of fresh words)."""
    return slot_batch_from_bits(jax.random.bits(key, (batch_words(task, mixing), n), jnp.uint32), task, mixing)


def slot_batch_from_bits(bits: Array, task: HistogramTask, mixing: str) -> dict:
    """Sequences of `task` from uniform 32-bit words `bits (batch_words, n)`, as the slots the model scores,
    slot-major (`slot_logits`' input):

    `tokens`, `labels (S, n)` int32 and `weights (S, n)` float32 (how many positions each slot stands for), and
    `counts (V, n)` (every token's count in the sequence, BOS included; dot-product mixing) or `positions
    (length, n)` (the sequence's tokens, BOS first; linear mixing).

    With dot-product mixing and no positional input, equal tokens of a sequence get equal outputs and the
    positions' order does not matter, so under the composition law a slot is a part (`S = L` slots, the
    unused ones of weight 0) weighted by its size: the loss and the accuracy are those over the positions. With
    linear mixing (or the uniform law) a slot is a position of the shuffled sequence (weight 1)."""
    L, T = task.L, task.T
    n = bits.shape[1]
    if task.law == "composition":
        sizes, tokens = parts_from_bits(bits[:2 * L], T)
        if mixing == "dot":
            labels, weights = sizes, sizes.astype(jnp.float32)
        else:
            tokens, labels = shuffle_parts(bits[2 * L:], sizes, tokens)
            weights = jnp.ones((L, n), jnp.float32)
    else:
        tokens = (bits % jnp.uint32(T)).astype(jnp.int32)
        labels = jnp.sum(tokens[:, None, :] == tokens[None, :, :], 1).astype(jnp.int32)
        weights = jnp.ones((L, n), jnp.float32)
    out = dict(tokens=tokens, labels=labels, weights=weights)
    if mixing == "dot":
        column = jnp.broadcast_to(jnp.arange(n), tokens.shape)
        counts = jnp.zeros((task.vocab, n), jnp.float32).at[tokens, column].add(weights)   # (V, n)
        out["counts"] = counts.at[T].set(1.0) if task.bos else counts
    else:
        out["positions"] = jnp.concatenate([jnp.full((1, n), T, jnp.int32), tokens]) if task.bos else tokens
    return out


def heldout_set(task: HistogramTask, protocol: CountingProtocol, mixing: str) -> dict:
    """The held-out sequences (`protocol.n_test`, from `protocol.test_seed`) as a slot batch: the same sequences
    for every configuration of `task.law` (the words of the linear mixing's batch, of which dot-product mixing
    uses the parts' rows)."""
    words = max(batch_words(task, "dot"), batch_words(task, "linear"))
    bits = jax.random.bits(jax.random.PRNGKey(protocol.test_seed), (words, protocol.n_test), jnp.uint32)
    return slot_batch_from_bits(bits[:batch_words(task, mixing)], task, mixing)


def _slot_ce(logits: Array, labels: Array) -> Array:
    """Cross-entropy of feature-major logits `(C, m)` at integer labels `(m,)`."""
    picked = jnp.sum(jnp.where(jnp.arange(logits.shape[0])[:, None] == labels[None], logits, 0.0), 0)
    return jax.nn.logsumexp(logits, axis=0) - picked


def batch_loss(params: dict, batch: dict, softmax: bool, d) -> Array:
    """Mean cross-entropy over the positions of a slot batch (`weights`: positions per slot)."""
    ce = _slot_ce(slot_logits(params, batch, softmax, d), batch["labels"].reshape(-1))
    w = batch["weights"].reshape(-1)
    return jnp.sum(ce * w) / jnp.sum(w)


def heldout_accuracy(params: dict, batch: dict, softmax: bool, d, block: int = TEST_BLOCK) -> Array:
    """Fraction of the positions of a slot batch whose argmax is the label, scored `block` sequences at a time
    (the last block padded with weight 0)."""
    n = batch["tokens"].shape[-1]
    block = min(block, n)
    pad = -n % block

    def blocks(x):
        x = jnp.concatenate([x, jnp.zeros(x.shape[:-1] + (pad,), x.dtype)], -1)
        return jnp.moveaxis(x.reshape(x.shape[:-1] + (-1, block)), -2, 0)

    def hits(b):
        pred = jnp.argmax(slot_logits(params, b, softmax, d), 0)
        return jnp.sum(jnp.where(pred == b["labels"].reshape(-1), b["weights"].reshape(-1), 0.0))

    total = jnp.sum(jax.lax.map(hits, jax.tree.map(blocks, batch)))
    return total / jnp.sum(batch["weights"])


def train_epochs(params: dict, opt_state, data_key: Array, d, epochs: Array, *, task: HistogramTask, mixing: str,
                 softmax: bool, protocol: CountingProtocol, test: dict):
    """One run trained over the epochs `epochs (E,)`: returns `(params, opt_state, out)`, `out["loss"] (E,)` the
    mean of each epoch's step losses (as the paper's log) and `out["accuracy"] (E,)` the held-out accuracy after
    each epoch (NaN where `eval_every` skips it). `d`: the run's embedding size (its parameters may be
    zero-padded wider). Epoch `e`'s sequences are drawn at once, from `fold_in(data_key, e)`."""
    opt = protocol.optimizer()
    B, spe = protocol.batch_size, protocol.steps_per_epoch
    valid = jnp.full((spe,), B, jnp.int32).at[-1].set(protocol.last_batch)
    last_epoch = protocol.epochs - 1

    words = batch_words(task, mixing)

    def step(carry, xs):
        params, opt_state = carry
        batch, n_valid = xs
        batch = dict(batch, weights=batch["weights"] * (jnp.arange(B) < n_valid)[None, :])
        loss, grad = jax.value_and_grad(batch_loss)(params, batch, softmax, d)
        updates, opt_state = opt.update(grad, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    def epoch_batches(e):
        """The epoch's batches at once, `(steps_per_epoch, ..., B)` per entry (one draw, one sampler pass)."""
        bits = jax.random.bits(jax.random.fold_in(data_key, e), (words, spe * B), jnp.uint32)
        batch = slot_batch_from_bits(bits, task, mixing)
        return jax.tree.map(lambda x: jnp.moveaxis(x.reshape(x.shape[0], spe, B), 1, 0), batch)

    def epoch(carry, e):
        (params, opt_state), losses = jax.lax.scan(step, carry, (epoch_batches(e), valid))
        scored = ((e + 1) % protocol.eval_every == 0) | (e == last_epoch)
        acc = jax.lax.cond(scored, lambda: heldout_accuracy(params, test, softmax, d).astype(jnp.float32),
                           lambda: jnp.float32(jnp.nan))
        return (params, opt_state), dict(loss=jnp.mean(losses), accuracy=acc)

    (params, opt_state), out = jax.lax.scan(epoch, (params, opt_state), epochs)
    return params, opt_state, out


def init_group(task: HistogramTask, mixing: str, cells, seeds, width: int, hidden: int, init: str) -> dict:
    """Initial parameters of a group of runs, stacked `(R, ...)` and zero-padded to `(width, hidden)`: run `r` is
    the cell `cells[r] = (d, p)` with seed `seeds[r]`, initialised at its own shapes from `run_keys(seed)[0]`."""
    out = []
    for (d, p), seed in zip(cells, seeds):
        params = init_counting_params(run_keys(int(seed))[0], task.vocab, task.length, task.n_classes, mixing,
                                      int(d), int(p), init)
        out.append(pad_params(params, width, hidden))
    return jax.tree.map(lambda *xs: jnp.stack(xs), *out)


def group_trainer(task: HistogramTask, mixing: str, softmax: bool, protocol: CountingProtocol):
    """`train_epochs` vmapped over a group's runs and jitted: `fn(params, opt_state, data_keys (R, 2), ds (R,),
    epochs (E,)) -> (params, opt_state, out)` (the held-out set is built inside, shared by the runs)."""
    test = heldout_set(task, protocol, mixing)

    def one(params, opt_state, key, d, epochs):
        return train_epochs(params, opt_state, key, d, epochs, task=task, mixing=mixing, softmax=softmax,
                            protocol=protocol, test=test)

    return jax.jit(jax.vmap(one, in_axes=(0, 0, 0, 0, None)))
