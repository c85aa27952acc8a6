"""Untied query and key, `W_Q != W_K`, each of rank 1 (paper appendix C.10, Fig. 12).

Theory (docs/theory.md section 10): stack `W = [W_Q, W_K]` (`d x 2`); the
student is the rank-2 model of sections 2-4 with `S(h) = softmax(h_Q h_K^T)`
(`untied_student`, `h_Q, h_K` the two columns of `h (L, 2)`). `q0, V0 (2, 2)`
(off-diagonal: the query-key overlaps), `m (1, 2)` = `(m_Q, m_K)`,
`theta0 (1, 2)` = `(theta_Q, theta_K)`. Branches as for the tied model:
positional (`theta0` held at 0) and semantic (`m` held at 0; the problem is
token-swap symmetric and `S` permutation-equivariant, so `m = 0` is
invariant). Unlike the tied rank-2 student there is no continuous gauge: the
only symmetry of `softmax(h_Q h_K^T)` that the ridge penalty keeps is the sign
flip `(W_Q, W_K) -> (-W_Q, -W_K)`, so no gauge fixing is needed.

Reduction to the tied model (tests): with `W_Q = W_K = Q` (all 2 x 2 blocks
equal) the untied fields are `h_Q = h_K = h` and the test error equals the
tied one (`tied_embedding`); the prox in two dimensions does *not* keep
`h_Q = h_K` (the gradients of `softmax(h_Q h_K^T)` in `h_Q` and `h_K`
differ), so `W_Q = W_K` is not an invariant subspace of the untied SE.

Experiments: `phasejax.empirics.UntiedAttention` (`W_Q = W_K` at the informed
init, trained untied by L-BFGS), swept with `run_chunked`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from phasejax.empirics.data import cast_params, generate_data, run_keys, sample_tokens, teacher_labels
from phasejax.empirics.metrics import fresh_test_error
from phasejax.empirics.students import UntiedAttention, positional_init, semantic_init
from phasejax.empirics.training import TrainConfig, minimize, student_risk
from phasejax.extensions._figures import branch_figure
from phasejax.extensions._presets import ExtensionRun, OmegaGridPreset, alpha_range, sobol_rule
from phasejax.extensions._tables import (
    EXTENSION_SE_CONFIG, agreement, attach_theory, continuation_table, ExtensionResult, ordered, scheme_config,
    train_students_table,
)
from phasejax.extensions._thresholds import (
    branch_thresholds, mark_global_minimum, tied_thresholds, with_tied_thresholds,
)
from phasejax.io import concat_tables, json_ready
from phasejax.precision import float64_scope
from phasejax.sweep import RunOptions
from phasejax.theory.fields import Overlaps
from phasejax.theory.params import TiedAttentionParams, make_params, token_swap_symmetric
from phasejax.theory.quadrature import SobolRule
from phasejax.theory.branches import BranchInit
from phasejax.theory.solver import SEConfig

Array = jax.Array

NAME = "untied"
INITS = ("positional", "semantic")

AGREEMENT_KEYS = ("test_error", "train_loss", "q", "m", "theta")
"""Quantities compared with the SE per `(d, alpha, init)` in `summary.json`'s `agreement` (query-side overlaps)."""


def untied_student(h: Array, params: TiedAttentionParams) -> Array:
    """`S(h) = softmax(h_Q h_K^T)` (row-wise, stable) for `h (L, 2r)` = `[h_Q, h_K]`, shape `(L, L)`."""
    del params
    r = h.shape[-1] // 2
    return jax.nn.softmax(h[:, :r] @ h[:, r:].T, axis=-1)


def untied_params(alpha=1.0, omega=0.3, *, sigma=0.5, lam=0.01, A=((0.6, 0.4), (0.4, 0.6))) -> TiedAttentionParams:
    """The paper's setting with untied rank-1 query and key (`r = 2` stacked columns, `t = 1`)."""
    return make_params(alpha, omega, sigma=sigma, lam=lam, A=A, r=2, t=1, student=untied_student)


