"""A toy of every contributing.md recipe (model, transformation, figure, table, dataset kind,
optimizer, schedule, text encoder), as a newcomer would add them: each is one registry entry and
its code, all in this one file (no schema, rule or CLI edit). Importing this module
registers nothing; ``imagenot_toy_plugin`` registers them (tests/test_registries.py)."""

from __future__ import annotations

from imagenot.acquire.kinds import DATASET_KINDS, DatasetKind
from imagenot.curate.encoders import ENCODERS, TextEncoder
from imagenot.evaluate.transform_registry import TRANSFORMS, TransformEntry
from imagenot.figures.registry import WORKFLOW_FIGURES, WORKFLOW_TABLES, FigureKind
from imagenot.train.optim_registry import OPTIMIZERS, SCHEDULERS
from imagenot.train.registry import MODELS, ModelSpec

HERE = "toy_entries"


def build_toy_model(num_classes: int):
    """A linear classifier on 8 x 8 average-pooled pixels."""
    from torch import nn

    return nn.Sequential(nn.AdaptiveAvgPool2d(8), nn.Flatten(), nn.Linear(3 * 64, num_classes))


def toy_noise(amount: float):
    """Adds one uniform offset in [-amount, amount] per image (one uniform besides the gate)."""

    def op(x, u):
        return (x + amount * (2 * u[:, :1, None, None] - 1)).clamp(0, 1)

    return 1, op


def toy_table(accuracy, reports, options):
    """Number of result rows."""
    import pandas as pd

    return pd.DataFrame({"rows": [len(accuracy)]})


def toy_classes(root) -> list[str]:
    return ["heads", "tails"]


def toy_items(root, only=None):
    raise NotImplementedError("the toy dataset kind is planned, never read")


def toy_sgd(params, hp):
    """Plain SGD without momentum or weight decay."""
    import torch

    return torch.optim.SGD(params, lr=hp["lr"])


def toy_linear(t: int, spe: int, total: int, hp) -> float:
    """Linear decay to 0 over the budget after warm-up."""
    return max(0.0, 1.0 - t / max(total, 1))


class ToyHashEncoder(TextEncoder):
    """Each text's characters hashed into 8 dimensions, normalised (no language model)."""

    @property
    def dim(self) -> int:
        return 8

    @property
    def device(self) -> str:
        return "cpu"

    def token_lengths(self, texts):
        import numpy as np

        return np.array([len(t.split()) for t in texts])

    def encode(self, texts):
        import numpy as np

        out = np.zeros((len(texts), 8), dtype=np.float32)
        for i, text in enumerate(texts):
            for ch in text:
                out[i, ord(ch) % 8] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


ToyHashEncoder.name, ToyHashEncoder.test_only = "toy_hash", False

ENTRIES = [
    (MODELS, "toy_mlp", ModelSpec("toy_mlp", "toy", build_toy_model, "2", 1)),
    (
        TRANSFORMS,
        "ToyNoise",
        TransformEntry(
            f"{HERE}:toy_noise",
            {
                "type": "object",
                "default": {},
                "additionalProperties": False,
                "properties": {
                    "p": {"type": "number", "minimum": 0, "maximum": 1, "default": 1.0},
                    "amount": {"type": "number", "minimum": 0, "default": 0.1},
                },
            },
        ),
    ),
    (WORKFLOW_FIGURES, "toy_figure", "toy_figure_module:draw"),  # drawn once, always
    (
        WORKFLOW_FIGURES,
        "toy_per_dataset",
        FigureKind("toy_figure_module:draw_per_dataset", ("dataset",), when="st_runs"),
    ),
    (WORKFLOW_TABLES, "toy_table", f"{HERE}:toy_table"),
    (DATASET_KINDS, "toy_kind", DatasetKind(f"{HERE}:toy_items", f"{HERE}:toy_classes", 2)),
    (OPTIMIZERS, "toy_sgd", f"{HERE}:toy_sgd"),
    (SCHEDULERS, "toy_linear", f"{HERE}:toy_linear"),
    (ENCODERS, "toy_hash", ToyHashEncoder),
]
