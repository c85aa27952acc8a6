"""Extension `value`: tied attention with a low-rank trainable value map, experiments only."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from phasejax.empirics import TiedAttention, TrainConfig, generate_data, semantic_init
from phasejax.empirics.data import run_keys
from phasejax.empirics.sweep import train_run
from phasejax.extensions.value import (
    MODELS,
    RUN_COLUMNS,
    TiedValueAttention,
    ValueGrid,
    experiment_thresholds,
    value_risk,
    value_run,
    value_sweep,
)
from phasejax.extensions._tables import ExtensionResult
from phasejax.theory import make_params

COMMITTED = os.path.join(os.path.dirname(__file__), "..", "..", "results", "extensions", "value")


def _data(d=24, n=30, omega=0.3, seed=0):
    params = make_params(1.0, omega)
    return params, generate_data(run_keys(seed)["data"], params, d, n)


def test_value_map_is_the_dense_low_rank_correction_and_gate_zero_is_the_tied_model():
    params, data = _data()
    d, k = data.d, 2
    ka, kb = jax.random.split(jax.random.PRNGKey(1))
    Q0 = semantic_init(data.Qstar, 1)
    Wa, Wb = jax.random.normal(ka, (d, k)), jax.random.normal(kb, (d, k))
    model = TiedValueAttention(Q0, Wa, Wb)
    xt = data.x + data.p
    dense = xt @ (jnp.eye(d) + Wa @ Wb.T / d)
    np.testing.assert_allclose(model.values(data.x, data.p), dense, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(model(data.x, data.p), model.attention_matrix(data.x, data.p) @ dense,
                               rtol=2e-5, atol=2e-5)
    tied = TiedAttention(Q0)
    np.testing.assert_allclose(model(data.x, data.p, 0.0), tied(data.x, data.p), rtol=1e-6, atol=1e-6)
    # gate 0: the value factors get exactly zero gradient (ridge included), Q the tied model's gradient
    graphdef, w = nnx.split(model, nnx.Param)
    mask = jnp.ones(data.n, bool)
    # (gradients compiled: op by op they are ~150 small XLA compilations each)
    g = jax.jit(jax.grad(lambda w: value_risk(graphdef, w, 0.0, data.x, data.y, data.p, mask, float(params.lam))))(w)
    assert float(jnp.max(jnp.abs(g["Wa"][...]))) == 0.0 and float(jnp.max(jnp.abs(g["Wb"][...]))) == 0.0
    tg, tw = nnx.split(tied, nnx.Param)
    from phasejax.empirics.training import student_risk

    g_tied = jax.jit(jax.grad(lambda w: student_risk(tg, w, data.x, data.y, data.p, mask, float(params.lam))))(tw)
    np.testing.assert_allclose(g["Q"][...], g_tied["Q"][...], rtol=1e-5, atol=1e-6)


def test_gate_zero_run_reaches_the_tied_students_fixed_point():
    """Reduction to the main model: the `tied` student of this module is `phasejax.empirics`' tied student
    (same data, same init, same optimiser): same overlaps and losses to float32 tolerance."""
    params = make_params(1.0, 0.3)
    d, alpha = 40, 1.5
    n = int(round(alpha * d))
    # jitted: one compilation each instead of an op-by-op run of the whole L-BFGS loop
    ours = jax.jit(lambda: value_run(0, alpha, 0.3, 1, 0, params=params, d=d, n_max=n, n_test=200))()
    ref = jax.jit(lambda: train_run(0, alpha, 0.3, 1, params=params, d=d, n_max=n, n_test=200))()
    assert bool(ours["converged"]) and bool(ref["converged"])
    for k in ("m", "theta", "q", "train_loss"):
        np.testing.assert_allclose(float(ours[k]), float(ref[k]), rtol=2e-3, atol=2e-4, err_msg=k)
    np.testing.assert_allclose(float(ours["test_error"]), float(ref["test_error"]), rtol=2e-3)
    assert float(ours["value_norm"]) == 0.0


def test_vmapped_sweep_equals_runs_one_by_one_and_write_load_round_trip(tmp_path):
    params = make_params(1.0, 0.0)
    grid = ValueGrid(alphas=(1.0,), omegas=(0.3,), seeds=(1,), inits=("semantic",), d=16)
    cfg = TrainConfig(max_steps=30)
    runs, config = value_sweep(grid, params, config=cfg, n_test=50)
    t = grid.tasks()
    one = jax.jit(lambda s, a, w, i, g, n: value_run(s, a, w, i, g, params=params, d=grid.d, n_max=grid.n_max,
                                                     config=cfg, n_test=50, n=n))
    for i in range(len(t["alpha"])):
        r = one(*(t[k][i] for k in ("seed", "alpha", "omega", "init", "model", "n")))
        # float32 reductions in another order: L-BFGS line searches amplify rounding to ~1e-4 relative
        for k in ("m", "theta", "q", "train_loss", "test_error", "value_norm"):
            np.testing.assert_allclose(runs[k][i], float(r[k]), rtol=2e-3, atol=1e-5, err_msg=k)
    assert set(np.asarray(runs["model"]).tolist()) == set(MODELS)
    assert np.all(runs["value_norm"][runs["model"] == "tied"] == 0)
    assert np.all(runs["value_norm"][runs["model"] == "value"] > 0)   # the value map did train
    ExtensionResult(theory=dict(alpha=[1.0], omega=[0.3]), runs=runs, thresholds=dict(alpha_c=[np.nan]), summary={},
                    documents=dict(value_runs=dict(config=config))).write(str(tmp_path))
    back = ExtensionResult.load(str(tmp_path), documents=("value_runs",))
    assert back.documents["value_runs"]["config"] == config
    assert list(back.runs) == list(RUN_COLUMNS)
    for k in RUN_COLUMNS:
        a, b = np.asarray(runs[k]), np.asarray(back.runs[k])
        if a.dtype.kind == "f":
            np.testing.assert_allclose(b, a, rtol=1e-12, equal_nan=True, err_msg=k)
        else:
            np.testing.assert_array_equal(b, a, err_msg=k)


@pytest.mark.parametrize("kwargs, name", [
    (dict(alphas=(1.0,), seeds=(-1,)), "seeds"), (dict(alphas=(1.0,), seeds=(1.5,)), "seeds"),
    (dict(alphas=(1.0,), omegas=(1.5,)), "omegas"), (dict(alphas=(-1.0,)), "alpha"),
    (dict(alphas=(1.0,), d=0), "d"), (dict(alphas=(1.0,), inits=("random",)), "inits"),
    (dict(alphas=(1.0,), models=("untied",)), "models"), (dict(alphas=()), "alphas"),
])
def test_bad_grids_raise_value_errors_naming_the_field(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ValueGrid(**kwargs)


def test_bad_sweep_arguments_raise_value_errors_naming_the_parameter():
    grid = ValueGrid(alphas=(1.0,), d=10)
    with pytest.raises(ValueError, match="value_rank"):
        value_sweep(grid, value_rank=0)
    with pytest.raises(ValueError, match="grid"):
        value_sweep("grid")
    with pytest.raises(ValueError, match="n_test"):
        value_sweep(grid, n_test=0)


def test_experiment_thresholds_on_constructed_data():
    """Paired runs whose semantic training loss beats the positional one from alpha = 1.75 on."""
    alphas = np.array([1.0, 1.5, 2.0, 2.5])
    rows = {k: [] for k in ("omega", "d", "model", "seed", "alpha", "init", "train_loss")}
    for s in range(3):
        for a in alphas:
            for init in (0, 1):
                for k, v in zip(rows, (0.3, 100, "value", s, a, ("positional", "semantic")[init],
                                       1.0 + (1.75 - a) * init)):
                    rows[k].append(v)
    th = experiment_thresholds({k: np.asarray(v) for k, v in rows.items()})
    assert th["model"] == [MODELS[1]] and abs(th["alpha_c"][0] - 1.75) < 1e-12 and th["n_seeds"] == [3]


@pytest.mark.skipif(not os.path.exists(os.path.join(COMMITTED, "runs.csv")), reason="no committed outputs")
def test_committed_outputs_load_and_the_tied_runs_agree_with_theory_at_the_largest_d():
    r = ExtensionResult.load(COMMITTED, required=dict(runs=RUN_COLUMNS)).runs
    d = r["d"].max()
    assert d >= 800
    for init in ("positional", "semantic"):
        for a in np.unique(r["alpha"]):
            sel = (r["d"] == d) & (r["model"] == "tied") & (r["init"] == init) & (r["alpha"] == a)
            theory = r["test_error_tied_theory"][sel]
            if not sel.any() or not np.isfinite(theory[0]):
                continue
            mean = r["test_error"][sel].mean()
            assert abs(mean - theory[0]) <= 0.1 * theory[0], (init, a, mean, theory[0])


@pytest.mark.slow
def test_tied_runs_approach_theory_as_d_grows():
    """Tied student (gate 0) vs tied SE: the seed-averaged overlap error shrinks from d = 100 to d = 400."""
    from phasejax.extensions._tables import diagram_tables
    from phasejax.extensions.value import attach_tied_theory, theory_reference

    th, _ = diagram_tables(theory_reference((1.8,), (0.3,)))
    errs = []
    for d in (100, 400):
        grid = ValueGrid(alphas=(1.8,), seeds=(0, 1, 2), inits=("semantic",), models=("tied",), d=d)
        runs = attach_tied_theory(value_sweep(grid)[0], th)
        errs.append(abs(np.mean(runs["test_error"]) - runs["test_error_tied_theory"][0]) /
                    runs["test_error_tied_theory"][0])
    assert errs[1] < errs[0] and errs[1] < 0.1, errs
