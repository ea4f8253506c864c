"""CPU time of one TL head-fitting epoch over stored features (docs/gpu.md, "Transfer learning").

The paper's TL head is a linear layer over D backbone features; ``train_head_trial`` fits it on
the CPU. This times the arithmetic of one epoch as the loop does it (seeded order, batches of
``--batch-size``, cross-entropy, Adam step) plus one validation pass, best of ``--repeat``, for
each width in ``--dims`` (defaults: VGG-19's 4,096 and ConvNeXt-L's 1,536 over CIFAR-10's
45,000 training and 5,000 validation images). The loop's own per-step overhead and the
checkpoint are not included (docs/gpu.md, "Overhead of the job on the CPU").

    .venv/bin/python benchmarks/bench_head.py --json [--threads 1] [--dims 4096 1536]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F


def epoch_seconds(dim: int, n: int, n_val: int, classes: int, batch: int, repeat: int) -> float:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, dim, generator=generator)
    y = torch.randint(0, classes, (n,), generator=generator)
    val = torch.randn(n_val, dim, generator=generator)
    head = torch.nn.Linear(dim, classes)
    optimizer = torch.optim.Adam(head.parameters(), lr=1e-3)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for idx in torch.randperm(n, generator=generator).split(batch):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(head(x[idx]), y[idx], reduction="sum").backward()
            optimizer.step()
        with torch.no_grad():
            for part in val.split(batch):
                head(part).argmax(1)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dims", type=int, nargs="+", default=[4096, 1536])
    parser.add_argument("--images", type=int, default=45_000)
    parser.add_argument("--val-images", type=int, default=5_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = [
        {
            "dim": dim,
            "images": args.images,
            "classes": args.classes,
            "batch_size": args.batch_size,
            "threads": args.threads,
            "epoch_s": round(
                epoch_seconds(
                    dim, args.images, args.val_images, args.classes, args.batch_size, args.repeat
                ),
                3,
            ),
        }
        for dim in args.dims
    ]
    if args.json:
        print(json.dumps(rows))
    else:
        for row in rows:
            print(f"D={row['dim']}: {row['epoch_s']} s per epoch + validation")


if __name__ == "__main__":
    main()
