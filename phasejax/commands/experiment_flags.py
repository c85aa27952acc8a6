"""Moved to `phasejax.commands.flags`; `bench` and `depth` still import these names here."""

from phasejax.commands.flags import add_preset, command_line, environment, print_paths  # noqa: F401
