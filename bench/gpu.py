"""The GPU path, measured (issue 25 item 4): per-image latency of each view at fp32 / bf16 / fp16, export throughput
against timm on the same GPU, and the GPU-specific costs of a pass (synchronisations, copies to the host, pageable
copies).

Needs a CUDA device: without one it says so and exits with status 1 (``--device cpu`` runs every part on the CPU to
check the script itself; its figures are not GPU figures).

Parts (``--only`` picks some):

* ``latency``: ViT-B/16 at 224 px (random weights), one image at a time; for each precision and each view, the
  median wall time of making that view's map from a photo already preprocessed, streamed
  (:func:`vitviz.document.streamed.stream_images` + the map) and stored (:meth:`vitviz.pipeline.Pipeline.run_batch`
  + the session's map), after a warm-up, with ``torch.cuda.synchronize()`` around each;
* ``throughput``: ``bench/export.py --device cuda --precision P --stored`` for each precision (a new process each:
  export images/s against timm's batched forward, and forward + backward, on the same GPU);
* ``costs``: one export-sized streamed pass and one stored pass (batch 16, the four standard views) under
  ``torch.profiler``: the number and bytes of device-to-host and host-to-device copies (and how many were from or to
  pageable memory), device synchronisations and scalar reads (``.item()``, ``bool(tensor)``); then the same passes
  under ``torch.cuda.set_sync_debug_mode("warn")``, each synchronising call traced to the first vitviz line that
  made it, counted per line.

Usage: ``python bench/gpu.py [--only latency,throughput,costs] [--reps 10] [--precisions fp32,bf16,fp16]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vitviz import views as registry  # noqa: E402
from vitviz.document.session import Session  # noqa: E402
from vitviz.document.streamed import StreamedSession, stream_images  # noqa: E402
from vitviz.pipeline import Pipeline  # noqa: E402
from vitviz.views.options import ViewOptions  # noqa: E402

PARTS = ("latency", "throughput", "costs")
STANDARD = ("cls", "rollout", "grad_rollout", "relevance")
NO_GPU = ("bench/gpu.py measures the GPU path and needs a CUDA device, but torch.cuda.is_available() is False here "
          "({why}). Run it where a GPU is lent (or pass --device cpu to check the script on the CPU).")


def sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def photo(seed: int = 0, size: tuple[int, int] = (256, 320)) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray((rng.random((*size, 3)) * 255).astype(np.uint8))


def vit_b(device: str, precision: str) -> Pipeline:
    from vitviz.model import create_model

    torch.manual_seed(0)
    return Pipeline(create_model("vit_base_patch16_224").eval(), device=device, precision=precision)


def median_time(fn: Callable[[], object], device: str, reps: int) -> float:
    fn()  # warm-up
    sync(device)
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync(device)
        out.append(time.perf_counter() - t)
    return statistics.median(out)


# ----------------------------------------------------------------------------------------------- latency
def view_keys() -> list[str]:
    return [v.key for v in registry.all_views()]


def view_latency(pipe: Pipeline, prepared, key: str, device: str, reps: int) -> tuple[float, float]:
    """Median seconds of one view's map of one preprocessed image: ``(streamed, stored)``."""
    v = registry.get(key)
    o = ViewOptions(view=key, layer=pipe.model.config.depth - 1)
    gradients = v.needs_grads or "target" in v.reads

    def streamed():
        done = stream_images(pipe, [prepared], gradients=gradients, demands=lambda r: [(v, o)])[0]
        return StreamedSession(done).map_for(v, o)

    def stored():
        s = Session()
        s.set_result(pipe.run_batch([prepared], gradients=gradients)[0])
        return s.map_for(v, o)

    return median_time(streamed, device, reps), median_time(stored, device, reps)


def latency(device: str, precisions: list[str], reps: int) -> None:
    print(f"\nper-image latency (ms, median of {reps}), ViT-B/16 224 px, {device}: the map of one view from a "
          "preprocessed photo")
    keys = view_keys()
    print("| view | " + " | ".join(f"{p} streamed | {p} stored" for p in precisions) + " |")
    print("|---|" + "---|---|" * len(precisions))
    rows: dict[str, list[str]] = {k: [] for k in keys}
    for p in precisions:
        pipe = vit_b(device, p)
        prepared = pipe.prepare(photo())
        for k in keys:
            a, b = view_latency(pipe, prepared, k, device, reps)
            rows[k] += [f"{1000 * a:.1f}", f"{1000 * b:.1f}"]
        pipe = None
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    for k in keys:
        print(f"| {k} | " + " | ".join(rows[k]) + " |", flush=True)


# ----------------------------------------------------------------------------------------------- throughput
def throughput(device: str, precisions: list[str], reps: int) -> None:
    for p in precisions:
        print(f"\nexport throughput, {p} (bench/export.py --device {device} --precision {p} --stored):", flush=True)
        r = subprocess.run([sys.executable, str(REPO / "bench" / "export.py"), "--device", device, "--precision", p,
                            "--stored", "--reps", str(max(1, min(reps, 5)))], cwd=REPO, text=True,
                           capture_output=True, check=False)
        print(r.stdout.strip() if r.returncode == 0 else f"failed (exit {r.returncode}): "
              + (r.stderr.strip().splitlines() or ["?"])[-1], flush=True)


