#!/usr/bin/env python3
"""Thin wrapper: `python scripts/reproduce_fig2.py ARGS` is `phasejax fig2 ARGS` (same flags; see `phasejax fig2 --help`)."""

import sys

from phasejax.cli import main

if __name__ == "__main__":
    sys.exit(main(["fig2", *sys.argv[1:]]))
