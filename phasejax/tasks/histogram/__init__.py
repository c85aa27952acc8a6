"""The histogram (counting) task under one name: for a sequence of `L` tokens over `T`, the label of each
position is how often its token occurs.

* `data`: the task, sampling, labels and the masked accuracy (`HistogramTask`, `sample_sequences`);
* `counting`: the six attention configurations' accuracy over the embedding size `d` and the MLP width `p`
  (`counting_phase_diagrams`; command `phasejax counting`), and the explicit constructions;
* `two_solutions`: one transformer trained with semantic-only or positional-only attention, then unfrozen
  (`two_solutions`; command `phasejax histogram`).

>>> from phasejax.tasks.histogram import COUNTING_CONFIGS, HistogramTask
>>> HistogramTask(T=15, L=10).L, len(COUNTING_CONFIGS)
(10, 6)
"""

from phasejax.tasks.histogram.counting import (
    COUNTING_CONFIGS,
    CountingConfig,
    CountingGrid,
    CountingRuns,
    construction_accuracy,
    counting_phase_diagrams,
    counting_sweep,
    inventory_counting_params,
    relation_counting_params,
)
from phasejax.tasks.histogram.data import HistogramTask, sample_sequences
from phasejax.tasks.histogram.two_solutions import (
    TwoSolutions,
    TwoSolutionsConfig,
    two_solutions,
    two_solutions_memory_estimate,
)

__all__ = [
    "HistogramTask", "sample_sequences",
    "COUNTING_CONFIGS", "CountingConfig", "CountingGrid", "CountingRuns", "counting_phase_diagrams", "counting_sweep",
    "construction_accuracy", "relation_counting_params", "inventory_counting_params",
    "TwoSolutions", "TwoSolutionsConfig", "two_solutions", "two_solutions_memory_estimate",
]
