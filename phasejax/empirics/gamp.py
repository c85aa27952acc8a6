"""GAMP for tied low-rank attention on a finite data set (theory notes, section 7).

`gamp(data, params, Q0, C0, ...)` iterates, per sample `mu`, the proximal step
of the theory notes' section 3 with the finite-`d` loss
`ell_mu(h) = ||y^mu - S(h) xt^mu||^2 / (2d)` (through the per-sample Gram
matrices of `phasejax.theory.gram`), Onsager-corrected fields
`w = xt Q / sqrt(d) - V f_prev` and the ridge denoiser
`Q <- (sum_l xt_l^T f_l / sqrt(d) + Q Ahat) (lambda I + Ahat)^{-1}`,
`C <- (lambda I + Ahat)^{-1}`, `V_l = sigma_l^2 C`.

The Onsager matrix `Ahat = -sum_l sigma_l^2 sum_mu <d f_l^mu / d w_l^mu> / d`
is the one choice that matters here (`onsager=`):

* `"pointwise"`: the implicit-function derivative of each sample's prox at its
  minimiser. Where the per-sample prox is non-convex its global minimiser
  jumps between mirror basins; the derivative of `f` then has delta terms on
  the jump surface that pointwise derivatives miss (the SE's implicit form).
* `"stein"`: the distributional derivative estimated across samples by
  Gaussian integration by parts. Per token `l`, with the fields
  `z_l = (w_l, h*_l)` (`r + t` entries, `h*_l = x_l Q* / sqrt(d)` the
  teacher's field), Stein's lemma for jointly Gaussian `z` gives
  `E[grad_z f_l] = Cov(f_l, z_l) Cov(z_l)^{-1}`; its first `r` columns,
  with the covariances taken over the `n` samples, replace the mean
  pointwise derivative. This is the empirical counterpart of the SE's Stein
  form (`Vhat = -alpha E[f xi] q^{-1/2}/sigma + thetahat theta0 q0^{-1}`) and
  keeps the delta terms. It uses the teacher's weights (known in this
  synthetic setting): a tool to check the theory, not a practical learner.

At a fixed point `h_hat = xt Q / sqrt(d)` and `lambda Q = -grad` of the loss
term for either choice (the Onsager term cancels): GAMP fixed points are
critical points of `R(Q)`.

Validation: concrete invalid inputs (`damping` outside `[0, 1)` or NaN,
negative or non-symmetric `C0`, wrong shapes, `lam < 0`, `max_iter < 1`,
unknown `prox_starts` or `onsager`) raise `ValueError` naming the parameter;
traced invalid values give `status = INVALID_INPUT`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.bundle import BundleFile, ResultBundle
from phasejax.empirics.data import TiedAttentionData, cast_params, check_data, overlaps_of, standard_normal
from phasejax.empirics.gamp_analysis import run_verdicts, tail_window
from phasejax.empirics.training import check_trainable
from phasejax.precision import check_float_dtype, dtype_scope
from phasejax.solvers import HasStatus, Status, iterate, raise_unless_converged
from phasejax.theory.gram import GAMPInputs, gram_inputs, sample_loss_gram
from phasejax.theory.params import TiedAttentionParams, params_are_valid, validate_params
from phasejax.theory.prox import moreau_minimizer, prox_omega_jacobian

Array = jax.Array

ONSAGER_FORMS = ("pointwise", "stein")
PROX_STARTS = ("multi", "zero", "warm")


def gamp_inputs(data: TiedAttentionData) -> GAMPInputs:
    """Per-sample Gram matrices of a data set (`phasejax.theory.gram.gram_inputs`): `G, Y (n, L, L)`, `c (n,)`."""
    return gram_inputs(data.x, data.y, data.p)


def teacher_fields(data: TiedAttentionData) -> Array:
    """`h* = x Q* / sqrt(d)`, shape `(n, L, t)` (theory notes, section 1)."""
    return jnp.einsum("nld,dt->nlt", data.x, data.Qstar) / jnp.sqrt(jnp.asarray(data.d, data.x.dtype))


def empirical_risk(Q: Array, data: TiedAttentionData, params: TiedAttentionParams) -> Array:
    """`R(Q) = sum_mu loss.output_risk(y^mu - f_Q(x^mu)) + lambda ||Q||^2 / 2` (theory notes, section 1), directly,
    with the model's loss `params.loss` (GAMP's, the square loss: `sum_mu ||y^mu - f_Q(x^mu)||^2 / (2d)`)."""
    xt = data.x + data.p[None]
    h = jnp.einsum("nld,dr->nlr", xt, Q) / jnp.sqrt(jnp.asarray(data.d, Q.dtype))
    S = jax.vmap(lambda hh: params.student(hh, params))(h)
    resid = data.y - jnp.einsum("nij,njd->nid", S, xt)
    return jnp.sum(params.loss.output_risk(resid)) + 0.5 * params.lam * jnp.sum(Q**2)


def stein_mean_jacobian(f: Array, w: Array, hstar: Array) -> Array:
    """Across-sample Stein estimate of `E[d f_l / d w_l]`, shape `(L, r, r)`.

    For jointly Gaussian `z_l = (w_l, h*_l)` (`(n, r + t)` per token) Stein's
    lemma gives `Cov(f_l, z_l) = E[grad_z f_l] Cov(z_l)`, in the sense of
    distributions (jumps of `f` included). Args: `f, w (n, L, r)`, `hstar (n, L, t)`.
    """
    r = f.shape[-1]
    z = jnp.concatenate([w, hstar], axis=-1)
    z = z - jnp.mean(z, axis=0)
    fc = f - jnp.mean(f, axis=0)
    n = f.shape[0]
    cov_fz = jnp.einsum("nla,nlb->lab", fc, z) / n            # (L, r, r + t)
    cov_zz = jnp.einsum("nla,nlb->lab", z, z) / n             # (L, r + t, r + t)
    grad = jnp.linalg.solve(cov_zz, jnp.swapaxes(cov_fz, -1, -2))   # (L, r + t, r) = Cov_zz^{-1} Cov_zf
    return jnp.swapaxes(grad, -1, -2)[:, :, :r]


def basin_flips(h_old: Array, h_new: Array) -> Array:
    """`(n,)` bool: sample minimisers `h (n, L r)` that moved to the mirror basin, `|h_new + h_old| < |h_new - h_old|`.

    The dot-product loss is even in `h` (`S(h) = S(-h)`), so its minima come in mirror pairs; a jump of the
    global minimiser between them is what makes `f` discontinuous (theory notes, section 3).
    """
    h_old, h_new = h_old.reshape(h_old.shape[0], -1), h_new.reshape(h_new.shape[0], -1)
    return jnp.linalg.norm(h_new + h_old, axis=-1) < jnp.linalg.norm(h_new - h_old, axis=-1)


@struct.dataclass
class GAMPResult(HasStatus):
    """GAMP output.

    Attributes:
      Q: `(d, r)` final weights (the last good iterate); C: `(r, r)` final variance parameter.
      q0: `(T + 1, r, r)`, m: `(T + 1, K, r)`, theta0: `(T + 1, t, r)` overlaps of the init and after every
        iteration (`T = max_iter`; frozen at the final iterate after the stop).
      residual: `(T,)` relative change `||Q_new - Q|| / max(||Q||, 1e-6 sqrt(d))` of the undamped update per
        iteration (NaN after the stop).
      iterations: `()`; status: `()` a `phasejax.solvers.Status` code (`CONVERGED`, `MAX_ITERATIONS`,
        `DIVERGED`, `INVALID_INPUT`); converged: `()` bool;
      grad_norm: `()` max-abs gradient of `R` at `Q`, relative to `max |lambda Q|`.
      flip_fraction: `(T,)` fraction of samples whose prox minimiser moved to the other basin in that iteration
        (`|h_new + h_old| < |h_new - h_old|`: the mirror image of the previous minimiser is closer; NaN after
        the stop).
      flip_share: `(T,)` share of `sum_mu ||f_new^mu - f_old^mu||^2` carried by those samples.
    """

    Q: Array
    C: Array
    q0: Array
    m: Array
    theta0: Array
    residual: Array
    iterations: Array
    status: Array
    converged: Array
    grad_norm: Array
    flip_fraction: Array
    flip_share: Array


class _State(NamedTuple):
    Q: Array
    C: Array
    f_prev: Array
    h_prev: Array
    it: Array
    status: Array
    history: tuple


class _GAMPProblem(NamedTuple):
    """What GAMP runs on: the `data`, its precomputed `inp` (`gamp_inputs`), the teacher fields `hstar` and
    the model's `params`."""

    data: object
    inp: object
    hstar: Array
    params: object


