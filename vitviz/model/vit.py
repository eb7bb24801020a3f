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

This module never imports Qt.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

PosEmbedKind = Literal["learned", "sincos", "none"]
GlobalPool = Literal["token", "avg", "map"]
ActLayer = Literal["gelu", "quick_gelu", "gelu_tanh"]
MlpLayer = Literal["mlp", "swiglu"]
RelPosBias = Literal["none", "layer", "shared"]
PosEmbedInterp = Literal["timm", "bicubic", "dino"]
RelPosInterp = Literal["timm", "bilinear"]

ACT_LAYERS: tuple[str, ...] = ("gelu", "quick_gelu", "gelu_tanh")
MLP_LAYERS: tuple[str, ...] = ("mlp", "swiglu")
REL_POS_BIASES: tuple[str, ...] = ("none", "layer", "shared")
POS_EMBED_INTERPS: tuple[str, ...] = ("timm", "bicubic", "dino")
REL_POS_INTERPS: tuple[str, ...] = ("timm", "bilinear")


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
    act_layer: ActLayer = "gelu"
    mlp_layer: MlpLayer = "mlp"
    pre_norm: bool = False
    post_norm: bool = False
    patch_bias: bool = True
    head_bias: bool = True
    rel_pos_bias: RelPosBias = "none"
    pos_embed_interp: PosEmbedInterp = "timm"
    rel_pos_interp: RelPosInterp = "timm"

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

    def __init__(self, img_size: tuple[int, int], patch_size: int, in_channels: int, embed_dim: int,
                 bias: bool = True):
        super().__init__()
        self.img_size = img_size
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.grid_size = (img_size[0] // patch_size, img_size[1] // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(in_channels, embed_dim, kernel_size=patch_size, stride=patch_size, bias=bias)

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
    """Identity module on the explicit path's post-softmax probabilities ``[B, H, Nq, N]`` (row = query).

    It exists only so that forward hooks (see :mod:`vitviz.capture`) can observe the attention.
    """


# ---------------------------------------------------------------------------------------------------------------------
# relative position bias (BEiT)
# ---------------------------------------------------------------------------------------------------------------------
def num_relative_distance(window: tuple[int, int]) -> int:
    """Rows of a BEiT relative-position table for a patch grid: ``(2gh-1)(2gw-1)`` offsets + 3 [CLS] entries."""
    return (2 * window[0] - 1) * (2 * window[1] - 1) + 3


def relative_position_index(window: tuple[int, int]) -> torch.Tensor:
    """BEiT's index ``[N, N]`` (``N = 1 + gh*gw``) into the relative-position table: patch pairs by their offset
    (row-major over ``(2gh-1) x (2gw-1)``), then [CLS]->patch, patch->[CLS], [CLS]->[CLS] (the last three rows)."""
    gh, gw = window
    ys, xs = torch.meshgrid(torch.arange(gh, device="cpu"), torch.arange(gw, device="cpu"), indexing="ij")
    coords = torch.stack([ys.flatten(), xs.flatten()])  # [2, M]
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)  # [M, M, 2]
    idx_patch = (rel[..., 0] + gh - 1) * (2 * gw - 1) + (rel[..., 1] + gw - 1)
    n = num_relative_distance(window)
    index = torch.zeros((gh * gw + 1,) * 2, dtype=torch.long, device="cpu")
    index[1:, 1:] = idx_patch
    index[0, 0:] = n - 3
    index[0:, 0] = n - 2
    index[0, 0] = n - 1
    return index


