"""One run and the `(p, q) x tied x seed` sweep."""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

from phasejax.bundle import BundleFile, ResultBundle
from phasejax.tasks._common import F32, Array
from phasejax.tasks.markov.critical import stationary_direction_curvature
from phasejax.tasks.markov.data import check_positive_int, check_probability
from phasejax.tasks.markov.model import init_markov_params, readout
from phasejax.tasks.markov.train import _train_step, estimate_population_loss, markov_optimizer, train_markov


# ----------------------------------------------------------------------------
# One run and the (p, q) x tied x seed sweep
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MarkovTraining:
    """Model size and training of every run of a sweep (everything the results depend on besides the grid).

    `optimizer="sgd"` (default: plain SGD, the closest to the gradient flow of the theory)
    or `"adamw"` (Makkuva et al.'s choice; see the README section for how it escapes).
    The learning rate warms up linearly over `warmup_fraction * steps`, then follows
    `schedule`; `grad_clip > 0` clips gradients to that global norm (default 0: off).
    `n_eval` fresh chains measure the final population loss (`estimate_population_loss`);
    `n_curve` bins of the training loss are kept.
    """

    d: int = 8
    length: int = 32
    hidden: int | None = None
    init_std: float = 0.02
    steps: int = 1000
    batch_size: int = 16
    optimizer: str = "sgd"
    learning_rate: float = 0.5
    weight_decay: float = 0.0
    schedule: str = "cosine"
    warmup_fraction: float = 0.02
    grad_clip: float = 0.0
    n_eval: int = 4096
    n_curve: int = 25

    def __post_init__(self):
        check_positive_int("d", self.d)
        check_positive_int("length", self.length, 2)
        if self.hidden is not None:
            check_positive_int("hidden", self.hidden)
        for name in ("steps", "batch_size", "n_eval", "n_curve"):
            check_positive_int(name, getattr(self, name))
        if self.n_curve > self.steps:
            raise ValueError(f"n_curve must be <= steps, got n_curve={self.n_curve}, steps={self.steps}")
        if not (math.isfinite(self.init_std) and self.init_std >= 0):
            raise ValueError(f"init_std must be a finite number >= 0, got init_std={self.init_std}")
        self.make_optimizer()   # validates the optimiser settings

    @property
    def width(self) -> int:
        """Feed-forward width `r` (`4 d` unless given)."""
        return 4 * self.d if self.hidden is None else self.hidden

    def make_optimizer(self) -> optax.GradientTransformation:
        return markov_optimizer(self.learning_rate, self.steps, weight_decay=self.weight_decay,
                                warmup_fraction=self.warmup_fraction, schedule=self.schedule,
                                optimizer=self.optimizer, grad_clip=self.grad_clip)


