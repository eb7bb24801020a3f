"""A synthetic "shapes" dataset: one target object per image over a cluttered background.

Each image holds exactly one object from :data:`CLASSES` (circle, square, triangle, star, cross, ring, hexagon,
heart) at a random position, size, rotation and colour, drawn over a background made of a colour gradient,
low-frequency blotches, straight lines, small irregular specks and pixel noise. The specks are far smaller than the
smallest object and the lines far thinner than any object part, so neither can be mistaken for a class.

Everything is deterministic: image ``index`` of stream ``stream`` with base seed ``seed`` is drawn from
``numpy.random.default_rng([STREAMS[stream], seed, index])``, so the training, validation, test and sample streams
never share a random state.

The generator is resolution independent: every length is expressed in units of ``min(region side) / 112``, so an
image rendered at 336 x 448 and downscaled to 112 px by the model's preprocessing looks like one rendered at 112 px.

No Qt here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from PIL import Image, ImageDraw

from vitviz.resources import DEMO_CLASSES as CLASSES  # the demo model's classes, declared below the model layer

Stream = Literal["train", "val", "test", "samples"]
STREAMS: dict[str, int] = {"train": 1, "val": 2, "test": 3, "samples": 4}

BASE = 112  # the side (pixels) the unit lengths below refer to
SUPERSAMPLE = 4  # object masks are drawn this many times larger and box-filtered down (anti-aliasing)

# object radius (half of the circumscribed diameter) as a fraction of the region's shorter side
RADIUS_RANGE = (0.2, 0.36)
# object rotation, uniform in +-MAX_ROTATION degrees about its upright pose (triangle, star and heart point up)
MAX_ROTATION = 30.0


@dataclass(frozen=True)
class ShapeSample:
    """One generated image.

    Attributes:
        image: ``uint8 [H, W, 3]`` RGB pixels.
        label: class index into :data:`CLASSES`.
        box: the object's bounding box ``(x0, y0, x1, y1)`` in pixels, half-open: the object covers pixels with
            ``x0 <= x < x1`` and ``y0 <= y < y1``.
        mask: ``float32 [H, W]`` object coverage in ``[0, 1]`` (anti-aliased), zero outside ``box``.
    """

    image: np.ndarray
    label: int
    box: tuple[int, int, int, int]
    mask: np.ndarray

    @property
    def class_name(self) -> str:
        return CLASSES[self.label]

    def pil(self) -> Image.Image:
        return Image.fromarray(self.image, "RGB")


# ---------------------------------------------------------------------------------------------------------- outlines
def _circle(n: int = 48) -> np.ndarray:
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    return np.stack([np.cos(t), np.sin(t)], 1)


def _regular(k: int) -> np.ndarray:
    t = np.arange(k) * 2 * np.pi / k - np.pi / 2
    return np.stack([np.cos(t), np.sin(t)], 1)


def _star(points: int = 5, inner: float = 0.42) -> np.ndarray:
    t = np.arange(2 * points) * np.pi / points - np.pi / 2
    r = np.where(np.arange(2 * points) % 2 == 0, 1.0, inner)
    return np.stack([r * np.cos(t), r * np.sin(t)], 1)


def _cross(arm: float = 0.3) -> np.ndarray:
    a, b = arm, 1.0 / math.sqrt(1 + arm**2)  # corners of the arm tips lie on the unit circle
    a, b = a * b, b
    return np.array([[-a, -b], [a, -b], [a, -a], [b, -a], [b, a], [a, a], [a, b], [-a, b], [-a, a], [-b, a],
                     [-b, -a], [-a, -a]])


def _heart(n: int = 64) -> np.ndarray:
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    x = 16 * np.sin(t) ** 3
    y = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
    p = np.stack([x, y], 1)
    p -= (p.max(0) + p.min(0)) / 2
    return p / np.linalg.norm(p, axis=1).max()


# each class: list of (outline, fill) drawn in order; fill 0 cuts a hole
_OUTLINES: dict[str, list[tuple[np.ndarray, int]]] = {
    "circle": [(_circle(), 255)],
    "square": [(_regular(4), 255)],
    "triangle": [(_regular(3) + np.array([0.0, 0.25]), 255)],  # centroid-centred; outer radius 1 after scaling
    "star": [(_star(), 255)],
    "cross": [(_cross(), 255)],
    "ring": [(_circle(), 255), (_circle() * 0.55, 0)],
    "hexagon": [(_regular(6), 255)],
    "heart": [(_heart(), 255)],
}
_OUTLINES["triangle"] = [(p / np.linalg.norm(p, axis=1).max(), f) for p, f in _OUTLINES["triangle"]]


# ---------------------------------------------------------------------------------------------------------- render
def _rng(stream: Stream | str, seed: int, index: int) -> np.random.Generator:
    if stream not in STREAMS:
        raise ValueError(f"unknown stream {stream!r}; valid: {sorted(STREAMS)}")
    return np.random.default_rng([STREAMS[stream], int(seed), int(index)])


def _random_colour(rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(0, 255, size=3).astype(np.float32)


def _upsample_nearest(a: np.ndarray, h: int, w: int) -> np.ndarray:
    ys = np.minimum((np.arange(h) * a.shape[0] / h).astype(np.int64), a.shape[0] - 1)
    xs = np.minimum((np.arange(w) * a.shape[1] / w).astype(np.int64), a.shape[1] - 1)
    return a[ys][:, xs]


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Gradient + blotches: ``float32 [H, W, 3]`` in 0..255."""
    c0 = _random_colour(rng)
    c1 = _random_colour(rng)
    theta = rng.uniform(0, 2 * np.pi)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    t = xx * math.cos(theta) + yy * math.sin(theta)
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    img = c0[None, None] + t[..., None] * (c1 - c0)[None, None]
    # low-frequency blotches: a coarse random grid, bilinearly upsampled
    amp = rng.uniform(0, 50)
    if amp > 1:
        gh, gw = rng.integers(3, 7), rng.integers(3, 7)
        coarse = rng.normal(0, amp, size=(gh, gw, 3)).astype(np.float32)
        blot = np.stack([np.asarray(Image.fromarray(coarse[..., c], "F").resize((w, h), Image.Resampling.BILINEAR))
                         for c in range(3)], -1)
        img = img + blot
    return img


