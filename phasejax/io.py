"""Files: atomic writes, CSV / JSON / NPZ tables (never pickle), and the digest of the package's source.

Every writer goes through `atomic_write_bytes`: the data land in a temporary
file in the target folder, are flushed to disk, and replace the target with
`os.replace`, so a reader (or a resumed run) sees either the old file or the
complete new one, never a truncated one.

Tables are dicts of equal-length 1-d columns (`dict[str, np.ndarray]`).
`write_csv` formats floats with `repr` (round-trips exactly), integers as
integers, booleans as `0`/`1`, and leaves strings as they are; `read_csv`
parses them back (numeric columns become `int64` or `float64`, empty cells
`NaN`, anything else stays a string column).

`source_digest` hashes every `*.py` file of the package (`tree_digest`): part of every run fingerprint
(`phasejax.sweep`) and of every stored program's key (`phasejax.xla`).

Example:
  >>> import numpy as np, tempfile, os
  >>> path = os.path.join(tempfile.mkdtemp(), "t.csv")
  >>> _ = write_csv(path, {"alpha": np.array([0.5, 1.0]), "branch": np.array(["positional", "semantic"])})
  >>> read_csv(path)["alpha"].tolist()
  [0.5, 1.0]
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io as _stdlib_io
import json
import os
import tempfile
import zipfile
from typing import Mapping, Sequence

import numpy as np

Table = dict[str, np.ndarray]


def atomic_write_bytes(path: str, data: bytes) -> str:
    """Write `data` to `path` atomically (temporary file in the same folder, fsync, `os.replace`); returns `path`.

    An `OSError` (a full disk, a read-only folder) names `path`, not the temporary file."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.errno is not None:
            raise type(e)(e.errno, e.strerror, os.fspath(path)) from None
        raise
    return path


def atomic_write_text(path: str, text: str) -> str:
    """Write `text` (UTF-8) to `path` atomically; returns `path`."""
    return atomic_write_bytes(path, text.encode())


def json_ready(obj):
    """`obj` as strict JSON data: numpy scalars and arrays as Python numbers and lists, tuples as lists, keys as
    strings, and NaN / inf as `None` (JSON has no NaN: every file phasejax writes is strict JSON, a missing or
    non-finite number is `null`). Other objects are left for the encoder.

    >>> json_ready({"a": (1.0, float("nan")), "b": np.float32(2.5)})
    {'a': [1.0, None], 'b': 2.5}
    """
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, np.ndarray)):
        return [json_ready(v) for v in (obj.tolist() if isinstance(obj, np.ndarray) else obj)]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def _json_default(obj):
    return str(obj)


def to_json(obj) -> str:
    """Indented, key-sorted, strict JSON of `obj` (`json_ready`: numpy values as plain numbers and lists, NaN and
    inf as `null`)."""
    return json.dumps(json_ready(obj), indent=2, sort_keys=True, allow_nan=False, default=_json_default) + "\n"


def json_line(obj) -> str:
    """One line of strict JSON (`json_ready`; for commands that print a JSON line per result)."""
    return json.dumps(json_ready(obj), allow_nan=False, default=_json_default)


def atomic_write_json(path: str, obj) -> str:
    """Write `obj` as indented, key-sorted, strict JSON (`to_json`) to `path` atomically; returns `path`."""
    return atomic_write_text(path, to_json(obj))


def number(value) -> float:
    """A number read from JSON as a float: `null` (how phasejax writes NaN and inf) becomes NaN."""
    return float("nan") if value is None else float(value)


def _read_text(path: str) -> str:
    """The text of `path` (UTF-8); `ValueError` naming the file when it is not text."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not a text file (byte {e.start} is not UTF-8); it is damaged or of another "
                         "kind") from None


def read_json(path: str, *, kind: type | None = None):
    """Load a JSON file; `ValueError` naming the file when it is empty, not text or not JSON, or (with `kind`, e.g.
    `dict`) when its top level is not of that type. Files of older versions that hold bare `NaN` / `Infinity`
    are read too (as float NaN / inf); phasejax writes `null` for them now."""
    text = _read_text(path)
    try:
        obj = json.loads(text)
    except ValueError as e:
        what = "is empty" if not text.strip() else f"is not valid JSON ({e})"
        raise ValueError(f"{path} {what}") from None
    if kind is not None and not isinstance(obj, kind):
        raise ValueError(f"{path} must hold a JSON {'object' if kind is dict else kind.__name__}, "
                         f"got a {type(obj).__name__}")
    return obj


def concat_tables(tables: Sequence[Mapping[str, Sequence]]) -> Table:
    """Row-concatenate tables (dicts of equal-length columns) with the same columns, in the first one's order."""
    return {k: np.concatenate([np.asarray(t[k]) for t in tables]) for k in tables[0]}


