"""The near-duplicate audit (docs/audit.md): exact search finds planted copies and not distinct
neighbours; the verification by alignment tells a demo image's copies from its look-alike; the
thresholds' calibrations state their precision and recall and refuse a degenerate set; the
tables and the run summary's sentence; the stage's plan."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from imagenot.audit import calibrate, search, tables, verify
from imagenot.audit import plan as audit_plan

#: audit.verification's schema defaults (checked against the schema below)
VERIFICATION = {"enabled": True, "candidates": 10, "compare_side": 64, "max_scale": 1.34}
VERIFICATION |= {"scale_step": 0.03, "template_fraction": 0.75, "smooth": 1.0, "coarse": 0}
VERIFICATION |= {"copy_rate": 0.01, "pixel_candidates": 10, "thumbnail_side": 16}


def _clustered(rng, n_classes=10, per_class=50, dim=64, spread=0.6):
    centres = rng.normal(size=(n_classes, dim))
    labels = np.repeat(np.arange(n_classes), per_class)
    return centres[labels] + spread * rng.normal(size=(len(labels), dim)), labels


def test_search_finds_planted_copies_and_not_distinct_neighbours():
    rng = np.random.default_rng(0)
    targets, _ = _clustered(rng)
    planted = rng.choice(len(targets), 20, replace=False)
    copies = targets[planted] + 0.05 * rng.normal(size=(20, targets.shape[1]))
    # same-class look-alikes: other draws around the same class centres
    distinct = _clustered(np.random.default_rng(0), per_class=55)[0][-50:]
    queries = np.concatenate([copies, distinct])
    sims, rows = search.nearest(queries, targets, block_size=7)
    assert rows[:20].tolist() == planted.tolist()  # each copy finds its own original
    assert sims[:20].min() > 0.99
    assert sims[20:].max() < 0.9  # a same-class look-alike is close, not a copy
    # exact: block size changes nothing, and it agrees with the dense product
    again = search.nearest(queries, targets, block_size=len(queries))
    np.testing.assert_array_equal(again[1], rows)
    dense = search.normalise(queries) @ search.normalise(targets).T
    np.testing.assert_array_equal(dense.argmax(axis=1), rows)
    np.testing.assert_allclose(dense.max(axis=1), sims, atol=1e-5)


def test_search_refuses_two_encoders_and_gives_nothing_for_an_empty_set():
    with pytest.raises(ValueError, match="dimensions"):
        search.nearest(np.ones((2, 4)), np.ones((3, 5)), 8)
    sims, rows = search.nearest(np.ones((2, 4)), np.zeros((0, 4)), 8)
    assert rows.tolist() == [-1, -1] and np.isneginf(sims).all()


def test_nearest_k_lists_the_k_most_similar_first():
    rng = np.random.default_rng(1)
    queries, targets = rng.normal(size=(5, 8)), rng.normal(size=(3, 8))
    sims, rows = search.nearest_k(queries, targets, 2, 4)
    dense = search.normalise(queries) @ search.normalise(targets).T
    np.testing.assert_array_equal(rows[:, :3], np.argsort(-dense, axis=1))
    assert (rows[:, 3] == -1).all() and np.isneginf(sims[:, 3]).all()  # only 3 targets


def _demo_pictures():
    """A demo-world image, a copy of it under each transform of the world, and a look-alike
    (the same prototype in a nearby pose), as uint8 N x 3 x 64 x 64 in that order."""
    import io

    import torch
    from PIL import Image

    from imagenot.core.clutter import jpeg_bytes
    from imagenot.demo import images as img

    proto = img.make_prototypes(3, np.random.default_rng(0))[1]
    rng = np.random.default_rng(5)
    pose = img.draw_pose(proto, rng)
    original = jpeg_bytes(img.paint(proto, pose, rng, 64), 90)
    files = [original]
    for kind in img.TRANSFORMS:
        params = img.draw_transform(kind, np.random.default_rng(7), 64, 90)
        files.append(img.copy_transform(original, kind, params, 64, 90))
    other = np.random.default_rng(9)
    files.append(jpeg_bytes(img.paint(proto, img.lookalike_pose(pose, other), other, 64), 90))
    pictures = []
    for data in files:
        with Image.open(io.BytesIO(data)) as im:
            pictures.append(np.asarray(im.convert("RGB").resize((64, 64))))
    return torch.from_numpy(np.stack(pictures)).permute(0, 3, 1, 2).contiguous()


def test_verification_tells_copies_from_a_look_alike():
    pictures = verify.grey(_demo_pictures(), 64)
    n = len(pictures) - 1
    scores = verify.pair_scores(pictures[:1].expand(n, 64, 64), pictures[1:], VERIFICATION)
    copies, lookalike = scores[:-1], scores[-1]
    assert copies.min() > 0.9 and lookalike < 0.8, scores
    # planted failing case: without the scale search the cropped copy (TRANSFORMS' third)
    # falls below the copies' bar
    rigid = verify.pair_scores(pictures[:1], pictures[3:4], VERIFICATION | {"max_scale": 1.0})
    assert rigid[0] < 0.9


def test_thumbnail_candidates_find_a_colour_copy_the_embedding_ranks_last():
    import torch

    from imagenot.demo import images as img

    pictures = _demo_pictures()  # original, copies (TRANSFORMS order), look-alike
    colour = 1 + img.TRANSFORMS.index("colour")
    rng = np.random.default_rng(3)
    others = torch.from_numpy(
        np.stack([img.render(p, rng, 64) for p in img.make_prototypes(6, rng) for _ in range(3)])
    ).permute(0, 3, 1, 2)
    targets = torch.cat([others, pictures[colour : colour + 1], pictures[-1:]])
    copy_row = len(others)
    embeddings = rng.normal(size=(len(targets), 8))
    query = -embeddings[copy_row : copy_row + 1]  # the copy is the query's farthest by embedding
    thumbs = verify.thumbnails(targets, 16)
    query_thumb = verify.thumbnails(pictures[:1], 16)
    v = {"candidates": 3, "pixel_candidates": 1}
    rows = verify.candidate_rows(query, embeddings, query_thumb, thumbs, v, 8)
    assert copy_row in rows[0] and (rows[0] >= 0).sum() == 4
    # planted failing case: candidates by embedding alone leave the copy out
    alone = verify.candidate_rows(query, embeddings, None, None, v | {"pixel_candidates": 0}, 8)
    assert copy_row not in alone[0]
    # the query itself, skipped, is never its own candidate; each target comes once
    rows = verify.candidate_rows(embeddings, embeddings, thumbs, thumbs, v, 8, np.arange(20))
    assert all(i not in r for i, r in enumerate(rows))
    assert all(len(set(r[r >= 0])) == (r >= 0).sum() for r in rows)


def test_verification_threshold_bounds_the_false_flags_at_the_copy_rate():
    rng = np.random.default_rng(0)
    positives = rng.uniform(0.6, 1.0, 300)
    negatives = np.tanh(rng.normal(0.4, 0.1, 400))  # Fisher-normal around 0.38
    chosen = verify.choose_threshold(positives, negatives, 0.01, 0.95, 50)
    assert chosen["precision"] >= 0.95 and chosen["recall"] > 0.85
    assert chosen["distinct_at_or_above"] <= 1 and chosen["threshold"] < 0.7
    # rarer copies need a higher threshold for the same precision
    rare = verify.choose_threshold(positives, negatives, 1e-4, 0.95, 50)
    assert rare["threshold"] > chosen["threshold"] and rare["false_flag_rate"] < 1e-4
    # a few real copies among the "distinct" pairs (a split of web images holds some) do not
    # move the threshold (median and MAD)
    dirty = np.r_[negatives, [0.99, 0.995, 0.97]]
    assert verify.choose_threshold(positives, dirty, 0.01, 0.95, 50)["threshold"] == pytest.approx(
        chosen["threshold"], abs=0.02
    )
    # planted failing cases: copies that score as distinct images do, too few pairs
    with pytest.raises(ValueError, match=r"no verification threshold reaches precision 0\.95"):
        verify.choose_threshold(negatives[:300], negatives[100:], 0.01, 0.95, 50)
    with pytest.raises(ValueError, match="min_pairs asks for 500"):
        verify.choose_threshold(positives, negatives, 0.01, 0.95, 500)


def test_the_verification_defaults_are_the_schema_s():
    from imagenot.core.config import validate_config

    config = {"datasets": {"imagenot": {"kind": "laion", "classes": "discover"}}}
    validate_config(config)
    assert config["audit"]["verification"] == VERIFICATION | {"enabled": False}  # opt-in


def test_parts_cover_every_row_once():
    covered = [r for p in range(3) for r in range(*search.part_rows(10, p, 3))]
    assert covered == list(range(10))
    with pytest.raises(ValueError, match="part 3"):
        search.part_rows(10, 3, 3)


def test_calibration_states_precision_and_recall_at_its_threshold():
    rng = np.random.default_rng(0)
    positives = rng.uniform(0.9, 1.0, 200)
    negatives = rng.uniform(0.5, 0.85, 100)
    result = calibrate.choose_threshold(positives, negatives, 0.95, 50)
    assert 0.85 < result["threshold"] < 0.9
    assert result["precision"] == 1.0 and result["recall"] == 1.0
    assert result["copy_pairs"] == 200 and result["distinct_pairs"] == 100
    # overlapping scores: the most recall at the precision asked, stated as measured
    negatives = np.concatenate([negatives, rng.uniform(0.9, 0.95, 10)])
    result = calibrate.choose_threshold(positives, negatives, 0.99, 50)
    flagged_pos = (positives >= result["threshold"]).sum()
    flagged_neg = (negatives >= result["threshold"]).sum()
    assert result["precision"] == pytest.approx(flagged_pos / (flagged_pos + flagged_neg))
    assert result["recall"] == pytest.approx(flagged_pos / len(positives))
    assert result["precision"] >= 0.99 and 0.5 < result["recall"] < 1.0
    # a looser precision flags more copies
    assert calibrate.choose_threshold(positives, negatives, 0.9, 50)["recall"] == 1.0


def test_a_degenerate_calibration_set_is_refused():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="min_pairs asks for 50"):
        calibrate.choose_threshold(rng.uniform(0.9, 1, 10), rng.uniform(0, 0.5, 100), 0.95, 50)
    with pytest.raises(ValueError, match="all score the same"):
        calibrate.choose_threshold(np.ones(60), np.ones(60), 0.95, 50)
    # copies no closer than distinct images: no threshold reaches the precision asked
    with pytest.raises(ValueError, match=r"no threshold reaches precision 0\.95"):
        calibrate.choose_threshold(rng.uniform(0, 0.5, 60), rng.uniform(0.5, 1, 60), 0.95, 50)


def test_copies_are_seeded_edits_of_the_same_shape():
    import torch

    from imagenot.audit.copies import COPIES

    images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
    first = calibrate.make_copies(images, list(COPIES), seed=3)
    second = calibrate.make_copies(images, list(COPIES), seed=3)
    for name in COPIES:
        assert first[name].shape == images.shape and first[name].dtype == torch.uint8
        assert torch.equal(first[name], second[name]), name
        assert not torch.equal(first[name], images), name


def test_sample_draws_two_or_more_of_each_class_it_draws():
    labels = np.array([0] * 5 + [1] * 5 + [2] * 1)
    rows = calibrate.sample(labels, 6, seed=0)
    counts = np.bincount(labels[rows], minlength=3)
    assert len(rows) == 6 and counts[2] == 0  # a class of one gives no distinct pair
    assert (counts[counts > 0] >= 2).all()
    assert calibrate.sample(labels, 6, seed=0).tolist() == rows.tolist()


def _matches():
    query = {
        "keys": np.array(["a", "b", "c"]),
        "labels": np.array([0, 0, 1]),
        "classes": np.array(["cat", "dog"]),
    }
    found = {"keys": np.array(["x", "y"]), "labels": np.array([1, 0]), "classes": query["classes"]}
    one = tables.matches_table("test", query, "ref/test", found, [0.99, 0.5, 0.97], [1, 0, 0])
    two = tables.matches_table("test", query, "own/val", found, [0.2, 0.3, 0.4], [0, 1, 0])
    return pa.concat_tables([one, two])


def test_tables_count_what_the_threshold_flags():
    matches = _matches()
    per_class = tables.per_class(matches, 0.95)
    rows = {(r["target"], r["class"]): r for r in per_class.to_pylist()}
    assert rows["ref/test", "cat"]["images"] == 2 and rows["ref/test", "cat"]["found"] == 1
    assert rows["ref/test", "dog"]["found"] == 1 and rows["own/val", "cat"]["found"] == 0
    assert rows["ref/test", "cat"]["closest"] == pytest.approx(0.99)
    assert tables.flagged(matches, 0.95)["key"].to_pylist() == ["a", "c"]
    assert tables.closest(matches, 1).num_rows == 2
    sets = tables.set_counts(per_class)
    calibration = {"threshold": 0.95, "precision": 0.97, "recall": 0.96}
    calibration |= {"copy_pairs": 500, "distinct_pairs": 100}
    line = tables.sentence("own", sets, calibration, "ref", {"own": "Own", "ref": "Ref"})
    assert line.startswith("2 of 3 Own test images have a near-duplicate in Ref's test split")
    assert "threshold 0.950, precision 0.970, recall 0.960" in line
    shown = tables.report_rows(per_class, {"ref": "Ref"}).to_pylist()
    assert {r["target"] for r in shown} == {"Ref test", "own val"}  # display names, else keys
    assert {r["class"] for r in shown} == {"cat", "dog"}


def _config(monkeypatch, audit=None, runs=True):
    from imagenot.core.config import validate_config

    config = {
        "datasets": {
            "imagenot": {"kind": "laion", "classes": "discover"},
            "imagenet": {"kind": "laion", "classes": "imagenet"},
            "fashion_mnist": {"kind": "fashion_mnist", "path": "/data/fm"},
        },
        "audit": audit or {},
    }
    validate_config(config)
    run = {"dataset": "imagenot", "protocol": "st", "model": "resnet_mini", "seed": 0}
    monkeypatch.setattr("imagenot.train.plan.final_runs", lambda _c: [run] if runs else [])
    return config


def test_the_plan_audits_each_contrast_dataset_against_every_target_set(monkeypatch):
    config = _config(monkeypatch)
    assert audit_plan.audited_datasets(config) == ["imagenot"]
    assert audit_plan.target_sets(config, "imagenot", "test") == [
        ("imagenet", "test"),
        ("imagenet", "train"),
        ("imagenet", "val"),
        ("fashion_mnist", "test"),
    ]
    assert audit_plan.target_sets(config, "imagenot", "train")[-2:] == [
        ("imagenot", "val"),
        ("imagenot", "test"),
    ]
    assert audit_plan.target_embeddings(config, "imagenot", "val")[-1] == (
        "results/diagnostics/imagenot/image_embeddings_test.npz"
    )
    assert "results/figures/audit_imagenot.png" in audit_plan.targets(config)
    assert len(audit_plan.matches_files(config, "imagenot")) == 3
    parts = _config(monkeypatch, {"query_parts": 4})
    assert len(audit_plan.matches_files(parts, "imagenot")) == 12
    assert audit_plan.targets(_config(monkeypatch, {"enabled": False})) == []
    assert audit_plan.targets(_config(monkeypatch, runs=False)) == []  # no encoder: no audit


def test_the_plan_refuses_an_audited_dataset_the_curation_did_not_build(monkeypatch):
    audit_plan.check(_config(monkeypatch, {"datasets": ["imagenot"]}))
    with pytest.raises(ValueError, match=r"audit\.datasets: 'fashion_mnist' is of kind"):
        audit_plan.check(_config(monkeypatch, {"datasets": ["fashion_mnist"]}))
    with pytest.raises(ValueError, match=r"audit\.datasets: 'cifar' is not a configured"):
        audit_plan.check(_config(monkeypatch, {"datasets": ["cifar"]}))


def test_search_and_table_commands_write_the_audit(tmp_path):
    from imagenot.cli import main
    from imagenot.core.io import read_parquet

    rng = np.random.default_rng(0)
    x, labels = _clustered(rng, n_classes=3, per_class=10, dim=16)
    classes = np.array(["cat", "dog", "owl"])
    keys = np.array([f"k{i}" for i in range(len(x))])

    def npz(name, rows, encoder="enc"):
        path = tmp_path / f"{name}.npz"
        np.savez(
            path,
            embeddings=x[rows].astype(np.float32),
            labels=labels[rows],
            keys=keys[rows],
            classes=classes,
            split=np.asarray("test"),
            encoder=np.asarray(encoder),
        )
        return str(path)

    queries = npz("q", np.arange(0, 30, 2))
    # the query rows 0 and 2 planted in the target set
    planted = npz("p", np.r_[np.arange(1, 30, 2), 0, 2])
    settings = {"dataset": "own", "split": "test", "part": "0", "query_parts": 1}
    settings |= {"block_size": 4, "targets": ["ref/test"]}
    settings |= {"verification": VERIFICATION | {"enabled": False}}
    matches = tmp_path / "m.parquet"
    argv = ["audit-search", "--queries", queries, "--targets", planted, "--threads", "1"]
    assert main([*argv, "--settings", json.dumps(settings), "--matches", str(matches)]) == 0
    found = read_parquet(matches).to_pylist()
    assert len(found) == 15 and {r["target_key"] for r in found if r["key"] in ("k0", "k2")} == {
        "k0",
        "k2",
    }
    # another encoder's embeddings are refused
    other = npz("o", np.arange(1, 30, 2), encoder="other")
    argv = ["audit-search", "--queries", queries, "--targets", other, "--threads", "1"]
    argv += ["--settings"]
    assert main([*argv, json.dumps(settings), "--matches", str(tmp_path / "x.parquet")]) == 2

    calibration = tmp_path / "calibration.json"
    calibration.write_text(
        json.dumps(
            {"threshold": 0.999, "precision": 1.0, "recall": 0.98}
            | {"copy_pairs": 500, "distinct_pairs": 100}
        )
    )
    out = {k: str(tmp_path / f"{k}.out") for k in ("per_class", "flagged", "closest")}
    table = {"dataset": "own", "figure_pairs": 2, "reference": "ref", "dataset_names": {}}
    argv = ["audit-table", "--matches", str(matches), "--calibration", str(calibration)]
    argv += ["--settings", json.dumps(table), "--csv", str(tmp_path / "t.csv")]
    argv += ["--summary", str(tmp_path / "audit.json")]
    for role, path in out.items():
        argv += [f"--{role.replace('_', '-')}", path]
    assert main(argv) == 0
    summary = json.loads((tmp_path / "audit.json").read_text())
    assert summary["sentence"].startswith("2 of 15 own test images have a near-duplicate in ref")
    assert read_parquet(out["flagged"])["key"].to_pylist() == ["k0", "k2"]


def _disk_dataset(root, per_split=6):
    """Three classes of smooth random pictures in train, val and test (their own images)."""
    import io

    from PIL import Image

    from imagenot.acquire.dataset import Record, write_dataset

    rng = np.random.default_rng(0)
    classes = ["n00000001", "n00000002", "n00000003"]
    records = []
    for c, wnid in enumerate(classes):
        for split in ("train", "val", "test"):
            for i in range(per_split):
                small = rng.normal(80 * c + 40, 50, (4, 4, 3)).clip(0, 255).astype(np.uint8)
                picture = Image.fromarray(small).resize((32, 32), Image.BICUBIC)
                buf = io.BytesIO()
                picture.save(buf, format="JPEG", quality=95)
                records.append(Record(f"{wnid}-{split}-{i}", wnid, split, buf.getvalue()))
    write_dataset(root, records, classes, shard_size=5000)
    return classes


def test_the_search_reads_each_set_s_thumbnails_in_its_embeddings_key_order(tmp_path, capsys):
    """Rule audit_thumbnails' file holds a set's thumbnails in the order of its embeddings' keys
    (here not the manifest's); the search of one part with those files, its target images
    decoded only for the candidates it verifies, equals the search made in memory with every
    image decoded. Planted: a file in another key order, and no thumbnails at all with
    pixel_candidates, are refused with one line naming the file or the flag."""
    from imagenot.cli import main
    from imagenot.core.dataset import ManifestDataset
    from imagenot.core.io import read_npy, read_parquet

    _disk_dataset(tmp_path / "own")
    manifest, classes = tmp_path / "own/manifest.parquet", tmp_path / "own/classes.txt"
    rng = np.random.default_rng(1)

    def npz(name, split, order):
        ds = ManifestDataset(tmp_path / "own", split)
        keys = np.asarray(ds.keys)[order]
        embeddings = rng.normal(size=(len(keys), 8)).astype(np.float32)
        path = tmp_path / f"{name}.npz"
        np.savez(
            path,
            embeddings=embeddings,
            labels=ds.labels[order],
            keys=keys,
            classes=np.asarray(ds.classes),
            split=np.asarray(split),
            encoder=np.asarray("enc"),
        )
        index = {k: i for i, k in enumerate(ds.keys)}
        return str(path), embeddings, keys.tolist(), [ds[index[k]][0] for k in keys]

    side, compare = 8, 32

    def thumbnails(name, split, embeddings):
        out = tmp_path / f"thumbnails_{name}.npz"
        argv = ["audit-thumbnails", "--manifest", str(manifest), "--classes", str(classes)]
        argv += ["--embeddings", embeddings, "--thumbnails", str(out), "--workers", "0"]
        settings = json.dumps({"split": split, "thumbnail_side": side})
        assert main([*argv, "--settings", settings]) == 0
        return str(out)

    queries, q_emb, _, q_images = npz("q", "test", np.arange(18))
    targets, t_emb, t_keys, t_images = npz("t", "train", rng.permutation(18))
    q_thumbs, t_thumbs = thumbnails("q", "test", queries), thumbnails("t", "train", targets)
    written = read_npy(t_thumbs)
    assert written["keys"].tolist() == t_keys and int(written["side"]) == side
    np.testing.assert_array_equal(written["thumbnails"], verify.thumbnails(t_images, side))

    v = VERIFICATION | {"candidates": 2, "pixel_candidates": 3, "thumbnail_side": side}
    v |= {"compare_side": compare}
    settings = {"dataset": "own", "split": "test", "part": "1", "query_parts": 2}
    settings |= {"block_size": 4, "targets": ["own/train"], "verification": v}
    argv = ["audit-search", "--queries", queries, "--targets", targets, "--threads", "1"]
    argv += ["--manifests", str(manifest), str(manifest), "--settings", json.dumps(settings)]

    def searched(*thumbs, out="m.parquet"):
        given = ["--thumbnails", *thumbs] if thumbs else []
        return main([*argv, *given, "--matches", str(tmp_path / out)])

    assert searched(q_thumbs, t_thumbs) == 0
    found = read_parquet(tmp_path / "m.parquet").to_pylist()
    # in memory: every image decoded, its thumbnail and grey image at hand
    start, stop = search.part_rows(18, 1, 2)
    rows = verify.candidate_rows(
        q_emb[start:stop],
        t_emb,
        verify.thumbnails(q_images[start:stop], side),
        verify.thumbnails(t_images, side),
        v,
        4,
    )
    t_grey = verify.grey_list(t_images, compare)
    scores, column = verify.best_candidates(
        verify.grey_list(q_images[start:stop], compare), lambda w: t_grey[w], rows, v
    )
    best = rows[np.arange(len(rows)), column]
    assert len(found) == stop - start == 9 and (rows >= 0).sum() > 2 * len(rows)
    assert [r["target_key"] for r in found] == [t_keys[r] for r in best]
    np.testing.assert_allclose([r["score"] for r in found], scores, atol=1e-6)

    # planted: the target set's thumbnails in the manifest's order, not its embeddings'
    sorted_embeddings = npz("s", "train", np.arange(18))[0]
    other_order = thumbnails("s", "train", sorted_embeddings)
    capsys.readouterr()
    assert searched(q_thumbs, other_order, out="x.parquet") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "thumbnails_s.npz" in err and "key order" in err
    # planted: pixel_candidates without the thumbnails files
    assert searched(out="y.parquet") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.count("--thumbnails: 0 file(s)") == 1


def test_calibrate_and_figure_commands_on_a_dataset_on_disk(tmp_path, capsys, monkeypatch):
    import torch
    from final_run import write_final_run

    from imagenot.cli import main
    from imagenot.core.io import write_parquet
    from imagenot.train.registry import build_model

    _disk_dataset(tmp_path / "own", per_split=4)
    torch.manual_seed(0)
    run = write_final_run(tmp_path, build_model("resnet_mini", 3))
    settings = {"kind": "backbone", "clip_model": None, "clip_image_size": None}
    settings |= {"batch_size": 64, "split": "val"}
    settings |= {"sample_images": 12, "copies": ["jpeg", "colour"], "min_precision": 0.5}
    settings |= {"min_pairs": 10, "seed": 0, "verification": VERIFICATION | {"candidates": 3}}
    files = ["--manifest", str(tmp_path / "own/manifest.parquet")]
    files += ["--classes", str(tmp_path / "own/classes.txt")]
    files += ["--checkpoint", str(run / "model.safetensors"), "--result", str(run / "result.json")]
    argv = ["audit-calibrate", *files, "--device", "cpu"]
    out = tmp_path / "calibration.json"
    assert main([*argv, "--settings", json.dumps(settings), "--calibration", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["copy_pairs"] == 24 and result["distinct_pairs"] == 12
    assert result["precision"] >= 0.5 and set(result["recall_by_copy"]) == {"jpeg", "colour"}
    verified = result["verification"]
    assert verified["copy_pairs"] == 24 and verified["distinct_pairs"] == 12
    assert verified["recall"] > 0.9 and verified["precision"] >= 0.5  # min_precision
    # too few pairs for the calibration asked: refused with one line naming the manifest
    capsys.readouterr()
    strict = json.dumps(settings | {"min_pairs": 100})
    assert main([*argv, "--settings", strict, "--calibration", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "manifest.parquet" in err and "min_pairs" in err
    # a CLIP processor asking for more than diagnostics.encoder.clip_image_size: refused
    # before the model loads, as the embeddings' is
    from types import SimpleNamespace

    processor = SimpleNamespace(do_center_crop=True, crop_size={"height": 224, "width": 224})
    monkeypatch.setattr("imagenot.diagnostics.embed.clip_processor", lambda model: processor)
    small = json.dumps(settings | {"kind": "clip", "clip_model": "m", "clip_image_size": 64})
    assert main([*argv, "--settings", small, "--calibration", str(tmp_path / "y.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "clip_image_size: 64 px" in err

    pairs = [
        {"split": "test", "key": "n00000001-test-0", "class": "n00000001", "target": "own/train"}
        | {"target_key": "n00000001-train-0", "target_class": "n00000001", "similarity": 0.9}
        | {"score": 0.9},
    ]
    closest = tmp_path / "closest.parquet"
    write_parquet(pa.Table.from_pylist(pairs, schema=tables.MATCH_SCHEMA), closest)
    (tmp_path / "audit.json").write_text(json.dumps({"threshold": 0.95}))
    from imagenot.audit.settings import FigureSettings
    from imagenot.core.settings import to_json
    from imagenot.figures.settings import Style

    figure = FigureSettings("own", 4, Style.schema_defaults(), None, {})
    argv = ["audit-figure", "--closest", str(closest), "--summary", str(tmp_path / "audit.json")]
    argv += ["--manifests", str(tmp_path / "own/manifest.parquet")]
    argv += ["--classes", str(tmp_path / "own/classes.txt"), "--settings", to_json(figure)]
    argv += ["--pdf", str(tmp_path / "f.pdf"), "--png", str(tmp_path / "f.png")]
    assert main(argv) == 0
    assert b"/Type3" not in (tmp_path / "f.pdf").read_bytes()


def test_the_encoder_comes_from_its_registry_and_a_missing_input_is_named(monkeypatch):
    from imagenot.core.config import ConfigError, validate_config
    from imagenot.diagnostics import embed
    from imagenot.diagnostics.encoders import IMAGE_ENCODERS, ImageEncoder

    with pytest.raises(SystemExit, match="a backbone encoder needs --checkpoint and --result"):
        embed.load_encoder("backbone", None, None, None, "cpu", "audit-calibrate")
    with pytest.raises(SystemExit, match=r"a clip encoder needs --settings\.clip_model"):
        embed.load_encoder("clip", None, None, None, "cpu", "embed-images")
    with pytest.raises(SystemExit, match="'pixels': one of backbone, clip"):
        embed.load_encoder("pixels", None, None, None, "cpu", "embed-images")
    with pytest.raises(ConfigError, match="pixels"):
        validate_config({"diagnostics": {"encoder": {"kind": "pixels"}}})
    # a registered kind is valid config and is what the command builds
    toy = ImageEncoder("tests.toy:build", ())
    with IMAGE_ENCODERS.temporarily("pixels", toy):
        validate_config({"diagnostics": {"encoder": {"kind": "pixels"}}})
        monkeypatch.setattr("imagenot.core.registries.resolve", lambda ref: lambda *a: ("enc", ref))
        assert embed.load_encoder("pixels", None, None, None, "cpu", "x") == ("enc", toy.build)
