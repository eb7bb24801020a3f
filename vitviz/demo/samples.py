"""Write the bundled sample images: ``python -m vitviz.demo.samples [--out resources/samples]``.

One image per class from the ``"samples"`` stream of :mod:`vitviz.demo.shapes`, at a few photo-like sizes
(landscape, portrait, square). The object always lies inside the centred square that the demo model's
preprocessing (resize the shorter side to 112, centre-crop 112 x 112) keeps. No Qt here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from vitviz.demo.shapes import CLASSES, ShapeSample, generate, sample_region

# (height, width) per class, cycling
SAMPLE_SIZES: tuple[tuple[int, int], ...] = ((336, 448), (448, 336), (384, 384), (360, 480))


def sample_name(label: int) -> str:
    return f"{label + 1:02d}_{CLASSES[label]}.png"


def make_sample(label: int, seed: int = 0) -> ShapeSample:
    """The bundled sample of class ``label`` (deterministic)."""
    size = SAMPLE_SIZES[label % len(SAMPLE_SIZES)]
    return generate(label, seed=seed, stream="samples", size=size, region=sample_region(size), label=label)


def write_samples(out_dir: Path, seed: int = 0, overwrite: bool = False) -> list[Path]:
    """Write one PNG per class into ``out_dir``; refuses to overwrite existing files unless ``overwrite``."""
    out_dir = Path(out_dir)
    paths = [out_dir / sample_name(k) for k in range(len(CLASSES))]
    existing = [p for p in paths if p.exists()]
    if existing and not overwrite:
        raise FileExistsError(f"{existing[0]} exists (and {len(existing) - 1} more); pass overwrite=True / --force")
    out_dir.mkdir(parents=True, exist_ok=True)
    for k, p in enumerate(paths):
        tmp = p.with_suffix(".tmp.png")
        make_sample(k, seed).pil().save(tmp, optimize=True)
        tmp.replace(p)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vitviz.demo.samples", description="Write the demo sample images.")
    p.add_argument("--out", type=Path, default=None, help="folder (default: resources/samples)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="overwrite existing samples")
    args = p.parse_args(argv)
    if args.out is None:
        from vitviz.demo import resources_dir

        args.out = resources_dir() / "samples"
    try:
        paths = write_samples(args.out, args.seed, overwrite=args.force)
    except FileExistsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
