"""The image encoders of the diagnostics and the audit: the one list of ``diagnostics.encoder.kind``
(the schema's enum derives from it).

Each entry is ``"module:function"``, called as ``function(clip_model, checkpoint, result,
device)`` and returning ``((encode, prepare), description)`` (:mod:`imagenot.diagnostics.embed`);
imported by the job only, so planning stays torch-free. ``needs`` says which of the rule's
inputs the kind reads, for the one-line error when one is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagenot.core.registries import Registry


@dataclass(frozen=True)
class ImageEncoder:
    """An image encoder: what builds it and which inputs it needs."""

    build: str
    needs: tuple[str, ...]


#: kind -> encoder (diagnostics.encoder.kind)
IMAGE_ENCODERS = Registry(
    "image encoder",
    {
        "backbone": ImageEncoder(
            "imagenot.diagnostics.embed:backbone_encoder", ("checkpoint", "result")
        ),
        "clip": ImageEncoder("imagenot.diagnostics.embed:clip_from_id", ("clip_model",)),
    },
)
