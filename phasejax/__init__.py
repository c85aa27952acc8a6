"""phasejax: phase diagrams of learning mechanisms in small attention models, in JAX.

The package root exposes the main entry points, their parameter and result types; each subpackage exports its
own entry points, types and rules, and keeps its helpers in its modules:
`phasejax.theory` (state evolution of tied attention), `phasejax.phase` (phase diagrams and
thresholds), `phasejax.empirics` (trained students, GAMP, two-replica experiments),
`phasejax.dynamics` (online-SGD dynamics), `phasejax.depth` (deep attention, Bayes-optimal),
`phasejax.extensions` and `phasejax.tasks` (sandboxes).

Importing phasejax changes no global JAX setting and does not import JAX itself until an entry point
is used. The theory computes in float64 inside a scoped `float64_scope()` (see `phasejax.precision`);
empirics and tasks take a `dtype` argument.

>>> import phasejax
>>> phasejax.Status.CONVERGED.name
'CONVERGED'
>>> sorted(set(phasejax.__all__) - set(dir(phasejax)))
[]
"""

from __future__ import annotations

import importlib

__version__ = "0.2.0.dev0"

# name -> module that defines it; loaded on first access (PEP 562), so `import phasejax` stays cheap.
_ENTRY_POINTS = {
    # precision and shared result types
    "float64_scope": "phasejax.precision",
    "Status": "phasejax.solvers",
    "RunOptions": "phasejax.sweep",
    # theory: the state evolution of tied low-rank attention
    "make_params": "phasejax.theory.params",
    "TiedAttentionParams": "phasejax.theory.params",
    "SEConfig": "phasejax.theory.newton",
    "MapApproximation": "phasejax.theory.se_map",
    "SEResult": "phasejax.theory.results",
    "solve_state_evolution": "phasejax.theory.solver",
    "solve_along_alpha": "phasejax.theory.solver",
    "solve_state_evolution_batch": "phasejax.theory.solver",
    "solve_state_evolution_grid": "phasejax.theory.solver",
    "fixed_point_census": "phasejax.theory.census",
    "replicon": "phasejax.theory.replicon",
    # phase diagrams
    "PhaseGrid": "phasejax.phase.diagram",
    "PhaseConfig": "phasejax.phase.diagram",
    "PhaseDiagram": "phasejax.phase.diagram",
    "phase_diagram": "phasejax.phase.diagram",
    # experiments
    "TrainingGrid": "phasejax.empirics.sweep",
    "TrainConfig": "phasejax.empirics.training",
    "TrainingRuns": "phasejax.empirics.sweep",
    "train_students": "phasejax.empirics.sweep",
    "gamp": "phasejax.empirics.gamp",
    "run_extension": "phasejax.extensions",
}

__all__ = ["__version__", *_ENTRY_POINTS]


def __getattr__(name: str):
    if name in _ENTRY_POINTS:
        value = getattr(importlib.import_module(_ENTRY_POINTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'phasejax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
