"""A single-layer transformer on a binary first-order Markov chain (Makkuva et al. 2024).

Data: binary chains `s_1 .. s_N` with transition matrix `P = [[1-p, p], [q, 1-q]]`
started from the stationary law `pi = (q, p) / (p + q)`, so every position is
stationary; training is online (a fresh batch of chains every step).

Model (pure functions on a parameter dict, one head, no layer norm):

    x_n = s_n e + pos_n                                   (embedding e (d,), learned positions (N, d))
    y_n = x_n + W_O^T sum_{i <= n} att_{n,i} W_V^T x_i    (causal softmax attention,
                                                          scores <W_Q^T x_n, W_K^T x_i> / sqrt(d))
    z_n = y_n + W_2^T ReLU(W_1^T y_n)                     (feed-forward of width r)
    logit_n = <a, z_n> + b,   a = e when tied             (P_theta(s_{n+1} = 1 | s_1..s_n) = sigmoid(logit_n))

(the code uses row vectors: `x @ W`). The loss is the next-token binary
cross-entropy in nats averaged over the `N - 1` predicted positions.

Facts (all checked in `tests/tasks/test_markov.py`):

* the best loss is the entropy rate `H(s_2 | s_1) = (q h(p) + p h(q)) / (p + q)`,
  reached by `kernel_params` (the model predicts `P(s_{n+1} | s_n)`);
* the stationary predictor (`sigmoid(logit) = pi_1`) has loss `H(pi)`;
* `bad_critical_point(params, p, q)`: `e = 0`, `a = 0`, `W_O = 0`, `W_2 = 0`,
  `b = log(p / q)`, every other weight arbitrary. There the logit is
  `s_n |e|^2 + <e, pos_n> + b` in `(e, b)` (tied) and the model outputs `pi_1`;
  the gradient vanishes for any `(p, q)` (every other input to the logit is
  deterministic at `e = 0`, and `E[s_{n+1}] = pi_1`) and the Hessian is zero outside
  the `(e, b)` block (tied) or the `(e, a, b)` block (untied), with
  `d^2 L / de de = 2 kappa I + pi_0 pi_1 mean_n pos_n pos_n^T`, `kappa = pi_0 pi_1 (p + q - 1)`
  (tied), and `d^2 L / de da = kappa I`, `d^2 L / de de = 0` (untied)
  (`predicted_critical_spectrum`). Tied and `p + q > 1`: positive semi-definite,
  positive definite in `(e, b)` and exactly flat in the free weights, so a
  (non-strict) local minimum; tied and `p + q < 1`, or untied: a saddle.
  `critical_point_check` computes the exact gradient and Hessian (enumerating
  every chain of a short length, float64) and compares them with the closed form.

`markov_run` trains one Gaussian-initialised model online (SGD by default, the
closest to the gradient flow of the theory; AdamW as an option) and measures its
population loss with exact control variates (`estimate_population_loss`);
`markov_sweep` vmaps it over a `(p, q)` grid x tied/untied x seeds in resumable
chunks (`phasejax.sweep.run_chunked`) and returns a `MarkovSweep` (CSV/JSON files).
The rank-one reduced model and its gradient flow are in `phasejax.tasks.markov_reduced`.
"""

from phasejax.tasks.markov.critical import CriticalPointCheck, critical_point_check, predicted_critical_spectrum
from phasejax.tasks.markov.data import entropy_rate, stationary_entropy
from phasejax.tasks.markov.model import bad_critical_point, kernel_params
from phasejax.tasks.markov.sweep import (
    MarkovGrid,
    MarkovSweep,
    MarkovTraining,
    markov_memory_estimate,
    markov_run,
    markov_sweep,
    markov_trace,
)

__all__ = [
    "markov_sweep", "markov_run", "markov_trace", "MarkovTraining", "MarkovGrid", "MarkovSweep",
    "critical_point_check", "CriticalPointCheck", "bad_critical_point", "kernel_params", "entropy_rate",
    "stationary_entropy", "predicted_critical_spectrum", "markov_memory_estimate",
]
