"""The near-duplicate audit finds the demo world's planted duplicates (docs/audit.md): a real run
of the workflow up to the audit of demo ImageNot (the small overlay .test/config-tiny.yaml),
scored against the world's own list (results/demo_world/planted_duplicates.parquet).

The bar is recall and precision of at least 0.95 each, met with the audit's verification by
alignment (docs/audit.md, "Verification"). Planted failing cases on the same run: the flags
scored against a list whose copies name the wrong originals, and the audit with its
verification off (each image's nearest target by embedding at the embedding threshold), each
miss the bar.

Expected pairs are the planted copies both of whose rows reached a built dataset where the audit
compares them: a reference copy in demo ImageNot against its original in the ImageNet stand-in's
audited splits, a within copy against its original in another split of demo ImageNot. Recall:
expected pairs the audit flags. Precision: flagged pairs that are expected pairs (a flagged
look-alike, or any other flagged pair, counts against it).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from imagenot.audit import plan as audit_plan
from imagenot.audit import tables
from imagenot.core import paths
from imagenot.curate import paths as curate_paths
from imagenot.demo.plan import PLANTED_DUPLICATES

REPO = Path(__file__).resolve().parents[1]
# the tiny run with the audit's verification on (audit.verification.enabled, off by default)
CONFIGS = [
    str(REPO / "config" / "config.yaml"),
    str(REPO / ".test" / "config-tiny.yaml"),
    str(REPO / ".test" / "config-audit-verified.yaml"),
]

# a hang guard, not a speed check: the verified tiny audit takes 20-45 min on 2 shared cores
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3000)]


def _built(workdir: Path, dataset: str) -> dict[str, tuple[str, str]]:
    """URL -> (key, split) of every image of a built LAION dataset (its curated selection's
    URL of each manifest key)."""
    selection = pq.read_table(workdir / curate_paths.SELECTION.format(dataset=dataset))
    urls = dict(zip(selection["key"].to_pylist(), selection["URL"].to_pylist(), strict=True))
    manifest = pq.read_table(workdir / paths.MANIFEST.format(dataset=dataset))
    return {
        urls[key]: (key, split)
        for key, split in zip(
            manifest["key"].to_pylist(), manifest["split"].to_pylist(), strict=True
        )
        if key in urls
    }


def expected_pairs(truth: list[dict], own: dict, reference: dict, reference_splits) -> set:
    """(query key, target set, target key) of each planted copy the audit compares."""
    order = {s: i for i, s in enumerate(paths.SPLITS)}
    pairs = set()
    for row in truth:
        if row["kind"] == "reference_copy" and row["url"] in own:
            if row["original_url"] in reference:
                key, _ = own[row["url"]]
                target_key, split = reference[row["original_url"]]
                if split in reference_splits:
                    pairs.add((key, f"imagenet/{split}", target_key))
        elif row["kind"] == "within_copy" and row["url"] in own and row["original_url"] in own:
            a, b = own[row["url"]], own[row["original_url"]]
            if a[1] != b[1]:
                first, later = sorted((a, b), key=lambda x: order[x[1]])
                pairs.add((first[0], f"imagenot/{later[1]}", later[0]))
    return pairs


def score(expected: set, found: set) -> tuple[float, float]:
    """(recall, precision) of ``found`` flags against ``expected`` pairs."""
    hit = len(expected & found)
    return (hit / len(expected) if expected else 0.0), (hit / len(found) if found else 0.0)


def meets_the_bar(recall: float, precision: float) -> bool:
    return recall >= 0.95 and precision >= 0.95


def shuffled(truth: list[dict]) -> list[dict]:
    """The list with each copy's original swapped for another copy's (seeded)."""
    import random

    copies = [r for r in truth if r["kind"] != "lookalike"]
    originals = [r["original_url"] for r in copies]
    random.Random(0).shuffle(originals)
    return [r | {"original_url": o} for r, o in zip(copies, originals, strict=True)]


def unverified_flags(workdir: Path) -> set:
    """The audit of demo ImageNot with its verification off: each split's search by embedding
    alone (``imagenot audit-search``), flagged at the calibration's embedding threshold."""
    from imagenot.audit.settings import SearchSettings
    from imagenot.cli import main
    from imagenot.core.config import load_configs
    from imagenot.core.io import read_json, read_parquet
    from imagenot.core.settings import to_json

    config = load_configs(CONFIGS)
    config["audit"]["verification"]["enabled"] = False
    threshold = read_json(workdir / audit_plan.CALIBRATION.format(dataset="imagenot"))["threshold"]
    found = set()
    for split in paths.SPLITS:
        settings = SearchSettings.from_config(config, dataset="imagenot", split=split, part="0")
        targets = audit_plan.target_embeddings(config, "imagenot", split)
        out = workdir / f"unverified-{split}.parquet"
        argv = ["audit-search", "--queries"]
        argv += [str(workdir / audit_plan.query_embeddings("imagenot", split)), "--targets"]
        argv += [str(workdir / t) for t in targets] + ["--threads", "2"]
        assert main([*argv, "--settings", to_json(settings), "--matches", str(out)]) == 0
        for r in tables.flagged(read_parquet(out), threshold).to_pylist():
            found.add((r["key"], r["target"], r["target_key"]))
    return found


def test_the_audit_finds_the_planted_duplicates(tmp_path):
    targets = [audit_plan.SUMMARY, audit_plan.FLAGGED, audit_plan.FIGURE_PNG]
    env = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ.get('PATH', '')}"}
    run = subprocess.run(
        ["snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path)]
        + ["--profile", str(REPO / "profiles" / "local"), "--configfile", *CONFIGS, "--"]
        + [t.format(dataset="imagenot") for t in targets],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=2900,
    )
    assert run.returncode == 0, run.stderr[-6000:]
    truth = pq.read_table(tmp_path / PLANTED_DUPLICATES).to_pylist()
    own, reference = _built(tmp_path, "imagenot"), _built(tmp_path, "imagenet")
    splits = ("test", "train", "val")
    expected = expected_pairs(truth, own, reference, splits)
    assert len(expected) >= 10, f"only {len(expected)} planted copies reached the datasets"
    flagged = pq.read_table(tmp_path / audit_plan.FLAGGED.format(dataset="imagenot")).to_pylist()
    found = {(r["key"], r["target"], r["target_key"]) for r in flagged}
    recall, precision = score(expected, found)
    missed = sorted(expected - found)[:5]
    wrong = sorted(found - expected)[:5]
    assert expected & found, "the audit flags none of the planted copies"
    measured = (
        f"recall {recall:.3f} of {len(expected)} copies (missed e.g. {missed}), precision "
        f"{precision:.3f} of {len(found)} flagged pairs (wrong e.g. {wrong})"
    )
    # planted failing cases: a list naming the wrong originals; the audit without verification
    wrong_list = expected_pairs(shuffled(truth), own, reference, splits)
    assert not meets_the_bar(*score(wrong_list, found))
    unverified = score(expected, unverified_flags(tmp_path))
    assert not meets_the_bar(*unverified), f"without verification: {unverified}"
    assert meets_the_bar(recall, precision), f"the audit misses the bar: {measured}"
