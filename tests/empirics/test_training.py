"""Experiments: students, Optax training, vmapped sweeps, precision, results round trip, against the theory."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from phasejax.empirics import (
    LinearPositional, TiedAttention, TrainConfig, TrainingGrid, TrainingRuns, UntiedAttention,
    generate_data, minimize, semantic_init, train_student, train_students,
)
from phasejax.empirics import INITS
from phasejax.empirics.data import overlaps_of, run_keys
from phasejax.empirics.metrics import test_error_from_overlaps
from phasejax.empirics.sweep import train_run
from phasejax.empirics.training import student_risk
from phasejax.empirics.data import sample_tokens, teacher_labels
from phasejax.empirics.sweep import make_run_fn
from phasejax.precision import float64_scope, x64_enabled
from phasejax.solvers import Status
from phasejax.sweep import RunOptions
from phasejax.theory import gauss_hermite, make_params
from phasejax.theory.baselines import linear_baseline_error, linear_baseline_weights
from phasejax.theory.fields import Overlaps
from phasejax.theory.gram import gram_inputs, gram_risk
from phasejax.theory.quadrature import gauss_hermite
from phasejax.theory.updates import test_error

from _compare import RTOL_FLOAT32

PAPER = make_params(2.0, 0.3)
# theory notes section 4 check values (alpha = 2, omega = 0.3), per-token convention
SPEC = {"positional": dict(q=0.0500, m=0.2586, theta=0.0), "semantic": dict(q=0.1142, m=0.0, theta=0.1586)}
QUIET = dict(progress=False)


# --------------------------------------------------------------------------- students


def test_tied_student_matches_the_formula_of_section_1():
    with float64_scope():
        data = generate_data(jax.random.PRNGKey(0), PAPER, 20, 3, dtype=jnp.float64)
        Q = jax.random.normal(jax.random.PRNGKey(1), (20, 1), jnp.float64)
        out = TiedAttention(Q)(data.x, data.p)
    chex.assert_shape(out, (3, 2, 20))
    xt = np.asarray(data.x[1] + data.p)
    h = xt @ np.asarray(Q)[:, 0] / np.sqrt(20)
    scores = np.outer(h, h)
    S = np.exp(scores - scores.max(1, keepdims=True))
    S /= S.sum(1, keepdims=True)
    np.testing.assert_allclose(out[1], S @ xt, rtol=1e-12, atol=1e-12)


def test_untied_with_equal_weights_and_identity_value_is_the_tied_student():
    with float64_scope():
        data = generate_data(jax.random.PRNGKey(0), PAPER, 30, 4, dtype=jnp.float64)
        Q = jax.random.normal(jax.random.PRNGKey(1), (30, 1), jnp.float64)
        tied = TiedAttention(Q)(data.x, data.p)
        np.testing.assert_allclose(UntiedAttention(Q, Q)(data.x, data.p), tied, atol=1e-12)
        # the low-rank value map starts at the identity (W_b = 0)
        with_value = UntiedAttention(Q, Q, value_rank=2, rngs=nnx.Rngs(0))
        np.testing.assert_allclose(with_value(data.x, data.p), tied, atol=1e-12)
    assert with_value.Wa[...].shape == (30, 2)


def test_gram_risk_equals_the_student_risk():
    with float64_scope():
        data = generate_data(jax.random.PRNGKey(2), PAPER, 40, 60, dtype=jnp.float64)
        Q = jax.random.normal(jax.random.PRNGKey(3), (40, 1), jnp.float64)
        graphdef, weights = nnx.split(TiedAttention(Q), nnx.Param)
        mask = jnp.arange(60) < 45
        direct = student_risk(graphdef, weights, data.x, data.y, data.p, mask, PAPER.lam)
        gram = gram_risk(Q, gram_inputs(data.x, data.y, data.p), PAPER, mask)
    np.testing.assert_allclose(gram, direct, rtol=1e-12)


# --------------------------------------------------------------------------- data and precision


def test_data_is_float32_by_default_and_float64_is_the_same_draw():
    x32 = generate_data(jax.random.PRNGKey(5), PAPER, 30, 7)
    assert x32.x.dtype == jnp.float32 and x32.Qstar.dtype == jnp.float32 and x32.u.dtype == jnp.float32
    with float64_scope():
        x64 = generate_data(jax.random.PRNGKey(5), PAPER, 30, 7, dtype=jnp.float64)
        assert x64.x.dtype == jnp.float64
        # random numbers are drawn in float32 and cast: the float64 data set is the float32 one
        np.testing.assert_array_equal(np.asarray(x64.Qstar), np.asarray(x32.Qstar, np.float64))
        np.testing.assert_allclose(np.asarray(x64.y), np.asarray(x32.y, np.float64), rtol=1e-5, atol=1e-6)
    assert not x64_enabled()   # the float64 scope did not leak


def test_data_prefix_is_independent_of_the_sample_count():
    small = generate_data(jax.random.PRNGKey(3), PAPER, 25, 4)
    big = generate_data(jax.random.PRNGKey(3), PAPER, 25, 11)
    # the same draws, computed in programs of another shape: float32, a few units in the last place
    np.testing.assert_allclose(big.x[:4], small.x, rtol=RTOL_FLOAT32)
    np.testing.assert_allclose(big.Qstar, small.Qstar, rtol=RTOL_FLOAT32)


# --------------------------------------------------------------------------- metrics


def test_overlap_test_error_reduces_to_the_theory_and_works_in_its_inputs_dtype():
    with float64_scope():
        quad = gauss_hermite(4, 8)
        ov = Overlaps(q0=jnp.array([[0.4]]), m=jnp.array([[0.1]]), V0=jnp.eye(1), theta0=jnp.array([[0.5]]))
        theory = test_error(ov, PAPER, quad)
        ours = test_error_from_overlaps(ov.q0, ov.m, ov.theta0, PAPER, quad, rho0=jnp.eye(1))
        np.testing.assert_allclose(ours, theory, rtol=1e-12)
    f32 = [jnp.asarray(v, jnp.float32) for v in ([[0.4]], [[0.1]], [[0.5]])]
    traced = jax.jit(lambda q, m, t: test_error_from_overlaps(q, m, t, PAPER, quad))(*f32)   # float32 trace
    assert traced.dtype == jnp.float32
    np.testing.assert_allclose(float(traced), float(theory), rtol=1e-5)


def _mean_and_standard_error(per_sample):
    per_sample = np.asarray(per_sample, np.float64)
    return per_sample.mean(), per_sample.std(ddof=1) / np.sqrt(per_sample.size)


def test_overlap_test_error_matches_fresh_samples():
    """At a fixed student the fresh-sample error converges to the overlap formula (exact fields).

    Tolerance: 4 Monte Carlo standard errors of the fresh-sample mean (about 3% at n = 3000) plus an `O(1/d)`
    allowance of `2/d` relative for the finite-`d` concentration of `x x^T / d`.
    """
    d = 400
    data = generate_data(jax.random.PRNGKey(4), PAPER, d, 3000)
    Q = 0.4 * data.Qstar + 0.3 * np.sqrt(d) * data.u.T + 0.2 * jax.random.normal(jax.random.PRNGKey(5), (d, 1))
    fresh, sem = _mean_and_standard_error(jnp.mean((data.y - TiedAttention(Q)(data.x, data.p)) ** 2, axis=(1, 2)))
    ov = overlaps_of(Q, data)
    pred = float(test_error_from_overlaps(ov["q0"], ov["m"], ov["theta0"], PAPER, gauss_hermite(4, 12),
                                          rho0=data.Qstar.T @ data.Qstar / d))
    assert abs(fresh - pred) <= 4 * sem + 2 * pred / d, (fresh, sem, pred)


# --------------------------------------------------------------------------- training


@pytest.mark.slow
def test_gradient_descent_adam_and_lbfgs_reach_the_same_minimum():
    params = make_params(1.5, 0.3)
    with float64_scope():
        data = generate_data(jax.random.PRNGKey(6), params, 100, 150, dtype=jnp.float64)
        Q0 = semantic_init(data.Qstar, 1)
    results = {}
    for opt in ("lbfgs", "gd", "adam"):
        model, res = train_student(TiedAttention(Q0), data, params.lam, TrainConfig(opt, max_steps=20000, gtol=1e-8))
        assert int(res.status) == Status.CONVERGED, (opt, res)
        results[opt] = (float(res.loss), np.asarray(model.Q[...]), int(res.steps))
    for opt in ("gd", "adam"):
        np.testing.assert_allclose(results[opt][0], results["lbfgs"][0], rtol=1e-10)
        # weights agree up to ||grad|| / (smallest Hessian eigenvalue ~ lambda): loose along flat directions
        np.testing.assert_allclose(results[opt][1], results["lbfgs"][1], atol=1e-4)
    assert results["lbfgs"][2] < results["gd"][2]


def test_minimize_reports_divergence_and_the_step_cap():
    res = minimize(lambda w: jnp.sum(w**2), jnp.ones(3), TrainConfig("gd", learning_rate=5.0, max_steps=500))
    assert int(res.status) == Status.DIVERGED and not bool(res.converged)
    capped = minimize(lambda w: jnp.sum(w**2), jnp.ones(3), TrainConfig("gd", learning_rate=0.01, max_steps=3))
    assert int(capped.status) == Status.MAX_ITERATIONS and int(capped.steps) == 3


def test_minimize_works_under_jit_and_vmap_in_float32():
    loss = lambda w, a: jnp.sum((w - a) ** 2)  # noqa: E731
    targets = jnp.arange(4.0)[:, None] * jnp.ones((4, 3))
    solve = jax.jit(jax.vmap(lambda a: minimize(lambda w: loss(w, a), jnp.zeros(3), TrainConfig("lbfgs"))))
    res = solve(targets)
    chex.assert_shape(res.params, (4, 3))
    assert res.params.dtype == jnp.float32
    np.testing.assert_allclose(res.params, targets, atol=1e-6)
    assert bool(jnp.all(res.converged))


def test_linear_baseline_trained_error_matches_section_6():
    """Trained in float64: a check of the float64 theory of section 6, not of float32 training."""
    d, n = 100, 3000
    with float64_scope():
        data = generate_data(jax.random.PRNGKey(7), PAPER, d, n, dtype=jnp.float64)
        # teacher on the sphere ||Q*||^2 = d: the d -> inf teacher norm, removing its O(d^-1/2) fluctuation
        Qstar = data.Qstar * np.sqrt(d) / jnp.linalg.norm(data.Qstar)
        data = data.replace(Qstar=Qstar, y=teacher_labels(data.x, Qstar, PAPER))
        model, res = train_student(LinearPositional(jnp.zeros((2, 2), jnp.float64)), data, PAPER.lam)
        assert bool(res.converged), res
        x = sample_tokens(jax.random.PRNGKey(8), PAPER.sigma, d, 2000, jnp.float64)   # fresh samples, same teacher
        per_sample = jnp.mean((teacher_labels(x, data.Qstar, PAPER) - model(x, data.p)) ** 2, axis=(1, 2))
    with float64_scope():
        quad = gauss_hermite(2, 20)
    np.testing.assert_allclose(model.B[...], linear_baseline_weights(PAPER, quad), atol=0.015)
    fresh, sem = _mean_and_standard_error(per_sample)
    # 4 Monte Carlo standard errors, plus the excess error of weights fitted on n samples (O(1/n) relative)
    theory = float(linear_baseline_error(PAPER, quad))
    assert abs(fresh - theory) <= 4 * sem + 10 * theory / n, (fresh, sem, theory)


# --------------------------------------------------------------------------- sweeps


GRID = TrainingGrid(alphas=(0.5, 1.5), omegas=(0.2, 0.6), seeds=(0, 3), inits=("positional", "semantic", "random"),
                    d=30)


@pytest.fixture(scope="module")
def grid_runs():
    """The float64 sweep of GRID (one compiled sweep for the two tests below)."""
    return train_students(GRID, PAPER, dtype=jnp.float64, quadrature_order=4,
                          options=RunOptions(chunk_size=8, **QUIET)).runs


# resuming a killed sweep compiles it a second time; the generic resume is tested in tests/test_sweep.py
@pytest.mark.parametrize("killed", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_vmapped_sweep_equals_runs_one_by_one_and_resumes(grid_runs, tmp_path, killed):
    with float64_scope():
        one = jax.jit(make_run_fn(GRID, PAPER, dtype=jnp.float64, quadrature_order=4))
        tasks = GRID.tasks()
        rows = [one(tasks["seed"][k], tasks["alpha"][k], tasks["omega"][k], tasks["init"][k], n=tasks["n"][k])
                for k in range(len(tasks["alpha"]))]
    loop = {key: np.array([r[key] for r in rows]) for key in rows[0]}
    swept = grid_runs
    if killed:
        options = RunOptions(run_dir=str(tmp_path), chunk_size=8, **QUIET)
        kw = dict(dtype=jnp.float64, quadrature_order=4)
        assert train_students(GRID, PAPER, options=options.replace(max_chunks=2), **kw) is None
        swept = train_students(GRID, PAPER, options=options, **kw).runs
    for key in loop:
        np.testing.assert_allclose(swept[key], loop[key], rtol=1e-8, atol=1e-10, err_msg=key)
    assert np.all(swept["converged"])
    assert not x64_enabled()


def test_the_sweep_trains_on_generate_data_of_the_run_key(grid_runs):
    """Same seed, same data: a hand-made run on `generate_data(run_keys(seed)["data"], ...)` is the sweep's run."""
    tasks = GRID.tasks()
    i = int(np.flatnonzero((tasks["seed"] == 3) & (tasks["alpha"] == 1.5) & (tasks["omega"] == 0.6)
                           & (tasks["init"] == GRID.inits.index("semantic")))[0])
    params, d, n = make_params(1.5, 0.6), GRID.d, tasks["n"][i]
    with float64_scope():
        data = generate_data(run_keys(3)["data"], params, d, n, dtype=jnp.float64)
        model, res = train_student(TiedAttention(semantic_init(data.Qstar, 1)), data, params.lam)
        ov = overlaps_of(model.Q[...], data)
    np.testing.assert_allclose(grid_runs["theta"][i], 0.25 * float(ov["theta0"][0, 0]), rtol=1e-6)
    np.testing.assert_allclose(grid_runs["m"][i], float(ov["m"][0, 0]), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(grid_runs["train_loss"][i], float(res.loss) / d, rtol=1e-8)


@pytest.fixture(scope="module")
def precision_runs():
    """A float32 and a float64 sweep of one small grid (the float32 one is also the write/load test's)."""
    grid = TrainingGrid(alphas=(0.5, 2.0), omegas=(0.3,), seeds=(0, 1), d=60)
    # the converged runs take at most ~40 L-BFGS steps; a stalled float32 run sits where it stalled, so a cap of
    # 300 (not the default 5000, which the vmapped sweep would wait for) changes no result
    config = TrainConfig(max_steps=300)
    return {dt: train_students(grid, PAPER, dtype=dt, quadrature_order=4, config=config, options=RunOptions(**QUIET))
            for dt in (jnp.float32, jnp.float64)}


def test_float32_sweep_reaches_the_float64_minimisers(precision_runs):
    runs = {dt: r.runs for dt, r in precision_runs.items()}
    assert runs[jnp.float64]["converged"].all()
    # float32 L-BFGS can stall just above the 1e-6 RMS-gradient tolerance (its line search runs out of
    # resolution); such a run must still sit at the minimiser: gradient within 10x the tolerance
    f32 = runs[jnp.float32]
    assert np.all(f32["converged"] | (f32["grad_norm"] < 1e-5)), f32["grad_norm"]
    for key in ("m", "theta", "q"):
        np.testing.assert_allclose(runs[jnp.float32][key], runs[jnp.float64][key], atol=1e-3, err_msg=key)
    np.testing.assert_allclose(runs[jnp.float32]["test_error"], runs[jnp.float64]["test_error"], rtol=1e-3)


@pytest.mark.slow       # 14 s; the sandboxes test their own masked padding in the default suite
def test_masked_padding_equals_the_unpadded_run():
    kw = dict(params=PAPER, d=40, dtype=jnp.float64, quadrature_order=4)
    with float64_scope():
        unpadded = jax.jit(lambda: train_run(1, 1.0, 0.3, 1, n_max=40, **kw))()
        padded = jax.jit(lambda: train_run(1, 1.0, 0.3, 1, n_max=67, **kw))()
    for key in unpadded:
        np.testing.assert_allclose(padded[key], unpadded[key], rtol=1e-9, atol=1e-12, err_msg=key)


@pytest.mark.parametrize("student", ["untied", "linear"])
def test_other_students_train_in_the_sweep(student):
    grid = TrainingGrid(alphas=(2.0,), omegas=(0.3,), seeds=(0,), inits=("positional",), d=40)
    runs = train_students(grid, PAPER, student=student, options=RunOptions(chunk_size=1, **QUIET)).runs
    assert runs["converged"].all()
    assert np.isfinite(runs["test_error"]).all()
    if student == "linear":   # the d -> inf baseline, computed in float64 by the theory
        with float64_scope():
            quad = gauss_hermite(2, 16)
        np.testing.assert_allclose(runs["test_error_theory"], linear_baseline_error(PAPER, quad))


def test_training_runs_write_and_load_back_equal(precision_runs, tmp_path):
    runs = precision_runs[jnp.float32]
    paths = runs.write(str(tmp_path))
    assert sorted(p.rsplit("/", 1)[1] for p in paths) == ["runs.csv", "training.json"]
    for loaded in (TrainingRuns.load(str(tmp_path)), TrainingRuns.from_csv(str(tmp_path / "runs.csv"))):
        assert loaded.grid == runs.grid
        for key, value in runs.runs.items():
            np.testing.assert_array_equal(np.asarray(loaded.runs[key]), np.asarray(value), err_msg=key)
    assert TrainingRuns.load(str(tmp_path)).config == runs.config
    assert runs.config["dtype"] == "float32" and runs.config["target"].startswith("mixed_target@")


def test_two_targets_with_the_same_name_never_share_a_run_directory(tmp_path):
    grid = TrainingGrid(alphas=(1.0,), omegas=(0.3,), seeds=(0,), inits="semantic", d=10)
    options = RunOptions(run_dir=str(tmp_path), max_chunks=0, **QUIET)
    targets = [lambda h, p: 0.5 * (1.0 - p.omega) * jax.nn.softmax(h @ h.T, axis=-1) + p.omega * p.A,
               lambda h, p: (1.0 - p.omega) * jax.nn.softmax(h @ h.T, axis=-1) + p.omega * p.A]
    assert targets[0].__qualname__ == targets[1].__qualname__
    assert train_students(grid, PAPER.replace(target=targets[0]), options=options) is None
    with pytest.raises(ValueError, match="config.target"):
        train_students(grid, PAPER.replace(target=targets[1]), options=options)


@pytest.mark.slow
def test_informed_branches_approach_the_state_evolution_as_d_grows():
    """Seed-averaged overlaps at d = 100 and d = 400 vs the SE fixed points of section 4."""
    dev = {}
    quad = gauss_hermite(4, 8)
    for d in (100, 400):
        runs = train_students(TrainingGrid(alphas=(2.0,), omegas=(0.3,), seeds=tuple(range(8)), d=d), PAPER,
                              options=RunOptions(chunk_size=16, **QUIET)).runs
        assert runs["converged"].all()
        for code, branch in enumerate(("positional", "semantic")):
            sel = runs["init"] == code
            dev[d, branch] = sum(abs(runs[k][sel].mean() - SPEC[branch][k]) for k in ("q", "m", "theta"))
            if d == 400:
                # the overlap estimator (exact fields, O(1/d) corrections) and fresh samples agree on each run
                np.testing.assert_allclose(runs["test_error"][sel], runs["test_error_theory"][sel], rtol=0.1)
                s2 = 0.25
                se = SPEC[branch]
                theory = test_error_from_overlaps(jnp.array([[se["q"] / s2]]), jnp.array([[se["m"]]]),
                                                  jnp.array([[se["theta"] / s2]]), PAPER, quad)
                np.testing.assert_allclose(runs["test_error"][sel].mean(), theory, rtol=0.1)
    for branch in ("positional", "semantic"):
        assert dev[400, branch] < dev[100, branch], dev
        assert dev[400, branch] < 0.03, dev


# --------------------------------------------------------------------------- bad input


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="alpha"):
        TrainingGrid(alphas=(0.005,), omegas=(0.3,), d=100)
    with pytest.raises(ValueError, match="inits"):
        TrainingGrid(alphas=(1.0,), omegas=(0.3,), inits=("clever",), d=100)
    assert TrainingGrid(alphas=(1.0,), omegas=(0.3,), inits="semantic", d=100).inits == ("semantic",)
    assert TrainingGrid(alphas=np.arange(0.2, 0.7, 0.2), omegas=(0.3,), d=100).alphas == (0.2, 0.4, 0.6)
    data = generate_data(jax.random.PRNGKey(0), PAPER, 20, 10)
    with pytest.raises(ValueError, match="y must have the shape"):
        train_student(TiedAttention(jnp.ones((20, 1))), data.replace(y=data.y[:5]), PAPER.lam)
    with pytest.raises(ValueError, match="NaN"):
        train_student(TiedAttention(jnp.ones((20, 1))), data.replace(x=data.x.at[0, 0, 0].set(jnp.nan)), PAPER.lam)
    with pytest.raises(ValueError, match="mask"):
        train_student(TiedAttention(jnp.ones((20, 1))), data, PAPER.lam, mask=jnp.ones(3, bool))


