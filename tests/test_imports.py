"""Every public module imports on its own, in a fresh interpreter (no import cycles), and changes no JAX setting."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = ["phasejax", "phasejax.theory.gram", "phasejax.empirics", "phasejax.empirics.sweep",
           "phasejax.phase", "phasejax.tasks", "phasejax.tasks.histogram.counting", "phasejax.tasks.histogram.two_solutions",
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


CURATED = ("phasejax.theory", "phasejax.phase", "phasejax.empirics", "phasejax.dynamics", "phasejax.extensions", "phasejax.tasks",
           "phasejax.tasks.histogram", "phasejax.tasks.markov", "phasejax.tasks.induction", "phasejax.tasks.memory",
           "phasejax.tasks.factual")
API_PAGES = {"phasejax.theory": "theory.md", "phasejax.phase": "phase.md", "phasejax.empirics": "empirics.md", "phasejax.dynamics": "dynamics.md",
             "phasejax.extensions": "extensions.md"}


@pytest.mark.parametrize("package", CURATED)
def test_a_subpackage_exports_a_short_list_and_the_api_page_documents_exactly_it(package):
    """Each subpackage's `__all__` holds its entry points, types and rules (short enough to read); its API page
    lists exactly those names, not whole modules."""
    import importlib
    import re

    mod = importlib.import_module(package)
    names = [n for n in mod.__all__ if not isinstance(getattr(mod, n), type(mod))]
    assert len(mod.__all__) <= 30 and all(hasattr(mod, n) for n in mod.__all__)
    page = API_PAGES.get(package, "tasks.md")
    with open(os.path.join(ROOT, "docs", "api", page)) as fh:
        documented = set(re.findall(rf"^::: {re.escape(package)}\.(\w+)\s*$", fh.read(), flags=re.M))
    documented -= {n for n in mod.__all__ if isinstance(getattr(mod, n), type(mod))}    # subpackage headings
    assert documented == set(names), (sorted(documented - set(names)), sorted(set(names) - documented))
