"""Read the published counting phase diagrams (Behrens, Biggio & Zdeborova 2024, Figs. 1-2) off their figure files.

    python scripts/read_counting_figures.py BEST.png MEAN.png [--out results/counting/published_maps.csv]

BEST.png and MEAN.png are `figures/memorizing_counts-phase-diagram-T32-best.png` and `-avg.png` of the authors'
repository `counting-attention`. Writes one row per configuration and drawn cell (`d, p` in 1..91): the best-of-5
and mean-of-5 accuracy read off the colours (`phasejax.tasks.histogram.published.read_published_map`).
"""

import argparse
import os

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("best")
    ap.add_argument("mean")
    ap.add_argument("--out", default=os.path.join("results", "counting", "published_maps.csv"))
    args = ap.parse_args()
    from PIL import Image

    from phasejax.io import write_csv
    from phasejax.tasks.histogram.published import PAPER_SIZES, PUBLISHED_COLUMNS, read_published_map

    maps = {k: read_published_map(np.asarray(Image.open(path).convert("RGB"))) for k, path in
            (("best", args.best), ("mean", args.mean))}
    rows = {k: [] for k in PUBLISHED_COLUMNS}
    for name in maps["best"]:
        for j, d in enumerate(PAPER_SIZES[:-1]):
            for i, p in enumerate(PAPER_SIZES[:-1]):
                for k, v in zip(PUBLISHED_COLUMNS, (name, d, p, maps["best"][name][j, i], maps["mean"][name][j, i])):
                    rows[k].append(v)
    print("wrote", write_csv(args.out, rows))


if __name__ == "__main__":
    main()
