"""Part A of the histogram task: one transformer, two solutions (positional vs semantic attention).

`HistogramTransformer` (`flax.nnx`): the input of position `i` is
`x_i = [E_tok[t_i], E_pos[i]]`, a token half and a positional half of `d / 2`
entries each (so "semantic half" and "positional half" are well defined);
one dot-product attention layer whose queries and keys read `x * mask`
(values read all of `x`), residual, layer norm, a ReLU MLP of width `p` and
per-position logits over the counts `0..L`. The mask is a frozen
`nnx.Variable`: `"semantic"` lets the attention pattern see only the tokens,
`"positional"` only the positions, `"full"` both.

`train_transformer(...)` trains one model on fresh batches (Adam or SGD; pure,
vmap it over seeds); `attention_kind` measures how positional or semantic an
attention pattern is. `two_solutions(config, seeds, options=...)` is the
whole experiment of part A (mask, train, lift the mask, perturb, keep
training, measure) as one vmapped, chunked, resumable sweep over
`(solution, seed)`, returning a `TwoSolutions` result (`write`, `load`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from phasejax.bundle import BundleFile, ResultBundle
from phasejax.precision import check_float_dtype, dtype_scope
from phasejax.sweep import RunOptions, canonical_config, run_chunked, run_options
from phasejax.empirics.data import check_positive_int
from phasejax.tasks._common import Array, train_online
from phasejax.tasks.histogram.data import HistogramTask, masked_accuracy, masked_cross_entropy, sample_batch


MASKS = ("semantic", "positional", "full")
SOLUTIONS = ("semantic", "positional")
"""The two masked solutions of part A (codes 0, 1 in the task table of `two_solutions`)."""


def attention_mask(kind: str, d: int, dtype=jnp.float32) -> Array:
    """`(d,)` 0/1 mask of the attention's query/key input: token half, positional half or all."""
    if kind not in MASKS:
        raise ValueError(f"mask must be one of {MASKS}, got {kind!r}")
    d = check_positive_int(d, "d")
    if d % 2:
        raise ValueError(f"d must be even (two halves), got d={d}")
    half = jnp.arange(d) < d // 2
    return {"semantic": half, "positional": ~half, "full": jnp.ones(d, bool)}[kind].astype(check_float_dtype(dtype))


class FrozenMask(nnx.Variable):
    """A non-trainable variable (not an `nnx.Param`, so optimisers never see it)."""


class HistogramTransformer(nnx.Module):
    """One-layer transformer for the histogram task (see the module docstring). Inputs `(..., L)` int tokens."""

    def __init__(self, task: HistogramTask, d: int = 64, p: int = 128, mask: str = "full", *, rngs: nnx.Rngs,
                 dtype=jnp.float32):
        d, p = check_positive_int(d, "d"), check_positive_int(p, "p")
        if d % 2:
            raise ValueError(f"d must be even, got d={d}")
        dtype = check_float_dtype(dtype)
        half = d // 2
        init = nnx.initializers.normal(1.0)
        kw = dict(dtype=dtype, param_dtype=dtype, rngs=rngs)
        self.tok = nnx.Embed(task.vocab, half, embedding_init=init, **kw)
        self.pos = nnx.Embed(task.length, half, embedding_init=init, **kw)
        self.query = nnx.Linear(d, d, use_bias=False, **kw)
        self.key = nnx.Linear(d, d, use_bias=False, **kw)
        self.value = nnx.Linear(d, d, use_bias=False, **kw)
        self.norm = nnx.LayerNorm(d, **kw)
        self.hidden = nnx.Linear(d, p, **kw)
        self.out = nnx.Linear(p, task.n_classes, **kw)
        self.mask = FrozenMask(attention_mask(mask, d, dtype))
        self.d = d

    def embed(self, tokens: Array) -> Array:
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[-1]), tokens.shape)
        return jnp.concatenate([self.tok(tokens), self.pos(positions)], axis=-1)

    def attention(self, tokens: Array) -> Array:
        """Attention matrices `(..., L, L)` (row softmax, stable)."""
        xm = self.embed(tokens) * self.mask[...]
        scores = self.query(xm) @ jnp.swapaxes(self.key(xm), -1, -2) / np.sqrt(self.d)
        return jax.nn.softmax(scores, axis=-1)

    def __call__(self, tokens: Array) -> Array:
        x = self.embed(tokens)
        h = self.norm(x + self.attention(tokens) @ self.value(x))
        return self.out(jax.nn.relu(self.hidden(h)))


