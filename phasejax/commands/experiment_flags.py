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
    """The command line of this process as a user would type it, shell-quoted (`shlex.join`: it can be pasted
    back into a shell): `phasejax <args>` when run through the `phasejax` entry point or the CLI module, else the
    program's file name and its arguments (no folder)."""
    import shlex

    prog = os.path.basename(sys.argv[0]) if sys.argv else ""
    head = "phasejax" if prog in ("phasejax", "cli.py", "__main__.py") else prog
    return shlex.join([head, *sys.argv[1:]]) if head else shlex.join(sys.argv[1:])


FAILED_STATUSES = ("diverged", "invalid_iterate")
"""Statuses of a run that ended without a result (`phasejax.solvers.Status` names)."""


def run_failures(statuses, what: str = "runs", *, hint: str = "") -> str | None:
    """The exit rule of every command for its iterative runs: a message when a run ended without a result (its
    status one of `FAILED_STATUSES`: diverged, or an invalid iterate) or when none of them converged; None when
    the runs are results (a run stopped at its step cap with finite values is one, and its status says so).
    `statuses`: status codes or names; `hint`: what to change, appended."""
    import collections

    import numpy as np

    from phasejax.solvers import status_name

    names = [s if isinstance(s, str) else status_name(s) for s in np.asarray(statuses).ravel().tolist()]
    if not names:
        return None
    counts = collections.Counter(names)
    listed = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    failed = sum(counts[k] for k in FAILED_STATUSES)
    if failed:
        return f"{failed} of {len(names)} {what} ended without a result ({listed}){hint}"
    if counts["converged"] == 0:
        return f"none of the {len(names)} {what} converged ({listed}){hint}"
    return None


def finish(command: str, problem: str | None) -> int:
    """Exit code 0, or (after the files are written) the one-line error `problem` and exit code 1."""
    if problem is None:
        return 0
    print(f"phasejax {command}: error: {problem}; every file is written, with each run's status", file=sys.stderr)
    return 1


TRAINING_HINT = "; raise --max-steps, or lower --learning-rate where the runs diverged"


def print_paths(paths) -> None:
    print("wrote:\n  " + "\n  ".join(str(p) for p in paths))


def not_finished(options) -> int:
    print(f"not every chunk is on disk yet (other processes, or --max-chunks); run again to assemble: "
          f"{options.run_dir}")
    return 0
