"""Every public module imports on its own, in a fresh interpreter (no import cycles)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = ["phasejax.theory.gamp", "phasejax.theory.gram", "phasejax.empirics", "phasejax.empirics.sweep",
           "phasejax.phase", "phasejax.tasks", "phasejax.tasks.transformer", "phasejax.plotting"]


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_first(module):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, env=env, cwd=ROOT)
