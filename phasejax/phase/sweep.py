"""Chunked, resumable, sharded execution of a vmapped function over a task table.

`run_chunked` splits a table of tasks (a dict of equal-length 1-d arrays)
into fixed-size chunks, runs each chunk as one compiled call of a vmapped
pure function (sharded over the given devices with `jax.shard_map`), writes
each finished chunk atomically to `run_dir/chunks/` as NPZ, and on a re-run
with the same config loads finished chunks instead of recomputing them.

Multi-host: call `jax.distributed.initialize()` in every process and pass
`process_index=jax.process_index(), process_count=jax.process_count()`;
process `i` computes chunks `i, i + count, ...` on its local devices into a
shared `run_dir`, and `run_chunked` returns the full table only once every
chunk is on disk (the other processes get `None`; re-run process 0, or any
process, to assemble).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from typing import Callable, Mapping

import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec

import phasejax

Tasks = Mapping[str, np.ndarray]


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write `data` to `path` atomically (temporary file in the same folder, then `os.replace`)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str, obj) -> str:
    """Write `obj` as indented, key-sorted JSON to `path` atomically; returns `path`."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
    return path


def _save_npz_atomic(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    import io

    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    atomic_write_bytes(path, buf.getvalue())


def config_fingerprint(config: Mapping, tasks: Tasks) -> str:
    """SHA-256 of the JSON config and the task table: a run directory belongs to one fingerprint."""
    h = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for key in sorted(tasks):
        h.update(key.encode())
        h.update(np.ascontiguousarray(tasks[key]).tobytes())
    return h.hexdigest()


def sharded(fn: Callable, devices) -> Callable:
    """Run a batch function with its leading axis split over `devices` (a 1-d mesh, `shard_map`)."""
    if len(devices) == 1:
        return jax.jit(fn)
    mesh = Mesh(np.asarray(devices), ("batch",))
    spec = PartitionSpec("batch")
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False))


def run_chunked(
    fn: Callable[[dict], dict],
    tasks: Tasks,
    run_dir: str | None,
    config: Mapping,
    *,
    chunk_size: int = 16,
    devices=None,
    progress: bool = True,
    process_index: int = 0,
    process_count: int = 1,
    max_chunks: int | None = None,
) -> dict[str, np.ndarray] | None:
    """Run `fn` over `tasks` chunk by chunk; resumable; returns the concatenated outputs.

    Args:
      fn: pure batch function `dict[str, (C,) array] -> dict[str, (C, ...) array]`
        (vmapped inside); called with chunks of exactly `chunk_size` tasks (the
        last chunk is padded by repeating its last task; padding is dropped).
      tasks: dict of equal-length 1-d numpy arrays (one entry per task).
      run_dir: output folder; `config.json` and `chunks/chunk_XXXXX.npz` go there
        (`None`: a temporary folder, so nothing is kept or resumed).
      config: JSON-serialisable description of the run (recorded with the
        library version; a run directory holding another config is refused).
      chunk_size: tasks per compiled call; rounded up to a multiple of the
        number of devices.
      devices: devices to shard each chunk over (default: all local devices).
      max_chunks: stop after computing this many new chunks (for tests and
        time-boxed jobs); the function then returns `None`.
    Returns:
      dict of arrays with a leading axis of `len(tasks)`, in task order, or
      `None` if not every chunk is finished yet.
    """
    if run_dir is None:   # nothing to resume: a temporary folder, removed afterwards
        with tempfile.TemporaryDirectory() as tmp:
            return run_chunked(fn, tasks, tmp, config, chunk_size=chunk_size, devices=devices, progress=progress,
                               process_index=process_index, process_count=process_count, max_chunks=max_chunks)
    names = list(tasks)
    if not names:
        raise ValueError("tasks must hold at least one column")
    n = len(np.asarray(tasks[names[0]]))
    if n == 0:
        raise ValueError("tasks is empty")
    for k in names:
        if np.asarray(tasks[k]).shape != (n,):
            raise ValueError(f"task column {k!r} must have shape ({n},), got {np.asarray(tasks[k]).shape}")
    devices = list(jax.local_devices() if devices is None else devices)
    chunk_size = min(max(1, chunk_size), n)   # never pad a small task table up to a large chunk
    chunk_size = int(np.ceil(chunk_size / len(devices)) * len(devices))
    n_chunks = int(np.ceil(n / chunk_size))
    fingerprint = config_fingerprint(config, tasks)

    os.makedirs(os.path.join(run_dir, "chunks"), exist_ok=True)
    cfg_path = os.path.join(run_dir, "config.json")
    record = dict(config=dict(config), fingerprint=fingerprint, library="phasejax",
                  version=phasejax.__version__, n_tasks=n, chunk_size=chunk_size, n_chunks=n_chunks)
    if os.path.exists(cfg_path):
        with open(cfg_path) as fh:
            old = json.load(fh)
        if old.get("fingerprint") != fingerprint or old.get("chunk_size") != chunk_size:
            raise ValueError(
                f"{run_dir} holds a run with another config (fingerprint or chunk size differ); "
                "use a new run directory or delete the old one"
            )
    else:
        atomic_write_json(cfg_path, record)

    def chunk_path(i: int) -> str:
        return os.path.join(run_dir, "chunks", f"chunk_{i:05d}.npz")

    def load(i: int):
        try:
            with np.load(chunk_path(i), allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
            return None  # missing, truncated or corrupt: recompute

    mine = [i for i in range(n_chunks) if i % process_count == process_index]
    parts = {i: load(i) for i in mine}
    todo = [i for i in mine if parts[i] is None]
    run = sharded(fn, devices)
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=f"chunks ({len(mine) - len(todo)} of {len(mine)} already done)",
                   unit="chunk")
    computed = 0
    for i in todo:
        if max_chunks is not None and computed >= max_chunks:
            break
        idx = np.arange(i * chunk_size, (i + 1) * chunk_size)
        valid = idx < n
        idx = np.where(valid, idx, n - 1)
        chunk = {k: np.asarray(tasks[k])[idx] for k in names}
        out = jax.device_get(run(chunk))
        out = {k: np.asarray(v)[valid] for k, v in out.items()}
        out["_task_index"] = idx[valid]
        _save_npz_atomic(chunk_path(i), out)
        parts[i] = out
        computed += 1
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()

    # other processes' chunks (multi-host) are read from disk once ours are done
    parts = [parts[i] if i in parts else load(i) for i in range(n_chunks)]
    if any(p is None for p in parts):
        return None
    result = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.argsort(result.pop("_task_index"), kind="stable")
    return {k: v[order] for k, v in result.items()}
