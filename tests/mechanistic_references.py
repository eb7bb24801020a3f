"""References for the mechanistic passes (tests/capture/test_mechanistic.py, tests/cli/test_mechanistic_cli.py),
written with forward hooks on timm's OWN modules (blocks, ``attn.proj``, ``norm``, ``attn_pool``, ``fc_norm``,
``head``), and the random-weight timm models they compare with, written as timm folders and opened by vitviz."""

from __future__ import annotations

import torch
from family_helpers import randomise_, write_timm_folder

from vitviz.pipeline import Pipeline

SMALL = {"img_size": 32, "patch_size": 8, "embed_dim": 48, "depth": 3, "num_heads": 3}
SIGLIP_CFG = {"input_size": [3, 32, 32], "crop_pct": 1.0, "interpolation": "bicubic", "mean": [0.5] * 3,
              "std": [0.5] * 3}
MODELS = {
    "cls": ("vit_base_patch16_224", {}, {}),
    "avg": ("vit_base_patch16_224", {"global_pool": "avg"}, {}),
    "map": ("vit_base_patch16_siglip_224", {}, SIGLIP_CFG),
}


def timm_folder(tmp_path, kind: str, num_classes: int = 7):
    """``(timm model, its timm folder)``: a random-weight timm model of ``kind`` (:data:`MODELS`)."""
    import timm  # the callers skip without it

    arch, options, cfg = MODELS[kind]
    torch.manual_seed(0)
    ref = randomise_(timm.create_model(arch, pretrained=False, num_classes=num_classes, **SMALL, **options), 0.2)
    return ref.eval(), write_timm_folder(tmp_path / kind, ref, arch, cfg)


def timm_pair(tmp_path, kind: str, num_classes: int = 7):
    """``(timm model, vitviz's model opened from its folder by Pipeline.open)``."""
    ref, folder = timm_folder(tmp_path, kind, num_classes)
    return ref, Pipeline.open(str(folder), precision="fp32").model


def images():
    g = torch.Generator().manual_seed(3)
    return torch.randn(1, 3, 32, 32, generator=g), torch.randn(1, 3, 32, 32, generator=g)


def block_outputs(ref, x):
    """Each timm block's output, by forward hooks on timm's blocks."""
    outs = []
    handles = [b.register_forward_hook(lambda m, a, o: outs.append(o.detach())) for b in ref.blocks]
    try:
        with torch.no_grad():
            ref(x)
    finally:
        for h in handles:
            h.remove()
    return outs


def token_alone(ref, tok):
    """A token ``[B, D]`` through timm's final norm, its pool over that token alone, fc_norm and head."""
    x = ref.norm(tok[:, None])
    pooled = ref.attn_pool(x) if getattr(ref, "attn_pool", None) is not None else x[:, 0]
    return ref.head(ref.fc_norm(pooled))


def knockout_reference(ref, x, target, mode):
    L, H = len(ref.blocks), ref.blocks[0].attn.num_heads
    scores = torch.empty(L, H)
    for l in range(L):
        for h in range(H):
            def pre(module, args, h=h):
                a = args[0].clone()
                d = a.shape[-1] // H
                sl = a[..., h * d:(h + 1) * d]
                a[..., h * d:(h + 1) * d] = sl.mean(dim=1, keepdim=True) if mode == "mean" else 0.0
                return (a,)

            handle = ref.blocks[l].attn.proj.register_forward_pre_hook(pre)
            try:
                with torch.no_grad():
                    scores[l, h] = ref(x)[0, target]
            finally:
                handle.remove()
    return scores


def patching_reference(ref, clean, corrupt, target, positions):
    """Recovered share per layer and position, by hooks replacing timm's block outputs."""
    donor = block_outputs(ref, clean)
    with torch.no_grad():
        c, k = float(ref(clean)[0, target]), float(ref(corrupt)[0, target])
    out = torch.empty(len(ref.blocks), len(positions))
    for l, blk in enumerate(ref.blocks):
        for j, pos in enumerate(positions):
            def hook(m, a, o, l=l, pos=pos):
                o = o.clone()
                o[:, pos] = donor[l][:, pos]
                return o

            handle = blk.register_forward_hook(hook)
            try:
                with torch.no_grad():
                    out[l, j] = (float(ref(corrupt)[0, target]) - k) / (c - k)
            finally:
                handle.remove()
    return out


