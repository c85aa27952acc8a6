"""Correlated tokens from a Gaussian mixture (paper appendix C.10, experiment E.3, Fig. 10).

Data model. Token `l` of a sequence is `x_l = mu_{c_l} + z_l`, `z_l ~ N(0, sigma_l^2 I_d)`, with cluster means
`mu_c = sum_j M[c, j] v_j` of norm O(1) along orthonormal directions `v_j` orthogonal to the positional ones
(`v_j` are the positional-style directions `K + j` of `phasejax.empirics.data.positional_directions`). The label
configuration `(c_1, .., c_L)` is drawn from a joint law (`LabelLaw`: a table of configurations and their
probabilities) that correlates positions. The default is two antipodal clusters `M = [[a], [-a]]` with uniform
marginals and `P(c_1 = c_2) = (1 + rho) / 2` (`two_cluster_law(rho)`), so `E[s_1 s_2] = rho` for the signs `s_l`.

Teacher. `y = T(x Q* / sqrt(d)) x` with the random teacher `Q*` of the main model. The teacher does *not* see the
means in the limit: `mu_c^T Q* / sqrt(d) ~ N(0, |mu_c|^2 / d) -> 0` (the paper's Assumption C.1 allows a teacher
overlap with the means; for a teacher drawn independently of them it vanishes). Likewise the means drop out of the
loss's token Gram matrix (`|mu_c|^2 / d -> 0`), so `D = diag(sigma_l^2)` is unchanged.

State evolution (spec section 9). Given the labels, the means enter exactly as positional encodings do
(`p_l -> p_l + mu_{c_l}`): with the directions `(u_1..u_K, v_1..v_J)` each configuration has its own encoding matrix
`C_cfg = [C | M[c_l]] (L, K + J)`, the order parameter `m` becomes `(K + J, r)` (its last `J` rows are the student's
overlaps with the cluster directions, `m_cluster`), and every Gaussian average is the label-weighted average of the
conditional ones:

    qhat, Vhat, thetahat = sum_cfg w_cfg (hats of cfg),      Mhat = sum_cfg w_cfg C_cfg^T mhat_cfg,

followed by the usual entropic updates. That is the theory's own map on a rule whose nodes are the Gaussian
rule's, once per configuration, each with the configuration's encodings (`mixture_rule`, `mixture_map`); the
training loss (free energy) and the test error are label averages too (`mixture_training_loss`,
`mixture_test_error`).

What follows (tested in `tests/extensions/test_correlated.py`):

* At `m_cluster = 0` every configuration has the same fields, so the mixture map *is* the main map, for every label
  law: the main SE's fixed points are mixture fixed points. The subspace `m_cluster = 0` is invariant when the label
  law is symmetric under exchanging the clusters (`c -> 1 - c`, i.e. `M -> -M`; the two-cluster law with uniform
  marginals is), because the map is then equivariant under `m_cluster -> -m_cluster`.
* Whether the student learns the cluster direction is decided by the linear gain of the map out of that subspace,
  `cluster_gain = d F_{m_cluster} / d m_cluster` at the fixed point (a JVP). By the structure above,
  `cluster_gain(rho) = a^2 G^{-1} sum_{l,k} E[s_l s_k] dmhat_l / dm_k` is affine in `rho`. While it is below one the
  main fixed point is the (locally unique) mixture fixed point, both branches keep their free energy and
  **`alpha_c` does not move** with `rho` in the `d -> inf` limit; the experiments test this at finite `d`.

`compute` returns the bundle of `theory.csv` (both branches along alpha, per `rho`, with `m_cluster` and
`cluster_gain` columns), `runs.csv` (tied students trained by L-BFGS from positional and semantic inits on mixture
data, per `rho`, seed, `d`), `thresholds.csv` (theory `alpha_c` per `rho`, and the empirical crossing of the two inits' training losses with
its shift against `rho = 0`) and a figure.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from phasejax.empirics.data import cast_params, check_positive_int, positional_directions, run_keys, standard_normal
from phasejax.empirics.metrics import fresh_test_error
from phasejax.empirics.students import INITS, init_weights, make_student, query_weights
from phasejax.empirics.training import TrainConfig, minimize
from phasejax.extensions._figures import draw_band
from phasejax.extensions._presets import ExtensionPreset, ExtensionRun, alpha_range, preset_value
from phasejax.extensions._tables import attach_theory, ExtensionResult, ordered, seed_means
from phasejax.extensions._thresholds import empirical_alpha_c, paired_gap
from phasejax.io import concat_tables
from phasejax.phase import PHASE_BRANCHES, PhaseConfig, PhaseGrid, phase_diagram
from phasejax.precision import check_float_dtype, dtype_scope, float64_scope
from phasejax.solvers import status_names
from phasejax.sweep import RunOptions, run_chunked, run_options
from phasejax.theory.census import CENSUS_SEEDS
from phasejax.theory.fields import Overlaps
from phasejax.theory.gram import gram_inputs, gram_risk
from phasejax.theory.params import TiedAttentionParams, make_params, validate_params
from phasejax.theory.quadrature import Quadrature, SobolRule
from phasejax.theory.se_map import state_evolution_map
from phasejax.theory.updates import test_error, training_loss

Array = jax.Array
NAME = "correlated"

# ----------------------------------------------------------------------------
# Label law and data
# ----------------------------------------------------------------------------


@struct.dataclass
class LabelLaw:
    """Joint law of the cluster labels of the `L` tokens and the cluster means' coordinates.

    Attributes:
      configs: `(n_cfg, L)` int, the label configurations `(c_1..c_L)`.
      probs: `(n_cfg,)` their probabilities (non-negative, summing to one).
      means: `(n_c, J)` coordinates `M[c, j]` of mean `mu_c` along the cluster directions `v_j`.
    """

    configs: Array
    probs: Array
    means: Array

    @property
    def n_directions(self) -> int:
        return self.means.shape[-1]

    def encodings(self, C: Array) -> Array:
        """`C_cfg (n_cfg, L, K + J)`: the positional encodings `C (L, K)` next to the means `M[c_l]` of each config."""
        E = jnp.asarray(self.means, C.dtype)[self.configs]                      # (n_cfg, L, J)
        return jnp.concatenate([jnp.broadcast_to(C, (E.shape[0],) + C.shape), E], axis=-1)


def make_label_law(configs, probs, means) -> LabelLaw:
    """Validated `LabelLaw` (numpy inputs); `ValueError` naming the parameter for bad inputs."""
    configs = np.asarray(configs)
    probs = np.asarray(probs, float)
    means = np.asarray(means, float)
    if configs.ndim != 2 or configs.shape[0] < 1 or not np.issubdtype(configs.dtype, np.integer):
        raise ValueError(f"configs must be an (n_cfg, L) integer array, got shape {configs.shape}, "
                         f"dtype {configs.dtype}")
    if probs.shape != (configs.shape[0],):
        raise ValueError(f"probs must have shape (n_cfg,) = ({configs.shape[0]},), got {probs.shape}")
    if not np.all(np.isfinite(probs)) or np.any(probs < 0) or abs(probs.sum() - 1.0) > 1e-9:
        raise ValueError(f"probs must be >= 0 and sum to 1, got probs={probs.tolist()}")
    if means.ndim != 2 or not np.all(np.isfinite(means)):
        raise ValueError(f"means must be a finite (n_clusters, J) array, got shape {means.shape}")
    if configs.min() < 0 or configs.max() >= means.shape[0]:
        raise ValueError(f"configs must hold cluster indices in [0, {means.shape[0]}), got {np.unique(configs)}")
    return LabelLaw(configs=jnp.asarray(configs, jnp.int32), probs=jnp.asarray(probs), means=jnp.asarray(means))


def two_cluster_law(rho: float, mean_norm: float = 1.0) -> LabelLaw:
    """Two antipodal clusters `mu = +-a v` (`a = mean_norm`), `L = 2`, uniform marginals, `P(c_1 = c_2) = (1 + rho)/2`.

    The signs `s_l = +-1` of the tokens' means then have `E[s_l] = 0`, `E[s_1 s_2] = rho`.
    """
    rho = float(rho)
    if not np.isfinite(rho) or not -1.0 <= rho <= 1.0:
        raise ValueError(f"rho must lie in [-1, 1], got rho={rho}")
    a = float(mean_norm)
    if not np.isfinite(a) or a < 0:
        raise ValueError(f"mean_norm must be finite and >= 0, got mean_norm={mean_norm}")
    configs = [[0, 0], [0, 1], [1, 0], [1, 1]]
    probs = [(1 + rho) / 4, (1 - rho) / 4, (1 - rho) / 4, (1 + rho) / 4]
    return make_label_law(configs, probs, [[a], [-a]])


@struct.dataclass
class MixtureData:
    """A data set: `x (n, L, d)` tokens, `y (n, L, d)` labels, `p (L, d)` positional encodings, `u (K, d)`,
    `v (J, d)` cluster directions, `Qstar (d, t)`, `labels (n, L)` cluster labels."""

    x: Array
    y: Array
    p: Array
    u: Array
    v: Array
    Qstar: Array
    labels: Array


def sample_labels(key: Array, law: LabelLaw, n: int) -> Array:
    """`(n, L)` label configurations drawn from `law` by inverse CDF of one uniform per sample (sample `mu` from
    `fold_in(key, mu)`: prefix-stable, and the same uniforms for every law, so laws can be compared run by run)."""
    U = jax.vmap(lambda i: jax.random.uniform(jax.random.fold_in(key, i), (), jnp.float32))(jnp.arange(n))
    cdf = jnp.cumsum(jnp.asarray(law.probs, jnp.float32))
    idx = jnp.clip(jnp.sum(U[:, None] >= cdf[None, :-1], axis=1), 0, law.configs.shape[0] - 1)
    return law.configs[idx]


def mixture_tokens(key: Array, law: LabelLaw, sigma: Array, v: Array, n: int, dtype=jnp.float32) -> tuple[Array, Array]:
    """Tokens `x_l = mu_{c_l} + sigma_l z_l`, `(n, L, d)`, and their labels `(n, L)`; `v (J, d)` the directions."""
    k_lab, k_z = jax.random.split(key)
    labels = sample_labels(k_lab, law, n)
    sigma = jnp.asarray(sigma).astype(dtype)
    L, d = sigma.shape[-1], v.shape[-1]
    z = jax.vmap(lambda i: standard_normal(jax.random.fold_in(k_z, i), (L, d), dtype))(jnp.arange(n))
    mu = jnp.asarray(law.means, dtype) @ v.astype(dtype)                    # (n_c, d)
    return mu[labels] + sigma[None, :, None] * z, labels


def teacher_labels(x: Array, Qstar: Array, params: TiedAttentionParams) -> Array:
    """`y = T(x Q* / sqrt(d)) x`, `(n, L, d)`."""
    hstar = jnp.einsum("nld,dt->nlt", x, Qstar) / jnp.sqrt(jnp.asarray(x.shape[-1], x.dtype))
    T = jax.vmap(lambda h: params.target(h, params))(hstar)
    return jnp.einsum("nij,njd->nid", T, x)


def generate_mixture_data(key: Array, params: TiedAttentionParams, law: LabelLaw, d: int, n: int, *,
                          dtype=jnp.float32) -> MixtureData:
    """Draw `n` correlated-token sequences in dimension `d` (module docstring); pure and jittable (`d`, `n` static).

    `params` gives `sigma`, `omega`, `A`, `C`, `t` and the target (its `alpha` is ignored). The cluster
    directions `v (J, d)` are the positional-style directions `K .. K + J - 1` (orthonormal to `u`).
    Tokens and teacher use the keys of `phasejax.empirics.generate_data` (`x` from the first half of `key`,
    `Q*` from the second), so the noise `z` and the teacher are those of the main model's data set.
    """
    d = check_positive_int(d, "d")
    n = check_positive_int(n, "n")
    dtype = check_float_dtype(dtype)
    validate_params(params.replace(alpha=jnp.ones_like(params.alpha)))
    if law.configs.shape[-1] != params.L:
        raise ValueError(f"law.configs must have L = {params.L} columns, got {law.configs.shape}")
    K, J = params.K, law.n_directions
    if K + J > d:
        raise ValueError(f"d must be >= K + J = {K + J}, got d={d}")
    with dtype_scope(dtype):
        k_x, k_q = jax.random.split(key)
        basis = positional_directions(d, K + J, dtype)
        u, v = basis[:K], basis[K:]
        x, labels = mixture_tokens(k_x, law, params.sigma, v, n, dtype)
        Qstar = standard_normal(k_q, (d, params.t), dtype)
        p_ = cast_params(params, dtype)
        return MixtureData(x=x, y=teacher_labels(x, Qstar, p_), p=p_.C @ u, u=u, v=v, Qstar=Qstar, labels=labels)


# ----------------------------------------------------------------------------
# Mixture state evolution
# ----------------------------------------------------------------------------


def mixture_rule(law: LabelLaw, C: Array, points: Array, weights: Array) -> Quadrature:
    """The label mixture as one quadrature rule: every node `points (N, D)` of the Gaussian rule once per label
    configuration, with weight `P(cfg) weights[n]` and the configuration's encodings `C_cfg` (`LabelLaw.encodings`)
    as the node's own (`Quadrature.encodings`). The theory's map on it averages every Gaussian expectation over
    the labels, and its `Mhat` is `sum_cfg P(cfg) C_cfg^T mhat_cfg` (`phasejax.theory.updates.hats_from_nodes`)."""
    Cs = law.encodings(C)
    n_cfg, N = Cs.shape[0], points.shape[0]
    probs = jnp.asarray(law.probs, weights.dtype)
    return Quadrature(points=jnp.tile(points, (n_cfg, 1)), weights=(probs[:, None] * weights[None]).reshape(-1),
                      encodings=jnp.repeat(Cs, N, axis=0))


def mixture_params(params: TiedAttentionParams, law: LabelLaw) -> TiedAttentionParams:
    """`params` with `C` widened to `(L, K + J)` (the first configuration's encodings) so that `m (K + J, r)`
    fits; on a `mixture_rule` every node uses its own encodings instead."""
    return params.replace(C=law.encodings(params.C)[0])


def mixture_map(ov: Overlaps, params: TiedAttentionParams, law: LabelLaw, points: Array, weights: Array,
                warm: Array | None = None):
    """One step of the mixture SE, the theory's map (`phasejax.theory.se_map.state_evolution_map`) on the
    `mixture_rule`: `(new Overlaps, MapEvaluation)`; `ov.m` is `(K + J, r)`, `warm (n_cfg N, L r)` node starts."""
    rule = mixture_rule(law, params.C, points, weights)
    return state_evolution_map(mixture_params(params, law), ov, rule, warm=warm)


def mixture_training_loss(ov: Overlaps, ev, params: TiedAttentionParams, law: LabelLaw) -> Array:
    """Free-energy training loss `e_t` of the mixture (the theory's `training_loss` with its label-averaged hats)."""
    return training_loss(ov, ev.hats, ev.envelope, mixture_params(params, law))


def mixture_test_error(ov: Overlaps, params: TiedAttentionParams, law: LabelLaw, quadrature) -> Array:
    """`eps_g` averaged over the label law (the theory's `test_error` on the `mixture_rule`)."""
    rule = mixture_rule(law, params.C, quadrature.points, quadrature.weights)
    return test_error(ov, mixture_params(params, law), rule)


def embed_overlaps(ov: Overlaps, m_cluster: Array) -> Overlaps:
    """Main-SE overlaps (`m (K, r)`) with cluster overlaps `m_cluster (J, r)` appended to `m`."""
    return ov.replace(m=jnp.concatenate([ov.m, jnp.asarray(m_cluster, ov.m.dtype)], axis=0))


def cluster_gain(ov: Overlaps, params: TiedAttentionParams, law: LabelLaw, points: Array, weights: Array) -> Array:
    """`d F_{m_cluster} / d m_cluster` `(J r, J r)` of the mixture map at main-SE overlaps `ov` (with `m_cluster = 0`)
    by forward-mode differentiation (the node minimisers by the implicit function theorem). Its largest eigenvalue
    above 1 means the student starts learning the cluster directions (the `m_cluster = 0` subspace is unstable)."""
    J, r = law.n_directions, params.r
    warm = mixture_map(embed_overlaps(ov, jnp.zeros((J, r), ov.m.dtype)), params, law, points, weights)[1].h

    def F(mc):
        new, _ = mixture_map(embed_overlaps(ov, mc.reshape(J, r)), params, law, points, weights, warm)
        return new.m[params.K:].reshape(-1)

    return jax.jacfwd(F)(jnp.zeros((J * r,), ov.m.dtype))


@functools.partial(jax.jit, static_argnames=("n_replicas",))
def _gains_with_replicas(ov: Overlaps, params: TiedAttentionParams, law: LabelLaw, points: Array, n_replicas: int):
    N = points.shape[0]
    per = N // n_replicas
    W = jnp.repeat(jnp.eye(n_replicas, dtype=points.dtype), per, axis=1) / per
    one = lambda w: jnp.max(jnp.linalg.eigvals(cluster_gain(ov, params, law, points, w)).real)  # noqa: E731
    return one(jnp.full((N,), 1.0 / N, points.dtype)), jax.vmap(one)(W)


def cluster_gain_with_error(ov: Overlaps, params: TiedAttentionParams, law: LabelLaw, rule: SobolRule):
    """`(gain, err)`: the largest real eigenvalue of `cluster_gain` with the union of the Sobol replicas, and its
    95% half-width (Student t, `n_replicas - 1` dof, times the standard error of the replica mean)."""
    from scipy import stats

    with float64_scope():
        g, reps = _gains_with_replicas(ov, params, law, jnp.asarray(rule.points), rule.n_replicas)
    reps = np.asarray(reps)
    k = reps.size
    return float(g), float(stats.t.ppf(0.975, k - 1) * reps.std(ddof=1) / np.sqrt(k))


# ----------------------------------------------------------------------------
# Experiments
# ----------------------------------------------------------------------------

RUN_COLUMNS = ("alpha", "omega", "rho", "seed", "init", "d", "q", "m", "m_cluster", "theta", "train_loss",
               "test_error", "train_loss_theory", "test_error_theory", "n", "grad_norm", "steps", "status")


def correlated_run(seed, alpha, rho, init, n, *, params: TiedAttentionParams, mean_norm: float, d: int, n_max: int,
                   config: TrainConfig = TrainConfig(), n_test: int = 1000, dtype=jnp.float32) -> dict[str, Array]:
    """One run: draw mixture data (law `two_cluster_law(rho)`, `rho` may be traced), init, train the tied student
    by `minimize` on the first `n` samples, measure. Pure in `(seed, alpha, rho, init, n)` (vmap over them).

    Returns scalars: `q = sigma_1^2 q0`, `m = u^T Q / sqrt(d)`, `m_cluster = v^T Q / sqrt(d)`,
    `theta = sigma_1^2 theta0`, `train_loss = R / d`, `test_error` on `n_test` fresh mixture samples, `n`,
    `grad_norm`, `steps`, `status`.
    """
    dtype = check_float_dtype(dtype)
    p_ = cast_params(params, dtype)
    p_ = p_.replace(alpha=jnp.asarray(alpha).astype(dtype))
    rho = jnp.asarray(rho, jnp.float32)
    a = float(mean_norm)
    probs = jnp.stack([(1 + rho) / 4, (1 - rho) / 4, (1 - rho) / 4, (1 + rho) / 4])
    law = LabelLaw(configs=jnp.asarray([[0, 0], [0, 1], [1, 0], [1, 1]], jnp.int32), probs=probs,
                   means=jnp.asarray([[a], [-a]], dtype))
    keys = run_keys(seed)
    data = generate_mixture_data(keys["data"], p_, law, d, n_max, dtype=dtype)
    mask = jnp.arange(n_max) < n
    Q0 = init_weights(init, keys["init"], data.u, data.Qstar, params.r)
    graphdef, weights = nnx.split(make_student("tied", Q0, L=params.L), nnx.Param)
    inputs = gram_inputs(data.x, data.y, data.p)
    res = minimize(lambda w: gram_risk(w["Q"][...], inputs, p_, mask), weights, config)
    model = nnx.merge(graphdef, res.params)
    x_test, _ = mixture_tokens(keys["test"], law, p_.sigma, data.v, n_test, dtype)
    err = fresh_test_error(model, x_test, teacher_labels(x_test, data.Qstar, p_), data.p)
    Q = query_weights(res.params)
    s1 = p_.sigma[0] ** 2
    sq = jnp.sqrt(jnp.asarray(d, dtype))
    return dict(q=s1 * (Q[:, 0] @ Q[:, 0]) / d, m=(data.u[0] @ Q[:, 0]) / sq, m_cluster=(data.v[0] @ Q[:, 0]) / sq,
                theta=s1 * (data.Qstar[:, 0] @ Q[:, 0]) / d, train_loss=res.loss / d, test_error=err, n=n,
                grad_norm=res.grad_norm, steps=res.steps, status=res.status)


def run_tasks(alphas, rhos, seeds, inits, d: int) -> dict[str, np.ndarray]:
    """Task table in order `(rho, alpha, init, seed)`: `seed, alpha, rho, init (code), n = round(alpha d)`."""
    codes = [INITS.index(i) for i in inits]
    r_, a_, i_, s_ = np.meshgrid(np.asarray(rhos, float), np.asarray(alphas, float), codes, np.asarray(seeds),
                                 indexing="ij")
    n = np.rint(a_.ravel() * d).astype(np.int32)
    if np.any(n < 1):
        raise ValueError(f"alpha * d must be >= 1, got alphas={list(alphas)}, d={d}")
    return dict(seed=s_.ravel().astype(np.int64), alpha=a_.ravel(), rho=r_.ravel(), init=i_.ravel().astype(np.int32),
                n=n)


def train_correlated(alphas, rhos, seeds, *, params: TiedAttentionParams, d: int, mean_norm: float = 1.0,
                     inits=("positional", "semantic"), config: TrainConfig = TrainConfig(), n_test: int = 1000,
                     options: RunOptions | None = None) -> dict[str, np.ndarray]:
    """Train tied students on mixture data for every `(rho, alpha, init, seed)` at dimension `d` through
    `run_chunked` (one jitted vmap of `correlated_run` per chunk). Returns the task columns and the metrics."""
    for r in np.atleast_1d(rhos):
        two_cluster_law(r, mean_norm)      # validates rho and mean_norm
    d = check_positive_int(d, "d")
    bad = [i for i in inits if i not in INITS]
    if bad:
        raise ValueError(f"inits must be names from {INITS}, got {inits}")
    validate_params(params)
    tasks = run_tasks(alphas, rhos, seeds, inits, d)
    n_max = int(tasks["n"].max())
    one = functools.partial(correlated_run, params=params, mean_norm=mean_norm, d=d, n_max=n_max, config=config,
                            n_test=n_test)

    def fn(chunk):
        return jax.vmap(one)(*(jnp.asarray(chunk[k]) for k in ("seed", "alpha", "rho", "init", "n")))

    cfg = dict(kind="correlated_runs", d=d, n_max=n_max, mean_norm=float(mean_norm), n_test=n_test,
               train=dataclasses.asdict(config), sigma=np.asarray(params.sigma).tolist(), lam=float(params.lam),
               omega=float(params.omega), A=np.asarray(params.A).tolist(), C=np.asarray(params.C).tolist())
    out = run_chunked(fn, tasks, cfg, run_options(options))
    metrics = {k: np.asarray(v) for k, v in out.items() if k not in tasks}
    return {**tasks, **metrics, "d": np.full(len(tasks["seed"]), d)}


# ----------------------------------------------------------------------------
# Theory, thresholds, outputs, figure
# ----------------------------------------------------------------------------


def correlated_params(omega: float = 0.3, *, sigma: float = 0.5, lam: float = 0.01) -> TiedAttentionParams:
    """The paper's setting (`L = 2`, `A = [[.6, .4], [.4, .6]]`, `C = [[1], [-1]]`) at `omega`."""
    return make_params(1.0, omega, sigma=sigma, lam=lam)


def theory_tables(preset: "CorrelatedPreset", params: TiedAttentionParams, run: ExtensionRun = ExtensionRun()):
    """Main-SE phase diagram (the mixture fixed points with `m_cluster = 0`), plus the cluster gain per point and
    `rho`. Returns `(theory columns, theory thresholds)`."""
    grid = PhaseGrid(tuple(preset.alphas), (float(preset.omega),))
    cfg = PhaseConfig(seeds={b: CENSUS_SEEDS[b][:1] for b in PHASE_BRANCHES})
    diagram = phase_diagram(grid, params, config=cfg, options=run.options("theory"))
    pts = {k: np.asarray(v) for k, v in diagram.points.items()}
    keep = np.asarray(pts["is_branch"], bool) & np.isfinite(np.asarray(pts["train_loss"], float))
    pts = {k: v[keep] for k, v in pts.items()}
    rule = SobolRule.create(4, log2_n=preset.gain_log2_n, n_replicas=4)
    rows = {k: [] for k in list(pts) + ["rho", "mean_norm", "m_cluster", "cluster_gain", "cluster_gain_err"]}
    for rho in preset.rhos:
        law = two_cluster_law(rho, preset.mean_norm)
        for i in range(len(pts["alpha"])):
            with float64_scope():
                ov = Overlaps(q0=jnp.asarray([[pts["q0_0"][i]]]), m=jnp.asarray([[pts["m0_0"][i]]]),
                              V0=jnp.asarray([[pts["V0_0"][i]]]), theta0=jnp.asarray([[pts["theta0_0"][i]]]))
                p_i = params.replace(alpha=jnp.asarray(pts["alpha"][i]), omega=jnp.asarray(pts["omega"][i]))
                g, ge = cluster_gain_with_error(ov, p_i, law, rule)
            for k in pts:
                rows[k].append(pts[k][i])
            rows["rho"].append(float(rho))
            rows["mean_norm"].append(float(preset["mean_norm"]))
            rows["m_cluster"].append(0.0)
            rows["cluster_gain"].append(g)
            rows["cluster_gain_err"].append(ge)
    theory = {k: np.asarray(v) for k, v in rows.items()}
    theory["branch"] = np.asarray(PHASE_BRANCHES)[theory["branch"].astype(int)]
    theory["status"] = status_names(theory["status"])
    th = diagram.thresholds
    thr = dict(source=[], d=[], rho=[], alpha_c=[], alpha_c_err=[], alpha_c_status=[], shift=[], shift_err=[],
               alpha_l=[], alpha_l_err=[], alpha_l_status=[], omega=[])
    for rho in preset["rhos"]:
        thr["source"].append("theory")
        thr["d"].append(-1)
        thr["rho"].append(float(rho))
        for k in ("alpha_c", "alpha_c_err", "alpha_l", "alpha_l_err"):
            thr[k].append(float(np.asarray(th[k])[0]))
        thr["alpha_c_status"].append(str(np.asarray(th["alpha_c_status"])[0]))
        thr["alpha_l_status"].append(str(np.asarray(th["alpha_l_status"])[0]))
        thr["omega"].append(float(preset["omega"]))
        # The fixed points do not depend on rho while m_cluster = 0 is stable (cluster_gain < 1): zero shift.
        thr["shift"].append(0.0)
        thr["shift_err"].append(0.0)
    return theory, thr


def empirical_thresholds(runs: dict) -> dict[str, np.ndarray]:
    """Per `(d, rho)` of the runs (init names): `alpha_c` where the seed mean of `e_t(semantic) - e_t(positional)`
    (paired by seed) crosses zero, its 95% bootstrap error over seeds, and the paired shift `alpha_c(rho) -
    alpha_c(rho = 0)` (same seeds and resamples; `framework.empirical_alpha_c`)."""
    rows = []
    for d in np.unique(runs["d"]):
        at_d = np.asarray(runs["d"]) == d
        rhos = np.unique(runs["rho"][at_d])
        ref = 0.0 if 0.0 in rhos else rhos[0]
        tables = {r: paired_gap(runs, at_d & (runs["rho"] == r)) for r in rhos}
        for r in rhos:
            (alphas, delta), reference = tables[r], tables[ref][1]
            rows.append(dict(source="experiment", d=int(d), rho=float(r),
                             **empirical_alpha_c(alphas, delta, reference)))
    return {k: np.asarray([row[k] for row in rows]) for k in rows[0]}


def make_figure(result: ExtensionResult):
    """Four panels at the preset's omega: (a) training loss and (b) test error of both branches vs alpha (theory and
    the largest d), (c) `e_t(semantic) - e_t(positional)` whose zero is `alpha_c` (theory, every d and rho),
    (d) the SE gain out of `m_cluster = 0` and the measured `|m_cluster|`."""
    from matplotlib.figure import Figure

    th, runs = result.theory, result.runs
    init_names = np.asarray(runs["init"]).astype(str)
    fig = Figure(figsize=(13, 9.5))
    axes = fig.subplots(2, 2).ravel()
    colors = {"positional": "tab:orange", "semantic": "tab:blue"}
    rhos = np.unique(runs["rho"])
    markers = ("o", "s", "^", "D", "v")
    ds = np.unique(runs["d"])
    dmax = int(ds.max())
    rho0 = th["rho"] == th["rho"].min()
    for key, ax, label in (("train_loss", axes[0], "training loss $e_t$"),
                           ("test_error", axes[1], r"test error $\epsilon_g$")):
        for b in PHASE_BRANCHES:
            sel = rho0 & (th["branch"] == b)
            draw_band(ax, th["alpha"][sel], th[key][sel], th[key + "_err"][sel], color=colors[b], band_alpha=0.3,
                      band_lw=None, label=f"state evolution, {b} (every rho)")
        for k, rho in enumerate(rhos):
            for b in PHASE_BRANCHES:
                sel = (runs["rho"] == rho) & (init_names == b) & (runs["d"] == dmax)
                sm = seed_means({k: np.asarray(v)[sel] for k, v in runs.items()}, key, ("alpha",), sort=True)
                al, mean, se = sm["alpha"], sm[f"{key}_mean"], sm[f"{key}_sem"]
                ax.errorbar(al + 0.02 * (k - 0.5), mean, yerr=se, fmt=markers[k % 5], mfc="none" if k else colors[b],
                            color=colors[b], ms=6, capsize=2, label=f"trained, {b} init, rho={rho:g}")
        ax.set_xlabel(r"sample complexity $\alpha = n/d$")
        ax.set_ylabel(label)
    axes[0].set_title(f"(a) training loss per dimension, d={dmax}", fontsize=10)
    axes[1].set_title(f"(b) test error on fresh mixture samples, d={dmax}", fontsize=10)
    axes[0].legend(fontsize=7, loc="upper left")
    ax = axes[2]
    alphas = np.unique(th["alpha"])
    dth = []
    for a in alphas:
        e = {b: th["train_loss"][rho0 & (th["alpha"] == a) & (th["branch"] == b)] for b in PHASE_BRANCHES}
        dth.append(e["semantic"][0] - e["positional"][0] if all(len(v) for v in e.values()) else np.nan)
    ax.plot(alphas, dth, "k-", lw=2, label="state evolution (every rho)")
    styles = {int(d): ls for d, ls in zip(ds, ("--", "-", ":", "-."))}
    for k, rho in enumerate(rhos):
        for d in ds:
            sel = (runs["rho"] == rho) & (runs["d"] == d)
            al = np.unique(runs["alpha"][sel])
            diffs = []
            for x in al:
                e = {b: runs["train_loss"][sel & (runs["alpha"] == x) & (init_names == b)] for b in PHASE_BRANCHES}
                diffs.append(e["semantic"] - e["positional"])          # paired by seed (same order)
            mean = np.array([v.mean() for v in diffs])
            se = np.array([v.std(ddof=1) / np.sqrt(len(v)) for v in diffs])
            ax.errorbar(al + 0.02 * (k - 0.5), mean, yerr=se, fmt=markers[k % 5] + styles[int(d)],
                        color=("tab:green", "tab:purple", "tab:red", "tab:brown", "tab:gray")[k % 5],
                        mfc="none" if d != dmax else None, capsize=2, label=f"trained, rho={rho:g}, d={int(d)}")
    ax.axhline(0.0, color="gray", lw=0.8)
    ax.set_xlabel(r"sample complexity $\alpha = n/d$")
    ax.set_ylabel(r"$e_t$(semantic) $-$ $e_t$(positional)")
    ax.set_title(r"(c) branch gap; its zero is $\alpha_c$ (error bars: s.e. of the paired seed differences)",
                 fontsize=10)
    ax.legend(fontsize=7, loc="lower left")
    ax = axes[3]
    for k, rho in enumerate(rhos):
        for b in PHASE_BRANCHES:
            sel = (th["rho"] == rho) & (th["branch"] == b)
            o = np.argsort(th["alpha"][sel])
            ax.errorbar(th["alpha"][sel][o], th["cluster_gain"][sel][o], yerr=th["cluster_gain_err"][sel][o],
                        fmt="-" + markers[k % 5], color=colors[b], mfc="none" if k else colors[b], capsize=2,
                        label=f"SE gain, {b}, rho={rho:g}")
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xlabel(r"sample complexity $\alpha = n/d$")
    ax.set_ylabel(r"gain of the SE map on $m_{cluster}$ at $m_{cluster}=0$")
    ax.set_title(r"(d) stability of $m_{cluster}=0$ (unstable above the dashed line 1; bars: 95% quadrature error)",
                 fontsize=9)
    ax.set_ylim(top=1.3)
    ax.legend(fontsize=7, loc="lower left")
    ins = ax.inset_axes([0.62, 0.55, 0.35, 0.35])
    for k, rho in enumerate(rhos):
        for d in ds:
            sel = (runs["rho"] == rho) & (runs["d"] == d)
            al = np.unique(runs["alpha"][sel])
            mc = np.array([np.sqrt(np.mean(runs["m_cluster"][sel & (runs["alpha"] == x)] ** 2)) for x in al])
            ax_c = ("tab:green", "tab:purple", "tab:red", "tab:brown", "tab:gray")[k % 5]
            ins.plot(al, mc, markers[k % 5] + styles[int(d)], color=ax_c, ms=4, mfc="none" if d != dmax else ax_c,
                     label=f"rho={rho:g}, d={int(d)}")
    ins.set_title(r"trained: rms $m_{cluster}$ (theory 0)", fontsize=7)
    ins.tick_params(labelsize=6)
    ins.set_ylim(0, 1.6 * max(ins.get_ylim()[1], 1e-3))
    ins.legend(fontsize=5, ncol=2, loc="upper center")
    omega = float(th["omega"][0])
    a_norm = float(th["mean_norm"][0])
    fig.suptitle(f"Correlated tokens: two clusters $\\mu = \\pm {a_norm:g}\\, v$, $P(c_1 = c_2) = (1+\\rho)/2$; "
                 f"paper setting, $\\omega$ = {omega:g}.\nLines: state evolution (bands: 95% quadrature error); "
                 "markers: trained tied students (L-BFGS), mean over seeds, error bars = standard error over seeds",
                 fontsize=10)
    fig.tight_layout()
    return fig


THEORY_FIRST = ("alpha", "omega", "rho", "branch")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CorrelatedPreset(ExtensionPreset):
    """`ExtensionPreset` at one `omega`, with the label correlations `rhos`, the cluster means' norm and the
    quadrature of the cluster gain (`gain_log2_n`)."""

    omega: float
    rhos: tuple[float, ...]
    mean_norm: float
    gain_log2_n: int


PRESETS = {
    "cpu": CorrelatedPreset(alphas=(0.5, 0.75, 1.0, 1.25, 1.5, 2.0), omega=0.3, rhos=(0.0, 0.9), mean_norm=1.0,
                            train_alphas=(0.75, 1.0, 1.25, 1.5, 2.0), seeds=(0, 1, 2, 3), ds=(200, 800),
                            gain_log2_n=11),
    "gpu": CorrelatedPreset(alphas=alpha_range(0.3, 2.51, 0.1), omega=0.3, rhos=(-0.9, -0.5, 0.0, 0.5, 0.9),
                            mean_norm=1.0, train_alphas=(0.5, 0.75, 1.0, 1.125, 1.25, 1.375, 1.5, 1.75, 2.0, 2.5),
                            seeds=tuple(range(10)), ds=(200, 400, 800, 1600), gain_log2_n=13),
}
"""`cpu`: the committed results; `gpu`: larger grids, more seeds and sizes."""


def compute(preset: str, P: CorrelatedPreset, *, run: ExtensionRun = ExtensionRun()) -> ExtensionResult:
    """Theory (main-SE fixed points at the preset's omega with the cluster gain per `rho`), students (both inits,
    every `rho`, `seeds`, `ds`) of the preset `P` (named `preset`), resumable under `run.run_dir`."""
    params = correlated_params(P.omega)
    theory, thr_theory = theory_tables(P, params, run)
    runs = concat_tables([train_correlated(P.train_alphas, P.rhos, P.seeds, params=params, d=d,
                                           mean_norm=P.mean_norm, options=run.options(f"runs_d{d}"))
                          for d in P.ds])
    runs["omega"] = np.full(len(runs["alpha"]), float(P.omega))
    runs["init"] = np.asarray(INITS)[runs["init"].astype(int)]
    runs["status"] = status_names(runs["status"])
    summary = dict(extension=NAME, preset=preset, **P.to_json(),
                   model="x_l = mu_{c_l} + z_l, mu = +-mean_norm v, P(c1=c2)=(1+rho)/2, uniform marginals; "
                         "paper setting sigma=0.5, lambda=0.01, A=[[.6,.4],[.4,.6]], C=[[1],[-1]]",
                   max_cluster_gain=float(np.max(theory["cluster_gain"])))
    return finish(ExtensionResult(theory=ordered(theory, THEORY_FIRST), runs=runs, thresholds=thr_theory,
                                  summary=summary))


def replicon_problem(P):
    """`phasejax.extensions.stability.Problem` of the theory rows: the main setting at the preset's `omega`, default
    scheme. The rows are mixture fixed points with `m_cluster = 0`, where every label configuration has the main
    model's fields, so their replicon is the main model's (`phasejax.extensions.stability`)."""
    params = correlated_params(omega=float(preset_value(P, "omega")))
    return lambda row: (params, None)


def finish(result: ExtensionResult) -> ExtensionResult:
    """The parts derived from `theory` and `runs`: theory at each run and the experiments' thresholds (after the
    theory's rows of `result.thresholds`)."""
    th, thr = result.theory, result.thresholds
    runs = attach_theory(result.runs, th, on=("alpha", "rho"), branch=result.runs["init"])
    theory_rows = {k: np.asarray(v)[np.asarray(thr["source"]) == "theory"] for k, v in thr.items()}
    theory_rows["d"] = theory_rows["d"].astype(int)
    exp = empirical_thresholds(runs)
    n = len(exp["rho"])
    fill = dict(omega=float(np.asarray(th["omega"])[0]), alpha_l_status="")
    thresholds = {k: np.concatenate([np.asarray(theory_rows[k], dtype=object),
                                     np.asarray(exp[k] if k in exp else [fill.get(k, np.nan)] * n, dtype=object)])
                  for k in theory_rows}
    return ExtensionResult(theory=th, runs=ordered(runs, RUN_COLUMNS, only=True), thresholds=thresholds,
                           summary=result.summary)


def figures(result: ExtensionResult) -> dict:
    """`correlated.png` (`make_figure`)."""
    return {"correlated.png": make_figure(result)}
