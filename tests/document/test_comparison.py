"""Comparison grids (vitviz.document.comparison): layouts, each panel's map against the window's own computation,
shared and per-panel colour scales against vitviz.render.scales, and the exported figure's panels and labels."""

import itertools
import re
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from vitviz import views
from vitviz.document import appearance
from vitviz.document import comparison as cmp
from vitviz.document.session import Session
from vitviz.imaging import load_image
from vitviz.render import figures
from vitviz.render.scales import scale_for


def _photo(path, seed, h=70, w=110):
    rng = np.random.default_rng(seed)
    Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)).save(path)
    return str(path)


@pytest.fixture
def world(tmp_path, tiny_model):
    from vitviz.pipeline import Pipeline

    pipe = Pipeline(tiny_model)
    paths = [_photo(tmp_path / f"img{i}.png", i) for i in range(3)]
    base = Session()
    base.add_images(paths)
    base.set_result(pipe.run(load_image(paths[0]), source=paths[0]))
    base.set_options(layer=1, query=6)

    def run(spec):
        return {(src, t): pipe.run(load_image(src), source=src, target=t) for src, t in cmp.needed_runs(spec, base)}

    return {"pipe": pipe, "paths": paths, "base": base, "run": run}


def _alone(result, options):
    """The map the main window would show for ``result`` at ``options`` (an independent document)."""
    s = Session()
    s.set_result(result)
    s.options = s.clamped(options)
    return s


def test_images_by_views_grid(world):
    base, paths = world["base"], world["paths"]
    spec = cmp.CompareSpec(layout="views", views=("cls", "rollout", "token_sim"), images=tuple(paths[:2]),
                           shared_scale=False)
    runs = cmp.needed_runs(spec, base)
    assert runs == [(paths[1], None)]  # the shown image is the window's own result
    comp = cmp.build_comparison(spec, base, world["run"](spec))
    assert (comp.nrows, comp.ncols, len(comp.cells)) == (2, 3, 6)
    assert comp.col_labels == ("[CLS] attention", "Rollout", "Token similarity")
    assert comp.row_labels == ("img0.png", "img1.png")
    for c in comp.cells:
        src = paths[c.row]
        assert c.session.result.source == src
        alone = _alone(c.session.result, replace(base.options, view=spec.views[c.col]))
        np.testing.assert_array_equal(c.map, alone.current_map())
        assert c.scale == alone.levels()  # per panel: the window's scale for that map alone
    assert comp.cell(0, 0).session.result is base.result
    # the window's options (layer, query) are the panels' options
    assert {c.session.options.layer for c in comp.cells} == {1}
    assert {c.session.options.query for c in comp.cells} == {6}


def test_shared_scale_spans_each_view_and_only_that_view(world):
    base, paths = world["base"], world["paths"]
    spec = cmp.CompareSpec(layout="views", views=("cls", "token_sim"), images=tuple(paths), shared_scale=True)
    comp = cmp.build_comparison(spec, base, world["run"](spec))
    assert comp.shared is None  # two views: two scales
    for col, key in enumerate(spec.views):
        cells = [c for c in comp.cells if c.col == col]
        assert len({id(c.scale) for c in cells}) == 1
        stack = np.concatenate([c.map.ravel() for c in cells]).astype(np.float64)
        v = views.get(key)
        expected = scale_for(stack, mode="shared", shared=stack, signed=True if v.signed else None,
                             percentile=base.options.percentile, cmap=base.options.cmap,
                             exclude=np.concatenate([c.session.artefact_grid().ravel() for c in cells])
                             if any(c.session.artefact_grid().any() for c in cells) else None)
        assert cells[0].scale == expected
    assert comp.cell(0, 1).scale.diverging and not comp.cell(0, 0).scale.diverging
    # one view: one scale for all, which the figure draws as one bar
    spec1 = replace(spec, views=("cls",))
    comp1 = cmp.build_comparison(spec1, base, world["run"](spec1))
    assert comp1.shared is not None and cmp.comparison_figure(comp1).scale is comp1.shared


def test_one_view_over_layers(world):
    base = world["base"]
    spec = cmp.CompareSpec(layout="layers", views=("cls",), layers=(0, 2, 1))
    comp = cmp.build_comparison(spec, base)
    assert [c.label for c in comp.cells] == ["layer 0", "layer 2", "layer 1"]
    assert comp.nrows * comp.ncols == 3 and comp.nrows == 1  # a prime count: one row, no empty cell
    for c, layer in zip(comp.cells, (0, 2, 1)):
        np.testing.assert_array_equal(c.map, base.map_for(views.get("cls"), replace(base.options, view="cls",
                                                                                     layer=layer)))
    assert "over layers" in comp.title
    # a cumulative view moves its start layer; the default picks evenly spaced layers
    comp = cmp.build_comparison(cmp.CompareSpec(layout="layers", views=("rollout",)), base)
    assert [c.label for c in comp.cells] == ["start layer 0", "start layer 1", "start layer 2"]
    with pytest.raises(ValueError, match="does not change with the layer"):
        cmp.build_comparison(cmp.CompareSpec(layout="layers", views=("pos_sim",)), base)
    with pytest.raises(ValueError, match="out of range"):
        cmp.build_comparison(cmp.CompareSpec(layout="layers", views=("cls",), layers=(0, 9)), base)


