"""Shared helpers of the model-family tests (tests/test_families_*.py): reference attention from timm and
Hugging Face models, relative-error comparison, folder writers, and one check of a loaded model against its
reference at two input sizes."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import save_file

from vitviz.capture import capture

RTOL = 1e-4

FAMILY_OPTIONS: dict[str, dict] = {
    "cls": {},
    "map": {"global_pool": "map", "class_token": False},
    "registers": {"num_reg_tokens": 2},
    "distilled": {"distilled": True},
    "avg": {"global_pool": "avg", "class_token": False},
    "beit": {"rel_pos_bias": "layer", "pos_embed": "none"},
    "features": {"num_classes": 0},
    "dinov3": {"rope": "dinov3", "rope_theta": 100.0, "rope_half": True, "pos_embed": "none", "num_reg_tokens": 4,
               "init_values": 1e-5, "qkv_bias": False, "layer_norm_eps": 1e-5},
}
"""``create_model`` options of each family of vitviz's own ViT that the capture treats apart: a [CLS] token, an
attention-pooling head (SigLIP's "MAP"), registers, a distillation token, mean pooling, BEiT's relative position
bias, no classifier, DINOv3's shape (RoPE, 4 registers, LayerScale, no absolute position embedding). Tests take the
families they need."""


def families(*names: str) -> dict[str, dict]:
    """The :data:`FAMILY_OPTIONS` of ``names``, in that order."""
    return {n: FAMILY_OPTIONS[n] for n in names}


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| (shapes must agree)."""
    assert tuple(a.shape) == tuple(b.shape), (tuple(a.shape), tuple(b.shape))
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def randomise_(model: torch.nn.Module, scale: float = 0.05) -> torch.nn.Module:
    """Add noise to every float parameter (references zero-initialise heads, biases, LayerScale ... which would hide
    a wrongly mapped tensor)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.is_floating_point():
                # position embeddings and relative-position tables rough (so that how they are resampled matters)
                rough = "pos" in name or "relative_position" in name
                p.add_(torch.randn(p.shape, generator=g) * (1.0 if rough else scale))
    return model.eval()


def write_timm_folder(folder: Path, model, architecture: str, pretrained_cfg: dict | None = None,
                      **extra) -> Path:
    """A timm hub folder: ``config.json`` (architecture, num_classes, pretrained_cfg) + ``model.safetensors``."""
    folder.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(sd, str(folder / "model.safetensors"))
    heads = model.blocks[0].attn.num_heads
    cfg = {"architecture": architecture, "num_classes": getattr(model, "num_classes", 0),
           "pretrained_cfg": pretrained_cfg or {}, "model_args": {"num_heads": heads}, **extra}
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


class AttnRecorder:
    """Record the post-softmax attention of reference modules by hooking the input of their attention dropout
    (timm's explicit path: ``attn = softmax(...); attn = self.attn_drop(attn)``)."""

    def __init__(self, modules: list[torch.nn.Module]):
        self.maps: list[torch.Tensor] = []
        self.handles = [m.register_forward_hook(lambda mod, args, out: self.maps.append(args[0].detach()))
                        for m in modules]

    def close(self) -> None:
        for h in self.handles:
            h.remove()


class SoftmaxRecorder:
    """Record what ``torch.Tensor.softmax`` returns while ``module`` runs (timm's attention-pool head has no
    dropout to hook: its own softmax output is taken)."""

    def __init__(self, module: torch.nn.Module):
        self.maps: list[torch.Tensor] = []
        self.orig = torch.Tensor.softmax
        rec = self

        def wrapped(t, *a, **k):
            out = rec.orig(t, *a, **k)
            rec.maps.append(out.detach())
            return out

        self.handles = [module.register_forward_pre_hook(lambda m, a: setattr(torch.Tensor, "softmax", wrapped)),
                        module.register_forward_hook(lambda m, a, o: setattr(torch.Tensor, "softmax", rec.orig))]

    def close(self) -> None:
        torch.Tensor.softmax = self.orig
        for h in self.handles:
            h.remove()


def timm_attentions(model, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """timm model output and each block's attention ``[B, H, N, N]`` from its explicit (unfused) path."""
    for b in model.blocks:
        b.attn.fused_attn = False
    rec = AttnRecorder([b.attn.attn_drop for b in model.blocks])
    try:
        with torch.no_grad():
            out = model(x)
    finally:
        rec.close()
    return out, rec.maps


def timm_reference(model):
    """A reference for :func:`check_against_reference` from a timm model: its output, each block's attention from its
    explicit path (the input of its attention dropout) and, with an attention-pool head, the pool's own softmax."""
    def ref(x):
        for b in model.blocks:
            b.attn.fused_attn = False
        rec = AttnRecorder([b.attn.attn_drop for b in model.blocks])
        pool = None
        if model.attn_pool is not None:
            model.attn_pool.fused_attn = False
            pool = SoftmaxRecorder(model.attn_pool)
        try:
            with torch.no_grad():
                out = model(x)
        finally:
            rec.close()
            if pool is not None:
                pool.close()
        pool_attn = pool.maps[-1][:, :, 0] if pool is not None else None
        return out, rec.maps, pool_attn
    return ref


def check_against_reference(
    ours,
    reference: Callable[[torch.Tensor], tuple[torch.Tensor, list[torch.Tensor], torch.Tensor | None]],
    sizes: list[tuple[int, int]],
    *,
    prefix: int,
    registers: int = 0,
    target: int | None = None,
) -> dict[str, float]:
    """Compare outputs and every layer's attention (and the pooling attention where the reference gives it) at each
    input size; capture (with gradients when ``target`` is given) and check prefix count and grid. Returns the worst
    relative errors seen, for messages."""
    worst = {"out": 0.0, "attn": 0.0, "pool": 0.0}
    for hw in sizes:
        x = torch.randn(2, 3, *hw)
        ref_out, ref_attn, ref_pool = reference(x)
        with torch.no_grad():
            out = ours(x)
        e = rel_err(out, ref_out)
        worst["out"] = max(worst["out"], e)
        assert e <= RTOL, f"output at {hw}: relative error {e:.2e}"
        cap = capture(ours, x, target=target)
        grid = (hw[0] // ours.patch_size, hw[1] // ours.patch_size)
        assert cap.grid == grid and cap.num_prefix_tokens == prefix
        assert ours.config.num_reg_tokens == registers
        assert cap.num_tokens == prefix + grid[0] * grid[1]
        assert len(ref_attn) == cap.num_layers
        for i, ra in enumerate(ref_attn):
            e = rel_err(cap.attentions[i], ra)
            worst["attn"] = max(worst["attn"], e)
            assert e <= RTOL, f"layer {i} attention at {hw}: relative error {e:.2e}"
        assert rel_err(cap.logits, ref_out) <= RTOL  # the capture pass computes the same output
        if ref_pool is not None:
            assert cap.pool_attention is not None
            e = rel_err(cap.pool_attention, ref_pool)
            worst["pool"] = max(worst["pool"], e)
            assert e <= RTOL, f"pooling attention at {hw}: relative error {e:.2e}"
        if target is not None:
            assert cap.attention_grads is not None and cap.attention_grads.abs().sum() > 0
            assert torch.isfinite(cap.attention_grads).all()
            if cap.pool_attention is not None:
                assert cap.pool_attention_grads is not None and cap.pool_attention_grads.abs().sum() > 0
    return worst


class MhaRecorder:
    """Record the per-head attention weights ``[B, H, Nq, Nk]`` of ``nn.MultiheadAttention`` modules during the
    reference's own forward: a pre-hook asks each module for its weights (``need_weights``, not averaged over the
    heads) and a hook reads them from the module's output."""

    def __init__(self, modules: list[torch.nn.Module]):
        self.maps: list[torch.Tensor] = []

        def ask(mod, args, kwargs):
            return args, {**kwargs, "need_weights": True, "average_attn_weights": False}

        def read(mod, args, kwargs, out):
            self.maps.append(out[1].detach())

        self.handles = [h for m in modules for h in (m.register_forward_pre_hook(ask, with_kwargs=True),
                                                      m.register_forward_hook(read, with_kwargs=True))]

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def naflex_model(budget: int = 16):
    """A tiny vitviz ViT shaped as SigLIP 2 NaFlex (no [CLS], the attention-pool head, a 4x4 position table resized
    bilinearly with antialiasing) whose preprocessing keeps each image's aspect ratio up to ``budget`` patches of 8
    pixels: a 40 x 100 image becomes a 2 x 7 grid."""
    from vitviz.model import create_model
    from vitviz.model.preprocess import Preprocess

    torch.manual_seed(0)
    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=4,
                     num_classes=0, class_token=False, global_pool="map", pos_embed_interp="bilinear_aa",
                     act_layer="gelu_tanh").eval()
    with torch.no_grad():
        for b in m.blocks:
            b.attn.qkv.weight.mul_(10.0)
    pre = Preprocess(resize=(32, 32), crop=(32, 32), interpolation="bilinear", max_num_patches=budget, patch_size=8)
    m.spec = m.spec.replace(preprocess=pre, name="tiny NaFlex")
    return m


def save_hf_folder(model, folder: Path, preprocessor: dict | None = None) -> Path:
    """``model.save_pretrained(folder)`` (transformers' own writer; its warnings hushed), with a
    ``preprocessor_config.json`` when given; returns the folder."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(folder)
    if preprocessor is not None:
        (folder / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    return folder
