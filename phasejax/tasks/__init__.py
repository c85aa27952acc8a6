"""Sandboxes of mechanisms in small transformers, each a phase diagram over data and architecture axes.

* `counting`, `histogram`, `transformer`: the histogram (counting) task, its `(d, p)` phase diagrams, explicit
  constructions, and the two solutions of one transformer;
* `markov`, `markov_reduced`: a one-layer transformer on first-order Markov chains (the bad critical point);
* `induction`: induction heads on in-context Markov chains;
* `memory`: associative memories and their capacity;
* `factual`: factual recall, the hallucination plateau and facts per parameter.

The main entry points are re-exported here; every module's full API is under its own name
(`from phasejax.tasks import markov; markov.kernel_params(...)`).
"""

from phasejax.tasks.counting import (
    COUNTING_CONFIGS,
    CountingConfig,
    CountingGrid,
    CountingRuns,
    construction_accuracy,
    counting_config,
    counting_phase_diagrams,
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
from phasejax.tasks.transformer import (  # noqa: E402
    HistogramTransformer,
    TwoSolutions,
    TwoSolutionsConfig,
    attention_mask,
    make_transformer,
    two_solutions,
)
from phasejax.tasks import factual, induction, markov, markov_reduced, memory  # noqa: E402
from phasejax.tasks.factual import FactualGrid, FactualTask, FactualTraining, factual_sweep
from phasejax.tasks.induction import InductionGrid, InductionModel, InductionTraining, induction_sweep
from phasejax.tasks.markov import MarkovGrid, MarkovSweep, MarkovTraining, markov_sweep
from phasejax.tasks.memory import CapacityGrid, ZipfGrid, capacity_sweep, zipf_sweep

__all__ = [
    "factual", "induction", "markov", "markov_reduced", "memory",
    "FactualGrid", "FactualTask", "FactualTraining", "factual_sweep",
    "InductionGrid", "InductionModel", "InductionTraining", "induction_sweep",
    "MarkovGrid", "MarkovSweep", "MarkovTraining", "markov_sweep",
    "CapacityGrid", "ZipfGrid", "capacity_sweep", "zipf_sweep",
    "COUNTING_CONFIGS", "IGNORE", "CountingConfig", "CountingGrid", "CountingRuns", "HistogramTask",
    "construction_accuracy", "counting_config", "counting_phase_diagrams", "HistogramTransformer", "TwoSolutions",
    "TwoSolutionsConfig", "attention_mask", "make_transformer", "two_solutions", "all_sequences",
    "counting_accuracy", "counting_logits", "counting_run", "counting_sweep", "histogram_labels",
    "init_counting_params", "inventory_counting_params", "masked_accuracy", "masked_cross_entropy", "model_inputs",
    "relation_counting_params", "sample_batch", "sample_sequences", "train_counting",
]
