"""Adapters on small files generated in each dataset's real on-disk format."""

from __future__ import annotations

import gzip
import io
import pickle
import re
import shutil
import struct
import tarfile

import numpy as np
import pytest
from conftest import materialise
from PIL import Image

from imagenot.acquire.adapters import AdapterError, read_idx
from imagenot.acquire.imagenet import parse_meta_mat
from imagenot.core.dataset import load_split_tensors, read_classes, read_manifest


def _write_idx(path, array: np.ndarray) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + b"".join(
        struct.pack(">I", d) for d in array.shape
    )
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def _check_invariants(out, n_classes: int) -> None:
    m = read_manifest(out).to_pylist()
    labels = sorted({r["label"] for r in m})
    assert labels == list(range(n_classes))
    assert len(read_classes(out)) == n_classes
    splits: dict[str, set[str]] = {}
    for r in m:
        splits.setdefault(r["sha256"], set()).add(r["split"])
    assert all(len(s) == 1 for s in splits.values())


def test_fashion_mnist_idx(tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "fm"
    root.mkdir()
    for prefix, n in (("train", 60), ("t10k", 20)):
        x = rng.integers(0, 255, (n, 28, 28))
        y = np.arange(n) % 10
        _write_idx(root / f"{prefix}-images-idx3-ubyte.gz", x)
        _write_idx(root / f"{prefix}-labels-idx1-ubyte.gz", y)
    assert read_idx(root / "t10k-labels-idx1-ubyte.gz").tolist()[:3] == [0, 1, 2]
    out = tmp_path / "ds"
    materialise("fashion_mnist", root, out, image_size=32, val_per_class=2, max_train_per_class=3)
    m = read_manifest(out)
    assert m.num_rows == 10 * (2 + 2 + 3)
    images, labels = load_split_tensors(out, "test")
    assert images.shape == (20, 3, 32, 32)
    assert sorted(labels.tolist()) == sorted((np.arange(20) % 10).tolist())
    assert read_classes(out)[0] == "T-shirt/top"
    _check_invariants(out, 10)
    # rerun: byte-identical manifest
    before = (out / "manifest.parquet").read_bytes()
    materialise("fashion_mnist", root, out, image_size=32, val_per_class=2, max_train_per_class=3)
    assert (out / "manifest.parquet").read_bytes() == before


def test_real_debian_fashion_mnist_header():
    path = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"
    try:
        y = read_idx(path)
    except FileNotFoundError:
        pytest.skip("Debian package dataset-fashion-mnist not installed")
    assert y.shape == (10000,) and y.max() == 9


def test_cifar10_pickles(tmp_path):
    rng = np.random.default_rng(1)
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    names = [b"airplane", b"automobile", b"bird"]
    with open(root / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": names}, f)
    for name, n in [(f"data_batch_{i}", 6) for i in range(1, 6)] + [("test_batch", 9)]:
        data = rng.integers(0, 255, (n, 3072), dtype=np.uint8)
        if name == "test_batch":
            data[0, :1024] = 255  # red channel plane of the first test image
            data[0, 1024:] = 0
        with open(root / name, "wb") as f:
            pickle.dump({b"data": data, b"labels": [i % 3 for i in range(n)]}, f)
    out = tmp_path / "ds"
    materialise("cifar10", root, out, image_size=32, val_per_class=1, seed=3)
    m = read_manifest(out)
    counts = {s: m["split"].to_pylist().count(s) for s in ("train", "val", "test")}
    assert counts == {"train": 27, "val": 3, "test": 9}
    assert read_classes(out) == ["airplane", "automobile", "bird"]
    images, _ = load_split_tensors(out, "test")
    keys = read_manifest(out, "test")["key"].to_pylist()
    first = images[keys.index("test-000000")]
    assert first[0].float().mean() > 230 and first[1].float().mean() < 25
    _check_invariants(out, 3)
    with pytest.raises(AdapterError, match="missing CIFAR-10 batch"):
        (root / "data_batch_3").unlink()
        materialise("cifar10", root, tmp_path / "ds2", image_size=32)


class _RunsCode:
    """Pickles as a call of os.mkdir: what a crafted batches.meta could do."""

    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        import os

        return (os.mkdir, (self.target,))


def _cifar_batches(root, protocol=pickle.DEFAULT_PROTOCOL):
    root.mkdir()
    with open(root / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [b"a", b"b"]}, f, protocol=protocol)
    for i, name in enumerate([f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]):
        data = np.stack([np.full(3072, 20 * i, np.uint8), np.full(3072, 20 * i + 10, np.uint8)])
        with open(root / name, "wb") as f:
            pickle.dump({b"data": data, b"labels": [0, 1]}, f, protocol=protocol)


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_cifar10_restricted_unpickler_reads_every_protocol(tmp_path, protocol):
    root = tmp_path / "c"
    _cifar_batches(root, protocol)
    out = tmp_path / "ds"
    materialise("cifar10", root, out, image_size=32)
    assert read_manifest(out).num_rows == 12


def test_cifar10_crafted_pickle_runs_no_code(tmp_path):
    """The general unpickler ran a crafted batches.meta's code."""
    root = tmp_path / "c"
    _cifar_batches(root)
    marker = tmp_path / "code-ran"
    with open(root / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [b"a"], b"x": _RunsCode(marker)}, f)
    with pytest.raises(AdapterError, match=r"batches.meta: .*posix.mkdir is not allowed"):
        materialise("cifar10", root, tmp_path / "ds", image_size=32)
    assert not marker.exists()
    data = (root / "data_batch_1").read_bytes()
    (root / "data_batch_1").write_bytes(data[: len(data) // 2])
    (root / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"a", b"b"]}))
    with pytest.raises(AdapterError, match=r"data_batch_1: not a readable CIFAR-10 batch"):
        materialise("cifar10", root, tmp_path / "ds", image_size=32)


