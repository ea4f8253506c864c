"""The batched image kernels of the test-time transformations (:mod:`imagenot.evaluate.transforms`):
each reproduces a ``torchvision.transforms.v2.functional`` operation (same formulas and grids,
bilinear interpolation) with one parameter set per image of a batch ``x`` (float,
``B x 3 x H x W`` in [0, 1]) instead of one per call.

Why a module of its own: these are the image arithmetic, checked against torchvision image by
image (tests/test_evaluate_transforms.py); how their parameters are drawn from the per-image
uniforms, and which transformation is which, is the transforms module's. They are written for
whole batches on the CPU: few passes over the batch (fused blends, the hue rotation in closed
form, sampling grids from one broadcast add, one depthwise convolution for all images), so
results agree with torchvision's up to float rounding (about 1e-5 for the warps, 1e-6
elsewhere).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as nnf


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


#: The per-axis variance (px^2) of torchvision's 3x3 sharpness smoothing kernel: weights 3/13 at
#: -1 and +1 along each axis. At another scale the kernel is the Gaussian of this variance,
#: scaled (:func:`adjust_sharpness`).
SHARPNESS_VARIANCE = 6.0 / 13.0


def adjust_sharpness(
    x: torch.Tensor, factor: torch.Tensor, size_ratio: float = 1.0
) -> torch.Tensor:
    """Blend with a smoothed copy (border pixels kept), ``factor`` per image.

    At ``size_ratio`` 1 the smoothing is torchvision's 3x3 kernel (one border pixel kept); an
    image ``size_ratio`` times the side the strength is stated at gets the same smoothing
    relative to the image: the Gaussian of the 3x3 kernel's variance
    (:data:`SHARPNESS_VARIANCE`) with sigma times ``size_ratio``, its half-width of border kept. The smoothing is one depthwise convolution
    over all images and channels at once.
    """
    b, c, h, w = x.shape
    n = b * c
    if abs(size_ratio - 1.0) < 1e-9:  # torchvision's [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13
        kernel = torch.ones(3, 3, dtype=x.dtype, device=x.device)
        kernel[1, 1] = 5.0
        kernel /= kernel.sum()
    else:  # the normalised Gaussian on torchvision's grid
        sigma = math.sqrt(SHARPNESS_VARIANCE) * size_ratio
        size = max(3, 2 * math.ceil(3.0 * sigma) + 1)
        grid = torch.linspace(-(size - 1) / 2, (size - 1) / 2, size, dtype=x.dtype, device=x.device)
        k1 = torch.softmax(-0.5 * (grid / sigma) ** 2, dim=0)
        kernel = k1[:, None] * k1[None, :]
    kernel = kernel.expand(n, 1, *kernel.shape)  # one per image and channel
    r = kernel.shape[-1] // 2
    if h <= 2 * r or w <= 2 * r:
        return x
    smooth = nnf.conv2d(x.reshape(1, n, h, w), kernel, groups=n)
    out = x.clone()
    # factor * x + (1 - factor) * smooth on the interior, as x + (1 - factor) * (smooth - x)
    interior = out[..., r : h - r, r : w - r]
    interior.lerp_(smooth.reshape(b, c, h - 2 * r, w - 2 * r), _per_image(1.0 - factor))
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
    return grid_sample_fill(
        x, _affine_planes(theta.to(x.dtype) / scale, xs, ys).permute(0, 2, 3, 1), fill
    )


def perspective_coefficients(start: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
    """``B x 8`` homography coefficients mapping ``end`` corners to ``start`` (``B x 4 x 2``)."""
    e, s = end.to(torch.float64), start.to(torch.float64)
    ex, ey, sx, sy = e[..., 0], e[..., 1], s[..., 0], s[..., 1]  # B x 4: one per corner
    one, zero = torch.ones_like(ex), torch.zeros_like(ex)
    row_x = (ex, ey, one, zero, zero, zero, -sx * ex, -sx * ey)  # each corner's two equations
    row_y = (zero, zero, zero, ex, ey, one, -sy * ex, -sy * ey)
    a = torch.stack((torch.stack(row_x, -1), torch.stack(row_y, -1)), 2).reshape(-1, 8, 8)
    return torch.linalg.solve(a, s.reshape(-1, 8)).to(torch.float32)


def perspective(x: torch.Tensor, coeffs: torch.Tensor, fill: float) -> torch.Tensor:
    """Warp each image by its homography ``coeffs`` (``B x 8``)."""
    _, _, h, w = x.shape
    c = coeffs.to(x.dtype)
    xs, ys = _pixel_coords(w, x, 0.5), _pixel_coords(h, x, 0.5)
    scale = torch.tensor([0.5 * w, 0.5 * h], dtype=x.dtype, device=x.device)[:, None]
    num = _affine_planes(c[:, :6].reshape(-1, 2, 3) / scale, xs, ys)
    den = _affine_planes(torch.cat((c[:, 6:], torch.ones_like(c[:, :1])), 1)[:, None], xs, ys)
    return grid_sample_fill(x, num.div_(den).sub_(1.0).permute(0, 2, 3, 1), fill)


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
        x, planes.permute(0, 2, 3, 1), mode="bilinear", padding_mode="border", align_corners=False
    )


def posterize(x: torch.Tensor, bits: int) -> torch.Tensor:
    levels = 1 << bits
    return (x * levels).floor_().clamp_(0, levels - 1).div_(levels)


def solarize(x: torch.Tensor, threshold: float) -> torch.Tensor:
    return torch.where(x >= threshold, 1.0 - x, x)
