"""The notebook viewer's speed and weight, against the window's figure path, in one process (ratios).

Measures, in a real JupyterLab + Chromium (the test suite's ``tests/notebook/lab_server.py``):

* **layer change -> repaint**: a key press on the layer slider until the canvas is repainted, in the browser (the
  maps of every layer are already there: no kernel round-trip), against drawing the same view as the window's figure
  (:func:`vitviz.document.panel.render_view`, what a notebook that shows figures would redo per change);
* **new image -> first map**: the "next image" button until the new image's map is painted (the model runs on the
  viewer's worker, the maps and photo travel, the browser draws), against running the model and drawing the figure
  in the kernel (``Pipeline.run`` + ``render_view``);
* **bytes per map**: what the viewer sends per layer (uint8 colour rows + float16 values) against the figure's PNG.

Usage::

    .venv/bin/python bench/notebook.py [--model PATH] [--image PATH ...] [--repeats 10]
    .venv/bin/python bench/notebook.py --screenshot docs/images/notebook.png   # the documentation's picture

The model: ``--model``, else ``../shared/weights/vit_tiny_*.safetensors`` when present, else the demo model.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "notebook"))

WAIT_MS = 240_000


def _default_model() -> str:
    shared = REPO.parent / "shared" / "weights"
    found = sorted(shared.glob("vit_tiny*.safetensors")) if shared.is_dir() else []
    return str(found[0]) if found else "demo"


def _default_images(folder: Path) -> list[str]:
    try:
        import skimage.data
        from PIL import Image

        out = []
        for name in ("chelsea", "coffee", "astronaut"):
            p = folder / f"{name}.png"
            Image.fromarray(getattr(skimage.data, name)()).save(p)
            out.append(str(p))
        return out
    except ImportError:
        from vitviz.resources import sample_images

        return [str(p) for p in sample_images()[:3]]


def _preprocess_words(model: str) -> str:
    return ", preprocess='inception'" if "augreg" in model else ""  # the ViT-Ti's mean = std = 0.5 (its README)


def _painted(page) -> str:
    return page.evaluate("() => document.querySelector('.vitviz').dataset.painted || ''")


def _browser_layer_ms(page, repeats: int) -> list[float]:
    """Key presses on the layer slider to the repaint (measured inside the page)."""
    page.locator(".vitviz input.vitviz-layer").focus()
    out = []
    for i in range(repeats):
        key = "ArrowRight" if i % 2 == 0 else "ArrowLeft"
        out.append(page.evaluate("""(key) => { const root = document.querySelector('.vitviz');
            const before = root.dataset.painted, slider = root.querySelector('input.vitviz-layer');
            const t0 = performance.now();
            slider.dispatchEvent(new KeyboardEvent('keydown', {key, bubbles: true, cancelable: true}));
            if (root.dataset.painted === before) return -1;
            return performance.now() - t0; }""", key))
    return [t for t in out if t >= 0]


def _browser_image_ms(page, images: int, repeats: int) -> list[float]:
    """The "next image" button to the new image's map on the canvas."""
    out = []
    for _ in range(repeats):
        before = _painted(page).split("|")
        want = (int(before[-1]) + 1) % images
        t0 = time.perf_counter()
        page.locator(".vitviz button.vitviz-next").click()
        page.wait_for_function(f"() => (document.querySelector('.vitviz').dataset.painted || '').endsWith('|{want}')"
                               " && !document.querySelector('.vitviz').dataset.busy", timeout=WAIT_MS)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _kernel_peer(model: str, images: list[str], repeats: int) -> dict[str, float]:
    """The window's figure path in this process: run + render_view per new image, render_view per layer."""
    from vitviz.document.handed import memory_pipeline
    from vitviz.document.panel import render_view
    from vitviz.document.session import Session
    from vitviz.imaging import load_image
    from vitviz.notebook import payload

    pipe, _ = memory_pipeline(model, preprocess="inception" if "augreg" in model else None)
    s = Session()
    s.images = list(images)
    image_ms, layer_ms = [], []
    for i in range(repeats):
        path = images[i % len(images)]
        t0 = time.perf_counter()
        s.set_result(pipe.run(load_image(path).image, source=path))
        s.set_options(view="cls", layer=0)
        render_view(s, "native")
        image_ms.append((time.perf_counter() - t0) * 1000)
    lo, hi = s.slider_range()
    for i in range(repeats):
        s.set_slider(lo + (i % (hi - lo + 1)))
        s.cache.clear()  # a figure per change: the map itself is cheap, the drawing is what a figure costs
        t0 = time.perf_counter()
        render_view(s, "native")
        layer_ms.append((time.perf_counter() - t0) * 1000)
    f = payload.view_frames(s)
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(render_view(s, "native")).save(buf, format="PNG")
    return {"image_ms": statistics.median(image_ms), "layer_ms": statistics.median(layer_ms),
            "map_bytes": (len(f.index) + len(f.values)) / f.meta["count"], "png_bytes": len(buf.getvalue()),
            "grid": f.meta["grid"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--image", action="append", default=None)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--screenshot", default=None, help="write a PNG of the viewer (no measurements)")
    args = ap.parse_args(argv)
    from lab_server import chromium, chromium_path, open_notebook, running_lab, write_notebook

    if chromium_path() is None:
        print("no Chromium found (Debian: apt-get install chromium)")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = args.model or _default_model()
        images = args.image or _default_images(root)
        code = (f"import vitviz.notebook\nviewer = vitviz.notebook.Viewer({model!r}, {images!r}"
                f"{_preprocess_words(model)})\nviewer")
        write_notebook(root / "bench.ipynb", code)
        with running_lab(root) as lab, chromium() as browser:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            open_notebook(page, lab, "bench.ipynb", timeout_ms=WAIT_MS)
            if args.screenshot:
                page.locator(".vitviz select.vitviz-view").select_option("relevance")
                page.wait_for_function("() => document.querySelector('.vitviz').dataset.painted"
                                       ".startsWith('relevance|')", timeout=WAIT_MS)
                page.locator(".vitviz input.vitviz-check, .vitviz .vitviz-check input").check()
                page.wait_for_function("() => document.querySelectorAll('.vitviz .vitviz-tile').length > 0",
                                       timeout=WAIT_MS)
                box = page.locator(".vitviz canvas.vitviz-map").bounding_box()
                page.mouse.move(box["x"] + box["width"] * 0.45, box["y"] + box["height"] * 0.5)
                page.locator(".vitviz").screenshot(path=args.screenshot)
                print(f"wrote {args.screenshot}")
                return 0
            layer = _browser_layer_ms(page, args.repeats)
            image = _browser_image_ms(page, len(images), max(3, args.repeats // 2))
        peer = _kernel_peer(model, images, max(3, args.repeats // 2))
    lb, ib = statistics.median(layer), statistics.median(image)
    print(f"model {model}, {len(images)} images, patch grid {peer['grid']}")
    print(f"layer change -> repaint: browser {lb:.2f} ms vs the window's figure {peer['layer_ms']:.1f} ms "
          f"(ratio {peer['layer_ms'] / lb:.0f}x faster)")
    print(f"new image -> first map: viewer {ib:.0f} ms (run on the worker + send + draw) vs run + figure in the "
          f"kernel {peer['image_ms']:.0f} ms (ratio {ib / peer['image_ms']:.2f})")
    print(f"bytes per map: {peer['map_bytes']:.0f} B (uint8 + float16 at patch resolution) vs the figure's PNG "
          f"{peer['png_bytes']} B (ratio {peer['png_bytes'] / peer['map_bytes']:.0f}x smaller)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
