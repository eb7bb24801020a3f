"""The five whole-attention analyses' share of an image's time: the record of why vitviz has no fused "sweep".

vitviz once had a second implementation of rollout, gradient rollout, relevance, mean attention distance and
attention entropy (``vitviz.analysis.sweep``: all five in one pass over the layers, computed by the pipeline for every
image). Measured end to end as the user waits for it (this script, as it then was, on the project's machine, idle:
ViT-B/16 at 224 px with random weights, fp32 on the CPU; one image's capture with gradients for the top class of the
same pass, then the five analyses, fused against the five public functions one after the other, interleaved):

  batch 1: fused / single functions = 0.991 (saves 0.9% of the image's time)
  batch 8: fused / single functions = 1.005 (saves -0.5%)

Below the 5% the project asks of a second implementation, so it was removed: the five public functions of
:mod:`vitviz.analysis` are the only implementation, and the window computes each when first shown (cached per result).

What this script measures now, in the same process, interleaved: the capture alone against the capture followed by
the five public functions for every image, for one image and for a batch (``vitviz export``'s path); it prints the
medians and the analyses' share of the image's time, which bounds what any fusion of them could save.
Usage: ``python bench/sweep.py [--reps 15] [--threads 2] [--batch 8]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vitviz import analysis as A  # noqa: E402
from vitviz.capture import capture  # noqa: E402
from vitviz.model import create_model  # noqa: E402


def _five(cap) -> list[torch.Tensor]:
    """The five whole-attention analyses of every image of ``cap``, with the public functions (the views' path)."""
    out = []
    for b in range(cap.attentions.shape[1]):
        one = cap.image(b)
        kw = {"grid": tuple(cap.grid), "num_prefix_tokens": cap.num_prefix_tokens}
        out += [A.attention_rollout(one.attentions, **kw),
                A.gradient_rollout(one.attentions, one.attention_grads, **kw),
                A.relevance(one.attentions, one.attention_grads, **kw),
                A.mean_attention_distance(one.attentions, patch_size=cap.patch_size, **kw),
                A.attention_entropy(one.attentions)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = create_model("vit_base_patch16_224").eval()
    print(f"ViT-B/16 224 px, fp32 CPU, {torch.get_num_threads()} thread(s), {args.reps} interleaved rounds, medians")
    for batch in (1, args.batch):
        x = torch.randn(batch, 3, 224, 224)
        times: dict[str, list[float]] = {"capture": [], "capture + five": [], "five": []}
        for rep in range(args.reps + 1):
            for with_analyses in (False, True):
                t0 = time.perf_counter()
                cap = capture(model, x, target="top", store_dtype=torch.float32)
                t1 = time.perf_counter()
                if with_analyses:
                    _five(cap)
                t2 = time.perf_counter()
                if rep:  # the first round warms up
                    if with_analyses:
                        times["capture + five"].append(t2 - t0)
                        times["five"].append(t2 - t1)
                    else:
                        times["capture"].append(t1 - t0)
                del cap
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        share = med["five"] / med["capture + five"]
        print(f"batch {batch}: capture alone {med['capture']:.0f} ms; capture + the five analyses "
              f"{med['capture + five']:.0f} ms (ratio {med['capture + five'] / med['capture']:.3f}); "
              f"the five analyses {med['five']:.1f} ms = {100 * share:.1f}% of the image's time")


if __name__ == "__main__":
    main()
