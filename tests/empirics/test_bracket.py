"""The empirical bracket of alpha_c: the branch constraint, the zero-student control variate, the restricted
Lanczos bottom against a dense eigendecomposition, and a small end-to-end run against the sign of the
replica-symmetric Delta e_t far from alpha_c (the summaries and fits: test_bracket_analysis.py)."""

import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.empirics import cast_params, generate_data, sample_count
from phasejax.empirics.bracket import (
    TASK_COLUMNS,
    BracketGrid,
    bracket_sweep,
    constrained_risk,
    expected_zero_loss,
    leak,
    project_out,
    removed_basis,
    restricted_hessian_min_eig,
)
from phasejax.empirics.bracket_analysis import summarize_bracket
from phasejax.empirics.data import run_keys
from phasejax.empirics.metrics import _gauss_hermite_in
from phasejax.empirics.replicas import replica_init
from phasejax.empirics.training import TrainConfig, minimize
from phasejax.io import read_csv
from phasejax.sweep import RunOptions
from phasejax.theory import make_params
from phasejax.theory.gram import gram_inputs, gram_risk

from _compare import RTOL_REDERIVED, assert_same_csv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _problem(d, alpha=1.25, seed=0, dtype=jnp.float32):
    params = cast_params(make_params(alpha, 0.3), dtype)
    data = generate_data(run_keys(seed)["data"], params, d, sample_count(alpha, d), dtype=dtype)
    inputs = gram_inputs(data.x, data.y, data.p)
    return params, data, (lambda Q: gram_risk(Q, inputs, params))


# ----------------------------------------------------------------------------
# The constraint
# ----------------------------------------------------------------------------


def test_removed_basis_spans_the_other_branch_direction():
    _, data, _ = _problem(50)
    Bp, Bs = removed_basis(0, data.u, data.Qstar), removed_basis(1, data.u, data.Qstar)
    qhat = data.Qstar[:, 0] / jnp.linalg.norm(data.Qstar[:, 0])
    assert abs(abs(float(Bp[:, 0] @ qhat)) - 1) < 1e-6 and abs(float(jnp.linalg.norm(Bp)) - 1) < 1e-6
    np.testing.assert_allclose(np.asarray(Bs[:, 0]), np.asarray(data.u[0]), atol=1e-7)
    Q = jax.random.normal(jax.random.PRNGKey(1), (50, 1))
    for B in (Bp, Bs):
        P = project_out(Q, B)
        assert float(jnp.abs(B.T @ P).max()) < 1e-5 * float(jnp.linalg.norm(Q))
        np.testing.assert_allclose(np.asarray(project_out(P, B)), np.asarray(P), atol=1e-6)   # a projector


@pytest.mark.parametrize("branch", [0, 1])
def test_constrained_training_keeps_the_student_in_its_subspace(branch):
    d = 150
    params, data, risk = _problem(d)
    B = removed_basis(branch, data.u, data.Qstar)
    Q0 = project_out(replica_init(branch, jax.random.PRNGKey(2), data.u, data.Qstar, 1), B)
    res = jax.jit(lambda Q: minimize(constrained_risk(risk, B), Q, TrainConfig()))(Q0)
    assert bool(res.converged)
    Q = res.params
    # the gradient of the constrained risk has no component along B, so L-BFGS never leaves the subspace: the
    # weights *before* any final projection have no component along B beyond float32 rounding
    assert float(leak(Q, B)) < 50 * np.finfo(np.float32).eps
    m = float(data.u[0] @ Q[:, 0]) / np.sqrt(d)
    theta = float(data.Qstar[:, 0] @ Q[:, 0]) / d
    norm = float(jnp.linalg.norm(Q)) / np.sqrt(d)
    if branch == 0:      # positional: no overlap with the teacher, a positional component
        assert abs(theta) < 1e-5 * norm and abs(m) > 0.1
    else:                # semantic: no positional component, an overlap with the teacher
        assert abs(m) < 1e-5 * norm and abs(theta) > 0.1 * norm
    # a critical point of the risk within the subspace, not of the unconstrained risk along B
    g = jax.grad(risk)(Q)
    assert float(jnp.linalg.norm(project_out(g, B))) / np.sqrt(d) < 2e-6
    assert float(jnp.linalg.norm(B.T @ g)) > 100 * float(jnp.linalg.norm(project_out(g, B)))


# ----------------------------------------------------------------------------
# The restricted Hessian
# ----------------------------------------------------------------------------


