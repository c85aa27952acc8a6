"""The flag blocks the commands share, one helper per concept, and the helpers of a command's run (not a command:
it defines no `NAME`). docs/cli.md tables the vocabulary: one spelling per meaning, a plural name for a list
and a singular name for one value, `--no-*` for a switch that leaves something out."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Callable

from phasejax.provenance import command_line, provenance  # noqa: F401 - the commands record both
from phasejax.commands.argtypes import (
    finite_float, nonnegative_float, nonnegative_int, positive_float, positive_int, unit_interval,
)

DTYPES = ("float32", "float64")

# ----------------------------------------------------------------------------
# Flag blocks
# ----------------------------------------------------------------------------


def add_preset(parser, doc: str, choices=("cpu", "gpu")) -> None:
    """`--preset` (default the first of `choices`); `doc` says what each preset runs."""
    parser.add_argument("--preset", choices=choices, default=choices[0], help=doc)


def add_dtype(parser, default: str = "float32") -> None:
    """`--dtype {float32,float64}`."""
    parser.add_argument("--dtype", choices=DTYPES, default=default,
                        help="floating-point precision of data, weights and metrics (float64 runs inside a scoped "
                             "float64 switch; the process-wide JAX setting is left alone)")


def add_model(parser, *, sigma: bool = True, lam: bool = True, A: bool = False, lams: bool = False) -> None:
    """The target's parameters: `--sigma` (token standard deviation), `--lam` (ridge penalty; `lams`: `--lams`,
    several) and with `A` the positional part `--A`."""
    if sigma:
        parser.add_argument("--sigma", type=positive_float, default=0.5, help="token standard deviation")
    if lams:
        parser.add_argument("--lams", type=nonnegative_float, nargs="+", default=[0.01, 0.1],
                            help="ridge penalties lambda")
    elif lam:
        parser.add_argument("--lam", type=nonnegative_float, default=0.01, help="ridge penalty lambda")
    if A:
        parser.add_argument("--A", type=finite_float, nargs=4, default=[0.6, 0.4, 0.4, 0.6],
                            metavar=("A11", "A12", "A21", "A22"),
                            help="the target's positional part A, row by row (target: (1 - omega) softmax + omega "
                                 "A); any finite entries are accepted: with rows not summing to one the target's "
                                 "attention rows do not sum to one either")


def add_point(parser, *, alpha=..., omega=..., required: bool = False, omega_type=unit_interval) -> None:
    """One point: `--alpha` (sample complexity, default `alpha`) and `--omega` (positional share, default
    `omega`); a flag whose default is `...` is left out; `required`: both without a default."""
    if alpha is not ...:
        parser.add_argument("--alpha", type=positive_float, default=None if required else alpha, required=required,
                            help="sample complexity n / d")
    if omega is not ...:
        parser.add_argument("--omega", type=omega_type, default=None if required else omega, required=required,
                            help="positional share of the target")


def add_range(parser, name: str, lo: float, hi: float, n: int | None, *, kind=positive_float, what: str = "") -> None:
    """`--<name>-min`, `--<name>-max`, `--n-<name>`: an evenly spaced grid (`n` None: the preset's count;
    `phasejax.commands.argtypes.grid_range` builds it and refuses a dropped bound)."""
    parser.add_argument(f"--{name}-min", type=kind, default=lo, help=f"smallest {name}{what}")
    parser.add_argument(f"--{name}-max", type=kind, default=hi, help=f"largest {name}")
    parser.add_argument(f"--n-{name}", type=positive_int, default=n,
                        help=f"number of {name}s" + (" (default: the preset's)" if n is None else ""))


def add_alpha_curve(parser, lo: float, hi: float, *, seeds: str) -> None:
    """Students along an alpha curve at one omega: `--d`, `--seeds` (help `seeds`), `--omega` (default 0.3) and
    the alpha grid `--alpha-min` (`lo`), `--alpha-max` (`hi`), `--n-alpha` (the preset's)."""
    add_sizes(parser, d="one", seeds=seeds)
    add_point(parser, omega=0.3)
    add_range(parser, "alpha", lo, hi, None)


def add_sizes(parser, *, d: str | None = None, seeds: str | None = "seeds (default: the preset's)",
              d_type=positive_int) -> None:
    """The experiment's sizes: `d` `"one"` adds `--d` (one dimension), `"many"` `--ds` (several); `--seeds` (the
    number of seeds, `0 ... N-1`) with the help text `seeds`. Defaults None: the preset's."""
    if d == "one":
        parser.add_argument("--d", type=d_type, default=None, help="dimension (default: the preset's)")
    elif d == "many":
        parser.add_argument("--ds", type=d_type, nargs="+", default=None, help="dimensions (default: the preset's)")
    if seeds:
        parser.add_argument("--seeds", type=positive_int, default=None, help=f"number of {seeds}")


def add_optimizer(parser, *, optimizers=("lbfgs", "gd", "adam"), learning_rate=None, max_steps=None,
                  gtol: bool = False, learning_rate_help: str | None = None) -> None:
    """The training loop's flags: `--optimizer` (when `optimizers` has several), `--learning-rate` (default
    `learning_rate`; `...` adds none), `--max-steps` (the step cap of an optimiser that stops at convergence,
    default `max_steps`; None: none) and with `gtol` `--gtol`."""
    if len(optimizers) > 1:
        parser.add_argument("--optimizer", choices=optimizers, default=optimizers[0], help="the training algorithm")
    if learning_rate is not ...:
        parser.add_argument("--learning-rate", type=positive_float, default=learning_rate,
                            help=learning_rate_help or "the optimiser's step size")
    if max_steps is not None:
        parser.add_argument("--max-steps", type=positive_int, default=max_steps, help="optimiser step cap")
    if gtol:
        parser.add_argument("--gtol", type=positive_float, default=None,
                            help="RMS-gradient tolerance (default: 1e-6 in float32, 1e-7 in float64)")


def add_steps(parser, *, batch_size: bool = False, help: str = "optimiser steps per run") -> None:
    """`--steps` (a fixed number of optimiser steps, default the preset's) and with `batch_size` `--batch-size`."""
    parser.add_argument("--steps", type=positive_int, default=None, help=f"{help} (default: the preset's)")
    if batch_size:
        parser.add_argument("--batch-size", type=positive_int, default=None,
                            help="sequences per step (default: the preset's)")


def add_histogram_task(parser, *, T: int) -> None:
    """The histogram task (`phasejax.tasks.histogram`): `--T` (alphabet size) and `--L` (sequence length)."""
    parser.add_argument("--T", type=positive_int, default=T, help="alphabet size")
    parser.add_argument("--L", type=positive_int, default=10, help="sequence length")


def add_n_test(parser, default: int) -> None:
    """`--n-test`: fresh test sequences per run (its accuracy or test error)."""
    parser.add_argument("--n-test", type=positive_int, default=default, help="fresh test sequences per run")


def add_leave_out(parser, parts: dict, *, older: str | None = None) -> None:
    """A `--no-<part>` switch per `{part: what it leaves out}`; `older`: a prefix whose spelling of the same
    switches (`--skip-<part>`) is still accepted but not shown."""
    for part, what in parts.items():
        names = [f"--no-{part}"] + ([f"--{older}-{part}"] if older else [])
        action = parser.add_argument(names[0], action="store_true", help=f"leave out {what}", dest=f"no_{part}".replace("-", "_"))
        if older:
            parser.add_argument(names[1], action="store_true", dest=action.dest, help=argparse.SUPPRESS)


def add_hidden_alias(parser, alias: str, dest: str, **kw) -> None:
    """An older spelling `alias` of the flag whose value is `dest`: accepted, not shown by `--help`."""
    parser.add_argument(alias, dest=dest, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **kw)


def default_out(command: str) -> str:
    """The default output folder of `command`: `runs/<command>` (hyphens as underscores). The committed
    `results/` folders are written only when `--out` names them."""
    return os.path.join("runs", command.replace("-", "_"))


def add_output(parser: argparse.ArgumentParser, default, *, help: str | None = None, guard: bool = True) -> None:
    """`--out` (default `default`: a path, usually `default_out(NAME)`, or a function of the parsed arguments
    for a default that depends on other flags) and `--overwrite`.

    With `guard` (the default) the command line calls `guard_output` before the command runs: an `--out` folder
    that holds results of another configuration (or of unknown origin) is refused with one line naming it and
    the flags to pass, unless `--overwrite`; a folder this configuration created is reused (a killed run resumes).
    With `--replot` it calls `guard_replot` instead. A command whose `--out` is one file passes `guard=False` and
    calls `guard_output_file` itself.
    """
    parser.add_argument("--out", default=None if callable(default) else default,
                        help=help or "output folder (created; refused when it holds another configuration's "
                                     "results unless --overwrite)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into --out even when it holds results of another configuration (they are "
                             "replaced file by file)")
    if callable(default):
        parser.set_defaults(_out_default=default)
    if guard:
        parser.set_defaults(_guard_output=True)


# ----------------------------------------------------------------------------
# Modes: which flags a way of running reads
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Mode:
    """A way a command runs, chosen by its flags, and the flags it reads then: `when(args)` says whether the
    command line chose it; `uses` (dests) are the only flags it reads besides `ALWAYS_USED` (None: any), and
    `ignores` the flags it never reads. `label` names the choice in the message (`"by --replot"`, `"with --layers
    3"`), `why` says why the flags are not read, and `alternative` what else to do. The command line refuses a flag
    given explicitly that the chosen mode does not read (`phasejax.commands._session.refuse_unused`)."""

    label: str
    when: Callable
    uses: frozenset | None = None
    ignores: frozenset = frozenset()
    why: str = ""
    alternative: str = ""

    def unused(self, given) -> list[str]:
        """The dests of `given` (flags the command line gave) that this mode does not read."""
        if self.uses is not None:
            return [d for d in given if d not in self.uses and d not in ALWAYS_USED and not d.startswith("_")]
        return [d for d in given if d in self.ignores]


ALWAYS_USED = frozenset({"out", "overwrite", "no_progress", "debug"})
"""Flags every mode reads (where it writes, whether it may rewrite, progress, tracebacks)."""


def add_mode(parser: argparse.ArgumentParser, label: str, when: Callable, *, uses=None, ignores=(), why: str = "",
             alternative: str = "") -> None:
    """Declare a `Mode` of the command: with `when(args)` true, a flag given explicitly that is not among `uses`
    (when given) or is among `ignores` is refused with one line naming it."""
    modes = tuple(parser.get_default("_modes") or ())
    mode = Mode(label, when, None if uses is None else frozenset(uses), frozenset(ignores), why, alternative)
    parser.set_defaults(_modes=modes + (mode,))


def allow_repeats(parser: argparse.ArgumentParser, *dests: str) -> None:
    """List flags (`dests`) whose values may repeat (counts per entry of another list, say); a repeated value in any
    other list flag is refused (`phasejax.commands._session.refuse_unused`)."""
    parser.set_defaults(_repeats=tuple(parser.get_default("_repeats") or ()) + dests)


def add_replot(parser: argparse.ArgumentParser, help: str, *, uses=(), owner=(), summary: str = "summary.json") -> None:
    """`--replot`: redo figures and summaries from the files in `--out`, without computing. `uses` names the
    flags (dests) the replot reads besides `--out` and `--overwrite`; the command line refuses any other flag
    given with `--replot` (`phasejax.commands._session.refuse_unused`). `owner`: flags (dests) whose value the
    folder's results must have been computed with (the extension's name, say), read from its `summary` (the
    command line it records; a dict `{dest: key}` also compares the summary's `key`, for summaries that record no
    command line) or its output marker: a folder of another command or another value is refused, also with
    `--overwrite` (`phasejax.commands._session.check_owner`)."""
    parser.add_argument("--replot", action="store_true", help=help)
    owner = dict(owner) if isinstance(owner, dict) else dict.fromkeys(owner)
    parser.set_defaults(_replot_owner=owner, _replot_summary=summary)
    add_mode(parser, "by --replot", lambda args: bool(getattr(args, "replot", False)),
             uses=set(uses) | {"replot"},
             why="it redraws from the files in --out, with the settings they were computed with",
             alternative=", or run without --replot to compute anew")



def add_sweep(parser, command: str, *, chunk_size: int | None = 16, multi_host: bool = True) -> None:
    """Where a sweep writes and how it runs: `add_output` (default `default_out(command)`) and
    `add_run_options`."""
    add_output(parser, default_out(command))
    add_run_options(parser, chunk_size=chunk_size, multi_host=multi_host)


def add_run_options(parser: argparse.ArgumentParser, *, chunk_size: int | None = 16, multi_host: bool = True,
                    chunk_help: str = "tasks per compiled call (memory grows with it; the results do not change)"
                    ) -> None:
    """The flags of `phasejax.sweep.RunOptions` shared by every sweep command: `--run-dir`, `--chunk-size`,
    `--host-devices`, `--no-progress`, and with `multi_host` `--process-index`, `--process-count`."""
    g = parser.add_argument_group("run options (resume, chunking, devices" + (", multi-host)" if multi_host else ")"))
    g.add_argument("--run-dir", default=None,
                   help="folder for chunk files and config.json; re-running with the same flags resumes there; "
                        "default: <out>/run")
    g.add_argument("--chunk-size", type=positive_int, default=chunk_size, help=chunk_help)
    g.add_argument("--host-devices", type=positive_int, default=None,
                   help="simulate this many CPU devices (sets XLA_FLAGS before JAX starts)")
    if multi_host:
        g.add_argument("--process-index", type=nonnegative_int, default=0, help="this process (multi-host runs)")
        g.add_argument("--process-count", type=positive_int, default=1,
                       help="number of processes (multi-host runs)")
    add_progress(g)


def add_progress(parser) -> None:
    """`--no-progress`: no progress bars or progress lines (they are drawn only when stderr is a terminal)."""
    parser.add_argument("--no-progress", action="store_true",
                        help="hide the progress bars and lines (they are drawn only when stderr is a terminal)")



def replot_reads(args, files, *, optional=()) -> list:
    """The `phasejax.commands.argtypes.Reads` of the files a `--replot` reads from `--out` (none without
    `--replot`): `files` maps each file's name (relative to `--out`) to the columns (CSV), keys (JSON) or arrays
    (NPZ) it reads; the names in `optional` may be absent."""
    from phasejax.commands.argtypes import Reads

    if not getattr(args, "replot", False):
        return []
    return [Reads(os.path.join(args.out, name), tuple(needs), optional=name in optional)
            for name, needs in files.items()]


def rs_dir_reads(folder: str, files, *, given: bool, reader: str, alternative: str = "") -> list:
    """The `phasejax.commands.argtypes.Reads` of the phase-diagram folder `--rs-dir` (`folder`): `files` maps each
    file's name to what `reader` (the command) reads of it; `given`: whether the flag was given (a missing default
    says how to pass one); `alternative`: another way out (`", or --no-rs"`)."""
    from phasejax.commands.argtypes import Reads

    fix = "pass a folder written by phasejax phase-diagram" if given else (
        "pass --rs-dir with a folder written by phasejax phase-diagram (the default is the repository's "
        "results/phase_diagram, which an installed package does not have)")
    return [Reads(os.path.join(folder, name), tuple(needs), flag="--rs-dir", reader=reader, fix=fix + alternative)
            for name, needs in files.items()]


def repository_results(*parts: str) -> str:
    """`results/<parts>` of the checkout the package runs from (found next to the package, whatever the working
    directory): the default of a flag that reads committed results (`--rs-dir`)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "results", *parts)


# ----------------------------------------------------------------------------
# A command's run
# ----------------------------------------------------------------------------



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
    """Where and with what a result was computed: platform, device kind, device count, and `provenance()` (the
    command line and the package versions; `jax` and `phasejax` also at the top, as older summaries have them).
    Every summary a command writes holds it."""
    import jax

    from phasejax import __version__

    return dict(platform=jax.default_backend(), device=str(jax.devices()[0].device_kind),
                n_devices=len(jax.devices()), jax=jax.__version__, phasejax=__version__, **provenance())


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
