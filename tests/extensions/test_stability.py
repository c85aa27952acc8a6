"""The replicon columns of an extension's theory table (phasejax.extensions.stability): a closed form through the
table path, the overlaps' round trip through the flattened columns, NaN where a row did not converge, and the
summary's counts."""

import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.extensions.stability import replicon_summary, with_replicon
from phasejax.theory import gauss_hermite, make_params
from phasejax.theory.fields import Overlaps
from phasejax.theory.quadrature import FixedRule
from phasejax.theory.replicon import REPLICON_COLUMNS, overlaps_from_columns, replicon_table


def linear_output(h, params):
    return h[:1, :1]


def identity_target(hstar, params):
    return hstar[:1, :1]


def ridge_V0(alpha, sigma, lam):
    """Ridge regression's `V0` in closed form (the positive root of `lam s4 V0^2 + (lam + alpha s4 - s4) V0 = 1`)."""
    s4 = sigma**4
    a, b = lam * s4, lam + alpha * s4 - s4
    return (-b + np.sqrt(b * b + 4 * a)) / (2 * a)


def test_ridge_rows_give_the_closed_form_replicon_and_nan_where_not_converged():
    """`L = r = t = 1`, linear output (ridge regression): the replicon is `alpha (s2 V / (1 + s2 V))^2` with
    `V = sigma^2 V0`, per row at that row's alpha; the row that did not converge gets NaN."""
    sigma, lam = 0.7, 0.1
    params = make_params(1.0, 0.0, sigma=sigma, lam=lam, A=np.eye(1), target=identity_target,
                         student=linear_output)
    rule = FixedRule(gauss_hermite(2, 4))
    alphas = np.array([0.5, 2.0, 3.0])
    V0 = ridge_V0(alphas, sigma, lam)
    table = dict(alpha=alphas, omega=np.zeros(3), status=np.array(["converged", "max_iterations", "converged"]),
                 q0_0=np.full(3, 0.3), m0_0=np.zeros(3), V0_0=V0, theta0_0=np.full(3, 0.2))
    seen = []
    cols = replicon_table(table, lambda row: (params, rule), progress=lambda done, total: seen.append((done, total)))
    assert set(cols) == set(REPLICON_COLUMNS) and seen[-1] == (3, 3)
    V = sigma**2 * V0
    expected = alphas * (sigma**2 * V / (1 + sigma**2 * V)) ** 2
    np.testing.assert_allclose(cols["replicon"][[0, 2]], expected[[0, 2]], rtol=1e-9)
    np.testing.assert_allclose(cols["replicon_regular"][[0, 2]], expected[[0, 2]], rtol=1e-9)
    assert np.all(np.abs(cols["replicon_jump"][[0, 2]]) < 1e-15)          # one minimum per node: no jump
    assert all(np.isnan(cols[k][1]) for k in REPLICON_COLUMNS)
    full = with_replicon(table, lambda row: (params, rule))
    assert with_replicon(full, lambda row: pytest.fail("columns present: nothing is recomputed")) is full


def test_overlaps_round_trip_through_the_flattened_columns():
    params = make_params(1.0, 0.3, r=2)                       # r = 2, K = 1, t = 1
    with float64_scope():
        ov = Overlaps(q0=jnp.array([[0.4, 0.1], [0.2, 0.3]]), m=jnp.array([[0.5, -0.1]]),
                      V0=jnp.array([[3.0, 0.7], [0.6, 2.0]]), theta0=jnp.array([[0.2, 0.05]]))
        table = {}
        for name, arr in (("q0", ov.q0), ("m0", ov.m), ("V0", ov.V0), ("theta0", ov.theta0)):
            for j, v in enumerate(np.asarray(arr).ravel()):      # result_columns' naming: row-major entries
                table[f"{name}_{j}"] = np.array([0.0, v])
        back = overlaps_from_columns(table, 1, params)
    for a, b in zip((back.q0, back.m, back.V0, back.theta0), (ov.q0, ov.m, ov.V0, ov.theta0)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    del table["theta0_1"]
    with pytest.raises(ValueError, match="theta0_1"):
        overlaps_from_columns(table, 1, params)


def test_summary_counts_stable_rows_per_branch():
    table = dict(alpha=np.array([1.0, 1.5, 2.0, 1.0]), omega=np.full(4, 0.3), branch=np.array(["a", "a", "a", "b"]),
                 status=np.array(["converged", "converged", "converged", "max_iterations"]),
                 replicon=np.array([0.5, 0.9, 2.0, np.nan]), replicon_regular=np.array([0.5, 0.9, 0.4, np.nan]),
                 replicon_regular_err=np.array([0.1, 0.2, 0.1, np.nan]),
                 replicon_jump=np.array([0.0, 0.0, 1e-3, np.nan]))
    s = replicon_summary(table)
    # row 2: regular part + its error above 1; row 3: a jump term
    assert s["a"] == dict(converged=3, with_replicon=3, rs_stable=1, rs_stable_at=[[1.0, 0.3]])
    assert s["b"]["converged"] == 0 and s["b"]["rs_stable"] == 0 and s["grouped_by"] == "branch"


def _rows(path):
    import csv

    return list(csv.DictReader(open(path)))


def test_committed_value_reference_replicon_matches_the_phase_diagram():
    """The value extension's tied reference (replicon added from its CSV's overlap columns by the standalone
    `replicon`: every node's prox from `omega`, `-omega` and the mirror of the lowest minimum) against the main
    job's `points.csv` (replicon inside the compiled rows, from the minima the SE solver tracked), at the shared
    `(alpha, 0.3, branch)`: two computations with different prox starts agree within their quadrature errors, the
    value, its regular part and the jump strength."""
    import os

    root = os.path.join(os.path.dirname(__file__), "..", "..", "results")
    main = {(r["branch"], round(float(r["alpha"]), 6)): r
            for r in _rows(os.path.join(root, "phase_diagram", "points.csv"))
            if abs(float(r["omega"]) - 0.3) < 1e-9 and r["is_branch"] in ("1", "True", "true")}
    shared = 0
    for r in _rows(os.path.join(root, "extensions", "value", "theory.csv")):
        key = (r["branch"], round(float(r["alpha"]), 6))
        if r["status"] != "converged" or r["is_branch"] not in ("1", "True", "true") or key not in main:
            continue
        m = main[key]
        shared += 1
        for col in ("replicon", "replicon_regular", "replicon_jump"):
            err = np.hypot(float(r[col + "_err"]), float(m[col + "_err"]))
            assert abs(float(r[col]) - float(m[col])) <= err, (key, col, r[col], m[col], err)
    assert shared >= 20