def _tree(root, classes, n, fmt="JPEG", ext=".JPEG", seed=2):
    rng = np.random.default_rng(seed)
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(n):
            arr = rng.integers(0, 255, (20 + i, 30, 3), dtype=np.uint8)
            buf = io.BytesIO()
            Image.fromarray(arr).save(buf, format=fmt)
            (root / c / f"{c}_{i}{ext}").write_bytes(buf.getvalue())


def test_imagenet_layout(tmp_path):
    root = tmp_path / "ILSVRC2012"
    _tree(root / "train", ["n01440764", "n01443537"], 5)
    _tree(root / "val", ["n01440764", "n01443537"], 2, seed=3)
    out = tmp_path / "ds"
    materialise("imagenet", root, out, image_size=16, val_per_class=1)
    m = read_manifest(out)
    assert m["split"].to_pylist().count("test") == 4
    assert m["split"].to_pylist().count("val") == 2
    assert read_classes(out) == ["n01440764", "n01443537"]
    _check_invariants(out, 2)
    bad = tmp_path / "bad"
    _tree(bad / "train", ["dogs"], 1)
    (bad / "val").mkdir()
    with pytest.raises(AdapterError, match="not wnids"):
        materialise("imagenet", bad, tmp_path / "ds3", image_size=16)


# leaf IDs 1-3 as in the real devkit (ID order is not wnid order); non-leaves added below
LEAVES = {1: "n02119789", 2: "n02100735", 3: "n02110185"}
VAL_IDS = [3, 1, 2, 1, 3, 3, 2]  # ground truth: line n = ILSVRC2012_val_0000000n.JPEG


def _write_devkit(root) -> None:
    """meta.mat (a ``synsets`` struct array, real field names) and the val ground truth."""
    from scipy.io import savemat

    fields = ["ILSVRC2012_ID", "WNID", "words", "gloss", "num_children", "children"]
    fields += ["wordnet_height", "num_train_images"]
    rows = [(i, w, f"words {i}", "gloss", 0, np.zeros((1, 0)), 0, 1300) for i, w in LEAVES.items()]
    rows += [(1001, "n02075296", "carnivore", "gloss", 2, np.array([[1, 2]]), 3, 0)]
    rows += [(1002, "n02083346", "canine", "gloss", 1, np.array([[1003]]), 2, 0)]
    synsets = np.zeros((len(rows), 1), dtype=[(f, "O") for f in fields])
    for k, row in enumerate(rows):
        synsets[k, 0] = row
    data = root / "ILSVRC2012_devkit_t12" / "data"
    data.mkdir(parents=True)
    savemat(data / "meta.mat", {"synsets": synsets})
    (data / "ILSVRC2012_validation_ground_truth.txt").write_text("".join(f"{i}\n" for i in VAL_IDS))


def _flat_imagenet(root) -> None:
    _tree(root / "train", sorted(LEAVES.values()), 3)
    (root / "val").mkdir()
    rng = np.random.default_rng(4)
    for n in range(1, len(VAL_IDS) + 1):
        img = Image.fromarray(rng.integers(0, 255, (18, 24, 3), dtype=np.uint8))
        img.save(root / "val" / f"ILSVRC2012_val_{n:08d}.JPEG")
    _write_devkit(root)


