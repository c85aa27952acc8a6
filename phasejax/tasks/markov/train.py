"""Training and evaluation of the Markov-chain transformer."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax

from phasejax.tasks._common import Array, online_step, train_online
from phasejax.tasks.markov.data import check_positive_int, entropy_rate, sample_chains, stationary_entropy
from phasejax.tasks.markov.model import _log_odds, markov_logits, markov_loss, next_token_losses


# ----------------------------------------------------------------------------
# Training and evaluation
# ----------------------------------------------------------------------------


def markov_optimizer(learning_rate: float, steps: int, *, weight_decay: float = 0.0, b1: float = 0.9,
                     b2: float = 0.95, warmup_fraction: float = 0.02, schedule: str = "cosine",
                     optimizer: str = "sgd", grad_clip: float = 0.0) -> optax.GradientTransformation:
    """Plain SGD (or AdamW) with linear warm-up over `warmup_fraction * steps` then cosine decay to 0
    (`schedule="cosine"`) or a constant rate (`"constant"`); Makkuva et al. use AdamW, betas (0.9, 0.95).

    `grad_clip > 0` first clips the gradient to that global norm (0: no clipping).
    """
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got learning_rate={learning_rate}")
    steps = check_positive_int("steps", steps)
    if not 0 <= warmup_fraction < 1:
        raise ValueError(f"warmup_fraction must lie in [0, 1), got warmup_fraction={warmup_fraction}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got weight_decay={weight_decay}")
    if schedule not in ("cosine", "constant"):
        raise ValueError(f"schedule must be 'cosine' or 'constant', got schedule={schedule!r}")
    if optimizer not in ("adamw", "sgd"):
        raise ValueError(f"optimizer must be 'adamw' or 'sgd', got optimizer={optimizer!r}")
    if not (math.isfinite(grad_clip) and grad_clip >= 0):
        raise ValueError(f"grad_clip must be a finite number >= 0, got grad_clip={grad_clip}")
    warmup = int(warmup_fraction * steps)
    if schedule == "cosine":
        lr = optax.warmup_cosine_decay_schedule(0.0, learning_rate, max(warmup, 1), steps, end_value=0.0) \
            if warmup > 0 else optax.cosine_decay_schedule(learning_rate, steps)
    else:
        lr = optax.linear_schedule(0.0, learning_rate, warmup) if warmup > 0 else learning_rate
        if warmup > 0:
            lr = optax.join_schedules([lr, optax.constant_schedule(learning_rate)], [warmup])
    if optimizer == "sgd":
        tx = optax.chain(optax.add_decayed_weights(weight_decay), optax.sgd(lr)) if weight_decay else optax.sgd(lr)
    else:
        tx = optax.adamw(lr, b1=b1, b2=b2, weight_decay=weight_decay)
    return optax.chain(optax.clip_by_global_norm(grad_clip), tx) if grad_clip > 0 else tx


def train_markov(params0: dict, key: Array, p, q, tied, *, steps: int, batch_size: int,
                 optimizer: optax.GradientTransformation) -> tuple[dict, Array]:
    """`steps` optimiser steps, each on `batch_size` fresh chains (online); returns `(params, losses (steps,))`.

    Pure in every array argument (`lax.scan`); vmap over seeds, `p`, `q`, `tied`.
    """
    length, dtype = params0["pos"].shape[0], params0["e"].dtype
    return train_online(lambda prm, states: markov_loss(prm, states, tied), params0, key,
                        lambda k: (sample_chains(k, p, q, batch_size, length, dtype),), steps=steps, optimizer=optimizer)


def _train_step(p, q, tied, length: int, batch_size: int, optimizer, dtype):
    """`((params, opt_state), key) -> ((params, opt_state), loss)`: one online step (a `lax.scan` body)."""
    return online_step(lambda prm, states: markov_loss(prm, states, tied),
                       lambda k: (sample_chains(k, p, q, batch_size, length, dtype),), optimizer)


def estimate_population_loss(params: dict, key: Array, p, q, tied, n_chains: int = 4096) -> dict[str, Array]:
    """Population loss of the model from `n_chains` fresh chains, with two exact control variates.

    Per chain `m` the mean losses of the model (`y_m`), of the stationary predictor (`c1_m`,
    `E = H(pi)` exactly) and of the kernel predictor (`c2_m`, `E = ` entropy rate exactly) are
    computed on the same chain; the estimate is `mean(y) - beta . (mean(c) - E[c])` with `beta`
    the least-squares fit of `y` on `c` (control variates; fitting `beta` on the same chains
    costs a bias of order `1 / n_chains`). A model near either predictor then has an error far
    below the plain Monte Carlo one. Returns `loss`, `loss_se` (standard error from the
    regression residuals, chains i.i.d.) and `loss_mc` (plain mean). The model is evaluated in
    blocks of chains (`lax.map`) to bound the memory of the attention matrices.
    """
    dt = params["e"].dtype
    length = params["pos"].shape[0]
    n_chains = check_positive_int("n_chains", n_chains)
    states = sample_chains(key, p, q, n_chains, length, dt)
    p_, q_ = jnp.asarray(p, dt), jnp.asarray(q, dt)
    block = math.gcd(n_chains, max(1, 2**20 // length**2))   # bounds the (chains, N, N) attention memory
    per_block = lambda st: jnp.mean(next_token_losses(markov_logits(params, st, tied), st), -1)  # noqa: E731
    y = jax.lax.map(per_block, states.reshape(n_chains // block, block, length)).reshape(n_chains)
    b_pi = jnp.log(p_) - jnp.log(q_)
    c1 = jnp.mean(next_token_losses(jnp.full_like(states, b_pi), states), -1)
    kernel_logit = jnp.where(states > 0.5, _log_odds(1 - q_), _log_odds(p_))
    c2 = jnp.mean(next_token_losses(kernel_logit, states), -1)
    exact = jnp.stack([stationary_entropy(p_, q_, dt), entropy_rate(p_, q_, dt)])
    c = jnp.stack([c1, c2], -1)
    cc = c - jnp.mean(c, 0)
    gram = cc.T @ cc                       # least squares by the 2 x 2 normal equations; the ridge only
    gram = gram + 1e-6 * jnp.trace(gram) * jnp.eye(2, dtype=dt) + jnp.finfo(dt).tiny   # matters when c1 = c2
    beta = jnp.linalg.solve(gram, cc.T @ (y - jnp.mean(y)))
    resid = (y - jnp.mean(y)) - cc @ beta
    loss = jnp.mean(y) - (jnp.mean(c, 0) - exact) @ beta
    se = jnp.sqrt(jnp.sum(resid**2) / jnp.maximum(n_chains - 3, 1) / n_chains)
    return dict(loss=loss, loss_se=se, loss_mc=jnp.mean(y))
