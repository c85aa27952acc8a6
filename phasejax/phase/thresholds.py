"""Thresholds of the phase diagram from branch curves sampled on the alpha grid (theory notes, sections 5-6).

* `alpha_c`: the first alpha where the semantic branch's training loss drops
  below the positional branch's (`Delta e_t = e_sem - e_pos` changes sign
  from + to -).
* `alpha_l`: the first alpha where the global minimum's test error drops
  below the linear positional baseline's.

Roots are found on a local cubic through the four valid grid points around
the sign change (not at the grid spacing). Each threshold comes with an
error (`*_with_error`): the quadrature part is the spread of the roots of the
curve shifted up and down by its error bars (exact also where the curve is
flat), the interpolation part the difference between the cubic and the
quadratic root; they are added in quadrature. On a grid with fewer than
`MIN_FIT_POINTS` valid points the two fits cannot be compared (with 2 or 3
points both are the same line or parabola), so the interpolation part is the
whole bracket: the distance from the root to the farther of the two grid
points around the sign change, where the root certainly lies. A status says
whether the threshold lies in the grid, below it (the crossing happened before
the first alpha), above it (not yet at the last alpha) or cannot be told.
"""

from __future__ import annotations

import numpy as np

IN_GRID, BELOW_GRID, ABOVE_GRID, UNDETERMINED = "in_grid", "below_grid", "above_grid", "undetermined"

MIN_FIT_POINTS = 4
"""The fewest valid grid points for which a root's interpolation error is the cubic-vs-quadratic difference;
on fewer the error is the bracket around the sign change (`bracket_error`)."""


def _local_root(x: np.ndarray, y: np.ndarray, i: int, degree: int = 3) -> float:
    """Root in `[x[i], x[i+1]]` of the polynomial of `degree` through the points around the bracket."""
    half = (degree + 1) // 2
    lo, hi = max(0, i + 1 - half), min(len(x), i + 1 + half)
    if hi - lo < degree + 1:   # near an end: shift the window
        lo, hi = max(0, min(lo, len(x) - degree - 1)), min(len(x), max(hi, degree + 1))
    xs, ys = x[lo:hi], y[lo:hi]
    deg = min(degree, len(xs) - 1)
    scale = x[i + 1] - x[i]
    coeffs = np.polyfit((xs - x[i]) / scale, ys, deg)
    roots = np.roots(coeffs)
    real = roots[np.abs(roots.imag) < 1e-9].real
    inside = real[(real >= -1e-12) & (real <= 1 + 1e-12)]
    if inside.size:
        return float(x[i] + scale * inside.min())
    return float(x[i] + scale * y[i] / (y[i] - y[i + 1]))   # no root of the fit in the bracket: linear


def _crossing(x, y, valid, down: bool, degree: int = 3) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    valid = np.isfinite(y) if valid is None else (np.asarray(valid, bool) & np.isfinite(y))
    x, y = x[valid], y[valid]
    if not down:
        y = -y
    for i in range(len(x) - 1):
        if y[i] >= 0 > y[i + 1]:
            return _local_root(x, y, i, degree)
    return float("nan")


def bracket_error(x, root: float, valid=None) -> float:
    """Interpolation error of a `root` found on the grid `x` when the grid holds fewer than `MIN_FIT_POINTS` valid
    points: the distance from `root` to the farther of the two valid grid points around it (0 on a finer grid,
    where the cubic-vs-quadratic difference measures it)."""
    x = np.asarray(x, float)
    valid = np.ones_like(x, bool) if valid is None else np.asarray(valid, bool)
    xs = np.sort(x[valid])
    if xs.size >= MIN_FIT_POINTS or not np.isfinite(root) or xs.size < 2:
        return 0.0
    i = int(np.clip(np.searchsorted(xs, root) - 1, 0, xs.size - 2))
    return float(max(root - xs[i], xs[i + 1] - root))


def first_downcrossing(x, y, valid=None) -> float:
    """First `x` where `y` goes from >= 0 to < 0, by a local cubic fit; NaN if none. Only `valid` points are used."""
    return _crossing(x, y, valid, down=True)


def first_upcrossing(x, y, valid=None) -> float:
    """First `x` where `y` goes from <= 0 to > 0 (local cubic fit); NaN if none."""
    return _crossing(x, y, valid, down=False)


def crossing_status(y, valid=None) -> str:
    """Where the first down-crossing of `y` lies relative to the grid: `in_grid`, `below_grid`, `above_grid`, `undetermined`."""
    y = np.asarray(y, float)
    valid = np.isfinite(y) if valid is None else (np.asarray(valid, bool) & np.isfinite(y))
    v = y[valid]
    if v.size == 0:
        return UNDETERMINED
    if np.any((v[:-1] >= 0) & (v[1:] < 0)):
        return IN_GRID
    if v[0] < 0:
        return BELOW_GRID
    return ABOVE_GRID