def untied_init(name: str, params: TiedAttentionParams, corr: float = 0.5) -> BranchInit:
    """Init of the positional / semantic branch: both columns alike (`W_Q ~ W_K`, query-key correlation
    `corr` in `q0`), per-token values as `phasejax.theory.branches.BRANCH_DEFAULTS` (positional `q = 0.02, m = 0.2`;
    semantic `q = 0.9, theta = 0.35`; `V = 14.6`) divided by the mean `sigma^2`."""
    if name not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {name!r}")
    if params.r != 2 or params.t != 1 or params.K != 1:
        raise ValueError(f"untied inits need r=2 (stacked), t=1, K=1, got r={params.r}, t={params.t}, K={params.K}")
    if not -1 < corr < 1:
        raise ValueError(f"corr must lie in (-1, 1), got corr={corr}")
    dt = params.sigma.dtype
    s2 = float(np.mean(np.asarray(params.sigma) ** 2))
    shape = jnp.asarray([[1.0, corr], [corr, 1.0]], dt)
    V0 = 14.6 / s2 * jnp.eye(2, dtype=dt)
    if name == "positional":
        ov = Overlaps(q0=0.02 / s2 * shape, m=jnp.full((1, 2), 0.2, dt), V0=V0, theta0=jnp.zeros((1, 2), dt))
        return BranchInit(overlaps=ov, hold_m=jnp.asarray(False), hold_theta=jnp.asarray(True))
    ov = Overlaps(q0=0.9 / s2 * shape, m=jnp.zeros((1, 2), dt), V0=V0, theta0=jnp.full((1, 2), 0.35 / s2, dt))
    return BranchInit(overlaps=ov, hold_m=token_swap_symmetric(params), hold_theta=jnp.asarray(False))


def tied_embedding(ov: Overlaps) -> Overlaps:
    """Untied overlaps of `W_Q = W_K = Q` from tied rank-1 overlaps: every 2 x 2 block equal
    (`q0 = q [[1, 1], [1, 1]]`, `m = (m, m)`, `theta0 = (theta, theta)`; `V0 = V [[1, 1], [1, 1]] + 1e-9 I`
    keeps it invertible)."""
    ones = jnp.ones((2, 2), ov.q0.dtype)
    return Overlaps(q0=ov.q0[0, 0] * ones, m=jnp.tile(ov.m, (1, 2)), V0=ov.V0[0, 0] * ones + 1e-9 * jnp.eye(2),
                    theta0=jnp.tile(ov.theta0, (1, 2)))


def untied_columns(res, params) -> dict:
    """Query/key overlaps per token (`s1 = sigma_1^2`): `q = s1 q0_QQ, q_K = s1 q0_KK, q_QK = s1 q0_QK`,
    `m = m_Q, m_K`, `theta = s1 theta_Q, theta_K = s1 theta_K` (and `_err` where the result has errors)."""
    s1 = params.sigma[0] ** 2
    ov = res.overlaps if hasattr(res, "overlaps") else res
    cols = dict(q_K=s1 * ov.q0[1, 1], q_QK=s1 * ov.q0[0, 1], m_K=ov.m[0, 1], theta_K=s1 * ov.theta0[0, 1])
    if hasattr(res, "errors"):
        e = res.errors.overlaps
        cols.update(q_K_err=s1 * e.q0[1, 1], q_QK_err=s1 * e.q0[0, 1], m_K_err=e.m[0, 1],
                    theta_K_err=s1 * e.theta0[0, 1])
    return cols