class _GAMPIteration:
    """One damped GAMP iteration as a `phasejax.solvers.iterate` solver (the settings on the object, the
    data in the `_GAMPProblem`)."""

    def __init__(self, damping, tol, max_norm, prox_starts, onsager):
        self.damping, self.tol, self.max_norm = damping, tol, max_norm
        self.prox_starts, self.onsager = prox_starts, onsager

    def update(self, problem: _GAMPProblem, Q, C, f_prev, h_prev):
        """Undamped GAMP map: `(Q, C, f_prev, h_prev) -> (Q_new, C_new, f, h_hat)`."""
        inp, params = problem.inp, problem.params
        n, L, d = inp.xt.shape
        r = Q.shape[1]
        s2 = params.sigma**2
        V = s2[:, None, None] * C[None]                                    # (L, r, r)
        V_inv = jnp.linalg.inv(C)[None] / s2[:, None, None]
        w = jnp.einsum("nld,dr->nlr", inp.xt, Q) / jnp.sqrt(jnp.asarray(d, Q.dtype)) \
            - jnp.einsum("lab,nlb->nla", V, f_prev)

        def per_sample(w_mu, G, Y, c, h_warm):
            loss_h = lambda h: sample_loss_gram(h, G, Y, c, params)  # noqa: E731

            def objective(hf):
                dh = hf.reshape(L, r) - w_mu
                return 0.5 * jnp.einsum("la,lab,lb->", dh, V_inv, dh) + loss_h(hf.reshape(L, r))

            zero = jnp.zeros(L * r, Q.dtype)
            if self.prox_starts == "zero":
                starts = zero[None]
            elif self.prox_starts == "warm":
                starts = h_warm[None]
            else:
                starts = jnp.stack([zero, w_mu.reshape(-1), h_warm])
            h_hat = moreau_minimizer(lambda hf, _: objective(hf), (), starts, n_steps=60, tol=1e-10)[0]
            f, dfdw = prox_omega_jacobian(loss_h, h_hat.reshape(L, r), w_mu, V_inv)
            return f, dfdw, h_hat

        f, dfdw, h_hat = jax.vmap(per_sample)(w, inp.G, inp.Y, inp.c, h_prev)
        if self.onsager == "stein":
            mean_dfdw = stein_mean_jacobian(f, w, problem.hstar)               # (L, r, r)
        else:
            mean_dfdw = jnp.mean(dfdw, axis=0)
        Ahat = -(n / d) * jnp.einsum("l,lab->ab", s2, mean_dfdw)
        Ahat = 0.5 * (Ahat + Ahat.T)
        B = jnp.einsum("nld,nlr->dr", inp.xt, f) / jnp.sqrt(jnp.asarray(d, Q.dtype)) + Q @ Ahat
        M_inv = jnp.linalg.inv(params.lam * jnp.eye(r, dtype=Q.dtype) + Ahat)
        return B @ M_inv, 0.5 * (M_inv + M_inv.T), f, h_hat

    def step(self, problem: _GAMPProblem, s: _State) -> _State:
        d = s.Q.shape[0]
        sqrt_d = jnp.sqrt(jnp.asarray(d, s.Q.dtype))
        Q_new, C_new, f, h_hat = self.update(problem, s.Q, s.C, s.f_prev, s.h_prev)
        Q_next = self.damping * s.Q + (1.0 - self.damping) * Q_new
        C_next = self.damping * s.C + (1.0 - self.damping) * C_new
        residual = jnp.linalg.norm(Q_new - s.Q) / jnp.maximum(jnp.linalg.norm(s.Q), 1e-6 * sqrt_d)
        bad = (~jnp.all(jnp.isfinite(Q_next)) | ~jnp.all(jnp.isfinite(C_next))
               | (jnp.linalg.eigvalsh(C_next)[0] <= 0) | (jnp.linalg.norm(Q_next) / sqrt_d > self.max_norm))
        status = jnp.where(bad, int(Status.DIVERGED),
                           jnp.where(residual < self.tol, int(Status.CONVERGED), int(Status.RUNNING)))
        moving = status == int(Status.RUNNING)    # on convergence or divergence keep the last good point
        keep = lambda new, old: jnp.where(moving, new, old)  # noqa: E731
        Q, C = keep(Q_next, s.Q), keep(C_next, s.C)
        ov = overlaps_of(Q, problem.data)
        flips = basin_flips(s.h_prev, h_hat)
        df2 = jnp.sum((f - s.f_prev) ** 2, axis=(1, 2))
        flip_share = jnp.sum(jnp.where(flips, df2, 0.0)) / jnp.maximum(jnp.sum(df2), jnp.finfo(df2.dtype).tiny)
        values = (ov["q0"], ov["m"], ov["theta0"], residual, jnp.mean(flips.astype(Q.dtype)), flip_share)
        history = tuple(h.at[s.it].set(v) for h, v in zip(s.history, values))
        return _State(Q=Q, C=C, f_prev=keep(f, s.f_prev), h_prev=keep(h_hat, s.h_prev), it=s.it + 1,
                      status=status.astype(jnp.int32), history=history)

    def terminate(self, problem: _GAMPProblem, s: _State):
        return s.status != int(Status.RUNNING), s.status


