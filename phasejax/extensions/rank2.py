"""Rank-2 tied student learning a rank-1 teacher (paper appendix E.3, Fig. 11).

Theory: the state evolution of docs/theory.md sections 2-4 with `r = 2, t = 1`
(`q0, V0 (2, 2)`, `m (1, 2)`, `theta0 (1, 2)`), solved from the paper's three
initialisations of the two columns of `Q`:

* `"positional"`: both columns positional (`theta0` held at 0, its invariant subspace);
* `"semantic"`: both columns semantic (`m` held at 0 in the token-swap-symmetric problem);
* `"mixed"`: one column of each (`m` and `theta0` free).

**Gauge.** The tied student depends on `Q` only through `Q Q^T`, so the SE is
invariant under `Q -> Q R` (`R` orthogonal 2 x 2):
`(q0, m, V0, theta0) -> (R^T q0 R, m R, R^T V0 R, theta0 R)` (`rotate_overlaps`).
Fixed points form orbits, `I - J` is singular along them, and an unfixed Newton
solve drifts along the orbit (the quadrature breaks the symmetry only at the
level of its error, so the residual never drops below tolerance). Every init
here fixes the gauge (`BranchInit.gauge`, coordinates held at their init
value without touching the hats): `m_2 = 0` (positional), `theta0_2 = 0`
(semantic), `q0_12 = 0` (mixed: the columns orthogonal). Reported overlaps
are rotation invariants: `q = sigma_1^2 tr q0`, `m = |m|`,
`theta = sigma_1^2 |theta0|`, plus `q_eig1 >= q_eig2` (per token) and the
raw entries in the gauge frame (`q0_i, m0_i, theta0_i`).

Experiments: tied rank-2 students (`phasejax.empirics.TiedAttention`, `r = 2`)
trained by L-BFGS from the same three inits (`init_columns`, plus a small
random part that breaks the column-swap symmetry), swept with `run_chunked`.
Outputs, thresholds and the figure come from `phasejax.extensions.framework`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from phasejax.empirics.data import generate_data, run_keys, sample_tokens, teacher_labels
from phasejax.empirics.students import positional_init, random_init, semantic_init
from phasejax.empirics.training import TrainConfig, minimize
from phasejax.extensions._figures import branch_figure
from phasejax.extensions._presets import ExtensionRun, OmegaGridPreset, alpha_range, sobol_rule
from phasejax.extensions._tables import (
    EXTENSION_SE_CONFIG, agreement, attach_theory, continuation_table, ExtensionResult, ordered, scheme_config,
    train_students_table,
)
from phasejax.extensions._thresholds import branch_thresholds, mark_global_minimum
from phasejax.io import concat_tables
from phasejax.precision import float64_scope
from phasejax.sweep import RunOptions
from phasejax.theory.fields import Overlaps
from phasejax.theory.gram import gram_inputs, gram_risk
from phasejax.theory.params import TiedAttentionParams, make_params, token_swap_symmetric
from phasejax.theory.quadrature import SobolRule
from phasejax.theory.branches import BranchInit
from phasejax.theory.solver import MapApproximation, SEConfig

Array = jax.Array

NAME = "rank2"
INITS = ("positional", "semantic", "mixed")
"""The three initialisations of the two columns of `Q` (both positional, both semantic, one of each)."""

RANK2_APPROXIMATION = MapApproximation(tie_width=1e-3)
"""The rank-2 rows' map (solved with `EXTENSION_SE_CONFIG`): the smoothed selection of each node's prox minima
(`tie_width = 1e-3`, theory notes section 8.5). With the hard selection the semantic row and the mixed
point at `alpha = 2.3` stopped at the iteration cap: on the `2^11`-point rule a node or two switch minimum
between iterations, and the map has no exact fixed point."""


# ----------------------------------------------------------------------------
# Parameters, inits, the rotation symmetry
# ----------------------------------------------------------------------------


def rank2_params(alpha=1.0, omega=0.3, *, sigma=0.5, lam=0.01, A=((0.6, 0.4), (0.4, 0.6))) -> TiedAttentionParams:
    """The paper's setting with a rank-2 student and a rank-1 teacher (`r = 2, t = 1`)."""
    return make_params(alpha, omega, sigma=sigma, lam=lam, A=A, r=2, t=1)