def atomic_save_npz(path: str, arrays: Mapping[str, np.ndarray]) -> str:
    """Save arrays to an `.npz` file atomically (no pickled objects); returns `path`."""
    buf = _stdlib_io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return atomic_write_bytes(path, buf.getvalue())


def load_npz(path: str) -> Table | None:
    """Load an `.npz` file written by `atomic_save_npz` (`allow_pickle=False`); `None` if missing or corrupt."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
        return None


def format_value(x) -> str:
    """One CSV cell: `repr` of floats (exact round trip; empty for NaN), integers, `0`/`1` for booleans, strings as is."""
    if isinstance(x, str):
        return x
    a = np.asarray(x)
    if a.dtype.kind in "US":
        return str(a)
    if a.dtype == bool:
        return "1" if bool(a) else "0"
    if np.issubdtype(a.dtype, np.integer):
        return str(int(a))
    v = float(a)
    return "" if np.isnan(v) else repr(v)


def write_csv(path: str, columns: Mapping[str, Sequence], order: Sequence[str] | None = None) -> str:
    """Write a table (dict of equal-length columns) to CSV atomically; returns `path`.

    `order` picks and orders the columns (default: all, in dict order).
    Raises `ValueError` if the columns differ in length.
    """
    names = list(columns) if order is None else list(order)
    cols = [np.asarray(columns[k]) for k in names]
    lengths = {c.shape[0] if c.ndim else 1 for c in cols}
    if len(lengths) > 1:
        raise ValueError(f"columns of {path} have different lengths: "
                         + ", ".join(f"{k}={c.shape[0] if c.ndim else 1}" for k, c in zip(names, cols)))
    n = lengths.pop() if lengths else 0
    buf = _stdlib_io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    for i in range(n):
        writer.writerow([format_value(c[i] if c.ndim else c) for c in cols])
    return atomic_write_text(path, buf.getvalue())


def _parse_column(values: list[str]) -> np.ndarray:
    if all(v.lstrip("-").isdigit() for v in values if v != "") and all(v != "" for v in values):
        return np.asarray([int(v) for v in values], dtype=np.int64)
    try:
        return np.asarray([float(v) if v != "" else np.nan for v in values], dtype=np.float64)
    except ValueError:
        return np.asarray(values)


COLUMN_KINDS = ("number", "int", "str", "bool")
"""Kinds `read_csv(required=...)` checks: `number` (int or float, empty cells are NaN), `int`, `str` (any text),
`bool` (`0`/`1`)."""


def read_csv(path: str, required: Mapping[str, str] | Sequence[str] | None = None, *, min_rows: int = 0) -> Table:
    """Read a CSV written by `write_csv` into a dict of numpy columns (ints, floats, or strings).

    Every row must have as many cells as the header (a truncated or ragged file is a `ValueError` naming the file
    and the line). `required` names columns that must be there: a sequence of names, or `{name: kind}` with a kind
    of `COLUMN_KINDS` each column must parse as (`"abc"` in a `number` column is a `ValueError` naming the file,
    the column and the line). `min_rows`: the fewest data rows accepted.
    """
    try:
        rows = list(csv.reader(_stdlib_io.StringIO(_read_text(path), newline="")))
    except csv.Error as e:
        raise ValueError(f"{path} is not a readable CSV ({e})") from None
    if not rows:
        raise ValueError(f"{path} is empty (no header)")
    header, body = rows[0], rows[1:]
    if len(set(header)) != len(header):
        raise ValueError(f"{path}: duplicate column names in the header {header}")
    for line, r in enumerate(body, start=2):
        if len(r) != len(header):
            raise ValueError(f"{path}, line {line}: {len(r)} cells, the header has {len(header)} "
                             "(a truncated or damaged file)")
    if len(body) < min_rows:
        raise ValueError(f"{path} has {len(body)} data rows, at least {min_rows} needed")
    table = {name: _parse_column([r[j] for r in body]) for j, name in enumerate(header)}
    if required is not None:
        kinds = dict(required) if isinstance(required, Mapping) else {k: None for k in required}
        missing = [k for k in kinds if k not in table]
        if missing:
            raise ValueError(f"{path} lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
        for name, kind in kinds.items():
            if kind is not None:
                _check_kind(path, name, kind, table[name], [r[header.index(name)] for r in body])
    return table


def _check_kind(path: str, name: str, kind: str, column: np.ndarray, cells: list[str]) -> None:
    if kind not in COLUMN_KINDS:
        raise ValueError(f"column kind must be one of {COLUMN_KINDS}, got {kind!r}")
    if kind == "str":
        return
    ok = {"number": lambda c: c.dtype.kind in "iuf",
          "int": lambda c: c.dtype.kind in "iu",
          "bool": lambda c: c.dtype.kind in "iu" and bool(np.all((c == 0) | (c == 1)))}[kind](column)
    if not ok:
        what = {"number": "a number", "int": "an integer", "bool": "0 or 1"}[kind]
        bad = next((i for i, v in enumerate(cells) if not _cell_is(kind, v)), 0)
        raise ValueError(f"{path}, column {name!r}, line {bad + 2}: expected {what}, got {cells[bad]!r}")


def _cell_is(kind: str, v: str) -> bool:
    if kind == "bool":
        return v in ("0", "1")
    if kind == "int":
        return v.lstrip("-").isdigit()
    if v == "":
        return True
    try:
        float(v)
        return True
    except ValueError:
        return False


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """SHA-256 (16 hex digits) of the phasejax package's Python source (every `*.py` under the package, by
    relative path and content), computed once per process.

    Part of every run fingerprint next to the version: `phasejax.sweep.callable_identity` hashes a batch
    function, its closures and the module functions it names, but not everything those call in turn, so an edit
    of a deeper library function (a development checkout keeps its version number) would otherwise let a run
    directory return results of the old code."""
    return tree_digest(os.path.dirname(os.path.abspath(__file__)))


def tree_digest(root: str) -> str:
    """SHA-256 (16 hex digits) of every `*.py` file under `root`, by relative path and content."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
        for name in sorted(f for f in filenames if f.endswith(".py")):
            path = os.path.join(dirpath, name)
            h.update(os.path.relpath(path, root).replace(os.sep, "/").encode())
            with open(path, "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()[:16]


def csv_header(path: str) -> list[str]:
    """The column names of a CSV file (its first line only, so a large table costs nothing); `ValueError` naming the
    file when it is empty, not text or not CSV."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            header = next(csv.reader(fh), None)
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not a text file (byte {e.start} is not UTF-8); it is damaged or of another "
                         "kind") from None
    except csv.Error as e:
        raise ValueError(f"{path} is not a readable CSV ({e})") from None
    if not header:
        raise ValueError(f"{path} is empty (no header)")
    return header


def lacks(path: str, needs: Sequence[str]) -> list[str]:
    """Which of `needs` the file `path` lacks: columns of a CSV file (`csv_header`; `"lambda|lam"`: either name), keys
    of a JSON object (dotted for nested keys: `"config.sigma"`), arrays of an NPZ file; in the order of `needs`.
    `ValueError` naming the file when it cannot be read as its suffix says.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "s.json")
    >>> _ = atomic_write_json(path, {"config": {"sigma": 0.5}})
    >>> lacks(path, ["config.sigma", "config.lam", "command"])
    ['config.lam', 'command']
    """
    if path.endswith((".csv", ".npz")):
        if path.endswith(".csv"):
            have = set(csv_header(path))
        else:
            try:
                with np.load(path, allow_pickle=False) as z:
                    have = set(z.files)
            except (OSError, ValueError, EOFError, zipfile.BadZipFile):
                raise ValueError(f"{path} is not a readable NPZ file") from None
        return [k for k in needs if not any(name in have for name in k.split("|"))]
    obj = read_json(path, kind=dict)
    missing = []
    for key in needs:
        node = obj
        for part in key.split("."):
            node = node.get(part, _ABSENT) if isinstance(node, dict) else _ABSENT
        if node is _ABSENT:
            missing.append(key)
    return missing


_ABSENT = object()

