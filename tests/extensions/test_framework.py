"""The extensions' shared framework (`phasejax.extensions.framework`) and the `extension` command: the result
bundle's round trip and its checks on load, matching runs to theory, agreement with each seed's teacher, thresholds
of constructed tables (roots known in closed form), bootstrap thresholds of paired runs, the tied comparison,
and the command's output folder (refused when foreign, resumable under <out>/run, re-derived by --replot)."""

import os
import shutil

import numpy as np
import pytest

from phasejax.extensions._tables import agreement, attach_theory, ExtensionResult

from phasejax.extensions._thresholds import (

    branch_thresholds, empirical_alpha_c, mark_global_minimum, paired_gap, resolved_rows, tied_thresholds,

    with_tied_thresholds,
)
from phasejax.extensions.rank2 import rank2_params
from phasejax.precision import float64_scope

from _compare import RTOL_REDERIVED, assert_same_outputs

RESULTS = os.path.join(os.path.dirname(__file__), "..", "..", "results", "extensions")


def _bundle():
    theory = dict(alpha=np.array([1.0, 1.0]), omega=np.array([0.3, 0.3]), init=np.array(["positional", "mixed"]),
                  train_loss=np.array([0.1, 0.2]), converged=np.array([True, False]),
                  status=np.array(["converged", "max_iterations"]))
    runs = dict(alpha=np.array([1.0]), omega=np.array([0.3]), seed=np.array([0]), init=np.array(["mixed"]),
                d=np.array([200]), test_error=np.array([0.01]))
    thresholds = dict(omega=np.array([0.3]), alpha_c=np.array([np.nan]), alpha_c_status=np.array(["above_grid"]))
    return ExtensionResult(theory=theory, runs=runs, thresholds=thresholds, summary=dict(extension="toy", n=[1, 2]),
                           tables=dict(gaps=dict(d=np.array([200]), q_gap=np.array([0.01]))),
                           documents=dict(extra=dict(a=1)))


