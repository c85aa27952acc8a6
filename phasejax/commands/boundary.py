"""The phase boundary solved directly: alpha_c(omega), alpha_l(omega) and the spinodals as curves.

    phasejax boundary                                   # 51 omegas in [0, 0.5], into runs/boundary
    phasejax boundary --n-omega 101 --omega-max 0.6 --out runs/fine
    phasejax boundary --host-devices 2                  # two segments of omegas side by side on two CPU cores

Each line is a root in alpha, corrected by Newton with the implicit derivatives of the fixed points and continued
along omega from a coarse scan at the first omega of each segment (docs/boundary.md). Writes to --out (default
runs/boundary): boundary.csv (per omega: alpha_c, alpha_l and the spinodals with 95% errors and statuses, whether
replica symmetry is stable at alpha_c), boundary.json (the configuration, what the errors cover) and boundary.png.
A killed run resumes from --run-dir (a chunk is one segment per device). The command exits 1 when alpha_c is unresolved or a
branch was lost at some omega.
"""

from __future__ import annotations

import dataclasses
import os
import time

from phasejax.commands import flags
from phasejax.commands.argtypes import UsageError, grid_range, positive_float, positive_int, run_options_from, unit_interval

NAME = "boundary"
HELP = "the lines alpha_c(omega), alpha_l(omega) and the spinodals solved directly, with errors"


def add_arguments(ap) -> None:
    flags.add_range(ap, "omega", 0.0, 0.5, 51, kind=unit_interval)
    ap.add_argument("--alpha-min", type=positive_float, default=0.3, help="smallest alpha a root is searched at")
    ap.add_argument("--alpha-max", type=positive_float, default=3.0, help="largest alpha a root is searched at")
    flags.add_model(ap, A=True)
    ap.add_argument("--segments", type=positive_int, default=None,
                    help="segments of omegas, each continued from its own coarse scan (default: one per device)")
    flags.add_sweep(ap, NAME, chunk_size=1)


def boundary_settings(args):
    """`BoundaryConfig` from the flags (`UsageError` naming them when the alpha range is empty)."""
    from phasejax.phase.boundary import BoundaryConfig

    if not args.alpha_min < args.alpha_max:
        raise UsageError(f"--alpha-min must be below --alpha-max, got {args.alpha_min:g} and {args.alpha_max:g}")
    return BoundaryConfig(alpha_min=args.alpha_min, alpha_max=args.alpha_max)


def report(boundary) -> str | None:
    """The lines as a table on stdout; the problem `flags.finish` reports (alpha_c unresolved or a branch lost
    somewhere), or `None`."""
    import numpy as np

    ln = boundary.lines
    for i, om in enumerate(ln["omega"]):
        print(f"omega={om:.3f}  alpha_c={ln['alpha_c'][i]:.4f} +- {ln['alpha_c_err'][i]:.4f} ({ln['alpha_c_status'][i]})"
              f"  alpha_l={ln['alpha_l'][i]:.4f} +- {ln['alpha_l_err'][i]:.4f} ({ln['alpha_l_status'][i]})"
              f"  spinodal_positional={ln['spinodal_positional'][i]:.4f}")
    bad = np.isin(np.asarray(ln["alpha_c_status"]), ("max_iterations", "invalid_iterate", "branch_lost"))
    if np.any(bad):
        where = ", ".join(f"{w:g}" for w in np.asarray(ln["omega"])[bad][:8])
        return f"alpha_c is unresolved or a branch was lost at omega = {where}{' ...' if bad.sum() > 8 else ''}"
    return None


def run(args) -> int:
    import numpy as np

    from phasejax.phase.boundary import phase_boundary
    from phasejax.plotting import plot_boundary
    from phasejax.theory import make_params

    omegas = grid_range(args, "omega", args.n_omega, digits=None)
    config = boundary_settings(args)
    if args.segments is not None and args.segments > len(omegas):
        raise UsageError(f"--segments must be at most --n-omega ({len(omegas)}), got {args.segments}")
    params = make_params(1.0, 0.0, sigma=args.sigma, lam=args.lam, A=np.reshape(args.A, (2, 2)))
    options = run_options_from(args, args.out)
    t0 = time.perf_counter()
    boundary = phase_boundary(params, omegas, config=config, segments=args.segments, options=options)
    if boundary is None:
        return flags.not_finished(options)
    elapsed = time.perf_counter() - t0
    paths = dataclasses.replace(boundary, **flags.provenance()).write(args.out)
    paths.append(plot_boundary(boundary, os.path.join(args.out, "boundary.png")))
    problem = report(boundary)
    print(f"{len(omegas)} omegas in {elapsed:.1f} s")
    flags.print_paths(paths)
    return flags.finish(NAME, problem)
