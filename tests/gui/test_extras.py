"""Model chooser (download progress + cancel), precision, paste, drag and drop, recent files, error wording."""

import importlib
import time

import numpy as np
import pytest
import torch
from gui_helpers import make_image, open_and_wait
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent, QImage
from PySide6.QtWidgets import QApplication


def test_download_shows_progress_and_can_be_cancelled(qtbot, window, image_path, monkeypatch):
    P = importlib.import_module("vitviz.model.sources.torch_hub")

    open_and_wait(qtbot, window, image_path)
    window.dialogs = window.dialogs_recorder
    window.dialogs_recorder.confirm_answer = True
    name = next(iter(P.PRETRAINED))
    calls = {"n": 0, "stopped": False}

    def fake_pretrained(n, *, progress=None, show_bar=True):
        total = 100_000_000
        for i in range(2000):
            calls["n"] += 1
            if progress(i * 50_000, total) is False:
                calls["stopped"] = True
                raise P.DownloadCancelled(f"download of {n} cancelled")
            time.sleep(0.005)
        raise AssertionError("the download was never cancelled")

    monkeypatch.setattr(P, "pretrained", fake_pretrained)
    monkeypatch.setattr(P, "is_cached", lambda n: False)
    model, key = window.model, window.model_key
    window.load_model(f"pretrained:{name}")
    assert window.dialogs_recorder.confirms and "MB" in window.dialogs_recorder.confirms[0]
    qtbot.waitUntil(lambda: "Downloading" in window.busy_label.text(), timeout=10000)
    assert window.cancel_button.isVisible()
    assert 0 <= window.busy_bar.value() <= 1000 and window.busy_bar.maximum() == 1000
    qtbot.mouseClick(window.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: calls["stopped"], timeout=10000)
    qtbot.waitUntil(lambda: not window.runner.is_busy(), timeout=10000)
    assert window.model is model and window.model_key == key
    assert window.dialogs_recorder.errors == []  # a cancel is not an error
    assert not window.cancel_button.isVisible()


def test_declined_download_does_nothing(qtbot, window, monkeypatch):
    P = importlib.import_module("vitviz.model.sources.torch_hub")

    window.dialogs = window.dialogs_recorder
    window.dialogs_recorder.confirm_answer = False
    monkeypatch.setattr(P, "is_cached", lambda n: False)
    model = window.model
    window.load_model(f"pretrained:{next(iter(P.PRETRAINED))}")
    assert not window.runner.is_busy() and window.model is model


def test_precision_change_reruns_in_bf16(qtbot, window, image_path):
    open_and_wait(qtbot, window, image_path)
    combo = window.model_bar.precision_combo
    # auto, fp32, bf16 on the CPU (fp16 only on a GPU); "auto" names what it chooses here
    from vitviz.devices import resolve_precision

    assert [combo.itemData(i) for i in range(combo.count())] == ["auto", "fp32", "bf16"]
    auto = f"auto ({resolve_precision('auto', 'cpu')})"
    assert combo.itemText(0) == "auto" and combo.itemData(0, Qt.ItemDataRole.ToolTipRole).startswith(auto)
    assert window.menus.precision.actions()[0].text() == auto
    assert auto in window.model_label.text() or window.precision != "auto"
    with qtbot.waitSignal(window.resultShown, timeout=30000):
        window.set_precision("bf16")
    assert window.precision == "bf16"
    assert next(window.model.parameters()).dtype == torch.bfloat16
    r = window.session.result
    assert r.precision == "bf16" and r.attentions.dtype == torch.bfloat16  # stored in the model's precision
    rows = r.attentions.sum(-1)
    assert torch.allclose(rows, torch.ones_like(rows), atol=2e-2)
    assert "bf16" in window.model_label.text()
    with qtbot.waitSignal(window.resultShown, timeout=30000):
        window.set_precision("fp32")
    assert next(window.model.parameters()).dtype == torch.float32


def test_paste_image_from_clipboard(qtbot, window):
    arr = np.zeros((40, 60, 3), np.uint8)
    arr[:, :30] = (255, 0, 0)
    img = QImage(arr.data, 60, 40, 180, QImage.Format.Format_RGB888).copy()
    QApplication.clipboard().setImage(img)
    with qtbot.waitSignal(window.resultShown, timeout=30000):
        window.paste_image()
    r = window.session.result
    assert r.source == "pasted image"
    np.testing.assert_array_equal(r.rgb, arr)


