"""Single-layer transformer on binary Markov chains: closed forms vs Monte Carlo and exact
enumeration, the bad critical point (exact gradient and Hessian), the reduced model, sweeps, files, bad inputs."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from phasejax.io import to_json
from phasejax.precision import float64_scope
from phasejax.solvers import Status
from phasejax.sweep import RunOptions
from phasejax.tasks.markov import (
    MarkovGrid, MarkovSweep, MarkovTraining, bad_critical_point, critical_point_check, entropy_rate, kernel_params,
    markov_run, markov_sweep, stationary_entropy,
)
from phasejax.tasks.markov.critical import stationary_direction_curvature
from phasejax.tasks.markov.data import all_chains, chain_probabilities, sample_chains, stationary_law
from phasejax.tasks.markov.model import (
    init_markov_params, markov_logits, markov_loss, next_token_losses, population_loss,
)
from phasejax.tasks.markov.sweep import reference_losses
from phasejax.tasks.markov.train import estimate_population_loss, markov_optimizer
from phasejax.tasks.markov_reduced import (
    ReducedSettings,
    embed_reduced,
    global_minimum_curve,
    reduced_flow,
    reduced_gaussian_runs,
    reduced_global_gain,
    reduced_loss,
    stationary_curvature,
)

PQ = [(0.2, 0.3), (0.7, 0.8), (0.15, 0.9)]

# compiled once for the whole file (p, q, tied traced: the concrete-input checks are tested separately)
exact_loss = jax.jit(population_loss)
logits_fn = jax.jit(markov_logits)
estimate = jax.jit(estimate_population_loss, static_argnums=5)


def _mc(values, n_chains):
    """Mean and standard error over i.i.d. chains of per-chain means `values (n_chains,)`."""
    v = np.asarray(values, np.float64)
    return v.mean(), v.std(ddof=1) / np.sqrt(n_chains)


# ----------------------------------------------------------------------------
# Data and closed forms
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("p,q", PQ)
def test_sampled_chains_have_the_stationary_law_and_the_transition_matrix(p, q):
    s = np.asarray(sample_chains(jax.random.PRNGKey(0), p, q, 4000, 20))
    assert s.shape == (4000, 20) and set(np.unique(s)) <= {0.0, 1.0}
    pi1 = p / (p + q)
    for n in (0, 19):   # every position is stationary
        se = np.sqrt(pi1 * (1 - pi1) / 4000)
        assert abs(s[:, n].mean() - pi1) < 5 * se
    prev, nxt = s[:, :-1].ravel(), s[:, 1:].ravel()
    est_p, est_1mq = nxt[prev == 0].mean(), nxt[prev == 1].mean()
    # transition counts are martingale differences: the Bernoulli standard error holds along chains
    assert abs(est_p - p) < 5 * np.sqrt(p * (1 - p) / np.sum(prev == 0))
    assert abs(est_1mq - (1 - q)) < 5 * np.sqrt(q * (1 - q) / np.sum(prev == 1))
    np.testing.assert_allclose(stationary_law(p, q), [q / (p + q), p / (p + q)], rtol=1e-6)


@pytest.mark.parametrize("p,q", PQ)
def test_entropy_rate_and_stationary_entropy_equal_monte_carlo_losses_of_the_two_predictors(p, q):
    n = 20000
    s = sample_chains(jax.random.PRNGKey(1), p, q, n, 16)
    kernel_logit = jnp.where(s > 0.5, np.log((1 - q) / q), np.log(p / (1 - p)))
    stationary_logit = jnp.full_like(s, np.log(p / q))
    for logit, exact in ((kernel_logit, entropy_rate(p, q)), (stationary_logit, stationary_entropy(p, q))):
        mean, se = _mc(jnp.mean(next_token_losses(logit, s), -1), n)
        assert abs(mean - float(exact)) < 4 * se
    h_rate, h_pi = reference_losses(p, q)            # float64 numpy version of the same closed forms
    np.testing.assert_allclose([h_rate, h_pi], [entropy_rate(p, q), stationary_entropy(p, q)], rtol=1e-6)
    assert h_rate <= h_pi + 1e-12                        # conditioning reduces entropy


def test_chain_probabilities_sum_to_one_and_give_the_stationary_marginals():
    chains = all_chains(7)
    assert chains.shape == (128, 7)
    with float64_scope():
        w = np.asarray(chain_probabilities(chains, 0.3, 0.6, jnp.float64))
    np.testing.assert_allclose(w.sum(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(w @ chains, np.full(7, 0.3 / 0.9), rtol=1e-12)


@pytest.mark.parametrize("tied", [1.0, 0.0])
@pytest.mark.parametrize("p,q", PQ)
def test_constructions_reach_the_closed_form_losses_exactly_and_by_monte_carlo(p, q, tied):
    d, n = 4, 10
    best = kernel_params(p, q, d, n)
    bad = bad_critical_point(init_markov_params(jax.random.PRNGKey(2), d, n, init_std=0.7), p, q)
    s = sample_chains(jax.random.PRNGKey(3), p, q, 8000, n)
    for params, exact in ((best, entropy_rate(p, q)), (bad, stationary_entropy(p, q))):
        np.testing.assert_allclose(exact_loss(params, p, q, tied), exact, rtol=2e-6)   # all 2^10 chains
        mean, se = _mc(jnp.mean(next_token_losses(logits_fn(params, s, tied), s), -1), 8000)
        assert abs(mean - float(exact)) < 4 * se
    # the stationary point predicts pi_1 everywhere
    np.testing.assert_allclose(jax.nn.sigmoid(logits_fn(bad, s[:5], tied)), p / (p + q), rtol=1e-5)


def test_control_variate_estimate_matches_the_exact_population_loss():
    p, q, n = 0.35, 0.8, 8
    params = init_markov_params(jax.random.PRNGKey(5), 4, n, init_std=0.6)
    params["b"] = jnp.asarray(0.3)
    exact = float(exact_loss(params, p, q, 0.0))
    est = estimate(params, jax.random.PRNGKey(6), p, q, 0.0, 8192)
    assert abs(float(est["loss"]) - exact) < 4 * float(est["loss_se"])
    assert abs(float(est["loss_mc"]) - exact) < 0.02
    # near the stationary predictor the control variate is (almost) exact
    near = bad_critical_point(params, p, q)
    near["e"] = 1e-3 * jnp.ones(4)
    est = estimate(near, jax.random.PRNGKey(7), p, q, 1.0, 8192)
    assert abs(float(est["loss"]) - float(exact_loss(near, p, q, 1.0))) < 1e-5


# ----------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------


def test_model_is_causal_jittable_and_the_tied_readout_is_never_trained():
    params = init_markov_params(jax.random.PRNGKey(8), 4, 12, init_std=0.5)
    s = sample_chains(jax.random.PRNGKey(9), 0.3, 0.4, 3, 12)
    logits = jax.jit(markov_logits)
    out = logits(params, s, 1.0)
    flipped = s.at[:, 7:].set(1 - s[:, 7:])          # change the future of position 6
    np.testing.assert_allclose(logits(params, flipped, 1.0)[:, :7], out[:, :7], rtol=1e-6)
    assert not np.allclose(logits(params, flipped, 1.0)[:, 7:], out[:, 7:])
    g = jax.jit(jax.grad(markov_loss))(params, s, 1.0)
    np.testing.assert_array_equal(g["a"], 0.0)
    tx = markov_optimizer(1e-2, 5, optimizer="adamw", weight_decay=0.0, warmup_fraction=0.0)
    updates, _ = tx.update(g, tx.init(params), params)
    np.testing.assert_array_equal(updates["a"], 0.0)                # Adam: 0 / (sqrt(0) + eps) = 0
    assert np.all(np.abs(updates["e"]) > 0)


# ----------------------------------------------------------------------------
# The bad critical point
# ----------------------------------------------------------------------------


def test_curvature_along_the_embedding_at_the_stationary_point():
    """`stationary_direction_curvature` at theta_pi with zero positions is `2 kappa` (Monte Carlo)."""
    p, q = 0.7, 0.8
    params = bad_critical_point(init_markov_params(jax.random.PRNGKey(11), 4, 8, init_std=0.3), p, q)
    params["pos"] = jnp.zeros_like(params["pos"])
    params["e"] = jnp.asarray([0.6, 0.0, 0.8, 0.0])          # only its direction matters
    kappa = p * q / (p + q) ** 2 * (p + q - 1)
    curvature = jax.jit(stationary_direction_curvature, static_argnums=5)
    c = float(curvature(params, jax.random.PRNGKey(12), p, q, 1.0, 8000))
    # the estimate is the mean of 2 (pi_1 - s_{n+1}) s_n over 8000 x 7 correlated tokens: SE < 0.006
    assert abs(c - 2 * kappa) < 0.03


def test_bad_critical_point_is_a_psd_stationary_point_when_tied_and_p_plus_q_above_one():
    c = critical_point_check(0.7, 0.8, True, d=2, length=5, hidden=3, dtype=jnp.float64)
    assert abs(c.loss - c.stationary_entropy) < 1e-12
    assert c.grad_max < 1e-12
    assert c.min_eigenvalue > -1e-12                          # positive semi-definite
    assert c.eigenvalues[-1] > 0.05                           # not trivially zero
    assert c.max_spectrum_error < 1e-10                       # equals the closed form of the (e, b) block


@pytest.mark.parametrize("p,q,tied", [(0.7, 0.8, False), (0.2, 0.3, True), (0.2, 0.3, False)])
def test_bad_critical_point_is_a_saddle_untied_or_below_p_plus_q_one(p, q, tied):
    c = critical_point_check(p, q, tied, d=2, length=5, hidden=3, seed=1, dtype=jnp.float64)
    assert c.grad_max < 1e-12
    kappa = p * q / (p + q) ** 2 * (p + q - 1)
    assert c.min_eigenvalue < -0.5 * abs(kappa)               # a negative curvature direction
    assert c.max_spectrum_error < 1e-10


# ----------------------------------------------------------------------------
# The reduced model
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("tied", [1.0, 0.0])
def test_reduced_loss_is_the_full_model_loss_on_the_rank_one_slice(tied):
    rng = np.random.default_rng(0)
    for p, q in PQ:
        theta = jnp.asarray(rng.normal(size=4) * [1.0, 1.5, 1.0, 1.0], jnp.float32)
        full = exact_loss(embed_reduced(theta, 3, 6, hidden=4), p, q, tied)   # all 2^6 chains
        np.testing.assert_allclose(reduced_loss(theta, p, q, tied), full, rtol=2e-6)


@pytest.mark.parametrize("p,q", PQ)
def test_reduced_critical_points(p, q):
    delta = float(reduced_global_gain(p, q))
    b_star = np.log(p / (1 - p))
    w = 0.4
    e = float(global_minimum_curve(p, q, [w])[0]) if delta > 0 else float(global_minimum_curve(p, q, [-1.7])[0])
    w = w if delta > 0 else -1.7
    best = jnp.asarray([e, w, e, b_star], jnp.float32)
    np.testing.assert_allclose(reduced_loss(best, p, q, 1.0), entropy_rate(p, q), rtol=1e-6)
    assert float(jnp.max(jnp.abs(jax.grad(reduced_loss)(best, p, q, 1.0)))) < 1e-5
    with float64_scope():
        derivs = jax.jit(lambda th, t: (reduced_loss(th, p, q, t), jax.grad(reduced_loss)(th, p, q, t),
                                        jax.hessian(reduced_loss)(th, p, q, t)))
        for w0 in (-1.6, -0.5, 0.8):
            line = jnp.asarray([0.0, w0, 0.0, np.log(p / q)], jnp.float64)
            value, grad, hess = derivs(line, 1.0)
            np.testing.assert_allclose(value, stationary_entropy(p, q, jnp.float64), rtol=1e-12)
            assert float(jnp.max(jnp.abs(grad))) < 1e-12
            curvature = float(stationary_curvature(p, q, w0, jnp.float64))   # 2 kappa (1 + w|w|)
            np.testing.assert_allclose(hess[0, 0], curvature, rtol=1e-10, atol=1e-14)
            _, _, hu = derivs(line, 0.0)                                     # untied: e-a coupling, a saddle
            np.testing.assert_allclose(hu[0, 2], 0.5 * curvature, rtol=1e-10, atol=1e-14)
            assert hu[0, 0] == 0 and hu[2, 2] == 0


def test_reduced_gradient_flow_from_small_inits():
    th0 = jnp.asarray([0.1, 0.05, -0.08, 0.0])
    ps, qs, tied = np.array([0.2, 0.2, 0.7, 0.7]), np.array([0.3, 0.3, 0.8, 0.8]), np.array([1.0, 0.0, 1.0, 0.0])
    flows = jax.jit(jax.vmap(lambda p, q, t: reduced_flow(th0, p, q, t, t_max=300.0)))(ps, qs, tied)
    finer = jax.jit(jax.vmap(lambda p, q, t: reduced_flow(th0, p, q, t, t_max=300.0, dt=0.01)))(ps, qs, tied)
    h_rate, h_pi = reference_losses(ps, qs)
    expected = np.where((ps + qs > 1) & (tied == 1), h_pi, h_rate)   # stuck exactly when tied and p + q > 1
    np.testing.assert_array_equal(flows.status, Status.CONVERGED)
    np.testing.assert_allclose(flows.loss, expected, atol=1e-5)
    np.testing.assert_allclose(finer.theta, flows.theta, atol=1e-4)     # the RK4 step does not matter
    np.testing.assert_allclose(flows.path[tied == 1, -1, 2], -0.08)     # tied: a never moves


def test_reduced_gaussian_runs_equal_flows_one_by_one():
    settings = ReducedSettings(init_std=0.1, t_max=60.0, dt=0.05)
    ps, qs, tied, seeds = [0.2, 0.7, 0.7], [0.3, 0.8, 0.8], [1, 1, 0], [0, 1, 2]
    runs = reduced_gaussian_runs(ps, qs, tied, seeds, settings)
    flow = jax.jit(lambda th0, p, q, t: reduced_flow(th0, p, q, t, t_max=60.0, dt=0.05, n_save=1))
    for i in range(3):
        th0 = 0.1 * jax.random.normal(jax.random.PRNGKey(seeds[i]), (4,), jnp.float32)
        one = flow(th0, ps[i], qs[i], float(tied[i]))
        np.testing.assert_allclose(runs["final_loss"][i], one.loss, rtol=1e-6)
        np.testing.assert_allclose([runs[k][i] for k in "ewab"], one.theta, rtol=1e-5, atol=1e-7)
    assert list(runs["stuck"]) == [False, True, False]


# ----------------------------------------------------------------------------
# Sweeps and files
# ----------------------------------------------------------------------------

TINY = MarkovTraining(d=2, length=4, steps=12, batch_size=4, n_eval=64, n_curve=4, learning_rate=0.3)


def test_vmapped_sweep_equals_runs_one_by_one_resumes_and_round_trips(tmp_path):
    grid = MarkovGrid(ps=(0.3, 0.8), qs=(0.6,), tied=(1, 0), seeds=(0, 1))
    opts = RunOptions(run_dir=str(tmp_path / "run"), chunk_size=3, progress=False)
    swept = markov_sweep(grid, TINY, options=opts)
    one = jax.jit(lambda s, p, q, t: markov_run(s, p, q, t, TINY))
    tasks = grid.tasks()
    assert len(swept.runs["p"]) == 8
    for i in range(8):
        r = one(tasks["seed"][i], tasks["p"][i], tasks["q"][i], jnp.float32(tasks["tied"][i]))
        np.testing.assert_allclose(swept.runs["final_loss"][i], r["final_loss"], rtol=1e-5)
        np.testing.assert_allclose(swept.runs["e_norm"][i], r["e_norm"], rtol=1e-5)
        np.testing.assert_allclose(swept.curves["loss"][swept.curves["run"] == i], r["curve"], rtol=1e-5)
    again = markov_sweep(grid, TINY, options=opts)                       # every chunk is read back from disk
    np.testing.assert_array_equal(again.runs["final_loss"], swept.runs["final_loss"])
    h_rate, h_pi = reference_losses(swept.runs["p"], swept.runs["q"])
    np.testing.assert_array_equal(swept.runs["stuck"], np.abs(swept.runs["final_loss"] - h_pi) < 1e-3)
    np.testing.assert_allclose(swept.runs["entropy_rate"], h_rate)
    # write / load round trip
    paths = swept.write(str(tmp_path / "out"))
    assert [p.split("/")[-1] for p in paths] == ["runs.csv", "curves.csv", "summary.json"]
    back = MarkovSweep.load(str(tmp_path / "out"))
    assert list(back.runs)[:8] == ["p", "q", "tied", "seed", "final_loss", "entropy_rate", "stationary_entropy",
                                   "stuck"]
    assert set(back.runs) == set(swept.runs)
    for k, v in swept.runs.items():
        np.testing.assert_array_equal(back.runs[k], v, err_msg=k)
        assert back.runs[k].dtype.kind == np.asarray(v).dtype.kind or k == "tied", k
    for k in swept.curves:
        np.testing.assert_array_equal(back.curves[k], swept.curves[k])
    assert back.summary == json.loads(to_json(swept.summary))


# ----------------------------------------------------------------------------
# Bad inputs
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("call,name", [
    (lambda: sample_chains(jax.random.PRNGKey(0), 1.2, 0.3, 4, 8), "p"),
    (lambda: sample_chains(jax.random.PRNGKey(0), 0.2, 0.0, 4, 8), "q"),
    (lambda: sample_chains(jax.random.PRNGKey(0), 0.2, 0.3, 0, 8), "n_chains"),
    (lambda: sample_chains(jax.random.PRNGKey(0), 0.2, 0.3, 4, 1), "length"),
    (lambda: sample_chains(jax.random.PRNGKey(0), np.nan, 0.3, 4, 8), "p"),
    (lambda: sample_chains(jax.random.PRNGKey(0), 0.2, 0.3, 4, 8, dtype=jnp.int32), "dtype"),
    (lambda: entropy_rate(0.5, 1.0), "q"),
    (lambda: stationary_entropy(-0.1, 0.5), "p"),
    (lambda: init_markov_params(jax.random.PRNGKey(0), 4, 1), "length"),
    (lambda: init_markov_params(jax.random.PRNGKey(0), 0, 8), "d"),
    (lambda: init_markov_params(jax.random.PRNGKey(0), 4, 8, init_std=-1.0), "init_std"),
    (lambda: kernel_params(0.5, 1.5, 4, 8), "q"),
    (lambda: MarkovTraining(length=1), "length"),
    (lambda: MarkovTraining(steps=0), "steps"),
    (lambda: MarkovTraining(optimizer="lbfgs"), "optimizer"),
    (lambda: MarkovTraining(learning_rate=0.0), "learning_rate"),
    (lambda: MarkovGrid(ps=(0.5, 1.0)), "p"),
    (lambda: MarkovGrid(tied=(2,)), "tied"),
    (lambda: all_chains(30), "length"),
    (lambda: reduced_loss(jnp.zeros(4), 0.0, 0.5, 1.0), "p"),
    (lambda: reduced_flow(jnp.zeros(4), 0.3, 0.4, 1.0, dt=0.0), "dt"),
    (lambda: ReducedSettings(init_std=0.0), "init_std"),
    (lambda: markov_sweep(MarkovGrid(ps=(0.3,), qs=(0.4,), seeds=(0,)), TINY, tol=0.0), "tol"),
])
def test_bad_inputs_raise_value_errors_naming_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_traced_probabilities_are_not_checked_but_concrete_ones_are():
    f = jax.jit(lambda p: entropy_rate(p, 0.4))
    np.testing.assert_allclose(f(0.3), entropy_rate(0.3, 0.4))
    with pytest.raises(ValueError, match="p must lie in"):
        entropy_rate(np.array([0.3, 1.0]), 0.4)


def test_optimizer_schedules():
    for opt in ("sgd", "adamw"):
        for sched in ("cosine", "constant"):
            tx = markov_optimizer(0.1, 50, optimizer=opt, schedule=sched, weight_decay=1e-3)
            params = {"x": jnp.ones(3)}
            upd, _ = tx.update({"x": jnp.ones(3)}, tx.init(params), params)
            assert np.all(np.isfinite(upd["x"]))
    assert isinstance(markov_optimizer(0.1, 10), optax.GradientTransformation)


# ----------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------


def test_command_rejects_bad_flags_before_computing(tmp_path, run_cli):
    """Each bad flag is one line on stderr naming it, exit code 2, and nothing written."""
    for argv, name in ((["--length", "1"], "length"), (["--low", "0.6", "0.5"], "low"),
                       (["--high", "0.2", "0.3"], "high"), (["--ps", "1.5"], "p"), (["--steps", "0"], "steps"),
                       (["--seeds", "-1"], "seeds"), (["--tied", "maybe"], "tied")):
        code, _, err = run_cli(["markov", "--out", str(tmp_path / "out"), *argv])
        assert code == 2, (argv, code, err)
        assert name in err, (argv, err)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_command_writes_its_files(tmp_path, capsys):
    from phasejax.cli import main

    out = tmp_path / "out"
    rc = main(["markov", "--out", str(out), "--run-dir", str(tmp_path / "run"), "--ps", "0.3", "--qs", "0.9",
               "--seeds", "1", "--d", "2", "--length", "4", "--batch-size", "4", "--steps", "12", "--n-eval", "64",
               "--no-critical", "--no-reduced", "--no-trace", "--no-progress"])
    assert rc == 0
    printed = capsys.readouterr().out.split()
    for name in ("runs.csv", "curves.csv", "summary.json", "phase_diagram.png", "curves.png"):
        assert str(out / name) in printed and (out / name).stat().st_size > 0
    back = MarkovSweep.load(str(out))
    assert len(back.runs["p"]) == 2 and sorted(back.runs["tied"].tolist()) == [0, 1]
    assert back.summary["command"]["training"]["steps"] == 12
