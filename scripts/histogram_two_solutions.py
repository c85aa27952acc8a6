#!/usr/bin/env python3
"""Thin wrapper: `python scripts/histogram_two_solutions.py ARGS` is `phasejax histogram ARGS` (same flags; see `phasejax histogram --help`)."""

import sys

from phasejax.cli import main

if __name__ == "__main__":
    sys.exit(main(["histogram", *sys.argv[1:]]))
