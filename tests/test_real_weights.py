"""Real pretrained weights from ../shared/weights (skipped when absent: a fresh clone has no such folder)."""

from __future__ import annotations

import pytest
import torch
from PIL import Image
from repo_paths import SHARED_WEIGHTS

from vitviz.model import load_checkpoint
from vitviz.model.preprocess import INCEPTION_MEAN

# ../shared/weights next to the checkout
TINY = SHARED_WEIGHTS / "vit_tiny_patch16_224_augreg_in21k_ft_in1k.safetensors"

pytestmark = [
    pytest.mark.real_weights,
    pytest.mark.skipif(not TINY.is_file(), reason=f"real weights not present at {TINY}"),
]
skimage_data = pytest.importorskip("skimage.data")

# From ../shared/weights/README.md (timm, right preprocessing): class -> probability
EXPECTED = {
    "chelsea": {285: 0.733, 282: 0.177, 281: 0.076},
    "coffee": {967: 0.927, 968: 0.050},
}


@pytest.fixture(scope="module")
def tiny_model():
    return load_checkpoint(TINY)


def _probs(model, name: str) -> torch.Tensor:
    img = Image.fromarray(getattr(skimage_data, name)()).convert("RGB")
    x = model.spec.preprocess(img)[None]
    with torch.inference_mode():
        return model(x)[0].softmax(-1)


def test_tiny_spec_from_file(tiny_model):
    spec = tiny_model.spec
    assert spec.source_format == "timm"
    c = spec.config
    assert (c.embed_dim, c.depth, c.num_heads, c.patch_size, c.img_size, c.num_classes) == (
        192, 12, 3, 16, (224, 224), 1000)
    p = spec.preprocess  # the documented default for timm non-distilled ViTs: augreg's 0.5 / bicubic / 0.875
    assert (p.resize, p.crop, p.interpolation, p.mean) == (256, (224, 224), "bicubic", INCEPTION_MEAN)
    assert spec.label(285) == "Egyptian cat"


@pytest.mark.parametrize("image,allowed", [("chelsea", range(281, 286)), ("coffee", (967, 968))])
def test_tiny_top1_and_probabilities(tiny_model, image, allowed):
    probs = _probs(tiny_model, image)
    assert int(probs.argmax()) in allowed
    for cls, p in EXPECTED[image].items():
        assert abs(float(probs[cls]) - p) < 1e-2, (image, cls, float(probs[cls]), p)


def test_tiny_imagenet_normalisation_degrades():
    """The README's warning, checked: with ImageNet mean/std the coffee photo is no longer espresso."""
    wrong = load_checkpoint(TINY, preprocess="imagenet")
    assert wrong.spec.preprocess.mean == (0.485, 0.456, 0.406)
    assert int(_probs(wrong, "coffee").argmax()) == 470  # candle, as the README says


def test_tiny_explicit_path_agrees(tiny_model):
    img = Image.fromarray(skimage_data.chelsea()).convert("RGB")
    x = tiny_model.spec.preprocess(img)[None]
    with torch.inference_mode():
        a = tiny_model(x)
        tiny_model.set_fused_attention(False)
        try:
            b = tiny_model(x)
        finally:
            tiny_model.set_fused_attention(True)
    assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)
