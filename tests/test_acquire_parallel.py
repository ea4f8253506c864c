"""Datasets built by parallel jobs: class ranges (datasets on disk) and download parts (LAION),
gathered into one manifest; resumption of a killed range; the shortfall message; top-up rounds.

LAION downloads are stood in for by status tables and tars written here (what
``imagenot acquire-download`` leaves), so these tests run in seconds; the download itself is
tested in test_acquire_download.py and test_acquire_build.py.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import materialise, materialise_settings
from PIL import Image

from imagenot.acquire import dataset, images
from imagenot.acquire.build import (
    ShortfallError,
    build_dataset,
    plan_splits,
    select_topup,
)
from imagenot.acquire.dataset import Record, gather_parts, write_dataset
from imagenot.acquire.download import STATUS_SCHEMA, select_part
from imagenot.acquire.files import RangeFiles, TopupFiles
from imagenot.acquire.materialise import materialise_range
from imagenot.acquire.ranges import n_range_jobs
from imagenot.acquire.settings import (
    FillSettings,
    GatherSettings,
    MaterialiseSettings,
    TopupSettings,
    WriteSettings,
)
from imagenot.core.dataset import (
    DatasetError,
    ShardReader,
    read_classes,
    read_fingerprint,
    read_manifest,
)
from imagenot.core.io import write_parquet
from imagenot.core.settings import to_json

CONTENT = ["key", "wnid", "label", "split", "sha256"]


# ------------------------------------------------------------------------ datasets on disk


def _tree(root, classes, n, seed):
    rng = np.random.default_rng(seed)
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(n):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (20 + i, 24, 3), dtype=np.uint8)).save(
                buf, format="JPEG"
            )
            (root / c / f"{c}_{i}.JPEG").write_bytes(buf.getvalue())


WNIDS = [f"n0{i:07d}" for i in (7, 3, 5, 1, 9, 2, 8)]
OPTS = {
    "image_size": 16,
    "val_per_class": 2,
    "test_per_class": 2,
    "max_train_per_class": 3,
    "seed": 4,
    "shard_size": 4,
    "resize_mode": "center_crop",
    "jpeg_quality": 95,
    "max_unreadable_share": 0.0,
    "allow_empty": False,
}


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory):
    root = tmp_path_factory.mktemp("ILSVRC2012")
    _tree(root / "train", WNIDS, 6, seed=1)
    _tree(root / "val", WNIDS, 3, seed=2)
    return root


def _range_paths(out, n):
    return [out / "parts" / f"range-{j:05d}.parquet" for j in range(n)]


def _range_settings(root, per_job, **fields):
    """The ranges of ``per_job`` classes of the ImageNet-like tree at ``root``."""
    jobs = n_range_jobs(len(WNIDS), per_job)
    return materialise_settings(
        "imagenet", root, jobs=jobs, classes_per_job=per_job, **{**OPTS, **fields}
    )


def _run_ranges(root, out, per_job):
    settings = _range_settings(root, per_job)
    parts = _range_paths(out, settings.jobs)
    for j, part in enumerate(parts):
        materialise_range(RangeFiles(str(part)), settings, out=out / "ds", job=j)
    return parts


def test_one_job_and_several_give_the_same_manifest_rows(imagenet, tmp_path):
    one = materialise("imagenet", imagenet, tmp_path / "one", **OPTS)
    parts = _run_ranges(imagenet, tmp_path / "three", per_job=3)  # 3 jobs: 3, 3 and 1 classes
    many = gather_parts(tmp_path / "three" / "ds", parts, seed=OPTS["seed"])
    a, b = pq.read_table(one), pq.read_table(many)
    assert a.select(CONTENT).equals(b.select(CONTENT))
    assert (
        read_classes(tmp_path / "one") == read_classes(tmp_path / "three" / "ds") == sorted(WNIDS)
    )
    assert read_fingerprint(tmp_path / "one") == read_fingerprint(tmp_path / "three" / "ds")
    # the layouts differ (each job wrote its own shards), the content does not
    assert set(b["shard"].to_pylist()) != set(a["shard"].to_pylist())
    assert {s.split("-")[1] for s in b["shard"].to_pylist()} == {"00000", "00001", "00002"}
    # every image is readable at its recorded place, and equals the one-job copy
    ra, rb = ShardReader(tmp_path / "one"), ShardReader(tmp_path / "three" / "ds")
    for x, y in zip(a.to_pylist(), b.to_pylist(), strict=True):
        assert ra.read(x["shard"], x["offset"], x["length"]) == rb.read(
            y["shard"], y["offset"], y["length"]
        )
    # splits: 2 test, 2 val, 3 train per class; train rows seeded-shuffled across classes
    split = b["split"].to_pylist()
    assert split.count("test") == split.count("val") == 14 and split.count("train") == 21
    train_wnids = [w for w, s in zip(b["wnid"].to_pylist(), split, strict=True) if s == "train"]
    assert train_wnids != sorted(train_wnids)


def test_a_killed_range_is_redone_alone(imagenet, tmp_path):
    out = tmp_path / "run"
    parts = _run_ranges(imagenet, out, per_job=3)
    first = gather_parts(out / "ds", parts, seed=OPTS["seed"]).read_bytes()
    shards = out / "ds" / "shards"
    before = {p.name: p.stat().st_mtime_ns for p in shards.iterdir()}
    # the job of range 1 was killed: its part manifest and some shards are missing
    parts[1].unlink()
    for tar in shards.glob("*-00001-*.tar"):
        tar.unlink()
    _run_ranges(imagenet, out, per_job=3)  # reruns every range command; two are no-ops
    after = {p.name: p.stat().st_mtime_ns for p in shards.iterdir()}
    assert set(after) == set(before)
    redone = {n for n in after if after[n] != before[n]}
    assert redone and all("-00001-" in n for n in redone)
    assert gather_parts(out / "ds", parts, seed=OPTS["seed"]).read_bytes() == first
    # other settings for a range: it is redone, not skipped
    materialise_range(
        RangeFiles(str(parts[0])), _range_settings(imagenet, 3, seed=5), out=out / "ds", job=0
    )
    assert (shards / "train-00000-000000.tar").stat().st_mtime_ns != before[
        "train-00000-000000.tar"
    ]


def test_gather_rejects_missing_or_mismatched_parts(imagenet, tmp_path):
    parts = _run_ranges(imagenet, tmp_path, per_job=4)
    with pytest.raises(DatasetError, match=r"range-00009\.parquet: part manifest not found"):
        gather_parts(tmp_path / "ds", [*parts, tmp_path / "parts" / "range-00009.parquet"], seed=4)
    with pytest.raises(DatasetError, match="more than one part"):
        gather_parts(tmp_path / "ds", [parts[0], parts[0]], seed=4)
    table = pq.read_table(parts[1])
    meta = table.schema.metadata[b"imagenot.part"].replace(b"n00000001", b"n00000000")
    pq.write_table(table.replace_schema_metadata({b"imagenot.part": meta}), parts[1])
    with pytest.raises(DatasetError, match="class list differs"):
        gather_parts(tmp_path / "ds", parts, seed=4)


def _ordered_parts(tmp_path, n_parts=3, per_part=7, seed=0):
    """Part manifests of a LAION-like build: every row carries its manifest place (``order``),
    parts interleaved in it as the plan interleaves download parts."""
    rng = np.random.default_rng(seed)
    classes = ["n00000001", "n00000002", "n00000003"]
    n = n_parts * per_part
    order = rng.permutation(n)
    parts = []
    for p in range(n_parts):
        idx = np.arange(p, n, n_parts)  # part p holds every n_parts-th record
        records = []
        for i in idx:
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(buf, "JPEG")
            split = ("train", "val", "test")[int(i) % 3]
            records.append(Record(f"k{i:04d}", classes[int(i) % 3], split, buf.getvalue(), 0.5))
        path = tmp_path / "parts" / f"part-{p:05d}.parquet"
        dataset.write_part(
            tmp_path / "ds", records, classes, path, part=f"{p:05d}", shard_size=4,
            with_similarity=True, order=order[idx].tolist(),
        )  # fmt: skip
        parts.append(path)
    return parts


def test_parts_with_row_orders_are_gathered_window_by_window_as_whole(tmp_path):
    """The LAION gather (parts carry ``order``) streams the manifest in windows: any window
    gives the manifest and fingerprint of the whole table sorted by order."""
    parts = _ordered_parts(tmp_path)
    whole = pa.concat_tables([pq.read_table(p).replace_schema_metadata(None) for p in parts])
    whole = whole.take(pc.sort_indices(whole, [("order", "ascending")])).drop_columns(["order"])
    classes = ["n00000001", "n00000002", "n00000003"]
    fingerprints = set()
    for window in (1, 4, 21, 1000):
        manifest = dataset._gather_ordered(tmp_path / "ds", parts, window=window)
        got = pq.read_table(manifest)
        assert got.equals(whole.cast(got.schema)), window
        assert got.column_names == whole.column_names
        fingerprints.add(read_fingerprint(tmp_path / "ds"))
        assert read_classes(tmp_path / "ds") == classes
    assert fingerprints == {dataset.content_fingerprint(whole, classes)}
    # its usage line says how many rows it holds at once (bench_scale projects by them)
    assert dataset.job_usage.usage()["rows_held"] >= 2 * 1000 + 7
    assert gather_parts(tmp_path / "ds", parts, seed=0) == tmp_path / "ds" / "manifest.parquet"
    assert read_fingerprint(tmp_path / "ds") in fingerprints


def test_gather_refuses_row_orders_with_a_gap_or_repeat(tmp_path):
    parts = _ordered_parts(tmp_path)
    table = pq.read_table(parts[0])
    order = table["order"].to_numpy().copy()
    order[0] = 10_000  # a place no manifest row of this plan has
    bad = table.set_column(table.schema.get_field_index("order"), "order", pa.array(order))
    pq.write_table(bad, parts[0])
    with pytest.raises(DatasetError, match=r"row orders are not 0\.\.20"):
        gather_parts(tmp_path / "ds", parts, seed=0)
    assert not (tmp_path / "ds" / "manifest.parquet").exists()
    with pytest.raises(DatasetError, match="more than one part"):
        gather_parts(tmp_path / "ds", [parts[1], parts[1]], seed=0)


def test_stale_shards_of_another_layout_are_removed(imagenet, tmp_path):
    out = tmp_path / "run"
    gather_parts(out / "ds", _run_ranges(imagenet, out, per_job=2), seed=4)
    assert (out / "ds/shards/test-00003-000000.tar").exists()
    gather_parts(out / "ds", _run_ranges(imagenet, out, per_job=4), seed=4)
    m = read_manifest(out / "ds")
    on_disk = {f"shards/{p.name}" for p in (out / "ds/shards").iterdir()}
    assert on_disk == set(m["shard"].to_pylist())


# --------------------------------------------------------------------------------- LAION


def _jpeg(i: int) -> bytes:
    rng = np.random.default_rng(i)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _selection(per_class: dict[str, int], start_rank: int = 0, row0: int = 0) -> pa.Table:
    rows = []
    for wnid, n in per_class.items():
        for r in range(start_rank, start_rank + n):
            i = row0 + len(rows)
            rows.append(
                {
                    "key": f"s-{i:09d}",
                    "shard": "s",
                    "row": i,
                    "URL": f"http://x.invalid/{i}",
                    "TEXT": f"caption {i}",
                    "hash": i,
                    "wnid": wnid,
                    "similarity": 0.99 - 0.01 * r,
                    "rank_in_class": r,
                }
            )
    table = pa.Table.from_pylist(rows)
    return table.set_column(
        table.schema.get_field_index("similarity"),
        "similarity",
        table["similarity"].cast(pa.float32()),
    )


def _fake_download(selection_path, folder, n_parts, dead=frozenset(), duplicate_of=None):
    """What ``imagenot acquire-download`` leaves for each part: the valid images normalised in
    a tar and one status row per selection row (``dead`` keys fail with an HTTP error)."""
    from imagenot.acquire.dataset import write_shard

    duplicate_of = duplicate_of or {}
    selection = pq.read_table(selection_path)
    tables = []
    for part in range(n_parts):
        rows, records = [], []
        for key in select_part(selection, part, n_parts)["key"].to_pylist():
            row = dict.fromkeys(STATUS_SCHEMA.names)
            row["key"] = key
            if key in dead:
                row.update(reason="http_error", detail="HTTP Error 404")
                rows.append(row)
                continue
            source = int(duplicate_of.get(key, key).split("-")[1])
            result = images.validate_image(
                _jpeg(source), size=16, resize_mode="center_crop", max_pixels=10**6, min_size=1,
                quality=95,
            )  # fmt: skip
            row.update(reason=result.reason, width=20, height=20, mode="RGB")
            row["sha256"] = __import__("hashlib").sha256(result.jpeg).hexdigest()
            row["phash"] = images.phash64(result.jpeg)
            records.append(Record(key, "", "train", result.jpeg))
            rows.append(row)
        status = folder / f"part-{part:05d}.parquet"
        spans = write_shard(status.with_suffix(".tar"), [(r, -1) for r in records], None)
        span = {r.key: s for r, (s, _) in zip(records, spans, strict=True)}
        for row in rows:
            if row["key"] in span:
                row["offset"], row["length"], _ = span[row["key"]]
        write_parquet(pa.Table.from_pylist(rows, schema=STATUS_SCHEMA), status)
        tables.append(status)
    return tables


FILL = {
    "images_per_class": 6,
    "test_per_class": 2,
    "val_per_class": 1,
    "short_classes": "keep",
    "near_duplicates": "phash",
    "near_duplicate_distance": 4,
    "seed": 3,
}


def _fill(allow_fewer: bool, **kw) -> FillSettings:
    return FillSettings(**{**FILL, **kw}, allow_fewer=allow_fewer)


def _topup(near_duplicates="off"):
    return TopupSettings(
        images_per_class=6,
        oversample=0.5,
        near_duplicates=near_duplicates,
        near_duplicate_distance=4,
    )


def _build(root, parts, fill: FillSettings, out="ds", **kw):
    """build_dataset of the ``laion`` fixture's selection into ``root/out`` (3 images a shard)."""
    sel, rep = root / "selection.parquet", root / "rep"
    return build_dataset(sel, parts, root / out, rep, fill, WriteSettings(3), **kw)


