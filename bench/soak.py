"""Load over time: one window browsing, switching models and precisions, comparing and measuring faithfulness for a
long while must not grow its memory without bound, and must leave no worker thread behind (issue 26).

One :class:`~vitviz.gui.main_window.MainWindow` (offscreen) with two small models: a tiny random ViT written to a
temporary folder as a checkpoint, and the bundled demo model. In it, interleaved:

* ``--switches`` image switches over ``--images`` small generated images (opened, stepped forwards and back, some
  closed (taken out of the image set) and opened again);
* ``--models`` model switches (tiny <-> demo), each followed by a precision switch (fp32 / bf16 / auto);
* ``--compare`` openings and closings of the Compare window (other images, layers and classes, so it analyses
  images of its own on the worker); it stays open for the next few image switches, following the main window;
* ``--tables`` faithfulness tables (few steps and seeds, to keep it quick).

The first tenth of each (at least one of every kind, both models in every precision) is the warm-up. The resident
set size (``/proc/self/statm``) is printed at the start, after the warm-up and at the end (these two with the Compare
window closed, as the main window browses), each after ``gc.collect()`` and ``malloc_trim(0)``
(memory freed but kept by the allocator is given back first, so the number is what is still in use; the raw
figure is printed beside it), with the ratio end / warm-up, the sizes of the window's caches, the inference results
still alive, and, after the window closed, the Python threads still running.

Every wait runs Qt's event loop (a local ``QEventLoop``) until the window says the work is done; nothing sleeps.

Usage:
    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/soak.py [--switches 1000] [--models 20] [--compare 50]
        [--tables 10] [--images 36]
Target: end RSS within 10 % of the RSS after the warm-up; no ``vitviz-*`` thread left once the window is closed.
Exit status 1 when a target is missed (2: the window reported an error).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

PRECISIONS = ("fp32", "bf16", "auto")
TIMEOUT_S = 120.0
COMPARE_OPEN_FOR = 5  # image switches the Compare window stays open for


# ------------------------------------------------------------------------------------------------ measuring
def rss_mib(trim: bool = True) -> float:
    """Resident set size in MiB, after a full collection (and ``malloc_trim(0)`` when ``trim``)."""
    gc.collect()
    if trim:
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc: the raw figure
            pass
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def live_results() -> int:
    """Inference results still alive (the window's, the Compare window's, anything holding one)."""
    from vitviz.pipeline import InferenceResult

    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is InferenceResult)


def cache_sizes(w) -> dict[str, int]:
    """The sizes of the window's bounded caches (what test_bounds checks)."""
    c, cw = w.controller, w.compare_window
    out = {"session map cache": len(w.session.cache), "faithfulness tables": len(c.faithfulness.tables),
           "result makers": len(c._made_by), "image set": len(w.session.images)}
    if cw is not None:
        out["compare results"] = len(cw.results)
        out["compare map caches"] = len(cw._pool)
    from PySide6.QtCore import QAbstractAnimation, QCoreApplication, QEvent, QObject
    from PySide6.QtWidgets import QGraphicsView

    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)  # widgets replaced since: gone
    # (the style's animations come and go with the widgets' state: not counted)
    out["Qt objects"] = sum(1 for o in w.findChildren(QObject) if not isinstance(o, QAbstractAnimation))
    out["graphics items"] = sum(len(v.scene().items()) for v in w.findChildren(QGraphicsView) if v.scene())
    return out


