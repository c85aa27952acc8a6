"""Packaging facts a pip user relies on: license file, typed marker, console script, checked dependency floors."""

import importlib.metadata
import os
import re
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
    PYPROJECT = tomllib.load(fh)
PROJECT = PYPROJECT["project"]


def _floors() -> dict[str, tuple[int, ...]]:
    out = {}
    for req in PROJECT["dependencies"]:
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*>=\s*([0-9][0-9.]*)", req)
        if m:
            out[m.group(1).lower()] = tuple(int(x) for x in m.group(3).split(".") if x.isdigit())
    return out


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", importlib.metadata.version(name))[:3])


def test_license_file_matches_the_declared_license():
    assert PROJECT["license"] == "MIT"
    with open(os.path.join(ROOT, "LICENSE")) as fh:
        assert "MIT License" in fh.read()


def test_typed_marker_is_shipped():
    assert os.path.exists(os.path.join(ROOT, "phasejax", "py.typed"))
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["phasejax"]


def test_console_script_entry_point():
    assert PROJECT["scripts"]["phasejax"] == "phasejax.cli:main"


def test_every_runtime_dependency_has_a_floor():
    floors = _floors()
    for name in ("jax", "jaxlib", "flax", "optax", "chex", "numpy", "matplotlib", "tqdm"):
        assert name in floors, f"{name} has no >= floor in pyproject.toml"


def test_installed_versions_satisfy_the_floors():
    for name, floor in _floors().items():
        assert _version(name) >= floor, f"installed {name} {importlib.metadata.version(name)} < floor {floor}"


def test_the_jax_floor_provides_what_the_code_uses():
    """`jax.shard_map` (with `check_vma`) is public from jax 0.6.1 on; `phasejax.precision` falls back to
    `jax.experimental.enable_x64` where `jax.enable_x64` (0.8) is missing."""
    floors = _floors()
    assert floors["jax"] >= (0, 6, 1), floors["jax"]
    assert floors["jaxlib"] == floors["jax"], "jax and jaxlib floors must match (jax pins its jaxlib)"
    import jax

    assert callable(jax.shard_map)


def test_floors_check_script_is_present_and_executable():
    path = os.path.join(ROOT, "scripts", "check_floors.sh")
    assert os.access(path, os.X_OK)


@pytest.mark.slow
def test_declared_floors_install_and_pass_the_smoke_test():
    """Runs scripts/check_floors.sh (fresh venv, minimum versions, smoke test). Needs PyPI; about 10 minutes."""
    import subprocess

    out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "check_floors.sh")], capture_output=True, text=True,
                         timeout=3600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def test_test_file_names_are_unique():
    """The test folders are not packages, so pytest imports each test file by its base name: two files with one
    name in different folders stop the collection ("import file mismatch")."""
    seen: dict[str, str] = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "tests")):
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                path = os.path.relpath(os.path.join(folder, name), ROOT)
                assert name not in seen, f"{path} and {seen[name]} share a name"
                seen[name] = path
