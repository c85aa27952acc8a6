#!/usr/bin/env bash
# Install phasejax into .venv (created if missing) and compute the default phase diagram into results/phase_diagram/.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
exec .venv/bin/phasejax phase-diagram "$@"