@pytest.fixture
def laion(tmp_path):
    """Three classes with 8 captions each (6 wanted, oversample 1/3); class n00000002 loses 4
    to dead links (short by 2 after round 1); one exact duplicate across classes; a reserve of
    4 further captions per class."""
    sel = _selection({"n00000001": 8, "n00000002": 8, "n00000003": 8})
    reserve = _selection({"n00000001": 4, "n00000002": 4, "n00000003": 4}, start_rank=8, row0=100)
    write_parquet(sel, tmp_path / "selection.parquet")
    write_parquet(reserve, tmp_path / "reserve.parquet")
    keys2 = [k for k, w in zip(sel["key"].to_pylist(), sel["wnid"].to_pylist(), strict=True)
             if w == "n00000002"]  # fmt: skip
    dead = set(keys2[:4])
    (tmp_path / "r0").mkdir()
    parts = _fake_download(
        tmp_path / "selection.parquet",
        tmp_path / "r0",
        2,
        dead=dead,
        duplicate_of={"s-000000023": "s-000000000"},  # class 3's last caption: class 1's image
    )
    return tmp_path, parts, dead


def test_parallel_build_equals_the_single_job_build(laion):
    """The per-part writes + gather give the rows today's one-job build wrote: plan_splits on
    every valid candidate, then write_dataset (the fingerprint is the same too)."""
    root, parts, _ = laion
    _build(root, parts, _fill(True))
    # the one-job reference, as build_dataset wrote it before the parallel split
    from imagenot.acquire.build import read_parts

    status = read_parts(parts)
    sel = pq.read_table(root / "selection.parquet").select(["key", "wnid", "similarity"])
    cand = status.filter(pc.equal(status["reason"], "success")).join(sel, "key")
    assignment, _ = plan_splits(cand, _fill(True), [])
    reader = ShardReader(root.parent)
    records = [
        Record(r["key"], r["wnid"], r["split"], reader.read(r["part_tar"], r["offset"], r["length"]),
               r["similarity"])
        for r in assignment.to_pylist()
    ]  # fmt: skip
    classes = sorted(set(assignment["wnid"].to_pylist()))
    write_dataset(root / "ref", records, classes, shard_size=3, with_similarity=True)
    new, ref = read_manifest(root / "ds"), read_manifest(root / "ref")
    assert new.select([*CONTENT, "similarity"]).equals(ref.select([*CONTENT, "similarity"]))
    assert read_fingerprint(root / "ds") == read_fingerprint(root / "ref")
    assert "s-000000023" not in new["key"].to_pylist()  # the cross-class duplicate
    # each download part's images went to that part's own shards
    assert {s.split("-")[1] for s in new["shard"].to_pylist()} == {"00000", "00001"}


