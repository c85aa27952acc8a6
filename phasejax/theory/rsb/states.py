"""The ground, threshold and marginal 1RSB states (docs/rsb.md): one-dimensional searches in the Parisi
parameter `y` on fixed-`y` solves (`locate_rsb_states`), with errors from the same searches on each replica of the
outer rule alone; for the reference model, `perceptron_states`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from phasejax.precision import float64_scope, uses_float64
from phasejax.solvers import HasStatus, Status
from phasejax.theory.quadrature import Quadrature
from phasejax.theory.rsb.models import PerceptronRSB
from phasejax.theory.rsb.replicon import RSBReplicon, rsb_replicon
from phasejax.theory.rsb.rule import RSBRule, perceptron_rule, replica_rule
from phasejax.theory.rsb.solver import RSBConfig, RSBResult, solve_rsb_problem

Array = jax.Array


@struct.dataclass
class LocatedState(HasStatus):
    """One 1RSB state located in `y` (docs/rsb.md, "The ground, threshold and marginal states"), with 95% errors
    (`_err`) from the spread of the same search repeated on each replica of the outer rule alone.

    Attributes:
      y: `()` the Parisi parameter of the state; phi, energy, complexity: `()` `Phi(y)`, `e = Phi + y dPhi/dy`,
        `Sigma = y^2 dPhi/dy`; delta, V0: `()` `Delta = q1 - q0` and the response within the state; within,
        between: `()` its replicons (`RSBReplicon`; `within` without the jump term), within_jump: `()` `A1`.
        Each with `_err` (NaN where the replicas were not searched).
      result: the `RSBResult` of the fixed-`y` solve at `y` on the full rule (the ground state: the solve with `y`
        free); replicon: its `RSBReplicon`.
      residual: `()` the search's criterion at the state: `|Sigma| / e` (ground), `|de/dy| y / e` from a central
        difference (threshold), `|within - 1|` (marginal).
      iterations: `()` fixed-`y` (or free-`y`) solves spent on the full rule.
      status: `()` `phasejax.solvers.Status`: `CONVERGED`; `INVALID_INPUT` where the scan's range holds no such state
        (values NaN); otherwise the worst status of the solves at the state.
    """

    y: Array
    y_err: Array
    phi: Array
    phi_err: Array
    energy: Array
    energy_err: Array
    complexity: Array
    complexity_err: Array
    delta: Array
    delta_err: Array
    V0: Array
    V0_err: Array
    within: Array
    within_err: Array
    within_jump: Array
    between: Array
    between_err: Array
    result: RSBResult | None
    replicon: RSBReplicon | None
    residual: Array
    iterations: Array
    status: Array


@struct.dataclass
class RSBStates:
    """The ground (`Sigma = 0`), threshold (largest complexity, highest energy) and marginal (within-state replicon
    at 1) states of a model (`LocatedState` each), and the fixed-`y` scan they were bracketed on: `scan_y (K,)`,
    `scan_phi`, `scan_energy`, `scan_complexity`, `scan_within` (`(K,)` each, the full rule), `scan_status (K,)`."""

    ground: LocatedState
    threshold: LocatedState
    marginal: LocatedState
    scan_y: Array
    scan_phi: Array
    scan_energy: Array
    scan_complexity: Array
    scan_within: Array
    scan_status: Array


_STATE_KEYS = ("y", "phi", "energy", "complexity", "delta", "V0", "within", "between")


class _FixedY:
    """Fixed-`y` solves of one model on one rule, warm-started from the solved state nearest in `log y`."""

    def __init__(self, model, free, rule, config, test_rule, tie_width, iy):
        self.model, self.free, self.rule, self.config = model, np.asarray(free, bool), rule, config
        self.test_rule, self.tie_width, self.iy = test_rule, tie_width, iy
        self.solved: dict[float, tuple] = {}
        self.count = 0

    def seed(self, u):
        self.solved[float(u[self.iy])] = (None, None, np.asarray(u))

    def solve(self, y, *, replicon=False):
        y = float(y)
        if y not in self.solved or self.solved[y][0] is None:
            ys = [k for k, v in self.solved.items() if v[0] is not None]
            if ys:
                near = min(ys, key=lambda k: abs(np.log(k / y)))
                u0 = np.asarray(self.solved[near][0].u).copy()
            else:
                u0 = np.asarray(next(iter(self.solved.values()))[2]).copy()
            u0[self.iy] = y
            res = solve_rsb_problem(self.model, jnp.asarray(u0), jnp.asarray(self.free), self.rule, self.config,
                                    self.test_rule)
            self.count += 1
            self.solved[y] = (res, None, None)
        res, rep, _ = self.solved[y]
        if replicon and rep is None:
            rep = rsb_replicon(self.model, res.u, self.rule, tie_width=self.tie_width)
            self.solved[y] = (res, rep, None)
        return self.solved[y][:2]

    def ground(self, u0):
        free = self.free.copy()
        free[self.iy] = True
        self.count += 1
        res = solve_rsb_problem(self.model, jnp.asarray(u0), jnp.asarray(free), self.rule, self.config,
                                self.test_rule)
        return res, rsb_replicon(self.model, res.u, self.rule, tie_width=self.tie_width)


def _values(res: RSBResult, rep: RSBReplicon) -> dict:
    return dict(y=float(res.y), phi=float(res.phi), energy=float(res.energy), complexity=float(res.complexity),
                delta=float(res.delta), V0=float(res.V0), within=float(rep.within), between=float(rep.between))


def _locate_ground(fy: _FixedY, lo: float, hi: float, xtol: float):
    """`Sigma(y) = 0` between `lo` (`Sigma > 0`) and `hi` (`Sigma < 0`): the solve with `y` free from the nearer
    end, kept if it converges inside the bracket; else Brent's root of `Sigma(y)` on fixed-`y` solves."""
    from scipy.optimize import brentq

    r_lo, r_hi = fy.solve(lo)[0], fy.solve(hi)[0]
    u0 = np.asarray((r_lo if abs(float(r_lo.complexity)) < abs(float(r_hi.complexity)) else r_hi).u)
    res, rep = fy.ground(u0)
    if int(res.status) == Status.CONVERGED and lo * (1 - 1e-9) <= float(res.y) <= hi * (1 + 1e-9):
        return res, rep
    y = brentq(lambda t: float(fy.solve(t)[0].complexity), lo, hi, xtol=xtol * lo, rtol=1e-12)
    return fy.solve(y, replicon=True)


