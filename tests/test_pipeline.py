"""The pipeline: one forward and one backward by default, model-only data once per model, results from the capture."""

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz import analysis as A
from vitviz.capture import capture
from vitviz.pipeline import Pipeline, run_inference


def _image(h=70, w=110, mode="RGB", seed=0):
    rng = np.random.default_rng(seed)
    return Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)).convert(mode)


def _count_passes(model, monkeypatch):
    """Counts forwards of the whole model and backward passes (autograd.grad calls)."""
    counts = {"forward": 0, "backward": 0}
    model.register_forward_hook(lambda *a: counts.__setitem__("forward", counts["forward"] + 1))
    real = torch.autograd.grad

    def grad(*a, **k):
        counts["backward"] += 1
        return real(*a, **k)

    monkeypatch.setattr(torch.autograd, "grad", grad)
    return counts


def test_default_path_is_one_forward_and_one_backward_for_the_top_class(tiny_model, monkeypatch):
    p = Pipeline(tiny_model)
    counts = _count_passes(tiny_model, monkeypatch)
    r = p.run(_image(), source="x.png")
    assert counts == {"forward": 1, "backward": 1}
    top = int(r.logits.argmax())
    assert r.target == top
    # the same gradients as an explicit capture for that class
    x, _ = tiny_model.spec.preprocess.apply(_image())
    ref = capture(tiny_model, x[None], target=top)
    torch.testing.assert_close(r.attention_grads, ref.attention_grads[:, 0], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(r.attentions, ref.attentions[:, 0])
    # an explicit target costs the same one pass
    counts.update(forward=0, backward=0)
    r2 = p.run(_image(), target=(top + 1) % 5)
    assert counts == {"forward": 1, "backward": 1} and r2.target == (top + 1) % 5


def test_result_fields_are_the_capture_of_the_image(tiny_model):
    r = run_inference(tiny_model, _image(mode="RGBA"), source="x.png")
    assert r.rgb.shape == (70, 110, 3) and r.rgb.dtype == np.uint8
    assert r.attentions is r.capture.attentions and r.tokens is r.capture.tokens
    assert (r.num_layers, r.num_heads, r.grid, r.num_prefix_tokens) == (3, 4, (4, 4), 1)
    assert r.analyses is not None
    torch.testing.assert_close(r.analyses.relevance, A.relevance(r.attentions, r.attention_grads, grid=r.grid))


def test_model_data_is_computed_once_per_model(tiny_model, monkeypatch):
    import vitviz.analysis as A_mod

    calls = []
    real_sim, real_filters = A_mod.position_embedding_similarity, A_mod.embedding_filters
    monkeypatch.setattr(A_mod, "position_embedding_similarity", lambda *a, **k: calls.append("sim") or real_sim(*a, **k))
    monkeypatch.setattr(A_mod, "embedding_filters", lambda *a, **k: calls.append("pca") or real_filters(*a, **k))
    p = Pipeline(tiny_model)
    results = [p.run(_image(seed=s), source=f"{s}.png") for s in range(3)]
    assert all(r.model_data is results[0].model_data for r in results)
    for r in results:
        r.model_data.pos_similarity()
        r.model_data.filters(8)
    assert calls == ["sim", "pca"]
    np.testing.assert_allclose(results[0].model_data.filters(8),  # a slice of the one decomposition
                               real_filters(tiny_model.patch_embed.proj.weight.detach(), k=8).numpy(), atol=1e-6)
    sim = results[0].model_data.pos_similarity()
    ref = A.position_embedding_similarity(tiny_model.pos_embed_for((4, 4)).detach(), grid=(4, 4))
    np.testing.assert_allclose(sim, ref.numpy(), rtol=1e-5, atol=1e-6)


def test_bad_target_and_precision_are_refused(tiny_model):
    with pytest.raises(ValueError, match="out of range"):
        run_inference(tiny_model, _image(), target=7)
    with pytest.raises(ValueError, match="precision"):
        Pipeline(tiny_model, precision="fp64")


def test_top_target_without_a_classifier_captures_without_gradients():
    from vitviz.model import create_model

    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                     num_classes=0).eval()
    r = run_inference(m, _image())
    assert r.attention_grads is None and r.target is None
    cap = capture(m, torch.randn(2, 3, 32, 32), target="top")
    assert cap.attention_grads is None and cap.targets is None
    with pytest.raises(ValueError, match="'top'"):
        capture(m, torch.randn(1, 3, 32, 32), target="best")


def test_top_target_per_image_in_a_batch(tiny_model):
    x = torch.randn(3, 3, 32, 32) * 2
    cap = capture(tiny_model, x, target="top")
    assert cap.targets.tolist() == cap.logits.argmax(-1).tolist()
    ref = capture(tiny_model, x, target=cap.targets)
    torch.testing.assert_close(cap.attention_grads, ref.attention_grads)


def test_bf16_pipeline_runs_and_stores_float32(tiny_model):
    r = Pipeline(tiny_model, precision="bf16").run(_image())
    assert r.attentions.dtype == torch.float32 and r.precision == "bf16"
    assert torch.allclose(r.attentions.sum(-1), torch.ones(()), atol=2e-2)


def test_precision_round_trip_restores_the_full_precision_weights():
    """fp32 -> bf16 -> fp32 (the window's precision menu) computes with the original weights again, not rounded ones."""
    import torch

    from vitviz.model import ViT
    from vitviz.pipeline import Pipeline

    torch.manual_seed(0)
    model = ViT(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        ref = model(x)
    Pipeline(model, precision="bf16")
    assert model.patch_embed.proj.weight.dtype == torch.bfloat16
    rounded = model.patch_embed.proj.weight.float()
    assert not torch.equal(rounded, before["patch_embed.proj.weight"])  # the cast really rounds
    Pipeline(model, precision="fp16")  # bf16 -> fp16 keeps the first full-precision copy
    Pipeline(model, precision="fp32")
    for k, v in model.state_dict().items():
        assert v.dtype == before[k].dtype and torch.equal(v, before[k]), k
    with torch.no_grad():
        assert torch.equal(model(x), ref)
    assert not hasattr(model, "_vitviz_full_precision")  # the copy is dropped once restored