def test_shortfall_stops_with_the_numbers_and_the_keys(laion):
    root, parts, _ = laion
    with pytest.raises(ShortfallError) as err:
        _build(root, parts, _fill(False))
    msg = str(err.value)
    assert "1 of 3 classes have fewer than 6 valid distinct images" in msg
    assert "(2 images short in all; fewest: n00000002 4)" in msg
    for key in (
        "curate.oversample",
        "curate.reserve",
        "acquire.topup_rounds",
        "acquire.allow_fewer",
        "datasets.rep.allow_fewer",
        "acquire.short_classes",
    ):
        assert key in msg
    assert not (root / "ds" / "manifest.parquet").exists()
    # allowed: the short class is kept with 4 images (keep) or left out (drop)
    _build(root, parts, _fill(True))
    m = read_manifest(root / "ds")
    assert pc.sum(pc.equal(m["wnid"], "n00000002")).as_py() == 4
    _build(root, parts, _fill(True, short_classes="drop"), out="ds2")
    assert read_classes(root / "ds2") == ["n00000001", "n00000003"]


def test_a_class_without_any_valid_image_is_reported_short(laion):
    root, _, _ = laion
    sel = pq.read_table(root / "selection.parquet")
    dead = set(sel.filter(pc.equal(sel["wnid"], "n00000003"))["key"].to_pylist())
    (root / "all-dead").mkdir()
    parts = _fake_download(root / "selection.parquet", root / "all-dead", 2, dead=dead)
    with pytest.raises(
        ShortfallError, match=r"1 of 3 classes .* \(6 images short in all; fewest: n00000003 0\)"
    ):
        _build(root, parts, _fill(False))
    _build(root, parts, _fill(True))
    report = {r["wnid"]: r for r in pq.read_table(root / "rep/classes_report.parquet").to_pylist()}
    assert report["n00000003"]["status"] == "dropped" and report["n00000003"]["n_tried"] == 8
    assert read_classes(root / "ds") == ["n00000001", "n00000002"]


