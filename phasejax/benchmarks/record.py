"""What every benchmark figure shares: timing with JAX's compile events, status counts, the environment record
(date, device, versions, git commit), the rule of the state-evolution figures, one figure's entry, and a
measurement in a fresh process."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
from typing import Callable

import numpy as np

from phasejax.provenance import command_line, git, repository_root, versions  # noqa: F401 - the record's

COMPILE_EVENT_PREFIX = "/jax/core/compile/"
QUICK_NODES = 4            # `--quick`: tensor Gauss-Hermite with this many nodes per dimension


def timed(fn: Callable, *args):
    """`(out, seconds, compile_seconds)` of `fn(*args)`, blocked until ready.

    `compile_seconds` sums the tracing, lowering and compilation durations JAX reports during the call
    (`jax.monitoring` events under `/jax/core/compile/`); `None` where this JAX cannot report them.
    """
    import jax

    spent = [0.0]

    def listener(event, duration, **_):
        if event.startswith(COMPILE_EVENT_PREFIX):
            spent[0] += float(duration)

    can_listen = hasattr(jax.monitoring, "unregister_event_duration_listener")
    if can_listen:
        jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        seconds = time.perf_counter() - t0
    finally:
        if can_listen:
            jax.monitoring.unregister_event_duration_listener(listener)
    return out, seconds, (spent[0] if can_listen else None)


def status_counts(codes) -> dict[str, int]:
    """`{status name: count}` of an array of `phasejax.solvers.Status` codes (any shape)."""
    from phasejax.solvers import status_name

    values, counts = np.unique(np.asarray(codes).ravel(), return_counts=True)
    return {status_name(v): int(c) for v, c in zip(values, counts)}


def device_name(backend: str | None = None) -> str:
    """`cpu`, `gpu` or `tpu`: the file name of a record (`jax.default_backend()`, CUDA and ROCm as `gpu`)."""
    import jax

    backend = backend or jax.default_backend()
    return {"cuda": "gpu", "rocm": "gpu"}.get(backend, backend)


def environment() -> dict:
    """Where and with what a record was measured: UTC date, device, versions, git commit, JAX settings."""
    import jax

    devices = jax.devices()
    return dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        device=dict(name=device_name(), platform=jax.default_backend(), kind=str(devices[0].device_kind),
                    count=len(devices), cpu_count=os.cpu_count(),
                    load_average_at_start=list(os.getloadavg()) if hasattr(os, "getloadavg") else None),
        versions=versions(),
        jax_settings=dict(persistent_compilation_cache=jax.config.jax_compilation_cache_dir or None,
                          xla_flags=os.environ.get("XLA_FLAGS") or None),
        command=command_line(),
    )


def quadrature_for(quick: bool):
    """The rule of every state-evolution figure: `None` (the converged default scheme), or for `quick`
    the tensor Gauss-Hermite rule with `QUICK_NODES` per dimension (no error estimates)."""
    from phasejax.theory import gauss_hermite

    return gauss_hermite(4, QUICK_NODES) if quick else None


def rule_name(quadrature) -> str:
    """How the record names the rule `quadrature` (`quadrature_for`)."""
    if quadrature is None:
        return "default scheme (SplitProductRule, with replicas for error bars)"
    return f"tensor Gauss-Hermite, {QUICK_NODES} nodes per dimension ({QUICK_NODES ** 4} nodes, no error bars)"


def figure_entry(name: str, what: str, *, seconds: float, points: int, compilation_included: bool, statuses: dict,
           solves: int | None = None, **extra) -> dict:
    """One figure's record (the keys every figure shares, then its own)."""
    return dict(name=name, what=what, seconds=float(seconds), seconds_per_point=float(seconds) / points,
                points=int(points), solves=int(points if solves is None else solves),
                compilation_included=bool(compilation_included), statuses=statuses,
                converged=int(statuses.get("converged", 0)), **extra)


def fresh_process(code: str, *args: str, source: str | None = None, env: dict | None = None,
                   timeout: float = 1800) -> dict:
    """Run `code` in a new Python process (the package imported from `source`, default this checkout) and
    return the JSON object its last output line holds."""
    environ = dict(os.environ, **(env or {}))
    environ["PYTHONPATH"] = (source or repository_root()) + os.pathsep + environ.get("PYTHONPATH", "")
    flags = []
    if source is not None:
        # an editable install of this checkout maps `phasejax` here whatever the path (a finder its .pth file
        # installs): without the site hooks (-S), with the installed packages' folders on the path instead
        import site

        flags = ["-S"]
        environ["PYTHONPATH"] += os.pathsep + os.pathsep.join(site.getsitepackages())
    # in the checkout's folder: `python -c` puts the working directory first on the path
    out = subprocess.run([sys.executable, *flags, "-c", code, *args], capture_output=True, text=True,
                         timeout=timeout, env=environ, cwd=source or repository_root())
    if out.returncode != 0:
        raise RuntimeError(f"a measurement process failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
