"""Finite-size experiments: data (theory notes, section 1), Flax students, Optax training, vmapped sweeps, GAMP.

Everything here takes a `dtype` (float32 by default, the right choice on accelerators; `jnp.float64` on
request, computed inside `phasejax.precision.dtype_scope`). The entry points, their parameter and result types
and the rules are exported here; the helpers stay in their modules (`phasejax.empirics.data`, `.students`,
`.training`, `.metrics`, `.sweep`, `.gamp`, `.gamp_analysis`, `.replicas`, `.bracket`).

>>> from phasejax.empirics import TrainConfig, TrainingGrid
>>> TrainingGrid(alphas=(1.0, 2.0), omegas=(0.3,), seeds=(0,), d=50).n_max
100
"""

from phasejax.empirics.bracket import BracketGrid, bracket_sweep
from phasejax.empirics.bracket_analysis import bracket_report
from phasejax.empirics.data import TiedAttentionData, cast_params, generate_data, sample_count
from phasejax.empirics.gamp import GAMPResult, GAMPSweep, gamp, gamp_sweep
from phasejax.empirics.gamp_analysis import se_references, summarize_gamp_sweep
from phasejax.empirics.metrics import SOLUTIONS, classify_solution
from phasejax.empirics.students import (
    INITS,
    STUDENTS,
    LinearPositional,
    TiedAttention,
    UntiedAttention,
    make_student,
    semantic_init,
)
from phasejax.empirics.sweep import RUN_COLUMNS, TrainingGrid, TrainingRuns, train_students
from phasejax.empirics.training import TrainConfig, TrainResult, minimize, train_student

__all__ = [
    # training students: entry points, parameters, results
    "train_students", "train_student", "minimize", "TrainingGrid", "TrainConfig", "TrainingRuns", "TrainResult",
    # data and students
    "generate_data", "TiedAttentionData", "sample_count", "cast_params", "make_student", "TiedAttention",
    "UntiedAttention", "LinearPositional", "semantic_init",
    # rules
    "INITS", "STUDENTS", "SOLUTIONS", "RUN_COLUMNS", "classify_solution",
    # GAMP
    "gamp", "gamp_sweep", "GAMPResult", "GAMPSweep", "se_references", "summarize_gamp_sweep",
    # the empirical bracket of alpha_c
    "bracket_sweep", "BracketGrid", "bracket_report",
]