def test_shortfall_message_from_the_command_line_has_no_traceback(laion):
    root, parts, _ = laion
    args = [
        "acquire-plan",
        "--selections",
        str(root / "selection.parquet"),
        "--status",
        *map(str, parts),
        "--assignment",
        str(root / "a.parquet"),
        *_reports(root / "rep"),
        "--name",
        "mine",
        "--settings",
        to_json(_fill(False)),
    ]
    run = subprocess.run(
        [sys.executable, "-m", "imagenot.cli", *args], capture_output=True, text=True
    )
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    # the log lines (short classes listed one by one), then the message as the last block
    message = run.stderr[run.stderr.index("error: dataset mine: ") :]
    assert message.startswith("error: dataset mine: 1 of 3 classes have fewer than 6 valid")
    assert len(message.strip().splitlines()) == 4
    assert not (root / "a.parquet").exists()


def test_topup_round_fills_a_short_class_from_the_reserve(laion):
    root, parts, _ = laion
    topup = select_topup(
        TopupFiles(
            [root / "selection.parquet"], parts, root / "reserve.parquet", root / "round-1.parquet"
        ),
        _topup(near_duplicates="phash"),
    )
    # only the short class, its best reserve rows first: ceil(2 short * 1.5) = 3
    assert topup["wnid"].to_pylist() == ["n00000002"] * 3
    assert topup["rank_in_class"].to_pylist() == [8, 9, 10]
    (root / "r1").mkdir()
    parts1 = _fake_download(root / "round-1.parquet", root / "r1", 2)
    _build(
        root,
        parts,
        _fill(False),
        topup=[(root / "round-1.parquet", parts1)],
        reserve_path=root / "reserve.parquet",
    )
    m = read_manifest(root / "ds")
    per_class = pc.value_counts(m["wnid"]).to_pylist()
    assert sorted((x["values"], x["counts"]) for x in per_class) == [
        ("n00000001", 6),
        ("n00000002", 6),
        ("n00000003", 6),
    ]
    got = set(m["key"].to_pylist())
    assert len(got & set(topup["key"].to_pylist())) == 2  # the two best of three fetched
    report = {r["wnid"]: r for r in pq.read_table(root / "rep/classes_report.parquet").to_pylist()}
    assert report["n00000002"]["n_topup"] == 3 and report["n00000002"]["n_kept"] == 6
    stats = pq.read_table(root / "rep/download_stats.parquet")
    assert set(stats["part"].to_pylist()) == {"part-00000", "part-00001"}
    # a second round would find nothing short
    again = select_topup(
        TopupFiles(
            [root / "selection.parquet", root / "round-1.parquet"],
            [*parts, *parts1],
            root / "reserve.parquet",
            root / "round-2.parquet",
        ),
        _topup(),
    )
    assert again.num_rows == 0


