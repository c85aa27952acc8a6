"""The bad critical point: exact gradient and Hessian spectrum."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.precision import check_float_dtype
from phasejax.tasks._common import F32, Array
from phasejax.tasks.markov.data import (
    all_chains,
    chain_probabilities,
    check_probability,
    sample_chains,
    stationary_entropy,
)
from phasejax.tasks.markov.model import (
    PARAM_NAMES,
    bad_critical_point,
    init_markov_params,
    markov_logits,
    markov_loss,
    next_token_losses,
)


# ----------------------------------------------------------------------------
# The bad critical point: exact gradient and Hessian spectrum
# ----------------------------------------------------------------------------


def active_names(tied: bool) -> tuple[str, ...]:
    """Parameters the loss depends on: all of `PARAM_NAMES`, less the readout `a` when tied."""
    return tuple(k for k in PARAM_NAMES if not (tied and k == "a"))


def predicted_critical_spectrum(params: dict, p, q, tied: bool) -> np.ndarray:
    """Closed-form Hessian eigenvalues at `bad_critical_point` (ascending, numpy float64, one per active parameter).

    With `kappa = pi_0 pi_1 (p + q - 1)`, `M = mean_n pos_n pos_n^T`, `m = mean_n pos_n`
    (over the `N - 1` predicted positions): the `(e, b)` block (tied)
    `[[2 kappa I + pi_0 pi_1 M, pi_0 pi_1 m], [pi_0 pi_1 m^T, pi_0 pi_1]]`, or the
    `(e, a, b)` block (untied) `[[0, kappa I, 0], [kappa I, pi_0 pi_1 M, pi_0 pi_1 m], [0, pi_0 pi_1 m^T, pi_0 pi_1]]`;
    every other eigenvalue is 0.
    """
    check_probability("p", p)
    check_probability("q", q)
    p, q = float(p), float(q)
    pos = np.asarray(params["pos"], np.float64)[:-1]
    d = pos.shape[1]
    g = p * q / (p + q) ** 2                     # pi_0 pi_1 = sigma'(b)
    kappa = g * (p + q - 1)
    M, m = pos.T @ pos / len(pos), pos.mean(0)
    eye = np.eye(d)
    if tied:
        block = np.block([[2 * kappa * eye + g * M, g * m[:, None]], [g * m[None, :], np.array([[g]])]])
    else:
        z = np.zeros((d, d))
        block = np.block([[z, kappa * eye, np.zeros((d, 1))], [kappa * eye, g * M, g * m[:, None]],
                          [np.zeros((1, d)), g * m[None, :], np.array([[g]])]])
    n_active = sum(int(np.size(params[k])) for k in active_names(tied))
    eig = np.concatenate([np.linalg.eigvalsh(block), np.zeros(n_active - len(block))])
    return np.sort(eig)


@dataclasses.dataclass(frozen=True)
class CriticalPointCheck:
    """Exact check of `bad_critical_point`: loss vs `H(pi)`, largest gradient entry, Hessian spectrum.

    `eigenvalues` are the exact Hessian's (active parameters, ascending); `predicted` the
    closed form of `predicted_critical_spectrum`.
    """

    p: float
    q: float
    tied: bool
    loss: float
    stationary_entropy: float
    grad_max: float
    eigenvalues: np.ndarray
    predicted: np.ndarray

    @property
    def min_eigenvalue(self) -> float:
        return float(self.eigenvalues[0])

    @property
    def max_spectrum_error(self) -> float:
        return float(np.max(np.abs(self.eigenvalues - self.predicted)))

    def row(self) -> dict:
        """One flat record (for CSV / JSON)."""
        return dict(p=self.p, q=self.q, tied=int(self.tied), loss=self.loss, stationary_entropy=self.stationary_entropy,
                    grad_max=self.grad_max, min_eigenvalue=self.min_eigenvalue,
                    max_eigenvalue=float(self.eigenvalues[-1]),
                    n_negative=int(np.sum(self.eigenvalues < -1e-9)), n_params=int(self.eigenvalues.size),
                    predicted_min_eigenvalue=float(self.predicted[0]), max_spectrum_error=self.max_spectrum_error)


@jax.jit
def _exact_loss_derivatives(active: dict, fixed: dict, chains: Array, weights: Array, tied: Array):
    """Exact population loss, gradient `(P,)` and Hessian `(P, P)` in the flattened `active` parameters
    (`jax.flatten_util.ravel_pytree` order: sorted keys), from enumerated chains with probabilities `weights`."""
    from jax.flatten_util import ravel_pytree

    flat, unravel = ravel_pytree(active)

    def loss(vec):
        prm = dict(fixed, **unravel(vec))
        per_chain = jnp.mean(next_token_losses(markov_logits(prm, chains, tied), chains), -1)
        return jnp.sum(weights * per_chain)

    return loss(flat), jax.grad(loss)(flat), jax.hessian(loss)(flat)


def critical_point_check(p, q, tied: bool, *, d: int = 4, length: int = 6, hidden: int | None = None,
                         free_std: float = 0.5, seed: int = 0, dtype=F32) -> CriticalPointCheck:
    """Build `bad_critical_point` with random free weights (`~ N(0, free_std^2)`) and measure it exactly.

    The population loss is the exact expectation over all `2^length` chains, so the gradient
    and the Hessian (`jax.hessian` over the flattened active parameters) carry no sampling error.
    Use `dtype=jnp.float64` (enabled in a scope here) for a meaningful spectrum.
    """
    from phasejax.precision import dtype_scope

    check_probability("p", p)
    check_probability("q", q)
    dtype = check_float_dtype(dtype)
    with dtype_scope(dtype):
        params = bad_critical_point(init_markov_params(jax.random.PRNGKey(seed), d, length, hidden, free_std, dtype),
                                    p, q)
        names = active_names(bool(tied))
        chains = jnp.asarray(all_chains(length), dtype)
        value, grad, hess = _exact_loss_derivatives(
            {k: params[k] for k in names}, {k: v for k, v in params.items() if k not in names}, chains,
            chain_probabilities(chains, p, q, dtype), jnp.asarray(float(bool(tied)), dtype))
        h_pi = float(stationary_entropy(p, q, dtype))
    grad, hess = np.asarray(grad, np.float64), np.asarray(hess, np.float64)
    eig = np.sort(np.linalg.eigvalsh(0.5 * (hess + hess.T)))
    return CriticalPointCheck(p=float(p), q=float(q), tied=bool(tied), loss=float(value), stationary_entropy=h_pi,
                              grad_max=float(np.max(np.abs(grad))), eigenvalues=eig,
                              predicted=predicted_critical_spectrum(params, p, q, bool(tied)))


def stationary_direction_curvature(params: dict, key: Array, p, q, tied, n_chains: int = 2048) -> Array:
    """Curvature of the loss along the embedding direction at the stationary point, given the other weights.

    With `u = e / |e|` (and `a` moved with `e` when tied), the weights other than `e`, `a`,
    `b` as in `params` and `b = log(p / q)`, returns `d^2 L(t u) / dt^2` at `t = 0` for tied
    models (Monte Carlo over `n_chains` fresh chains). At `bad_critical_point` weights it is
    `2 kappa + pi_0 pi_1 mean_n <u, pos_n>^2`; a negative value means the stationary point has
    become unstable along `u` (how AdamW runs escape: see `docs/sandboxes/markov.md`).
    """
    dt = params["e"].dtype
    u = params["e"] / jnp.maximum(jnp.linalg.norm(params["e"]), jnp.finfo(dt).tiny)
    states = sample_chains(key, p, q, n_chains, params["pos"].shape[0], dt)
    base = dict(params, b=jnp.log(jnp.asarray(p, dt)) - jnp.log(jnp.asarray(q, dt)))

    def along(t):
        return markov_loss(dict(base, e=t * u, a=t * u), states, tied)

    return jax.grad(jax.grad(along))(jnp.asarray(0.0, dt))