def _tilted(risk, B):
    """`risk` minus a strong negative curvature along the removed directions `B`."""
    return lambda Q: risk(Q) - 5.0 * jnp.sum((B.T @ Q) ** 2)


def test_restricted_lanczos_bottom_against_dense_eigh():
    with float64_scope():
        d = 40
        params, data, risk = _problem(d, alpha=1.5, seed=4, dtype=jnp.float64)
        bottom = jax.jit(lambda Q, B, key, steps: restricted_hessian_min_eig(_tilted(risk, B), Q, B, key, steps),
                         static_argnums=3)
        hessian = jax.jit(lambda Q, B: jax.hessian(_tilted(risk, B))(Q).reshape(d, d))
        for branch in (0, 1):
            B = removed_basis(branch, data.u, data.Qstar)
            # the risk's lowest curvature lies along the removed direction: the restricted bottom must not see it
            Q = project_out(0.5 * data.u.T + 0.3 * jax.random.normal(jax.random.PRNGKey(5), (d, 1), jnp.float64), B)
            H = np.asarray(hessian(Q, B))
            W = np.linalg.svd(np.eye(d) - np.asarray(B @ B.T))[0][:, : d - 1]   # orthonormal basis of the kept space
            kept = np.linalg.eigvalsh(W.T @ H @ W)
            assert np.linalg.eigvalsh(H)[0] < kept[0] - 1.0      # the unrestricted bottom is the removed direction's
            res = bottom(Q, B, jax.random.PRNGKey(6), d)
            assert abs(float(res.value) - kept[0]) <= max(float(res.residual), 1e-9) + 1e-9 * abs(kept[0])
            # with fewer steps than the dimension the smallest Ritz value is an upper bound of the bottom
            few = bottom(Q, B, jax.random.PRNGKey(7), 12)
            assert float(few.value) >= kept[0] - 1e-10


# ----------------------------------------------------------------------------
# The zero student as a control variate
# ----------------------------------------------------------------------------


def test_expected_zero_loss_is_the_mean_over_fresh_tokens():
    with float64_scope():
        d, n = 40, 40000
        params = make_params(1.0, 0.3)
        data = jax.jit(lambda k: generate_data(k, params, d, n, dtype=jnp.float64))(run_keys(3)["data"])
        inputs = gram_inputs(data.x, data.y, data.p)       # one teacher, many samples: the loss of Q = 0 per sample
        S0 = params.student(jnp.zeros((2, 1)), params)
        per_sample = 0.5 * (inputs.c - 2.0 * jnp.einsum("ij,nji->n", S0, inputs.Y)
                            + jnp.einsum("ij,njk,ik->n", S0, inputs.G, S0))
        np.testing.assert_allclose(np.sum(per_sample), gram_risk(jnp.zeros((d, 1)), inputs, params), rtol=1e-10)
        expected = float(expected_zero_loss(data.Qstar, data.p, params, _gauss_hermite_in(2, 24, jnp.float64)))
        mc = np.asarray(per_sample)
        assert abs(mc.mean() - expected) < 4 * mc.std() / np.sqrt(n)
        assert mc.std() / np.sqrt(n) < 0.02 * expected      # the check is sharp


# ----------------------------------------------------------------------------
# Validation and a small end-to-end run
# ----------------------------------------------------------------------------


def test_invalid_inputs_name_the_parameter():
    with pytest.raises(ValueError, match="alphas"):
        BracketGrid(alphas=())
    with pytest.raises(ValueError, match="datasets"):
        BracketGrid(alphas=(1.0,), datasets=(0, 0))
    with pytest.raises(ValueError, match="d must be a positive integer"):
        BracketGrid(alphas=(1.0,), d=0)
    with pytest.raises(ValueError, match="restarts"):
        bracket_sweep(BracketGrid(alphas=(1.0,), d=20), restarts=0)
    with pytest.raises(ValueError, match="noise"):
        bracket_sweep(BracketGrid(alphas=(1.0,), d=20), noise=-1.0)


def _rs_delta_e(alpha, omega=0.3):
    """The replica-symmetric Delta e_t of the committed phase diagram at the nearest grid point."""
    t = read_csv(os.path.join(ROOT, "results", "phase_diagram", "diagram.csv"))
    sel = np.isclose(np.asarray(t["omega"], float), omega)
    a = np.asarray(t["alpha"], float)[sel]
    i = int(np.argmin(np.abs(a - alpha)))
    return float(np.asarray(t["delta_e"], float)[sel][i]), float(a[i])


