"""Chunked, resumable, sharded execution of a pure batch function over a task table.

Every sweep of phasejax (phase diagrams, trained students, GAMP, counting and
the other tasks) runs through `run_chunked`:

* the task table (a dict of equal-length 1-d arrays) is cut into chunks of
  `RunOptions.chunk_size` tasks; each chunk is one compiled call of the batch
  function, split over the devices with `jax.shard_map` (a chunk is padded to
  a multiple of the device count and the padding dropped, so the chunking,
  hence a run directory, does not depend on the number of devices: a run
  started on a CPU resumes on 8 GPUs);
* every finished chunk is written atomically to `run_dir/chunks/` as NPZ,
  carrying its identity (the run's fingerprint, its index and the task ids it
  holds) and a SHA-256 checksum of its content (`seal_chunk`); a re-run loads
  finished chunks instead of recomputing them, after checking all of these
  (`chunk_problem`): a damaged, truncated, edited, swapped or foreign chunk is
  reported with its path, moved aside (`*.rejected`) and recomputed, never
  merged;
* `run_dir/config.json` records the run's complete configuration, its
  fingerprint (a SHA-256 of the configuration's *content*, of the task table,
  of the library version and of a digest of the library's source, so that an
  edit of any phasejax function invalidates old chunks) and the chunking. A run directory holding
  another fingerprint is refused with the keys that differ named.
  Functions in a configuration (a custom target, a student) are identified
  by `callable_identity`: a hash of their code, constants, defaults and
  closure values, not by their name.

Multi-host: call `jax.distributed.initialize()` in every process and pass
`RunOptions(process_index=jax.process_index(), process_count=jax.process_count())`;
process `i` computes chunks `i, i + count, ...` on its local devices into a
shared `run_dir`, and `run_chunked` returns the full table once every chunk
is on disk (before that, `None`).

Example:
  >>> import jax.numpy as jnp, numpy as np
  >>> out = run_chunked(lambda c: {"y": jnp.asarray(c["x"]) ** 2}, {"x": np.arange(5.0)},
  ...                   {"kind": "square"}, RunOptions(chunk_size=2, progress=False))
  >>> out["y"].tolist()
  [0.0, 1.0, 4.0, 9.0, 16.0]
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import os
import tempfile
import types
from typing import Any, Callable, Mapping

import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from phasejax import progress
from phasejax._errors import RunError
from phasejax.io import atomic_save_npz, atomic_write_json, load_npz, read_json, source_digest

Tasks = Mapping[str, np.ndarray]


# ----------------------------------------------------------------------------
# Options
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a sweep runs (shared by every sweep of phasejax); none of it changes the results.

    Attributes:
      run_dir: folder for `config.json` and the chunk files; a re-run with the
        same configuration resumes there. `None` (the default for every
        sweep) computes in a temporary folder that is removed afterwards.
      chunk_size: tasks per compiled call (memory grows with it).
      devices: devices to shard each chunk over (default: all local devices).
      process_index, process_count: this process and the number of processes
        of a multi-host run (`jax.process_index()`, `jax.process_count()`).
      progress: show a progress bar over the tasks, with an ETA (tqdm, on stderr, when stderr is a terminal),
        or, when it is not (a batch job's log), one line per finished chunk (`phasejax.progress.ChunkLines`).
      max_chunks: compute at most this many new chunks, then return `None`
        (for time-boxed jobs and tests).
    """

    run_dir: str | None = None
    chunk_size: int = 16
    devices: tuple | None = None
    process_index: int = 0
    process_count: int = 1
    progress: bool = True
    max_chunks: int | None = None

    def __post_init__(self):
        if self.run_dir is not None and not isinstance(self.run_dir, (str, os.PathLike)):
            raise ValueError(f"run_dir must be a path or None, got {self.run_dir!r}")
        for name in ("chunk_size", "process_count"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        pi = self.process_index
        if isinstance(pi, bool) or not isinstance(pi, (int, np.integer)) or not 0 <= pi < self.process_count:
            raise ValueError(f"process_index must be an integer in [0, process_count={self.process_count}), got {pi!r}")
        if self.max_chunks is not None and (isinstance(self.max_chunks, bool) or int(self.max_chunks) != self.max_chunks
                                            or self.max_chunks < 0):
            raise ValueError(f"max_chunks must be a non-negative integer or None, got {self.max_chunks!r}")
        if self.devices is not None:
            object.__setattr__(self, "devices", tuple(self.devices))
            if not self.devices:
                raise ValueError("devices must hold at least one device (or be None for all local devices)")
        if self.run_dir is not None:
            object.__setattr__(self, "run_dir", os.fspath(self.run_dir))

    def replace(self, **changes) -> "RunOptions":
        return dataclasses.replace(self, **changes)


def run_options(options: RunOptions | None = None, **overrides) -> RunOptions:
    """`options` (default `RunOptions()`) with keyword overrides; the one way sweeps read their options."""
    options = RunOptions() if options is None else options
    if not isinstance(options, RunOptions):
        raise ValueError(f"options must be a RunOptions, got {type(options).__name__}")
    return options.replace(**overrides) if overrides else options


# ----------------------------------------------------------------------------
# Fingerprints by content
# ----------------------------------------------------------------------------


def _code_digest(code: types.CodeType, h) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    h.update(repr(code.co_varnames).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_digest(const, h)
        else:
            h.update(repr(const).encode())


def _value_digest(value, h, depth: int = 0) -> None:
    if callable(value) and not isinstance(value, type) and depth < 4:
        h.update(callable_identity(value, _depth=depth + 1).encode())
    elif isinstance(value, (np.ndarray, jax.Array)) or hasattr(value, "__array__"):
        try:
            a = np.asarray(value)
            h.update(str(a.dtype).encode() + str(a.shape).encode())
            h.update(np.ascontiguousarray(a).tobytes())
        except Exception:  # noqa: BLE001 - an opaque object: fall back to its repr
            h.update(repr(value).encode())
    elif isinstance(value, (types.ModuleType, type)):
        h.update(getattr(value, "__name__", repr(value)).encode())
    else:
        h.update(repr(value).encode())


def callable_identity(fn: Callable, *, _depth: int = 0) -> str:
    """A stable identity of a function's behaviour: `"<qualname>@<hash>"`.

    The hash covers the byte code (and nested code), constants, names,
    default arguments, closure values and the values of the module globals
    the code reads (numbers, strings, arrays; other functions recursively by
    their own identity; modules by name). Two lambdas with the same name but
    different bodies or captured values get different identities. A function
    may declare its identity explicitly with an attribute
    `__phasejax_id__ = "some-unique-name"` (then only that string is used).
    `functools.partial` objects are identified by their function, arguments
    and keywords.
    """
    explicit = getattr(fn, "__phasejax_id__", None)
    if explicit is not None:
        return str(explicit)
    h = hashlib.sha256()
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__qualname__
    if hasattr(fn, "func") and hasattr(fn, "args") and hasattr(fn, "keywords"):   # functools.partial
        h.update(callable_identity(fn.func, _depth=_depth + 1).encode())
        for v in fn.args:
            _value_digest(v, h, _depth)
        for k in sorted(fn.keywords or {}):
            h.update(k.encode())
            _value_digest(fn.keywords[k], h, _depth)
        return f"partial({name})@{h.hexdigest()[:16]}"
    target = getattr(fn, "__func__", fn)          # bound methods
    target = inspect.unwrap(target) if callable(target) else target
    code = getattr(target, "__code__", None)
    if code is None:  # a builtin, a jitted function, a callable object
        wrapped = getattr(target, "__wrapped__", None)
        if wrapped is not None and wrapped is not target:
            return callable_identity(wrapped, _depth=_depth + 1)
        h.update(f"{getattr(target, '__module__', '')}.{name}".encode())
        if not isinstance(target, (types.BuiltinFunctionType, types.FunctionType)) and hasattr(target, "__dict__"):
            for k in sorted(vars(target)):
                h.update(k.encode())
                _value_digest(vars(target)[k], h, _depth)
        return f"{name}@{h.hexdigest()[:16]}"
    _code_digest(code, h)
    for v in (target.__defaults__ or ()):
        _value_digest(v, h, _depth)
    for k, v in sorted((target.__kwdefaults__ or {}).items()):
        h.update(k.encode())
        _value_digest(v, h, _depth)
    for cell in (target.__closure__ or ()):
        try:
            _value_digest(cell.cell_contents, h, _depth)
        except ValueError:   # empty cell
            h.update(b"<empty>")
    globs = getattr(target, "__globals__", {})
    for gname in code.co_names:
        if gname in globs:
            g = globs[gname]
            if isinstance(g, (int, float, complex, str, bytes, bool, tuple, np.ndarray)) or callable(g):
                h.update(gname.encode())
                _value_digest(g, h, _depth)
    return f"{name}@{h.hexdigest()[:16]}"


def canonical_config(config: Any) -> Any:
    """`config` with functions replaced by `callable_identity`, arrays by lists, tuples by lists (JSON-ready)."""
    if isinstance(config, Mapping):
        return {str(k): canonical_config(v) for k, v in config.items()}
    if isinstance(config, (list, tuple)):
        return [canonical_config(v) for v in config]
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: canonical_config(getattr(config, f.name)) for f in dataclasses.fields(config)}
    if isinstance(config, (np.ndarray, jax.Array)):
        return np.asarray(config).tolist()
    if isinstance(config, np.generic):
        return config.item()
    if isinstance(config, float):
        return float(config)
    if callable(config) and not isinstance(config, type):
        return callable_identity(config)
    return config


def config_fingerprint(config: Mapping, tasks: Tasks, version: str | None = None, source: str | None = None) -> str:
    """SHA-256 of the canonical JSON config, the task table, the library version and its source digest
    (`source_digest`)."""
    if version is None:
        from phasejax import __version__ as version
    if source is None:
        source = source_digest()
    h = hashlib.sha256(json.dumps(canonical_config(config), sort_keys=True).encode())
    h.update(f"phasejax={version}".encode())
    h.update(f"source={source}".encode())
    for key in sorted(tasks):
        a = np.ascontiguousarray(np.asarray(tasks[key]))
        h.update(key.encode() + str(a.dtype).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _flatten(obj, prefix: str = "") -> dict:
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def config_differences(old: Mapping, new: Mapping) -> list[str]:
    """Dotted keys whose values differ between two (canonical) configs."""
    a, b = _flatten(old), _flatten(new)
    return sorted(k for k in set(a) | set(b) if a.get(k, "<absent>") != b.get(k, "<absent>"))



# ----------------------------------------------------------------------------
# Chunk files: self-identifying and checksummed
# ----------------------------------------------------------------------------

CHUNK_META = ("_fingerprint", "_chunk_index", "_task_index", "_checksum")
"""Entries of a chunk file besides the outputs: the run's fingerprint, the chunk's index, the task ids (rows of
the task table) it holds, and a SHA-256 of all of these and of the outputs (`chunk_checksum`)."""


def chunk_checksum(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 of a chunk's entries (every key but `_checksum`, by name, dtype, shape and bytes)."""
    h = hashlib.sha256()
    for key in sorted(k for k in arrays if k != "_checksum"):
        a = np.ascontiguousarray(np.asarray(arrays[key]))
        h.update(key.encode() + b"\0" + str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def seal_chunk(outputs: Mapping[str, np.ndarray], fingerprint: str, index: int, task_ids: np.ndarray) -> dict:
    """`outputs` with the chunk's identity (`CHUNK_META`) added: what `run_chunked` writes."""
    sealed = {k: np.asarray(v) for k, v in outputs.items()}
    sealed.update(_fingerprint=np.asarray(fingerprint), _chunk_index=np.asarray(int(index), np.int64),
                  _task_index=np.asarray(task_ids, np.int64))
    sealed["_checksum"] = np.asarray(chunk_checksum(sealed))
    return sealed


def chunk_problem(chunk: Mapping[str, np.ndarray] | None, fingerprint: str, index: int,
                  task_ids: np.ndarray, keys: tuple | None = None) -> str | None:
    """Why a loaded chunk cannot be merged as chunk `index` of the run `fingerprint` holding tasks `task_ids`
    (`None`: it can). Checks the checksum, the fingerprint, the index, the task ids, the outputs' row counts
    and (given `keys`) the output names."""
    if chunk is None:
        return "unreadable (not an NPZ archive, or truncated)"
    missing = [k for k in CHUNK_META if k not in chunk]
    if missing:
        return f"lacks {', '.join(missing)} (not written by this version, or damaged)"
    if str(chunk["_checksum"]) != chunk_checksum(chunk):
        return "its checksum does not match its content (damaged or edited)"
    if str(chunk["_fingerprint"]) != fingerprint:
        return "belongs to another run (different fingerprint)"
    if int(chunk["_chunk_index"]) != index:
        return f"is chunk {int(chunk['_chunk_index'])} of this run, not chunk {index} (moved or copied)"
    ids = np.asarray(chunk["_task_index"])
    if ids.shape != np.shape(task_ids) or not np.array_equal(ids, task_ids):
        return f"holds tasks {ids[:3].tolist()}..., expected {np.asarray(task_ids)[:3].tolist()}..."
    outputs = [k for k in chunk if k not in CHUNK_META]
    if not outputs:
        return "holds no outputs"
    for k in outputs:
        if np.ndim(chunk[k]) == 0 or np.shape(chunk[k])[0] != len(task_ids):
            return f"output {k!r} has {np.shape(chunk[k])[:1] or 'no'} rows, expected {len(task_ids)}"
    if keys is not None and sorted(outputs) != sorted(keys):
        return f"holds the outputs {sorted(outputs)}, the run's other chunks {sorted(keys)}"
    return None


def _reject_chunk(path: str, problem: str) -> None:
    """Report a chunk that cannot be merged and move it aside (`<name>.rejected`), so it is recomputed."""
    import sys

    aside = path + ".rejected"
    try:
        os.replace(path, aside)
        where = f"moved to {aside}"
    except OSError:
        where = "left in place"
    print(f"phasejax: warning: chunk {path} {problem}; {where}, recomputing it", file=sys.stderr, flush=True)

# ----------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------


def sharded(fn: Callable, devices, compiler_options: dict | None = None, identity: str | None = None) -> Callable:
    """Jit `fn` with its leading (batch) axis split over `devices` (a 1-d mesh, `shard_map`), compiled with XLA's
    `compiler_options` (`None`: the defaults). `identity`: on one device, the program is kept in (and loaded
    from) the program store of `phasejax.xla` under this name of what `fn` computes."""
    if len(devices) == 1:
        if identity is not None:
            from phasejax import xla

            return xla.stored_jit(fn, identity, compiler_options)
        return jax.jit(fn, compiler_options=compiler_options)
    mesh = Mesh(np.asarray(devices), ("batch",))
    spec = PartitionSpec("batch")
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False),
                   compiler_options=compiler_options)


def _check_tasks(tasks: Tasks) -> int:
    names = list(tasks)
    if not names:
        raise ValueError("tasks must hold at least one column")
    n = len(np.asarray(tasks[names[0]]))
    if n == 0:
        raise ValueError("tasks is empty")
    for k in names:
        if np.asarray(tasks[k]).shape != (n,):
            raise ValueError(f"task column {k!r} must have shape ({n},), got {np.asarray(tasks[k]).shape}")
    return n


def run_record(config: Mapping, tasks: Tasks, chunk_size: int) -> dict:
    """The `config.json` record of a run: canonical config, fingerprint, version and chunking."""
    from phasejax import __version__

    n = _check_tasks(tasks)
    return dict(config=canonical_config(config), fingerprint=config_fingerprint(config, tasks), library="phasejax",
                version=__version__, source=source_digest(), n_tasks=n, chunk_size=int(min(chunk_size, n)),
                n_chunks=int(np.ceil(n / min(chunk_size, n))))


def _check_run_dir(run_dir: str) -> None:
    if not str(run_dir).strip():
        raise ValueError("run_dir is empty; pass a folder (or None for a temporary one)")
    if os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise ValueError(f"the run directory {run_dir} is a file, not a folder; pass a folder")
    foreign = foreign_entries(run_dir)
    if foreign:
        raise ValueError(f"the run directory {run_dir} holds files that are not a phasejax run's "
                         f"({', '.join(foreign[:4])}{' ...' if len(foreign) > 4 else ''}); pass an empty or new folder")


RUN_ENTRIES = ("config.json", "chunks")
"""What a run directory holds (besides its lock files `.lock-<i>` and atomic writes' `.tmp-*` files)."""


def foreign_entries(run_dir: str) -> list[str]:
    """The entries of `run_dir` (relative paths) that no phasejax run wrote: anything but `RUN_ENTRIES`, lock and
    temporary files, and sub-folders that are run directories themselves (a command's sweeps each have one). Empty
    for a missing or empty folder and for a run directory."""
    if not os.path.isdir(run_dir):
        return []
    out = []
    for name in sorted(os.listdir(run_dir)):
        path = os.path.join(run_dir, name)
        if name in RUN_ENTRIES or name.startswith((".lock-", ".tmp-")):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            out += [os.path.join(name, e) for e in foreign_entries(path)]
        else:
            out.append(name)
    return out


def claim_run_dir(run_dir: str, record: Mapping) -> dict:
    """Create `run_dir/config.json` from `record`, or check that an existing one matches it; returns the record
    the run goes on with.

    A directory of the same run (the same fingerprint) made with another chunk size is reused with its own
    chunking (the chunk size does not change the results; a note on stderr says so), and the record returned
    has its `chunk_size` and `n_chunks`. Raises `ValueError` naming the differing keys when the directory holds
    another run (a different config, task table, library version or source).
    """
    _check_run_dir(run_dir)
    cfg_path = os.path.join(run_dir, "config.json")
    if not os.path.exists(cfg_path):
        os.makedirs(run_dir, exist_ok=True)
        atomic_write_json(cfg_path, dict(record))
        return dict(record)
    try:
        old = read_json(cfg_path, kind=dict)
    except ValueError as e:
        raise ValueError(f"{e}: the run directory {run_dir} is not a phasejax run's; use a new run directory, or "
                         "delete it to recompute") from None
    if old.get("fingerprint") == record["fingerprint"]:
        chunk = old.get("chunk_size")
        if chunk == record["chunk_size"]:
            return dict(record)
        if isinstance(chunk, int) and chunk >= 1:
            import sys

            n = record["n_tasks"]
            print(f"phasejax: note: the run directory {run_dir} holds chunks of {chunk} tasks; going on with that "
                  f"chunk size, not {record['chunk_size']} (the results do not depend on it)", file=sys.stderr)
            return dict(record, chunk_size=int(min(chunk, n)), n_chunks=int(np.ceil(n / min(chunk, n))))
    diffs = [f"config.{k}" for k in config_differences(old.get("config", {}), record["config"])]
    for key in ("version", "source", "n_tasks"):
        if old.get(key) != record[key]:
            diffs.append(f"{key} ({old.get(key)!r} there, {record[key]!r} now)")
    if not diffs:
        diffs.append("the task table (same config, different tasks)")
    raise ValueError(f"{run_dir} holds another run; differing: {', '.join(diffs)}; "
                     "use a new run directory, or delete the old one to recompute")


def run_chunked(
    fn: Callable[[dict], dict],
    tasks: Tasks,
    config: Mapping,
    options: RunOptions | None = None,
    compiler_options: dict | None = None,
    *,
    store_program: bool = False,
) -> dict[str, np.ndarray] | None:
    """Run the batch function `fn` over `tasks` chunk by chunk; resumable; returns the outputs in task order.

    Args:
      fn: pure batch function `dict[str, (C,) array] -> dict[str, (C, ...) array]`
        (vmapped inside); every call gets the same chunk shape (the last chunk
        and the device split are padded by repeating a task; padding is dropped).
      tasks: dict of equal-length 1-d numpy arrays, one entry per task.
      config: JSON-serialisable description of everything the results depend
        on besides the tasks (functions allowed: see `callable_identity`).
      options: `RunOptions` (run directory, chunk size, devices, processes, progress).
      compiler_options: XLA options of the compiled batch function (`jax.jit`'s; `None`: the defaults).
      store_program: keep the compiled batch function's lowered program in the program store of
        `phasejax.xla` (one device; with JAX's persistent compilation cache on), keyed by `config`: only for a
        `config` that names everything `fn` computes, as the phase diagram's does.
    Returns:
      dict of numpy arrays with a leading axis of `len(tasks)`, in task order;
      `None` when not every chunk is on disk yet (`max_chunks`, or other hosts).
    """
    options = run_options(options)
    if options.run_dir is None:   # nothing to resume: a temporary folder, removed afterwards
        with tempfile.TemporaryDirectory() as tmp:
            return run_chunked(fn, tasks, config, options.replace(run_dir=tmp), compiler_options,
                               store_program=store_program)
    _check_run_dir(options.run_dir)
    identity = json.dumps(canonical_config(config), sort_keys=True) if store_program else None
    with run_dir_lock(options.run_dir, options.process_index):
        return _run_chunked(fn, tasks, config, options, compiler_options, identity)


class RunDirectoryBusy(RunError):
    """Another process is computing into the run directory (`run_dir_lock`)."""


@contextlib.contextmanager
def run_dir_lock(run_dir: str, process_index: int = 0):
    """Hold the lock of `run_dir` for process `process_index` (an exclusive `flock` on `run_dir/.lock-<index>`,
    released when the block ends or the process dies), so that two identical runs do not both compute into one
    run directory: the second is refused at once with `RunDirectoryBusy` (a `RunError`) naming the other
    process. The processes of a multi-host run each lock their own index."""
    import fcntl

    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, f".lock-{int(process_index)}")
    fh = open(path, "a+")
    try:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            other = fh.read().strip() or "unknown"
            raise RunDirectoryBusy(f"another process ({other}) is computing into the run directory {run_dir}; wait "
                                   "for it to finish and run again (its chunks are reused), or use another run "
                                   "directory (--run-dir)") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}")
        fh.flush()
        yield
    finally:
        fh.close()