def test_drop_files_opens_them(qtbot, window, tmp_path):
    a, b = tmp_path / "a.png", tmp_path / "b.jpg"
    make_image(a, 40, 40, seed=3)
    from PIL import Image
    Image.fromarray(make_image(tmp_path / "tmp.png", 48, 32, seed=4)).save(b)
    md = QMimeData()
    md.setUrls([QUrl.fromLocalFile(str(a)), QUrl.fromLocalFile(str(b))])
    ev = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, md, Qt.MouseButton.LeftButton,
                    Qt.KeyboardModifier.NoModifier)
    with qtbot.waitSignal(window.resultShown, timeout=30000):
        window.dropEvent(ev)
    assert window.session.images == [str(a), str(b)]
    assert window.session.result.source == str(a)
    assert window.prefs.recent_files()[0] == str(a)
    assert any(act.text() == "a.png" for act in window.menus.recent.actions())


def test_describe_error_names_file_and_cause():
    from vitviz.gui.worker import describe_error

    oom = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    msg = describe_error(oom, "/data/cat.jpg")
    assert "/data/cat.jpg" in msg and "out of memory" in msg and "CPU" in msg
    msg = describe_error(RuntimeError("boom"), "model.pth")
    assert msg.startswith("model.pth") and "RuntimeError: boom" in msg


def test_run_gui_opens_window_with_images(qtbot, tmp_path, tiny_model, monkeypatch, settings):
    """``run_gui`` (what ``vitviz IMAGE`` calls) shows the window with the image; the event loop is stubbed."""
    from vitviz.gui import app as app_mod
    from vitviz.model import save_checkpoint

    ckpt = save_checkpoint(tiny_model, tmp_path / "m.safetensors")
    img = tmp_path / "cat.png"
    make_image(img, 50, 80)
    seen = {}

    def fake_exec(self):
        win = [w for w in QApplication.topLevelWidgets() if w.__class__.__name__ == "MainWindow" and w.isVisible()][-1]
        qtbot.waitUntil(lambda: win.session.result is not None, timeout=30000)
        seen["source"] = win.session.result.source
        seen["key"] = win.model_key
        seen["precision"] = (win.precision, win.session.result.precision)
        win.close()
        return 0

    monkeypatch.setattr(type(QApplication.instance() or app_mod.make_app()), "exec", fake_exec)
    # vitviz IMAGE --precision bf16: the window starts in the precision asked for (default: the remembered one)
    assert app_mod.run_gui([str(img)], model=str(ckpt), settings=settings, precision="bf16") == 0
    assert seen == {"source": str(img), "key": f"file:{ckpt.resolve()}", "precision": ("bf16", "bf16")}


def test_copy_view_puts_the_export_on_the_clipboard(qtbot, window, image_path):
    open_and_wait(qtbot, window, image_path)
    window.controls.export_colorbar.setChecked(False)
    window.controls.export_caption.setChecked(False)
    QApplication.clipboard().clear()
    window.copy_view()
    img = QApplication.clipboard().image()
    assert (img.width(), img.height()) == (110, 70)
    from vitviz.document.panel import render_view
    from vitviz.gui.dialogs import rgb_from_qimage
    np.testing.assert_array_equal(rgb_from_qimage(img), render_view(window.session))


def test_failed_start_model_falls_back_to_the_demo_model(qtbot, settings, tmp_path):
    from gui_helpers import Recorder

    from vitviz.gui.main_window import MainWindow

    rec = Recorder()
    w = MainWindow(settings=settings, model_key=f"file:{tmp_path / 'missing.safetensors'}", dialogs=rec)
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: w.model is not None, timeout=60000)
    assert w.model_key == "demo"
    (title, msg), = rec.errors
    assert "missing.safetensors" in msg


@pytest.mark.parametrize("kwargs", [
    dict(num_reg_tokens=2, distilled=True, num_classes=4),  # 4 prefix tokens
    dict(class_token=False, global_pool="avg", num_classes=0),  # no [CLS], no classifier: no gradients
])
def test_unusual_models_show_every_view_without_errors(qtbot, settings, image_path, kwargs):
    from gui_helpers import Recorder

    from vitviz import views
    from vitviz.gui.main_window import MainWindow
    from vitviz.model import create_model

    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                     **kwargs).eval()
    rec = Recorder()
    w = MainWindow(settings=settings, model=m, dialogs=rec)
    qtbot.addWidget(w)
    w.show()
    open_and_wait(qtbot, w, image_path)
    r = w.session.result
    assert r.num_prefix_tokens == m.num_prefix_tokens
    for v in views.all_views():
        w.set_view(v.key)
        w.step_layer(1)
        w.step_head(1)
        m_ = w.session.current_map()
        if kwargs.get("num_classes") == 0 and ("target" in v.reads or v.key in ("rollout", "logit_lens")):
            assert m_ is None and not w.canvas.overlay_item.isVisible()
            assert "not available" in w.statusBar().currentMessage()
        elif v.key == "rope_sim":  # no rotary embedding in these models: said, nothing drawn
            assert m_ is None and v.unavailable(r) and not w.canvas.overlay_item.isVisible()
        else:  # a view in colours of its own (feature PCA) is drawn by the RGB layer instead of the colormap's
            drawn = w.canvas.rgb_item if v.rgb else w.canvas.overlay_item
            assert m_.shape == (4, 4) and drawn.isVisible(), v.key
    w.heads.grid_toggle.setChecked(True)
    assert rec.errors == []


