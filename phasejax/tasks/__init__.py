"""Algorithmic tasks: the histogram (counting) task, its (d, p) phase diagrams and explicit constructions."""

from phasejax.tasks.counting import (
    COUNTING_CONFIGS,
    CountingConfig,
    CountingGrid,
    counting_accuracy,
    counting_logits,
    counting_run,
    counting_sweep,
    init_counting_params,
    inventory_counting_params,
    relation_counting_params,
    train_counting,
)
from phasejax.tasks.histogram import (
    IGNORE,
    HistogramTask,
    all_sequences,
    histogram_labels,
    masked_accuracy,
    masked_cross_entropy,
    model_inputs,
    sample_batch,
    sample_sequences,
)

__all__ = [
    "COUNTING_CONFIGS", "IGNORE", "CountingConfig", "CountingGrid", "HistogramTask", "all_sequences",
    "counting_accuracy", "counting_logits", "counting_run", "counting_sweep", "histogram_labels",
    "init_counting_params", "inventory_counting_params", "masked_accuracy", "masked_cross_entropy", "model_inputs",
    "relation_counting_params", "sample_batch", "sample_sequences", "train_counting",
]
