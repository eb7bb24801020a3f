"""Benchmark: what LeGrad and GradCAM cost per image, against the relevance view and against one forward + one
backward (timm's ViT with the same random weights, fused attention), in the same process, interleaved.

Measured per image (ViT-B/16 at 224 by default, batch 1, CPU fp32, median of ``--reps``):

* ``fb``: timm's forward + one backward of the top logit to the input (the floor of any gradient method);
* ``capture``: vitviz's capture with gradients of the top class (every layer's attention and gradients stored);
* ``relevance``: ``capture`` + the relevance analysis (what the relevance view costs from scratch);
* ``legrad``: ``capture`` with LeGrad's per-layer maps of one pooling + the map (every layer's map is taken, so the
  start-layer slider needs no new pass);
* ``gradcam``: ``capture`` with GradCAM's per-layer maps + the map;
* ``window``: ``Pipeline.run`` as the window calls it (LeGrad's two poolings and GradCAM included), ``pipeline``:
  ``Pipeline.run``'s default (LeGrad's own pooling and GradCAM), both against ``Pipeline.run_batch(..., legrad=(),
  gradcam=False)``.

Usage: ``python bench/legrad.py [--model vit_base_patch16_224] [--reps 9] [--threads 2]``. Read the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vitviz import analysis as A  # noqa: E402
from vitviz.capture import capture  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vit_base_patch16_224")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import timm
    from PIL import Image

    from vitviz.model import load_checkpoint
    from vitviz.pipeline import Pipeline

    torch.manual_seed(0)
    ref = timm.create_model(args.model, pretrained=False).eval()
    with torch.no_grad():
        torch.nn.init.normal_(ref.head.weight, std=0.02)
    ours = load_checkpoint(ref.state_dict(), num_heads=ref.blocks[0].attn.num_heads).eval()
    size = ref.default_cfg["input_size"][1:]
    x = torch.randn(1, 3, *size)
    with torch.no_grad():
        top = int(ref(x).argmax())
    L = len(ours.blocks)
    pipe = Pipeline(ours)
    image = Image.fromarray((np.random.default_rng(0).random((480, 640, 3)) * 255).astype(np.uint8))

    def fb():
        xi = x.clone().requires_grad_(True)
        torch.autograd.grad(ref(xi)[0, top], xi)

    def cap():
        capture(ours, x, target=top)

    def relevance():
        c = capture(ours, x, target=top)
        A.relevance(c.attentions[:, 0], c.attention_grads[:, 0], grid=c.grid)

    def legrad():
        c = capture(ours, x, target=top, legrad=("mean",))
        A.legrad_map(c.legrad["mean"][:, 0], -2, c.grid)

    def gradcam():
        c = capture(ours, x, target=top, gradcam=True)
        A.gradcam_map(c.gradcam[:, 0], -1, c.grid)

    def window():
        pipe.run(image, legrad=("mean", "model"))

    def pipeline():
        pipe.run(image)

    def window_without():
        pipe.run_batch([image], legrad=(), gradcam=False)

    cases = {"fb": fb, "capture": cap, "relevance": relevance, "legrad": legrad, "gradcam": gradcam,
             "window": window, "pipeline": pipeline, "window_without": window_without}
    times: dict[str, list[float]] = {k: [] for k in cases}
    for f in cases.values():  # warm-up
        f()
    for _ in range(args.reps):
        for k, f in cases.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"{args.model}, {L} layers, {size[0]}x{size[1]}, batch 1, CPU fp32, {args.threads} threads, median of "
          f"{args.reps}:")
    for k in cases:
        print(f"  {k:15s} {med[k]:8.1f} ms   {med[k] / med['fb']:.2f} x (forward + backward)")
    print(f"LeGrad / relevance (each from scratch): {med['legrad'] / med['relevance']:.2f}")
    print(f"LeGrad's own steps (legrad - capture): {med['legrad'] - med['capture']:.1f} ms = "
          f"{(med['legrad'] - med['capture']) / med['fb']:.2f} x (forward + backward), all {L} layers")
    print(f"GradCAM's own steps (gradcam - capture): {med['gradcam'] - med['capture']:.1f} ms")
    print(f"window's Pipeline.run with LeGrad (2 poolings) + GradCAM / without: "
          f"{med['window'] / med['window_without']:.2f}; Pipeline.run's default (1 pooling) + GradCAM / without: "
          f"{med['pipeline'] / med['window_without']:.2f}")


if __name__ == "__main__":
    main()