def make_transformer(key: Array, task: HistogramTask, d: int, p: int, mask: str, dtype=jnp.float32):
    """`(graphdef, params, frozen)` of a fresh `HistogramTransformer` in `dtype` (split for pure training)."""
    return nnx.split(HistogramTransformer(task, d, p, mask, rngs=nnx.Rngs(key), dtype=dtype), nnx.Param, ...)


def train_transformer(graphdef, params, frozen, key: Array, task: HistogramTask, *, steps: int, batch_size: int,
                      optimizer: optax.GradientTransformation) -> tuple[object, Array]:
    """Train on fresh batches (one per step); returns `(params, losses (steps,))`. Pure; vmap over seeds."""
    return train_online(lambda prm, tokens, labels: masked_cross_entropy(nnx.merge(graphdef, prm, frozen)(tokens),
                                                                        labels),
                        params, key, lambda k: sample_batch(k, task, batch_size), steps=steps, optimizer=optimizer)


def transformer_accuracy(graphdef, params, frozen, key: Array, task: HistogramTask, n_test: int = 4096) -> Array:
    """Per-token accuracy on `n_test` fresh sequences."""
    tokens, labels = sample_batch(key, task, n_test)
    return masked_accuracy(nnx.merge(graphdef, params, frozen)(tokens), labels)


def attention_kind(attn: Array, tokens: Array) -> dict[str, Array]:
    """How semantic and how positional attention matrices `attn (n, L, L)` on `tokens (n, L)` are.

    * `same_token_mass`: mean over positions of the attention on positions
      holding the same token (itself included); `chance` is its value for
      uniform attention (mean count / L).
    * `input_dependence`: mean over `(i, j)` of the standard deviation of
      `attn[:, i, j]` across sequences, divided by the mean entry `1/L`
      (0 for an input-independent, purely positional pattern).
    """
    same = (tokens[:, :, None] == tokens[:, None, :]).astype(attn.dtype)
    L = attn.shape[-1]
    return dict(same_token_mass=jnp.mean(jnp.sum(attn * same, -1)), chance=jnp.mean(jnp.sum(same, -1)) / L,
                input_dependence=jnp.mean(jnp.std(attn, axis=0)) * L)


