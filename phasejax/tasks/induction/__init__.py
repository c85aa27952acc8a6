"""Induction heads on in-context Markov chains (Nichani, Damian, Lee 2024; Edelman et al. 2024; Bietti et al. 2023).

Data (`sample_sequence`): per sequence a transition matrix `P (S, S)` with
rows drawn iid from `Dirichlet(beta 1_S)`, a first state drawn from the
stationary law `pi P = pi`, then `T` tokens of the chain. The task is
next-token prediction *in context*: `P` is new in every sequence, so a model
can only predict well by estimating the transitions from the sequence itself.

Loss (`soft_cross_entropy`): at every position `t = 1..T` the prediction
`q_t` of the next token given `s_{1:t}` is scored by the expected log loss
`-sum_{s'} P[s_t, s'] log q_t(s')` (the next token's law given the past and
`P`), averaged over the `T` positions. It equals the usual sampled next-token
cross-entropy in expectation and has a smaller variance (it averages out the
draw of the next token).

References (`bayes_predictive`, `unigram_predictive`, `induction_references`):

* uniform: `q = 1/S`, loss `log S`;
* in-context unigram: `q(s') = (n_t(s') + alpha) / (t + S alpha)` with
  `n_t(s')` the count of `s'` in `s_{1:t}` and `alpha` chosen on a grid to
  minimise the loss (the best add-alpha unigram estimator);
* bigram = Bayes: the Dirichlet posterior predictive
  `q(s') = (n_t(s_t -> s') + beta) / (n_t(s_t) + S beta)`, with `n_t(s -> s')`
  the transitions `s_{j-1} = s, s_j = s'` for `2 <= j <= t` and
  `n_t(s) = sum_{s'} n_t(s -> s')`. It is the exact posterior mean of
  `P[s_t, :]` when the first state carries no information on `P`; with the
  stationary start the exact posterior has the extra factor `pi_P(s_1)`
  (`stationary_start_predictive` estimates that predictor by importance
  sampling; its loss differs from the Dirichlet one by a small amount that
  the summary reports).

Models (pure functions on parameter dicts, `induction_forward`):

* `"disentangled"` (Nichani, Damian, Lee 2024): one-hot token and position
  embeddings `x_i = [e_{s_i}, e_i]` (`d_0 = S + T`); layer `l` computes
  `A_l = softmax_causal(h_{l-1} W_l h_{l-1}^T)` and *concatenates*
  `h_l = [h_{l-1}, A_l h_{l-1}]` (`d_l = 2 d_{l-1}`), no value or output
  matrices. Readout `"probability"` (default): the last layer's attention
  averages the one-hot tokens of the keys, with one extra "sink" key of
  learned score `b` whose value is the uniform law, and that average *is*
  the predicted law. `readout="linear"`: logits `W_O h_L` (softmax).
  The probability readout can represent the Bayes predictor exactly
  (`induction_head_params`): layer 1 attends to the previous token, layer 2
  attends to the keys whose previous token equals the current token, and
  the sink at score `c + log(S beta)` adds the prior counts `beta`.
* `"standard"`: learned token and position embeddings of size `d_model`,
  pre-layer-norm blocks (one causal attention head, GELU MLP, residual
  sums), a final layer norm and a linear unembedding.

Padding: `S <= S_max` is an array argument (vmapped); states `>= S` never
occur, their one-hot coordinates are 0, their parameters get zero gradient
and their predicted probability is 0 (so a padded model computes what the
unpadded one does). `T`, the model and the layer count set the array shapes
and are static.

`induction_run(seed, S, beta, ...)` trains one model online (Adam, a fresh
batch every step) and measures it on `n_eval` fresh sequences shared by all
runs of the same `(S, T, beta)`; `induction_sweep` runs a grid through
`phasejax.sweep.run_chunked` (vmapped over `(S, beta, seed)`, one compiled
sweep per `(model, layers, T)`), and returns an `InductionResult`.
"""

from phasejax.tasks.induction.data import bayes_predictive
from phasejax.tasks.induction.model import InductionModel
from phasejax.tasks.induction.references import induction_references
from phasejax.tasks.induction.result import RUN_COLUMNS, InductionResult, exact_floor_check, induction_summary
from phasejax.tasks.induction.sweep import InductionGrid, InductionTraining, induction_sweep
from phasejax.tasks.induction.train import induction_run

__all__ = [
    "induction_sweep", "induction_run", "InductionModel", "InductionTraining", "InductionGrid", "InductionResult",
    "exact_floor_check", "induction_summary", "induction_references", "bayes_predictive", "RUN_COLUMNS",
]
