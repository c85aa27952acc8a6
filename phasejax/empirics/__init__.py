"""Finite-size experiments: data (theory notes, section 1), Flax students, Optax training, vmapped sweeps.

Everything here takes a `dtype` (float32 by default, the right choice on
accelerators; `jnp.float64` on request, computed inside
`phasejax.precision.dtype_scope`).
"""

from phasejax.empirics.data import (
    TiedAttentionData,
    cast_params,
    check_data,
    generate_data,
    overlaps_of,
    positional_directions,
    run_keys,
    sample_count,
    sample_tokens,
    teacher_labels,
    teacher_norm,
)
from phasejax.empirics.metrics import (
    MIN_ADJUSTED_SEEDS,
    SOLUTIONS,
    adjusted_seed_mean,
    classify_solution,
    fresh_test_error,
    gauss_hermite_rule,
    teacher_adjusted_mean,
    teacher_norms,
    test_error_from_overlaps,
)
from phasejax.empirics.students import (
    INITS,
    STUDENTS,
    LinearPositional,
    TiedAttention,
    UntiedAttention,
    init_weights,
    make_student,
    positional_init,
    random_init,
    semantic_init,
)
from phasejax.empirics.sweep import (
    RUN_COLUMNS,
    TrainingGrid,
    TrainingRuns,
    read_runs_csv,
    train_run,
    train_students,
    training_config,
    write_runs_csv,
)
from phasejax.empirics.training import (
    DEFAULT_GTOL,
    TrainConfig,
    TrainResult,
    minimize,
    student_risk,
    train_student,
)
from phasejax.empirics.gamp import (
    ONSAGER_FORMS,
    GAMPResult,
    GAMPSweep,
    basin_flips,
    empirical_risk,
    fixed_point_f,
    gamp,
    gamp_inputs,
    gamp_sweep,
    prox_consistency,
    stein_mean_jacobian,
)
from phasejax.empirics.gamp_analysis import (
    gap_statistics,
    plot_gamp_sweep,
    power_law_fit,
    run_verdicts,
    se_references,
    summarize_gamp_sweep,
)

__all__ = [
    "ONSAGER_FORMS", "GAMPResult", "GAMPSweep", "basin_flips", "empirical_risk", "fixed_point_f", "gamp",
    "gamp_inputs", "gamp_sweep", "prox_consistency", "stein_mean_jacobian",
    "gap_statistics", "plot_gamp_sweep", "power_law_fit", "run_verdicts", "se_references",
    "summarize_gamp_sweep",
    "DEFAULT_GTOL", "INITS", "MIN_ADJUSTED_SEEDS", "RUN_COLUMNS", "SOLUTIONS", "STUDENTS", "LinearPositional",
    "TiedAttention", "TiedAttentionData", "TrainConfig", "TrainResult", "TrainingGrid", "TrainingRuns",
    "UntiedAttention", "adjusted_seed_mean", "cast_params", "check_data", "classify_solution", "fresh_test_error",
    "gauss_hermite_rule", "generate_data", "init_weights", "make_student", "minimize", "overlaps_of",
    "positional_directions", "positional_init", "random_init", "read_runs_csv", "run_keys", "sample_count",
    "sample_tokens", "semantic_init", "student_risk", "teacher_adjusted_mean", "teacher_labels", "teacher_norm",
    "teacher_norms", "test_error_from_overlaps", "train_run", "train_student", "train_students", "training_config",
    "write_runs_csv",
]
