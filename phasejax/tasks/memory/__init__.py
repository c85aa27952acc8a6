"""Associative memories and their capacity.

Setting (Cabannes, Dohmatob, Bietti 2024; Nichani, Lee, Bietti 2024; Bietti et al. 2023):
`N` input tokens, `M` output tokens, a target map `f*: [N] -> [M]`, input
embeddings `e_x` and output embeddings `u_y`, independent and uniform on the
unit sphere of `R^d` (so `|e_x| = |u_y| = 1` and `e_x . e_x' ~ N(0, 1/d)`), a
memory `F: R^d -> R^d` and argmax decoding

    f(x) = argmax_y  u_y^T F(e_x).

Recall is the fraction of inputs with `f(x) = f*(x)`; a tie counts as an error
(`margin_x = s_{x, f*(x)} - max_{y != f*(x)} s_{x, y} > 0` is required). Memories:

* `outer_product`: `W = sum_x q_x u_{f*(x)} e_x^T` (`q_x = 1`), `F(z) = W z`;
* `one_step`: one gradient step of size `eta` from `W = 0` on the population
  cross-entropy `L(W) = sum_x p_x CE(f*(x), (u_y^T W e_x)_y)` ("gradients as
  memories"): `W_1 = eta sum_x p_x (u_{f*(x)} - ubar) e_x^T`, `ubar` the mean
  of the `M` output embeddings;
* `linear`: `W` trained from 0 on `L(W)` by full-batch Adam;
* `mlp`: `F(z) = V^T relu(U z)`, `U, V in R^{m x d}`, trained on the same loss.

Outputs, `M`: either `M = N` with `f*` a random permutation (the injective
setting of Nichani et al.; `M=None`), or a fixed `M` with `f*` a uniform random
map (the setting of Cabannes et al.) or a random injection (`N <= M`).
The outer-product memory's capacity depends on that choice (see
`predicted_recall`): for fixed `M` it grows like `M d / log M`, for `M = N`
like `d^2 / log N`.

Padding: every problem is allocated at static sizes `(n_max, M_max, d_max,
m_max)`; `N`, `d`, `m` may be traced. Embeddings are drawn at `(n_max, d_max)`
and normalised over their first `d` coordinates (zeros elsewhere); inputs
`x >= N` get probability 0 and outputs `y >= M` the score `-inf`, so a padded
problem is the unpadded problem made of the top-left slices of the same
draws, and padded parameters get zero gradient (Adam never moves them).
That is what lets a whole `(N, d, m, seed)` grid be one vmapped call.

Closed form (`predicted_recall`, `predicted_recall_given_map`): the margin
`s_{x,f*(x)} - s_{x,y}` of the outer-product memory is `q_x` plus crosstalk.
Writing `c_{y'} = sum_{x' in f*^{-1}(y')} q_x' e_x'.e_x` and
`G_{yy'} = u_y.u_y'`, the margin against `y` splits into a part `A` shared by
all competitors and a part `B_y` of each, uncorrelated, with (sums of
squared weights `Q2_y = sum_{x' in f*^{-1}(y)} q_x'^2`, `S = Q2_{f*(x)} - q_x^2`)

    Var A   = S / d + (Q2_tot - Q2_{f*(x)}) / d^2
    Var B_y = (q_x^2 + S / d) / d + Q2_y / d + (Q2_tot - Q2_{f*(x)} - Q2_y) / d^2.

Treating them as Gaussian, `P(x recalled) = E_a prod_{y != f*(x)} Phi((q_x +
sqrt(Var A) a) / sqrt(Var B_y))`, a one-dimensional Gauss-Hermite integral.
For `M = N` injective (`q = 1`): `Var A + Var B = 2/d + (2N - 3)/d^2`, so 99%
recall needs `N ~ d^2 / (4 log(100 N))`; for fixed `M` the term `Q2_y / d ~
N / (M d)` dominates and `N* ~ M d / (4 log(100 M))`.

Sweeps (`capacity_sweep`) run the `(N, d, m, seed)` table through
`phasejax.sweep.run_chunked`, grouped by padded size (`padded_size(N)`, powers
of two) so that small problems are not padded to the largest; `capacity_from_recall`
finds `N*` (largest `N` with mean recall >= 99%) on every column at once,
`fit_power_law` / `bootstrap_exponents` fit `log N*` against `log d` (or
`log m d`) with confidence intervals. `zipf_sweep` measures the
Zipf-weighted error against `d` (one-step memory, and the outer-product memory
storing the `k` most frequent inputs) and compares it with the closed form
and its power laws `d^{-(alpha-1)/(2 alpha)}` and `d^{-(alpha-1)}`.
"""

from phasejax.tasks.memory.capacity import fit_power_law, predicted_capacity
from phasejax.tasks.memory.data import RECALL_THRESHOLD, MemoryProblem
from phasejax.tasks.memory.result import MemoryResult, SweepSpec, memory_preset, run_memory_study
from phasejax.tasks.memory.sweep import CapacityGrid, ZipfGrid, capacity_sweep, zipf_sweep

__all__ = [
    "run_memory_study", "memory_preset", "capacity_sweep", "zipf_sweep", "CapacityGrid", "ZipfGrid", "SweepSpec",
    "MemoryResult", "MemoryProblem", "predicted_capacity", "fit_power_law", "RECALL_THRESHOLD",
]