@pytest.mark.slow
def test_training_sweep_sharded_over_eight_host_devices_equals_one_device(on_host_devices):
    code = ("""
        import numpy as np, jax
        from phasejax.empirics import TrainingGrid, train_students
        from phasejax.sweep import RunOptions
        assert len(jax.devices()) == 8, jax.devices()
        grid = TrainingGrid(alphas=(0.5, 1.0, 2.0), omegas=(0.3,), seeds=(0, 1), inits=("positional", "semantic"), d=30)
        kw = dict(quadrature_order=4, dtype=jax.numpy.float64)
        many = train_students(grid, options=RunOptions(chunk_size=8, devices=jax.devices(), progress=False), **kw).runs
        one = train_students(grid, options=RunOptions(chunk_size=8, devices=jax.devices()[:1], progress=False), **kw).runs
        for k in one:
            np.testing.assert_allclose(np.asarray(many[k], float), np.asarray(one[k], float), rtol=1e-8,
                                       atol=1e-12, err_msg=k)
        print("EQUAL")
    """)
    assert "EQUAL" in on_host_devices(code)


def test_classify_solution_codes():
    from phasejax.empirics.metrics import SOLUTIONS, classify_solution

    cos_m = jnp.array([0.9, 0.05, 0.3, 0.6])
    cos_theta = jnp.array([0.1, 0.94, 0.2, 0.7])
    codes = [SOLUTIONS[int(c)] for c in classify_solution(cos_m, cos_theta)]
    assert codes == ["positional", "semantic", "neither", "semantic"]


