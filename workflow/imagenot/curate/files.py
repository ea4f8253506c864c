"""The files of the curate stage's steps (and of WordNet's preparation), one class per rule.

Each field is a role: the rule's ``input``/``output`` key, the command's flag and the attribute
the command reads (:mod:`imagenot.core.files`). Kept free of heavy imports, as the settings are.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagenot.core.files import Files, given, made


@dataclass(frozen=True)
class WordnetFiles(Files):
    """``prepare-wordnet``: the NLTK_DATA folder it creates."""

    nltk_data: str = made("NLTK_DATA folder to create (corpora/wordnet inside)")


@dataclass(frozen=True)
class LemmasFiles(Files):
    """``lemmas``: WordNet's nouns as a (lemma, wnid) table, the match lexicon."""

    nltk_data: str | None = given(
        "NLTK_DATA folder with WordNet 3.0 (default: the workflow's)", optional=True
    )
    lemmas: str = made("(lemma, wnid) parquet")


@dataclass(frozen=True)
class MatchFiles(Files):
    """``match`` (step 1, per shard): the shard's (row, wnid) matches, counts and stats."""

    shard: str = given(
        "parquet file with a TEXT column (any other columns are ignored)", positional=True
    )
    lemmas: str | None = given(
        "(lemma, wnid) parquet of `imagenot lemmas` (fastest; else --nltk-data)", optional=True
    )
    matches: str = made("(row, wnid) parquet, one row per match")
    counts: str | None = made("matching captions per wnid (parquet)", optional=True)
    stats: str | None = made("row, skip and match counts (JSON)", optional=True)


@dataclass(frozen=True)
class CandidatesFiles(Files):
    """``curate-candidates`` (steps 1-5, per dataset)."""

    counts: list[str] = given("per-shard (wnid, n) count files of `match`", many=True)
    lemmas: str | None = given("(lemma, wnid) parquet of `imagenot lemmas`", optional=True)
    nltk_data: str = given("NLTK_DATA folder with WordNet 3.0")
    candidates: str = made("candidate classes (parquet)")
    audit: str = made("audit parquet of steps 1-5")
    stats: str = made("mode and number of synsets considered (JSON)")


@dataclass(frozen=True)
class CaptionFiles(Files):
    """``curate-captions`` (step 6, per dataset and shard)."""

    shard: str = given("LAION shard parquet")
    matches: str = given("that shard's match parquet")
    candidates: str = given("candidates parquet")
    captions: str = made("the shard's single-class captions (parquet)")
    stats: str = made("caption counts (JSON)")


@dataclass(frozen=True)
class QueriesFiles(Files):
    """``curate-queries`` (step 7, per dataset)."""

    candidates: str = given("candidates parquet (query column)")
    queries: str = made("query vectors (.npy, candidates order)")


@dataclass(frozen=True)
class EmbedFiles(Files):
    """``curate-embed`` (step 7, per dataset and part)."""

    captions: str = given("the part's caption parquet")
    candidates: str = given("candidates parquet (class order)")
    queries: str = given("query vectors of curate-queries")
    scores: str = made("score parquet (key, row, wnid, similarity)")
    stats: str = made("embedding counts (JSON)")


@dataclass(frozen=True)
class SelectFiles(Files):
    """``curate-select`` (steps 7b-8, per dataset)."""

    scores: list[str] = given("per-part score files", many=True)
    captions: list[str] = given("per-part caption files (same order)", many=True)
    candidates: str = given("candidates parquet")
    classes: str = made("the selected classes (parquet)")
    selection: str = made("the selected captions (parquet)")
    reserve: str = made("the top-up reserve (parquet)")
    class_scores: str = made("every candidate's score and status (parquet)")
    stats: str = made("selection counts (JSON)")


@dataclass(frozen=True)
class AuditFiles(Files):
    """``curate-audit`` (per dataset)."""

    match_stats: list[str] = given("every shard's match stats", many=True)
    candidates: str = given("candidates parquet")
    candidates_audit: str = given("audit parquet of steps 1-5")
    candidates_stats: str = given("stats of steps 1-5")
    caption_stats: list[str] = given("every part's caption stats", many=True)
    class_scores: str = given("class scores of the selection step")
    selection_stats: str = given("stats of the selection step")
    audit: str = made("audit trail (parquet)")
    audit_csv: str | None = made("the audit trail again as CSV", optional=True)
    funnel: str = made("funnel (CSV)")


@dataclass(frozen=True)
class CalibrationFiles(Files):
    """``curate-calibration`` (per dataset)."""

    class_scores: str = given("class_scores.parquet of the selection step")
    csv: str = made("classes passing each threshold (CSV)")
    summary: str = made("summary CSV (statistic, value)")
    pdf: str = made("figure (PDF, TrueType fonts)")
    png: str = made("figure (PNG at analyse.figure_options.dpi)")
