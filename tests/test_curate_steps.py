"""Steps 2-8 on small synthetic inputs: candidates, single-class captions, selection, audit."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imagenot.curate.audit import audit_table, funnel_csv, funnel_rows, removed_per_step
from imagenot.curate.candidates import build_candidates, read_class_list, sum_counts
from imagenot.curate.captions import one_class_rows, write_shard_captions
from imagenot.curate.select import (
    ShortfallError,
    candidate_rows,
    check_class_count,
    class_table,
    score_classes,
    select_captions,
    top_captions,
)
from imagenot.curate.settings import CandidatesSettings, CaptionSettings, SelectSettings

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


def _candidates(classes: str, min_count: int, template: str) -> CandidatesSettings:
    return CandidatesSettings(classes, min_count, template, NSFW_CFG)


def _caption_settings(
    shard: str, batch_rows: int, max_punsafe: float | None = 0.5, unknown_nsfw: str = "unsafe"
) -> CaptionSettings:
    return CaptionSettings(shard, max_punsafe, ["NSFW"], unknown_nsfw, batch_rows)


def _select(**fields) -> SelectSettings:
    """Selection settings of a discovered dataset; one caption per class, one in reserve."""
    base = dict(dataset="imagenot", classes="discover", top_n=2, threshold=0.5)
    base.update(apply_threshold_to_lists=False, n_classes=1, images_per_class=1, oversample=0.0)
    base.update(reserve=1.0, allow_fewer_classes=False, select_batch_rows=1 << 20)
    return SelectSettings(**{**base, **fields})


@pytest.fixture(scope="module")
def obscene_wnid(wn):
    """A synset in usage domain obscenity that shares no lemma with an ImageNet class."""
    from imagenot.core.wordnet import imagenet_wnids, noun_lemma_table, wnid
    from imagenot.curate.candidates import imagenet_overlap, lemma_keys

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
    from imagenot.core.wordnet import imagenet_wnids

    table, audit, stats = build_candidates(
        counts, wn, _candidates("discover", 5, "{name} which is {gloss}"), imagenet_wnids()
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
    from imagenot.core.wordnet import imagenet_wnids

    table, audit, stats = build_candidates(
        counts, wn, _candidates("imagenet", 5, "{name}"), imagenet_wnids()
    )
    assert table.column("wnid").to_pylist() == [HOTDOG_FOOD]
    assert stats["universe"] == 1000
    assert removed_per_step(audit) == {1: 999}


def test_published_list_mode(wn, counts, tmp_path):
    path = tmp_path / "classes.txt"
    path.write_text(f"{CANINE}\n# a comment\n{DOG}\n\nn00000000x\n".replace("n00000000x", OAK))
    listed = _candidates({"from_file": str(path), "allow_imagenet_classes": False}, 10**6, "{name}")
    table, audit, stats = build_candidates({**counts, OAK: 0}, wn, listed, [])
    assert table.column("wnid").to_pylist() == [CANINE, DOG]  # list order, no count threshold
    assert _fate(audit)[OAK][0] == 1
    assert stats["ancestors_in_list"] == 1 and stats["mode"] == "list"
    assert "ancestor of listed" in table.column("note").to_pylist()[0]


def test_class_list_errors_name_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("n02084071\ndog\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: malformed WordNet noun id 'dog'"):
        read_class_list(path)


def test_an_unreadable_class_list_is_one_error_naming_the_file(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("n02084071 # chien \xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.txt: cannot read the class list \(.*utf-8"):
        read_class_list(path)
    (tmp_path / "ok.txt").write_text("n02084071 # chien\n")
    assert read_class_list(tmp_path / "ok.txt") == ["n02084071"]


def test_published_list_real_file(class_lists):
    wnids = read_class_list(class_lists / "imagenot_classes_2024-05-25.txt")
    assert len(wnids) == 1000 and len(set(wnids)) == 1000


def test_class_counts_are_summed_over_shard_count_files(tmp_path):
    for i, (wnids, ns) in enumerate([(["a", "b"], [2, 1]), (["a", "c"], [1, 4])]):
        pq.write_table(
            pa.table({"wnid": wnids, "n": pa.array(ns, pa.int64())}), tmp_path / f"{i}.parquet"
        )
    assert sum_counts(sorted(tmp_path.glob("*.parquet"))) == {"a": 3, "b": 1, "c": 4}


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


def _captions(tmp_path, batch_rows, matches_row_group=None, name="out"):
    path, matches = _shard(tmp_path)
    mpath = tmp_path / "matches.parquet"
    pq.write_table(matches, mpath, row_group_size=matches_row_group or matches.num_rows)
    out = tmp_path / f"{name}.parquet"
    settings = _caption_settings("00007", batch_rows)
    stats = write_shard_captions(path, mpath, [DOG, TULIP], out, settings)
    return pq.read_table(out), stats


def test_shard_captions_single_class_punsafe_and_url(tmp_path):
    table, stats = _captions(tmp_path, batch_rows=1000)
    assert table.column("row").to_pylist() == [0, 2]
    # keys carry the shard's short id, never its file name; the file name is kept
    assert table.column("key").to_pylist() == ["00007-000000000", "00007-000000002"]
    assert table.column("shard").to_pylist() == ["part-00000.parquet"] * 2
    assert table.column("hash").to_pylist() == [10, 12]
    assert stats["ambiguous_captions"] == 1
    assert stats["punsafe_removed"] == 1 and stats["null_url_removed"] == 1


def test_shard_captions_stream_equals_one_batch(tmp_path):
    """Tiny batches (a caption's matches split across match row groups and shard batches) give
    the same table and counts as one batch."""
    whole, whole_stats = _captions(tmp_path, batch_rows=1000, name="whole")
    for batch_rows, group in [(1, 1), (2, 3), (3, 2)]:
        table, stats = _captions(tmp_path, batch_rows, group, name=f"b{batch_rows}")
        assert table.equals(whole) and stats == whole_stats


def test_stale_match_file_is_named(tmp_path):
    path, _ = _shard(tmp_path)
    mpath = tmp_path / "m.parquet"
    pq.write_table(pa.table({"row": pa.array([0, 99], pa.int64()), "wnid": [DOG, DOG]}), mpath)
    with pytest.raises(ValueError, match=r"beyond the shard's 6 rows.*stale"):
        settings = _caption_settings("00000", 2, max_punsafe=None)
        write_shard_captions(path, mpath, [DOG], tmp_path / "o.parquet", settings)


def test_string_typed_hash_is_named(tmp_path):
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"URL": ["u"], "TEXT": ["dog"], "hash": ["not a number"]}), path)
    mpath = tmp_path / "m.parquet"
    pq.write_table(pa.table({"row": pa.array([0], pa.int64()), "wnid": [DOG]}), mpath)
    with pytest.raises(ValueError, match=r"s\.parquet: column 'hash' cannot be read as int64"):
        settings = _caption_settings("00000", 10, max_punsafe=None)
        write_shard_captions(path, mpath, [DOG], tmp_path / "o.parquet", settings)


# Two parts of scored captions: class A's and B's similarities; u0 is used twice (a1 and b3).
PARTS = [
    {"TEXT": ["a1", "a2", "b1"], "wnid": ["A", "A", "B"], "URL": ["u0", "u1", "u3"]},
    {"TEXT": ["a3", "b2", "b3"], "wnid": ["A", "B", "B"], "URL": ["u2", "u4", "u0"]},
]
SIM = {"a1": 0.9, "a2": 0.6, "a3": 0.8, "b1": 0.4, "b2": 0.5, "b3": 0.7}


def _parts(tmp_path):
    score_files, caption_files = [], []
    for i, part in enumerate(PARTS):
        n = len(part["TEXT"])
        keys = [f"{i:05d}-{r:09d}" for r in range(n)]
        captions = pa.table(
            {
                "key": keys,
                "shard": [f"part-{i}.snappy.parquet"] * n,
                "row": pa.array(range(n), pa.int64()),
                "URL": part["URL"],
                "TEXT": part["TEXT"],
                "hash": pa.nulls(n, pa.int64()),
                "wnid": part["wnid"],
            }
        )
        scores = pa.table(
            {
                "key": keys,
                "row": pa.array(range(n), pa.int64()),
                "wnid": part["wnid"],
                "similarity": pa.array([SIM[t] for t in part["TEXT"]], pa.float32()),
            }
        )
        caption_files.append(tmp_path / f"c{i}.parquet")
        score_files.append(tmp_path / f"s{i}.parquet")
        pq.write_table(captions, caption_files[-1])
        pq.write_table(scores, score_files[-1])
    return score_files, caption_files


CANDIDATES = pa.table(
    {
        "wnid": ["A", "B", "C"],
        "name": ["a", "b", "c"],
        "gloss": ["", "", ""],
        "query": ["", "", ""],
        "note": ["", "", ""],
    }
)


def test_score_threshold_and_top_classes(tmp_path):
    score_files, _ = _parts(tmp_path)
    top, counts = top_captions(score_files, ["A", "B", "C"], 2, _select(select_batch_rows=1))
    assert counts.tolist() == [3, 3, 0]
    scores = score_classes(CANDIDATES, top, counts, _select(threshold=0.5, n_classes=1))
    assert scores.column("score").to_pylist()[0] == pytest.approx((0.9 + 0.8) / 2, abs=1e-6)
    assert scores.column("score").to_pylist()[1] == pytest.approx((0.7 + 0.5) / 2, abs=1e-6)
    assert scores.column("step").to_pylist() == [8, 8, 6]
    assert scores.column("status").to_pylist() == ["kept", "removed", "removed"]
    assert scores.column("rank").to_pylist() == [1, 2, 0]
    strict = score_classes(CANDIDATES, top, counts, _select(threshold=0.7, n_classes=3))
    assert strict.column("step").to_pylist() == [8, 7, 6]
    classes = class_table(CANDIDATES, scores)
    assert classes.column("wnid").to_pylist() == ["A"]
    assert classes.column("n_captions")[0].as_py() == 3


def test_top_captions_equal_a_global_sort_whatever_the_batches(tmp_path):
    """The running per-class top-k over parts and batches is the exact top-k of all rows."""
    rng = np.random.default_rng(0)
    files, rows = [], []
    for part in range(3):
        n = 200
        wnids = rng.choice(["A", "B", "C", "D"], n).tolist()
        sims = rng.choice(np.linspace(0, 1, 50), n).astype(np.float32)  # ties on purpose
        keys = [f"{part:05d}-{r:09d}" for r in range(n)]
        table = pa.table(
            {
                "key": keys,
                "row": pa.array(range(n), pa.int64()),
                "wnid": wnids,
                "similarity": pa.array(sims),
            }
        )
        files.append(tmp_path / f"{part}.parquet")
        pq.write_table(table, files[-1])
        rows += list(zip(wnids, (-sims).tolist(), keys, strict=True))
    expected = {}
    for wnid, _neg_sim, key in sorted(rows):
        expected.setdefault(wnid, [])
        if len(expected[wnid]) < 7:
            expected[wnid].append(key)
    for batch_rows in (1, 13, 10_000):
        settings = _select(select_batch_rows=batch_rows)
        top, counts = top_captions(files, ["A", "B", "C", "D"], 7, settings)
        got = {}
        for cls, key in zip(
            top.column("cls").to_pylist(), top.column("key").to_pylist(), strict=True
        ):
            got.setdefault("ABCD"[cls], []).append(key)
        assert got == expected
        assert counts.sum() == 600


def test_select_top_per_class_reserve_and_one_use_per_url(tmp_path):
    score_files, caption_files = _parts(tmp_path)
    settings = _select(threshold=-1.0, n_classes=2)  # every class with captions passes
    top, counts = top_captions(score_files, ["A", "B", "C"], 3, settings)
    scores = score_classes(CANDIDATES, top, counts, settings)
    rows = candidate_rows(top, scores, caption_files)
    selection, reserve, stats = select_captions(rows, ["A", "B"], settings)  # 1 + 1 per class
    assert [(r["wnid"], r["TEXT"], r["rank_in_class"]) for r in selection.to_pylist()] == [
        ("A", "a1", 1),
        ("B", "b2", 1),
    ]
    assert [(r["wnid"], r["TEXT"], r["rank_in_class"]) for r in reserve.to_pylist()] == [
        ("A", "a3", 2),
        ("B", "b1", 2),
    ]
    assert stats["duplicate_urls_removed"] == 1  # b3 shares u0 with the more similar a1
    assert selection.schema.field("similarity").type == pa.float32()
    assert selection.column("shard").to_pylist() == [
        "part-0.snappy.parquet",
        "part-1.snappy.parquet",
    ]


def test_too_few_classes_stop_with_numbers_and_keys(tmp_path):
    score_files, _ = _parts(tmp_path)
    settings = _select(threshold=0.7, n_classes=2)
    top, counts = top_captions(score_files, ["A", "B", "C"], 2, settings)
    scores = score_classes(CANDIDATES, top, counts, settings)
    with pytest.raises(ShortfallError) as err:
        check_class_count(scores, settings)
    message = str(err.value)
    assert "1 classes pass, 2 wanted" in message and "1 under the similarity threshold" in message
    assert "curate.threshold" in message and "curate.allow_fewer_classes" in message
    check_class_count(
        scores, _select(threshold=0.7, n_classes=2, allow_fewer_classes=True)
    )  # allowed
    check_class_count(scores, _select(threshold=0.7, n_classes=1))  # enough: no error
    never = _select(threshold=0.99, n_classes=2, allow_fewer_classes=True)
    none = score_classes(CANDIDATES, top, counts, never)
    with pytest.raises(ShortfallError, match="0 classes pass"):  # never an empty dataset
        check_class_count(none, never)


def test_a_datasets_allow_fewer_leaves_the_class_count_stop_on(tmp_path):
    """``datasets.<name>.allow_fewer`` is acquisition's (classes short of images): it must not
    also let the selection go on with fewer than ``n_classes`` classes, which only
    ``curate.allow_fewer_classes`` does."""
    from imagenot.acquire.settings import FillSettings
    from imagenot.core.config import validate_config

    curate = {"threshold": 0.7, "n_classes": 2, "top_n": 2, "images_per_class": 1}
    curate.update(oversample=0.0, reserve=1.0)
    config = validate_config(
        {"datasets": {"imagenot": {"kind": "laion", "allow_fewer": True}}, "curate": curate}
    )
    assert FillSettings.from_config(config, dataset="imagenot").allow_fewer is True
    settings = SelectSettings.from_config(config, dataset="imagenot")
    assert settings.allow_fewer_classes is False
    score_files, _ = _parts(tmp_path)
    top, counts = top_captions(score_files, ["A", "B", "C"], 2, settings)
    scores = score_classes(CANDIDATES, top, counts, settings)
    with pytest.raises(ShortfallError, match="1 classes pass, 2 wanted"):
        check_class_count(scores, settings)
    config["curate"]["allow_fewer_classes"] = True
    check_class_count(scores, SelectSettings.from_config(config, dataset="imagenot"))


def test_audit_and_funnel(wn, counts):
    from imagenot.core.wordnet import imagenet_wnids

    candidates, early, stats = build_candidates(
        counts, wn, _candidates("discover", 5, "{name}"), imagenet_wnids()
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

    from imagenot.core.config import ConfigError, validate_config
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
    with pytest.raises(ConfigError, match=r"curate\.nsfw\.filters.*'nope' is not allowed"):
        validate_config({"curate": {"nsfw": {"filters": ["nope"]}}})
    cfg["filters"] = ["nope"]  # past the schema: the registry names what it holds
    with pytest.raises(ValueError, match=r"unknown NSFW filter 'nope'; registered: wordnet"):
        nsfw_reasons(table, cfg, None)


@pytest.mark.parametrize(
    ("columns", "policy", "kept"),
    [
        # laion2B layout: punsafe above the cut goes; a null punsafe is unsafe by default
        ({"punsafe": pa.array([0.1, 0.9, None], pa.float32())}, "unsafe", [0]),
        ({"punsafe": pa.array([0.1, 0.9, None], pa.float32())}, "safe", [0, 2]),
        # punsafe stored as strings (some releases) parses
        ({"punsafe": pa.array(["0.1", "0.9", None])}, "unsafe", [0]),
        # a NaN punsafe is no probability: treated as a null one, whatever the policy
        ({"punsafe": pa.array([0.1, 0.9, float("nan")], pa.float32())}, "unsafe", [0]),
        ({"punsafe": pa.array([0.1, 0.9, float("nan")], pa.float32())}, "safe", [0, 2]),
        ({"punsafe": pa.array(["0.1", "0.9", "nan"])}, "unsafe", [0]),
        # so is every value outside [0, 1]: never safe or unsafe by accident
        *(
            ({"punsafe": pa.array([0.1, 0.9, bad], pa.float64())}, policy, kept)
            for bad in (float("-inf"), float("inf"), -2.0, 7.5, -1e-9, 1.000001)
            for policy, kept in (("unsafe", [0]), ("safe", [0, 2]))
        ),
        ({"punsafe": pa.array(["0.1", "0.9", "7.5"])}, "safe", [0, 2]),
        ({"punsafe": pa.array([0.0, 1.0, None], pa.float32())}, "safe", [0, 2]),  # the bounds
        # other spellings of the LAION releases are the same columns
        ({"p_unsafe": pa.array([0.1, 0.9, None], pa.float32())}, "unsafe", [0]),
        ({"nsfw": pa.array(["UNLIKELY", "NSFW", None])}, "unsafe", [0]),
        # LAION-400M layout: the NSFW tag column
        ({"NSFW": pa.array(["UNLIKELY", "NSFW", None])}, "unsafe", [0]),
        ({"NSFW": pa.array(["UNSURE", "NSFW", None])}, "safe", [0, 2]),
    ],
)
def test_laion_unsafe_signal_of_each_layout(tmp_path, columns, policy, kept):
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"URL": ["u0", "u1", "u2"], "TEXT": ["dog"] * 3, **columns}), path)
    mpath = tmp_path / "m.parquet"
    pq.write_table(pa.table({"row": pa.array([0, 1, 2], pa.int64()), "wnid": [DOG] * 3}), mpath)
    out = tmp_path / "o.parquet"
    settings = _caption_settings("00000", 10, max_punsafe=0.5, unknown_nsfw=policy)
    stats = write_shard_captions(path, mpath, [DOG], out, settings)
    assert pq.read_table(out).column("row").to_pylist() == kept
    assert stats["punsafe_removed"] == 3 - len(kept)
    assert stats["unknown_nsfw_removed"] == (1 if policy == "unsafe" else 0)
    values = next(iter(columns.values())).to_pylist() if "punsafe" in columns else []
    improbable = sum(not 0.0 <= float(v) <= 1.0 for v in values if v is not None)
    assert stats["punsafe_not_probability"] == improbable
