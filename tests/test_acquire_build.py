"""Fill and split end to end: a demo-like world served over loopback HTTP via url_map."""

from __future__ import annotations

import io
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import download_settings
from PIL import Image

from imagenot.acquire.build import build_dataset, near_duplicate_mask
from imagenot.acquire.download import download_part
from imagenot.acquire.files import DownloadFiles
from imagenot.acquire.settings import FillSettings, WriteSettings
from imagenot.core.dataset import load_split_tensors, read_fingerprint, read_manifest

CLASSES = ["n00000003", "n00000001", "n00000002", "n00000009"]
PER_CLASS = {"n00000003": 14, "n00000001": 14, "n00000002": 14, "n00000009": 5}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    images = root / "images" / "part-00000"
    images.mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows = []
    for c, wnid in enumerate(CLASSES):
        for i in range(PER_CLASS[wnid]):
            row = len(rows)
            arr = rng.integers(0, 255, (48, 40, 3), dtype=np.uint8)
            arr[..., c % 3] = 255
            buf = io.BytesIO()
            Image.fromarray(arr).save(buf, format="JPEG")
            (images / f"{row}.jpg").write_bytes(buf.getvalue())
            rows.append((row, wnid, 0.95 - i * 0.01, f"{row}.jpg"))
    # an exact duplicate of row 0 under another URL, in another class, and a dead link
    dup = len(rows)
    (images / f"{dup}.jpg").write_bytes((images / "0.jpg").read_bytes())
    rows.append((dup, "n00000001", 0.5, f"{dup}.jpg"))
    rows.append((dup + 1, "n00000001", 0.99, "gone.jpg"))
    sel = pa.table(
        {
            "key": [f"part-00000-{r:09d}" for r, *_ in rows],
            "shard": ["part-00000"] * len(rows),
            "row": [r for r, *_ in rows],
            "URL": [f"http://demo-world.invalid/part-00000/{name}" for *_, name in rows],
            "TEXT": [f"caption {r}" for r, *_ in rows],
            "hash": [0] * len(rows),
            "wnid": [w for _, w, _, _ in rows],
            "similarity": pa.array([s for _, _, s, _ in rows], pa.float32()),
            "rank_in_class": [0] * len(rows),
        }
    )
    pq.write_table(sel, root / "selection.parquet")
    parts = []
    for part in range(2):
        status = root / "acquire" / f"part-{part:05d}.parquet"
        download_part(
            DownloadFiles(root / "selection.parquet", status, status.with_suffix(".tar")),
            download_settings(
                download_parts=2, threads_per_process=4, timeout_s=5, retries=0, image_size=24, images_per_download_shard=10000,
                url_map={"http://demo-world.invalid/": str(root / "images")},
                min_success_rate=0.0, max_unreachable_fraction=None,
            ),
            part=part,
            work_dir=root / "work" / str(part),
            processes=1,
        )  # fmt: skip
        parts.append(status)
    return root, parts


def _build(root, parts, out, exclusions=None, **kw):
    fill = {
        "images_per_class": 12,
        "test_per_class": 3,
        "val_per_class": 2,
        "short_classes": "keep",
        "allow_fewer": True,
        "near_duplicates": "phash",
        "near_duplicate_distance": 4,
        "seed": 7,
    }
    fill.update(kw)
    return build_dataset(
        root / "selection.parquet",
        parts,
        out,
        root / "report",
        FillSettings(**fill),
        WriteSettings(shard_size=10),
        exclusions=exclusions,
    )


def test_build_invariants(world, tmp_path):
    root, parts = world
    out = tmp_path / "ds"
    _build(root, parts, out)
    m = read_manifest(out)
    rows = m.to_pylist()
    # no sha256 in two splits (indeed no sha256 twice)
    assert len({r["sha256"] for r in rows}) == len(rows)
    # labels contiguous from 0 in sorted-wnid order; the short class (5 < 3 + 2 + 1) dropped
    assert (out / "classes.txt").read_text().split() == ["n00000001", "n00000002", "n00000003"]
    assert sorted({r["label"] for r in rows}) == [0, 1, 2]
    per = Counter((r["wnid"], r["split"]) for r in rows)
    for wnid in ["n00000001", "n00000002", "n00000003"]:
        assert per[(wnid, "test")] == 3 and per[(wnid, "val")] == 2
        assert per[(wnid, "test")] + per[(wnid, "val")] + per[(wnid, "train")] == 12
    # top M by similarity: the lowest-similarity rows of a full class are left out
    assert "part-00000-000000013" not in {r["key"] for r in rows}
    # the exact duplicate (row 47, class n00000001, lower similarity) is gone
    assert "part-00000-000000047" not in {r["key"] for r in rows}
    report = pq.read_table(root / "report" / "classes_report.parquet").to_pylist()
    assert {r["wnid"]: r["status"] for r in report}["n00000009"] == "dropped"
    stats = pq.read_table(root / "report" / "download_stats.parquet").to_pylist()
    assert sum(r["count"] for r in stats if r["reason"] == "http_error") == 1
    images, labels = load_split_tensors(out, "train")
    assert images.shape[1:] == (3, 24, 24) and len(labels) == 21


