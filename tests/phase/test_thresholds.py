import numpy as np
import pytest

from phasejax.phase import alpha_c_with_error, crossing_status

from phasejax.phase.thresholds import alpha_c, alpha_l, first_downcrossing, first_upcrossing
from phasejax.phase.thresholds import root_with_error


def test_root_of_a_cubic_is_exact_off_grid():
    x = np.round(np.arange(0.2, 2.01, 0.2), 10)
    y = -(x - 0.737) * (x + 2.0) * (x + 5.0)
    assert first_downcrossing(x, y) == pytest.approx(0.737, abs=1e-10)
    assert first_upcrossing(x, -y) == pytest.approx(0.737, abs=1e-10)


def test_root_of_a_smooth_curve_beats_grid_spacing():
    x = np.linspace(2.0, 4.0, 8)        # spacing 0.29
    assert first_downcrossing(x, np.sin(x)) == pytest.approx(np.pi, abs=2e-3)


def test_invalid_points_are_skipped_and_no_crossing_gives_nan():
    x = np.linspace(0, 1, 6)
    y = 0.5 - x
    valid = np.array([1, 1, 0, 1, 1, 1], bool)
    assert first_downcrossing(x, y, valid) == pytest.approx(0.5, abs=1e-10)
    assert np.isnan(first_downcrossing(x, 1 + x))


def test_alpha_c_and_alpha_l_on_synthetic_branches():
    a = np.linspace(0.2, 3.0, 15)
    e_pos, e_sem = 0.01 * a, 0.01 * a - 0.004 * (a - 1.1)      # semantic lower beyond 1.1
    err_pos = np.full_like(a, 0.5)                              # positional never beats the baseline
    err_sem = 0.6 - 0.1 * a                                     # semantic beats eps_lin = 0.4 beyond 2.0
    assert alpha_c(a, e_pos, e_sem) == pytest.approx(1.1)
    assert alpha_l(a, err_pos, err_sem, e_pos, e_sem, 0.4) == pytest.approx(2.0)
    # the global error jumps below the baseline at the switch itself
    assert alpha_l(a, err_pos, 0.3 + 0 * a, e_pos, e_sem, 0.4) == pytest.approx(1.1)


def test_status_says_where_a_threshold_lies():
    x = np.linspace(0.5, 2.0, 7)
    assert crossing_status(1.0 - x) == "in_grid"
    assert crossing_status(-x) == "below_grid"          # already negative at the first alpha
    assert crossing_status(x) == "above_grid"           # not yet negative at the last alpha
    assert crossing_status(np.full_like(x, np.nan)) == "undetermined"
    root, err, status = alpha_c_with_error(x, np.zeros_like(x), x + 1.0, np.zeros_like(x))
    assert np.isnan(root) and np.isnan(err) and status == "above_grid"


def test_error_of_a_root_follows_the_error_bars_and_the_slope():
    x = np.linspace(0.0, 2.0, 11)
    slope, dy = -0.01, 1e-4
    y = slope * (x - 1.234)
    root, err, status = root_with_error(x, y, np.full_like(x, dy))
    assert status == "in_grid" and root == pytest.approx(1.234, abs=1e-12)
    assert err == pytest.approx(dy / abs(slope), rel=1e-6)      # linear curve: no interpolation error
    # error bars larger than the curve's range inside the grid: the root cannot be placed
    _, err_big, _ = root_with_error(x, y, np.full_like(x, 0.05))
    assert err_big == np.inf


@pytest.mark.parametrize("alphas", [(1.0, 2.0), (1.0, 1.5, 2.0), (0.5, 1.0, 2.0)])
@pytest.mark.parametrize("curve", [lambda x: np.exp(-3 * (x - 1)) - np.exp(-3 * 0.2513),
                                   lambda x: 0.02 * (1.2513 - x) * (1 + 4 * (x - 1) ** 2),
                                   lambda x: np.tanh(1.2513 - x)])
def test_a_threshold_on_a_coarse_grid_carries_an_error_that_covers_the_truth(alphas, curve):
    """On 2 or 3 alphas the cubic and the quadratic fit are the same curve, so their difference (the
    interpolation error) used to be 0: `alpha_c = 1.1481 +- 0.0006` for a root at 1.2513. The error now covers
    the root."""
    x = np.asarray(alphas)
    y = curve(x)
    root, err, status = root_with_error(x, y, np.zeros_like(x))
    assert status == "in_grid" and np.isfinite(err)
    assert abs(root - 1.2513) <= err, (root, err)
    # the same through alpha_c (e_sem - e_pos) and alpha_l (the semantic branch the global minimum throughout, its test error crossing the baseline)
    root, err, _ = alpha_c_with_error(x, np.zeros_like(x), y, np.zeros_like(x))
    assert abs(root - 1.2513) <= err
    from phasejax.phase import alpha_l_with_error

    big = np.ones_like(x)
    root, err, _ = alpha_l_with_error(x, big, 0.4 + y, big, 0 * big, 0.4, np.zeros_like(x), np.zeros_like(x))
    assert abs(root - 1.2513) <= err, (root, err)


def test_a_fine_grid_keeps_the_cubic_versus_quadratic_error():
    x = np.linspace(0.5, 2.0, 7)
    y = np.tanh(1.2513 - x)
    root, err, _ = root_with_error(x, y, np.zeros_like(x))
    assert abs(root - 1.2513) <= err < 0.05
