"""Verdicts of the phase diagram: where a branch exists, where it is absent (and where it ends), where a cell is
unresolved; the commands' exit codes follow them."""

import json
import subprocess
import sys

import numpy as np
import pytest

from phasejax.phase import PHASE_BRANCHES, PhaseGrid, branch_verdicts
from phasejax.phase.diagram import collapse_point, point_verdicts
from phasejax.solvers import Status


def test_collapse_point_is_the_root_of_the_pitchfork_line():
    """v^2 linear in alpha (a pitchfork): the end is the root of the line, whichever side the branch lives on."""
    a = np.linspace(0.3, 1.5, 13)
    x_end = 0.735
    v = np.sqrt(np.clip(0.4 * (a - x_end), 0.0, None))          # branch alive above x_end
    live = v > 1e-5
    x, lo, hi = collapse_point(a, v, live, j=2)
    assert (lo, hi) == (pytest.approx(0.7), pytest.approx(0.8))
    assert x == pytest.approx(x_end, abs=1e-12)
    # mirrored: alive below the end (the positional branch collapsing at large alpha)
    w = np.sqrt(np.clip(0.4 * (x_end - a), 0.0, None))
    x2, lo2, hi2 = collapse_point(a, w, w > 1e-5, j=10)
    assert (lo2, hi2) == (pytest.approx(0.7), pytest.approx(0.8)) and x2 == pytest.approx(x_end, abs=1e-12)
    # one live point next to the collapse: the interval's midpoint
    one = np.where(np.arange(13) == 12, 0.2, 0.0)
    assert collapse_point(a, one, one > 0, j=3)[0] == pytest.approx(0.5 * (a[11] + a[12]))
    assert collapse_point(a, np.zeros(13), np.zeros(13, bool), j=3) is None


def _points(grid, m, theta, status):
    """A points table of one track: `m`, `theta`, `status` of shape `(n_omega, 2, n_alpha)`."""
    W, B, A = np.meshgrid(grid.omegas, np.arange(2), grid.alphas, indexing="ij")
    conv = status == Status.CONVERGED
    return dict(omega=W.ravel(), alpha=A.ravel(), branch=B.ravel(), track=np.zeros(W.size, int),
                distinct=conv.ravel(), is_branch=conv.ravel(), converged=conv.ravel(), status=status.ravel(),
                m=m.ravel(), theta=theta.ravel())


def test_branch_verdicts_on_a_row_with_both_collapses_and_a_hole():
    a = np.round(np.linspace(0.4, 1.6, 13), 10)
    grid = PhaseGrid(tuple(a), (0.1, 0.3))
    m = np.zeros((2, 2, 13))
    theta = np.zeros((2, 2, 13))
    status = np.full((2, 2, 13), int(Status.CONVERGED))
    m[:, 0] = np.sqrt(np.clip(0.3 * (1.25 - a), 0.0, None))           # positional ends at 1.25
    theta[:, 1] = np.sqrt(np.clip(0.2 * (a - 0.62), 0.0, None))        # semantic ends at 0.62
    status[1, 1, 9] = int(Status.MAX_ITERATIONS)                       # a hole at omega 0.3, alpha 1.3
    pts = _points(grid, m, theta, status)
    cells, ends = branch_verdicts(grid, pts)
    assert cells.shape == (2, 13, 2)
    np.testing.assert_allclose(ends[:, 0], 1.25, atol=1e-12)
    np.testing.assert_allclose(ends[:, 1], 0.62, atol=1e-12)
    assert cells[0, 2, 1] == "absent: collapses onto theta = 0 at alpha = 0.620 (between 0.6 and 0.7)"
    assert cells[0, 0, 1].startswith("absent: collapses onto theta = 0 at alpha = 0.620")
    assert cells[0, 12, 0] == "absent: collapses onto m = 0 at alpha = 1.250 (between 1.2 and 1.3)"
    assert cells[0, 8, 0] == "converged" and cells[0, 5, 1] == "converged"
    assert cells[1, 9, 1] == "unresolved: max_iterations"
    from phasejax.phase import PhaseDiagram          # a diagram without verdict columns derives them
    assert PhaseDiagram(grid=grid, points=pts, table={}, thresholds={}, config={}).unresolved() == [
        (0.3, 1.3, "semantic", "unresolved: max_iterations")]
    per_point = point_verdicts(grid, pts, cells)
    assert len(per_point) == len(pts["omega"])
    assert sum(v.startswith("unresolved") for v in per_point) == 1


def test_a_row_without_any_branch_point_says_so():
    grid = PhaseGrid((0.5, 1.0), (0.0,))
    z = np.zeros((1, 2, 2))
    cells, ends = branch_verdicts(grid, _points(grid, z, z, np.zeros((1, 2, 2), int)))
    assert all(c.startswith("absent: on") for c in cells.ravel())
    assert np.all(np.isnan(ends))


def test_point_verdicts_of_the_solve_command_and_the_holes_of_a_diagram():
    from phasejax.commands.solve import point_verdict
    from phasejax.phase import PhaseDiagram

    row = dict(converged=True, status="converged", branch="semantic", theta=3e-12, m=0.0)
    assert point_verdict(row).startswith("absent: the fixed point lies on the invariant plane theta = 0")
    assert point_verdict(dict(row, theta=0.05)) == "converged"
    assert point_verdict(dict(row, converged=False, status="max_iterations")) == "unresolved: max_iterations"
    assert point_verdict(dict(row, branch="positional", m=-2e-7)).startswith("absent: the fixed point lies on "
                                                                            "the invariant plane m = 0")
    grid = PhaseGrid((0.5, 1.0), (0.0, 0.3))
    cells = np.full((2, 2), "converged", dtype=object)
    holed = cells.copy()
    holed[1, 0] = "unresolved: max_iterations"
    pd = PhaseDiagram(grid=grid, points={}, table=dict(verdict_positional=cells, verdict_semantic=holed),
                      thresholds={}, config={})
    assert pd.unresolved() == [(0.3, 0.5, "semantic", "unresolved: max_iterations")]
    assert PhaseDiagram(grid=grid, points={}, table=dict(verdict_positional=cells, verdict_semantic=cells),
                        thresholds={}, config={}).unresolved() == []


@pytest.mark.slow
def test_solve_exits_nonzero_naming_the_point_that_did_not_converge():
    """A tolerance no solve can meet: every point stops at its cap; the command prints them and exits 1."""
    out = subprocess.run([sys.executable, "-m", "phasejax.cli", "solve", "--alpha", "2", "--omega", "0.3",
                          "--branch", "positional", "--nodes", "3", "--tol", "1e-300"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stderr[-2000:]
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert row["status"] == "max_iterations" and row["verdict"] == "unresolved: max_iterations"
    err = out.stderr.strip().splitlines()
    assert err[-1].startswith("phasejax solve: error: 1 of 1 points did not converge: alpha=2 omega=0.3")
    assert PHASE_BRANCHES == ("positional", "semantic")
