"""Finite-size experiments: data (spec section 1), Flax students, Optax training, vmapped sweeps."""

from phasejax.empirics.data import (
    TiedAttentionData,
    check_data,
    generate_data,
    overlaps_of,
    positional_directions,
    sample_count,
    sample_tokens,
    teacher_labels,
)
from phasejax.empirics.metrics import fresh_test_error, test_error_from_overlaps
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
from phasejax.empirics.sweep import RUN_COLUMNS, TrainingGrid, TrainingRuns, train_run, train_students, write_runs_csv
from phasejax.empirics.training import TrainConfig, TrainResult, minimize, student_risk, train_student

__all__ = [
    "INITS", "RUN_COLUMNS", "STUDENTS", "LinearPositional", "TiedAttention", "TiedAttentionData", "TrainConfig",
    "TrainResult", "TrainingGrid", "TrainingRuns", "UntiedAttention", "check_data", "fresh_test_error",
    "generate_data", "init_weights", "make_student", "minimize", "overlaps_of", "positional_directions",
    "positional_init", "random_init", "sample_count", "sample_tokens", "semantic_init", "student_risk",
    "teacher_labels", "test_error_from_overlaps", "train_run", "train_student", "train_students", "write_runs_csv",
]
