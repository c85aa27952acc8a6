"""argparse types that validate on parsing (a bad value is a usage error naming the flag, before any compute)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os


def _number(kind, text: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, got {text!r}")
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _bounded(kind, ok, rule: str, doc: str):
    """An argparse type: a `kind` (int or float) for which `ok(value)` holds, else a usage error `<rule>, got ...`."""
    def parse(text: str):
        value = _number(kind, text)
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{rule}, got {value}")
        return value

    parse.__doc__, parse.__name__ = doc, rule or "finite number"
    return parse


def int_between(lo: int, hi: int):
    """An argparse type: an integer in `[lo, hi]`, else a usage error naming the range."""
    return _bounded(int, lambda v: lo <= v <= hi, f"must be an integer from {lo} to {hi}",
                    f"An integer from {lo} to {hi}.")


def float_list(text: str, *, ok=lambda v: True, rule: str = "numbers", flag: str = "") -> tuple[float, ...]:
    """`"0,1,4"` as `(0.0, 1.0, 4.0)`: comma-separated finite numbers for which `ok` holds (`rule` says which),
    each once; `argparse.ArgumentTypeError` with the parser's own message otherwise."""
    parts = [v.strip() for v in text.split(",")]
    try:
        values = tuple(float(v) for v in parts)
    except ValueError:
        values = None
    if not text.strip() or values is None or not all(math.isfinite(v) and ok(v) for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated {rule} such as 0,1,4, got {text!r}")
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    if seen:
        raise argparse.ArgumentTypeError(f"repeats {', '.join(f'{v:g}' for v in dict.fromkeys(seen))}; give each "
                                         "value once")
    return values


finite_float = _bounded(float, lambda v: True, "", "Any finite number (no nan, no inf).")
positive_int = _bounded(int, lambda v: v >= 1, "must be a positive integer", "An integer >= 1.")
nonnegative_int = _bounded(int, lambda v: v >= 0, "must be a non-negative integer", "An integer >= 0.")
positive_float = _bounded(float, lambda v: v > 0, "must be > 0", "A finite number > 0.")
nonnegative_float = _bounded(float, lambda v: v >= 0, "must be >= 0", "A finite number >= 0.")
unit_interval = _bounded(float, lambda v: 0.0 <= v <= 1.0, "must lie in [0, 1]", "A number in [0, 1].")
open_unit_interval = _bounded(float, lambda v: 0.0 < v < 1.0, "must lie in the open interval (0, 1)",
                              "A number in (0, 1).")


def run_dir_from(args, out: str | None = None) -> str | None:
    """The run directory `--run-dir` names (default `<out>/run`); `UsageError` naming the flag for an empty name, a
    path that is a file, and a folder that is neither empty nor a phasejax run directory (`guard_run_dir`)."""
    if args.run_dir is not None:
        if not args.run_dir.strip():
            raise UsageError("--run-dir is empty; pass a folder (or leave --run-dir out: <out>/run)")
        return guard_run_dir(args.run_dir)
    return guard_run_dir(os.path.join(out, "run")) if out else None


def guard_run_dir(path: str, flag: str = "--run-dir") -> str:
    """Refuse, before anything is written there, a run directory that is a file or a folder holding files that are
    not a phasejax run's (`phasejax.sweep.foreign_entries`: a user's folder); an empty or new folder, or one of
    runs (resumed), is accepted. Returns `path`."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{flag} {path} is a file, not a folder; pass a folder")
    from phasejax.sweep import foreign_entries

    foreign = foreign_entries(path)
    if foreign:
        listed = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
        raise UsageError(f"{flag} {path} holds files that are not a phasejax run's ({listed}); pass an empty or new "
                         f"folder to {flag}, or the run directory of this command to resume it")
    return path


def run_options_from(args, out: str | None = None):
    """`RunOptions` from the flags of `add_run_options` (`--run-dir` defaults to `<out>/run`, `run_dir_from`)."""
    from phasejax.sweep import RunOptions

    run_dir = run_dir_from(args, out)
    if args.process_index >= args.process_count:
        raise UsageError(f"--process-index must be < --process-count, got {args.process_index} "
                         f">= {args.process_count}")
    return RunOptions(run_dir=run_dir, chunk_size=args.chunk_size, process_index=args.process_index,
                      process_count=args.process_count, progress=not args.no_progress)


def apply_host_devices(argv) -> None:
    """Set `XLA_FLAGS` for `--host-devices N` found in `argv` (must run before JAX is imported)."""
    import os

    for i, a in enumerate(argv):
        value = None
        if a == "--host-devices" and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith("--host-devices="):
            value = a.split("=", 1)[1]
        if value is not None and value.isdigit() and int(value) >= 1:
            flags = os.environ.get("XLA_FLAGS", "")
            os.environ["XLA_FLAGS"] = (flags + f" --xla_force_host_platform_device_count={int(value)}").strip()


# ----------------------------------------------------------------------------
# Errors a user can cause, and output folders that never lose a result
# ----------------------------------------------------------------------------


from phasejax._errors import RunError, UsageError  # noqa: E402 - the errors of the library and the command line


OUTPUT_MARKER = ".phasejax-output.json"
"""The file in an output folder that records which command and configuration the folder's results are of."""

RUNTIME_FLAGS = frozenset({"out", "overwrite", "run_dir", "chunk_size", "host_devices", "process_index",
                           "process_count", "no_progress", "debug", "max_chunks", "replot", "command"})
"""Flags that change how a run goes, not what it computes: left out of an output folder's identity."""


def output_identity(args) -> dict:
    """What an output folder's results depend on: the command and every flag but `RUNTIME_FLAGS`."""
    ident = {k: v for k, v in sorted(vars(args).items()) if not k.startswith("_") and k not in RUNTIME_FLAGS}
    return json.loads(json.dumps(ident, default=str))


def _differences(old: dict, new: dict) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k, "<absent>") != new.get(k, "<absent>"))