def overlap_mask(ov: Overlaps, **entries) -> Array:
    """`(n,)` bool over `ravel(ov)`, True at the given entries, e.g. `overlap_mask(ov, m=[(0, 1)])`."""
    masks = {k: np.zeros(np.shape(getattr(ov, k)), bool) for k in ("q0", "m", "V0", "theta0")}
    for name, idx in entries.items():
        for i in idx:
            masks[name][i] = True
    return ravel_pytree(Overlaps(**{k: jnp.asarray(v) for k, v in masks.items()}))[0].astype(bool)


def rank2_init(name: str, params: TiedAttentionParams) -> BranchInit:
    """Init, invariant subspace and gauge of one of `INITS` for `r = 2, t = 1, K = 1` (module docstring).

    Per-token defaults as `phasejax.theory.branches.BRANCH_DEFAULTS`: positional columns `q = 0.02, m = 0.2`,
    semantic columns `q = 0.9, theta = 0.35`, `V = 14.6`, divided by the mean `sigma^2`.
    """
    if name not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {name!r}")
    if params.r != 2 or params.t != 1 or params.K != 1:
        raise ValueError(f"rank2 inits need r=2, t=1, K=1, got r={params.r}, t={params.t}, K={params.K}")
    dt = params.sigma.dtype
    s2 = float(np.mean(np.asarray(params.sigma) ** 2))
    V0 = 14.6 / s2 * jnp.eye(2, dtype=dt)
    if name == "positional":
        ov = Overlaps(q0=0.02 / s2 * jnp.eye(2, dtype=dt), m=jnp.asarray([[0.2, 0.0]], dt), V0=V0,
                      theta0=jnp.zeros((1, 2), dt))
        hold_m, hold_theta, gauge = jnp.asarray(False), jnp.asarray(True), dict(m=[(0, 1)])
    elif name == "semantic":
        ov = Overlaps(q0=jnp.diag(jnp.asarray([0.9, 0.02], dt)) / s2, m=jnp.zeros((1, 2), dt), V0=V0,
                      theta0=jnp.asarray([[0.35 / s2, 0.0]], dt))
        hold_m, hold_theta, gauge = token_swap_symmetric(params), jnp.asarray(False), dict(theta0=[(0, 1)])
    else:
        ov = Overlaps(q0=jnp.diag(jnp.asarray([0.02, 0.9], dt)) / s2, m=jnp.asarray([[0.2, 0.0]], dt), V0=V0,
                      theta0=jnp.asarray([[0.0, 0.35 / s2]], dt))
        hold_m, hold_theta, gauge = jnp.asarray(False), jnp.asarray(False), dict(q0=[(0, 1), (1, 0)])
    return BranchInit(overlaps=ov, hold_m=hold_m, hold_theta=hold_theta, gauge=overlap_mask(ov, **gauge))


def rotation(angle, dtype=jnp.float32) -> Array:
    """`(2, 2)` rotation matrix by `angle` (radians) in `dtype` (float64 inside `phasejax.float64_scope`)."""
    angle = jnp.asarray(angle, dtype)
    c, s = jnp.cos(angle), jnp.sin(angle)
    return jnp.stack([jnp.stack([c, -s]), jnp.stack([s, c])])


def rotate_overlaps(ov: Overlaps, R: Array) -> Overlaps:
    """The overlaps of `Q R`: `(R^T q0 R, m R, R^T V0 R, theta0 R)` (the tied student's symmetry)."""
    return Overlaps(q0=R.T @ ov.q0 @ R, m=ov.m @ R, V0=R.T @ ov.V0 @ R, theta0=ov.theta0 @ R)


