"""The registry of views: built-in views, registration of a new one, what each view declares."""

import numpy as np
import pytest
from PIL import Image

from vitviz import views
from vitviz.document.session import Session
from vitviz.pipeline import run_inference


class Brightest(views.View):
    """A toy view: the attention of layer L, head h, from [CLS], squared."""

    key = "toy_square"
    title = "Squared attention (toy)"
    reads = frozenset({"layer", "head"})
    quantity = "attention weight squared"

    def compute(self, result, options):
        m = result.attentions[options.layer, :, 0, result.num_prefix_tokens:]
        m = m.mean(0) if not isinstance(options.head, int) else m[options.head]
        return views.as_grid(m ** 2, result.grid)


@pytest.fixture
def toy_view():
    v = views.register(Brightest())
    yield v
    views.unregister(v.key)




def test_builtin_views_in_menu_order_with_shortcuts():
    keys = [v.key for v in views.all_views()]
    assert keys[:9] == ["cls", "query", "rollout", "grad_rollout", "relevance", "legrad", "gradcam", "token_sim",
                        "pos_sim"]
    assert [views.shortcut(v) for v in views.all_views()][:7] == [str(i) for i in range(1, 8)]
    for v in views.all_views():
        assert v.title and v.quantity and set(v.reads) <= set(views.readable_options())
    with pytest.raises(ValueError, match="unknown view 'nope'"):
        views.get("nope")


def test_a_registered_view_is_computed_cached_and_captioned(session, toy_view):
    session.set_options(view="toy_square", layer=2, head=1)
    r = session.result
    ref = (r.attentions[2, 1, 0, 1:] ** 2).reshape(4, 4).numpy()
    np.testing.assert_allclose(session.current_map(), ref, rtol=1e-6)
    assert session.current_map() is session.current_map()  # cached
    assert session.describe_view() == "Squared attention (toy) · layer 2 · head 1"
    assert session.export_name() == "x_toy_square_L2_h1.png"
    views.unregister("toy_square")
    assert "toy_square" not in [v.key for v in views.all_views()]


def test_registration_checks_what_a_view_declares():
    class Bad(views.View):
        key = "bad"
        reads = frozenset({"colour"})

    with pytest.raises(ValueError, match="unknown options"):
        views.register(Bad())
    with pytest.raises(TypeError):
        views.register(object())


def test_unavailable_views_say_why():
    from vitviz.model import create_model

    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                     class_token=False, global_pool="avg", num_classes=0).eval()
    s = Session()
    s.set_result(run_inference(m, Image.new("RGB", (32, 32), (90, 30, 200))))
    s.set_options(view="relevance")
    assert s.current_map() is None and s.unavailable_reason() == "the model has no [CLS] token"
    s.set_options(view="cls")  # falls back to the selected patch: follows the query
    a = s.current_map().copy()
    s.set_options(query=5)
    assert not np.array_equal(a, s.current_map())


def test_file_names_carry_the_parameters_each_view_reads(session):
    session.set_options(view="relevance", start_layer=1, layer=2, head=3)
    name = session.export_name()
    target = session.result.label(session.result.target)
    assert name == f"x_relevance_from1_{target}.png"
    session.set_options(view="rollout", head_fusion="max", discard_ratio=0.5, start_layer=0)
    assert session.export_name() == "x_rollout_max_d0.50_from0.png"
    session.set_options(view="query", query=5)
    assert session.export_name() == "x_query_L2_h3_p1-1.png"
