"""The chunk runner: resume, atomic chunks, fingerprints by content, device-count independence."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from phasejax.sweep import RunOptions, callable_identity, config_fingerprint, run_chunked

from _compare import RTOL_FLOAT32, assert_same_arrays


def _fn(chunk):
    a, w = jnp.asarray(chunk["alpha"]), jnp.asarray(chunk["omega"])
    return dict(value=jnp.sin(a) * w + a**2, twice=2 * a)


TASKS = dict(alpha=np.linspace(0.1, 2.0, 11), omega=np.linspace(0, 1, 11))
CONFIG = dict(kind="unit-test", version=1)


def opts(run_dir, **kw):
    return RunOptions(run_dir=str(run_dir), progress=False, **kw)


def test_resume_recomputes_nothing_finished_and_matches_uninterrupted(tmp_path):
    full = run_chunked(_fn, TASKS, CONFIG, opts(tmp_path / "full", chunk_size=3))
    part_dir = tmp_path / "killed"
    assert run_chunked(_fn, TASKS, CONFIG, opts(part_dir, chunk_size=3, max_chunks=2)) is None
    chunk_files = sorted(os.listdir(part_dir / "chunks"))
    assert chunk_files == ["chunk_00000.npz", "chunk_00001.npz"]
    mtimes = {f: os.stat(part_dir / "chunks" / f).st_mtime_ns for f in chunk_files}
    resumed = run_chunked(_fn, TASKS, CONFIG, opts(part_dir, chunk_size=3))
    for f, t in mtimes.items():   # finished chunks were loaded, not rewritten
        assert os.stat(part_dir / "chunks" / f).st_mtime_ns == t
    # two chunks loaded, two computed again by the same program: float32 re-derived, a few units in the last place
    assert_same_arrays(resumed, full, rtol=RTOL_FLOAT32, name="resumed")
    np.testing.assert_allclose(full["twice"], 2 * TASKS["alpha"])
    rec = json.load(open(part_dir / "config.json"))
    assert rec["version"] and rec["config"] == CONFIG and rec["n_chunks"] == 4


def test_a_stored_chunk_program_is_loaded_by_a_later_run(tmp_path, monkeypatch):
    """`store_program`: the chunk program is kept in the program store under the run's configuration; a later
    run (another run directory, the in-process programs forgotten) loads it, traces nothing, and writes the
    same chunks; another configuration is another program."""
    import jax

    from phasejax import xla

    folder = str(tmp_path / "programs")
    monkeypatch.setattr(xla, "store_folder", lambda: folder)
    monkeypatch.setattr(xla, "_LOADED", {})
    plain = run_chunked(_fn, TASKS, CONFIG, opts(tmp_path / "plain", chunk_size=4))
    first = run_chunked(_fn, TASKS, CONFIG, opts(tmp_path / "first", chunk_size=4), store_program=True)
    assert len(os.listdir(folder)) == 2                      # one program: its module and its description
    monkeypatch.setattr(xla, "_LOADED", {})
    monkeypatch.setattr(jax.export, "export", lambda *a, **k: pytest.fail("traced again"))
    again = run_chunked(_fn, TASKS, CONFIG, opts(tmp_path / "again", chunk_size=4), store_program=True)
    for k in plain:
        np.testing.assert_array_equal(first[k], plain[k])
        np.testing.assert_array_equal(again[k], plain[k])
    monkeypatch.undo()
    monkeypatch.setattr(xla, "store_folder", lambda: folder)
    run_chunked(_fn, TASKS, dict(CONFIG, version=2), opts(tmp_path / "other", chunk_size=4), store_program=True)
    assert len(os.listdir(folder)) == 4


def test_a_truncated_chunk_is_recomputed(tmp_path):
    ref = run_chunked(_fn, TASKS, CONFIG, opts(tmp_path, chunk_size=4))
    with open(tmp_path / "chunks" / "chunk_00001.npz", "wb") as fh:
        fh.write(b"PK\x03\x04 truncated")
    again = run_chunked(_fn, TASKS, CONFIG, opts(tmp_path, chunk_size=4))
    np.testing.assert_allclose(again["value"], ref["value"], rtol=RTOL_FLOAT32)     # float32, computed again


def test_a_run_directory_refuses_another_config_and_names_the_difference(tmp_path):
    run_chunked(_fn, TASKS, CONFIG, opts(tmp_path, chunk_size=4))
    with pytest.raises(ValueError, match=r"config\.version"):
        run_chunked(_fn, TASKS, dict(CONFIG, version=2), opts(tmp_path, chunk_size=4))
    with pytest.raises(ValueError, match="task table"):
        run_chunked(_fn, dict(TASKS, alpha=TASKS["alpha"] + 1), CONFIG, opts(tmp_path, chunk_size=4))
    # another chunk size is the same run (tests/test_reliability.py: it is reused)
    assert run_chunked(_fn, TASKS, CONFIG, opts(tmp_path, chunk_size=5)) is not None


def test_two_functions_with_the_same_name_never_share_a_run(tmp_path):
    """Defect: a custom function was identified by its name; two lambdas shared results."""
    scale = 2.0
    f1 = lambda x: x * scale          # noqa: E731
    f2 = lambda x: x * 3.0            # noqa: E731  (same __qualname__ "<lambda>", other body)
    assert callable_identity(f1) != callable_identity(f2)
    scale_fn = [lambda x, s=s: x * s for s in (1.0, 2.0)]   # same code, different default
    assert callable_identity(scale_fn[0]) != callable_identity(scale_fn[1])

    def run(target):
        return run_chunked(lambda c: {"y": target(jnp.asarray(c["alpha"]))}, TASKS, dict(target=target),
                           opts(tmp_path, chunk_size=4))

    first = run(f1)
    np.testing.assert_allclose(first["y"], 2 * TASKS["alpha"])
    with pytest.raises(ValueError, match=r"config\.target"):
        run(f2)
    assert config_fingerprint(dict(target=f1), TASKS) == config_fingerprint(dict(target=f1), TASKS)


def test_closure_values_enter_the_identity():
    def make(c):
        return lambda x: x + c
    assert callable_identity(make(1.0)) != callable_identity(make(2.0))
    assert callable_identity(make(1.0)) == callable_identity(make(1.0))


def test_the_library_version_is_part_of_the_fingerprint():
    assert config_fingerprint(CONFIG, TASKS, version="0.1") != config_fingerprint(CONFIG, TASKS, version="0.2")


def test_the_library_source_is_part_of_the_fingerprint(tmp_path, monkeypatch):
    """An edit anywhere in the package (here: a changed source digest) refuses the old run directory and
    names `source`; the digest is a pure function of the package files."""
    import phasejax.sweep as sweep

    assert sweep.source_digest() == sweep.source_digest() and len(sweep.source_digest()) == 16
    assert config_fingerprint(CONFIG, TASKS, source="a") != config_fingerprint(CONFIG, TASKS, source="b")
    run_chunked(_fn, TASKS, CONFIG, opts(tmp_path))
    monkeypatch.setattr(sweep, "source_digest", lambda: "0123456789abcdef")
    with pytest.raises(ValueError, match="source"):
        run_chunked(_fn, TASKS, CONFIG, opts(tmp_path))


def test_source_digest_changes_with_any_package_file(tmp_path):
    """The digest of a copy of the package equals the package's, and changes when one deep function changes."""
    import shutil

    import phasejax
    from phasejax.io import source_digest, tree_digest

    dst = tmp_path / "phasejax"
    shutil.copytree(os.path.dirname(phasejax.__file__), dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    assert tree_digest(str(dst)) == source_digest()
    f = dst / "tasks" / "induction" / "train.py"
    f.write_text(f.read_text() + "\n# an edit\n")
    assert tree_digest(str(dst)) != source_digest()


def test_bad_inputs_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="omega"):
        run_chunked(_fn, dict(alpha=np.ones(3), omega=np.ones(2)), CONFIG, opts(tmp_path))
    for kw, name in [(dict(chunk_size=0), "chunk_size"), (dict(process_count=0), "process_count"),
                     (dict(process_index=2, process_count=2), "process_index"), (dict(max_chunks=-1), "max_chunks")]:
        with pytest.raises(ValueError, match=name):
            RunOptions(**kw)


