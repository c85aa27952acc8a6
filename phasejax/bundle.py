"""Result bundles: a folder of CSV tables, NPZ arrays and JSON documents written and read back as one object.

A result class declares its files once, as a tuple of `BundleFile`s, and gets `write(out_dir)` and
`load(out_dir)` from `ResultBundle`:

* the suffix of a file's name picks its format: `.csv` a table (dict of 1-d columns, `phasejax.io.write_csv`),
  `.npz` a dict of arrays (`atomic_save_npz`), `.json` a JSON object (`atomic_write_json`); every write is
  atomic and `write` returns the paths in the order of the declaration;
* `load` checks what it reads: a missing file is a `FileNotFoundError` naming it, a table without a `required`
  column (or an NPZ / JSON file without a required key) a `ValueError` naming the file and the column;
* an `optional` file is written only when its content is not empty (a stale copy is removed) and reads back as
  `{}` when absent; a `derived` file (a summary computed at write time) is written but not read back;
* two hooks keep what is a class's own in the class: `to_files` (what each file holds, e.g. codes written as
  names, a summary computed from the tables) and `from_files` (the object from what was read, e.g. columns that
  older files lack).

`write_bundle` and `read_bundle` are the same two steps as plain functions.

Example:
  >>> import dataclasses, tempfile
  >>> import numpy as np
  >>> @dataclasses.dataclass
  ... class Sweep(ResultBundle):
  ...     runs: dict
  ...     config: dict
  ...     FILES = (BundleFile("runs.csv", required=("alpha", "seed"), dtypes={"init": str}),
  ...              BundleFile("config.json"))
  >>> out = tempfile.mkdtemp()
  >>> sweep = Sweep(runs=dict(alpha=np.array([0.5, 1.0]), seed=np.array([0, 1]), init=np.array(["a", "b"])),
  ...               config=dict(steps=100))
  >>> [p[len(out) + 1:] for p in sweep.write(out)]
  ['runs.csv', 'config.json']
  >>> back = Sweep.load(out)
  >>> back.runs["alpha"].tolist(), back.config
  ([0.5, 1.0], {'steps': 100})
"""

from __future__ import annotations

import dataclasses
import errno
import os
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from phasejax.io import atomic_save_npz, atomic_write_json, load_npz, read_csv, read_json, write_csv

KINDS = ("csv", "npz", "json")
"""File formats of a bundle, picked by the suffix of the file's name."""


@dataclasses.dataclass(frozen=True)
class BundleFile:
    """One file of a result bundle.

    Attributes:
      name: the file's name in the bundle's folder; its suffix (`KINDS`) picks the format.
      field: the key of its content in `to_files` / `from_files` (default: the name without its suffix), by
        default the dataclass field that holds it.
      columns: (CSV) the columns written, in this order (default: all, in the table's order).
      required: columns of a CSV file (names, or `{name: kind}` with a `phasejax.io.COLUMN_KINDS` kind that
        each cell must parse as), arrays of an NPZ file, keys of a JSON file; `load` checks them.
      dtypes: (CSV) columns cast after reading, e.g. `{"model": str, "stuck": bool, "seed": np.int64}`
        (only those the file has).
      min_rows: (CSV) the fewest data rows `load` accepts.
      optional: written only when its content is not empty (`None` or no entries), a stale file of the same
        name removed; read back as `{}` when absent.
      derived: computed at write time from the rest (a summary): written, not read back.
    """

    name: str
    field: str = ""
    columns: Sequence[str] | None = None
    required: Sequence[str] | Mapping[str, str] = ()
    dtypes: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    min_rows: int = 0
    optional: bool = False
    derived: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"name must end in one of {['.' + k for k in KINDS]}, got name={self.name!r}")
        if not self.field:
            object.__setattr__(self, "field", self.name.rsplit(".", 1)[0])
        if self.kind != "csv":
            for arg in ("columns", "dtypes", "min_rows"):
                if getattr(self, arg):
                    raise ValueError(f"{arg} applies to CSV tables only, got {arg}={getattr(self, arg)!r} for "
                                     f"{self.name!r}")

    @property
    def kind(self) -> str:
        """`"csv"`, `"npz"` or `"json"` (the suffix of `name`)."""
        return self.name.rsplit(".", 1)[-1] if "." in self.name else ""


