"""The one list of test-time transformations (the paper's 17), importable without torch.

An entry names the function that builds the transformation (``"module:function"``, imported by
:func:`imagenot.evaluate.transforms.build_transform` on first use, so that planning and config
validation never import torch) and, for a transformation the evaluate schema does not describe,
the JSON schema of its parameters. The config schema's ``evaluate.transforms`` keys, the
``analyse.standard_transform`` values and every test derive from this list.

Order only decides the order of output columns and figure panels: each transformation's
randomness is seeded by its name (:func:`imagenot.evaluate.transforms.transform_stream`), so
registering one anywhere leaves the random images of the others unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from imagenot.core.registries import Registry


@dataclass(frozen=True)
class TransformEntry:
    """``build(**params)`` returns ``(n_params, op)``: the uniforms per image the operation draws
    (besides the gate) and ``op(x, u)`` on a batch (see :mod:`imagenot.evaluate.transforms`)."""

    build: str | Callable[..., Any]  # "module:function" or the function itself
    params_schema: dict | None = None  # JSON schema of its config section; None: in the schema


def _builtin(function: str) -> TransformEntry:
    return TransformEntry(f"imagenot.evaluate.transforms:{function}")


#: The 17 transformations in the paper's order.
TRANSFORMS: Registry = Registry(
    "transformation",
    {
        "Identity": _builtin("_identity"),
        "GaussianBlur": _builtin("_gaussian_blur"),
        "AdjustSharpness": _builtin("_adjust_sharpness"),
        "Affine": _builtin("_affine"),
        "ColorJitter": _builtin("_color_jitter"),
        "Contrast": _builtin("_contrast"),
        "Equalize": _builtin("_equalize"),
        "Grayscale": _builtin("_grayscale"),
        "HorizontalFlip": _builtin("_horizontal_flip"),
        "Invert": _builtin("_invert"),
        "Perspective": _builtin("_perspective"),
        "Posterize": _builtin("_posterize"),
        "ResizedCrop": _builtin("_resized_crop"),
        "Rotation": _builtin("_rotation"),
        "Sharpness": _builtin("_sharpness"),
        "Solarize": _builtin("_solarize"),
        "VerticalFlip": _builtin("_vertical_flip"),
    },
)
