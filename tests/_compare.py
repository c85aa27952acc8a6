"""Comparisons of recomputed outputs as parsed values, not as bytes (the tests' shared helper).

A number that is computed again (a replot re-deriving a committed table, a resumed run, the same rows in another
batching) may differ from the first one in its last bits under another numpy, scipy or XLA release, so the tests
compare such outputs as values: numbers within a stated tolerance, `|a - b| <= atol + rtol * max(|a|, |b|)`, NaN
equal to NaN; integers, strings and booleans exactly; the same columns in the same order, the same rows, the same
keys. A failure names the file, the column (or key) and the row, and both values.

Byte equality stays where a file is copied or must be left untouched (nothing overwritten, a read-back round trip
of a file just written, chunks loaded from disk).

Tolerances (each call states its own; these are the usual ones):

* `RTOL_REDERIVED = 1e-12`: float64 numbers re-derived by the same arithmetic (a replot, a resumed run): a few
  units in the last place (2.2e-16), with room for a sum taken in another order.
* `RTOL_FLOAT32 = 1e-6`: float32 numbers computed again by the same arithmetic in another program, batching or
  shape: a few units in float32's last place (1.2e-7).

A computation redone another way (another rule, another batching of a float64 solve with an iteration that may
stop one step apart) is compared within the result's own error bar, or a tolerance its test states and justifies.
"""

from __future__ import annotations

import csv
import json
import math
import os
import struct
import zipfile
from collections.abc import Mapping

import numpy as np

RTOL_REDERIVED = 1e-12
RTOL_FLOAT32 = 1e-6
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _close(a: float, b: float, rtol: float, atol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


def _cell(text: str):
    """A CSV cell as phasejax writes it (`phasejax.io.format_value`): `int` for an integer literal, `float` for a
    number (an empty cell is NaN), else the string."""
    if text == "":
        return math.nan
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def _same_value(got, want, rtol: float, atol: float) -> bool:
    if isinstance(got, float) and isinstance(want, float):
        return _close(got, want, rtol, atol)
    return type(got) is type(want) and got == want


def _read_rows(path: str) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def assert_same_csv(got_path, want_path, *, rtol: float = RTOL_REDERIVED, atol: float = 0.0,
                    tolerances: Mapping[str, tuple[float, float]] | None = None) -> None:
    """`got_path` holds the table of `want_path`: the same header, as many rows, every number within
    `atol + rtol * max(|a|, |b|)` (`tolerances`: `{column: (rtol, atol)}` for the columns that need their own),
    empty cells (NaN) where the other file has them, integers and strings exactly."""
    got, want = _read_rows(str(got_path)), _read_rows(str(want_path))
    name = os.path.basename(str(want_path))
    assert got and want, f"{name}: an empty file (got {len(got)} lines, want {len(want)})"
    assert got[0] == want[0], f"{name}: columns differ\n got  {got[0]}\n want {want[0]}"
    assert len(got) == len(want), f"{name}: {len(got) - 1} rows, want {len(want) - 1}"
    tolerances = dict(tolerances or {})
    unknown = set(tolerances) - set(want[0])
    assert not unknown, f"{name}: tolerances name columns it lacks: {sorted(unknown)}"
    for row, (g, w) in enumerate(zip(got[1:], want[1:])):
        assert len(g) == len(w) == len(want[0]), f"{name}, row {row}: {len(g)} cells, want {len(w)}"
        for column, a, b in zip(want[0], g, w):
            if a == b:
                continue
            r, t = tolerances.get(column, (rtol, atol))
            assert _same_value(_cell(a), _cell(b), r, t), \
                f"{name}, column {column!r}, row {row}: got {a!r}, want {b!r} (rtol {r:g}, atol {t:g})"


def _constant(token: str):
    """Bare `NaN` / `Infinity` of files older versions wrote (phasejax writes `null` now)."""
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[token]


def _same_json(got, want, where: str, rtol: float, atol: float) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: got {type(got).__name__}, want an object"
        assert list(got) == list(want), f"{where}: keys differ\n got  {list(got)}\n want {list(want)}"
        for k in want:
            _same_json(got[k], want[k], f"{where}.{k}", rtol, atol)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), \
            f"{where}: got {got!r}, want a list of {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            _same_json(g, w, f"{where}[{i}]", rtol, atol)
    else:
        assert _same_value(got, want, rtol, atol), f"{where}: got {got!r}, want {want!r} (rtol {rtol:g}, atol {atol:g})"


def assert_same_json(got_path, want_path, *, rtol: float = RTOL_REDERIVED, atol: float = 0.0) -> None:
    """`got_path` holds the JSON document of `want_path`: the same keys in the same order, lists of the same
    length, floats within `atol + rtol * max(|a|, |b|)` (NaN equal to NaN), integers, strings, booleans and
    `null` exactly. A failure names the file and the key path."""
    docs = []
    for path in (got_path, want_path):
        with open(path, encoding="utf-8") as fh:
            docs.append(json.load(fh, parse_constant=_constant))
    _same_json(docs[0], docs[1], os.path.basename(str(want_path)), rtol, atol)