def test_exhausted_reserve_gives_the_shortfall_message(laion):
    root, parts, _ = laion
    select_topup(
        TopupFiles(
            [root / "selection.parquet"], parts, root / "reserve.parquet", root / "round-1.parquet"
        ),
        _topup(),
    )
    (root / "r1").mkdir()
    topup = pq.read_table(root / "round-1.parquet")
    # every reserve URL of the short class is dead, and its reserve had no more rows to give
    parts1 = _fake_download(
        root / "round-1.parquet", root / "r1", 2, dead=set(topup["key"].to_pylist())
    )
    reserve = pq.read_table(root / "reserve.parquet")
    write_parquet(
        reserve.filter(pc.is_in(reserve["key"], topup["key"])), root / "reserve-small.parquet"
    )
    with pytest.raises(ShortfallError) as err:
        _build(
            root,
            parts,
            _fill(False),
            topup=[(root / "round-1.parquet", parts1)],
            reserve_path=root / "reserve-small.parquet",
        )
    msg = str(err.value)
    assert "after 1 top-up round(s)" in msg and "fewest: n00000002 4" in msg
    assert "the caption reserve is used up for 1 of them" in msg


def test_reserve_must_not_repeat_the_selection(laion):
    root, parts, _ = laion
    sel = pq.read_table(root / "selection.parquet")
    write_parquet(sel.slice(0, 2), root / "bad-reserve.parquet")
    with pytest.raises(ValueError, match=r"bad-reserve\.parquet: holds keys of the selection"):
        select_topup(
            TopupFiles(
                [root / "selection.parquet"],
                parts,
                root / "bad-reserve.parquet",
                root / "r.parquet",
            ),
            _topup(),
        )