@functools.partial(jax.jit, static_argnames=("max_iter", "prox_starts", "onsager"))
def _gamp(data, params, Q0, C0, damping, tol, max_norm, *, max_iter, prox_starts, onsager, f0=None) -> GAMPResult:
    dtype = Q0.dtype
    params = cast_params(params, dtype)
    inp = gamp_inputs(data)
    n, L, d = inp.xt.shape
    r = Q0.shape[1]
    valid_input = (params_are_valid(params) & (damping >= 0) & (damping < 1) & (tol > 0) & (max_norm > 0)
                   & jnp.all(jnp.isfinite(C0)) & (jnp.linalg.eigvalsh(0.5 * (C0 + C0.T))[0] > 0)
                   & jnp.all(jnp.isfinite(Q0)))
    solver = _GAMPIteration(damping, tol, max_norm, prox_starts, onsager)
    problem = _GAMPProblem(data, inp, teacher_fields(data), params)
    ov0 = overlaps_of(Q0, data)
    history0 = tuple(jnp.broadcast_to(v, (max_iter,) + v.shape) for v in (ov0["q0"], ov0["m"], ov0["theta0"]))
    history0 = history0 + tuple(jnp.full((max_iter,), jnp.nan, dtype) for _ in range(3))
    h0 = jnp.einsum("nld,dr->nlr", inp.xt, Q0).reshape(n, L * r) / jnp.sqrt(jnp.asarray(d, dtype))
    status0 = jnp.where(valid_input, int(Status.RUNNING), int(Status.INVALID_INPUT)).astype(jnp.int32)
    f0 = jnp.zeros((n, L, r), dtype) if f0 is None else f0
    state0 = _State(Q=Q0, C=C0, f_prev=f0, h_prev=h0, it=jnp.asarray(0),
                    status=status0, history=history0)
    out = iterate(solver, problem, state0, max_steps=max_iter)
    s = out.state
    q0s, ms, ths, res, flip_fraction, flip_share = s.history
    after = (jnp.arange(max_iter) >= s.it)
    q0s, ms, ths = (jnp.where(after.reshape((-1,) + (1,) * (h.ndim - 1)), h[jnp.maximum(s.it - 1, 0)], h)
                    for h in (q0s, ms, ths))
    grad = jax.grad(empirical_risk)(s.Q, data, params)
    scale = jnp.maximum(jnp.max(jnp.abs(params.lam * s.Q)), jnp.finfo(dtype).tiny)
    return GAMPResult(Q=s.Q, C=s.C, q0=jnp.concatenate([ov0["q0"][None], q0s]),
                      m=jnp.concatenate([ov0["m"][None], ms]), theta0=jnp.concatenate([ov0["theta0"][None], ths]),
                      residual=res, iterations=out.steps, status=out.status,
                      converged=out.status == int(Status.CONVERGED), grad_norm=jnp.max(jnp.abs(grad)) / scale,
                      flip_fraction=flip_fraction, flip_share=flip_share)


