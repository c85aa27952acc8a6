"""Extensions of the solvable tied-attention model beyond the paper's main setting.

Each extension is a module `phasejax.extensions.<name>` with theory (state evolution with error bars, where a
theory exists) and experiments (trained Flax students swept with `vmap`, resumable). A module keeps only what
is its own (parameters, inits, extra columns, the functions that compute them) and three entry points used by
the command `phasejax extension <name>` (`phasejax/commands/extension.py`, which holds the presets):
`compute(preset, P, *, run_dir, progress) -> ExtensionResult`, `finish(result)` (the tables derived from
`theory` and `runs`) and `figures(result) -> {file name: Figure}`. Everything shared (the result bundle,
matching runs to theory, seed means, thresholds, figures) is in `phasejax.extensions.framework`.

* `untied`: untied query and key matrices (`W_Q != W_K`).
* `correlated`: tokens from a Gaussian mixture with cluster labels correlated across positions.
* `rank2`: a rank-2 student learning a rank-1 teacher, from three initialisations.
* `value`: a low-rank trainable value matrix (experiments only).
* `general_L`: `L = 3` tokens, `r = 2`, unequal `sigma_l` (quasi-Monte Carlo quadrature).
* `second_A`: the paper's second, not token-swap-symmetric positional matrix `A`.

The committed outputs are in `results/extensions/<name>/`: `theory.csv`, `runs.csv`, `thresholds.csv`,
`summary.json` and a figure.
"""

EXTENSIONS = ("untied", "correlated", "rank2", "value", "general_L", "second_A")