def test_throw_raises_when_training_does_not_converge():
    from phasejax.solvers import SolverError

    capped = TrainConfig("gd", learning_rate=0.01, max_steps=3)
    assert int(minimize(lambda w: jnp.sum(w**2), jnp.ones(3), capped).status) == Status.MAX_ITERATIONS
    with pytest.raises(SolverError, match="minimize did not converge.*max_iterations"):
        minimize(lambda w: jnp.sum(w**2), jnp.ones(3), capped, throw=True)
    done = minimize(lambda w: jnp.sum(w**2), jnp.ones(3), TrainConfig("lbfgs"), throw=True)
    assert bool(done.converged)
    params = make_params(1.0, 0.3)
    data = generate_data(jax.random.PRNGKey(0), params, d=20, n=20)
    with pytest.raises(SolverError, match="train_student did not converge"):
        train_student(TiedAttention(semantic_init(data.Qstar, 1)), data, params.lam, capped, throw=True)


# --------------------------------------------------------------------------- any optax transformation


def test_any_optax_transformation_trains_and_the_config_stays_a_static_argument():
    import optax

    tx = optax.adamw(1e-2)
    config = TrainConfig(optimizer=tx, max_steps=20000)
    # hashable and equal by the transformation's identity: a static jit argument that reuses its program
    assert config == TrainConfig(optimizer=tx, max_steps=20000) and hash(config) == hash(TrainConfig(tx, max_steps=20000))
    assert config != TrainConfig(optimizer=optax.adamw(1e-2), max_steps=20000) and config != TrainConfig("adam")
    target = jnp.asarray([1.0, -2.0, 0.5])
    solve = jax.jit(minimize, static_argnums=(0, 2))
    loss = lambda w: jnp.sum((w - target) ** 2)  # noqa: E731
    res = solve(loss, jnp.zeros(3), config)
    assert res.status_name == "converged"
    np.testing.assert_allclose(res.params, target, atol=1e-5)   # gtol 1e-6 on the RMS gradient 2 |w - target|
    programs = solve._cache_size()
    solve(loss, jnp.ones(3), TrainConfig(optimizer=tx, max_steps=20000))     # an equal config: no new program
    assert solve._cache_size() == programs
    # a plain GradientTransformation (no extra arguments) and a user-made optax.lbfgs: the latter is the
    # "lbfgs" shorthand's program (line search fed value, grad and value_fn; value and grad reused from its state)
    sgd = optax.sgd(0.25)
    plain = minimize(loss, jnp.zeros(3), TrainConfig(optax.GradientTransformation(sgd.init, sgd.update)))
    np.testing.assert_allclose(plain.params, target, atol=1e-5)
    mine = minimize(loss, jnp.zeros(3), TrainConfig(optax.lbfgs()))
    short = minimize(loss, jnp.zeros(3), TrainConfig("lbfgs"))
    np.testing.assert_array_equal(mine.params, short.params)
    assert int(mine.steps) == int(short.steps)
    # train_student with a transformation
    params = make_params(1.0, 0.3)
    data = generate_data(jax.random.PRNGKey(0), params, d=40, n=40)
    _, res = train_student(TiedAttention(semantic_init(data.Qstar, 1)), data, params.lam,
                           TrainConfig(optax.adam(1e-2), max_steps=20000, gtol=1e-5))
    assert res.status_name == "converged"