def _concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_scalar(value, name: str, ok, requirement: str) -> None:
    if _concrete(value):
        v = np.asarray(value, dtype=float)
        if v.shape != () or not np.isfinite(v) or not ok(float(v)):
            raise ValueError(f"{name} must {requirement}, got {name}={value!r}")


def gamp(
    data: TiedAttentionData,
    params: TiedAttentionParams,
    Q0: Array,
    C0: Array,
    *,
    max_iter: int = 200,
    damping: float = 0.5,
    tol: float = 1e-8,
    prox_starts: str = "multi",
    onsager: str = "stein",
    max_norm: float = 1e6,
    f0: Array | None = None,
    throw: bool = False,
) -> GAMPResult:
    """GAMP of the theory notes' section 7 on `data`, from `Q0 (d, r)`, `C0 (r, r)` (positive definite).

    `damping` in `[0, 1)` is the weight of the old `Q` and `C`. Stops when
    the relative change of the undamped update is below `tol` (`CONVERGED`),
    after `max_iter` iterations (`MAX_ITERATIONS`), or when an iterate
    diverges (`DIVERGED`: non-finite, `C` not positive definite, or
    `||Q|| / sqrt(d) > max_norm`); the last good iterate is returned.
    `prox_starts`: `"multi"` (from `0`, the field `w` and the previous
    minimiser; the global minimum), `"zero"` or `"warm"` (one start).
    `onsager`: `"stein"` (across-sample Gaussian integration by parts, keeps
    the delta terms of the jumping prox) or `"pointwise"` (mean implicit
    derivative); see the module docstring. Computes in the dtype of `data`
    (`Q0`, `C0` are cast to it); use float64 data (inside
    `phasejax.float64_scope()`) for tolerances below ~1e-6. Jittable in
    `damping`, `tol`, `max_norm` and the array inputs (traced invalid values
    give `INVALID_INPUT`); `max_iter`, `prox_starts`, `onsager` are static.
    `f0 (n, L, r)`: the first Onsager term's `f_prev` (default 0); with
    `f0 = fixed_point_f(Q0, data, params)` a critical point `Q0` of `R` is a fixed point of the map.
    With `throw` (a concrete call, not under `jit` or `vmap`) a run that did not converge raises
    `phasejax.solvers.SolverError`, as optimistix's `throw=True`; by default failure is the result's status.
    """
    check_data(data, params)
    check_trainable(validate_params(params), square_loss_for="gamp")
    n, L, d = data.x.shape
    if isinstance(max_iter, (bool, np.bool_)) or int(max_iter) != max_iter or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got max_iter={max_iter!r}")
    if prox_starts not in PROX_STARTS:
        raise ValueError(f"prox_starts must be one of {PROX_STARTS}, got prox_starts={prox_starts!r}")
    if onsager not in ONSAGER_FORMS:
        raise ValueError(f"onsager must be one of {ONSAGER_FORMS}, got onsager={onsager!r}")
    _check_scalar(damping, "damping", lambda v: 0.0 <= v < 1.0, "lie in [0, 1)")
    _check_scalar(tol, "tol", lambda v: v > 0, "be > 0")
    _check_scalar(max_norm, "max_norm", lambda v: v > 0, "be > 0")
    r = params.r
    if jnp.shape(Q0) != (d, r):
        raise ValueError(f"Q0 must have shape (d, r) = ({d}, {r}), got {jnp.shape(Q0)}")
    if jnp.shape(C0) != (r, r):
        raise ValueError(f"C0 must have shape (r, r) = ({r}, {r}), got {jnp.shape(C0)}")
    if _concrete(Q0) and not np.all(np.isfinite(np.asarray(Q0))):
        raise ValueError("Q0 holds NaN or inf entries")
    if _concrete(C0):
        c = np.asarray(C0, dtype=float)
        if not np.all(np.isfinite(c)) or not np.allclose(c, c.T) or np.linalg.eigvalsh(0.5 * (c + c.T))[0] <= 0:
            raise ValueError(f"C0 must be symmetric positive definite, got C0={c.tolist()}")
    if f0 is not None and jnp.shape(f0) != (n, L, r):
        raise ValueError(f"f0 must have shape (n, L, r) = ({n}, {L}, {r}), got {jnp.shape(f0)}")
    dtype = data.x.dtype
    with dtype_scope(dtype):
        f0 = jnp.zeros((n, L, r), dtype) if f0 is None else jnp.asarray(f0).astype(dtype)
        out = _gamp(data, params, jnp.asarray(Q0).astype(dtype), jnp.asarray(C0).astype(dtype),
                    jnp.asarray(damping, dtype), jnp.asarray(tol, dtype), jnp.asarray(max_norm, dtype),
                    max_iter=int(max_iter), prox_starts=prox_starts, onsager=onsager, f0=f0)
    if throw:
        raise_unless_converged(out.status, "gamp")
    return out


