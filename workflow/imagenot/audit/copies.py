"""The copies the audit's threshold is calibrated on: the one list of edits a near-duplicate may
have undergone (``audit.calibration.copies`` names them; the schema's enum derives from here).

Each entry is ``"module:function"``, called as ``function(images, generator)`` on a uint8
N x 3 x H x W tensor and a seeded ``torch.Generator``, returning a uint8 tensor of the same
shape (imported by the job only: planning stays torch-free).
"""

from __future__ import annotations

from imagenot.core.registries import Registry

#: name -> "module:function" (imagenot.audit.calibrate holds the functions)
COPIES = Registry(
    "audit copy",
    {
        "jpeg": "imagenot.audit.calibrate:reencode",
        "resize": "imagenot.audit.calibrate:resize",
        "crop": "imagenot.audit.calibrate:crop",
        "colour": "imagenot.audit.calibrate:colour",
        "combined": "imagenot.audit.calibrate:combined",
    },
)
