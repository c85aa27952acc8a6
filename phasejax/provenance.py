"""What computed a result: the command line and the versions, recorded in every summary and benchmark record.

`command_line()` is this process's command line as a user would type it; `versions()` the package versions and
the git commit of the checkout; `provenance()` both, the record a command writes beside its results. No
dependence on JAX beyond its version, none on the command layer.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys

import numpy as np


def command_line() -> str:
    """The command line of this process as a user would type it, shell-quoted (`shlex.join`: it can be pasted
    back into a shell): `phasejax <args>` when run through the `phasejax` entry point or the CLI module, else the
    program's file name and its arguments (no folder)."""
    import shlex

    prog = os.path.basename(sys.argv[0]) if sys.argv else ""
    head = "phasejax" if prog in ("phasejax", "cli.py", "__main__.py") else prog
    return shlex.join([head, *sys.argv[1:]]) if head else shlex.join(sys.argv[1:])


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def git(root: str, *args: str) -> str | None:
    """The output of `git -C root args`, or `None` where git fails or is missing."""
    try:
        out = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def repository_root() -> str:
    """The folder holding the `phasejax` package (the repository root of a source checkout)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def versions() -> dict:
    """The versions that compute a result: python, jax, jaxlib, numpy, scipy, flax, optax, phasejax, and the git
    commit of the checkout the package runs from (`git_dirty`: whether tracked files differ from it; both None
    outside a git checkout)."""
    import jax

    from phasejax import __version__

    root = repository_root()
    commit = git(root, "rev-parse", "HEAD") if os.path.exists(os.path.join(root, ".git")) else None
    dirty = git(root, "status", "--porcelain", "--untracked-files=no") if commit else None
    return dict(python=platform.python_version(), jax=jax.__version__, jaxlib=_version("jaxlib"),
                numpy=np.__version__, scipy=_version("scipy"), flax=_version("flax"), optax=_version("optax"),
                phasejax=__version__, git_commit=commit, git_dirty=None if dirty is None else bool(dirty))


def provenance() -> dict:
    """What computed a result, recorded in every summary a command writes: `command` (`command_line()`) and
    `versions` (`versions()`)."""
    return dict(command=command_line(), versions=versions())
