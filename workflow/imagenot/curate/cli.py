"""The handlers of the curate stage's steps (declared in :mod:`imagenot.core.steps`), one per rule: each
takes its files by role (a class of :mod:`imagenot.curate.files`) and the settings object its
rule built (:mod:`imagenot.curate.settings`); heavy imports stay inside. ``match`` and
``prepare-wordnet`` are typed by hand too: without ``--settings`` their flags, whose defaults are
the schema's, make the settings (:func:`hand_settings`).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from imagenot.core.wordnet import NLTK_DATA

if TYPE_CHECKING:
    from imagenot.curate import files as fs
    from imagenot.curate import settings as ss

log = logging.getLogger(__name__)


def hand_settings(settings, cls, flags: dict[str, tuple]):
    """The rule's ``--settings``, or a ``cls`` of the hand-typed ``flags`` (``{flag: (value,
    config key)}``, in field order; a value not given is the key's schema default). Never both: a
    flag beside ``--settings`` would be silently ignored."""
    from imagenot.core.config import schema_default

    if settings is None:
        return cls(*(schema_default(key) if v is None else v for v, key in flags.values()))
    if given := [flag for flag, (v, _) in flags.items() if v is not None and v is not False]:
        raise ValueError(f"{', '.join(given)} and --settings: give one of them")
    return settings


def match_settings(
    settings: ss.MatchSettings | None,
    batch_rows: int | None,
    max_caption_bytes: int | None,
    require_url: bool,
) -> ss.MatchSettings:
    """:func:`hand_settings` of ``match`` (``--require-url``: no default, off unless given)."""
    from imagenot.curate.settings import MatchSettings

    flags = {
        "--batch-rows": (batch_rows, "laion.batch_rows"),
        "--max-caption-bytes": (max_caption_bytes, "laion.max_caption_bytes"),
        "--require-url": (require_url, None),
    }
    return hand_settings(settings, MatchSettings, flags)


def match(f: fs.MatchFiles, settings: ss.MatchSettings | None, nltk_data: str | None, **flags):
    """Match every WordNet noun lemma against the TEXT column of a parquet file."""
    import pyarrow as pa

    from imagenot.core.io import keep_freed_memory, write_json, write_parquet
    from imagenot.curate.match import LemmaIndex, Matcher, read_lemma_table, write_shard_matches
    from imagenot.curate.shards import open_shard

    s = match_settings(settings, **flags)
    # A one-shot process whose batches allocate and free arrays of 10-100 MB: reused heap memory
    # instead of fresh zeroed pages (60% fewer page faults, 0.2-0.3 s less per 1M captions).
    keep_freed_memory()
    # Fail fast, naming file and column, before loading WordNet.
    open_shard(f.shard, s.require_url)
    if f.lemmas:
        index = LemmaIndex.from_lemma_table(read_lemma_table(f.lemmas))
    else:
        index = LemmaIndex.from_wordnet(nltk_data or NLTK_DATA)
    stats = write_shard_matches(f.shard, Matcher(index), f.matches, s)
    counts = stats.pop("counts")
    if f.counts:
        columns = {"wnid": (list(counts), pa.string()), "n": (list(counts.values()), pa.int64())}
        write_parquet(pa.table({k: pa.array(*v) for k, v in columns.items()}), f.counts)
    if f.stats:
        write_json(stats, f.stats)
    log.info("%s: %s", f.shard, json.dumps(stats))


def lemmas(f: fs.LemmasFiles) -> None:
    """Write every (lemma, wnid) pair of WordNet's nouns to parquet (the match lexicon)."""
    from imagenot.core.io import write_parquet
    from imagenot.core.wordnet import load_wordnet, noun_lemma_table

    table = noun_lemma_table(load_wordnet(f.nltk_data or NLTK_DATA))
    write_parquet(table, f.lemmas)
    log.info("%s: %d (lemma, wnid) pairs", f.lemmas, table.num_rows)


def wordnet_settings(
    settings: ss.WordnetSettings | None, dict_dir: str | None
) -> ss.WordnetSettings:
    """:func:`hand_settings` of ``prepare-wordnet`` (``--dict-dir``)."""
    from imagenot.curate.settings import WordnetSettings

    return hand_settings(settings, WordnetSettings, {"--dict-dir": (dict_dir, "wordnet.dict_dir")})


def prepare_wordnet(
    f: fs.WordnetFiles, settings: ss.WordnetSettings | None, dict_dir: str | None
) -> None:
    """Build an nltk-readable WordNet 3.0 corpus."""
    from imagenot.core.wordnet import load_wordnet, noun_synset_count, prepare_nltk_wordnet

    out = prepare_nltk_wordnet(f.nltk_data, wordnet_settings(settings, dict_dir).dict_dir)
    wn = load_wordnet(str(out))
    wn.synset("entity.n.01")  # nltk reads the corpus: its indexes and a data record
    print(f"WordNet ready at {out}: {noun_synset_count(wn)} noun synsets")


