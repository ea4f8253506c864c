"""Model registry: one name, one constructor (torchvision builders first, timm where it has none).

Every entry knows its classifier head (the last fully connected layer, the only part TL trains),
the smallest input side it accepts, the one input side it is built for where its architecture
fixes one (a ViT's patch grid: ``image_size``; the others train at ``train.image_size``), and its
published ImageNet weights. What those weights need and scored (mean/std, resize, crop,
interpolation, published top-1/top-5) is read from their publisher by ``imagenot.train.facts``
(torchvision's weights enum, timm's pretrained config), or for a ``file:`` source from the
entry's own ``facts``; nothing is restated here. The ``*_mini`` entries are narrow members of the
paper's families, built from the same torchvision classes, for the CPU demo; the two timm ones
have timm's published weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from imagenot.core.registries import Registry, RegistryError, resolve
from imagenot.train.paths import FINAL_MODEL

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class ModelSpec:
    """How to build one registered model and what the protocols need to know about it."""

    name: str
    family: str
    build: Callable[[int], nn.Module]  # num_classes -> randomly initialised model
    head: str  # dotted path of the final nn.Linear
    min_size: int  # smallest input side in pixels
    # its published ImageNet weights (FT/TL from ImageNet, and ImageNet's ST by published
    # weights): "SOURCE:NAME" of a WEIGHT_SOURCES entry ("timm:convnext_atto.d2_in1k",
    # "file:my_net.safetensors"), or a torchvision weights enum name, "Class.MEMBER"
    weights: str | None = None
    # a file source's own facts (imagenot.train.facts.file_facts): mean, std, crop_size,
    # resize_size, interpolation, and optionally top1, top5, source; torchvision and timm
    # weights carry theirs
    facts: dict | None = None
    # what figures call it; None: derived from the name (imagenot.figures.names.readable,
    # "resnet_mini" -> "ResNet-mini")
    display_name: str | None = None
    # the input side the model is built for, where its architecture fixes one (timm's
    # vit_tiny_patch16_224: 224, a 14 x 14 patch grid); its jobs resize every image to it at
    # load time, whatever the dataset's stored size and train.image_size. None: the model takes
    # any side from min_size up and trains at train.image_size (input_size)
    image_size: int | None = None
    # why these weights: the RECIPES entry naming the training recipe the paper states for the
    # model, which the weights' publisher says trained them (imagenot.train.facts.recipe_problem
    # checks it against a torchvision enum's meta["recipe"]); None: no recipe recorded
    recipe: str | None = None

    def __post_init__(self) -> None:
        if self.image_size is not None and self.image_size < self.min_size:
            raise RegistryError(
                f"model {self.name!r}: image_size {self.image_size} is below its min_size "
                f"{self.min_size} (imagenot.train.registry.ModelSpec)"
            )


def _torchvision(builder: str, num_classes: int) -> nn.Module:
    import torchvision

    return getattr(torchvision.models, builder)(weights=None, num_classes=num_classes)


def _timm(name: str, num_classes: int) -> nn.Module:
    import timm

    return timm.create_model(name, pretrained=False, num_classes=num_classes)


def _alexnet_mini(num_classes: int) -> nn.Module:
    """AlexNet's layout (5 conv, 3 max-pool, 3 FC with dropout) at a quarter of its width.

    Sized for 64 px inputs: the first convolution strides 2 (not 4), so the feature maps keep
    AlexNet's proportions (31, 15, 7, 3 px at 64 px as 55, 27, 13, 6 at 224), and dropout is
    0.25 (not 0.5): at 0.5 it stays near chance within a CPU demo's few dozen optimiser steps.
    """
    from torch import nn

    layers, c_in = [], 3
    # AlexNet's five convolutions: (out channels, kernel, stride, padding, max-pool after)
    for c_out, k, stride, pad, pool in (
        (16, 11, 2, 2, True),
        (48, 5, 1, 2, True),
        (96, 3, 1, 1, False),
        (64, 3, 1, 1, False),
        (64, 3, 1, 1, True),
    ):
        layers += [nn.Conv2d(c_in, c_out, k, stride=stride, padding=pad), nn.ReLU(inplace=True)]
        layers += [nn.MaxPool2d(3, 2)] if pool else []
        c_in = c_out
    return nn.Sequential(
        nn.Sequential(*layers),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Sequential(
            nn.Dropout(0.25),
            nn.Linear(64 * 4, 256),
            nn.ReLU(inplace=True),
            nn.Dropout(0.25),
            nn.Linear(256, 256),
            nn.ReLU(inplace=True),
            nn.Linear(256, num_classes),
        ),
    )


def _vgg_mini(num_classes: int) -> nn.Module:
    """VGG-11-BN's conv configuration at an eighth of its width, with a narrow VGG classifier.

    Batch norm (torchvision's ``vgg11_bn`` variant): without it eight plain conv layers do not
    leave chance level within a CPU demo's few dozen optimiser steps.
    """
    from torch import nn
    from torchvision.models.vgg import make_layers

    return nn.Sequential(
        make_layers([8, "M", 16, "M", 32, 32, "M", 64, 64, "M", 64, 64, "M"], batch_norm=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Sequential(
            nn.Linear(64, 128),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(128, 128),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(128, num_classes),
        ),
    )


def _resnet_mini(num_classes: int) -> nn.Module:
    """ResNet with one BasicBlock per stage (ResNet-10), torchvision's ResNet class."""
    from torchvision.models.resnet import BasicBlock, ResNet

    return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=num_classes)


