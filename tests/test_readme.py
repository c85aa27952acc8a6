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


def test_the_readme_lists_every_command_with_the_folder_it_writes():
    """The command table names every command, and where a command's --out has a fixed default, that folder; the
    README and scripts/run_main.sh agree on where the main job writes and how long it takes."""
    import argparse

    from phasejax.cli import build_parser

    text = open(os.path.join(ROOT, "README.md")).read()
    table = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in table.splitlines():
        if line.startswith("| `"):
            for name in re.findall(r"`([a-z0-9-]+)(?: NAME)?`", line.split("|")[1]):
                rows[name] = line
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(sub) <= set(rows), sorted(set(sub) - set(rows))
    for name, parser in sub.items():
        out = [a.default for a in parser._actions if a.dest == "out"]
        if out and isinstance(out[0], str):
            assert out[0].rstrip("/") + "/" in rows[name], (name, out[0])
        elif not out:
            assert "stdout" in rows[name], name
    script = open(os.path.join(ROOT, "scripts", "run_main.sh")).read()
    for needle in ("runs/phase_diagram/", "9 min"):
        assert needle in script and needle in text.split("## Example")[0], needle


def test_the_readme_links_every_component_to_its_file():
    """The component table links every subpackage and public module of phasejax to its file, and every link of the
    README that is a path points at a file or folder of the repository."""
    import pkgutil

    import phasejax

    text = open(os.path.join(ROOT, "README.md")).read()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    missing = [link for link in local if not os.path.exists(os.path.join(ROOT, link))]
    assert missing == [], missing
    table = text.split("## Components", 1)[1].split("\n## ", 1)[0]
    linked = set(re.findall(r"\]\((phasejax/[\w/]+\.py)\)", table))
    wanted = {f"phasejax/{m.name}/__init__.py" if m.ispkg else f"phasejax/{m.name}.py"
              for m in pkgutil.iter_modules(phasejax.__path__) if not m.name.startswith("_")}
    assert wanted <= linked, sorted(wanted - linked)
