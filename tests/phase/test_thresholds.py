import numpy as np
import pytest

from phasejax.phase import alpha_c, alpha_l, first_downcrossing


def test_root_of_a_cubic_is_exact_off_grid():
    x = np.round(np.arange(0.2, 2.01, 0.2), 10)
    y = -(x - 0.737) * (x + 2.0) * (x + 5.0)
    assert first_downcrossing(x, y) == pytest.approx(0.737, abs=1e-10)


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
