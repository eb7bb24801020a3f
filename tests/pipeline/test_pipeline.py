"""The pipeline: one forward and one backward by default, model-only data once per model, results from the capture."""

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz import analysis as A
from vitviz.capture import capture
from vitviz.pipeline import Pipeline, has_full_precision_copy, placement, run_inference


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
    # one backward for the attention gradients, then LeGrad's per-layer steps (each stops at its layer's attention)
    # for the pooling asked for (by default LeGrad's own, the mean of all tokens)
    assert counts == {"forward": 1, "backward": 1 + r.num_layers}
    assert set(r.legrad) == {"mean"} and r.gradcam is not None
    counts.update(forward=0, backward=0)
    r = p.run_batch([_image()], sources=["x.png"], legrad=(), gradcam=False)[0]
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
    r2 = p.run_batch([_image()], target=(top + 1) % 5, legrad=())[0]
    assert counts == {"forward": 1, "backward": 1} and r2.target == (top + 1) % 5


def test_result_fields_are_the_capture_of_the_image(tiny_model):
    r = run_inference(tiny_model, _image(mode="RGBA"), source="x.png")
    assert r.rgb.shape == (70, 110, 3) and r.rgb.dtype == np.uint8
    assert r.attentions is r.capture.attentions and r.tokens is r.capture.tokens
    assert (r.num_layers, r.num_heads, r.grid, r.num_prefix_tokens) == (3, 4, (4, 4), 1)


def test_model_data_is_computed_once_per_model(tiny_model, monkeypatch):
    import vitviz.analysis as A_mod

    calls = []
    real_sim, real_filters = A_mod.position_embedding_similarity, A_mod.embedding_filters
    monkeypatch.setattr(A_mod, "position_embedding_similarity",
                        lambda *a, **k: calls.append("sim") or real_sim(*a, **k))
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


def test_bf16_pipeline_runs_and_stores_in_bf16(tiny_model):
    r = Pipeline(tiny_model, precision="bf16").run(_image())
    assert r.attentions.dtype == torch.bfloat16 and r.precision == "bf16"
    assert torch.allclose(r.attentions.float().sum(-1), torch.ones(()), atol=2e-2)


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
    assert has_full_precision_copy(model)  # kept by the pipeline module, keyed by the model: nothing stashed on it
    assert not [k for k in vars(model) if k.startswith("_vitviz")]
    rounded = model.patch_embed.proj.weight.float()
    assert not torch.equal(rounded, before["patch_embed.proj.weight"])  # the cast really rounds
    Pipeline(model, precision="fp16")  # bf16 -> fp16 keeps the first full-precision copy
    Pipeline(model, precision="fp32")
    for k, v in model.state_dict().items():
        assert v.dtype == before[k].dtype and torch.equal(v, before[k]), k
    with torch.no_grad():
        assert torch.equal(model(x), ref)
    assert not has_full_precision_copy(model)  # the copy is dropped once restored
    assert not hasattr(model, "_vitviz_full_precision")


# ---------------------------------------------------------------------------------------------------------------------
# Pipeline.open: the one way to open a model on a device
# ---------------------------------------------------------------------------------------------------------------------
def test_open_a_reference_a_path_or_a_name(tiny_model, tmp_path):
    from vitviz.model import save_checkpoint

    ckpt = save_checkpoint(tiny_model, tmp_path / "tiny.safetensors")
    for source in (f"file:{ckpt}", str(ckpt), ckpt):  # a reference, or what a user types (parse_model_ref)
        p = Pipeline.open(source, precision="fp32", show_bar=False)
        assert p.note is None and (p.device, p.precision, p.precision_choice) == ("cpu", "fp32", "fp32")
        assert p.spec.labels == tiny_model.spec.labels and not p.model.training
        torch.testing.assert_close(p.run(_image()).attentions, Pipeline(tiny_model).run(_image()).attentions)
    r = Pipeline.open("random:vit_tiny_patch16_224", precision="auto", show_bar=False)
    assert "Randomly initialised" in r.note and r.precision_choice == "auto" and r.precision in ("fp32", "bf16")
    demo = Pipeline.open("demo")
    assert demo.spec.labels is not None and demo.note is None


def test_open_falls_back_to_the_cpu_and_fp32_with_a_note(tiny_model, tmp_path, monkeypatch):
    import vitviz.pipeline.model_opening as pipeline_mod
    from vitviz.model import save_checkpoint

    ckpt = save_checkpoint(tiny_model, tmp_path / "tiny.safetensors")
    monkeypatch.setattr(pipeline_mod, "available_devices", lambda: ["cpu"])
    p = Pipeline.open(f"file:{ckpt}", device="cuda:3", precision="fp16")
    assert (p.device, p.precision) == ("cpu", "fp32")
    assert p.note == ("device cuda:3 is not available here: using the CPU; precision fp16 is not available on cpu: "
                      "using fp32")
    # the policy on its own: what the machine has is kept; "cuda" names the first GPU; auto and bf16 run anywhere
    assert placement("cpu", "bf16") == ("cpu", "bf16", None)
    assert placement("cpu", "fp16") == ("cpu", "fp32", "precision fp16 is not available on cpu: using fp32")
    monkeypatch.setattr(pipeline_mod, "available_devices", lambda: ["cpu", "cuda:0"])
    assert placement("cuda", "fp16") == ("cuda:0", "fp16", None)
    assert placement("cuda:1", "auto") == ("cpu", "auto", "device cuda:1 is not available here: using the CPU")


def test_open_refuses_a_bad_precision_before_opening(monkeypatch):
    import vitviz.pipeline.model_opening as pipeline_mod

    monkeypatch.setattr(pipeline_mod, "open_model", lambda *a, **k: pytest.fail("opened"))
    with pytest.raises(ValueError, match="precision must be one of"):
        Pipeline.open("demo", precision="fp64")


def test_open_adapts_a_foreign_module_and_pipeline_does_not():
    from textbook_models import ViTC

    from vitviz.capture.foreign import AdaptedModel

    module = ViTC().eval()
    p = Pipeline.open(module)
    assert isinstance(p.model, AdaptedModel) and p.model.module is module and p.note is None
    assert p.run(_image()).grid == (4, 4)
    assert Pipeline(p.model).model is p.model  # an adapted module is taken as it is
    with pytest.raises(TypeError, match="needs a vitviz ViT or an AdaptedModel, got ViTC"):
        Pipeline(module)
    with pytest.raises(ValueError, match="apply to checkpoint files"):
        Pipeline.open(module, num_heads=4)


def test_open_the_users_own_file(tmp_path):
    import shutil

    import textbook_models

    from vitviz.capture.foreign import AdaptedModel

    path = tmp_path / "my_vit.py"
    shutil.copy(textbook_models.__file__, path)
    p = Pipeline.open(f"{path}:ViTC", init='{"emb_size": 48}')
    assert isinstance(p.model, AdaptedModel) and p.spec.name == "ViTC" and p.spec.source_path == str(path)
    assert "Randomly initialised" in p.note
    with pytest.raises(ValueError, match="weights and init go with the user's own model"):
        Pipeline.open("demo", init="{}")
