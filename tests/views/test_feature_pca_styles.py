"""Feature PCA at the last layer reads the tokens after the final norm (as the DINO / DINOv2 / DINOv3 demos), and
DINOv3's own colours (option ``pca_style="dinov3"``: a whitened PCA fitted on the foreground patches, colours
sigmoid(2x), background black), each against the formula written out here in numpy (no scikit-learn)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz.document.session import Session
from vitviz.model import create_model
from vitviz.pipeline import run_inference


@pytest.fixture(scope="module")
def session():
    torch.manual_seed(0)
    m = create_model("vit_tiny_patch16_224", img_size=48, patch_size=8, embed_dim=32, depth=3, num_heads=4,
                     num_classes=0).eval()
    with torch.no_grad():  # a final norm that is not the identity, so that reading before or after it differs
        m.norm.weight.normal_(1.0, 0.5)
        m.norm.bias.normal_(0.0, 0.5)
    s = Session()
    rng = np.random.default_rng(0)
    s.set_result(run_inference(m, Image.fromarray((rng.random((48, 48, 3)) * 255).astype(np.uint8))))
    return s, m


def layer_norm(t: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = t.mean(-1, keepdims=True)
    var = ((t - mu) ** 2).mean(-1, keepdims=True)
    return (t - mu) / np.sqrt(var + eps) * w + b


def last_tokens(s, m) -> np.ndarray:
    r = s.result
    t = r.tokens[r.num_layers].double().numpy()[r.num_prefix_tokens:]
    return layer_norm(t, m.norm.weight.detach().double().numpy(), m.norm.bias.detach().double().numpy(), m.norm.eps)


def pca(x: np.ndarray):
    """Mean, components (rows; the largest loading of each positive), variance S^2 / (M - 1)."""
    mean = x.mean(0)
    _, sv, vt = np.linalg.svd(x - mean, full_matrices=False)
    vt = vt[:3]
    vt = vt * np.sign(vt[np.arange(len(vt)), np.abs(vt).argmax(1)])[:, None]
    return mean, vt, (sv[:3] ** 2) / (len(x) - 1)


def test_the_last_layer_reads_the_tokens_after_the_final_norm(session):
    s, m = session
    r = s.result
    s.set_options(view="feature_pca", layer=r.num_layers - 1, pca_style="vitviz", mask_background=False)
    x = last_tokens(s, m)
    mean, vt, _ = pca(x)
    first = (x - mean) @ vt[0]
    np.testing.assert_allclose(s.current_map(), first.reshape(r.grid), rtol=1e-4, atol=1e-4)
    assert "tokens after the final norm" in s.caption()
    s.set_options(layer=1)  # a block inside the model: its output
    t = r.tokens[2].double().numpy()[r.num_prefix_tokens:]
    mean, vt, _ = pca(t)
    np.testing.assert_allclose(s.current_map(), ((t - mean) @ vt[0]).reshape(r.grid), rtol=1e-4, atol=1e-4)
    assert "final norm" not in s.caption()


@pytest.mark.parametrize("mask", [False, True])
def test_dinov3_colours_are_the_whitened_pca_of_the_foreground(session, mask):
    s, m = session
    r = s.result
    s.set_options(view="feature_pca", layer=r.num_layers - 1, pca_style="vitviz", mask_background=mask)
    fg = s.rgb_map()[..., 3].reshape(-1) > 0  # vitviz's own foreground (every patch without the mask)
    assert fg.all() != mask
    s.set_options(pca_style="dinov3")
    x = last_tokens(s, m)
    mean, vt, var = pca(x[fg])
    want = 1.0 / (1.0 + np.exp(-2.0 * ((x - mean) @ vt.T / np.sqrt(var)))) * fg[:, None]
    rgba = s.rgb_map()
    np.testing.assert_allclose(rgba[..., :3].reshape(-1, 3), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(rgba[..., 3].reshape(-1) > 0, fg)
    assert "DINOv3 colours: whitened PCA, sigmoid(2x)" in s.caption()
