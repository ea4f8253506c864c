"""Display names: what a figure calls a model, a dataset or a protocol.

A config names things by keys (``resnet_mini``, ``fashion_mnist``, ``ft-imagenet``); a figure
shows display names. A model's is its registry entry's ``display_name``
(:class:`imagenot.train.registry.ModelSpec`), a dataset's its config key
``datasets.<name>.display_name``; where none is given, :func:`readable` derives one from the key
(``resnet_mini`` -> ``ResNet-mini``, ``fashion_mnist`` -> ``Fashion-MNIST``). Protocols are
shown by their kind and the display name of their source (``ft-imagenet`` -> ``FT from
ImageNet``). The figure rules pass the display names of the run's models and datasets in their
settings (:class:`imagenot.figures.settings.Options`); nothing else restates them.

Kept free of pandas and matplotlib: the settings objects import it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from imagenot.core.names import PUBLISHED_DATASET, TORCHVISION

WORDS = {
    word.lower(): word
    for word in (
        "AlexNet CIFAR CLIP ConvNeXt DenseNet EfficientNet Fashion GoogLeNet ImageNet ImageNot "
        "Inception LAION LAIONet MNASNet MNIST MobileNet RegNet ResNet ResNeXt ShuffleNet "
        "SqueezeNet Swin TinyNet VGG ViT "
    ).split()
}
"""How a word of a key is spelled where it names an architecture or a dataset (the rest of a
key's words are kept as written)."""

PROTOCOL_KINDS = {"st": "ST", "ft": "FT", "tl": "TL"}
"""The short name of each kind of protocol (``st``, ``ft-SOURCE``, ``tl-SOURCE``)."""

PROTOCOL_MEANINGS = {"st": "standard training", "ft": "fine-tuning", "tl": "linear probe"}
"""What each kind of protocol is, for titles."""

_WORD_DIGITS = re.compile(r"([a-z]+)(\d+)")


def _word(part: str) -> str:
    if part in WORDS:
        return WORDS[part]
    match = _WORD_DIGITS.fullmatch(part)
    if match and match.group(1) in WORDS:  # resnet18 -> ResNet-18, cifar10 -> CIFAR-10
        return f"{WORDS[match.group(1)]}-{match.group(2)}"
    if len(part) == 1 or (match and len(match.group(1)) == 1):  # l -> L, v2 -> V2, b0 -> B0
        return part.upper()
    return part


def readable(key: str) -> str:
    """The display name of a config key that names none of its own: its words (split at ``_``
    and ``-``) joined by hyphens, architectures and datasets spelled as their authors do
    (:data:`WORDS`), a number after such a word set off (``vgg19`` -> ``VGG-19``), one-letter
    and letter-digit words upper-cased (``efficientnet_v2_l`` -> ``EfficientNet-V2-L``), the
    first letter upper-cased (``my_data`` -> ``My-data``)."""
    parts = [_word(p) for p in re.split(r"[_-]+", key) if p]
    if not parts:
        return key
    text = "-".join(parts)
    return text[0].upper() + text[1:]


def model_names(models: Iterable[str]) -> dict[str, str]:
    """Model key -> display name: the registry entry's ``display_name``, else :func:`readable`
    (a model the registry does not hold, a plugin's, is :func:`readable` too)."""
    from imagenot.train.registry import MODELS

    return {m: getattr(MODELS.get(m), "display_name", None) or readable(m) for m in models}


def dataset_names(datasets: Mapping[str, Mapping], names: Iterable[str] = ()) -> dict[str, str]:
    """Dataset key -> display name: the config's ``datasets.<name>.display_name``, else
    :func:`readable`, for every configured dataset and each of ``names``."""
    sections = {d: datasets.get(d) or {} for d in [*datasets, *names]}
    return {
        d: s["display_name"] if "display_name" in s else readable(d) for d, s in sections.items()
    }


def show_dataset(name: str, names: Mapping[str, str]) -> str:
    """The display name of a dataset key (``names``: :func:`dataset_names`)."""
    if name == PUBLISHED_DATASET:
        return f"{names.get('imagenet', 'ImageNet')} (published)"
    if name == TORCHVISION:
        return "torchvision's ImageNet weights"
    return names.get(name) or readable(name)


def show_protocol(protocol: str, names: Mapping[str, str], long: bool = False) -> str:
    """``st`` -> ``ST``; ``ft-imagenet`` -> ``FT from ImageNet`` (``long``: ``fine-tuning
    from ImageNet``, ``standard training``)."""
    kind, _, source = protocol.partition("-")
    short = (PROTOCOL_MEANINGS if long else PROTOCOL_KINDS).get(kind, protocol)
    return f"{short} from {show_dataset(source, names)}" if source else short


def show_label(label: str, names: Mapping[str, str]) -> str:
    """A dataset label of accuracy.csv (``dataset`` for ST, ``dataset/protocol`` otherwise):
    ``fashion_mnist/ft-imagenet`` -> ``Fashion-MNIST, FT from ImageNet``."""
    dataset, _, protocol = label.partition("/")
    shown = show_dataset(dataset, names)
    return f"{shown}, {show_protocol(protocol, names)}" if protocol else shown
