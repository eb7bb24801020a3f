"""The notebook viewer driven through its traits, without a browser: the bytes it sends equal the library's maps
(computed here from a separate run of the model), bad input is one line in the widget and changes nothing, the
state is a session file's and a session file opens as a viewer, export and the static PNG."""

from __future__ import annotations

import base64
import io
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("anywidget")

from vitviz import views  # noqa: E402
from vitviz.document import appearance  # noqa: E402
from vitviz.document import state as st  # noqa: E402
from vitviz.document.session import Session  # noqa: E402
from vitviz.notebook import Viewer  # noqa: E402
from vitviz.notebook.routing import no_display, notebook_wanted  # noqa: E402
from vitviz.pipeline import run_inference  # noqa: E402


@pytest.fixture
def photos(tmp_path):
    """Two random photos written as PNG files."""
    rng = np.random.default_rng(1)
    paths = []
    for i, (h, w) in enumerate([(40, 48), (36, 36)]):
        p = tmp_path / f"photo{i}.png"
        Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)).save(p)
        paths.append(str(p))
    return paths


@pytest.fixture
def model_file(tiny_model, tmp_path):
    from vitviz.model import save_checkpoint

    return str(save_checkpoint(tiny_model, tmp_path / "tiny.safetensors"))


@pytest.fixture
def viewer(tiny_model, photos):
    v = Viewer(tiny_model, photos)
    yield v
    v.close()


def _reference(model, photo, target=None, **options) -> Session:
    """The library's session on a separate run of ``model`` on ``photo`` at ``options``."""
    s = Session()
    s.images = [photo]
    s.set_result(run_inference(model, Image.open(photo), source=photo, target=target))
    s.set_options(**options)
    return s


def _plain(state: st.SessionState) -> st.SessionState:
    """``state`` without the relative paths a file adds when it is read (they depend on where it was written)."""
    return replace(state, images=tuple(replace(i, relative="") for i in state.images), model_relative="")


def _frames(v: Viewer) -> tuple[np.ndarray, np.ndarray]:
    gh, gw = v.meta["grid"]
    n = v.meta["count"]
    shape = (n, gh, gw, 4) if v.meta["rgb"] else (n, gh, gw)
    return (np.frombuffer(v.frames, dtype=np.uint8).reshape(shape),
            np.frombuffer(v.values, dtype=np.float16).reshape(n, gh, gw))


def _check_view(v: Viewer, ref: Session, **fixed) -> int:
    """Every frame of the viewer's current view equals the reference's map at that slider position; returns the
    number of frames checked."""
    view = views.get(v.view)
    index, values = _frames(v)
    first = v.meta["first"]
    for i in range(v.meta["count"]):
        changes = {view.slider: first + i} if view.slider else {}
        ref.set_options(view=v.view, **fixed, **changes)
        m = ref.current_map()
        if view.rgb:
            rgb = ref.rgb_map()
            assert np.array_equal(index[i], np.round(np.clip(rgb, 0, 1) * 255).astype(np.uint8))
            continue
        assert m is not None, v.view
        m = m.astype(np.float64)
        absmax = np.abs(m).max() or 1.0
        # the read-out values: the map divided by its largest magnitude, as float16
        np.testing.assert_array_equal(values[i], (m / absmax).astype(np.float16))
        np.testing.assert_allclose(values[i].astype(np.float64) * v.meta["frames"][i]["absmax"], m,
                                   rtol=1e-3, atol=1e-3 * absmax)
        # the colours: the row of the lookup table the figures colour each patch with
        scale = ref.levels()
        expected = np.round(scale.normalise(m) * 255).astype(np.uint8)
        np.testing.assert_array_equal(index[i], expected)
        assert v.meta["frames"][i]["scale"]["cmap"] == appearance.colormap(scale, ref.options)
        assert v.meta["frames"][i]["title"] == appearance.title(ref.describe_view(), ref.options)
    return v.meta["count"]


