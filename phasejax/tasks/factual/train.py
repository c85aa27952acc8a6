"""Losses, online training and recall of one factual-recall model."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from phasejax.solvers import Status
from phasejax.tasks._common import F32, Array, train_online
from phasejax.tasks.factual.data import FactualTask, check_int, factual_sequences, sample_facts, sample_factual_batch
from phasejax.tasks.factual.model import factual_embeddings, factual_logits, init_factual_params


# ----------------------------------------------------------------------------
# Losses, training, recall
# ----------------------------------------------------------------------------


def factual_metrics(logits: Array, labels: Array, relations: Array, n_attributes: int) -> dict[str, Array]:
    """Mean cross-entropy `loss`, `accuracy` (argmax = `a*`) and `mass_A_r` (probability on `A_r`) of a batch."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    loss = -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))
    accuracy = jnp.mean((jnp.argmax(logits, -1) == labels).astype(logits.dtype))
    in_block = (jnp.arange(logits.shape[-1])[None, :] // n_attributes) == relations[:, None]
    mass = jnp.mean(jnp.sum(jnp.where(in_block, jnp.exp(logp), 0.0), axis=-1))
    return dict(loss=loss, accuracy=accuracy, mass_A_r=mass)


OPTIMIZERS = ("adam", "sgd")


@dataclasses.dataclass(frozen=True)
class FactualTraining:
    """How every run is trained and measured (online: a fresh batch per step).

    Attributes:
      steps, batch_size, learning_rate: online optimisation.
      optimizer: `"adam"` or `"sgd"` (plain gradient descent on fresh batches).
      init_scale: multiplies the standard initialisation of every trainable weight.
      d_head: head dimension `d_h`.
      n_contexts: random contexts (order and noise) per fact for the recall measurement.
      curve_points: log-spaced windows of steps over which the per-step batch metrics are averaged.
      loss_tol: a run whose last-window loss is below this has status `converged`, else
        `max_iterations` (`diverged` if any loss is not finite).
    """

    steps: int = 3000
    batch_size: int = 128
    learning_rate: float = 3e-3
    optimizer: str = "adam"
    init_scale: float = 1.0
    d_head: int = 16
    n_contexts: int = 4
    curve_points: int = 60
    loss_tol: float = 1e-2

    def __post_init__(self):
        for name in ("steps", "batch_size", "d_head", "n_contexts", "curve_points"):
            check_int(name, getattr(self, name), 1)
        for name in ("learning_rate", "init_scale", "loss_tol"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float, np.floating)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {name}={v!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got optimizer={self.optimizer!r}")

    def optax_optimizer(self) -> optax.GradientTransformation:
        return optax.adam(self.learning_rate) if self.optimizer == "adam" else optax.sgd(self.learning_rate)

    def replace(self, **changes) -> "FactualTraining":
        return dataclasses.replace(self, **changes)


def curve_windows(steps: int, curve_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Log-spaced windows `[lo, hi)` of the step index `t < steps` (at most `curve_points`; first: single steps)."""
    edges = np.unique(np.round(np.geomspace(1, steps, curve_points + 1)).astype(np.int64))
    edges = np.unique(np.concatenate([[0], edges, [steps]]))
    return edges[:-1], edges[1:]


def curve_steps(steps: int, curve_points: int) -> np.ndarray:
    """Step of every curve point: the mean `t` (updates already made) over its window."""
    lo, hi = curve_windows(steps, curve_points)
    return (lo + hi - 1) / 2.0


def window_means(values: Array, lo: np.ndarray, hi: np.ndarray) -> Array:
    """Means of `values (steps,)` over the windows `[lo, hi)` (static), shape `(len(lo),)`."""
    c = jnp.concatenate([jnp.zeros((1,), values.dtype), jnp.cumsum(values)])
    return (c[hi] - c[lo]) / jnp.asarray(hi - lo, values.dtype)


def train_factual(params0: dict, embeddings: dict, key: Array, task: FactualTask, facts: Array, d, m, n_heads, *,
                  n_subjects, training: FactualTraining) -> tuple[dict, dict[str, Array]]:
    """Online training (`lax.scan`, a fresh batch per step). Returns `(params, metrics)`.

    `metrics[k]` has shape `(steps,)` for `k` in `loss, accuracy, mass_A_r`: the
    batch metrics of the parameters *before* step `t`'s update, on the fresh
    batch of step `t` (an unbiased estimate of the population value). Pure;
    vmap over seeds and the padded sizes.
    """
    opt = training.optax_optimizer()

    def loss_fn(params, batch):
        logits = factual_logits(params, embeddings, batch.tokens, d, m, n_heads)
        mets = factual_metrics(logits, batch.labels, batch.relations, task.n_attributes)
        return mets["loss"], mets

    params, (_, metrics) = train_online(
        loss_fn, params0, key, lambda k: (sample_factual_batch(k, task, facts, training.batch_size, n_subjects),),
        steps=training.steps, optimizer=opt, has_aux=True)
    return params, metrics


def recall_accuracy(params: dict, embeddings: dict, key: Array, task: FactualTask, facts: Array, d, m, n_heads, *,
                    n_subjects, n_contexts: int) -> Array:
    """Fraction of (fact, context) pairs recalled: each `(s, r)`, `s < n_subjects`, in `n_contexts` random contexts.

    A context is a random order and random noise; recall means `argmax_a logits = a*(s, r)`.
    """
    s = jnp.repeat(jnp.arange(task.n_subjects, dtype=jnp.int32), task.n_relations)
    r = jnp.tile(jnp.arange(task.n_relations, dtype=jnp.int32), task.n_subjects)
    used = (s < n_subjects).astype(embeddings["E"].dtype)

    def one_context(k):
        tokens = factual_sequences(k, task, s, r)
        hit = jnp.argmax(factual_logits(params, embeddings, tokens, d, m, n_heads), -1) == facts[s, r]
        return jnp.sum(hit * used)

    hits = jax.lax.map(one_context, jax.random.split(key, n_contexts))
    return jnp.sum(hits) / (jnp.sum(used) * n_contexts)


def factual_run(seed, n_subjects, d, m, n_heads, *, task: FactualTask, training: FactualTraining, d_max: int,
                m_max: int, heads_max: int, dtype=F32) -> dict[str, Array]:
    """One run, pure in `(seed, n_subjects, d, m, n_heads)` (vmap over them): draw, train, measure.

    The seed draws the fact table, the frozen embeddings, the initialisation,
    the training batches and the recall contexts. Returns `accuracy` (recall
    over all facts and `n_contexts` contexts), `facts_recalled` (`= S R accuracy`),
    `final_loss` (mean batch loss over the last window), `status` (`Status` code),
    and `curve_loss`, `curve_accuracy`, `curve_mass_A_r` (`(P,)` window means,
    steps `curve_steps(training.steps, training.curve_points)`).
    """
    k_facts, k_emb, k_init, k_train, k_test = jax.random.split(jax.random.PRNGKey(seed), 5)
    facts = sample_facts(k_facts, task)
    embeddings = factual_embeddings(k_emb, task, d, d_max, dtype)
    params0 = init_factual_params(k_init, d, m, n_heads, d_max=d_max, m_max=m_max, heads_max=heads_max,
                                  d_head=training.d_head, init_scale=training.init_scale, dtype=dtype)
    params, metrics = train_factual(params0, embeddings, k_train, task, facts, d, m, n_heads, n_subjects=n_subjects,
                                    training=training)
    accuracy = recall_accuracy(params, embeddings, k_test, task, facts, d, m, n_heads, n_subjects=n_subjects,
                               n_contexts=training.n_contexts)
    lo, hi = curve_windows(training.steps, training.curve_points)
    curves = {f"curve_{k}": window_means(v, lo, hi) for k, v in metrics.items()}
    final_loss = curves["curve_loss"][-1]
    finite = jnp.all(jnp.isfinite(metrics["loss"]))
    status = jnp.where(~finite, Status.DIVERGED,
                       jnp.where(final_loss <= training.loss_tol, Status.CONVERGED, Status.MAX_ITERATIONS))
    n_facts = jnp.asarray(n_subjects, dtype) * task.n_relations
    return dict(accuracy=accuracy, facts_recalled=accuracy * n_facts, final_loss=final_loss,
                status=status.astype(jnp.int32), **curves)
