#!/usr/bin/env python3
"""Thin wrapper: `python scripts/counting_phase_diagram.py ARGS` is `phasejax counting ARGS` (same flags; see `phasejax counting --help`)."""

import sys

from phasejax.cli import main

if __name__ == "__main__":
    sys.exit(main(["counting", *sys.argv[1:]]))