def untied_theory(alphas, omegas, *, params: TiedAttentionParams | None = None, quadrature=None,
                  se_config: SEConfig = EXTENSION_SE_CONFIG, options: RunOptions | None = None) -> dict[str, np.ndarray]:
    """SE table of both branches on `omegas x alphas` (positional rows upwards, semantic rows downwards in
    alpha); `branch` = `init` (each is solved in its invariant subspace), `global_min` marks the lower `e_t`."""
    params = untied_params() if params is None else params
    with float64_scope():
        inits = {n: untied_init(n, params) for n in INITS}
    quadrature = SobolRule.create(params.L * (params.r + params.t), 10, 4) if quadrature is None else quadrature
    table = continuation_table(params, alphas, omegas, inits, quadrature=quadrature, down=("semantic",),
                               se_config=se_config, extra=untied_columns, kind="untied_theory", options=options)
    table["branch"] = table["init"].copy()
    return mark_global_minimum(table)


RUN_COLUMNS = ("alpha", "omega", "seed", "init", "d", "q", "q_K", "q_QK", "m", "m_K", "theta", "theta_K",
               "train_loss", "test_error", "train_loss_theory", "test_error_theory", "n", "grad_norm", "steps",
               "status")


def untied_run(seed, alpha, omega, init, n, *, params: TiedAttentionParams, d: int, n_max: int,
               config: TrainConfig = TrainConfig(), n_test: int = 1000, m0: float = 0.5,
               dtype=jnp.float32) -> dict[str, Array]:
    """One run: data of `seed`, `W_Q = W_K = ` positional (`m0 sqrt(d) u`) or semantic (`Q*`) init
    (`init` code into `INITS`), L-BFGS on the untied risk over the first `n` samples, overlaps of
    `[W_Q, W_K]` and the fresh test error. Pure in `(seed, alpha, omega, init, n)` (vmap over them)."""
    p_ = cast_params(params, dtype).replace(alpha=jnp.asarray(alpha, dtype), omega=jnp.asarray(omega, dtype))
    keys = run_keys(seed)
    data = generate_data(keys["data"], p_, d, n_max, dtype=dtype)
    mask = jnp.arange(n_max) < n
    Q0 = jnp.where(init == 0, positional_init(data.u, 1, m0), semantic_init(data.Qstar, 1))
    graphdef, weights = nnx.split(UntiedAttention(Q0, Q0), nnx.Param)
    res = minimize(lambda w: student_risk(graphdef, w, data.x, data.y, data.p, mask, p_.lam), weights, config)
    model = nnx.merge(graphdef, res.params)
    x_test = sample_tokens(keys["test"], p_.sigma, d, n_test, dtype)
    err = fresh_test_error(model, x_test, teacher_labels(x_test, data.Qstar, p_), data.p)
    W = jnp.concatenate([res.params["WQ"][...], res.params["WK"][...]], axis=1)
    q0, m, theta0 = W.T @ W / d, data.u @ W / jnp.sqrt(jnp.asarray(d, dtype)), data.Qstar.T @ W / d
    s1 = p_.sigma[0] ** 2
    return dict(q=s1 * q0[0, 0], q_K=s1 * q0[1, 1], q_QK=s1 * q0[0, 1], m=m[0, 0], m_K=m[0, 1],
                theta=s1 * theta0[0, 0], theta_K=s1 * theta0[0, 1], train_loss=res.loss / d, test_error=err, n=n,
                grad_norm=res.grad_norm, steps=res.steps, status=res.status)


def train_untied(alphas, omegas, seeds, *, d: int, params: TiedAttentionParams | None = None, inits=INITS,
                 config: TrainConfig = TrainConfig(), n_test: int = 1000,
                 options: RunOptions | None = None) -> dict[str, np.ndarray]:
    """Train untied students for every `(omega, alpha, init, seed)` at dimension `d` (`untied_run`)."""
    params = untied_params() if params is None else params
    return train_students_table(untied_run, params, alphas, omegas, seeds, d=d, inits=inits, init_names=INITS,
                                kind="untied_runs", config=config, n_test=n_test, options=options)


THEORY_FIRST = ("alpha", "omega", "init", "branch")
RUNS_FIRST = ("alpha", "omega", "seed", "init", "d", "q", "m", "theta", "train_loss", "test_error", "train_loss_theory",
              "test_error_theory", "n", "grad_norm", "steps", "status")
"""Leading columns of `runs.csv` (the query-side overlaps with the tied model's names first)."""


