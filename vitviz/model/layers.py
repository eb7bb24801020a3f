"""The parts of the ViT: patch embedding, attention (fused and hookable explicit paths), MLPs, LayerScale, stochastic
depth, the transformer block and the attention-pooling head. Parameter names follow timm (see :mod:`vitviz.model.vit`).

This module never imports Qt.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from vitviz.model.pos_embed import RelPosInterp, num_relative_distance, rel_pos_bias_for
from vitviz.model.rope import rotate_patches

ActLayer = Literal["gelu", "quick_gelu", "gelu_tanh"]
MlpLayer = Literal["mlp", "swiglu"]
NormLayer = Literal["layernorm", "rmsnorm"]

ACT_LAYERS: tuple[str, ...] = ("gelu", "quick_gelu", "gelu_tanh")
MLP_LAYERS: tuple[str, ...] = ("mlp", "swiglu")
NORM_LAYERS: tuple[str, ...] = ("layernorm", "rmsnorm")


def make_norm(kind: NormLayer, dim: int, eps: float) -> nn.Module:
    """``layernorm`` (``nn.LayerNorm``) or ``rmsnorm`` (``nn.RMSNorm``: ``x / sqrt(mean(x^2) + eps) * weight``, no
    bias; AIMv2, timm's ``RmsNorm``)."""
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=eps)
    if kind == "rmsnorm":
        return nn.RMSNorm(dim, eps=eps)
    raise ValueError(f"norm_layer={kind!r}; valid: {', '.join(NORM_LAYERS)}")


class PatchEmbed(nn.Module):
    """Split an image into non-overlapping patches and project each to ``embed_dim``.

    Input ``[B, C, H, W]`` -> output ``[B, gh*gw, D]`` with ``gh = H // P``, ``gw = W // P``.
    """

    def __init__(self, img_size: tuple[int, int], patch_size: int, in_channels: int, embed_dim: int,
                 bias: bool = True, norm: nn.Module | None = None):
        super().__init__()
        self.img_size = img_size
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.grid_size = (img_size[0] // patch_size, img_size[1] // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(in_channels, embed_dim, kernel_size=patch_size, stride=patch_size, bias=bias)
        self.norm = norm if norm is not None else nn.Identity()  # AIMv2: a norm on the patch embeddings

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
        return self.norm(self.proj(x).flatten(2).transpose(1, 2))


class AttentionMap(nn.Identity):
    """Identity module on the explicit path's post-softmax probabilities ``[B, H, Nq, N]`` (row = query).

    It exists only so that forward hooks (see :mod:`vitviz.capture`) can observe the attention.
    """


class Attention(nn.Module):
    """Multi-head self-attention with a fused (SDPA) path and an explicit, hookable path.

    ``fused=True`` (default) calls :func:`torch.nn.functional.scaled_dot_product_attention`; ``fused=False``
    computes ``softmax(q k^T / sqrt(d) + bias)`` and passes it through ``self.attn_map`` before dropout. ``bias`` is
    the relative position bias (this block's table, ``rel_pos_window`` set, plus a shared one passed in), added to
    the logits before the softmax on both paths (``attn_mask`` of SDPA), so the captured attention is the one after
    the bias. ``rope`` (a ``(sin, cos)`` pair from :class:`vitviz.model.rope.RotaryEmbedding`) rotates the patch
    rows of q and k before the scores on both paths (``rope_half``: halves rotated, else interleaved pairs).
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True, attn_drop: float = 0.0, proj_drop: float = 0.0,
                 rel_pos_window: tuple[int, int] | None = None, rel_pos_interp: RelPosInterp = "timm",
                 rope_half: bool = False, proj_bias: bool = True, norm_eps: float | None = None,
                 norm_layer: NormLayer = "layernorm"):
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
        # timm Eva's ``scale_attn_inner`` (EVA-02 CLIP): a norm on the heads' concatenated outputs before ``proj``
        self.norm = make_norm(norm_layer, dim, norm_eps) if norm_eps is not None else nn.Identity()
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop)
        self.rope_half = rope_half
        self.rel_pos_window = tuple(rel_pos_window) if rel_pos_window else None
        self.rel_pos_interp = rel_pos_interp
        if rel_pos_window:
            self.relative_position_bias_table = nn.Parameter(torch.zeros(num_relative_distance(rel_pos_window),
                                                                         num_heads))
        else:
            self.relative_position_bias_table = None

    def forward(self, x: torch.Tensor, grid: tuple[int, int] | None = None,
                shared_bias: torch.Tensor | None = None,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        if rope is not None:
            q, k = rotate_patches(q, k, rope[0], rope[1], self.rope_half)
        bias = shared_bias
        if self.relative_position_bias_table is not None:
            if grid is None:
                raise ValueError("this attention has a relative position bias: pass the patch grid")
            own = rel_pos_bias_for(self.relative_position_bias_table, self.rel_pos_window, grid, self.rel_pos_interp)
            bias = own if bias is None else bias + own
        if bias is not None:
            bias = bias.to(q.dtype)
        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=bias,
                                               dropout_p=self.attn_drop.p if self.training else 0.0)
        else:
            attn = (q * self.scale) @ k.transpose(-2, -1)
            if bias is not None:
                attn = attn + bias
            attn = attn.softmax(dim=-1)
            attn = self.attn_map(attn)
            attn = self.attn_drop(attn)
            x = attn @ v
        x = self.norm(x.transpose(1, 2).reshape(B, N, C))
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


class QuickGELU(nn.Module):
    """``x * sigmoid(1.702 x)``: the activation of OpenAI's CLIP (and open_clip's ``-quickgelu`` models)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


