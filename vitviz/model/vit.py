"""The Vision Transformer of Dosovitskiy et al. (2020), "An Image is Worth 16x16 Words".

Parameter names follow timm's ``VisionTransformer`` so that timm state dicts load without renaming:
``patch_embed.proj``, ``cls_token``, ``reg_token``, ``dist_token``, ``pos_embed``, ``blocks.{i}.norm1``,
``blocks.{i}.attn.qkv``, ``blocks.{i}.attn.proj``, ``blocks.{i}.ls1.gamma`` (optional LayerScale),
``blocks.{i}.norm2``, ``blocks.{i}.mlp.fc1``, ``blocks.{i}.mlp.fc2``, ``norm``, ``fc_norm``, ``head``, ``head_dist``.

Token layout along the sequence axis: ``[CLS] [DIST] [REG x R] patch_0 ... patch_{gh*gw-1}``, patches in
row-major order. ``num_prefix_tokens`` counts the tokens before the first patch.

This module never imports Qt.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

PosEmbedKind = Literal["learned", "sincos"]
GlobalPool = Literal["token", "avg"]


@dataclass(frozen=True)
class ViTConfig:
    """Everything needed to rebuild a :class:`ViT` (its constructor arguments)."""

    img_size: tuple[int, int] = (224, 224)
    patch_size: int = 16
    in_channels: int = 3
    num_classes: int = 1000
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    drop_rate: float = 0.0
    attn_drop_rate: float = 0.0
    drop_path_rate: float = 0.0
    pos_embed: PosEmbedKind = "learned"
    class_token: bool = True
    num_reg_tokens: int = 0
    distilled: bool = False
    global_pool: GlobalPool = "token"
    layer_norm_eps: float = 1e-6
    fc_norm: bool | None = None
    no_embed_class: bool = False
    init_values: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["img_size"] = list(self.img_size)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ViTConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown ViT config keys: {sorted(unknown)}")
        d = dict(d)
        if "img_size" in d:
            d["img_size"] = _pair(d["img_size"])
        return cls(**d)

    @property
    def num_prefix_tokens(self) -> int:
        return int(self.class_token) + int(self.distilled) + self.num_reg_tokens

    @property
    def grid_size(self) -> tuple[int, int]:
        return (self.img_size[0] // self.patch_size, self.img_size[1] // self.patch_size)


def _pair(x: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    if isinstance(x, (tuple, list)):
        if len(x) != 2:
            raise ValueError(f"expected an int or a pair (height, width), got {x!r}")
        return (int(x[0]), int(x[1]))
    return (int(x), int(x))


class PatchEmbed(nn.Module):
    """Split an image into non-overlapping patches and project each to ``embed_dim``.

    Input ``[B, C, H, W]`` -> output ``[B, gh*gw, D]`` with ``gh = H // P``, ``gw = W // P``.
    """

    def __init__(self, img_size: tuple[int, int], patch_size: int, in_channels: int, embed_dim: int):
        super().__init__()
        self.img_size = img_size
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.grid_size = (img_size[0] // patch_size, img_size[1] // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(in_channels, embed_dim, kernel_size=patch_size, stride=patch_size)

    def check_input(self, x: torch.Tensor) -> tuple[int, int]:
        """Validate ``x`` and return its patch grid ``(gh, gw)``; raise ValueError naming the wrong number."""
        if x.ndim != 4:
            raise ValueError(f"expected a batch of images [B, C, H, W], got a tensor of shape {tuple(x.shape)}")
        _, c, h, w = x.shape
        if c != self.in_channels:
            raise ValueError(f"input has {c} channels, but the model expects in_channels={self.in_channels}")
        p = self.patch_size
        bad = [(name, v) for name, v in (("height", h), ("width", w)) if v % p != 0 or v == 0]
        if bad:
            parts = []
            for name, v in bad:
                lo = (v // p) * p
                hi = lo + p
                alt = f"{lo} or {hi}" if lo > 0 else f"{hi}"
                parts.append(f"{name} {v} is not a multiple of patch_size={p} (nearest valid: {alt})")
            raise ValueError("; ".join(parts))
        return (h // p, w // p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.check_input(x)
        return self.proj(x).flatten(2).transpose(1, 2)


class AttentionMap(nn.Identity):
    """Identity module on the explicit path's post-softmax probabilities ``[B, H, N, N]`` (row = query).

    It exists only so that forward hooks (see :mod:`vitviz.capture`) can observe the attention.
    """


class Attention(nn.Module):
    """Multi-head self-attention with a fused (SDPA) path and an explicit, hookable path.

    ``fused=True`` (default) calls :func:`torch.nn.functional.scaled_dot_product_attention`; ``fused=False``
    computes ``softmax(q k^T / sqrt(d))`` and passes it through ``self.attn_map`` before dropout.
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True, attn_drop: float = 0.0, proj_drop: float = 0.0):
        super().__init__()
        if dim % num_heads != 0:
            raise ValueError(
                f"embed_dim={dim} is not divisible by num_heads={num_heads}; valid head counts for this width: "
                f"{[h for h in range(1, min(dim, 64) + 1) if dim % h == 0]}"
            )
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.fused = True
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.attn_map = AttentionMap()
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.0)
        else:
            attn = (q * self.scale) @ k.transpose(-2, -1)
            attn = attn.softmax(dim=-1)
            attn = self.attn_map(attn)
            attn = self.attn_drop(attn)
            x = attn @ v
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class LayerScale(nn.Module):
    def __init__(self, dim: int, init_values: float):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class DropPath(nn.Module):
    """Stochastic depth (per sample) for residual branches; identity in eval mode."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = 1.0 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int, drop: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()  # exact (erf) GELU, as in the paper
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


class Block(nn.Module):
    """Pre-norm transformer block: ``z' = MSA(LN(z)) + z``; ``z = MLP(LN(z')) + z'``."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        eps: float = 1e-6,
        init_values: float | None = None,
    ):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = Attention(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=drop)
        self.ls1 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path1 = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop=drop)
        self.ls2 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path2 = DropPath(drop_path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return x


def sincos_pos_embed_2d(grid: tuple[int, int], dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """Fixed 2-D sin-cos position embedding ``[gh*gw, dim]`` (MoCo v3 / MAE style; ``dim % 4 == 0``).

    The first half of the channels encodes the column (x), the second half the row (y).
    """
    if dim % 4 != 0:
        raise ValueError(f"embed_dim={dim} must be a multiple of 4 for pos_embed='sincos'")
    gh, gw = grid
    cpu = "cpu"  # computed on the CPU even inside a `with torch.device("meta")` (meta math imports torch._dynamo)
    y, x = torch.meshgrid(torch.arange(gh, dtype=torch.float64, device=cpu),
                          torch.arange(gw, dtype=torch.float64, device=cpu), indexing="ij")
    quarter = dim // 4
    omega = 1.0 / temperature ** (torch.arange(quarter, dtype=torch.float64, device=cpu) / quarter)
    ox = x.reshape(-1, 1) * omega[None]
    oy = y.reshape(-1, 1) * omega[None]
    pe = torch.cat([ox.sin(), ox.cos(), oy.sin(), oy.cos()], dim=1)
    return pe.float()


def resample_pos_embed(
    pos_embed: torch.Tensor, new_grid: tuple[int, int], old_grid: tuple[int, int], num_prefix_tokens: int
) -> torch.Tensor:
    """Resample ``pos_embed [1, p + gh*gw, D]`` bicubically over the patch grid; prefix slots are kept as they are."""
    if tuple(new_grid) == tuple(old_grid):
        return pos_embed
    prefix, patches = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    D = patches.shape[-1]
    dtype = patches.dtype
    grid = patches.reshape(1, old_grid[0], old_grid[1], D).permute(0, 3, 1, 2).float()
    grid = F.interpolate(grid, size=tuple(new_grid), mode="bicubic", antialias=True, align_corners=False)
    patches = grid.permute(0, 2, 3, 1).reshape(1, new_grid[0] * new_grid[1], D).to(dtype)
    return torch.cat([prefix, patches], dim=1)


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
        pos_embed: ``"learned"`` or ``"sincos"`` (fixed 2-D sin-cos; stored as a non-trainable buffer).
        class_token: prepend a learnable [CLS] token.
        num_reg_tokens: number of register tokens (Darcet et al. 2023).
        distilled: DeiT distillation token and a second head; logits are the mean of both heads.
        global_pool: ``"token"`` (the [CLS] token) or ``"avg"`` (mean over patch tokens).
        layer_norm_eps: epsilon of every LayerNorm.
        fc_norm: LayerNorm after pooling instead of before it (default: True when ``global_pool="avg"``).
        no_embed_class: position embeddings only for the patches (prefix tokens get none), as timm's flag.
        init_values: LayerScale initial value (None: no LayerScale).

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
        layer_norm_eps: float = 1e-6,
        fc_norm: bool | None = None,
        no_embed_class: bool = False,
        init_values: float | None = None,
    ):
        super().__init__()
        img_size = _pair(img_size)
        self._validate(img_size, patch_size, in_channels, embed_dim, num_heads, depth, num_classes,
                       pos_embed, global_pool, class_token, distilled, num_reg_tokens)
        if fc_norm is None:
            fc_norm = global_pool == "avg"
        self.config = ViTConfig(
            img_size=img_size, patch_size=patch_size, in_channels=in_channels, num_classes=num_classes,
            embed_dim=embed_dim, depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias,
            drop_rate=drop_rate, attn_drop_rate=attn_drop_rate, drop_path_rate=drop_path_rate, pos_embed=pos_embed,
            class_token=class_token, num_reg_tokens=num_reg_tokens, distilled=distilled, global_pool=global_pool,
            layer_norm_eps=layer_norm_eps, fc_norm=fc_norm, no_embed_class=no_embed_class, init_values=init_values,
        )
        self.spec = None  # set by loaders / create_model: a vitviz.model.spec.ModelSpec
        self.num_classes = num_classes
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.patch_size = patch_size
        self.global_pool = global_pool
        self.no_embed_class = no_embed_class
        self.num_prefix_tokens = self.config.num_prefix_tokens

        self.patch_embed = PatchEmbed(img_size, patch_size, in_channels, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if class_token else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if distilled else None
        self.reg_token = nn.Parameter(torch.zeros(1, num_reg_tokens, embed_dim)) if num_reg_tokens else None
        n_pos = self.patch_embed.num_patches + (0 if no_embed_class else self.num_prefix_tokens)
        if pos_embed == "learned":
            self.pos_embed = nn.Parameter(torch.empty(1, n_pos, embed_dim))  # drawn in _init_weights (not on meta:
            # meta-device math imports torch._dynamo, 1.5 s on every checkpoint load)
        else:
            self.register_buffer("pos_embed", self.fixed_pos_embed(), persistent=True)
        self.pos_drop = nn.Dropout(drop_rate)
        # stochastic depth rate rising linearly over the blocks (plain floats: works on the meta device too)
        dpr = [drop_path_rate * i / (depth - 1) if depth > 1 else 0.0 for i in range(depth)]
        self.blocks = nn.ModuleList(
            Block(embed_dim, num_heads, mlp_ratio, qkv_bias, drop_rate, attn_drop_rate, dpr[i], layer_norm_eps,
                  init_values)
            for i in range(depth)
        )
        self.norm = nn.LayerNorm(embed_dim, eps=layer_norm_eps) if not fc_norm else nn.Identity()
        self.fc_norm = nn.LayerNorm(embed_dim, eps=layer_norm_eps) if fc_norm else nn.Identity()
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        self.head_dist = (nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()) if distilled else None
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
        if pos_embed not in ("learned", "sincos"):
            raise ValueError(f"pos_embed={pos_embed!r}; valid: 'learned', 'sincos'")
        if global_pool not in ("token", "avg"):
            raise ValueError(f"global_pool={global_pool!r}; valid: 'token', 'avg'")
        if global_pool == "token" and not class_token:
            raise ValueError("global_pool='token' needs class_token=True; use global_pool='avg' without a [CLS] token")
        if distilled and not class_token:
            raise ValueError("distilled=True needs class_token=True")

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
    @property
    def fused_attention(self) -> bool:
        """True when every block uses the fused SDPA path."""
        return all(b.attn.fused for b in self.blocks)

    def set_fused_attention(self, fused: bool) -> None:
        for b in self.blocks:
            b.attn.fused = bool(fused)

    # ------------------------------------------------------------------ forward
    @property
    def grid_size(self) -> tuple[int, int]:
        return self.patch_embed.grid_size

    def pos_embed_for(self, grid: tuple[int, int]) -> torch.Tensor:
        """The position embedding for a patch grid, resampled bicubically when it differs from the nominal one."""
        p = 0 if self.no_embed_class else self.num_prefix_tokens
        return resample_pos_embed(self.pos_embed, grid, self.patch_embed.grid_size, p)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Patch embedding + prefix tokens + position embedding: ``[B, C, H, W]`` -> ``[B, N, D]``."""
        grid = self.patch_embed.check_input(x)
        x = self.patch_embed(x)
        B = x.shape[0]
        pos = self.pos_embed_for(grid).to(x.dtype)
        prefix = [t.expand(B, -1, -1).to(x.dtype) for t in (self.cls_token, self.dist_token, self.reg_token)
                  if t is not None]
        if self.no_embed_class:
            x = x + pos
            x = torch.cat(prefix + [x], dim=1) if prefix else x
        else:
            x = torch.cat(prefix + [x], dim=1) if prefix else x
            x = x + pos
        return self.pos_drop(x)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Token sequence after the final norm: ``[B, N, D]``."""
        x = self.embed(x)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if self.global_pool == "avg":
            pooled = x[:, self.num_prefix_tokens:].mean(dim=1)
        else:
            pooled = x[:, 0]
        pooled = self.head_drop(self.fc_norm(pooled))
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
