"""`imagenot scale-world-shard`: write one shard of the scale world (rule scale_world)."""

from __future__ import annotations

import argparse
import logging

from imagenot.cli import subcommand
from imagenot.demo.files import ScaleShardFiles

log = logging.getLogger("imagenot.demo.scale")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this module's subcommands."""
    p = subcommand(subparsers, "scale-world-shard", _scale_world_shard, files=ScaleShardFiles)
    p.add_argument("--index", required=True, type=int, help="shard index (seeds the shard)")
    p.add_argument(
        "--settings",
        default="{}",
        help="the scale_world config section as JSON (imagenot.demo.settings.ScaleSettings; "
        "typed by hand, missing keys take the schema defaults)",
    )


def scale_settings(settings_json: str):
    """The scale_world section parsed, validated and completed with the schema defaults
    (:class:`imagenot.demo.settings.ScaleSettings`)."""
    from imagenot.demo.settings import ScaleSettings, section_settings

    return section_settings(ScaleSettings, settings_json, "scale.schema.yaml", "scale_world")


def _scale_world_shard(args: argparse.Namespace) -> None:
    """Write one paper-shaped LAION metadata shard of the scale world."""
    import json
    import time

    from imagenot.curate.match import read_lemma_table
    from imagenot.demo import scale_world as sw

    start = time.perf_counter()
    f = ScaleShardFiles.from_args(args)
    cfg = scale_settings(args.settings)
    lemmas = read_lemma_table(f.lemmas)
    web = sw.read_web_captions(f.captions)
    vocab = sw.vocabulary(lemmas, cfg)
    summary = sw.write_shard(args.index, cfg, web, sw.filler_words(web, lemmas), vocab, f.shard)
    log.info("%s: %s (%.1f s)", f.shard, json.dumps(summary), time.perf_counter() - start)