def candidates(f: fs.CandidatesFiles, s: ss.CandidatesSettings) -> None:
    """Class selection steps 1-5 with audit trail."""
    from imagenot.core.io import write_json, write_parquet
    from imagenot.core.wordnet import imagenet_wnids, load_wordnet
    from imagenot.curate.candidates import build_candidates, sum_counts
    from imagenot.curate.match import read_lemma_table

    lemma_table = read_lemma_table(f.lemmas) if f.lemmas else None
    table, audit, stats = build_candidates(
        sum_counts(f.counts), load_wordnet(f.nltk_data), s, imagenet_wnids(), lemma_table
    )
    write_parquet(audit, f.audit)
    write_json(stats, f.stats)
    write_parquet(table, f.candidates)
    log.info("%d candidate classes (%s)", table.num_rows, json.dumps(stats))


def _column(path: str, name: str) -> list:
    from imagenot.core.io import read_parquet

    return read_parquet(path, columns=[name]).column(name).to_pylist()


def captions(f: fs.CaptionFiles, s: ss.CaptionSettings) -> None:
    """Step 6 for one shard: single-class captions."""
    from imagenot.core.io import write_json
    from imagenot.curate.captions import write_shard_captions

    classes = _column(f.candidates, "wnid")
    stats = write_shard_captions(f.shard, f.matches, classes, f.captions, s)
    write_json(stats, f.stats)
    log.info("%s (%s): %s", s.shard, f.shard, json.dumps(stats))


def queries(f: fs.QueriesFiles, s: ss.QueriesSettings) -> None:
    """Step 7: embed the class queries."""
    from imagenot.curate.embed import embed_queries

    texts = _column(f.candidates, "query")
    info = embed_queries(texts, s, f.queries)
    log.info("embedded %d class queries (%s)", len(texts), json.dumps(info))


def embed(f: fs.EmbedFiles, s: ss.EmbedSettings, work_dir: str, gpu_job: bool) -> None:
    """Step 7 for one part: each caption's similarity to its class query."""
    from imagenot.core.io import read_npy, write_json
    from imagenot.curate.embed import embed_part, encoder_spec

    encoder_spec(s)  # a wrong encoder section stops here, naming the key
    if gpu_job or s.device == "cuda":
        import dataclasses

        from imagenot.core.device import cuda_available, resolve_device
        from imagenot.curate.encoders import CONFIG_KEY

        # by fact, before any caption is read: a GPU job without a GPU stops (imagenot.core.device)
        device = resolve_device(s.device, gpu_job, cuda_available(), f"{CONFIG_KEY}.device")
        s = dataclasses.replace(s, device=device)
    wnids = _column(f.candidates, "wnid")
    stats = embed_part(f.captions, wnids, read_npy(f.queries), s, work_dir, f.scores)
    write_json(stats, f.stats)
    log.info("%s: %s", f.captions, json.dumps(stats))


def select(f: fs.SelectFiles, s: ss.SelectSettings) -> None:
    """Steps 7b-8: score classes, select captions."""
    import numpy as np

    from imagenot.core import job_usage
    from imagenot.core.io import read_parquet, write_json, write_parquet
    from imagenot.curate.select import (
        candidate_rows,
        check_class_count,
        class_table,
        score_classes,
        select_captions,
        top_captions,
    )

    if len(f.scores) != len(f.captions):
        raise ValueError("--scores and --captions must list the same parts in the same order")
    candidates = read_parquet(f.candidates)
    wnids = candidates.column("wnid").to_pylist()
    best, counts = top_captions(f.scores, wnids, s.top_n, s, with_keys=False)
    scores = score_classes(candidates, best, counts, s)
    check_class_count(scores, s)
    classes = class_table(candidates, scores)
    kept = np.flatnonzero(scores.column("status").to_numpy(zero_copy_only=False) == "kept")
    top, _ = top_captions(f.scores, wnids, s.per_class + s.reserve_per_class, s, kept)
    job_usage.declare_rows_held(top.num_rows)  # classes x kept captions: bench_scale's basis
    rows = candidate_rows(top, scores, f.captions)
    selection, reserve, stats = select_captions(rows, classes.column("wnid").to_pylist(), s)
    stats.update(
        classes=classes.num_rows, per_class=s.per_class, reserve_per_class=s.reserve_per_class
    )
    for table, path in ((scores, f.class_scores), (classes, f.classes), (reserve, f.reserve)):
        write_parquet(table, path)
    write_parquet(selection, f.selection)
    write_json(stats, f.stats)
    log.info("%s", json.dumps(stats))


def audit(f: fs.AuditFiles) -> None:
    """Audit trail and funnel of a curated dataset."""
    from imagenot.core.io import read_json, read_parquet, write_csv, write_parquet, write_text
    from imagenot.curate.audit import audit_table, funnel_csv, funnel_rows

    trail = audit_table(*map(read_parquet, (f.candidates_audit, f.candidates, f.class_scores)))
    funnel = funnel_csv(
        funnel_rows(
            [read_json(path) for path in f.match_stats],
            read_json(f.candidates_stats),
            trail,
            [read_json(path) for path in f.caption_stats],
            read_json(f.selection_stats),
        )
    )
    write_parquet(trail, f.audit)
    if f.audit_csv:
        write_csv(trail, f.audit_csv)
    write_text(funnel, f.funnel)
    print(funnel)


def calibration(f: fs.CalibrationFiles, s: ss.CalibrationSettings) -> None:
    """Step 7 check: classes passing each similarity threshold, score distribution."""
    from imagenot.curate.calibration import write_calibration

    for row in write_calibration(f, s).to_pylist():
        print(f"{row['statistic']:>32}: {row['value']:g}")
