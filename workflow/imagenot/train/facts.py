"""A model's own facts: how its published weights want their input, and what they scored.

Why: the published weights of the paper's models do not share one protocol. torchvision's
``EfficientNet_V2_L_Weights.IMAGENET1K_V1`` expects 480 px, bicubic, mean = std = 0.5; ConvNeXt-L
resize 232 / crop 224; ResNet resize 256 / crop 224 (``weights.transforms()``). One global
normalisation and resolution would feed and evaluate them outside that protocol, with no error,
and a second table of published accuracies could miss a new model. So each
weights reference (``imagenot.train.registry.WEIGHT_SOURCES``) has one :class:`WeightFacts`,
read from where its publisher keeps it, as timm's ``PretrainedCfg`` does:

- torchvision: the weights enum (``weights.transforms()``: resize, crop, interpolation,
  mean/std; ``weights.meta["_metrics"]``: top-1/top-5), offline (the enum carries them);
- timm: ``timm.models.get_pretrained_cfg`` (input size, ``crop_pct``, interpolation, mean/std,
  classifier), offline; timm's configs carry no accuracy, so top-1/top-5 stay empty (such a
  model is left off the published-ImageNet axis, and the accuracy table logs it);
- file: the registry entry's own ``facts``.

``resources/published_weights.csv`` is derived from these readers (``.venv/bin/python -m
imagenot.train.facts`` rewrites it; ``tests/test_model_facts.py`` fails when it is stale): it
exists because planning the DAG must not import torch (seconds per Snakemake parse), and the
weights' file names, the statistics of FT/TL jobs and the stored size a reference dataset needs
are plan-time facts. A weights
reference missing from it is read live, so adding a model is still one registry entry.
"""

from __future__ import annotations

import csv
import io
import math
import sys
from dataclasses import asdict, dataclass, fields, replace
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from imagenot.core.escape import csv_row
from imagenot.core.registries import RegistryError
from imagenot.train.registry import MODELS, RECIPES, get_spec, split_weights, timm_weights_filename

if TYPE_CHECKING:
    import torch

#: The derived table of every registered weights reference's facts (module docstring).
PUBLISHED_TABLE = "published_weights.csv"
INTERPOLATIONS = ("bilinear", "bicubic")
#: How far (percentage points) a published weight's measured top-1 may lie from its published
#: one before the evaluation's log and the report's ``published_check`` table flag it.
PUBLISHED_TOLERANCE = 0.3
#: The test set the published top-1 is measured on (ILSVRC-2012's validation images): a run on
#: fewer images (a subset of classes or images) differs by design, and is not checked.
PUBLISHED_TEST_SIZE = 50_000