# ------------------------------------------------------------------------------------------------ waiting
class Waiter:
    """Counts the window's signals and runs Qt's event loop until a count moves (no sleeps)."""

    def __init__(self, w):
        self.w = w
        self.shown = self.errors = self.tables = 0
        self.messages: list[str] = []
        w.resultShown.connect(self._on_shown)
        w.errorShown.connect(self._on_error)
        w.controller.faithfulness.ready.connect(self._on_table)
        w.controller.faithfulness.stopped.connect(self._on_table)

    def _on_shown(self):
        self.shown += 1

    def _on_error(self, title, message):
        self.errors += 1
        self.messages.append(f"{title}: {message}")

    def _on_table(self, *_args):
        self.tables += 1

    def until(self, predicate, what: str, timeout_s: float = TIMEOUT_S) -> None:
        """Run a local event loop until ``predicate()`` holds. (Not ``QTest.qWait`` in a loop: it keeps the GIL
        while it sleeps, and the worker thread then runs at half speed.)"""
        from PySide6.QtCore import QEventLoop, QTimer

        if predicate():
            return
        deadline = time.monotonic() + timeout_s
        loop, timer = QEventLoop(), QTimer()
        timer.setInterval(2)
        timer.timeout.connect(lambda: loop.quit() if predicate() or time.monotonic() > deadline else None)
        timer.start()
        loop.exec()
        timer.stop()
        if not predicate():
            raise TimeoutError(f"soak: timed out waiting for {what}")

    def idle(self, what: str) -> None:
        """Until the worker has nothing queued or running and no image is waiting for a model."""
        c = self.w.controller
        self.until(lambda: not c.is_busy() and c.requested is None and c.loading is None, what)


# ------------------------------------------------------------------------------------------------ the inputs
def make_images(folder: Path, n: int) -> list[str]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        h, w = int(rng.integers(40, 120)), int(rng.integers(40, 120))
        arr = (rng.random((h, w, 3)) * 255).astype(np.uint8)
        p = folder / f"soak_{i:03d}.png"
        Image.fromarray(arr).save(p)
        paths.append(str(p))
    return paths


def make_tiny_checkpoint(folder: Path) -> str:
    import torch

    from vitviz.model import create_model, save_checkpoint

    torch.manual_seed(0)
    # 14 x 14 patches: a result holds a few MB (attention and its gradients of every layer), so results that are
    # never freed show in the resident size
    m = create_model("vit_tiny_patch16_224", img_size=224, patch_size=16, embed_dim=64, depth=4, num_heads=4,
                     num_classes=5)
    m.spec = m.spec.replace(labels=("circle", "square", "star", "cross", "heart"), name="tiny soak ViT")
    return str(save_checkpoint(m.eval(), folder / "tiny.safetensors"))


def quiet_platform_notes() -> None:
    """Drop the offscreen platform's notes on every window ("This plugin does not support raise()"); every other
    Qt message is printed."""
    from PySide6.QtCore import qInstallMessageHandler

    def handler(_mode, _context, message):
        if not message.startswith("This plugin does not support"):
            print(message, file=sys.stderr)

    qInstallMessageHandler(handler)


class Dialogs:
    """The window's dialogs, answered without a screen (errors are counted by the Waiter)."""

    def error(self, title, message, detail=""):
        pass

    def info(self, title, html):
        pass

    def confirm(self, title, text):
        return False

    def confirm_overwrite(self, path):
        return False

    def open_images(self, folder):
        return []