def _run_chunked(fn: Callable[[dict], dict], tasks: Tasks, config: Mapping, options: RunOptions,
                 compiler_options: dict | None = None, identity: str | None = None):
    """`run_chunked` in a run directory whose lock this process holds."""
    n = _check_tasks(tasks)
    names = list(tasks)
    run_dir = options.run_dir
    record = claim_run_dir(run_dir, run_record(config, tasks, options.chunk_size))
    chunk_size, n_chunks = record["chunk_size"], record["n_chunks"]
    os.makedirs(os.path.join(run_dir, "chunks"), exist_ok=True)

    devices = list(jax.local_devices() if options.devices is None else options.devices)
    padded = int(np.ceil(chunk_size / len(devices)) * len(devices))

    def chunk_path(i: int) -> str:
        return os.path.join(run_dir, "chunks", f"chunk_{i:05d}.npz")

    fingerprint = record["fingerprint"]

    def chunk_ids(i: int) -> np.ndarray:
        return np.arange(i * chunk_size, min((i + 1) * chunk_size, n))

    def load_checked(i: int):
        """A chunk on disk that passes every check; None when missing, or rejected (reported, moved aside)."""
        path = chunk_path(i)
        if not os.path.exists(path):
            return None
        chunk = load_npz(path)
        problem = chunk_problem(chunk, fingerprint, i, chunk_ids(i))
        if problem is not None:
            _reject_chunk(path, problem)
            return None
        return chunk

    def compute(i: int) -> dict:
        ids = chunk_ids(i)
        idx = np.arange(i * chunk_size, i * chunk_size + padded)
        valid = idx < ids[-1] + 1
        idx = np.where(valid, idx, ids[-1])
        chunk = {k: np.asarray(tasks[k])[idx] for k in names}
        out = jax.device_get(run(chunk))
        bad = [k for k, v in out.items() if np.ndim(v) == 0 or np.shape(v)[0] != padded]
        if bad:
            raise ValueError(f"the batch function returned outputs without a leading axis of the chunk's "
                             f"{padded} tasks: {bad}")
        sealed = seal_chunk({k: np.asarray(v)[valid] for k, v in out.items()}, fingerprint, i, ids)
        atomic_save_npz(chunk_path(i), sealed)
        return sealed

    mine = [i for i in range(n_chunks) if i % options.process_count == options.process_index]
    parts = {i: load_checked(i) for i in mine}
    todo = [i for i in mine if parts[i] is None]
    run = sharded(fn, devices, compiler_options, identity) if todo else None
    bar = lines = None
    if options.progress and todo and _interactive():
        from tqdm.auto import tqdm

        done = sum(len(chunk_ids(i)) for i in mine if i not in todo)
        bar = tqdm(total=sum(len(chunk_ids(i)) for i in todo), unit="task", dynamic_ncols=True,
                   desc=f"{n} tasks, {done} already done" if done else f"{n} tasks")
    elif options.progress and todo:       # a log file: one line per chunk, no host calls in the compiled programs
        lines = progress.ChunkLines([len(chunk_ids(i)) for i in mine], [len(chunk_ids(i)) for i in todo],
                                    label=config.get("kind") if isinstance(config.get("kind"), str) else "")
    computed = 0
    # the bar also moves inside a chunk's call where the numerics report progress (phasejax.progress)
    tracker = progress.ChunkProgress(bar, lanes=padded) if bar is not None else None
    with progress.active(tracker) if tracker is not None else contextlib.nullcontext():
        finished = 0
        for i in todo:
            if options.max_chunks is not None and computed >= options.max_chunks:
                break
            if tracker is not None:
                tracker.cap = finished + len(chunk_ids(i))
            parts[i] = compute(i)
            computed += 1
            finished += len(chunk_ids(i))
            if tracker is not None:
                tracker.finish_chunk(finished)
            if lines is not None:
                lines.finish_chunk(len(chunk_ids(i)))
    if bar is not None:
        bar.close()

    # other processes' chunks (multi-host) are read from disk once ours are done
    for i in range(n_chunks):
        if i not in parts:
            parts[i] = load_checked(i)
    if any(p is None for p in parts.values()):
        return None
    keys = _output_keys(parts, fn, tasks, names, chunk_ids)
    for i in range(n_chunks):
        problem = chunk_problem(parts[i], fingerprint, i, chunk_ids(i), keys)
        if problem is not None:       # a chunk of another process, or one that changed on disk meanwhile
            _reject_chunk(chunk_path(i), problem)
            if run is None:
                run = sharded(fn, devices, compiler_options, identity)
            parts[i] = compute(i)
            if chunk_problem(parts[i], fingerprint, i, chunk_ids(i), keys) is not None:
                raise ValueError(f"the batch function returns other outputs for chunk {i} than for chunk 0: "
                                 f"{sorted(k for k in parts[i] if k not in CHUNK_META)} vs {sorted(keys)}")
    return {k: np.concatenate([parts[i][k] for i in range(n_chunks)]) for k in keys}


def _output_keys(parts: dict, fn: Callable, tasks: Tasks, names: list, chunk_ids: Callable) -> tuple:
    """The output names of the run: those every chunk holds, or, when chunks disagree (a damaged or foreign one),
    the batch function's own (`jax.eval_shape` on chunk 0: traced, not compiled)."""
    sets = [tuple(sorted(k for k in p if k not in CHUNK_META)) for p in parts.values()]
    first = tuple(k for k in parts[0] if k not in CHUNK_META)
    if len(set(sets)) == 1:
        return first
    ids = chunk_ids(0)
    shapes = jax.eval_shape(fn, {k: np.asarray(tasks[k])[ids] for k in names})
    return tuple(shapes)


def available_memory(device=None) -> int:
    """Bytes a run may use on `device` (default: the first local device): an accelerator's memory limit
    (`memory_stats()["bytes_limit"]`), else the host's physical memory. For size checks before any compile."""
    device = jax.local_devices()[0] if device is None else device
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 - a backend without memory statistics
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 2**34


def _interactive() -> bool:
    """Whether stderr is a terminal (progress bars are drawn only then)."""
    import sys

    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