def markov_run(seed, p, q, tied, training: MarkovTraining = MarkovTraining(), dtype=F32) -> dict[str, Array]:
    """One run, pure in `seed`, `p`, `q`, `tied` (vmap over them): Gaussian init, online training, evaluation.

    Returns `final_loss` (control-variate population estimate), `final_loss_se`,
    `final_loss_mc` (plain Monte Carlo), `train_loss_tail` (mean training loss over the last
    10% of steps), `e_norm`, `readout_norm` (final `|e|`, `|a|`) and `curve (n_curve,)` (binned training loss).
    """
    tr = training
    k_init, k_train, k_eval = jax.random.split(jax.random.PRNGKey(seed), 3)
    params0 = init_markov_params(k_init, tr.d, tr.length, tr.width, tr.init_std, dtype)
    params, losses = train_markov(params0, k_train, p, q, tied, steps=tr.steps, batch_size=tr.batch_size,
                                  optimizer=tr.make_optimizer())
    ev = estimate_population_loss(params, k_eval, p, q, tied, tr.n_eval)
    per_bin = tr.steps // tr.n_curve
    tail = max(1, tr.steps // 10)
    return dict(final_loss=ev["loss"], final_loss_se=ev["loss_se"], final_loss_mc=ev["loss_mc"],
                train_loss_tail=jnp.mean(losses[-tail:]), e_norm=jnp.linalg.norm(params["e"]),
                readout_norm=jnp.linalg.norm(readout(params, tied)),
                curve=jnp.mean(losses[: per_bin * tr.n_curve].reshape(tr.n_curve, per_bin), 1))


def markov_trace(seed, p, q, tied, training: MarkovTraining = MarkovTraining(), n_points: int = 25,
                 n_chains: int = 1024, dtype=F32) -> dict[str, Array]:
    """The run of `markov_run` (same seed, same data) observed at `n_points` equally spaced steps.

    Returns `step (n_points,)`, `loss` (mean training loss over each segment), `e_norm` and
    `curvature` (`stationary_direction_curvature` at the end of each segment). Needs
    `steps % n_points == 0`. Shows how a tied run leaves the stationary point: the
    curvature along `e` turns negative before `|e|` grows (AdamW), or stays at
    `2 kappa + ...` (SGD).
    """
    tr = training
    n_points = check_positive_int("n_points", n_points)
    if tr.steps % n_points:
        raise ValueError(f"n_points must divide steps={tr.steps}, got n_points={n_points}")
    k_init, k_train, k_eval = jax.random.split(jax.random.PRNGKey(seed), 3)
    params0 = init_markov_params(k_init, tr.d, tr.length, tr.width, tr.init_std, dtype)
    optimizer = tr.make_optimizer()
    step = _train_step(p, q, tied, tr.length, tr.batch_size, optimizer, dtype)
    keys = jax.random.split(k_train, tr.steps).reshape(n_points, tr.steps // n_points, -1)

    def segment(carry, ks):
        carry, losses = jax.lax.scan(step, carry, ks)
        params = carry[0]
        return carry, (jnp.mean(losses), jnp.linalg.norm(params["e"]),
                       stationary_direction_curvature(params, k_eval, p, q, tied, n_chains))

    _, (loss, e_norm, curvature) = jax.lax.scan(segment, (params0, optimizer.init(params0)), keys)
    return dict(step=(jnp.arange(1, n_points + 1) * (tr.steps // n_points)), loss=loss, e_norm=e_norm,
                curvature=curvature)


def plot_markov_trace(traces: dict, p: float, q: float, training: MarkovTraining, path: str) -> str:
    """`|e|`, training loss and the curvature along `e` at the stationary point vs step, one line per seed
    (`traces` as returned by a vmap of `markov_trace` over seeds, numpy)."""
    from matplotlib.figure import Figure

    from phasejax.plotting import save_figure

    fig = Figure(figsize=(13.5, 3.6))
    axes = fig.subplots(1, 3, gridspec_kw=dict(wspace=0.42))
    steps = np.asarray(traces["step"])[0]
    h_rate, h_pi = reference_losses(p, q)
    kappa = p * q / (p + q) ** 2 * (p + q - 1)
    for k in range(np.asarray(traces["loss"]).shape[0]):
        lab = "one line per seed" if k == 0 else None
        axes[0].plot(steps, traces["loss"][k], "C0-", lw=1, label=lab)
        axes[1].semilogy(steps, traces["e_norm"][k], "C1-", lw=1, label=lab)
        axes[2].plot(steps, traces["curvature"][k], "C3-", lw=1, label=lab)
    axes[0].axhline(float(h_pi), color="k", ls="--", lw=1, label=r"$H(\pi)$")
    axes[0].axhline(float(h_rate), color="k", ls=":", lw=1, label="entropy rate")
    axes[2].axhline(2 * kappa, color="k", ls="--", lw=1, label=r"$2\kappa = 2\pi_0\pi_1(p+q-1)$")
    axes[2].axhline(0, color="0.5", lw=0.8)
    labels = ("training loss (nats, segment mean)", "$|e|$ (embedding norm)",
              r"$\partial_t^2 L(e = t u)$ at $t = 0$, $u = e/|e|$")
    for ax, lab in zip(axes, labels):
        ax.set_xlabel("training step")
        ax.set_ylabel(lab)
        ax.legend(fontsize=7)
    fig.suptitle(f"Tied runs at p = {p:g}, q = {q:g} ({training.optimizer}, lr {training.learning_rate:g}): "
                 "curvature along the embedding at the stationary point, given the other weights "
                 "(negative: the bad minimum has become a saddle)", fontsize=9)
    return save_figure(fig, path, dpi=100)


def curve_steps(training: MarkovTraining) -> np.ndarray:
    """Centre step (1-based) of each bin of `markov_run`'s `curve`, `(n_curve,)`."""
    per_bin = training.steps // training.n_curve
    return per_bin * np.arange(training.n_curve) + (per_bin + 1) / 2


@dataclasses.dataclass(frozen=True)
class MarkovGrid:
    """The `(p, q)` grid x `tied` (1 tied, 0 untied) x seeds; `tasks()` is the flat table (order p, q, tied, seed)."""

    ps: tuple[float, ...] = (0.1, 0.25, 0.4, 0.55, 0.7, 0.85)
    qs: tuple[float, ...] = (0.1, 0.25, 0.4, 0.55, 0.7, 0.85)
    tied: tuple[int, ...] = (1, 0)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)

    def __post_init__(self):
        for name, kind in (("ps", float), ("qs", float), ("tied", int), ("seeds", int)):
            vals = tuple(kind(v) for v in np.atleast_1d(getattr(self, name)))
            object.__setattr__(self, name, vals)
            if not vals:
                raise ValueError(f"{name} must not be empty")
        check_probability("p", np.asarray(self.ps))
        check_probability("q", np.asarray(self.qs))
        if not set(self.tied) <= {0, 1}:
            raise ValueError(f"tied must hold 0 (untied) and/or 1 (tied), got tied={self.tied}")
        if min(self.seeds) < 0:
            raise ValueError(f"seeds must be >= 0, got seeds={self.seeds}")

    def tasks(self) -> dict[str, np.ndarray]:
        p, q, t, s = np.meshgrid(self.ps, self.qs, self.tied, self.seeds, indexing="ij")
        return dict(p=p.ravel().astype(np.float32), q=q.ravel().astype(np.float32), tied=t.ravel().astype(np.int32),
                    seed=s.ravel().astype(np.int64))


RUN_COLUMNS = ("p", "q", "tied", "seed", "final_loss", "entropy_rate", "stationary_entropy", "stuck",
               "at_entropy_rate", "gap", "final_loss_se", "final_loss_mc", "train_loss_tail", "e_norm", "readout_norm")
"""Columns of `runs.csv` (the grid cell, the final loss, the two references and `stuck` first; `gap = final_loss -
entropy_rate`)."""


def reference_losses(p, q) -> tuple[np.ndarray, np.ndarray]:
    """`(entropy_rate, stationary_entropy)` in float64 (numpy) for arrays `p`, `q`."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    check_probability("p", p)
    check_probability("q", q)
    h = lambda x: -x * np.log(x) - (1 - x) * np.log1p(-x)  # noqa: E731
    return (q * h(p) + p * h(q)) / (p + q), h(p / (p + q))


def shortest_float64(values) -> np.ndarray:
    """Float32 values as the float64 of their shortest decimal repr (exact for float32; short in CSV files);
    other dtypes unchanged."""
    a = np.asarray(values)
    if a.dtype != np.float32:
        return a
    return np.asarray([float(str(v)) for v in a.ravel()], np.float64).reshape(a.shape)


def classify_runs(runs: Mapping[str, np.ndarray], tol: float = 1e-3) -> dict[str, np.ndarray]:
    """Add `entropy_rate`, `stationary_entropy` (float64 closed forms), `gap`, `stuck` (`|final_loss - H(pi)| < tol`)
    and `at_entropy_rate` (`|final_loss - entropy_rate| < tol`) to a table with `p`, `q`, `final_loss`."""
    out = dict(runs)
    h_rate, h_pi = reference_losses(runs["p"], runs["q"])
    loss = np.asarray(runs["final_loss"], np.float64)
    out.update(entropy_rate=h_rate, stationary_entropy=h_pi, gap=loss - h_rate,
               stuck=np.abs(loss - h_pi) < tol, at_entropy_rate=np.abs(loss - h_rate) < tol)
    return out


def cell_summary(runs: Mapping[str, np.ndarray]) -> list[dict]:
    """Per `(p, q, tied)` cell: seeds, fraction stuck / at the entropy rate, mean and std of the gap."""
    cells = []
    keys = sorted({(round(float(p), 12), round(float(q), 12), int(t))
                   for p, q, t in zip(runs["p"], runs["q"], runs["tied"])})
    for p, q, t in keys:
        sel = np.isclose(runs["p"], p) & np.isclose(runs["q"], q) & (np.asarray(runs["tied"]) == t)
        gap = np.asarray(runs["gap"], np.float64)[sel]
        cells.append(dict(p=p, q=q, tied=t, p_plus_q=p + q, n_seeds=int(sel.sum()),
                          fraction_stuck=float(np.mean(runs["stuck"][sel])),
                          fraction_at_entropy_rate=float(np.mean(runs["at_entropy_rate"][sel])),
                          mean_gap=float(gap.mean()), std_gap=float(gap.std(ddof=1)) if gap.size > 1 else 0.0,
                          entropy_gap=float(runs["stationary_entropy"][sel][0] - runs["entropy_rate"][sel][0])))
    return cells


def expected_facts(cells: list[dict], low: float = 0.8, high: float = 1.2) -> dict:
    """The expected facts, checked on the cells: tied runs stuck in most seeds where `p + q >= high`, at the entropy rate
    in most seeds where `p + q <= low`; untied runs at the entropy rate (counts of cells that pass)."""
    def count(tied, region, key):
        sel = [c for c in cells if c["tied"] == tied and region(c["p_plus_q"])]
        ok = [c for c in sel if c[key] > 0.5]
        return dict(cells=len(sel), cells_passing=len(ok), holds=bool(sel) and len(ok) == len(sel),
                    mean_fraction=float(np.mean([c[key] for c in sel])) if sel else float("nan"))

    hi = lambda s: s >= high - 1e-9  # noqa: E731
    lo = lambda s: s <= low + 1e-9  # noqa: E731
    return {f"tied_stuck_where_p+q>={high}": count(1, hi, "fraction_stuck"),
            f"tied_at_entropy_rate_where_p+q<={low}": count(1, lo, "fraction_at_entropy_rate"),
            f"untied_at_entropy_rate_where_p+q>={high}": count(0, hi, "fraction_at_entropy_rate"),
            f"untied_at_entropy_rate_where_p+q<={low}": count(0, lo, "fraction_at_entropy_rate")}


@dataclasses.dataclass
class MarkovSweep(ResultBundle):
    """Result of `markov_sweep`: `runs` (columns `RUN_COLUMNS`), `curves` (long table `run, step, loss`),
    `summary` (settings, per-cell statistics, the expected facts). `write`/`load` round-trip through CSV/JSON
    (`runs.csv`, `curves.csv`, `summary.json`; a `phasejax.bundle.ResultBundle`)."""

    runs: dict
    curves: dict
    summary: dict

    FILES = (BundleFile("runs.csv", columns=RUN_COLUMNS, required=RUN_COLUMNS[:9],
                        dtypes=dict(stuck=bool, at_entropy_rate=bool)),
             BundleFile("curves.csv", columns=("run", "step", "loss")),
             BundleFile("summary.json"))


def markov_memory_estimate(training: "MarkovTraining", chunk_size: int = 1) -> int:
    """Bytes a chunk of `chunk_size` training runs needs, about: per run, 3 times the float32 numbers of a
    training batch with its activations, `batch_size N (N + 4 d + width)` (`N` the chain length: the attention
    matrices are `N x N`), of the evaluation chains, `n_eval N`, and of one evaluation block's attention,
    `max(2^20, N^2)` (`estimate_population_loss`), the runs side by side. The `markov` command refuses, before
    any compile, a chunk beyond `phasejax.sweep.available_memory()`."""
    t = training
    per_run = t.batch_size * t.length * (t.length + 4 * t.d + t.width) + t.n_eval * t.length + max(2**20, t.length**2)
    return int(3 * 4 * chunk_size * per_run)


def markov_sweep(grid: MarkovGrid = MarkovGrid(), training: MarkovTraining = MarkovTraining(), *, tol: float = 1e-3,
                 options=None) -> MarkovSweep | None:
    """Train every `(p, q, tied, seed)` of `grid` (`markov_run`, vmapped in resumable chunks; `options` as in
    `phasejax.sweep.run_chunked`, default `RunOptions(chunk_size=64)`). `None` while chunks are missing."""
    from phasejax.sweep import RunOptions, run_chunked, run_options

    options = run_options(options if options is not None else RunOptions(chunk_size=64))
    if not (math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a finite number > 0, got tol={tol}")

    def fn(chunk):
        one = lambda s, p, q, t: markov_run(s, p, q, t, training)  # noqa: E731
        return jax.vmap(one)(jnp.asarray(chunk["seed"]), jnp.asarray(chunk["p"]), jnp.asarray(chunk["q"]),
                             jnp.asarray(chunk["tied"], F32))

    config = dict(kind="markov_sweep", training=dataclasses.asdict(training), width=training.width,
                  data="online: a fresh batch of stationary chains per step", dtype="float32")
    tasks = grid.tasks()
    out = run_chunked(fn, tasks, config, options)
    if out is None:
        return None
    curve = shortest_float64(out.pop("curve"))
    runs = {k: shortest_float64(v) for k, v in out.items()}
    runs.update(tasks)
    runs["p"], runs["q"] = shortest_float64(tasks["p"]), shortest_float64(tasks["q"])   # the grid's decimals
    runs = classify_runs(runs, tol)
    n, m = curve.shape
    curves = dict(run=np.repeat(np.arange(n), m), step=np.tile(curve_steps(training), n), loss=curve.ravel())
    cells = cell_summary(runs)
    summary = dict(grid=dataclasses.asdict(grid), training=dataclasses.asdict(training), width=training.width,
                   tol=tol, cells=cells, facts=expected_facts(cells), n_runs=n,
                   loss_units="nats per predicted token", final_loss="control-variate population estimate "
                   "(estimate_population_loss) on training.n_eval fresh chains")
    return MarkovSweep(runs=runs, curves=curves, summary=summary)
