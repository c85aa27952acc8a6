"""Dynamics of online SGD for the single-direction attention student: population loss in the overlaps
`(m, e)`, its high-dimensional SGD ODEs, finite-`d` online SGD and the dynamical phase diagram
(docs/dynamics.md).

The entry points, their parameter and result types and the rules are exported here; the helpers stay in
`phasejax.dynamics.population`, `.ode`, `.sgd` and `.diagram`.

>>> from phasejax.dynamics import MECHANISMS
>>> MECHANISMS
('none', 'positional', 'semantic', 'mixed')
"""

from phasejax.dynamics.diagram import ode_phase_diagram, population_minimum
from phasejax.dynamics.ode import MECHANISMS, ODEResult, classify_mechanism, sgd_ode_solve, sgd_ode_trajectory
from phasejax.dynamics.population import (
    LOSSES,
    DynamicsParams,
    PopulationTable,
    build_population_table,
    make_dynamics_params,
    population_loss,
)
from phasejax.dynamics.sgd import SGDRun, online_sgd

__all__ = [
    "make_dynamics_params", "DynamicsParams", "build_population_table", "PopulationTable", "population_loss",
    "sgd_ode_solve", "sgd_ode_trajectory", "ODEResult", "online_sgd", "SGDRun", "ode_phase_diagram",
    "population_minimum", "MECHANISMS", "LOSSES", "classify_mechanism",
]
