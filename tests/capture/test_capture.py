"""vitviz.capture against timm's own attention and an independent float64 re-implementation of the forward."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer

from vitviz.capture import Capture, CaptureError, capture
from vitviz.model.vit import ViT

CFG = dict(img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=2, num_classes=5)


def _pair(**extra):
    """A random timm VisionTransformer and our ViT with the same weights."""
    timm_kw = dict(CFG)
    ours_kw = dict(CFG)
    if "reg_tokens" in extra:
        timm_kw["reg_tokens"] = extra["reg_tokens"]
        ours_kw["num_reg_tokens"] = extra["reg_tokens"]
    if extra.get("no_embed_class"):
        timm_kw["no_embed_class"] = ours_kw["no_embed_class"] = True
    ref = VisionTransformer(**timm_kw).eval()
    with torch.no_grad():  # timm zero-inits some tokens/biases: randomise everything so nothing cancels
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    ours = ViT(**ours_kw).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    return ref, ours


def _timm_attentions(ref: VisionTransformer, x: torch.Tensor):
    """timm's softmax output (the input of attn_drop) and block outputs, with fused attention off."""
    attns, outs, handles = [], [], []
    for blk in ref.blocks:
        blk.attn.fused_attn = False
        handles.append(blk.attn.attn_drop.register_forward_pre_hook(lambda m, a: attns.append(a[0].detach().clone())))
        handles.append(blk.register_forward_hook(lambda m, a, o: outs.append(o.detach().clone())))
    try:
        with torch.no_grad():
            logits = ref(x)
    finally:
        for h in handles:
            h.remove()
    return torch.stack(attns), torch.stack(outs), logits


def _hook_state(model: torch.nn.Module):
    return [(len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks)) for m in model.modules()]