@dataclass(frozen=True)
class Preprocessing:
    """How a model's input is made from a stored image: ``resize_size`` (the shorter side, then
    a centre crop of ``crop_size``; None: the whole image resized to ``crop_size`` square, the
    convention of models trained here), ``interpolation`` (antialiased), then ``(x - mean) /
    std`` on values in [0, 1]."""

    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    crop_size: int
    resize_size: int | None
    interpolation: str

    def __post_init__(self) -> None:
        if self.interpolation not in INTERPOLATIONS:
            raise RegistryError(
                f"interpolation {self.interpolation!r}: one of {', '.join(INTERPOLATIONS)}"
            )
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise RegistryError(f"mean {self.mean} / std {self.std}: three values, std > 0")

    @classmethod
    def trained(cls, normalisation: dict, image_size: int) -> Preprocessing:
        """A model trained here: its ``train.normalisation`` and ``train.image_size``, the whole
        image resized bilinearly (``imagenot.train.feed.preprocess``)."""
        return cls.from_dict(
            {**normalisation, "crop_size": image_size, "interpolation": "bilinear"}
        )

    @classmethod
    def from_dict(cls, d: dict) -> Preprocessing:
        resize = None if d.get("resize_size") is None else int(d["resize_size"])
        return cls(
            tuple(d["mean"]), tuple(d["std"]), int(d["crop_size"]), resize, d["interpolation"]
        )

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON values (what ``result.json`` records; :meth:`from_dict` reads)."""
        return {**asdict(self), **self.normalisation()}

    def normalisation(self) -> dict[str, list[float]]:
        """``{"mean": [...], "std": [...]}``, as ``train.normalisation`` spells it."""
        return {"mean": list(self.mean), "std": list(self.std)}

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """Float [0, 1] ``B x 3 x H x W`` (a stored image) -> the model's input:
        :meth:`normalise` of :meth:`geometry`."""
        return self.normalise(self.geometry(x))

    def geometry(self, x: torch.Tensor) -> torch.Tensor:
        """Float [0, 1] ``B x 3 x H x W`` (a stored image) -> the image the model sees, in
        [0, 1] at ``crop_size`` square, before normalisation (where the evaluation's
        transformations act). With a ``resize_size`` this is ``weights.transforms()`` on the
        image as a uint8 picture (torchvision's resize and centre crop on uint8, antialiased;
        then [0, 1]). Without one, the whole image is resized in float as training's input is
        (unchanged when it already has the size)."""
        import torch
        import torch.nn.functional as F

        if self.resize_size is None:
            if tuple(x.shape[-2:]) != (self.crop_size, self.crop_size):
                size = (self.crop_size, self.crop_size)
                x = F.interpolate(x, size=size, mode=self.interpolation, antialias=True)
                x = x.clamp_(0.0, 1.0)
            return x
        pixels = self._resize_crop(x.mul(255.0).round_().clamp_(0, 255).to(torch.uint8))
        return pixels.to(torch.float32).div_(255.0)

    def _resize_crop(self, image):
        """``weights.transforms()``' resize of the shorter side and centre crop of a uint8
        tensor or a Pillow image, by torchvision.transforms.functional as it calls them (the v2
        functions round some uint8 resizes differently, by one level)."""
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as TF

        mode = InterpolationMode(self.interpolation)
        return TF.center_crop(
            TF.resize(image, [self.resize_size], mode, antialias=True), [self.crop_size]
        )

    def pil_geometry(self, image) -> torch.Tensor:
        """A Pillow RGB image (an original file, decoded as torchvision's datasets decode it)
        -> the uint8 CHW image the model sees: ``weights.transforms()``' resize of the shorter
        side and centre crop on the Pillow image, as torchvision's reference evaluation (its
        default Pillow backend) ran them for the published accuracies. Needs a
        ``resize_size``."""
        from torchvision.transforms.functional import pil_to_tensor

        if self.resize_size is None:
            raise ValueError("pil_geometry: a protocol without resize_size resizes stored copies")
        return pil_to_tensor(self._resize_crop(image))

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """``(x - mean) / std`` of a [0, 1] image (a new tensor)."""
        import torch

        m = torch.tensor(self.mean, dtype=x.dtype, device=x.device).reshape(1, 3, 1, 1)
        s = torch.tensor(self.std, dtype=x.dtype, device=x.device).reshape(1, 3, 1, 1)
        return (x - m).div_(s)

    def smallest_stored_size(self) -> int:
        """The smallest stored (square) image side this protocol does not upsample."""
        return max(self.crop_size, self.resize_size or 0)


@dataclass(frozen=True)
class WeightFacts:
    """One weights reference's facts (module docstring): its preprocessing, classifier, the
    published ImageNet top-1/top-5 (percent; None where the publisher states none) and where
    they come from."""

    weights: str
    weights_file: str
    preprocessing: Preprocessing
    source: str
    classifier: str | None = None  # None: the registry entry's head (live_facts)
    top1: float | None = None
    top5: float | None = None


# the derived table's columns: the model, then a weights reference's facts, its
# preprocessing's fields where the table spells them out
TABLE_COLUMNS = (
    *("model", "weights", "top1", "top5", "source", "weights_file"),
    *(f.name for f in fields(Preprocessing)),
    "classifier",
)


def torchvision_facts(name: str) -> WeightFacts:
    """The facts of torchvision weights enum ``name`` (``"ResNet18_Weights.IMAGENET1K_V1"``)."""
    import torchvision
    from torchvision.models import get_weight

    try:
        weights = get_weight(name)
    except (ValueError, KeyError, AttributeError) as exc:
        raise RegistryError(f"unknown torchvision weights {name!r}: {exc}") from exc
    t = weights.transforms()
    metrics = weights.meta.get("_metrics", {}).get("ImageNet-1K", {})
    return WeightFacts(
        weights=name,
        weights_file=weights.url.rsplit("/", 1)[-1],
        preprocessing=Preprocessing(
            tuple(t.mean),
            tuple(t.std),
            int(t.crop_size[0]),
            int(t.resize_size[0]),
            t.interpolation.value,
        ),
        top1=metrics.get("acc@1"),
        top5=metrics.get("acc@5"),
        source=f"torchvision {torchvision.__version__.split('+')[0]} {name}: transforms(), "
        f"meta['_metrics'] ({weights.meta.get('recipe', '')})",
    )


def timm_facts(name: str) -> WeightFacts:
    """The facts of timm's pretrained weights ``name`` (``model.tag``), from its pretrained
    config: the eval resize is ``floor(input_size / crop_pct)``, then a centre crop of
    ``input_size`` (timm's ``transforms_factory`` for ``crop_mode='center'``)."""
    import timm
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)
    if cfg is None:
        raise RegistryError(f"unknown timm pretrained weights {name!r}")
    if (cfg.crop_mode or "center") != "center":
        raise RegistryError(f"timm weights {name!r}: crop_mode {cfg.crop_mode!r} (only center)")
    size = int(cfg.input_size[-1])
    return WeightFacts(
        weights=f"timm:{name}",
        weights_file=timm_weights_filename(name),
        preprocessing=Preprocessing(
            tuple(cfg.mean),
            tuple(cfg.std),
            size,
            math.floor(size / cfg.crop_pct),
            cfg.interpolation,
        ),
        classifier=cfg.classifier,
        source=f"timm {timm.__version__} get_pretrained_cfg({name!r}) (no published accuracy)",
    )


