"""The `phasejax` command: one subcommand per job (`phasejax --help` lists them).

Subcommands live in `phasejax.commands` (one module each, discovered here);
every flag is validated when parsed and `--help` shows the defaults.

Errors a user can cause end in one line on stderr, `phasejax <cmd>: error:
<what, which flag or file, what to do>`, and exit code 2 (bad input: a flag, a
file, a folder that holds other results) or 1 (the run cannot go on: it does
not fit, a file cannot be written); `--debug` (anywhere on the line, or
`PHASEJAX_DEBUG=1`) prints the traceback too. The flag vocabulary shared by
the commands is tabled in docs/cli.md.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows defaults once and keeps the description's line breaks: `(default: X)` is added unless the help
    already says its default, and left out for defaults of None (the help says what happens then) and for
    switches."""

    def _get_help_string(self, action):
        text = (action.help or "").strip()
        if not shows_default(action) or any(k in text for k in ("(default", "default:", "%(default)", "(None:")):
            return text
        return (text + " (default: %(default)s)").strip()


def shows_default(action) -> bool:
    """Whether `--help` states `action`'s default: flags with a value (not switches, not defaults of None)."""
    return bool(action.option_strings) and action.default is not None and action.default is not False \
        and action.default is not argparse.SUPPRESS and action.nargs != 0


def command_modules() -> dict:
    """`{name: module}` of every subcommand module in `phasejax.commands`, sorted by name."""
    import phasejax.commands as pkg

    mods = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name == "argtypes" or info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"phasejax.commands.{info.name}")
        if hasattr(mod, "NAME") and hasattr(mod, "run") and hasattr(mod, "add_arguments"):
            mods[mod.NAME] = mod
    return dict(sorted(mods.items()))


def build_parser() -> argparse.ArgumentParser:
    from phasejax import __version__

    parser = argparse.ArgumentParser(
        prog="phasejax", formatter_class=HelpFormatter,
        description="Phase diagrams of learning mechanisms in small attention models, from theory and experiment.")
    parser.add_argument("--version", action="version", version=f"phasejax {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, mod in command_modules().items():
        p = sub.add_parser(name, help=mod.HELP, description=(mod.__doc__ or mod.HELP).strip(),
                           formatter_class=HelpFormatter)
        mod.add_arguments(p)
        p.add_argument("--debug", action="store_true", help="on an error, print the traceback too")
        for action in p._actions:      # every flag with a default shows it, also one without a help text
            if action.help is None and shows_default(action):
                action.help = "(default: %(default)s)"
        p.set_defaults(_run=mod.run)
    return parser


def use_compilation_cache() -> str | None:
    """Point JAX's persistent compilation cache at `$XDG_CACHE_HOME/phasejax/jax` (default `~/.cache/...`) for
    this command's process, unless `JAX_COMPILATION_CACHE_DIR` is set (then JAX uses it) or
    `PHASEJAX_COMPILE_CACHE=0`. A command run a second time with the same shapes loads its compiled programs
    instead of compiling them again (a default `phasejax solve`: about half of its first-call time is XLA
    compilation). Only the command line does this; importing the library leaves JAX's configuration alone.
    Returns the directory used (None: off)."""
    import os

    if os.environ.get("PHASEJAX_COMPILE_CACHE", "1") == "0":
        return None
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return os.environ["JAX_COMPILATION_CACHE_DIR"]
    import jax

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "phasejax", "jax")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None           # an unwritable home: run without the cache
    jax.config.update("jax_compilation_cache_dir", path)
    return path


def error_line(exc: BaseException) -> tuple[int, str] | None:
    """`(exit code, message)` for an error a user can cause (None: a defect, shown with its traceback).

    `UsageError`, `ValueError` (invalid inputs raise it, naming the parameter), `SystemExit("error: ...")` and a
    file that is missing or not readable: 2. `RunError`, other `OSError` (a file that cannot be written),
    `MemoryError` and XLA's `RESOURCE_EXHAUSTED`: 1."""
    from phasejax.commands.argtypes import RunError, UsageError

    text = " ".join(str(exc).split())
    if isinstance(exc, SystemExit):
        if not isinstance(exc.code, str):
            return None
        return 2, " ".join(exc.code.split()).removeprefix("error: ")
    if isinstance(exc, (UsageError, ValueError)):
        return 2, text
    if isinstance(exc, RunError):
        return 1, text
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError)):
        return 2, f"{exc.strerror}: {exc.filename}" if exc.filename else text
    if isinstance(exc, OSError):
        return 1, (f"{exc.strerror}: {exc.filename}" if exc.filename else text) + "; check the path and the disk"
    if isinstance(exc, MemoryError):
        return 1, "out of memory; shrink the run (--chunk-size, or the grid's or the model's size)"
    if "RESOURCE_EXHAUSTED" in text:
        return 1, ("out of device memory (XLA: RESOURCE_EXHAUSTED); shrink the run (--chunk-size, or the grid's "
                   "or the model's size)")
    return None


def _report(args, found: tuple[int, str], debug: bool, claimed: str | None) -> int:
    """Print the one-line error `found = (exit code, message)`; after a usage error (exit code 2) remove the
    output folder `claimed` if this call created it and it holds nothing but the output marker."""
    import os

    from phasejax.commands.argtypes import OUTPUT_MARKER

    if debug:
        import traceback

        traceback.print_exc()
    if found[0] == 2 and claimed is not None and os.path.isdir(claimed) and os.listdir(claimed) == [OUTPUT_MARKER]:
        os.remove(os.path.join(claimed, OUTPUT_MARKER))
        os.rmdir(claimed)
    print(f"phasejax {args.command}: error: {found[1]}", file=sys.stderr)
    return found[0]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    import os

    from phasejax.commands.argtypes import apply_host_devices

    debug = "--debug" in argv or os.environ.get("PHASEJAX_DEBUG", "0") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    apply_host_devices(argv)
    if argv and argv[0] not in ("-h", "--help", "--version"):
        use_compilation_cache()
    args = build_parser().parse_args(argv)
    claimed = None   # an output folder this call created: removed again if the run stops on a usage error
    try:
        if getattr(args, "_guard_output", False) and not getattr(args, "replot", False) and args.out is not None:
            from phasejax.commands.argtypes import guard_output, output_identity

            claimed = None if os.path.exists(args.out) else args.out
            guard_output(args.out, args.overwrite, output_identity(args))
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print(f"phasejax {args.command}: interrupted; finished chunks stay in the run directory, run the same "
              "command again to resume", file=sys.stderr)
        return 130
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - sorted by error_line; defects are raised again
        found = error_line(exc)
        if found is None:
            raise
        return _report(args, found, debug, claimed)


if __name__ == "__main__":
    sys.exit(main())