def weights_at_overlaps(key: Array, data: TiedAttentionData, q0: float, m: float, theta0: float, *,
                 dtype=None) -> Array:
    """`Q0 (d, 1)` with overlaps close to `(q0, m, theta0)`: `m sqrt(d) u_1 + theta0 Q*_1 + sqrt(q0 - m^2 - theta0^2) z`.

    For `r = t = K = 1`; `z` standard normal from `key`; `dtype` defaults to the data's.
    """
    noise_var = q0 - m**2 - theta0**2
    if not np.isfinite(noise_var) or noise_var < 0:
        raise ValueError(f"need q0 >= m^2 + theta0^2, got q0={q0}, m={m}, theta0={theta0}")
    dtype = check_float_dtype(data.x.dtype if dtype is None else dtype)
    with dtype_scope(dtype):
        z = standard_normal(key, (data.d, 1), dtype)
        u, Qs = data.u[:1].T.astype(dtype), data.Qstar[:, :1].astype(dtype)
        return m * jnp.sqrt(jnp.asarray(data.d, dtype)) * u + theta0 * Qs + jnp.sqrt(jnp.asarray(noise_var, dtype)) * z


def fixed_point_f(Q: Array, data: TiedAttentionData, params: TiedAttentionParams) -> Array:
    """`f_mu = -grad ell_mu(h_mu)` at `h_mu = xt_mu Q / sqrt(d)`, shape `(n, L, r)`: GAMP's `f` at a fixed point `Q`."""
    params = cast_params(params, Q.dtype)
    inp = gamp_inputs(data)
    h = jnp.einsum("nld,dr->nlr", inp.xt, Q) / jnp.sqrt(jnp.asarray(inp.xt.shape[-1], Q.dtype))
    return -jax.vmap(jax.grad(lambda hh, G, Y, c: sample_loss_gram(hh, G, Y, c, params)))(h, inp.G, inp.Y, inp.c)


def prox_consistency(Q: Array, C: Array, data: TiedAttentionData, params: TiedAttentionParams) -> dict:
    """Can `Q (d, r)` be a GAMP fixed point with variance `C (r, r)` and the global-minimum prox?

    At a GAMP fixed point every sample's prox minimiser is `h_mu = xt_mu Q / sqrt(d)` with
    `f_mu = -grad ell_mu(h_mu)` and field `w_mu = h_mu - V f_mu` (`V_l = sigma_l^2 C`). `h_mu` is then a
    stationary point of the prox objective `P(h) = sum_l (h_l - w_l)^T V_l^{-1} (h_l - w_l) / 2 + ell_mu(h)`;
    this checks whether it is the *global* minimiser (multi-start Newton from `0`, `w`, `h`, `-h`).
    Returns `not_global (n,)` bool (a lower minimum exists, by more than `1e-9 (1 + |P|)`), `gap (n,)` =
    `P(h_mu) - min P`, `mirror (n,)` bool (the lower minimum lies in the mirror basin, `basin_flips`).
    A non-zero fraction of `not_global` means no GAMP fixed point with the global prox exists at `Q`.
    """
    params = cast_params(params, Q.dtype)
    inp = gamp_inputs(data)
    n, L, d = inp.xt.shape
    r = Q.shape[1]
    s2 = params.sigma**2
    V = s2[:, None, None] * C[None]
    V_inv = jnp.linalg.inv(C)[None] / s2[:, None, None]
    h = jnp.einsum("nld,dr->nlr", inp.xt, Q) / jnp.sqrt(jnp.asarray(d, Q.dtype))

    def per_sample(h_mu, G, Y, c):
        loss_h = lambda hh: sample_loss_gram(hh, G, Y, c, params)  # noqa: E731
        f_mu = -jax.grad(loss_h)(h_mu)
        w_mu = h_mu - jnp.einsum("lab,lb->la", V, f_mu)

        def objective(hf):
            dh = hf.reshape(L, r) - w_mu
            return 0.5 * jnp.einsum("la,lab,lb->", dh, V_inv, dh) + loss_h(hf.reshape(L, r))

        starts = jnp.stack([jnp.zeros(L * r, Q.dtype), w_mu.reshape(-1), h_mu.reshape(-1), -h_mu.reshape(-1)])
        best = moreau_prox(objective, starts)
        at_h = objective(h_mu.reshape(-1))
        return at_h - best.value, best.h, at_h

    gap, h_best, at_h = jax.vmap(per_sample)(h, inp.G, inp.Y, inp.c)
    not_global = gap > 1e-9 * (1.0 + jnp.abs(at_h))
    mirror = not_global & basin_flips(h.reshape(n, -1), h_best)
    return dict(not_global=not_global, gap=gap, mirror=mirror)


