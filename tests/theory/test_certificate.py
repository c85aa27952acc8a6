"""A certificate for the default quadrature from a rule of another family (scrambled Sobol).

`test_error_coverage.py` compares the default `SplitProductRule` with a larger rule of the same family, which
cannot see a bias the family shares. Here the references are solved with `SobolRule` (four scrambles of
2**16 points, errors from their standard error): `tests/theory/data/certificate_references.json`, made by
`scripts/checks/make_certificate_references.py`, both branches at alpha in {0.5, 0.8, 1.1, 1.5, 2.0} x omega in
{0, 0.3} plus points of the semantic branch's collapse region. Rows whose Sobol solve did not converge are
stored with their status and are left out.

Two checks per point and quantity (q, m, V, theta, test_error, train_loss; components held at zero by the
branch's invariant subspace are left out):

* coverage: |default - reference| <= sqrt(err_default^2 + err_reference^2), both 95% half-widths;
* width: the default's own 95% half-width is at most 0.2% of the value (of max(|value|, 0.01) for the
  overlaps q, m, theta, which can vanish where a branch collapses) and at most 1e-6 for train_loss.

Cases that fail on the current default are marked `xfail(strict=True)` with the measured numbers
(`KNOWN_FAILURES`, per layout of the rule): the suite records the gap, and a case that starts to pass
must have its mark removed. The default suite checks the points in `CORE`; under `-m slow` the other points
run, and the same checks run on the other layout of the rule
(`teacher_coordinates` flipped), and `test_certificate_references_are_reproducible` recomputes a reference.
"""

import importlib.util
import json
import os

import jax
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.solvers import STATUS_NAMES, status_name
from phasejax.theory import branch_init, default_scheme, make_params, result_columns, solve_state_evolution_batch
from phasejax.theory.branches import stack_inits

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
with open(os.path.join(HERE, "data", "certificate_references.json")) as fh:
    REFERENCES = json.load(fh)
CERTIFIED = [p for p in REFERENCES["points"] if p["status"] == "converged"]
KEYS = ("q", "m", "V", "theta", "test_error", "train_loss")
HELD = {"positional": ("theta",), "semantic": ("m",)}     # zero in the branch's invariant subspace
REL_WIDTH = 2e-3
TRAIN_LOSS_WIDTH = 1e-6
OVERLAP_FLOOR = 0.01