def test_train_config_refuses_what_it_cannot_use():
    import optax

    with pytest.raises(ValueError, match="learning_rate applies to the shorthands"):
        TrainConfig(optax.adamw(1e-2), learning_rate=0.1)
    with pytest.raises(ValueError, match="optimizer must be an optax.GradientTransformation"):
        TrainConfig("sgd")
    with pytest.raises(ValueError, match="optimizer must be"):
        TrainConfig(optimizer=lambda g: g)
    assert TrainConfig(optax.sgd(0.1)).lr is None and TrainConfig("gd").lr == 0.5


def test_status_name_of_batched_training_results():
    capped = TrainConfig("gd", learning_rate=0.01, max_steps=3)
    res = jax.vmap(lambda a: minimize(lambda w: jnp.sum((w - a) ** 2), jnp.zeros(2), capped))(jnp.asarray([0.0, 1.0]))
    assert res.status_name.tolist() == ["converged", "max_iterations"]
    assert res.status_name.shape == res.status.shape


# --------------------------------------------------------------------------- the model's loss


def _tied_problem(params, d, n, seed=0):
    data = generate_data(jax.random.PRNGKey(seed), params, d, n, dtype=jnp.float64)
    Q = 0.5 * np.sqrt(d) * data.u[0][:, None] + 0.4 * data.Qstar + 0.3 * jax.random.normal(
        jax.random.PRNGKey(seed + 100), (d, 1), jnp.float64)
    return data, Q


