"""MkDocs hooks: serve the committed figures of `results/` under `results/` in the site, so that pages can
show them without copies inside `docs/`.

Pages link a figure by its path relative to the page's file in the repository (`../results/x.png` from
`docs/page.md`), which is what a repository browser shows; the site mounts `results/` inside the docs
root, one level up fewer, so `on_page_markdown` drops one `../` from such links."""

from __future__ import annotations

import os
import re

from mkdocs.structure.files import File

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def on_files(files, config):
    results = os.path.join(_ROOT, "results")
    for folder, _, names in os.walk(results):
        for name in sorted(names):
            if name.endswith(".png"):
                rel = os.path.relpath(os.path.join(folder, name), _ROOT).replace(os.sep, "/")
                files.append(File(rel, _ROOT, config["site_dir"], config["use_directory_urls"]))
    return files


_RESULTS_LINK = re.compile(r"\]\(((?:\.\./)*)\.\./results/")


def on_page_markdown(markdown, page, config, files):
    return _RESULTS_LINK.sub(lambda m: "](" + m.group(1) + "results/", markdown)
