"""Tests of `phasejax.extensions.huber`: the declared Huber loss of the main model, its thresholds from theory and
students (paired by seed), the replicon per loss, the docs page's example of a user's loss (run as a doctest), the
committed results against the facts the page states, and a small end-to-end run (slow)."""

import doctest
import os
import shutil

import numpy as np
import pytest

from phasejax.extensions import huber
from phasejax.theory import HuberLoss, SquareLoss

from _compare import RTOL_REDERIVED, assert_same_outputs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "results", "extensions", "huber")
COMMITTED = pytest.mark.skipif(not os.path.exists(os.path.join(RESULTS, "runs.csv")), reason="no committed outputs")


def test_the_problems_declare_their_loss():
    assert huber.huber_params().loss == HuberLoss(huber.DELTA)
    assert huber.loss_params("huber", 0.3).loss == HuberLoss(0.3)
    assert type(huber.loss_params("square").loss) is SquareLoss
    with pytest.raises(ValueError, match="loss must be one of"):
        huber.loss_params("absolute")
    problem = huber.replicon_problem(huber.PRESETS["cpu"])
    assert problem({"loss": "huber"})[0].loss == HuberLoss(huber.DELTA)
    assert type(problem({"loss": "square"})[0].loss) is SquareLoss
    assert problem({"loss": "huber"})[1] is problem({"loss": "square"})[1]     # one rule: one compiled replicon


@pytest.mark.parametrize("name", sorted(huber.PRESETS))
def test_every_trained_alpha_has_its_theory_row(name):
    P = huber.PRESETS[name]
    assert set(P.train_alphas) <= set(P.alphas) and P.train_omega in P.omegas and min(P.ds) >= 800


def _synthetic_runs(crossings: dict, seeds=range(6), alphas=(1.0, 1.3, 1.6, 1.9, 2.2), d=800):
    """Runs whose `e_t(semantic) - e_t(positional)` is `0.01 (alpha_c - alpha) + noise(seed)`, the noise of a seed
    common to both losses (the same data set)."""
    noise = {s: 0.002 * np.sin(3.0 * s + 1.0) for s in seeds}
    rows = []
    for loss, ac in crossings.items():
        for a in alphas:
            for s in seeds:
                base = 0.003 + 0.001 * a
                for init, e in (("positional", base), ("semantic", base + 0.01 * (ac - a) + noise[s])):
                    rows.append(dict(loss=loss, omega=0.3, d=d, alpha=a, seed=s, init=init, train_loss=e))
    return {k: np.asarray([r[k] for r in rows]) for k in rows[0]}


def test_student_thresholds_find_the_crossings_and_their_shift_paired_by_seed():
    """A seed's noise moves both losses' crossings alike: the crossings carry it (bootstrap error over seeds),
    their paired shift does not."""
    runs = _synthetic_runs({"huber": 1.55, "square": 1.25})
    rows = {r["loss"]: r for r in huber.student_thresholds(runs)}
    mean_noise = np.mean([0.002 * np.sin(3.0 * s + 1.0) for s in range(6)]) / 0.01   # the seed mean's offset
    for loss, ac in (("huber", 1.55), ("square", 1.25)):
        assert rows[loss]["alpha_c_status"] == "in_grid"
        np.testing.assert_allclose(rows[loss]["alpha_c"], ac + mean_noise, atol=1e-9)   # linear: the fit is exact
        assert rows[loss]["alpha_c_err"] > 0.05
    np.testing.assert_allclose(rows["huber"]["shift"], 0.30, atol=1e-9)
    assert rows["huber"]["shift_err"] < 1e-9 and rows["square"]["shift"] == 0.0


def test_the_replicon_summary_is_per_loss():
    table = dict(loss=np.asarray(["huber", "huber", "square", "square"]), alpha=np.asarray([1.0, 1.0, 1.0, 1.0]),
                 omega=np.full(4, 0.3), branch=np.asarray(["positional", "semantic"] * 2),
                 status=np.full(4, "converged"), replicon=np.asarray([0.3, 0.4, 1.2, 0.3]),
                 replicon_regular=np.asarray([0.3, 0.4, 0.5, 0.3]), replicon_regular_err=np.full(4, 0.01),
                 replicon_jump=np.asarray([0.0, 0.0, 7e-4, 0.0]))
    summary = huber.summarize_replicon(table)
    assert summary["huber"]["positional"]["rs_stable"] == 1 and summary["square"]["positional"]["rs_stable"] == 0
    assert summary["square"]["semantic"]["rs_stable_at"] == [[1.0, 0.3]]


