"""The 17 test-time transformations: per-image determinism, shape/range, torchvision agreement."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision.transforms.v2 import functional as F

from imagenot.core.config import validate_config
from imagenot.evaluate import kernels as K
from imagenot.evaluate import transforms as T

torch.set_num_threads(1)

BILINEAR = F.InterpolationMode.BILINEAR


@pytest.fixture(scope="module")
def settings() -> dict:
    return validate_config({})["evaluate"]["transforms"]


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    """Eight 24 x 28 float images in [0, 1] from uint8 values, with some structure."""
    g = torch.Generator().manual_seed(0)
    noise = torch.randint(0, 256, (8, 3, 24, 28), generator=g)
    ramp = torch.linspace(0, 255, 28).round().to(torch.int64).expand(8, 3, 24, 28)
    return ((noise + ramp) // 2).to(torch.float32) / 255.0


KEYS = [f"part-00000-{i:09d}" for i in range(8)]


def test_registry_holds_the_papers_17_in_order():
    """The paper's list, first and in its order; a transformation registered later (a plugin,
    an 18th of ours) comes after them and changes none of their draws (seeded by name)."""
    assert T.names()[:17] == (
        "Identity", "GaussianBlur", "AdjustSharpness", "Affine", "ColorJitter", "Contrast",
        "Equalize", "Grayscale", "HorizontalFlip", "Invert", "Perspective", "Posterize",
        "ResizedCrop", "Rotation", "Sharpness", "Solarize", "VerticalFlip",
    )  # fmt: skip


def test_every_transform_is_random_except_identity(settings):
    built = T.build_transforms(settings)
    assert [t.name for t in built] == list(T.names())
    assert built[0].n_uniforms == 0
    assert all(t.n_uniforms >= 1 for t in built[1:])


def test_unknown_transform_is_refused():
    with pytest.raises(KeyError, match="Blurr"):
        T.build_transforms({"Blurr": {}})


def test_uniforms_depend_only_on_seed_transform_and_key():
    a = T.image_uniforms(0, 3, KEYS, 5)
    assert a.shape == (8, 5) and ((a >= 0) & (a < 1)).all()
    # same key -> same row, whatever the batch it sits in and its position
    b = T.image_uniforms(0, 3, [KEYS[5], KEYS[2]], 5)
    assert (b[0] == a[5]).all() and (b[1] == a[2]).all()
    assert (T.image_uniforms(0, 3, KEYS, 5) == a).all()
    assert not (T.image_uniforms(1, 3, KEYS, 5) == a).all()
    assert not (T.image_uniforms(0, 4, KEYS, 5) == a).all()
    assert len({tuple(row) for row in a}) == 8
    # strings or precomputed hashes give the same stream
    assert (T.image_uniforms(0, 3, T.key_hashes(KEYS), 5) == a).all()


def test_randomness_is_seeded_by_name_not_registry_position(settings, images):
    """Registering a transformation first (before all the others) leaves every other
    transformation's random images unchanged: the name, not the position, seeds them."""
    from imagenot.evaluate.transform_registry import TRANSFORMS, TransformEntry

    before = {
        t.name: t(images, T.transform_uniforms(t, 5, KEYS)) for t in T.build_transforms(settings)
    }
    entries = dict(TRANSFORMS)
    TRANSFORMS.clear()
    try:
        TRANSFORMS["ToyNoise"] = TransformEntry("imagenot.evaluate.transforms:_invert")
        TRANSFORMS.update(entries)
        assert T.names()[0] == "ToyNoise"
        after = {
            t.name: t(images, T.transform_uniforms(t, 5, KEYS))
            for t in T.build_transforms(settings)
        }
    finally:
        TRANSFORMS.clear()
        TRANSFORMS.update(entries)
    assert set(after) == {"ToyNoise", *before}
    for name, out in before.items():
        assert torch.equal(after[name], out), name
    # ... whereas a different name gives different draws
    assert T.transform_stream("Rotation") != T.transform_stream("Rotation2")


def test_uniforms_look_uniform():
    u = T.image_uniforms(0, 12, [f"k{i}" for i in range(4000)], 6)
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.003
    assert abs(float(np.corrcoef(u[:, 0], u[:, 1])[0, 1])) < 0.05
    hist = np.histogram(u, bins=10, range=(0, 1))[0]
    assert hist.min() > 0.9 * u.size / 10


