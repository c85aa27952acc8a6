"""The low-dimensional (rank-one) reparametrisation of the single-layer Markov transformer, in closed form.

Makkuva et al. (2024, "Local to global") follow the full model along a
rank-one family: embedding scale `e`, feed-forward scale `w`, readout scale
`a` (`a = e` when tied) and readout bias `b`, with the attention output switched
off (`W_O = 0`: a first-order chain needs only the current token, which the
residual stream carries). Their convention centres the inputs with the
positions; here the family is an exact slice of `phasejax.tasks.markov`
(`embed_reduced`, uncentred inputs): with a unit vector
`u`, `e_vec = e u`, `a_vec = a u`, positions 0, `W_O = 0`, two hidden units
with `W_1 = w u (h_1 - h_2)^T`, `W_2 = |w| (h_1 - h_2) u^T`, so
`ReLU(w c) - ReLU(-w c) = w c` gives

    z_n = s_n e (1 + w|w|) u,    logit_n = b + Delta s_n,    Delta = a e (1 + w|w|).

Population loss (exact: every position is stationary, `s_n ~ pi`):

    L(e, w, a, b) = pi_0 [softplus(b) - p b] + pi_1 [softplus(b + Delta) - (1 - q)(b + Delta)].

Critical points (tied, `a = e`):

* the global minima `Delta = Delta* = logit(1 - q) - logit(p)`, `b = logit(p)`,
  loss = entropy rate: the curve `e^2 (1 + w|w|) = Delta*` (needs `w|w| > -1`
  when `p + q < 1`, `w < -1` when `p + q > 1`);
* the stationary line `e = 0`, `b = log(p / q)` (any `w`), loss `H(pi)`: there
  `d^2 L / de^2 = 2 kappa (1 + w|w|)` with `kappa = pi_0 pi_1 (p + q - 1)`, all
  other curvatures but `d^2 L / db^2 = pi_0 pi_1` zero. For `p + q > 1` the line
  is a family of local minima for `w > -1` and of saddles for `w < -1`; for
  `p + q < 1` the reverse. A small (Gaussian) initialisation starts near
  `(e, w) = 0`, hence is stuck when `p + q > 1` and escapes when `p + q < 1`.

Untied, on the same line `e = a = 0`: `d^2 L / de da = kappa (1 + w|w|)`,
`d^2 L / de^2 = d^2 L / da^2 = 0`, a saddle for every `p + q != 1`.

`reduced_flow` integrates the gradient flow `dtheta/dt = -grad L` with a
fixed-step RK4 (jittable, vmappable, with a `phasejax.solvers.Status`).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from phasejax.bundle import BundleFile, ResultBundle
from phasejax.precision import check_float_dtype
from phasejax.solvers import HasStatus, Status
from phasejax.tasks._common import F32, Array
from phasejax.tasks.markov.data import check_positive_int, check_probability, entropy_rate, stationary_entropy
from phasejax.tasks.markov.model import _log_odds


REDUCED_NAMES = ("e", "w", "a", "b")
"""Order of the reduced parameter vector `theta (4,)`: embedding, feed-forward, readout scale, readout bias."""


def reduced_gain(theta: Array, tied) -> Array:
    """`Delta = a e (1 + w|w|)` (`a = e` when `tied` is 1): the logit jump between `s_n = 0` and `s_n = 1`."""
    e, w, a, _ = theta[..., 0], theta[..., 1], theta[..., 2], theta[..., 3]
    t = jnp.asarray(tied, theta.dtype)
    a_eff = t * e + (1 - t) * a
    return a_eff * e * (1 + w * jnp.abs(w))


def reduced_loss(theta: Array, p, q, tied) -> Array:
    """Exact population loss `L(e, w, a, b)` of the module docstring (nats), `theta (..., 4)`."""
    check_probability("p", p)
    check_probability("q", q)
    dt = theta.dtype
    p, q = jnp.asarray(p, dt), jnp.asarray(q, dt)
    pi1 = p / (p + q)
    b = theta[..., 3]
    lb = b + reduced_gain(theta, tied)
    return (1 - pi1) * (jax.nn.softplus(b) - p * b) + pi1 * (jax.nn.softplus(lb) - (1 - q) * lb)


def reduced_global_gain(p, q, dtype=F32) -> Array:
    """`Delta* = logit(1 - q) - logit(p) = log((1 - p)(1 - q) / (p q))`: the gain of the global minima."""
    check_probability("p", p)
    check_probability("q", q)
    p, q = jnp.asarray(p, dtype), jnp.asarray(q, dtype)
    return _log_odds(1 - q) - _log_odds(p)


def stationary_curvature(p, q, w, dtype=F32) -> Array:
    """`d^2 L / de^2 = 2 kappa (1 + w|w|)` on the stationary line `e = 0` (tied), `kappa = pi_0 pi_1 (p + q - 1)`."""
    check_probability("p", p)
    check_probability("q", q)
    p, q, w = jnp.asarray(p, dtype), jnp.asarray(q, dtype), jnp.asarray(w, dtype)
    kappa = p * q / (p + q) ** 2 * (p + q - 1)
    return 2 * kappa * (1 + w * jnp.abs(w))


def global_minimum_curve(p, q, ws) -> np.ndarray:
    """`e(w) = sqrt(Delta* / (1 + w|w|))` on the global-minimum curve (NaN where it does not exist), numpy float64."""
    check_probability("p", p)
    check_probability("q", q)
    ws = np.asarray(ws, np.float64)
    delta = np.log((1 - p) * (1 - q) / (p * q))
    g = 1 + ws * np.abs(ws)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = delta / g
    return np.where(r > 0, np.sqrt(np.where(r > 0, r, 0)), np.nan)


def embed_reduced(theta, d: int, length: int, hidden: int | None = None, dtype=F32) -> dict:
    """Full-model parameters (`phasejax.tasks.markov`) realising the reduced model at `theta (4,)`
    (see the module docstring)."""
    d = check_positive_int("d", d)
    length = check_positive_int("length", length, 2)
    hidden = 4 * d if hidden is None else check_positive_int("hidden", hidden, 2)
    if hidden < 2:
        raise ValueError(f"hidden must be >= 2 to embed the reduced model, got hidden={hidden}")
    dtype = check_float_dtype(dtype)
    theta = jnp.asarray(theta, dtype)
    e, w, a, b = theta[0], theta[1], theta[2], theta[3]
    z = lambda *s: jnp.zeros(s, dtype)  # noqa: E731
    return dict(e=z(d).at[0].set(e), a=z(d).at[0].set(a), pos=z(length, d), W_Q=z(d, d), W_K=z(d, d),
                W_V=z(d, d), W_O=z(d, d), W_1=z(d, hidden).at[0, 0].set(w).at[0, 1].set(-w),
                W_2=z(hidden, d).at[0, 0].set(jnp.abs(w)).at[1, 0].set(-jnp.abs(w)), b=b)


# ----------------------------------------------------------------------------
# Gradient flow
# ----------------------------------------------------------------------------


class ReducedFlow(NamedTuple):
    """Output of `reduced_flow` (leading batch axes when vmapped).

    times `(n_save,)`, path `(n_save, 4)` (theta at those times), theta `(4,)` (final),
    loss `()`, grad_norm `()` (final), status `()` (`phasejax.solvers.Status` code).
    """

    times: Array
    path: Array
    theta: Array
    loss: Array
    grad_norm: Array
    status: Array

    status_name = HasStatus.status_name


def reduced_flow(theta0: Array, p, q, tied, *, t_max: float = 400.0, dt: float = 0.02, n_save: int = 200,
                 gtol: float = 1e-5) -> ReducedFlow:
    """Gradient flow `dtheta/dt = -grad L(theta)` from `theta0 (4,)`, RK4 with step `dt`, up to `t_max`.

    The path is saved at `n_save` equally spaced times (the last at `t_max`). Status:
    `CONVERGED` if the final gradient norm is below `gtol`, `DIVERGED` if an
    iterate became non-finite (the last finite one is returned), else
    `MAX_ITERATIONS` (not yet at a critical point at `t_max`, e.g. the slow
    escape near `p + q = 1`). Pure; vmap over `theta0`, `p`, `q`, `tied`.
    For tied runs the `a` component has zero gradient and never moves.
    """
    if not (t_max > 0 and dt > 0):
        raise ValueError(f"t_max and dt must be > 0, got t_max={t_max}, dt={dt}")
    n_save = check_positive_int("n_save", n_save)
    inner = max(1, int(round(t_max / (n_save * dt))))
    h = t_max / (n_save * inner)
    theta0 = jnp.asarray(theta0)
    grad = jax.grad(lambda th: reduced_loss(th, p, q, tied))
    field = lambda th: -grad(th)  # noqa: E731

    def rk4(th, _):
        k1 = field(th)
        k2 = field(th + 0.5 * h * k1)
        k3 = field(th + 0.5 * h * k2)
        k4 = field(th + h * k3)
        nxt = th + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        ok = jnp.all(jnp.isfinite(nxt))
        return jnp.where(ok, nxt, th), ~ok

    def save(carry, _):
        th, bad = carry
        th, bads = jax.lax.scan(rk4, th, None, length=inner)
        return (th, bad | jnp.any(bads)), th

    (theta, bad), path = jax.lax.scan(save, (theta0, jnp.asarray(False)), None, length=n_save)
    gnorm = jnp.linalg.norm(grad(theta))
    status = jnp.where(bad, Status.DIVERGED, jnp.where(gnorm < gtol, Status.CONVERGED, Status.MAX_ITERATIONS))
    times = h * inner * jnp.arange(1, n_save + 1, dtype=theta.dtype)
    return ReducedFlow(times=times, path=path, theta=theta, loss=reduced_loss(theta, p, q, tied),
                       grad_norm=gnorm, status=status.astype(jnp.int32))


def classify_end(loss, p, q, tol: float = 1e-3) -> tuple[Array, Array]:
    """`(stuck, at_entropy_rate)`: final loss within `tol` of `H(pi)`, resp. of the entropy rate."""
    dt = jnp.asarray(loss).dtype
    return (jnp.abs(loss - stationary_entropy(p, q, dt)) < tol, jnp.abs(loss - entropy_rate(p, q, dt)) < tol)


@dataclasses.dataclass(frozen=True)
class ReducedSettings:
    """Gradient-flow settings of the reduced-model diagrams: init scale, horizon, RK4 step, tolerance."""

    init_std: float = 0.1
    t_max: float = 600.0
    dt: float = 0.03
    tol: float = 1e-3

    def __post_init__(self):
        for name in ("init_std", "t_max", "dt", "tol"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {name}={v!r}")


def reduced_gaussian_runs(ps, qs, tied, seeds, settings: ReducedSettings = ReducedSettings(),
                          options=None) -> dict[str, np.ndarray]:
    """Gradient flow of the reduced model from Gaussian inits `theta0 ~ N(0, init_std^2 I)` (all four entries).

    Vmapped over the flat table of `ps`, `qs`, `tied`, `seeds` (equal-length 1-d arrays) in chunks
    (`phasejax.sweep.run_chunked`; `options` default `RunOptions(chunk_size=1024, progress=False)`).
    Returns numpy columns `final_loss`, `grad_norm`, `status`, `stuck`, `at_entropy_rate`,
    `e`, `w`, `a`, `b` (final) and `e0`, `w0`, `a0`, `b0` (initial).
    """
    from phasejax.sweep import RunOptions, run_chunked, run_options

    options = run_options(options if options is not None else RunOptions(chunk_size=1024, progress=False))
    ps, qs = np.asarray(ps, np.float32), np.asarray(qs, np.float32)
    check_probability("p", ps)
    check_probability("q", qs)
    tasks = dict(p=ps, q=qs, tied=np.asarray(tied, np.float32), seed=np.asarray(seeds, np.int64))

    def one(p, q, t, seed):
        th0 = settings.init_std * jax.random.normal(jax.random.PRNGKey(seed), (4,), F32)
        res = reduced_flow(th0, p, q, t, t_max=settings.t_max, dt=settings.dt, n_save=1)
        stuck, glob = classify_end(res.loss, p, q, settings.tol)
        return dict(final_loss=res.loss, grad_norm=res.grad_norm, status=res.status, stuck=stuck,
                    at_entropy_rate=glob, e=res.theta[0], w=res.theta[1], a=res.theta[2], b=res.theta[3],
                    e0=th0[0], w0=th0[1], a0=th0[2], b0=th0[3])

    def fn(chunk):
        return jax.vmap(one)(*(jnp.asarray(chunk[k]) for k in ("p", "q", "tied", "seed")))

    config = dict(kind="reduced_gaussian_runs", settings=dataclasses.asdict(settings), dtype="float32")
    out = run_chunked(fn, tasks, config, options)
    return {k: np.asarray(v) for k, v in out.items()}


def reduced_basins(p, q, es, ws, *, b0: float = 0.0, settings: ReducedSettings = ReducedSettings()) -> dict:
    """End states of the tied flow from the grid `(e0, w0) in es x ws`, `b0` fixed: `final_loss`, `stuck`,
    `at_entropy_rate`, `status`, each `(len(ws), len(es))`."""
    check_probability("p", p)
    check_probability("q", q)
    E, W = np.meshgrid(np.asarray(es, np.float32), np.asarray(ws, np.float32))
    th0 = np.stack([E.ravel(), W.ravel(), E.ravel(), np.full(E.size, b0, np.float32)], -1)

    def one(th):
        res = reduced_flow(th, p, q, 1.0, t_max=settings.t_max, dt=settings.dt, n_save=1)
        stuck, glob = classify_end(res.loss, p, q, settings.tol)
        return dict(final_loss=res.loss, stuck=stuck, at_entropy_rate=glob, status=res.status)

    out = jax.jit(jax.vmap(one))(jnp.asarray(th0))
    return {k: np.asarray(v).reshape(W.shape) for k, v in out.items()}


def reduced_trajectories(p, q, theta0s, tied=1.0, *, settings: ReducedSettings = ReducedSettings(),
                         n_save: int = 400) -> ReducedFlow:
    """Saved paths `(K, n_save, 4)` of the flow from `theta0s (K, 4)` (for the flow picture)."""
    check_probability("p", p)
    check_probability("q", q)
    fn = lambda th: reduced_flow(th, p, q, tied, t_max=settings.t_max, dt=settings.dt, n_save=n_save)  # noqa: E731
    return jax.jit(jax.vmap(fn))(jnp.asarray(theta0s, F32))


def reduced_optimizer_path(theta0, p, q, tied, optimizer, steps: int, n_save: int = 200) -> tuple[Array, Array]:
    """Discrete optimisation of the exact reduced loss with an optax `optimizer` (e.g. Adam vs gradient descent).

    Returns `(steps_saved (n_save,), path (n_save, 4))`; shows how Adam's per-coordinate
    normalisation moves `w` along the stationary line, where gradient descent does not move.
    """
    steps = check_positive_int("steps", steps)
    n_save = check_positive_int("n_save", n_save)
    inner = max(1, steps // n_save)
    grad = jax.grad(lambda th: reduced_loss(th, p, q, tied))
    theta0 = jnp.asarray(theta0)

    def one(carry, _):
        th, state = carry
        upd, state = optimizer.update(grad(th), state, th)
        return (th + upd, state), None

    def save(carry, _):
        carry, _ = jax.lax.scan(one, carry, None, length=inner)
        return carry, carry[0]

    _, path = jax.lax.scan(save, (theta0, optimizer.init(theta0)), None, length=n_save)
    return inner * jnp.arange(1, n_save + 1), path


# ----------------------------------------------------------------------------
# The flow picture
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class ReducedPicture(ResultBundle):
    """Everything the reduced-model figure shows (numpy arrays; `runs` holds one row per Gaussian-init flow,
    whose initial point is `init_std * normal(PRNGKey(seed), (4,))`). `write` saves the per-cell table
    `reduced_cells.csv` and `reduced_summary.json`."""

    runs: dict            # Gaussian-init flows over the (p, q) grid: p, q, tied, seed, final_loss, stuck, ...
    basins: dict          # {"p+q<1"/"p+q>1": dict(p, q, es, ws, stuck, at_entropy_rate, status)}
    trajectories: dict    # {"p+q<1"/"p+q>1": dict(times, path (K, T, 4))}
    escape: dict          # p = q diagonal from one small init: dict(p, times, loss (K, T), h_pi, h_rate)
    optimizers: dict      # {"adam"/"gd": dict(steps, path (T, 4))} at p+q>1
    settings: dict

    def summary(self) -> dict:
        r = self.runs
        cells = {}
        for key in ("stuck", "at_entropy_rate"):
            for tied in (1, 0):
                s = np.asarray(r["tied"]) == tied
                hi = s & (np.asarray(r["p"]) + np.asarray(r["q"]) >= 1.2 - 1e-6)
                lo = s & (np.asarray(r["p"]) + np.asarray(r["q"]) <= 0.8 + 1e-6)
                cells[f"{'tied' if tied else 'untied'}_{key}_fraction_p+q>=1.2"] = float(np.mean(r[key][hi]))
                cells[f"{'tied' if tied else 'untied'}_{key}_fraction_p+q<=0.8"] = float(np.mean(r[key][lo]))
        status = np.asarray(r["status"])
        return dict(settings=self.settings, fractions=cells, n_flows=int(status.size),
                    status_counts={name: int(np.sum(status == int(s))) for name, s in
                                   (("converged", Status.CONVERGED), ("max_iterations", Status.MAX_ITERATIONS),
                                    ("diverged", Status.DIVERGED))})

    def cells(self) -> dict[str, np.ndarray]:
        """Per `(p, q, tied)` cell of the Gaussian-init flows: seeds, fractions stuck / at the entropy rate,
        mean final loss, the two reference losses and the status counts (columns of `reduced_cells.csv`)."""
        r = self.runs
        keys = sorted({(float(p), float(q), int(t)) for p, q, t in zip(r["p"], r["q"], r["tied"])})
        rows = []
        for p, q, t in keys:
            sel = np.isclose(r["p"], p) & np.isclose(r["q"], q) & (r["tied"] == t)
            status = np.asarray(r["status"])[sel]
            rows.append((p, q, t, int(sel.sum()), float(np.mean(r["stuck"][sel])),
                         float(np.mean(r["at_entropy_rate"][sel])), float(np.mean(r["final_loss"][sel])),
                         float(r["entropy_rate"][sel][0]), float(r["stationary_entropy"][sel][0]),
                         *(int(np.sum(status == int(code))) for code in
                           (Status.CONVERGED, Status.MAX_ITERATIONS, Status.DIVERGED))))
        names = ("p", "q", "tied", "n_seeds", "fraction_stuck", "fraction_at_entropy_rate", "mean_final_loss",
                 "entropy_rate", "stationary_entropy", "n_converged", "n_max_iterations", "n_diverged")
        return {k: np.asarray([row[i] for row in rows]) for i, k in enumerate(names)}

    FILES = (BundleFile("reduced_cells.csv", field="cells", derived=True),
             BundleFile("reduced_summary.json", field="summary", derived=True))
    """`write` writes `reduced_cells.csv` (`cells()`) and `reduced_summary.json` (`summary()`); nothing is read
    back (the flows are not stored)."""

    def to_files(self) -> dict:
        """The per-cell table and the summary."""
        return dict(cells=self.cells(), summary=self.summary())


def reduced_picture(settings: ReducedSettings = ReducedSettings(), *, pq_values=None, seeds: int = 5,
                    basin_points: int = 41, low=(0.2, 0.3), high=(0.7, 0.8)) -> ReducedPicture:
    """Compute the reduced-model results: Gaussian-init flows on a `(p, q)` grid (tied and untied), the tied
    basins in the `(e0, w0)` plane (`b0 = 0`) at `low` (p + q < 1) and `high` (p + q > 1), trajectories from
    small inits, escape curves along `p = q`, and Adam vs gradient descent at `high`."""
    import optax

    from phasejax.tasks.markov.sweep import reference_losses, shortest_float64

    pq = np.round(np.arange(0.05, 0.951, 0.05), 2) if pq_values is None else np.asarray(pq_values, np.float64)
    P, Q, T, S = np.meshgrid(pq, pq, [1, 0], np.arange(seeds), indexing="ij")
    runs = {k: shortest_float64(v) for k, v in
            reduced_gaussian_runs(P.ravel(), Q.ravel(), T.ravel(), S.ravel(), settings).items()}
    runs.update(p=P.ravel(), q=Q.ravel(), tied=T.ravel().astype(np.int32), seed=S.ravel().astype(np.int64))
    runs["entropy_rate"], runs["stationary_entropy"] = reference_losses(runs["p"], runs["q"])
    es, ws = np.linspace(-2.0, 2.0, basin_points), np.linspace(-2.5, 2.5, basin_points)
    basins, trajectories = {}, {}
    rng = np.random.default_rng(0)
    starts = np.concatenate([settings.init_std * rng.standard_normal((6, 4)),
                             np.array([[0.3, -1.6, 0, 0], [-0.3, -2.0, 0, 0], [1.5, 1.5, 0, 0], [-1.5, -0.5, 0, 0],
                                       [0.05, -1.3, 0, 0], [-1.8, 2.0, 0, 0]])]).astype(np.float32)
    starts[:, 2] = starts[:, 0]
    starts[:6, 3] = 0.0
    for key, (p, q) in (("p+q<1", low), ("p+q>1", high)):
        basins[key] = dict(p=p, q=q, es=es, ws=ws, **reduced_basins(p, q, es, ws, settings=settings))
        tr = reduced_trajectories(p, q, starts, 1.0, settings=settings)
        trajectories[key] = dict(times=np.asarray(tr.times[0]), path=np.asarray(tr.path), p=p, q=q)
    diag = np.array([0.15, 0.25, 0.35, 0.42, 0.46, 0.54, 0.58, 0.65, 0.75, 0.85])
    th0 = np.array([settings.init_std, 0.5 * settings.init_std, settings.init_std, 0.0], np.float32)
    fn = jax.jit(jax.vmap(lambda p: reduced_flow(jnp.asarray(th0), p, p, 1.0, t_max=settings.t_max, dt=settings.dt,
                                                 n_save=400)))
    esc = fn(jnp.asarray(diag, F32))
    losses = jax.vmap(jax.vmap(reduced_loss, in_axes=(0, None, None, None)), in_axes=(0, 0, 0, None))(
        esc.path, jnp.asarray(diag, F32), jnp.asarray(diag, F32), 1.0)
    h_rate, h_pi = reference_losses(diag, diag)
    escape = dict(p=diag, times=np.asarray(esc.times[0]), loss=np.asarray(losses), h_pi=h_pi, h_rate=h_rate)
    optimizers = {}
    p, q = high
    th0 = jnp.asarray([0.05, 0.03, 0.05, 0.0], F32)
    for name, opt in (("adam (lr 1e-2)", optax.adam(1e-2, b1=0.9, b2=0.95)), ("gradient descent (lr 0.5)",
                                                                               optax.sgd(0.5))):
        steps, path = reduced_optimizer_path(th0, p, q, 1.0, opt, 2000)
        optimizers[name] = dict(steps=np.asarray(steps), path=np.asarray(path))
    return ReducedPicture(runs=runs, basins=basins, trajectories=trajectories, escape=escape, optimizers=optimizers,
                          settings=dict(dataclasses.asdict(settings), seeds=seeds, pq_values=pq.tolist(),
                                        basin_b0=0.0, low=list(low), high=list(high)))


def _critical_sets(ax, p, q, ws):
    e_curve = global_minimum_curve(p, q, ws)
    ax.plot(e_curve, ws, "g-", lw=2, label="global minima")
    ax.plot(-e_curve, ws, "g-", lw=2)
    stable = (ws > -1) if p + q > 1 else (ws < -1)
    ax.plot(np.where(stable, 0.0, np.nan), ws, "-", color="orange", lw=3, label="$e=0$: local minima")
    ax.plot(np.where(~stable, 0.0, np.nan), ws, "--", color="orange", lw=1.5, label="$e=0$: saddles")
    ax.axhline(-1, color="0.5", lw=0.6, ls=":")


def plot_reduced_flow(pic: ReducedPicture, path: str) -> str:
    """The reduced model's flow picture: basins and trajectories (p + q < 1, > 1), Adam vs GD, the `(p, q)` phase
    diagrams from Gaussian inits (tied, untied) and escape curves along `p = q`."""
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Circle

    from phasejax.plotting import save_figure

    st = pic.settings
    fig = Figure(figsize=(16, 10.4))
    axes = fig.subplots(2, 3, gridspec_kw=dict(wspace=0.3, hspace=0.5))
    cmap = ListedColormap(["#cfe3f3", "#f6d2c4"])
    for ax, key in zip(axes[0, :2], ("p+q<1", "p+q>1")):
        b = pic.basins[key]
        es, ws = b["es"], b["ws"]
        ax.pcolormesh(es, ws, b["stuck"].astype(float), cmap=cmap, vmin=0, vmax=1, shading="nearest")
        tr = pic.trajectories[key]
        for k, pth in enumerate(tr["path"]):
            ax.plot(pth[:, 0], pth[:, 1], "k-", lw=0.8, alpha=0.8,
                    label="flow paths (o start, * end)" if k == 0 else None)
            ax.plot(pth[0, 0], pth[0, 1], "o", mfc="none", mec="k", ms=4)
            ax.plot(pth[-1, 0], pth[-1, 1], "k*", ms=6)
        _critical_sets(ax, b["p"], b["q"], ws)
        ax.add_patch(Circle((0, 0), 2 * st["init_std"], fill=False, color="m", lw=1.2,
                            label=f"Gaussian init, 2 std = {2 * st['init_std']:g}"))
        ax.set_xlim(es[0], es[-1])
        ax.set_ylim(ws[0], ws[-1])
        ax.set_xlabel("embedding scale $e$ (tied: $a = e$)")
        ax.set_ylabel("feed-forward scale $w$")
        ax.set_title(f"p = {b['p']:g}, q = {b['q']:g} (p + q {'<' if key == 'p+q<1' else '>'} 1): basins at $b_0 = 0$\n"
                     "red: flow ends at $H(\\pi)$ (stuck), blue: at the entropy rate", fontsize=9)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    ax = axes[0, 2]
    p, q = st["high"]
    ws = np.linspace(-2.5, 1.0, 200)
    for (name, o), c in zip(pic.optimizers.items(), ("C3", "C0")):
        ax.plot(o["path"][:, 0], o["path"][:, 1], "-", color=c, lw=1.5, label=name)
        ax.plot(o["path"][-1, 0], o["path"][-1, 1], "o", color=c)
    _critical_sets(ax, p, q, ws)
    ax.set_xlim(-1.5, 1.5)
    ax.set_ylim(-2.5, 1.0)
    ax.set_xlabel("embedding scale $e$")
    ax.set_ylabel("feed-forward scale $w$")
    ax.set_title(f"p = {p:g}, q = {q:g}: Adam vs gradient descent, 2000 steps from (0.05, 0.03)\n"
                 "Adam moves $w$ along $e = 0$ to the saddle branch $w < -1$ and escapes", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    r = pic.runs
    pq = np.asarray(st["pq_values"])
    for ax, tied in zip(axes[1, :2], (1, 0)):
        grid = np.full((len(pq), len(pq)), np.nan)
        for i, pv in enumerate(pq):
            for j, qv in enumerate(pq):
                sel = np.isclose(r["p"], pv) & np.isclose(r["q"], qv) & (r["tied"] == tied)
                same = np.all(r["stationary_entropy"][sel] - r["entropy_rate"][sel] < st["tol"])
                grid[j, i] = np.nan if same else np.mean(r["stuck"][sel])
        ax.set_facecolor("0.75")
        m = ax.pcolormesh(pq, pq, grid, cmap="RdBu_r", vmin=0, vmax=1, shading="nearest")
        ax.plot([0, 1], [1, 0], "k-", lw=1.2, label="$p + q = 1$")
        ax.set_xlim(pq[0] - 0.025, pq[-1] + 0.025)
        ax.set_ylim(pq[0] - 0.025, pq[-1] + 0.025)
        ax.set_aspect("equal")
        cb = fig.colorbar(m, ax=ax)
        cb.set_label(r"fraction of seeds stuck at $H(\pi)$")
        ax.set_xlabel("$p$")
        ax.set_ylabel("$q$")
        ax.set_title(f"reduced, {'tied' if tied else 'untied'}: flow to t = {st['t_max']:g}, "
                     f"$\\theta_0 \\sim N(0, {st['init_std']:g}^2 I)$, {st['seeds']} seeds\n"
                     f"grey: $H(\\pi) -$ entropy rate < {st['tol']:g} nats", fontsize=9)
        ax.legend(fontsize=7, loc="lower left")
    ax = axes[1, 2]
    esc = pic.escape
    cm = __import__("matplotlib").colormaps["coolwarm"]
    for k, pv in enumerate(esc["p"]):
        excess = (esc["loss"][k] - esc["h_rate"][k]) / (esc["h_pi"][k] - esc["h_rate"][k])
        ax.plot(esc["times"], excess, color=cm(k / max(1, len(esc["p"]) - 1)), lw=1.3, label=f"p = q = {pv:g}")
    ax.set_xscale("log")
    ax.set_xlabel("gradient-flow time $t$")
    ax.set_ylabel(r"(L $-$ entropy rate) / ($H(\pi)$ $-$ entropy rate)")
    ax.set_ylim(-0.05, 1.1)
    ax.set_title("tied flow from $(e, w, b) = (%g, %g, 0)$ along $p = q$: 1 = stuck, 0 = optimum;\n"
                 "the escape time grows like $1/|p + q - 1|$" % (st["init_std"], 0.5 * st["init_std"]), fontsize=9)
    ax.legend(fontsize=7, ncol=2, loc="lower left")
    fig.suptitle("Reduced (rank-one) model: logit $= b + a e (1 + w|w|) s_n$, exact population loss; "
                 "critical sets: global minima $e^2(1+w|w|) = \\Delta^*$ (green), stationary line $e = 0$ (orange)",
                 fontsize=10)
    return save_figure(fig, path, dpi=100)
