"""A target function that changes the model's weights in place, replaces them, calls the model, starts a capture of
its own or takes a gradient itself (vitviz.capture.target_guard): one line naming the function and what it did, on
each capture route (a vitviz ViT's hooks, the streamed pass, a module vitviz adapted), and the model's weights
afterwards equal to what they were before (were autograd errors, or maps of silently changed weights)."""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch
from PIL import Image

from vitviz.capture import capture
from vitviz.capture.streaming import stream_pass
from vitviz.capture.targets import CallableTarget, TargetError
from vitviz.model import create_model
from vitviz.pipeline import Pipeline


def _vit() -> torch.nn.Module:
    torch.manual_seed(0)
    return create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4,
                        num_classes=5).eval()


def _timm() -> torch.nn.Module:
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, embed_dim=32,
                             depth=2, num_heads=4, num_classes=5).eval()


def _misuses(model: torch.nn.Module) -> dict:
    """name -> (target function, the words its line must hold)."""
    qkv = next(p for n, p in model.named_parameters() if n.endswith("qkv.weight"))

    def scale_in_place(out):
        with torch.no_grad():
            qkv.mul_(2.0)
        return out[0]

    def through_data(out):
        qkv.data.add_(1.0)
        return out[0]

    def assign_data(out):
        qkv.data = torch.zeros_like(qkv)
        return out[0]

    def set_items(out):
        qkv.data[0] = 3.0
        return out[0]

    def reinitialise(out):
        torch.nn.init.normal_(qkv)
        return out[0]

    def write_out(out):
        torch.mul(qkv.data, 2.0, out=qkv.data)
        return out[0]

    def swallow(out):  # catches the refusal and goes on: still refused
        try:
            qkv.data.mul_(0.0)
        except Exception:  # noqa: BLE001 - what a careless user does
            pass
        return out[0]

    def call_model(out):
        model(torch.randn(1, 3, 32, 32))
        return out[0]

    def call_a_block(out):
        blocks = model.blocks
        blocks[0](torch.randn(1, 17, 32))
        return out[0]

    def capture_again(out):
        capture(model, torch.randn(1, 3, 32, 32), target=0)
        return out[0]

    def backward(out):
        out[0].backward(retain_graph=True)
        return out[0]

    def autograd_grad(out):
        torch.autograd.grad(out[0], out, retain_graph=True)
        return out[0]

    def change_output(out):
        out.mul_(2.0)
        return out[0]

    def replace(out):
        model.head.weight = torch.nn.Parameter(model.head.weight.detach() * 2)
        return out[0]

    in_place = "in place"
    return {
        "scale_in_place": (scale_in_place, [in_place, "qkv.weight", "(mul_)", "nothing was changed"]),
        "through_data": (through_data, [in_place, "qkv.weight", "(add_)"]),
        "assign_data": (assign_data, [in_place, "qkv.weight", "(__set__)"]),
        "set_items": (set_items, [in_place, "qkv.weight", "(__setitem__)"]),
        "reinitialise": (reinitialise, [in_place, "qkv.weight", "(normal_)"]),
        "write_out": (write_out, [in_place, "qkv.weight", "(mul)"]),
        "swallow": (swallow, [in_place, "qkv.weight", "(mul_)"]),
        "call_model": (call_model, ["calls the model again"]),
        "call_a_block": (call_a_block, ["calls the model again"]),
        "capture_again": (capture_again, ["starts a capture inside itself"]),
        "backward": (backward, ["takes a gradient itself (backward)"]),
        "autograd_grad": (autograd_grad, ["takes a gradient itself (grad)"]),
        "change_output": (change_output, ["changes the model's output in place (mul_)"]),
        "replace": (replace, ["replaced the model's head.weight", "put back as they were"]),
    }


NAMES = ["scale_in_place", "through_data", "assign_data", "set_items", "reinitialise", "write_out", "swallow",
         "call_model", "call_a_block", "capture_again", "backward", "autograd_grad", "change_output", "replace"]


def _weights(model):
    return {n: t.detach().clone() for n, t in model.state_dict().items()}


def _check(model, run, name):
    fn, words = _misuses(model)[name]
    before = _weights(model)
    ids = {n: id(p) for n, p in model.named_parameters()}
    with pytest.raises(TargetError) as e:
        run(CallableTarget(fn, name=name))
    line = str(e.value)
    assert f"target function {name} " in line and "\n" not in line and len(line) < 300, line
    assert all(w in line for w in words), (words, line)
    after = _weights(model)
    assert all(torch.equal(before[n], after[n]) for n in before), name  # the weights are as they were
    assert {n: id(p) for n, p in model.named_parameters()} == ids
    return line