def test_rerun_byte_identical_and_seed_matters(world, tmp_path):
    root, parts = world
    _build(root, parts, tmp_path / "a")
    _build(root, parts, tmp_path / "b")
    assert (tmp_path / "a/manifest.parquet").read_bytes() == (
        tmp_path / "b/manifest.parquet"
    ).read_bytes()
    assert read_fingerprint(tmp_path / "a") == read_fingerprint(tmp_path / "b")
    _build(root, parts, tmp_path / "c", seed=8)
    assert read_fingerprint(tmp_path / "c") != read_fingerprint(tmp_path / "a")


def test_short_classes_drop(world, tmp_path):
    root, parts = world
    _build(root, parts, tmp_path / "d", images_per_class=14, short_classes="drop")
    # n00000001 still has 14 distinct valid images (dead link and duplicate were extras)
    classes = (tmp_path / "d/classes.txt").read_text().split()
    assert classes == ["n00000001", "n00000002", "n00000003"]
    with pytest.raises(ValueError, match="no class"):
        _build(root, parts, tmp_path / "e", images_per_class=15, short_classes="drop")


def test_parts_must_cover_selection(world, tmp_path):
    root, parts = world
    with pytest.raises(ValueError, match="do not cover"):
        _build(root, parts[:1], tmp_path / "f")
    assert not (tmp_path / "f" / "manifest.parquet").exists()


def test_near_duplicate_mask():
    base = np.int64(0x0F0F_0F0F_0F0F_0F0F)
    hashes = np.array([base, base ^ 0b111, base ^ 0xFFFF, base], dtype=np.int64)
    assert near_duplicate_mask(hashes, 4).tolist() == [False, True, False, True]
    assert near_duplicate_mask(hashes, 0).tolist() == [False, False, False, True]


def _exclusions(path, rows):
    pq.write_table(pa.table({"key": [k for k, _ in rows], "reason": [r for _, r in rows]}), path)
    return path


CLASS_2 = [f"part-00000-{r:09d}" for r in range(28, 42)]  # n00000002: 14 images, 12 kept


def test_exclusions_drop_exactly_the_listed_rows(world, tmp_path):
    root, parts = world
    listed = _exclusions(
        tmp_path / "x.parquet", [(CLASS_2[0], "reference"), (CLASS_2[5], "pool_copy")]
    )
    _build(root, parts, tmp_path / "a", exclusions=listed)
    keys = {r["key"]: r["wnid"] for r in read_manifest(tmp_path / "a").to_pylist()}
    # two of 14 left out: the class holds exactly the other 12, the other classes are untouched
    assert sorted(k for k, w in keys.items() if w == "n00000002") == sorted(
        set(CLASS_2) - {CLASS_2[0], CLASS_2[5]}
    )
    report = pq.read_table(root / "report/classes_report.parquet").to_pylist()
    report = {r["wnid"]: r for r in report}
    assert report["n00000002"]["n_excluded_reference"] == 1
    assert report["n00000002"]["n_excluded_pool_copy"] == 1
    assert report["n00000001"]["n_excluded_other_dataset"] == 0
    _build(root, parts, tmp_path / "off")
    off = {r["key"]: r["wnid"] for r in read_manifest(tmp_path / "off").to_pylist()}
    assert {k for k, w in off.items() if w != "n00000002"} == {
        k for k, w in keys.items() if w != "n00000002"
    }
    # seeded: the same list gives the same bytes
    _build(root, parts, tmp_path / "b", exclusions=listed)
    assert (tmp_path / "a/manifest.parquet").read_bytes() == (
        tmp_path / "b/manifest.parquet"
    ).read_bytes()


def test_an_empty_exclusion_list_reproduces_the_splits_byte_for_byte(world, tmp_path):
    root, parts = world
    _build(root, parts, tmp_path / "off")
    _build(root, parts, tmp_path / "empty", exclusions=_exclusions(tmp_path / "x.parquet", []))
    assert (tmp_path / "off/manifest.parquet").read_bytes() == (
        tmp_path / "empty/manifest.parquet"
    ).read_bytes()
    assert read_fingerprint(tmp_path / "off") == read_fingerprint(tmp_path / "empty")


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([("part-00000-000000048", "reference")], "row 0: key 'part-00000-000000048' names no"),
        ([("nowhere", "reference")], "row 0: key 'nowhere' names no validated image"),
        ([(CLASS_2[0], "reference"), (CLASS_2[0], "pool_copy")], "row 1: key .* listed twice"),
        ([(CLASS_2[0], "similar")], "row 0: reason 'similar' is not one of"),
    ],
)
def test_a_bad_exclusion_row_is_refused_in_one_line(world, tmp_path, rows, message):
    root, parts = world
    listed = _exclusions(tmp_path / "x.parquet", rows)
    with pytest.raises(ValueError, match=message) as err:
        _build(root, parts, tmp_path / "bad", exclusions=listed)
    assert "\n" not in str(err.value) and str(listed) in str(err.value)
    assert not (tmp_path / "bad" / "manifest.parquet").exists()