# ------------------------------------------------------------------------------ planning


def test_plan_lookups_for_rounds_and_ranges():
    from imagenot.acquire import plan
    from imagenot.core.config import validate_config

    config = validate_config(
        {
            "datasets": {
                "mine": {"kind": "laion", "classes": "discover", "allow_fewer": True},
                "other": {"kind": "laion", "classes": "discover"},
                "inet": {"kind": "imagenet", "path": "/nonexistent/ILSVRC2012"},
                "fm": {"kind": "fashion_mnist", "path": "/nonexistent/fm"},
            },
            "acquire": {"download_parts": 2, "topup_rounds": 2, "classes_per_job": 50},
        }
    )
    assert plan.topup_rounds(config) == 2
    config["curate"]["reserve"] = 0  # no reserve, nothing to top up from: no top-up round
    assert plan.topup_rounds(config) == 0
    config["curate"]["reserve"] = 0.5
    jobs = MaterialiseSettings.from_config(config, dataset="inet").jobs
    assert jobs == 20  # ImageNet's 1000 classes
    assert MaterialiseSettings.from_config(config, dataset="fm").jobs == 1
    assert FillSettings.from_config(config, dataset="mine").allow_fewer is True
    assert FillSettings.from_config(config, dataset="other").allow_fewer is False
    rounds = plan.all_rounds(config)
    assert plan.selections_before("mine", rounds) == [
        "results/curate/mine/selection.parquet",
        "results/acquire/mine/round-1/selection.parquet",
        "results/acquire/mine/round-2/selection.parquet",
    ]
    assert len(plan.status_before(config, "mine", rounds)) == 6
    assert plan.plan_reserve(config, "mine") == ["results/curate/mine/reserve.parquet"]
    before = plan.status_before(config, "mine", 2)
    assert before[-1] == "results/acquire/mine/round-1/parts/part-00001.parquet"
    assert before[0] == "results/acquire/mine/parts/part-00000.parquet"
    config["acquire"]["topup_rounds"] = 0
    assert plan.plan_reserve(config, "mine") == []