def _is_empty(value) -> bool:
    return value is None or len(value) == 0


def write_file(path: str, spec: BundleFile, value) -> str:
    """Write one file's content `value` (table, dict of arrays or JSON object) atomically; returns `path`."""
    if spec.kind == "csv":
        return write_csv(path, value, order=spec.columns)
    if spec.kind == "npz":
        return atomic_save_npz(path, value)
    return atomic_write_json(path, value)


def read_file(path: str, spec: BundleFile):
    """Read one file back and check it (`spec.required`, `spec.min_rows`; `spec.dtypes` applied).

    A missing file is a `FileNotFoundError` naming it; a missing column, array or key a `ValueError` naming the
    file and what it lacks."""
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, "result file missing", path)
    if spec.kind == "csv":
        value = read_csv(path, min_rows=spec.min_rows)
    elif spec.kind == "npz":
        value = load_npz(path)
        if value is None:
            raise ValueError(f"{path} is not a readable NPZ file")
    else:
        value = read_json(path, kind=dict)
    missing = [k for k in spec.required if k not in value]
    if missing:
        what = {"csv": "column", "npz": "array", "json": "key"}[spec.kind]
        raise ValueError(f"{path} lacks the {what}{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                         f"(has {', '.join(value)})")
    if isinstance(spec.required, Mapping) and any(spec.required.values()):
        read_csv(path, required={k: v for k, v in spec.required.items() if v})   # cells of the right kind
    for k, dtype in spec.dtypes.items():
        if k in value:
            value[k] = np.asarray(value[k]).astype(dtype)
    return value


def write_bundle(out_dir: str, files: Sequence[BundleFile], contents: Mapping[str, Any]) -> list[str]:
    """Write `contents[f.field]` to `out_dir/f.name` for each of `files` (optional empty ones skipped, a stale copy
    removed); returns the paths written, in the order of `files`."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for spec in files:
        if spec.field not in contents:
            raise ValueError(f"no content for {spec.name!r} (contents has {', '.join(contents)})")
        path, value = os.path.join(out_dir, spec.name), contents[spec.field]
        if spec.optional and _is_empty(value):
            if os.path.exists(path):
                os.remove(path)
            continue
        paths.append(write_file(path, spec, value))
    return paths


def read_bundle(out_dir: str, files: Sequence[BundleFile]) -> dict[str, Any]:
    """`{f.field: content}` of each of `files` that is not `derived` (an absent optional file: `{}`)."""
    contents = {}
    for spec in files:
        if spec.derived:
            continue
        path = os.path.join(out_dir, spec.name)
        contents[spec.field] = {} if spec.optional and not os.path.exists(path) else read_file(path, spec)
    return contents


class ResultBundle:
    """Base of the result classes written as a folder of files: declare `FILES`, get `write` and `load`.

    A subclass is a (plain or frozen) dataclass whose fields hold the files' contents and whose class attribute
    `FILES` is a tuple of `BundleFile`s (see the module's example). Override `to_files` to encode fields or add
    derived files, `from_files` for fix-ups after loading (columns older files lack), and `bundle_files` when an
    instance writes extra files of its own.
    """

    FILES: ClassVar[tuple[BundleFile, ...]] = ()

    def bundle_files(self) -> tuple[BundleFile, ...]:
        """The files `write` writes (default: `FILES`)."""
        return tuple(type(self).FILES)

    def to_files(self) -> dict[str, Any]:
        """Content of each file by its `field` (default: the attribute of that name, for the files not derived)."""
        return {f.field: getattr(self, f.field) for f in self.bundle_files() if not f.derived}

    @classmethod
    def from_files(cls, contents: dict[str, Any], out_dir: str):
        """The object from the contents `load` read (by `field`; default `cls(**contents)`)."""
        return cls(**contents)

    def write(self, out_dir: str) -> list[str]:
        """Write the bundle into `out_dir` (created if needed); returns the paths, in the order of the files."""
        return write_bundle(out_dir, self.bundle_files(), self.to_files())

    @classmethod
    def load(cls, out_dir: str):
        """Read back what `write` wrote (files and columns checked, see `read_file`)."""
        if cls.FILES and all(f.derived for f in cls.FILES):
            raise TypeError(f"{cls.__name__} is written only (every file of it is derived)")
        return cls.from_files(read_bundle(out_dir, cls.FILES), out_dir)
