"""phasejax: phase diagrams of learning mechanisms in small attention models, in JAX.

Importing phasejax enables float64 in JAX (`jax_enable_x64`): the theory
compares branches through training-loss differences of order 1e-5, which
float32 cannot resolve (spec section 8). Pass explicit float32 dtypes where
you want single precision.
"""

import jax

jax.config.update("jax_enable_x64", True)

__version__ = "0.1.0"

from phasejax import theory  # noqa: E402

__all__ = ["theory", "__version__"]