def test_one_view_per_class_matches_a_run_for_that_class(world):
    base, pipe, src = world["base"], world["pipe"], world["paths"][0]
    t = base.result.target
    others = [c for c in (3, 1, 4, 0, 2) if c != t][:3]
    spec = cmp.CompareSpec(layout="classes", views=("relevance",), classes=(others[0], t, others[1], others[2]))
    runs = cmp.needed_runs(spec, base)
    assert sorted(runs) == sorted((src, c) for c in others)  # the window's own target needs no run
    comp = cmp.build_comparison(spec, base, world["run"](spec))
    assert (comp.nrows, comp.ncols) == (2, 2)
    labels = [c.label for c in comp.cells]
    for c, cls in zip(comp.cells, spec.classes):
        assert labels[comp.cells.index(c)].startswith(base.result.label(cls))
        independent = pipe.run(load_image(src), source=src, target=cls)  # brute force: its own run
        np.testing.assert_allclose(c.map, _alone(independent, replace(base.options, view="relevance")).current_map(),
                                   rtol=1e-5, atol=1e-7)
    maps = [c.map for c in comp.cells]
    assert not np.allclose(maps[0], maps[2])  # the classes differ
    with pytest.raises(ValueError, match="does not depend on the class"):
        cmp.build_comparison(replace(spec, views=("cls",)), base)
    with pytest.raises(ValueError, match="out of range"):
        cmp.build_comparison(replace(spec, classes=(9,)), base, world["run"](spec))
    # default: the top classes
    assert cmp.default_classes(base.result) == tuple(i for i, _, _ in base.result.top_k(4))


def test_missing_runs_and_too_many_panels_are_said(world, monkeypatch):
    base, paths = world["base"], world["paths"]
    spec = cmp.CompareSpec(layout="views", views=("cls",), images=tuple(paths))
    with pytest.raises(ValueError, match="img1.png has not been analysed yet"):
        cmp.build_comparison(spec, base, {})
    many = cmp.CompareSpec(layout="layers", views=("cls",), layers=(0, 1, 2))
    assert len(cmp.build_comparison(many, base).cells) == 3
    monkeypatch.setattr(cmp, "MAX_PANELS", 2)
    with pytest.raises(ValueError, match="3 panels is too many to compare"):
        cmp.build_comparison(many, base)
    with pytest.raises(ValueError, match="nothing to compare"):
        cmp.build_comparison(spec, Session())
    with pytest.raises(ValueError, match="layout must be one of"):
        cmp.CompareSpec(layout="grid")


def test_exported_comparison_has_every_panel_and_label(world, tmp_path):
    base, paths = world["base"], world["paths"]
    spec = cmp.CompareSpec(layout="views", views=("cls", "rollout", "relevance", "token_norm"),
                           images=tuple(paths[:2]))
    comp = cmp.build_comparison(spec, base, world["run"](spec))
    fig = cmp.comparison_figure(comp)
    assert len(fig.panels) == 8 and fig.ncols == 4 and fig.nrows == 2
    assert fig.col_labels == comp.col_labels and fig.row_labels == comp.row_labels
    svg = figures.save(fig, tmp_path / "grid.svg")
    text = svg.read_text(encoding="utf-8")
    assert len(re.findall(r"<image\b", text)) == 8  # one embedded picture per panel
    words = " ".join(re.sub(r"<[^>]+>", " ", t) for t in re.findall(r"<text\b.*?</text>", text, re.DOTALL))
    words = words.replace("&amp;", "&")
    for label in comp.col_labels + comp.row_labels:
        assert label in words, label
    assert comp.title.split(" · ")[0] in words
    # each column shares one scale: one colour bar per column, under its last panel, naming the view's quantity
    built = figures.build(fig)
    assert len(built.axes) == 8 + 4
    bars = [ax for ax in built.axes if ax.get_xlabel()]
    assert sorted(ax.get_xlabel() for ax in bars) == sorted(appearance.quantity_text(c.view) for c in comp.cells[4:])
    # each panel on its own scale: a bar under every panel
    own = cmp.comparison_figure(cmp.build_comparison(replace(spec, shared_scale=False), base, world["run"](spec)))
    drawn = figures.build(own)
    assert len(drawn.axes) == 8 + 8
    # the small bars' tick labels never overlap (measured by matplotlib's renderer)
    drawn.canvas.draw()
    renderer = drawn.canvas.get_renderer()
    for ax in [a for a in drawn.axes if a.get_xlabel()]:
        boxes = sorted((t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()),
                       key=lambda b: b.x0)
        assert boxes
        assert all(a.x1 < b.x0 for a, b in itertools.pairwise(boxes)), ax.get_xlabel()
    png = figures.save(fig, tmp_path / "grid.png", scale="native")
    with Image.open(png) as im:
        size = im.size
    h, w = base.result.image_size
    assert size[0] >= 4 * w and size[1] >= 2 * h


def test_small_colour_bars_never_overlap_their_tick_labels():
    """Five panels in a row, each with its own bar over 0.0015 .. 0.0092 (the real ViT-Ti's layer 3 [CLS]
    attention): matplotlib's own text extents do not overlap (every other tick is dropped when they would)."""
    from vitviz.render.scales import ColourScale

    rng = np.random.default_rng(0)
    photo = (rng.random((300, 451, 3)) * 255).astype(np.uint8)
    scale = ColourScale(lo=0.0015, hi=0.0092, mode="robust")
    panels = tuple(figures.Panel(photo=photo, values=rng.random((300, 451)) * 0.01, scale=scale, label=f"layer {i}",
                                 colorbar_label="attention weight") for i in range(5))
    fig = figures.build(figures.FigureSpec(panels=panels, ncols=5, scale=None))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    bars = [a for a in fig.axes if a.get_xlabel()]
    assert len(bars) == 5
    for ax in bars:
        boxes = sorted((t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()),
                       key=lambda b: b.x0)
        assert len(boxes) >= 2
        assert all(a.x1 < b.x0 for a, b in itertools.pairwise(boxes))
