#!/usr/bin/env python3
"""Thin wrapper: `python scripts/reproduce_scaling.py ARGS` is `phasejax scaling ARGS` (same flags; see `phasejax scaling --help`)."""

import sys

from phasejax.cli import main

if __name__ == "__main__":
    sys.exit(main(["scaling", *sys.argv[1:]]))