def test_rule_command_lines_run_the_whole_chain(laion, monkeypatch):
    """The commands the rules run, with the options the plan functions give: top-up select,
    fill-and-split, one write per download part, gather."""
    import shlex

    from imagenot.acquire import plan
    from imagenot.cli import main
    from imagenot.core.config import validate_config
    from imagenot.core.settings import to_arg

    root, parts, _ = laion
    config = validate_config(
        {
            "seed": 3,
            "datasets": {"mine": {"kind": "laion", "classes": "discover", "images_per_class": 6}},
            "curate": {"oversample": 0.5},
            "acquire": {
                "download_parts": 2,
                "test_per_class": 2,
                "val_per_class": 1,
                "near_duplicates": "phash",
                "shard_size": 3,
            },
        }
    )
    monkeypatch.chdir(root.parent)  # tar paths in status tables are relative to the run folder
    main(
        [
            "acquire-topup",
            "--selections",
            str(root / "selection.parquet"),
            "--status",
            *map(str, parts),
            "--reserve",
            str(root / "reserve.parquet"),
            "--selection",
            str(root / "r1.parquet"),
            *shlex.split(f"--settings {to_arg(TopupSettings.from_config(config, dataset='mine'))}"),
        ]
    )
    (root / "r1").mkdir()
    parts1 = _fake_download(root / "r1.parquet", root / "r1", 2)
    status = ["--status", *map(str, [*parts, *parts1])]
    selections = ["--selections", str(root / "selection.parquet"), str(root / "r1.parquet")]
    main(
        [
            "acquire-plan",
            *selections,
            *status,
            "--reserve",
            str(root / "reserve.parquet"),
            "--assignment",
            str(root / "assignment.parquet"),
            *_reports(root / "rep"),
            "--name",
            "mine",
            *shlex.split(f"--settings {to_arg(FillSettings.from_config(config, dataset='mine'))}"),
        ]
    )
    written = []
    for p in plan.part_ids(config):
        written.append(str(root / f"write-{p}.parquet"))
        main(
            [
                "acquire-write",
                "--assignment",
                str(root / "assignment.parquet"),
                "--job",
                f"part-{p}",
                "--out",
                str(root / "ds"),
                "--part",
                written[-1],
                "--settings",
                to_json(WriteSettings.from_config(config)),
            ]
        )
    gather = to_json(GatherSettings.from_config(config))
    main(["acquire-gather", "--parts", *written, *_dataset(root / "ds"), "--settings", gather])
    m = read_manifest(root / "ds")
    assert sorted(pc.value_counts(m["wnid"]).field("counts").to_pylist()) == [6, 6, 6]
    assert read_classes(root / "ds") == ["n00000001", "n00000002", "n00000003"]


def _reports(folder) -> list[str]:
    """``acquire-plan``'s report flags, each file in ``folder`` under the rule's file name."""
    from imagenot.acquire import paths as acquire_paths
    from imagenot.acquire.files import PlanFiles
    from imagenot.core.files import OUTPUT, flag

    roles = [r for r in PlanFiles.roles(OUTPUT) if r != "assignment"]
    names = {r: Path(getattr(acquire_paths, r.upper())).name for r in roles}
    return [a for r in roles for a in (flag(r), str(Path(folder) / names[r]))]


def _dataset(folder) -> list[str]:
    """``acquire-gather``'s output flags for the dataset in ``folder``."""
    from imagenot.core.paths import CLASSES_FILE, FINGERPRINT_FILE, MANIFEST_FILE

    return [
        *("--manifest", str(Path(folder) / MANIFEST_FILE)),
        *("--classes", str(Path(folder) / CLASSES_FILE)),
        *("--fingerprint", str(Path(folder) / FINGERPRINT_FILE)),
    ]


def test_gather_refuses_an_index_file_away_from_its_manifest(tmp_path, capsys):
    """``acquire-gather`` writes a dataset's classes and fingerprint beside its manifest, where the
    format puts them: a flag naming another place is refused, naming the flag and the place.
    Healthy: the rule's layout passes that check (here to the missing part's error)."""
    from imagenot.cli import main

    gather = ["acquire-gather", "--parts", str(tmp_path / "part.parquet")]
    settings = ["--settings", '{"seed": 0}']
    assert main([*gather, *_dataset(tmp_path / "ds"), *settings]) != 0
    assert "part.parquet: part manifest not found" in capsys.readouterr().err
    planted = _dataset(tmp_path / "ds")
    planted[3] = str(tmp_path / "elsewhere" / "classes.txt")
    assert main([*gather, *planted, *settings]) != 0
    err = capsys.readouterr().err
    assert (
        f"--classes {planted[3]}: a dataset's classes is {tmp_path / 'ds' / 'classes.txt'}" in err
    )