# ---------------------------------------------------------------------------------------------------------------
# Sweeps over seeds, branches, sizes and Onsager forms (what `phasejax gamp` runs)

BRANCH_INITS = {"positional": (0.08, 0.2, 0.0), "semantic": (1.0, 0.0, 0.6)}
"""`(q0, m, theta0)` of the init `Q0` per branch side (`r = t = K = 1`): near each SE branch's basin."""

BRANCH_DAMPING = {"positional": 0.8, "semantic": 0.5}
"""Default damping per branch (0.5 diverges on the positional side at these sizes)."""


def _traceable_init(key, data, q0, m, theta0):
    z = standard_normal(key, (data.d, 1), data.x.dtype)
    sqrt_d = jnp.sqrt(jnp.asarray(data.d, data.x.dtype))
    noise = jnp.sqrt(jnp.maximum(q0 - m**2 - theta0**2, 0.0))
    return m * sqrt_d * data.u[:1].T + theta0 * data.Qstar[:, :1] + noise * z


def gamp_run(seed, init, damping, params: TiedAttentionParams, *, d: int, n: int, C0: float, max_iter: int,
             tol, prox_starts: str, onsager: str, dtype) -> dict:
    """One GAMP run as a pure function of `seed ()` (int), `init (3,)` = `(q0, m, theta0)` and `damping ()`.

    Data from `generate_data(PRNGKey(seed), params, d, n)`, `Q0` from
    `PRNGKey(seed + 10**6)`. Returns a dict of arrays: per-iteration
    histories (`q0, m, theta0 (T + 1,)`, `residual, flip_fraction,
    flip_share (T,)`) and final `status, iterations, grad_norm, C`.
    Vmappable over `seed`, `init`, `damping` (call inside `dtype_scope(dtype)`).
    """
    from phasejax.empirics.data import generate_data

    data = generate_data(jax.random.PRNGKey(seed), params, d, n, dtype=dtype)
    Q0 = _traceable_init(jax.random.PRNGKey(seed + 10**6), data, init[0], init[1], init[2])
    res = _gamp(data, params, Q0, jnp.full((1, 1), C0, dtype), jnp.asarray(damping, dtype), jnp.asarray(tol, dtype),
                jnp.asarray(1e6, dtype), max_iter=max_iter, prox_starts=prox_starts, onsager=onsager)
    return dict(q0=res.q0[:, 0, 0], m=res.m[:, 0, 0], theta0=res.theta0[:, 0, 0], residual=res.residual,
                flip_fraction=res.flip_fraction, flip_share=res.flip_share, status=res.status,
                iterations=res.iterations, grad_norm=res.grad_norm, C=res.C[0, 0])


