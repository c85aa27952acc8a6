"""Tied attention with a low-rank trainable value matrix (paper appendix C.10, Fig. 13).

The paper's main student is `f_Q(x) = softmax(h h^T) (x + p)` with
`h = (x + p) Q / sqrt(d)` and the identity as value matrix. Appendix C.10
remarks that a low-rank trainable value matrix could be analysed the same way
but leaves it open; appendix E.3 / Fig. 13 report experiments only ("the
results seem to largely resemble the transition line we observed without the
value matrix"). This module is that experiment: the student

    f(x) = softmax(h h^T) (x + p) (I_d + g W_a W_b^T / d),   h = (x + p) Q / sqrt(d),

with tied `Q (d, r)`, value factors `W_a, W_b (d, k)` (`k = value_rank`) and a
gate `g` in {0, 1}. It is trained on the ridge risk

    R = sum_mu ||y^mu - f(x^mu)||^2 / (2d) + lam/2 (||Q||^2 + g ||W_a||^2 + g ||W_b||^2),

so `g = 0` is exactly the paper's tied model (the value factors get zero
gradient and never move) and `g = 1` trains the value map too. The gate is a
traced task column: tied and value runs of the same seed and data are one
vmapped call (`value_run`, swept by `value_sweep` through
`phasejax.sweep.run_chunked`). `W_b` starts at 0 (value map = identity at
init), `W_a` at iid `N(0, 1)` entries; `Q` starts positional or semantic as in
the paper.

There is no theory of this model (paper, C.10): `theory.csv` holds the tied
model's state evolution (`phasejax.phase.phase_diagram`, main setting) as the
reference, and `runs.csv` carries its branch values at each run's point
(`*_tied_theory` columns). `thresholds.csv` compares the empirical `alpha_c`
(where the seed-averaged final training loss of the semantic init drops below
the positional init's, bootstrap error over seeds) of both students with the
tied theory's `alpha_c`.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from phasejax.empirics.data import (
    cast_params,
    check_positive_int,
    checked_size,
    generate_data,
    overlaps,
    run_keys,
    sample_count,
    sample_tokens,
    teacher_labels,
)
from phasejax.empirics.metrics import classify_solution, fresh_test_error
from phasejax.empirics.students import init_weights
from phasejax.empirics.sweep import problem_config
from phasejax.empirics.training import TrainConfig, minimize
from phasejax.extensions._figures import draw_band
from phasejax.extensions._presets import ExtensionPreset, ExtensionRun, alpha_range
from phasejax.extensions._tables import attach_theory, diagram_tables, ExtensionResult, ordered, seed_means
from phasejax.extensions._thresholds import empirical_alpha_c, paired_gap
from phasejax.io import concat_tables
from phasejax.precision import check_float_dtype, dtype_scope
from phasejax.solvers import status_names
from phasejax.sweep import RunOptions, canonical_config, run_chunked, run_options
from phasejax.theory.params import TiedAttentionParams, dot_product_attention, make_params, validate_params

Array = jax.Array

MODELS = ("tied", "value")
"""Student names by gate code: `0` tied (identity value, the paper's model), `1` trainable low-rank value."""

VALUE_INITS = ("positional", "semantic")
"""Inits of `Q` (codes index `phasejax.empirics.INITS`, whose first two entries these are)."""

RUN_COLUMNS = ("alpha", "omega", "seed", "init", "model", "d", "value_rank", "m", "theta", "q", "cos_m",
               "cos_theta", "value_norm", "value_pos", "value_teacher", "train_loss", "test_error",
               "train_loss_tied_theory", "test_error_tied_theory", "n", "grad_norm", "steps", "status",
               "converged", "solution")
"""Columns of `runs.csv`. `m, theta, q` are the per-token overlaps of `Q` as in `theory.csv`
(`m = u_1^T Q / sqrt(d)`, `theta = sigma_1^2 Q*^T Q / d`, `q = sigma_1^2 Q^T Q / d`); `value_norm =
||W_a W_b^T||_F / d` (size of the learnt value correction, 0 for the tied model), `value_pos = u_1^T W_a W_b^T
u_1 / d` (the correction along the positional direction), `value_teacher = Q*^T W_a W_b^T Q* / (d ||Q*||^2)`
(along the teacher); `train_loss = R / n` per sample... see `value_run`; `*_tied_theory`: the tied SE branch
of the run's init at its `(alpha, omega)` (NaN where there is none)."""

DOCUMENTS = ("value_runs",)
"""Extra JSON files of the bundle: `value_runs.json`, the configuration of the sweeps."""

_NAMED = {"init": VALUE_INITS, "model": MODELS, "solution": ("positional", "semantic", "neither")}


# ----------------------------------------------------------------------------
# The student
# ----------------------------------------------------------------------------


class TiedValueAttention(nnx.Module):
    """`softmax(h h^T) (x + p) (I + g W_a W_b^T / d)`, `h = (x + p) Q / sqrt(d)` (module docstring).

    Args:
      Q0: `(d, r)` initial tied query/key weights.
      Wa0, Wb0: `(d, k)` initial value factors.
    The call takes the gate `g` (`()`, 0 or 1, may be traced; 0 switches the value correction off).
    """

    def __init__(self, Q0: Array, Wa0: Array, Wb0: Array):
        if Q0.ndim != 2 or Wa0.ndim != 2 or Wa0.shape != Wb0.shape or Wa0.shape[0] != Q0.shape[0]:
            raise ValueError(f"Q0 must be (d, r) and Wa0, Wb0 (d, k) with the same d, got Q0 {Q0.shape}, "
                             f"Wa0 {Wa0.shape}, Wb0 {Wb0.shape}")
        self.Q = nnx.Param(jnp.asarray(Q0))
        self.Wa = nnx.Param(jnp.asarray(Wa0))
        self.Wb = nnx.Param(jnp.asarray(Wb0))

    def attention_matrix(self, x: Array, p: Array) -> Array:
        """`softmax(h h^T)`, shape `(..., L, L)`."""
        xt = x + p
        h = xt @ self.Q[...] / jnp.sqrt(jnp.asarray(xt.shape[-1], xt.dtype))
        return jnp.vectorize(dot_product_attention, signature="(l,r)->(l,m)")(h)

    def values(self, x: Array, p: Array, gate=1.0) -> Array:
        """`(x + p) (I + g W_a W_b^T / d)`, shape `(..., L, d)` (never forms the `d x d` matrix)."""
        xt = x + p
        return xt + gate * (xt @ self.Wa[...]) @ self.Wb[...].T / xt.shape[-1]

    def __call__(self, x: Array, p: Array, gate=1.0) -> Array:
        return self.attention_matrix(x, p) @ self.values(x, p, gate)


def value_risk(graphdef, weights, gate, x: Array, y: Array, p: Array, mask: Array, lam, value_lam=0.0) -> Array:
    """Masked ridge risk `R` of the module docstring for `x, y (n, L, d)`, `p (L, d)`, `mask (n,)`.

    `lam` penalises `Q`, `value_lam` the value factors (times the gate, so at `gate = 0` they get exactly
    zero gradient).
    """
    pred = nnx.merge(graphdef, weights)(x, p, gate)
    per_sample = jnp.sum((y - pred) ** 2, axis=(1, 2)) / (2.0 * x.shape[-1])
    per_sample = jnp.where(mask, per_sample, 0.0)
    value_ridge = jnp.sum(weights["Wa"][...] ** 2) + jnp.sum(weights["Wb"][...] ** 2)
    return jnp.sum(per_sample) + 0.5 * lam * jnp.sum(weights["Q"][...] ** 2) + 0.5 * value_lam * gate * value_ridge


# ----------------------------------------------------------------------------
# One run, pure in its array arguments
# ----------------------------------------------------------------------------


def value_run(seed, alpha, omega, init, gate, *, params: TiedAttentionParams, d: int, n_max: int,
              value_rank: int = 1, value_lam: float = 0.0, config: TrainConfig = TrainConfig(),
              n_test: int = 1000, n=None, dtype=jnp.float32) -> dict[str, Array]:
    """One run: data of `seed` (as `phasejax.empirics.train_run`), init, train, measure. Vmap over the arrays.

    Args:
      seed: `()` int; alpha, omega: `()`; init: `()` code into `VALUE_INITS`; gate: `()` code into `MODELS`.
      params: the problem template (`alpha`, `omega` replaced); `d`, `n_max`, `value_rank` static.
      n: `()` sample count (default `round(alpha d)`); the run uses the first `n` of `n_max` samples.
    Returns:
      scalars `m, theta, q, cos_m, cos_theta, value_norm, value_pos, value_teacher, train_loss (= R / d at the
      minimum, ridge included, as in the paper's e_t), test_error (fresh samples, per entry), n, grad_norm,
      steps, status, converged, solution`.
    """
    dtype = check_float_dtype(dtype)
    p_ = cast_params(params, dtype).replace(alpha=jnp.asarray(alpha).astype(dtype),
                                              omega=jnp.asarray(omega).astype(dtype))
    keys = run_keys(seed)
    data = generate_data(keys["data"], p_, d, n_max, dtype=dtype)
    x, y, p, u, Qstar = data.x, data.y, data.p, data.u, data.Qstar
    n = jnp.round(jnp.asarray(alpha, dtype) * d).astype(jnp.int32) if n is None else jnp.asarray(n, jnp.int32)
    mask = jnp.arange(n_max) < n
    gate = jnp.asarray(gate).astype(dtype)

    Q0 = init_weights(init, keys["init"], u, Qstar, params.r)
    k_value = jax.random.fold_in(keys["init"], 1)
    Wa0 = jax.random.normal(k_value, (d, value_rank), jnp.float32).astype(dtype)
    Wb0 = jnp.zeros((d, value_rank), dtype)
    graphdef, weights = nnx.split(TiedValueAttention(Q0, Wa0, Wb0), nnx.Param)
    res = minimize(lambda w: value_risk(graphdef, w, gate, x, y, p, mask, p_.lam,
                                                 jnp.asarray(value_lam, dtype)), weights, config)
    model = nnx.merge(graphdef, res.params)
    x_test = sample_tokens(keys["test"], p_.sigma, d, n_test, dtype)
    test_error = fresh_test_error(lambda xs, ps: model(xs, ps, gate), x_test, teacher_labels(x_test, Qstar, p_), p)

    Q, Wa, Wb = res.params["Q"][...], res.params["Wa"][...], res.params["Wb"][...]
    ov = overlaps(Q, u, Qstar)
    s1 = p_.sigma[0] ** 2
    q0, m_, theta0 = ov["q0"][0, 0], ov["m"][0, 0], ov["theta0"][0, 0]
    norm = jnp.sqrt(jnp.maximum(q0, jnp.finfo(dtype).tiny))
    cos_m = jnp.abs(m_) / norm
    cos_theta = jnp.abs(theta0) / (norm * jnp.linalg.norm(Qstar[:, 0]) / np.sqrt(d))
    # ||W_a W_b^T||_F^2 = tr((W_a^T W_a)(W_b^T W_b)), without forming the d x d matrix
    value_norm = gate * jnp.sqrt(jnp.maximum(jnp.trace((Wa.T @ Wa) @ (Wb.T @ Wb)), 0.0)) / d
    value_pos = gate * (u[0] @ Wa) @ (Wb.T @ u[0]) / d
    qs = Qstar[:, 0]
    value_teacher = gate * (qs @ Wa) @ (Wb.T @ qs) / (d * (qs @ qs))
    return dict(n=n, m=m_, theta=s1 * theta0, q=s1 * q0, cos_m=cos_m, cos_theta=cos_theta,
                value_norm=value_norm, value_pos=value_pos, value_teacher=value_teacher,
                train_loss=res.loss / d, test_error=test_error, grad_norm=res.grad_norm, steps=res.steps,
                status=res.status, converged=res.converged, solution=classify_solution(cos_m, cos_theta))


# ----------------------------------------------------------------------------
# The sweep
# ----------------------------------------------------------------------------


def _round12(values) -> tuple[float, ...]:
    return tuple(float(f"{float(v):.12g}") for v in values)


@dataclasses.dataclass(frozen=True)
class ValueGrid:
    """Runs at one dimension `d`: `alphas x omegas x inits x models x seeds` (validated; `ValueError` naming the field).

    `tasks()` is the flat table in order `(model, omega, alpha, init, seed)` with exact `n = round(alpha d)`
    (model outermost: a chunk holds one student, so the fast tied runs do not wait for the value runs).
    """

    alphas: tuple[float, ...]
    omegas: tuple[float, ...] = (0.3,)
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    inits: tuple[str, ...] = VALUE_INITS
    models: tuple[str, ...] = MODELS
    d: int = 200

    def __post_init__(self):
        for name in ("alphas", "omegas"):
            try:
                v = np.atleast_1d(np.asarray(getattr(self, name), dtype=float))
            except (TypeError, ValueError):
                raise ValueError(f"{name} must be a sequence of numbers, got {getattr(self, name)!r}") from None
            if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)):
                raise ValueError(f"{name} must be a non-empty sequence of finite numbers, got {getattr(self, name)!r}")
            object.__setattr__(self, name, _round12(v))
        if any(w < 0 or w > 1 for w in self.omegas):
            raise ValueError(f"omegas must lie in [0, 1], got omegas={self.omegas}")
        seeds = np.atleast_1d(np.asarray(self.seeds, dtype=object))
        if seeds.ndim != 1 or seeds.size == 0:
            raise ValueError(f"seeds must be a non-empty sequence of integers >= 0, got {self.seeds!r}")
        for s in seeds:
            if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer, float, np.floating)) \
                    or not np.isfinite(s) or int(s) != s or s < 0:
                raise ValueError(f"seeds must be integers >= 0, got {s!r} in seeds={self.seeds!r}")
        object.__setattr__(self, "seeds", tuple(int(s) for s in seeds))
        for name, allowed in (("inits", VALUE_INITS), ("models", MODELS)):
            v = getattr(self, name)
            v = (v,) if isinstance(v, str) else tuple(v)
            if not v or any(i not in allowed for i in v) or len(set(v)) != len(v):
                raise ValueError(f"{name} must be distinct names from {allowed}, got {getattr(self, name)!r}")
            object.__setattr__(self, name, v)
        object.__setattr__(self, "d", checked_size(self.alphas, self.d))   # alpha d >= 1 at every alpha

    @property
    def n_max(self) -> int:
        return max(sample_count(a, self.d) for a in self.alphas)

    def tasks(self) -> dict[str, np.ndarray]:
        inits = [VALUE_INITS.index(i) for i in self.inits]
        models = [MODELS.index(m) for m in self.models]
        g, w, a, i, s = np.meshgrid(models, self.omegas, self.alphas, inits, self.seeds, indexing="ij")
        n = np.asarray([sample_count(v, self.d) for v in a.ravel()], np.int32)
        return dict(omega=w.ravel(), alpha=a.ravel(), init=i.ravel().astype(np.int32),
                    model=g.ravel().astype(np.int32), seed=s.ravel().astype(np.int64), n=n)

    def to_json(self) -> dict:
        return dict(alphas=list(self.alphas), omegas=list(self.omegas), seeds=list(self.seeds),
                    inits=list(self.inits), models=list(self.models), d=self.d)


