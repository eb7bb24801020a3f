"""The Vision Transformer of Dosovitskiy et al. (2020), "An Image is Worth 16x16 Words".

Parameter names follow timm's ``VisionTransformer`` so that timm state dicts load without renaming:
``patch_embed.proj``, ``cls_token``, ``reg_token``, ``dist_token``, ``pos_embed``, ``blocks.{i}.norm1``,
``blocks.{i}.attn.qkv``, ``blocks.{i}.attn.proj``, ``blocks.{i}.ls1.gamma`` (optional LayerScale),
``blocks.{i}.norm2``, ``blocks.{i}.mlp.fc1``, ``blocks.{i}.mlp.fc2``, ``norm``, ``fc_norm``, ``head``, ``head_dist``,
and for the options the model families need: ``norm_pre`` (CLIP's ``ln_pre``), ``attn_pool.*`` (SigLIP's attention-pool
"MAP" head: ``latent``, ``q``, ``kv``, ``proj``, ``norm``, ``mlp``), ``blocks.{i}.attn.relative_position_bias_table``
and ``rel_pos_bias.relative_position_bias_table`` (BEiT's relative position bias, per layer or shared).

The families are options of one model, as in timm (no family branches): LayerScale (``init_values``), registers
(``num_reg_tokens``), ``pre_norm``, ``act_layer`` (``gelu`` / ``quick_gelu`` / ``gelu_tanh``), ``mlp_layer="swiglu"``
(timm's packed SwiGLU: ``fc1`` holds value and gate), ``rel_pos_bias``, ``global_pool`` (``token`` / ``avg`` /
``map``), ``head_bias``, ``patch_bias``, ``post_norm`` blocks and the position-embedding resampling of each reference
(``pos_embed_interp``, ``rel_pos_interp``).

Token layout along the sequence axis: ``[CLS] [DIST] [REG x R] patch_0 ... patch_{gh*gw-1}``, patches in
row-major order. ``num_prefix_tokens`` counts the tokens before the first patch.

The parts live in :mod:`vitviz.model.layers` (patch embedding, attention, MLP, block, attention pooling) and
:mod:`vitviz.model.pos_embed` (sin-cos and resampled position embeddings, BEiT's relative position bias); the
configuration, :class:`~vitviz.model.vit_config.ViTConfig`, in :mod:`vitviz.model.vit_config`.

This module never imports Qt.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from vitviz.model.layers import (
    ACT_LAYERS,
    MLP_LAYERS,
    NORM_LAYERS,
    ActLayer,
    AttentionPool,
    Block,
    MlpLayer,
    NormLayer,
    PatchEmbed,
    make_norm,
)
from vitviz.model.pos_embed import (
    POS_EMBED_INTERPS,
    REL_POS_INTERPS,
    PosEmbedInterp,
    RelativePositionBias,
    RelPosInterp,
    resample_pos_embed,
    sincos_pos_embed_2d,
)
from vitviz.model.rope import ROPE_KINDS, RopeKind, RotaryEmbedding
from vitviz.model.vit_config import REL_POS_BIASES, GlobalPool, PosEmbedKind, RelPosBias, ViTConfig, to_pair


@torch.no_grad()
def _trunc_normal_(t: torch.Tensor, std: float, a: float = -2.0, b: float = 2.0) -> torch.Tensor:
    """``N(0, std)`` truncated to ``[a, b]`` (absolute bounds, as timm's init). With ``std = 0.02`` the bounds sit at
    100 sigma, so sampling a normal and clamping is the same distribution as ``nn.init.trunc_normal_``, ~3x faster."""
    return t.normal_(0.0, std).clamp_(a, b)


class ViT(nn.Module):
    """Vision Transformer.

    Args:
        img_size: nominal input size (int or (H, W)); other sizes work, with position embeddings resampled.
        patch_size: side of the square patches, in pixels.
        in_channels: image channels.
        num_classes: classes of the linear head; 0 returns the pooled features ``[B, D]``.
        embed_dim, depth, num_heads, mlp_ratio, qkv_bias: transformer width, blocks, heads, MLP width ratio, qkv bias.
        drop_rate, attn_drop_rate, drop_path_rate: dropout after embeddings/projections/MLP, on the attention
            probabilities, and stochastic depth (linearly increasing over blocks). Active in train mode only.
        pos_embed: ``"learned"``, ``"sincos"`` (fixed 2-D sin-cos; a non-trainable buffer) or ``"none"`` (BEiT:
            relative position bias only).
        class_token: prepend a learnable [CLS] token.
        num_reg_tokens: number of register tokens (Darcet et al. 2023).
        distilled: DeiT distillation token and a second head; logits are the mean of both heads.
        global_pool: ``"token"`` (the [CLS] token), ``"avg"`` (mean over patch tokens) or ``"map"`` (attention
            pooling with a learned query over all tokens, SigLIP: :class:`AttentionPool`).
        layer_norm_eps: epsilon of every LayerNorm (default 1e-6, timm's; 1e-5 with the textbook names below).
        fc_norm: LayerNorm after pooling instead of before it (default: True when ``global_pool="avg"``).
        no_embed_class: position embeddings only for the patches (prefix tokens get none), as timm's flag.
        init_values: LayerScale initial value (None: no LayerScale).
        act_layer: MLP activation: ``"gelu"`` (exact), ``"quick_gelu"`` (OpenAI CLIP), ``"gelu_tanh"``.
        mlp_layer: ``"mlp"`` or ``"swiglu"`` (packed SwiGLU as timm's DINOv2 giant; ``int(D * mlp_ratio)`` is the packed
            width of ``fc1``).
        pre_norm: LayerNorm ``norm_pre`` on the embeddings before the first block (CLIP's ``ln_pre``).
        post_norm: post-norm blocks (``LN(x + f(x))``) instead of pre-norm ones.
        patch_bias: bias of the patch projection (CLIP has none).
        head_bias: bias of the head (a CLIP projection has none).
        rel_pos_bias: BEiT's relative position bias: ``"layer"`` (a table per block), ``"shared"`` (one table,
            ``rel_pos_bias``) or ``"none"``. Needs exactly one prefix token ([CLS]).
        pos_embed_interp: how the position embedding is resampled for another patch grid (see
            :func:`resample_pos_embed`): ``"timm"``, ``"bicubic"`` or ``"dino"``.
        rel_pos_interp: how a relative-position table is resized for another grid (:func:`resize_rel_pos_table`).
        rope: rotary position embedding of the patch rows of q and k (:mod:`vitviz.model.rope`): ``"none"``,
            ``"axial"`` (EVA-02, Perception Encoder), ``"dinov3"`` or ``"mixed"`` (learned ``rope.freqs``);
            ``rope_theta`` (the frequency base), ``rope_grid_offset``, ``rope_grid_indexing`` (``"ij"`` / ``"xy"``),
            ``rope_ref_grid`` (the pre-training grid axial positions are scaled to), ``rope_half`` (halves rotated
            instead of interleaved pairs).
        mlp_norm: a LayerNorm inside the SwiGLU MLP, before ``fc2`` (EVA-02).
        final_norm: False: no LayerNorm after the blocks nor after pooling (Perception Encoder's spatial towers).
        pool_num_heads: heads of the attention-pool head (default ``num_heads``; PE core: 8).
        norm_layer: ``"layernorm"`` or ``"rmsnorm"`` (AIMv2: every norm an RMSNorm, ``layer_norm_eps`` its eps).
        embed_norm: a norm on the patch embeddings before the position embedding (``patch_embed.norm``, AIMv2).
        proj_bias: biases of the attention output projection and of the MLP (AIMv2 has none; timm's ``proj_bias``).
        attn_norm: a norm on the heads' concatenated outputs before the output projection (``attn.norm``; timm's
            ``scale_attn_inner``: EVA-02 CLIP).
        pool_mlp_ratio: the MLP width ratio of the attention-pool head (default ``mlp_ratio``; PE core gigantic: 4).
        d_model, num_layers, d_ff, dropout: the textbook ("style B") names, accepted as aliases of ``embed_dim``,
            ``depth``, the MLP width (``mlp_ratio = d_ff / d_model``) and ``drop_rate`` = ``attn_drop_rate``; with
            any of them ``layer_norm_eps`` defaults to torch's 1e-5 (``nn.LayerNorm``'s default) instead of 1e-6.

    Input ``[B, in_channels, H, W]``; output logits ``[B, num_classes]``.
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        patch_size: int = 16,
        in_channels: int = 3,
        num_classes: int = 1000,
        embed_dim: int = 768,
        depth: int = 12,
        num_heads: int = 12,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        *,
        pos_embed: PosEmbedKind = "learned",
        class_token: bool = True,
        num_reg_tokens: int = 0,
        distilled: bool = False,
        global_pool: GlobalPool = "token",
        layer_norm_eps: float | None = None,
        fc_norm: bool | None = None,
        no_embed_class: bool = False,
        init_values: float | None = None,
        act_layer: ActLayer = "gelu",
        mlp_layer: MlpLayer = "mlp",
        pre_norm: bool = False,
        post_norm: bool = False,
        patch_bias: bool = True,
        head_bias: bool = True,
        rel_pos_bias: RelPosBias = "none",
        pos_embed_interp: PosEmbedInterp = "timm",
        rel_pos_interp: RelPosInterp = "timm",
        rope: RopeKind = "none",
        rope_theta: float = 10000.0,
        rope_grid_offset: float = 0.0,
        rope_grid_indexing: str = "ij",
        rope_ref_grid: tuple[int, int] | None = None,
        rope_half: bool = False,
        mlp_norm: bool = False,
        final_norm: bool = True,
        pool_num_heads: int | None = None,
        norm_layer: NormLayer = "layernorm",
        embed_norm: bool = False,
        proj_bias: bool = True,
        attn_norm: bool = False,
        pool_mlp_ratio: float | None = None,
        d_model: int | None = None,
        num_layers: int | None = None,
        d_ff: int | None = None,
        dropout: float | None = None,
    ):
        super().__init__()
        textbook = any(v is not None for v in (d_model, num_layers, d_ff, dropout))
        if d_model is not None:
            embed_dim = d_model
        if num_layers is not None:
            depth = num_layers
        if d_ff is not None:
            if embed_dim <= 0 or int(embed_dim * (d_ff / embed_dim)) != d_ff:
                raise ValueError(f"d_ff={d_ff} is not an MLP width vitviz's ViT can express for d_model={embed_dim}")
            mlp_ratio = d_ff / embed_dim
        if dropout is not None:
            drop_rate = attn_drop_rate = dropout
        if layer_norm_eps is None:  # timm's 1e-6; torch's nn.LayerNorm default under the textbook names
            layer_norm_eps = 1e-5 if textbook else 1e-6
        img_size = to_pair(img_size)
        self._validate(img_size, patch_size, in_channels, embed_dim, num_heads, depth, num_classes,
                       pos_embed, global_pool, class_token, distilled, num_reg_tokens)
        self._validate_options(act_layer=act_layer, mlp_layer=mlp_layer, rel_pos_bias=rel_pos_bias,
                               pos_embed_interp=pos_embed_interp, rel_pos_interp=rel_pos_interp,
                               num_prefix_tokens=int(class_token) + int(distilled) + num_reg_tokens,
                               class_token=class_token, norm_layer=norm_layer)
        if rope not in ROPE_KINDS:
            raise ValueError(f"rope={rope!r}; valid: {', '.join(repr(v) for v in ROPE_KINDS)}")
        if mlp_norm and mlp_layer != "swiglu":
            raise ValueError("mlp_norm=True needs mlp_layer='swiglu' (EVA-02's SwiGLU with an inner LayerNorm)")
        if pool_num_heads is not None and (pool_num_heads <= 0 or embed_dim % pool_num_heads):
            raise ValueError(f"pool_num_heads={pool_num_heads} does not divide embed_dim={embed_dim}")
        if fc_norm is None:
            fc_norm = global_pool == "avg" and final_norm
        self.config = ViTConfig(
            img_size=img_size, patch_size=patch_size, in_channels=in_channels, num_classes=num_classes,
            embed_dim=embed_dim, depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias,
            drop_rate=drop_rate, attn_drop_rate=attn_drop_rate, drop_path_rate=drop_path_rate, pos_embed=pos_embed,
            class_token=class_token, num_reg_tokens=num_reg_tokens, distilled=distilled, global_pool=global_pool,
            layer_norm_eps=layer_norm_eps, fc_norm=fc_norm, no_embed_class=no_embed_class, init_values=init_values,
            act_layer=act_layer, mlp_layer=mlp_layer, pre_norm=pre_norm, post_norm=post_norm, patch_bias=patch_bias,
            head_bias=head_bias, rel_pos_bias=rel_pos_bias, pos_embed_interp=pos_embed_interp,
            rel_pos_interp=rel_pos_interp, rope=rope, rope_theta=float(rope_theta),
            rope_grid_offset=float(rope_grid_offset), rope_grid_indexing=rope_grid_indexing,
            rope_ref_grid=to_pair(rope_ref_grid) if rope_ref_grid is not None else None, rope_half=bool(rope_half),
            mlp_norm=bool(mlp_norm), final_norm=bool(final_norm), pool_num_heads=pool_num_heads,
            norm_layer=norm_layer, embed_norm=embed_norm, proj_bias=proj_bias, attn_norm=bool(attn_norm),
            pool_mlp_ratio=None if pool_mlp_ratio is None else float(pool_mlp_ratio),
        )
        self.spec = None  # set by loaders / create_model: a vitviz.model.spec.ModelSpec
        self.num_classes = num_classes
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.patch_size = patch_size
        self.global_pool = global_pool
        self.no_embed_class = no_embed_class
        self.num_prefix_tokens = self.config.num_prefix_tokens

        self.patch_embed = PatchEmbed(img_size, patch_size, in_channels, embed_dim, bias=patch_bias,
                                      norm=make_norm(norm_layer, embed_dim, layer_norm_eps) if embed_norm else None)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if class_token else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if distilled else None
        self.reg_token = nn.Parameter(torch.zeros(1, num_reg_tokens, embed_dim)) if num_reg_tokens else None
        n_pos = self.patch_embed.num_patches + (0 if no_embed_class else self.num_prefix_tokens)
        if pos_embed == "learned":
            self.pos_embed = nn.Parameter(torch.empty(1, n_pos, embed_dim))  # drawn in _init_weights (not on meta:
            # meta-device math imports torch._dynamo, 1.5 s on every checkpoint load)
        elif pos_embed == "sincos":
            self.register_buffer("pos_embed", self.fixed_pos_embed(), persistent=True)
        else:
            self.pos_embed = None
        self.pos_drop = nn.Dropout(drop_rate)
        self.norm_pre = make_norm(norm_layer, embed_dim, layer_norm_eps) if pre_norm else nn.Identity()
        window = self.patch_embed.grid_size
        self.rel_pos_bias = RelativePositionBias(window, num_heads, rel_pos_interp) if rel_pos_bias == "shared" \
            else None
        self.rope = RotaryEmbedding(rope, embed_dim // num_heads, num_heads, depth, theta=rope_theta,
                                    offset=rope_grid_offset, indexing=rope_grid_indexing, ref_grid=rope_ref_grid,
                                    half=rope_half) if rope != "none" else None
        # stochastic depth rate rising linearly over the blocks (plain floats: works on the meta device too)
        dpr = [drop_path_rate * i / (depth - 1) if depth > 1 else 0.0 for i in range(depth)]
        self.blocks = nn.ModuleList(
            Block(embed_dim, num_heads, mlp_ratio, qkv_bias, drop_rate, attn_drop_rate, dpr[i], layer_norm_eps,
                  init_values, act_layer=act_layer, mlp_layer=mlp_layer, post_norm=post_norm,
                  rel_pos_window=window if rel_pos_bias == "layer" else None, rel_pos_interp=rel_pos_interp,
                  rope_half=rope_half, mlp_norm=mlp_norm, norm_layer=norm_layer, proj_bias=proj_bias,
                  attn_norm=attn_norm)
            for i in range(depth)
        )
        self.norm = make_norm(norm_layer, embed_dim, layer_norm_eps) if not fc_norm and final_norm else nn.Identity()
        self.attn_pool = AttentionPool(embed_dim, pool_num_heads or num_heads, pool_mlp_ratio or mlp_ratio,
                                       layer_norm_eps, act_layer, norm_layer=norm_layer) \
            if global_pool == "map" else None
        self.fc_norm = make_norm(norm_layer, embed_dim, layer_norm_eps) if fc_norm else nn.Identity()
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes, bias=head_bias) if num_classes > 0 else nn.Identity()
        self.head_dist = (nn.Linear(embed_dim, num_classes, bias=head_bias) if num_classes > 0 else nn.Identity()) \
            if distilled else None
        self._init_weights()

    @staticmethod
    def _validate(img_size, patch_size, in_channels, embed_dim, num_heads, depth, num_classes,
                  pos_embed, global_pool, class_token, distilled, num_reg_tokens) -> None:
        if patch_size <= 0:
            raise ValueError(f"patch_size={patch_size} must be a positive integer")
        for name, v in zip(("height", "width"), img_size):
            if v <= 0 or v % patch_size != 0:
                lo = (v // patch_size) * patch_size
                valid = f"{lo} or {lo + patch_size}" if lo > 0 else f"{patch_size}"
                raise ValueError(
                    f"img_size {name} {v} is not a multiple of patch_size={patch_size} (nearest valid: {valid})"
                )
        if in_channels <= 0:
            raise ValueError(f"in_channels={in_channels} must be positive")
        if num_heads <= 0 or embed_dim <= 0 or embed_dim % num_heads != 0:
            divisors = [h for h in range(1, min(embed_dim, 64) + 1) if embed_dim % h == 0] if embed_dim > 0 else []
            raise ValueError(
                f"embed_dim={embed_dim} is not divisible by num_heads={num_heads}; "
                f"valid num_heads for this embed_dim: {divisors}"
            )
        if depth < 0 or num_classes < 0 or num_reg_tokens < 0:
            raise ValueError(f"depth={depth}, num_classes={num_classes}, num_reg_tokens={num_reg_tokens} must be >= 0")
        if pos_embed not in ("learned", "sincos", "none"):
            raise ValueError(f"pos_embed={pos_embed!r}; valid: 'learned', 'sincos', 'none'")
        if global_pool not in ("token", "avg", "map"):
            raise ValueError(f"global_pool={global_pool!r}; valid: 'token', 'avg', 'map'")
        if global_pool == "token" and not class_token:
            raise ValueError("global_pool='token' needs class_token=True; use global_pool='avg' without a [CLS] token")
        if distilled and not class_token:
            raise ValueError("distilled=True needs class_token=True")

    @staticmethod
    def _validate_options(*, act_layer, mlp_layer, rel_pos_bias, pos_embed_interp, rel_pos_interp,
                          num_prefix_tokens, class_token, norm_layer="layernorm") -> None:
        for name, value, valid in (("act_layer", act_layer, ACT_LAYERS), ("mlp_layer", mlp_layer, MLP_LAYERS),
                                   ("norm_layer", norm_layer, NORM_LAYERS),
                                   ("rel_pos_bias", rel_pos_bias, REL_POS_BIASES),
                                   ("pos_embed_interp", pos_embed_interp, POS_EMBED_INTERPS),
                                   ("rel_pos_interp", rel_pos_interp, REL_POS_INTERPS)):
            if value not in valid:
                raise ValueError(f"{name}={value!r}; valid: {', '.join(repr(v) for v in valid)}")
        if rel_pos_bias != "none" and not (class_token and num_prefix_tokens == 1):
            raise ValueError(f"rel_pos_bias={rel_pos_bias!r} needs exactly one prefix token, the [CLS] token (BEiT's "
                             f"layout), got {num_prefix_tokens}")

    def _init_weights(self) -> None:
        if self.patch_embed.proj.weight.is_meta:  # shapes only (checkpoint checks): no values to draw
            return
        for t in (self.cls_token, self.dist_token, self.reg_token):
            if t is not None:
                nn.init.normal_(t, std=1e-6 if t is self.cls_token else 0.02)
        if isinstance(self.pos_embed, nn.Parameter):
            nn.init.normal_(self.pos_embed, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                _trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.RMSNorm):
                nn.init.ones_(m.weight)
        if self.attn_pool is not None:
            _trunc_normal_(self.attn_pool.latent, std=self.embed_dim**-0.5)
        if self.rope is not None and self.rope.freqs is not None:  # timm's init_random_2d_freqs
            with torch.no_grad():
                _, depth, heads, half = self.rope.freqs.shape
                hd = 2 * half
                mag = 1.0 / (self.config.rope_theta ** (torch.arange(0, hd, 4, dtype=torch.float32) / hd))
                ang = torch.rand(depth, heads, 1) * 2 * torch.pi
                fx = torch.cat([mag * torch.cos(ang), mag * torch.cos(ang + torch.pi / 2)], dim=-1)
                fy = torch.cat([mag * torch.sin(ang), mag * torch.sin(ang + torch.pi / 2)], dim=-1)
                self.rope.freqs.copy_(torch.stack([fx, fy]))
        w = self.patch_embed.proj.weight
        _trunc_normal_(w, std=0.02)

    def fixed_pos_embed(self) -> torch.Tensor:
        """The fixed 2-D sin-cos position embedding ``[1, n_pos, D]`` of ``pos_embed="sincos"`` (zeros for prefix
        slots unless ``no_embed_class``)."""
        D = self.embed_dim
        pe = sincos_pos_embed_2d(self.patch_embed.grid_size, D)
        if not self.no_embed_class:
            pe = torch.cat([torch.zeros(self.num_prefix_tokens, D, dtype=pe.dtype, device=pe.device), pe], dim=0)
        return pe[None]

    @classmethod
    def from_config(cls, config: ViTConfig) -> "ViT":
        d = config.to_dict()
        positional = [d.pop(k) for k in ("img_size", "patch_size", "in_channels", "num_classes", "embed_dim", "depth",
                                        "num_heads", "mlp_ratio", "qkv_bias", "drop_rate", "attn_drop_rate",
                                        "drop_path_rate")]
        return cls(*positional, **d)

    # ------------------------------------------------------------------ attention path
    def attention_modules(self) -> list[nn.Module]:
        """Every module with a ``fused`` flag and an ``attn_map``: each block's attention, then the pooling head's."""
        mods: list[nn.Module] = [b.attn for b in self.blocks]
        if self.attn_pool is not None:
            mods.append(self.attn_pool)
        return mods

    @property
    def fused_attention(self) -> bool:
        """True when every attention (blocks and pooling head) uses the fused SDPA path."""
        return all(m.fused for m in self.attention_modules())

    def set_fused_attention(self, fused: bool) -> None:
        for m in self.attention_modules():
            m.fused = bool(fused)

    # ------------------------------------------------------------------ forward
    @property
    def grid_size(self) -> tuple[int, int]:
        return self.patch_embed.grid_size

    def pos_embed_for(self, grid: tuple[int, int]) -> torch.Tensor | None:
        """The position embedding for a patch grid, resampled (``config.pos_embed_interp``) when it differs from the
        nominal one; None without an absolute position embedding."""
        if self.pos_embed is None:
            return None
        p = 0 if self.no_embed_class else self.num_prefix_tokens
        return resample_pos_embed(self.pos_embed, grid, self.patch_embed.grid_size, p, self.config.pos_embed_interp)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Patch embedding + prefix tokens + position embedding (+ ``norm_pre``): ``[B, C, H, W]`` -> ``[B, N, D]``."""
        grid = self.patch_embed.check_input(x)
        x = self.patch_embed(x)
        B = x.shape[0]
        pos = self.pos_embed_for(grid)
        pos = None if pos is None else pos.to(x.dtype)
        prefix = [t.expand(B, -1, -1).to(x.dtype) for t in (self.cls_token, self.dist_token, self.reg_token)
                  if t is not None]
        if self.no_embed_class:
            x = x + pos if pos is not None else x
            x = torch.cat(prefix + [x], dim=1) if prefix else x
        else:
            x = torch.cat(prefix + [x], dim=1) if prefix else x
            x = x + pos if pos is not None else x
        return self.norm_pre(self.pos_drop(x))

    def position_args(self, grid: tuple[int, int], *, detach: bool = False) -> list[dict[str, Any]]:
        """What each block needs besides its input at a patch ``grid``: ``{}`` for a plain ViT; the grid and the
        shared relative position bias (BEiT); the rotary ``(sin, cos)`` of the block (RoPE). Every caller that runs
        the blocks one by one (the forward, the streamed capture) takes them from here. ``detach``: cut the
        graph to learned position parameters (the streamed backward differentiates the blocks only)."""
        grid = tuple(grid)
        args: list[dict[str, Any]] = [{} for _ in self.blocks]
        if self.config.rel_pos_bias != "none":
            shared = self.rel_pos_bias(grid) if self.rel_pos_bias is not None else None
            if shared is not None and detach:
                shared = shared.detach()
            for a in args:
                a.update(grid=grid, shared_bias=shared)
        if self.rope is not None:
            for a, (sin, cos) in zip(args, self.rope(grid)):
                a["rope"] = (sin.detach(), cos.detach()) if detach else (sin, cos)
        return args

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Token sequence after the final norm: ``[B, N, D]``."""
        grid = self.patch_embed.check_input(x)
        x = self.embed(x)
        for blk, kw in zip(self.blocks, self.position_args(grid)):
            x = blk(x, **kw)
        return self.norm(x)

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, N, D]`` -> ``[B, D]`` by ``global_pool`` (before ``fc_norm``)."""
        if self.attn_pool is not None:
            return self.attn_pool(x)
        if self.global_pool == "avg":
            return x[:, self.num_prefix_tokens:].mean(dim=1)
        return x[:, 0]

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        pooled = self.head_drop(self.fc_norm(self.pool(x)))
        if pre_logits:
            return pooled
        out = self.head(pooled)
        if self.head_dist is not None:
            out = (out + self.head_dist(x[:, 1])) / 2
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