def test_plots_panel_clicks_select_layer_head_and_patch(qtbot, window, image_path):
    from PySide6.QtCore import QPointF

    r = open_and_wait(qtbot, window, image_path)
    plots = window.plots
    # distance plot: click the point of layer 2, head 3
    plots.setCurrentIndex(0)
    qtbot.waitExposed(plots.distance.widget)
    pt = next(p for p in plots.distance.scatter.points() if tuple(p.data()) == (2, 3))
    vb = plots.distance.plot.getViewBox()
    pos = plots.distance.widget.mapFromScene(vb.mapViewToScene(QPointF(pt.pos().x(), pt.pos().y())))
    qtbot.mouseClick(plots.distance.widget.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert (window.session.options.layer, window.session.options.head) == (2, 3)
    d = window.session.mean_distances()
    assert pt.pos().y() == pytest.approx(float(d[2, 3]))
    # entropy map: click the cell of layer 1, head 0
    plots.setCurrentIndex(3)
    qtbot.waitExposed(plots.ent_widget)
    evb = plots.ent_plot.getViewBox()
    pos = plots.ent_widget.mapFromScene(evb.mapViewToScene(QPointF(0.5, 1.5)))
    qtbot.mouseClick(plots.ent_widget.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert (window.session.options.layer, window.session.options.head) == (1, 0)
    # position-embedding grid: click tile (row 3, col 1) -> query patch 3 * gw + 1
    plots.setCurrentIndex(1)
    qtbot.waitExposed(plots.pos_mosaic)
    qtbot.mouseClick(plots.pos_mosaic.viewport(), Qt.MouseButton.LeftButton, pos=plots.pos_mosaic.tile_center(3, 1))
    assert window.session.options.query == 3 * r.grid[1] + 1


def test_settings_location_can_be_redirected(monkeypatch, tmp_path):
    from vitviz.gui.main_window import default_settings

    monkeypatch.setenv("VITVIZ_SETTINGS", str(tmp_path / "s.ini"))
    s = default_settings()
    s.setValue("colormap", "gray")
    s.sync()
    assert (tmp_path / "s.ini").is_file() and "gray" in (tmp_path / "s.ini").read_text()


def test_window_shows_before_torch_is_imported(tmp_path):
    """Start-up: the window is built and shown on the GUI thread without importing torch (~2 s); the first model
    load imports it on the worker. Checked in a fresh process with an import hook that names the importing thread."""
    import os
    import subprocess
    import sys

    code = r"""
import sys, threading
seen = []
class Spy:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append(threading.current_thread().name)
        return None
sys.meta_path.insert(0, Spy())

def main():  # (in a function, as in vitviz.gui.app.run_gui: the window is gone before the interpreter ends)
    from PySide6.QtCore import QTimer
    from vitviz.gui.app import make_app
    from vitviz.gui.main_window import MainWindow
    app = make_app()
    w = MainWindow(load_samples=True)
    w.show()
    app.processEvents()
    shown_without_torch = not any(t == "MainThread" for t in seen)
    deadline = QTimer(); deadline.setSingleShot(True); deadline.timeout.connect(app.quit); deadline.start(60000)
    poll = QTimer(); poll.timeout.connect(lambda: w.close() if w.session.result is not None else None); poll.start(50)
    app.exec()
    print(shown_without_torch, seen[:1], w.session.result is not None, flush=True)

main()
"""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", VITVIZ_SETTINGS=str(tmp_path / "s.ini"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[-2] == "True ['vitviz-worker'] True", out.stdout + out.stderr


def test_remembered_gpu_that_is_missing_falls_back_to_the_cpu_with_a_note(qtbot, settings, monkeypatch):
    """A device remembered from another machine (cuda:3) is accepted at start (torch not asked yet) and replaced by
    the CPU, with a note, when the model loads."""
    from gui_helpers import Recorder

    import vitviz.gui.controller as controller
    from vitviz.gui.main_window import MainWindow

    monkeypatch.setattr(controller, "torch_loaded", lambda: False)
    rec = Recorder()
    w = MainWindow(settings=settings, device="cuda:3", dialogs=rec)
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: w.model is not None, timeout=60000)
    assert w.controller.device == "cpu"
    assert "cuda:3 is not available" in w.statusBar().currentMessage() + " ".join(map(str, rec.__dict__.values()))