def _densenet_mini(num_classes: int) -> nn.Module:
    """DenseNet-BC with growth rate 12 and 2 layers per block, torchvision's DenseNet class."""
    from torchvision.models.densenet import DenseNet

    return DenseNet(
        growth_rate=12, block_config=(2, 2, 2, 2), num_init_features=24, num_classes=num_classes
    )


@dataclass(frozen=True)
class Recipe:
    """A training recipe the paper states for its models' published weights (torchvision's own
    recipes, docs/method.md section 5), and the pages torchvision names as the recipe of weights
    trained by it (a weights enum's ``meta["recipe"]``)."""

    paper: str  # the recipe in the paper's words
    published: tuple[str, ...]  # meta["recipe"] of torchvision weights trained by it


_REFERENCES = "https://github.com/pytorch/vision/tree/main/references/classification"
#: The recipes of the paper's published weights: a registry entry's ``recipe`` names one, and
#: its weights must be ones torchvision lists under that recipe.
RECIPES: Registry = Registry(
    "weights recipe",
    {
        "classic": Recipe(
            "batch 32, 90 epochs, SGD lr 0.1, momentum 0.9, weight decay 1e-4, step LR every 30 "
            "epochs x0.1",
            # ResNets; DenseNets ported from LuaTorch (DenseNet paper: 90 epochs, lr 0.1 divided
            # by 10 at epochs 30 and 60, momentum 0.9, weight decay 1e-4)
            (f"{_REFERENCES}#resnet", "https://github.com/pytorch/vision/pull/116"),
        ),
        "classic-lr-0.01": Recipe(
            "the classic recipe at lr 1e-2 (AlexNet, VGG)", (f"{_REFERENCES}#alexnet-and-vgg",)
        ),
        "efficientnet-v2": Recipe(
            "lr 0.5, cosine schedule with warm-up, weight decay 2e-5",
            (f"{_REFERENCES}#efficientnet-v2",),  # torchvision's weights: ported from the paper
        ),
        "convnext": Recipe("lr 1e-3, cosine schedule with warm-up", (f"{_REFERENCES}#convnext",)),
    },
)


def _register(*specs: ModelSpec) -> Registry:
    return Registry("model", {spec.name: spec for spec in specs})


def _tv(
    name: str, family: str, head: str, min_size: int, weights: str, recipe: str | None = None
) -> ModelSpec:
    return ModelSpec(
        name, family, partial(_torchvision, name), head, min_size, weights, recipe=recipe
    )


