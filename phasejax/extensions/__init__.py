"""Extensions of the solvable tied-attention model beyond the paper's main setting.

Each extension is a module `phasejax.extensions.<name>` with theory (state evolution with error bars, where a
theory exists) and experiments (trained Flax students swept with `vmap`, resumable). A module keeps only what
is its own (parameters, inits, extra columns, the functions that compute them, its `PRESETS`: an
`ExtensionPreset` subclass per extension, `cpu` and `gpu`) and three functions `run_extension` calls:
`compute(preset, P, *, run) -> ExtensionResult`, `finish(result)` (the tables derived from `theory` and `runs`)
and `figures(result) -> {file name: Figure}`. What they share lives in private modules: the tables and the
result bundle (`_tables`), the thresholds (`_thresholds`), the figures (`_figures`) and the presets' common
fields (`_presets`).

* `untied`: untied query and key matrices (`W_Q != W_K`).
* `correlated`: tokens from a Gaussian mixture with cluster labels correlated across positions.
* `rank2`: a rank-2 student learning a rank-1 teacher, from three initialisations.
* `value`: a low-rank trainable value matrix (experiments only).
* `general_L`: `L = 3` tokens, `r = 2`, unequal `sigma_l` (quasi-Monte Carlo quadrature).
* `second_A`: the paper's second, not token-swap-symmetric positional matrix `A`.
* `huber`: the main model trained with the Huber loss of its outputs (a declared `phasejax.theory.HuberLoss`).

The committed outputs are in `results/extensions/<name>/`: `theory.csv`, `runs.csv`, `thresholds.csv`,
`summary.json` and a figure.

>>> from phasejax.extensions import extension_presets
>>> extension_presets("rank2")["cpu"].ds
(200, 800)
"""

from phasejax.extensions._presets import ExtensionPreset, ExtensionRun
from phasejax.extensions._run import EXTENSIONS, USES_TIED, extension_presets, run_extension
from phasejax.extensions._tables import ExtensionResult

__all__ = ["EXTENSIONS", "USES_TIED", "ExtensionPreset", "ExtensionResult", "ExtensionRun", "extension_presets",
           "run_extension"]
