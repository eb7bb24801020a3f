"""The logit-lens class map view: each patch's decoded class equals timm's own norm and head (and attention-pool
head) applied to that token of timm's hooked block output; drawn as colours with a legend; unavailable with the
reason for a feature model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mechanistic_references import block_outputs, timm_folder, token_alone
from PIL import Image

from vitviz import views
from vitviz.pipeline import Pipeline
from vitviz.views.options import ViewOptions

pytest.importorskip("timm")


@pytest.mark.parametrize("kind", ["cls", "map"])
def test_class_map_equals_timm_head_on_each_patch_token(tmp_path, kind):
    ref, folder = timm_folder(tmp_path, kind)
    pipeline = Pipeline.open(str(folder), precision="fp32")
    image = Image.fromarray(np.random.default_rng(1).integers(0, 255, (32, 32, 3), dtype=np.uint8))
    result = pipeline.run(image)
    x = pipeline.prepare(image).x[None]
    view = views.get("logit_lens")
    assert view.rgb and view.layer_range(result) == (0, 2) and view.unavailable(result) is None
    p = ref.num_prefix_tokens
    for layer, z in enumerate(block_outputs(ref, x)):
        options = ViewOptions(view="logit_lens", layer=layer)
        with torch.no_grad():
            probs = token_alone(ref, z[0, p:]).softmax(-1)
        classes, best = view.decoded(result, options)
        assert np.array_equal(classes, probs.argmax(-1).numpy())
        np.testing.assert_allclose(view.compute(result, options).reshape(-1), probs.max(-1).values.numpy(),
                                   rtol=1e-4, atol=1e-6)
        rgb = view.compute_rgb(result, options)
        assert rgb.shape == (4, 4, 4) and np.all(rgb[..., 3] == 1)
        first = classes == view.colours(classes)[0][0]
        np.testing.assert_allclose(rgb.reshape(-1, 4)[first, :3], np.tile([0.122, 0.467, 0.706], (first.sum(), 1)),
                                   atol=1e-6)
        assert f"blue: class {view.colours(classes)[0][0]}" in view.caption(result, options)


def test_unavailable_for_a_feature_model(tmp_path):
    _, folder = timm_folder(tmp_path, "map", num_classes=0)
    pipeline = Pipeline.open(str(folder), precision="fp32")
    result = pipeline.run(Image.new("RGB", (32, 32), (200, 10, 10)))
    view = views.get("logit_lens")
    assert "needs a classifier" in view.unavailable(result)
    assert view.compute(result, ViewOptions(view="logit_lens", layer=1)) is None