# ------------------------------------------------------------------------------------------------ the load
class Soak:
    def __init__(self, w, waiter: Waiter, images: list[str], tiny: str):
        self.w, self.wait, self.images, self.tiny = w, waiter, images, tiny
        self.done = {"switches": 0, "models": 0, "compare": 0, "tables": 0}
        self.closed: list[str] = []
        self.step = 1
        self.compare_open = 0  # image switches left before the open Compare window closes

    def switch_image(self) -> None:
        """One image switch: mostly the next / previous image, sometimes closing one or opening a closed one."""
        w, i = self.w, self.done["switches"]
        before = self.wait.shown + self.wait.errors
        if i % 25 == 12 and len(w.session.images) > 4:  # close an image that is not shown, then move on
            shown = w.session.result.source if w.session.result is not None else None
            victim = next(p for p in w.session.images if p != shown)
            w.session.forget_image(victim)
            self.closed.append(victim)
            w.step_image(self.step)
        elif i % 25 == 24 and self.closed:  # open a closed one again
            w.open_images([self.closed.pop(0)])
        else:
            if i % 97 == 0:
                self.step = -self.step  # back and forth
            w.step_image(self.step)
        self.wait.until(lambda: self.wait.shown + self.wait.errors > before, f"image switch {i}")
        self.wait.idle(f"image switch {i}")
        self.done["switches"] += 1
        if self.compare_open:  # the open Compare window followed the new image
            self.compare_open -= 1
            if not self.compare_open:
                self.close_compare()

    def switch_model(self) -> None:
        w, i = self.w, self.done["models"]
        ref = "demo" if w.controller.ref != "demo" else self.tiny
        w.load_model(ref)
        self.wait.until(lambda: w.controller.ref == ref, f"model switch {i}")
        self.wait.idle(f"model switch {i}")
        precision = PRECISIONS[i % len(PRECISIONS)]
        w.set_precision(precision)
        self.wait.idle(f"precision {precision}")
        self.done["models"] += 1

    def compare(self) -> None:
        """Open the Compare window (other images, layers or classes) and wait for its grid; it stays open for the
        next few image switches (it follows the main window, analysing the other images again) and then closes."""
        from vitviz.document import comparison as cmp

        w, i = self.w, self.done["compare"]
        self.close_compare()
        n = len(w.session.images)
        kind = i % 3
        if kind == 0:  # other images: analysed by the Compare window on the worker
            rows = tuple(w.session.images[(w.session.index + k) % n] for k in range(3))
            spec = cmp.CompareSpec(layout="views", views=("cls", "rollout"), images=rows)
        elif kind == 1:
            spec = cmp.CompareSpec(layout="layers", views=("cls",))
        else:
            spec = cmp.CompareSpec(layout="classes", views=("grad_rollout",), classes=(0, 1, 2))
        cw = w.show_compare(spec)
        self.wait.until(lambda: self.drawn(cw, spec), f"comparison {i}")
        self.wait.idle(f"comparison {i}")
        self.compare_open = COMPARE_OPEN_FOR
        self.done["compare"] += 1

    def close_compare(self) -> None:
        cw = self.w.compare_window
        if cw is not None and cw.isVisible():
            cw.close()
        self.compare_open = 0

    @staticmethod
    def drawn(cw, spec=None) -> bool:
        """The Compare window shows its grid (for ``spec``), or says why it cannot."""
        c = cw.comparison
        if cw.message.text().startswith(("Cannot", "Could not")):
            return True
        return c is not None and (spec is None or c.spec == spec) and len(cw.panels) == len(c.cells)

    def table(self) -> None:
        w, i = self.w, self.done["tables"]
        tab = w.plots.faithfulness
        before = self.wait.tables
        if tab.run_button.isEnabled():
            tab.run()
            self.wait.until(lambda: self.wait.tables > before, f"faithfulness table {i}")
        self.wait.idle(f"faithfulness table {i}")
        self.done["tables"] += 1

    def run(self, targets: dict[str, int]) -> None:
        """Interleave the four kinds of work until each reached its target count."""
        total = sum(targets.values())
        while any(self.done[k] < targets[k] for k in targets):
            # the kind furthest behind its share goes next
            k = min((k for k in targets if self.done[k] < targets[k]),
                    key=lambda k: self.done[k] / max(1, targets[k]))
            getattr(self, {"switches": "switch_image", "models": "switch_model", "compare": "compare",
                           "tables": "table"}[k])()
            n = sum(self.done.values())
            if n % 200 == 0:
                print(f"  {n}/{total} steps · RSS {rss_mib():.1f} MiB · {self.done}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--switches", type=int, default=1000, help="image switches (default 1000)")
    ap.add_argument("--models", type=int, default=20, help="model switches, each with a precision switch (20)")
    ap.add_argument("--compare", type=int, default=50, help="Compare window openings and closings (50)")
    ap.add_argument("--tables", type=int, default=10, help="faithfulness tables (10)")
    ap.add_argument("--images", type=int, default=36, help="generated images cycled through (36)")
    ap.add_argument("--steps", type=int, default=3, help="steps per faithfulness curve (3)")
    args = ap.parse_args(argv)
    for name in ("switches", "models", "compare", "tables", "images", "steps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1, got {getattr(args, name)}")

    import torch

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    t0 = time.perf_counter()
    start = rss_mib()
    with tempfile.TemporaryDirectory(prefix="vitviz-soak-") as tmp:
        folder = Path(tmp)
        os.environ["VITVIZ_SETTINGS"] = str(folder / "settings.ini")
        from PySide6.QtCore import QSettings

        from vitviz.demo import load_demo_model
        from vitviz.gui.app import make_app
        from vitviz.gui.main_window import MainWindow

        images = make_images(folder, args.images)
        tiny = make_tiny_checkpoint(folder)
        app = make_app()
        quiet_platform_notes()
        settings = QSettings(str(folder / "soak.ini"), QSettings.Format.IniFormat)
        before_threads = set(threading.enumerate())
        w = MainWindow(settings=settings, model=load_demo_model(), model_key="demo", dialogs=Dialogs())
        w.resize(1400, 900)
        w.show()
        tab = w.plots.faithfulness
        w.plots.show_page(tab)
        tab.steps_spin.setValue(args.steps)
        tab.seeds = 1
        waiter = Waiter(w)
        soak = Soak(w, waiter, images, tiny)
        before = waiter.shown
        w.open_images(images, remember=False)
        waiter.until(lambda: waiter.shown > before, "the first image")
        waiter.idle("the first image")

        targets = {"switches": args.switches, "models": args.models, "compare": args.compare, "tables": args.tables}
        warm = {k: max(1, v // 10) for k, v in targets.items()}
        warm["models"] = max(warm["models"], min(targets["models"], len(PRECISIONS) * 2))  # each model, precision
        print(f"soak: {targets} over {len(images)} images; warm-up {warm}", flush=True)
        soak.run(warm)
        soak.close_compare()  # both measurements in the same state: the main window browsing, Compare closed
        warm_raw, warm_rss, warm_results = rss_mib(trim=False), rss_mib(), live_results()
        warm_caches = cache_sizes(w)
        t_warm = time.perf_counter()
        soak.run(targets)
        soak.close_compare()
        end_raw, end_rss, end_results = rss_mib(trim=False), rss_mib(), live_results()
        end_caches = cache_sizes(w)
        t_end = time.perf_counter()

        w.close()
        del w, soak, tab
        app.processEvents()
        gc.collect()
        app.processEvents()
        left = [t for t in threading.enumerate() if t not in before_threads and t.is_alive()
                and t.name.startswith("vitviz-")]
        after_close, closed_results = rss_mib(), live_results()
    threads = threading.enumerate()

    ratio = end_rss / warm_rss
    print()
    print(f"done: {soak_counts(targets)} in {t_end - t0:.0f} s (after the warm-up {t_end - t_warm:.0f} s); "
          f"errors shown: {waiter.errors}")
    print(f"RSS start          {start:8.1f} MiB")
    print(f"RSS after warm-up  {warm_rss:8.1f} MiB   (raw {warm_raw:.1f}; results alive {warm_results}; "
          f"caches {warm_caches})")
    print(f"RSS at the end     {end_rss:8.1f} MiB   (raw {end_raw:.1f}; results alive {end_results}; "
          f"caches {end_caches})")
    print(f"RSS window closed  {after_close:8.1f} MiB   (results alive {closed_results})")
    print(f"ratio end / warm-up {ratio:.3f} (target <= 1.10); raw {end_raw / warm_raw:.3f}")
    print(f"threads alive at the end: {len(threads)}: {', '.join(t.name for t in threads)}")
    print(f"vitviz-* threads left after the window closed: {[t.name for t in left] or 'none'}")
    for m in waiter.messages[:5]:
        print(f"error shown: {m}")
    if waiter.errors:
        return 2
    return 0 if ratio <= 1.10 and not left else 1


def soak_counts(targets: dict[str, int]) -> str:
    return ", ".join(f"{v} {k}" for k, v in targets.items())


if __name__ == "__main__":
    sys.exit(main())
