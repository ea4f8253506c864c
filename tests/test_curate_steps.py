"""Steps 2-8 on small synthetic inputs: candidates, single-class captions, selection, audit."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imagenot.curate.audit import audit_table, funnel_csv, funnel_rows, removed_per_step
from imagenot.curate.candidates import build_candidates, count_matches, read_class_list
from imagenot.curate.captions import one_class_rows, shard_captions
from imagenot.curate.select import (
    caption_similarities,
    class_table,
    score_classes,
    select_captions,
)

DOG, CANINE, HOTDOG_FOOD, HOTDOG_PERSON, OAK, TULIP = (
    "n02084071",
    "n02083346",
    "n07697537",
    "n10187710",
    "n12268246",
    "n12454159",
)
NSFW_CFG = {
    "filters": ["wordnet"],
    "usage_domains": ["obscenity.n.02"],
    "gloss_cues": ["obscene"],
    "words": ["tulip"],
    "hf_classifier": {},
}


@pytest.fixture(scope="module")
def obscene_wnid(wn):
    """A synset in usage domain obscenity that shares no lemma with an ImageNet class."""
    from imagenot.curate.candidates import imagenet_overlap, lemma_keys
    from imagenot.wordnet import imagenet_wnids, noun_lemma_table, wnid

    keys = lemma_keys(noun_lemma_table(wn))
    for synset in wn.all_synsets("n"):
        obscene = any(d.name() == "obscenity.n.02" for d in synset.usage_domains())
        if obscene and not imagenet_overlap([wnid(synset)], keys, imagenet_wnids()):
            return wnid(synset)
    pytest.skip("no synset with usage domain obscenity.n.02 in this WordNet")


@pytest.fixture(scope="module")
def counts(obscene_wnid):
    return {
        DOG: 50,
        CANINE: 60,
        HOTDOG_FOOD: 50,
        HOTDOG_PERSON: 50,
        OAK: 2,
        TULIP: 50,
        obscene_wnid: 50,
    }


def _fate(audit: pa.Table) -> dict[str, tuple[int, str]]:
    return {
        w: (s, r)
        for w, s, r in zip(
            audit.column("wnid").to_pylist(),
            audit.column("step").to_pylist(),
            audit.column("reason").to_pylist(),
            strict=True,
        )
    }


def test_discover_removes_each_hazard_at_its_step(wn, counts, obscene_wnid):
    from imagenot.wordnet import imagenet_wnids

    table, audit, stats = build_candidates(
        counts, wn, "discover", 5, NSFW_CFG, "{name} which is {gloss}", imagenet_wnids()
    )
    fate = _fate(audit)
    assert table.column("wnid").to_pylist() == [DOG]
    assert fate[HOTDOG_FOOD] == (2, "ImageNet class")
    assert fate[HOTDOG_PERSON][0] == 2 and "shares lemma" in fate[HOTDOG_PERSON][1]
    assert fate[OAK][0] == 3
    assert fate[CANINE] == (4, f"ancestor of {DOG}")
    assert fate[TULIP] == (5, "word list 'tulip'")
    assert fate[obscene_wnid][0] == 5 and "obscenity" in fate[obscene_wnid][1]
    assert stats["universe"] == len(counts) and stats["candidates"] == 1
    assert table.column("query").to_pylist()[0].startswith("dog which is a member of the genus")
    assert removed_per_step(audit) == {2: 2, 3: 1, 4: 1, 5: 2}


def test_imagenet_mode_keeps_present_imagenet_classes(wn, counts):
    from imagenot.wordnet import imagenet_wnids

    table, audit, stats = build_candidates(
        counts, wn, "imagenet", 5, NSFW_CFG, "{name}", imagenet_wnids()
    )
    assert table.column("wnid").to_pylist() == [HOTDOG_FOOD]
    assert stats["universe"] == 1000
    assert removed_per_step(audit) == {1: 999}


def test_published_list_mode(wn, counts, tmp_path):
    path = tmp_path / "classes.txt"
    path.write_text(f"{CANINE}\n# a comment\n{DOG}\n\nn00000000x\n".replace("n00000000x", OAK))
    table, audit, stats = build_candidates(
        {**counts, OAK: 0}, wn, str(path), 10**6, NSFW_CFG, "{name}", []
    )
    assert table.column("wnid").to_pylist() == [CANINE, DOG]  # list order, no count threshold
    assert _fate(audit)[OAK][0] == 1
    assert stats["ancestors_in_list"] == 1 and stats["mode"] == "list"
    assert "ancestor of listed" in table.column("note").to_pylist()[0]


def test_class_list_errors_name_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("n02084071\ndog\n")
    with pytest.raises(ValueError, match=r"bad.txt, line 2: 'dog' is not a noun wnid"):
        read_class_list(path)


def test_published_list_real_file(shared_data):
    wnids = read_class_list(shared_data / "imagenot_classes_2024-05-25.txt")
    assert len(wnids) == 1000 and len(set(wnids)) == 1000


def test_count_matches_with_duckdb(tmp_path):
    for i, rows in enumerate([[0, 0, 1], [5]]):
        pq.write_table(
            pa.table({"row": pa.array(rows, pa.int64()), "wnid": ["a", "b", "a"][: len(rows)]}),
            tmp_path / f"m{i}.parquet",
        )
    assert count_matches(sorted(tmp_path.glob("m*.parquet"))) == {"a": 3, "b": 1}


def _shard(tmp_path):
    path = tmp_path / "part-00000.parquet"
    pq.write_table(
        pa.table(
            {
                "URL": ["u0", "u1", "u2", "u3", "u4", None],
                "TEXT": ["a dog", "dog and tulip", "dog on a moon", "moon", "dog", "dog"],
                "hash": pa.array([10, 11, 12, 13, 14, 15], pa.int64()),
                "punsafe": pa.array([0.0, 0.0, 0.1, 0.0, 0.9, 0.0], pa.float32()),
            }
        ),
        path,
    )
    matches = pa.table(
        {
            "row": pa.array([0, 1, 1, 2, 2, 3, 4, 5], pa.int64()),
            "wnid": [DOG, DOG, TULIP, DOG, "n09358358", "n09358358", DOG, DOG],
        }
    )
    return path, matches


def test_one_class_rows():
    matches = pa.table(
        {"row": pa.array([0, 1, 1, 2, 2], pa.int64()), "wnid": ["a", "a", "b", "a", "z"]}
    )
    table, stats = one_class_rows(matches, ["a", "b"])
    assert table.to_pylist() == [{"row": 0, "wnid": "a"}, {"row": 2, "wnid": "a"}]
    assert stats == {"class_captions": 3, "ambiguous_captions": 1}


def test_shard_captions_single_class_punsafe_and_url(tmp_path):
    path, matches = _shard(tmp_path)
    table, stats = shard_captions(path, "part-00000", matches, [DOG, TULIP], max_punsafe=0.5)
    assert table.column("row").to_pylist() == [0, 2]
    assert table.column("key").to_pylist() == ["part-00000-000000000", "part-00000-000000002"]
    assert table.column("hash").to_pylist() == [10, 12]
    assert stats["ambiguous_captions"] == 1
    assert stats["punsafe_removed"] == 1 and stats["null_url_removed"] == 1


def _captions_and_vectors():
    captions = pa.table(
        {
            "key": [f"s-{i:09d}" for i in range(6)],
            "shard": ["s"] * 6,
            "row": pa.array(range(6), pa.int64()),
            "URL": ["u0", "u1", "u2", "u3", "u4", "u0"],
            "TEXT": ["a1", "a2", "a3", "b1", "b2", "b3"],
            "hash": pa.nulls(6, pa.int64()),
            "wnid": ["A", "A", "A", "B", "B", "B"],
        }
    )
    texts = pa.table(
        {"text_id": pa.array(range(6), pa.int64()), "TEXT": ["b3", "a1", "a2", "a3", "b1", "b2"]}
    )
    angle = {"a1": 0.1, "a2": 0.5, "a3": 0.3, "b1": 1.2, "b2": 1.0, "b3": 0.2}
    vectors = np.array(
        [[np.cos(angle[t]), np.sin(angle[t])] for t in texts.column("TEXT").to_pylist()],
        np.float16,
    )
    queries = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    return captions, texts, vectors, queries, angle


def test_similarity_score_threshold_and_top_classes():
    captions, texts, vectors, queries, angle = _captions_and_vectors()
    sims = caption_similarities(captions, texts, vectors, ["A", "B"], queries)
    expected = [np.cos(angle["a1"]), np.cos(angle["a2"]), np.cos(angle["a3"])]
    expected += [np.sin(angle["b1"]), np.sin(angle["b2"]), np.sin(angle["b3"])]
    assert np.allclose(sims, expected, atol=2e-3)
    candidates = pa.table(
        {
            "wnid": ["A", "B", "C"],
            "name": ["a", "b", "c"],
            "gloss": ["", "", ""],
            "query": ["", "", ""],
            "note": ["", "", ""],
        }
    )
    scores = score_classes(candidates, captions, sims, top_n=2, threshold=0.5, n_classes=1)
    a_score = (np.cos(0.1) + np.cos(0.3)) / 2
    assert scores.column("score").to_pylist()[0] == pytest.approx(a_score, abs=2e-3)
    assert scores.column("step").to_pylist() == [8, 8, 6]
    assert scores.column("status").to_pylist() == ["kept", "removed", "removed"]
    assert scores.column("rank").to_pylist() == [1, 2, 0]
    strict = score_classes(candidates, captions, sims, top_n=2, threshold=0.95, n_classes=None)
    assert strict.column("step").to_pylist() == [8, 7, 6]
    classes = class_table(candidates, scores)
    assert (
        classes.column("wnid").to_pylist() == ["A"] and classes.column("n_captions")[0].as_py() == 3
    )


def test_select_captions_top_per_class_one_use_per_url():
    captions, texts, vectors, queries, _ = _captions_and_vectors()
    sims = caption_similarities(captions, texts, vectors, ["A", "B"], queries)
    selection, stats = select_captions(captions, sims, ["A", "B"], per_class=2)
    rows = selection.to_pylist()
    assert [(r["wnid"], r["TEXT"], r["rank_in_class"]) for r in rows] == [
        ("A", "a1", 1),
        ("A", "a3", 2),
        ("B", "b1", 1),
        ("B", "b2", 2),
    ]
    assert stats["duplicate_urls_removed"] == 1  # b3 shares u0 with the more similar a1
    assert selection.schema.field("similarity").type == pa.float32()
    assert len(set(selection.column("key").to_pylist())) == selection.num_rows


def test_audit_and_funnel(wn, counts):
    from imagenot.wordnet import imagenet_wnids

    candidates, early, stats = build_candidates(
        counts, wn, "discover", 5, NSFW_CFG, "{name}", imagenet_wnids()
    )
    scores = pa.table(
        {
            "wnid": [DOG],
            "score": [0.9],
            "n_selectable": pa.array([3], pa.int64()),
            "step": pa.array([8], pa.int32()),
            "status": ["kept"],
            "reason": ["rank 1"],
            "rank": pa.array([1], pa.int64()),
        }
    )
    audit = audit_table(early, candidates, scores)
    assert audit.num_rows == len(counts)
    assert set(audit.column("wnid").to_pylist()) == set(counts)
    match_stats = [
        {
            "rows": 10,
            "captions": 8,
            "matched_captions": 7,
            "skipped": {"null": 1, "empty": 1, "invalid_utf8": 0, "too_long": 0},
        }
    ]
    caption_stats = [{"ambiguous_captions": 2, "punsafe_removed": 1, "captions": 3}]
    rows = funnel_rows(
        match_stats,
        stats,
        audit,
        caption_stats,
        {"duplicate_urls_removed": 0, "selected_captions": 3},
    )
    by_name = {r["step_name"]: r for r in rows}
    assert by_name["match"]["synsets"] == 7
    assert by_name["imagenet_overlap"]["synsets"] == 5
    assert by_name["nsfw"]["synsets"] == 1
    assert by_name["top_classes"]["synsets"] == 1 and by_name["top_classes"]["captions"] == 3
    text = funnel_csv(rows)
    assert text.splitlines()[0] == "step,step_name,synsets,captions,note"
    assert "null=1" in text


def test_faiss_on_a_gpu_is_refused_clearly_without_one():
    faiss = pytest.importorskip("faiss", reason="faiss is the similarity step's search library")
    from imagenot.curate.select import inner_product_index

    assert inner_product_index("cpu") is faiss.IndexFlatIP
    if hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        pytest.skip("a GPU faiss with a GPU is present: the refusal cannot be shown here")
    with pytest.raises(RuntimeError, match=r"curate\.faiss_device.*envs/curate_gpu\.yaml"):
        inner_product_index("cuda")
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        inner_product_index("mps")


def _tiny_text_classifier(path):
    """A randomly initialised two-label BERT classifier with a word-level tokenizer, saved as
    a Hugging Face model directory (what curate.nsfw.hf_classifier.local_path points at)."""
    torch = pytest.importorskip("torch", reason="the classifier filter runs a torch model")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "cat", "dog", "animal", "kept", "as", "pet"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]",
    )  # fmt: skip
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(words), hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=16, max_position_embeddings=32, num_labels=2,
        id2label={0: "SAFE", 1: "NSFW"}, label2id={"SAFE": 0, "NSFW": 1},
    )  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_hf_classifier_filter_runs_a_local_model_and_names_missing_config(tmp_path):
    import copy

    from imagenot.config import validate_config
    from imagenot.curate.nsfw import nsfw_reasons

    model_dir = str(_tiny_text_classifier(tmp_path / "classifier"))
    cfg = copy.deepcopy(validate_config({})["curate"]["nsfw"])
    cfg["filters"] = ["hf_classifier"]
    table = pa.table({"name": ["cat", "dog"], "gloss": ["a cat kept as pet", "a dog"]})
    cfg["hf_classifier"].update(local_path=model_dir, label="NSFW", threshold=0.0)
    assert all(r.startswith("classifier NSFW score ") for r in nsfw_reasons(table, cfg, None))
    cfg["hf_classifier"]["threshold"] = 1.01  # no probability reaches it
    assert nsfw_reasons(table, cfg, None) == ["", ""]
    cfg["hf_classifier"].update(local_path=None, model=None)
    with pytest.raises(ValueError, match=r"curate\.nsfw\.hf_classifier\.model"):
        nsfw_reasons(table, cfg, None)
    cfg["filters"] = ["nope"]
    with pytest.raises(ValueError, match=r"unknown filter 'nope'; known: \['hf_classifier'"):
        nsfw_reasons(table, cfg, None)
