"""What a panel shows, assembled once (vitviz.document.panel): the Panel of a session's view and the heads grid are
what the canvas, the Compare window and the figure files draw. No Qt."""

from dataclasses import replace

import numpy as np
import pytest

from vitviz.document import appearance
from vitviz.document import comparison as cmp
from vitviz.document import panel as P
from vitviz.render import figures as F


@pytest.fixture
def session(session_of):
    return session_of(50, 80, "/here/cat.png")


def _plant_artefact(s, row, col):
    """Make patch (row, col) a high-norm token in the later layers, as real ViTs' artefacts are."""
    r = s.result
    tokens = r.capture.tokens.clone()
    tokens[tokens.shape[0] // 2:, r.num_prefix_tokens + row * r.grid[1] + col] *= 40.0
    r.capture.tokens = tokens
    s.set_result(r)


def test_the_panel_holds_what_the_session_shows(session):
    _plant_artefact(session, 1, 2)
    session.set_options(view="query", query=5, mask_keep=0.5, mask_style="dim", interpolation="bilinear")
    p = P.panel_of(session)
    s, r = session, session.result
    excluded = appearance.excluded_grid(s.options, s.artefact_grid)
    grey = np.repeat(np.repeat(excluded, 8, axis=0), 8, axis=1)  # left out of the scale: drawn neutral
    np.testing.assert_array_equal(p.grid_values[~grey], s.display_map()[~grey])
    assert np.isnan(p.grid_values[grey]).all() and p.neutral == ((1, 2),)
    assert p.values is None  # the screens draw the grid map; a figure asks for the map on the image's pixels
    assert p.scale == s.levels() and p.opacity == s.options.opacity
    assert p.marker == s.patch_rect(5) and p.outlined == ((1, 2),) and p.grid == r.grid
    y0, x0, y1, x1 = s.crop_rect_yx()
    assert p.crop == (x0, y0, x1 - x0, y1 - y0)
    assert p.patch_rect(*divmod(5, r.grid[1])) == s.patch_rect(5)  # the outlines lie where the window's do
    np.testing.assert_array_equal(p.mask, appearance.mask(s.current_map(), s.view, s.options, s.cache))
    assert p.mask_style == "dim" and p.title == appearance.title(s.describe_view(), s.options)
    assert p.colorbar_label == appearance.quantity_text(s.view)
    assert p.scale_text == appearance.scale_text(s.options, has_artefacts=True) and p.unavailable is None
    assert p.caption.startswith(f"{r.model_name} · cat.png · colour: ")
    assert "artefact tokens (grey, dashed)" in p.caption
    q = P.panel_of(s, on_image=True)
    np.testing.assert_array_equal(q.values, s.image_map())
    # the figure of the view draws exactly that panel
    spec = P.view_figure(s)
    (f,) = spec.panels
    np.testing.assert_array_equal(f.values, q.values)
    assert (f.marker, f.outlined, f.crop, f.scale) == (q.marker, q.outlined, q.crop, q.scale)
    assert spec.title == q.title and spec.caption == q.caption and spec.colorbar_label == q.colorbar_label


def test_a_view_without_a_map_says_why(session):
    r = session.result
    session.result = replace(r, capture=replace(r.capture, attention_grads=None))
    session.set_options(view="relevance")
    p = P.panel_of(session)
    assert p.grid_values is None and p.scale is None and p.mask is None
    assert p.title == "Relevance (Chefer et al.): not available"
    assert p.unavailable == session.unavailable_reason() and p.unavailable
    assert P.view_figure(session) is None


def test_a_comparison_cell_is_drawn_in_its_shared_scale(session):
    spec = cmp.CompareSpec(layout="layers", views=("cls",), layers=(0, 1, 2))
    comp = cmp.build_comparison(spec, session)
    scales = {id(c.scale) for c in comp.cells}
    assert len(scales) == 1
    for c in comp.cells:
        p = c.panel()
        assert p.scale is c.scale and p.title == appearance.title(c.session.describe_view(), c.session.options)
        np.testing.assert_array_equal(p.grid_values, c.session.display_map())
    fig = cmp.comparison_figure(comp)
    assert [p.scale for p in fig.panels] == [c.scale for c in comp.cells]


@pytest.mark.parametrize("all_layers", [False, True])
def test_the_heads_grid_is_one_assembly(session, all_layers):
    _plant_artefact(session, 0, 3)
    session.set_options(view="cls", layer=1)
    g = P.heads_of(session, all_layers=all_layers)
    r = session.result
    L = r.num_layers if all_layers else 1
    assert g.maps.shape == (L, r.num_heads, *r.grid) and g.tiles.shape == (L * r.num_heads, *r.grid)
    assert g.layer == 1 and g.query == "[CLS]" and g.excludes_artefacts and not g.pool_row
    expect = session.all_head_maps() if all_layers else session.head_maps(1)[None]
    np.testing.assert_array_equal(g.maps, expect)
    spec = P.heads_figure(session, all_layers=all_layers)
    assert spec.scale == g.scale and all(p.scale == g.scale for p in spec.panels)
    assert len(spec.panels) == L * r.num_heads
    session.set_options(view="query", query=6)
    assert P.heads_of(session).query == "patch (1, 2)"


def test_panel_checks_what_it_is_given():
    photo = np.zeros((4, 6, 3), np.uint8)
    with pytest.raises(ValueError, match="needs crop"):
        F.Panel(photo=photo, mask=np.ones((2, 2), bool))
    with pytest.raises(ValueError, match="crop and grid"):
        F.Panel(photo=photo, outlined=((0, 0),), crop=(0, 0, 6, 4))
    with pytest.raises(ValueError, match="colour scale"):
        F.Panel(photo=photo, grid_values=np.ones((2, 2)), crop=(0, 0, 6, 4))
    p = F.Panel(photo=photo, outlined=((1, 2),), crop=(0.5, 1.0, 6.0, 2.0), grid=(2, 3))
    assert p.patch_rect(1, 2) == (4.5, 2.0, 2.0, 1.0)
