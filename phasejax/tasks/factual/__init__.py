"""Factual recall in a one-layer transformer (Nichani, Lee, Bietti 2024).

Task (`FactualTask`): `S` subjects, `R` relations, for every relation `r` its
own set `A_r` of `D` attributes (the sets are disjoint; `|A| = R D` attributes
in all), `N_noise` noise tokens. A fact table `a*(s, r) in A_r` is drawn once
(`sample_facts`). A sequence holds the subject `s`, the relation `r` and
`T - 2` noise tokens in random order (the positions of `s` and `r` are a
uniformly random pair of distinct positions among the first `T`, the noise
tokens are i.i.d. uniform), followed by an end token `EOS`; the target is
`a*(s, r)`, predicted at `EOS` over the attribute vocabulary `A`.
`(s, r)` is uniform over `S x R`.

Token ids: subjects `0..S-1`, relations `S..S+R-1`, noise `S+R..S+R+N_noise-1`,
`EOS = S+R+N_noise`. Attribute ids `0..R D - 1`, `A_r = {r D, ..., r D + D - 1}`.

Model (`factual_logits`): frozen random embeddings `e_z`, `u_a ~ N(0, I_d / d)`
(near-orthonormal); one layer, query at `EOS`, no positional embeddings:

    beta^h_t = softmax_t( <W_K^h e_{z_t}, W_Q^h e_EOS> / sqrt(d_h) )
    z        = e_EOS + sum_h W_O^h^T W_V^h sum_t beta^h_t e_{z_t}
    out      = z + V^T relu(U z)                    (MLP of width m; m = 0: attention only)
    logits_a = u_a^T out,   a in A

`W_Q, W_K, W_V, W_O` are `(H, d_h, d)`, `U, V` are `(m, d)`; the trainable
parameter count is `4 H d_h d + 2 m d` (`factual_parameter_count`). Because
the query is always `EOS` and there are no positional embeddings, a score is a
function of the token id only: scores are computed once per vocabulary entry
and gathered, and the values as `W_V` applied to the attended mixture of the
(frozen) embeddings (the same numbers as per position, cheaper).

Padding (as in `phasejax.tasks.histogram.counting`): parameters are allocated at
`(d_max, m_max, H_max)` and the first `d` embedding dimensions, `m` hidden
units and `H` heads are used; the rest is multiplied by 0, gets zero gradient
and Adam never moves it. Subjects are padded the same way: a task allocates
`S_max` subject tokens and a run uses the first `S` (`n_subjects`, may be
traced). Embeddings and facts are drawn per token (`fold_in`), so a run's
draws do not depend on the padding. This is what makes a whole
`(S, d, m, H, seed)` grid one vmapped call (`factual_sweep`, via
`phasejax.sweep.run_chunked`).

The relation-only ("hallucinating") predictor `p(a | r)` ignores the subject;
for balanced fact tables (every attribute of `A_r` is the answer for exactly
`S / D` subjects) it is uniform on `A_r` and its cross-entropy is exactly
`log |A_r| = log D` (`relation_only_loss`, `relation_only_entropy`). Trained
models pass through this stage: the loss sits near `log D` while the
probability mass on `A_r` is already ~1 and the accuracy ~`1/D`, before the
subject is used (`find_plateau`).

Example (a few seconds on a CPU):
  >>> task = FactualTask(n_subjects=16, n_relations=2, n_attributes=4, n_noise=8, length=6)
  >>> training = FactualTraining(steps=300, batch_size=64, d_head=8, curve_points=10)
  >>> out = factual_run(0, 16, 32, 32, 2, task=task, training=training, d_max=32, m_max=32, heads_max=2)
  >>> sorted(out)[:3]
  ['accuracy', 'curve_accuracy', 'curve_loss']
"""

from phasejax.tasks.factual.data import FactualTask, relation_only_entropy
from phasejax.tasks.factual.model import factual_parameter_count
from phasejax.tasks.factual.result import (
    DEFAULT_FAMILIES,
    FactualResult,
    capacity_fits,
    factual_experiment,
    recall_capacity,
)
from phasejax.tasks.factual.sweep import FactualGrid, factual_sweep
from phasejax.tasks.factual.train import FactualTraining, factual_run

__all__ = [
    "factual_experiment", "factual_sweep", "factual_run", "FactualTask", "FactualTraining", "FactualGrid",
    "FactualResult", "DEFAULT_FAMILIES", "recall_capacity", "capacity_fits", "relation_only_entropy",
    "factual_parameter_count",
]
