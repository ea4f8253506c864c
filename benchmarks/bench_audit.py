"""The near-duplicate audit's search (imagenot.audit.search.nearest: exact FAISS inner-product
search, queries in blocks) on this machine's CPU, and its memory; extrapolated to the paper.

    python benchmarks/bench_audit.py --json [--queries 10000 --targets 100000 --dim 512]

Measures random unit vectors (exact search does the same work whatever the values):
``--queries`` x ``--targets`` at ``--dim`` dimensions, ``--block-size`` queries at a time, on the
threads FAISS uses (all cores unless OMP_NUM_THREADS says otherwise). Prints the wall and CPU time, the
rate in similarity computations (query-target pairs) per CPU-second, the process's peak resident
memory and the index's own size; then the paper's audit at that rate, an **extrapolation** (labelled so):
1 M ImageNot images against 1.28 M + 50,000 ImageNet and 10,000 CIFAR-10 images, and ImageNot's
training split against its own validation and test splits, at ``--paper-dim`` dimensions (CLIP
ViT-L/14's 768). Exact search's work is linear in each of queries, targets and dimensions, so
the rate carries over: core-hours, which more cores (or a GPU with faiss-gpu) divide.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from imagenot.audit import search

# The paper's sets (docs/audit.md): ImageNot's splits against every target set of its audit.
PAPER_QUERIES = 1_000_000
PAPER_TARGETS = 1_281_167 + 50_000 + 10_000  # ImageNet train + val (its test), CIFAR-10 test
PAPER_OWN_PAIRS = 950_000 * 50_000  # ImageNot train against its val and test (about 50,000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--targets", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--block-size", type=int, default=8192)
    parser.add_argument("--paper-dim", type=int, default=768)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    targets = search.normalise(rng.standard_normal((args.targets, args.dim), dtype=np.float32))
    queries = search.normalise(rng.standard_normal((args.queries, args.dim), dtype=np.float32))
    t0, c0 = time.perf_counter(), time.process_time()
    search.nearest(queries, targets, args.block_size, use_gpu=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    pairs = args.queries * args.targets
    # CPU time: on a shared machine the load inflates wall time far more than CPU time
    rate = pairs / cpu
    paper_pairs = PAPER_QUERIES * PAPER_TARGETS + PAPER_OWN_PAIRS
    paper_s = paper_pairs / rate * args.paper_dim / args.dim
    result = {
        "queries": args.queries,
        "targets": args.targets,
        "dim": args.dim,
        "search_s": round(wall, 2),
        "search_cpu_s": round(cpu, 2),
        "pairs_per_cpu_s": round(rate),
        "index_mb": round(targets.nbytes / 2**20, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "extrapolated_paper_core_hours": round(paper_s / 3600, 1),
        "extrapolated_paper_largest_index_gb": round(1_281_167 * args.paper_dim * 4 / 1e9, 2),
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