def guard_output(path: str, overwrite: bool, identity: dict, *, flag: str = "--out",
                 command: str | None = None) -> str:
    """Claim the output folder `path` for a run whose configuration is `identity` (a JSON-ready dict, e.g.
    `output_identity(args)`) of the command `command` (recorded in the marker, for `guard_replot`); returns
    `path`.

    * `path` missing or empty: created, and `OUTPUT_MARKER` written into it (which also tests that it is
      writable, before any compute);
    * `path` holding this `identity`'s marker: reused (a re-run, a resumed run);
    * anything else (another configuration's marker, or files without a marker, such as the committed
      `results/`): `UsageError` naming the folder, what differs, and `--out` / `--overwrite`; with `overwrite`
      the marker is replaced, the command's files replace the old ones, and the old default run directory
      `<path>/run` is renamed `<path>/run.replaced` (kept, but not resumed from).
    A path that is a file, or a folder that cannot be written, is a `UsageError` naming `flag`.
    """
    from phasejax.io import atomic_write_json, read_json

    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{flag} {path} is a file, not a folder; pass a folder to {flag}")
    marker = os.path.join(path, OUTPUT_MARKER)
    entries = [e for e in os.listdir(path) if e != OUTPUT_MARKER] if os.path.isdir(path) else []
    if os.path.exists(marker):
        try:
            old = read_json(marker, kind=dict)
            if not isinstance(old.get("identity"), dict):
                raise ValueError(f"{marker} lacks the configuration (its \"identity\")")
        except (ValueError, OSError) as e:
            if not overwrite and entries:
                raise UsageError(f"{flag} {path} holds results whose configuration cannot be read ({e}); pass "
                                 f"another {flag} folder, or --overwrite to replace them") from None
            old = {}
        if old.get("identity") == identity:
            if not os.access(path, os.W_OK):
                raise UsageError(f"cannot write to {flag} {path} (not writable); pass a writable {flag} folder")
            if command is not None and old.get("command") != command:
                atomic_write_json(marker, dict(identity=identity, command=command))
            return path
        if not overwrite and entries:
            what = ", ".join(_differences(old["identity"], identity))
            raise UsageError(f"{flag} {path} holds the results of another configuration (differing: {what}); "
                             f"pass another {flag} folder, or --overwrite to replace them")
    elif entries and not overwrite:
        raise UsageError(f"{flag} {path} already holds files this configuration did not write; pass another "
                         f"{flag} folder, or --overwrite to replace them")
    if entries and os.path.isdir(os.path.join(path, "run")):
        _set_aside(os.path.join(path, "run"))   # --overwrite: the old chunks stay, but not where this run resumes
    try:
        os.makedirs(path, exist_ok=True)
        atomic_write_json(marker, dict(identity=identity) if command is None else dict(identity=identity,
                                                                                        command=command))
    except OSError as e:
        raise UsageError(f"cannot write to {flag} {path} ({e.strerror or e}); pass a writable {flag} folder") \
            from None
    return path


