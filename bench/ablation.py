"""Benchmark: head knock-out of every (layer, head) of a ViT, batched from the clean residual stream
(:func:`vitviz.capture.mechanistic.head_knockout`: the H variants of layer l run together from block l's cached
input), against L x H separate full forwards of the same vitviz model, each with one head zeroed by a pre-hook on its
``attn.proj`` (the naive way), in the same process, interleaved. Also checks that both give the same scores.

Usage: ``python bench/ablation.py [--model vit_base_patch16_224] [--reps 3] [--threads 2] [--batch-size 64]``
(random weights; ViT-B/16 at 224 by default, CPU fp32, batch 1). Read the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vitviz.capture.mechanistic import head_knockout  # noqa: E402
from vitviz.capture.mechanistic.knockout import knock_out_heads  # noqa: E402


def separate_forwards(model, x, target: int) -> torch.Tensor:
    """One full forward per (layer, head), the head zeroed at ``attn.proj``'s input."""
    L, H = len(model.blocks), model.num_heads
    scores = torch.empty(L, H)
    for l in range(L):
        for h in range(H):
            def pre(module, args, h=h):
                return (knock_out_heads(args[0], torch.tensor([h]), H, "zero"),)

            handle = model.blocks[l].attn.proj.register_forward_pre_hook(pre)
            try:
                with torch.no_grad():
                    scores[l, h] = model(x)[0, target].float()
            finally:
                handle.remove()
    return scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vit_base_patch16_224")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import timm

    from vitviz.model import load_checkpoint

    torch.manual_seed(0)
    ref = timm.create_model(args.model, pretrained=False).eval()
    with torch.no_grad():
        torch.nn.init.normal_(ref.head.weight, std=0.02)
    model = load_checkpoint(ref.state_dict(), num_heads=ref.blocks[0].attn.num_heads).eval()
    size = ref.default_cfg["input_size"][1:]
    x = torch.randn(1, 3, *size)
    with torch.no_grad():
        top = int(model(x).argmax())
    L, H = len(model.blocks), model.num_heads
    batched, separate = [], []
    for _ in range(args.reps):
        t = time.perf_counter()
        result = head_knockout(model, x, top, batch_size=args.batch_size)
        batched.append(time.perf_counter() - t)
        t = time.perf_counter()
        naive = separate_forwards(model, x, top)
        separate.append(time.perf_counter() - t)
    err = float((result.scores - naive).abs().max() / naive.abs().max())
    b, s = statistics.median(batched), statistics.median(separate)
    print(f"{args.model}: {L} layers x {H} heads, CPU fp32, {args.threads} threads, median of {args.reps}")
    print(f"  batched from the clean residual stream: {b:8.2f} s")
    print(f"  {L * H} separate full forwards:          {s:8.2f} s")
    print(f"  ratio separate / batched: {s / b:.2f}x   (block passes: {L * L * H} vs {H * L * (L + 1) // 2} + {L})")
    print(f"  max relative difference of the scores: {err:.2e}")


if __name__ == "__main__":
    main()
