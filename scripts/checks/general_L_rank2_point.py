"""State evolution at one point of the L = 3 problem for a rank-1 and a rank-2 tied student, and rank-2
students trained there.

    python scripts/checks/general_L_rank2_point.py --alpha 2.1 --log2-n 10 --inits semantic mixed \
        --students 200 400 800 --out results/extensions/general_L/rank2_point.jsonl
    python scripts/checks/general_L_rank2_point.py --alpha 2.1 --log2-n 10 --inits semantic mixed \
        --students 200 400 800 --tie-width 1e-3 --out results/extensions/general_L/rank2_point_tie.jsonl

Rank 1: the library's branch init; rank 2: `phasejax.extensions.rank2.rank2_init` (rotation gauge fixed),
Sobol rule in `L (r + 1)` dimensions with 4 replicas (95% errors). With `--students`, rank-2 tied students
(`phasejax.extensions.rank2.train_rank2`: L-BFGS from the three inits, `--seeds` seeds) are trained at each
size; one line per size and init gives their seed means and standard errors. Then one more rank-2 solve
(`init` `mixed_from_students`) starts from the mixed-init students' overlaps at the largest size, each seed's
`Q` rotated to the eigenbasis of its `Q^T Q` (the mixed gauge: orthogonal columns), signs fixed so that each
column's larger overlap is positive, then averaged. One JSON line per solve or group of students.
"""

import argparse
import os
import time

import jax.numpy as jnp
import numpy as np

from phasejax.extensions.general_L import general_L_params
from phasejax.extensions.rank2 import EXTENSION_SE_CONFIG, invariant_columns, rank2_init, train_rank2
from phasejax.io import atomic_write_text, json_line
from phasejax.precision import float64_scope
from phasejax.sweep import RunOptions
from phasejax.theory import MapApproximation, solve_state_evolution
from phasejax.theory.quadrature import SobolRule

STUDENT_KEYS = ("q", "m", "theta", "q_eig1", "q_eig2", "train_loss", "test_error")


def _solve_line(p, init, name: str, rule, log2_n: int, alpha: float, omega: float, tie_width: float = 0.0) -> dict:
    t = time.time()
    res = solve_state_evolution(p, init, rule, EXTENSION_SE_CONFIG, MapApproximation(tie_width=tie_width))
    out = dict(r=p.r, alpha=alpha, omega=omega, init=name, tie_width=tie_width, status=res.status_name,
               iterations=int(res.iterations), train_loss=float(res.train_loss),
               train_loss_err=float(res.errors.train_loss), test_error=float(res.test_error),
               test_error_err=float(res.errors.test_error), seconds=time.time() - t,
               rule=f"Sobol 4 x 2^{log2_n} in {p.L * (p.r + 1)} dims")
    if p.r == 2:
        out.update({k: float(np.asarray(v)) for k, v in
                    invariant_columns(res.overlaps, p.sigma, res.errors.overlaps).items() if np.size(v) == 1})
    else:
        out.update(q=float(jnp.ravel(res.q)[0]), m=float(jnp.ravel(res.m)[0]), theta=float(jnp.ravel(res.theta)[0]))
    return out


def students_overlaps(runs: dict, s2: float):
    """Seed-mean overlaps `(q0 (2, 2), m (1, 2), theta0 (1, 2))` in the SE's units of rank-2 students, each
    rotated to the eigenbasis of its `q0` (largest first) with each column's sign making its larger overlap
    positive. `runs`: the per-token `q0_0, q0_1, q0_3, theta0_0, theta0_1` and `m0_0, m0_1` columns."""
    q0s, ms, ths = [], [], []
    for i in range(len(runs["seed"])):
        q = np.array([[runs["q0_0"][i], runs["q0_1"][i]], [runs["q0_1"][i], runs["q0_3"][i]]]) / s2
        w, U = np.linalg.eigh(q)
        w, U = w[::-1], U[:, ::-1]
        m = np.array([runs["m0_0"][i], runs["m0_1"][i]]) @ U
        th = np.array([runs["theta0_0"][i], runs["theta0_1"][i]]) / s2 @ U
        sign = np.sign(np.where(np.abs(th) > np.abs(m), th, m))
        q0s.append(np.diag(w))
        ms.append(m * sign)
        ths.append(th * sign)
    return np.mean(q0s, 0), np.mean(ms, 0)[None, :], np.mean(ths, 0)[None, :]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--alpha", type=float, default=2.1)
    ap.add_argument("--omega", type=float, default=0.3)
    ap.add_argument("--log2-n", type=int, default=10, help="Sobol points per replica: 2^log2_n")
    ap.add_argument("--inits", nargs="+", default=["semantic", "mixed"], choices=["positional", "semantic", "mixed"])
    ap.add_argument("--students", type=int, nargs="*", default=[], help="sizes d of rank-2 students to train")
    ap.add_argument("--seeds", type=int, default=4, help="seeds per size and init")
    ap.add_argument("--tie-width", type=float, default=0.0,
                    help="MapApproximation.tie_width of every solve (0: each node's lowest prox minimum)")
    ap.add_argument("--out", default=os.path.join("runs", "general_L_rank2_point.jsonl"), help="output file")
    ap.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    args = ap.parse_args()
    from phasejax.commands.argtypes import UsageError, guard_output_file

    try:
        guard_output_file(args.out, args.overwrite)       # before any compute
    except UsageError as e:
        ap.error(str(e))
    lines = []

    def emit(out: dict) -> None:
        line = json_line(out)          # strict JSON: NaN and inf as null
        print(line, flush=True)
        lines.append(line)

    with float64_scope():
        for r in (1, 2):
            p = general_L_params(args.alpha, args.omega, r=r)
            rule = SobolRule.create(p.L * (r + 1), args.log2_n, 4)
            for name in args.inits:
                if r == 1 and name == "mixed":
                    continue
                emit(_solve_line(p, rank2_init(name, p) if r == 2 else name, name, rule, args.log2_n,
                                 args.alpha, args.omega, args.tie_width))
    if args.students:
        p32 = general_L_params(args.alpha, args.omega, r=2)
        mixed = None
        for d in sorted(args.students):
            t = time.time()
            runs = train_rank2((args.alpha,), (args.omega,), tuple(range(args.seeds)), d=d, params=p32,
                               options=RunOptions(progress=False))
            for name in ("positional", "semantic", "mixed"):
                s = runs["init"] == name
                out = dict(students=True, r=2, d=d, alpha=args.alpha, omega=args.omega, init=name,
                           n_seeds=int(s.sum()), converged=int(np.sum(runs["status"][s] == "converged")))
                for k in STUDENT_KEYS:
                    v = np.asarray(runs[k], float)[s]
                    out[k], out[k + "_sem"] = float(v.mean()), float(v.std(ddof=1) / np.sqrt(v.size))
                out["seconds"] = time.time() - t
                emit(out)
            mixed = {k: np.asarray(v)[runs["init"] == "mixed"] for k, v in runs.items()}
        with float64_scope():
            p = general_L_params(args.alpha, args.omega, r=2)
            q0, m, th = students_overlaps(mixed, float(p.sigma[0]) ** 2)
            base = rank2_init("mixed", p)
            init = base._replace(overlaps=base.overlaps.replace(q0=jnp.asarray(q0), m=jnp.asarray(m),
                                                                theta0=jnp.asarray(th)))
            rule = SobolRule.create(p.L * 3, args.log2_n, 4)
            emit(_solve_line(p, init, "mixed_from_students", rule, args.log2_n, args.alpha, args.omega,
                             args.tie_width))
    atomic_write_text(args.out, "\n".join(lines) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