def test_huber_risk_with_a_huge_delta_is_the_square_risk_and_both_risk_forms_agree():
    """`output_risk` of `HuberLoss(delta)` with `delta` above every residual is the square loss's (exactly the same
    formula there), and the tied student's risk as a function of `Q` (`tied_risk`: Gram matrices for the square
    loss, output residuals otherwise) equals the `nnx` student's (`student_risk`), masked samples dropped."""
    from phasejax.empirics.training import tied_risk
    from phasejax.theory import HuberLoss, SquareLoss

    with float64_scope():
        square, huge, huber = (make_params(1.0, 0.3, loss=loss) for loss in (SquareLoss(), HuberLoss(1e6),
                                                                            HuberLoss(0.1)))
        data, Q = _tied_problem(square, 50, 40)
        residual = data.y - TiedAttention(Q)(data.x, data.p)
        np.testing.assert_allclose(huge.loss.output_risk(residual), square.loss.output_risk(residual), rtol=1e-14)
        mask = jnp.arange(40) < 31
        graphdef, weights = nnx.split(TiedAttention(Q), nnx.Param)
        risks = {}
        for name, p in (("square", square), ("huge", huge), ("huber", huber)):
            direct = student_risk(graphdef, weights, data.x, data.y, data.p, mask, p.lam, p.loss)
            np.testing.assert_allclose(tied_risk(data.x, data.y, data.p, p, mask)(Q), direct, rtol=1e-12)
            risks[name] = float(direct)
        np.testing.assert_allclose(risks["huge"], risks["square"], rtol=1e-12)
        assert risks["huber"] < risks["square"]     # huber_delta(u) <= u^2 / 2, strictly beyond delta
        # the default loss of student_risk is the square loss: the paper's formula written out
        ridge = 0.5 * square.lam * jnp.sum(Q**2)
        written = jnp.sum(jnp.where(mask, jnp.sum(residual**2, axis=(1, 2)) / (2 * 50), 0.0)) + ridge
        np.testing.assert_allclose(student_risk(graphdef, weights, data.x, data.y, data.p, mask, square.lam),
                                   written, rtol=1e-12)