PRESETS = {
    "cpu": OmegaGridPreset(alphas=(0.9, 1.3, 1.7, 2.1, 2.5, 2.9), omegas=(0.1, 0.3), log2_n=11, n_replicas=4,
                        train_alphas=(1.3, 2.1, 2.9), train_omegas=(0.3,), seeds=tuple(range(8)), ds=(200, 800)),
    "gpu": OmegaGridPreset(alphas=alpha_range(0.2, 3.01, 0.2, 10), omegas=(0.0, 0.1, 0.2, 0.3, 0.4), log2_n=12,
                        n_replicas=4, train_alphas=(0.6, 1.0, 1.4, 1.8, 2.2, 2.6), train_omegas=(0.0, 0.3),
                        seeds=(0, 1, 2, 3, 4), ds=(200, 400, 800, 1600)),
}
"""`cpu`: the committed results; `gpu`: larger grids, more seeds and sizes."""


def preset_rule(P) -> SobolRule:
    """The preset `P`'s quadrature: scrambled Sobol in the 6 dimensions of `L (r + t)` (`sobol_rule`; its theory
    rows are solved with it, and their replicon computed with it)."""
    return sobol_rule(P, 6)


def compute(preset: str, P: OmegaGridPreset, *, run: ExtensionRun = ExtensionRun(),
            tied: dict | None = None) -> ExtensionResult:
    """Theory (both branches on `alphas x omegas`, Sobol rule `log2_n`, `n_replicas`) and students (both inits on
    `train_alphas x train_omegas x seeds` at each of `ds`) of the preset `P` (named `preset`), resumable under
    `run.run_dir`; `tied`: the tied model's thresholds to compare with (default `tied_thresholds()`)."""
    params = untied_params()
    rule = preset_rule(P)
    theory = untied_theory(P.alphas, P.omegas, params=params, quadrature=rule, options=run.options("theory", 1))
    runs = concat_tables([train_untied(P.train_alphas, P.train_omegas, P.seeds, d=d, params=params,
                                       options=run.options(f"runs_d{d}", 12)) for d in P.ds])
    return finish(ExtensionResult(theory=theory, runs=runs, thresholds={}, summary=dict(
        extension=NAME, preset=preset, presets=P.to_json(), rule=scheme_config(rule))), tied=tied)


def replicon_problem(P):
    """`phasejax.extensions.stability.Problem` of the preset `P`'s theory rows: `untied_params()` (the untied
    student is a function of the two fields `(h_Q, h_K)`, so the replicon of the main model applies) and the
    Sobol rule they were solved with."""
    params, rule = untied_params(), preset_rule(P)
    return lambda row: (params, rule)


def finish(result: ExtensionResult, *, tied: dict | None = None) -> ExtensionResult:
    """The parts derived from `theory` and `runs`: theory at each run, thresholds against the tied model's
    (`tied`, default `tied_thresholds()`), agreement per `(d, alpha, init)`."""
    th = result.theory
    runs = attach_theory(result.runs, th, AGREEMENT_KEYS, branch=result.runs["init"], branch_column="init",
                         usable=np.asarray(th["converged"]).astype(bool))
    thresholds = with_tied_thresholds(branch_thresholds(th, untied_params()),
                                      tied_thresholds() if tied is None else tied)
    summary = dict(result.summary, agreement=agreement(runs, AGREEMENT_KEYS, teacher_adjusted=True),
                   thresholds=json_ready(thresholds))
    return ExtensionResult(theory=ordered(th, THEORY_FIRST), runs=ordered(runs, RUNS_FIRST), thresholds=thresholds,
                           summary=summary)


def figures(result: ExtensionResult) -> dict:
    """`untied.png`: both losses of both branches and students, and `alpha_c(omega)` against the tied model's."""
    return {"untied.png": branch_figure(result, inits=INITS, thresholds=True,
                                        title="Untied query and key ($W_Q \\neq W_K$, rank 1 each): both branches")}
