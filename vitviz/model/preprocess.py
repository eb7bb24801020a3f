"""Preprocessing as a model's spec describes it: resize the shorter side, centre-crop, normalise.

Implemented on PIL images exactly as torchvision's ``Resize(int)`` + ``CenterCrop`` + ``ToTensor`` + ``Normalize``
do for PIL input, and with the geometry of the crop recorded so that a map over the model's input can be put back
onto the original photo's pixel grid. No Qt here.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import torch
from PIL import Image

from vitviz.imaging import RESAMPLING, check_shape

Interpolation = Literal["nearest", "bilinear", "bicubic", "lanczos"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
INCEPTION_MEAN = (0.5, 0.5, 0.5)
INCEPTION_STD = (0.5, 0.5, 0.5)

_WHOLE_RESIZE_BUDGET = 8
"""Preprocessing resizes the whole image (exactly as torchvision) only when the resized image is at most this many
times the crop; larger ones (elongated images) are resampled region-first, see :meth:`Preprocess.apply`."""

_PIL_RESAMPLE = RESAMPLING


@dataclass(frozen=True)
class Preprocess:
    """How a model wants its input.

    Attributes:
        resize: target length of the shorter image side before cropping (torchvision ``Resize(int)``), or an
            explicit ``(height, width)`` to resize to regardless of aspect ratio.
        crop: ``(height, width)`` of the centre crop fed to the model.
        interpolation: resampling filter of the resize.
        mean, std: per-channel normalisation applied to [0, 1] RGB values.
        max_num_patches: 0 (the default): resize and crop as above. Otherwise SigLIP 2 NaFlex's sizing (Hugging
            Face ``Siglip2ImageProcessor``): each image is resized, keeping its aspect ratio, to the largest size whose
            sides are multiples of ``patch_size`` with at most this many patches (:func:`naflex_size`), and not
            cropped; ``resize`` and ``crop`` are then the nominal size only (the model's position table).
        patch_size: the patch side of that sizing.
    """

    resize: int | tuple[int, int] = 256
    crop: tuple[int, int] = (224, 224)
    interpolation: Interpolation = "bicubic"
    mean: tuple[float, ...] = INCEPTION_MEAN
    std: tuple[float, ...] = INCEPTION_STD
    max_num_patches: int = 0
    patch_size: int = 16

    def __post_init__(self) -> None:
        if self.max_num_patches < 0 or self.patch_size < 1:
            raise ValueError(f"max_num_patches={self.max_num_patches} and patch_size={self.patch_size}: expected "
                             "max_num_patches >= 0 and patch_size >= 1")
        if self.interpolation not in _PIL_RESAMPLE:
            raise ValueError(f"interpolation={self.interpolation!r}; valid: {sorted(_PIL_RESAMPLE)}")
        if len(self.mean) != len(self.std):
            raise ValueError(f"mean has {len(self.mean)} values but std has {len(self.std)}")
        if any(s <= 0 for s in self.std):
            raise ValueError(f"std must be positive, got {self.std}")

    @classmethod
    def for_crop(cls, crop: int | tuple[int, int], *, crop_pct: float = 0.875, interpolation: Interpolation = "bicubic",
                 mean: tuple[float, ...] = INCEPTION_MEAN, std: tuple[float, ...] = INCEPTION_STD) -> "Preprocess":
        """timm-style: resize the shorter side to ``floor(crop / crop_pct)``, then centre-crop ``crop``."""
        ch, cw = (crop, crop) if isinstance(crop, int) else crop
        resize = int(np.floor(min(ch, cw) / crop_pct)) if ch == cw else (int(ch / crop_pct), int(cw / crop_pct))
        return cls(resize=resize, crop=(ch, cw), interpolation=interpolation, mean=tuple(mean), std=tuple(std))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["crop"] = list(self.crop)
        d["resize"] = list(self.resize) if isinstance(self.resize, tuple) else self.resize
        d["mean"] = list(self.mean)
        d["std"] = list(self.std)
        if not self.max_num_patches:  # the fixed-size files stay as they were
            del d["max_num_patches"], d["patch_size"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Preprocess":
        r = d.get("resize", 256)
        return cls(
            resize=tuple(r) if isinstance(r, (list, tuple)) else int(r),
            crop=tuple(d.get("crop", (224, 224))),
            interpolation=d.get("interpolation", "bicubic"),
            mean=tuple(float(x) for x in d.get("mean", INCEPTION_MEAN)),
            std=tuple(float(x) for x in d.get("std", INCEPTION_STD)),
            max_num_patches=int(d.get("max_num_patches", 0)),
            patch_size=int(d.get("patch_size", 16)),
        )

    def words(self) -> str:
        """The preprocessing in words, for ``vitviz info`` and tooltips."""
        norm = f"mean {tuple(round(x, 4) for x in self.mean)}, std {tuple(round(x, 4) for x in self.std)}"
        if self.max_num_patches:
            return (f"NaFlex: aspect ratio kept, sides multiples of {self.patch_size}, at most "
                    f"{self.max_num_patches} patches ({self.interpolation}), no crop, {norm}")
        return (f"resize {self.resize} ({self.interpolation}), centre crop {self.crop[0]}x{self.crop[1]}, {norm}")

    def geometry(self, image_size: tuple[int, int]) -> "CropGeometry":
        """Where the model's input crop lies, for an image of ``(height, width)``."""
        h, w = image_size
        if self.max_num_patches:
            rh, rw = naflex_size(h, w, self.patch_size, self.max_num_patches)
            return CropGeometry(image_size=(h, w), resized_size=(rh, rw), crop_box=(0, 0, rh, rw))
        if isinstance(self.resize, tuple):
            rh, rw = self.resize
        else:
            short, long = (h, w) if h <= w else (w, h)
            new_short, new_long = self.resize, int(self.resize * long / short)
            rh, rw = (new_short, new_long) if h <= w else (new_long, new_short)
        ch, cw = self.crop
        top = int(round((rh - ch) / 2.0))
        left = int(round((rw - cw) / 2.0))
        return CropGeometry(image_size=(h, w), resized_size=(rh, rw), crop_box=(top, left, ch, cw))

    def __call__(self, image: Image.Image) -> torch.Tensor:
        """PIL RGB image -> normalised float tensor ``[C, crop_h, crop_w]``."""
        return self.apply(image)[0]

    def apply(self, image: Image.Image) -> tuple[torch.Tensor, "CropGeometry"]:
        """Like ``__call__`` but also return the crop geometry.

        The crop box is computed first (:meth:`geometry`); the resized image is made whole only when it is small
        (at most :data:`_WHOLE_RESIZE_BUDGET` times the crop: every ordinary photo, bit-identical to torchvision's
        ``Resize`` + ``CenterCrop``). Otherwise only the part that ends up in the crop is resampled from the source
        (PIL ``resize(box=...)``), so a 1x5000 strip never allocates its 256 x 1.28M resized image.

        Raises:
            ImageError: the image is more elongated than :data:`vitviz.imaging.MAX_ASPECT_RATIO` (a 1x50000 strip
                would be a sliver of one source pixel stretched over the whole crop).
        """
        h, w = image.height, image.width
        check_shape(w, h)
        if image.mode != "RGB" and len(self.mean) == 3:
            image = image.convert("RGB")
        geo = self.geometry((h, w))
        rh, rw = geo.resized_size
        top, left, ch, cw = geo.crop_box
        # the part of the crop that lies on the resized image, in resized pixels (the rest is zero padding, as
        # torchvision's CenterCrop pads when the crop is larger than the image)
        r0, r1 = max(0, top), min(rh, top + ch)
        c0, c1 = max(0, left), min(rw, left + cw)
        region = _resize_region(image, (rh, rw), (r0, c0, r1, c1), self.interpolation)
        if region.size != (cw, ch):
            canvas = Image.new(region.mode, (cw, ch))
            canvas.paste(region, (c0 - left, r0 - top))
            region = canvas
        arr = np.asarray(region, dtype=np.float32) / 255.0
        if arr.ndim == 2:
            arr = arr[:, :, None]
        t = torch.from_numpy(arr.copy()).permute(2, 0, 1)
        mean = torch.tensor(self.mean, dtype=torch.float32)[:, None, None]
        std = torch.tensor(self.std, dtype=torch.float32)[:, None, None]
        return (t - mean) / std, geo


def naflex_size(height: int, width: int, patch_size: int, max_num_patches: int, eps: float = 1e-5) -> tuple[int, int]:
    """SigLIP 2 NaFlex's input size for an image of ``height x width``: the binary search over the scale of Hugging
    Face's ``get_image_size_for_max_num_patches`` (each side scaled, rounded up to a multiple of ``patch_size``, at
    least one patch; the largest scale whose patch count is at most ``max_num_patches``)."""

    def side(scale: float, size: int) -> int:
        return int(max(patch_size, math.ceil(size * scale / patch_size) * patch_size))

    lo, hi = eps / 10, 100.0
    while hi - lo >= eps:
        scale = (lo + hi) / 2
        if (side(scale, height) / patch_size) * (side(scale, width) / patch_size) <= max_num_patches:
            lo = scale
        else:
            hi = scale
    return side(lo, height), side(lo, width)


def _resize_region(image: Image.Image, resized: tuple[int, int], region: tuple[int, int, int, int],
                   interpolation: Interpolation) -> Image.Image:
    """Rows ``r0:r1`` and columns ``c0:c1`` of ``image.resize((rw, rh))``, without making the whole resized image
    when that would be large.

    When the resized image is at most :data:`_WHOLE_RESIZE_BUDGET` times the region (every ordinary photo), it is
    made and cropped: bit-identical to torchvision. Otherwise (a very elongated image: its resized long side can be
    millions of pixels) the region is resampled straight from the source with ``resize(box=...)``: a horizontal pass
    over the source rows restricted to the output columns, then a vertical pass restricted to the output rows, the
    filter windows unchanged. This matches the whole-image resize up to PIL's choice of pass order and the rounding
    between the passes (a few 1/255 steps on photos); memory is ``(c1 - c0) x image height`` at most.
    """
    h, w = image.height, image.width
    rh, rw = resized
    r0, c0, r1, c1 = region
    resample = _PIL_RESAMPLE[interpolation]
    if (rh, rw) == (h, w):
        return image.crop((c0, r0, c1, r1))
    if rh * rw <= _WHOLE_RESIZE_BUDGET * max(1, (r1 - r0) * (c1 - c0)):
        return image.resize((rw, rh), resample).crop((c0, r0, c1, r1))
    sy, sx = h / rh, w / rw
    if interpolation == "nearest":  # no intermediate rounding: one call
        return image.resize((c1 - c0, r1 - r0), resample, box=(c0 * sx, r0 * sy, c1 * sx, r1 * sy))
    cols = image.crop((c0, 0, c1, h)) if rw == w else image.resize((c1 - c0, h), resample,
                                                                   box=(c0 * sx, 0, c1 * sx, h))
    if rh == h:
        return cols.crop((0, r0, c1 - c0, r1))
    return cols.resize((c1 - c0, r1 - r0), resample, box=(0, r0 * sy, c1 - c0, r1 * sy))


@dataclass(frozen=True)
class CropGeometry:
    """The crop the model saw, relative to the original image.

    Attributes:
        image_size: ``(height, width)`` of the original image.
        resized_size: ``(height, width)`` after the resize.
        crop_box: ``(top, left, height, width)`` of the crop in resized pixels.
    """

    image_size: tuple[int, int]
    resized_size: tuple[int, int]
    crop_box: tuple[int, int, int, int]

    def crop_in_image(self) -> tuple[float, float, float, float]:
        """The crop as ``(y0, x0, y1, x1)`` in original-image pixel coordinates (floats, edges not centres)."""
        h, w = self.image_size
        rh, rw = self.resized_size
        sy, sx = h / rh, w / rw
        top, left, ch, cw = self.crop_box
        return (top * sy, left * sx, (top + ch) * sy, (left + cw) * sx)

    def image_to_input(self, y: float, x: float) -> tuple[float, float]:
        """Map an original-image pixel coordinate to model-input (crop) pixel coordinates."""
        h, w = self.image_size
        rh, rw = self.resized_size
        top, left, _, _ = self.crop_box
        return (y * rh / h - top, x * rw / w - left)