def make_value_fn(grid: ValueGrid, params: TiedAttentionParams, **kwargs):
    """Pure batch function `{seed, alpha, omega, init, model, n} (C,) -> metrics (C,)` for `run_chunked`."""
    one = functools.partial(value_run, params=params, d=grid.d, n_max=grid.n_max, **kwargs)

    def fn(chunk):
        cols = [jnp.asarray(chunk[k]) for k in ("seed", "alpha", "omega", "init", "model", "n")]
        return jax.vmap(lambda s, a, w, i, g, n: one(s, a, w, i, g, n=n))(*cols)

    return fn




def value_sweep(grid: ValueGrid, params: TiedAttentionParams | None = None, *, value_rank: int = 1,
                value_lam: float = 0.0, config: TrainConfig = TrainConfig(), n_test: int = 1000, dtype=jnp.float32,
                options: RunOptions | None = None) -> tuple[dict, dict] | None:
    """Train every run of `grid` (tied and value students on the same data), vmapped and chunked.

    Args:
      grid: `ValueGrid`; params: problem template (default `make_params(1, 0)`, the paper's setting).
      value_rank: `k >= 1`, rank of the value correction; value_lam: ridge on `W_a, W_b` (default 0: with the
        paper's `lam = 0.01` on the factors, the penalty `value_lam d ||V||_*` on `V = W_a W_b^T / d` outweighs
        the O(1) gain of a low-rank correction and the trained correction is exactly 0; measured at d = 100,
        `||V||_F = 1e-11`); config: `TrainConfig` (default L-BFGS).
      n_test: fresh test sequences per run; dtype: float32 (default) or float64.
      options: `RunOptions` (run directory for resuming, chunk size, devices, hosts).
    Returns: `(runs, config)`: the runs (columns `RUN_COLUMNS`, names for init, model, solution and status; the
      `*_tied_theory` columns NaN, `attach_tied_theory` fills them) and the sweep's configuration (JSON), or
      `None` while chunks are missing.
    """
    if not isinstance(grid, ValueGrid):
        raise ValueError(f"grid must be a ValueGrid, got {type(grid).__name__}")
    params = make_params(1.0, 0.0) if params is None else validate_params(params)
    if params.r != 1 or params.t != 1 or params.K != 1:
        raise ValueError(f"params must have r = t = K = 1 (the paper's setting), got r={params.r}, t={params.t}, "
                         f"K={params.K}")
    if isinstance(value_rank, (bool, np.bool_)) or not isinstance(value_rank, (int, np.integer)) or value_rank < 1:
        raise ValueError(f"value_rank must be an integer >= 1, got value_rank={value_rank!r}")
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    n_test = check_positive_int(n_test, "n_test")
    if isinstance(value_lam, (bool, np.bool_)) or not isinstance(value_lam, (int, float, np.number)) \
            or not np.isfinite(value_lam) or value_lam < 0:
        raise ValueError(f"value_lam must be a finite number >= 0, got value_lam={value_lam!r}")
    dtype = check_float_dtype(dtype)
    kw = dict(value_rank=int(value_rank), value_lam=float(value_lam), config=config, n_test=n_test)
    cfg = dict(kind="value_sweep", grid=grid.to_json(), value_rank=int(value_rank), value_lam=float(value_lam),
               train=dataclasses.asdict(config), n_test=n_test, dtype=str(np.dtype(dtype)),
               value_init="W_a ~ N(0, 1) from fold_in(run_keys(seed)['init'], 1), W_b = 0",
               data="generate_data(run_keys(seed)['data'], params, d, n_max)", **problem_config(params))
    tasks = grid.tasks()
    with dtype_scope(dtype):
        out = run_chunked(make_value_fn(grid, params, dtype=dtype, **kw), tasks, cfg, run_options(options))
    if out is None:
        return None
    size = len(tasks["alpha"])
    runs = {k: np.asarray(v) for k, v in out.items()}
    runs.update(tasks)
    runs["d"] = np.full(size, grid.d)
    runs["value_rank"] = np.full(size, int(value_rank))
    runs["converged"] = runs["converged"].astype(bool)
    runs["train_loss_tied_theory"] = np.full(size, np.nan)
    runs["test_error_tied_theory"] = np.full(size, np.nan)
    for k, names in _NAMED.items():
        runs[k] = np.asarray(names)[runs[k].astype(int)]
    runs["status"] = status_names(runs["status"])
    return {k: runs[k] for k in RUN_COLUMNS}, canonical_config(cfg)


