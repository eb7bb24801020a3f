"""Feature PCA in the session (vitviz.document.session, vitviz.document.open_tokens): one fit per result and options
(the map and the picture read it; no second SVD), and the fit over all open images (option pca_joint): the colours
of vitviz.analysis's joint fit, one fit for every image of the set, the caption saying over how many, the limits."""

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz import analysis as A
from vitviz.document.open_tokens import OpenImageTokens, joint_words
from vitviz.document.session import Session


def _image(seed, h=40, w=40):
    rng = np.random.default_rng(seed)
    return Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8))


@pytest.fixture
def results(tiny_model):
    from vitviz.pipeline import Pipeline

    p = Pipeline(tiny_model)
    return [p.run(_image(i, 40 + 8 * i, 48), source=f"im{i}.png") for i in range(3)]


def _joint_session(results, shown=0):
    s = Session()
    s.joint = OpenImageTokens()
    s.add_images([r.source for r in results])
    for r in results:
        s.joint.add_result(r)
    s.set_result(results[shown])
    return s


def test_the_fit_is_made_once_for_the_map_and_the_picture(session, monkeypatch):
    calls = []
    real = A.feature_pca
    monkeypatch.setattr(A, "feature_pca", lambda *a, **k: calls.append(1) or real(*a, **k))
    session.set_options(view="feature_pca", layer=1)
    session.current_map(), session.rgb_map(), session.current_map(), session.rgb_map()
    assert len(calls) == 1
    session.set_options(mask_background=True)
    session.rgb_map(), session.current_map()
    assert len(calls) == 2


@pytest.mark.parametrize("mask", [False, True])
def test_joint_colours_are_the_analysis_joint_fit(results, mask):
    layer = 1
    stacked = torch.cat([r.tokens[layer + 1][r.num_prefix_tokens:] for r in results])
    grids = [r.grid for r in results]
    for shown, r in enumerate(results):
        s = _joint_session(results, shown)
        s.set_options(view="feature_pca", layer=layer, pca_joint=True, mask_background=mask)
        want = A.feature_pca(r.tokens[layer + 1], grid=r.grid, num_prefix_tokens=r.num_prefix_tokens,
                             fit_tokens=stacked, fit_grids=grids, mask_background=mask)
        rgba = s.rgb_map()
        np.testing.assert_allclose(rgba[..., :3], want.rgb.numpy(), atol=1e-6)
        np.testing.assert_array_equal(rgba[..., 3] == 1, want.foreground.numpy())
        np.testing.assert_allclose(s.current_map(), want.scores[..., 0].numpy(), rtol=1e-5, atol=1e-6)
        assert s.joint_fit_images() == tuple(x.source for x in results)
        assert "fitted over 3 open images" in s.describe_view() and s.joint_missing() == []
        assert s.export_name().endswith("_joint.png")
    # one fit serves each image of the set: the colours span [0, 1] over the three images together
    pictures = []
    for i in range(3):
        s = _joint_session(results, i)
        s.set_options(view="feature_pca", layer=layer, pca_joint=True)
        pictures.append(s.rgb_map()[..., :3].reshape(-1, 3))
    both = np.concatenate(pictures)
    assert both.min() == 0.0 and both.max() == 1.0


def test_one_fit_per_layer_and_set_whichever_image_is_shown(results, monkeypatch):
    calls = []
    real = A.fit_feature_pca
    monkeypatch.setattr(A, "fit_feature_pca", lambda *a, **k: calls.append(1) or real(*a, **k))
    joint = OpenImageTokens()
    for r in results:
        joint.add_result(r)
    for i in range(3):
        s = _joint_session(results, i)
        s.joint = joint
        s.set_options(view="feature_pca", layer=2, pca_joint=True)
        s.rgb_map()
    assert len(calls) == 1  # the fit over the three images, at layer 2, made once
    s.set_options(layer=0)
    s.rgb_map()
    assert len(calls) == 2


def test_images_not_read_yet_are_named_and_the_fit_grows_as_they_arrive(results):
    s = Session()
    s.joint = OpenImageTokens()
    s.add_images([r.source for r in results])
    s.set_result(results[1])
    s.set_options(view="feature_pca", layer=1)
    assert s.joint_missing() == [] and s.joint_note() == ""  # the option is off: nothing to read
    s.set_options(pca_joint=True)
    assert s.joint_missing() == ["im0.png", "im2.png"]
    assert s.joint_fit_images() == ("im1.png",)
    assert "fitted over 1 of 3 open images (reading the others…)" in s.describe_view()
    alone = s.rgb_map()
    s.joint.add_result(results[0])
    s.joint.add_result(results[2])
    assert s.joint_missing() == [] and "fitted over 3 open images" in s.describe_view()
    assert not np.array_equal(s.rgb_map(), alone)  # refitted over the three (a new key, not the cached picture)


def test_without_a_store_the_fit_is_the_images_own_and_says_so(session):
    session.set_options(view="feature_pca", layer=1, pca_joint=True)
    r = session.result
    own = A.feature_pca(r.tokens[2], grid=r.grid, num_prefix_tokens=r.num_prefix_tokens)
    np.testing.assert_allclose(session.rgb_map()[..., :3], own.rgb.numpy())
    assert "fitted on this image alone" in session.describe_view()


def test_the_limits_and_another_model(results):
    joint = OpenImageTokens(max_images=2)
    shown = results[2]
    assert joint.chosen([r.source for r in results], shown) == ("im0.png", "im2.png")  # the shown one kept
    joint.failed.add("im0.png")
    assert joint.chosen([r.source for r in results], shown) == ("im1.png", "im2.png")
    per_image = int(shown.tokens[:, 1:].numel()) * 4
    small = OpenImageTokens(max_bytes=2 * per_image)
    assert len(small.chosen([r.source for r in results], shown)) == 2
    for r in results:
        small.add_result(r)
    assert len(small) == 2 and small.nbytes <= 2 * per_image  # the oldest let go
    wider = torch.zeros(4, 17, 8)  # another model's tokens (another width): the held ones are forgotten
    small.add("other.png", wider, grid=(4, 4), num_prefix_tokens=1)
    assert len(small) == 1 and "other.png" in small
    small.adopt(object())
    assert len(small) == 0
    with pytest.raises(ValueError, match="do not fill a 3x3 grid"):
        small.add("bad.png", wider, grid=(3, 3), num_prefix_tokens=1)
    assert joint_words(1, 1, False) == "fitted over the one open image"
    assert joint_words(32, 40, False) == "fitted over 32 of 40 open images"
