"""`imagenot` subcommands of the demo stage."""

from __future__ import annotations

import argparse
import logging

from imagenot.cli import subcommand
from imagenot.demo.files import WorldFiles
from imagenot.files import flag

log = logging.getLogger("imagenot.demo")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands."""
    p = subcommand(subparsers, "demo-world", _demo_world, files=WorldFiles)
    p.add_argument("--out", required=True, help="output directory (e.g. results/demo_world)")
    p.add_argument(
        "--settings",
        default="{}",
        help="the demo_world config section as JSON (imagenot.demo.settings.DemoSettings; typed "
        "by hand, missing keys take the schema defaults)",
    )
    p.add_argument("--seed", type=int, default=None, help="override demo_world.seed")
    p.add_argument(
        "--threads", type=int, required=True, help="processes that render the images (rule threads)"
    )


def demo_settings(settings_json: str, seed: int | None):
    """The demo_world section parsed, validated and completed with the schema defaults
    (:class:`imagenot.demo.settings.DemoSettings`); ``seed``, where not None, replaces
    ``demo_world.seed`` (the ``--seed`` flag)."""
    from imagenot.demo.settings import DemoSettings, section_settings

    overrides = {} if seed is None else {"seed": seed}
    return section_settings(
        DemoSettings, settings_json, "demo.schema.yaml", "demo_world", **overrides
    )


def _demo_world(args: argparse.Namespace) -> None:
    """Build the demo world: LAION-style shards, their images, ground truth."""
    import time
    from pathlib import Path

    from imagenot.demo.planted import PLANTED_FILE
    from imagenot.demo.world import build_world, write_world
    from imagenot.wordnet import load_wordnet

    f = WorldFiles.from_args(args)
    out = Path(args.out)
    for role, where in (
        ("images", "images"),
        ("truth", "truth.parquet"),
        ("planted_duplicates", PLANTED_FILE),
        ("world", "world.json"),
    ):
        if getattr(f, role) is not None and Path(getattr(f, role)) != out / where:
            raise ValueError(
                f"{flag(role)} {getattr(f, role)}: the demo world's {role} is {out / where}"
            )
    settings = demo_settings(args.settings, args.seed)
    start = time.perf_counter()
    world = build_world(load_wordnet(f.nltk_data), settings, f.shards)
    log.info("planned %d rows in %.1f s", world.truth.num_rows, time.perf_counter() - start)
    write_world(world, args.out, settings, workers=args.threads)
    summary = world.summary
    log.info(
        "demo world at %s: %d rows, %d planted classes, url status %s (%.1f s)",
        args.out,
        summary["rows"],
        len(summary["classes"]),
        summary["url_status"],
        time.perf_counter() - start,
    )