def make_act(name: ActLayer) -> nn.Module:
    """``gelu`` (exact, erf), ``quick_gelu`` (CLIP) or ``gelu_tanh`` (the tanh approximation: SigLIP in HF)."""
    if name == "gelu":
        return nn.GELU()
    if name == "quick_gelu":
        return QuickGELU()
    if name == "gelu_tanh":
        return nn.GELU(approximate="tanh")
    raise ValueError(f"act_layer={name!r}; valid: {', '.join(ACT_LAYERS)}")


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int, drop: float = 0.0, act_layer: ActLayer = "gelu", bias: bool = True):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, bias=bias)
        self.act = make_act(act_layer)
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden, dim, bias=bias)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


class SwiGLUPacked(nn.Module):
    """SwiGLU MLP with value and gate packed in one ``fc1`` (timm's ``SwiGLUPacked``, DINOv2 giant):
    ``fc2(silu(a) * b)`` with ``a, b = fc1(x).chunk(2)``; ``hidden`` is the packed width (``fc2`` takes half)."""

    def __init__(self, dim: int, hidden: int, drop: float = 0.0, norm_eps: float | None = None, bias: bool = True):
        super().__init__()
        if hidden % 2:
            raise ValueError(f"a packed SwiGLU needs an even hidden width (int(embed_dim * mlp_ratio)), got {hidden}")
        self.fc1 = nn.Linear(dim, hidden, bias=bias)
        self.act = nn.SiLU()
        self.drop1 = nn.Dropout(drop)
        # EVA-02's inner LayerNorm on silu(a) * b before fc2 (timm's SwiGLU ``norm``, "scale_mlp")
        self.norm = nn.LayerNorm(hidden // 2, eps=norm_eps) if norm_eps is not None else nn.Identity()
        self.fc2 = nn.Linear(hidden // 2, dim, bias=bias)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.fc1(x).chunk(2, dim=-1)
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(a) * b))))


