"""Is the one-sweep analysis (vitviz.analysis.sweep) worth a second implementation of five analyses?

End to end, as the user waits for it: one image's capture with gradients (the top class of the same pass) followed by
its five whole-attention analyses (rollout, gradient rollout, relevance, mean attention distance, attention entropy),
ViT-B/16 at 224 px with random weights, fp32 on the CPU, measured two ways in the same process, interleaved:

  sweep:   capture + ``analyse_batch`` (what ``Pipeline.run_batch`` does)
  single:  capture + the five public functions one after the other

and the same for a batch of 8 images (``vitviz export``'s path). Prints the medians and the sweep's saving as a share
of the whole image's time. Usage: ``python bench/sweep.py [--reps 15] [--threads 2] [--batch 8]``.
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


def _single(cap) -> list[torch.Tensor]:
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


def _sweep(cap) -> list:
    return A.analyse_batch(cap.attentions, cap.attention_grads, grid=tuple(cap.grid), patch_size=cap.patch_size,
                           num_prefix_tokens=cap.num_prefix_tokens)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = create_model("vit_base_patch16_224").eval()
    for batch in (1, args.batch):
        x = torch.randn(batch, 3, 224, 224)
        times: dict[str, list[float]] = {"sweep": [], "single": [], "capture": []}
        for rep in range(args.reps + 1):
            for name, analyse in (("sweep", _sweep), ("single", _single)):
                t0 = time.perf_counter()
                cap = capture(model, x, target="top", store_dtype=torch.float32)
                t1 = time.perf_counter()
                analyse(cap)
                t2 = time.perf_counter()
                if rep:  # the first round warms up
                    times[name].append(t2 - t0)
                    times["capture"].append(t1 - t0)
                del cap
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        saving = (med["single"] - med["sweep"]) / med["single"]
        print(f"batch {batch}: capture {med['capture']:.0f} ms; capture + analyses: sweep {med['sweep']:.0f} ms, "
              f"single functions {med['single']:.0f} ms; sweep / single = {med['sweep'] / med['single']:.3f} "
              f"(saves {100 * saving:.1f}% of the image's time)")


if __name__ == "__main__":
    main()
