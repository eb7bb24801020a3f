"""Peak memory, each figure measured in a new process: huge-but-valid inputs (issue 11), and the stored against the
streamed capture (issue 25: memory that does not grow with depth).

Scenarios (each a fresh ``python bench/memory.py --scenario NAME`` process; the figure is the process's peak resident
set size, ``VmHWM`` from ``/proc/self/status``, next to the resident size right after the imports and the model):

* ``imports``        ``import torch, vitviz`` and the submodules the others use: the floor of every row
* ``create_h14``     ``create_model("vit_huge_patch14_518")``: ViT-H/14 at 518 px, random weights (632 M parameters)
* ``load_h14``       ``load_checkpoint`` of that model saved by ``save_checkpoint`` (a 2.5 GB safetensors file)
* ``capture_h14``    ``Pipeline(model).run(image)`` on ViT-H/14 at 518 px: one forward with every attention map and
                     token stored, one backward for the attention gradients of the top class
* ``capture_h14_nograd``  the same capture without gradients (``capture(model, x)``), for comparison
* ``export_h14``     ``vitviz export`` of one image with ViT-H/14 at 518 px (:class:`vitviz.batch.export.Exporter`,
                     the command's defaults: the four standard views, gradient rollout and relevance included, PNG):
                     the streamed route (every layer's attention seen once, one block's graph at a time)
* ``export_h14_stored``  the same export storing every layer (``streaming=False``; not in the default list: it
                     needs about 20 GiB)
* ``image_20k``      ``load_image`` of a 20000 x 20000 JPEG (the largest image vitviz opens) and the preprocessing of
                     ViT-B/16 (resize 256, crop 224)
* ``pipeline_20k``   the window's path for that image: ``load_image`` + ``Pipeline(demo model).run`` (the result
                     keeps the image's pixels for display)

``--depth``: the stored against the streamed route by depth: ViT-B width (768, 12 heads) at 384 px (577 tokens),
batch 2, the four standard views (forward and backward), depth 1 .. 12; each cell a new process, the figure the peak
minus the resident size once the model is built (the weights are not counted). Three routes: stored (every layer's
attention, tokens and gradients, and the whole graph), streamed keeping every block's graph for the backward (what
a streamed pass does when that fits in half the memory available: as fast as one forward and one backward, and as
much memory as an ordinary training step's activations) and streamed recomputing each block at its backward step
(what it does when memory is short: the increment grows by one block input ``[N, D]`` a layer, 3.4 MiB for two
images, i.e. it holds one layer's attention whatever the depth). The table is printed twice: as the processes run by
default, and with ``MALLOC_MMAP_THRESHOLD_=65536`` (glibc returns every large freed block to the system at once, so
the peak is what was alive; by default glibc raises that threshold as blocks are freed and keeps some freed memory,
tens of MiB here, which makes the default figures wobble by about that much).

``--window``: what the window holds for its open images: ViT-B/16 at 384 px (577 tokens) run in bf16 (what ``auto``
chooses on a CPU or GPU that multiplies bf16 natively), 1 .. 8 images opened one after another and kept (every layer's
attention, tokens and attention gradients, as the window keeps them to switch layers), then the window's maps of each
(the [CLS] attention of every layer, rollout, relevance, the distance and entropy plots). Two ways of storing: in the
model's precision (bf16, what the window does) and promoted to float32 (what it did before); each cell a new process.

Usage:
    .venv/bin/python bench/memory.py [--only imports,create_h14,...] [--keep DIR]
    .venv/bin/python bench/memory.py --depth [--depths 1,2,4,8,12]
    .venv/bin/python bench/memory.py --window [--images 1,4,8]

The 2.5 GB checkpoint and the 20000 x 20000 JPEG are written to a temporary folder (or ``--keep DIR``, reused when
present). Numbers are MiB; on a 2-core machine the whole run takes a few minutes (the ViT-H passes dominate).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

H14 = "vit_huge_patch14_518"
BIG_SIDE = 20000
SCENARIOS = ("imports", "create_h14", "load_h14", "capture_h14", "capture_h14_nograd", "export_h14", "image_20k",
             "pipeline_20k")
EXTRA = ("export_h14_stored",)
DEPTH_VIEWS = ("cls", "rollout", "grad_rollout", "relevance")


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"{field} not in /proc/self/status")


def _export_one(model, folder: Path, streaming: bool | None) -> dict:
    """``vitviz export`` of one 640x480 photo with the command's defaults; what it says about the run."""
    from PIL import Image

    from vitviz.batch.export import Exporter
    from vitviz.batch.export_options import ExportOptions
    from vitviz.batch.inputs import expand_inputs
    from vitviz.pipeline import Pipeline

    src = folder / "export_in"
    src.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (640, 480), (120, 90, 60)).save(src / "photo.png")
    lines: list[str] = []
    out = folder / f"export_out_{os.getpid()}"
    ex = Exporter(Pipeline(model, precision="fp32"), ExportOptions(batch_size=1, quiet=True), out,
                  log=lines.append, streaming=streaming)
    base = _status_mib("VmRSS")
    s = ex.run(expand_inputs([str(src)])[0])
    if s.written != 1:
        raise SystemExit(f"the export failed: {s.failures}")
    return {"route": ex.passes.route, "files": s.files, "after_model_mib": round(base)}


