"""Finite-d SGD building blocks, the gradient flow, and the command's figures from committed-format CSVs."""

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.dynamics import MECHANISMS, classify_mechanism, make_dynamics_params, online_sgd
from phasejax.dynamics.ode import gradient_flow_drift
from phasejax.dynamics.population import table_terms
from phasejax.dynamics.sgd import initial_weights

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_initial_weights_have_the_requested_overlaps_and_norm():
    d = 50
    w = initial_weights(jax.random.PRNGKey(0), d, 0.3, -0.4)
    assert float(jnp.linalg.norm(w)) == pytest.approx(np.sqrt(d), rel=1e-5)
    assert float(w[0] / np.sqrt(d)) == pytest.approx(0.3, abs=1e-6)
    assert float(w[1] / np.sqrt(d)) == pytest.approx(-0.4, abs=1e-6)
    r = initial_weights(jax.random.PRNGKey(1), d, jnp.nan, jnp.nan)        # random direction
    assert float(jnp.linalg.norm(r)) == pytest.approx(np.sqrt(d), rel=1e-5)


def test_online_sgd_keeps_the_student_on_the_sphere_and_validates_sizes():
    params = make_dynamics_params(0.5)
    run = online_sgd(params, jax.random.PRNGKey(0), 0.5, d=20, n_steps=40, record_every=10, m0=0.1, e0=0.2)
    assert run.m.shape == (5,) and run.t[-1] == pytest.approx(2.0)
    assert float(run.m[0]) == pytest.approx(0.1, abs=1e-6)
    assert np.all(np.asarray(run.m) ** 2 + np.asarray(run.e) ** 2 <= 1 + 1e-5)
    with pytest.raises(ValueError, match="record_every"):
        online_sgd(params, jax.random.PRNGKey(0), 0.5, d=20, n_steps=45, record_every=10)
    with pytest.raises(ValueError, match="d"):
        online_sgd(params, jax.random.PRNGKey(0), 0.5, d=0, n_steps=10, record_every=10)


def test_initial_overlaps_off_the_unit_disk_raise_naming_them():
    with pytest.raises(ValueError, match="m0, e0"):
        initial_weights(jax.random.PRNGKey(0), 20, 0.8, 0.7)
    with pytest.raises(ValueError, match="m0, e0"):
        online_sgd(make_dynamics_params(0.5), jax.random.PRNGKey(0), 0.5, d=20, n_steps=10, record_every=10,
                   m0=1.2, e0=0.0)
    with pytest.raises(ValueError, match="m0 and e0"):
        initial_weights(jax.random.PRNGKey(0), 20, jnp.nan, 0.3)
    # on the circle (up to float32 rounding) is valid: no remainder
    w = initial_weights(jax.random.PRNGKey(0), 20, 0.6, 0.8)
    assert float(w[0]) == pytest.approx(0.6 * np.sqrt(20), rel=1e-6) and float(jnp.sum(w[2:] ** 2)) < 1e-5
    # traced overlaps cannot raise: an invalid init is NaN, never a silently clipped student
    bad = jax.jit(lambda m: initial_weights(jax.random.PRNGKey(0), 20, m, 0.7))(0.8)
    assert np.all(np.isnan(np.asarray(bad)))


def test_classify_mechanism():
    codes = classify_mechanism(jnp.asarray([0.0, 0.9, 0.05, 0.5]), jnp.asarray([0.0, 0.05, -0.9, 0.5]))
    assert [MECHANISMS[int(c)] for c in codes] == ["none", "semantic", "positional", "mixed"]


def test_gradient_flow_decreases_the_population_loss(small_table):
    # d R / d tau = (R_m, R_e) . drift <= 0 along the spherical gradient flow, with equality only at critical points
    with float64_scope():
        for m, e, om in [(0.3, 0.2, 0.4), (0.1, 0.6, 0.8), (-0.5, 0.4, 0.65)]:
            t = table_terms(small_table, m, e, om)
            dm, de = gradient_flow_drift(m, e, om, small_table)
            assert float(t.dR_dm * dm + t.dR_de * de) < 0


def test_replot_from_the_committed_results(tmp_path, run_cli):
    src = os.path.join(ROOT, "results", "dynamics")
    names = ("ode.csv", "sgd_trajectories.csv", "phase_diagram.csv", "runs.csv", "summary.json")
    missing = [n for n in names if not os.path.exists(os.path.join(src, n))]
    assert not missing, f"results/dynamics is committed with every file the replot reads; missing: {missing}"
    for n in names:
        shutil.copy(os.path.join(src, n), tmp_path / n)
    code, out, _ = run_cli(["dynamics", "--replot", "--overwrite", "--out", str(tmp_path)])
    assert code == 0
    for fig in ("trajectories.png", "phase_diagram.png", "escape_time.png"):
        assert (tmp_path / fig).stat().st_size > 10_000