@pytest.mark.parametrize("extra", [{}, {"reg_tokens": 2, "no_embed_class": True}])
def test_attentions_and_tokens_equal_timm(extra):
    ref, model = _pair(**extra)
    x = torch.randn(3, 3, 32, 32)
    t_attn, t_out, t_logits = _timm_attentions(ref, x)
    cap = capture(model, x)
    L, B, H, N = 3, 3, 2, 1 + extra.get("reg_tokens", 0) + 16
    assert cap.attentions.shape == (L, B, H, N, N)
    assert cap.tokens.shape == (L + 1, B, N, 32)
    assert cap.logits.shape == (B, 5)
    assert cap.grid == (4, 4) and cap.patch_size == 8 and cap.num_prefix_tokens == N - 16
    assert cap.attention_grads is None
    torch.testing.assert_close(cap.attentions, t_attn, rtol=0, atol=1e-5)
    torch.testing.assert_close(cap.tokens[1:], t_out, rtol=0, atol=1e-5)
    torch.testing.assert_close(cap.logits, t_logits, rtol=0, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(cap.tokens[0], model.embed(x), rtol=0, atol=0)
    torch.testing.assert_close(cap.attentions.sum(-1), torch.ones(L, B, H, N), rtol=0, atol=1e-5)
    assert cap.attentions.device.type == "cpu" and cap.attentions.dtype == torch.float32
    assert not cap.attentions.is_inference() and not cap.logits.is_inference()


def test_other_input_size_and_image_slices():
    _, model = _pair()
    x = torch.randn(2, 3, 48, 40)
    cap = capture(model, x)
    assert cap.grid == (6, 5) and cap.attentions.shape[-1] == 1 + 30
    with torch.no_grad():
        torch.testing.assert_close(cap.logits, model(x), rtol=0, atol=1e-5)
    one = cap.image(1)
    assert one.attentions.shape == (3, 2, 31, 31) and one.tokens.shape == (4, 31, 32) and one.logits.shape == (5,)
    torch.testing.assert_close(one.attentions, cap.attentions[:, 1])
    single = capture(model, x[1:2])
    torch.testing.assert_close(single.attentions[:, 0], one.attentions, rtol=0, atol=1e-5)
    with pytest.raises(IndexError):
        cap.image(2)


def test_flags_and_hooks_restored():
    _, model = _pair()
    model.blocks[1].attn.fused = False  # mixed flags must come back exactly
    flags = [b.attn.fused for b in model.blocks]
    before = _hook_state(model)
    capture(model, torch.randn(1, 3, 32, 32))
    capture(model, torch.randn(1, 3, 32, 32), target=2)
    assert [b.attn.fused for b in model.blocks] == flags == [True, False, True]
    assert _hook_state(model) == before


class Boom(RuntimeError):
    pass


def test_restored_after_exception_inside_forward(monkeypatch):
    _, model = _pair()
    flags = [b.attn.fused for b in model.blocks]
    before = _hook_state(model)

    def explode(*a, **k):
        raise Boom("mlp failed")

    monkeypatch.setattr(model.blocks[1].mlp, "forward", explode)
    for target in (None, 1):
        with pytest.raises(Boom):
            capture(model, torch.randn(2, 3, 32, 32), target=target)
        assert [b.attn.fused for b in model.blocks] == flags
        assert _hook_state(model) == before


def test_restored_after_exception_in_a_hook():
    _, model = _pair()

    def bad_hook(module, args, out):
        raise Boom("user hook failed")

    h = model.blocks[2].attn.attn_map.register_forward_hook(bad_hook)
    before = _hook_state(model)
    with pytest.raises(Boom):
        capture(model, torch.randn(1, 3, 32, 32))
    assert _hook_state(model) == before
    assert model.fused_attention
    h.remove()
    assert capture(model, torch.randn(1, 3, 32, 32)).attentions.shape[0] == 3


def test_not_capturable_models_raise_capture_error(monkeypatch):
    ref, model = _pair()
    x = torch.randn(1, 3, 32, 32)
    # a timm model is captured through vitviz.capture.foreign (issue 17): the same numbers as our ViT with its weights
    torch.testing.assert_close(capture(ref, x).attentions, capture(model, x).attentions, rtol=1e-5, atol=1e-6)
    with pytest.raises(CaptureError, match="found no attention to capture"):
        capture(torch.nn.Linear(3, 3), x)
    with pytest.raises(CaptureError):
        capture("model", torch.randn(1, 3, 32, 32))
    empty = ViT(img_size=32, patch_size=8, embed_dim=32, depth=0, num_heads=2, num_classes=5)
    with pytest.raises(CaptureError, match="no transformer blocks"):
        capture(empty, torch.randn(1, 3, 32, 32))

    # an attention that bypasses attn_map (always fused): the hook sees nothing -> error, hooks still removed
    before = _hook_state(model)
    attn = model.blocks[1].attn

    def fused_only(x):
        B, N, C = x.shape
        q, k, v = attn.qkv(x).reshape(B, N, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return attn.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, C))

    monkeypatch.setattr(attn, "forward", fused_only)
    with pytest.raises(CaptureError, match=r"blocks\[1\] attention hook fired 0 times"):
        capture(model, torch.randn(1, 3, 32, 32))
    assert _hook_state(model) == before and model.fused_attention


def test_bad_inputs():
    _, model = _pair()
    with pytest.raises(ValueError, match="multiple of patch_size"):
        capture(model, torch.randn(1, 3, 30, 32))
    with pytest.raises(ValueError, match="batch"):
        capture(model, torch.randn(3, 32, 32))
    with pytest.raises(ValueError, match="out of range"):
        capture(model, torch.randn(2, 3, 32, 32), target=5)
    with pytest.raises(ValueError, match="one per image"):
        capture(model, torch.randn(2, 3, 32, 32), target=[1, 2, 3])
    with pytest.raises(ValueError, match="integer"):
        capture(model, torch.randn(2, 3, 32, 32), target=torch.tensor([0.5, 1.0]))
    with pytest.raises(ValueError, match="store_dtype"):
        capture(model, torch.randn(2, 3, 32, 32), store_dtype=torch.int8)
    with pytest.raises(ValueError, match="empty"):
        capture(model, torch.randn(0, 3, 32, 32))