def _locate_threshold(fy: _FixedY, lo: float, hi: float, xtol: float):
    """The largest complexity: `e(y)` at its maximum in `(lo, hi)` (`dSigma/dy = y de/dy`), by Brent's bounded
    search on fixed-`y` solves."""
    from scipy.optimize import minimize_scalar

    out = minimize_scalar(lambda t: -float(fy.solve(np.exp(t))[0].energy), bounds=(np.log(lo), np.log(hi)),
                          method="bounded", options=dict(xatol=xtol))
    return fy.solve(float(np.exp(out.x)), replicon=True)


def _locate_marginal(fy: _FixedY, lo: float, hi: float, xtol: float):
    """`within(y) = 1` between `lo` and `hi` (a sign change of `within - 1`), by Brent's root on fixed-`y` solves
    with their within-state replicons."""
    from scipy.optimize import brentq

    y = brentq(lambda t: float(fy.solve(np.exp(t), replicon=True)[1].within) - 1.0, np.log(lo), np.log(hi),
               xtol=xtol, rtol=1e-12)
    return fy.solve(float(np.exp(y)), replicon=True)


def _bracket_around(fy: _FixedY, kind: str, y0: float, width: float = 0.15, grow: int = 4):
    """A bracket of state `kind` for a replica's search around the full rule's `y0`: `y0 (1 -+ width)`, widened
    until the criterion changes sign (ground, marginal); `None` if it does not."""
    lo, hi = y0 * (1 - width), y0 * (1 + width)
    if kind == "threshold":
        return lo, hi
    if kind == "ground":
        f = lambda t: float(fy.solve(t)[0].complexity)  # noqa: E731
    else:
        f = lambda t: float(fy.solve(t, replicon=True)[1].within) - 1.0  # noqa: E731
    for _ in range(grow):
        if f(lo) * f(hi) < 0:
            return lo, hi
        lo, hi = lo * (1 - width), hi * (1 + width)
    return None


