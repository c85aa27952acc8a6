import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_on_host_devices(code: str, n_devices: int = 8, timeout: int = 600) -> str:
    """Run `code` in a fresh interpreter with `n_devices` forced CPU devices; assert it succeeds, return stdout."""
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n_devices}", JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.fixture
def on_host_devices():
    """The `run_on_host_devices` helper, as a fixture."""
    return run_on_host_devices
