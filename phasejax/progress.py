"""Progress from inside compiled calls.

A chunked sweep (`phasejax.sweep.run_chunked`) draws one progress bar over its tasks. Without help the bar
moves once per chunk, which for a chunk that is one long compiled call (a row of theory solves, a vmapped
batch of training runs) means it sits still for minutes. Numerics that run long inside one call report
their own progress with the two functions below; they compile to nothing unless a bar is active when the
function is traced, so the numerics stay pure and cacheable outside a sweep with a bar.

* `tick(amount, like)`: this lane has done `amount` of its task (e.g. `1 / n_points` after each point of a
  continuation row). `like` is any array of the lane (its loop counter, say), so that under `vmap` every
  lane reports; a lane that has finished should pass `amount = 0`.
* `tick_batch(amount)`: the whole batch of the call has advanced by `amount` of each task (e.g.
  `1 / max_steps` after each step of a vmapped training loop: the loop runs until its slowest lane stops, so
  this is the fraction of the worst case). One host call per step for the whole batch, however many lanes.

The bar is advanced on the host and never past the end of the chunk being computed; when the chunk is done
the sweep sets it to the exact count. A compiled program that contains these host calls is not stored in
JAX's persistent compilation cache, so a sweep with a bar recompiles in each new process (`--no-progress`,
or output that is not a terminal, keeps the cache).

When stderr is not a terminal (a batch job's log), the sweep prints `ChunkLines` instead: one plain line per
finished chunk, with the chunks and tasks done, the time elapsed and an estimate of the rest, and nothing per
step (the host knows between chunks what is done, at no cost to the compiled programs).

>>> import jax, jax.numpy as jnp
>>> from phasejax.progress import tick, tracking
>>> tracking()          # no bar is active: tick compiles to nothing
False
>>> float(jax.jit(lambda x: (tick(0.5, x), x + 1)[1])(jnp.float32(1.0)))
2.0
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["ChunkLines", "ChunkProgress", "active", "bar_or_lines", "duration", "share", "tick", "tick_batch",
           "tracking"]


@dataclasses.dataclass
class ChunkProgress:
    """The bar of a sweep (anything with tqdm's `update(n)` and `n`), the task count at which the chunk being
    computed ends (`cap`) and its number of lanes (`lanes`, padding included)."""

    bar: object
    cap: float = 0.0
    lanes: int = 1

    def advance(self, amount: float) -> None:
        room = self.cap - float(self.bar.n)
        step = min(max(float(amount), 0.0), max(room, 0.0))
        if step > 0:
            self.bar.update(step)

    def finish_chunk(self, done: float) -> None:
        """Set the bar to `done` tasks (the exact count once a chunk is on disk)."""
        self.bar.update(float(done) - float(self.bar.n))


def duration(seconds: float) -> str:
    """`seconds` as `1h02m`, `4m05s` or `12s`.

    >>> duration(3725), duration(245.2), duration(12.4)
    ('1h02m', '4m05s', '12s')
    """
    s = int(round(max(float(seconds), 0.0)))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class ChunkLines:
    """Progress of a sweep as one plain line per finished chunk, for a log file (stderr not a terminal).

    `chunks`: the task count of each chunk this process owns (those already on disk included); `todo`: the task
    counts of the chunks it computes now, in order; `label`: what the sweep computes (its config's `kind`). Each
    `finish_chunk` prints `phasejax: <label>: chunk 3 of 10 done (48 of 160 tasks), 1m05s elapsed, about 4m30s
    left`; the estimate is the time per task of the chunks computed so far, times the tasks left.

    >>> import io
    >>> log = io.StringIO()
    >>> lines = ChunkLines([4, 4, 2], [4, 2], label="demo", stream=log)
    >>> _ = lines.finish_chunk(4), lines.finish_chunk(2)
    >>> for line in log.getvalue().splitlines():
    ...     print(line.split(",")[0])
    phasejax: demo: chunk 2 of 3 done (8 of 10 tasks)
    phasejax: demo: chunk 3 of 3 done (10 of 10 tasks)
    """

    def __init__(self, chunks, todo, *, label: str = "", stream=None, clock=time.perf_counter):
        self.n_chunks, self.n_tasks = len(chunks), int(sum(chunks))
        self.done_chunks = self.n_chunks - len(todo)
        self.done_tasks = self.n_tasks - int(sum(todo))
        self.computed = 0
        self.label, self.stream, self.clock = label, stream, clock
        self.start = clock()

    def finish_chunk(self, tasks: int) -> str:
        """Count a finished chunk of `tasks` tasks and print its line (flushed); returns the line."""
        self.done_chunks += 1
        self.done_tasks += int(tasks)
        self.computed += int(tasks)
        elapsed = self.clock() - self.start
        left = self.n_tasks - self.done_tasks
        rest = f", about {duration(elapsed / self.computed * left)} left" if left else ""
        line = (f"phasejax: {self.label + ': ' if self.label else ''}chunk {self.done_chunks} of {self.n_chunks} done "
                f"({self.done_tasks} of {self.n_tasks} tasks), {duration(elapsed)} elapsed{rest}")
        print(line, file=self.stream if self.stream is not None else sys.stderr, flush=True)
        return line

    def update(self, n: int = 1) -> None:
        """tqdm's `update`: `n` more tasks done, counted as one finished chunk."""
        self.finish_chunk(n)

    def close(self) -> None:
        """tqdm's `close` (nothing to do)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def bar_or_lines(total: int, label: str, enabled: bool = True):
    """Progress over `total` steps of a loop on the host (one step: a task of minutes): a tqdm bar when stderr is a
    terminal, `ChunkLines` (one line per step) when it is not, nothing without `enabled`. Use as a context manager;
    call `update(1)` after each step."""
    from tqdm.auto import tqdm

    if enabled and not _stderr_is_terminal():
        return ChunkLines([1] * total, [1] * total, label=label)
    return tqdm(total=total, desc=label, disable=None if enabled else True)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


_ACTIVE: list[ChunkProgress] = []
_SHARE: list[float] = [1.0]


@contextlib.contextmanager
def share(fraction: float):
    """While the block is traced, the amounts of `tick` and `tick_batch` count as `fraction` of a task each (for
    a part of a task that does not know how the task is divided: e.g. one of several continuation rows of a
    phase-diagram task reports `1 / n_points` per point inside `share(1 / n_rows)`). Nests multiplicatively."""
    _SHARE.append(_SHARE[-1] * float(fraction))
    try:
        yield
    finally:
        _SHARE.pop()


@contextlib.contextmanager
def active(progress: ChunkProgress):
    """Make `progress` the target of `tick` and `tick_batch` while the block runs (and is traced)."""
    _ACTIVE.append(progress)
    try:
        yield progress
    finally:
        _ACTIVE.remove(progress)


def tracking() -> bool:
    """Whether a bar is active now (at trace time: whether `tick` compiles to a host call)."""
    return bool(_ACTIVE)


def _lane(amount, _like) -> None:
    if _ACTIVE:
        _ACTIVE[-1].advance(float(np.sum(amount)))


def _batch(amount) -> None:
    if _ACTIVE:
        _ACTIVE[-1].advance(float(amount) * _ACTIVE[-1].lanes)


def tick(amount, like) -> None:
    """Report that this lane has done `amount` (a fraction of one task; an array of the lane, or a number)."""
    if _ACTIVE:
        # `like` only makes the call per lane under vmap (a batched argument); its value is not used
        jax.debug.callback(_lane, jnp.asarray(amount, jnp.float32) * _SHARE[-1], jnp.asarray(like).reshape(-1)[:1])


def tick_batch(amount) -> None:
    """Report that every lane of the call has advanced by `amount` (a fraction of one task; a Python number)."""
    if _ACTIVE:
        jax.debug.callback(_batch, np.float32(amount * _SHARE[-1]))
