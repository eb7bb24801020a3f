"""Views on RoPE models: the RoPE kernel equals the one timm's own rotation gives (trace of its rotation matrices),
position similarity shows it for a model without a position table (DINOv3) and says so, the table where there is one
(Perception Encoder, whose kernel is in "RoPE position similarity"), per head for mixed RoPE; and the gradient and
token views (LeGrad, relevance, feature PCA) run on a DINOv3 folder read from timm's layout."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from family_helpers import randomise_, write_timm_folder
from PIL import Image

from vitviz import analysis as A
from vitviz import views
from vitviz.capture.targets import SimilarityTarget
from vitviz.model import create_model, load_checkpoint
from vitviz.pipeline import run_inference
from vitviz.pipeline.runner import Pipeline
from vitviz.views.options import ViewOptions

timm = pytest.importorskip("timm")


def _folder(tmp_path, arch, **kw):
    torch.manual_seed(0)
    ref = randomise_(timm.create_model(arch, pretrained=False, num_classes=0, dynamic_img_size=True,
                                       embed_dim=64, depth=2, num_heads=2, **kw))
    folder = write_timm_folder(tmp_path / arch, ref, arch, {"input_size": [3, 64, 64]})
    return ref, load_checkpoint(folder)


def _photo(h=64, w=80):
    rng = np.random.default_rng(0)
    return Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8))


def _timm_kernel(ref, grid):
    """K[i, j] = trace(R_i R_j^T) / head_dim with R_i the rotation timm applies at patch i (its apply_rot_embed_cat
    on the identity): the RoPE kernel from timm's code alone."""
    from timm.layers.pos_embed_sincos import apply_rot_embed_cat

    emb = ref.rope.get_embed(shape=list(grid))  # [N, 2 * hd]
    hd = emb.shape[-1] // 2
    eye = torch.eye(hd)
    R = torch.stack([apply_rot_embed_cat(eye, e[None].expand(hd, -1), half=ref.blocks[0].attn.rotate_half)
                     for e in emb])  # [N, hd, hd]: row r = R_i e_r
    return torch.einsum("iab,jab->ij", R, R) / hd


@pytest.mark.parametrize("arch", ["vit_small_patch16_dinov3", "vit_pe_core_base_patch16_224",
                                  "eva02_base_patch14_224"])
def test_rope_kernel_equals_timms_rotation(tmp_path, arch):
    kw = dict(img_size=56) if arch.startswith("eva02") else dict(img_size=64)
    ref, ours = _folder(tmp_path, arch, **kw)
    for grid in ((4, 4), (3, 5)):
        angles = ours.rope.angles(grid)
        k = A.rope_kernel(angles, grid=grid).reshape(grid[0] * grid[1], -1)
        torch.testing.assert_close(k, _timm_kernel(ref, grid), rtol=0, atol=1e-5)
        row = A.rope_kernel_row(angles, query=5, grid=grid).reshape(-1)
        torch.testing.assert_close(row, k[5], rtol=0, atol=1e-5)
        assert torch.allclose(k.diagonal(), torch.ones(grid[0] * grid[1]))


def test_position_similarity_of_dinov3_is_the_rope_kernel_and_says_so(tmp_path):
    _, ours = _folder(tmp_path, "vit_small_patch16_dinov3", img_size=64)
    r = run_inference(ours, _photo())
    assert r.pos_embed is None and r.model_data.pos_similarity_kind == "rope"
    pos, rope = views.get("pos_sim"), views.get("rope_sim")
    o = ViewOptions(query=3, layer=1, head=1)
    assert pos.unavailable(r) is None and rope.unavailable(r) is None
    kernel = A.rope_kernel(ours.rope.angles(r.grid), grid=r.grid).numpy()
    np.testing.assert_allclose(pos.compute(r, o), kernel[0, 3], atol=1e-6)
    np.testing.assert_allclose(rope.compute(r, o), kernel[0, 3], atol=1e-6)  # the same for every head
    assert "RoPE kernel" in pos.caption(r, o) and "rotation alone" in pos.caption(r, o)
    assert "the same in every layer and head" in rope.caption(r, o)


def test_pe_keeps_its_table_and_shows_its_kernel_beside_it(tmp_path):
    _, ours = _folder(tmp_path, "vit_pe_core_base_patch16_224", img_size=64)
    r = run_inference(ours, _photo())
    o = ViewOptions(query=2)
    assert r.model_data.pos_similarity_kind == "table"
    table = A.position_embedding_similarity(ours.pos_embed_for(r.grid), grid=r.grid, num_prefix_tokens=1).numpy()
    np.testing.assert_allclose(views.get("pos_sim").compute(r, o), table[0, 2], atol=1e-6)
    assert "RoPE kernel" not in views.get("pos_sim").caption(r, o)
    kernel = A.rope_kernel(ours.rope.angles(r.grid), grid=r.grid).numpy()
    np.testing.assert_allclose(views.get("rope_sim").compute(r, o), kernel[0, 2], atol=1e-6)


def test_mixed_rope_kernel_per_layer_and_head():
    torch.manual_seed(0)
    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                     num_classes=3, rope="mixed", rope_theta=10.0, pos_embed="none").eval()
    r = run_inference(m, _photo(32, 32))
    angles = m.rope.angles(r.grid)  # [L, H, N, F]
    v = views.get("rope_sim")
    maps = {(layer, h): v.compute(r, ViewOptions(query=6, layer=layer, head=h)) for layer in (0, 1) for h in (0, 1)}
    for (layer, h), got in maps.items():
        want = A.rope_kernel(angles[layer, h], grid=r.grid)[1, 2].numpy()
        np.testing.assert_allclose(got, want, atol=1e-6)
    assert not np.allclose(maps[0, 0], maps[0, 1])  # learned: heads differ
    mean = v.compute(r, ViewOptions(query=6, layer=1, head="mean"))
    np.testing.assert_allclose(mean, (maps[1, 0] + maps[1, 1]) / 2, atol=1e-6)
    assert views.get("pos_sim").caption(r, ViewOptions(query=6)).count("RoPE kernel") == 1


def test_rope_view_is_unavailable_without_rope(tiny_model):
    r = run_inference(tiny_model, _photo(32, 32))
    assert "no rotary position embedding" in views.get("rope_sim").unavailable(r)


def test_gradient_and_token_views_run_on_a_dinov3_folder(tmp_path):
    """LeGrad, relevance, gradient rollout and feature PCA on DINOv3 read from timm's layout (a feature model: a
    similarity target to another photo's embedding)."""
    _, ours = _folder(tmp_path, "vit_small_plus_patch16_dinov3", img_size=64)
    pipe = Pipeline(ours)
    with torch.no_grad():
        ref_vec = ours(pipe.prepare(_photo(64, 64)).x[None])[0]
    r = pipe.run(_photo(), target=SimilarityTarget(ref_vec, "image other.png"))
    assert r.attention_grads is not None and r.num_prefix_tokens == 5
    o = ViewOptions(layer=1, query=3)
    for key in ("legrad", "relevance", "grad_rollout", "feature_pca", "cls", "token_sim"):
        v = views.get(key)
        assert v.unavailable(r) is None, key
        m = v.compute(r, o)
        assert m is not None and m.shape == r.grid and np.isfinite(m).all(), key
        assert np.ptp(m) > 0, key
