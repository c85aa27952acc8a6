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


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from phasejax.commands.argtypes import apply_host_devices

    apply_host_devices(argv)
    if argv and argv[0] not in ("-h", "--help", "--version"):
        use_compilation_cache()
    args = build_parser().parse_args(argv)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
