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


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with a usage error in one line, `<prog>: error: <message>; see <prog> --help`, and exit
    code 2 (argparse prints the whole usage block first). Subcommand parsers are of this class too."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


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

    parser = ArgumentParser(
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
        p.set_defaults(_run=mod.run, _reads=getattr(mod, "reads", None))
    return parser


def attach_dashed_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`argv` with `--flag -1,0` written `--flag=-1,0` where `--flag` takes one value and `-1,0` is not a flag:
    argparse reads a value that starts with a dash as a flag (and says `expected one argument`), so the value
    reaches the flag's own check and its message instead."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if sub is None or not argv or argv[0] not in sub.choices:
        return argv
    options = sub.choices[argv[0]]._option_string_actions
    out, i = [argv[0]], 1
    while i < len(argv):
        a = argv[i]
        action = options.get(a)
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if (action is not None and action.nargs is None and action.option_strings and nxt is not None
                and nxt.startswith("-") and not nxt.startswith("--") and nxt not in options):
            out.append(f"{a}={nxt}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def name_flags(message: str, parser: argparse.ArgumentParser, given) -> str:
    """`message` (a library's `ValueError`, "log2_n must be <= 20, got 60") with the parameter it starts with
    written as the flag the user gave for it (`--log2-n must be ...`)."""
    from phasejax.commands._session import flag_name

    head = message.split(" ", 1)[0]
    if head in given and head.isidentifier():
        return flag_name(parser, head) + message[len(head):]
    return message


def _topmost_missing(path) -> str | None:
    """The outermost folder of `path` (a folder the command may create) that does not exist yet, or None."""
    import os

    if not isinstance(path, str) or not path.strip():
        return None
    path = os.path.abspath(path)
    missing = None
    while not os.path.exists(path):
        missing, parent = path, os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


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
        import errno

        where = f"{exc.strerror}: {exc.filename}" if exc.filename else text
        if exc.errno == errno.ENOSPC:
            return 1, (f"no space left on the disk of {exc.filename}" if exc.filename else text) + \
                "; free space there (finished chunks are kept: run again to resume), or pass another --out"
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return 1, where + "; pass a writable --out (or --run-dir)"
        return 1, where + "; check the path and the disk"
    if isinstance(exc, MemoryError):
        return 1, "out of memory; shrink the run (--chunk-size, or the grid's or the model's size)"
    if "RESOURCE_EXHAUSTED" in text:
        return 1, ("out of device memory (XLA: RESOURCE_EXHAUSTED); shrink the run (--chunk-size, or the grid's "
                   "or the model's size)")
    return None


def _report(args, found: tuple[int, str], debug: bool) -> int:
    """Print the one-line error `found = (exit code, message)` (and with `debug` the traceback)."""
    if debug:
        import traceback

        traceback.print_exc()
    print(f"phasejax {args.command}: error: {found[1]}", file=sys.stderr)
    return found[0]


def interrupted_message(args) -> str:
    """What Ctrl-C prints: where the finished chunks stay, for a command with a run directory."""
    import os

    if hasattr(args, "run_dir"):
        out = getattr(args, "out", None)
        run_dir = args.run_dir or (os.path.join(out, "run") if isinstance(out, str) else None)
        if run_dir:
            return (f"phasejax {args.command}: interrupted; finished chunks stay in {run_dir}; run the same "
                    "command again to resume")
    return f"phasejax {args.command}: interrupted"


def subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of subcommand `command`."""
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]


def main(argv=None) -> int:
    """Run `phasejax <argv>`; returns the exit code. The arguments are parsed (and usage errors reported) before
    JAX is imported."""
    import os

    from phasejax.commands import _session
    from phasejax.commands.argtypes import (RunError, UsageError, apply_host_devices, check_reads, guard_output,
                                            guard_replot, output_identity, remove_if_only_marker)

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("PHASEJAX_DEBUG", "0") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    parser = build_parser()
    argv = attach_dashed_values(parser, argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:      # named by the subcommand's parser, whose --help lists the flags it takes
        subparser(parser, args.command).error(f"unrecognized arguments: {' '.join(unknown)}")
    claimed = []     # folders this call created: removed again if the run stops before writing a file into them
    code = 1
    sub, given = subparser(parser, args.command), {}
    try:
        words = argv[argv.index(args.command) + 1:]
        given = _session.explicit_flags(sub, words)
        _session.refuse_unused(sub, args, given, _session.typed_flags(sub, words))
        args._given = frozenset(given)
        if getattr(args, "out", None) is None and hasattr(args, "_out_default"):
            args.out = args._out_default(args)
        replot = getattr(args, "replot", False)
        if replot and getattr(args, "out", None) is not None:
            if getattr(args, "_guard_output", False):
                guard_replot(args.out, args.overwrite, args.command)     # the folder exists and is the command's
            _session.check_owner(parser, args)
        if getattr(args, "_reads", None) is not None:
            check_reads(args._reads(args))                          # every file read back, before any write
        for path in (getattr(args, "out", None), getattr(args, "run_dir", None)):
            top = _topmost_missing(path)
            if top is not None:
                claimed.append(top)
        if getattr(args, "_guard_output", False) and args.out is not None and not replot:
            guard_output(args.out, args.overwrite, output_identity(args), command=args.command)
        apply_host_devices(argv)
        _session.use_compilation_cache()
        notice = sys.stderr.isatty() and not getattr(args, "no_progress", False)
        with _session.prompt_interrupts(interrupted_message(args)), _session.compile_notice(args.command, notice):
            code = int(args._run(args) or 0)
        return code
    except KeyboardInterrupt:
        print(interrupted_message(args), file=sys.stderr)
        code = 130
        return code
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - sorted by error_line; defects are raised again
        found = error_line(exc)
        if found is None:
            raise
        if isinstance(exc, ValueError) and not isinstance(exc, (UsageError, RunError)):
            found = (found[0], name_flags(found[1], sub, given))
        code = _report(args, found, debug)
        return code
    finally:
        if code != 0:
            for folder in claimed:
                remove_if_only_marker(folder)


if __name__ == "__main__":
    sys.exit(main())
