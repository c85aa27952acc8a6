"""Sandboxes of mechanisms in small transformers, each a phase diagram over data and architecture axes.

* `histogram`: the histogram (counting) task, its `(d, p)` phase diagrams and explicit constructions
  (`counting`), and the two solutions of one transformer (`two_solutions`);
* `markov`, `markov_reduced`: a one-layer transformer on first-order Markov chains (the bad critical point);
* `induction`: induction heads on in-context Markov chains;
* `memory`: associative memories and their capacity;
* `factual`: factual recall, the hallucination plateau and facts per parameter.

Each sandbox's entry point is exported here; its types and rules are exported by its own package
(`from phasejax.tasks import markov; markov.kernel_params(...)`).
"""

from phasejax.tasks import factual, histogram, induction, markov, markov_reduced, memory
from phasejax.tasks.factual import factual_experiment
from phasejax.tasks.histogram import HistogramTask, counting_phase_diagrams, two_solutions
from phasejax.tasks.induction import induction_sweep
from phasejax.tasks.markov import markov_sweep
from phasejax.tasks.memory import run_memory_study

__all__ = [
    "factual", "histogram", "induction", "markov", "markov_reduced", "memory",
    "HistogramTask", "counting_phase_diagrams", "two_solutions", "markov_sweep", "induction_sweep",
    "factual_experiment", "run_memory_study",
]
