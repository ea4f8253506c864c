"""Diagnostics timings: WordNet statistics of two 1000-class lists, image similarity from
synthetic embeddings (100 images x 1000 classes).

    python benchmarks/bench_diagnostics.py --nltk-data results/wordnet/nltk_data --json

Run on one core with ``taskset -c 0``. WordNet is loaded once, outside the timed part.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from imagenot.core import class_list as cl
from imagenot.core.wordnet import imagenet_wnids, load_wordnet
from imagenot.diagnostics import image_similarity as sim
from imagenot.diagnostics import wordnet_stats as ws

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LIST = REPO / "resources" / "class_lists" / "imagenot_classes_2024-05-25.txt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nltk-data", default="results/wordnet/nltk_data")
    parser.add_argument("--classes", default=str(DEFAULT_LIST))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    t0 = time.perf_counter()
    wn = load_wordnet(args.nltk_data)
    imagenet = [cl.ClassEntry(w, i) for i, w in enumerate(imagenet_wnids(), start=1)]
    setup = time.perf_counter() - t0

    t0 = time.perf_counter()
    classes = ws.resolve_classes(wn, cl.read_class_entries(args.classes), args.classes)
    reference = ws.resolve_classes(wn, imagenet, "ImageNet")
    ws.compare(classes, reference)
    stats = time.perf_counter() - t0
    t0 = time.perf_counter()
    ws.per_class_table(classes, reference)
    per_class = time.perf_counter() - t0

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(1000), 100)
    x = rng.standard_normal((labels.size, 512)).astype(np.float32)
    t0 = time.perf_counter()
    sim.summarise(sim.class_similarity(x, labels, 1000))
    similarity = time.perf_counter() - t0

    result = {
        "wordnet_load_s": round(setup, 2),
        "wordnet_stats_two_lists_s": round(stats, 2),
        "wordnet_per_class_table_s": round(per_class, 2),
        "image_similarity_100k_x_512_s": round(similarity, 2),
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
