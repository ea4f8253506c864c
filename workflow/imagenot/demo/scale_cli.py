"""The scale world's step handler, ``scale-world-shard`` (rule scale_world; declared in
:mod:`imagenot.core.steps`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("imagenot.demo.scale")


def scale_settings(section: str | Mapping[str, Any]):
    """The scale_world section (JSON text or an object; typed by hand, missing keys take the
    schema defaults) parsed, validated and completed
    (:class:`imagenot.demo.settings.ScaleSettings`)."""
    from imagenot.demo.settings import ScaleSettings, section_settings

    return section_settings(ScaleSettings, section, "scale.schema.yaml", "scale_world")


def shard(f, settings: dict | None, index: int) -> None:
    """Write one paper-shaped LAION metadata shard of the scale world."""
    import json
    import time

    from imagenot.curate.match import read_lemma_table
    from imagenot.demo import scale_world as sw

    start = time.perf_counter()
    cfg = scale_settings(settings or {})
    lemmas = read_lemma_table(f.lemmas)
    web = sw.read_web_captions(f.captions)
    vocab = sw.vocabulary(lemmas, cfg)
    summary = sw.write_shard(index, cfg, web, sw.filler_words(web, lemmas), vocab, f.shard)
    log.info("%s: %s (%.1f s)", f.shard, json.dumps(summary), time.perf_counter() - start)