def test_the_pages_example_of_a_users_loss_runs():
    """docs/extensions/huber.md declares a loss in a few lines, solves its state evolution and trains a student
    with it: its examples run and print what the page shows."""
    failed, attempted = doctest.testfile(os.path.join(ROOT, "docs", "extensions", "huber.md"), module_relative=False,
                                         optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert attempted >= 5 and failed == 0


# --------------------------------------------------------------------------- the committed results


@COMMITTED
def test_the_committed_theory_separates_the_losses_and_moves_alpha_c():
    """The Huber SE differs from the square SE by far more than either's quadrature error, at every alpha of both
    branches; `alpha_c` moves to larger alpha by more than three times its error."""
    result = huber.ExtensionResult.load(RESULTS)
    th = result.theory
    for b in huber.INITS:
        rows = {loss: huber._rows(th, loss) for loss in huber.LOSSES}
        sel = {loss: (r["branch"] == b) & (r["status"] == "converged") for loss, r in rows.items()}
        np.testing.assert_array_equal(rows["huber"]["alpha"][sel["huber"]], rows["square"]["alpha"][sel["square"]])
        gap = np.abs(rows["huber"]["train_loss"][sel["huber"]] - rows["square"]["train_loss"][sel["square"]])
        err = rows["huber"]["train_loss_err"][sel["huber"]] + rows["square"]["train_loss_err"][sel["square"]]
        assert np.all(gap > 10 * err), (b, gap / err)
    ts = result.thresholds
    theory = {str(ts["loss"][i]): i for i in range(len(ts["loss"])) if str(ts["source"][i]) == "theory"}
    i = theory["huber"]
    assert ts["alpha_c_status"][i] == "in_grid" and ts["shift"][i] > 3 * ts["shift_err"][i]


@COMMITTED
def test_the_committed_students_cross_where_the_theory_does():
    """At d >= 800 the students see the shift (their paired shift from the square loss's crossing, on the same data
    sets, is positive by more than twice its 95% error), and their crossing and its shift agree with the SE's within
    twice the combined 95% errors (the students' bootstrap error over seeds and the SE's quadrature error: statistical
    errors only, which leave out the students' finite-size bias; twice them is about four standard deviations)."""
    result = huber.ExtensionResult.load(RESULTS)
    ts = result.thresholds
    rows = {(str(ts["source"][i]), str(ts["loss"][i])): i for i in range(len(ts["loss"]))}
    th, st = rows[("theory", "huber")], rows[("students", "huber")]
    assert ts["d"][st] >= 800
    for key in ("alpha_c", "shift"):
        err = np.hypot(ts[f"{key}_err"][th], ts[f"{key}_err"][st])
        assert abs(ts[key][st] - ts[key][th]) <= 2 * err, (key, ts[key][st], ts[key][th], err)
    assert ts["shift"][st] > 2 * ts["shift_err"][st]


@COMMITTED
def test_replot_of_the_committed_huber_results_reproduces_them(tmp_path):
    """`--replot` re-derives thresholds, gaps, summary and figure from the committed theory.csv and runs.csv: the
    same values (a pure re-derivation: 1e-12 relative)."""
    import json

    from phasejax.cli import main

    out, want = tmp_path / "huber", tmp_path / "committed"
    for folder in (out, want):                      # the committed files, not the chunks
        shutil.copytree(RESULTS, folder, ignore=shutil.ignore_patterns("run"))
    assert main(["extension", "huber", "--out", str(out), "--replot", "--overwrite", "--no-progress"]) == 0
    for folder in (out, want):                      # the record of the replot (the committed figure is one)
        with open(folder / "summary.json") as fh:
            summary = json.load(fh)
        summary.pop("replotted_by", None)
        with open(folder / "summary.json", "w") as fh:
            json.dump(summary, fh)
    assert_same_outputs(out, want, rtol=RTOL_REDERIVED)


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_a_small_preset_runs_end_to_end(tmp_path, monkeypatch):
    """Theory of both losses, students of both losses, thresholds, replicon per loss, the figure: every file, the
    theory converged, the students' Huber training loss below their square one on the same data."""
    from phasejax.extensions import ExtensionRun, run_extension

    monkeypatch.setitem(huber.PRESETS, "tiny", huber.HuberPreset(
        alphas=(1.2, 1.8), omegas=(0.3,), train_alphas=(1.2, 1.8), train_omega=0.3, seeds=(0, 1), ds=(40,)))
    paths = run_extension("huber", "tiny", str(tmp_path), run=ExtensionRun(progress=False))
    assert sorted(os.path.basename(p) for p in paths) == ["gaps.csv", "huber.png", "runs.csv", "summary.json",
                                                          "theory.csv", "thresholds.csv"]
    result = huber.ExtensionResult.load(str(tmp_path))
    assert np.all(result.theory["status"] == "converged")
    assert set(result.summary["replicon"]) == set(huber.LOSSES)
    runs = result.runs
    for loss in huber.LOSSES:
        assert np.sum(runs["loss"] == loss) == 2 * 2 * 2
    h, s = (np.asarray(runs["train_loss"], float)[runs["loss"] == loss] for loss in ("huber", "square"))
    assert np.all(h < s)       # the same tasks in the same order: huber_delta <= square, so min R_huber <= min R_square


def _nodes_with_two_minima(theory: dict, loss: str, branch: str, alpha: float, n_nodes: int = 1000,
                           pivot: bool = False) -> float:
    """Fraction of `n_nodes` Gaussian quadrature nodes (the fixed point's fields `omega`, `h*` of standard normal
    `(xi, eta)`) whose proximal objective has two or more local minima more than 3 grid steps apart, found by
    brute force on a 121 x 121 grid of `h` in `[-1.5, 1.5]^2` (a point below its 8 neighbours). With `pivot`, the
    nodes are those of the pivot `omega = 0` (`xi = 0`, random teacher fields)."""
    import jax
    import jax.numpy as jnp

    from phasejax.precision import float64_scope
    from phasejax.theory.fields import field_maps, gaussian_fields
    from phasejax.theory.prox import moreau_objective
    from phasejax.theory.replicon import overlaps_from_columns

    i = int(np.flatnonzero((theory["loss"] == loss) & (theory["branch"] == branch)
                           & np.isclose(theory["alpha"], alpha))[0])
    k = 121
    axis = np.linspace(-1.5, 1.5, k)
    grid = np.stack(np.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    with float64_scope():
        p = huber.loss_params(loss).replace(alpha=jnp.asarray(alpha), omega=jnp.asarray(0.3))
        ov = overlaps_from_columns(theory, i, p)
        maps = field_maps(ov, p)
        V_inv = jnp.linalg.inv(ov.V0)[None] / (p.sigma**2)[:, None, None]

        def local_minima(z):
            omega, hstar = gaussian_fields(maps, p, z[:2].reshape(2, 1), z[2:].reshape(2, 1))
            theta = (omega, p.target(hstar, p), V_inv, p)
            F = jax.vmap(lambda h: moreau_objective(h, theta))(jnp.asarray(grid)).reshape(k, k)
            inner = F[1:-1, 1:-1]
            around = jnp.stack([F[1 + a:k - 1 + a, 1 + b:k - 1 + b] for a in (-1, 0, 1) for b in (-1, 0, 1)
                                if (a, b) != (0, 0)])
            return jnp.all(inner < around, axis=0)

        z = jnp.asarray(np.random.default_rng(0).standard_normal((n_nodes, 4)))
        if pivot:
            z = z.at[:, :2].set(-jnp.asarray(maps.m_tokens).reshape(1, 2) / (p.sigma * maps.sqrt_q0[0, 0]))
        found = np.asarray(jax.lax.map(local_minima, z, batch_size=50))
    two = 0
    for node in found:
        kept = []
        for point in np.argwhere(node):
            if all(np.max(np.abs(point - q)) > 3 for q in kept):
                kept.append(point)
        two += len(kept) >= 2
    return two / n_nodes


@COMMITTED
def test_the_replicons_verdict_on_the_positional_branch_holds_on_a_brute_force_search():
    """The replicon finds no node with two prox minima on the Huber positional branch (no jump term: replica
    symmetry stable) and some on the square loss's (a jump term at every alpha). A brute-force grid search of the
    proximal objective on random Gaussian nodes, independent of the replicon's Newton starts, finds the same: none
    for the Huber loss, and for the square loss a fraction within a factor 2 of the replicon's `two_minima`
    (1000 nodes: the square loss's 1.9% is about 19 nodes, Poisson spread 4). At the pivot `omega = 0`, where the
    objective is even in `h`, the square loss has a mirror pair of minima for some teacher fields (the jump's
    origin) and the Huber loss none."""
    th = huber.ExtensionResult.load(RESULTS).theory
    row = lambda loss: int(np.flatnonzero((th["loss"] == loss) & (th["branch"] == "positional")  # noqa: E731
                                          & np.isclose(th["alpha"], 1.0))[0])
    assert th["two_minima"][row("huber")] == 0 and th["two_minima"][row("square")] > 0.01
    assert _nodes_with_two_minima(th, "huber", "positional", 1.0) == 0.0
    square = _nodes_with_two_minima(th, "square", "positional", 1.0)
    assert 0.5 < square / th["two_minima"][row("square")] < 2.0, square
    assert _nodes_with_two_minima(th, "huber", "positional", 1.0, 300, pivot=True) == 0.0
    assert _nodes_with_two_minima(th, "square", "positional", 1.0, 300, pivot=True) > 0.05