def rotate_nodes(points: Array, R: Array, params: TiedAttentionParams) -> Array:
    """Quadrature nodes `(N, L (r + t))` with every token's `xi_l` mapped to `R^T xi_l` (eta unchanged): the
    rule under which `F(rotate(x)) = rotate(F(x))` holds exactly, node by node."""
    L, r = params.L, params.r
    xi = points[:, : L * r].reshape(-1, L, r) @ R      # row vectors: xi_l^T R = (R^T xi_l)^T
    return jnp.concatenate([xi.reshape(-1, L * r), points[:, L * r:]], axis=1)


def invariant_columns(ov: Overlaps, sigma: Array, err: Overlaps | None = None) -> dict[str, Array]:
    """Rotation invariants: `q = s1 tr q0`, `m = |m|`, `theta = s1 |theta0|`, `q_eig1 >= q_eig2 = s1 eig(q0)`
    (`s1 = sigma_1^2`); with `err` also `q_err, m_err, theta_err` (root-sum-square of the entries' errors)."""
    s1 = sigma[0] ** 2
    ev = jnp.linalg.eigvalsh(0.5 * (ov.q0 + ov.q0.T))
    cols = dict(q=s1 * jnp.trace(ov.q0), m=jnp.linalg.norm(ov.m), theta=s1 * jnp.linalg.norm(ov.theta0),
                q_eig1=s1 * ev[-1], q_eig2=s1 * ev[0])
    if err is not None:
        cols.update(q_err=s1 * jnp.sqrt(jnp.sum(jnp.diag(err.q0) ** 2)), m_err=jnp.linalg.norm(err.m),
                    theta_err=s1 * jnp.linalg.norm(err.theta0))
    return cols


def classify_fixed_point(m_norm, theta_norm, tol: float = 1e-4) -> np.ndarray:
    """Name of a fixed point from `|m|`, `|theta|`: positional / semantic / mixed / agnostic."""
    pos, sem = np.asarray(m_norm) > tol, np.asarray(theta_norm) > tol
    return np.where(pos & sem, "mixed", np.where(pos, "positional", np.where(sem, "semantic", "agnostic")))


# ----------------------------------------------------------------------------
# Experiments
# ----------------------------------------------------------------------------


def init_columns(code, key: Array, u: Array, Qstar: Array, *, m0: float = 0.5, noise: float = 0.1) -> Array:
    """`Q0 (d, 2)` for init code (index into `INITS`): columns positional (`m0 sqrt(d) u`) or semantic (`Q*`),
    both / both / one of each, plus iid `N(0, noise^2)` entries (break the column-swap symmetry, which
    gradient descent would otherwise keep). `code` may be traced."""
    pos = positional_init(u, 1, m0)[:, 0]
    sem = semantic_init(Qstar, 1)[:, 0]
    cols = jnp.stack([jnp.stack([pos, pos], 1), jnp.stack([sem, sem], 1), jnp.stack([pos, sem], 1)])[code]
    return cols + random_init(key, u.shape[1], 2, noise, Qstar.dtype)


RUN_COLUMNS = ("alpha", "omega", "seed", "init", "d", "q", "m", "theta", "q_eig1", "q_eig2", "q0_0", "q0_1",
               "q0_3", "m0_0", "m0_1", "theta0_0", "theta0_1", "train_loss", "test_error", "train_loss_theory",
               "test_error_theory", "n", "grad_norm", "steps", "status")


