"""Screenshots of the real app, one per view (plus the heads grid and each plot tab), for looking at the GUI.

Usage (a real X server, e.g. Xvfb):
    xvfb-run -s "-screen 0 1600x1000x24" .venv/bin/python bench/screenshots.py --out /tmp/shots
or without X (Qt's offscreen platform; fonts may differ):
    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/screenshots.py --out /tmp/shots

``--only mechanistic`` takes only the logit lens and head knock-out pictures (issue 34): the plots panel's Heads tab,
its "Lens · knock-out" page run, a cell of the grid clicked, the logit-lens class map view at two layers, and the
Compare window's Patching dock (the photo patched into scikit-image's coffee).

``--only prompts`` takes only the text-prompt pictures (issue 24): a random-weight CLIP (open_clip layout, ViT with
16-pixel patches at 224 pixels, written to a temporary folder: no network) with the prompts "a cat; a dog; a sofa"
typed into the prompt box, LeGrad on the top prompt and on another one, relevance (last layer, as Chefer's CLIP
notebook), the Compare window with the prompts side by side.

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


def _zoomed(image: str, folder: Path) -> str:
    """A second photo of the same subject: the centre of ``image``, enlarged and mirrored (feature PCA fitted over
    both colours the same parts alike)."""
    from PIL import Image, ImageOps

    im = Image.open(image).convert("RGB")
    w, h = im.size
    crop = im.crop((w // 5, h // 10, w * 4 // 5, h * 9 // 10)).resize((w, h))
    p = folder / f"{Path(image).stem}_zoomed.png"
    ImageOps.mirror(crop).save(p)
    return str(p)


def _feature_model(model):
    """The window's model without its classifier: a feature model (its output is the pooled embedding), as DINO's."""
    from dataclasses import replace

    from vitviz.model import ViT

    cfg = replace(model.config, num_classes=0)
    f = ViT(**{**cfg.to_dict(), "img_size": tuple(cfg.img_size)})
    f.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("head.")}, strict=False)
    f.spec = model.spec.replace(config=f.config, labels=None, name=f"{model.spec.name} features (no classifier)")
    return f.eval()


def _random_clip(folder: Path) -> Path:
    """A random-weight CLIP in open_clip's folder layout (``open_clip_config.json`` + safetensors): a ViT image tower
    (224 px, 16-px patches, 6 blocks of width 256) and a small text tower with CLIP's vocabulary. No network."""
    import json

    import open_clip
    import torch
    from safetensors.torch import save_file

    cfg = dict(embed_dim=128, quick_gelu=True,
               vision_cfg=dict(layers=6, width=256, head_width=64, patch_size=16, image_size=224),
               text_cfg=dict(context_length=77, vocab_size=49408, width=128, heads=2, layers=2))
    torch.manual_seed(0)
    model = open_clip.CLIP(**cfg).eval()
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "open_clip_model.safetensors"))
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg, "preprocess_cfg": {
        "mean": [0.48145466, 0.4578275, 0.40821073], "std": [0.26862954, 0.26130258, 0.27577711]}}))
    return folder


def prompt_shots(app, settings, out: Path, tmp: Path, image: str, size: tuple[int, int], wait) -> list[str]:
    """The text-prompt pictures (issue 24) on a random-weight CLIP; returns the errors the window showed."""
    from vitviz.document.comparison import CompareSpec
    from vitviz.gui.main_window import MainWindow
    from vitviz.pipeline import Pipeline

    folder = _random_clip(tmp / "random-clip")
    win = MainWindow(settings=settings, model=Pipeline.open(f"file:{folder}"), model_key=f"file:{folder}")
    win.resize(*size)
    win.show()
    errors: list[str] = []
    win.errorShown.connect(lambda t, m: errors.append(f"{t}: {m}"))
    win.dialogs.error = lambda t, m, d="": None
    win.open_images([image])
    wait(lambda: win.session.result is not None)

    def shot(name: str, widget=None) -> None:
        for _ in range(5):
            app.processEvents()
        path = out / f"{name}.png"
        (widget or win).grab().save(str(path))
        print(path)

    first = win.session.result
    edit = win.predictions.prompt_box.edit
    edit.setText("a cat; a dog; a sofa")
    edit.returnPressed.emit()
    wait(lambda: win.session.result is not first and win.session.options.view == "legrad")
    shot("23_prompt_legrad_random_clip")
    r = win.session.result
    other = next(i for i, _, _ in r.top_k(3) if i != r.target)
    win.set_target(other)
    wait(lambda: win.session.result is not r)
    shot("24_prompt_legrad_another_prompt")
    win.set_view("relevance")
    shot("25_prompt_relevance_last_layer")
    win.set_view("legrad")
    cw = win.show_compare(CompareSpec(layout="classes", views=("legrad",)))
    cw.resize(1200, 520)
    wait(lambda: cw.comparison is not None and len(cw.comparison.cells) == 3 and len(cw.panels) == 3)
    wait(lambda: False, timeout=0.5)
    shot("26_compare_prompts_side_by_side", cw)
    cw.close()
    win.close()
    win.deleteLater()
    app.processEvents()
    return errors


