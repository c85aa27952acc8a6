#!/usr/bin/env python3
"""Thin wrapper: `python scripts/phase_diagram.py ARGS` is `phasejax phase-diagram ARGS` (same flags; see `phasejax phase-diagram --help`)."""

import sys

from phasejax.cli import main

if __name__ == "__main__":
    sys.exit(main(["phase-diagram", *sys.argv[1:]]))
