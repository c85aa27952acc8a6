import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from phasejax.phase import run_chunked


def _fn(chunk):
    a, w = jnp.asarray(chunk["alpha"]), jnp.asarray(chunk["omega"])
    return dict(value=jnp.sin(a) * w + a**2, twice=2 * a)


TASKS = dict(alpha=np.linspace(0.1, 2.0, 11), omega=np.linspace(0, 1, 11))
CONFIG = dict(kind="unit-test", version=1)


def test_resume_recomputes_nothing_finished_and_matches_uninterrupted(tmp_path):
    full = run_chunked(_fn, TASKS, str(tmp_path / "full"), CONFIG, chunk_size=3, progress=False)
    part_dir = str(tmp_path / "killed")
    assert run_chunked(_fn, TASKS, part_dir, CONFIG, chunk_size=3, progress=False, max_chunks=2) is None
    chunk_files = sorted(os.listdir(os.path.join(part_dir, "chunks")))
    assert chunk_files == ["chunk_00000.npz", "chunk_00001.npz"]
    mtimes = {f: os.stat(os.path.join(part_dir, "chunks", f)).st_mtime_ns for f in chunk_files}
    resumed = run_chunked(_fn, TASKS, part_dir, CONFIG, chunk_size=3, progress=False)
    for f, t in mtimes.items():   # finished chunks were loaded, not rewritten
        assert os.stat(os.path.join(part_dir, "chunks", f)).st_mtime_ns == t
    for k in full:
        np.testing.assert_array_equal(full[k], resumed[k])
    np.testing.assert_allclose(full["twice"], 2 * TASKS["alpha"])
    rec = json.load(open(os.path.join(part_dir, "config.json")))
    assert rec["version"] and rec["config"] == CONFIG and rec["n_chunks"] == 4


def test_a_truncated_chunk_is_recomputed(tmp_path):
    d = str(tmp_path / "run")
    ref = run_chunked(_fn, TASKS, d, CONFIG, chunk_size=4, progress=False)
    with open(os.path.join(d, "chunks", "chunk_00001.npz"), "wb") as fh:
        fh.write(b"PK\x03\x04 truncated")
    again = run_chunked(_fn, TASKS, d, CONFIG, chunk_size=4, progress=False)
    np.testing.assert_array_equal(ref["value"], again["value"])


def test_a_run_directory_refuses_another_config(tmp_path):
    d = str(tmp_path / "run")
    run_chunked(_fn, TASKS, d, CONFIG, chunk_size=4, progress=False)
    with pytest.raises(ValueError, match="another config"):
        run_chunked(_fn, TASKS, d, dict(CONFIG, version=2), chunk_size=4, progress=False)
    with pytest.raises(ValueError, match="another config"):
        run_chunked(_fn, dict(TASKS, alpha=TASKS["alpha"] + 1), d, CONFIG, chunk_size=4, progress=False)


def test_bad_task_tables_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="omega"):
        run_chunked(_fn, dict(alpha=np.ones(3), omega=np.ones(2)), str(tmp_path), CONFIG, progress=False)
