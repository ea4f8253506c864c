"""The settings object of the evaluate stage's rule (``evaluate_robustness``).

Why: a section copied into a dict with fallbacks of its own, then into keyword arguments with
defaults, drifts from the schema. So the fields are the schema's keys, :meth:`RobustnessSettings.from_config` builds the object from the
validated config, and the library functions read it. Kept free of torch: the rule file imports
it to build the rule's params.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from imagenot.core.settings import FromConfig


@dataclass(frozen=True)
class RobustnessSettings(FromConfig):
    """``evaluate-robustness``: the ``evaluate`` section less ``threads`` (how fast, not what:
    a change must not rerun evaluations), its seed resolved, and ``train.device``: the model is
    evaluated where it was trained (``cpu`` stays on the CPU where a GPU is visible; ``auto``
    uses the GPU the job was given). Why from ``train``: a ``--device`` of the command's own would
    stand in for it, and ``train.device: cpu`` would not reach evaluation."""

    SECTIONS: ClassVar = ("evaluate", "train")
    DERIVED: ClassVar = {
        "seed": "evaluate.seed, or the top-level seed where it is null (the schema's meaning "
        "of null), so that the job and its params-change detection see the seed in use",
        "strength_side": "train.image_size: the model-input side the transformations' "
        "pixel-sized strengths (blur, sharpness) are stated at; a model whose input has "
        "another side (a published weight's own crop, a registry entry's own image_size) gets "
        "them scaled to its side "
        "(imagenot.evaluate.transforms)",
    }

    seed: int
    batch_size: int
    confidence: float
    split: str
    transforms: Mapping[str, Mapping[str, Any]]
    device: str
    strength_side: int

    @classmethod
    def from_config(cls, config, **wildcards) -> RobustnessSettings:
        own = config["evaluate"]["seed"]
        seed = int(config["seed"] if own is None else own)
        side = int(config["train"]["image_size"])
        return cls(**cls.config_values(config, **wildcards), seed=seed, strength_side=side)


NOT_SETTINGS = {
    "imagenot.evaluate.robustness:evaluate_batches(device)": "a torch device (or its name) the "
    "caller resolved, not the train.device key; the CPU for library callers that pass none",
    "imagenot.evaluate.robustness:evaluate_tensors(device)": "a torch device passed on to "
    "evaluate_batches (see there)",
    "imagenot.evaluate.transforms:perspective_startpoints(device)": "the torch device of the "
    "corner tensor, matching the images it is used on; not a config key",
    "imagenot.evaluate.transforms:transform_uniforms(device)": "the torch device of the drawn "
    "uniforms, matching the batch; not a config key",
}