def test_bundle_round_trip_and_checks_on_load(tmp_path):
    res = _bundle()
    paths = res.write(str(tmp_path))
    assert sorted(os.path.basename(p) for p in paths) == ["extra.json", "gaps.csv", "runs.csv", "summary.json",
                                                         "theory.csv", "thresholds.csv"]
    back = ExtensionResult.load(str(tmp_path), tables=("gaps",), documents=("extra",))
    for part in ("theory", "runs", "thresholds"):
        mine, theirs = getattr(res, part), getattr(back, part)
        assert list(mine) == list(theirs)
        for k, v in mine.items():
            if v.dtype.kind in "fib":     # booleans are written as 0/1 and read back as integers
                np.testing.assert_array_equal(np.asarray(theirs[k], float), v.astype(float))
            else:
                assert theirs[k].tolist() == v.tolist()
    assert back.summary == res.summary and back.documents == res.documents
    assert back.tables["gaps"]["q_gap"].tolist() == [0.01]
    # a missing column is named with its file
    with pytest.raises(ValueError, match=r"runs.csv lacks the column value_rank"):
        ExtensionResult.load(str(tmp_path), required=dict(runs=("value_rank",)))
    os.remove(os.path.join(tmp_path, "thresholds.csv"))
    (tmp_path / "thresholds.csv").write_text("omega,alpha\n0.3,1.0\n")
    with pytest.raises(ValueError, match=r"thresholds.csv lacks the column alpha_c"):
        ExtensionResult.load(str(tmp_path))
    res.write(str(tmp_path))
    (tmp_path / "summary.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="summary.json must hold a JSON object"):
        ExtensionResult.load(str(tmp_path))


def test_branch_thresholds_and_global_minimum_on_constructed_tables():
    """Two inits at three alphas, `e_t(semantic) - e_t(positional) = 1.5 - alpha` (a root at 1.5, error bars
    0.01 each: the root moves by 0.01 sqrt 2 with the curve; on three alphas the interpolation error is the
    bracket [1, 2] around the root, 0.5); at alpha = 3 the semantic solve did not converge, so no global minimum
    is marked there."""
    a = np.array([1.0, 2.0, 3.0])
    table = dict(alpha=np.concatenate([a, a]), omega=np.full(6, 0.3), init=np.array(["positional"] * 3 + ["semantic"] * 3),
                 train_loss=np.concatenate([np.full(3, 2.0), 2.0 + 1.5 - a]), train_loss_err=np.full(6, 0.01),
                 test_error=np.array([0.003, 0.003, 0.003, 0.0025, 0.0015, 0.001]), test_error_err=np.full(6, 1e-5),
                 converged=np.array([True, True, True, True, True, False]))
    table = mark_global_minimum(table)
    assert table["global_min"].tolist() == [True, False, False, False, True, False]
    with float64_scope():
        ts = branch_thresholds(table, rank2_params())
    assert float(ts["alpha_c"][0]) == pytest.approx(1.5)
    assert float(ts["alpha_c_err"][0]) == pytest.approx(np.hypot(0.01 * 2**0.5, 0.5))
    assert ts["alpha_c_status"][0] == "in_grid"
    # eps_lin(omega = 0.3) ~ 0.00197 lies between the global minimum's 0.003 (alpha 1) and 0.0015 (alpha 2)
    assert 1.0 < float(ts["alpha_l"][0]) < 2.0 and ts["alpha_l_status"][0] == "in_grid"


def test_a_stalled_solve_counts_only_within_its_uncertainty():
    """Rows stopped at max_iterations near their fixed points take part when the lowest e_t is resolved."""
    def table(e_sem, shift, gap):
        # positional converged at e_t = 2.0; semantic stalled at e_sem, solver_shift, |e_t - energetic| = gap
        return dict(alpha=np.array([1.0, 1.0]), omega=np.full(2, 0.3), init=np.array(["positional", "semantic"]),
                    train_loss=np.array([2.0, e_sem]), train_loss_err=np.full(2, 0.01),
                    energetic_loss=np.array([2.0, e_sem + gap]), converged=np.array([True, False]),
                    status=np.array(["converged", "max_iterations"]), solver_shift=np.array([1e-9, shift]))
    mark = lambda t: mark_global_minimum(t)["global_min"].tolist()  # noqa: E731
    assert mark(table(1.9, 0.01, 0.001)) == [False, True]      # 1.9 + 0.011 < 2.0 - 0.01: resolved
    assert mark(table(1.9, 0.01, 0.09)) == [False, False]      # the e_t gap makes it undetermined
    assert mark(table(1.9, 0.2, 0.001)) == [False, False]      # too far from its fixed point
    assert mark(table(2.1, 0.01, 0.001)) == [True, False]      # the converged row is resolved as the lowest
    usable, unc = resolved_rows(table(1.9, 0.01, 0.05))
    assert usable.tolist() == [True, True] and unc.tolist() == pytest.approx([0.01, 0.06])


def test_agreement_adjusts_for_each_seeds_teacher():
    """Runs whose `q` is exactly `0.1 rho(seed, d)` and whose theory row says 0.1: the adjusted mean is the
    theory with no error, the plain mean is not; `attach_theory` fills the requested keys by `(alpha, init)`."""
    from phasejax.empirics.metrics import teacher_norms

    seeds = np.arange(5)
    runs = dict(alpha=np.full(5, 1.3), omega=np.full(5, 0.3), init=np.full(5, "semantic"), d=np.full(5, 60),
                seed=seeds, q=0.1 * teacher_norms(seeds, 60), test_error=np.full(5, 0.002))
    theory = dict(alpha=np.array([1.3, 1.3]), omega=np.array([0.3, 0.3]), init=np.array(["positional", "semantic"]),
                  converged=np.array([True, True]), q=np.array([0.05, 0.1]), test_error=np.array([0.003, 0.002]))
    match = dict(branch=runs["init"], branch_column="init")
    runs = attach_theory(runs, theory, ("q", "test_error"), **match)
    np.testing.assert_allclose(runs["q_theory"], 0.1)
    (row,) = agreement(runs, ("q",), teacher_adjusted=True)
    assert row["adj_mean"] == pytest.approx(0.1, rel=1e-6) and row["adj_sem"] < 1e-7
    assert abs(row["adj_signed_dev"]) < 1e-5 and row["rel_dev"] > 1e-3
    (plain,) = agreement(runs, ("test_error",))
    assert "adj_mean" not in plain and plain["rel_dev"] == pytest.approx(0.0, abs=1e-12)
    # an overlap that is zero in the theory (m on the semantic branch) has no relative deviation: NaN, not inf
    runs = attach_theory({**runs, "m": np.full(5, 0.01)}, {**theory, "m": np.array([0.2, 0.0])}, ("m",), **match)
    (row,) = agreement(runs, ("m",), teacher_adjusted=True)
    assert np.isnan(row["rel_dev"]) and np.isnan(row["adj_signed_dev"]) and row["theory"] == 0.0
    # a run without a converged theory row gets NaN
    out = attach_theory(runs, theory, ("q",), **match, usable=np.array([True, False]))
    assert np.isnan(out["q_theory"]).all()


def test_empirical_alpha_c_paired_shift_and_statuses():
    """Seed tables `delta = root - alpha` plus zero-mean seed noise: the seed mean crosses at `root` exactly; the
    shift against a reference of the same seeds is the difference of roots, with a bootstrap error that is
    smaller than either root's (the seed noise is shared)."""
    alphas = np.array([1.0, 1.5, 2.0, 2.5])
    noise = np.array([[0.05], [-0.05], [0.02], [-0.02]])
    ref = (1.6 - alphas)[None, :] + noise
    out = empirical_alpha_c(alphas, (1.75 - alphas)[None, :] + noise, ref)
    assert out["alpha_c"] == pytest.approx(1.75, abs=1e-12) and out["alpha_c_status"] == "in_grid"
    assert out["shift"] == pytest.approx(0.15, abs=1e-12)
    assert 0 < out["alpha_c_err"] < 0.1 and out["shift_err"] < 1e-9
    assert empirical_alpha_c(alphas, (alphas - 0.5)[None, :])["alpha_c_status"] == "above_grid"
    below = empirical_alpha_c(alphas, (0.5 - alphas)[None, :])
    assert below["alpha_c_status"] == "below_grid" and np.isnan(below["alpha_c"])
    # paired_gap builds the table from runs (semantic minus positional per seed)
    runs = dict(alpha=np.repeat(alphas, 2), seed=np.zeros(8, int), init=np.tile(["positional", "semantic"], 4),
                train_loss=np.ravel([[1.0, 1.0 + 1.75 - a] for a in alphas]))
    got_alphas, delta = paired_gap(runs, np.ones(8, bool))
    np.testing.assert_array_equal(got_alphas, alphas)
    np.testing.assert_allclose(delta, [1.75 - alphas])


def test_tied_comparison_and_the_default_file_does_not_depend_on_the_working_directory(tmp_path, monkeypatch):
    untied = dict(omega=np.array([0.0, 0.3]), alpha_c=np.array([0.7, 1.5]), alpha_c_err=np.array([0.03, 0.04]))
    tied = dict(omega=np.array([0.0, 0.1, 0.3]), alpha_c=np.array([0.62, 0.75, 1.25]),
                alpha_c_err=np.array([0.004, 0.001, 0.003]))
    out = with_tied_thresholds(untied, tied)
    np.testing.assert_allclose(out["shift"], [0.08, 0.25])
    np.testing.assert_allclose(out["shift_err"], np.hypot([0.03, 0.04], [0.004, 0.003]))
    assert np.isnan(with_tied_thresholds(untied, None)["shift"]).all()
    here = tied_thresholds()
    monkeypatch.chdir(tmp_path)
    there = tied_thresholds()
    if here is None:
        assert there is None
    else:
        np.testing.assert_array_equal(there["alpha_c"], here["alpha_c"])


def test_command_refuses_a_foreign_folder_before_computing(tmp_path, capsys):
    from phasejax.cli import main

    (tmp_path / "notes.txt").write_text("not an extension's output")
    assert main(["extension", "rank2", "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "--overwrite" in err
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]       # nothing computed, nothing written
    assert main(["extension", "rank2", "--out", str(tmp_path / "empty"), "--replot"]) == 2
    assert main(["extension", "rank2", "--tied-thresholds", "t.csv", "--out", str(tmp_path / "new")]) == 2


def test_the_command_names_every_extension():
    """The command line spells the extension names out (parsing imports no JAX); they are the library's."""
    from phasejax.commands.extension import EXTENSION_NAMES
    from phasejax.extensions import EXTENSIONS

    assert EXTENSION_NAMES == EXTENSIONS


@pytest.mark.skipif(not os.path.exists(os.path.join(RESULTS, "rank2", "runs.csv")), reason="no committed outputs")
def test_replot_of_the_committed_rank2_results_reproduces_them(tmp_path):
    """`--replot` re-derives thresholds, summary and figure from the committed theory.csv and runs.csv: every
    table and document comes back as the same values (the summary with the record of the replot added,
    `replotted_by`), the figure as an image of the same size."""
    import json

    from phasejax.cli import main

    out = tmp_path / "rank2"
    shutil.copytree(os.path.join(RESULTS, "rank2"), out)
    assert main(["extension", "rank2", "--out", str(out), "--replot", "--overwrite", "--no-progress"]) == 0
    with open(out / "summary.json") as fh:
        summary = json.load(fh)
    assert set(summary.pop("replotted_by")) == {"command", "versions"}
    with open(out / "summary.json", "w") as fh:
        json.dump(summary, fh)
    # a pure re-derivation (the same float64 arithmetic on the same tables): equal to 1e-12 relative (another
    # numpy or scipy may round alpha_c one unit in the last place apart)
    assert_same_outputs(out, os.path.join(RESULTS, "rank2"), rtol=RTOL_REDERIVED)


def test_command_resumes_under_out_run_and_reuses_its_own_folder(tmp_path, monkeypatch):
    """The chunks of a run go to <out>/run by default (not a temporary folder), and a second run of the same
    configuration is let into the folder the first one claimed (it resumes there), another preset is not."""
    import phasejax.extensions
    from phasejax.cli import main

    seen = []
    monkeypatch.setattr(phasejax.extensions, "run_extension",
                        lambda name, preset, out, **kw: seen.append((out, kw)) or [])
    out = tmp_path / "untied"
    assert main(["extension", "untied", "--out", str(out), "--no-progress"]) == 0
    (out / "theory.csv").write_text("alpha,omega\n")             # what the first run wrote
    assert main(["extension", "untied", "--out", str(out), "--no-progress", "--chunk-size", "3"]) == 0
    assert [kw["run"].run_dir for _, kw in seen] == [str(out / "run")] * 2
    assert [kw["run"].chunk_size for _, kw in seen] == [None, 3]          # --chunk-size reaches every sweep
    assert main(["extension", "untied", "--out", str(out), "--preset", "gpu"]) == 2
    assert main(["extension", "untied", "--out", str(out), "--preset", "gpu", "--overwrite"]) == 0
    assert len(seen) == 3


@pytest.mark.skipif(not os.path.exists(os.path.join(RESULTS, "rank2", "runs.csv")), reason="no committed outputs")
def test_the_command_that_computed_an_extension_is_in_its_summary(tmp_path, monkeypatch):
    """`phasejax extension` records its command line, shell-quoted, in summary.json when it computes (here the
    committed rank2 tables stand in for the computation); a replot keeps what the folder records."""
    import json
    import shlex

    from phasejax.cli import main
    from phasejax.extensions._run import extension_module

    module = extension_module("rank2")
    committed = ExtensionResult.load(os.path.join(RESULTS, "rank2"), documents=getattr(module, "DOCUMENTS", ()))
    monkeypatch.setattr(module, "compute", lambda *a, **k: committed)
    out = tmp_path / "rank 2"
    argv = ["extension", "rank2", "--out", str(out), "--no-progress", "--run-dir", str(tmp_path / "run")]
    monkeypatch.setattr("sys.argv", ["/x/bin/phasejax", *argv])
    assert main(argv) == 0
    with open(out / "summary.json") as fh:
        recorded = json.load(fh)["command"]
    assert shlex.split(recorded) == ["phasejax", *argv]
    assert main(["extension", "rank2", "--out", str(out), "--replot", "--overwrite", "--no-progress"]) == 0
    with open(out / "summary.json") as fh:
        assert json.load(fh)["command"] == recorded
