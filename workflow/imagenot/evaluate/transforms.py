"""The 17 test-time transformations of the robustness evaluation, on batched tensors.

Every transformation takes a batch ``x`` (float, ``B x 3 x H x W`` in [0, 1]: the stored test
images, before the model's own resize, crop and normalisation) and a matrix ``u`` of per-image uniforms in [0, 1) (``B x n_uniforms``), and
returns a batch of the same shape, dtype and range. All randomness enters through ``u``, which
:func:`image_uniforms` derives from (seed, transformation name, image key) alone, never from the
model, the batch composition, the device or the transformation's place in the registry
(:data:`imagenot.evaluate.transform_registry.TRANSFORMS`, the one list of names). So every model
sees the identical transformed images, and registering a transformation leaves the others' alone.

Column 0 of ``u`` is the application gate: the operation is applied where ``u[:, 0] < p``, and the
image is left untouched elsewhere (torchvision's ``Random*`` semantics). Evaluation uses the gate to
reuse the untransformed images' predictions instead of running the model on unchanged copies.

Each operation reproduces torchvision.transforms.v2 (same formulas, grids and parameter sampling,
bilinear interpolation) with one parameter set per image instead of one per call; the tests check
this against ``torchvision.transforms.v2.functional`` image by image. The kernels are written for
whole batches on the CPU: few passes over the batch (fused blends, the hue rotation in closed form,
sampling grids from one broadcast add, one depthwise convolution for all images), so results agree
with torchvision's up to float rounding (about 1e-5 for the warps, 1e-6 elsewhere).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as nnf

from imagenot.evaluate.transform_registry import TRANSFORMS
from imagenot.registries import resolve

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


# --------------------------------------------------------------------------- batched kernels


def _between(u: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    return lo + u * (hi - lo)


def _randint(u: torch.Tensor, lo: torch.Tensor | int, hi: torch.Tensor | int) -> torch.Tensor:
    """Integers uniform in [lo, hi) from uniforms in [0, 1) (like ``torch.randint(lo, hi)``)."""
    return (lo + torch.floor(u * (hi - lo))).to(torch.long)


def _per_image(v: torch.Tensor) -> torch.Tensor:
    return v.reshape(-1, 1, 1, 1)


def grayscale(x: torch.Tensor) -> torch.Tensor:
    """ITU-R 601 luma (torchvision's weights and operation order), one channel."""
    r, g, b = x.unbind(dim=-3)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(-3)


def blend(x: torch.Tensor, y: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """``ratio * x + (1 - ratio) * y`` clamped to [0, 1], ``ratio`` per image (B,).

    ``y`` may broadcast against ``x`` (a per-image mean, a one-channel image): it is scaled at its
    own size, then a single fused multiply-add and an in-place clamp make the full-size result.
    """
    r = _per_image(ratio)
    return torch.addcmul(y * (1.0 - r), x, r).clamp_(0.0, 1.0)


def adjust_brightness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return torch.mul(x, _per_image(factor)).clamp_(0.0, 1.0)


def adjust_contrast(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Blend with the image's mean luma (weighted channel means: no grayscale image is formed)."""
    luma = torch.tensor((0.2989, 0.587, 0.114), dtype=x.dtype, device=x.device)
    mean = x.mean(dim=(-2, -1)) @ luma  # (B,)
    return blend(x, _per_image(mean), factor)


def adjust_saturation(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return blend(x, grayscale(x), factor)


def _sharpness_kernel(n: int, x: torch.Tensor) -> torch.Tensor:
    # torchvision's smoothing kernel [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13, one per channel
    k = torch.ones(3, 3, dtype=x.dtype, device=x.device)
    k[1, 1] = 5.0
    return (k / k.sum()).expand(n, 1, 3, 3)


def adjust_sharpness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Blend with a 3x3 smoothed copy (border pixels kept), ``factor`` per image.

    The smoothing is one depthwise convolution over all images and channels at once.
    """
    b, c, h, w = x.shape
    if h <= 2 or w <= 2:
        return x
    n = b * c
    smooth = nnf.conv2d(x.reshape(1, n, h, w), _sharpness_kernel(n, x), groups=n)
    out = x.clone()
    # factor * x + (1 - factor) * smooth on the interior, as x + (1 - factor) * (smooth - x)
    out[..., 1:-1, 1:-1].lerp_(smooth.reshape(b, c, h - 2, w - 2), _per_image(1.0 - factor))
    return out.clamp_(0.0, 1.0)


def adjust_hue(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Rotate the HSV hue by ``shift`` (fraction of a turn, per image).

    torchvision's RGB -> HSV -> RGB round trip, fused: the rotated image keeps each pixel's
    maximum and minimum, so saturation and value are never formed. With the hue ``h`` in sextants
    ([0, 6)), channel n (R, G, B: n = 5, 3, 1) is ``max - range * clamp(min(k, 4 - k), 0, 1)``,
    ``k = (n + h) mod 6`` (the six-sector conversion in closed form), computed here as
    ``min + range * clamp(d - 1, 0, 1)`` with ``d`` the distance from ``n - 2 + h`` to the nearest
    multiple of 6.
    """
    # channel planes as contiguous tensors: elementwise ops on strided channel views are slower
    r, g, b = x.movedim(-3, 0).contiguous()
    maxc, minc = torch.maximum(torch.maximum(r, g), b), torch.minimum(torch.minimum(r, g), b)
    crange = maxc - minc
    # torchvision's sector: R holds the maximum, else G, else B (lerp with weight 0 or 1 is exact)
    hue = torch.lerp(
        torch.add(r - g, crange, alpha=4.0),
        torch.add(b - r, crange, alpha=2.0),
        (maxc == g).to(x.dtype),
    )
    hue = torch.lerp(hue, g - b, (maxc == r).to(x.dtype))
    # grey pixels (range 0) have hue 0; a tiny floor keeps 0 / 0 out
    hue.div_(crange.clamp_min(torch.finfo(x.dtype).tiny))
    hue.add_(6.0 * shift.reshape(-1, 1, 1).to(x.dtype)).remainder_(6.0)
    n2 = torch.tensor((3.0, 1.0, -1.0), dtype=x.dtype, device=x.device).reshape(1, 3, 1, 1)
    y = hue.unsqueeze(-3) + n2  # in [-1, 9): the nearest multiple of 6 is 0 or 6
    d = y.abs()
    d = torch.minimum(d, y.sub_(6.0).abs_())
    return torch.addcmul(minc.unsqueeze(-3), crange.unsqueeze(-3), d.sub_(1.0).clamp_(0.0, 1.0))


def gaussian_blur(x: torch.Tensor, sigma: torch.Tensor, kernel_size: int) -> torch.Tensor:
    """Gaussian blur with reflect padding, ``sigma`` per image (torchvision's kernel)."""
    lim = (kernel_size - 1) / (2.0 * math.sqrt(2.0))
    grid = torch.linspace(-lim, lim, kernel_size, dtype=x.dtype, device=x.device)
    k1 = torch.softmax(-((grid / sigma.reshape(-1, 1).to(x.dtype)) ** 2), dim=1)  # B x K
    b, c, h, w = x.shape
    # one depthwise 2D kernel per (image, channel): the fastest CPU path, and torchvision's sums
    k2 = (k1[:, :, None] * k1[:, None, :]).repeat_interleave(c, dim=0).unsqueeze(1)
    pad = kernel_size // 2
    out = nnf.pad(x.reshape(1, b * c, h, w), [pad, pad, pad, pad], mode="reflect")
    return nnf.conv2d(out, k2, groups=b * c).reshape(b, c, h, w)


def _pixel_coords(n: int, x: torch.Tensor, offset: float) -> torch.Tensor:
    """Pixel coordinates along one axis: centred (offset 0) or from 0.5 (offset 0.5)."""
    if offset:
        return torch.linspace(0.5, n - 0.5, n, dtype=x.dtype, device=x.device)
    return torch.linspace((1.0 - n) * 0.5, (n - 1.0) * 0.5, n, dtype=x.dtype, device=x.device)


def _affine_planes(coef: torch.Tensor, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """``B x K x H x W`` values ``a * x + b * y + c`` per image, from ``coef`` (``B x K x 3``).

    Row k of ``coef`` holds (a, b, c) of plane k; one broadcast add forms the planes.
    """
    row = coef[:, :, 0, None, None] * xs  # B x K x 1 x W
    col = torch.addcmul(coef[:, :, 2, None, None], coef[:, :, 1, None, None], ys[:, None])
    return row + col  # col: B x K x H x 1


def _as_grid(planes: torch.Tensor) -> torch.Tensor:
    """``B x 2 x H x W`` (x, y) planes as grid_sample's ``B x H x W x 2`` grid (a view)."""
    return planes.permute(0, 2, 3, 1)


def grid_sample_fill(x: torch.Tensor, grid: torch.Tensor, fill: float) -> torch.Tensor:
    """Bilinear sampling; outside the image blends to ``fill`` (torchvision's mask trick)."""
    b, c, h, w = x.shape
    ones = torch.ones((b, 1, h, w), dtype=x.dtype, device=x.device)
    out = nnf.grid_sample(
        torch.cat((x, ones), dim=1),
        grid,
        mode="bilinear",
        padding_mode="zeros",
        align_corners=False,
    )
    img, mask = out[:, :c], out[:, c:]
    if fill == 0.0:
        return img * mask  # (img - 0) * mask + 0, bit for bit
    return (img - fill).mul_(mask).add_(fill)


def inverse_affine(
    angle: torch.Tensor,
    tx: torch.Tensor,
    ty: torch.Tensor,
    scale: torch.Tensor,
    shear_x: torch.Tensor,
) -> torch.Tensor:
    """``B x 2 x 3`` inverse affine matrices about the image centre (degrees, pixels)."""
    rot = torch.deg2rad(angle)
    tan_sx = torch.tan(torch.deg2rad(shear_x))
    a, c = torch.cos(rot), torch.sin(rot)
    b = -(a * tan_sx + torch.sin(rot))
    d = torch.cos(rot) - c * tan_sx
    m0, m1, m3, m4 = d / scale, -b / scale, -c / scale, a / scale
    m2 = -m0 * tx - m1 * ty
    m5 = -m3 * tx - m4 * ty
    return torch.stack((m0, m1, m2, m3, m4, m5), dim=1).reshape(-1, 2, 3)


def affine(x: torch.Tensor, theta: torch.Tensor, fill: float) -> torch.Tensor:
    """Warp each image by its inverse affine matrix ``theta`` (``B x 2 x 3``, pixel units)."""
    _, _, h, w = x.shape
    xs, ys = _pixel_coords(w, x, 0.0), _pixel_coords(h, x, 0.0)
    scale = torch.tensor([0.5 * w, 0.5 * h], dtype=x.dtype, device=x.device)[:, None]
    return grid_sample_fill(x, _as_grid(_affine_planes(theta.to(x.dtype) / scale, xs, ys)), fill)


def perspective_coefficients(start: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
    """``B x 8`` homography coefficients mapping ``end`` corners to ``start`` (``B x 4 x 2``)."""
    n = end.shape[0]
    a = torch.zeros(n, 8, 8, dtype=torch.float64, device=end.device)
    e, s = end.to(torch.float64), start.to(torch.float64)
    for i in range(4):
        ex, ey, sx, sy = e[:, i, 0], e[:, i, 1], s[:, i, 0], s[:, i, 1]
        a[:, 2 * i, 0], a[:, 2 * i, 1], a[:, 2 * i, 2] = ex, ey, 1.0
        a[:, 2 * i, 6], a[:, 2 * i, 7] = -sx * ex, -sx * ey
        a[:, 2 * i + 1, 3], a[:, 2 * i + 1, 4], a[:, 2 * i + 1, 5] = ex, ey, 1.0
        a[:, 2 * i + 1, 6], a[:, 2 * i + 1, 7] = -sy * ex, -sy * ey
    return torch.linalg.solve(a, s.reshape(n, 8)).to(torch.float32)


def perspective(x: torch.Tensor, coeffs: torch.Tensor, fill: float) -> torch.Tensor:
    """Warp each image by its homography ``coeffs`` (``B x 8``)."""
    _, _, h, w = x.shape
    c = coeffs.to(x.dtype)
    xs, ys = _pixel_coords(w, x, 0.5), _pixel_coords(h, x, 0.5)
    scale = torch.tensor([0.5 * w, 0.5 * h], dtype=x.dtype, device=x.device)[:, None]
    num = _affine_planes(c[:, :6].reshape(-1, 2, 3) / scale, xs, ys)
    den = _affine_planes(torch.cat((c[:, 6:], torch.ones_like(c[:, :1])), 1)[:, None], xs, ys)
    return grid_sample_fill(x, _as_grid(num.div_(den).sub_(1.0)), fill)


def resized_crop(x: torch.Tensor, top: torch.Tensor, left: torch.Tensor, height: torch.Tensor,
                 width: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """Crop each image's box (integer pixels, per image) and resize it bilinearly to full size."""
    b, _, h, w = x.shape
    dt, dev = x.dtype, x.device
    oy = torch.arange(h, dtype=dt, device=dev)
    ox = torch.arange(w, dtype=dt, device=dev)
    hh, ww = height.to(dt)[:, None], width.to(dt)[:, None]
    sy = top.to(dt)[:, None] + torch.minimum(((oy + 0.5) * hh / h - 0.5).clamp(min=0.0), hh - 1)
    sx = left.to(dt)[:, None] + torch.minimum(((ox + 0.5) * ww / w - 0.5).clamp(min=0.0), ww - 1)
    gy = (2.0 * sy + 1.0) / h - 1.0  # B x H
    gx = (2.0 * sx + 1.0) / w - 1.0  # B x W
    planes = torch.stack((gx[:, None, :].expand(b, h, w), gy[:, :, None].expand(b, h, w)), dim=1)
    return nnf.grid_sample(
        x, _as_grid(planes), mode="bilinear", padding_mode="border", align_corners=False
    )


def equalize(x: torch.Tensor) -> torch.Tensor:
    """Per-channel histogram equalisation (torchvision's, on 8-bit levels)."""
    from torchvision.transforms.v2 import functional as F

    return F.equalize(x)


def posterize(x: torch.Tensor, bits: int) -> torch.Tensor:
    levels = 1 << bits
    return (x * levels).floor_().clamp_(0, levels - 1).div_(levels)


def solarize(x: torch.Tensor, threshold: float) -> torch.Tensor:
    return torch.where(x >= threshold, 1.0 - x, x)


# --------------------------------------------------------------------------- registry


def _identity() -> tuple[int, Op]:
    return 0, lambda x, u: x


def _gaussian_blur(kernel_size: int, sigma: Sequence[float]) -> tuple[int, Op]:
    if kernel_size % 2 != 1:
        raise ValueError(f"GaussianBlur kernel_size must be odd, got {kernel_size}")
    return 1, lambda x, u: gaussian_blur(x, _between(u[:, 0], *sigma), kernel_size)


def _adjust_sharpness(sharpness_factor: float) -> tuple[int, Op]:
    return 0, lambda x, u: adjust_sharpness(
        x, torch.full((x.shape[0],), sharpness_factor, dtype=x.dtype, device=x.device)
    )


def _affine(
    degrees: float, translate: Sequence[float], scale: Sequence[float], shear: float, fill: float
) -> tuple[int, Op]:
    def op(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        max_dx, max_dy = translate[0] * w, translate[1] * h
        theta = inverse_affine(
            angle=_between(u[:, 0], -degrees, degrees),
            tx=torch.round(_between(u[:, 1], -max_dx, max_dx)),
            ty=torch.round(_between(u[:, 2], -max_dy, max_dy)),
            scale=_between(u[:, 3], *scale),
            shear_x=_between(u[:, 4], -shear, shear),
        )
        return affine(x, theta, fill)

    return 5, op


def _color_jitter(brightness: float, contrast: float, saturation: float, hue: float):
    def op(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        x = adjust_brightness(x, _between(u[:, 0], max(0.0, 1 - brightness), 1 + brightness))
        x = adjust_contrast(x, _between(u[:, 1], max(0.0, 1 - contrast), 1 + contrast))
        x = adjust_saturation(x, _between(u[:, 2], max(0.0, 1 - saturation), 1 + saturation))
        return adjust_hue(x, _between(u[:, 3], -hue, hue))

    return 4, op


def _contrast(factor: Sequence[float]) -> tuple[int, Op]:
    return 1, lambda x, u: adjust_contrast(x, _between(u[:, 0], *factor))


def _equalize() -> tuple[int, Op]:
    return 0, lambda x, u: equalize(x)


def _grayscale() -> tuple[int, Op]:
    return 0, lambda x, u: grayscale(x).expand_as(x).clone()


def _horizontal_flip() -> tuple[int, Op]:
    return 0, lambda x, u: x.flip(-1)


def _invert() -> tuple[int, Op]:
    return 0, lambda x, u: 1.0 - x


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
        return perspective(x, perspective_coefficients(start, end), fill)

    return 8, op


def _posterize(bits: int) -> tuple[int, Op]:
    return 0, lambda x, u: posterize(x, bits)


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
        return resized_crop(x, *crop_boxes(u, x.shape[-2], x.shape[-1], scale, ratio))

    return 4 * ATTEMPTS, op


def _rotation(degrees: float, fill: float) -> tuple[int, Op]:
    def op(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        angle = _between(u[:, 0], -degrees, degrees)
        zero = torch.zeros_like(angle)
        # torchvision's rotate(angle) is counter-clockwise: the affine warp of -angle
        return affine(x, inverse_affine(-angle, zero, zero, zero + 1.0, zero), fill)

    return 1, op


def _sharpness(factor: Sequence[float]) -> tuple[int, Op]:
    return 1, lambda x, u: adjust_sharpness(x, _between(u[:, 0], *factor))


def _solarize(threshold: float) -> tuple[int, Op]:
    return 0, lambda x, u: solarize(x, threshold)


def _vertical_flip() -> tuple[int, Op]:
    return 0, lambda x, u: x.flip(-2)


def names() -> tuple[str, ...]:
    """The registered transformations, in registry order."""
    return TRANSFORMS.names()


def has_probability(name: str) -> bool:
    """Whether transformation ``name``'s parameters (``evaluate.transforms.<name>`` in the
    schema, or its registry entry's ``params_schema``) include ``p``, the probability of applying
    it; one without (``Identity``, a plugin's registered without parameters) changes every
    image it is applied to, always."""
    return name in _with_probability(tuple(TRANSFORMS))


@functools.cache
def _with_probability(registered: tuple[str, ...]) -> frozenset[str]:
    """The transformations whose parameters include ``p``, read from the schema once per set of
    registered names (a plugin registering one later gets a fresh read)."""
    from imagenot.config import schema_node

    node = schema_node("evaluate.transforms")["properties"]
    return frozenset(n for n in registered if "p" in node[n].get("properties", {}))


def build_transform(name: str, params: Mapping[str, Any] | None = None) -> Transform:
    """The transformation ``name`` with its config parameters (``p`` = application probability,
    required where the transformation has one: its default lives in the schema, which the
    validated ``evaluate.transforms`` section has filled in)."""
    entry = TRANSFORMS.entry(name)
    params = dict(params or {})
    if not has_probability(name):
        p = 1.0  # no probability to choose: the operation applies to every image
    elif "p" in params:
        p = float(params.pop("p"))
    else:
        raise KeyError(f"evaluate.transforms.{name}.p is missing (settings not validated?)")
    n_params, op = resolve(entry.build)(**params)
    return Transform(name=name, stream=transform_stream(name), p=p, n_params=n_params, op=op)


def build_transforms(settings: Mapping[str, Mapping[str, Any]]) -> list[Transform]:
    """Every registered transformation, in registry order, parameterised by ``settings[name]``."""
    unknown = set(settings) - set(TRANSFORMS)
    if unknown:
        raise KeyError(
            f"unknown transformation(s) {sorted(unknown)}; known: {', '.join(TRANSFORMS)}"
        )
    return [build_transform(name, settings.get(name)) for name in TRANSFORMS]


def transform_uniforms(
    transform: Transform,
    seed: int,
    keys: Sequence[str] | np.ndarray,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """The per-image uniforms of ``transform`` for ``keys`` (``B x n_uniforms``, float32)."""
    u = image_uniforms(seed, transform.stream, keys, transform.n_uniforms)
    return torch.from_numpy(u).to(device=device, dtype=torch.float32)
