"""Counting figures: the reader of the published maps on a figure drawn the way the paper's were, the cell
table of the maps, the committed table of the published maps."""

import io
import os

import numpy as np
import pytest

from phasejax.tasks.histogram.counting import CountingRuns
from phasejax.tasks.histogram.figures import cell_table, plot_maps, still_learning
from phasejax.tasks.histogram.published import PANELS, PAPER_SIZES, PUBLISHED_COLUMNS, read_published_map


def _paper_like_figure(values: dict) -> np.ndarray:
    """A 2 x 3 figure drawn as the paper's plotting code describes its maps: `pcolor(p + 1, d + 1, C)` with
    corners and values of the same length (the last row and column dropped), log axes, "Spectral" from 0 to
    100, white lines at 32; returned as an RGB array."""
    from matplotlib.figure import Figure
    from PIL import Image

    fig = Figure(figsize=(12, 6))
    axes = fig.subplots(2, 3, sharex=True, sharey=True)
    x = np.asarray(PAPER_SIZES, float) + 1
    for (r, c), name in PANELS.items():
        ax = axes[r, c]
        smap = ax.pcolormesh(x, x, 100 * values[name][:-1, :-1], cmap="Spectral", vmin=0, vmax=100, shading="flat")
        ax.axvline(32, c="white")
        ax.axhline(32, c="white")
        ax.set_xscale("log")
        ax.set_yscale("log")
    fig.colorbar(smap, ax=axes, location="right", shrink=0.5)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))


def test_the_reader_recovers_the_values_of_a_figure_drawn_like_the_papers():
    rng = np.random.default_rng(0)
    n = len(PAPER_SIZES)
    values = {name: rng.uniform(0.05, 1.0, size=(n, n)) for name in PANELS.values()}
    read = read_published_map(_paper_like_figure(values))
    for name, v in values.items():
        assert read[name].shape == (n - 1, n - 1)
        np.testing.assert_allclose(read[name], v[:-1, :-1], atol=0.015, err_msg=name)


def test_cell_table_is_the_best_and_the_mean_over_seeds():
    runs = dict(d=np.array([2, 2, 2, 4]), p=np.array([1, 1, 1, 1]), accuracy=np.array([0.5, 0.7, 0.6, 0.9]),
                best_accuracy=np.array([0.55, 0.8, 0.6, 0.95]))
    t = cell_table(runs)
    np.testing.assert_array_equal(t["ds"], [2, 4])
    np.testing.assert_allclose(t["best"][:, 0], [0.8, 0.95])
    np.testing.assert_allclose(t["mean"][:, 0], [0.6, 0.9])
    np.testing.assert_array_equal(t["seeds"][:, 0], [3, 1])


def test_maps_are_drawn_for_the_six_configurations(tmp_path):
    names = ["linear", "linear+softmax", "dot", "dot+softmax", "dot+BOS", "dot+BOS+softmax"]
    rows = {k: [] for k in ("config", "T", "L", "d", "p", "seed", "accuracy", "final_loss", "data", "steps",
                            "batch_size", "best_accuracy")}
    for name in names:
        for d in (2, 32):
            for p in (1, 4):
                for s in range(2):
                    for k, v in zip(rows, (name, 32, 10, d, p, s, 0.2 + 0.1 * s, 1.0, "composition", 10, 32, 1.0)):
                        rows[k].append(v)
    runs = CountingRuns(runs={k: np.asarray(v) for k, v in rows.items()}, config={})
    for stat in ("best", "mean"):
        path = plot_maps(runs, str(tmp_path / f"{stat}.png"), stat, T=32, title="t", majority=0.2)
        assert os.path.getsize(path) > 10_000
    with pytest.raises(ValueError, match="stat"):
        plot_maps(runs, str(tmp_path / "x.png"), "median", T=32, title="t")


PUBLISHED = os.path.join(os.path.dirname(__file__), "..", "..", "results", "counting", "published_maps.csv")


def test_committed_published_maps_cover_the_drawn_grid():
    from phasejax.io import read_csv

    t = read_csv(PUBLISHED, PUBLISHED_COLUMNS)
    assert len(t["config"]) == 6 * 13 * 13
    assert set(np.asarray(t["d"]).tolist()) == set(PAPER_SIZES[:-1])
    for k in ("best", "mean"):
        v = np.asarray(t[k], float)
        assert np.all((v >= 0) & (v <= 1))
    assert np.all(np.asarray(t["best"], float) >= np.asarray(t["mean"], float) - 0.03)   # best >= mean, read off


def test_still_learning_counts_the_runs_whose_loss_still_falls():
    epochs = np.arange(1, 17)
    loss = {0: 1.0 / epochs, 1: np.full(16, 0.5)}            # seed 0 falls 13% over the last 2 epochs; 1 is flat
    curves = dict(config=np.full(32, "dot"), d=np.full(32, 4), p=np.full(32, 2), seed=np.repeat([0, 1], 16),
                  epoch=np.tile(epochs, 2), loss=np.concatenate([loss[0], loss[1]]))
    assert still_learning(curves, "dot") == (0.5, 2)
    assert still_learning(curves, "dot", drop=0.2) == (0.0, 2)