def assert_same_arrays(got: Mapping, want: Mapping, *, rtol: float = RTOL_REDERIVED, atol: float = 0.0,
                       name: str = "table") -> None:
    """Two dicts of arrays (tables, the arrays of an `.npz`) hold the same: the same keys in the same order, the
    same shapes, floats within `atol + rtol * max(|a|, |b|)` (NaN equal to NaN), everything else exactly. A
    failure names `name`, the key, the first differing index and both values."""
    assert list(got) == list(want), f"{name}: keys differ\n got  {list(got)}\n want {list(want)}"
    for k in want:
        a, b = np.asarray(got[k]), np.asarray(want[k])
        assert a.shape == b.shape, f"{name}, {k!r}: shape {a.shape}, want {b.shape}"
        if a.dtype.kind in "fc" or b.dtype.kind in "fc":
            assert a.dtype.kind in "fciu" and b.dtype.kind in "fciu", f"{name}, {k!r}: dtype {a.dtype}, want {b.dtype}"
            x, y = a.astype(np.float64), b.astype(np.float64)
            nan = np.isnan(x) | np.isnan(y)
            with np.errstate(invalid="ignore"):
                ok = np.where(nan, np.isnan(x) & np.isnan(y),
                              (x == y) | (np.abs(x - y) <= atol + rtol * np.maximum(np.abs(x), np.abs(y))))
        else:
            assert a.dtype.kind == b.dtype.kind, f"{name}, {k!r}: dtype {a.dtype}, want {b.dtype}"
            ok = a == b
        if not np.all(ok):
            i = tuple(int(j) for j in np.argwhere(~np.asarray(ok))[0])
            raise AssertionError(f"{name}, {k!r}, row {i[0] if len(i) == 1 else i}: got {a[i].item()!r}, "
                                 f"want {b[i].item()!r} (rtol {rtol:g}, atol {atol:g}; "
                                 f"{int(np.sum(~ok))} of {ok.size} differ)")


def assert_same_npz(got_path, want_path, *, rtol: float = RTOL_REDERIVED, atol: float = 0.0) -> None:
    """`got_path` holds the arrays of `want_path` (`assert_same_arrays`; no pickled objects)."""
    tables = []
    for path in (got_path, want_path):
        with np.load(path, allow_pickle=False) as z:
            tables.append({k: z[k] for k in z.files})
    assert_same_arrays(tables[0], tables[1], rtol=rtol, atol=atol, name=os.path.basename(str(want_path)))


def png_size(path) -> tuple[int, int]:
    """`(width, height)` of the PNG image `path`, after checking that it is one and decodes whole."""
    import matplotlib.image

    name = os.path.basename(str(path))
    with open(path, "rb") as fh:
        head = fh.read(24)
    assert head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR", f"{name} is not a PNG image"
    width, height = struct.unpack(">II", head[16:24])
    pixels = matplotlib.image.imread(str(path))
    assert pixels.shape[:2] == (height, width), f"{name}: decodes to {pixels.shape}, its header says {width}x{height}"
    return int(width), int(height)


def assert_same_outputs(got_dir, want_dir, *, rtol: float = RTOL_REDERIVED, atol: float = 0.0,
                        tolerances: Mapping[str, Mapping[str, tuple[float, float]]] | None = None) -> None:
    """The folder `got_dir` holds the outputs of `want_dir` (the same file names), each compared by its kind:
    CSV, JSON and NPZ as values (`assert_same_csv`, `assert_same_json`, `assert_same_npz`; `tolerances`:
    `{file name: {column: (rtol, atol)}}` for CSV columns that need their own), PNG figures as valid images of
    the same size; a file of any other kind is an error (the test compares it itself)."""
    got, want = sorted(os.listdir(got_dir)), sorted(os.listdir(want_dir))
    assert got == want, f"{got_dir}: files {got}, want {want}"
    tolerances = dict(tolerances or {})
    for name in want:
        g, w = os.path.join(got_dir, name), os.path.join(want_dir, name)
        if os.path.isdir(w):
            assert_same_outputs(g, w, rtol=rtol, atol=atol, tolerances=tolerances)
        elif name.endswith(".csv"):
            assert_same_csv(g, w, rtol=rtol, atol=atol, tolerances=tolerances.get(name))
        elif name.endswith(".json"):
            assert_same_json(g, w, rtol=rtol, atol=atol)
        elif name.endswith(".npz") and zipfile.is_zipfile(w):
            assert_same_npz(g, w, rtol=rtol, atol=atol)
        elif name.endswith(".png"):
            assert png_size(g) == png_size(w), f"{name}: {png_size(g)}, want {png_size(w)}"
        else:
            raise AssertionError(f"{name}: no rule compares this kind of file; compare it in the test")