def guard_replot(path: str, overwrite: bool, command: str, *, flag: str = "--out") -> str:
    """Check the folder `path` that `--replot` reads and rewrites: it must exist; a folder that `command` did not
    write (no output marker of `command`, such as the committed `results/`) is rewritten only with `overwrite`.
    No marker is written. Returns `path`."""
    from phasejax.io import read_json

    if not os.path.isdir(path):
        raise UsageError(f"--replot needs the folder {flag} {path}, which does not exist; run the command first, "
                         f"or pass the {flag} that holds its results")
    marker = os.path.join(path, OUTPUT_MARKER)
    try:
        ours = read_json(marker, kind=dict).get("command") == command
    except (ValueError, OSError):
        ours = False
    if not ours and not overwrite:
        raise UsageError(f"--replot rewrites figures and summaries in {flag} {path}, which `phasejax {command}` did "
                         f"not write (no {OUTPUT_MARKER} of it: committed or foreign results); pass --overwrite to "
                         "rewrite them")
    if not os.access(path, os.W_OK):
        raise UsageError(f"cannot write to {flag} {path} (not writable); pass a writable {flag} folder")
    return path


def remove_if_only_marker(path: str) -> bool:
    """Remove the folder `path` when it holds nothing but the output marker (and empty folders): what a run that
    stopped before computing leaves. Returns whether it was removed."""
    if not os.path.isdir(path):
        return False
    for dirpath, _, files in os.walk(path):
        if any(not (dirpath == path and f == OUTPUT_MARKER) for f in files):
            return False
    for dirpath, dirs, files in os.walk(path, topdown=False):
        for f in files:
            os.remove(os.path.join(dirpath, f))
        os.rmdir(dirpath)
    return True


def _set_aside(folder: str) -> str:
    """Rename `folder` to `<folder>.replaced`, `<folder>.replaced-2`, ... (the first free name); returns it."""
    import sys

    k, target = 1, folder + ".replaced"
    while os.path.exists(target):
        k += 1
        target = f"{folder}.replaced-{k}"
    os.replace(folder, target)
    print(f"phasejax: note: --overwrite: the chunks of the results replaced are kept in {target}", file=sys.stderr)
    return target


def guard_output_file(path: str, overwrite: bool, *, flag: str = "--out") -> str:
    """For a command whose `--out` is one file: refuse an existing `path` unless `overwrite`, and check that its
    folder can be written (before any compute); returns `path`."""
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path} is a folder; pass a file name to {flag}")
    if os.path.exists(path) and not overwrite:
        raise UsageError(f"{flag} {path} exists; pass another {flag}, or --overwrite to replace it")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create the folder of {flag} {path} ({e.strerror or e}); pass a writable "
                         f"{flag}") from None
    if not os.access(folder, os.W_OK):
        raise UsageError(f"cannot write to the folder of {flag} {path}; pass a writable {flag}")
    return path