@pytest.mark.parametrize("name", NAMES)
def test_a_target_that_touches_the_model_is_refused_on_the_hooks_route(name):
    model = _vit()
    x = torch.randn(2, 3, 32, 32)
    reference = capture(model, x, target=lambda out: out[1])
    _check(model, lambda t: capture(model, x, target=t), name)
    again = capture(model, x, target=lambda out: out[1])  # the model still explains as before
    assert torch.equal(again.attention_grads, reference.attention_grads)
    assert all(b.attn.fused for b in model.blocks)  # the flags restored after the refusals


@pytest.mark.parametrize("name", ["scale_in_place", "through_data", "call_model", "capture_again", "backward",
                                  "replace"])
def test_a_target_that_touches_the_model_is_refused_on_the_streamed_route(name):
    model = _vit()
    x = torch.randn(2, 3, 32, 32)
    _check(model, lambda t: stream_pass(model, x, target=t, legrad=("mean",)), name)


@pytest.mark.parametrize("name", ["scale_in_place", "through_data", "call_model", "capture_again", "backward",
                                  "replace"])
def test_a_target_that_touches_an_adapted_module_is_refused(name):
    model = _timm()
    x = torch.randn(2, 3, 32, 32)
    _check(model, lambda t: capture(model, x, target=t), name)


def test_a_change_that_gets_past_the_fence_is_reported_with_reopen():
    """An in-place change with torch functions disabled (past the fence): its version counter moved, so the line
    says the weights are no longer those opened."""
    model = _vit()

    def sneaky(out):
        with torch.no_grad(), torch._C.DisableTorchFunction():
            model.head.bias.add_(1.0)
        return out[0]

    with pytest.raises(TargetError, match=r"target function sneaky changed the model's head.bias in place: .*reopen "
                                          r"the model"):
        capture(model, torch.randn(1, 3, 32, 32), target=CallableTarget(sneaky, name="sneaky"))


def _numpy_view(model):
    def numpy_view(out):  # a NumPy view of the weight: no torch function, no version counter
        model.blocks[0].attn.qkv.weight.data.numpy()[0, 0] += 1.0
        return out[0]
    return numpy_view


def _data_unfenced(model):
    def data_unfenced(out):  # .data has a version counter of its own: the weight's does not move
        with torch._C.DisableTorchFunction():
            model.blocks[0].attn.qkv.weight.data.add_(1e-3)
        return out[0]
    return data_unfenced


@pytest.mark.parametrize("make", [_numpy_view, _data_unfenced])
@pytest.mark.parametrize("route", ["hooks", "streamed"])
def test_a_change_no_fence_nor_version_counter_sees_is_found_by_content(make, route):
    """Writes past the fence that leave the parameter's version counter as it was: found by comparing the weights'
    content before and after the batch's calls (one line, "reopen the model")."""
    model = _vit()
    x = torch.randn(2, 3, 32, 32)
    fn = make(model)
    version = model.blocks[0].attn.qkv.weight._version
    with pytest.raises(TargetError) as e:
        if route == "hooks":
            capture(model, x, target=CallableTarget(fn, name=fn.__name__))
        else:
            stream_pass(model, x, target=CallableTarget(fn, name=fn.__name__), legrad=("mean",))
    assert str(e.value) == (f"target function {fn.__name__} changed the model's blocks.0.attn.qkv.weight in place: "
                            "the maps would explain another model, and its weights are no longer those opened: reopen "
                            "the model")
    assert model.blocks[0].attn.qkv.weight._version == version  # what the version check alone missed


def test_a_target_that_only_reads_is_untouched_by_the_fence():
    """Reading the output (and the model's weights), making new tensors and changing them in place: the scores are
    the function's, as without the fence."""
    model = _vit()
    x = torch.randn(2, 3, 32, 32)

    def reads(out):
        w = model.head.weight.detach().clone()
        w.mul_(2.0)  # a copy: not the model's
        p = out.softmax(-1)
        p2 = p.clone()
        p2[0] = 0.0
        return p[3] - p2.sum() * 0 + (w.sum() * 0)

    cap = capture(model, x, target=CallableTarget(reads, name="reads"))
    with torch.no_grad():
        want = model(x).softmax(-1)[:, 3]
    torch.testing.assert_close(cap.scores, want, rtol=1e-5, atol=1e-6)


def test_a_pipeline_run_with_a_misbehaving_target_is_one_line_and_the_next_run_is_right():
    model = _vit()
    pipe = Pipeline(model)
    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 40, 3), dtype=np.uint8))
    first = pipe.run(img, target=1)

    def evil(out):
        with torch.no_grad():
            model.head.weight.mul_(2.0)
        return out[0]

    with pytest.raises(TargetError, match=r"^target function evil changes the model's head.weight in place \(mul_\)"):
        pipe.run(img, target=evil)
    second = pipe.run(img, target=1)
    assert torch.equal(first.logits, second.logits) and torch.equal(first.attention_grads, second.attention_grads)
