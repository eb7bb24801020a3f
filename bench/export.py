"""Throughput of ``vitviz export`` end to end, against timm's ViT-B/16 in the same process on the same device.

ViT-B/16 with random weights (timm's ``vit_base_patch16_224``, its state dict loaded by ``load_checkpoint`` so that
both models hold the same weights), 224 px, batch 16. The export runs exactly as ``vitviz export`` does
(:class:`vitviz.batch.export.Exporter`): PNG files read and preprocessed by the loader threads, one pass per batch
(streamed: each layer's attention reduced as the pass goes; or stored: every layer kept, ``--stored``), the maps
through a Session, npy files and the manifest written on the writer thread. Peers, on the same images already
preprocessed into tensors on the device (so they pay nothing for reading, preprocessing or writing):

(a) forward-only views ([CLS] attention of the last layer, rollout) against timm's batched forward under
    ``inference_mode``;
(b) gradient views (gradient rollout, relevance: one forward and one backward per batch) against timm's forward and
    the backward of the top class's logit to the input (``torch.autograd.grad``); streamed as chosen by the memory
    available (here: every block's graph kept) and with each block recomputed at its backward step (what a streamed
    pass does when memory is short: one block's graph alive at a time, about one more forward's work);
(c) the loaders alone: images/s of reading and preprocessing (:func:`vitviz.batch.inputs.stream_batches`) 128 JPEG
    photos of 500x375 px (ImageNet's typical size) with 1, 2 and 4 worker threads, to set against the model's
    images/s: decoding bounds a run only when it is slower than the model.

Rounds are interleaved (the order alternates) and the ratio of each round is taken against the peer of that round;
the median is printed, with each run's process CPU time per image. On a shared machine read the ratios, not the
absolute times. ``--device cuda`` runs the same on a GPU (:mod:`bench.gpu` measures more there).

Usage: ``python bench/export.py [--images 32] [--reps 3] [--threads N] [--device cpu] [--stored] [--only a|b|c]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vitviz.batch.export import Exporter  # noqa: E402
from vitviz.batch.export_options import ExportOptions  # noqa: E402
from vitviz.batch.inputs import default_workers, expand_inputs, stream_batches  # noqa: E402
from vitviz.pipeline import Pipeline  # noqa: E402

BATCH = 16
FORWARD_VIEWS = ("cls", "rollout")
GRADIENT_VIEWS = ("grad_rollout", "relevance")


def make_images(folder: Path, n: int) -> None:
    """``n`` 256x320 photos-to-be (the shapes generator, so the files compress like pictures, not noise)."""
    from vitviz.demo import generate

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.fromarray(generate(i, stream="test", size=(256, 320)).image).save(folder / f"im{i:03d}.png")


def make_photos(folder: Path, n: int) -> None:
    """``n`` JPEG photos of 500x375 px, quality 90 (what an ImageNet-like folder costs to decode)."""
    from vitviz.demo import generate

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.fromarray(generate(i, stream="test", size=(375, 500)).image).save(folder / f"ph{i:03d}.jpg", quality=90)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def peers(timm_model: torch.nn.Module, batches: list[torch.Tensor], device: str) -> dict[str, Callable[[], None]]:
    """timm's batched forward, and forward + backward of the top logit to the input."""

    def forward():
        with torch.inference_mode():
            for b in batches:
                timm_model(b)
        sync(device)

    def backward():
        for b in batches:
            x = b.detach().requires_grad_(True)
            logits = timm_model(x)
            sel = logits.gather(1, logits.detach().argmax(1, keepdim=True)).sum()
            torch.autograd.grad(sel, x)
        sync(device)

    return {"timm forward": forward, "timm fwd+bwd": backward}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=32, help="images per run (default 32 = two batches)")
    ap.add_argument("--reps", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--stored", action="store_true", help="also the stored route (every layer kept)")
    ap.add_argument("--only", choices=("a", "b", "c"), default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import timm

    from vitviz.model import load_checkpoint
    from vitviz.pipeline import DTYPES

    dev, dtype = args.device, DTYPES[args.precision]
    torch.manual_seed(0)
    tm = timm.create_model("vit_base_patch16_224", pretrained=False).eval()
    with torch.no_grad():  # timm zero-initialises the head: randomise it so the top class means something
        torch.nn.init.normal_(tm.head.weight, std=0.02)
    pipe = Pipeline(load_checkpoint(tm.state_dict(), num_heads=12), device=dev, precision=args.precision)
    tm = tm.to(dev, dtype)
    tmp = Path(tempfile.mkdtemp(prefix="vitviz-bench-export-"))
    folder = tmp / "images"
    make_images(folder, args.images)
    items = expand_inputs([str(folder)])[0]
    xs = torch.stack([pipe.prepare(Image.open(it.path)).x for it in items]).to(dev, dtype)
    batches = list(xs.split(BATCH))
    run_no = [0]

    def export(views: tuple[str, ...], streaming: bool | None, keep_graph: bool | None = None):
        def run():
            run_no[0] += 1
            opts = ExportOptions(views=views, format="npy", batch_size=BATCH, precision=args.precision, quiet=True,
                                 device=dev)
            ex = Exporter(pipe, opts, tmp / f"out{run_no[0]}", model_ref="bench", log=lambda _: None,
                          streaming=streaming)
            ex.passes.keep_graph = keep_graph
            s = ex.run(items)
            assert s.written == len(items) and s.failed == 0, s.failures
            sync(dev)
        return run

    photos: list = []

    def loaders(workers: int):
        def run():
            if not photos:
                make_photos(tmp / "photos", 128)
                photos.extend(expand_inputs([str(tmp / "photos")])[0])
            n = sum(len(b) for b in stream_batches(pipe, photos, BATCH, workers=workers))
            assert n == len(photos)
        return run

    peer = peers(tm, batches, dev)
    runs: dict[str, Callable[[], None]] = {}
    pairs: list[tuple[str, str, str]] = []  # (label, run, peer)
    if args.only in (None, "a"):
        runs["timm forward"] = peer["timm forward"]
        runs["export cls+rollout (streamed)"] = export(FORWARD_VIEWS, None)
        pairs.append(("(a) forward-only views, streamed", "export cls+rollout (streamed)", "timm forward"))
        if args.stored:
            runs["export cls+rollout (stored)"] = export(FORWARD_VIEWS, False)
            pairs.append(("(a) forward-only views, stored", "export cls+rollout (stored)", "timm forward"))
    if args.only in (None, "b"):
        runs["timm fwd+bwd"] = peer["timm fwd+bwd"]
        runs["export grad views (streamed)"] = export(GRADIENT_VIEWS, None)
        pairs.append(("(b) gradient views, streamed", "export grad views (streamed)", "timm fwd+bwd"))
        runs["export grad views (streamed, blocks recomputed)"] = export(GRADIENT_VIEWS, None, keep_graph=False)
        pairs.append(("(b) gradient views, streamed, blocks recomputed (the low-memory backward)",
                      "export grad views (streamed, blocks recomputed)", "timm fwd+bwd"))
        if args.stored:
            runs["export grad views (stored)"] = export(GRADIENT_VIEWS, False)
            pairs.append(("(b) gradient views, stored", "export grad views (stored)", "timm fwd+bwd"))
    if args.only in (None, "c"):
        for w in sorted({1, 2, 4, default_workers(dev)}):
            runs[f"loaders, {w} worker(s){' (default)' if w == default_workers(dev) else ''}"] = loaders(w)
    print(f"ViT-B/16 (random weights) 224 px, {args.precision}, batch {BATCH}, {len(items)} images of 256x320 px, "
          f"{dev}, {torch.get_num_threads()} thread(s); {args.reps} interleaved rounds after a warm-up", flush=True)
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
        count = 128 if k.startswith("loaders") else n
        print(f"| {k} | {count / statistics.median(v):.2f} | {statistics.median(cpu[k]) / count:.3f} |")
    print()
    for label, run, against in pairs:
        print(f"{label}, npy: {ratio(run, against):.2f}x {against}")


if __name__ == "__main__":
    main()