def test_imagenet_flat_val_with_devkit(tmp_path):
    root = tmp_path / "ILSVRC2012"
    _flat_imagenet(root)
    meta = root / "ILSVRC2012_devkit_t12" / "data" / "meta.mat"
    assert parse_meta_mat(meta.read_bytes()) == LEAVES  # non-leaf synsets ignored
    out = tmp_path / "ds"
    materialise("imagenet", root, out, image_size=16, val_per_class=1)
    classes = read_classes(out)
    assert classes == sorted(LEAVES.values())  # label order: sorted wnids, as for folders
    m = read_manifest(out).to_pylist()
    test = {r["key"]: classes[r["label"]] for r in m if r["split"] == "test"}
    expected = {
        f"val_{LEAVES[i]}_ILSVRC2012_val_{n:08d}": LEAVES[i] for n, i in enumerate(VAL_IDS, 1)
    }
    assert test == expected
    assert [r["split"] for r in m].count("val") == 3
    _check_invariants(out, 3)

    # the same images sorted into val/<wnid>/ (valprep.sh) give the same dataset
    folders = tmp_path / "folders"
    shutil.copytree(root / "train", folders / "train")
    for n, i in enumerate(VAL_IDS, 1):
        (folders / "val" / LEAVES[i]).mkdir(parents=True, exist_ok=True)
        name = f"ILSVRC2012_val_{n:08d}.JPEG"
        shutil.copy(root / "val" / name, folders / "val" / LEAVES[i] / name)
    materialise("imagenet", folders, tmp_path / "ds2", image_size=16, val_per_class=1)
    manifest = (out / "manifest.parquet").read_bytes()

    def without_source(path):  # the source paths differ: flat val/ vs val/<wnid>/
        return read_manifest(path).drop_columns(["source"])

    assert without_source(tmp_path / "ds2").equals(without_source(out))
    assert (tmp_path / "ds2" / "fingerprint.txt").read_text() == (
        out / "fingerprint.txt"
    ).read_text()
    table = read_manifest(out).to_pydict()
    sources = dict(zip(table["key"], table["source"], strict=True))
    assert sources["val_n02110185_ILSVRC2012_val_00000001"] == "val/ILSVRC2012_val_00000001.JPEG"

    # and so does the devkit as its tarball, read without extracting
    with tarfile.open(root / "ILSVRC2012_devkit_t12.tar.gz", "w:gz") as tar:
        tar.add(root / "ILSVRC2012_devkit_t12", "ILSVRC2012_devkit_t12")
    shutil.rmtree(root / "ILSVRC2012_devkit_t12")
    materialise("imagenet", root, tmp_path / "ds3", image_size=16, val_per_class=1)
    assert (tmp_path / "ds3" / "manifest.parquet").read_bytes() == manifest


def test_imagenet_devkit_errors(tmp_path):
    root = tmp_path / "ILSVRC2012"
    _flat_imagenet(root)
    data = root / "ILSVRC2012_devkit_t12" / "data"
    gt = data / "ILSVRC2012_validation_ground_truth.txt"

    def fails(pattern: str) -> None:
        with pytest.raises(AdapterError, match=pattern):
            materialise("imagenet", root, tmp_path / "out", image_size=16)

    gt.write_text("3\n1\nfish\n1\n3\n3\n2\n")
    fails(re.escape(f"{gt}, line 3: 'fish' is not an ILSVRC2012_ID in 1..1000"))
    gt.write_text("3\n1\n2\n1\n3\n1001\n2\n")
    fails(re.escape(f"{gt}, line 6: '1001'"))
    gt.write_text("3\n1\n2\n")
    fails(re.escape(f"{gt}: 3 lines, but val/ holds 7 flat images"))
    gt.write_text("3\n1\n2\n1\n3\n4\n2\n")
    fails(re.escape(f"{gt}, line 6: ID 4 is not a leaf synset"))
    (data / "meta.mat").write_bytes(b"not a mat file" * 10)
    fails(re.escape(f"{data / 'meta.mat'}: not a devkit meta.mat"))
    (data / "meta.mat").unlink()
    fails(re.escape(f"{data / 'meta.mat'}: missing"))
    shutil.rmtree(root / "ILSVRC2012_devkit_t12")
    with tarfile.open(root / "ILSVRC2012_devkit_t12.tar.gz", "w:gz"):
        pass
    fails(r"ILSVRC2012_devkit_t12\.tar\.gz\[ILSVRC2012_devkit_t12/data/meta\.mat\]: missing")


