"""The files of the evaluate stage's step (:mod:`imagenot.core.files`)."""

from __future__ import annotations

from dataclasses import dataclass

from imagenot.core.files import Files, given, made


@dataclass(frozen=True)
class RobustnessFiles(Files):
    """``evaluate-robustness``: one final run on its dataset's test split, under every
    registered test-time transformation."""

    model: str = given("the final run's weights (model.safetensors)")
    result: str = given("the final run's record (its result.json)")
    manifest: str = given(
        "the dataset's manifest (it lists the shards, in its folder, that the job reads: a "
        "build writes it after every shard it lists, so it stands for them)"
    )
    classes: str = given("the dataset's classes.txt, beside its manifest (label order)")
    fingerprint: str = given(
        "the dataset's fingerprint.txt (checked against the one the run records)"
    )
    robustness: str = made("per-transformation accuracies (parquet)")
    per_image: str = made("per-image correctness under each transformation (parquet)")