def rank2_run(seed, alpha, omega, init, n, *, params: TiedAttentionParams, d: int, n_max: int,
              config: TrainConfig = TrainConfig(), n_test: int = 1000, dtype=jnp.float32) -> dict[str, Array]:
    """One run: data of `seed` (`generate_data(run_keys(seed)["data"], ...)`), init `init_columns(init)`,
    L-BFGS on the tied rank-2 risk over the first `n` samples, overlaps and fresh test error.
    Pure in `(seed, alpha, omega, init, n)` (vmap over them)."""
    p_ = params.replace(alpha=jnp.asarray(alpha, dtype), omega=jnp.asarray(omega, dtype),
                        lam=params.lam.astype(dtype), sigma=params.sigma.astype(dtype), A=params.A.astype(dtype),
                        C=params.C.astype(dtype))
    keys = run_keys(seed)
    data = generate_data(keys["data"], p_, d, n_max, dtype=dtype)
    mask = jnp.arange(n_max) < n
    Q0 = init_columns(init, keys["init"], data.u, data.Qstar)
    inputs = gram_inputs(data.x, data.y, data.p)
    res = minimize(lambda w: gram_risk(w["Q"], inputs, p_, mask), {"Q": Q0}, config)
    Q = res.params["Q"]
    x_test = sample_tokens(keys["test"], p_.sigma, d, n_test, dtype)
    xt = x_test + data.p
    pred = jax.nn.softmax(jnp.einsum("nla,nka->nlk", xt @ Q, xt @ Q) / d, axis=-1) @ xt
    err = jnp.mean((teacher_labels(x_test, data.Qstar, p_) - pred) ** 2)
    ov = Overlaps(q0=Q.T @ Q / d, m=data.u @ Q / jnp.sqrt(jnp.asarray(d, dtype)), V0=jnp.eye(2, dtype=dtype),
                  theta0=data.Qstar.T @ Q / d)
    cols = invariant_columns(ov, p_.sigma)
    s1 = p_.sigma[0] ** 2
    cols.update(q0_0=s1 * ov.q0[0, 0], q0_1=s1 * ov.q0[0, 1], q0_3=s1 * ov.q0[1, 1], m0_0=ov.m[0, 0],
                m0_1=ov.m[0, 1], theta0_0=s1 * ov.theta0[0, 0], theta0_1=s1 * ov.theta0[0, 1])
    return dict(cols, train_loss=res.loss / d, test_error=err, n=n, grad_norm=res.grad_norm, steps=res.steps,
                status=res.status)


def train_rank2(alphas, omegas, seeds, *, d: int, params: TiedAttentionParams | None = None, inits=INITS,
                config: TrainConfig = TrainConfig(), n_test: int = 1000,
                options: RunOptions | None = None) -> dict[str, np.ndarray]:
    """Train rank-2 tied students for every `(omega, alpha, init, seed)` at dimension `d` (`rank2_run`)."""
    params = rank2_params() if params is None else params
    return train_students_table(rank2_run, params, alphas, omegas, seeds, d=d, inits=inits, init_names=INITS,
                                kind="rank2_runs", config=config, n_test=n_test, options=options)




# ----------------------------------------------------------------------------
# Theory, outputs, figure
# ----------------------------------------------------------------------------


def theory_extra(res, params) -> dict:
    """Rotation-invariant overlaps (`invariant_columns`) of an SE result, overriding `q, m, theta` and errors."""
    return invariant_columns(res.overlaps, params.sigma, res.errors.overlaps)


def rank2_theory(alphas, omegas, *, params: TiedAttentionParams | None = None, quadrature=None,
                 se_config: SEConfig = EXTENSION_SE_CONFIG, approximation: MapApproximation = RANK2_APPROXIMATION,
                 options: RunOptions | None = None) -> dict[str, np.ndarray]:
    """SE table from the three inits (`INITS`) on `omegas x alphas`: `init`, `branch` (what the fixed point
    is: `classify_fixed_point`), `global_min`, rotation invariants and all `result_columns`."""
    params = rank2_params() if params is None else params
    with float64_scope():
        inits = {n: rank2_init(n, params) for n in INITS}
    quadrature = SobolRule.create(params.L * (params.r + params.t), 10, 4) if quadrature is None else quadrature
    table = continuation_table(params, alphas, omegas, inits, quadrature=quadrature, down=("semantic",),
                               se_config=se_config, approximation=approximation, extra=theory_extra,
                               kind="rank2_theory", options=options)
    table["branch"] = classify_fixed_point(table["m"], table["theta"])
    return mark_global_minimum(table)


