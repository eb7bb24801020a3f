"""Peak memory of huge-but-valid inputs, each measured in a new process (issue 11).

Scenarios (each a fresh ``python bench/memory.py --scenario NAME`` process; the figure is the process's peak resident
set size, ``VmHWM`` from ``/proc/self/status``, next to the resident size right after the imports):

* ``imports``        ``import torch, vitviz`` and the submodules the others use: the floor of every row
* ``create_h14``     ``create_model("vit_huge_patch14_518")``: ViT-H/14 at 518 px, random weights (632 M parameters)
* ``load_h14``       ``load_checkpoint`` of that model saved by ``save_checkpoint`` (a 2.5 GB safetensors file)
* ``capture_h14``    ``Pipeline(model).run(image)`` on ViT-H/14 at 518 px: one forward with every attention map and
                     token stored, one backward for the attention gradients of the top class
* ``capture_h14_nograd``  the same capture without gradients (``capture(model, x)``), for comparison
* ``image_20k``      ``load_image`` of a 20000 x 20000 JPEG (the largest image vitviz opens) and the preprocessing of
                     ViT-B/16 (resize 256, crop 224)
* ``pipeline_20k``   the window's path for that image: ``load_image`` + ``Pipeline(demo model).run`` (the result
                     keeps the image's pixels for display)

Usage:
    .venv/bin/python bench/memory.py [--only imports,create_h14,...] [--keep DIR]

The 2.5 GB checkpoint and the 20000 x 20000 JPEG are written to a temporary folder (or ``--keep DIR``, reused when
present). Numbers are MiB; on a 2-core machine the whole run takes a few minutes (the ViT-H capture dominates).
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
SCENARIOS = ("imports", "create_h14", "load_h14", "capture_h14", "capture_h14_nograd", "image_20k", "pipeline_20k")


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"{field} not in /proc/self/status")


def _child(name: str, folder: Path) -> dict:
    """Run one scenario in this (fresh) process; return its numbers."""
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--only", help="comma-separated scenarios (default: all)")
    ap.add_argument("--keep", help="folder for the big files (kept and reused)")
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
        _prepare(folder, names)
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
        print(f"machine: {total:.1f} GiB, {os.cpu_count()} CPUs; MiB of peak resident memory (VmHWM), each in a new "
              "process")
        print(f"{'scenario':<20s} {'after imports':>13s} {'peak':>8s} {'peak - imports':>14s} {'time':>7s}  notes")
        for name in names:
            r = subprocess.run([sys.executable, __file__, "--scenario", name, "--folder", str(folder)], cwd=REPO,
                               capture_output=True, text=True, check=False)
            if r.returncode != 0:
                tail = (r.stderr.strip().splitlines() or ["?"])[-1]
                print(f"{name:<20s} failed (exit {r.returncode}): {tail}")
                continue
            d = json.loads(r.stdout.strip().splitlines()[-1])
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