@struct.dataclass
class GAMPSweep(ResultBundle):
    """Result of `gamp_sweep`: one row per run (`d`, `onsager`, `branch`, `seed`).

    Attributes (numpy, leading axis = runs) in `columns`: d, seed (int); branch, onsager, status (str);
      verdict (str: converged / unstable / diverged, `run_verdicts`) and instability (the tail residual);
      replicon, replicon_err, replicon_regular, replicon_jump (the SE branch's replicon at the sweep's point,
      `phasejax.theory.replicon`; set by `with_verdicts`, NaN until then); iterations (int); grad_norm, C (float);
      q, m, theta (final per-token overlaps `sigma_1^2 q0`, `m`, `sigma_1^2 theta0`); histories `q_hist, m_hist, theta_hist (runs, T + 1)`,
      `residual, flip_fraction, flip_share (runs, T)` in `histories`; `config` (dict: alpha, omega, lam, C0,
      max_iter, tol, ...). Runs are ordered by `d`, then `onsager`, then `branch`, then `seed`.
    """

    columns: dict
    histories: dict
    config: dict = struct.field(pytree_node=False)

    FINAL = ("d", "onsager", "branch", "seed", "damping", "status", "verdict", "instability", "iterations",
             "grad_norm", "C", "q", "m", "theta", "q_tail_mean", "m_tail_mean", "theta_tail_mean", "residual_tail",
             "flip_fraction_tail", "flip_share_tail", "replicon", "replicon_err", "replicon_regular", "replicon_jump")

    DERIVED = ("verdict", "instability", "replicon", "replicon_err", "replicon_regular", "replicon_jump")
    """Columns computed from the others and the SE reference (`with_verdicts`); absent from older files."""

    HISTORY = ("q_hist", "m_hist", "theta_hist", "residual", "flip_fraction", "flip_share")

    FILES = (BundleFile("fixed_points.csv", field="columns", columns=FINAL, required=("d", "branch", "seed")),
             BundleFile("trajectories.csv", field="trajectories", required=("iteration",)),
             BundleFile("gamp_config.json", field="config"))
    """`fixed_points.csv` (one row per run), `trajectories.csv` (one row per run and iteration), `gamp_config.json`."""

    def to_files(self) -> dict:
        runs, T1 = self.histories["q_hist"].shape
        traj = {k: np.repeat(self.columns[k], T1) for k in ("d", "onsager", "branch", "seed")}
        traj["iteration"] = np.tile(np.arange(T1), runs)
        for k in ("q_hist", "m_hist", "theta_hist"):
            traj[k[:-5]] = self.histories[k].ravel()
        for k in ("residual", "flip_fraction", "flip_share"):   # iteration t's update leads to iterate t
            traj[k] = np.concatenate([np.full((runs, 1), np.nan), self.histories[k]], axis=1).ravel()
        return dict(columns=self.columns, trajectories=traj, config=self.config)

    @classmethod
    def from_files(cls, contents: dict, out_dir: str) -> "GAMPSweep":
        cols, traj = contents["columns"], contents["trajectories"]
        runs = len(cols["d"])
        T1 = len(traj["iteration"]) // runs
        if T1 * runs != len(traj["iteration"]):
            raise ValueError(f"{out_dir}/trajectories.csv has {len(traj['iteration'])} rows, not a multiple of the "
                             f"{runs} runs of fixed_points.csv")
        hist = {k: np.asarray(traj[k[:-5]], np.float64).reshape(runs, T1) for k in ("q_hist", "m_hist", "theta_hist")}
        for k in ("residual", "flip_fraction", "flip_share"):
            hist[k] = np.asarray(traj[k], np.float64).reshape(runs, T1)[:, 1:]
        runs_nan = np.full(runs, np.nan)
        columns = {k: np.asarray(cols[k]) if k in cols else runs_nan for k in cls.FINAL}
        sweep = cls(columns=columns, histories=hist, config=contents["config"])
        return sweep if "verdict" in cols else sweep.with_verdicts()

    def with_verdicts(self, replicon: dict | None = None) -> "GAMPSweep":
        """A copy with the per-run `verdict` and `instability` (`run_verdicts`) and, from `replicon`
        (`{branch: {"replicon": ..., "replicon_err": ..., "replicon_regular": ..., "replicon_jump": ...}}`, the
        SE branch's values at the sweep's point), the replicon columns (NaN where not given)."""
        c = dict(self.columns)
        c["verdict"], c["instability"] = run_verdicts(c["status"], c["grad_norm"], c["residual_tail"])
        for k in ("replicon", "replicon_err", "replicon_regular", "replicon_jump"):
            c[k] = np.asarray([float((replicon or {}).get(str(b), {}).get(k, np.nan)) for b in c["branch"]])
        return self.replace(columns=c)


def gamp_memory_estimate(d: int, alpha: float, *, L: int = 2, chunk_size: int = 1, dtype=jnp.float32) -> int:
    """Bytes a chunk of `chunk_size` GAMP runs at dimension `d` needs, about: `4 n L d * itemsize` per run
    (`n = alpha d` samples: the data, its products with the estimates and their gradients), the runs side by
    side. The `gamp` command refuses, before any compile, a chunk beyond `phasejax.sweep.available_memory()`."""
    return int(4 * chunk_size * round(alpha * d) * L * d * np.dtype(dtype).itemsize)