def _geometric_positions(src: int, dst: int) -> list[float]:
    """The source offsets of BEiT's (and timm's) table resize: spaced by a geometric progression so that the
    outermost source offset reaches the new window's edge (unilm ``run_class_finetuning.py``)."""
    left, right = 1.01, 1.5
    while right - left > 1e-6:
        q = (left + right) / 2.0
        gp = (1.0 - q ** (src // 2)) / (1.0 - q)
        if gp > dst // 2:
            right = q
        else:
            left = q
    dis, cur = [], 1.0
    for i in range(src // 2):
        dis.append(cur)
        cur += q ** (i + 1)
    return [-d for d in reversed(dis)] + [0.0] + dis


def _interp_linear(points: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Left/right indices and distances of ``x`` among the sorted ``points`` (clamped at the ends; a point on a
    node gets equal weights), for linear interpolation on an uneven grid."""
    right = torch.bucketize(x.contiguous(), points).clamp(max=points.shape[0] - 1)
    left = (right - 1).clamp(0, points.shape[0] - 1)
    dl = (x - points[left]).clamp(min=0)
    dr = (points[right] - x).clamp(min=0)
    both = (dl == 0) & (dr == 0)
    dl, dr = torch.where(both, torch.ones_like(dl), dl), torch.where(both, torch.ones_like(dr), dr)
    return left, right, dl, dr


def resize_rel_pos_table(table: torch.Tensor, old_window: tuple[int, int], new_window: tuple[int, int],
                         mode: RelPosInterp = "timm") -> torch.Tensor:
    """Resize a BEiT relative-position table ``[(2gh-1)(2gw-1)+3, H]`` to another patch grid.

    ``"timm"``: timm's ``resize_rel_pos_bias_table`` (the offsets placed on BEiT's geometric progression, linear
    interpolation on that uneven grid); ``"bilinear"``: Hugging Face BEiT / data2vec-vision
    (``interpolate_pos_encoding``: the offset grid resized bilinearly). The three [CLS] rows are kept.
    """
    if tuple(new_window) == tuple(old_window):
        return table
    src = (2 * old_window[0] - 1, 2 * old_window[1] - 1)
    dst = (2 * new_window[0] - 1, 2 * new_window[1] - 1)
    H = table.shape[1]
    extra = table[-3:]
    grid = table[:-3].float()
    if mode == "bilinear":
        t = grid.reshape(1, src[1], src[0], H).permute(0, 3, 1, 2)  # HF reshapes (width, height): the same for squares
        t = F.interpolate(t, size=(dst[0], dst[1]), mode="bilinear")
        new = t.permute(0, 2, 3, 1).reshape(dst[0] * dst[1], H)
    elif mode == "timm":
        y = torch.tensor(_geometric_positions(src[0], dst[0]), dtype=torch.float32)
        x = torch.tensor(_geometric_positions(src[1], dst[1]), dtype=torch.float32)
        ty, tx = dst[0] // 2.0, dst[1] // 2.0
        dy, dx = torch.arange(-ty, ty + 0.1, 1.0), torch.arange(-tx, tx + 0.1, 1.0)
        yy, xx = torch.meshgrid(dy, dx, indexing="ij")
        yl, yr, ydl, ydr = _interp_linear(y, yy)
        xl, xr, xdl, xdr = _interp_linear(x, xx)
        z = grid.reshape(src[0], src[1], H)
        new = (z[yl, xl] * (ydr * xdr)[..., None] + z[yl, xr] * (ydr * xdl)[..., None]
               + z[yr, xl] * (ydl * xdr)[..., None] + z[yr, xr] * (ydl * xdl)[..., None])
        new = (new / ((ydl + ydr) * (xdl + xdr))[..., None]).reshape(dst[0] * dst[1], H)
    else:
        raise ValueError(f"rel_pos_interp={mode!r}; valid: {', '.join(REL_POS_INTERPS)}")
    return torch.cat([new.to(table.dtype), extra], dim=0)


def rel_pos_bias_for(table: torch.Tensor, window: tuple[int, int], grid: tuple[int, int],
                     mode: RelPosInterp) -> torch.Tensor:
    """The additive attention bias ``[1, H, N, N]`` of a relative-position ``table`` (trained for ``window``) at a
    patch ``grid`` (``N = 1 + gh*gw``)."""
    t = resize_rel_pos_table(table, window, grid, mode)
    index = relative_position_index(tuple(grid)).to(t.device)
    N = index.shape[0]
    return t[index.reshape(-1)].reshape(N, N, -1).permute(2, 0, 1).unsqueeze(0)


class RelativePositionBias(nn.Module):
    """A BEiT relative-position table shared by every block (``rel_pos_bias.relative_position_bias_table``)."""

    def __init__(self, window: tuple[int, int], num_heads: int, interp: RelPosInterp = "timm"):
        super().__init__()
        self.window = tuple(window)
        self.interp = interp
        self.relative_position_bias_table = nn.Parameter(torch.zeros(num_relative_distance(window), num_heads))

    def forward(self, grid: tuple[int, int]) -> torch.Tensor:
        """``[1, H, N, N]`` for the patch ``grid``."""
        return rel_pos_bias_for(self.relative_position_bias_table, self.window, grid, self.interp)


class Attention(nn.Module):
    """Multi-head self-attention with a fused (SDPA) path and an explicit, hookable path.

    ``fused=True`` (default) calls :func:`torch.nn.functional.scaled_dot_product_attention`; ``fused=False``
    computes ``softmax(q k^T / sqrt(d) + bias)`` and passes it through ``self.attn_map`` before dropout. ``bias`` is
    the relative position bias (this block's table, ``rel_pos_window`` set, plus a shared one passed in), added to
    the logits before the softmax on both paths (``attn_mask`` of SDPA), so the captured attention is the one after
    the bias.
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True, attn_drop: float = 0.0, proj_drop: float = 0.0,
                 rel_pos_window: tuple[int, int] | None = None, rel_pos_interp: RelPosInterp = "timm"):
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
        self.rel_pos_window = tuple(rel_pos_window) if rel_pos_window else None
        self.rel_pos_interp = rel_pos_interp
        if rel_pos_window:
            self.relative_position_bias_table = nn.Parameter(torch.zeros(num_relative_distance(rel_pos_window),
                                                                         num_heads))
        else:
            self.relative_position_bias_table = None

    def forward(self, x: torch.Tensor, grid: tuple[int, int] | None = None,
                shared_bias: torch.Tensor | None = None) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
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
    def __init__(self, dim: int, hidden: int, drop: float = 0.0, act_layer: ActLayer = "gelu"):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = make_act(act_layer)
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


class SwiGLUPacked(nn.Module):
    """SwiGLU MLP with value and gate packed in one ``fc1`` (timm's ``SwiGLUPacked``, DINOv2 giant):
    ``fc2(silu(a) * b)`` with ``a, b = fc1(x).chunk(2)``; ``hidden`` is the packed width (``fc2`` takes half)."""

    def __init__(self, dim: int, hidden: int, drop: float = 0.0):
        super().__init__()
        if hidden % 2:
            raise ValueError(f"a packed SwiGLU needs an even hidden width (int(embed_dim * mlp_ratio)), got {hidden}")
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.SiLU()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden // 2, dim)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.fc1(x).chunk(2, dim=-1)
        return self.drop2(self.fc2(self.drop1(self.act(a) * b)))


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
    ):
        super().__init__()
        self.post_norm = post_norm
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = Attention(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=drop,
                              rel_pos_window=rel_pos_window, rel_pos_interp=rel_pos_interp)
        self.ls1 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path1 = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        hidden = int(dim * mlp_ratio)
        if mlp_layer == "swiglu":
            self.mlp: nn.Module = SwiGLUPacked(dim, hidden, drop=drop)
        elif mlp_layer == "mlp":
            self.mlp = Mlp(dim, hidden, drop=drop, act_layer=act_layer)
        else:
            raise ValueError(f"mlp_layer={mlp_layer!r}; valid: {', '.join(MLP_LAYERS)}")
        self.ls2 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path2 = DropPath(drop_path)

    def forward(self, x: torch.Tensor, grid: tuple[int, int] | None = None,
                shared_bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.post_norm:
            x = self.norm1(x + self.drop_path1(self.ls1(self._attn(x, grid, shared_bias))))
            return self.norm2(x + self.drop_path2(self.ls2(self.mlp(x))))
        x = x + self.drop_path1(self.ls1(self._attn(self.norm1(x), grid, shared_bias)))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return x

    def _attn(self, x: torch.Tensor, grid: tuple[int, int] | None, shared_bias: torch.Tensor | None) -> torch.Tensor:
        if grid is None and shared_bias is None:  # no relative position bias: the plain call
            return self.attn(x)
        return self.attn(x, grid, shared_bias)


class AttentionPool(nn.Module):
    """Attention pooling with a learned latent query (SigLIP's "MAP" head; timm's ``AttentionPoolLatent`` names).

    ``x [B, N, D]`` -> ``[B, D]``: the latent query attends over all ``N`` tokens (``q``, ``kv``, ``proj``), then
    ``y + MLP(LN(y))``. The explicit path passes the probabilities ``[B, H, 1, N]`` through ``self.attn_map`` (hooked
    by :mod:`vitviz.capture` as the model's pooling attention, its "[CLS] row").
    """

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, eps: float = 1e-6,
                 act_layer: ActLayer = "gelu", qkv_bias: bool = True):
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
        self.norm = nn.LayerNorm(dim, eps=eps)
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
    pos_embed: torch.Tensor, new_grid: tuple[int, int], old_grid: tuple[int, int], num_prefix_tokens: int,
    mode: PosEmbedInterp = "timm",
) -> torch.Tensor:
    """Resample ``pos_embed [1, p + gh*gw, D]`` bicubically over the patch grid; prefix slots are kept as they are.

    ``mode`` follows each reference implementation:

    * ``"timm"``: ``F.interpolate(size=new_grid, mode="bicubic", antialias=True)`` (timm's ``resample_abs_pos_embed``;
      also Hugging Face ``Dinov2WithRegisters`` and DINOv2's register models);
    * ``"bicubic"``: the same without antialiasing (Hugging Face ViT / DINO, ``Dinov2Model``, BEiT, CLIP, SigLIP
      ``interpolate_pos_encoding``);
    * ``"dino"``: DINO's and DINOv2's own code: ``scale_factor=((gh + 0.1) / old_gh, (gw + 0.1) / old_gw)``, no
      antialiasing (the 0.1 offset avoids floating-point error in the output size).
    """
    if tuple(new_grid) == tuple(old_grid):
        return pos_embed
    prefix, patches = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    D = patches.shape[-1]
    dtype = patches.dtype
    grid = patches.reshape(1, old_grid[0], old_grid[1], D).permute(0, 3, 1, 2).float()
    if mode == "timm":
        grid = F.interpolate(grid, size=tuple(new_grid), mode="bicubic", antialias=True, align_corners=False)
    elif mode == "bicubic":
        grid = F.interpolate(grid, size=tuple(new_grid), mode="bicubic", align_corners=False)
    elif mode == "dino":
        scale = ((new_grid[0] + 0.1) / old_grid[0], (new_grid[1] + 0.1) / old_grid[1])
        grid = F.interpolate(grid, scale_factor=scale, mode="bicubic", align_corners=False)
        if tuple(grid.shape[-2:]) != tuple(new_grid):  # pragma: no cover - the offset guarantees the size
            raise RuntimeError(f"DINO position-embedding interpolation gave {tuple(grid.shape[-2:])}, not {new_grid}")
    else:
        raise ValueError(f"pos_embed_interp={mode!r}; valid: {', '.join(POS_EMBED_INTERPS)}")
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
        img_size = _pair(img_size)
        self._validate(img_size, patch_size, in_channels, embed_dim, num_heads, depth, num_classes,
                       pos_embed, global_pool, class_token, distilled, num_reg_tokens)
        self._validate_options(act_layer=act_layer, mlp_layer=mlp_layer, rel_pos_bias=rel_pos_bias,
                               pos_embed_interp=pos_embed_interp, rel_pos_interp=rel_pos_interp,
                               num_prefix_tokens=int(class_token) + int(distilled) + num_reg_tokens,
                               class_token=class_token)
        if fc_norm is None:
            fc_norm = global_pool == "avg"
        self.config = ViTConfig(
            img_size=img_size, patch_size=patch_size, in_channels=in_channels, num_classes=num_classes,
            embed_dim=embed_dim, depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias,
            drop_rate=drop_rate, attn_drop_rate=attn_drop_rate, drop_path_rate=drop_path_rate, pos_embed=pos_embed,
            class_token=class_token, num_reg_tokens=num_reg_tokens, distilled=distilled, global_pool=global_pool,
            layer_norm_eps=layer_norm_eps, fc_norm=fc_norm, no_embed_class=no_embed_class, init_values=init_values,
            act_layer=act_layer, mlp_layer=mlp_layer, pre_norm=pre_norm, post_norm=post_norm, patch_bias=patch_bias,
            head_bias=head_bias, rel_pos_bias=rel_pos_bias, pos_embed_interp=pos_embed_interp,
            rel_pos_interp=rel_pos_interp,
        )
        self.spec = None  # set by loaders / create_model: a vitviz.model.spec.ModelSpec
        self.num_classes = num_classes
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.patch_size = patch_size
        self.global_pool = global_pool
        self.no_embed_class = no_embed_class
        self.num_prefix_tokens = self.config.num_prefix_tokens

        self.patch_embed = PatchEmbed(img_size, patch_size, in_channels, embed_dim, bias=patch_bias)
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
        self.norm_pre = nn.LayerNorm(embed_dim, eps=layer_norm_eps) if pre_norm else nn.Identity()
        window = self.patch_embed.grid_size
        self.rel_pos_bias = RelativePositionBias(window, num_heads, rel_pos_interp) if rel_pos_bias == "shared" \
            else None
        # stochastic depth rate rising linearly over the blocks (plain floats: works on the meta device too)
        dpr = [drop_path_rate * i / (depth - 1) if depth > 1 else 0.0 for i in range(depth)]
        self.blocks = nn.ModuleList(
            Block(embed_dim, num_heads, mlp_ratio, qkv_bias, drop_rate, attn_drop_rate, dpr[i], layer_norm_eps,
                  init_values, act_layer=act_layer, mlp_layer=mlp_layer, post_norm=post_norm,
                  rel_pos_window=window if rel_pos_bias == "layer" else None, rel_pos_interp=rel_pos_interp)
            for i in range(depth)
        )
        self.norm = nn.LayerNorm(embed_dim, eps=layer_norm_eps) if not fc_norm else nn.Identity()
        self.attn_pool = AttentionPool(embed_dim, num_heads, mlp_ratio, layer_norm_eps, act_layer) \
            if global_pool == "map" else None
        self.fc_norm = nn.LayerNorm(embed_dim, eps=layer_norm_eps) if fc_norm else nn.Identity()
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
                          num_prefix_tokens, class_token) -> None:
        for name, value, valid in (("act_layer", act_layer, ACT_LAYERS), ("mlp_layer", mlp_layer, MLP_LAYERS),
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
        if self.attn_pool is not None:
            _trunc_normal_(self.attn_pool.latent, std=self.embed_dim**-0.5)
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

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Token sequence after the final norm: ``[B, N, D]``."""
        grid = self.patch_embed.check_input(x)
        x = self.embed(x)
        if self.config.rel_pos_bias == "none":
            for blk in self.blocks:
                x = blk(x)
        else:
            shared = self.rel_pos_bias(grid) if self.rel_pos_bias is not None else None
            for blk in self.blocks:
                x = blk(x, grid, shared)
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
