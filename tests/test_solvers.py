"""The shared status enum and its names: one result or a batch of them, on every result type with a status."""

import ast
import importlib
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax.solvers import HasStatus, Status, iterate, status_code, status_name, status_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LOOP_STATES = {"phasejax.theory.newton.SEState"}
"""Classes with a `status` field that are a loop's state inside a solver (status `RUNNING` while it iterates), not a
result a caller receives."""


class _Halve:
    """`x <- x / 2` until `x < tol` (the problem is the tolerance)."""

    def step(self, tol, x):
        return 0.5 * x

    def terminate(self, tol, x):
        return x < tol, jnp.asarray(Status.CONVERGED)


def test_status_name_of_one_code_and_of_a_batch():
    assert status_name(0) == "converged" and status_name(np.int32(1)) == "max_iterations"
    assert status_name(jnp.asarray(4)) == "diverged"
    batch = status_name(jnp.asarray([[0, 1], [4, 3]]))
    assert isinstance(batch, np.ndarray) and batch.shape == (2, 2)
    assert batch.tolist() == [["converged", "max_iterations"], ["diverged", "invalid_input"]]
    assert status_names(2).shape == () and str(status_names(2)) == "invalid_iterate"
    assert [status_code(n) for n in batch.ravel()] == [0, 1, 4, 3]


def test_a_batched_result_names_every_lanes_status():
    one = iterate(_Halve(), 0.1, jnp.asarray(1.0), max_steps=10)
    assert one.status_name == "converged" and int(one.steps) == 4
    lanes = jax.vmap(lambda tol: iterate(_Halve(), tol, jnp.asarray(1.0), max_steps=10))(jnp.asarray([0.1, 1e-6]))
    assert lanes.status_name.tolist() == ["converged", "max_iterations"]


def _classes_with_a_status_field():
    """`(module, class name)` of every public class under `phasejax/` whose body declares `status: ...`."""
    found = []
    for folder, _, files in os.walk(os.path.join(ROOT, "phasejax")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
            with open(path) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and any(
                        isinstance(s, ast.AnnAssign) and getattr(s.target, "id", None) == "status" for s in node.body):
                    found.append((module, node.name))
    return found


def test_the_search_finds_the_result_types():
    names = {f"{m}.{c}" for m, c in _classes_with_a_status_field()}
    for expected in ("phasejax.theory.results.SEResult", "phasejax.empirics.training.TrainResult",
                     "phasejax.empirics.gamp.GAMPResult", "phasejax.solvers.IterationResult"):
        assert expected in names


@pytest.mark.parametrize("module, cls", [c for c in _classes_with_a_status_field()
                                         if f"{c[0]}.{c[1]}" not in LOOP_STATES])
def test_every_result_type_with_a_status_has_its_name(module, cls):
    """The property of `HasStatus`, inherited or (on a `NamedTuple`, which takes no base class) assigned."""
    klass = getattr(importlib.import_module(module), cls)
    assert klass.status_name is HasStatus.__dict__["status_name"], f"{module}.{cls} has no status_name"