def test_every_view_sends_the_library_map_at_every_layer(viewer, tiny_model, photos):
    ref = _reference(tiny_model, photos[0])
    checked = []
    for view in views.all_views():
        info = next(x for x in viewer.views if x["key"] == view.key)
        if not info["available"]:
            continue
        viewer.view = view.key
        assert viewer.status == "", viewer.status
        assert viewer.view == view.key
        checked.append((view.key, _check_view(viewer, ref)))
    keys = [k for k, _ in checked]
    assert {"cls", "query", "rollout", "relevance", "legrad", "gradcam", "token_sim", "feature_pca"} <= set(keys)
    assert dict(checked)["cls"] == 3  # one frame per layer (tiny_model: 3 layers x 4 heads)


def test_head_and_query_change_the_maps_as_the_library_says(viewer, tiny_model, photos):
    ref = _reference(tiny_model, photos[0])
    viewer.view = "cls"
    before = viewer.frames
    viewer.head = "2"
    assert viewer.frames != before
    _check_view(viewer, ref, head=2)
    viewer.view = "query"
    viewer.query = 5
    _check_view(viewer, ref, head=2, query=5)
    assert viewer.session.options.query == 5


def test_moving_the_layer_keeps_the_maps_and_moves_the_session(viewer):
    viewer.view = "cls"
    frames, heads = viewer.frames, viewer.head_frames
    viewer.layer = 0
    viewer.layer = 2
    assert viewer.frames == frames  # every layer's frame is already in the browser
    assert viewer.session.options.layer == 2
    assert viewer.head_meta["layer"] == 2 and viewer.head_frames != heads  # the heads grid follows


def test_heads_grid_holds_every_head_of_the_layer_on_one_scale(viewer, tiny_model, photos):
    viewer.view, viewer.layer = "cls", 1
    ref = _reference(tiny_model, photos[0], view="cls", layer=1)
    maps = ref.head_maps(1)
    hm = viewer.head_meta
    assert hm["count"] == 4  # tiny_model: 3 layers x 4 heads
    got = np.frombuffer(viewer.head_values, dtype=np.float16).reshape(hm["count"], *hm["grid"])
    np.testing.assert_allclose(got.astype(np.float64) * hm["absmax"], maps, rtol=2e-3, atol=2e-3 * hm["absmax"])


def test_unavailable_views_are_listed_with_the_reason(tmp_path, photos):
    from vitviz.model import create_model

    feature = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4,
                           num_classes=0).eval()
    v = Viewer(feature, photos[:1])
    try:
        listed = {x["key"]: x for x in v.views}
        assert set(listed) == {view.key for view in views.all_views()}
        assert not listed["relevance"]["available"]
        assert "feature model" in listed["relevance"]["reason"]
        assert listed["cls"]["available"] and listed["cls"]["reason"] == ""
    finally:
        v.close()


def test_a_new_image_runs_on_the_worker_and_shows(viewer, tiny_model, photos):
    viewer.image_index = 1
    viewer.wait()
    assert viewer.status == "" and viewer.busy == ""
    assert viewer.session.result.source == photos[1]
    assert viewer.photo_meta["source"] == "photo1.png"
    _check_view(viewer, _reference(tiny_model, photos[1]))


def test_a_new_image_runs_off_the_thread_that_asked(viewer, monkeypatch):
    import threading

    ran_on = []
    run = viewer.pipeline.run

    def recording(*args, **kwargs):
        ran_on.append(threading.current_thread())
        return run(*args, **kwargs)

    monkeypatch.setattr(viewer.pipeline, "run", recording)
    viewer.image_index = 1
    viewer.wait()
    assert ran_on and threading.current_thread() not in ran_on
    assert viewer.session.index == 1


def test_an_unreadable_image_is_one_line_and_changes_nothing(viewer, tmp_path):
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"not an image at all")
    frames, images, source = viewer.frames, list(viewer.images), viewer.session.result.source
    viewer.add_images([str(bad)])
    viewer.wait()
    assert "broken.png" in viewer.status and "\n" not in viewer.status
    assert viewer.images == images and viewer.frames == frames
    assert viewer.session.result.source == source
    assert viewer.image_index == 0