def root_with_error(x, y, dy, valid=None) -> tuple[float, float, str]:
    """First down-crossing of `y (n,)` with its error: `(root, error, status)`.

    `dy (n,)` are error bars of `y` (NaN: none). The error combines the spread
    of the roots of `y - dy` and `y + dy` around the root (the quadrature part)
    and the cubic-vs-quadratic root difference (interpolation; on fewer than
    `MIN_FIT_POINTS` valid points the bracket around the sign change,
    `bracket_error`); infinite when a shifted curve has no crossing in the grid
    (the data cannot place the threshold that precisely). NaN root and error
    when not in the grid.
    """
    y = np.asarray(y, float)
    dy = np.where(np.isfinite(np.asarray(dy, float)), np.asarray(dy, float), 0.0)
    status = crossing_status(y, valid)
    root = first_downcrossing(x, y, valid)
    if not np.isfinite(root):
        return float("nan"), float("nan"), status
    quad = 0.0
    for shifted in (y - dy, y + dy):
        r = first_downcrossing(x, shifted, valid)
        quad = max(quad, abs(r - root)) if np.isfinite(r) else float("inf")
    valid_y = np.isfinite(y) if valid is None else (np.asarray(valid, bool) & np.isfinite(y))
    interp = max(abs(root - _crossing(x, y, valid, down=True, degree=2)), bracket_error(x, root, valid_y))
    return root, float(np.hypot(quad, interp)), status


def alpha_c(alphas, e_positional, e_semantic, valid=None) -> float:
    """Positional-to-semantic threshold: first root of `e_sem - e_pos` (from + to -); NaN if none in the grid."""
    return first_downcrossing(alphas, np.asarray(e_semantic) - np.asarray(e_positional), valid)


def alpha_c_with_error(alphas, e_positional, e_semantic, delta_err, valid=None) -> tuple[float, float, str]:
    """`alpha_c` with its error and status (`root_with_error` of `e_sem - e_pos` with error bars `delta_err`)."""
    return root_with_error(alphas, np.asarray(e_semantic) - np.asarray(e_positional), delta_err, valid)


def _global_gap(a, err_pos, err_sem, e_pos, e_sem, eps_lin, valid):
    """`eps_g(global minimum) - eps_lin` on the grid and `alpha_c` (NaN if the branches do not cross)."""
    ac = alpha_c(a, e_pos, e_sem, valid)
    return ac, np.asarray(err_pos) - eps_lin, np.asarray(err_sem) - eps_lin


def alpha_l(alphas, err_positional, err_semantic, e_positional, e_semantic, eps_lin, valid=None) -> float:
    """First alpha where the global-minimum test error drops below `eps_lin`; NaN if none in the grid.

    The global minimum is the branch of lower training loss. Below `alpha_c`
    the crossing is searched on the positional curve, above it on the
    semantic one; if neither crosses inside its own range but the global
    error jumps below `eps_lin` at `alpha_c`, `alpha_l = alpha_c`.
    """
    a = np.asarray(alphas, float)
    valid = np.ones_like(a, bool) if valid is None else np.asarray(valid, bool)
    ac, gp, gs = _global_gap(a, err_positional, err_semantic, e_positional, e_semantic, eps_lin, valid)
    if np.isnan(ac):
        # no switch in the grid: the global minimum is one branch throughout
        d = np.asarray(e_semantic)[valid] - np.asarray(e_positional)[valid]
        use_sem = d.size > 0 and np.nanmean(d) < 0
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


def alpha_l_with_error(alphas, err_positional, err_semantic, e_positional, e_semantic, eps_lin,
                       err_positional_err, err_semantic_err, valid=None) -> tuple[float, float, str]:
    """`alpha_l` with its error and status: the test-error curves shifted by their error bars move the root (on
    fewer than `MIN_FIT_POINTS` valid alphas the bracket around it is added, `bracket_error`); statuses as
    `crossing_status` of the global gap."""
    a = np.asarray(alphas, float)
    validb = np.ones_like(a, bool) if valid is None else np.asarray(valid, bool)
    ep, es = np.asarray(err_positional, float), np.asarray(err_semantic, float)
    dp = np.where(np.isfinite(err_positional_err), err_positional_err, 0.0)
    ds = np.where(np.isfinite(err_semantic_err), err_semantic_err, 0.0)
    root = alpha_l(a, ep, es, e_positional, e_semantic, eps_lin, validb)
    d = np.asarray(e_semantic, float) - np.asarray(e_positional, float)
    gap = np.where(d < 0, es, ep) - eps_lin
    if not np.isfinite(root):
        status = crossing_status(gap, validb & np.isfinite(d))
        return float("nan"), float("nan"), UNDETERMINED if status == IN_GRID else status
    spread = 0.0
    for sign in (-1.0, 1.0):
        r = alpha_l(a, ep + sign * dp, es + sign * ds, e_positional, e_semantic, eps_lin, validb)
        spread = max(spread, abs(r - root)) if np.isfinite(r) else float("inf")
    usable = validb & np.isfinite(d) & np.isfinite(gap)
    return root, float(np.hypot(spread, bracket_error(a, root, usable))), IN_GRID
