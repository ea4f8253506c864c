"""The demo world: deterministic bytes, the declared schema, every curation hazard, the images."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from imagenot.cli import main
from imagenot.core.config import ConfigError, validate_config
from imagenot.core.settings import to_json
from imagenot.core.wordnet import imagenet_wnids, lemma_text, synset_of
from imagenot.demo import plan
from imagenot.demo.cli import demo_settings
from imagenot.demo.planted import (
    PLANT_KINDS,
    PLANTED_FILE,
    PLANTED_SCHEMA,
    PlantedError,
    check_planted,
)
from imagenot.demo.settings import DemoSettings
from imagenot.demo.world import CHUNK_ROWS, LAION_SCHEMA, build_world, write_world

SMALL = {
    "enabled": True,
    "rows_per_shard": 800,
    "n_survivors": 6,
    "n_imagenet_classes": 6,
    "captions_per_class_min": 40,
    "captions_per_class_max": 60,
    "captions_per_hazard_class": 20,
    "rare_captions_max": 5,
    "n_rare": 22,
    "two_class_captions": 50,
    "broken_url_fraction": 0.05,
    "corrupt_fraction": 0.02,
    "non_image_fraction": 0.01,
}
# the LAION shards the world writes: the laion section's (two of the default pattern)
SHARDS = ["part-00000.parquet", "part-00001.parquet"]


def _build(wn, out: Path, seed: int, workers: int = 1) -> Path:
    settings = demo_settings(json.dumps(SMALL), seed)
    write_world(build_world(wn, settings, SHARDS), out, settings, workers=workers)
    return out


@pytest.fixture(scope="module")
def world_dir(tmp_path_factory, nltk_data) -> Path:
    """The small world, seed 0, built through the CLI."""
    out = tmp_path_factory.mktemp("world_a")
    rc = main(
        [
            *("demo-world", "--nltk-data", str(nltk_data), "--out", str(out)),
            *("--settings", json.dumps(SMALL), "--seed", "0", "--shards", *SHARDS),
            *("--threads", "1"),
        ]
    )
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def world(world_dir) -> dict:
    return json.loads((world_dir / "world.json").read_text())


@pytest.fixture(scope="module")
def truth(world_dir) -> list[dict]:
    return pq.read_table(world_dir / "truth.parquet").to_pylist()


@pytest.fixture(scope="module")
def planted(world_dir) -> list[dict]:
    return pq.read_table(world_dir / PLANTED_FILE).to_pylist()


@pytest.fixture(scope="module")
def captions(world_dir, world) -> dict[tuple[str, int], str]:
    out = {}
    for shard in world["shards"]:
        for row, text in enumerate(pq.read_table(world_dir / "laion" / f"{shard}.parquet")["TEXT"]):
            out[(shard, row)] = text.as_py()
    return out


@pytest.fixture(scope="module")
def reference_lemmas(wn) -> dict[str, set[str]]:
    """Reference matcher data: lower-cased noun lemma text (non-alphanumerics as spaces) -> wnids."""
    out: dict[str, set[str]] = {}
    for name in wn.all_lemma_names(pos="n"):
        out.setdefault(_words(lemma_text(name)), set()).add(name)
    return out


def _synsets_named(wn, lemma_names: set[str]) -> set[str]:
    return {f"n{s.offset():08d}" for name in lemma_names for s in wn.synsets(name, pos="n")}


def _words(text: str) -> str:
    return " ".join("".join(c if c.isalnum() else " " for c in text.lower()).split())


def _matched_lemmas(text: str, lemmas: dict[str, set[str]]) -> set[str]:
    """Every noun lemma occurring in ``text`` on word boundaries, case-insensitively."""
    padded = f" {_words(text)} "
    words = padded.split()
    grams = {" ".join(words[i : i + n]) for n in range(1, 10) for i in range(len(words) - n + 1)}
    return {g for g in grams if g in lemmas and f" {g} " in padded}


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_same_seed_is_byte_identical_and_another_seed_differs(world_dir, wn, tmp_path):
    """The same seed gives the same bytes whatever the number of rendering processes (the
    CLI's world rendered its 1,600 rows in one, this one in two: two chunks of CHUNK_ROWS)."""
    assert SMALL["rows_per_shard"] * len(SHARDS) > CHUNK_ROWS
    again = _tree_digest(_build(wn, tmp_path / "again", seed=0, workers=2))
    assert again == _tree_digest(world_dir)
    other = _tree_digest(_build(wn, tmp_path / "other", seed=1))
    assert other != again
    for name in (
        "world.json",
        "laion/part-00000.parquet",
        "laion/part-00001.parquet",
        PLANTED_FILE,
    ):
        assert other[name] != again[name], name


def test_shards_have_the_declared_schema_and_plausible_values(world_dir, world, planted):
    resized = {
        p["url"]: json.loads(p["transform_params"])["side"]
        for p in planted
        if p["transform"] == "resize"
    }
    assert resized and set(resized.values()) != {64}
    assert world["shards"] == ["part-00000", "part-00001"]
    for shard in world["shards"]:
        path = world_dir / "laion" / f"{shard}.parquet"
        assert pq.read_schema(path).remove_metadata() == LAION_SCHEMA
        table = pq.read_table(path)
        assert table.num_rows == SMALL["rows_per_shard"]
        assert table["WIDTH"].to_pylist() == table["HEIGHT"].to_pylist()
        for url, width in zip(table["URL"].to_pylist(), table["WIDTH"].to_pylist(), strict=True):
            assert width == resized.get(url, 64), url  # a resized copy is served at its side
        sims = table["similarity"].to_numpy()
        assert sims.min() > 0.2 and sims.max() < 0.5
        assert table["hash"].type == pa.int64()
        urls = table["URL"].to_pylist()
        assert urls[7] == f"http://demo-world.invalid/{shard}/000007.jpg"
    assert world["punsafe_over_0_5"] > 0


def test_imagenet_and_lemma_sharing_classes(world, wn):
    hazards = world["hazards"]
    imagenet = set(imagenet_wnids())
    assert len(hazards["imagenet_classes"]) == SMALL["n_imagenet_classes"]
    assert set(hazards["imagenet_classes"]) <= imagenet
    for sid in hazards["imagenet_classes"]:
        assert world["classes"][sid]["n_captions"] >= SMALL["captions_per_class_min"]
    imagenet_lemmas = {
        lemma_text(n).lower() for s in imagenet for n in synset_of(wn, s).lemma_names()
    }
    assert hazards["shares_imagenet_lemma"]
    for sid in hazards["shares_imagenet_lemma"]:
        assert sid not in imagenet
        lemmas = {lemma_text(n).lower() for n in synset_of(wn, sid).lemma_names()}
        assert lemmas & imagenet_lemmas, sid


def _ancestors(wn, sid: str) -> set[str]:
    synset = synset_of(wn, sid)
    ups = synset.closure(lambda s: s.hypernyms() + s.instance_hypernyms())
    return {f"n{s.offset():08d}" for s in ups}


def test_survivors_rare_ancestors_nsfw_low_similarity(world, truth, wn):
    hazards, classes = world["hazards"], world["classes"]
    imagenet = set(imagenet_wnids())
    planted = set(classes)
    # Step 3: rare synsets have few captions.
    assert hazards["rare"]
    assert all(classes[s]["n_captions"] <= SMALL["rare_captions_max"] for s in hazards["rare"])
    # Step 4: every ancestor is a hypernym of another planted candidate.
    assert hazards["ancestors"]
    for sid in hazards["ancestors"]:
        assert any(sid in _ancestors(wn, other) for other in planted - {sid}), sid
    # Step 5: class names in an obscenity/vulgarism usage domain.
    assert hazards["nsfw"]
    for sid in hazards["nsfw"]:
        domains = {d.name() for d in synset_of(wn, sid).usage_domains()}
        assert domains & {"obscenity.n.02", "vulgarism.n.01"}, sid
    # Step 7: low-similarity synsets only ever appear incidentally.
    low = set(hazards["low_similarity"])
    assert low and {t["kind"] for t in truth if t["wnid"] in low} == {"incidental"}
    # Survivors: not ImageNet, many captions, leaves relative to every other planted synset.
    survivors = hazards["intended_survivors"]
    assert len(survivors) == SMALL["n_survivors"]
    for sid in survivors:
        assert sid not in imagenet
        assert classes[sid]["n_captions"] >= SMALL["captions_per_class_min"]
        assert not any(sid in _ancestors(wn, other) for other in planted), sid
    # ... and no survivor is also a hazard of another step (e.g. shares a lemma with ImageNet)
    others = {s for role, sids in hazards.items() if role != "intended_survivors" for s in sids}
    assert not set(survivors) & others


def test_caption_kinds_mention_exactly_the_lemmas_they_should(
    world, truth, captions, reference_lemmas, wn
):
    classes = world["classes"]
    found = set()
    kinds = {}
    for t in truth:
        text = captions[(t["shard"], t["row"])]
        matched = _matched_lemmas(text, reference_lemmas)
        kinds[t["kind"]] = kinds.get(t["kind"], 0) + 1
        for lemma in matched:
            found |= _synsets_named(wn, reference_lemmas[lemma])
        if t["kind"] == "no_noun":
            assert not matched, text
        elif t["kind"] == "two_class":
            expected = {classes[t["wnid"]]["lemma"], classes[t["other_wnid"]]["lemma"]}
            assert matched == expected and t["wnid"] != t["other_wnid"], text
        else:
            assert matched == {classes[t["wnid"]]["lemma"]}, text
    assert kinds["two_class"] == world["two_class_captions"] == SMALL["two_class_captions"]
    assert kinds["no_noun"] == world["no_noun_captions"] > 0
    # Method step 1 finds at least 60 candidate synsets in these captions.
    assert len(found) >= 60
    assert set(world["hazards"]["shares_imagenet_lemma"]) <= found


def test_images_decode_except_the_planted_broken_ones(world_dir, world, truth, planted):
    images = world_dir / "images"
    statuses = {}
    for t in truth:
        status = t["url_status"]
        statuses[status] = statuses.get(status, 0) + 1
        path = images / t["shard"] / f"{t['row']:06d}.jpg"
        if status == "missing":
            assert not path.exists()
            continue
        if status == "ok":
            with Image.open(path) as im:
                im.load()
                assert im.mode == "RGB" and im.size[0] == im.size[1] >= 16
        else:
            with pytest.raises(OSError), Image.open(path) as im:
                im.load()
    assert statuses == world["url_status"]
    assert all(statuses.get(s, 0) > 0 for s in ("ok", "missing", "truncated", "non_image"))
    assert re.match(
        r"^<!DOCTYPE html>",
        next(
            (images / t["shard"] / f"{t['row']:06d}.jpg").read_text()
            for t in truth
            if t["url_status"] == "non_image"
        ),
    )
    # label noise, and the planted images that show another class's prototype
    shown = [t for t in truth if t["wnid"] and t["image_wnid"] != t["wnid"]]
    urls = {f"http://demo-world.invalid/{t['shard']}/{t['row']:06d}.jpg": t for t in shown}
    plants = {p["url"] for p in planted if p["url"] in urls}
    assert len(shown) - len(plants) == world["label_noise_rows"] > 0


def _row_of(url: str) -> tuple[str, int]:
    shard, name = url.rsplit("/", 2)[1:]
    return shard, int(name.removesuffix(".jpg"))


def test_planted_duplicates_are_what_their_kind_says(world_dir, world, truth, planted, captions):
    """Each planted image decodes and differs in bytes from its original; a copy is its
    original transformed as recorded, a look-alike a distinct image (check_planted's
    correlations); the rows are captioned so curation selects them: the copy for a survivor,
    its original for an ImageNet class (reference copies) or the same survivor (within copies)."""
    table = pq.read_table(world_dir / PLANTED_FILE)
    assert table.schema.remove_metadata() == PLANTED_SCHEMA
    correlations = check_planted(table, world_dir / "images", world["url_base"], PLANTED_FILE)
    defaults = validate_config({"demo_world": {}})["demo_world"]
    expected = {
        "reference_copy": defaults["n_reference_copies"],
        "within_copy": defaults["n_within_copies"],
        "lookalike": defaults["n_lookalikes"],
    }
    assert {k: len(v) for k, v in correlations.items()} == expected
    assert world["planted_duplicates"] == {"file": PLANTED_FILE, "kinds": expected}
    assert min(correlations["reference_copy"] + correlations["within_copy"]) > 0.85
    assert max(correlations["lookalike"]) < 0.85
    by_row = {(t["shard"], t["row"]): t for t in truth}
    hazards = world["hazards"]
    survivors, imagenet = set(hazards["intended_survivors"]), set(hazards["imagenet_classes"])
    transforms = {}
    for p in planted:
        copy, original = by_row[_row_of(p["url"])], by_row[_row_of(p["original_url"])]
        assert copy["url_status"] == original["url_status"] == "ok"
        assert copy["wnid"] in survivors and copy["image_wnid"] == original["image_wnid"]
        assert original["image_wnid"] == original["wnid"]  # no label noise on an original
        if p["kind"] == "reference_copy":
            assert original["wnid"] in imagenet
        if p["kind"] == "within_copy":
            assert original["wnid"] == copy["wnid"]
        for t in (copy, original):  # the class's best caption: "<lemma> which is <gloss words>"
            lemma = world["classes"][t["wnid"]]["lemma"]
            assert captions[(t["shard"], t["row"])].startswith(f"{lemma} which is"), t
        with Image.open(world_dir / "images" / _row_of(p["url"])[0] / p["url"][-10:]) as im:
            im.load()
        transforms.setdefault(p["kind"], set()).add(p["transform"])
    assert transforms == {
        "reference_copy": {"jpeg", "resize", "crop", "colour"},
        "within_copy": {"jpeg", "resize", "crop", "colour"},
        "lookalike": {""},
    }
    assert sorted(transforms) == sorted(PLANT_KINDS)


def test_a_planted_row_that_is_not_what_it_says_fails_the_check(world_dir, world, planted):
    """A copy listed against an image it does not copy, a copy listed as a look-alike, and a row
    listed against itself each fail the check, naming the row."""
    images, base = world_dir / "images", world["url_base"]
    copy_at = next(i for i, p in enumerate(planted) if p["kind"] == "within_copy")
    lookalike_at = next(i for i, p in enumerate(planted) if p["kind"] == "lookalike")
    jpeg_at = next(i for i, p in enumerate(planted) if p["transform"] == "jpeg")

    def check(rows):
        check_planted(pa.Table.from_pylist(rows, schema=PLANTED_SCHEMA), images, base, "t.parquet")

    check(planted)  # the healthy table passes
    wrong = [dict(p) for p in planted]
    # another image (a look-alike's partner), not the one it was copied from
    wrong[copy_at]["original_url"] = planted[lookalike_at]["original_url"]
    with pytest.raises(PlantedError, match=rf"row {copy_at} .*not a copy"):
        check(wrong)
    wrong = [dict(p) for p in planted]
    # a re-encoded copy (no geometry to undo) listed as a look-alike
    wrong[lookalike_at] = {**planted[jpeg_at], "kind": "lookalike", "transform": ""}
    with pytest.raises(PlantedError, match=rf"row {lookalike_at} .*a copy, not a look-alike"):
        check(wrong)
    wrong = [dict(p) for p in planted]
    wrong[copy_at]["original_url"] = wrong[copy_at]["url"]
    with pytest.raises(PlantedError, match="the same bytes"):
        check(wrong)


def test_plants_leave_every_other_row_as_it_is(wn):
    """The plants take rows that would hold no-noun captions and draw from their own Generator:
    without them, every other row of the world is the same."""
    names = ["part-00000.parquet", "part-00001.parquet"]
    with_plants = build_world(wn, demo_settings(json.dumps(SMALL), 0), names)
    none = {"n_reference_copies": 0, "n_within_copies": 0, "n_lookalikes": 0}
    without = build_world(wn, demo_settings(json.dumps({**SMALL, **none}), 0), names)
    assert without.planted.num_rows == 0
    moved = {u for p in with_plants.planted.to_pylist() for u in (p["url"], p["original_url"])}
    changed = 0
    for name in names:
        a, b = with_plants.shards[name].to_pylist(), without.shards[name].to_pylist()
        for x, y in zip(a, b, strict=True):
            if x != y:
                changed += 1
                assert x["URL"] in moved
    assert changed == 2 * with_plants.planted.num_rows


def test_plan_lookups():
    """The demo world is a LAION source like any other: it writes the shards the laion section
    names (pattern and count, or an explicit list), where laion.dir says curation reads them."""
    config = {"demo_world": {"enabled": True}, "laion": {"n_shards": 3}}
    config["laion"]["dir"] = plan.LAION_DIR
    assert plan.shard_files(validate_config(copy.deepcopy(config))) == [
        f"{plan.LAION_DIR}/part-0000{i}.parquet" for i in range(3)
    ]
    listed = {**config, "laion": {**config["laion"], "shards": ["a.snappy.parquet", "b.parquet"]}}
    assert plan.shard_files(validate_config(listed)) == [
        f"{plan.LAION_DIR}/a.snappy.parquet",
        f"{plan.LAION_DIR}/b.parquet",
    ]
    elsewhere = validate_config({"demo_world": {"enabled": True}, "laion": {"dir": "data/x"}})
    with pytest.raises(plan.DemoConfigError, match=r"laion\.dir is 'data/x'"):
        plan.check(elsewhere)
    assert plan.targets(config) == ["results/demo_world/world.json"]
    assert plan.targets({"demo_world": {"enabled": False}}) == []
    # the rule's --settings: the validated section but `enabled`, exactly what the command parses
    valid = validate_config(copy.deepcopy(config))
    settings = DemoSettings.from_config(valid)
    as_dict = {k: v for k, v in valid["demo_world"].items() if k != "enabled"}
    assert dataclasses.asdict(settings) == as_dict
    assert demo_settings(to_json(settings), None) == settings
    assert demo_settings(to_json(settings), 9).seed == 9  # the --seed flag


def test_bad_settings_name_the_key():
    with pytest.raises(ConfigError, match="n_shardz"):
        demo_settings(json.dumps({"n_shardz": 2}), None)
    with pytest.raises(ConfigError, match="label_noise"):
        demo_settings(json.dumps({"label_noise": 2.0}), None)


def test_a_killed_world_job_leaves_no_rendering_process(nltk_data, tmp_path):
    """The job's rendering processes end with the job: killed outright (SIGKILL, which it cannot
    handle), its spawned workers get SIGTERM from the kernel (lifeline.bind_to_parent)."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    big = {**SMALL, "rows_per_shard": 4000}  # 8 chunks, seconds of rendering: killed in the first
    job = subprocess.Popen(
        [
            *(sys.executable, "-m", "imagenot.cli", "demo-world"),
            *("--nltk-data", str(nltk_data), "--out", str(tmp_path), "--threads", "2"),
            *("--settings", json.dumps(big), "--seed", "0", "--shards", *SHARDS),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    parent = psutil.Process(job.pid)
    deadline = time.monotonic() + 120
    workers: list[psutil.Process] = []
    while len(workers) < 2:  # the pool's two workers, rendering
        assert job.poll() is None and time.monotonic() < deadline, "no rendering workers"
        workers = [p for p in parent.children() if "spawn_main" in " ".join(p.cmdline())]
        time.sleep(0.2)
    while not any((tmp_path / ".images.tmp" / "part-00000").iterdir()):
        assert time.monotonic() < deadline, "no image written"
        time.sleep(0.2)
    assert job.poll() is None  # killed mid-way, not after it finished
    job.send_signal(signal.SIGKILL)
    job.wait()
    _, alive = psutil.wait_procs(workers, timeout=30)
    assert not alive, [p.pid for p in alive]
    assert not (tmp_path / "world.json").exists()