def _depth_child(name: str) -> dict:
    """``depth_stored_D`` / ``depth_streamed_D``: the four standard views' maps of two 384 px images."""
    import numpy as np
    import torch
    from PIL import Image

    from vitviz import views
    from vitviz.document.session import Session
    from vitviz.document.streamed import StreamedSession, stream_images
    from vitviz.model import create_model
    from vitviz.pipeline import Pipeline
    from vitviz.views.options import ViewOptions

    route, depth = name.split("_")[1], int(name.split("_")[2])  # stored | streamed (graph kept) | recomputed
    torch.manual_seed(0)
    pipe = Pipeline(create_model("vit_base_patch16_384", depth=depth).eval())
    rng = np.random.default_rng(0)
    photos = [Image.fromarray((rng.random((400, 400, 3)) * 255).astype(np.uint8)) for _ in range(2)]
    prepared = [pipe.prepare(p) for p in photos]
    wanted = [(views.get(k), ViewOptions(view=k, layer=depth - 1)) for k in DEPTH_VIEWS]
    base = _status_mib("VmRSS")
    t0 = time.perf_counter()
    if route == "stored":
        sessions = []
        for r in pipe.run_batch(prepared):
            s = Session()
            s.set_result(r)
            sessions.append(s)
    else:
        sessions = [StreamedSession(i) for i in stream_images(pipe, prepared, demands=lambda r: wanted,
                                                              keep_graph=route == "streamed")]
    for s in sessions:
        for v, o in wanted:
            s.map_for(v, o)
    return {"scenario": name, "base_mib": round(base), "peak_mib": round(_status_mib("VmHWM")),
            "seconds": round(time.perf_counter() - t0, 1)}


def _window_child(name: str) -> dict:
    """``window_bf16_N`` / ``window_float32_N``: N images opened in a bf16 pipeline and kept, then their maps."""
    import numpy as np
    import torch
    from PIL import Image

    from vitviz.document.session import Session
    from vitviz.model import create_model
    from vitviz.pipeline import Pipeline

    store, n = name.split("_")[1], int(name.split("_")[2])
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    torch.manual_seed(0)
    if store == "float32":  # what the window stored before: the bf16 model's values promoted to float32
        Pipeline.store_dtype = property(lambda self: torch.float32)
    pipe = Pipeline(create_model("vit_base_patch16_384").eval(), precision="bf16")
    rng = np.random.default_rng(0)
    base = _status_mib("VmRSS")
    t0 = time.perf_counter()
    results = [pipe.run(Image.fromarray((rng.random((400, 400, 3)) * 255).astype(np.uint8)), source=f"{i}.png")
               for i in range(n)]
    opened = round(_status_mib("VmHWM") - base)
    for r in results:  # what the window computes as the user looks at each image
        s = Session()
        s.set_result(r)
        for layer in range(r.num_layers):
            s.set_options(view="cls", layer=layer)
            s.current_map()
        for view in ("rollout", "relevance"):
            s.set_options(view=view, layer=0)
            s.current_map()
        s.mean_distances()
        s.entropies()
    stored = sum(t.numel() * t.element_size() for r in results
                 for t in (r.attentions, r.tokens, r.attention_grads))
    return {"scenario": name, "base_mib": round(base), "peak_mib": round(_status_mib("VmHWM")),
            "opened_mib": opened, "stored_mib": round(stored / 2**20), "seconds": round(time.perf_counter() - t0, 1)}