def test_huber_risk_of_finite_data_approaches_the_limit_loss_as_d_grows():
    """Finite size against the closed form: per sample, the Huber risk of the output residuals at a fixed `Q`
    (`HuberLoss.output_risk`, `d` coordinates per token) against the loss of the limit at the sample's fields,
    `sum_l E[huber_delta(s_l z)]` (`HuberLoss.__call__`, `gaussian_huber`; each output coordinate of the residual
    is `sum_j (T - S)_lj x_j`, Gaussian with variance `s_l^2` given the fields). The per-sample gap averages
    `d` coordinates (spread `O(d^-1/2)`); its mean over samples is an `O(1/d)` bias (the residual's `S p` part
    and the coordinates along `Q`, `Q*`), so quadrupling `d` must shrink the mean gap by more than the
    `d^-1/2` law's factor 2 and the spread by more than 1.5, and at `d = 4000` the mean gap lies below 1%."""
    from phasejax.theory import HuberLoss

    params = make_params(1.0, 0.3, loss=HuberLoss(0.1))
    gaps = {}
    with float64_scope():
        for d in (1000, 4000):
            data, Q = _tied_problem(params, d, 300)
            finite = params.loss.output_risk(data.y - TiedAttention(Q)(data.x, data.p))
            h = jnp.einsum("nld,dr->nlr", data.x + data.p, Q) / np.sqrt(d)
            hstar = jnp.einsum("nld,dt->nlt", data.x, data.Qstar) / np.sqrt(d)
            target = jax.vmap(lambda hs: params.target(hs, params))(hstar)
            limit = jax.vmap(lambda hh, T: params.loss(hh, T, params))(h, target)
            gaps[d] = np.asarray((finite - limit) / limit)
    mean = {d: abs(g.mean()) for d, g in gaps.items()}
    spread = {d: g.std() for d, g in gaps.items()}
    assert mean[4000] < 0.01, mean
    assert mean[1000] > 2 * mean[4000] and spread[1000] > 1.5 * spread[4000], (mean, spread)


