"""The 17 test-time transformations of the robustness evaluation, on batched tensors.

Every transformation takes a batch ``x`` (float, ``B x 3 x H x W`` in [0, 1]: the images a model
sees, after its own resize and centre crop and before its normalisation) and a matrix ``u`` of
per-image uniforms in [0, 1) (``B x n_uniforms``), and returns a batch of the same shape, dtype
and range.

One strength on every dataset: a transformation acts on the model's input, so a dataset's stored
size (ImageNet at 480 px for EfficientNet-V2-L's resize, ImageNot at 256) never changes what the
model sees. Most strengths are relative already (angles, fractions of the side, factors,
intensities); the three sized in pixels (GaussianBlur's kernel_size and sigma, AdjustSharpness'
and Sharpness' 3x3 smoothing) are stated at the input side ``strength_side``
(``train.image_size``, the side models trained here see unless their registry entry declares
their own: 224 in the paper) and scale with the input's side ``s`` by ``s / strength_side`` (a
published weight's own crop, EfficientNet-V2-L's 480 px, gets a blur 480/224 times wider: the
same blur relative to the image; so does a ViT declaring 224 px beside 64 px models). At ``s ==
strength_side`` each is torchvision's operation exactly. All randomness enters through ``u``, which
:func:`image_uniforms` derives from (seed, transformation name, image key) alone, never from the
model, the batch composition, the device or the transformation's place in the registry
(:data:`imagenot.evaluate.transform_registry.TRANSFORMS`, the one list of names). So every model
sees the identical transformed images, and registering a transformation leaves the others' alone.

Column 0 of ``u`` is the application gate: the operation is applied where ``u[:, 0] < p``, and the
image is left untouched elsewhere (torchvision's ``Random*`` semantics). Evaluation uses the gate to
reuse the untransformed images' predictions instead of running the model on unchanged copies.

Each operation reproduces torchvision.transforms.v2 (same formulas, grids and parameter sampling,
bilinear interpolation) with one parameter set per image instead of one per call; the tests check
this against ``torchvision.transforms.v2.functional`` image by image. This module holds the
transformations (their registry builders, parameter sampling and gate) and the per-image seeds;
the batched image kernels they call are in :mod:`imagenot.evaluate.kernels`.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from imagenot.core.registries import resolve
from imagenot.evaluate import kernels
from imagenot.evaluate.transform_registry import TRANSFORMS

Op = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Transform:
    """One test-time transformation: ``op(x, params)`` applied to images whose gate is below ``p``.

    ``n_params`` uniforms per image feed ``op``; ``n_uniforms = 1 + n_params`` counts the gate.
    """

    name: str
    stream: int  # transform_stream(name): seeds this transformation's randomness
    p: float
    n_params: int
    op: Op

    @property
    def n_uniforms(self) -> int:
        return 0 if self.name == "Identity" else 1 + self.n_params

    def gate(self, u: torch.Tensor) -> torch.Tensor:
        """Boolean mask (B,) of images the operation changes."""
        if self.n_uniforms == 0:
            return torch.zeros(u.shape[0], dtype=torch.bool, device=u.device)
        return u[:, 0] < self.p

    def __call__(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """The transformed batch (a new tensor; ``x`` is not modified)."""
        mask = self.gate(u)
        out = x.clone()
        if bool(mask.any()):
            out[mask] = self.op(x[mask], u[mask, 1:])
        return out


# --------------------------------------------------------------------------- per-image seeds


_MASK64 = (1 << 64) - 1


def key_hash(key: str) -> int:
    """A stable 64-bit integer of an image key (independent of Python's hash seed)."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "little")


def key_hashes(keys: Sequence[str]) -> np.ndarray:
    """:func:`key_hash` of each key (uint64), computed once per batch and reused by every transform."""
    return np.fromiter((key_hash(k) for k in keys), dtype=np.uint64, count=len(keys))


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function (Steele et al. 2014) on uint64 arrays (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def transform_stream(name: str) -> int:
    """The random stream of transformation ``name``: a stable hash of its name, never its position
    in the registry (inserting a transformation must not change the images of the others)."""
    return key_hash(f"transform:{name}")


def image_uniforms(seed: int, stream: int, keys: Sequence[str] | np.ndarray, n: int) -> np.ndarray:
    """``len(keys) x n`` uniforms in [0, 1): row i depends only on (seed, stream, keys[i]).

    A counter-based generator: the stream of image i is SplitMix64 of (image state + j), the image
    state mixing the key's hash with (seed, stream). ``keys`` may be strings or :func:`key_hashes`.
    """
    hashes = keys if isinstance(keys, np.ndarray) else key_hashes(keys)
    if n == 0 or len(hashes) == 0:
        return np.empty((len(hashes), n), dtype=np.float64)
    stream = _splitmix64(np.array([(seed * 0x100000001B3 + stream) & _MASK64], dtype=np.uint64))
    state = _splitmix64(hashes.astype(np.uint64) ^ stream)
    counters = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    bits = _splitmix64(state[:, None] + counters[None, :])
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


# --------------------------------------------------------------------------- parameter sampling


def _between(u: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    return lo + u * (hi - lo)


def _randint(u: torch.Tensor, lo: torch.Tensor | int, hi: torch.Tensor | int) -> torch.Tensor:
    """Integers uniform in [lo, hi) from uniforms in [0, 1) (like ``torch.randint(lo, hi)``)."""
    return (lo + torch.floor(u * (hi - lo))).to(torch.long)


# --------------------------------------------------------------------------- registry


def _fixed(op: Callable[..., torch.Tensor]) -> Callable[..., tuple[int, Op]]:
    """The builder of a transformation that draws no parameter: ``op(x, **params)`` on every
    image its gate opens, ``params`` its config parameters (``Posterize``'s ``bits``)."""
    return lambda **params: (0, lambda x, u: op(x, **params))


_identity = _fixed(lambda x: x)
_grayscale = _fixed(lambda x: kernels.grayscale(x).expand_as(x).clone())
_horizontal_flip = _fixed(lambda x: x.flip(-1))
_invert = _fixed(lambda x: 1.0 - x)
_posterize = _fixed(kernels.posterize)
_solarize = _fixed(kernels.solarize)
_vertical_flip = _fixed(lambda x: x.flip(-2))


def side_scale(x: torch.Tensor, strength_side: int | None) -> float:
    """How many times the side a pixel-sized strength is stated at the images ``x`` are (their
    shorter side over ``strength_side``; 1 where None: strengths in ``x``'s own pixels)."""
    return 1.0 if strength_side is None else min(x.shape[-2:]) / strength_side


def _gaussian_blur(
    kernel_size: int, sigma: Sequence[float], *, strength_side: int | None = None
) -> tuple[int, Op]:
    if kernel_size % 2 != 1:
        raise ValueError(f"GaussianBlur kernel_size must be odd, got {kernel_size}")

    def op(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        scale = side_scale(x, strength_side)
        # odd, and its reflect padding (half the side) inside the image
        # the odd side nearest kernel_size x scale (1 at least), at most the images' reflection
        size = max(1, 2 * round((kernel_size * scale - 1.0) / 2.0) + 1)
        size = min(size, 2 * min(x.shape[-2:]) - 1)
        return kernels.gaussian_blur(x, _between(u[:, 0], *sigma) * scale, size)

    return 1, op


def _adjust_sharpness(sharpness_factor: float, *, strength_side: int | None = None):
    return 0, lambda x, u: kernels.adjust_sharpness(
        x,
        torch.full((x.shape[0],), sharpness_factor, dtype=x.dtype, device=x.device),
        side_scale(x, strength_side),
    )


def _affine(
    degrees: float, translate: Sequence[float], scale: Sequence[float], shear: float, fill: float
) -> tuple[int, Op]:
    def op(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        max_dx, max_dy = translate[0] * w, translate[1] * h
        theta = kernels.inverse_affine(
            angle=_between(u[:, 0], -degrees, degrees),
            tx=torch.round(_between(u[:, 1], -max_dx, max_dx)),
            ty=torch.round(_between(u[:, 2], -max_dy, max_dy)),
            scale=_between(u[:, 3], *scale),
            shear_x=_between(u[:, 4], -shear, shear),
        )
        return kernels.affine(x, theta, fill)

    return 5, op


def _color_jitter(brightness: float, contrast: float, saturation: float, hue: float):
    def op(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        factors = (brightness, contrast, saturation)  # in [max(0, 1 - f), 1 + f], in this order
        b, c, s = (_between(u[:, i], max(0.0, 1 - f), 1 + f) for i, f in enumerate(factors))
        x = kernels.adjust_contrast(kernels.adjust_brightness(x, b), c)
        return kernels.adjust_hue(kernels.adjust_saturation(x, s), _between(u[:, 3], -hue, hue))

    return 4, op


def _contrast(factor: Sequence[float]) -> tuple[int, Op]:
    return 1, lambda x, u: kernels.adjust_contrast(x, _between(u[:, 0], *factor))


def _equalize() -> tuple[int, Op]:
    from torchvision.transforms.v2.functional import equalize  # per channel, 8-bit levels

    return 0, lambda x, u: equalize(x)


def perspective_endpoints(u: torch.Tensor, h: int, w: int, distortion_scale: float) -> torch.Tensor:
    """``B x 4 x 2`` distorted corners (x, y) from ``B x 8`` uniforms, as RandomPerspective draws."""
    bh = int(distortion_scale * (h // 2)) + 1
    bw = int(distortion_scale * (w // 2)) + 1
    corners = [
        (_randint(u[:, 0], 0, bw), _randint(u[:, 1], 0, bh)),
        (_randint(u[:, 2], w - bw, w), _randint(u[:, 3], 0, bh)),
        (_randint(u[:, 4], w - bw, w), _randint(u[:, 5], h - bh, h)),
        (_randint(u[:, 6], 0, bw), _randint(u[:, 7], h - bh, h)),
    ]
    return torch.stack([torch.stack(c, dim=-1) for c in corners], dim=1)


def perspective_startpoints(h: int, w: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``4 x 2`` image corners (x, y): top-left, top-right, bottom-right, bottom-left."""
    return torch.tensor([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]], device=device)


def _perspective(distortion_scale: float, fill: float) -> tuple[int, Op]:
    def op(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        end = perspective_endpoints(u, h, w, distortion_scale)
        start = perspective_startpoints(h, w, x.device).expand_as(end)
        return kernels.perspective(x, kernels.perspective_coefficients(start, end), fill)

    return 8, op


ATTEMPTS = 10  # torchvision's RandomResizedCrop tries 10 boxes, then falls back to a centre crop


def crop_boxes(u: torch.Tensor, h: int, w: int, scale: Sequence[float], ratio: Sequence[float]):
    """(top, left, height, width) per image from ``B x 40`` uniforms, as RandomResizedCrop draws."""
    u = u.reshape(-1, ATTEMPTS, 4).to(torch.float64)
    area = h * w * _between(u[..., 0], *scale)
    aspect = torch.exp(_between(u[..., 1], math.log(ratio[0]), math.log(ratio[1])))
    cw = torch.round(torch.sqrt(area * aspect))
    ch = torch.round(torch.sqrt(area / aspect))
    ok = (cw > 0) & (cw <= w) & (ch > 0) & (ch <= h)
    first = ok.to(torch.int8).argmax(dim=1)
    rows = torch.arange(u.shape[0], device=u.device)
    cw, ch, ui, uj = cw[rows, first], ch[rows, first], u[rows, first, 2], u[rows, first, 3]
    top, left = _randint(ui, 0, h - ch + 1), _randint(uj, 0, w - cw + 1)
    found = ok.any(dim=1)
    # fallback: the largest centre crop whose aspect ratio lies within ``ratio``
    in_ratio = w / h
    if in_ratio < ratio[0]:
        fw, fh = w, round(w / ratio[0])
    elif in_ratio > ratio[1]:
        fw, fh = round(h * ratio[1]), h
    else:
        fw, fh = w, h
    ftop, fleft = (h - fh) // 2, (w - fw) // 2

    def pick(a: torch.Tensor, b: int) -> torch.Tensor:
        return torch.where(found, a.to(torch.long), torch.full_like(a, b, dtype=torch.long))

    return pick(top, ftop), pick(left, fleft), pick(ch, fh), pick(cw, fw)


def _resized_crop(scale: Sequence[float], ratio: Sequence[float]) -> tuple[int, Op]:
    def op(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return kernels.resized_crop(x, *crop_boxes(u, x.shape[-2], x.shape[-1], scale, ratio))

    return 4 * ATTEMPTS, op


def _rotation(degrees: float, fill: float) -> tuple[int, Op]:
    def op(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        angle = _between(u[:, 0], -degrees, degrees)
        zero = torch.zeros_like(angle)
        # torchvision's rotate(angle) is counter-clockwise: the affine warp of -angle
        return kernels.affine(x, kernels.inverse_affine(-angle, zero, zero, zero + 1.0, zero), fill)

    return 1, op


def _sharpness(factor: Sequence[float], *, strength_side: int | None = None) -> tuple[int, Op]:
    return 1, lambda x, u: kernels.adjust_sharpness(
        x, _between(u[:, 0], *factor), side_scale(x, strength_side)
    )


def names() -> tuple[str, ...]:
    """The registered transformations, in registry order."""
    return TRANSFORMS.names()


@functools.cache
def _with_probability(registered: tuple[str, ...]) -> frozenset[str]:
    """The transformations whose parameters (``evaluate.transforms.<name>`` in the schema, or
    the registry entry's ``params_schema``) include ``p``, the probability of applying it, read
    from the schema once per set of registered names (a plugin registering one later gets a
    fresh read). One without (``Identity``, a plugin's registered without parameters) changes
    every image it is applied to, always."""
    from imagenot.core.config import schema_node

    node = schema_node("evaluate.transforms")["properties"]
    return frozenset(n for n in registered if "p" in node[n].get("properties", {}))


def build_transform(
    name: str, params: Mapping[str, Any] | None = None, strength_side: int | None = None
) -> Transform:
    """The transformation ``name`` with its config parameters (``p`` = application probability,
    required where the transformation has one: its default lives in the schema, which the
    validated ``evaluate.transforms`` section has filled in). ``strength_side``: the input side
    its pixel-sized strengths are stated at (module docstring), passed to a builder that takes
    it (a keyword ``strength_side``: the built-in pixel-sized three, a plugin's own); None:
    strengths in the images' own pixels (torchvision's operation at any size)."""
    entry = TRANSFORMS.entry(name)
    params = dict(params or {})
    if name not in _with_probability(tuple(TRANSFORMS)):
        p = 1.0  # no probability to choose: the operation applies to every image
    elif "p" in params:
        p = float(params.pop("p"))
    else:
        raise KeyError(f"evaluate.transforms.{name}.p is missing (settings not validated?)")
    build = resolve(entry.build)
    if "strength_side" in inspect.signature(build).parameters:
        params["strength_side"] = strength_side
    n_params, op = build(**params)
    return Transform(name=name, stream=transform_stream(name), p=p, n_params=n_params, op=op)


def build_transforms(
    settings: Mapping[str, Mapping[str, Any]], strength_side: int | None = None
) -> list[Transform]:
    """Every registered transformation, in registry order, parameterised by ``settings[name]``,
    its pixel-sized strengths stated at ``strength_side`` (:func:`build_transform`)."""
    if unknown := set(settings) - set(TRANSFORMS):
        raise KeyError(
            f"unknown transformation(s) {sorted(unknown)}; known: {', '.join(TRANSFORMS)}"
        )
    return [build_transform(name, settings.get(name), strength_side) for name in TRANSFORMS]


def transform_uniforms(
    transform: Transform,
    seed: int,
    keys: Sequence[str] | np.ndarray,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """The per-image uniforms of ``transform`` for ``keys`` (``B x n_uniforms``, float32)."""
    u = image_uniforms(seed, transform.stream, keys, transform.n_uniforms)
    return torch.from_numpy(u).to(device=device, dtype=torch.float32)