def _draw_clutter(rng: np.random.Generator, canvas: Image.Image, unit: float) -> None:
    """Straight lines and small irregular specks, drawn onto ``canvas`` in place."""
    w, h = canvas.size
    draw = ImageDraw.Draw(canvas)
    for _ in range(int(rng.integers(0, 7))):
        col = tuple(int(c) for c in rng.integers(0, 256, 3))
        x0, y0 = rng.uniform(-0.2 * w, 1.2 * w), rng.uniform(-0.2 * h, 1.2 * h)
        ang = rng.uniform(0, np.pi)
        length = rng.uniform(0.3, 1.5) * max(w, h)
        x1, y1 = x0 + length * math.cos(ang), y0 + length * math.sin(ang)
        width = max(1, int(round(rng.uniform(0.6, 1.8) * unit)))
        draw.line([(x0, y0), (x1, y1)], fill=col, width=width)
    for _ in range(int(rng.integers(0, 16))):
        col = tuple(int(c) for c in rng.integers(0, 256, 3))
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        k = int(rng.integers(5, 9))
        ang = np.sort(rng.uniform(0, 2 * np.pi, k))
        rad = rng.uniform(1.0, 3.5, k) * unit
        draw.polygon([(cx + r * math.cos(a), cy + r * math.sin(a)) for a, r in zip(ang, rad)], fill=col)