# ----------------------------------------------------------------------------
# Reference theory, thresholds, outputs, figure
# ----------------------------------------------------------------------------

THRESHOLD_COLUMNS = ("omega", "source", "model", "d", "alpha_c", "alpha_c_err", "alpha_c_status", "alpha_l",
                     "alpha_l_err", "alpha_l_status", "n_seeds")
"""Columns of `thresholds.csv`: `source` `theory` (tied state evolution, `d = inf`, 95% quadrature errors)
or `experiment` (seed-averaged crossing, 95% bootstrap half-width over seeds); `model` tied or value."""


def experiment_thresholds(runs: dict) -> dict[str, list]:
    """Empirical `alpha_c` per `(omega, d, model)` of `runs` (names for init and model): where the seed mean of
    `e_t(semantic) - e_t(positional)` crosses zero (`framework.empirical_alpha_c`)."""
    out = {k: [] for k in THRESHOLD_COLUMNS}
    r = {k: np.asarray(v) for k, v in runs.items()}
    for w in np.unique(r["omega"]):
        for d in np.unique(r["d"]):
            for g in np.unique(r["model"]):
                sel = (r["omega"] == w) & (r["d"] == d) & (r["model"] == g)
                alphas, delta = paired_gap(r, sel)
                t = empirical_alpha_c(alphas, delta)
                for k, v in zip(THRESHOLD_COLUMNS, (float(w), "experiment", str(g), int(d), t["alpha_c"],
                                                    t["alpha_c_err"], t["alpha_c_status"], float("nan"),
                                                    float("nan"), "not_computed", int(delta.shape[0]))):
                    out[k].append(v)
    return out


