"""Figures of phase diagrams: every cell with a value is coloured, and grey (no value) has a legend entry."""

import types

import numpy as np
import pytest

import phasejax.plotting as plotting


def _diagram(omegas, delta):
    """A stand-in for a `PhaseDiagram` with what `plot_phase_map` reads: `Delta e_t` per (omega, alpha)."""
    alphas = np.asarray([1.0, 2.0, 3.0])
    delta = np.asarray(delta, float)
    nw = len(omegas)
    nan = np.full(nw, np.nan)
    return types.SimpleNamespace(
        grid=types.SimpleNamespace(alphas=tuple(alphas), omegas=tuple(omegas)),
        table=dict(delta_e=delta, delta_e_err=np.full_like(delta, 1e-6), global_branch=np.where(np.isfinite(delta),
                                                                                                 0, -1)),
        thresholds=dict(omega=np.asarray(omegas), alpha_c=nan, alpha_c_err=nan, alpha_l=nan, alpha_l_err=nan),
        config=dict(sigma=[0.5], lam=0.01, A=[[0.6, 0.4], [0.4, 0.6]]))


def _draw(monkeypatch, pd):
    """`plot_phase_map(pd)` rendered: `(RGB pixels, legend labels)`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figs = []
    monkeypatch.setattr(plotting, "save_figure", lambda fig, path, dpi=130: figs.append(fig) or path)
    plotting.plot_phase_map(pd, "unused.png")
    (fig,) = figs
    FigureCanvasAgg(fig).draw()
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    return np.asarray(fig.canvas.buffer_rgba())[..., :3] / 255.0, labels


def _coloured(img):
    """Pixels clearly red or blue (the diverging colour map away from 0)."""
    return int(np.sum(np.abs(img[..., 0] - img[..., 2]) > 0.3))


@pytest.mark.parametrize("omegas", [(0.3,), (0.1, 0.3)])
def test_a_phase_map_colours_every_cell_with_a_value(monkeypatch, omegas):
    """A one-omega diagram used to be drawn all grey (nearest-cell shading of a one-row grid has no height)."""
    delta = np.tile([1e-3, -1e-3, -2e-3], (len(omegas), 1))
    img, labels = _draw(monkeypatch, _diagram(omegas, delta))
    assert _coloured(img) > 5000
    assert not any("grey" in label for label in labels)       # nothing missing: no grey entry


def test_grey_cells_have_a_legend_entry(monkeypatch):
    img, labels = _draw(monkeypatch, _diagram((0.3,), [[1e-3, np.nan, -2e-3]]))
    assert _coloured(img) > 2000
    assert any(label.startswith("grey: no") for label in labels), labels


def test_cell_edges():
    np.testing.assert_allclose(plotting.cell_edges([1.0, 2.0, 4.0], 0.1), [0.5, 1.5, 3.0, 5.0])
    np.testing.assert_allclose(plotting.cell_edges([0.3], 0.05), [0.25, 0.35])
