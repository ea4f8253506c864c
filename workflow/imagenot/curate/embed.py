"""Step 7a, one job per LAION part: embed each distinct caption once, in resumable chunks, and
store each caption's similarity to its own class's query (one number per caption).

Why per part: laion2B-en holds an estimated 50-900 M one-class captions; one job over all of them
would hold them all in memory for days on one GPU. A part's job is bounded by the part.

Layout of a part's work directory (``results/curate/<dataset>/embeddings/<shard_id>/``):

- ``plan.json``: fingerprint of (distinct (text, class) pairs, class query vectors, encoder
  identity, chunk size, whether vectors are kept). A rerun with the same fingerprint skips
  finished chunks, so a killed job resumes at its first missing chunk and ends with identical
  files (chunk boundaries are multiples of the batch size, so every batch is the same as in an
  uninterrupted run); a different fingerprint discards the old chunks;
- ``sims-{i:06d}.npy``: float32 similarity of pairs ``[i*chunk_size, (i+1)*chunk_size)`` to their
  class query, each written atomically when finished; pairs are sorted by (length, text, wnid) and
  batched by token count (``Encoder.encode``), so each batch holds captions of similar length;
- ``vectors-{i:06d}.npy`` (only with ``curate.encoder.keep_vectors``): float16 unit vectors.

The job's declared output is the part's score table (``key``, ``row``, ``wnid``,
``similarity``), sorted by row. Class queries are embedded once per dataset (``embed_queries``).

Encoders come from the registry in ``imagenot.curate.encoders`` (``create_encoder``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imagenot.core.io import (
    atomic_path,
    read_json,
    read_npy,
    read_parquet,
    write_json,
    write_parquet,
)
from imagenot.curate.encoders import EncoderSpec, TextEncoder, create_encoder

if TYPE_CHECKING:
    from imagenot.curate.settings import EmbedSettings, QueriesSettings

log = logging.getLogger(__name__)
CHUNK_DTYPE = np.float16


SCORE_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("row", pa.int64()),
        ("wnid", pa.string()),
        ("similarity", pa.float32()),
    ]
)


def distinct_pairs(captions: pa.Table) -> pa.Table:
    """Distinct (TEXT, wnid) pairs of a caption table, sorted by (length, text, wnid), with
    ``pair_id``. A text names the same class wherever it occurs (matching depends on the text
    only), so this is the set of distinct texts; the wnid keeps it exact regardless."""
    import duckdb

    con = duckdb.connect()
    con.register("captions", captions.select(["TEXT", "wnid"]))
    table = con.sql(
        "SELECT DISTINCT TEXT, wnid FROM captions ORDER BY length(TEXT), TEXT, wnid"
    ).to_arrow_table()
    table = table.cast(pa.schema([("TEXT", pa.string()), ("wnid", pa.string())]))
    return table.add_column(0, "pair_id", pa.array(np.arange(table.num_rows, dtype=np.int64)))


def _fingerprint(*parts: bytes | str | pa.Array) -> str:
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, pa.Array | pa.ChunkedArray):
            if isinstance(part, pa.ChunkedArray):
                part = part.combine_chunks()
            part = part.cast(pa.large_string())
            for buf in part.buffers()[1:]:
                if buf is not None:
                    h.update(memoryview(buf))
        else:
            h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def class_indices(wnids, candidates: pa.Array, path, rule: str) -> np.ndarray:
    """Each of ``wnids``' index in ``candidates``; a class that is none of them means the file
    ``path`` is stale: a ValueError naming it and the ``rule`` that writes it again."""
    cls = pc.index_in(wnids, value_set=candidates)
    if cls.null_count:
        raise ValueError(
            f"{path}: names classes that are not candidates; the file is stale (rerun {rule})"
        )
    return cls.to_numpy(zero_copy_only=False).astype(np.int32)


def chunk_path(out_dir: str | os.PathLike, i: int, name: str = "chunk") -> Path:
    return Path(out_dir) / f"{name}-{i:06d}.npy"


def _save_npy(array: np.ndarray, path: Path) -> None:
    with atomic_path(path, ".npy") as tmp, open(tmp, "wb") as f:
        np.save(f, array)


def run_chunks(
    n: int,
    chunk_size: int,
    names: Sequence[str],
    process: Callable[[int, int, int], dict[str, np.ndarray]],
    out_dir: str | os.PathLike,
    fingerprint: str,
    progress: bool = True,
    on_chunk: Callable[[int], None] | None = None,
) -> int:
    """Compute the missing chunks of ``n`` items: ``process(i, start, stop)`` returns one array
    per name, saved atomically as ``{name}-{i:06d}.npy``. A chunk is done when all its files
    exist. ``plan.json`` records the fingerprint; a different one discards every old chunk.
    Returns the chunk count."""
    from tqdm import tqdm

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plan_file = out / "plan.json"
    n_chunks = (n + chunk_size - 1) // chunk_size
    plan = {
        "fingerprint": fingerprint,
        "n": n,
        "chunk_size": chunk_size,
        "n_chunks": n_chunks,
        "names": list(names),
    }
    if plan_file.exists() and read_json(plan_file) != plan:
        stale = sorted(out.glob("*-[0-9][0-9][0-9][0-9][0-9][0-9].npy"))
        log.warning("embedding plan changed: discarding %d old chunk files in %s", len(stale), out)
        for path in stale:
            path.unlink()
    write_json(plan, plan_file)

    def done(i: int) -> bool:
        return all(chunk_path(out, i, name).exists() for name in names)

    finished = sum(done(i) for i in range(n_chunks))
    if finished:
        log.info("resuming: %d of %d chunks already done", finished, n_chunks)
    with tqdm(
        total=n,
        initial=min(finished * chunk_size, n),
        unit="text",
        desc="embed",
        disable=not progress,
        mininterval=10,
    ) as bar:
        for i in range(n_chunks):
            if done(i):
                continue
            start, stop = i * chunk_size, min(n, (i + 1) * chunk_size)
            arrays = process(i, start, stop)
            for name in names:
                _save_npy(arrays[name], chunk_path(out, i, name))
            bar.update(stop - start)
            if on_chunk is not None:
                on_chunk(i)
    return n_chunks


def encoder_spec(settings: QueriesSettings) -> EncoderSpec:
    """The :class:`EncoderSpec` of a settings object's ``curate.encoder`` keys (checked there:
    a wrong key or a test-only backend without ``allow_test_only`` is named)."""
    import dataclasses

    return EncoderSpec.from_config(dataclasses.asdict(settings))


def embed_queries(
    queries: Sequence[str],
    settings: QueriesSettings,
    out: str | os.PathLike,
    text_encoder: TextEncoder | None = None,
) -> dict:
    """Unit float32 vectors of the class queries (candidates order) to ``out`` (.npy), by the
    encoder of ``settings`` (or ``text_encoder``, one already loaded)."""
    spec = encoder_spec(settings)
    encoder = text_encoder or create_encoder(spec)
    _save_npy(encoder.encode(list(queries)).astype(np.float32), Path(out))  # (0, dim) for none
    return {"n_queries": len(queries), "dim": encoder.dim, "encoder": spec.identity()}


def embed_part(
    captions_path: str | os.PathLike,
    class_wnids: Sequence[str],
    query_vectors: np.ndarray,
    settings: EmbedSettings,
    work_dir: str | os.PathLike,
    out_scores: str | os.PathLike,
    text_encoder: TextEncoder | None = None,
    on_chunk: Callable[[int], None] | None = None,
    progress: bool = True,
) -> dict:
    """Similarity of every caption of one part to its own class's query; write the score table.

    ``class_wnids`` and ``query_vectors`` are the candidates in the same order; the encoder is
    ``settings``' (or ``text_encoder``, one already loaded), in chunks of
    ``settings.chunk_size`` captions. Returns stats (captions, distinct pairs, chunks, encoder
    identity).
    """

    spec = encoder_spec(settings)
    chunk_size, keep_vectors = settings.chunk_size, settings.keep_vectors
    if chunk_size % spec.batch_size:
        raise ValueError(
            f"config key curate.encoder.chunk_size ({chunk_size}) must be a multiple of "
            f"batch_size ({spec.batch_size}) so that a resumed run repeats the same batches"
        )
    if len(query_vectors) != len(class_wnids):
        raise ValueError(
            f"{len(query_vectors)} query vectors for {len(class_wnids)} classes; rerun curate_queries"
        )
    captions = read_parquet(captions_path, columns=["key", "row", "TEXT", "wnid"])
    pairs = distinct_pairs(captions)
    candidates = pa.array(list(class_wnids), pa.string())
    cls = class_indices(pairs.column("wnid"), candidates, captions_path, "curate_captions")
    queries = np.ascontiguousarray(query_vectors, dtype=np.float32)
    names = ("sims", "vectors") if keep_vectors else ("sims",)
    fingerprint = _fingerprint(
        pairs.column("TEXT"),
        pairs.column("wnid"),
        queries.tobytes(),
        json.dumps({**spec.identity(), "chunk_size": chunk_size, "names": names}, sort_keys=True),
    )
    column = pairs.column("TEXT")
    loaded = {}

    def process(i: int, start: int, stop: int) -> dict[str, np.ndarray]:
        if "encoder" not in loaded:  # a finished part never loads the model
            loaded["encoder"] = text_encoder or create_encoder(spec)
        vectors = loaded["encoder"].encode(column.slice(start, stop - start).to_pylist())
        sims = np.einsum("ij,ij->i", vectors, queries[cls[start:stop]]).astype(np.float32)
        arrays = {"sims": sims}
        if keep_vectors:
            arrays["vectors"] = vectors.astype(CHUNK_DTYPE)
        return arrays

    work = Path(work_dir)
    n_chunks = run_chunks(
        pairs.num_rows, chunk_size, names, process, work, fingerprint, progress, on_chunk
    )
    sims = np.concatenate(
        [np.empty(0, np.float32)] + [read_npy(chunk_path(work, i, "sims")) for i in range(n_chunks)]
    )
    # every caption's (TEXT, wnid) is one of ``pairs``: the join scores each caption once
    scored = pairs.append_column("similarity", pa.array(sims, pa.float32()))
    joined = captions.join(scored.drop_columns("pair_id"), keys=["TEXT", "wnid"])
    scores = joined.select(SCORE_SCHEMA.names).sort_by("row").cast(SCORE_SCHEMA)
    write_parquet(scores, out_scores)
    return {
        "captions": captions.num_rows,
        "distinct_pairs": pairs.num_rows,
        "n_chunks": n_chunks,
        "chunk_size": chunk_size,
        "keep_vectors": keep_vectors,
        "encoder": spec.identity(),
    }
