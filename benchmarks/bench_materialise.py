"""Images per second one core stores, as a range job of a dataset on disk does it
(``imagenot.acquire.materialise``): decode a photo-sized JPEG, resize it to the stored side
(``center_crop``), encode it at the schema's JPEG quality (``imagenot.acquire.images.
validate_image``). ``imagenot plan`` reads the result as the materialisation's rate
(``imagenot.plan.data_stages.MATERIALISE_IMAGES_PER_S``).

The photos: smooth scenes with noise at ILSVRC-2012's mean size, 469 x 387 px (landscape and
portrait), encoded at quality 90. One thread; best of ``--repeat`` passes; per stored side.

    .venv/bin/python benchmarks/bench_materialise.py --json [--images 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import json
import time

import numpy as np
from PIL import Image

from imagenot.acquire import images
from imagenot.core.config import schema_default


def photos(n: int, seed: int = 0) -> list[bytes]:
    """``n`` JPEGs of ILSVRC-2012's mean size: a smooth colour field with noise."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        w, h = (469, 387) if i % 2 == 0 else (387, 469)
        x = np.mgrid[0:h, 0:w][1]
        base = np.stack([np.sin(x / rng.uniform(20, 80) + c) for c in range(3)], axis=-1)
        pixels = (127 + 80 * base + rng.normal(0, 12, (h, w, 3))).clip(0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sides", type=int, nargs="+", default=[224, 256, 480])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data = photos(args.images)
    quality = schema_default("acquire.jpeg_quality")
    rates = {}
    for side in args.sides:
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            for blob in data:
                images.validate_image(
                    blob,
                    size=side,
                    resize_mode="center_crop",
                    max_pixels=images.ON_DISK_MAX_PIXELS,
                    min_size=0,
                    quality=quality,
                )
            best = min(best, time.perf_counter() - start)
        rates[side] = round(len(data) / best, 1)
    result = {"images": len(data), "jpeg_quality": quality, "images_per_s_per_core": rates}
    print(
        json.dumps(result)
        if args.json
        else "\n".join(f"{s} px: {r} images/s" for s, r in rates.items())
    )


if __name__ == "__main__":
    main()
