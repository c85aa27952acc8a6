"""Thresholds of the phase diagram from branch curves (spec sections 5-6).

Both are roots of a curve sampled on the alpha grid, found on a local cubic
fit (through the four valid grid points around the sign change) rather than
at the grid spacing:

* `alpha_c`: the first alpha where the semantic branch's training loss
  drops below the positional branch's (`Delta e_t = e_sem - e_pos` changes
  sign from + to -).
* `alpha_l`: the first alpha where the global-minimum test error drops
  below the linear baseline's.
"""

from __future__ import annotations

import numpy as np


def _local_root(x: np.ndarray, y: np.ndarray, i: int) -> float:
    """Root of the cubic through the (up to) 4 points around bracket `[x[i], x[i+1]]`."""
    lo, hi = max(0, i - 1), min(len(x), i + 3)
    xs, ys = x[lo:hi], y[lo:hi]
    deg = min(3, len(xs) - 1)
    scale = x[i + 1] - x[i]
    coeffs = np.polyfit((xs - x[i]) / scale, ys, deg)
    roots = np.roots(coeffs)
    real = roots[np.abs(roots.imag) < 1e-9].real
    inside = real[(real >= -1e-12) & (real <= 1 + 1e-12)]
    if inside.size:
        return float(x[i] + scale * inside.min())
    # the fit has no root in the bracket (should not happen for smooth data): linear fallback
    return float(x[i] + scale * y[i] / (y[i] - y[i + 1]))


def first_downcrossing(x: np.ndarray, y: np.ndarray, valid: np.ndarray | None = None) -> float:
    """First `x` where `y` goes from >= 0 to < 0, by a local cubic fit; NaN if none.

    Only points with `valid` true are used (the curve is the valid subsequence).
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    valid = np.isfinite(y) if valid is None else (np.asarray(valid, bool) & np.isfinite(y))
    x, y = x[valid], y[valid]
    for i in range(len(x) - 1):
        if y[i] >= 0 > y[i + 1]:
            return _local_root(x, y, i)
    return float("nan")


def alpha_c(alphas, e_positional, e_semantic, valid=None) -> float:
    """Positional-to-semantic threshold: first root of `e_sem - e_pos` (from + to -); NaN if none in the grid."""
    return first_downcrossing(alphas, np.asarray(e_semantic) - np.asarray(e_positional), valid)


def alpha_l(alphas, err_positional, err_semantic, e_positional, e_semantic, eps_lin, valid=None) -> float:
    """First alpha where the global-minimum test error drops below `eps_lin`; NaN if none in the grid.

    The global minimum is the branch of lower training loss. Below `alpha_c`
    the crossing is searched on the positional curve, above it on the
    semantic one; if neither curve crosses inside its own range but the
    global error jumps below `eps_lin` at `alpha_c`, `alpha_l = alpha_c`.
    """
    a = np.asarray(alphas, float)
    valid = np.ones_like(a, bool) if valid is None else np.asarray(valid, bool)
    ac = alpha_c(a, e_positional, e_semantic, valid)
    gp = np.asarray(err_positional) - eps_lin
    gs = np.asarray(err_semantic) - eps_lin
    if np.isnan(ac):
        # no switch in the grid: the global minimum is one branch throughout
        use_sem = np.nanmean(np.asarray(e_semantic)[valid] - np.asarray(e_positional)[valid]) < 0
        return first_downcrossing(a, gs if use_sem else gp, valid)
    below, above = a < ac, a > ac
    ap = first_downcrossing(np.append(a[below], ac), np.append(gp[below], np.interp(ac, a, gp)),
                            np.append(valid[below], True))
    if np.isfinite(ap):
        return ap
    g_at = np.interp(ac, a, gs)
    if g_at < 0:
        return float(ac)  # the global error jumps below the baseline at the switch
    return first_downcrossing(np.insert(a[above], 0, ac), np.insert(gs[above], 0, g_at),
                              np.insert(valid[above], 0, True))
