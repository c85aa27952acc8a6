"""Three layers: the reduction to the two-layer posterior when layer 1 is known, the one-layer closed form when
layers 1 and 2 are known, and AMP on data against the state evolution (the committed runs; a fresh one, slow)."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from phasejax import float64_scope
from phasejax.depth import (
    gaussian_posterior,
    grid_rule,
    mixing_matrix,
    outer_moments,
    posterior_three,
    se_draws,
    sequence_index,
    three_rule,
)
from phasejax.depth.se import Q_MAX
from phasejax.io import read_csv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
THREE = os.path.join(ROOT, "results", "depth", "three_layers")


def test_with_layer_one_known_the_three_layer_posterior_is_the_two_layer_one():
    """Given z_1, `u = A(P z_2) P z_3` with `P = A(z_1)`: the two-layer channel in `h = P z_2`, `w = P z_3`, whose
    Gaussian priors are `N(P omega, V P P^T)`. The three-layer posterior (Gauss-Hermite over z_1 at a vanishing
    variance, mixture rule inside) equals that two-layer posterior computed on the graded grid."""
    skip = 1.0
    with float64_scope():
        rng = np.random.default_rng(31)
        V = jnp.asarray([1e-12, 0.9, 0.1])  # layer 3 narrow: the mixture's ridge components at work
        omega = jnp.sqrt(1 - V)[None, :, None] * rng.standard_normal((3, 3, 2))
        Z = omega + jnp.sqrt(V)[None, :, None] * rng.standard_normal((3, 3, 2))
        u = sequence_index(Z, skip)

        def both(u, omega, z):
            three = posterior_three(u, omega, V, skip, three_rule(3, 24), ridge=True)
            P = mixing_matrix(z[0], skip)
            two = gaussian_posterior(u, P @ omega[1], V[1] * P @ P.T, P @ omega[2], V[2] * P @ P.T, skip,
                                     grid_rule(0.16), jnp.linalg.inv(P))
            return three, two

        three, two = jax.jit(jax.vmap(both))(u, omega, Z)
        np.testing.assert_allclose(three.mean[:, 0], Z[:, 0], atol=1e-5)
        # the two rules agree to their own accuracy (a few 1e-3 at this order); a wrong reduction is off by O(1)
        np.testing.assert_allclose(three.mean[:, 1:], two.mean, atol=1e-2)
        np.testing.assert_allclose(three.second[:, 1:], two.second, atol=1e-2, rtol=1e-2)


@pytest.mark.slow
def test_with_two_layers_known_the_last_layer_threshold_is_one_over_T2_plus_T():
    """With layers 1 and 2 known the output reveals +-z_3, so E[z_3 z_3^T | u] = z_3 z_3^T and layer 3's stability
    constant at q_3 = 0 is E|z z^T - I|_F^2 = T^2 + T = 6: sample by sample the estimator is |z_3 z_3^T - I|_F^2."""
    with float64_scope():
        draws = se_draws(32, seed=33, layers=3)
        m = outer_moments(jnp.asarray([Q_MAX, Q_MAX, 0.0]), 1.0, draws, three_rule(3, 6))
        z = draws.eta[:, 2]
        exact = jnp.sum((z[:, :, None] * z[:, None, :] - jnp.eye(2)) ** 2, (-1, -2))
        # layers 1, 2 known to sqrt(1 - Q_MAX) ~ 0.02, which moves z_3 by a few percent
        np.testing.assert_allclose(m.cov_dev[:, 2], exact, rtol=0.1, atol=0.1)
        assert float(jnp.max(m.M_posterior[:, 2])) <= 6.0 + 1e-9
        np.testing.assert_allclose(m.M_posterior[:, 2], 6.0, atol=0.3)


@pytest.mark.slow
def test_three_layer_amp_tracks_the_state_evolution():
    """AMP on three-layer data (d = 1000, skip 1, alpha 0.5, 2 seeds) ends where the SE (same rule) says: layer 3
    learned, layers 1 and 2 at zero, within 3 seed standard deviations plus 2 / sqrt(d)."""
    from phasejax.depth import run_amp, sample_data, solve_se
    from phasejax.depth.amp import amp_keys

    with float64_scope():
        rule, skip, alpha, d = three_rule(4, 6), 1.0, 0.5, 1000
        se = solve_se(alpha, skip, q0=(1e-3, 1e-3, 1e-3), draws=se_draws(256, seed=3, layers=3), rule=rule,
                      tol=1e-5)
        ms = []
        for s in range(2):
            data_key, start_key = amp_keys(jax.random.PRNGKey(s))
            res = run_amp(sample_data(data_key, d, alpha, skip, layers=3), skip, start_key, q_init=0.1, m_init=0.1,
                          rule=rule, max_iterations=60)
            ms.append(np.asarray(res.m))
        ms = np.asarray(ms)
        band = 3 * ms.std(0, ddof=1) + 2 / np.sqrt(d) + 3 * np.asarray(se.q_se)
        assert np.all(np.abs(ms.mean(0) - np.asarray(se.q)) < band), (ms, se.q)


@pytest.mark.slow
def test_output_functions_converge_with_the_rule_order_where_amp_needs_them():
    """AMP uses the output functions `g_l` of every sample, not only their averages. Where the last layer is sharp
    (`q_3 = 0.99`) and layers 1 and 2 are being learned (`q = 0.3, 0.1`), the per-sample output functions of the
    (24, 12) rule agree with the (32, 12) rule's to a tenth of the (4, 6) rule's error on layers 1 and 2, and the
    (4, 6) rule's error is a larger fraction of `E|g_l|^2` on those layers than on the sharp last one: the rule of
    the CPU preset's AMP is far from converged on the layers AMP fails to learn (docs/depth.md, section 7). On a
    few samples (a sequence index in the tail) `g_1` changes sign between the intermediate orders 8 to 16."""
    from phasejax.depth.se import output_function, teacher_and_cavity

    with float64_scope():
        V, omega, _, u = teacher_and_cavity(jnp.asarray([0.3, 0.1, 0.99]), 1.0, se_draws(24, seed=21, layers=3))

        def g(rule):
            one = lambda a, b: output_function(a, b, V, 1.0, rule, True)[0]  # noqa: E731
            return jax.jit(lambda us, oms: jax.lax.map(lambda x: one(*x), (us, oms), batch_size=4))(u, omega)

        ref = g(three_rule(32, 12))
        power = jnp.mean(jnp.sum(ref**2, -1), 0)
        err = {o: np.asarray(jnp.mean(jnp.sum((g(three_rule(*o)) - ref) ** 2, -1), 0) / power) for o in ((4, 6), (24, 12))}
        assert np.all(err[(24, 12)][:2] < err[(4, 6)][:2] / 10), err
        assert np.all(err[(4, 6)][:2] > err[(4, 6)][2]), err


def _band(m, d, q_se):
    """The finite-size band around the SE: 3 standard errors of the seed mean plus 2 / sqrt(d) plus 3 of the SE's own
    Monte Carlo errors."""
    return 3 * m.std(ddof=1) / np.sqrt(m.size) + 2 / np.sqrt(d) + 3 * q_se


@pytest.mark.parametrize("alpha", [0.5, 0.8, 1.6])
def test_committed_three_layer_amp_tracks_the_state_evolution(alpha):
    """The committed AMP runs on three-layer data (`amp.csv`, d = 1000, three seeds per alpha) against the committed
    SE (`se.csv`): at the SE's fixed point and at the SE after as many steps from AMP's start as each run took
    (`se_t_q*`), within the finite-size band (`_band`), AMP's overlaps in units of the teacher's own norm. Every layer
    at alpha 0.5 and 0.8; at 1.6 the last layer (layers 1 and 2 there: `test_committed_three_layer_amp_rule_study`)."""
    amp = read_csv(os.path.join(THREE, "amp.csv"))
    se = read_csv(os.path.join(THREE, "se.csv"))
    at = np.nonzero(np.isclose(se["alpha"], alpha))[0]
    assert at.size == 1  # the SE was computed at this alpha
    rows = np.isclose(amp["alpha"], alpha)
    assert rows.sum() >= 2 and np.all(amp["d"][rows] >= 1000)
    d = amp["d"][rows].min()
    for k in (1, 2, 3) if alpha < 1.6 else (3,):
        m = amp[f"m{k}"][rows] / amp[f"w{k}_norm"][rows]
        band = _band(m, d, se[f"q{k}_se"][at[0]])
        assert abs(m.mean() - se[f"q{k}"][at[0]]) < band, (k, m, se[f"q{k}"][at[0]], band)
        assert abs(m.mean() - amp[f"se_t_q{k}"][rows].mean()) < band, (k, m, amp[f"se_t_q{k}"][rows], band)


def test_committed_three_layer_amp_rule_study():
    """Why AMP at alpha = 1.6 does not learn layers 1 and 2 with the SE's rule (`amp_rules.csv`, docs/depth.md,
    section 7): AMP uses the output functions sample by sample, and with the SE's rule those of layers 1 and 2 carry
    the rule's error. On the same data, from the same starts (`m = q` per layer), AMP with the finer rule against
    AMP with the SE's, each against the SE computed with its own rule:

    - from the warm start (layers 1 and 3 learned), the SE with either rule raises layers 1 and 2 above their start;
      AMP with the finer rule ends ahead of AMP with the SE's rule on layers 1 and 2 by more than the finite-size
      band 2 / sqrt(d), and at a third or less of its distance to its own rule's SE;
    - from the SE's start, AMP with the finer rule learns layer 1, ahead by more than the band;
    - the last layer is at the SE in every run.
    """
    rules = read_csv(os.path.join(THREE, "amp_rules.csv"))
    band = 2 / np.sqrt(rules["d"].min())
    starts = sorted(dict.fromkeys(rules["start"].tolist()), key=lambda x: float(x.split(",")[0]))
    assert len(starts) == 2
    end = {}
    for start in starts:
        for rule in ("se", "fine"):
            s = (rules["start"] == start) & (rules["rule"] == rule)
            t = np.argmax(rules["step"][s])
            amp = np.asarray([rules[f"m{k}"][s][t] / rules[f"w{k}_norm"][s][t] for k in (1, 2, 3)])
            own = np.asarray([rules[f"{'se' if rule == 'se' else 'se_fine'}_q{k}"][s][t] for k in (1, 2, 3)])
            end[start, rule] = amp, own
            assert abs(amp[2] - own[2]) < band, (start, rule, amp, own)
    cold, warm = starts
    q_warm = np.asarray([float(v) for v in warm.split(",")])
    (coarse, se_coarse), (fine, se_fine) = end[warm, "se"], end[warm, "fine"]
    assert np.all(se_coarse[:2] > q_warm[:2]) and np.all(se_fine[:2] > q_warm[:2]), (se_coarse, se_fine)
    assert np.all(fine[:2] > coarse[:2] + band), (coarse, fine)
    assert np.all(np.abs(fine - se_fine)[:2] < np.abs(coarse - se_coarse)[:2] / 3), (coarse, se_coarse, fine, se_fine)
    assert end[cold, "fine"][0][0] > end[cold, "se"][0][0] + band, end


def test_committed_three_layer_amp_with_the_finer_rule_learns_every_layer_as_its_state_evolution():
    """`amp_fine_rule.csv` (`scripts/checks/three_layer_amp_fine_rule.py`: the rule study's data at alpha = 1.6, d = 1000,
    AMP from the SE's start `m = q = 0.1` with the (16, 10) rule, 45 steps, and the SE with the same rule from the
    same start): AMP learns all three layers, and over its last 10 steps each layer's overlap (in units of the
    teacher's norm) lies within the finite-size band 2 / sqrt(d) of the SE's at the same step."""
    rows = read_csv(os.path.join(THREE, "amp_fine_rule.csv"))
    d = rows["d"].min()
    m = np.stack([rows[f"m{k}"] for k in (1, 2, 3)], 1)
    se = np.stack([rows[f"se_q{k}"] for k in (1, 2, 3)], 1)
    assert rows["step"].max() >= 40 and np.all(rows["outer"] > 4)
    assert np.all(m[-1] > 0.9), m[-1]
    assert np.all(np.abs(m[-10:] - se[-10:]) < 2 / np.sqrt(d)), (m[-10:], se[-10:])