def mechanistic_shots(app, win, out: Path, wait) -> None:
    """The logit lens and head knock-out pictures (issue 34) of the window's model and image."""

    def shot(name: str) -> None:
        for _ in range(5):
            app.processEvents()
        path = out / f"{name}.png"
        win.grab().save(str(path))
        print(path)

    tab = win.plots.mechanistic
    win.plots.show_page(tab)
    tab.run()
    wait(lambda: tab.shown is not None, timeout=300)
    shot("27_plots_lens_and_knockout")
    lens, ko = tab.shown
    layer, head = divmod(int(ko.delta.argmin()), ko.delta.shape[1])  # the head whose removal hurts most
    tab.layerHeadSelected.emit(layer, head)
    shot(f"28_knockout_cell_L{layer}_h{head}_clicked")
    win.set_view("logit_lens")
    for layer in (lens.num_layers - 3, lens.num_layers - 1):
        win.set_layer(layer)
        shot(f"29_logit_lens_classes_layer{layer}")
    # activation patching in the Compare window: the shown photo (clean) into scikit-image's coffee (corrupted)
    from PIL import Image
    from skimage import data

    coffee = out / "coffee.png"
    Image.fromarray(data.coffee()).save(coffee)
    win.session.add_images([str(coffee)])
    cw = win.show_compare()
    cw.resize(1200, 900)
    cw.patching.refresh()
    cw.patching.corrupt_combo.setCurrentIndex(cw.patching.corrupt_combo.findData(str(coffee)))
    cw.patching.run()
    wait(lambda: cw.patching.shown is not None, timeout=600)
    cw.patching.layer_slider.setValue(9)
    wait(lambda: False, timeout=0.5)
    cw.grab().save(str(out / "30_compare_patching.png"))
    print(out / "30_compare_patching.png")
    coffee.unlink()


