"""The `phasejax` command: one subcommand per job (`phasejax --help` lists them).

Subcommands live in `phasejax.commands` (one module each, discovered here);
every flag is validated when parsed and `--help` shows the defaults.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows defaults and keeps the description's line breaks."""


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
        p.set_defaults(_run=mod.run)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from phasejax.commands.argtypes import apply_host_devices

    apply_host_devices(argv)
    args = build_parser().parse_args(argv)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
