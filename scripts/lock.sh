#!/usr/bin/env bash
# Regenerate requirements/lock.txt: install phasejax with its test and docs extras into a fresh virtual environment
# (the newest releases that pyproject.toml's ranges admit), then record every installed distribution's exact version.
# Run the test suite against the new lock (bash scripts/test.sh) before committing it.
set -euo pipefail
cd "$(dirname "$0")/.."
env_dir=$(mktemp -d)
trap 'rm -rf "$env_dir"' EXIT
python3 -m venv "$env_dir"
"$env_dir/bin/python" -m pip install -q --upgrade pip
"$env_dir/bin/python" -m pip install -q -e ".[test,docs]"
{
  echo "# The environment the test suite passes with: exact versions of everything phasejax[test,docs] installs."
  echo "# Used as pip constraints by scripts/test.sh and scripts/run_main.sh; regenerate with: bash scripts/lock.sh"
  echo "# ($("$env_dir/bin/python" -c 'import platform; print("Python", platform.python_version())'))"
  "$env_dir/bin/python" -m pip freeze --exclude-editable --all | grep -v '^\(pip\|setuptools\|wheel\)=='
} > requirements/lock.txt
echo "wrote requirements/lock.txt ($(grep -vc '^#' requirements/lock.txt) pins)"
