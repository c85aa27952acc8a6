"""Progress from inside compiled calls (`phasejax.progress`) and the sweep's bar that it moves."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import progress
from phasejax.solvers import iterate
from phasejax.sweep import RunOptions, run_chunked


class FakeBar:
    """tqdm's `update` / `n` / `close`, recording every position."""

    def __init__(self, *args, total=0, **kwargs):
        self.n, self.total, self.seen = 0.0, total, []

    def update(self, k):
        self.n += k
        self.seen.append(self.n)

    def close(self):
        pass


def _row(task):
    """A 'row' of 4 points per task, ticking after each point."""
    def body(c, i):
        progress.tick(0.25, c)
        return c + task["x"], None
    return {"y": jax.lax.scan(body, jnp.zeros_like(task["x"]), jnp.arange(4))[0]}


def test_ticks_compile_to_nothing_without_a_bar():
    assert not progress.tracking()
    text = str(jax.make_jaxpr(lambda x: _row({"x": x})["y"])(1.0))
    assert "callback" not in text
    bar = FakeBar()
    with progress.active(progress.ChunkProgress(bar, cap=10.0)):
        assert progress.tracking()
        assert "callback" in str(jax.make_jaxpr(lambda x: _row({"x": x})["y"])(1.0))
    assert not progress.tracking()


def test_sweep_bar_moves_inside_chunks_and_ends_exact(tmp_path, monkeypatch):
    bars = []
    monkeypatch.setattr("phasejax.sweep._interactive", lambda: True)
    monkeypatch.setattr("tqdm.auto.tqdm", lambda *a, **k: bars.append(FakeBar(*a, **k)) or bars[-1])
    tasks = {"x": np.arange(5.0)}
    out = run_chunked(lambda t: jax.vmap(lambda x: _row({"x": x}))(t["x"]), tasks, {"kind": "rows"},
                      RunOptions(run_dir=str(tmp_path / "run"), chunk_size=2))
    np.testing.assert_allclose(out["y"], 4 * tasks["x"])
    seen = np.asarray(bars[0].seen)
    assert seen[-1] == pytest.approx(5.0)
    # positions strictly inside a chunk (not only the chunk ends 2, 4, 5), never backwards, never past the end
    assert np.any((seen % 1.0) > 1e-6)
    assert np.all(np.diff(seen) >= -1e-9) and seen.max() <= 5.0 + 1e-9


def test_iterate_reports_a_fraction_per_step():
    class Halve:
        def step(self, problem, x):
            return x / 2

        def terminate(self, problem, x):
            return x < 1e-3, 0

    bar = FakeBar()
    with progress.active(progress.ChunkProgress(bar, cap=100.0, lanes=3)):
        run = jax.jit(jax.vmap(lambda x: iterate(Halve(), None, x, max_steps=40, report_progress=True).steps))
        steps = run(jnp.asarray([1.0, 10.0, 100.0]))
    # one report per loop step for the whole vmapped batch: (slowest lane's steps) / max_steps of each lane
    assert bar.n == pytest.approx(int(steps.max()) / 40 * 3, rel=1e-5)


def test_a_log_file_gets_one_line_per_chunk_and_no_host_calls(tmp_path, capsys):
    """stderr not a terminal (a batch job's log): one plain line per finished chunk, with the counts, the time
    elapsed and an estimate of the rest; the compiled program has no progress callbacks (it stays cacheable)."""
    traced = []

    def fn(t):
        traced.append(progress.tracking())
        return jax.vmap(lambda x: _row({"x": x}))(t["x"])

    tasks = {"x": np.arange(5.0)}
    out = run_chunked(fn, tasks, {"kind": "rows"}, RunOptions(run_dir=str(tmp_path / "run"), chunk_size=2))
    np.testing.assert_allclose(out["y"], 4 * tasks["x"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert [ln.split(",")[0] for ln in lines] == [f"phasejax: rows: chunk {k} of 3 done ({n} of 5 tasks)"
                                                   for k, n in ((1, 2), (2, 4), (3, 5))]
    assert all("elapsed" in ln for ln in lines) and "left" in lines[0] and "left" not in lines[-1]
    assert traced and not any(traced)
    run_chunked(fn, tasks, {"kind": "rows"}, RunOptions(run_dir=str(tmp_path / "run"), chunk_size=2))
    assert capsys.readouterr().err == ""                          # nothing left to compute: no line
    run_chunked(fn, tasks, {"kind": "rows"}, RunOptions(run_dir=str(tmp_path / "other"), chunk_size=2,
                                                        progress=False))
    assert capsys.readouterr().err == ""                          # --no-progress: no line


def test_chunk_lines_count_the_chunks_already_on_disk():
    import io

    log = io.StringIO()
    now = [0.0]
    lines = progress.ChunkLines([3, 3, 3, 1], [3, 1], label="", stream=log, clock=lambda: now[0])
    now[0] = 30.0
    assert lines.finish_chunk(3) == "phasejax: chunk 3 of 4 done (9 of 10 tasks), 30s elapsed, about 10s left"
    now[0] = 40.0
    assert lines.finish_chunk(1) == "phasejax: chunk 4 of 4 done (10 of 10 tasks), 40s elapsed"
    assert log.getvalue().count("\n") == 2
    assert progress.duration(3725) == "1h02m" and progress.duration(59.6) == "1m00s"