def test_imagefolder_split_here(tmp_path):
    root = tmp_path / "folder"
    _tree(root, ["cat", "dog", "eel"], 8, fmt="PNG", ext=".png")
    out = tmp_path / "ds"
    materialise("imagefolder", root, out, image_size=16, val_per_class=2, test_per_class=3)
    m = read_manifest(out)
    for cls in range(3):
        rows = [r for r in m.to_pylist() if r["label"] == cls]
        assert [r["split"] for r in rows].count("test") == 3
        assert [r["split"] for r in rows].count("val") == 2
    _check_invariants(out, 3)
    with pytest.raises(AdapterError, match="no images"):
        materialise("imagefolder", tmp_path / "folder" / "cat", tmp_path / "x", image_size=16)


def _png(seed: int, size=(24, 20)) -> bytes:
    arr = np.random.default_rng(seed).integers(0, 255, (*size[::-1], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def test_imagefolder_skips_unreadable_files_by_reason_and_keys_are_unique(tmp_path):
    """One stray ._x.jpg or one truncated image aborted the import; photo.jpg and
    photo.png collided; the source path was lost."""
    import json

    root = tmp_path / "folder"
    _tree(root, ["cat", "dog"], 6, fmt="PNG", ext=".png")
    (root / "cat" / "photo.png").write_bytes(_png(1))
    (root / "cat" / "photo.jpg").write_bytes(_png(2))  # PNG bytes, .jpg name: still an image
    (root / "cat" / "a b.png").write_bytes(_png(3))
    (root / "cat" / "a_b.png").write_bytes(_png(4))
    (root / "dog" / "._dog_0.png").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    (root / "dog" / "broken.png").write_bytes(_png(5)[:60])
    out, parts = tmp_path / "ds", tmp_path / "parts"
    with pytest.raises(AdapterError, match=r"1 unreadable image\(s\) .* dog/broken.png: corrupt"):
        materialise("imagefolder", root, out, image_size=16, test_per_class=2)
    materialise(
        "imagefolder", root, out, image_size=16, test_per_class=2, max_unreadable_share=0.1,
        parts_dir=parts,
    )  # fmt: skip
    m = read_manifest(out).to_pylist()
    sources = sorted(r["source"] for r in m)
    assert "dog/broken.png" not in sources and "dog/._dog_0.png" not in sources
    assert len(m) == 6 + 4 + 6 and len({r["key"] for r in m}) == len(m)
    key_of = {r["source"]: r["key"] for r in m}
    assert key_of["cat/cat_0.png"] == "cat_cat_0"  # plain names stay readable
    assert key_of["cat/photo.png"] != key_of["cat/photo.jpg"]
    assert key_of["cat/a b.png"] != key_of["cat/a_b.png"]
    assert all("." not in k and len(k) <= 90 for k in key_of.values())
    skipped = json.loads((parts / "range-00000.parquet.skipped.json").read_text())
    assert skipped == {"corrupt": 1, "hidden": 1}


def test_a_new_folder_kind_gets_the_empty_folder_check_from_its_declared_class_roots(tmp_path):
    """The check asks the registry entry (its ``class_roots``), not the kind's name: a kind
    registered under a new name, reading class folders, is checked like ``imagefolder``."""
    from imagenot.acquire.kinds import DATASET_KINDS, DatasetKind

    where = "imagenot.acquire.adapters"
    kind = DatasetKind(
        f"{where}:imagefolder_items",
        f"{where}:imagefolder_classes",
        class_roots=f"{where}:imagefolder_class_roots",
    )
    root = tmp_path / "folder"
    _tree(root, ["cat", "dog"], 6, fmt="PNG", ext=".png")
    (root / "eel").mkdir()
    with DATASET_KINDS.temporarily("my_folders", kind):
        assert DATASET_KINDS["my_folders"].class_folders
        with pytest.raises(AdapterError, match=r"without images, left out: \['eel'\]"):
            materialise("my_folders", root, tmp_path / "a", image_size=16, test_per_class=2)


def test_imagefolder_empty_class_and_empty_training_split_are_errors_unless_allowed(tmp_path):
    root = tmp_path / "folder"
    _tree(root, ["cat", "dog"], 6, fmt="PNG", ext=".png")
    (root / "eel").mkdir()
    (root / "eel" / "notes.txt").write_text("no image here")
    with pytest.raises(AdapterError, match=r"without images, left out: \['eel'\].*allow_empty"):
        materialise("imagefolder", root, tmp_path / "a", image_size=16, test_per_class=2)
    materialise(
        "imagefolder", root, tmp_path / "a", image_size=16, test_per_class=2, allow_empty=True
    )
    assert read_classes(tmp_path / "a") == ["cat", "dog"]
    (root / "eel" / "notes.txt").unlink()
    (root / "eel").rmdir()
    # a class with as many images as test + val slots keeps no training image
    with pytest.raises(AdapterError, match=r"without a training image: \['cat', 'dog'\]"):
        materialise(
            "imagefolder", root, tmp_path / "b", image_size=16, test_per_class=3, val_per_class=3
        )


def test_a_hidden_folder_in_a_class_folder_is_skipped_like_a_hidden_file(tmp_path):
    """Tools leave hidden folders of copies in class folders (.ipynb_checkpoints): read as
    images, they doubled the class and put byte-identical images in two splits. Skipped and
    counted, they leave the dataset as it was without them."""
    import json

    root = tmp_path / "folder"
    _tree(root, ["cat", "dog"], 6, fmt="PNG", ext=".png")
    clean = tmp_path / "clean"
    materialise("imagefolder", root, clean, image_size=16, test_per_class=2)
    for cls in ("cat", "dog"):
        copies = root / cls / ".ipynb_checkpoints"
        copies.mkdir()
        for f in sorted((root / cls).glob("*.png")):
            shutil.copyfile(f, copies / f"{f.stem}-checkpoint.png")
    (root / "cat" / "x" / ".thumbnails").mkdir(parents=True)  # hidden deeper down too
    shutil.copyfile(root / "cat" / "cat_0.png", root / "cat" / "x" / ".thumbnails" / "t.png")
    (root / "eel" / ".ipynb_checkpoints").mkdir(parents=True)  # a class of hidden copies only
    shutil.copyfile(root / "cat" / "cat_1.png", root / "eel" / ".ipynb_checkpoints" / "e.png")
    out, parts = tmp_path / "ds", tmp_path / "parts"
    with pytest.raises(AdapterError, match=r"without images, left out: \['eel'\]"):
        materialise("imagefolder", root, out, image_size=16, test_per_class=2)
    materialise(
        "imagefolder", root, out, image_size=16, test_per_class=2, allow_empty=True,
        parts_dir=parts,
    )  # fmt: skip
    assert read_classes(out) == ["cat", "dog"]
    assert read_manifest(out).to_pylist() == read_manifest(clean).to_pylist()
    skipped = json.loads((parts / "range-00000.parquet.skipped.json").read_text())
    assert skipped == {"hidden": 13}
    _check_invariants(out, 2)


def test_byte_identical_images_are_never_in_two_splits(tmp_path, caplog):
    """Copies under other names and in another class's folder are split like any image; the
    gather keeps each image in one split (test before val before train)."""
    root = tmp_path / "folder"
    _tree(root, ["cat", "dog"], 6, fmt="PNG", ext=".png")
    for f in sorted((root / "cat").glob("*.png")):
        shutil.copyfile(f, root / "cat" / f"copy of {f.name}")
        shutil.copyfile(f, root / "dog" / f"also {f.name}")
    out = tmp_path / "ds"
    materialise("imagefolder", root, out, image_size=16, test_per_class=3, val_per_class=1)
    _check_invariants(out, 2)
    rows = read_manifest(out).to_pylist()
    assert len(rows) < 24  # copies that fell in another split than their twin are gone
    (line,) = [r.getMessage() for r in caplog.records if "another split" in r.getMessage()]
    assert f"{24 - len(rows)} image(s) also stored in another split" in line


def test_hidden_files_and_folders_in_a_flat_imagenet_val_are_passed_over(tmp_path):
    """A flat val/ is labelled by position in the devkit's ground truth: a macOS ``._`` file
    or a tool's hidden folder there is not one of its images."""
    root = tmp_path / "ILSVRC2012"
    _flat_imagenet(root)
    materialise("imagenet", root, tmp_path / "clean", image_size=16, val_per_class=1)
    (root / "val" / "._ILSVRC2012_val_00000001.JPEG").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    (root / "val" / ".ipynb_checkpoints").mkdir()
    first = root / "val" / "ILSVRC2012_val_00000001.JPEG"
    shutil.copyfile(first, root / "val" / ".ipynb_checkpoints" / "ILSVRC2012_val_00000001.JPEG")
    out = tmp_path / "ds"
    materialise("imagenet", root, out, image_size=16, val_per_class=1)
    assert read_manifest(out).equals(read_manifest(tmp_path / "clean"))