def gamp_sweep(params: TiedAttentionParams, dims, seeds, *, branches=("positional", "semantic"),
               onsagers=ONSAGER_FORMS, C0: float = 50.0, max_iter: int = 150, tol: float | None = None,
               damping: dict | None = None, prox_starts: str = "multi", tail: int = 20, dtype=jnp.float32,
               options=None) -> GAMPSweep:
    """GAMP at every `(d, onsager)` (static: one compiled sweep each) over `branches x seeds` (vmapped).

    `n = round(alpha d)`; inits `BRANCH_INITS`, damping `BRANCH_DAMPING` (or `damping={branch: value}`);
    `tol` defaults to `1e-8` in float64 and `1e-5` in float32. Each `(d, onsager)` sweep goes through
    `phasejax.sweep.run_chunked` (its own sub-folder of `options.run_dir`: resumable). The `_tail_mean`
    columns average the last `tail` iterates (the overlaps of a chattering run), `residual_tail`,
    `flip_fraction_tail`, `flip_share_tail` the same window of those histories.
    """
    from phasejax.empirics.data import sample_count
    from phasejax.sweep import RunOptions, run_chunked

    check_trainable(validate_params(params), square_loss_for="gamp_sweep")
    dtype = check_float_dtype(dtype)
    dims = [int(d) for d in dims]
    seeds = np.asarray(seeds, dtype=np.int64)
    for b in branches:
        if b not in BRANCH_INITS:
            raise ValueError(f"branches must be among {tuple(BRANCH_INITS)}, got branches={branches!r}")
    for o in onsagers:
        if o not in ONSAGER_FORMS:
            raise ValueError(f"onsagers must be among {ONSAGER_FORMS}, got onsagers={onsagers!r}")
    if prox_starts not in PROX_STARTS:
        raise ValueError(f"prox_starts must be one of {PROX_STARTS}, got prox_starts={prox_starts!r}")
    if isinstance(max_iter, bool) or int(max_iter) != max_iter or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got max_iter={max_iter!r}")
    if not (np.isfinite(C0) and C0 > 0):
        raise ValueError(f"C0 must be > 0, got C0={C0}")
    if not 1 <= int(tail) <= max_iter:
        raise ValueError(f"tail must lie in [1, max_iter], got tail={tail}")
    damping = {**BRANCH_DAMPING, **(damping or {})}
    for b, v in damping.items():
        if not (np.isfinite(v) and 0.0 <= v < 1.0):
            raise ValueError(f"damping must lie in [0, 1), got damping[{b!r}]={v}")
    if tol is None:
        tol = 1e-8 if dtype == np.float64 else 1e-5
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got tol={tol}")
    options = RunOptions() if options is None else options
    s2 = float(np.asarray(params.sigma)[0]) ** 2
    rows = {k: [] for k in GAMPSweep.FINAL}
    hist = {k: [] for k in ("q_hist", "m_hist", "theta_hist", "residual", "flip_fraction", "flip_share")}
    grid_b = np.repeat(np.arange(len(branches)), len(seeds))
    grid_s = np.tile(seeds, len(branches))
    tasks = dict(seed=grid_s, branch=grid_b)
    inits = np.asarray([BRANCH_INITS[b] for b in branches])
    dampings = np.asarray([damping[b] for b in branches])
    for d in dims:
        n = sample_count(float(np.asarray(params.alpha)), d)
        for onsager in onsagers:
            def fn(cols, d=d, n=n, onsager=onsager):
                with dtype_scope(dtype):
                    run = functools.partial(gamp_run, params=params, d=d, n=n, C0=C0, max_iter=int(max_iter), tol=tol,
                                            prox_starts=prox_starts, onsager=onsager, dtype=dtype)
                    init = jnp.asarray(inits, dtype)[cols["branch"]]
                    damp = jnp.asarray(dampings, dtype)[cols["branch"]]
                    return jax.vmap(run)(jnp.asarray(cols["seed"]), init, damp)

            config = dict(kind="gamp_sweep", d=d, n=n, onsager=onsager, alpha=float(np.asarray(params.alpha)),
                          omega=float(np.asarray(params.omega)), lam=float(np.asarray(params.lam)), C0=C0,
                          max_iter=int(max_iter), tol=float(tol), prox_starts=prox_starts, dtype=str(dtype),
                          branches=list(branches), inits=inits.tolist(), dampings=dampings.tolist())
            sub = options if options.run_dir is None else options.replace(
                run_dir=__import__("os").path.join(options.run_dir, f"d{d}_{onsager}"))
            with dtype_scope(dtype):
                out = run_chunked(fn, tasks, config, sub)
            if out is None:
                raise RuntimeError(f"sweep d={d}, onsager={onsager} not finished (max_chunks); run again to resume")
            for i in range(len(grid_s)):
                it = int(out["iterations"][i])
                q, m, th = s2 * out["q0"][i], out["m"][i], s2 * out["theta0"][i]
                window = tail_window(it, tail, per_iterate=True)
                hwin = tail_window(it, tail, per_iterate=False)
                for k, v in (("d", d), ("onsager", onsager), ("branch", branches[grid_b[i]]), ("seed", int(grid_s[i])),
                             ("damping", float(dampings[grid_b[i]])),
                             ("status", Status(int(out["status"][i])).name.lower()), ("iterations", it),
                             ("grad_norm", float(out["grad_norm"][i])), ("C", float(out["C"][i])),
                             ("q", float(q[it])), ("m", float(m[it])), ("theta", float(th[it])),
                             ("q_tail_mean", float(np.mean(q[window]))), ("m_tail_mean", float(np.mean(m[window]))),
                             ("theta_tail_mean", float(np.mean(th[window]))),
                             ("residual_tail", float(np.mean(out["residual"][i][hwin]))),
                             ("flip_fraction_tail", float(np.mean(out["flip_fraction"][i][hwin]))),
                             ("flip_share_tail", float(np.mean(out["flip_share"][i][hwin])))):
                    rows[k].append(v)
                for k, v in (("q_hist", q), ("m_hist", m), ("theta_hist", th), ("residual", out["residual"][i]),
                             ("flip_fraction", out["flip_fraction"][i]), ("flip_share", out["flip_share"][i])):
                    hist[k].append(np.asarray(v, np.float64))
    config = dict(alpha=float(np.asarray(params.alpha)), omega=float(np.asarray(params.omega)),
                  lam=float(np.asarray(params.lam)), C0=float(C0), max_iter=int(max_iter), tol=float(tol),
                  prox_starts=prox_starts, dtype=str(np.dtype(dtype)), tail=int(tail), dims=dims,
                  seeds=seeds.tolist(), branches=list(branches), onsagers=list(onsagers),
                  inits={b: list(BRANCH_INITS[b]) for b in branches}, damping={b: damping[b] for b in branches})
    rows.update({k: [np.nan] * len(rows["d"]) for k in GAMPSweep.DERIVED})
    return GAMPSweep(columns={k: np.asarray(v) for k, v in rows.items()},
                     histories={k: np.stack(v) for k, v in hist.items()}, config=config).with_verdicts()