# ---------------------------------------------------------------- gradients vs an independent float64 forward
def _manual_forward(sd: dict, x: torch.Tensor, perturb: list[torch.Tensor]):
    """Our own float64 ViT forward from the state dict; attention l is ``softmax(qk^T/sqrt(d)) + perturb[l]``."""
    sd = {k: v.double() for k, v in sd.items()}
    D, H, P = CFG["embed_dim"], CFG["num_heads"], CFG["patch_size"]
    hd = D // H
    B = x.shape[0]
    t = F.conv2d(x.double(), sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"], stride=P)
    t = t.flatten(2).transpose(1, 2)
    t = torch.cat([sd["cls_token"].expand(B, -1, -1), t], dim=1) + sd["pos_embed"]
    N = t.shape[1]
    probs = []
    for i in range(CFG["depth"]):
        pre = f"blocks.{i}."
        h = F.layer_norm(t, (D,), sd[pre + "norm1.weight"], sd[pre + "norm1.bias"], eps=1e-6)
        qkv = F.linear(h, sd[pre + "attn.qkv.weight"], sd[pre + "attn.qkv.bias"]).reshape(B, N, 3, H, hd)
        q, k, v = (qkv[:, :, j].transpose(1, 2) for j in range(3))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1)
        probs.append(a.detach())
        a = a + perturb[i]
        o = (a @ v).transpose(1, 2).reshape(B, N, D)
        t = t + F.linear(o, sd[pre + "attn.proj.weight"], sd[pre + "attn.proj.bias"])
        h = F.layer_norm(t, (D,), sd[pre + "norm2.weight"], sd[pre + "norm2.bias"], eps=1e-6)
        h = F.linear(F.gelu(F.linear(h, sd[pre + "mlp.fc1.weight"], sd[pre + "mlp.fc1.bias"])),
                     sd[pre + "mlp.fc2.weight"], sd[pre + "mlp.fc2.bias"])
        t = t + h
    t = F.layer_norm(t, (D,), sd["norm.weight"], sd["norm.bias"], eps=1e-6)
    return F.linear(t[:, 0], sd["head.weight"], sd["head.bias"]), probs