def global_minimum_summary(theory: dict) -> list[dict]:
    """Per `(alpha, omega)`: which init's fixed point is the global minimum, what it is, and its `e_t`."""
    sel = np.asarray(theory["global_min"]).astype(bool)
    return [dict(alpha=float(a), omega=float(w), init=str(i), branch=str(b), train_loss=float(e))
            for a, w, i, b, e in zip(theory["alpha"][sel], theory["omega"][sel], theory["init"][sel],
                                     theory["branch"][sel], theory["train_loss"][sel])]


PRESETS = {
    "cpu": OmegaGridPreset(alphas=(0.8, 1.3, 1.8, 2.3), omegas=(0.3,), log2_n=11, n_replicas=4, train_alphas=(1.3, 2.3),
                       train_omegas=(0.3,), seeds=(0, 1, 2), ds=(200, 800)),
    "gpu": OmegaGridPreset(alphas=alpha_range(0.2, 3.01, 0.2, 10), omegas=(0.0, 0.15, 0.3, 0.45), log2_n=12,
                       n_replicas=4, train_alphas=(0.6, 1.0, 1.4, 1.8, 2.2, 2.6), train_omegas=(0.0, 0.3),
                       seeds=(0, 1, 2, 3, 4), ds=(200, 400, 800, 1600)),
}
"""`cpu`: the committed results; `gpu`: larger grids, more seeds and sizes."""


def preset_rule(P) -> SobolRule:
    """The preset `P`'s quadrature: scrambled Sobol in the 6 dimensions of `L (r + t)` (`sobol_rule`; its theory
    rows are solved with it, and their replicon computed with it)."""
    return sobol_rule(P, 6)


def compute(preset: str, P: OmegaGridPreset, *, run: ExtensionRun = ExtensionRun()) -> ExtensionResult:
    """Theory (three inits on `alphas x omegas`, Sobol rule `log2_n`, `n_replicas`) and students (three inits on
    `train_alphas x train_omegas x seeds` at each of `ds`) of the preset `P` (named `preset`), resumable under
    `run.run_dir`."""
    params = rank2_params()
    rule = preset_rule(P)
    theory = rank2_theory(P.alphas, P.omegas, params=params, quadrature=rule, options=run.options("theory", 1))
    runs = concat_tables([train_rank2(P.train_alphas, P.train_omegas, P.seeds, d=d, params=params,
                                      options=run.options(f"runs_d{d}", 18)) for d in P.ds])
    return finish(ExtensionResult(theory=theory, runs=runs, thresholds={}, summary=dict(
        extension=NAME, preset=preset, presets=P.to_json(), rule=scheme_config(rule))))


def replicon_problem(P):
    """`phasejax.extensions.stability.Problem` of the preset `P`'s theory rows: `rank2_params()` and the Sobol
    rule they were solved with."""
    params, rule = rank2_params(), preset_rule(P)
    return lambda row: (params, rule)


def finish(result: ExtensionResult) -> ExtensionResult:
    """The parts derived from `theory` and `runs`: theory at each run, thresholds, agreement, global minima."""
    th = result.theory
    runs = attach_theory(result.runs, th, branch=result.runs["init"], branch_column="init",
                         usable=np.asarray(th["converged"]).astype(bool))
    summary = dict(result.summary, agreement=agreement(runs), global_minimum=global_minimum_summary(th))
    return ExtensionResult(theory=ordered(th, THEORY_FIRST), runs=ordered(runs, RUN_COLUMNS),
                           thresholds=branch_thresholds(th, rank2_params()), summary=summary)


THEORY_FIRST = ("alpha", "omega", "init", "branch")


def figures(result: ExtensionResult) -> dict:
    """`rank2.png`: both losses of the three inits' fixed points and students."""
    tau = RANK2_APPROXIMATION.tie_width
    return {"rank2.png": branch_figure(result, inits=INITS, title="Rank-2 tied student, rank-1 teacher: three "
                                       f"initialisations of the columns (SE: tie_width {tau:g})")}
