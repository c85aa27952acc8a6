"""The published phase diagrams of Behrens, Biggio & Zdeborova (2024), read off their figure files.

Their Figs. 1-2 (`figures/memorizing_counts-phase-diagram-T32-best.png` and `-avg.png` in their repository
`counting-attention`) draw, for `T = 32, L = 10`, the best-of-5 and the mean-of-5 held-out accuracy of the six
configurations over `d, p` in `PAPER_SIZES`, each panel a `pcolor` on log axes coloured by matplotlib's
"Spectral" map from 0 to 100%. Their plotting call passes the cell corners and the values with the same
length, so matplotlib drops the last row and column: the `d = 128` row and the `p = 128` column are not drawn,
and the cell of `(p_i, d_j)` spans `[p_i + 1, p_{i+1} + 1] x [d_j + 1, d_{j+1} + 1]`.

`read_published_map` finds the six panels of such a figure (the coloured boxes between white margins; the
white lines at `d = T` and `p = T` are bridged), takes the median colour of the middle of each cell and
returns the value of the nearest colour of the colour map (a resolution of about 1%; cells crossed by the
white lines are read on either side of them). `PUBLISHED_COLUMNS` are the columns of the table
`results/counting/published_maps.csv` that `scripts/read_counting_figures.py` writes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PAPER_SIZES", "PUBLISHED_COLUMNS", "PANELS", "COMPARISON_COLUMNS", "compare_with_published",
           "published_lookup", "read_published_map"]

PAPER_SIZES = (1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 128)
"""The `d` and `p` of the paper's grid (its scripts `exps/run_approx_*.sh`)."""

PANELS = {(0, 0): "dot+BOS+softmax", (0, 1): "dot+softmax", (0, 2): "linear+softmax",
          (1, 0): "dot+BOS", (1, 1): "dot", (1, 2): "linear"}
"""The configuration of each panel `(row, column)` of the published figures."""

PUBLISHED_COLUMNS = ("config", "d", "p", "best", "mean")
"""Columns of `published_maps.csv`: one row per configuration and drawn cell, accuracies as fractions."""


def _runs(mask: np.ndarray, gap: int = 4) -> list[tuple[int, int]]:
    """Index ranges where `mask` holds, ranges separated by at most `gap` indices merged."""
    idx = np.flatnonzero(mask)
    out = []
    for i in idx:
        if out and i - out[-1][1] <= gap + 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return [(a, b) for a, b in out]


def _panels(rgb: np.ndarray) -> tuple[list, list]:
    """Pixel ranges `(first, last)` of the panels' columns (3) and rows (2) of a published figure."""
    sat = rgb.max(-1) - rgb.min(-1)
    colour = sat > 40
    rows = [r for r in _runs(colour.mean(1) > 0.2) if r[1] - r[0] > 50]
    cols = [c for c in _runs(colour[rows[0][0]:rows[0][1]].mean(0) > 0.5) if c[1] - c[0] > 50]
    if len(rows) != 2 or len(cols) != 3:
        raise ValueError(f"expected 2 x 3 panels, found rows {rows} and columns {cols}")
    return cols, rows


def read_published_map(rgb: np.ndarray, sizes=PAPER_SIZES) -> dict[str, np.ndarray]:
    """Values `(len(sizes) - 1, len(sizes) - 1)` (rows `d`, columns `p`, fractions) of each configuration drawn
    in the figure `rgb (H, W, 3)` (0-255), read as the module docstring says."""
    from matplotlib import colormaps

    cmap = colormaps["Spectral"]
    levels = np.linspace(0.0, 1.0, 1001)
    palette = 255.0 * np.asarray(cmap(levels))[:, :3]
    rgb = np.asarray(rgb, float)[..., :3]
    cols, rows = _panels(rgb)
    edges = np.log(np.asarray(sizes, float) + 1.0)
    frac = (edges - edges[0]) / (edges[-1] - edges[0])
    out = {}
    for (r, c), name in PANELS.items():
        (x0, x1), (y0, y1) = cols[c], rows[r]
        grid = np.full((len(sizes) - 1, len(sizes) - 1), np.nan)
        for j in range(len(sizes) - 1):            # d (upwards)
            for i in range(len(sizes) - 1):        # p (rightwards)
                xa, xb = x0 + frac[i] * (x1 - x0), x0 + frac[i + 1] * (x1 - x0)
                ya, yb = y1 - frac[j + 1] * (y1 - y0), y1 - frac[j] * (y1 - y0)
                pad_x, pad_y = 0.25 * (xb - xa), 0.25 * (yb - ya)
                patch = rgb[int(np.ceil(ya + pad_y)):int(np.floor(yb - pad_y)) + 1,
                            int(np.ceil(xa + pad_x)):int(np.floor(xb - pad_x)) + 1].reshape(-1, 3)
                patch = patch[(patch.max(1) - patch.min(1)) > 25]          # not the white lines or markers
                if len(patch) == 0:
                    continue
                colour = np.median(patch, 0)
                grid[j, i] = levels[np.argmin(np.sum((palette - colour) ** 2, 1))]
        out[name] = grid
    return out


COMPARISON_COLUMNS = ("config", "d", "p", "best", "paper_best", "mean", "paper_mean", "seeds")
"""Columns of `comparison.csv`: per configuration and cell of a run that the paper's figures draw, our best and
mean accuracy (`phasejax.tasks.histogram.figures.cell_table`) and the values read off the paper's."""


def published_lookup(published: dict, stat: str) -> dict:
    """`{config: {(d, p): value}}` of the column `stat` (`"best"` or `"mean"`) of a published-maps table."""
    out: dict = {}
    for name, d, p, v in zip(published["config"], published["d"], published["p"], published[stat]):
        out.setdefault(str(name), {})[(int(d), int(p))] = float(v)
    return out


def compare_with_published(runs, published: dict) -> dict:
    """`COMPARISON_COLUMNS` for every configuration of `runs` (`CountingRuns`) and every cell the published
    table (`published_maps.csv`'s columns) has."""
    from phasejax.tasks.histogram.figures import cell_table

    best, mean = published_lookup(published, "best"), published_lookup(published, "mean")
    rows = {k: [] for k in COMPARISON_COLUMNS}
    for name in runs.names:
        t = cell_table(runs.select(name))
        for i, d in enumerate(t["ds"]):
            for j, p in enumerate(t["ps"]):
                key = (int(d), int(p))
                if key not in best.get(name, {}):
                    continue
                for k, v in zip(COMPARISON_COLUMNS, (name, int(d), int(p), t["best"][i, j], best[name][key],
                                                     t["mean"][i, j], mean[name][key], int(t["seeds"][i, j]))):
                    rows[k].append(v)
    return rows
