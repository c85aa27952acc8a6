#!/usr/bin/env python3
"""Thin wrapper: `python scripts/bench_training.py ARGS` is `phasejax bench-training ARGS` (same flags; see `phasejax bench-training --help`)."""

import sys

from phasejax.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench-training", *sys.argv[1:]]))
