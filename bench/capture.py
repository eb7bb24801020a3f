"""Benchmark of vitviz.capture and vitviz.analysis (CPU, fp32), peers measured in the same process, interleaved.

(a) capture of every layer (attentions + tokens), ViT-B/16 at 224, batch 1, against torchvision's plain ``vit_b_16``
    forward with the same (random) weights; also our own plain fused forward and timm with hooks on its unfused
    attention (what the popular scripts do), for context. Target: capture / torchvision <= 1.05.
(b) every analysis of vitviz.analysis for one ViT-B/16 image (plain torch), interleaved with the capture of that
    image with gradients (target class): per-image totals, the five whole-attention analyses' share of a capture
    (rollout, gradient rollout, relevance, mean attention distance, entropy: what the window computes for the default
    views and plots), and all the analyses' share of the image's capture time. Target: < 20 ms total.
(c) peak memory of a capture (batch 1) for vit_large_patch16_384 and vit_huge_patch14_518, fp32 and fp16 storage,
    each in a fresh subprocess (process peak RSS from ``resource.getrusage``; psutil is not needed).

(d) the window's per-image pipeline (``Pipeline.run``: preprocess, capture with gradients),
    ViT-B/16 at 224 on a 640x480 image, without a target (the top class of the same pass) against an explicit target,
    interleaved. Target: default / explicit <= 1.05 (it used to be 1.46: an extra forward found the top class).

Usage: ``python bench/capture.py [--reps 30] [--threads N] [--skip-memory] [--only a|b|c|d]``.
Absolute times on shared machines are noise; read the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vitviz import analysis as A  # noqa: E402
from vitviz.capture import capture  # noqa: E402


def _median_ms(ts: list[float]) -> float:
    return statistics.median(ts) * 1e3


def bench_capture(reps: int) -> None:
    import timm
    import torchvision

    from vitviz.model import load_checkpoint

    torch.manual_seed(0)
    tv = torchvision.models.vit_b_16(weights=None).eval()
    with torch.no_grad():  # torchvision zero-initialises the head: randomise it so the logits check means something
        torch.nn.init.normal_(tv.heads.head.weight, std=0.02)
        torch.nn.init.normal_(tv.heads.head.bias, std=0.02)
    ours = load_checkpoint(tv.state_dict(), num_heads=12).eval()
    ref = timm.create_model("vit_base_patch16_224", pretrained=False).eval()
    ref.load_state_dict(ours.state_dict(), strict=True)
    x = torch.randn(1, 3, 224, 224)
    with torch.inference_mode():
        y_tv = tv(x)
    cap = capture(ours, x)
    err = (cap.logits - y_tv).abs().max().item()
    print(f"(a) same weights: max |logits(capture) - logits(torchvision)| = {err:.2e} "
          f"(logits scale {y_tv.abs().max().item():.2f})")
    assert err < 1e-3, "weights were not transferred"

    store: list = []
    handles = []
    for blk in ref.blocks:
        blk.attn.fused_attn = False
        handles.append(blk.attn.attn_drop.register_forward_hook(lambda m, i, o: store.append(o)))

    def run_tv():
        with torch.inference_mode():
            tv(x)

    def run_capture():
        capture(ours, x)

    def run_ours_fused():
        with torch.inference_mode():
            ours(x)

    def run_timm_hooks():
        store.clear()
        with torch.inference_mode():
            ref(x)
            torch.stack(store)

    runs = {"torchvision": run_tv, "capture": run_capture, "ours fused": run_ours_fused, "timm+hooks": run_timm_hooks}
    for f in runs.values():  # warm up
        f()
        f()
    times: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    ratios: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(reps):
        this = {}
        for name, f in runs.items():  # interleaved: every round runs each peer once, back to back
            t, c = time.perf_counter(), time.process_time()
            f()
            cpu[name].append(time.process_time() - c)
            this[name] = time.perf_counter() - t
            times[name].append(this[name])
        for name in runs:
            ratios[name].append(this[name] / this["torchvision"])
    for h in handles:
        h.remove()
    print(f"(a) ViT-B/16 224 px, batch 1, {torch.get_num_threads()} thread(s), {reps} interleaved rounds")
    for name in runs:
        print(f"    {name:12s} wall median {_median_ms(times[name]):8.1f} ms, ratio to torchvision: "
              f"median of per-round ratios {statistics.median(ratios[name]):.3f}, "
              f"of medians {statistics.median(times[name]) / statistics.median(times['torchvision']):.3f}; "
              f"process CPU time ratio of medians "
              f"{statistics.median(cpu[name]) / statistics.median(cpu['torchvision']):.3f}")
    print("    target: capture / torchvision <= 1.05")


def bench_analysis(reps: int) -> None:
    from vitviz.model import create_model
    from vitviz.model.preprocess import Preprocess

    torch.manual_seed(0)
    model = create_model("vit_base_patch16_224").eval()
    x = torch.randn(1, 3, 224, 224)
    cap = capture(model, x, target=3)
    im = cap.image(0)
    a, g, tok = im.attentions, im.attention_grads, im.tokens
    kw = dict(grid=im.grid, num_prefix_tokens=im.num_prefix_tokens)
    geo = Preprocess.for_crop(224).geometry((480, 640))
    pos = model.pos_embed.detach()
    w = model.patch_embed.proj.weight.detach()
    per_image = {
        "cls_attention": lambda: A.cls_attention(a, -1, "mean", **kw),
        "query_attention": lambda: A.query_attention(a, 5, 3, 40, **kw),
        "attention_rollout": lambda: A.attention_rollout(a, **kw),
        "attention_rollout d=0.9": lambda: A.attention_rollout(a, discard_ratio=0.9, **kw),
        "gradient_rollout": lambda: A.gradient_rollout(a, g, **kw),
        "gradient_rollout d=0.9": lambda: A.gradient_rollout(a, g, discard_ratio=0.9, **kw),
        "relevance": lambda: A.relevance(a, g, **kw),
        "mean_attention_distance": lambda: A.mean_attention_distance(a, patch_size=16, **kw),
        "attention_entropy": lambda: A.attention_entropy(a),
        "token_similarity": lambda: A.token_similarity(tok, layer=6, index=0, **kw),
        "upsample bilinear": lambda: A.upsample(torch.rand(14, 14), 224, "bilinear"),
        "map_to_image 480x640": lambda: A.map_to_image(torch.rand(14, 14), geo),
    }
    per_model = {
        "position_embedding_similarity": lambda: A.position_embedding_similarity(pos, **kw),
        "embedding_filters k=28": lambda: A.embedding_filters(w, k=28),
    }
    allf = {**per_image, **per_model}
    runs = {"capture with grads (batch 1)": lambda: capture(model, x, target=3), **allf}
    for f in runs.values():  # warm-up
        f()
    times = {k: [] for k in runs}
    cpu = {k: [] for k in runs}
    for _ in range(reps):
        for name, f in runs.items():
            t, c = time.perf_counter(), time.process_time()
            f()
            cpu[name].append(time.process_time() - c)
            times[name].append(time.perf_counter() - t)
    wall = {k: _median_ms(v) for k, v in times.items()}
    cpum = {k: _median_ms(v) for k, v in cpu.items()}
    print(f"(b) analyses of one ViT-B/16 image (L=12, H=12, N=197), {torch.get_num_threads()} thread(s), "
          f"{reps} interleaved rounds, medians of wall time and of process CPU time (CPU time is what a busy shared "
          "machine does not inflate; with 1 thread it is the uncontended wall time)")
    print(f"    {'':30s} {'wall':>10s} {'cpu':>10s}")
    for name in runs:
        tag = " (per model, not per image)" if name in per_model else ""
        print(f"    {name:30s} {wall[name]:7.2f} ms {cpum[name]:7.2f} ms{tag}")
    five = ("attention_rollout", "gradient_rollout", "relevance", "mean_attention_distance", "attention_entropy")
    single = [n for n in per_image if "d=0.9" not in n]
    discard = [n for n in per_image if n not in ("attention_rollout", "gradient_rollout")]
    cap_ms = wall["capture with grads (batch 1)"]
    for label, names in (("defaults (discard 0), one function each", single),
                         ("with discard_ratio=0.9 rollouts, one function each", discard)):
        tot, c = sum(wall[n] for n in names), sum(cpum[n] for n in names)
        print(f"    TOTAL per image, {label}: wall {tot:.1f} ms (cpu {c:.1f}), "
              f"{100 * tot / cap_ms:.1f}% of the image's capture ({cap_ms:.0f} ms)   (target < 20 ms)")
    tot5, c5 = sum(wall[n] for n in five), sum(cpum[n] for n in five)
    print(f"    the five whole-attention analyses ({', '.join(five)}): wall {tot5:.1f} ms (cpu {c5:.1f}), "
          f"{100 * tot5 / cap_ms:.1f}% of the image's capture ({cap_ms:.0f} ms)")


def _memory_child(name: str, dtype: str, target: bool) -> None:
    from vitviz.model import create_model

    torch.manual_seed(0)
    model = create_model(name).eval()
    size = model.config.img_size
    x = torch.randn(1, 3, *size)
    with torch.inference_mode():  # a plain forward first: the peak of the model's own working set
        model(x)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t = time.perf_counter()
    cap = capture(model, x, store_dtype=getattr(torch, dtype), target=0 if target else None)
    dt = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(dict(name=name, dtype=dtype, target=target, stored=cap.nbytes, peak_rss=peak,
                          plain_forward_peak_rss=base, params=model.num_params() * 4, seconds=dt,
                          shape=list(cap.attentions.shape))))


def bench_memory() -> None:
    print("(c) peak memory of capture, batch 1 (fresh process each; RSS peak of the process)")
    for name in ("vit_large_patch16_384", "vit_huge_patch14_518"):
        for dtype in ("float32", "float16"):
            out = subprocess.run([sys.executable, __file__, "--memory-child", name, dtype],
                                 capture_output=True, text=True, env={**os.environ})
            if out.returncode != 0:
                print(f"    {name} {dtype}: FAILED\n{out.stderr[-2000:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            gib = 1024**3
            print(f"    {name:22s} {dtype:8s} attentions {tuple(r['shape'])}: stored {r['stored'] / gib:5.2f} GiB, "
                  f"process peak {r['peak_rss'] / gib:5.2f} GiB "
                  f"(plain forward peak {r['plain_forward_peak_rss'] / gib:5.2f}"
                  f" GiB, weights {r['params'] / gib:4.2f} GiB), capture {r['seconds']:.1f} s; "
                  f"peak - plain peak = {(r['peak_rss'] - r['plain_forward_peak_rss']) / gib:5.2f} GiB")


def bench_pipeline(reps: int) -> None:
    import numpy as np
    from PIL import Image

    from vitviz.model import create_model
    from vitviz.pipeline import Pipeline

    torch.manual_seed(0)
    p = Pipeline(create_model("vit_base_patch16_224").eval())
    img = Image.fromarray((np.random.default_rng(0).random((480, 640, 3)) * 255).astype(np.uint8))
    top = p.run(img).target
    times: dict[str, list[float]] = {"default (top class, one pass)": [], f"explicit target {top}": []}
    for _ in range(reps):
        for name, target in zip(times, (None, top)):
            t = time.perf_counter()
            p.run(img, target=target)
            times[name].append(time.perf_counter() - t)
    a, b = (_median_ms(v) for v in times.values())
    print("(d) Pipeline.run per image, ViT-B/16 fp32, 640x480 image (median of", reps, "interleaved)")
    for name, v in times.items():
        print(f"    {name:32s} {_median_ms(v):8.1f} ms")
    print(f"    ratio default / explicit: {a / b:.3f}  (target <= 1.05)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--only", choices=["a", "b", "c", "d"], default=None)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--memory-child", nargs=2, metavar=("MODEL", "DTYPE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_child:
        _memory_child(*args.memory_child, target=False)
        return
    if args.only in (None, "a"):
        bench_capture(args.reps)
    if args.only in (None, "b"):
        bench_analysis(args.reps)
    if args.only in (None, "d"):
        bench_pipeline(args.reps)
    if args.only == "c" or (args.only is None and not args.skip_memory):
        bench_memory()


if __name__ == "__main__":
    main()