def perturb(params, key: Array, scale: float):
    """Add iid `N(0, scale^2)` noise to every parameter (drawn in float32, cast to each parameter's dtype)."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(key, len(leaves))
    return jax.tree_util.tree_unflatten(
        treedef, [x + scale * jax.random.normal(k, x.shape, jnp.float32).astype(x.dtype) for x, k in zip(leaves, keys)])


def relative_distance(a, b) -> Array:
    """`||a - b|| / ||b||` over whole parameter pytrees."""
    diff = jax.tree_util.tree_map(lambda x, y: x - y, a, b)
    return optax.tree_utils.tree_norm(diff) / optax.tree_utils.tree_norm(b)


def lift_mask(params, frozen):
    """Unmask the attention without changing the function: zero the query/key rows the mask hid, mask -> 1.

    Rows of `W_Q`, `W_K` acting on masked-out inputs never received a gradient
    (their input was 0) and still hold their random init; zeroing them makes
    the unmasked model compute exactly what the masked one did.
    """
    mask = frozen["mask"][...]
    params = jax.tree_util.tree_map(lambda x: x, params)   # copy the structure
    for name in ("query", "key"):
        params[name]["kernel"] = params[name]["kernel"].replace(params[name]["kernel"][...] * mask[:, None])
    frozen = jax.tree_util.tree_map(jnp.ones_like, frozen)
    return params, frozen


# ----------------------------------------------------------------------------
# Part A as one sweep: two masked solutions, unfrozen and perturbed
# ----------------------------------------------------------------------------


def _positive_number(value, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)) \
            or not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {name}={value!r}")
    return float(value)


def two_solutions_memory_estimate(config: "TwoSolutionsConfig", chunk_size: int = 1, dtype=jnp.float32) -> int:
    """Bytes a chunk of `chunk_size` runs of the two-solution experiment needs, about: per run, the test, probe
    and training sequences with their activations, `3 (n_test + n_probe + batch_size) L (d + L + p)` numbers,
    the runs side by side. The `histogram` command refuses, before any compile, a chunk beyond
    `phasejax.sweep.available_memory()`."""
    c = config
    rows = c.n_test + c.n_probe + c.batch_size
    return int(3 * chunk_size * rows * c.task.L * (c.d + c.task.L + c.p) * np.dtype(dtype).itemsize)


@dataclasses.dataclass(frozen=True)
class TwoSolutionsConfig:
    """Settings of the two-solution experiment (validated; all of it enters the run's fingerprint).

    Attributes:
      task: the histogram task (default `T = 15`, `L = 10`).
      d, p: model width (even) and MLP width.
      steps, learning_rate: phase 1, Adam on fresh batches with the attention masked.
      sgd_steps, sgd_learning_rate: phase 2, SGD on everything after lifting the mask.
      noise: standard deviation of the perturbation added to every weight after lifting.
      batch_size: sequences per step; n_test: fresh sequences for each accuracy.
      n_probe: fixed probe sequences for `attention_kind`; n_show: of them, how many
        attention matrices are kept per run (for the figure); probe_seed: their key.
    """

    task: HistogramTask = HistogramTask(T=15, L=10, law="uniform")
    d: int = 64
    p: int = 128
    steps: int = 3000
    learning_rate: float = 1e-3
    sgd_steps: int = 1000
    sgd_learning_rate: float = 0.01
    noise: float = 0.01
    batch_size: int = 128
    n_test: int = 4096
    n_probe: int = 2048
    n_show: int = 3
    probe_seed: int = 777

    def __post_init__(self):
        if not isinstance(self.task, HistogramTask):
            raise ValueError(f"task must be a HistogramTask, got {self.task!r}")
        for name in ("d", "p", "steps", "sgd_steps", "batch_size", "n_test", "n_probe", "n_show"):
            object.__setattr__(self, name, check_positive_int(getattr(self, name), name))
        if self.d % 2:
            raise ValueError(f"d must be even (a token half and a positional half), got d={self.d}")
        if self.n_show > self.n_probe:
            raise ValueError(f"n_show must be <= n_probe={self.n_probe}, got n_show={self.n_show}")
        for name in ("learning_rate", "sgd_learning_rate"):
            object.__setattr__(self, name, _positive_number(getattr(self, name), name))
        if isinstance(self.noise, bool) or not np.isfinite(self.noise) or self.noise < 0:
            raise ValueError(f"noise must be a finite number >= 0, got noise={self.noise!r}")
        if isinstance(self.probe_seed, bool) or int(self.probe_seed) != self.probe_seed or self.probe_seed < 0:
            raise ValueError(f"probe_seed must be an integer >= 0, got probe_seed={self.probe_seed!r}")

    def replace(self, **changes) -> "TwoSolutionsConfig":
        return dataclasses.replace(self, **changes)


TWO_SOLUTION_COLUMNS = ("solution", "seed", "accuracy_masked", "accuracy_after", "weight_move_sgd",
                        "distance_to_masked_solution", "same_token_mass_before", "same_token_mass_after", "chance",
                        "input_dependence_before", "input_dependence_after")
"""Columns of `two_solutions.csv` (one row per `(solution, seed)`)."""


def probe_tokens(config: TwoSolutionsConfig) -> Array:
    """The fixed probe sequences `(n_probe, L)` of every run (the first `n_show` are drawn in the figure)."""
    return sample_batch(jax.random.PRNGKey(config.probe_seed), config.task, config.n_probe)[0]


def two_solutions_run(solution, seed, *, config: TwoSolutionsConfig, dtype=jnp.float32) -> dict[str, Array]:
    """One run of part A, pure in `solution` (code into `SOLUTIONS`, may be traced) and `seed` (vmap over both).

    Phase 1: Adam with the attention's queries and keys restricted to the
    token half (semantic) or the positional half (positional). Phase 2: lift
    the mask without changing the function (`lift_mask`), perturb every weight
    with `N(0, noise^2)`, train everything with SGD. The init depends on the
    seed only, so both solutions of a seed start from the same weights.
    Returns the scalars of `TWO_SOLUTION_COLUMNS` (minus the task columns) and
    the attention matrices `attention_before`, `attention_after` `(n_show, L, L)`
    on the first probe sequences.
    """
    task = config.task
    k_init, k_train, k_test, k_after = jax.random.split(jax.random.PRNGKey(seed), 4)
    graphdef, params, frozen = make_transformer(k_init, task, config.d, config.p, "full", dtype)
    masks = jnp.stack([attention_mask(k, config.d, dtype) for k in SOLUTIONS])
    frozen = jax.tree_util.tree_map(lambda _: masks[solution], frozen)   # the mask is the only frozen leaf
    params, _ = train_transformer(graphdef, params, frozen, k_train, task, steps=config.steps,
                                  batch_size=config.batch_size, optimizer=optax.adam(config.learning_rate))
    acc_masked = transformer_accuracy(graphdef, params, frozen, k_test, task, config.n_test)

    k_noise, k_sgd, k_test2 = jax.random.split(k_after, 3)
    lifted, open_mask = lift_mask(params, frozen)
    start = perturb(lifted, k_noise, config.noise)
    after, _ = train_transformer(graphdef, start, open_mask, k_sgd, task, steps=config.sgd_steps,
                                 batch_size=config.batch_size, optimizer=optax.sgd(config.sgd_learning_rate))
    acc_after = transformer_accuracy(graphdef, after, open_mask, k_test2, task, config.n_test)

    probe = probe_tokens(config)
    attn_before = nnx.merge(graphdef, params, frozen).attention(probe)
    attn_after = nnx.merge(graphdef, after, open_mask).attention(probe)
    kind_before, kind_after = attention_kind(attn_before, probe), attention_kind(attn_after, probe)
    return dict(accuracy_masked=acc_masked, accuracy_after=acc_after, weight_move_sgd=relative_distance(after, start),
                distance_to_masked_solution=relative_distance(after, lifted),
                same_token_mass_before=kind_before["same_token_mass"],
                same_token_mass_after=kind_after["same_token_mass"], chance=kind_before["chance"],
                input_dependence_before=kind_before["input_dependence"],
                input_dependence_after=kind_after["input_dependence"],
                attention_before=attn_before[: config.n_show], attention_after=attn_after[: config.n_show])


@dataclasses.dataclass
class TwoSolutions(ResultBundle):
    """Result of `two_solutions`: `runs` (columns `TWO_SOLUTION_COLUMNS`, `solution` as names),
    `attention[(solution, phase)] (n_seeds, n_show, L, L)` with `phase` in `("before", "after")`,
    the probe `tokens (n_show, L)` and the `config` (JSON).

    `write(out_dir)`: `two_solutions.csv`, `accuracy.csv` (mean, min, max per solution and phase),
    `attention.npz`, `two_solutions.json`; `TwoSolutions.load(out_dir)` reads them back.
    """

    runs: dict[str, np.ndarray]
    attention: dict
    tokens: np.ndarray
    config: dict

    def accuracy_table(self) -> dict[str, np.ndarray]:
        """Mean, min and max accuracy over seeds per `(solution, phase)`."""
        rows = dict(solution=[], phase=[], mean=[], min=[], max=[])
        for solution in SOLUTIONS:
            sel = np.asarray(self.runs["solution"]) == solution
            for phase in ("accuracy_masked", "accuracy_after"):
                v = np.asarray(self.runs[phase], float)[sel]
                if v.size:
                    rows["solution"].append(solution)
                    rows["phase"].append(phase)
                    rows["mean"].append(v.mean())
                    rows["min"].append(v.min())
                    rows["max"].append(v.max())
        return {k: np.asarray(v) for k, v in rows.items()}

    FILES = (BundleFile("two_solutions.csv", field="runs", columns=TWO_SOLUTION_COLUMNS,
                        required=TWO_SOLUTION_COLUMNS, dtypes=dict(solution=str, seed=np.int64)),
             BundleFile("accuracy.csv", derived=True),
             BundleFile("attention.npz", required=("tokens",)),
             BundleFile("two_solutions.json", field="config", required=("config",)))

    def to_files(self) -> dict:
        """The contents: the attention maps as arrays `<solution>_<phase>` beside `tokens`, the accuracy table."""
        arrays = {f"{s}_{ph}": np.asarray(a) for (s, ph), a in self.attention.items()}
        arrays["tokens"] = np.asarray(self.tokens)
        return dict(runs=self.runs, accuracy=self.accuracy_table(), attention=arrays, config=dict(config=self.config))

    @classmethod
    def from_files(cls, contents: dict, out_dir: str) -> "TwoSolutions":
        """The result from the files read back (the columns `TWO_SOLUTION_COLUMNS` of `two_solutions.csv`)."""
        arrays = contents["attention"]
        attention = {(s, ph): arrays[f"{s}_{ph}"] for s in SOLUTIONS for ph in ("before", "after")
                     if f"{s}_{ph}" in arrays}
        return cls(runs={k: contents["runs"][k] for k in TWO_SOLUTION_COLUMNS}, attention=attention,
                   tokens=arrays["tokens"], config=contents["config"]["config"])


def two_solutions(config: TwoSolutionsConfig = TwoSolutionsConfig(), seeds=(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), *,
                  solutions=SOLUTIONS, dtype=jnp.float32, options: RunOptions | None = None) -> TwoSolutions | None:
    """Part A of the histogram task for every `(solution, seed)`: one vmapped, chunked, resumable sweep.

    Args:
      config: `TwoSolutionsConfig`.
      seeds: integers >= 0 (at least one).
      solutions: a subset of `SOLUTIONS`.
      dtype: float32 (default) or float64 (run inside `dtype_scope`).
      options: `phasejax.sweep.RunOptions` (run directory, chunk size, devices, hosts).
    Returns:
      `TwoSolutions`, or `None` while chunks are missing.
    """
    if not isinstance(config, TwoSolutionsConfig):
        raise ValueError(f"config must be a TwoSolutionsConfig, got {type(config).__name__}")
    seed_list = np.atleast_1d(np.asarray(seeds, dtype=object))
    if seed_list.ndim != 1 or seed_list.size == 0:
        raise ValueError(f"seeds must hold at least one integer >= 0, got seeds={seeds!r}")
    for s in seed_list:
        if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer, float, np.floating)) \
                or not np.isfinite(s) or int(s) != s or s < 0:
            raise ValueError(f"seeds must be integers >= 0, got {s!r} in seeds={seeds!r}")
    solutions = (solutions,) if isinstance(solutions, str) else tuple(solutions)
    if not solutions or any(s not in SOLUTIONS for s in solutions):
        raise ValueError(f"solutions must be names from {SOLUTIONS}, got {solutions!r}")
    dtype = check_float_dtype(dtype)
    codes, seed_grid = np.meshgrid([SOLUTIONS.index(s) for s in solutions], seed_list.astype(np.int64),
                                   indexing="ij")
    tasks = dict(solution=codes.ravel().astype(np.int32), seed=seed_grid.ravel().astype(np.int64))
    cfg = dict(kind="histogram_two_solutions", **canonical_config(config), dtype=str(np.dtype(dtype)))

    def fn(chunk):
        return jax.vmap(lambda c, s: two_solutions_run(c, s, config=config, dtype=dtype))(
            jnp.asarray(chunk["solution"]), jnp.asarray(chunk["seed"]))

    with dtype_scope(dtype):
        out = run_chunked(fn, tasks, cfg, run_options(options))
        tokens = np.asarray(probe_tokens(config)[: config.n_show])
    if out is None:
        return None
    names = np.asarray(SOLUTIONS)[tasks["solution"]]
    runs = dict(solution=names, seed=tasks["seed"])
    runs.update({k: np.asarray(out[k], np.float64) for k in TWO_SOLUTION_COLUMNS[2:]})
    attention = {}
    for s in solutions:
        sel = names == s
        attention[s, "before"] = np.asarray(out["attention_before"])[sel]
        attention[s, "after"] = np.asarray(out["attention_after"])[sel]
    return TwoSolutions(runs=runs, attention=attention, tokens=tokens, config=canonical_config(cfg))
