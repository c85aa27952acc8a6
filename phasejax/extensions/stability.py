"""The replicon columns of an extension's theory table (theory notes, section 12).

The replicon of `phasejax.theory.replicon` holds for any student that is a
function of the fields `h = x Q / sqrt(d)` under a ridge penalty: a
perturbation of the weights orthogonal to the teacher, the encodings and the
fixed point moves every field by a fresh Gaussian, whatever the student does
with it. So it applies to every extension whose state evolution is the
Gaussian one of the main model with another student, rank, `L`, `A` or
`sigma` (rank2, untied, general_L, second_A, value's tied reference). The
correlated extension's theory rows are mixture fixed points with
`m_cluster = 0`, where every label configuration has the same fields: its
replicon is the main model's at the same point.

A table written from a phase diagram already carries the columns
(`phasejax.phase.phase_diagram` computes them); `with_replicon` adds them to
a table that lacks them (continuation tables, or one written before the
replicon existed) from its overlap columns `q0_i, m0_i, V0_i, theta0_i`.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from phasejax.theory import TiedAttentionParams
from phasejax.theory.replicon import DEFAULT_TIE_WIDTH, REPLICON_COLUMNS, replicon_table, rs_stable

Problem = Callable[[dict], tuple[TiedAttentionParams, object]]
"""`problem(row) -> (params, quadrature)` (`phasejax.theory.replicon.replicon_table`): the problem of one theory
row and the quadrature its fixed point was solved with (`None`: the default scheme)."""


def with_replicon(table: dict, problem: Problem, *, progress: Callable[[int, int], None] | None = None) -> dict:
    """`table` with `replicon_table`'s columns added, unless it has them already (a table from a phase diagram
    does): then it is returned as it is."""
    if all(k in table for k in REPLICON_COLUMNS):
        return table
    return dict(table, **replicon_table(table, problem, progress=progress))


def replicon_summary(table: dict, by: str | None = None) -> dict:
    """Per value of the column `by` (default `branch`, else `init`): the converged rows, those with a replicon,
    and those where replica symmetry is locally stable (`phasejax.theory.replicon.rs_stable`: the regular
    replicon below 1 by more than its error and no jump term), with the `(alpha, omega)` of the stable ones."""
    by = by or ("branch" if "branch" in table else "init")
    n = len(np.asarray(table["alpha"]))
    groups = np.asarray(table[by]).astype(str) if by in table else np.full(n, "all")
    status = np.asarray(table["status"]).astype(str) if "status" in table else np.full(n, "converged")
    value = np.asarray(table["replicon"], float)
    stable = np.asarray(rs_stable(np.asarray(table["replicon_regular"], float), np.asarray(table["replicon_jump"], float),
                                  np.asarray(table["replicon_regular_err"], float)))
    out = dict(tie_width=DEFAULT_TIE_WIDTH, grouped_by=by,
               note="rs_stable: regular replicon + its error < 1 and no jump term (phasejax.theory.replicon)")
    for g in dict.fromkeys(groups.tolist()):
        sel = groups == g
        ok = sel & (status == "converged") & np.isfinite(value)
        out[g] = dict(converged=int(np.sum(sel & (status == "converged"))), with_replicon=int(np.sum(ok)),
                      rs_stable=int(np.sum(ok & stable)),
                      rs_stable_at=[[float(a), float(w)] for a, w in
                                    zip(np.asarray(table["alpha"], float)[ok & stable],
                                        np.asarray(table["omega"], float)[ok & stable])])
    return out
