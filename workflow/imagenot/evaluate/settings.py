"""The settings object of the evaluate stage's rule (``evaluate_robustness``).

Why: the ``evaluate`` section used to be copied into a dict by ``evaluate/plan.py`` (with
``.get`` fallbacks of its own), serialised, and parsed into a dataclass in ``robustness.py``
whose functions then took its fields again as keyword arguments with defaults. Now the fields
are the schema's keys, :meth:`RobustnessSettings.from_config` builds the object from the
validated config, and the library functions read it. Kept free of torch: the rule file imports
it to build the rule's params.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from imagenot.settings import FromConfig


@dataclass(frozen=True)
class RobustnessSettings(FromConfig):
    """``evaluate-robustness``: the ``evaluate`` section less ``threads`` (how fast, not what:
    a change must not rerun evaluations), its seed resolved, and ``train.device``: the model is
    evaluated where it was trained (``cpu`` stays on the CPU where a GPU is visible; ``auto``
    uses the GPU the job was given). Why from ``train``: the command's own ``--device auto``
    used to stand in for it, so ``train.device: cpu`` never reached evaluation."""

    SECTIONS: ClassVar = ("evaluate", "train")
    DERIVED: ClassVar = {
        "seed": "evaluate.seed, or the top-level seed where it is null (the schema's meaning "
        "of null), so that the job and its params-change detection see the seed in use",
        "strength_side": "train.image_size: the model-input side the transformations' "
        "pixel-sized strengths (blur, sharpness) are stated at; a model whose input has "
        "another side (a published weight's own crop) gets them scaled to its side "
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
