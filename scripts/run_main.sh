#!/usr/bin/env bash
# Install phasejax into .venv (created if missing) and compute the main job, the default phase diagram, into
# runs/phase_diagram/ (about 11 minutes on 2 CPU cores; --out results/phase_diagram --overwrite rewrites the
# committed one). Extra flags are passed to `phasejax phase-diagram`.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
exec .venv/bin/phasejax phase-diagram "$@"