def _window_table(counts: list[int], folder: Path) -> None:
    print("\nThe window's open images: ViT-B/16 at 384 px in bf16, every layer kept; MiB above the resident size with "
          "the model built (stored: the results' tensors; peak: after each image's maps), each cell a new process")
    print("| images | stored, float32 | stored, bf16 | peak, float32 | peak, bf16 | peak float32 / bf16 |")
    print("|---|---|---|---|---|---|")
    for n in counts:
        f32, b16 = (_run_child(f"window_{k}_{n}", folder) for k in ("float32", "bf16"))
        if isinstance(f32, str) or isinstance(b16, str):
            print(f"| {n} | {f32} | {b16} | | | |", flush=True)
            continue
        pf, pb = f32["peak_mib"] - f32["base_mib"], b16["peak_mib"] - b16["base_mib"]
        print(f"| {n} | {f32['stored_mib']} | {b16['stored_mib']} | {pf} | {pb} | {pf / max(pb, 1):.2f}x |",
              flush=True)


def _child(name: str, folder: Path) -> dict:
    """Run one scenario in this (fresh) process; return its numbers."""
    if name.startswith("depth_"):
        return _depth_child(name)
    if name.startswith("window_"):
        return _window_child(name)
    import torch

    import vitviz.analysis  # imported by the pipeline: part of the floor, not of the scenario
    import vitviz.capture  # noqa: F401
    from vitviz.imaging import load_image
    from vitviz.model import create_model, load_checkpoint
    from vitviz.pipeline import Pipeline

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    base = _status_mib("VmRSS")
    t0 = time.perf_counter()
    info: dict = {}
    if name == "create_h14":
        m = create_model(H14)
        info["params"] = m.num_params()
    elif name == "load_h14":
        m = load_checkpoint(folder / f"{H14}.safetensors")
        info["params"] = m.num_params()
    elif name in ("capture_h14", "capture_h14_nograd"):
        from PIL import Image

        m = create_model(H14).eval()
        img = Image.new("RGB", (640, 480), (120, 90, 60))
        if name == "capture_h14":
            r = Pipeline(m).run(img)
            info["stored_mib"] = round((r.attentions.numel() + r.attention_grads.numel() + r.tokens.numel()) * 4
                                       / 2**20)
        else:
            from vitviz.capture import capture

            x = m.spec.preprocess(img)[None]
            cap = capture(m, x)
            info["stored_mib"] = round(cap.nbytes / 2**20)
    elif name in ("export_h14", "export_h14_stored"):
        m = create_model(H14).eval()
        info.update(_export_one(m, folder, None if name == "export_h14" else False))
    elif name == "image_20k":
        from vitviz.model.spec import imagenet_preprocess

        li = load_image(folder / "big_20000.jpg")
        info["after_load_mib"] = round(_status_mib("VmHWM"))
        x = imagenet_preprocess(224)(li.image)
        info["input"] = list(x.shape)
    elif name == "pipeline_20k":
        from vitviz.demo import load_demo_model

        li = load_image(folder / "big_20000.jpg")
        r = Pipeline(load_demo_model()).run(li, source="big")
        info["top"] = r.top_k(1)[0][1]
    elif name != "imports":
        raise SystemExit(f"unknown scenario {name!r}")
    return {"scenario": name, "base_mib": round(base), "peak_mib": round(_status_mib("VmHWM")),
            "seconds": round(time.perf_counter() - t0, 1), **info}


