#!/usr/bin/env python3
"""Thin wrapper: `python scripts/solve_se.py ARGS` is `phasejax solve ARGS` (same flags, same JSON keys)."""

import sys

from phasejax.cli import main

if __name__ == "__main__":
    sys.exit(main(["solve", *sys.argv[1:]]))
