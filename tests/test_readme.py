"""The Python snippets of the README and of the guide pages, run top to bottom in one fresh interpreter (slow:
they solve at the default)."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


PAGES = ("README.md", "docs/quickstart.md", "docs/usage.md", "docs/experiments.md", "docs/extensions/index.md",
         "docs/sandboxes/index.md")


def readme_snippets() -> list[str]:
    snippets = []
    for page in PAGES:
        text = open(os.path.join(ROOT, page)).read()
        snippets += re.findall(r"```python\n(.*?)```", text, flags=re.S)
    return snippets


def test_the_readme_has_a_tour():
    assert len(readme_snippets()) >= 4


@pytest.mark.slow
def test_the_readme_tour_runs_top_to_bottom(tmp_path):
    code = "\n".join(readme_snippets())
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # in a fresh folder that sees the committed results: what the snippets write (runs/...) starts empty
    os.symlink(os.path.join(ROOT, "results"), tmp_path / "results")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=3600)
    assert out.returncode == 0, out.stderr[-4000:]