def _prepare(folder: Path, names: list[str]) -> None:
    if "load_h14" in names and not (folder / f"{H14}.safetensors").is_file():
        subprocess.run([sys.executable, "-c",
                        ("import sys; from vitviz.model import create_model, save_checkpoint; "
                         f"save_checkpoint(create_model({H14!r}), sys.argv[1])"), str(folder / f"{H14}.safetensors")],
                       check=True, cwd=REPO)
    if {"image_20k", "pipeline_20k"} & set(names) and not (folder / "big_20000.jpg").is_file():
        subprocess.run([sys.executable, "-c",
                        ("import sys, numpy as np; from PIL import Image\n"
                         f"n = {BIG_SIDE}\n"
                         "a = np.empty((n, n, 3), np.uint8)\n"
                         "y = (np.arange(n) * 255 // n).astype(np.uint8)\n"
                         "a[..., 0] = y[:, None]; a[..., 1] = y[None, :]; a[..., 2] = 128\n"
                         "Image.fromarray(a).save(sys.argv[1], quality=85)\n"), str(folder / "big_20000.jpg")],
                       check=True, cwd=REPO)


def _run_child(name: str, folder: Path, env: dict | None = None) -> dict | str:
    r = subprocess.run([sys.executable, __file__, "--scenario", name, "--folder", str(folder)], cwd=REPO,
                       capture_output=True, text=True, check=False, env=None if env is None else {**os.environ, **env})
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["?"])[-1]
        return f"failed (exit {r.returncode}): {tail}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def _depth_table(depths: list[int], folder: Path, env: dict | None = None) -> None:
    print("\nViT-B width (768, 12 heads) at 384 px (577 tokens), 2 images, cls + rollout + grad_rollout + relevance "
          "(forward and backward); MiB of peak resident memory above the resident size with the model built, each "
          "cell a new process" + (f"; {' '.join(f'{k}={v}' for k, v in env.items())}" if env else
                                  "; the default allocator"))
    print("| depth | stored | streamed, graph kept | streamed, blocks recomputed | stored / recomputed |")
    print("|---|---|---|---|---|")
    for d in depths:
        cells = []
        for route in ("stored", "streamed", "recomputed"):
            r = _run_child(f"depth_{route}_{d}", folder, env)
            cells.append(r if isinstance(r, str) else r["peak_mib"] - r["base_mib"])
        ratio = f"{cells[0] / cells[2]:.1f}x" if all(isinstance(c, int) and c > 0 for c in cells) else "-"
        print(f"| {d} | {cells[0]} | {cells[1]} | {cells[2]} | {ratio} |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--only", help=f"comma-separated scenarios (default: all but {', '.join(EXTRA)})")
    ap.add_argument("--keep", help="folder for the big files (kept and reused)")
    ap.add_argument("--depth", action="store_true", help="the stored against the streamed route by depth")
    ap.add_argument("--depths", default="1,2,4,8,12", help="depths of --depth (default 1,2,4,8,12)")
    ap.add_argument("--window", action="store_true", help="the window's open images: bf16 against float32 storage")
    ap.add_argument("--images", default="1,4,8", help="image counts of --window (default 1,4,8)")
    args = ap.parse_args()
    if args.scenario:
        print(json.dumps(_child(args.scenario, Path(args.folder))))
        return 0
    names = args.only.split(",") if args.only else list(SCENARIOS)
    tmp = None
    if args.keep:
        folder = Path(args.keep)
        folder.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="vitviz-memory-")
        folder = Path(tmp.name)
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
        print(f"machine: {total:.1f} GiB, {os.cpu_count()} CPUs")
        if args.depth:
            depths = [int(d) for d in args.depths.split(",")]
            _depth_table(depths, folder)
            _depth_table(depths, folder, {"MALLOC_MMAP_THRESHOLD_": "65536"})
            return 0
        if args.window:
            _window_table([int(n) for n in args.images.split(",")], folder)
            return 0
        _prepare(folder, names)
        print("MiB of peak resident memory (VmHWM), each in a new process")
        print(f"{'scenario':<20s} {'after imports':>13s} {'peak':>8s} {'peak - imports':>14s} {'time':>7s}  notes")
        for name in names:
            d = _run_child(name, folder)
            if isinstance(d, str):
                print(f"{name:<20s} {d}")
                continue
            notes = ", ".join(f"{k}={v}" for k, v in d.items()
                              if k not in ("scenario", "base_mib", "peak_mib", "seconds"))
            print(f"{name:<20s} {d['base_mib']:>13d} {d['peak_mib']:>8d} {d['peak_mib'] - d['base_mib']:>14d} "
                  f"{d['seconds']:>6.1f}s  {notes}", flush=True)
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
