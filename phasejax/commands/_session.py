"""What the `phasejax` command line does around a command's run (not a command: no `NAME`).

* `explicit_flags`: which flags a command line gave, and how often; `refuse_unused` refuses a flag given twice, a
  repeated value in a list flag and a flag that the chosen way of running does not read (`flags.Mode`);
* `check_owner`: a `--replot` reads and rewrites only a folder of its own command (and flag values);
* `prompt_interrupts`: Ctrl-C ends the process within seconds, also while a compiled program runs;
* `compile_notice`: one line on a terminal while the first program compiles;
* `use_compilation_cache`: JAX's persistent compilation cache for the command's process.

None of this imports JAX at import time: the arguments are parsed, and usage errors reported, before JAX starts.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import signal
import socket
import sys
import threading

INTERRUPT_GRACE_S = 3.0
"""Seconds a Ctrl-C waits for the command to stop by itself before the process is ended."""


class _Recorder(argparse.Namespace):
    """A namespace that counts how often each attribute is set."""

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "_counts", collections.Counter())

    def __setattr__(self, key, value):
        self._counts[key] += 1
        super().__setattr__(key, value)


def explicit_flags(parser: argparse.ArgumentParser, argv) -> dict[str, int]:
    """`{dest: times given}` of the options `argv` (a subcommand's arguments) gives explicitly to `parser`
    (defaults left out: `argv` is parsed again with every default suppressed). Aliases count for their `dest`:
    `solve --alphas 1 --alpha 2` gives `alphas` twice."""
    saved = [(a, a.default) for a in parser._actions]
    saved_defaults = dict(parser._defaults)
    try:
        for a in parser._actions:
            a.default = argparse.SUPPRESS
        parser._defaults.clear()
        ns = _Recorder()
        parser.parse_args(list(argv), ns)
    finally:
        for a, d in saved:
            a.default = d
        parser._defaults.update(saved_defaults)
    return dict(ns._counts)


def typed_flags(parser: argparse.ArgumentParser, argv) -> dict[str, str]:
    """`{dest: the option string typed for it}` of the options in `argv` (a subcommand's arguments) that `--help`
    shows (`--no-project` for `--project`'s switch; an older hidden spelling is left out)."""
    typed = {}
    for token in argv:
        action = parser._option_string_actions.get(token.split("=", 1)[0]) if token.startswith("-") else None
        if action is not None and action.help != argparse.SUPPRESS:
            typed.setdefault(action.dest, token.split("=", 1)[0])
    return typed


def flag_name(parser: argparse.ArgumentParser, dest: str, typed: dict | None = None) -> str:
    """The option string a user typed for `dest` (`typed`, `typed_flags`), else the one `--help` shows (its first
    long option)."""
    if typed and dest in typed:
        return typed[dest]
    for a in parser._actions:
        if a.dest == dest and a.option_strings and a.help != argparse.SUPPRESS:
            return next((o for o in a.option_strings if o.startswith("--")), a.option_strings[0])
    for a in parser._actions:
        if a.dest == dest and a.option_strings:
            return a.option_strings[0]
    return dest


def refuse_unused(parser: argparse.ArgumentParser, args, given: dict[str, int], typed: dict | None = None) -> None:
    """`UsageError` for a flag given twice, a repeated value in a list flag (unless the command allows it,
    `flags.allow_repeats`), and a flag that the chosen way of running does not read (`flags.Mode`, declared with
    `flags.add_mode`; `--replot`'s with `flags.add_replot`). Flags are named as `typed` (`typed_flags`)."""
    from phasejax.commands.argtypes import UsageError, refuse_duplicates

    twice = sorted(flag_name(parser, d) for d, n in given.items() if n > 1)
    if twice:
        raise UsageError(f"{', '.join(twice)} given more than once (the last value would replace the others); "
                         "give each flag once, with all its values")
    repeats_ok = set(getattr(args, "_repeats", ()) or ())
    for a in parser._actions:
        if a.dest in given and a.nargs in ("+", "*") and a.dest not in repeats_ok \
                and isinstance(getattr(args, a.dest, None), list):
            refuse_duplicates(getattr(args, a.dest), flag_name(parser, a.dest))
    for mode in getattr(args, "_modes", None) or ():
        if not mode.when(args):
            continue
        unused = sorted(flag_name(parser, d, typed) for d in mode.unused(given))
        if unused:
            one = len(unused) == 1
            raise UsageError(f"{', '.join(unused)} {'is' if one else 'are'} not used {mode.label}"
                             + (f" ({mode.why})" if mode.why else "")
                             + f"; drop {'it' if one else 'them'}{mode.alternative}")


def recorded_command(summary: dict) -> str | None:
    """The command line a summary records (`command`, or `command` under `run` or `environment`), or None."""
    for where in (summary, summary.get("run"), summary.get("environment")):
        if isinstance(where, dict) and isinstance(where.get("command"), str) and where["command"].strip():
            return where["command"]
    return None


def check_owner(root: argparse.ArgumentParser, args) -> None:
    """Refuse (`UsageError`, also with `--overwrite`) a `--replot` of a folder whose results are another command's,
    or were computed with another value of a flag of `flags.add_replot(owner=...)` (the extension's name, say):
    the folder's summary records the command line that computed it, its output marker the command and its flags.
    A folder that records neither is left to `guard_replot` (it needs `--overwrite`)."""
    import shlex

    from phasejax.commands.argtypes import OUTPUT_MARKER, UsageError
    from phasejax.io import read_json

    import io

    out, command = args.out, args.command
    owner = dict(getattr(args, "_replot_owner", None) or {})      # {dest: the summary's key of its value, or None}
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    found = []          # (where, command, {dest: value})
    summary = os.path.join(out, getattr(args, "_replot_summary", "summary.json") or "summary.json")
    try:
        recorded = read_json(summary, kind=dict) if os.path.exists(summary) else {}
    except (ValueError, OSError):
        recorded = {}
    line = recorded_command(recorded)
    if line is not None:
        try:
            words = shlex.split(line)
        except ValueError:
            words = []
        commands = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction)).choices
        if len(words) >= 2 and words[0] == "phasejax" and words[1] in commands:
            values = {}
            if words[1] == command and owner:
                try:
                    with contextlib.redirect_stderr(io.StringIO()):
                        then, _ = sub.parse_known_args(words[2:])
                    values = {d: getattr(then, d) for d in owner if hasattr(then, d)}
                except (SystemExit, Exception):  # noqa: BLE001 - a command line of another version: not compared
                    values = {}
            found.append((f"{summary} records `{line}`", words[1], values))
    keyed = {d: recorded[k] for d, k in owner.items() if k and isinstance(recorded.get(k), (str, int, float))}
    if keyed:
        found.append((f"{summary} names {', '.join(f'{owner[d]} {v}' for d, v in keyed.items())}", command, keyed))
    marker = os.path.join(out, OUTPUT_MARKER)
    try:
        mark = read_json(marker, kind=dict) if os.path.exists(marker) else {}
    except (ValueError, OSError):
        mark = {}
    if isinstance(mark.get("command"), str):
        ident = mark.get("identity") if isinstance(mark.get("identity"), dict) else {}
        found.append((f"{marker} names `phasejax {mark['command']}`", mark["command"],
                      {d: ident[d] for d in owner if d in ident}))
    for where, theirs, values in found:
        if theirs != command:
            raise UsageError(f"--replot: {where}, the results of `phasejax {theirs}`, not of `phasejax {command}`; "
                             f"pass the --out of a `phasejax {command}` run")
        for d in owner:
            if d in values and values[d] != getattr(args, d):
                name = flag_name(sub, d)
                raise UsageError(f"--replot: {where}, computed with {name} {values[d]}, not {getattr(args, d)}; "
                                 f"pass the --out that holds the results of {name} {getattr(args, d)}")


def _say(message: str) -> None:
    """Write `message` and a newline to file descriptor 2 without Python's `sys.stderr` (whose lock another thread
    may hold, e.g. one blocked writing a progress bar to a stalled terminal or a full pipe) and without blocking
    (a full pipe drops the line rather than keep the process alive)."""
    import fcntl

    data = (message + "\n").encode()
    try:
        flags = fcntl.fcntl(2, fcntl.F_GETFL)
        fcntl.fcntl(2, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        os.write(2, data)
    except OSError:
        pass


def _end(message: str) -> None:
    """Flush what the process printed, say `message` and end the process with exit code 130 at once."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a broken stream must not keep the process alive
            pass
    _say(message)
    os._exit(130)


@contextlib.contextmanager
def prompt_interrupts(message: str, grace: float = INTERRUPT_GRACE_S):
    """Make Ctrl-C end the process within `grace` seconds, also inside a long compiled call.

    Python raises `KeyboardInterrupt` only between the main thread's bytecodes, so not while an XLA program runs,
    which can take minutes; and an interrupt that lands in a garbage-collection callback (JAX installs one,
    `_xla_gc_callback`) is reported as "Exception ignored" and lost (https://github.com/jax-ml/jax/issues/18246).
    Neither may keep a command running. A watcher thread learns of the signal at once (`signal.set_wakeup_fd`:
    Python's C-level handler writes to a socket whatever the main thread is doing); from then on the process ends
    with exit code 130 and `message`: as soon as the block is left (by the `KeyboardInterrupt` or otherwise), or
    after `grace` seconds if it is still running. It ends with `os._exit`, not through the interpreter's shutdown,
    which waits for programs still in flight; every file is written atomically (a temporary file renamed into
    place), so nothing half-written is left behind and finished chunks stay. The message is written to file
    descriptor 2 directly (`_say`). Outside the main thread, or where the process ignores SIGINT, this does
    nothing."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is signal.SIG_IGN):
        yield
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    try:
        old = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    except (ValueError, OSError):
        reader.close()
        writer.close()
        yield
        return
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})   # an inherited mask must not hide it
    stopped, interrupted = threading.Event(), threading.Event()

    def watch():
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data or stopped.is_set():
                return
            if signal.SIGINT in data:
                interrupted.set()
                if not stopped.wait(grace):
                    _end(message)

    thread = threading.Thread(target=watch, name="phasejax-interrupts", daemon=True)
    thread.start()
    try:
        yield
    except KeyboardInterrupt:
        _end(message)
    finally:
        if interrupted.is_set():
            _end(message)
        stopped.set()
        signal.set_wakeup_fd(old)
        if signal.SIGINT in blocked:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        writer.close()        # the watcher reads EOF and returns
        thread.join(timeout=1.0)
        reader.close()


# ----------------------------------------------------------------------------
# Compilation: the persistent cache and a line while the first program compiles
# ----------------------------------------------------------------------------


def cache_root() -> str:
    """`$XDG_CACHE_HOME/phasejax` (default `~/.cache/phasejax`)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "phasejax")


def use_compilation_cache() -> str | None:
    """Point JAX's persistent compilation cache at `cache_root()/jax` for this command's process, unless
    `JAX_COMPILATION_CACHE_DIR` is set (then JAX uses it) or `PHASEJAX_COMPILE_CACHE=0`. A command run a second
    time with the same shapes loads its compiled programs instead of compiling them again. Only the command line
    does this; importing the library leaves JAX's configuration alone. Returns the directory used (None: off)."""
    if os.environ.get("PHASEJAX_COMPILE_CACHE", "1") == "0":
        return None
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return os.environ["JAX_COMPILATION_CACHE_DIR"]
    import jax

    path = os.path.join(cache_root(), "jax")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None           # an unwritable home: run without the cache
    jax.config.update("jax_compilation_cache_dir", path)
    return path


COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")
"""JAX's monitoring events whose durations make up the compilation time of a command."""

_COMPILE = dict(active=None, seconds=0.0, listening=False)


def _on_event(event: str, duration: float, **_) -> None:
    if _COMPILE["active"] is not None and event in COMPILE_EVENTS:
        _COMPILE["seconds"] += float(duration)


def _times_path() -> str:
    return os.path.join(cache_root(), "compile_seconds.json")


def _read_times() -> dict:
    try:
        with open(_times_path()) as fh:
            times = json.load(fh)
        return times if isinstance(times, dict) else {}
    except (OSError, ValueError):
        return {}


def compile_message(command: str, last: float | None) -> str:
    """The line shown while `command`'s first program compiles; `last`: its compilation seconds last time."""
    about = (f"about {last:.0f} s, as last time" if last and last >= 1 else
             "the first run of this command here can take minutes; the compilation cache shortens later runs")
    return f"phasejax {command}: compiling ({about}) ..."


@contextlib.contextmanager
def compile_notice(command: str, enabled: bool):
    """While the block runs, print `compile_message` once on stderr when JAX starts compiling, and record how long
    the command compiled in all (`cache_root()/compile_seconds.json`, the estimate of the next run). `enabled`:
    only on a terminal, and not with `--no-progress`."""
    if not enabled:
        yield
        return
    import logging

    import jax

    if not _COMPILE["listening"]:
        jax.monitoring.register_event_duration_secs_listener(_on_event)
        _COMPILE["listening"] = True
    times = _read_times()
    shown = []

    class Notice(logging.Handler):
        def emit(self, record):
            if not shown and str(record.msg).startswith("Compiling"):
                shown.append(True)
                print(compile_message(command, times.get(command)), file=sys.stderr, flush=True)

    logger = logging.getLogger("jax._src.interpreters.pxla")
    handler, level = Notice(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    _COMPILE.update(active=command, seconds=0.0)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        seconds = _COMPILE["seconds"]
        _COMPILE["active"] = None
        if seconds > 0:
            from phasejax.io import atomic_write_json

            try:
                atomic_write_json(_times_path(), dict(_read_times(), **{command: round(seconds, 1)}))
            except OSError:
                pass