def test_a_missing_image_file_is_refused_with_its_name(viewer, tmp_path):
    with pytest.raises(ValueError, match="nope.png"):
        viewer.add_images([str(tmp_path / "nope.png")])


@pytest.mark.parametrize("text, words", [("99", "out of range"), ("giraffe", "unknown target"),
                                         ("similar:nowhere.png", "nowhere.png"), ("similar:photo1.png@9,9",
                                                                                  "outside")])
def test_a_bad_target_is_one_line_and_changes_nothing(viewer, text, words):
    frames, label = viewer.frames, viewer.target_label
    viewer.target = text
    viewer.wait()
    assert words in viewer.status and "\n" not in viewer.status
    assert viewer.target == "top" and viewer.frames == frames and viewer.target_label == label


def test_a_target_is_explained_and_kept_for_the_next_image(viewer, tiny_model, photos):
    viewer.view = "relevance"
    viewer.target = "square"
    viewer.wait()
    assert viewer.status == "" and viewer.target_label == "square"
    _check_view(viewer, _reference(tiny_model, photos[0], target=1))
    viewer.image_index = 1
    viewer.wait()
    assert viewer.session.result.target == 1
    _check_view(viewer, _reference(tiny_model, photos[1], target=1))


def test_similarity_to_a_patch_of_another_open_image(viewer):
    viewer.view = "relevance"
    viewer.target = "similar:photo1.png@1,2"
    viewer.wait()
    assert viewer.status == ""
    assert "patch (1, 2)" in viewer.target_label and "photo1.png" in viewer.target_label


def test_prompts_without_a_text_tower_are_one_line_and_change_nothing(viewer):
    frames = viewer.frames
    viewer.prompts = "a cat; a dog"
    viewer.wait()
    assert viewer.status.startswith("prompts") and "\n" not in viewer.status
    assert viewer.prompts == "" and viewer.frames == frames


def test_an_unknown_view_or_colormap_is_one_line_and_changes_nothing(viewer):
    viewer.view = "rollout"
    frames = viewer.frames
    viewer.view = "nonsense"
    assert "unknown view 'nonsense'" in viewer.status
    assert viewer.view == "rollout" and viewer.frames == frames
    viewer.cmap = "rainbowish"
    assert "rainbowish" in viewer.status and viewer.cmap == "inferno"


def test_state_is_a_session_file_and_a_session_file_opens_as_a_viewer(model_file, photos, tmp_path):
    v = Viewer(model_file, photos)
    try:
        v.target = "square"
        v.wait()
        v.view, v.head, v.layer, v.cmap = "cls", "1", 2, "viridis"
        path = st.save_state(v.state, tmp_path / "s.vitviz.json")
        assert _plain(st.read_state(path)) == _plain(v.state)
        w = Viewer.from_state(path)
        try:
            assert w.state == v.state
            assert (w.view, w.head, w.layer, w.cmap) == ("cls", "1", 2, "viridis")
            assert w.frames == v.frames and w.values == v.values
            assert w.target == "1" and w.session.result.target == 1  # the class, kept for the next images
            w.image_index = 1
            w.wait()
            assert w.session.result.target == 1
        finally:
            w.close()
    finally:
        v.close()


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_export_writes_the_figure_with_the_state(model_file, photos, tmp_path, suffix):
    v = Viewer(model_file, photos)
    try:
        v.view = "rollout"
        out = v.export(tmp_path / f"fig{suffix}")
        assert out.stat().st_size > 1000
        assert _plain(st.read_state(out)) == _plain(v.state)
    finally:
        v.close()


def test_export_over_the_figure_limit_is_refused_before_the_map_is_drawn(viewer, tmp_path, monkeypatch):
    """The figure limit is known from the image's size: one ValueError naming the image, nothing built or written."""
    from vitviz.notebook import viewer as viewer_module
    from vitviz.render.figures import layout

    h, w = viewer.session.result.image_size
    monkeypatch.setattr(layout, "MAX_FIGURE_PIXELS", h * w - 1)
    monkeypatch.setattr(viewer_module, "view_figure", lambda s: pytest.fail("the figure was built"))
    with pytest.raises(ValueError) as ei:
        viewer.export(tmp_path / "fig.png", scale="native")
    assert str(ei.value).startswith(f"{viewer.session.result.source}: the figure would be at least {w} x {h} = ")
    assert not (tmp_path / "fig.png").exists()