def locate_rsb_states(model, u0, free, rule: RSBRule, *, y_range=(2.0, 32.0), n_scan: int = 8,
                      config: RSBConfig = RSBConfig(), test_rule: Quadrature | None = None, tie_width: float = 1e-3,
                      xtol: float = 1e-4, replica_errors: bool = True) -> RSBStates:
    """Locate the ground, threshold and marginal 1RSB states of `model` (docs/rsb.md).

    `u0 (n,)`: a start (its `y` is replaced); `free (n,)`: the coordinates solved at fixed `y` (`y` held).
    Fixed-`y` solves on `n_scan` values of `y` geometric in `y_range` (each warm-started from the previous) bracket
    the states: the ground state where `Sigma` changes sign from `+` to `-` (then a solve with `y` free, or
    Brent's root of `Sigma(y)`), the threshold state at the scan's largest `e` (Brent's bounded search of `e(y)`,
    whose maximum is `Sigma`'s), the marginal state where the within-state replicon crosses 1 (Brent's root).
    `xtol`: the searches' tolerance in `log y`. With `replica_errors` each search is repeated on each replica of the
    outer rule alone (`replica_rule`), from the full rule's state, and the replicas' spread gives the 95% errors.
    The within-state replicon is its regular part (`RSBReplicon.within`); where its jump strength `within_jump` is
    positive the replicon diverges and no state is marginal in this sense (the attention model).
    Not jittable (a driver of jitted solves); float64 inside a scoped switch.
    """
    from phasejax.theory.results import t_quantile_975

    y_lo, y_hi = (float(v) for v in y_range)
    if not (0 < y_lo < y_hi and np.isfinite(y_hi)):
        raise ValueError(f"y_range must be (lo, hi) with 0 < lo < hi, got {y_range!r}")
    if isinstance(n_scan, bool) or int(n_scan) != n_scan or n_scan < 3:
        raise ValueError(f"n_scan must be an integer >= 3, got {n_scan!r}")
    if not xtol > 0:
        raise ValueError(f"xtol must be > 0, got {xtol!r}")
    iy = list(model.names).index("y")
    with float64_scope():
        fy = _FixedY(model, free, rule, config, test_rule, float(tie_width), iy)
        fy.seed(np.asarray(u0, np.float64))
        ys = np.geomspace(y_lo, y_hi, int(n_scan))
        scan = [fy.solve(y, replicon=True) for y in ys]
        sig = np.asarray([float(r.complexity) for r, _ in scan])
        e = np.asarray([float(r.energy) for r, _ in scan])
        R1 = np.asarray([float(p.within) for _, p in scan])
        brackets = {}
        k = np.nonzero((sig[:-1] > 0) & (sig[1:] <= 0))[0]
        brackets["ground"] = (ys[k[0]], ys[k[0] + 1]) if k.size else None
        k = int(np.argmax(e))
        brackets["threshold"] = (ys[k - 1], ys[k + 1]) if 0 < k < len(ys) - 1 else None
        k = np.nonzero(np.sign(R1[:-1] - 1.0) != np.sign(R1[1:] - 1.0))[0]
        brackets["marginal"] = (ys[k[0]], ys[k[0] + 1]) if k.size else None
        search = dict(ground=lambda f, lo, hi: _locate_ground(f, lo, hi, xtol),
                      threshold=lambda f, lo, hi: _locate_threshold(f, lo, hi, xtol),
                      marginal=lambda f, lo, hi: _locate_marginal(f, lo, hi, xtol))
        located = {}
        for kind in ("ground", "threshold", "marginal"):
            if brackets[kind] is None:
                located[kind] = _missing_state(Status.INVALID_INPUT)
                continue
            before = fy.count
            res, rep = search[kind](fy, *brackets[kind])
            main = _values(res, rep)
            reps = []
            if replica_errors:
                for r in range(np.asarray(rule.replica_weights).shape[0]):
                    fr = _FixedY(model, free, replica_rule(rule, r), config, test_rule, float(tie_width), iy)
                    fr.seed(np.asarray(res.u))
                    br = _bracket_around(fr, kind, main["y"])
                    if br is not None:
                        reps.append(_values(*search[kind](fr, *br)))
            K = len(reps)
            err = {key: (float(t_quantile_975(K - 1) * np.std([v[key] for v in reps], ddof=1) / np.sqrt(K))
                         if K >= 2 else np.nan) for key in _STATE_KEYS}
            located[kind] = _located(kind, res, rep, main, err, fy, fy.count - before)
        return RSBStates(ground=located["ground"], threshold=located["threshold"], marginal=located["marginal"],
                         scan_y=np.asarray(ys), scan_phi=np.asarray([float(r.phi) for r, _ in scan]), scan_energy=e,
                         scan_complexity=sig, scan_within=R1,
                         scan_status=np.asarray([int(r.status) for r, _ in scan], np.int32))