# ----------------------------------------------------------------------------------------------- costs
COPY_WORDS = ("Memcpy DtoH", "Memcpy HtoD", "Memcpy DtoD")
SYNC_WORDS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
SCALAR_WORDS = ("aten::_local_scalar_dense", "aten::item", "aten::is_nonzero")


def classify(events) -> dict[str, list[float]]:
    """Profiler events -> ``{kind: [count, bytes]}``: copies by direction (and how many touched pageable memory),
    synchronisations, scalar reads. Bytes are known for copies only (0 when the profiler gives none)."""
    out: dict[str, list[float]] = {}
    for e in events:
        name = str(getattr(e, "name", getattr(e, "key", "")))
        kind = next((w for w in COPY_WORDS + SYNC_WORDS + SCALAR_WORDS if w in name), None)
        if kind is None:
            continue
        if "Pageable" in name:
            kind += " (pageable)"
        count = int(getattr(e, "count", 1) or 1)
        nbytes = float(getattr(e, "device_memory_usage", 0) or 0)
        cur = out.setdefault(kind, [0, 0.0])
        cur[0] += count
        cur[1] += abs(nbytes)
    return out


def first_vitviz_line(stack: list[traceback.FrameSummary]) -> str:
    """The innermost frame of vitviz's own code (not torch's, not this script's) as ``path:line (function)``."""
    for f in reversed(stack):
        p = Path(f.filename)
        if "vitviz" in p.parts and "site-packages" not in p.parts and p.name != "gpu.py":
            rel = p.relative_to(REPO) if p.is_relative_to(REPO) else p
            return f"{rel}:{f.lineno} ({f.name})"
    return "outside vitviz"


def sync_sites(fn: Callable[[], object], device: str) -> Counter:
    """Each synchronising CUDA call ``fn`` makes, counted by the vitviz line that made it."""
    sites: Counter = Counter()
    if not device.startswith("cuda"):
        fn()
        return sites
    previous = warnings.showwarning

    def record(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" in str(message).lower():
            sites[first_vitviz_line(traceback.extract_stack()[:-1])] += 1
        else:
            previous(message, category, filename, lineno, file, line)

    torch.cuda.set_sync_debug_mode("warn")
    warnings.showwarning = record
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = record
            fn()
            sync(device)
    finally:
        warnings.showwarning = previous
        torch.cuda.set_sync_debug_mode("default")
    return sites


def costs(device: str, precision: str) -> None:
    from torch.profiler import ProfilerActivity, profile

    pipe = vit_b(device, precision)
    prepared = [pipe.prepare(photo(i)) for i in range(16)]
    wanted = [(registry.get(k), ViewOptions(view=k, layer=11)) for k in STANDARD]

    def streamed():
        for done in stream_images(pipe, prepared, demands=lambda r: wanted):
            s = StreamedSession(done)
            for v, o in wanted:
                s.map_for(v, o)

    def stored():
        for r in pipe.run_batch(prepared):
            s = Session()
            s.set_result(r)
            for v, o in wanted:
                s.map_for(v, o)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    print(f"\nGPU-specific costs of one pass of 16 images (ViT-B/16 224 px, {precision}, the four standard views, "
          f"maps included), {device}:")
    for name, fn in (("streamed", streamed), ("stored", stored)):
        fn()  # warm-up
        sync(device)
        with profile(activities=activities) as prof:
            fn()
            sync(device)
        found = classify(prof.key_averages())
        print(f"  {name}: " + ("; ".join(f"{k}: {int(c)}" + (f" ({b / 2**20:.1f} MiB)" if b else "")
                                         for k, (c, b) in sorted(found.items())) or "none found"))
        sites = sync_sites(fn, device)
        for site, n in sites.most_common(12):
            print(f"    {n:5d} synchronising call(s) at {site}")
    print("  (a stored pass copies every layer's attention, tokens and gradients to the host: the DtoH bytes; a "
          "streamed one copies the rows, tokens and products asked for, once per batch)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts of {', '.join(PARTS)}")
    ap.add_argument("--reps", type=int, default=10, help="repetitions of each latency (median)")
    ap.add_argument("--precisions", default="fp32,bf16,fp16")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cuda:N; cpu checks the script only")
    args = ap.parse_args(argv)
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        print(f"bench/gpu.py: error: --only {','.join(unknown)}: unknown part; valid: {', '.join(PARTS)}",
              file=sys.stderr)
        return 2
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    bad = [p for p in precisions if p not in ("fp32", "bf16", "fp16")]
    if bad:
        print(f"bench/gpu.py: error: --precisions {','.join(bad)}: valid: fp32, bf16, fp16", file=sys.stderr)
        return 2
    device = args.device
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            why = "no CUDA build of torch" if torch.version.cuda is None else "no device or driver"
            print(NO_GPU.format(why=why), file=sys.stderr)
            return 1
        print(f"device: {torch.cuda.get_device_name(torch.device(device))}, torch {torch.__version__}, CUDA "
              f"{torch.version.cuda}")
    else:
        print("device: cpu (checking the script: these are not GPU figures)")
        precisions = [p for p in precisions if p != "fp16"]  # the CPU has no fp16 path in vitviz
    if "latency" in parts:
        latency(device, precisions, args.reps)
    if "throughput" in parts:
        throughput(device, precisions, args.reps)
    if "costs" in parts:
        for p in precisions:
            costs(device, p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
