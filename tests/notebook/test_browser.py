"""The notebook viewer in a real browser: JupyterLab on 127.0.0.1 runs a notebook that builds a viewer on the bundled
demo model, and Playwright drives it on the system's Chromium. The canvas's pixels are compared with the library's
own drawing of the same view (:func:`vitviz.render.figures.composite` of the window's panel), computed here from a
separate run of the demo model; moving the layer slider (keyboard), clicking a patch and choosing another view
change the picture as the library says.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("anywidget")
pytest.importorskip("jupyterlab")
pytest.importorskip("playwright")

from lab_server import chromium, chromium_path, open_notebook, running_lab, write_notebook  # noqa: E402

from vitviz.document import appearance  # noqa: E402

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(chromium_path() is None, reason="no Chromium found (Debian: apt-get install "
                                                                  "chromium)")]

WAIT_MS = 240_000  # generous: the machines that run this are busy


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    write_notebook(root / "viewer.ipynb", "import vitviz.notebook\nviewer = vitviz.notebook.Viewer('demo')\nviewer")
    with running_lab(root) as lab:
        yield lab


@pytest.fixture(scope="module")
def viewer_page(lab):
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        open_notebook(page, lab, "viewer.ipynb", timeout_ms=WAIT_MS)
        yield page


@pytest.fixture(scope="module")
def reference():
    """The library's session on the demo model's first sample (what the notebook's viewer shows first)."""
    from vitviz.demo import load_demo_model, sample_images
    from vitviz.document.session import Session
    from vitviz.imaging import load_image
    from vitviz.pipeline import run_inference

    path = str(sample_images()[0])
    s = Session()
    s.images = [path]
    s.set_result(run_inference(load_demo_model(), load_image(path).image, source=path))
    return s


def _canvas(page) -> np.ndarray:
    """The viewer canvas's own pixels (RGB)."""
    data = page.evaluate("""() => { const c = document.querySelector('.vitviz canvas.vitviz-map');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height);
        return {w: c.width, h: c.height, px: Array.from(d.data)}; }""")
    return np.asarray(data["px"], dtype=np.uint8).reshape(data["h"], data["w"], 4)[..., :3]


def _library(session) -> np.ndarray:
    from vitviz.document.panel import panel_of
    from vitviz.render.figures import composite

    return composite(panel_of(session, on_image=True))


def _same_share(got: np.ndarray, want: np.ndarray) -> float:
    """The share of pixels equal up to the colour of a step of the lookup table (and rounding)."""
    assert got.shape == want.shape
    return float((np.abs(got.astype(int) - want.astype(int)).max(axis=-1) <= 6).mean())


def _assert_same_picture(got: np.ndarray, want: np.ndarray) -> None:
    """Equal on nearly every pixel (the browser outlines the query patch; the figure maps the crop's edge pixels
    through the preprocessing geometry)."""
    share = _same_share(got, want)
    assert share > 0.97, f"{1 - share:.1%} of the pixels differ"


def _painted(page, prefix: str) -> None:
    page.wait_for_function(f"() => (document.querySelector('.vitviz').dataset.painted || '').startsWith({prefix!r})",
                           timeout=WAIT_MS)


def test_the_canvas_shows_the_library_map(viewer_page, reference):
    page = viewer_page
    _painted(page, "cls|")
    reference.set_options(view="cls", layer=0)
    _assert_same_picture(_canvas(page), _library(reference))


def test_the_layer_slider_repaints_as_the_library_says(viewer_page, reference):
    page = viewer_page
    _painted(page, "cls|")
    before = _canvas(page)
    slider = page.locator(".vitviz input.vitviz-layer")
    slider.focus()
    page.keyboard.press("ArrowRight")  # the keyboard moves the slider
    _painted(page, "cls|1|")
    reference.set_options(view="cls", layer=1)
    got = _canvas(page)
    _assert_same_picture(got, _library(reference))
    reference.set_options(view="cls", layer=0)
    assert _same_share(got, _library(reference)) < 0.9  # the comparison tells the layers apart
    assert _same_share(got, before) < 0.9


def _shown(page) -> dict[str, str]:
    view, layer, query, head = page.evaluate("() => document.querySelector('.vitviz').dataset.painted").split("|")[:4]
    return {"view": view, "layer": int(layer), "query": int(query), "head": head}


def test_clicking_a_patch_shows_its_query_view(viewer_page, reference):
    page = viewer_page
    _painted(page, "cls|")
    row, col = 3, 9
    query = row * reference.result.grid[1] + col
    x, y, w, h = reference.patch_rect(query)
    box = page.locator(".vitviz canvas.vitviz-map").bounding_box()
    k = box["width"] / reference.result.image_size[1]
    page.mouse.click(box["x"] + (x + w / 2) * k, box["y"] + (y + h / 2) * k)
    _painted(page, "query|")
    shown = _shown(page)
    assert shown["query"] == query
    reference.set_options(view="query", layer=shown["layer"], query=query)
    _assert_same_picture(_canvas(page), _library(reference))
    hover = page.locator(".vitviz .vitviz-hover").inner_text()
    assert f"patch (row {row}, col {col})" in hover


def test_the_view_selector_switches_views(viewer_page, reference):
    page = viewer_page
    page.locator(".vitviz select.vitviz-view").select_option("rollout")
    _painted(page, "rollout|")
    shown = _shown(page)
    reference.set_options(view="rollout", query=shown["query"])
    reference.set_slider(shown["layer"])
    _assert_same_picture(_canvas(page), _library(reference))
    title = page.locator(".vitviz .vitviz-title").inner_text()
    assert title == appearance.title(reference.describe_view(), reference.options)
    # no message left (waited for: a worker's progress line may still be clearing on a busy machine)
    page.wait_for_function("() => document.querySelector('.vitviz .vitviz-status').innerText === ''",
                           timeout=WAIT_MS)


def test_the_next_image_runs_in_the_kernel_and_shows_its_map(viewer_page):
    """The ▶ button: the kernel runs the next sample on the viewer's worker thread, the browser paints its map."""
    from vitviz.demo import load_demo_model, sample_images
    from vitviz.document.session import Session
    from vitviz.imaging import load_image
    from vitviz.pipeline import run_inference

    page = viewer_page
    page.locator(".vitviz select.vitviz-view").select_option("cls")
    _painted(page, "cls|")
    page.locator(".vitviz button.vitviz-next").click()
    page.wait_for_function("() => { const r = document.querySelector('.vitviz');"
                           " return (r.dataset.painted || '').endsWith('|1') && !r.dataset.busy; }", timeout=WAIT_MS)
    assert "02_" in page.locator(".vitviz .vitviz-image").inner_text()
    path = str(sample_images()[1])
    s = Session()
    s.images = [path]
    s.set_result(run_inference(load_demo_model(), load_image(path).image, source=path))
    shown = _shown(page)
    s.set_options(view="cls", layer=shown["layer"], query=shown["query"])
    _assert_same_picture(_canvas(page), _library(s))