def _located(kind, res, rep, main, err, fy, count) -> LocatedState:
    if kind == "ground":
        residual = abs(main["complexity"]) / abs(main["energy"])
    elif kind == "threshold":
        y, h = main["y"], 1e-3 * main["y"]
        de = (float(fy.solve(y + h)[0].energy) - float(fy.solve(y - h)[0].energy)) / (2 * h)
        residual = abs(de) * y / abs(main["energy"])
    else:
        residual = abs(main["within"] - 1.0)
    status = int(res.status)
    f = lambda x: np.asarray(x, np.float64)  # noqa: E731
    return LocatedState(y=f(main["y"]), y_err=f(err["y"]), phi=f(main["phi"]), phi_err=f(err["phi"]),
                        energy=f(main["energy"]), energy_err=f(err["energy"]), complexity=f(main["complexity"]),
                        complexity_err=f(err["complexity"]), delta=f(main["delta"]), delta_err=f(err["delta"]),
                        V0=f(main["V0"]), V0_err=f(err["V0"]), within=f(main["within"]), within_err=f(err["within"]),
                        within_jump=f(float(rep.within_jump)), between=f(main["between"]),
                        between_err=f(err["between"]), result=res, replicon=rep, residual=f(residual),
                        iterations=np.asarray(count, np.int32), status=np.asarray(status, np.int32))


def _missing_state(status) -> LocatedState:
    nan = np.asarray(np.nan)
    return LocatedState(**{k: nan for k in ("y", "y_err", "phi", "phi_err", "energy", "energy_err", "complexity",
                                             "complexity_err", "delta", "delta_err", "V0", "V0_err", "within",
                                             "within_err", "within_jump", "between", "between_err", "residual")},
                        result=None, replicon=None, iterations=np.asarray(0, np.int32),
                        status=np.asarray(int(status), np.int32))


@uses_float64
def perceptron_states(alpha, kappa, *, u0=(0.6, 4.0, 2.0), y_range=(2.0, 32.0), n_scan: int = 8,
                      rule: RSBRule | None = None, config: RSBConfig = RSBConfig(), xtol: float = 1e-4,
                      replica_errors: bool = True) -> RSBStates:
    """The ground, threshold and marginal states of the reference model (`PerceptronRSB`) by `locate_rsb_states`;
    `u0 = (sqrt(Delta), V, y)` starts the scan; `rule`: `perceptron_rule()` by default."""
    if not np.all(np.asarray(alpha) > 0):
        raise ValueError(f"alpha must be > 0, got {alpha}")
    if not np.all(np.asarray(kappa) < 0):
        raise ValueError(f"kappa must be < 0 (a negative margin), got {kappa}")
    model = PerceptronRSB(alpha_=jnp.asarray(alpha, jnp.float64), kappa=jnp.asarray(kappa, jnp.float64))
    return locate_rsb_states(model, np.asarray(u0, np.float64), np.asarray([True, True, False]),
                             perceptron_rule() if rule is None else rule, y_range=y_range, n_scan=n_scan,
                             config=config, xtol=xtol, replica_errors=replica_errors)
