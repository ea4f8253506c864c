"""The diagnostics table: a contrast subject and the reference side by side, with their ratio."""

from __future__ import annotations

import csv
import io
import math

from imagenot.core.escape import csv_row, markdown_text
from imagenot.diagnostics.captions import SUMMARY
from imagenot.diagnostics.wordnet_stats import STAT_KEYS

Row = dict[str, object]
COLUMNS = ("group", "metric", "value", "reference", "ratio")

_IMAGE_KEYS = (
    ("intra_class_similarity", "intra-class image similarity"),
    ("inter_class_similarity", "inter-class image similarity"),
    ("intra_inter_ratio", "intra / inter"),
    ("n_images", "images embedded"),
)


def _row(group: str, metric: str, value, reference) -> Row:
    """One row; its ratio is value / reference, None when either is missing or the reference
    is 0."""
    known = value is not None and reference is not None and reference != 0
    ratio = float(value) / float(reference) if known else None
    return dict(zip(COLUMNS, (group, metric, value, reference, ratio), strict=True))


def diagnostics_rows(
    *,
    wordnet: dict | None,
    captions: dict | None,
    reference_captions: dict | None,
    images: dict | None,
    reference_images: dict | None,
) -> list[Row]:
    """Rows ``group, metric, value, reference, ratio`` from the stage's JSON documents (None:
    a document this subject does not have)."""
    rows: list[Row] = []
    if wordnet:
        for key in STAT_KEYS:
            rows.append(_row("WordNet", key, wordnet["classes"][key], wordnet["reference"][key]))
        rows += [_row("WordNet", k, wordnet[k], None) for k in ("synset_overlap", "parent_overlap")]
    if captions:
        score, ref = captions["class_score"], (reference_captions or {}).get("class_score", {})
        for key in SUMMARY:
            metric = f"{key} over classes"
            rows.append(_row("caption-gloss similarity", metric, score[key], ref.get(key)))
    if images:
        ref = reference_images or {}
        for key, label in _IMAGE_KEYS:
            rows.append(_row(f"images ({images['encoder']})", label, images[key], ref.get(key)))
    return rows


def _fmt(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, int | bool):
        return str(value)
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1:
        return f"{value:.1f}"
    return f"{value:.4g}"


def to_csv(rows: list[Row], name: str, reference_name: str) -> str:
    """CSV with columns group, metric, <name>, <reference_name>, ratio (full precision)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(csv_row(["group", "metric", name, reference_name, "ratio"]))
    writer.writerows(csv_row(["" if r[k] is None else r[k] for k in COLUMNS]) for r in rows)
    return out.getvalue()


def to_markdown(rows: list[Row], name: str, reference_name: str) -> str:
    """The same table in Markdown (4 significant digits)."""
    lines = [
        f"| group | metric | {markdown_text(name)} | {markdown_text(reference_name)} | ratio |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        cells = [markdown_text(r["group"]), markdown_text(r["metric"])]
        lines.append("| " + " | ".join(cells + [_fmt(r[k]) for k in COLUMNS[2:]]) + " |")
    return "\n".join(lines) + "\n"
