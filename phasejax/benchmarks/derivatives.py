"""Benchmark figures of the solve as a JAX function: a gradient against its solve (`gradient`) and a `jax.vmap` of
solves against a loop of the same solves (`vmapped_batch`)."""

from __future__ import annotations

import numpy as np

from phasejax.benchmarks.record import figure_entry, rule_name, status_counts, timed


def gradient(*, quadrature=None, alpha: float = 1.5, omega: float = 0.3) -> dict:
    """`jax.jit(jax.value_and_grad(training loss))` in `(alpha, omega, lam)` against `jax.jit(solve)` at one point,
    both branches, each timed on its second call (compiled) and on its first (compilation included); the lowered
    programs' sizes. The gradient is one solve and the implicit derivative (`phasejax.theory.adjoint`)."""
    import jax
    import jax.numpy as jnp

    from phasejax.precision import float64_scope
    from phasejax.theory import make_params, solve_state_evolution

    out = {}
    with float64_scope():
        for branch in ("positional", "semantic"):
            def loss(v, b=branch):
                return solve_state_evolution(make_params(v[0], v[1], lam=v[2]), b, quadrature).train_loss

            v0 = jnp.asarray([alpha, omega, 0.01])
            solve, grad = jax.jit(loss), jax.jit(jax.value_and_grad(loss))
            _, s_first, s_compile = timed(solve, v0)
            value, s_second, _ = timed(solve, v0 + 1e-9)
            _, g_first, g_compile = timed(grad, v0)
            (_, g), g_second, _ = timed(grad, v0 + 1e-9)
            out[branch] = dict(solve_seconds=s_second, gradient_seconds=g_second, ratio=g_second / s_second,
                               solve_first_call=s_first, gradient_first_call=g_first, ratio_first_call=g_first / s_first,
                               solve_compile_seconds=s_compile, gradient_compile_seconds=g_compile,
                               solve_hlo_chars=len(solve.lower(v0).as_text()), gradient_hlo_chars=len(grad.lower(v0).as_text()),
                               gradient=np.asarray(g).tolist(), train_loss=float(value))
    worst = max(o["ratio"] for o in out.values())
    return figure_entry(
        "gradient",
        f"jax.value_and_grad of the training loss in (alpha, omega, lambda) at alpha = {alpha:g}, omega = {omega:g}, "
        f"against the solve, both branches, {rule_name(quadrature)}, each jitted and timed on its second call; "
        "ratio: gradient over solve (the worse branch's is the figure)",
        seconds=sum(o["gradient_seconds"] for o in out.values()), points=2, compilation_included=False,
        statuses={}, ratio=worst, branches=out, quadrature=rule_name(quadrature))


def vmapped_batch(*, quadrature=None, alphas=(1.2, 1.5, 1.8, 2.1), omega: float = 0.3,
                  branch: str = "semantic") -> dict:
    """`jax.jit(jax.vmap(solve))` over `alphas` against a Python loop of the same jitted solve, both timed after
    compilation: a vmapped solve maps its points one after the other on a CPU and side by side on an accelerator
    (`phasejax.theory.continuation`), so it costs no more than the loop."""
    import jax
    import jax.numpy as jnp

    from phasejax.precision import float64_scope
    from phasejax.theory import make_params, solve_state_evolution

    with float64_scope():
        def solve(a):
            return solve_state_evolution(make_params(a, omega), branch, quadrature)

        a = jnp.asarray(alphas)
        batched, one = jax.jit(jax.vmap(solve)), jax.jit(solve)
        timed(batched, a)
        [timed(one, x) for x in a]
        res, seconds, _ = timed(batched, a + 1e-9)
        loop = sum(timed(one, x + 1e-9)[1] for x in a)
    return figure_entry(
        "vmapped_batch",
        f"jax.jit(jax.vmap(solve_state_evolution)) over {len(alphas)} alphas at omega = {omega:g} ({branch}), "
        f"{rule_name(quadrature)}, against a loop of the jitted single solve, both after compilation; ratio: batch "
        "over loop",
        seconds=seconds, points=len(alphas), compilation_included=False, statuses=status_counts(res.status),
        loop_seconds=loop, ratio=seconds / loop, quadrature=rule_name(quadrature))
