"""Extensions of the solvable tied-attention model beyond the paper's main setting.

Each extension is a module `phasejax.extensions.<name>` with theory (state
evolution with error bars, where a theory exists), experiments (trained Flax
students swept with `vmap`, resumable) and a `main(out_dir, *, preset, run_dir,
progress)` entry used by the command `phasejax extension <name>`:

* `untied`: untied query and key matrices (`W_Q != W_K`).
* `correlated`: tokens from a Gaussian mixture with cluster labels correlated across positions.
* `rank2`: a rank-2 student learning a rank-1 teacher, from three initialisations.
* `value`: a low-rank trainable value matrix (experiments only).
* `general_L`: `L = 3` tokens, `r = 2`, unequal `sigma_l` (quasi-Monte Carlo quadrature).
* `second_A`: the paper's second, not token-swap-symmetric positional matrix `A`.

Outputs go to `results/extensions/<name>/`: `theory.csv`, `runs.csv`, `thresholds.csv` and a figure.
"""

EXTENSIONS = ("untied", "correlated", "rank2", "value", "general_L", "second_A")