def test_resume_on_more_devices_recomputes_nothing(tmp_path, on_host_devices):
    """A run started on 1 device resumes on 2 (forced host devices) without recomputing finished chunks."""
    run_dir = str(tmp_path / "run")
    code = f"""
        import jax, jax.numpy as jnp, numpy as np, os
        from phasejax.sweep import RunOptions, run_chunked
        def fn(c):
            return dict(value=jnp.sin(jnp.asarray(c["alpha"])) + 1.0)
        tasks = dict(alpha=np.linspace(0.1, 2.0, 11))
        n = int(os.environ["NDEV"])
        out = run_chunked(fn, tasks, dict(kind="dev"), RunOptions(run_dir={run_dir!r}, chunk_size=3, progress=False,
                          devices=jax.devices()[:n], max_chunks=2 if n == 1 else None))
        print("DONE" if out is None else repr(out["value"].tolist()))
    """
    assert "DONE" in on_host_devices(code.replace('os.environ["NDEV"]', "1"), n_devices=1)
    mtimes = {f: os.stat(os.path.join(run_dir, "chunks", f)).st_mtime_ns
              for f in os.listdir(os.path.join(run_dir, "chunks"))}
    assert len(mtimes) == 2
    out = on_host_devices(code.replace('os.environ["NDEV"]', "2"), n_devices=2)
    values = eval(out.strip().splitlines()[-1])
    np.testing.assert_allclose(values, np.sin(np.linspace(0.1, 2.0, 11)) + 1.0, rtol=1e-6)
    for f, t in mtimes.items():
        assert os.stat(os.path.join(run_dir, "chunks", f)).st_mtime_ns == t
