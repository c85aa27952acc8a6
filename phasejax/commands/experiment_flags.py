"""Flags and helpers shared by the experiment commands (`train`, `fig2`, `scaling`, `random-init`,
`counting`, `histogram`, `bench-training`). Not a command itself (it defines no `NAME`)."""

from __future__ import annotations

import os
import sys

DTYPES = ("float32", "float64")


def add_preset(parser, doc: str) -> None:
    """`--preset {cpu,gpu}` (default cpu); `doc` says what each preset runs."""
    parser.add_argument("--preset", choices=("cpu", "gpu"), default="cpu", help=doc)


def add_dtype(parser, default: str = "float32") -> None:
    """`--dtype {float32,float64}`."""
    parser.add_argument("--dtype", choices=DTYPES, default=default,
                        help="floating-point precision of data, weights and metrics (float64 runs inside a scoped "
                             "float64 switch; the process-wide JAX setting is left alone)")


def dtype_from(args):
    import jax.numpy as jnp

    return {"float32": jnp.float32, "float64": jnp.float64}[args.dtype]


def pick(args, name: str, preset: dict):
    """`args.<name>` when given (flags default to None, so an explicit value is never replaced), else the preset's."""
    value = getattr(args, name)
    return preset[name] if value is None else value


def sub_options(options, name: str):
    """`options` with `run_dir` extended by `name` (one run directory per sweep of a command)."""
    return options if options.run_dir is None else options.replace(run_dir=os.path.join(options.run_dir, name))


def environment() -> dict:
    """Where a result was computed: platform, device kind, device count, jax and phasejax versions, command line."""
    import jax

    from phasejax import __version__

    return dict(platform=jax.default_backend(), device=str(jax.devices()[0].device_kind),
                n_devices=len(jax.devices()), jax=jax.__version__, phasejax=__version__,
                command=command_line())


def command_line() -> str:
    """The command line of this process as a user would type it: `phasejax <args>` when run through the
    `phasejax` entry point or the CLI module, else the program's file name and its arguments (no folder)."""
    prog = os.path.basename(sys.argv[0]) if sys.argv else ""
    head = "phasejax" if prog in ("phasejax", "cli.py", "__main__.py") else prog
    return " ".join([head, *sys.argv[1:]]).strip()


def print_paths(paths) -> None:
    print("wrote:\n  " + "\n  ".join(str(p) for p in paths))


def not_finished(options) -> int:
    print(f"not every chunk is on disk yet (other processes, or --max-chunks); run again to assemble: "
          f"{options.run_dir}")
    return 0
