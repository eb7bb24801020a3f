"""Benchmark of ``vitviz export`` end to end, against torchvision's ViT-B/16 in the same process.

ViT-B/16 with random weights (torchvision's ``vit_b_16``, converted by ``load_checkpoint`` so that both models hold the
same weights), 224 px, batch 16, CPU. The export runs exactly as ``vitviz export`` does
(:class:`vitviz.batch.export.Exporter`): PNG files read and preprocessed on the loader thread, one capture per batch,
the analyses, the maps through a Session, npy files and the manifest written on the writer thread. Peers, on the same
images already preprocessed into tensors (so the peer pays nothing for reading, preprocessing or writing):

(a) forward-only views (attention from [CLS] at the last layer, rollout) writing npy, against torchvision's batched
    ``vit_b_16`` forward under ``inference_mode``; target >= 0.85x its images/s;
(b) gradient views (gradient rollout, relevance: one forward + one backward per batch) writing npy, against
    torchvision's forward + the backward of the top class's logit to the input (``torch.autograd.grad``);
    target >= 0.85x;
(c) the bf16 speed-up of each export (``--precision bf16`` against fp32), and torchvision's own in bf16.

Rounds are interleaved (the order alternates) and the ratio of each round is taken against the peer of that round;
the median is printed, with each run's process CPU time per image (all threads: the export's loader and writer
threads included). Absolute times on a shared machine are noise; read the ratios, and the load average printed with
each round (on a machine busy with other work, every multi-threaded run slows down, and unevenly).

Usage: ``python bench/export.py [--images 32] [--reps 3] [--threads N] [--only a|b|c]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vitviz.batch.export import Exporter  # noqa: E402
from vitviz.batch.export_options import ExportOptions  # noqa: E402
from vitviz.batch.inputs import expand_inputs  # noqa: E402
from vitviz.pipeline import DTYPES, Pipeline  # noqa: E402

BATCH = 16


def make_images(folder: Path, n: int) -> None:
    """``n`` 256x320 photos-to-be (the shapes generator, so the files compress like pictures, not noise)."""
    from vitviz.demo import generate

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.fromarray(generate(i, stream="test", size=(256, 320)).image).save(folder / f"im{i:03d}.png")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=32, help="images per run (default 32 = two batches)")
    ap.add_argument("--reps", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--only", choices=("a", "b", "c"), default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import torchvision

    from vitviz.model import load_checkpoint

    torch.manual_seed(0)
    tv = torchvision.models.vit_b_16(weights=None).eval()
    with torch.no_grad():  # torchvision zero-initialises the head: randomise it so the top class means something
        torch.nn.init.normal_(tv.heads.head.weight, std=0.02)
        torch.nn.init.normal_(tv.heads.head.bias, std=0.02)
    tmp = Path(tempfile.mkdtemp(prefix="vitviz-bench-export-"))
    folder = tmp / "images"
    make_images(folder, args.images)
    items = expand_inputs([str(folder)])[0]
    pipes = {p: Pipeline(load_checkpoint(tv.state_dict(), num_heads=12), precision=p) for p in ("fp32", "bf16")}
    spec = pipes["fp32"].spec
    xs = torch.stack([spec.preprocess(Image.open(it.path).convert("RGB")) for it in items])
    batches = list(xs.split(BATCH))
    tv_bf16 = None

    def tv_forward(model=tv, dtype=torch.float32):
        with torch.inference_mode():
            for b in batches:
                model(b.to(dtype))

    def tv_backward(model=tv, dtype=torch.float32):
        for b in batches:
            x = b.to(dtype).requires_grad_(True)
            logits = model(x)
            sel = logits.gather(1, logits.detach().argmax(1, keepdim=True)).sum()
            torch.autograd.grad(sel, x)

    run_no = [0]

    def export(views: tuple[str, ...], precision: str):
        run_no[0] += 1
        opts = ExportOptions(views=views, format="npy", batch_size=BATCH, precision=precision, quiet=True)
        s = Exporter(pipes[precision], opts, tmp / f"out{run_no[0]}", model_ref="bench", log=lambda _: None).run(items)
        assert s.written == len(items) and s.failed == 0, s.failures

    fwd_views, grad_views = ("cls", "rollout"), ("grad_rollout", "relevance")
    runs: dict[str, callable] = {}
    if args.only in (None, "a"):
        runs["torchvision forward"] = tv_forward
        runs["export cls+rollout fp32"] = lambda: export(fwd_views, "fp32")
    if args.only in (None, "b"):
        runs["torchvision fwd+input grad"] = tv_backward
        runs["export grad views fp32"] = lambda: export(grad_views, "fp32")
    if args.only in (None, "c"):
        tv_bf16 = torchvision.models.vit_b_16(weights=None).eval()
        tv_bf16.load_state_dict(tv.state_dict())
        tv_bf16.to(DTYPES["bf16"])
        runs.setdefault("torchvision forward", tv_forward)
        runs.setdefault("export cls+rollout fp32", lambda: export(fwd_views, "fp32"))
        runs.setdefault("export grad views fp32", lambda: export(grad_views, "fp32"))
        runs["torchvision forward bf16"] = lambda: tv_forward(tv_bf16, torch.bfloat16)
        runs["export cls+rollout bf16"] = lambda: export(fwd_views, "bf16")
        runs["export grad views bf16"] = lambda: export(grad_views, "bf16")
    print(f"ViT-B/16 (random weights) 224 px, batch {BATCH}, {len(items)} images of 256x320 px, CPU, "
          f"{torch.get_num_threads()} thread(s); {args.reps} interleaved rounds after a warm-up", flush=True)
    for f in runs.values():  # warm-up (and the first-call costs of both)
        f()
    times: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    names = list(runs)
    for r in range(args.reps):
        for name in (names if r % 2 == 0 else names[::-1]):
            t, c = time.perf_counter(), time.process_time()
            runs[name]()
            times[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
        print(f"  round {r + 1} (load average {os.getloadavg()[0]:.1f}): "
              + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()), flush=True)
    n = len(items)

    def ratio(a: str, b: str) -> float:
        """Median over rounds of (a's images/s) / (b's images/s) = b's time / a's time."""
        return statistics.median(tb / ta for ta, tb in zip(times[a], times[b]))

    print("\n| run | images/s (median) | process CPU s per image (median) |")
    print("|---|---|---|")
    for k, v in times.items():
        print(f"| {k} | {n / statistics.median(v):.2f} | {statistics.median(cpu[k]) / n:.3f} |")
    print()
    if "export cls+rollout fp32" in times and "torchvision forward" in times:
        q = ratio("export cls+rollout fp32", "torchvision forward")
        print(f"(a) forward-only views, npy: {q:.2f}x torchvision's batched forward (target >= 0.85)")
    if "export grad views fp32" in times and "torchvision fwd+input grad" in times:
        q = ratio("export grad views fp32", "torchvision fwd+input grad")
        print(f"(b) gradient views, npy: {q:.2f}x torchvision's forward + input-gradient backward (target >= 0.85)")
    if "export cls+rollout bf16" in times:
        fwd = ratio('export cls+rollout bf16', 'export cls+rollout fp32')
        print(f"(c) bf16 speed-up: forward-only export {fwd:.2f}x, "
              f"gradient export {ratio('export grad views bf16', 'export grad views fp32'):.2f}x, torchvision's "
              f"forward {ratio('torchvision forward bf16', 'torchvision forward'):.2f}x; in bf16 the forward-only "
              f"export runs at {ratio('export cls+rollout bf16', 'torchvision forward'):.2f}x torchvision's fp32 "
              f"forward")


if __name__ == "__main__":
    main()
