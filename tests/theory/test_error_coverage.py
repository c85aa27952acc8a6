"""The default's reported quadrature errors cover its actual deviation from a rule 11 times larger.

References: `tests/theory/data/se_references.json`, made by `scripts/checks/make_se_references.py` with
`SplitProductRule(n_smooth=10, eta_step=0.3, n_piece=24)` (225,600 nodes, its own replica errors) at
alpha in {0.5, 1.1} x omega in {0, 0.3}, both branches. The slow test recomputes one reference.
"""

import json
import os

import numpy as np
import pytest

from phasejax.theory import SplitProductRule, make_params, solve_state_evolution

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "data", "se_references.json")) as fh:
    REFERENCES = json.load(fh)
CONVERGED = [p for p in REFERENCES["points"] if p["status"] == "converged"]
KEYS = ("q", "m", "V", "theta", "train_loss", "test_error")


# The alpha = 1.1 points run in the default suite, the alpha = 0.5 ones (which include the slow semantic solve
# that stops at max_iterations) behind -m slow: the same checks on each half.
GROUPS = [pytest.param(1.1, id="alpha_1.1"), pytest.param(0.5, id="alpha_0.5", marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=GROUPS)
def default_solves(request):
    """`(references, default solves)` at one alpha (both omegas, both branches)."""
    refs = [p for p in CONVERGED if p["alpha"] == request.param]
    out = []
    for ref in refs:
        res = solve_state_evolution(make_params(ref["alpha"], ref["omega"]), ref["branch"])
        row = dict(status=res.status_name, train_loss=float(res.train_loss), test_error=float(res.test_error),
                   train_loss_err=float(res.errors.train_loss), test_error_err=float(res.errors.test_error))
        for key in ("q", "m", "V", "theta"):
            row[key] = float(np.ravel(getattr(res, key))[0])
            row[key + "_err"] = float(np.ravel(getattr(res, key + "_err"))[0])
        out.append(row)
    return refs, out


def _converged_pairs(default_solves):
    """Pairs where the default converged too. Known exception: the semantic subspace at alpha = 0.5,
    omega = 0.3 collapses to theta = 0 (the larger rule converges there); near theta = 0 the default's map is
    marginal (F_theta(theta) ~ theta) and its Jacobian misses the jump terms, so Newton crawls and stops at
    max_iterations with theta ~ 3e-3. It must say so (status), not pass as converged."""
    refs, solves = default_solves
    pairs = [(r, g) for r, g in zip(refs, solves) if g["status"] == "converged"]
    assert len(pairs) >= len(refs) - 1, [g["status"] for g in solves]
    for r, g in zip(refs, solves):
        if g["status"] != "converged":
            assert (r["alpha"], r["omega"], r["branch"]) == (0.5, 0.3, "semantic"), (r, g["status"])
    return pairs


def test_references_cover_both_branches_at_every_point():
    assert len(CONVERGED) >= 7
    for a in (0.5, 1.1):
        for w in (0.0, 0.3):
            assert {p["branch"] for p in REFERENCES["points"] if p["alpha"] == a and p["omega"] == w} == \
                {"positional", "semantic"}


def test_reported_errors_cover_the_deviation_from_the_larger_rule(default_solves):
    """Each |default - reference| is within the sum of the two 95% half-widths (plus solver tolerance)."""
    misses = []
    for ref, got in _converged_pairs(default_solves):
        for key in KEYS:
            dev = abs(got[key] - ref[key])
            bound = got[key + "_err"] + ref[key + "_err"] + 1e-6 * max(1.0, abs(ref[key]))
            if dev > bound:
                misses.append((ref["alpha"], ref["omega"], ref["branch"], key, dev, bound))
    assert not misses, misses


def test_default_meets_the_accuracy_target_at_the_reference_points(default_solves):
    """q, m, theta, V within 0.5% (of the larger of the value and 0.01) and e_t within 2e-6 of the reference,
    up to the reference's own 95% error (semantic V at alpha = 1.1, omega = 0.3 is known only to 0.6%)."""
    for ref, got in _converged_pairs(default_solves):
        for key in ("q", "m", "V", "theta"):
            tol = 5e-3 * max(abs(ref[key]), 0.01 if key != "V" else 1.0) + ref[key + "_err"]
            assert abs(got[key] - ref[key]) <= tol, (ref, key)
        assert abs(got["train_loss"] - ref["train_loss"]) <= 2e-6 + ref["train_loss_err"]


@pytest.mark.slow
def test_references_are_reproducible():
    ref = next(p for p in CONVERGED if p["alpha"] == 1.1 and p["omega"] == 0.3 and p["branch"] == "positional")
    rule = SplitProductRule(**{k: v for k, v in REFERENCES["rule"].items() if k != "name"})
    res = solve_state_evolution(make_params(ref["alpha"], ref["omega"]), ref["branch"], rule)
    for key in ("q", "m", "V"):
        assert float(np.ravel(getattr(res, key))[0]) == pytest.approx(ref[key], rel=1e-6)
    assert float(res.train_loss) == pytest.approx(ref["train_loss"], rel=1e-7)