def test_small_run_has_the_sign_of_the_replica_symmetric_delta_e_far_from_alpha_c():
    alphas = (0.8, 2.2)           # the largest RS Delta e_t on the positional side; well into the semantic side
    rows = bracket_sweep(BracketGrid(alphas=alphas, datasets=tuple(range(8)), d=80), restarts=2, lanczos_steps=10,
                         config=TrainConfig(max_steps=300), options=RunOptions(progress=False, chunk_size=16))
    assert set(TASK_COLUMNS) <= set(rows) and len(rows["alpha"]) == 16
    assert np.all(np.isfinite(rows["delta_e"])) and np.all(rows["n_converged_positional"] >= 1)
    assert np.all(rows["n_converged_semantic"] >= 1)
    # the best of the restarts is the lowest; the students sit in their subspaces
    assert np.all(rows["e_positional"] <= rows["e_worst_positional"])
    assert np.all(rows["e_semantic"] <= rows["e_half_semantic"])
    np.testing.assert_allclose(rows["delta_e"], rows["e_semantic"] - rows["e_positional"], rtol=1e-6, atol=1e-9)
    assert np.all(np.abs(rows["theta_positional"]) < 1e-5) and np.all(np.abs(rows["m_semantic"]) < 1e-5)
    table = summarize_bracket(rows)
    for alpha in alphas:
        rs, at = _rs_delta_e(alpha)
        assert at == pytest.approx(alpha)
        t = (table["alpha"] == alpha) & (table["branch"] == "positional")
        # far from alpha_c the paired difference has the RS sign (0.8: positional lower; 2.2: semantic lower)
        assert np.sign(table["delta_e"][t][0]) == np.sign(rs)
        # pairing on the same data: the paired error is below the unpaired one
        assert table["delta_e_err"][t][0] < table["delta_e_err_unpaired"][t][0]
    t = (table["alpha"] == 2.2) & (table["branch"] == "positional")
    assert abs(table["delta_e"][t][0]) > 2 * table["delta_e_err"][t][0]


def test_command_refuses_bad_input_in_one_line(run_cli, tmp_path):
    code, _, err = run_cli(["bracket", "--ds", "50", "--datasets", "2", "3", "--out", str(tmp_path / "b")])
    assert code == 2 and err.count("\n") == 1 and "--datasets" in err
    code, _, err = run_cli(["bracket", "--ds", "50", "50", "--out", str(tmp_path / "b")])
    assert code == 2 and "--ds" in err
    code, _, err = run_cli(["bracket", "--replot", "--out", str(tmp_path / "none")])
    assert code == 2 and "bracket_tasks.csv" in err


@pytest.mark.slow
def test_command_writes_and_replots_and_guards_its_files(run_cli, tmp_path):
    out = tmp_path / "rsb"
    out.mkdir()
    (out / "other.csv").write_text("a\n1\n")          # another command's file in the same folder is left alone
    argv = ["bracket", "--ds", "60", "90", "--datasets", "3", "--alphas", "0.7", "1.25", "2.2", "--restarts", "2",
            "--max-steps", "300", "--lanczos-steps", "10", "--no-progress", "--out", str(out)]
    code, stdout, err = run_cli(argv)
    assert code == 0, err
    for name in ("bracket_tasks.csv", "bracket.csv", "bracket_summary.json", "bracket.png"):
        assert (out / name).exists()
    assert (out / "other.csv").read_text() == "a\n1\n"
    summary = json.loads((out / "bracket_summary.json").read_text())   # strict JSON: NaN would not parse
    assert summary["ds"] == [60, 90] and len(summary["extrapolation"]) == 3
    assert summary["replica_symmetric"]["alpha_c"] == pytest.approx(1.2513, abs=0.01)
    assert "upper" in summary["what"]
    code, _, err = run_cli(argv)                      # the results exist: refused without --overwrite
    assert code == 2 and "--overwrite" in err
    shutil.copy(out / "bracket.csv", tmp_path / "computed.csv")
    code, _, err = run_cli(["bracket", "--replot", "--out", str(out), "--overwrite"])
    assert code == 0, err
    # re-derived from bracket_tasks.csv by the same float64 arithmetic: 1e-12 relative
    assert_same_csv(out / "bracket.csv", tmp_path / "computed.csv", rtol=RTOL_REDERIVED)
