"""The audit of the download pool before the splits are built (audit.remove_flagged,
docs/audit.md "Removing flagged images"): what it flags, the exclusion list acquire-plan reads,
and the config lookups that keep the rules free of cycles. Seconds: synthetic embeddings, a
stand-in pixel encoder, no training."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from imagenot.acquire.splits import drop_excluded
from imagenot.audit import pool, pool_plan
from imagenot.audit.files import PoolFiles
from imagenot.audit.settings import PoolSettings
from imagenot.core.config import load_configs

REPO = Path(__file__).resolve().parents[1]


def _unit(rows) -> np.ndarray:
    x = np.asarray(rows, dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_pool_copies_keep_the_first_of_each_group():
    x = _unit([[1, 0, 0, 0], [0, 1, 0, 0], [0.999, 0.02, 0, 0], [0, 0, 1, 0], [0.998, 0, 0.03, 0]])
    copies = pool.pool_copies(x, 0.99, use_gpu=False)
    # rows 2 and 4 are copies of row 0 (the first of their group); 1 and 3 stand alone
    assert sorted(copies) == [2, 4] and {k for k, _ in copies.values()} == {0}
    assert all(0.99 <= s <= 1.0 for _, s in copies.values())
    # planted: no pair reaches the threshold, nothing is a copy
    assert pool.pool_copies(x, 0.99999, use_gpu=False) == {}


def test_target_flags_name_the_first_set_holding_a_near_duplicate():
    x = _unit([[1, 0, 0], [0, 1, 0], [0, 0, 1]])
    ref = {"embeddings": _unit([[0.999, 0.01, 0]]), "keys": np.array(["r0"])}
    other = {"embeddings": _unit([[1, 0, 0], [0, 0.02, 0.999]]), "keys": np.array(["o0", "o1"])}
    flags = pool.target_flags(x, [("ref/test", ref), ("other/test", other)], 0.99, 2, False)
    assert sorted(flags) == [0, 2]
    assert flags[0][:2] == ("ref/test", "r0") and flags[2][:2] == ("other/test", "o1")
    assert 1 not in flags  # planted distinct image: unflagged


def _candidates(keys, wnids) -> pa.Table:
    return pa.table({"key": keys, "wnid": wnids, "similarity": [0.9] * len(keys)})


def test_the_exclusion_list_is_what_acquire_plan_reads():
    keys = ["k0", "k1", "k2", "k3"]
    table = pool.exclusion_table(
        pa.table({"key": keys}),
        flags={1: ("ref/val", "r9", 0.99), 3: ("other/test", "o1", 0.98)},
        copies={2: (0, 0.995), 3: (0, 0.991)},
        reference="ref",
    )
    assert table.to_pylist()[0] == {
        "key": "k1", "reason": "reference", "target": "ref/val", "target_key": "r9",
        "similarity": pytest.approx(0.99),
    }  # fmt: skip
    assert [r["reason"] for r in table.to_pylist()] == ["reference", "pool_copy", "other_dataset"]
    assert table.to_pylist()[1]["target_key"] == "k0"


def _pool_world(tmp_path) -> tuple[list[str], list[str], list[str]]:
    """One download part: 6 validated images (rows 1 and 4 the same picture as row 0, row 5
    a copy of the reference's image) and a dead link; its selection and status table."""
    rng = np.random.default_rng(0)
    pictures = [rng.integers(0, 255, (16, 16, 3), dtype=np.uint8) for _ in range(4)]
    order = [0, 0, 1, 2, 0, 3]
    status = tmp_path / "parts" / "part-00000.parquet"
    status.parent.mkdir()
    blobs, rows = b"", []
    for i, p in enumerate(order):
        buf = io.BytesIO()
        Image.fromarray(pictures[p]).save(buf, format="JPEG", quality=95)
        rows.append({"key": f"k{i}", "reason": "success", "offset": len(blobs),
                     "length": len(buf.getvalue())})  # fmt: skip
        blobs += buf.getvalue()
    rows.append({"key": "k6", "reason": "http_error", "offset": None, "length": None})
    status.with_suffix(".tar").write_bytes(blobs)
    pq.write_table(pa.Table.from_pylist(rows), status)
    keys = [r["key"] for r in rows]
    selection = tmp_path / "selection.parquet"
    pq.write_table(
        pa.table({
            "key": keys, "URL": [f"u{k}" for k in keys], "wnid": ["n1", "n2"] * 3 + ["n1"],
            "similarity": pa.array([0.9 - 0.01 * i for i in range(7)], pa.float32()),
        }),
        selection,
    )  # fmt: skip
    return [str(selection)], [str(status)], pictures


def _decoded(picture: np.ndarray) -> np.ndarray:
    """The picture as the pool stores it (JPEG at quality 95), decoded."""
    buf = io.BytesIO()
    Image.fromarray(picture).save(buf, format="JPEG", quality=95)
    return np.asarray(Image.open(buf).convert("RGB"), np.float32)


def _pixels(monkeypatch):
    """A stand-in encoder: the image's pixels, as the embedding (no weights)."""
    from imagenot.diagnostics import embed

    def load(kind, clip_model, checkpoint, result, device, command):
        return (lambda x: x.flatten(1).float(), lambda x: x), "pixels"

    monkeypatch.setattr(embed, "load_encoder", load)


def test_audit_pool_writes_an_exclusion_list_the_fill_accepts(tmp_path, monkeypatch):
    _pixels(monkeypatch)
    selections, status, pictures = _pool_world(tmp_path)
    reference = {
        "embeddings": _decoded(pictures[3]).transpose(2, 0, 1).reshape(1, -1),
        "keys": np.array(["ref-0"]),
        "encoder": np.asarray("pixels"),
    }
    np.savez(tmp_path / "ref.npz", **reference)
    (tmp_path / "calibration.json").write_text(json.dumps({"threshold": 0.99, "encoder": "pixels"}))
    files = PoolFiles(
        selections=selections, status=status, targets=[str(tmp_path / "ref.npz")],
        calibration=str(tmp_path / "calibration.json"), checkpoint=None, result=None,
        embeddings=str(tmp_path / "pool.npz"), exclusions=str(tmp_path / "exclusions.parquet"),
    )  # fmt: skip
    settings = PoolSettings(
        dataset="d", kind="backbone", clip_model=None, clip_image_size=None, batch_size=4,
        block_size=2, targets=["ref/test"], reference="ref",
    )  # fmt: skip
    table = pool.audit_pool(files, settings, "cpu")
    got = {r["key"]: (r["reason"], r["target_key"]) for r in table.to_pylist()}
    assert got == {
        "k1": ("pool_copy", "k0"),
        "k4": ("pool_copy", "k0"),
        "k5": ("reference", "ref-0"),
    }
    from imagenot.acquire.build import read_rounds

    _, candidates = read_rounds(selections, status)
    kept, counts = drop_excluded(candidates, [files.exclusions], logging.getLogger("t"))
    assert sorted(kept["key"].to_pylist()) == ["k0", "k2", "k3"]
    assert counts == {
        "n2": {"reference": 1, "other_dataset": 0, "pool_copy": 1},
        "n1": {"reference": 0, "other_dataset": 0, "pool_copy": 1},
    }
    # planted: a calibration of another encoder is refused, naming the file
    (tmp_path / "calibration.json").write_text(json.dumps({"threshold": 0.9, "encoder": "clip:x"}))
    with pytest.raises(ValueError, match=r"calibration\.json: calibrated with clip:x"):
        pool.audit_pool(files, settings, "cpu")
    # planted: a CLIP processor asking for more than diagnostics.encoder.clip_image_size is
    # refused before any file is read, as the embeddings' is
    processor = SimpleNamespace(do_center_crop=True, crop_size={"height": 224, "width": 224})
    monkeypatch.setattr("imagenot.diagnostics.embed.clip_processor", lambda model: processor)
    small = dataclasses.replace(settings, kind="clip", clip_model="m", clip_image_size=64)
    with pytest.raises(ValueError, match=r"clip_image_size: 64 px .* 224 px"):
        pool.audit_pool(files, small, "cpu")


def _config(tmp_path, overlay: dict) -> dict:
    if not overlay:
        return load_configs([REPO / "config" / "config.yaml"])
    (tmp_path / "overlay.yaml").write_text(json.dumps(overlay))
    return load_configs([REPO / "config" / "config.yaml", tmp_path / "overlay.yaml"])


def test_removal_off_adds_no_input_and_on_adds_the_pools_list(tmp_path):
    off = _config(tmp_path, {})
    assert pool_plan.exclusions(off, "imagenot") == []
    on = _config(
        tmp_path,
        {"audit": {"remove_flagged": True},
         "diagnostics": {"encoder": {"backbone_dataset": "imagenet"}}},
    )  # fmt: skip
    assert pool_plan.exclusions(on, "imagenot") == [
        "results/audit/imagenot/pool/exclusions.parquet"
    ]
    assert pool_plan.exclusions(on, "imagenet") == []  # the reference is not audited
    assert pool_plan.target_labels(on, "imagenot") == [
        "imagenet/test", "imagenet/train", "imagenet/val", "fashion_mnist/test"
    ]  # fmt: skip
    assert pool_plan.calibration(on) == "results/audit/imagenet/calibration.json"


def test_an_encoder_trained_on_the_rebuilt_dataset_is_refused_in_one_line(tmp_path):
    on = _config(tmp_path, {"audit": {"remove_flagged": True}})  # the demo's imagenot backbone
    with pytest.raises(ValueError, match=r"audit\.remove_flagged: the encoder is a backbone") as e:
        pool_plan.exclusions(on, "imagenot")
    assert "\n" not in str(e.value)
