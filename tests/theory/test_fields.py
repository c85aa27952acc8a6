"""Matrix roots of the field maps: values and derivatives, also where eigenvalues coincide (r > 1 states)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax.precision import float64_scope
from phasejax.theory.fields import sym_sqrt_pinv


def _central_difference(f, M, dM, h=1e-6):
    return [(a - b) / (2 * h) for a, b in zip(f(M + h * dM), f(M - h * dM))]


@pytest.mark.parametrize("M", [
    [[2.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 0.5]],   # distinct eigenvalues
    [[0.7, 0.0, 0.0], [0.0, 0.7, 0.0], [0.0, 0.0, 0.7]],   # a triple eigenvalue (eigh's own JVP gives NaN)
    [[0.08, 0.0], [0.0, 0.08]],                            # the rank-2 positional init's q0
])
def test_roots_and_their_jvp_match_finite_differences(M):
    with float64_scope():
        M = jnp.asarray(M)
        n = M.shape[0]
        dM = jnp.asarray(np.random.default_rng(0).normal(size=(n, n)))
        dM = dM + dM.T
        sqrt, pinv, lam_min = sym_sqrt_pinv(M)
        np.testing.assert_allclose(sqrt @ sqrt, M, atol=1e-12)
        np.testing.assert_allclose(pinv @ M @ pinv, np.eye(n), atol=1e-10)
        assert float(lam_min) == pytest.approx(float(np.linalg.eigvalsh(np.asarray(M))[0]))
        f = lambda A: sym_sqrt_pinv(A)[:2]   # (the smallest eigenvalue is not differentiable at a repeated one)  # noqa: E501,E731
        _, tangents = jax.jvp(f, (M,), (dM,))
        for t, fd in zip(tangents, _central_difference(f, M, dM)):
            assert np.all(np.isfinite(t))
            np.testing.assert_allclose(t, fd, atol=1e-7, rtol=1e-6)
