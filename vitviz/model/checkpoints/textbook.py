"""State dicts of the ViTs people write themselves, in the three textbook styles (issue 17). No Qt.

``model.state_dict()`` saved with ``torch.save`` (or safetensors) from a module in one of these styles loads into
:class:`vitviz.model.ViT` with the same outputs (LayerNorm eps 1e-5, PyTorch's default; exact GELU):

=======  =====================================================================  ====================================
style    the module                                                             keys (``i``: block)
=======  =====================================================================  ====================================
B        ``VisionTransformer(img_size, patch_size, in_channels, num_classes,    ``patch_embedding.proj``,
         d_model, num_heads, num_layers, d_ff, dropout)``: pre-norm blocks,      ``cls_token``, ``pos_embedding``,
         separate query / key / value / output projections, [CLS] + learned    ``{encoder|layers|blocks}.i.norm1``,
         positions, final LayerNorm, linear head                                ``.attn.W_{q,k,v,o}``, ``.norm2``,
                                                                                ``.ff.fc1``, ``.ff.fc2``, ``norm``,
                                                                                ``head``
C        post-norm encoder on ``nn.MultiheadAttention(batch_first=True)``        ``patch_embedding.projection``,
         (``x = LN(x + Attn(x)); x = LN(x + FF(x))``), conv patch embedding,      ``patch_embedding.cls_token``,
         [CLS] + learned positions ``[N, D]``, ``mlp_head = Sequential(          ``patch_embedding.positions``,
         LayerNorm, Linear)``; ``(img_size, patch_size, num_classes,             ``{encoder|layers|blocks}.i.attn.
         emb_size, depth, num_heads)``                                          {in_proj_*,out_proj}``, ``.norm1``,
                                                                                ``.ff.{0,2|3}``, ``.norm2``,
                                                                                ``mlp_head.{0,1}``
D        configured by a dict (``hidden_size``, ``num_hidden_layers``,           ``embedding.patch_embeddings.
         ``num_attention_heads`` ...), one fused ``qkv`` Linear per layer,       projection``, ``embedding.cls_token``,
         GELU, ``forward(x, output_attentions=True)``                            ``embedding.position_embeddings``,
                                                                                ``encoder.blocks.i.layernorm_{1,2}``,
                                                                                ``.attention.{qkv_projection|qkv}``,
                                                                                ``.attention.output_projection``,
                                                                                ``.mlp.dense_{1,2}``, a final
                                                                                ``layernorm``, ``classifier``
=======  =====================================================================  ====================================

State dicts do not record the number of heads: pass ``num_heads=`` (``--num-heads``) unless the width is one of the
paper's (192: 3, 384: 6, 768: 12 ...) or a multiple of 64 with 64-wide heads. A style-D model without a final
LayerNorm (the classifier on the last block's [CLS] token) has no counterpart in vitviz's ViT: show the module itself
(``vitviz.show(model, ...)``, ``vitviz --model file.py:Class``).

:func:`style_b_config` maps style B's constructor names (``d_model``, ``num_layers``, ``d_ff``, ``dropout``) to a
:class:`~vitviz.model.vit.ViTConfig`.
"""

from __future__ import annotations

import re

import torch

from vitviz.model.checkpoints.common import Converted, RawCheckpoint, err, names, rename
from vitviz.model.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess
from vitviz.model.vit import ViTConfig

NAME = "textbook"
DESCRIPTION = ("textbook ViTs (style B: patch_embedding.proj + attn.W_q; style C: patch_embedding.projection + "
               "nn.MultiheadAttention + mlp_head; style D: embedding.patch_embeddings.projection + qkv_projection)")

_LIST = r"(?:encoder|layers|blocks|encoder_layers|transformer\.layers)"
_B = _LIST + r"\.(\d+)\."
_D = r"encoder\.blocks\.(\d+)\."

