"""The state-evolution map `x -> F(x)` that the Newton solver iterates (theory notes, sections 4 and 8.4).

`F` is the energetic update (every quadrature node's proximal problem, `phasejax.theory.updates.node_values`,
averaged into the hats) followed by the entropic one (`overlap_updates`), on the raveled overlaps `x`, with
the branch's held coordinates at zero. `se_map` also returns the unconstrained map `F_open` (no holds) from
the same node evaluation: its Jacobian on the held coordinates is the branch's stability out of its subspace,
so one traced evaluation serves both.

What is solved is an `SEProblem` (a pytree: the parameters, the quadrature scheme, the start and invariant
subspace, the rule's orientation and the `MapApproximation`); how it is solved is the solver's business
(`phasejax.theory.newton`).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import struct
from jax.flatten_util import ravel_pytree

from phasejax.theory.branches import BranchInit
from phasejax.theory.params import TiedAttentionParams
from phasejax.theory.updates import (
    check_tie_width,
    hats_from_nodes,
    hold_hats,
    node_omegas,
    node_values,
    overlap_updates,
)

Array = jax.Array

PSD_TOL = 1e-10
"""Default tolerance of the validity checks (`SEConfig.psd_tol`)."""


@dataclasses.dataclass(frozen=True)
class MapApproximation:
    """How the state-evolution map `F` is computed at each quadrature node: these change the map, and so the
    fixed point (hashable; part of the compilation key). Part of the problem (`SEProblem`).

    Attributes:
      prox_steps: the most damped Newton steps each start of a node's proximal problem takes per evaluation
        (a start stops earlier once its gradient is at rounding level).
      prox_tol: gradient tolerance for a node's prox to count as converged (the solver converges only when
        every node's has).
      prox_starts: `"multi"` (the warm start; near the fixed point also its mirror or the field, alternating;
        the global minimum) or `"zero"` (one local search from `h = 0`, the published method, for comparisons).
      hat_form: `"stein"` (default; integration by parts, keeps the delta terms where the prox's minimiser
        jumps) or `"implicit"` (pointwise implicit derivatives; misses them).
      tie_width: `0` (default): each node keeps its lowest prox minimum. `> 0` (an energy, e.g. `1e-3`): a
        node's minima are blended with weights `softmax(-M_k / tie_width)` (`node_values`), which makes the
        finite rule's map continuous where a node sits at a tie between two basins, so that Newton can
        converge there. The first order in `tie_width` cancels from the Gaussian averages; at `1e-3` the main
        setting's fixed point moves by less than its quadrature errors (theory notes, section 8.5). Stein form only.
    """

    prox_steps: int = 8
    prox_tol: float = 1e-8
    prox_starts: str = "multi"
    hat_form: str = "stein"
    tie_width: float = 0.0

    def __post_init__(self):
        v = self.prox_steps
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise ValueError(f"prox_steps must be a positive integer, got {v!r}")
        if not self.prox_tol > 0:
            raise ValueError(f"prox_tol must be > 0, got {self.prox_tol}")
        if self.prox_starts not in ("multi", "zero"):
            raise ValueError(f"prox_starts must be 'multi' or 'zero', got {self.prox_starts!r}")
        if self.hat_form not in ("stein", "implicit"):
            raise ValueError(f"hat_form must be 'stein' or 'implicit', got {self.hat_form!r}")
        check_tie_width(self.tie_width, self.hat_form)

    @property
    def alternates(self) -> bool:
        """Whether the map tries alternative prox starts only when asked (`alt_mode`): the multi-start selection
        without a tie width (a tie width always tries both; `"zero"` has none)."""
        return self.prox_starts == "multi" and self.tie_width == 0


@struct.dataclass
class SEProblem:
    """The fixed-point problem one Newton solve works on (a pytree; the solver object holds only settings).

    `params`: the model and `alpha`, `omega`; `scheme`: the quadrature scheme; `init`: the start and the
    invariant subspace (`BranchInit`; its holds and gauge define the free coordinates); `frame`: the
    scheme's orientation data (`scheme.frame`) the solve starts with (`None` for a rule without one);
    `approximation`: how the map is computed at the nodes (`MapApproximation`, static).
    """

    params: TiedAttentionParams
    scheme: object
    init: BranchInit
    frame: object = None
    approximation: MapApproximation = struct.field(pytree_node=False, default=MapApproximation())

    def unravel(self):
        """`ravel(Overlaps)`'s inverse for this problem's overlaps."""
        return ravel_pytree(self.init.overlaps)[1]


class MapEvaluation(NamedTuple):
    """`F(x)` and what the free energy and diagnostics need, at one state.

    `Fx (n,)` the map with the branch's holds, `Fx_open (n,)` without them, `hats` (held), `envelope ()`
    `E[M]`, `loss ()` `E[ell(h_hat)]`, `h (N, L r)` node minimisers, `h_starts (N, S, L r)` every start's
    minimiser (`S = 3`: warm, mirror, field; `S = 1` for `prox_starts="zero"`), `prox_grad_norm ()` the largest
    node residual, `prox_unconverged ()` weight fraction of nodes above `prox_tol`, `switched ()` whether an
    alternative start found a lower minimum than the warm start at some node (the node changed basin),
    `rule` the quadrature (`Quadrature`) it was evaluated on.
    """

    Fx: Array
    Fx_open: Array
    hats: object
    envelope: Array
    loss: Array
    h: Array
    h_starts: Array
    prox_grad_norm: Array
    prox_unconverged: Array
    switched: Array
    rule: object


def se_map(problem: SEProblem, x: Array, warm: Array, alt_mode, psd_tol: float = PSD_TOL,
           extra_starts: bool = False, frame=None) -> MapEvaluation:
    """One state-evolution map `x -> F(x)` (energetic then entropic update, held coordinates at 0).

    `x (n,)`: the raveled overlaps; `warm (N, L r)`: the node minimisers to start each prox from;
    `alt_mode` (may be traced): the alternative start the prox tries besides the warm one, `0` its mirror,
    `1` the field `omega`, `-1` none (`extra_starts`: both); `psd_tol`: the validity checks' tolerance;
    `frame`: the rule's orientation (default `problem.frame`)."""
    return evaluate_map(problem, x, warm, alt_mode, psd_tol, extra_starts, frame)[0]