def test_the_sweep_trains_the_models_loss():
    """`train_students` minimises `params.loss`: with `HuberLoss(huge)` the runs are the square loss's (the same
    minimum reached through the other form of the risk); with `HuberLoss(0.1)` the minimum of the Huber risk lies
    below the square risk's minimum (`huber <= square` pointwise), the test error is still the square error, and
    each run's `train_loss` is the Huber risk at its weights (a run made by hand on the same data)."""
    from phasejax.empirics.training import tied_risk
    from phasejax.theory import HuberLoss

    grid = TrainingGrid(alphas=(1.0, 2.0), omegas=(0.3,), seeds=(0,), inits=("positional", "semantic"), d=40)
    kw = dict(dtype=jnp.float64, quadrature_order=4, options=RunOptions(chunk_size=4, **QUIET))
    runs = {name: train_students(grid, make_params(1.0, 0.3, **loss), **kw).runs
            for name, loss in (("square", {}), ("huge", dict(loss=HuberLoss(1e6))), ("huber", dict(loss=HuberLoss(0.1))))}
    for name in runs:
        assert runs[name]["converged"].all(), name
    for key in ("train_loss", "test_error", "q", "m", "theta"):
        np.testing.assert_allclose(runs["huge"][key], runs["square"][key], rtol=1e-6, atol=1e-9, err_msg=key)
    assert np.all(runs["huber"]["train_loss"] < runs["square"]["train_loss"])
    # the semantic run at alpha = 2, redone by hand: Huber risk of the trained weights
    tasks = grid.tasks()
    i = int(np.flatnonzero((tasks["alpha"] == 2.0) & (tasks["init"] == INITS.index("semantic")))[0])
    params = make_params(2.0, 0.3, loss=HuberLoss(0.1))
    with float64_scope():
        data = generate_data(run_keys(0)["data"], params, 40, int(tasks["n"][i]), dtype=jnp.float64)
        model, res = train_student(TiedAttention(semantic_init(data.Qstar, 1)), data, params.lam, loss=params.loss)
        again = tied_risk(data.x, data.y, data.p, params)(model.Q[...])
    np.testing.assert_allclose(runs["huber"]["train_loss"][i], float(again) / 40, rtol=1e-8)
    np.testing.assert_allclose(float(res.loss), float(again), rtol=1e-12)