# The cases that fail, as measured, for each layout of the default rule (`SplitProductRule.teacher_coordinates`):
# (point id, key, check) -> the numbers. Each is marked xfail(strict=True) when its layout is the one tested.
# "teacher" (the default): the rule built in coordinates where the teacher's field is one of the axes, so
# that on the semantic branch the jump sheet between mirror minima is the plane the rule is split on; what
# remains is the edge of the semantic branch (alpha = 0.8) and the positional q at alpha = 1.5, 2 slightly
# above 0.2%. "plain": the (xi, eta) layout. On the semantic branch (theta0 > 0) the teacher's field
# moves with the student's, the sheet is curved in (xi, eta), and the planar split misses it: errors of 1-9%,
# a value off the reference by about half of them, and a stall at omega = 0.3, alpha = 0.8
# (docs/theory.md, section 8.2).
# Measured as the suite runs (tests/conftest.py: XLA optimisation level 1). A 95% half-width from four
# replicas is itself uncertain (4 degrees of freedom), and where nodes sit at ties between minima a last-bit
# change moves it by up to 25% (plain layout, semantic) or a few % (positional): cases within about 10% of
# the 0.2% line can flip with such changes (teacher: positional:1.1:0.3 q at 0.96x, semantic:0.9:0.3 theta
# at 0.96x, positional:1.5:0.3 q at 1.04x; plain: semantic:0.8:0.3 q at 1.02x, positional:1.1:0.3 q at
# 0.97x, and the coverage of semantic:1.5:0.0 V at 0.997x). Where one flips, re-measure and update this
# table; do not widen the target.
KNOWN_FAILURES = {
    "plain": {
        ("semantic:0.8:0.0", "q", "width"): "0.0705679 +- 0.00016 (0.23%; Sobol 0.0704411 +- 4.5e-05)",
        ("semantic:0.8:0.0", "V", "width"): "19.6295 +- 0.21 (1%; Sobol 19.7864 +- 0.031)",
        ("semantic:0.8:0.0", "theta", "width"): "0.0988649 +- 0.0011 (1.1%; Sobol 0.0980573 +- 0.00016)",
        ("semantic:0.8:0.0", "test_error", "width"): "0.0037882 +- 3.1e-05 (0.83%; Sobol 0.00381126 +- 4.7e-06)",
        ("semantic:1.1:0.0", "V", "width"): "15.8822 +- 0.036 (0.23%; Sobol 15.916 +- 0.011)",
        ("semantic:1.1:0.0", "test_error", "width"): "0.00283458 +- 6.2e-06 (0.22%; Sobol 0.0028392 +- 1.6e-06)",
        ("semantic:0.8:0.3", "status", "status"): "stops at max_iterations after 80 iterations (Sobol converges in 26)",
        ("semantic:0.8:0.3", "q", "width"): "0.0567235 +- 0.00012 (0.2%; Sobol 0.0567263 +- 1.4e-05)",
        ("semantic:0.8:0.3", "V", "width"): "26.8042 +- 1.5 (5.6%; Sobol 26.4122 +- 0.08)",
        ("semantic:0.8:0.3", "theta", "width"): "0.056632 +- 0.012 (22%; Sobol 0.0597564 +- 0.00061)",
        ("semantic:0.8:0.3", "test_error", "width"): "0.00348345 +- 0.00015 (4.3%; Sobol 0.00344511 +- 7.6e-06)",
        ("semantic:1.1:0.3", "q", "width"): "0.0734568 +- 0.00029 (0.39%; Sobol 0.0736391 +- 3.4e-05)",
        ("semantic:1.1:0.3", "V", "width"): "20.3171 +- 0.35 (1.7%; Sobol 20.1051 +- 0.035)",
        ("semantic:1.1:0.3", "theta", "width"): "0.104211 +- 0.0016 (1.6%; Sobol 0.105183 +- 0.00016)",
        ("semantic:1.1:0.3", "test_error", "width"): "0.00265499 +- 3.6e-05 (1.3%; Sobol 0.00263362 +- 3.5e-06)",
        ("positional:1.5:0.3", "q", "width"): "0.0494394 +- 0.0001 (0.21%; Sobol 0.0495153 +- 7.9e-05)",
        ("positional:2.0:0.3", "q", "width"): "0.0511131 +- 0.00013 (0.25%; Sobol 0.0511524 +- 0.00013)",
        ("semantic:1.1281818181818182:0.3", "q", "width"): "0.0750231 +- 0.00026 (0.34%; Sobol 0.0751719 +- 3e-05)",
        ("semantic:1.1281818181818182:0.3", "V", "width"): "19.8826 +- 0.25 (1.2%; Sobol 19.7332 +- 0.029)",
        ("semantic:1.1281818181818182:0.3", "theta", "width"): "0.107147 +- 0.0011 (1%; Sobol 0.107814 +- 0.00013)",
        ("semantic:1.1281818181818182:0.3", "test_error", "width"):
            "0.00259122 +- 2.5e-05 (0.96%; Sobol 0.00257622 +- 3e-06)",
        ("semantic:0.9:0.3", "q", "width"): "0.0622648 +- 0.0003 (0.49%; Sobol 0.0624418 +- 2.6e-05)",
        ("semantic:0.9:0.3", "V", "width"): "24.1594 +- 1.1 (4.6%; Sobol 23.5347 +- 0.085)",
        ("semantic:0.9:0.3", "theta", "width"): "0.0774602 +- 0.0069 (8.9%; Sobol 0.0811429 +- 0.00048)",
        ("semantic:0.9:0.3", "test_error", "width"): "0.0031737 +- 0.00012 (3.7%; Sobol 0.00311178 +- 8.3e-06)",
    },
    "teacher": {
        ("semantic:0.8:0.0", "q", "width"): "0.0704939 +- 0.00019 (0.26%; Sobol 0.0704411 +- 4.5e-05)",
        ("semantic:0.8:0.0", "theta", "width"): "0.0979066 +- 0.00022 (0.23%; Sobol 0.0980573 +- 0.00016)",
        ("semantic:0.8:0.0", "train_loss", "width"): "err 1.1e-06 > 1e-6",
        ("semantic:0.8:0.3", "q", "width"): "0.0566465 +- 0.00017 (0.3%; Sobol 0.0567263 +- 1.4e-05)",
        ("semantic:0.8:0.3", "V", "width"): "26.4137 +- 0.17 (0.66%; Sobol 26.4122 +- 0.08)",
        ("semantic:0.8:0.3", "theta", "width"): "0.0598394 +- 0.0015 (2.5%; Sobol 0.0597564 +- 0.00061)",
        ("semantic:0.8:0.3", "test_error", "width"): "0.00344429 +- 1.8e-05 (0.53%; Sobol 0.00344511 +- 7.6e-06)",
        ("positional:1.5:0.3", "q", "width"): "0.0494394 +- 0.0001 (0.21%; Sobol 0.0495153 +- 7.9e-05)",
        ("positional:2.0:0.3", "q", "width"): "0.0511131 +- 0.00013 (0.24%; Sobol 0.0511524 +- 0.00013)",
        ("semantic:0.9:0.3", "theta", "width"): "0.0807674 +- 0.00016 (0.201%; Sobol 0.0811429 +- 0.00048)",
    },
}


