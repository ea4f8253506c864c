"""Source data are checked where they are read: CIFAR-10 batches' and Fashion-MNIST idx files'
labels and images (counts, ranges, types), class names that must round-trip through classes.txt in
every adapter (a plugin's too) and in the one writer of the format. Each planted case ends in
one line naming the file and the row or name, no traceback; LAION's ``punsafe`` outside [0, 1]
is tested with the caption step (tests/test_curate_steps.py)."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
from conftest import materialise, materialise_settings
from PIL import Image

from imagenot.acquire.adapters import AdapterError
from imagenot.cli import main
from imagenot.core.dataset import DatasetError, read_classes, read_manifest

BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


def _cifar(root, names=(b"airplane", b"automobile", b"bird"), n=3, planted=None) -> None:
    """CIFAR-10's python batches with ``n`` images each; ``planted``: batch name -> the dict
    that replaces its entries."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": list(names)}, f)
    rng = np.random.default_rng(0)
    for name in BATCHES:
        batch = {
            b"data": rng.integers(0, 255, (n, 3072), dtype=np.uint8),
            b"labels": [i % len(names) for i in range(n)],
        }
        batch.update((planted or {}).get(name, {}))
        with open(root / name, "wb") as f:
            pickle.dump(batch, f)


def _materialise_cli(root, out, capsys) -> tuple[int, list[str]]:
    """`imagenot materialise-range` (range 0 of 1) as the rule runs it."""
    import dataclasses

    from imagenot.core.settings import to_json

    settings = dataclasses.replace(materialise_settings("cifar10", root), jobs=1)
    code = main(["materialise-range", "--out", str(out), "--job", "0", "--part",
                 str(out.parent / "part.parquet"), "--settings", to_json(settings)])  # fmt: skip
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if "error:" in line]


def test_healthy_cifar_batches_with_labels_as_lists_or_arrays(tmp_path, capsys):
    root = tmp_path / "c"
    # real batches hold a list of ints; an int array of the right length is as good
    _cifar(root, planted={"test_batch": {b"labels": np.array([2, 1, 0], dtype=np.int64)}})
    out = tmp_path / "ds"
    assert _materialise_cli(root, out, capsys) == (0, [])
    materialise("cifar10", root, out, image_size=32)
    assert read_manifest(out).num_rows == 18
    assert read_classes(out) == ["airplane", "automobile", "bird"]


@pytest.mark.parametrize(
    ("planted", "words"),
    [
        ({b"labels": [0, -1, 2]}, "label -1 at row 1 is not a class index 0-2"),
        ({b"labels": [0, 1, 3]}, "label 3 at row 2 is not a class index 0-2"),
        ({b"labels": [0, 1]}, "2 labels for 3 images"),
        ({b"labels": [0, 1, 2, 0]}, "4 labels for 3 images"),
        ({b"labels": [0, 1.0, 2]}, "label at row 1 is 1.0, not an integer"),
        ({b"labels": [0, "1", 2]}, "label at row 1 is '1', not an integer"),
        ({b"labels": [0, True, 2]}, "label at row 1 is True, not an integer"),
        ({b"labels": "012"}, "labels is a str, expected a list"),
        ({b"data": np.zeros((3, 3072), np.float32)}, "data is float32 (3, 3072), expected a uint8"),
        ({b"data": np.zeros((3, 1024), np.uint8)}, "data is uint8 (3, 1024), expected a uint8"),
        ({b"data": [[0] * 3072] * 3}, "data is list, expected a uint8 array"),
    ],
)
def test_a_planted_cifar_batch_stops_in_one_line_naming_file_and_row(
    tmp_path, capsys, planted, words
):
    root = tmp_path / "c"
    _cifar(root, planted={"data_batch_3": planted})
    out = tmp_path / "ds"
    code, errors = _materialise_cli(root, out, capsys)
    assert code == 2 and len(errors) == 1, errors
    assert f"{root / 'data_batch_3'}: {words}" in errors[0]
    assert not (out / "manifest.parquet").exists()


@pytest.mark.parametrize(
    ("names", "words"),
    [
        (
            [b"cat", b"dog\nhouse", b"bird"],
            r"class 1 'dog\\nhouse' cannot be written to classes.txt",
        ),
        ([b"cat", b"dog\r", b"bird"], r"class 1 'dog\\r' cannot be written"),
        ([b"cat", "dog\u2028x", b"bird"], r"class 1 'dog\\u2028x' cannot be written"),
        ([b"cat", b"", b"bird"], r"class 1 '' cannot be written .*\(empty\)"),
        ([b"cat", b"cat", b"bird"], r"class 1 'cat' is also cifar10 class 0"),
        ([b"cat", b"\xff\xfe", b"bird"], r"label_names\[1\] b'\\xff\\xfe' is not UTF-8"),
        ([b"cat", 7, b"bird"], r"label_names\[1\] is 7, not a name"),
    ],
)
def test_cifar_class_names_that_cannot_round_trip_are_refused(tmp_path, names, words):
    root = tmp_path / "c"
    _cifar(root, names=names)
    with pytest.raises(AdapterError, match=words):
        materialise("cifar10", root, tmp_path / "ds", image_size=32)