def theory_reference(alphas, omegas, params: TiedAttentionParams | None = None, *, options: RunOptions | None = None):
    """The tied model's phase diagram (`phasejax.phase.phase_diagram`, main setting) on `alphas x omegas`."""
    from phasejax.phase import PhaseGrid, phase_diagram

    params = make_params(1.0, float(omegas[0])) if params is None else params
    return phase_diagram(PhaseGrid(tuple(alphas), tuple(omegas)), params, options=options)


def attach_tied_theory(runs: dict, theory: dict) -> dict:
    """`runs` with `train_loss_tied_theory`, `test_error_tied_theory` from the tied SE branch of each run's init
    at its `(omega, alpha)` (NaN where the branch has no fixed point there)."""
    return attach_theory(runs, theory, suffix="_tied_theory", branch=runs["init"])


def plot_value(result: ExtensionResult, *, omega: float, value_rank: int):
    """Fig. 13-style figure at one `omega`: training loss, test error, `m`, `theta` against `alpha`.

    Lines: tied state evolution (both branches, 95% quadrature bands). Markers: seed means (error bars: standard
    error over seeds) of the tied (open) and value (filled) students, positional / semantic init, largest `d`
    (the smaller `d` as small faint markers). Dotted verticals: alpha_c (tied theory, black; experiments)."""
    from matplotlib.figure import Figure

    r = {k: np.asarray(v) for k, v in result.runs.items()}
    th = {k: np.asarray(v) for k, v in result.theory.items()}
    colors = dict(positional="tab:blue", semantic="tab:red")
    fig = Figure(figsize=(11.5, 8.2))
    axes = fig.subplots(2, 2).ravel()
    panels = (("train_loss", "training loss $e_t$"), ("test_error", r"test error $\epsilon_g$"),
              ("m", "positional overlap $m$"), ("theta", r"semantic overlap $\theta$"))
    ds = np.unique(r["d"])
    for ax, (key, label) in zip(axes, panels):
        for b, c in colors.items():
            sel = np.isclose(th["omega"], omega) & (th["branch"] == b)
            draw_band(ax, th["alpha"][sel], th[key][sel], th.get(key + "_err", np.zeros(len(th[key])))[sel],
                      color=c, lw=1.4, label=f"tied theory, {b}")
        for d in ds:
            big = d == ds.max()
            for b in VALUE_INITS:
                for g, model in enumerate(MODELS):
                    sel = np.isclose(r["omega"], omega) & (r["d"] == d) & (r["init"] == b) & (r["model"] == model)
                    if not sel.any():
                        continue
                    sm = seed_means({k: v[sel] for k, v in r.items()}, key, ("alpha",), sort=True)
                    shift = (-0.012 if g == 0 else 0.012) * (1 if big else 0.5)
                    ax.errorbar(sm["alpha"] + shift, sm[f"{key}_mean"], yerr=sm[f"{key}_sem"], fmt="o" if g else "s",
                                ms=6 if big else 3, mfc=colors[b] if g else "white", mec=colors[b], ecolor=colors[b],
                                alpha=1.0 if big else 0.45, lw=1, capsize=2,
                                label=f"{model} student, {b} init, d={d}" if key == "train_loss" else None)
        t = {k: np.asarray(v) for k, v in result.thresholds.items()}
        for i in range(len(t["alpha_c"])):
            if not np.isclose(t["omega"][i], omega) or not np.isfinite(t["alpha_c"][i]):
                continue
            if t["source"][i] == "theory":
                ax.axvline(t["alpha_c"][i], color="k", ls=":", lw=1.2)
            elif t["d"][i] == ds.max():
                ax.axvline(t["alpha_c"][i], color="0.5" if t["model"][i] == "tied" else "tab:green",
                           ls="--", lw=1.0)
        ax.set_xlabel(r"sample complexity $\alpha = n / d$")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, lw=0.5)
    axes[0].legend(fontsize=6.5, ncol=2, loc="upper right", framealpha=0.85)
    fig.suptitle(f"Tied attention with a trainable rank-{value_rank} value map $I + W_a W_b^T/d$ vs the tied model, "
                 f"$\\omega={omega}$\nlines: tied state evolution (bands: 95% quadrature error); markers: seed means "
                 f"(error bars: standard error over seeds); verticals: $\\alpha_c$ tied theory (black dotted), "
                 f"experiments d={ds.max()} (grey: tied, green: value, dashed)", fontsize=9.5)
    fig.tight_layout()
    return fig