def render(
    label: int,
    rng: np.random.Generator,
    size: tuple[int, int] = (BASE, BASE),
    region: tuple[int, int, int, int] | None = None,
) -> ShapeSample:
    """Render one image of class ``label`` with randomness from ``rng``.

    Args:
        label: class index into :data:`CLASSES`.
        rng: the random generator (consumed).
        size: ``(height, width)`` of the image.
        region: ``(x0, y0, x1, y1)`` the object must lie inside (default: the whole image). Lengths scale with the
            region's shorter side.

    Returns:
        A :class:`ShapeSample`.
    """
    if not 0 <= label < len(CLASSES):
        raise ValueError(f"label {label} out of range 0..{len(CLASSES) - 1}")
    h, w = int(size[0]), int(size[1])
    if h < 16 or w < 16:
        raise ValueError(f"image size {size} too small (need at least 16x16)")
    rx0, ry0, rx1, ry1 = region if region is not None else (0, 0, w, h)
    if not (0 <= rx0 < rx1 <= w and 0 <= ry0 < ry1 <= h):
        raise ValueError(f"region {region} does not lie inside an image of (height, width) = {size}")
    side = min(rx1 - rx0, ry1 - ry0)
    unit = side / BASE
    img = _background(rng, h, w)
    canvas = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")
    _draw_clutter(rng, canvas, unit)
    img = np.asarray(canvas, dtype=np.float32)

    # object geometry
    r = rng.uniform(*RADIUS_RANGE) * side
    rot = math.radians(rng.uniform(-MAX_ROTATION, MAX_ROTATION))
    rmat = np.array([[math.cos(rot), -math.sin(rot)], [math.sin(rot), math.cos(rot)]])
    parts = [(p @ rmat.T * r, f) for p, f in _OUTLINES[CLASSES[label]]]
    outer = parts[0][0]
    lo, hi = outer.min(0), outer.max(0)
    margin = 1.0
    cx = rng.uniform(rx0 + margin - lo[0], rx1 - margin - hi[0])
    cy = rng.uniform(ry0 + margin - lo[1], ry1 - margin - hi[1])

    # anti-aliased mask over the object's neighbourhood only
    bx0, by0 = max(0, int(math.floor(cx + lo[0])) - 1), max(0, int(math.floor(cy + lo[1])) - 1)
    bx1, by1 = min(w, int(math.ceil(cx + hi[0])) + 2), min(h, int(math.ceil(cy + hi[1])) + 2)
    s = SUPERSAMPLE
    big = Image.new("L", ((bx1 - bx0) * s, (by1 - by0) * s), 0)
    d = ImageDraw.Draw(big)
    for pts, fill in parts:
        q = (pts + np.array([cx - bx0, cy - by0])) * s
        d.polygon([tuple(v) for v in q], fill=fill)
    small = np.asarray(big.resize((bx1 - bx0, by1 - by0), Image.Resampling.BOX), dtype=np.float32) / 255.0
    mask = np.zeros((h, w), np.float32)
    mask[by0:by1, bx0:bx1] = small

    # colour: far enough from the background under the object
    under = img[by0:by1, bx0:bx1][small > 0.5].mean(0) if (small > 0.5).any() else img.mean((0, 1))
    for _ in range(20):
        col = _random_colour(rng)
        if np.linalg.norm(col - under) > 110:
            break
    else:
        col = np.where(under > 127, 0.0, 255.0).astype(np.float32)
    # a gentle shading across the object
    shade_dir = rng.uniform(0, 2 * np.pi)
    yy, xx = np.mgrid[by0:by1, bx0:bx1].astype(np.float32)
    shade = ((xx - cx) * math.cos(shade_dir) + (yy - cy) * math.sin(shade_dir)) / max(r, 1.0)
    obj = col[None, None] + shade[..., None] * rng.uniform(0, 30)
    patch = img[by0:by1, bx0:bx1]
    img[by0:by1, bx0:bx1] = patch * (1 - small[..., None]) + obj * small[..., None]

    # pixel noise at the base resolution (so it scales with the image)
    sigma = rng.uniform(0, 14)
    if sigma > 0.5:
        nh, nw = max(1, int(round(h / unit))), max(1, int(round(w / unit)))
        noise = rng.normal(0, sigma, size=(nh, nw, 3)).astype(np.float32)
        img += noise if (nh, nw) == (h, w) else _upsample_nearest(noise, h, w)

    ys, xs = np.nonzero(mask > 0)
    box = (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1)
    return ShapeSample(image=np.clip(img + 0.5, 0, 255).astype(np.uint8), label=int(label), box=box, mask=mask)


def generate(
    index: int,
    seed: int = 0,
    stream: Stream = "train",
    size: tuple[int, int] = (BASE, BASE),
    region: tuple[int, int, int, int] | None = None,
    label: int | None = None,
) -> ShapeSample:
    """Image ``index`` of a stream: deterministic from ``(stream, seed, index)``.

    The class is ``index % len(CLASSES)`` unless ``label`` is given, so every consecutive run of 8 indices is
    class-balanced.
    """
    rng = _rng(stream, seed, index)
    lab = index % len(CLASSES) if label is None else int(label)
    return render(lab, rng, size=size, region=region)


def generate_batch(
    start: int, count: int, seed: int = 0, stream: Stream = "train", size: tuple[int, int] = (BASE, BASE),
    with_masks: bool = False,
) -> tuple[np.ndarray, ...]:
    """Images ``start .. start+count-1`` of a stream.

    Returns:
        ``images uint8 [count, H, W, 3]``, ``labels int64 [count]``, ``boxes int64 [count, 4]`` (x0, y0, x1, y1),
        and with ``with_masks`` also ``masks float32 [count, H, W]`` (object coverage).
    """
    samples = [generate(i, seed, stream, size) for i in range(start, start + count)]
    out = (np.stack([s.image for s in samples]), np.array([s.label for s in samples], np.int64),
           np.array([s.box for s in samples], np.int64))
    if with_masks:
        return out + (np.stack([s.mask for s in samples]),)
    return out


def sample_region(size: tuple[int, int]) -> tuple[int, int, int, int]:
    """The centred square of an image of ``(height, width)``: what a resize-shorter-side + centre-crop keeps."""
    h, w = size
    s = min(h, w)
    x0, y0 = (w - s) // 2, (h - s) // 2
    return (x0, y0, x0 + s, y0 + s)