def first_sight_shots(app, settings_for, out: Path, tmp: Path, image: str, size: tuple[int, int], wait,
                      model: str | None) -> list[str]:
    """The pictures of issue 37 (what a researcher sees first): the first screen (the demo model on its samples, a
    fresh settings file), then the real ViT-Ti (``model``) on ``image`` with rollout / relevance / LeGrad, the
    all-layers heads grid and feature PCA; file names end with the window size. Returns the errors shown."""
    from vitviz.gui.main_window import MainWindow

    tag = f"{size[0]}x{size[1]}"
    errors: list[str] = []

    def opened(win):
        win.resize(*size)
        win.move(0, 0)  # at the screen's corner: the whole-screen grab (the export dialog) shows the whole window
        win.show()
        win.errorShown.connect(lambda t, m: errors.append(f"{t}: {m}"))
        win.dialogs.error = lambda t, m, d="": None
        return win

    def shot(win, name: str) -> None:
        for _ in range(8):
            app.processEvents()
        path = out / f"{name}_{tag}.png"
        win.grab().save(str(path))
        print(path)

    demo = opened(MainWindow(settings=settings_for("demo"), model_key="demo", load_samples=True))
    wait(lambda: demo.session.result is not None)
    wait(lambda: False, timeout=0.5)
    shot(demo, "first_screen_demo")
    shown = demo.session.result
    demo.open_images([image])  # a photo on the shapes model: the first-run offer, the docks as wide as before
    wait(lambda: demo.session.result is not shown)
    shot(demo, "demo_on_a_photo_offer")
    demo.close()
    if model is None:
        return errors
    from vitviz.model import load_checkpoint
    from vitviz.model.spec import inception_preprocess

    m = load_checkpoint(model)
    m.spec = m.spec.replace(preprocess=inception_preprocess(224), name="ViT-Ti/16 augreg")
    win = opened(MainWindow(settings=settings_for("vit"), model=m, model_key=f"file:{model}"))
    wait(lambda: win.model is not None)
    win.open_images([image])
    wait(lambda: win.session.result is not None)
    shot(win, "first_screen_vit_ti_chelsea")
    for view in ("rollout", "relevance", "legrad"):
        win.set_view(view)
        wait(lambda: False, timeout=0.3)
        shot(win, f"vit_ti_{view}")
    win.set_view("cls")
    win.heads.grid_toggle.setChecked(True)
    shot(win, "vit_ti_heads_all_layers")
    # File > Export of every layer x head at print size, off the window: the screen while its progress dialog shows
    task = win.exports.export_view(str(tmp / "heads_print.png"), heads=True, all_layers=True, scale="print",
                                   background=True)
    wait(lambda: task.ended or (task.dialog is not None and task.dialog.isVisible()))
    wait(lambda: False, timeout=0.3)
    app.primaryScreen().grabWindow(0).save(str(out / f"vit_ti_export_progress_{tag}.png"))
    print(out / f"vit_ti_export_progress_{tag}.png")
    wait(lambda: task.ended, timeout=120)
    # the faithfulness tab, measured in fp32 as vitviz evaluate (a few steps: a picture, not a benchmark)
    tab = win.plots.faithfulness
    win.plots.show_page(tab)
    tab.steps_spin.setValue(5)
    tab.seeds = 2
    tab.run()
    wait(lambda: tab.shown is not None, timeout=300)
    for _ in range(8):
        app.processEvents()
    win.docks["plots"].grab().save(str(out / f"vit_ti_faithfulness_fp32_{tag}.png"))
    print(out / f"vit_ti_faithfulness_fp32_{tag}.png")
    win.heads.full_toggle.setChecked(True)  # the grid over the whole window (the floated heads dock)
    wait(lambda: False, timeout=0.5)
    for _ in range(8):
        app.processEvents()
    win.docks["heads"].grab().save(str(out / f"vit_ti_heads_full_window_{tag}.png"))
    print(out / f"vit_ti_heads_full_window_{tag}.png")
    win.heads.full_toggle.setChecked(False)
    win.heads.grid_toggle.setChecked(False)
    win.set_view("feature_pca")
    win.set_layer(win.session.result.num_layers - 1)
    shot(win, "vit_ti_feature_pca")
    win.controls.pca_colours_only.setChecked(True)
    shot(win, "vit_ti_feature_pca_colours_only")
    win.close()
    return errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/shots")
    ap.add_argument("--model", default=None)
    ap.add_argument("--image", default=None)
    ap.add_argument("--size", default="1600x1000")
    ap.add_argument("--only", choices=("all", "prompts", "mechanistic", "first"), default="all",
                    help="prompts: only the text-prompt pictures; mechanistic: only the lens and knock-out pictures; "
                         "first: what a researcher sees first (issue 37)")
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

    def wait(cond, timeout=120.0):
        """Run the event loop until ``cond()`` (or ``timeout`` seconds), then a few more turns for the repaint."""
        t0 = time.time()
        while not cond() and time.time() - t0 < timeout:
            app.processEvents()
            time.sleep(0.01)
        for _ in range(5):
            app.processEvents()

    if args.only == "first":
        size = tuple(int(x) for x in args.size.split("x"))
        errors = first_sight_shots(app, lambda name: QSettings(str(tmp / f"{name}.ini"), QSettings.Format.IniFormat),
                                   out, tmp, args.image or _default_image(tmp), size, wait,
                                   args.model or _default_model())
        if errors:
            print("errors:", errors)
        return 1 if errors else 0
    if args.only == "prompts":
        size = tuple(int(x) for x in args.size.split("x"))
        errors = prompt_shots(app, settings, out, tmp, args.image or _default_image(tmp), size, wait)
        if errors:
            print("errors:", errors)
        return 1 if errors else 0
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
    wait(lambda: win.model is not None)
    image = args.image or _default_image(tmp)
    win.open_images([image])
    wait(lambda: win.session.result is not None)
    if win.session.result is None:
        print("no result:", errors)
        return 1
    if args.only == "mechanistic":
        mechanistic_shots(app, win, out, wait)
        print("errors:", errors) if errors else None
        return 1 if errors else 0
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
    # issue 23: feature PCA fitted over two open images (one fit: comparable colours), in the window and in Compare
    from vitviz.document.comparison import CompareSpec

    zoom = _zoomed(image, tmp)
    win.session.add_images([zoom])
    win.set_view("feature_pca")
    win.set_layer(r.num_layers - 1)
    win.controls.pca_joint.setChecked(True)
    wait(lambda: not win.session.joint_missing() and "reading" not in win.session.describe_view())
    shot("17_feature_pca_joint_over_two_images")
    cw = win.show_compare(CompareSpec(layout="views", views=("feature_pca",), images=(image, zoom)))
    cw.resize(1100, 640)
    wait(lambda: cw.comparison is not None and len(cw.comparison.cells) == 2)
    wait(lambda: False, timeout=0.5)
    cw.grab().save(str(out / "18_compare_feature_pca_joint.png"))
    print(out / "18_compare_feature_pca_joint.png")
    cw.close()
    win.controls.pca_joint.setChecked(False)
    # issue 23: a feature model (the same network without its classifier): no gradient view without a similarity
    # target, then "similar to this patch" (the cat's face) explained by LeGrad and by relevance
    feature = _feature_model(win.model)
    win.controller.adopt(feature, "memory")
    wait(lambda: win.session.result is not None and win.session.result.num_classes == 0)
    win.set_view("legrad")
    shot("19_feature_model_without_a_target")
    fr = win.session.result
    gh, gw = fr.grid
    win.set_query((gh * 2 // 5) * gw + gw // 2)
    win.targets.similar_to_patch(fr.source)
    wait(lambda: win.session.result is not fr and win.session.result.target_spec is not None)
    shot("20_legrad_similar_to_a_patch")
    win.set_view("relevance")
    shot("21_relevance_similar_to_a_patch")
    prev = win.session.result
    win.targets.similar_to_image(zoom)
    wait(lambda: win.session.result is not prev and "image" in (win.session.result.target_text() or ""))
    win.set_view("legrad")
    shot("22_legrad_similar_to_another_image")
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