class Block(nn.Module):
    """Transformer block. Pre-norm (default): ``z' = z + MSA(LN(z))``; ``z = z' + MLP(LN(z'))``.
    ``post_norm=True``: ``z' = LN(z + MSA(z))``; ``z = LN(z' + MLP(z'))`` (the original Transformer's order)."""

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
        *,
        act_layer: ActLayer = "gelu",
        mlp_layer: MlpLayer = "mlp",
        post_norm: bool = False,
        rel_pos_window: tuple[int, int] | None = None,
        rel_pos_interp: RelPosInterp = "timm",
        rope_half: bool = False,
        mlp_norm: bool = False,
        norm_layer: NormLayer = "layernorm",
        proj_bias: bool = True,
        attn_norm: bool = False,
    ):
        super().__init__()
        self.post_norm = post_norm
        self.norm1 = make_norm(norm_layer, dim, eps)
        self.attn = Attention(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=drop,
                              rel_pos_window=rel_pos_window, rel_pos_interp=rel_pos_interp, rope_half=rope_half,
                              proj_bias=proj_bias, norm_eps=eps if attn_norm else None, norm_layer=norm_layer)
        self.ls1 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path1 = DropPath(drop_path)
        self.norm2 = make_norm(norm_layer, dim, eps)
        hidden = int(dim * mlp_ratio)
        if mlp_layer == "swiglu":
            self.mlp: nn.Module = SwiGLUPacked(dim, hidden, drop=drop, norm_eps=eps if mlp_norm else None,
                                               bias=proj_bias)
        elif mlp_layer == "mlp":
            self.mlp = Mlp(dim, hidden, drop=drop, act_layer=act_layer, bias=proj_bias)
        else:
            raise ValueError(f"mlp_layer={mlp_layer!r}; valid: {', '.join(MLP_LAYERS)}")
        self.ls2 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path2 = DropPath(drop_path)

    def forward(self, x: torch.Tensor, grid: tuple[int, int] | None = None,
                shared_bias: torch.Tensor | None = None,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        if self.post_norm:
            x = self.norm1(x + self.drop_path1(self.ls1(self._attn(x, grid, shared_bias, rope))))
            return self.norm2(x + self.drop_path2(self.ls2(self.mlp(x))))
        x = x + self.drop_path1(self.ls1(self._attn(self.norm1(x), grid, shared_bias, rope)))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return x

    def _attn(self, x: torch.Tensor, grid: tuple[int, int] | None, shared_bias: torch.Tensor | None,
              rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        if grid is None and shared_bias is None and rope is None:  # no relative position: the plain call
            return self.attn(x)
        return self.attn(x, grid, shared_bias, rope)


class AttentionPool(nn.Module):
    """Attention pooling with a learned latent query (SigLIP's "MAP" head; timm's ``AttentionPoolLatent`` names).

    ``x [B, N, D]`` -> ``[B, D]``: the latent query attends over all ``N`` tokens (``q``, ``kv``, ``proj``), then
    ``y + MLP(LN(y))``. The explicit path passes the probabilities ``[B, H, 1, N]`` through ``self.attn_map`` (hooked
    by :mod:`vitviz.capture` as the model's pooling attention, its "[CLS] row").
    """

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, eps: float = 1e-6,
                 act_layer: ActLayer = "gelu", qkv_bias: bool = True, norm_layer: NormLayer = "layernorm"):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.fused = True
        self.latent = nn.Parameter(torch.zeros(1, 1, dim))
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, dim * 2, bias=qkv_bias)
        self.attn_map = AttentionMap()
        self.proj = nn.Linear(dim, dim)
        self.norm = make_norm(norm_layer, dim, eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        q = self.q(self.latent.expand(B, -1, -1).to(x.dtype)).reshape(B, 1, self.num_heads, self.head_dim)
        q = q.transpose(1, 2)
        k, v = self.kv(x).reshape(B, N, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v)
        else:
            attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
            attn = self.attn_map(attn)
            y = attn @ v
        y = self.proj(y.transpose(1, 2).reshape(B, 1, C))
        y = y + self.mlp(self.norm(y))
        return y[:, 0]
