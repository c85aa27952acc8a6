"""Invalid concrete inputs at the public entry points raise a ValueError that names the parameter.

One table, every case small enough to fail before any compute. A case whose
error names the wrong thing, or that passes silently, is a bug to fix at the
entry point, not here.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax.empirics import (
    TiedAttention, TrainConfig, TrainingGrid, generate_data, sample_count, train_student, train_students,
)
from phasejax.empirics.data import positional_directions
from phasejax.phase import PhaseConfig, PhaseGrid
from phasejax.sweep import RunOptions
from phasejax.tasks.histogram import CountingProtocol, counting_sweep
from phasejax.tasks.histogram.counting import COUNTING_CONFIGS, CountingConfig, CountingGrid
from phasejax.tasks.histogram.data import HistogramTask
from phasejax.tasks.histogram.two_solutions import TwoSolutionsConfig, attention_mask, two_solutions
from phasejax.theory import MapApproximation, SEConfig, gauss_hermite, linear_baseline_error, make_params
from phasejax.theory.quadrature import quasi_monte_carlo
from phasejax.theory import solve_state_evolution_batch

PAPER = make_params(1.0, 0.3)
GRID = dict(alphas=(1.0,), omegas=(0.3,), d=20)
SMALL_COUNTING = (CountingGrid(ds=(2,), ps=(2,), seeds=(0,)), HistogramTask(4, 3), COUNTING_CONFIGS["dot"])


def _data():
    return generate_data(jax.random.PRNGKey(0), PAPER, 10, 5)


CASES = [
    # theory: parameters, quadrature, solver configuration
    ("make_params alpha < 0", lambda: make_params(-1.0, 0.3), "alpha"),
    ("make_params omega > 1", lambda: make_params(1.0, 1.5), "omega"),
    ("make_params lam < 0", lambda: make_params(1.0, 0.3, lam=-0.1), "lam"),
    ("make_params sigma = 0", lambda: make_params(1.0, 0.3, sigma=0.0), "sigma"),
    ("make_params A not square", lambda: make_params(1.0, 0.3, A=[[1.0, 2.0, 3.0]]), "A"),
    ("make_params C wrong shape", lambda: make_params(1.0, 0.3, C=[[1.0], [2.0], [3.0]]), "C"),
    ("make_params r = 0", lambda: make_params(1.0, 0.3, r=0), "r"),
    ("gauss_hermite dim = 0", lambda: gauss_hermite(0, 4), "dim"),
    ("gauss_hermite order = 0", lambda: gauss_hermite(2, 0), "order"),
    ("quasi_monte_carlo n_points = 0", lambda: quasi_monte_carlo(2, 0), "n_points"),
    ("SEConfig tol < 0", lambda: SEConfig(tol=-1.0), "tol"),
    ("MapApproximation prox_starts unknown", lambda: MapApproximation(prox_starts="banana"), "prox_starts"),
    ("solve_state_evolution_batch omega = 2", lambda: solve_state_evolution_batch(PAPER, [1.0], [2.0], "semantic"),
     "omega"),
    ("linear_baseline_error omega = 2", lambda: linear_baseline_error(PAPER.replace(omega=jnp.asarray(2.0))),
     "omega"),
    # phase diagrams and sweeps
    ("PhaseGrid empty alphas", lambda: PhaseGrid((), (0.3,)), "alphas"),
    ("PhaseGrid omega > 1", lambda: PhaseGrid((1.0,), (1.5,)), "omega"),
    ("PhaseGrid alphas not increasing", lambda: PhaseGrid((2.0, 1.0), (0.3,)), "alpha"),
    ("PhaseConfig no seeds", lambda: PhaseConfig(seeds={"positional": (), "semantic": ()}), "seeds"),
    ("RunOptions chunk_size = 0", lambda: RunOptions(chunk_size=0), "chunk_size"),
    ("RunOptions process_index >= count", lambda: RunOptions(process_index=2, process_count=2), "process_index"),
    ("RunOptions max_chunks < 0", lambda: RunOptions(max_chunks=-1), "max_chunks"),
    # empirics: data, grids, training configuration, sweeps
    ("TrainingGrid seeds = 1.5", lambda: TrainingGrid(seeds=(1.5,), **GRID), "seeds"),
    ("TrainingGrid seeds < 0", lambda: TrainingGrid(seeds=(-1,), **GRID), "seeds"),
    ("TrainingGrid unknown init", lambda: TrainingGrid(inits=("semantik",), **GRID), "inits"),
    ("TrainingGrid d = 2.5", lambda: TrainingGrid(alphas=(1.0,), omegas=(0.3,), d=2.5), "d"),
    ("TrainingGrid alpha d < 1", lambda: TrainingGrid(alphas=(0.01,), omegas=(0.3,), d=20), "alpha"),
    ("TrainingGrid omega > 1", lambda: TrainingGrid(alphas=(1.0,), omegas=(1.3,), d=20), "omega"),
    ("TrainConfig max_steps = 2.5", lambda: TrainConfig(max_steps=2.5), "max_steps"),
    ("TrainConfig unknown optimizer", lambda: TrainConfig("sgd-ish"), "optimizer"),
    ("TrainConfig learning_rate < 0", lambda: TrainConfig("gd", learning_rate=-0.1), "learning_rate"),
    ("TrainConfig gtol = nan", lambda: TrainConfig(gtol=float("nan")), "gtol"),
    ("TrainConfig memory_size = 0", lambda: TrainConfig(memory_size=0), "memory_size"),
    ("generate_data d = 0", lambda: generate_data(jax.random.PRNGKey(0), PAPER, 0, 5), "d"),
    ("generate_data n = 2.5", lambda: generate_data(jax.random.PRNGKey(0), PAPER, 10, 2.5), "n"),
    ("generate_data dtype int32", lambda: generate_data(jax.random.PRNGKey(0), PAPER, 10, 5, dtype=jnp.int32),
     "dtype"),
    ("positional_directions K > d", lambda: positional_directions(3, 4), "K"),
    ("sample_count alpha nan", lambda: sample_count(float("nan"), 10), "alpha"),
    ("train_student lam < 0", lambda: train_student(TiedAttention(jnp.ones((10, 1))), _data(), -1.0), "lam"),
    ("train_students unknown student", lambda: train_students(TrainingGrid(**GRID), student="cnn"), "student"),
    ("train_students n_test = 0", lambda: train_students(TrainingGrid(**GRID), n_test=0), "n_test"),
    ("train_students quadrature_order = 1", lambda: train_students(TrainingGrid(**GRID), quadrature_order=1),
     "quadrature_order"),
    ("train_students dtype float16", lambda: train_students(TrainingGrid(**GRID), dtype=jnp.float16), "dtype"),
    ("train_students options not RunOptions", lambda: train_students(TrainingGrid(**GRID), options={"run_dir": "x"}),
     "options"),
    # tasks: histogram, counting, two solutions
    ("HistogramTask T = 0", lambda: HistogramTask(T=0), "T"),
    ("HistogramTask L = 2.5", lambda: HistogramTask(L=2.5), "L"),
    ("CountingConfig unknown mixing", lambda: CountingConfig("mlp"), "mixing"),
    ("COUNTING_CONFIGS unknown name", lambda: COUNTING_CONFIGS["mlp"], "configuration"),
    ("CountingGrid ds = 0", lambda: CountingGrid(ds=(0, 2)), "ds"),
    ("CountingGrid seeds = 0.5", lambda: CountingGrid(seeds=(0.5,)), "seeds"),
    ("CountingProtocol epochs = 0", lambda: CountingProtocol(epochs=0), "epochs"),
    ("CountingProtocol batch_size = 2.5", lambda: CountingProtocol(batch_size=2.5), "batch_size"),
    ("CountingProtocol learning_rate = 0", lambda: CountingProtocol(learning_rate=0.0), "learning_rate"),
    ("CountingProtocol b2 = 1", lambda: CountingProtocol(b2=1.0), "b2"),
    ("counting_sweep grid not a CountingGrid", lambda: counting_sweep((2,), *SMALL_COUNTING[1:]), "grid"),
    ("attention_mask unknown kind", lambda: attention_mask("both", 8), "mask"),
    ("TwoSolutionsConfig d odd", lambda: TwoSolutionsConfig(d=7), "d"),
    ("TwoSolutionsConfig noise < 0", lambda: TwoSolutionsConfig(noise=-0.1), "noise"),
    ("two_solutions no seeds", lambda: two_solutions(TwoSolutionsConfig(), seeds=()), "seeds"),
]


def _case_name(case) -> str:
    return case.values[0] if hasattr(case, "marks") else case[0]   # a pytest.param or a plain tuple


@pytest.mark.parametrize("name,call,parameter", CASES, ids=[_case_name(c) for c in CASES])
def test_invalid_input_raises_a_value_error_naming_the_parameter(name, call, parameter):
    with pytest.raises(ValueError) as info:
        call()
    assert re.search(rf"(?<![A-Za-z_]){re.escape(parameter)}(?![A-Za-z_])", str(info.value)), str(info.value)


def test_the_table_is_large_enough():
    assert len(CASES) >= 30
    assert len({_case_name(c) for c in CASES}) == len(CASES)


def test_valid_neighbours_of_the_invalid_cases_are_accepted():
    """The checks are not over-eager: the nearest valid inputs construct fine."""
    assert TrainingGrid(seeds=(1.0, 2), **GRID).seeds == (1, 2)
    assert TrainingGrid(inits="semantic", **GRID).inits == ("semantic",)
    assert TrainConfig(max_steps=3.0).max_steps == 3
    assert HistogramTask(T=np.int64(4), L=3).T == 4
    assert CountingGrid(seeds=(0.0,)).seeds == (0,)
    assert COUNTING_CONFIGS["Linear+SOFTMAX"].softmax