RULES_B = [
    (r"patch_embedding\.proj\.(weight|bias)", r"patch_embed.proj.\1"),
    (r"cls_token", "cls_token"),
    (r"pos_embedding", "pos_embed"),
    (_B + r"norm(1|2)\.(weight|bias)", r"blocks.\1.norm\2.\3"),
    (_B + r"attn\.W_o\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (_B + r"ff\.fc(1|2)\.(weight|bias)", r"blocks.\1.mlp.fc\2.\3"),
    (r"norm\.(weight|bias)", r"norm.\1"),
    (r"head\.(weight|bias)", r"head.\1"),
]
RULES_C = [
    (r"patch_embedding\.projection\.(weight|bias)", r"patch_embed.proj.\1"),
    (r"patch_embedding\.cls_token", "cls_token"),
    (r"patch_embedding\.positions", "pos_embed"),
    (_B + r"attn\.in_proj_(weight|bias)", r"blocks.\1.attn.qkv.\2"),
    (_B + r"attn\.out_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (_B + r"norm(1|2)\.(weight|bias)", r"blocks.\1.norm\2.\3"),
    (_B + r"ff\.0\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
    (_B + r"ff\.(?:2|3)\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
    (r"mlp_head\.0\.(weight|bias)", r"norm.\1"),
    (r"mlp_head\.1\.(weight|bias)", r"head.\1"),
]
RULES_D = [
    (r"embedding\.patch_embeddings\.projection\.(weight|bias)", r"patch_embed.proj.\1"),
    (r"embedding\.cls_token", "cls_token"),
    (r"embedding\.position_embeddings", "pos_embed"),
    (_D + r"layernorm_(1|2)\.(weight|bias)", r"blocks.\1.norm\2.\3"),
    (_D + r"attention\.(?:qkv_projection|qkv)\.(weight|bias)", r"blocks.\1.attn.qkv.\2"),
    (_D + r"attention\.output_projection\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (_D + r"mlp\.dense_(1|2)\.(weight|bias)", r"blocks.\1.mlp.fc\2.\3"),
    (r"(?:encoder\.)?(?:layernorm|norm|final_norm)\.(weight|bias)", r"norm.\1"),
    (r"classifier\.(weight|bias)", r"head.\1"),
]
_QKV_B = re.compile(_B + r"attn\.W_(q|k|v)\.(weight|bias)")


def style(raw: RawCheckpoint) -> str | None:
    """``"B"``, ``"C"``, ``"D"`` or None, by the keys present."""
    keys = raw.tensors.keys()
    if "patch_embedding.proj.weight" in keys and any(_QKV_B.fullmatch(k) for k in keys):
        return "B"
    if "patch_embedding.projection.weight" in keys and "mlp_head.1.weight" in keys and any(
            k.endswith(".attn.in_proj_weight") for k in keys):
        return "C"
    if "embedding.patch_embeddings.projection.weight" in keys and any(
            re.fullmatch(_D + r"attention\.(?:qkv_projection|qkv)\.weight", k) for k in keys):
        return "D"
    return None


def detect(raw: RawCheckpoint) -> bool:
    """One of the three textbook layouts (see the module docstring)."""
    return style(raw) is not None


def convert(raw: RawCheckpoint) -> Converted:
    """Rename to our keys (style B: W_q / W_k / W_v fused into ``qkv``; style C: ``positions [N, D]`` ->
    ``pos_embed [1, N, D]``, post-norm blocks); LayerNorm eps 1e-5, exact GELU."""
    kind = style(raw)
    if kind == "B":
        parts: dict[tuple[int, str, str], tuple[str, torch.Tensor]] = {}
        rest = {}
        for k, v in raw.tensors.items():
            m = _QKV_B.fullmatch(k)
            if m:
                parts[(int(m.group(1)), m.group(3), m.group(2))] = (k, v)
            else:
                rest[k] = v
        c = rename(rest, RULES_B)
        for i, what in sorted({(i, what) for (i, what, _) in parts}):
            trio = [parts.get((i, what, x)) for x in "qkv"]
            if any(t is None for t in trio):
                have = [t[0] for t in trio if t is not None]
                raise err(raw.origin, f"missing keys: block {i} has only {names(have)} of W_q / W_k / W_v {what}")
            shapes = {tuple(t[1].shape) for t in trio}
            if len(shapes) != 1:
                raise err(raw.origin, f"shape mismatch: W_q / W_k / W_v {what} of block {i} have shapes "
                                      f"{[tuple(t[1].shape) for t in trio]}")
            name = f"blocks.{i}.attn.qkv.{what}"
            c.state[name] = torch.cat([t[1] for t in trio], dim=0)
            c.source_names[name] = trio[0][0].replace("W_q", "W_q/W_k/W_v")
            c.consume(*(t[0] for t in trio))
        options = {"act_layer": "gelu"}
    elif kind == "C":
        c = rename(raw.tensors, RULES_C)
        pe = c.state.get("pos_embed")
        if pe is not None and pe.ndim == 2:
            c.state["pos_embed"] = pe[None]
        options = {"act_layer": "gelu", "post_norm": True}
    elif kind == "D":
        c = rename(raw.tensors, RULES_D)
        if "norm.weight" not in c.state:
            raise err(raw.origin, "a style-D model without a final LayerNorm (its classifier reads the last block's "
                                  "[CLS] token directly) has no counterpart in vitviz's ViT: show the module itself "
                                  "(vitviz.show(model, images) or vitviz --model file.py:ClassName --weights ...)")
        options = {"act_layer": "gelu"}
    else:  # pragma: no cover - detect() chose this format
        raise err(raw.origin, "not a textbook ViT layout")
    c.config["layer_norm_eps"] = 1e-5
    c.config["options"] = options
    c.config["textbook_style"] = kind
    return c


def default_preprocess(cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    """Resize the shorter side to the input size and centre-crop it, ImageNet mean and std (what such models are
    usually trained with; pass ``preprocess=`` otherwise)."""
    h, w = cfg.img_size
    return Preprocess(resize=h if h == w else (h, w), crop=(h, w), interpolation="bicubic", mean=IMAGENET_MEAN,
                      std=IMAGENET_STD)


def style_b_config(img_size: int = 224, patch_size: int = 16, in_channels: int = 3, num_classes: int = 1000,
                   d_model: int = 768, num_heads: int = 12, num_layers: int = 12, d_ff: int = 3072,
                   dropout: float = 0.1) -> ViTConfig:
    """The :class:`ViTConfig` of a style-B ``VisionTransformer(img_size, patch_size, in_channels, num_classes, d_model,
    num_heads, num_layers, d_ff, dropout)`` (``vitviz.model.ViT.from_config`` builds it)."""
    if d_model <= 0 or d_ff % d_model and int(d_model * (d_ff / d_model)) != d_ff:
        raise ValueError(f"d_ff={d_ff} is not a width vitviz's ViT can express for d_model={d_model}")
    return ViTConfig(img_size=(img_size, img_size), patch_size=patch_size, in_channels=in_channels,
                     num_classes=num_classes, embed_dim=d_model, depth=num_layers, num_heads=num_heads,
                     mlp_ratio=d_ff / d_model, drop_rate=dropout, attn_drop_rate=dropout, layer_norm_eps=1e-5)
