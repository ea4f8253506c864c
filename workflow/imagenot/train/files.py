"""The files of the train stage's steps that have been given roles (:mod:`imagenot.files`):
drawing an experiment's trials, a halving rung's decision, the selection, the preregistration
table and a published weights' run.

The preregistration record (``preregistration.json``) is no rule's input or output: every draw
of the run reads and amends it, so it travels as an argument (``--record``) beside these files.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagenot.files import Files, given, made


@dataclass(frozen=True)
class DrawFiles(Files):
    """``train-draw-trials``: an experiment's pre-registered trials."""

    trials: str = made("the experiment's trials (trials.parquet)")


@dataclass(frozen=True)
class HalveFiles(Files):
    """``train-halve``: one successive-halving rung's decision."""

    results: list[str] = given("the rung's slot results (JSON), one per slot", many=True)
    decision: str = made("the rung's decision: the trials it promotes (JSON)")


@dataclass(frozen=True)
class SelectFiles(Files):
    """``train-select``: the experiment's best trial."""

    results: list[str] = given("every slot result of the experiment (JSON)", many=True)
    selection: str = made("the selected trial (selection.json)")


@dataclass(frozen=True)
class PreregistrationTableFiles(Files):
    """``train-preregistration-table``: the preregistration record as a report table."""

    table: str = made("the record as CSV (experiments, hashes, models, amendments)")


@dataclass(frozen=True)
class PublishedFiles(Files):
    """``train-published``: published ImageNet weights written as a final run."""

    weights: str = given("the published weights file (under train.weights_dir)")
    classes: str = given("the dataset's classes.txt (the head keeps these rows)")
    fingerprint: str = given("the dataset's fingerprint.txt (recorded with the run)")
    model: str = made("the run's weights (model.safetensors)")
    result: str = made("the run's record (result.json)")
