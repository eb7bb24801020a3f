"""Localisation beside faithfulness on the bundled demo model, whose generator gives exact object masks.

(a) The table: N held-out shape images (the ``"test"`` stream, which training never draws from; default 64), their
    object masks (the generator's anti-aliased coverage >= 0.5) written as PNGs named like the images; ``vitviz
    evaluate demo IMAGES --masks MASKS`` with the views [CLS] attention (last layer, mean of heads), rollout,
    relevance, LeGrad and GradCAM (20 steps, mean baseline, 10 random rankings). Printed as a Markdown table: per
    view the mean and 95 % confidence interval of each localisation metric over the images, and the mean deletion and
    insertion AUC (docs/localisation.md holds its output).
(b) The cost: ``vitviz evaluate ... --masks MASKS --only localisation`` over the folder against its peer, ``vitviz
    export`` of the same maps as .npy plus reading every mask into numpy, in the same process, interleaved rounds;
    prints the median times and their ratio (target: <= 1).

Usage: ``python bench/localisation.py [--only a|b] [--images 64] [--reps 3] [--threads N]``. Absolute times on shared
machines are noise; read the ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vitviz.cli import main  # noqa: E402
from vitviz.demo import generate  # noqa: E402
from vitviz.evaluate.protocol import LOCALISATION_METRICS  # noqa: E402

VIEWS = ("cls_last", "rollout", "relevance", "legrad", "gradcam")
EXPORT_VIEWS = ("cls", "rollout", "relevance", "legrad", "gradcam")  # cls at --layers last = cls_last
SHOWN = LOCALISATION_METRICS[:-1]  # p_miou needs point labels: none here


def write_data(root: Path, n: int) -> tuple[Path, Path]:
    """``root/images/NNNN.png`` and ``root/masks/NNNN.png`` (0 background, 255 object)."""
    images, masks = root / "images", root / "masks"
    images.mkdir(parents=True)
    masks.mkdir(parents=True)
    for i in range(n):
        s = generate(i, seed=0, stream="test")
        Image.fromarray(s.image).save(images / f"{i:04d}.png")
        Image.fromarray(((s.mask >= 0.5) * 255).astype(np.uint8)).save(masks / f"{i:04d}.png")
    return images, masks


def _quiet(argv: list[str]) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(argv)


def bench_table(root: Path, images: Path, masks: Path) -> None:
    out = root / "table.csv"
    t0 = time.perf_counter()
    status = _quiet(["evaluate", "demo", str(images), "--masks", str(masks), "--views", ",".join(VIEWS),
                     "--steps", "20", "--seeds", "10", "--csv", str(out)])
    took = time.perf_counter() - t0
    assert status == 0, f"vitviz evaluate exited with {status}"
    with open(out, newline="") as fh:
        rows = list(csv.DictReader(fh))
    n = len({r["image"] for r in rows if r["image"] not in ("mean", "ci95")})
    mean = {r["view"]: r for r in rows if r["image"] == "mean"}
    ci = {r["view"]: r for r in rows if r["image"] == "ci95"}
    print(f"(a) the demo model on {n} held-out images ({took:.0f} s): mean +- 95% CI over the images")
    print("| view | " + " | ".join(SHOWN) + " | deletion AUC (lower better) | insertion AUC (higher better) |")
    print("|---" * (len(SHOWN) + 3) + "|")
    for v in VIEWS:
        cells = [f"{float(mean[v][m]):.3f} ± {float(ci[v][m]):.3f}" for m in SHOWN]
        print(f"| {v} | " + " | ".join(cells) + f" | {float(mean[v]['deletion_auc']):.3f} | "
              f"{float(mean[v]['insertion_auc']):.3f} |")
    r = mean["random"]
    print("| random (10 rankings) | " + " | ".join("" for _ in SHOWN) + f" | {float(r['deletion_auc']):.3f} | "
          f"{float(r['insertion_auc']):.3f} |")


def bench_cost(root: Path, images: Path, masks: Path, reps: int) -> None:
    def localisation() -> None:
        out = root / "loc.csv"
        assert _quiet(["evaluate", "demo", str(images), "--masks", str(masks), "--only", "localisation",
                       "--views", ",".join(VIEWS), "--csv", str(out), "--overwrite"]) == 0

    def export_and_read() -> None:
        assert _quiet(["export", "--model", "demo", str(images), "--out", str(root / "maps"), "--views",
                       ",".join(EXPORT_VIEWS), "--layers", "last", "--format", "npy", "--overwrite", "--quiet"]) == 0
        for p in sorted(masks.glob("*.png")):
            with Image.open(p) as m:
                _ = np.asarray(m) > 0

    localisation(), export_and_read()  # warm-up: imports, the model's first load
    a, b = [], []
    for _ in range(reps):
        for fn, ts in ((localisation, a), (export_and_read, b)):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    n = len(list(images.glob("*.png")))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"(b) {n} images, {len(VIEWS)} views, median of {reps}: localisation (evaluate --only localisation) "
          f"{ma:.2f} s; export of the maps (npy) + reading the masks {mb:.2f} s; ratio {ma / mb:.2f}")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("a", "b"))
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int)
    return p.parse_args(argv)


def run(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        images, masks = write_data(root, args.images)
        if args.only in (None, "a"):
            bench_table(root, images, masks)
        if args.only in (None, "b"):
            bench_cost(root, images, masks, args.reps)
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