def guard_output_files(out: str, overwrite: bool, names, *, flag: str = "--out") -> str:
    """For a command that writes the files `names` into the folder `out`, which may hold other results: refuse an
    existing one of them unless `overwrite`, and check that `out` is a folder that can be created and written
    (before any compute); returns `out`."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise UsageError(f"{flag} {out} is a file, not a folder; pass a folder to {flag}")
    existing = [n for n in names if os.path.exists(os.path.join(out, n))]
    if existing and not overwrite:
        raise UsageError(f"{flag} {out} holds {', '.join(existing)}; pass another {flag}, or --overwrite to replace "
                         f"{'it' if len(existing) == 1 else 'them'}")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {flag} {out} ({e.strerror or e}); pass a writable {flag}") from None
    if not os.access(out, os.W_OK):
        raise UsageError(f"cannot write to {flag} {out}; pass a writable {flag}")
    return out


@dataclasses.dataclass(frozen=True)
class Reads:
    """A file a command reads back, declared by the command (its `reads(args)`) and checked by the command line
    before any compute or write (`check_reads`).

    Attributes:
      path: the file.
      needs: what the command reads of it: columns of a CSV file, keys of a JSON object (dotted for nested keys),
        arrays of an NPZ file.
      flag: the flag that names its folder (or the file), as the user types it: `--out`, `--rs-dir`.
      reader: who reads it, for the message: `--replot`, `rsb`.
      fix: what to do when it is missing or lacks something.
      optional: a file that may be absent (what it holds is checked when it is there).
    """

    path: str
    needs: tuple = ()
    flag: str = "--out"
    reader: str = "--replot"
    fix: str = "pass the --out that holds the command's results, or run without --replot to compute them"
    optional: bool = False


def check_reads(reads) -> None:
    """Check every `Reads` of `reads` before any compute or write: a missing file (not `optional`) and a missing
    column, key or array are `UsageError`s naming the flag, the file and what it lacks, in one line."""
    from phasejax.io import lacks

    for r in reads:
        if not os.path.isfile(r.path):
            if r.optional and not os.path.exists(r.path):
                continue
            folder = os.path.dirname(r.path) or "."
            raise UsageError(f"{r.flag} {folder} lacks {os.path.basename(r.path)}, which {r.reader} reads; {r.fix}")
        try:
            missing = lacks(r.path, tuple(r.needs))
        except ValueError as e:
            raise UsageError(f"{e} ({r.reader} reads it from {r.flag}); {r.fix}") from None
        if missing:
            what = {"csv": "column", "npz": "array"}.get(r.path.rsplit(".", 1)[-1], "key")
            s = "s" if len(missing) > 1 else ""
            missing = [m.replace("|", " (or ") + ")" if "|" in m else m for m in missing]
            raise UsageError(f"{r.path} lacks the {what}{s} {', '.join(missing)}, which {r.reader} reads "
                             f"({r.flag}); {r.fix}")


def check_fits(need: float, what: str, shrink: str) -> None:
    """Refuse, before any compile, a run that needs about `need` bytes (`what` needs them) beyond
    `phasejax.sweep.available_memory()`: `RunError` with the estimate and `shrink`, the flags that shrink it."""
    from phasejax.sweep import available_memory

    have = available_memory()
    if need > have:
        raise RunError(f"{what} need{'s' if not what.endswith('s') else ''} about {need / 2**30:.3g} GiB, "
                       f"{have / 2**30:.3g} GiB available; shrink {shrink}")


def was_given(args, dest: str) -> bool:
    """Whether the command line gave the flag `dest` explicitly (the command line records them in `args._given`;
    a namespace built otherwise counts none as given)."""
    return dest in getattr(args, "_given", ())


def grid_range(args, name: str, n: int, *, digits: int | None = 10):
    """`n` equally spaced values from `--<name>-min` to `--<name>-max` (rounded to `digits`); `UsageError` naming
    the flags when the range is empty or reversed, and when `--n-<name> 1` is given with an explicit
    `--<name>-max` other than `--<name>-min` (one value is `--<name>-min`: the maximum would be dropped)."""
    import numpy as np

    lo, hi = getattr(args, f"{name}_min"), getattr(args, f"{name}_max")
    if hi < lo:
        raise UsageError(f"--{name}-max ({hi:g}) must not be below --{name}-min ({lo:g})")
    if n > 1 and hi == lo:
        raise UsageError(f"--n-{name} {n} needs --{name}-max > --{name}-min (both {lo:g}); widen the range or pass "
                         f"--n-{name} 1")
    if n == 1 and hi != lo and was_given(args, f"{name}_max"):
        raise UsageError(f"--n-{name} 1 computes at --{name}-min ({lo:g}) only, so --{name}-max {hi:g} would be "
                         f"dropped; drop --{name}-max, or pass --n-{name} 2 or more")
    values = np.linspace(lo, hi, n)
    return values if digits is None else np.round(values, digits)


def refuse_duplicates(values, flag: str) -> None:
    """A `UsageError` naming `flag` when `values` repeats a value (a grid with a point twice)."""
    seen, dup = set(), []
    for v in values:
        key = round(float(v), 12) if isinstance(v, float) else v
        if key in seen and v not in dup:
            dup.append(v)
        seen.add(key)
    if dup:
        raise UsageError(f"{flag} repeats {', '.join(f'{v:g}' if isinstance(v, float) else str(v) for v in dup)}; "
                         "give each value once")


def refuse_conflict(args, flag: str, other: str, why: str) -> None:
    """A `UsageError` when both `flag` and `other` (argparse spellings) were given values other than their
    defaults' falsy ones; `why` says what to do."""
    a = getattr(args, flag.lstrip("-").replace("-", "_"))
    b = getattr(args, other.lstrip("-").replace("-", "_"))
    if a not in (None, False, 0) and b not in (None, False, 0):
        raise UsageError(f"{flag} and {other} exclude each other: {why}")
