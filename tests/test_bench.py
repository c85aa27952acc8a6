"""`phasejax bench`: the record it writes (a quick run of two figures), the refusal to overwrite, `--parts`
validation, and the pure helpers of `phasejax.benchmarks`."""

import json
import math

import numpy as np
import pytest

from phasejax import bench
from phasejax.benchmarks import record
from phasejax.benchmarks.diagrams import main_job_settings, measured_rows


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_quick_bench_writes_one_record_per_device(tmp_path, run_cli):
    code, out, err = run_cli(["bench", "--quick", "--parts", "warm_point", "cold_solve", "--out", str(tmp_path)])
    assert code == 0, err
    path = tmp_path / f"{bench.device_name()}.json"
    assert f"wrote: {path}" in out
    assert "bench: cold_solve" in err and "bench: warm_point" in err          # progress lines on stderr
    record = json.loads(path.read_text())
    assert record["quick"] is True and record["parts"] == ["warm_point", "cold_solve"]    # the order given
    assert record["complete"] is True
    assert record["date"].endswith("+00:00")                                  # UTC, ISO 8601
    assert {"kind", "count", "cpu_count", "platform"} <= set(record["device"])
    assert record["device"]["count"] >= 1
    versions = record["versions"]
    assert {"python", "jax", "jaxlib", "numpy", "scipy", "flax", "optax", "phasejax", "git_commit"} <= set(versions)
    assert all(versions[k] for k in ("python", "jax", "jaxlib", "numpy", "scipy", "flax", "optax", "phasejax"))
    figures = {f["name"]: f for f in record["figures"]}
    assert list(figures) == ["warm_point", "cold_solve"]
    for f in figures.values():
        assert {"what", "seconds", "seconds_per_point", "points", "solves", "compilation_included", "statuses",
                "converged"} <= set(f)
        assert _positive(f["seconds"]) and _positive(f["seconds_per_point"]) and f["points"] >= 1
        assert sum(f["statuses"].values()) == f["solves"] and f["converged"] == f["statuses"].get("converged", 0)
        assert f["converged"] >= 1
    cold, warm = figures["cold_solve"], figures["warm_point"]
    assert cold["compilation_included"] is True and len(cold["calls"]) == 4
    assert all(_positive(c["seconds"]) for c in cold["calls"])
    assert _positive(cold["after_compilation"]["seconds"])
    assert warm["compilation_included"] is False and warm["first_call"]["compilation_included"] is True
    assert math.isclose(warm["seconds_per_point"] * warm["points"], warm["seconds"])
    assert _positive(warm["mean_iterations"]) and _positive(warm["first_call"]["seconds"])


def test_an_existing_record_is_not_overwritten(tmp_path, run_cli):
    path = tmp_path / f"{bench.device_name()}.json"
    path.write_text('{"kept": true}\n')
    code, _, err = run_cli(["bench", "--quick", "--parts", "cold_solve", "--out", str(tmp_path), "--no-progress"])
    assert code == 2
    assert path.read_text() == '{"kept": true}\n'
    assert "--overwrite" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("parts", [["nope"], ["cold_solve", "bogus"], []])
def test_parts_must_name_known_figures(parts, tmp_path, run_cli):
    code, _, err = run_cli(["bench", "--parts", *parts, "--out", str(tmp_path)])
    assert code == 2 and "argument --parts" in err, err
    assert not list(tmp_path.iterdir())


def test_a_missing_reference_script_is_an_error(tmp_path, run_cli):
    code, _, err = run_cli(["bench", "--parts", "batch", "--reference", str(tmp_path / "none.py"), "--out",
                         str(tmp_path)])
    assert code == 2 and "--reference" in err


def test_helpers():
    assert record.device_name("cuda") == "gpu" and record.device_name("tpu") == "tpu"
    assert measured_rows(20, 2).tolist() == [5, 15]
    assert measured_rows(3, 5).tolist() == [0, 1, 2]
    assert record.status_counts(np.array([[0, 0], [1, 0]])) == {"converged": 3, "max_iterations": 1}
    s = main_job_settings()
    assert (len(s["alphas"]), len(s["omegas"]), s["tracks"], s["chunk_size"]) == (23, 11, 1, None)   # None: auto
    assert set(bench.FIGURES) == {"program", "cold_solve", "cached_solve", "warm_point", "batch", "main_job",
                                  "paper_diagram", "training", "gradient", "vmapped_batch", "lines",
                                  "counting"}