@pytest.mark.parametrize("name", T.names())
def test_shape_dtype_range_and_determinism(name, settings, images):
    t = T.build_transform(name, settings[name])
    u = T.transform_uniforms(t, 7, KEYS)
    out = t(images, u)
    assert out.shape == images.shape and out.dtype == images.dtype
    assert out.min() >= 0.0 and out.max() <= 1.0
    assert torch.equal(out, t(images, T.transform_uniforms(t, 7, KEYS)))
    # per image: a sub-batch in another order gives the same images
    idx = [6, 1, 3]
    sub = t(images[idx], T.transform_uniforms(t, 7, [KEYS[i] for i in idx]))
    torch.testing.assert_close(sub, out[idx], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", T.names()[1:])
def test_each_transform_changes_images_where_applied(name, settings, images):
    params = dict(settings[name], p=1.0)
    t = T.build_transform(name, params)
    out = t(images, T.transform_uniforms(t, 0, KEYS))
    changed = (out - images).abs().flatten(1).amax(dim=1) > 1e-6
    # a draw can come close to the identity (a full-image crop, a sharpness factor near 1)
    assert changed.float().mean() >= 0.75, f"{name} left images {(~changed).nonzero().tolist()}"


def test_gate_leaves_images_untouched(settings, images):
    t = T.build_transform("HorizontalFlip", settings["HorizontalFlip"])
    u = T.transform_uniforms(t, 0, KEYS)
    out = t(images, u)
    gate = t.gate(u)
    assert torch.equal(out[~gate], images[~gate])
    assert torch.equal(out[gate], images[gate].flip(-1))
    none = T.build_transform("HorizontalFlip", {"p": 0.0})
    assert torch.equal(none(images, u), images)


def test_identity_returns_the_images(images):
    t = T.build_transform("Identity")
    assert torch.equal(t(images, T.transform_uniforms(t, 0, KEYS)), images)


# ---- the batched kernels equal torchvision.transforms.v2.functional image by image


def _each(fn, images, *params):
    return torch.stack([fn(images[i], *(p[i] for p in params)) for i in range(len(images))])


def test_color_kernels_match_torchvision(images):
    f = torch.linspace(0.1, 1.9, 8)
    hue = torch.linspace(-0.45, 0.45, 8)
    for ours, theirs, factor in [
        (K.adjust_brightness, F.adjust_brightness, f),
        (K.adjust_contrast, F.adjust_contrast, f),
        (K.adjust_saturation, F.adjust_saturation, f),
        (K.adjust_sharpness, F.adjust_sharpness, f),
        (K.adjust_hue, F.adjust_hue, hue),
    ]:
        expected = _each(lambda im, v, fn=theirs: fn(im, float(v)), images, factor)
        torch.testing.assert_close(ours(images, factor), expected, atol=1e-5, rtol=0)


def test_blur_matches_torchvision(images):
    sigma = torch.linspace(0.1, 2.0, 8)
    expected = _each(lambda im, s: F.gaussian_blur(im, [9, 9], [float(s)] * 2), images, sigma)
    torch.testing.assert_close(K.gaussian_blur(images, sigma, 9), expected, atol=1e-5, rtol=0)


def test_affine_and_rotation_match_torchvision(images):
    g = torch.Generator().manual_seed(1)
    angle, scale = torch.rand(8, generator=g) * 30 - 15, torch.rand(8, generator=g) * 0.2 + 0.9
    tx, ty = torch.randint(-3, 4, (8,), generator=g), torch.randint(-2, 3, (8,), generator=g)
    shear = torch.rand(8, generator=g) * 20 - 10
    ours = K.affine(images, K.inverse_affine(angle, tx.float(), ty.float(), scale, shear), 0.0)
    expected = torch.stack(
        [
            F.affine(
                images[i],
                angle=float(angle[i]),
                translate=[int(tx[i]), int(ty[i])],
                scale=float(scale[i]),
                shear=[float(shear[i]), 0.0],
                interpolation=BILINEAR,
                fill=0.0,
            )
            for i in range(8)
        ]
    )
    torch.testing.assert_close(ours, expected, atol=1e-4, rtol=0)

    t = T.build_transform("Rotation", {"p": 1.0, "degrees": 30.0, "fill": 0.0})
    u = T.transform_uniforms(t, 0, KEYS)
    angles = -30.0 + 60.0 * u[:, 1]
    expected = _each(
        lambda im, a: F.rotate(im, float(a), interpolation=BILINEAR, fill=0.0), images, angles
    )
    torch.testing.assert_close(t.op(images, u[:, 1:]), expected, atol=1e-4, rtol=0)


def test_perspective_matches_torchvision(images):
    u = torch.rand(8, 8, generator=torch.Generator().manual_seed(2))
    h, w = images.shape[-2:]
    end = T.perspective_endpoints(u, h, w, 0.5)
    start = T.perspective_startpoints(h, w)
    ours = K.perspective(images, K.perspective_coefficients(start.expand_as(end), end), 0.0)
    expected = _each(
        lambda im, e: F.perspective(
            im, start.tolist(), e.tolist(), interpolation=BILINEAR, fill=0.0
        ),
        images,
        end,
    )
    torch.testing.assert_close(ours, expected, atol=1e-4, rtol=0)


def test_resized_crop_matches_torchvision(images):
    u = torch.rand(8, 40, generator=torch.Generator().manual_seed(3))
    h, w = images.shape[-2:]
    top, left, ch, cw = T.crop_boxes(u, h, w, (0.08, 1.0), (3 / 4, 4 / 3))
    assert ((top >= 0) & (left >= 0) & (top + ch <= h) & (left + cw <= w)).all()
    expected = torch.stack(
        [
            F.resized_crop(images[i], int(top[i]), int(left[i]), int(ch[i]), int(cw[i]), [h, w])
            for i in range(8)
        ]
    )
    torch.testing.assert_close(
        K.resized_crop(images, top, left, ch, cw), expected, atol=1e-5, rtol=0
    )


def test_crop_falls_back_to_centre_when_no_box_fits():
    # scale > 1 can never fit: every attempt fails
    top, left, ch, cw = T.crop_boxes(torch.rand(2, 40), 20, 40, (1.5, 2.0), (0.75, 4 / 3))
    assert ch.tolist() == [20, 20] and cw.tolist() == [27, 27]
    assert top.tolist() == [0, 0] and left.tolist() == [6, 6]


def test_pixel_ops_match_torchvision(images):
    torch.testing.assert_close(K.posterize(images, 4), F.posterize(images, 4))
    torch.testing.assert_close(K.solarize(images, 0.5), F.solarize(images, 0.5))
    gray = T.build_transform("Grayscale", {"p": 1.0})
    u = T.transform_uniforms(gray, 0, KEYS)
    torch.testing.assert_close(gray(images, u), F.rgb_to_grayscale(images, 3), atol=1e-6, rtol=0)


def test_hue_handles_ties_grey_and_extreme_shifts():
    """The fused hue rotation keeps torchvision's sector priority (R, then G, then B) on ties."""
    levels = torch.tensor([0.0, 0.2, 0.5, 0.5, 1.0])
    rgb = torch.cartesian_prod(levels, levels, levels)  # every tie pattern, grey included
    image = rgb.T.reshape(1, 3, 1, -1).expand(6, -1, -1, -1).contiguous()
    shift = torch.tensor([-0.5, -0.25, -1e-7, 0.0, 1e-7, 0.5])
    expected = _each(lambda im, v: F.adjust_hue(im, float(v)), image, shift)
    torch.testing.assert_close(K.adjust_hue(image, shift), expected, atol=1e-5, rtol=0)


def test_nonzero_fill_matches_torchvision(images):
    t = T.build_transform("Rotation", {"p": 1.0, "degrees": 30.0, "fill": 0.25})
    u = T.transform_uniforms(t, 0, KEYS)
    angles = -30.0 + 60.0 * u[:, 1]
    expected = _each(
        lambda im, a: F.rotate(im, float(a), interpolation=BILINEAR, fill=0.25), images, angles
    )
    torch.testing.assert_close(t.op(images, u[:, 1:]), expected, atol=1e-4, rtol=0)


# ------------------------------------------------- one strength on every dataset and input side


def _detail(x: torch.Tensor) -> float:
    """Mean absolute difference of neighbouring pixels: what a blur takes away."""
    return float((x.diff(dim=-1).abs().mean() + x.diff(dim=-2).abs().mean()) / 2)


def _blur(strength_side: int | None) -> T.Transform:
    params = {"p": 1.0, "kernel_size": 9, "sigma": [1.5, 1.5]}
    return T.build_transform("GaussianBlur", params, strength_side)


def test_a_blur_of_one_strength_is_the_same_shift_on_a_480_and_a_256_px_copy():
    """One image stored at 480 px (ImageNet, for EfficientNet-V2-L's resize) and at 256 px
    (ImageNot): the same model's input blurred by one strength has the same statistics, under a
    trained model's protocol (the whole image at 224) and a published one's (resize 256, crop
    224). A blur sized in stored pixels before the model's resize fails it (the 480 px copy's
    blur comes out 480/256 times weaker)."""
    from photos import photo

    from imagenot.acquire.images import encode_jpeg, resize_square
    from imagenot.core.dataset import decode_jpeg
    from imagenot.evaluate.robustness import evaluate_batches, tensor_batches
    from imagenot.train.facts import Preprocessing

    original = photo(613, 517)
    copies = {
        side: decode_jpeg(encode_jpeg(resize_square(original, side, "center_crop"), 95))
        for side in (480, 256)
    }
    protocols = (
        Preprocessing.trained({"mean": [0.5] * 3, "std": [0.5] * 3}, 224),
        Preprocessing((0.5,) * 3, (0.5,) * 3, 224, 256, "bilinear"),
    )

    class Recorder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.seen, self.fc = [], torch.nn.Linear(3, 2)

        def forward(self, x):
            self.seen.append(x * 0.5 + 0.5)  # un-normalised: the image the model sees
            return self.fc(x.mean(dim=(2, 3)))

    identity, blur = T.build_transform("Identity"), _blur(224)
    for protocol in protocols:
        new, old = {}, {}
        for side, pixels in copies.items():
            model = Recorder()
            batches = tensor_batches(pixels[None], torch.zeros(1, dtype=torch.int64), ["k"], 1)
            evaluate_batches(model, batches, [identity, blur], 0, protocol, channels_last=False)
            assert model.seen[1].shape == (1, 3, 224, 224)
            new[side] = _detail(model.seen[1])
            u = T.transform_uniforms(blur, 0, ["k"])[:, 1:]
            stored = pixels[None].float() / 255
            old[side] = _detail(protocol.geometry(_blur(None).op(stored, u)))
        assert new[480] == pytest.approx(new[256], rel=0.02), protocol
        assert abs(old[480] / old[256] - 1) > 0.05, protocol  # the statistic tells them apart


@pytest.mark.parametrize("name", ["GaussianBlur", "AdjustSharpness", "Sharpness"])
def test_pixel_sized_strengths_scale_with_the_models_input_side(name, settings):
    """A model whose input is 480 px (EfficientNet-V2-L's own crop) sees the shift a 224 px
    model sees, relative to the image: blurring (or sharpening) at 480 then shrinking to 224
    gives about what the 224 px input gets; the strength in the input's own pixels does not.
    At the side the strengths are stated at, each is torchvision's operation exactly."""
    from photos import jpeg, photo

    from imagenot.core.dataset import decode_jpeg
    from imagenot.train.facts import Preprocessing

    scene = decode_jpeg(jpeg(photo(701, 583, seed=1)))[None].float() / 255
    params = {**settings[name], "p": 1.0}
    if name == "GaussianBlur":
        params["sigma"] = [1.5, 1.5]
    small = Preprocessing((0.5,) * 3, (0.5,) * 3, 224, 224, "bicubic").geometry(scene)
    large = Preprocessing((0.5,) * 3, (0.5,) * 3, 480, 480, "bicubic").geometry(scene)
    stated = T.build_transform(name, params, 224)
    u = T.transform_uniforms(stated, 0, ["k"])[:, 1:]
    at_224 = stated.op(small, u)
    # at its own side, the stated strength is the unscaled operation (torchvision's) exactly
    assert torch.equal(at_224, T.build_transform(name, params, None).op(small, u))

    def shrink(x):
        return Preprocessing((0.5,) * 3, (0.5,) * 3, 224, 224, "bicubic").geometry(x)

    def shift(after, before):  # what the transformation changed, at 224 px
        return float((shrink(after) - shrink(before)).abs().mean())

    seen_at_224 = shift(at_224, small)
    scaled = shift(stated.op(large, u), large)
    unscaled = shift(T.build_transform(name, params, None).op(large, u), large)
    assert scaled == pytest.approx(seen_at_224, rel=0.1)
    assert unscaled < 0.5 * seen_at_224  # sized in the 480 px input's pixels: far weaker
