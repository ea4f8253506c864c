"""imagenot: re-execute "ImageNot: a contrast with ImageNet preserves model rankings".

One subpackage per pipeline stage: ``demo`` (the embedded demo world), ``curate`` (LAION
captions to classes), ``acquire`` (images to datasets), ``train``, ``evaluate``, ``analyse``
(rankings statistics), ``figures``, ``diagnostics``. Shared pieces: ``config``, ``wordnet``,
``io``, ``cli``.
"""

__version__ = "0.1.0"