def test_the_record_so_far_is_handed_over_after_every_figure(monkeypatch):
    monkeypatch.setattr(bench, "run_figure", lambda name, plan, log: dict(
        name=name, seconds=1.0, seconds_per_point=1.0, points=1, converged=1, statuses={"converged": 1}))
    seen = []
    report = bench.benchmark_report(["warm_point", "cold_solve", "warm_point"], bench.BenchPlan(quick=True),
                                    on_figure=lambda r: seen.append((r["complete"], [f["name"] for f in r["figures"]])))
    assert seen == [(False, ["warm_point"]), (True, ["warm_point", "cold_solve"])]
    assert report["parts"] == ["warm_point", "cold_solve"]
    with pytest.raises(ValueError, match="parts"):
        bench.benchmark_report(["nope"])


def test_auto_chunk_rows_fills_an_accelerator_and_keeps_two_rows_on_a_cpu():
    from phasejax.commands.phase_diagram import CPU_CHUNK_ROWS, auto_chunk_rows, row_memory_estimate

    assert auto_chunk_rows(23, 22, platform="cpu") == CPU_CHUNK_ROWS == 2
    assert auto_chunk_rows(23, 1, platform="cpu") == 1
    row = row_memory_estimate(40)
    # room for 14 rows of 40 alphas in 40% of the memory: 40 rows go in three chunks of equal size (14, 14, 12)
    assert auto_chunk_rows(40, 40, platform="gpu", memory=14.5 * row / 0.4) == 14
    assert auto_chunk_rows(40, 40, platform="gpu", memory=1e15) == 40          # all rows in one call
    assert auto_chunk_rows(40, 40, platform="gpu", memory=1.0) == 1            # never below one row
    assert auto_chunk_rows(40, 40, 2, platform="gpu", memory=14.5 * row / 0.4) == 7   # two tracks: half the rows
    with pytest.raises(ValueError, match="n_rows"):
        auto_chunk_rows(40, 0)


def test_a_baseline_checkout_is_the_package_its_process_imports(tmp_path):
    """`program --baseline PATH` measures PATH's phasejax, not this checkout's (which an editable install and
    `python -c`'s working directory would otherwise put first)."""
    pkg = tmp_path / "phasejax"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("MARK = 'baseline'\n")
    code = "import json, phasejax; print(json.dumps(dict(file=phasejax.__file__, mark=phasejax.MARK)))"
    got = record.fresh_process(code, source=str(tmp_path))
    assert got["mark"] == "baseline" and got["file"].startswith(str(tmp_path))
    here = record.fresh_process("import json, phasejax; print(json.dumps(dict(file=phasejax.__file__)))")
    assert here["file"].startswith(record.repository_root())


def test_the_command_figures_assemble_their_records(monkeypatch):
    """`main_job` and `lines` time commands in fresh processes (stood in for here): each passes the folders and
    flags it means, reads the statuses back and builds its record (the assembly runs on every machine; the
    timings themselves belong to `phasejax bench`)."""
    from phasejax.benchmarks import diagrams

    calls = []

    def fake_run(argv, *, cache=None, host_devices=None):
        calls.append((argv, cache, host_devices))
        return dict(seconds=float(len(calls)), returncode=0, tail=[])

    monkeypatch.setattr(diagrams, "run_command", fake_run)
    monkeypatch.setattr(diagrams, "_statuses", lambda path, column: {"converged": 5})
    job = diagrams.main_job(host_devices=2, quick=True)
    assert calls[0][0][:2] == ["phase-diagram", "--out"] and calls[0][2] == 2 and calls[0][1] is None
    assert "--n-boundary" in calls[0][0] and job["seconds"] == 1.0 and job["host_devices"] == 2
    lines = diagrams.lines(host_devices=2, quick=True)
    cold, fill, warm = calls[1:]
    assert cold[0][0] == fill[0][0] == warm[0][0] == "boundary" and cold[1] is None and fill[1] == warm[1]
    assert lines["seconds"] == 2.0 and lines["cached_seconds"] == 4.0 and lines["points"] == 5
