"""argparse types that validate on parsing (a bad value is a usage error naming the flag, before any compute)."""

from __future__ import annotations

import argparse
import math


def _number(kind, text: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, got {text!r}")
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = _number(int, text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    value = _number(int, text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {value}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _number(float, text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def nonnegative_float(text: str) -> float:
    """A finite number >= 0."""
    value = _number(float, text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def unit_interval(text: str) -> float:
    """A number in [0, 1]."""
    value = _number(float, text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {value}")
    return value


def open_unit_interval(text: str) -> float:
    """A number in (0, 1)."""
    value = _number(float, text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie in the open interval (0, 1), got {value}")
    return value


def add_run_options(parser: argparse.ArgumentParser, *, chunk_size: int = 16) -> None:
    """The flags of `phasejax.sweep.RunOptions` shared by every sweep command."""
    g = parser.add_argument_group("run options (resume, chunking, devices, multi-host)")
    g.add_argument("--run-dir", default=None,
                   help="folder for chunk files and config.json; re-running with the same flags resumes there "
                        "(default: <out>/run)")
    g.add_argument("--chunk-size", type=positive_int, default=chunk_size, help="tasks per compiled call")
    g.add_argument("--host-devices", type=positive_int, default=None,
                   help="simulate this many CPU devices (sets XLA_FLAGS before JAX starts)")
    g.add_argument("--process-index", type=nonnegative_int, default=0, help="this process (multi-host runs)")
    g.add_argument("--process-count", type=positive_int, default=1, help="number of processes (multi-host runs)")
    g.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run_options_from(args, out: str | None = None):
    """`RunOptions` from the flags of `add_run_options` (`--run-dir` defaults to `<out>/run`)."""
    import os

    from phasejax.sweep import RunOptions

    run_dir = args.run_dir if args.run_dir is not None else (os.path.join(out, "run") if out else None)
    if args.process_index >= args.process_count:
        raise SystemExit(f"error: --process-index must be < --process-count, got {args.process_index} "
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