def test_the_mime_bundle_carries_a_png_of_the_current_view(viewer):
    from vitviz.document.panel import render_view

    viewer.view = "rollout"
    bundle = viewer._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert "application/vnd.jupyter.widget-view+json" in data
    png = np.asarray(Image.open(io.BytesIO(base64.b64decode(data["image/png"]))).convert("RGB"))
    assert np.array_equal(png, render_view(viewer.session, "native"))


def test_show_returns_the_viewer_where_no_window_can_show(monkeypatch, tiny_model, photos):
    import vitviz

    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.setattr("vitviz._util.display._app_running", lambda: False)  # (the GUI tests' QApplication)
    assert no_display() and notebook_wanted()
    v = vitviz.show(tiny_model, photos[:1])
    try:
        assert isinstance(v, Viewer) and v.session.result is not None
    finally:
        v.close()
    monkeypatch.setenv("DISPLAY", ":0")  # (and Qt's X11 plugin finds its libxcb-cursor, whatever this machine has)
    monkeypatch.setattr("ctypes.util.find_library", lambda name: f"lib{name}.so")
    assert not no_display() and not notebook_wanted()


def test_a_function_target_is_checked_before_the_viewer_shows(tiny_model, photos):
    from vitviz.capture.targets import TargetError

    with pytest.raises(TargetError):
        Viewer(tiny_model, photos[:1], target=lambda out: "not a tensor")
    v = Viewer(tiny_model, photos[:1], target=lambda out: out[3] - out[1])
    try:
        assert v.session.result.target_spec is not None
        assert torch.is_tensor(v.session.result.logits)
    finally:
        v.close()


def test_tokens_left_out_of_the_scale_travel_as_neutral_cells(session_of):
    """A high-norm patch token (planted, as ViT-Ti's corner tokens are) is left out of the scale: its cell travels in
    the frame's ``neutral`` list with the figures' grey, so the browser paints it grey, never a scale colour; the
    other cells do not."""
    from vitviz.notebook.payload import view_frames
    from vitviz.render.colormaps import NEUTRAL_RGB

    s = session_of(h=40, w=40)
    r = s.result
    t = r.num_prefix_tokens + 2 * r.grid[1] + 1  # patch (2, 1)
    r.capture.tokens[r.num_layers // 2:, t] *= 50.0
    s.set_result(r)
    s.set_options(view="token_norm", layer=r.num_layers - 1)
    frames = view_frames(s)
    last = frames.meta["frames"][-1]
    assert [2, 1] in last["neutral"] and len(last["neutral"]) < r.grid[0] * r.grid[1]
    assert tuple(last["neutral_rgb"]) == tuple(NEUTRAL_RGB)


def _record_messages(v: Viewer) -> list[set[str]]:
    """The keys of each state message the viewer sends to the browser from now on."""
    sent: list[set[str]] = []
    send = v.send_state
    v.send_state = lambda key=None: (sent.append({key} if isinstance(key, str) else set(key or ())), send(key))[1]
    return sent


def test_a_change_reaches_the_browser_in_one_message(viewer, photos):
    """The maps, their layout and the slider's layer go in one message: a browser that got them apart painted the new
    view's maps at the last view's layer in between (a loaded machine's browser test caught the mix)."""
    viewer.view = "cls"
    viewer.layer = 1
    sent = _record_messages(viewer)
    viewer.view = "rollout"
    with_maps = [keys for keys in sent if "meta" in keys]
    assert len(with_maps) == 1 and {"frames", "values", "layer"} <= with_maps[0], sent
    sent.clear()
    viewer.image_index = 1  # a new image: its photo comes with its maps
    viewer.wait()
    with_maps = [keys for keys in sent if "meta" in keys]
    assert len(with_maps) == 1 and {"photo", "frames", "values"} <= with_maps[0], sent