@dataclasses.dataclass(frozen=True, kw_only=True)
class ValuePreset(ExtensionPreset):
    """`ExtensionPreset` with the omegas, the value map's rank and the students' training; the seeds and the
    alphas may differ per dimension (`seeds_by_d`, `train_alphas_by_d`; `ds` are the keys of `seeds_by_d`)."""

    omegas: tuple[float, ...]
    seeds_by_d: dict
    train_alphas_by_d: dict = dataclasses.field(default_factory=dict)
    value_rank: int = 1
    train: TrainConfig = TrainConfig()

    def seeds_at(self, d: int) -> tuple[int, ...]:
        return tuple(self.seeds_by_d[d])

    def train_alphas_at(self, d: int) -> tuple[float, ...]:
        return tuple(self.train_alphas_by_d.get(d, self.train_alphas))


PRESETS = {
    # one omega, 5 alphas around the tied alpha_c(0.3) = 1.25, d in {200, 800}; the value runs stop at max_steps
    # (status max_iterations): the unpenalised value map converges slowly along low-curvature directions while
    # the loss has long settled
    "cpu": ValuePreset(omegas=(0.3,), train_alphas=(0.75, 1.0, 1.25, 1.5, 1.75), seeds=(),
                       seeds_by_d={200: (0, 1, 2, 3), 800: (0, 1, 2)}, ds=(200, 800),
                       train_alphas_by_d={800: (1.0, 1.25, 1.5)}, alphas=alpha_range(0.5, 2.01, 0.1, 2), value_rank=1,
                       train=TrainConfig(max_steps=1500)),
    "gpu": ValuePreset(omegas=(0.1, 0.2, 0.3, 0.4), train_alphas=alpha_range(0.5, 2.51, 0.125, 3), seeds=(),
                       seeds_by_d={200: tuple(range(8)), 800: tuple(range(8)), 1600: tuple(range(5))},
                       ds=(200, 800, 1600), alphas=alpha_range(0.3, 2.51, 0.05, 2), value_rank=1,
                       train=TrainConfig(max_steps=10000)),
}
"""`cpu`: the committed results; `gpu`: larger grids, more seeds and sizes."""