def file_facts(name: str, model: str | None) -> WeightFacts:
    """The facts of a ``file:`` weights reference: the registry entry's ``facts`` (a dict of
    :class:`Preprocessing`'s fields plus optional ``top1``, ``top5``, ``source``)."""
    given = get_spec(model).facts if model else None
    if not given:
        raise RegistryError(
            f"weights file:{name} of model {model!r}: a file source states its preprocessing "
            f"in the registry entry's facts (mean, std, crop_size, resize_size, interpolation)"
        )
    return WeightFacts(
        weights=f"file:{name}",
        weights_file=name,
        preprocessing=Preprocessing.from_dict(given),
        classifier=get_spec(model).head,
        top1=given.get("top1"),
        top5=given.get("top5"),
        source=given.get("source", f"registry entry {model!r}"),
    )


def recipe_problem(spec) -> str | None:
    """Why registry entry ``spec``'s published weights contradict the recipe it records as the
    reason for them (``ModelSpec.recipe``): torchvision's weights enum names the recipe that
    trained them (``meta["recipe"]``, ``meta["_docs"]``), and it must be one the recorded
    recipe lists. None when they agree or the entry records no recipe."""
    from torchvision.models import get_weight

    if spec.recipe is None:
        return None
    recipe = RECIPES.entry(spec.recipe)
    source, name = split_weights(spec.weights or "")
    if source != "torchvision":
        return (
            f"model {spec.name!r}: recipe {spec.recipe!r} is checked against a torchvision "
            f"weights enum; its weights are {spec.weights!r}"
        )
    meta = get_weight(name).meta
    if meta.get("recipe") in recipe.published:
        return None
    docs = " ".join(meta.get("_docs", "").split())
    return (
        f"model {spec.name!r}: weights {spec.weights} were trained by {meta.get('recipe')} "
        f"({docs}), not by the recorded recipe {spec.recipe!r} ({recipe.paper}: "
        f"{', '.join(recipe.published)})"
    )


