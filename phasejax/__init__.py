"""phasejax: phase diagrams of learning mechanisms in small attention models, in JAX.

Importing phasejax changes no global JAX setting. The theory computes in
float64 inside a scoped `float64_scope()` (see `phasejax.precision`);
empirics and tasks take a `dtype` argument.
"""

__version__ = "0.2.0.dev0"

from phasejax.precision import float64_scope  # noqa: E402

__all__ = ["float64_scope", "__version__"]
