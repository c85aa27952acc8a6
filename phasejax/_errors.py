"""The two kinds of error a user can cause, shared by the library and the command line (no JAX imported here).

The command line prints either as one line, `phasejax <cmd>: error: <message>`, with exit code 2 (`UsageError`:
bad input) or 1 (`RunError`: the run cannot go on).
"""


class UsageError(ValueError):
    """A bad input found after parsing (a conflict of flags, a file that is not what it should be): exit code 2."""


class RunError(RuntimeError):
    """A run that cannot go on (it does not fit, a result cannot be written, its run directory is in use by another
    process): exit code 1."""
