"""The audit trail (every synset considered and its fate) and the funnel (counts per step)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc

from imagenot.curate.candidates import AUDIT_SCHEMA, STEP_NAMES
from imagenot.curate.shards import SKIP_REASONS

FULL_AUDIT_SCHEMA = AUDIT_SCHEMA.append(pa.field("score", pa.float64()))
FUNNEL_COLUMNS = ("step", "step_name", "synsets", "captions", "note")


def audit_table(candidates_audit: pa.Table, candidates: pa.Table, scores: pa.Table) -> pa.Table:
    """Steps 1-5 removals plus the fate of every candidate at steps 6-8, sorted by step, wnid."""
    early = candidates_audit.append_column(
        "score", pa.nulls(candidates_audit.num_rows, pa.float64())
    )
    late = candidates.select(["wnid", "name", "n_captions"]).join(scores, "wnid")
    names = pa.array([STEP_NAMES[s] for s in late.column("step").to_pylist()], pa.string())
    late = late.append_column("step_name", names).select(FULL_AUDIT_SCHEMA.names)
    table = pa.concat_tables([early.cast(FULL_AUDIT_SCHEMA), late.cast(FULL_AUDIT_SCHEMA)])
    return table.sort_by([("step", "ascending"), ("wnid", "ascending")])


def funnel_rows(
    match_stats: list[dict],
    candidate_stats: dict,
    audit: pa.Table,
    caption_stats: list[dict],
    selection_stats: dict,
) -> list[dict]:
    """Counts after each step: synsets remaining and captions remaining where meaningful."""

    def total(stats: list[dict], key: str) -> int:
        return sum(s.get(key, 0) for s in stats)

    def row(step: int, name: str, synsets: int | None, captions: int | None, note: str) -> dict:
        return dict(zip(FUNNEL_COLUMNS, (step, name, synsets, captions, note), strict=True))

    skipped = {k: sum(s["skipped"][k] for s in match_stats) for k in SKIP_REASONS}
    skips = "skipped " + ", ".join(f"{k}={v}" for k, v in skipped.items())
    out = [
        row(0, "input", None, total(match_stats, "rows"), ""),
        row(0, "usable_captions", None, total(match_stats, "captions"), skips),
    ]
    synsets = candidate_stats["universe"]
    notes = {
        1: f"mode {candidate_stats['mode']}: {candidate_stats['universe']} synsets considered",
        6: (
            f"ambiguous captions {total(caption_stats, 'ambiguous_captions')}, punsafe removed "
            f"{total(caption_stats, 'punsafe_removed')} (of them unknown "
            f"{total(caption_stats, 'unknown_nsfw_removed')}), punsafe not a probability "
            f"{total(caption_stats, 'punsafe_not_probability')}"
        ),
        8: f"duplicate URLs removed {selection_stats['duplicate_urls_removed']}",
    }
    if candidate_stats.get("ancestors_in_list"):
        notes[4] = (
            f"list holds {candidate_stats['ancestors_in_list']} ancestors of other listed classes"
        )
    captions = {
        1: total(match_stats, "matched_captions"),
        6: total(caption_stats, "captions"),
        8: selection_stats["selected_captions"],
    }
    removed = removed_per_step(audit)
    for step, name in STEP_NAMES.items():
        synsets -= removed.get(step, 0)
        out.append(row(step, name, synsets, captions.get(step), notes.get(step, "")))
    return out


def funnel_csv(rows: list[dict]) -> str:
    """The funnel as CSV text (empty cells for counts that do not apply)."""
    import csv
    import io

    from imagenot.core.escape import csv_cell

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=FUNNEL_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: csv_cell("" if row[k] is None else row[k]) for k in FUNNEL_COLUMNS})
    return buf.getvalue()


def removed_per_step(audit: pa.Table) -> dict[int, int]:
    """Number of synsets each step removed (for reports and tests)."""
    removed = audit.filter(pc.equal(audit.column("status"), "removed"))
    return dict(Counter(removed.column("step").to_pylist()))
