"""The documentation site builds strictly (no broken link, no missing page or reference) and every
docstring example of the package runs and prints what it shows."""

import doctest
import importlib
import os
import pkgutil
import shutil
import subprocess
import sys

import pytest

import phasejax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def package_modules() -> list[str]:
    names = ["phasejax"]
    for info in pkgutil.walk_packages(phasejax.__path__, prefix="phasejax."):
        names.append(info.name)
    return sorted(names)


@pytest.mark.skipif(shutil.which("mkdocs") is None and importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs is in the test extra")
def test_the_docs_site_builds_strictly(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "theory" / "index.html").exists()
    assert (tmp_path / "site" / "results" / "phase_diagram" / "phase_map.png").exists()


def test_every_docstring_example_runs():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    examples = 0
    for name in package_modules():
        module = importlib.import_module(name)
        for test in finder.find(module, name):
            examples += len(test.examples)
            runner.run(test)
    result = runner.summarize(verbose=False)
    assert examples >= 30
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples failed (printed above)"