def _reference_grads(model: ViT, x: torch.Tensor, targets: list[int]):
    """d logit[b, targets[b]] / d attention_l, one image at a time, via zero perturbation leaves."""
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    per_image = []
    for b, tgt in enumerate(targets):
        xb = x[b:b + 1]
        N = 1 + (32 // 8) ** 2
        leaves = [torch.zeros(1, CFG["num_heads"], N, N, dtype=torch.float64, requires_grad=True)
                  for _ in range(CFG["depth"])]
        logits, probs = _manual_forward(sd, xb, leaves)
        grads = torch.autograd.grad(logits[0, tgt], leaves)
        per_image.append((torch.stack([g[0] for g in grads]), torch.stack([p[0] for p in probs]), logits[0]))
    return per_image


def test_grads_equal_independent_autograd_per_layer_in_order():
    _, model = _pair()
    x = torch.randn(2, 3, 32, 32)
    targets = [1, 3]
    cap = capture(model, x, target=targets)
    assert cap.attention_grads is not None and cap.attention_grads.shape == cap.attentions.shape
    assert cap.targets.tolist() == targets
    assert all(p.grad is None for p in model.parameters())  # parameters untouched
    ref = _reference_grads(model, x, targets)
    for b, (g_ref, a_ref, logit_ref) in enumerate(ref):
        torch.testing.assert_close(cap.attentions[:, b].double(), a_ref, rtol=0, atol=1e-5)
        torch.testing.assert_close(cap.logits[b].double(), logit_ref, rtol=1e-5, atol=1e-5)
        scale = g_ref.abs().max().item()
        assert scale > 0
        for layer in range(CFG["depth"]):
            torch.testing.assert_close(cap.attention_grads[layer, b].double(), g_ref[layer], rtol=1e-4,
                                       atol=1e-5 * scale)
        # the pairing is not symmetric: reversed order would not match
        assert not torch.allclose(cap.attention_grads[0, b].double(), g_ref[-1], atol=1e-3 * scale)
    # same image, target given as an int or a tensor
    one = capture(model, x[1:2], target=torch.tensor([3]))
    torch.testing.assert_close(one.attention_grads[:, 0], cap.attention_grads[:, 1], rtol=1e-4, atol=1e-7)
    # the no-grad capture gives the same attentions
    plain = capture(model, x)
    torch.testing.assert_close(plain.attentions, cap.attentions, rtol=0, atol=1e-6)


def test_grads_of_frozen_model():
    _, model = _pair()
    model.requires_grad_(False)
    x = torch.randn(1, 3, 32, 32)
    cap = capture(model, x, target=4)
    (g_ref, _, _), = _reference_grads(model, x, [4])
    torch.testing.assert_close(cap.attention_grads[:, 0].double(), g_ref, rtol=1e-4,
                               atol=1e-5 * g_ref.abs().max().item())


def test_float16_storage_halves_memory():
    _, model = _pair()
    x = torch.randn(2, 3, 32, 32)
    full = capture(model, x, target=0)
    half = capture(model, x, target=0, store_dtype=torch.float16)
    assert half.attentions.dtype == half.tokens.dtype == half.attention_grads.dtype == torch.float16
    assert half.logits.dtype == torch.float32
    for name in ("attentions", "tokens", "attention_grads"):
        f, h = getattr(full, name), getattr(half, name)
        assert h.numel() * h.element_size() * 2 == f.numel() * f.element_size()
        torch.testing.assert_close(h.float(), f, rtol=2e-3, atol=1e-3 * f.abs().max().item())
    assert half.nbytes < 0.55 * full.nbytes
    mixed = capture(model, x, target=0, store_dtype=torch.float16, grad_dtype=torch.float32)
    assert mixed.attention_grads.dtype == torch.float32
    torch.testing.assert_close(mixed.attention_grads, full.attention_grads)


def test_concurrent_captures_of_one_model_are_serialised():
    import threading

    _, model = _pair()
    xs = [torch.randn(1, 3, 32, 32) for _ in range(4)]
    expected = [capture(model, x, target=1) for x in xs]
    results: dict[int, Capture] = {}
    errors: list[BaseException] = []

    def work(i):
        try:
            results[i] = capture(model, xs[i], target=1)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(4):
        torch.testing.assert_close(results[i].attentions, expected[i].attentions)
        torch.testing.assert_close(results[i].attention_grads, expected[i].attention_grads)
    assert model.fused_attention


def test_capture_is_a_dataclass_with_documented_fields():
    _, model = _pair()
    cap = capture(model, torch.randn(1, 3, 32, 32))
    assert isinstance(cap, Capture)
    assert (cap.batch_size, cap.num_layers, cap.num_heads, cap.num_tokens) == (1, 3, 2, 17)


def test_a_capture_that_cannot_fit_is_refused_up_front():
    """Declared sizes beyond the available memory: a clear error before any allocation."""
    import pytest

    from vitviz.capture import CaptureError, available_memory, check_capture_memory

    # ViT-H/14 at 518 px (32 layers, 16 heads, 1370 tokens) with gradients: 16.5 GiB of stacks (+2.4 weights)
    with pytest.raises(CaptureError, match=r"needs about 16\.\d GiB, but only 8\.0 GiB"):
        check_capture_memory(32, 1, 16, 1370, grads=True, available=8 * 2**30)
    check_capture_memory(32, 1, 16, 1370, grads=False, available=8 * 2**30)  # 6.4 GiB without gradients: fine
    free = available_memory()
    assert free is None or free > 0
