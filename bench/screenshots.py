"""Screenshots of the real app, one per view (plus the heads grid and each plot tab), for looking at the GUI.

Usage (a real X server, e.g. Xvfb):
    xvfb-run -s "-screen 0 1600x1000x24" .venv/bin/python bench/screenshots.py --out /tmp/shots
or without X (Qt's offscreen platform; fonts may differ):
    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/screenshots.py --out /tmp/shots

The model: ``--model PATH`` (any checkpoint), else ``../shared/weights/vit_tiny_*.safetensors`` when present, else the
bundled demo model. The image: ``--image PATH``, else scikit-image's ``chelsea`` photo, else a demo sample.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _default_model() -> str | None:
    shared = REPO.parent / "shared" / "weights"
    found = sorted(shared.glob("vit_tiny*.safetensors")) if shared.is_dir() else []
    return str(found[0]) if found else None


def _default_image(folder: Path) -> str:
    try:
        import skimage.data
        from PIL import Image

        p = folder / "chelsea.png"
        Image.fromarray(skimage.data.chelsea()).save(p)
        return str(p)
    except Exception:  # noqa: BLE001
        from vitviz.demo import sample_images

        return str(sample_images()[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/shots")
    ap.add_argument("--model", default=None)
    ap.add_argument("--image", default=None)
    ap.add_argument("--size", default="1600x1000")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="vitviz-shots-"))

    from PySide6.QtCore import QSettings

    from vitviz import views
    from vitviz.document.panel import render_view
    from vitviz.gui.app import make_app
    from vitviz.gui.main_window import MainWindow
    from vitviz.model.sources.refs import parse_model_ref

    app = make_app()
    settings = QSettings(str(tmp / "settings.ini"), QSettings.Format.IniFormat)
    model = args.model or _default_model()
    key = parse_model_ref(model) if model else "demo"
    if key and key.startswith("file:") and "augreg" in key:
        # the augreg checkpoint does not say its normalisation: load it with mean = std = 0.5 (see its README)
        from vitviz.model import load_checkpoint
        from vitviz.model.spec import inception_preprocess

        m = load_checkpoint(key[5:])
        m.spec = m.spec.replace(preprocess=inception_preprocess(224), name="ViT-Ti/16 augreg")
        win = MainWindow(settings=settings, model=m, model_key=key)
    else:
        win = MainWindow(settings=settings, model_key=key)
    w, h = (int(x) for x in args.size.split("x"))
    win.resize(w, h)
    win.show()
    errors: list[str] = []
    win.errorShown.connect(lambda t, m: errors.append(f"{t}: {m}"))
    win.dialogs.error = lambda t, m, d="": None

    def wait(cond, timeout=120.0):
        t0 = time.time()
        while not cond() and time.time() - t0 < timeout:
            app.processEvents()
            time.sleep(0.01)
        for _ in range(5):
            app.processEvents()

    wait(lambda: win.model is not None)
    image = args.image or _default_image(tmp)
    win.open_images([image])
    wait(lambda: win.session.result is not None)
    if win.session.result is None:
        print("no result:", errors)
        return 1
    r = win.session.result
    gh, gw = r.grid
    win.set_query((gh // 2) * gw + gw // 3)
    win.set_layer(r.num_layers - 3)
    win.set_head(1 if r.num_heads > 1 else 0)

    y0, x0, y1, x1 = win.session.crop_rect_yx()

    def shot(name: str) -> None:
        # pretend the mouse rests on a patch so the status bar read-out shows
        win._on_hover(x0 + 0.62 * (x1 - x0), y0 + 0.41 * (y1 - y0))
        for _ in range(5):
            app.processEvents()
        pix = win.grab()  # the window itself (a screen grab clips what lies beyond the screen's edge)
        path = out / f"{name}.png"
        pix.save(str(path))
        print(path)

    for i, v in enumerate(views.all_views()):
        win.set_view(v.key)
        if v.key == "token_sim":
            win.set_layer(r.num_layers // 2)
        shot(f"{i + 1}_{v.key}")
    win.set_view("cls")
    win.set_head("mean")
    win.heads.grid_toggle.setChecked(True)
    shot("8_all_heads_grid")
    win.heads.grid_toggle.setChecked(False)
    for t in range(win.plots.count()):
        win.plots.setCurrentIndex(t)
        shot(f"9_plots_{t}_{win.plots.tabText(t).replace(' ', '_').lower()}")
    win.plots.setCurrentIndex(0)
    win.controls.interp_combo.setCurrentIndex(1)
    win.set_view("rollout")
    shot("10_rollout_smooth")
    # issue 12: artefact tokens left out of the scale (the default), the token norms, the top-60 % mask
    win.controls.interp_combo.setCurrentIndex(0)
    win.set_view("relevance")
    shot("12_relevance_artefacts_excluded_from_scale")
    win.session.set_options(scale_excludes_artefacts=False)
    win.refresh_view()
    shot("12b_relevance_artefacts_in_scale")
    win.session.set_options(scale_excludes_artefacts=True)
    win.set_view("token_norm")
    win.set_layer(r.num_layers - 1)
    shot("13_token_norm_last_layer")
    win.set_view("relevance")
    win.session.set_options(mask_keep=0.6)
    win.refresh_view()
    shot("14_relevance_top60_mask")
    win.session.set_options(mask_style="dim")
    win.refresh_view()
    shot("14b_relevance_top60_dim")
    win.session.set_options(mask_keep=0.0, mask_style="contour")
    win.set_view("pos_sim")
    shot("15_pos_sim_diverging")
    win.set_view("cls")
    win.heads.grid_toggle.setChecked(True)
    shot("16_all_layers_grid")
    win.heads.grid_toggle.setChecked(False)
    exp = render_view(win.session)
    if exp is not None:
        from vitviz.imaging import write_png

        write_png(out / "11_export.png", exp, overwrite=True)
        print(out / "11_export.png")
    if errors:
        print("errors:", errors)
    win.close()
    # delete the window while the application still runs: left to the interpreter's teardown, pyqtgraph items were
    # destroyed after their scene and the process ended with a segmentation fault (after every picture was written)
    win.deleteLater()
    app.processEvents()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