def _layout(scheme) -> str:
    return "teacher" if getattr(scheme, "teacher_coordinates", False) else "plain"


def _expect(request, solves, point_id, key, check):
    """Mark the running case xfail(strict=True) when it is a measured failure of the tested layout."""
    reason = KNOWN_FAILURES[solves["layout"]].get((point_id, key, check))
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"measured ({solves['layout']} layout): {reason}"))


# The points the default suite checks: both branches at both omegas, the semantic branch's edge (0.8) and its
# collapse region (0.9 at omega = 0.3); the other certified points run under `-m slow`.
CORE = ("semantic:0.8:0.0", "semantic:2.0:0.0", "positional:0.5:0.3", "positional:1.5:0.3", "semantic:0.9:0.3",
        "semantic:1.1:0.3", "semantic:2.0:0.3")


def _marks(point_id):
    return () if point_id in CORE else (pytest.mark.slow,)


def _cases():
    return [pytest.param(ref["id"], key, id=f"{ref['id']}-{key}", marks=_marks(ref["id"]))
            for ref in CERTIFIED for key in KEYS if key not in HELD[ref["branch"]]]


def _selected_points(request) -> list:
    """The certified points that the selected tests of this run check (all of them under `-m slow`)."""
    ids = {item.callspec.params.get("point_id") for item in request.session.items if hasattr(item, "callspec")}
    return [p for p in CERTIFIED if p["id"] in ids]


def solve_defaults(points=CERTIFIED, quadrature=None):
    """The default solve (or `quadrature`'s) at every point, in one batched call: `{point id: columns}`."""
    params = make_params(1.0, 0.0)
    alpha = np.asarray([p["alpha"] for p in points])
    omega = np.asarray([p["omega"] for p in points])
    with float64_scope():
        inits = stack_inits([branch_init(p["branch"], params) for p in points])
    res = solve_state_evolution_batch(params, alpha, omega, inits, quadrature, batched_init=True)
    out = {}
    with float64_scope():
        for i, ref in enumerate(points):
            one = result_columns(_index(res, i), params.replace(alpha=alpha[i], omega=omega[i]))
            out[ref["id"]] = {k: (status_name(v) if k == "status" else float(v)) for k, v in one.items()}
    return out


