#!/usr/bin/env bash
# Install phasejax with its test extra into .venv (created if missing) and run the default test suite on
# PHASEJAX_TEST_WORKERS (default 2) worker processes, one test file per worker at a time (pytest-xdist's
# loadfile: a file's module fixtures and compilations are made once). PHASEJAX_TEST_WORKERS=0: one process.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
exec .venv/bin/python -m pytest -q -n "${PHASEJAX_TEST_WORKERS:-2}" --dist loadfile "$@"
