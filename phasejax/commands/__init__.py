"""Subcommands of the `phasejax` console script (one module each).

A command module defines `NAME` (the subcommand), `HELP` (one line),
`add_arguments(parser)` and `run(args) -> int`; `phasejax.cli` discovers
every module of this package. Commands are thin: they parse and validate
arguments (`phasejax.commands.argtypes`), call one library function, write
files and print where they wrote them.
"""
