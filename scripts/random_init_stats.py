#!/usr/bin/env python3
"""Thin wrapper: `python scripts/random_init_stats.py ARGS` is `phasejax random-init ARGS` (same flags; see `phasejax random-init --help`)."""

import sys

from phasejax.cli import main

if __name__ == "__main__":
    sys.exit(main(["random-init", *sys.argv[1:]]))