@jax.named_scope("se_map")
def evaluate_map(problem: SEProblem, x: Array, warm: Array, alt_mode, psd_tol: float = PSD_TOL,
                 extra_starts: bool = False, frame=None, copy=None, given_starts=None, field_warm=False):
    """`se_map` on copy `copy` of the rule (`None` or `0`: the main rule; may be traced: the scheme's
    `copy_rule`), with `given_starts` and `field_warm` as in `phasejax.theory.updates.node_values`:
    `(MapEvaluation, NodeValues, the copy's weights (N,))`."""
    params, hold_m, hold_theta = problem.params, problem.init.hold_m, problem.init.hold_theta
    approx = problem.approximation
    ov = problem.unravel()(x)
    frame = problem.frame if frame is None else frame
    rule = problem.scheme.main(ov, params, frame) if copy is None else problem.scheme.copy_rule(ov, params, frame,
                                                                                                  copy)
    nodes = node_values(ov, params, rule.points, warm, alt_mode, n_steps=approx.prox_steps,
                        psd_tol=psd_tol, prox_tol=approx.prox_tol, extra_starts=extra_starts,
                        prox_starts=approx.prox_starts, hat_form=approx.hat_form,
                        tie_width=approx.tie_width, given_starts=given_starts, field_warm=field_warm,
                        encodings=rule.encodings)
    hats_open = hats_from_nodes(ov, params, nodes, rule.weights, hat_form=approx.hat_form)
    hats = hold_hats(hats_open, hold_m, hold_theta)
    new = overlap_updates(hats, params)
    new = new.replace(m=jnp.where(hold_m, 0.0, new.m), theta0=jnp.where(hold_theta, 0.0, new.theta0))
    E = lambda v: jnp.tensordot(rule.weights, v, axes=1)  # noqa: E731
    unconverged = E((nodes.grad_norm > approx.prox_tol).astype(x.dtype))
    ev = MapEvaluation(Fx=ravel_pytree(new)[0], Fx_open=ravel_pytree(overlap_updates(hats_open, params))[0],
                       hats=hats, envelope=E(nodes.envelope), loss=E(nodes.loss), h=nodes.h,
                       h_starts=nodes.h_starts, prox_grad_norm=jnp.max(nodes.grad_norm),
                       prox_unconverged=unconverged,
                       switched=jnp.asarray(False) if nodes.start is None else jnp.any(nodes.start > 0),
                       rule=jax.lax.stop_gradient(rule))
    return ev, nodes, rule.weights


def initial_warm(params: TiedAttentionParams, scheme, ov, frame=None) -> Array:
    """Node warm starts for a first evaluation: every node's field `omega`, shape `(N, L r)`."""
    rule = scheme.main(ov, params, frame)
    return node_omegas(ov, params, rule.points, rule.encodings).reshape(rule.points.shape[0], -1)


def state_evolution_map(params: TiedAttentionParams, overlaps, quadrature, *, rounds: int = 1, warm=None,
                        approximation: MapApproximation = MapApproximation(), psd_tol: float = PSD_TOL):
    """The state-evolution map at `overlaps` on a fixed rule, nothing held: `(new Overlaps, MapEvaluation)`.

    `quadrature`: a `Quadrature` (its nodes may carry their own encodings, `Quadrature.encodings`: a label
    mixture, whose `Mhat` is then the label average of `C_cfg^T mhat_cfg`). Every node's prox starts from
    `warm (N, L r)` (default: its field `omega`) and is solved `rounds` times from all three starts (the last
    minimiser, its mirror and the field), so that each node ends in its global minimum. The map itself is
    `evaluate_map`'s (differentiable in `overlaps` and `params`: `jax.jacfwd` of it is the map's Jacobian).
    Computes in the dtype of `overlaps` (float64 inside `phasejax.float64_scope`)."""
    from phasejax.theory.quadrature import FixedRule

    if int(rounds) != rounds or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got rounds={rounds!r}")
    scheme = FixedRule(quadrature)
    false = jnp.asarray(False)
    problem = SEProblem(params, scheme, BranchInit(overlaps=overlaps, hold_m=false, hold_theta=false), None,
                        approximation)
    x = ravel_pytree(overlaps)[0]
    warm = initial_warm(params, scheme, overlaps) if warm is None else warm
    for _ in range(int(rounds)):
        ev = evaluate_map(problem, x, jax.lax.stop_gradient(warm), -1, psd_tol, extra_starts=True)[0]
        warm = ev.h
    return problem.unravel()(ev.Fx), ev