#: The one list of model names (the config schema's ``train.models`` items derive from it).
#: Register a new one with ``MODELS.register(name, ModelSpec(...))``.
#: A table, one entry a line or two (not the formatter's one argument a line, which made the
#: long entries seven-line blocks of one shape).
# fmt: off
MODELS: Registry = _register(
    # The seven paper models (docs/method.md section 4), each with the weights of the recipe
    # the paper states for it (RECIPES): ResNet-152's IMAGENET1K_V1 (classic recipe, 78.3 %
    # top-1), not IMAGENET1K_V2 (torchvision's newer recipe, 82.3 %).
    _tv("alexnet", "alexnet", "classifier.6", 63, "AlexNet_Weights.IMAGENET1K_V1",
        "classic-lr-0.01"),
    _tv("vgg19", "vgg", "classifier.6", 32, "VGG19_Weights.IMAGENET1K_V1", "classic-lr-0.01"),
    _tv("resnet18", "resnet", "fc", 1, "ResNet18_Weights.IMAGENET1K_V1", "classic"),
    _tv("resnet152", "resnet", "fc", 1, "ResNet152_Weights.IMAGENET1K_V1", "classic"),
    _tv("densenet161", "densenet", "classifier", 29, "DenseNet161_Weights.IMAGENET1K_V1",
        "classic"),
    _tv("efficientnet_v2_l", "efficientnet", "classifier.1", 33,
        "EfficientNet_V2_L_Weights.IMAGENET1K_V1", "efficientnet-v2"),
    _tv("convnext_large", "convnext", "classifier.2", 32, "ConvNeXt_Large_Weights.IMAGENET1K_V1",
        "convnext"),
    # Small torchvision members of the same families.
    _tv("vgg11", "vgg", "classifier.6", 32, "VGG11_Weights.IMAGENET1K_V1"),
    _tv("densenet121", "densenet", "classifier", 29, "DenseNet121_Weights.IMAGENET1K_V1"),
    _tv("efficientnet_b0", "efficientnet", "classifier.1", 1,
        "EfficientNet_B0_Weights.IMAGENET1K_V1"),
    _tv("convnext_tiny", "convnext", "classifier.2", 32, "ConvNeXt_Tiny_Weights.IMAGENET1K_V1"),
    # CPU-demo members (no published weights): torchvision classes narrowed, timm's smallest.
    ModelSpec("alexnet_mini", "alexnet", _alexnet_mini, "3.6", 35),
    ModelSpec("vgg_mini", "vgg", _vgg_mini, "3.6", 32),
    ModelSpec("resnet_mini", "resnet", _resnet_mini, "fc", 1),
    ModelSpec("densenet_mini", "densenet", _densenet_mini, "classifier", 29),
    ModelSpec("efficientnet_mini", "efficientnet", partial(_timm, "tinynet_e"), "classifier", 1,
              "timm:tinynet_e.in1k"),
    ModelSpec("convnext_mini", "convnext", partial(_timm, "convnext_atto"), "head.fc", 32,
              "timm:convnext_atto.d2_in1k"),
)
# fmt: on


def get_spec(name: str) -> ModelSpec:
    """The registry entry of ``name``; an unknown name is an error listing the registered ones."""
    return MODELS.entry(name)


def input_size(name: str, image_size: int) -> int:
    """The input side model ``name`` trains, stores features and is evaluated at: the side its
    entry declares (``ModelSpec.image_size``), else ``image_size`` (config ``train.image_size``,
    the side of every model that declares none). One answer for the jobs (``JobSettings``), the
    preflight and the runtime estimates; a run's ``result.json`` records it for the evaluation."""
    own = get_spec(name).image_size
    return image_size if own is None else own


def check_input_size(name: str, image_size: int) -> None:
    """Raise if model ``name`` would get inputs below its minimum side at ``train.image_size``
    ``image_size`` (a model that declares its own size does not take it)."""
    spec = get_spec(name)
    if input_size(name, image_size) < spec.min_size:
        raise RegistryError(
            f"model {name!r} needs inputs of at least {spec.min_size} px; train.image_size is "
            f"{image_size}"
        )


def build_model(name: str, num_classes: int) -> nn.Module:
    """A randomly initialised ``name`` with a ``num_classes``-way head."""
    return get_spec(name).build(num_classes)


def head_module(model: nn.Module, name: str) -> nn.Module:
    """The classifier head (final nn.Linear) of a model built from registry entry ``name``."""
    return model.get_submodule(get_spec(name).head)


def head_keys(name: str, state: dict) -> set[str]:
    """Keys of ``state`` (a state dict of model ``name``) that belong to the classifier head."""
    prefix = get_spec(name).head + "."
    return {key for key in state if key.startswith(prefix)}


