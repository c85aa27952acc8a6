#!/usr/bin/env bash
# Install phasejax with its test extra into .venv (created if missing) and run the default test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
exec .venv/bin/python -m pytest -q "$@"