def run_experiments(P: ValuePreset, run: ExtensionRun = ExtensionRun()) -> tuple[dict, dict]:
    """The preset's sweeps, one per `d` (resumable under `run.run_dir/runs_d<d>`), concatenated: `(runs, config)`."""
    parts = []
    for d in P.ds:
        grid = ValueGrid(alphas=P.train_alphas_at(d), omegas=P.omegas, seeds=P.seeds_at(d), d=d)
        parts.append(value_sweep(grid, value_rank=P.value_rank, config=P.train, options=run.options(f"runs_d{d}", 8)))
    return concat_tables([p[0] for p in parts]), dict(parts=[p[1] for p in parts])


def compute(preset: str, P: ValuePreset, *, run: ExtensionRun = ExtensionRun()) -> ExtensionResult:
    """The tied reference theory and the tied and value students of the preset `P` (named `preset`), resumable
    under `run.run_dir`."""
    pd = theory_reference(P.alphas, P.omegas, options=run.options("theory", 8))
    theory, theory_thresholds = diagram_tables(pd, first=("alpha", "omega", "branch"))
    runs, runs_config = run_experiments(P, run)
    t = theory_thresholds
    thresholds = {k: [] for k in THRESHOLD_COLUMNS}
    for i, w in enumerate(t["omega"]):
        row = (float(w), "theory", "tied", 0, float(t["alpha_c"][i]), float(t["alpha_c_err"][i]),
               str(t["alpha_c_status"][i]), float(t["alpha_l"][i]), float(t["alpha_l_err"][i]),
               str(t["alpha_l_status"][i]), 0)
        for k, v in zip(THRESHOLD_COLUMNS, row):
            thresholds[k].append(v)
    summary = dict(
        preset=preset, value_rank=P.value_rank, omegas=list(P.omegas), alphas=list(P.train_alphas),
        seeds={str(d): list(P.seeds_at(d)) for d in P.ds},
        alphas_by_d={str(k): list(v) for k, v in P.train_alphas_by_d.items()},
        train=dataclasses.asdict(P.train), value_lam=0.0, theory=pd.config,
        note="theory.csv is the tied model's state evolution (main setting), the reference: the value model has "
             "no theory (paper, appendix C.10)")
    return finish(ExtensionResult(theory=theory, runs=runs, thresholds=thresholds, summary=summary,
                                  documents=dict(value_runs=dict(config=runs_config))))


def replicon_problem(P):
    """`phasejax.extensions.stability.Problem` of the tied reference rows (`theory_reference`: the main setting,
    default scheme)."""
    return lambda row: (make_params(1.0, float(row["omega"])), None)


def finish(result: ExtensionResult) -> ExtensionResult:
    """The parts derived from `theory` and `runs`: the tied theory at each run, the experiments' thresholds
    (after the theory's rows of `result.thresholds`)."""
    runs = attach_tied_theory(result.runs, result.theory)
    theory_rows = np.asarray(result.thresholds["source"]) == "theory"
    exp = experiment_thresholds(runs)
    thresholds = {k: list(np.asarray(v, dtype=object)[theory_rows]) + exp[k] for k, v in result.thresholds.items()}
    return dataclasses.replace(result, runs=ordered(runs, RUN_COLUMNS, only=True), thresholds=thresholds)


def figures(result: ExtensionResult) -> dict:
    """`value_omega_<omega>.png` per omega (`plot_value`)."""
    rank = int(result.summary["value_rank"])
    return {f"value_omega_{w}.png": plot_value(result, omega=w, value_rank=rank) for w in result.summary["omegas"]}
