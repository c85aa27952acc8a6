"""Every public module imports on its own, in a fresh interpreter (no import cycles), and changes no JAX setting."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = ["phasejax", "phasejax.theory.gram", "phasejax.empirics", "phasejax.empirics.sweep",
           "phasejax.phase", "phasejax.tasks", "phasejax.tasks.counting", "phasejax.tasks.transformer",
           "phasejax.plotting", "phasejax.plotting_experiments", "phasejax.cli"]


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_first(module):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("JAX_ENABLE_X64", None)
    code = f"import jax; import {module}; assert not jax.config.jax_enable_x64, 'import enabled float64'"
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)


def test_the_root_exposes_the_entry_points_lazily():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = ("import sys, importlib, phasejax; assert 'jax' not in sys.modules, 'import phasejax imported jax'; "
            "[None for n in phasejax.__all__ if n != '__version__' and "
            "getattr(phasejax, n) is not getattr(importlib.import_module(phasejax._ENTRY_POINTS[n]), n) "
            "and (_ for _ in ()).throw(AssertionError(n))]; "
            "assert set(phasejax.__all__) <= set(dir(phasejax))")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)
    import phasejax

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        phasejax.nope
