"""`imagenot` subcommands of the curate stage (one per rule; heavy imports inside handlers).

A rule hands its command everything the config decides as one ``--settings`` JSON object (a
settings object of :mod:`imagenot.curate.settings`, built by its ``from_config``). ``match`` and ``lemmas``
are typed by hand too: ``match`` keeps its flags, whose defaults are the schema's.
"""

from __future__ import annotations

import argparse
import json
import logging

from imagenot.curate.settings import (
    CandidatesSettings,
    CaptionSettings,
    EmbedSettings,
    MatchSettings,
    QueriesSettings,
    SelectSettings,
)
from imagenot.settings import parse
from imagenot.wordnet import NLTK_DATA

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands."""
    p = subparsers.add_parser(
        "match",
        help="match every WordNet noun lemma against the TEXT column of a parquet file",
        description="Writes (row, wnid), one row per match: case-insensitive, whole words, "
        "after lowercasing and turning every non-letter/digit run into one space.",
    )
    p.add_argument("input", help="parquet file with a TEXT column (any other columns are ignored)")
    p.add_argument("-o", "--output", required=True, help="output parquet (row, wnid)")
    lexicon = p.add_mutually_exclusive_group()
    lexicon.add_argument(
        "--lemmas", default=None, help="(lemma, wnid) parquet from `imagenot lemmas` (fastest)"
    )
    lexicon.add_argument(
        "--nltk-data", default=NLTK_DATA, help="else: NLTK_DATA dir with WordNet 3.0"
    )
    p.add_argument("--stats", default=None, help="write row/skip/match counts to this JSON file")
    p.add_argument(
        "--counts", default=None, help="write matching captions per wnid to this parquet file"
    )
    p.add_argument(
        "--batch-rows",
        type=int,
        default=None,
        help="rows matched per batch (default: the schema's laion.batch_rows)",
    )
    p.add_argument(
        "--max-caption-bytes",
        type=int,
        default=None,
        help="longer captions are skipped (default: the schema's laion.max_caption_bytes)",
    )
    p.add_argument(
        "--require-url",
        action="store_true",
        help="also require a URL string column (LAION shards: the workflow's images come from it)",
    )
    p.add_argument(
        "--settings",
        default=None,
        metavar="JSON",
        help="instead of the three flags above: JSON (imagenot.curate.settings.MatchSettings, "
        "what the rule passes)",
    )
    p.set_defaults(func=_match)

    p = subparsers.add_parser(
        "lemmas",
        help="write every (lemma, wnid) pair of WordNet's nouns to parquet (the match lexicon)",
        description="Loading WordNet takes seconds; matching jobs read this table instead.",
    )
    p.add_argument("--nltk-data", default=NLTK_DATA, help="NLTK_DATA dir with WordNet 3.0")
    p.add_argument("-o", "--output", required=True, help="output parquet (lemma, wnid)")
    p.set_defaults(func=_lemmas)

    p = subparsers.add_parser(
        "curate-candidates", help="class selection steps 1-5 with audit trail"
    )
    p.add_argument(
        "--counts", nargs="+", required=True, help="per-shard (wnid, n) count files of `match`"
    )
    p.add_argument("--nltk-data", default=NLTK_DATA)
    p.add_argument(
        "--lemmas", default=None, help="(lemma, wnid) parquet of `imagenot lemmas` (else WordNet)"
    )
    p.add_argument(
        "--settings",
        required=True,
        help="JSON: classes ('discover', 'imagenet' or {from_file: PATH}), min_count, "
        "query_template, nsfw (imagenot.curate.settings.CandidatesSettings)",
    )
    p.add_argument("-o", "--output", required=True, help="candidates parquet")
    p.add_argument("--audit", required=True, help="audit parquet of steps 1-5")
    p.add_argument("--stats", required=True, help="JSON: mode and number of synsets considered")
    p.set_defaults(func=_candidates)

    p = subparsers.add_parser("curate-captions", help="step 6 for one shard: single-class captions")
    p.add_argument("--shard", required=True, help="LAION shard parquet")
    p.add_argument("--matches", required=True, help="that shard's match parquet")
    p.add_argument("--candidates", required=True, help="candidates parquet")
    p.add_argument(
        "--settings", required=True, help="JSON (imagenot.curate.settings.CaptionSettings)"
    )
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--stats", required=True)
    p.set_defaults(func=_captions)

    p = subparsers.add_parser("curate-queries", help="step 7: embed the class queries")
    p.add_argument("--candidates", required=True, help="candidates parquet (query column)")
    p.add_argument(
        "--settings", required=True, help="JSON (imagenot.curate.settings.QueriesSettings)"
    )
    p.add_argument("-o", "--output", required=True, help="query vectors (.npy, candidates order)")
    p.set_defaults(func=_queries)

    p = subparsers.add_parser(
        "curate-embed", help="step 7 for one part: each caption's similarity to its class query"
    )
    p.add_argument("--captions", required=True, help="the part's caption parquet")
    p.add_argument("--candidates", required=True, help="candidates parquet (class order)")
    p.add_argument("--queries", required=True, help="query vectors of curate-queries")
    p.add_argument(
        "--settings", required=True, help="JSON (imagenot.curate.settings.EmbedSettings)"
    )
    p.add_argument("--work-dir", required=True, help="resumable chunk files of this part")
    p.add_argument(
        "-o", "--output", required=True, help="score parquet (key, row, wnid, similarity)"
    )
    p.add_argument("--stats", required=True)
    p.add_argument(
        "--gpu-job",
        action="store_true",
        help="the config plans this job for a GPU (resources.gpus > 0): stop without one",
    )
    p.set_defaults(func=_embed)

    p = subparsers.add_parser("curate-select", help="steps 7b-8: score classes, select captions")
    p.add_argument("--scores", nargs="+", required=True, help="per-part score files")
    p.add_argument(
        "--captions", nargs="+", required=True, help="per-part caption files (same order)"
    )
    p.add_argument("--candidates", required=True)
    p.add_argument(
        "--settings", required=True, help="JSON (imagenot.curate.settings.SelectSettings)"
    )
    p.add_argument("--classes-out", required=True)
    p.add_argument("--selection-out", required=True)
    p.add_argument("--reserve-out", required=True)
    p.add_argument("--scores-out", required=True)
    p.add_argument("--stats", required=True)
    p.set_defaults(func=_select)

    p = subparsers.add_parser("curate-audit", help="audit trail and funnel of a curated dataset")
    p.add_argument("--match-stats", nargs="+", required=True)
    p.add_argument("--candidates", required=True)
    p.add_argument("--candidates-audit", required=True)
    p.add_argument("--candidates-stats", required=True)
    p.add_argument("--caption-stats", nargs="+", required=True)
    p.add_argument("--scores", required=True)
    p.add_argument("--selection-stats", required=True)
    p.add_argument("--audit-out", required=True)
    p.add_argument("--audit-csv-out", default=None, help="the audit table again as CSV")
    p.add_argument("--funnel-out", required=True)
    p.set_defaults(func=_audit)

    p = subparsers.add_parser(
        "curate-calibration",
        help="step 7 check: classes passing each similarity threshold, score distribution",
        description="Reads class_scores.parquet and writes, for a grid of thresholds, the number "
        "of classes whose score reaches it, a summary of the scores, and a figure with the "
        "configured threshold and n_classes marked.",
    )
    p.add_argument("--scores", required=True, help="class_scores.parquet of the selection step")
    p.add_argument(
        "--settings",
        required=True,
        help="JSON: threshold, n_classes, start, stop, step, encoder "
        "(imagenot.curate.settings.CalibrationSettings)",
    )
    p.add_argument("--csv-out", required=True, help="per-threshold CSV")
    p.add_argument("--summary-out", required=True, help="summary CSV (statistic, value)")
    p.add_argument("--figure-out", required=True, help="figure (.png or .svg)")
    p.set_defaults(func=_calibration)


def _read_json(path: str) -> dict:
    from imagenot.io import read_json

    return read_json(path)


def match_settings(args: argparse.Namespace) -> MatchSettings:
    """The rule's ``--settings``, or the hand-typed flags with the schema's defaults (never both:
    a flag beside ``--settings`` would be silently ignored)."""
    from imagenot.config import schema_default

    if args.settings is not None:
        given = [
            flag
            for flag, value in (
                ("--batch-rows", args.batch_rows),
                ("--max-caption-bytes", args.max_caption_bytes),
                ("--require-url", args.require_url or None),
            )
            if value is not None
        ]
        if given:
            raise ValueError(f"--settings replaces {', '.join(given)}: give one or the other")
        return parse(MatchSettings, args.settings)
    return MatchSettings(
        batch_rows=(
            args.batch_rows if args.batch_rows is not None else schema_default("laion.batch_rows")
        ),
        max_caption_bytes=(
            args.max_caption_bytes
            if args.max_caption_bytes is not None
            else schema_default("laion.max_caption_bytes")
        ),
        require_url=args.require_url,
    )


def _match(args: argparse.Namespace) -> None:
    import pyarrow as pa

    from imagenot.curate.match import (
        LemmaIndex,
        Matcher,
        read_lemma_table,
        write_shard_matches,
    )
    from imagenot.curate.shards import open_shard, required_columns
    from imagenot.io import keep_freed_memory, write_json, write_parquet

    s = match_settings(args)
    # A one-shot process whose batches allocate and free arrays of 10-100 MB: reused heap memory
    # instead of fresh zeroed pages (60% fewer page faults, 0.2-0.3 s less per 1M captions).
    keep_freed_memory()
    # Fail fast, naming file and column, before loading WordNet.
    open_shard(args.input, required_columns(s))
    if args.lemmas:
        index = LemmaIndex.from_lemma_table(read_lemma_table(args.lemmas))
    else:
        index = LemmaIndex.from_wordnet(args.nltk_data)
    stats = write_shard_matches(args.input, Matcher(index), args.output, s)
    counts = stats.pop("counts")
    if args.counts:
        write_parquet(
            pa.table(
                {
                    "wnid": pa.array(list(counts), pa.string()),
                    "n": pa.array(list(counts.values()), pa.int64()),
                }
            ),
            args.counts,
        )
    if args.stats:
        write_json(stats, args.stats)
    log.info("%s: %s", args.input, json.dumps(stats))


def _lemmas(args: argparse.Namespace) -> None:
    from imagenot.io import write_parquet
    from imagenot.wordnet import load_wordnet, noun_lemma_table

    table = noun_lemma_table(load_wordnet(args.nltk_data))
    write_parquet(table, args.output)
    log.info("%s: %d (lemma, wnid) pairs", args.output, table.num_rows)


def _candidates(args: argparse.Namespace) -> None:
    from imagenot.curate.candidates import build_candidates, sum_counts
    from imagenot.curate.match import read_lemma_table
    from imagenot.io import write_json, write_parquet
    from imagenot.wordnet import imagenet_wnids, load_wordnet

    s = parse(CandidatesSettings, args.settings)
    wn = load_wordnet(args.nltk_data)
    counts = sum_counts(args.counts)
    table, audit, stats = build_candidates(
        counts,
        wn,
        s,
        imagenet_wnids(),
        lemma_table=read_lemma_table(args.lemmas) if args.lemmas else None,
    )
    write_parquet(audit, args.audit)
    write_json(stats, args.stats)
    write_parquet(table, args.output)
    log.info("%d candidate classes (%s)", table.num_rows, json.dumps(stats))


def _captions(args: argparse.Namespace) -> None:
    from imagenot.curate.captions import write_shard_captions
    from imagenot.io import read_parquet, write_json

    settings = parse(CaptionSettings, args.settings)
    classes = read_parquet(args.candidates, columns=["wnid"]).column("wnid").to_pylist()
    stats = write_shard_captions(args.shard, args.matches, classes, args.output, settings)
    write_json(stats, args.stats)
    log.info("%s (%s): %s", settings.shard, args.shard, json.dumps(stats))


def _queries(args: argparse.Namespace) -> None:
    from imagenot.curate.embed import embed_queries
    from imagenot.io import read_parquet

    s = parse(QueriesSettings, args.settings)
    queries = read_parquet(args.candidates, columns=["query"]).column("query").to_pylist()
    info = embed_queries(queries, s, args.output)
    log.info("embedded %d class queries (%s)", len(queries), json.dumps(info))


def _embed(args: argparse.Namespace) -> None:

    from imagenot.curate.embed import embed_part, encoder_spec
    from imagenot.io import read_npy, read_parquet, write_json

    settings = parse(EmbedSettings, args.settings)
    encoder_spec(settings)  # a wrong encoder section stops here, naming the key
    if args.gpu_job or settings.device == "cuda":
        import dataclasses

        from imagenot.curate.encoders import CONFIG_KEY
        from imagenot.device import cuda_available, resolve_device

        # by fact, before any caption is read: a GPU job without a GPU stops (imagenot.device)
        where = f"{CONFIG_KEY}.device"
        device = resolve_device(settings.device, args.gpu_job, cuda_available(), where)
        settings = dataclasses.replace(settings, device=device)
    wnids = read_parquet(args.candidates, columns=["wnid"]).column("wnid").to_pylist()
    stats = embed_part(
        args.captions, wnids, read_npy(args.queries), settings, args.work_dir, args.output
    )
    write_json(stats, args.stats)
    log.info("%s: %s", args.captions, json.dumps(stats))


def _select(args: argparse.Namespace) -> None:
    import numpy as np

    from imagenot import job_usage
    from imagenot.curate.select import (
        candidate_rows,
        check_class_count,
        class_table,
        score_classes,
        select_captions,
        top_captions,
    )
    from imagenot.io import read_parquet, write_json, write_parquet

    s = parse(SelectSettings, args.settings)
    if len(args.scores) != len(args.captions):
        raise ValueError("--scores and --captions must list the same parts in the same order")
    candidates = read_parquet(args.candidates)
    wnids = candidates.column("wnid").to_pylist()
    best, counts = top_captions(args.scores, wnids, s.top_n, s, with_keys=False)
    scores = score_classes(candidates, best, counts, s)
    check_class_count(scores, s)
    classes = class_table(candidates, scores)
    kept = np.flatnonzero(scores.column("status").to_numpy(zero_copy_only=False) == "kept")
    top, _ = top_captions(args.scores, wnids, s.per_class + s.reserve_per_class, s, kept)
    job_usage.declare_rows_held(top.num_rows)  # classes x kept captions: bench_scale's basis
    rows = candidate_rows(top, scores, args.captions)
    selection, reserve, stats = select_captions(rows, classes.column("wnid").to_pylist(), s)
    stats.update(
        classes=classes.num_rows, per_class=s.per_class, reserve_per_class=s.reserve_per_class
    )
    write_parquet(scores, args.scores_out)
    write_parquet(classes, args.classes_out)
    write_parquet(reserve, args.reserve_out)
    write_parquet(selection, args.selection_out)
    write_json(stats, args.stats)
    log.info("%s", json.dumps(stats))


def _audit(args: argparse.Namespace) -> None:
    from imagenot.curate.audit import audit_table, funnel_csv, funnel_rows
    from imagenot.io import read_parquet, write_csv, write_parquet, write_text

    audit = audit_table(
        read_parquet(args.candidates_audit),
        read_parquet(args.candidates),
        read_parquet(args.scores),
    )
    funnel = funnel_rows(
        [_read_json(f) for f in args.match_stats],
        _read_json(args.candidates_stats),
        audit,
        [_read_json(f) for f in args.caption_stats],
        _read_json(args.selection_stats),
    )
    write_parquet(audit, args.audit_out)
    if args.audit_csv_out:
        write_csv(audit, args.audit_csv_out)
    write_text(funnel_csv(funnel), args.funnel_out)
    print(funnel_csv(funnel))


def _calibration(args: argparse.Namespace) -> None:
    from imagenot.curate.calibration import parse_settings, write_calibration

    settings = parse_settings(args.settings)
    summary = write_calibration(
        args.scores, settings, args.csv_out, args.summary_out, args.figure_out
    )
    for row in summary.to_pylist():
        print(f"{row['statistic']:>32}: {row['value']:g}")