def _fashion_mnist(root, labels=None) -> None:
    """Fashion-MNIST's four idx files with 20 images each; ``labels``: the test labels."""
    import gzip
    import struct

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for prefix in ("train", "t10k"):
        y = np.arange(20) % 10 if labels is None or prefix == "train" else np.asarray(labels)
        for kind, array in (
            ("images-idx3", rng.integers(0, 255, (20, 28, 28))),
            ("labels-idx1", y),
        ):
            head = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
            head += b"".join(struct.pack(">I", d) for d in array.shape)
            with gzip.open(root / f"{prefix}-{kind}-ubyte.gz", "wb") as f:
                f.write(head + array.astype(np.uint8).tobytes())


@pytest.mark.parametrize(
    ("labels", "words"),
    [
        (None, None),
        ([*range(10), *range(9), 10], "label 10 at row 19 is not a class index 0-9"),
        ([*range(10), 255, *range(9)], "label 255 at row 10 is not a class index 0-9"),
        (list(range(10)) * 3, r"labels \(30,\) do not pair with the images \(20, 28, 28\)"),
        (list(range(10)), r"labels \(10,\) do not pair with the images \(20, 28, 28\)"),
    ],
)
def test_fashion_mnist_labels_are_checked_naming_file_and_row(tmp_path, labels, words):
    """A healthy set (``None``) is read; a label past the classes, or a label file whose count
    is not the images', is refused naming the labels file (idx holds unsigned bytes only: no
    negative or fractional label can be written)."""
    root = tmp_path / "fm"
    _fashion_mnist(root, labels)
    out = tmp_path / "ds"
    if words is None:
        materialise("fashion_mnist", root, out, image_size=32, val_per_class=1)
        assert read_manifest(out, "test").num_rows == 20
        return
    with pytest.raises(AdapterError, match=rf"^{root / 't10k-labels-idx1-ubyte.gz'}: {words}"):
        materialise("fashion_mnist", root, out, image_size=32, val_per_class=1)


def _folder(root, classes) -> None:
    for i, cls in enumerate(classes):
        (root / cls).mkdir(parents=True)
        buf = io.BytesIO()
        Image.new("RGB", (20, 20), (60 * i, 0, 0)).save(buf, format="JPEG")
        for j in range(2):
            (root / cls / f"img{j}.jpg").write_bytes(buf.getvalue())


def test_image_folder_names_round_trip_or_are_refused(tmp_path):
    """A folder name holding a line break turned 4 classes into 5 lines of classes.txt."""
    good = ["cat", "Ankle boot", "café", "T-shirt top"]
    _folder(tmp_path / "good", good)
    out = tmp_path / "ds"
    materialise("imagefolder", tmp_path / "good", out, image_size=32, max_train_per_class=1)
    assert read_classes(out) == sorted(good)
    for bad in ("two\nlines", "carriage\rreturn", "tab\there", "bell\x07"):
        root = tmp_path / f"bad{len(bad)}{bad[-1]}"
        _folder(root, ["a", bad, "c", "d"])
        with pytest.raises(AdapterError, match=rf"{root}: imagefolder class \d+ .* cannot be"):
            materialise("imagefolder", root, tmp_path / "bad_ds", image_size=32)
        assert not (tmp_path / "bad_ds" / "classes.txt").exists()


def test_a_plugin_adapter_s_class_names_are_checked_too(tmp_path):
    """The check sits where every adapter's class list passes (adapter_readers), not in the
    built-in readers only."""
    from imagenot.acquire.adapters import Item, adapter_readers
    from imagenot.acquire.kinds import DATASET_KINDS, DatasetKind

    names = ["ok", "not\nok"]

    def items(root, only=None):
        return names, [Item("k0", "ok", "all", lambda: np.zeros((8, 8, 3), np.uint8))]

    kind = DatasetKind(items=items, classes=lambda root: names)
    with DATASET_KINDS.temporarily("plugin_kind", kind):
        read_items, read_classes_of = adapter_readers("plugin_kind")
        for read in (read_classes_of, lambda root: read_items(root)[0]):
            with pytest.raises(AdapterError, match=r"plugin_kind class 1 'not\\nok' cannot be"):
                read(tmp_path)


def test_the_format_writer_refuses_a_class_list_that_cannot_round_trip(tmp_path):
    """Whatever builds a dataset (LAION's gather, a caller of write_dataset), classes.txt is
    written only from names that read back unchanged; nothing is written otherwise."""
    from imagenot.acquire.dataset import Record, write_dataset

    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, format="JPEG")
    records = [Record("k0", "a", "train", buf.getvalue())]
    with pytest.raises(DatasetError, match=r"classes.txt: class 1 'b\\x1cc' cannot be written"):
        write_dataset(tmp_path / "ds", records, ["a", "b\x1cc"], shard_size=10)
    assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").rglob("*.tar"))