def live_facts(weights: str, model: str | None) -> WeightFacts:
    """The facts of a weights reference, read from its publisher (imports torch); ``model``:
    the registry entry whose weights they are (a ``file:`` source's facts are its entry's;
    None where no entry is meant)."""
    source, name = split_weights(weights)
    readers = {"torchvision": torchvision_facts, "timm": timm_facts}
    facts = readers[source](name) if source in readers else file_facts(name, model)
    if facts.classifier is None and model is not None:
        # torchvision's enums do not name the head; the entry's is the one the model has
        facts = replace(facts, classifier=get_spec(model).head)
    return facts


def _cell(value) -> str:
    """A value as the derived table writes it: numbers as Python reads them back, a tuple of
    them space-separated, None empty."""
    if isinstance(value, tuple):
        return " ".join(repr(float(v)) for v in value)
    return "" if value is None else value if isinstance(value, str) else repr(value)


def table_row(model: str, facts: WeightFacts) -> dict[str, str]:
    """``facts`` as a row of the derived table."""
    values = {"model": model, **asdict(facts), **asdict(facts.preprocessing)}
    return {column: _cell(values[column]) for column in TABLE_COLUMNS}


def _from_row(row: dict[str, str]) -> WeightFacts:
    numbers = {k: [float(v) for v in row[k].split()] for k in ("mean", "std")}
    return WeightFacts(
        weights=row["weights"],
        weights_file=row["weights_file"],
        preprocessing=Preprocessing.from_dict(
            {**row, **numbers, "resize_size": row["resize_size"] or None}
        ),
        classifier=row["classifier"] or None,
        top1=float(row["top1"]) if row["top1"] else None,
        top5=float(row["top5"]) if row["top5"] else None,
        source=row["source"],
    )


def derived_table() -> str:
    """The table's text as the readers make it: one row per registry entry with weights."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(TABLE_COLUMNS)
    for name, spec in MODELS.items():
        if problem := recipe_problem(spec):
            raise RegistryError(problem)
        if spec.weights:
            row = table_row(name, live_facts(spec.weights, name))
            writer.writerow(csv_row(row[column] for column in TABLE_COLUMNS))
    return out.getvalue()


@cache
def shipped_rows() -> tuple[dict[str, str], ...]:
    """The shipped derived table's rows (read without torch)."""
    text = resources.files("imagenot.resources").joinpath(PUBLISHED_TABLE).read_text()
    return tuple(csv.DictReader(text.splitlines()))


def shipped_path() -> str:
    """The shipped table's file (the accuracy table's input)."""
    return str(resources.files("imagenot.resources").joinpath(PUBLISHED_TABLE))


def weight_facts(weights: str, model: str | None) -> WeightFacts:
    """The facts of a weights reference: the shipped table's row when it lists it (no torch),
    else read live (module docstring)."""
    for row in shipped_rows():
        if row["weights"] == weights and (not weights.startswith("file:") or row["model"] == model):
            return _from_row(row)
    return live_facts(weights, model)


def run_preprocessing(info: dict[str, Any], where: Any) -> Preprocessing:
    """The input protocol a run's ``result.json`` (``info``, read from ``where``) records: a
    published weight's own (``preprocessing``: ``imagenot.train.published.run_published``), else the
    image size and normalisation the run trained with. Used by the evaluation and the
    diagnostics' backbone embeddings alike."""
    if info.get("preprocessing"):
        return Preprocessing.from_dict(info["preprocessing"])
    if "normalisation" not in info:
        raise RegistryError(
            f"{where}: lacks key 'normalisation' (the run's input statistics): rerun it"
        )
    return Preprocessing.trained(info["normalisation"], int(info["image_size"]))


def torchvision_weights_filename(weights: str) -> str:
    """File name torchvision downloads the weights enum ``weights`` to (its URL's basename):
    the derived facts table's, else the enum's (:func:`weight_facts`)."""
    return weight_facts(weights, None).weights_file


if __name__ == "__main__":  # rewrite the derived table from the readers
    target = resources.files("imagenot.resources").joinpath(PUBLISHED_TABLE)
    with open(str(target), "w", encoding="utf-8") as fh:
        fh.write(derived_table())
    print(f"wrote {target}", file=sys.stderr)