@pytest.fixture(scope="module", params=[
    pytest.param("default", id="default"),
    pytest.param("other", id="other_layout", marks=pytest.mark.slow),
])
def default_solves(request):
    """`{"layout": ..., point id: columns}` for the default rule, and (slow) for the same rule in the other
    layout (`teacher_coordinates` flipped), whose measured failures are recorded too."""
    scheme = default_scheme(make_params(1.0, 0.0))
    if request.param == "other":
        scheme = scheme.replace(teacher_coordinates=not scheme.teacher_coordinates)
    points = _selected_points(request)
    return dict(solve_defaults(points, None if request.param == "default" else scheme) if points else {},
                layout=_layout(scheme))


def _index(tree, i):
    return jax.tree_util.tree_map(lambda a: a[i], tree)


def _ref(point_id):
    return next(p for p in CERTIFIED if p["id"] == point_id)


def test_certificate_covers_both_branches_and_the_collapse_region():
    ids = {p["id"] for p in CERTIFIED}
    assert len(CERTIFIED) >= 12
    assert set(CORE) <= ids           # the default suite's points are certified ones
    for branch in ("positional", "semantic"):
        assert sum(p["branch"] == branch for p in CERTIFIED) >= 4, branch
    assert {p["rule"]["name"] for p in REFERENCES["points"]} == {"SobolRule"}
    # a row left out of the certificate carries the status that says why
    for p in REFERENCES["points"]:
        assert p["status"] in STATUS_NAMES.values()
        assert (p["status"] == "converged") == (p["id"] in ids)


@pytest.mark.parametrize("point_id", [pytest.param(p["id"], marks=_marks(p["id"])) for p in CERTIFIED])
def test_default_converges_at_the_certified_points(request, default_solves, point_id):
    _expect(request, default_solves, point_id, "status", "status")
    got = default_solves[point_id]
    assert got["status"] == "converged", (got["status"], got["iterations"])


@pytest.mark.parametrize("point_id,key", _cases())
def test_default_within_its_errors_of_the_sobol_reference(request, default_solves, point_id, key):
    _expect(request, default_solves, point_id, key, "cover")
    ref, got = _ref(point_id), default_solves[point_id]
    bound = float(np.hypot(got[key + "_err"], ref[key + "_err"]))
    assert abs(got[key] - ref[key]) <= bound, (got[key], got[key + "_err"], ref[key], ref[key + "_err"])


@pytest.mark.parametrize("point_id,key", _cases())
def test_default_errors_meet_the_accuracy_target(request, default_solves, point_id, key):
    _expect(request, default_solves, point_id, key, "width")
    got = default_solves[point_id]
    if key == "train_loss":
        assert got[key + "_err"] <= TRAIN_LOSS_WIDTH, (got[key], got[key + "_err"])
        return
    scale = abs(got[key]) if key in ("V", "test_error") else max(abs(got[key]), OVERLAP_FLOOR)
    assert got[key + "_err"] <= REL_WIDTH * scale, (got[key], got[key + "_err"])


@pytest.mark.slow
def test_certificate_references_are_reproducible():
    """One reference recomputed with the generator's own function agrees with the stored row."""
    spec = importlib.util.spec_from_file_location(
        "make_certificate_references", os.path.join(ROOT, "scripts", "checks", "make_certificate_references.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    ref = _ref("semantic:2.0:0.3")
    rule = REFERENCES["rule"]
    row = gen.reference_point(ref["branch"], ref["alpha"], ref["omega"], log2_n=rule["log2_n"], seed=rule["seed"],
                              n_replicas=rule["n_replicas"])
    assert row["status"] == ref["status"]
    for key in KEYS:
        assert row[key] == pytest.approx(ref[key], rel=1e-6, abs=1e-12), key
        assert row[key + "_err"] == pytest.approx(ref[key + "_err"], rel=1e-4, abs=1e-12), key