def load_backbone(model: nn.Module, name: str, state: dict, source: str) -> None:
    """Load every weight of ``state`` except the classifier head into ``model`` (FT/TL start).

    The head keeps its fresh initialisation (the target's number of classes differs). Any other
    missing, unexpected or mis-shaped key is an error naming ``source``.
    """
    own = model.state_dict()
    skip = head_keys(name, own) | head_keys(name, state)
    wanted = {k for k in own if k not in skip}
    given = {k: v for k, v in state.items() if k not in skip}
    missing, unexpected = sorted(wanted - set(given)), sorted(set(given) - wanted)
    if missing or unexpected:
        raise RegistryError(
            f"{source}: weights do not fit model {name!r}: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    for key, value in given.items():
        if tuple(value.shape) != tuple(own[key].shape):
            raise RegistryError(
                f"{source}: weight {key!r} has shape {tuple(value.shape)}, model {name!r} "
                f"expects {tuple(own[key].shape)}"
            )
    model.load_state_dict(given, strict=False)


def read_state_dict(path: str | Path, record: str | Path | None = None) -> dict:
    """A state dict from a ``.safetensors`` file, or a torchvision ``.pth`` (weights_only). A
    final run's weights (an FT/TL job's start, ``.../final/seed-{seed}/model.safetensors``) are
    read as the evaluation reads them, with their run's ``record`` (its ``result.json``, a role
    of the job: :func:`imagenot.train.experiments.init_record`): the record checked against
    its own path and theirs (the run they start from is the one both name) and naming their
    digest, which they must hold. Weights where the layout puts a final run's, handed without
    their record, and a record handed with weights that are no safetensors file, are refused."""
    import torch

    from imagenot.train.checkpoints import check_finite, load_tensors, load_weights
    from imagenot.train.records import path_identity, read_final

    path = Path(path)
    if not path.is_file():
        raise RegistryError(f"weights file {path} does not exist")
    if record is not None:
        if path.suffix != ".safetensors":
            raise RegistryError(
                f"{path}: weights read with a run's record ({record}) are a final run's "
                "model.safetensors"
            )
        checked = read_final(record, paths=(path,))
        return load_weights(path, checked.weights_sha256, require_digest=True)
    if path.suffix == ".safetensors" and path_identity(path, FINAL_MODEL) is not None:
        raise RegistryError(
            f"{path}: a final run's weights, read only with its record (--init-record)"
        )
    if path.suffix == ".safetensors":  # other safetensors files check a digest they hold
        return load_tensors(path)[0]
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise RegistryError(f"{path}: not a state dict")
    check_finite({k: v for k, v in state.items() if torch.is_tensor(v)}, path)
    return state


#: Where published weights come from: source -> ``name -> file name`` under
#: ``train.weights_dir`` (nothing is downloaded at run time; the file holds a state dict the
#: registered builder's model loads). A weights reference without ``SOURCE:`` is torchvision's.
WEIGHT_SOURCES: Registry = Registry(
    "weights source",
    {
        "torchvision": "imagenot.train.facts:torchvision_weights_filename",
        "timm": "imagenot.train.registry:timm_weights_filename",
        "file": "imagenot.train.registry:file_weights_filename",
    },
)


def split_weights(weights: str) -> tuple[str, str]:
    """``(source, name)`` of a weights reference (``"timm:resnet18.a1_in1k"``, or a bare
    torchvision enum name); an unknown source is an error listing the registered ones."""
    source, sep, name = weights.partition(":")
    if not sep:
        return "torchvision", weights
    WEIGHT_SOURCES.entry(source)
    return source, name


def weights_filename(weights: str) -> str:
    """The file of a weights reference, relative to ``train.weights_dir`` (absolute for a
    ``file:`` reference given as an absolute path)."""
    source, name = split_weights(weights)
    return resolve(WEIGHT_SOURCES[source])(name)


def timm_weights_filename(name: str) -> str:
    """timm's pretrained weights ``name`` (``model.tag``) as the Hugging Face hub stores them
    (repository ``timm/<name>``, file ``model.safetensors``): fetch once with
    ``.venv/bin/hf download timm/<name> model.safetensors --local-dir <weights_dir>/timm/<name>``.
    The state dict loads into ``timm.create_model(model)``, the registry's builder."""
    return f"timm/{name}/model.safetensors"


def file_weights_filename(name: str) -> str:
    """A state dict file of the user's (``.safetensors`` or ``.pth``), as named."""
    return name
