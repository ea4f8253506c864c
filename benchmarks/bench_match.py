"""Benchmark step 1 (lemma matching): end-to-end captions per second per core.

Generates a shard of >= 1M captions (real web captions from ../shared/data when present, each
with one random WordNet noun lemma appended so every caption has matches), then times
read + match all ~117k noun lemmas + write, in one process and in two processes (fork, one
half-shard each). The LAIONet-style baseline (`' ' + lemma + ' ' in caption` over the same
lemma keys) is timed on a sample in the same run.

    python benchmarks/bench_match.py --json [--rows 1000000] [--nltk-data DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
WEB = REPO.parent / "shared" / "data" / "web_captions_1000.parquet"


def make_shard(path: Path, rows: int, lemma_keys: list[str], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    if WEB.exists():
        base = pq.read_table(WEB, columns=["TEXT"]).column("TEXT").combine_chunks()
    else:
        base = pa.array([" ".join(rng.choice(lemma_keys, 6)) for _ in range(1000)])
    texts = base.take(pa.array(rng.integers(0, len(base), rows)))
    extra = pa.array(lemma_keys).take(pa.array(rng.integers(0, len(lemma_keys), rows)))
    text = pc.binary_join_element_wise(texts, extra, " ")
    urls = pc.binary_join_element_wise(
        "http://example.invalid/", pc.cast(pa.array(np.arange(rows)), pa.string()), ""
    )
    pq.write_table(pa.table({"URL": urls, "TEXT": text}), path, compression="zstd")


def run_match(matcher, shard: Path, out: Path) -> float:
    from imagenot.curate.match import match_shard
    from imagenot.io import write_parquet

    start = time.perf_counter()
    table, _ = match_shard(shard, matcher, progress=False)
    write_parquet(table, out)
    return time.perf_counter() - start


_MATCHER = None


def _child(args: tuple[str, str]) -> float:
    return run_match(_MATCHER, Path(args[0]), Path(args[1]))


def substring_baseline(captions: list[str], keys: list[str]) -> float:
    """Seconds per caption of LAIONet's per-lemma substring loop over the same keys."""
    padded = [f" {k} " for k in keys]
    start = time.perf_counter()
    for caption in captions:
        text = f" {caption} "
        _ = [k for k in padded if k in text]
    return (time.perf_counter() - start) / len(captions)


def main() -> None:
    global _MATCHER
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--baseline-sample", type=int, default=200)
    parser.add_argument("--nltk-data", default=str(REPO / "results" / "wordnet" / "nltk_data"))
    args = parser.parse_args()
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)

    from imagenot.curate.match import LemmaIndex, Matcher, normalise

    t0 = time.perf_counter()
    index = LemmaIndex.from_wordnet(args.nltk_data)
    matcher = Matcher(index)
    build_s = time.perf_counter() - t0
    _MATCHER = matcher

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shard = tmp / "shard.parquet"
        make_shard(shard, args.rows, index.keys)
        one_s = run_match(matcher, shard, tmp / "out.parquet")
        matches = pq.read_metadata(tmp / "out.parquet").num_rows

        table = pq.read_table(shard)
        half = args.rows // 2
        halves = []
        for i, part in enumerate([table.slice(0, half), table.slice(half)]):
            pq.write_table(part, tmp / f"half{i}.parquet", compression="zstd")
            halves.append((str(tmp / f"half{i}.parquet"), str(tmp / f"half{i}.out.parquet")))
        ctx = mp.get_context("fork")
        start = time.perf_counter()
        with ctx.Pool(2) as pool:
            pool.map(_child, halves)
        two_s = time.perf_counter() - start

        sample = normalise(table.column("TEXT").slice(0, args.baseline_sample)).to_pylist()
    baseline_per_caption = substring_baseline(sample, index.keys)
    ours_per_caption = one_s / args.rows
    result = {
        "rows": args.rows,
        "lemma_keys": len(index.keys),
        "synsets": len(index.wnids),
        "matches": matches,
        "index_build_s": round(build_s, 2),
        "one_process_s": round(one_s, 2),
        "captions_per_s_per_core": round(args.rows / one_s),
        "two_processes_s": round(two_s, 2),
        "two_process_speedup": round(one_s / two_s, 2),
        "baseline_sample": args.baseline_sample,
        "baseline_captions_per_s": round(1 / baseline_per_caption, 1),
        "speedup_vs_substring_baseline": round(baseline_per_caption / ours_per_caption),
        "cpu_count": os.cpu_count(),
        "load_average": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