def test_the_loss_and_penalty_are_part_of_a_sweeps_identity_and_checked():
    import dataclasses

    from phasejax.empirics.sweep import problem_config
    from phasejax.theory import HuberLoss, Ridge

    square, huber = make_params(1.0, 0.3), make_params(1.0, 0.3, loss=HuberLoss(0.1))
    assert problem_config(square)["loss"] == {"type": "phasejax.theory.losses.SquareLoss"}
    assert problem_config(huber)["loss"] == {"type": "phasejax.theory.losses.HuberLoss", "delta": 0.1}
    assert problem_config(make_params(1.0, 0.3, loss=HuberLoss(0.2)))["loss"]["delta"] == 0.2

    @dataclasses.dataclass(frozen=True)
    class Heavier(Ridge):
        pass

    grid = TrainingGrid(alphas=(1.0,), omegas=(0.3,), seeds=(0,), inits="semantic", d=10)
    with pytest.raises(ValueError, match="penalty: the students are trained with the ridge penalty"):
        train_students(grid, square.replace(penalty=Heavier()), options=RunOptions(**QUIET))
    from phasejax.empirics import gamp
    from phasejax.empirics.bracket import BracketGrid, bracket_sweep

    data = generate_data(jax.random.PRNGKey(0), huber, 10, 10)
    with pytest.raises(ValueError, match="loss: gamp is written for the square loss"):
        gamp(data, huber, jnp.ones((10, 1)), jnp.eye(1))
    with pytest.raises(ValueError, match="loss: bracket_sweep is written for the square loss"):
        bracket_sweep(BracketGrid(alphas=(1.0,), datasets=(0,), d=10), huber)
