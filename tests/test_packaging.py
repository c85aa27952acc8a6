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


def _lock() -> dict[str, str]:
    """`{normalised name: version}` of requirements/lock.txt."""
    pins = {}
    with open(os.path.join(ROOT, "requirements", "lock.txt")) as fh:
        for line in fh:
            line = line.split("#", 1)[0].strip()
            if line:
                name, _, version = line.partition("==")
                assert version, f"lock line without an exact version: {line!r}"
                pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def _requirement_names(requirements) -> set[str]:
    return {re.sub(r"[-_.]+", "-", re.match(r"^\s*([A-Za-z0-9_.\-]+)", r).group(1)).lower() for r in requirements}


def test_the_lock_pins_every_declared_dependency_within_its_range():
    """Every runtime, test and docs requirement has an exact pin, and each pin satisfies pyproject's floor."""
    pins = _lock()
    declared = _requirement_names(PROJECT["dependencies"] + PROJECT["optional-dependencies"]["test"]
                                  + PROJECT["optional-dependencies"]["docs"])
    assert declared - pins.keys() == set(), f"not pinned: {sorted(declared - pins.keys())}"
    for name, floor in _floors().items():
        pinned = tuple(int(x) for x in re.findall(r"\d+", pins[re.sub(r"[-_.]+", "-", name)])[:3])
        assert pinned >= floor, f"{name} pinned at {pins[name]} below its floor {floor}"


def test_both_readme_commands_install_the_locked_environment():
    """scripts/test.sh and scripts/run_main.sh install with the lock as pip constraints (PHASEJAX_NEWEST=1: the
    newest releases instead), and the README says how to regenerate it and how to test the newest releases."""
    for script in ("test.sh", "run_main.sh"):
        with open(os.path.join(ROOT, "scripts", script)) as fh:
            text = fh.read()
        assert "-c requirements/lock.txt" in text and "PHASEJAX_NEWEST" in text, script
    with open(os.path.join(ROOT, "README.md")) as fh:
        readme = fh.read()
    assert "scripts/lock.sh" in readme and "PHASEJAX_NEWEST=1" in readme
