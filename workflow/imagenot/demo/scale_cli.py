"""`imagenot scale-world-shard`: write one shard of the scale world (rule scale_world)."""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger("imagenot.demo.scale")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this module's subcommands."""
    p = subparsers.add_parser(
        "scale-world-shard",
        help="write one paper-shaped LAION metadata shard of the scale world",
    )
    p.add_argument("--index", required=True, type=int, help="shard index (seeds the shard)")
    p.add_argument("--captions", required=True, help="parquet of real web captions (TEXT)")
    p.add_argument("--lemmas", required=True, help="noun lemma table (imagenot lemmas)")
    p.add_argument("-o", "--out", required=True, help="output parquet path")
    p.add_argument(
        "--settings",
        default="{}",
        help="the scale_world config section as JSON (imagenot.demo.settings.ScaleSettings; "
        "typed by hand, missing keys take the schema defaults)",
    )
    p.set_defaults(func=_scale_world_shard)


def scale_settings(settings_json: str):
    """The scale_world section parsed, validated and completed with the schema defaults
    (:class:`imagenot.demo.settings.ScaleSettings`)."""
    from imagenot.demo.settings import ScaleSettings, section_settings

    return section_settings(ScaleSettings, settings_json, "scale.schema.yaml", "scale_world")


def _scale_world_shard(args: argparse.Namespace) -> None:
    import json
    import time

    from imagenot.curate.match import read_lemma_table
    from imagenot.demo import scale_world as sw

    start = time.perf_counter()
    cfg = scale_settings(args.settings)
    lemmas = read_lemma_table(args.lemmas)
    web = sw.read_web_captions(args.captions)
    vocab = sw.vocabulary(lemmas, cfg)
    summary = sw.write_shard(args.index, cfg, web, sw.filler_words(web, lemmas), vocab, args.out)
    log.info("%s: %s (%.1f s)", args.out, json.dumps(summary), time.perf_counter() - start)
