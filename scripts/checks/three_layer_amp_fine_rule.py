"""Three-layer AMP with a finer rule of its output functions, from the state evolution's start (docs/depth.md,
section 7): the data of the rule study (`phasejax depth --layers 3`'s first seed at `d = 1000`, skip 1,
`alpha = 1.6`), AMP from `m = q = 0.1` on every layer for `--steps` steps with the `(outer, inner)` rule, and the
state evolution with the same rule from the same start on the study's 128 draws. One CSV row per step: AMP's
overlaps in units of the teacher's norm and the SE's.

    python scripts/checks/three_layer_amp_fine_rule.py --out results/depth/three_layers/amp_fine_rule.csv

With the default `(16, 10)` rule (25600 nodes per sample, 44 times the CPU preset's) one step takes about a minute
of CPU time on 2 cores at `d = 1000`.
"""

import argparse
import os
import time

import numpy as np

from phasejax.commands.depth import THREE_PRESETS, three_amp_keys
from phasejax.depth import run_amp, sample_data, se_draws, three_rule
from phasejax.depth.se import se_trajectory
from phasejax.io import write_csv
from phasejax.precision import float64_scope
from phasejax.solvers import status_name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--outer", type=int, default=16, help="outer (z_1) Gauss-Hermite order")
    ap.add_argument("--inner", type=int, default=10, help="inner mixture order")
    ap.add_argument("--steps", type=int, default=45, help="AMP steps (no early stop)")
    ap.add_argument("--out", required=True, help="CSV file to write (refused if it exists)")
    args = ap.parse_args()
    if os.path.exists(args.out):
        raise SystemExit(f"three_layer_amp_fine_rule: {args.out} exists; remove it first")
    preset, seed = THREE_PRESETS["cpu"], 1
    c, a, d, start = preset.se_skip, preset.rules_alpha, min(preset.amp_d), preset.rules_starts[0]
    with float64_scope():
        data_key, start_key = three_amp_keys(seed, 0, d)
        data = sample_data(data_key, d, a, c, layers=3)
        rule = three_rule(args.outer, args.inner)
        t0 = time.perf_counter()
        res = run_amp(data, c, start_key, q_init=start, m_init=start, rule=rule, max_iterations=args.steps, tol=0.0)
        m = np.asarray(res.m_history) / np.asarray(res.teacher_norm)[None]
        amp_s = time.perf_counter() - t0
        se = np.asarray(se_trajectory(a, c, start, se_draws(preset.se_draws, seed + 2, layers=3), rule, args.steps))
    rows = {"step": np.arange(1, args.steps + 1)}
    for k in range(3):
        rows[f"m{k + 1}"] = m[:, k]
    for k in range(3):
        rows[f"se_q{k + 1}"] = se[:, k]
    n = args.steps
    rows.update(skip=np.full(n, c), alpha=np.full(n, a), d=np.full(n, d), outer=np.full(n, args.outer),
                inner=np.full(n, args.inner), status=np.asarray([status_name(res.status)] * n))
    write_csv(args.out, rows)
    print(f"{args.out}: AMP {amp_s:.0f} s; last step m = {np.round(m[-1], 3)}, SE q = {np.round(se[-1], 3)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
