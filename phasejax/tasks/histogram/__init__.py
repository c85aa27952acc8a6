"""The histogram (counting) task under one name: for a sequence of `L` tokens over `T`, the label of each
position is how often its token occurs.

* `data`: the task and its two data laws (the composition law of Behrens, Biggio & Zdeborova's experiments, the
  default, and the uniform law), labels, the exact label distribution (`HistogramTask`, `sample_sequences`,
  `label_distribution`, `majority_accuracy`);
* `model`: their counting model (token embeddings, dot or linear mixing, optional softmax, residual, ReLU
  head) as pure functions;
* `train`: their training protocol (`CountingProtocol`: online Adam on fresh sequences, epoch by epoch);
* `counting`, `sweep`: the six configurations, the `(d, p, seed)` grid, the resumable sweeps
  (`counting_phase_diagrams`; command `phasejax counting`) and the explicit constructions;
* `figures`: the maps in the paper's layout, the proposition's column and the loss curves;
* `two_solutions`: one transformer trained with semantic-only or positional-only attention, then unfrozen
  (`two_solutions`; command `phasejax histogram`).

>>> from phasejax.tasks.histogram import COUNTING_CONFIGS, HistogramTask, majority_accuracy
>>> HistogramTask(T=32, L=10).law, len(COUNTING_CONFIGS), majority_accuracy(HistogramTask(T=32, L=10))
('composition', 6, 0.2)
"""

from phasejax.tasks.histogram.counting import (
    COUNTING_CONFIGS,
    CountingConfig,
    CountingGrid,
    CountingRuns,
    construction_accuracy,
    inventory_counting_params,
    relation_counting_params,
)
from phasejax.tasks.histogram.data import LAWS, HistogramTask, label_distribution, majority_accuracy, sample_sequences
from phasejax.tasks.histogram.model import counting_logits, init_counting_params
from phasejax.tasks.histogram.sweep import GROUPINGS, SweepPlan, counting_phase_diagrams, counting_sweep
from phasejax.tasks.histogram.train import CountingProtocol
from phasejax.tasks.histogram.two_solutions import (
    TwoSolutions,
    TwoSolutionsConfig,
    two_solutions,
    two_solutions_memory_estimate,
)

__all__ = [
    "HistogramTask", "LAWS", "sample_sequences", "label_distribution", "majority_accuracy",
    "counting_logits", "init_counting_params", "CountingProtocol",
    "COUNTING_CONFIGS", "CountingConfig", "CountingGrid", "CountingRuns", "GROUPINGS", "SweepPlan",
    "counting_phase_diagrams", "counting_sweep",
    "construction_accuracy", "relation_counting_params", "inventory_counting_params",
    "TwoSolutions", "TwoSolutionsConfig", "two_solutions", "two_solutions_memory_estimate",
]
