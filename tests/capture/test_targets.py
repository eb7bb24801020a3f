"""Targets: what the gradients explain. Similarity targets' gradients equal autograd of the cosine similarity written
out by hand; a callable target's equal autograd of the callable; bad targets give one clear line."""

import pytest
import torch

from vitviz.capture import capture
from vitviz.capture.targets import CallableTarget, ClassTarget, SimilarityTarget, TargetError, as_target
from vitviz.model import create_model


def _model(num_classes):
    torch.manual_seed(3)
    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=24, depth=2, num_heads=3,
                     num_classes=num_classes)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return m.eval()


def _grads_by_hand(model, x, scalar_of):
    """Every layer's attention gradient of ``scalar_of(output, pooled_embedding)`` from one explicit forward."""
    attns, pooled = [], []
    for b in model.blocks:
        b.attn.fused = False
    hooks = [b.attn.attn_map.register_forward_hook(lambda m, a, o: attns.append(o)) for b in model.blocks]
    hooks.append(model.head.register_forward_pre_hook(lambda m, a: pooled.append(a[0])))
    try:
        with torch.enable_grad():
            out = model(x.clone().requires_grad_(True))
            grads = torch.autograd.grad(scalar_of(out, pooled[0]), attns)
    finally:
        for h in hooks:
            h.remove()
        for b in model.blocks:
            b.attn.fused = True
    return torch.stack(grads)


def _cosine_by_hand(e, v):
    return (e * v).sum(-1) / (e.pow(2).sum(-1).sqrt() * v.pow(2).sum().sqrt())


@pytest.mark.parametrize("num_classes", [0, 7])
def test_similarity_target_gradients_equal_autograd_of_the_cosine_written_out(num_classes):
    model = _model(num_classes)
    x = torch.randn(2, 3, 32, 32)
    v = torch.randn(24)
    target = SimilarityTarget(v, "a vector", scale=3.0, bias=-1.0)
    cap = capture(model, x, target=target)
    # the pooled embedding: a feature model's output, a classifier's input to its head
    ref = _grads_by_hand(model, x, lambda out, pooled: (3.0 * _cosine_by_hand(out if num_classes == 0 else pooled, v)
                                                        - 1.0).sum())
    torch.testing.assert_close(cap.attention_grads, ref, rtol=1e-4, atol=1e-7)
    with torch.no_grad():
        e = model(x) if num_classes == 0 else model.forward_head(model.forward_features(x), pre_logits=True)
    torch.testing.assert_close(cap.scores, 3.0 * _cosine_by_hand(e, v) - 1.0, rtol=1e-5, atol=1e-6)
    assert cap.target is target and cap.targets is None
    assert cap.image(1).score == pytest.approx(float(cap.scores[1]))


def test_a_callable_target_is_differentiated_per_image():
    model = _model(7)
    x = torch.randn(2, 3, 32, 32)

    def margin(out):
        return out[2] - out.logsumexp(0)

    cap = capture(model, x, target=margin)
    assert isinstance(cap.target, CallableTarget) and cap.target.name == "margin"
    ref = _grads_by_hand(model, x, lambda out, _p: (out[:, 2] - out.logsumexp(1)).sum())
    torch.testing.assert_close(cap.attention_grads, ref, rtol=1e-4, atol=1e-7)


def test_class_targets_keep_their_meaning():
    model = _model(7)
    x = torch.randn(2, 3, 32, 32)
    a = capture(model, x, target=ClassTarget(5))
    b = capture(model, x, target=5)
    torch.testing.assert_close(a.attention_grads, b.attention_grads)
    assert a.targets.tolist() == [5, 5] and a.target == ClassTarget(5)
    top = capture(model, x, target="top")
    assert top.targets.tolist() == model(x).argmax(1).tolist() and top.target == ClassTarget(None)
    per_image = capture(model, x, target=[1, 3])
    assert per_image.targets.tolist() == [1, 3]


def test_a_feature_model_has_no_top_class_and_a_projection_head_no_classes():
    features = _model(0)
    assert capture(features, torch.randn(1, 3, 32, 32), target="top").attention_grads is None
    clip_like = _model(7)
    clip_like.spec = clip_like.spec.replace(head_kind="projection")  # CLIP: the head projects into an embedding
    assert capture(clip_like, torch.randn(1, 3, 32, 32), target="top").attention_grads is None
    with pytest.raises(TargetError, match="output is an embedding"):
        capture(clip_like, torch.randn(1, 3, 32, 32), target=3)


@pytest.mark.parametrize("target, message", [
    (lambda out: (_ for _ in ()).throw(KeyError("no such output")), r"target function <lambda> raised KeyError: "
                                                                    r"'no such output'"),
    (lambda out: out[:3], r"returned shape \(3,\), not a scalar"),
    (lambda out: 1.5, r"returned a float, not a tensor"),
    (lambda out: torch.tensor(2.0), r"does not depend on the model's output"),
    (lambda out: out.argmax(), r"returned dtype torch.int64, not a floating scalar"),
    (SimilarityTarget(torch.ones(5), "short"), r"similar to short: the reference vector has 5 values but the "
                                               r"model's pooled embedding has 24"),
    ("cat", r"target must be a class index, one index per image, 'top'"),
    (7, r"target class\(es\) \[7\] out of range for a model with 7 classes"),
])
def test_bad_targets_give_one_clear_line(target, message):
    model = _model(7)
    with pytest.raises(ValueError, match=message) as e:
        capture(model, torch.randn(1, 3, 32, 32), target=target)
    assert "\n" not in str(e.value)


def test_bad_reference_vectors_are_refused_when_made():
    with pytest.raises(TargetError, match="reference vector is zero"):
        SimilarityTarget(torch.zeros(4), "z")
    with pytest.raises(TargetError, match="NaN or infinite"):
        SimilarityTarget(torch.tensor([1.0, float("nan")]), "n")
    with pytest.raises(TargetError, match=r"one vector, got shape \(2, 3\)"):
        SimilarityTarget(torch.ones(2, 3), "m")
    assert SimilarityTarget(torch.ones(1, 3), "row").vector.shape == (3,)
    assert SimilarityTarget(torch.ones(3), "a") == SimilarityTarget(torch.ones(3), "a")
    assert as_target(None) == as_target("top") == ClassTarget(None) and as_target(3) == ClassTarget(3)
    with pytest.raises(TargetError, match="got a list"):
        as_target([1, 2])
