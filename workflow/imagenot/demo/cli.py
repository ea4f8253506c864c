"""The demo stage's step handler, ``demo-world`` (declared in :mod:`imagenot.core.steps`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from imagenot.core.files import check_layout

log = logging.getLogger("imagenot.demo")


def demo_settings(section: str | Mapping[str, Any], seed: int | None):
    """The demo_world section (JSON text or an object; typed by hand, missing keys take the
    schema defaults) parsed, validated and completed
    (:class:`imagenot.demo.settings.DemoSettings`); ``seed``, where not None, replaces
    ``demo_world.seed`` (the ``--seed`` flag)."""
    from imagenot.demo.settings import DemoSettings, section_settings

    overrides = {} if seed is None else {"seed": seed}
    return section_settings(DemoSettings, section, "demo.schema.yaml", "demo_world", **overrides)


def world(f, settings: dict | None, out: str, seed: int | None, threads: int) -> None:
    """Build the demo world: LAION-style shards, their images, ground truth."""
    import time
    from pathlib import Path

    from imagenot.core.wordnet import load_wordnet
    from imagenot.demo.planted import PLANTED_FILE
    from imagenot.demo.world import build_world, write_world

    layout = {"images": "images", "truth": "truth.parquet", "world": "world.json"}
    check_layout(f, Path(out), {**layout, "planted_duplicates": PLANTED_FILE}, "the demo world")
    config = demo_settings(settings or {}, seed)
    start = time.perf_counter()
    built = build_world(load_wordnet(f.nltk_data), config, f.shards)
    log.info("planned %d rows in %.1f s", built.truth.num_rows, time.perf_counter() - start)
    write_world(built, out, config, workers=threads)
    s = built.summary
    facts = (s["rows"], len(s["classes"]), s["url_status"], time.perf_counter() - start)
    log.info("demo world at %s: %d rows, %d planted classes, url status %s (%.1f s)", out, *facts)
