"""One status enum and one iteration loop for every iterative routine (SE, GAMP, training, tasks).

Modelled on optimistix: a solver is a small frozen object that holds only
its settings (tolerances, caps, damping); the problem it solves (the data,
the model's parameters, a start) is a pytree passed as an argument:
`init(problem, ...) -> state`, `step(problem, state) -> state` and
`terminate(problem, state) -> (done, status)`. `iterate` owns the
`lax.while_loop`, the step count and the `MAX_ITERATIONS` status, so every
solver reports the same way and stays jittable and vmappable (a failure is
a status, not an exception). A solver whose settings say everything takes
`problem=None`.

`Status` codes are plain integers inside JAX arrays; `Status(code).name`
is the name written to CSV files (`status_name`), `Status.message` explains it.

Example:
  >>> import jax.numpy as jnp
  >>> class Shrink:                  # x <- a x until |x| < tol; the problem is the factor a
  ...     tol = 1e-3                                  # a setting
  ...     def init(self, a, x): return x
  ...     def step(self, a, x): return a * x
  ...     def terminate(self, a, x): return jnp.abs(x) < self.tol, jnp.asarray(Status.CONVERGED)
  >>> out = iterate(Shrink(), 0.5, Shrink().init(0.5, jnp.asarray(1.0)), max_steps=100)
  >>> int(out.steps), out.status_name
  (10, 'converged')

Batched (`jax.vmap`), `status_name` is an array of names, one per lane:
  >>> import jax
  >>> batch = jax.vmap(lambda a: iterate(Shrink(), a, jnp.asarray(1.0), max_steps=12))(jnp.asarray([0.5, 0.9]))
  >>> batch.status_name.tolist()
  ['converged', 'max_iterations']
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from phasejax._errors import RunError
from phasejax.progress import tick_batch

Array = jax.Array


class Status(enum.IntEnum):
    """Outcome of an iterative routine. Stored as an `int32` code; names are written to CSV."""

    CONVERGED = 0
    MAX_ITERATIONS = 1
    INVALID_ITERATE = 2
    INVALID_INPUT = 3
    DIVERGED = 4
    RUNNING = -1

    @property
    def message(self) -> str:
        return _MESSAGES[self]


_MESSAGES = {
    Status.CONVERGED: "the stopping criterion was met",
    Status.MAX_ITERATIONS: "the iteration cap was reached before the stopping criterion; values are the last iterate's",
    Status.INVALID_ITERATE: ("an iterate left the valid domain (non-finite, or an overlap matrix not positive "
                             "semi-definite); the last valid iterate is returned and derived quantities are NaN"),
    Status.INVALID_INPUT: "the inputs are invalid (traced values that could not be checked before the call)",
    Status.DIVERGED: "the iterates diverged (non-finite or exploding); the last good iterate is returned",
    Status.RUNNING: "still running (internal; never returned)",
}

STATUS_NAMES = {int(s): s.name.lower() for s in Status if s is not Status.RUNNING}
"""`{code: name}` for the codes a routine can return."""


def status_name(code):
    """Lower-case name of a status code (`0 -> "converged"`): a `str` for an int or a 0-d array, a numpy array of
    names of the same shape for an array of codes (a batched result's statuses; `status_names`). Needs concrete
    codes (not under `jit`)."""
    codes = np.asarray(code)
    if codes.ndim:
        return status_names(codes)
    return Status(int(codes)).name.lower()


class HasStatus:
    """For result types with a `status` field (a `Status` code): its name, `status_name`.

    Mixed into every result with a status (`SEResult`, `TrainResult`, `GAMPResult`, ...); a `NamedTuple`
    result, which cannot take a base class, has the same property as `status_name = HasStatus.status_name`."""

    @property
    def status_name(self):
        """Name of the status: a `str` for an unbatched result, a numpy array of names (the shape of `status`) for
        a batched one (e.g. `jax.vmap`'s output), as `status_name`."""
        return status_name(self.status)


def status_names(codes) -> np.ndarray:
    """Vectorised `status_name` over an array of codes (for CSV columns): a numpy array of names, the shape of
    `codes` (0-d for one code)."""
    codes = np.asarray(codes)
    return np.asarray([Status(int(c)).name.lower() for c in codes.ravel()]).reshape(codes.shape)


def status_code(name: str) -> int:
    """Inverse of `status_name` (`"converged" -> 0`); raises `ValueError` for unknown names."""
    try:
        return int(Status[name.upper()])
    except KeyError:
        raise ValueError(f"unknown status {name!r}; known: {sorted(STATUS_NAMES.values())}") from None


class SolverError(RunError):
    """An iterative routine asked to raise on failure (`throw=True`) did not converge."""


def raise_unless_converged(status, what: str) -> None:
    """For `throw=True`: `SolverError` naming `what` and the status (with its message) when any of `status` (a code
    or an array of codes) is not `CONVERGED`. Needs concrete values: under `jit` or `vmap` pass `throw=False` and
    read the status instead (`ValueError` otherwise)."""
    if isinstance(status, jax.core.Tracer):
        raise ValueError(f"{what}: throw=True needs concrete results; under jit or vmap pass throw=False and read "
                         "the status")
    codes = np.asarray(status).ravel()
    bad = codes[codes != int(Status.CONVERGED)]
    if bad.size:
        first = Status(int(bad[0]))
        raise SolverError(f"{what} did not converge ({bad.size} of {codes.size}: {first.name.lower()}, "
                          f"{first.message})")


class IterativeSolver(Protocol):
    """What `iterate` needs: `step(problem, state) -> state` and `terminate(problem, state) -> (done (), status ())`.

    The object holds the solver's settings; `problem` (any pytree, or `None`) holds what is solved."""

    def step(self, problem: Any, state: Any) -> Any: ...

    def terminate(self, problem: Any, state: Any) -> tuple[Array, Array]: ...


class IterationResult(NamedTuple):
    """Output of `iterate`: the final `state`, `steps ()` taken and `status ()` (a `Status` code)."""

    state: Any
    steps: Array
    status: Array

    status_name = HasStatus.status_name


def iterate(solver: IterativeSolver, problem: Any, state: Any, *, max_steps: int, min_steps: int = 0,
            report_progress: bool = False) -> IterationResult:
    """Run `solver.step(problem, .)` from `state` until `solver.terminate(problem, .)` says done or `max_steps` steps.

    `max_steps` may be a traced integer (e.g. a cap chosen per lane). With `report_progress` (and a concrete
    `max_steps`) each step reports `1 / max_steps` of a task to an active sweep's progress bar
    (`phasejax.progress.tick_batch`; nothing is compiled in when no bar is active).

    The status is the one `terminate` reports when it stops the loop, and
    `MAX_ITERATIONS` when the cap stops it. `terminate` is checked before the
    first step (a state that is already done takes zero steps) unless
    `min_steps > 0`. Jittable and vmappable; under `vmap` every lane runs
    until the slowest is done, but a finished lane's state no longer changes.
    """
    concrete = isinstance(max_steps, (int, np.integer))
    if (concrete and max_steps < 0) or min_steps < 0:
        raise ValueError(f"max_steps and min_steps must be >= 0, got {max_steps}, {min_steps}")

    def check(state, k):
        done, status = solver.terminate(problem, state)
        done = jnp.asarray(done) & (k >= min_steps)
        return done, jnp.asarray(status, jnp.int32)

    def cond(carry):
        _, k, done, _ = carry
        return (~done) & (k < max_steps)

    def body(carry):
        state, k, _, _ = carry
        if report_progress and concrete and max_steps > 0:
            tick_batch(1.0 / max_steps)
        state = solver.step(problem, state)
        done, status = check(state, k + 1)
        return state, k + 1, done, status

    done0, status0 = check(state, jnp.asarray(0))
    state, k, done, status = jax.lax.while_loop(cond, body, (state, jnp.asarray(0), done0, status0))
    status = jnp.where(done, status, jnp.int32(Status.MAX_ITERATIONS))
    return IterationResult(state=state, steps=k, status=status)
