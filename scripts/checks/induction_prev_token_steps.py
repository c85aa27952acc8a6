"""How the first layer's previous-token attention of the 2-layer induction model grows with training length.

Trains the disentangled 2-layer model at S = 3, T = 64, beta = 1 (2 seeds) for a given number of Adam steps,
learning rate and batch size (chains per step), and prints the mean mass `A_1[t, t-1]` and the gap to the
Bayes predictive:

    python scripts/checks/induction_prev_token_steps.py 6000               # 0.877, 0.877 (2 seeds)
    python scripts/checks/induction_prev_token_steps.py 3000 0.1           # 0.698, 0.703 (a larger step is worse)
    python scripts/checks/induction_prev_token_steps.py 1500 0.03 128      # 0.907, 0.909; gap 0.0012, 0.0010 nats
"""

import sys
import time

import numpy as np

from phasejax.sweep import RunOptions
from phasejax.tasks.induction import InductionGrid, InductionModel, InductionTraining, induction_sweep


def main(steps: int, learning_rate: float = 0.03, batch_size: int = 32) -> None:
    start = time.time()
    grid = InductionGrid(models=(InductionModel(layers=2),), Ss=(3,), Ts=(64,), seeds=(0, 1))
    training = InductionTraining(steps=steps, learning_rate=learning_rate, batch_size=batch_size)
    result = induction_sweep(grid, training, reference_sequences=0, options=RunOptions(progress=False))
    runs = result.runs
    print(f"steps={steps} learning_rate={learning_rate} batch_size={batch_size}")
    for key in ("prev_token_attention_1", "gap_to_bayes", "gap_to_bayes_se"):
        print(key, np.round(np.asarray(runs[key], float), 4).tolist())
    print(f"{time.time() - start:.0f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 0.03,
         int(sys.argv[3]) if len(sys.argv) > 3 else 32)
