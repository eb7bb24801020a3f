"""The configuration of a :class:`~vitviz.model.vit.ViT`: every constructor argument, as a frozen dataclass that
round-trips through a dict (the native checkpoints' ``config``).

This module never imports Qt.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from vitviz.model.layers import ActLayer, MlpLayer, NormLayer
from vitviz.model.pos_embed import PosEmbedInterp, RelPosInterp
from vitviz.model.rope import RopeKind

PosEmbedKind = Literal["learned", "sincos", "none"]
GlobalPool = Literal["token", "avg", "map"]
RelPosBias = Literal["none", "layer", "shared"]

REL_POS_BIASES: tuple[str, ...] = ("none", "layer", "shared")


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
    rope: RopeKind = "none"
    rope_theta: float = 10000.0
    rope_grid_offset: float = 0.0
    rope_grid_indexing: str = "ij"
    rope_ref_grid: tuple[int, int] | None = None
    rope_half: bool = False
    mlp_norm: bool = False
    final_norm: bool = True
    pool_num_heads: int | None = None
    norm_layer: NormLayer = "layernorm"
    embed_norm: bool = False
    proj_bias: bool = True
    attn_norm: bool = False
    pool_mlp_ratio: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["img_size"] = list(self.img_size)
        if self.rope_ref_grid is not None:
            d["rope_ref_grid"] = list(self.rope_ref_grid)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ViTConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown ViT config keys: {sorted(unknown)}")
        d = dict(d)
        if "img_size" in d:
            d["img_size"] = to_pair(d["img_size"])
        if d.get("rope_ref_grid") is not None:
            d["rope_ref_grid"] = to_pair(d["rope_ref_grid"])
        return cls(**d)

    @property
    def num_prefix_tokens(self) -> int:
        return int(self.class_token) + int(self.distilled) + self.num_reg_tokens

    @property
    def grid_size(self) -> tuple[int, int]:
        return (self.img_size[0] // self.patch_size, self.img_size[1] // self.patch_size)


def to_pair(x: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    """``(height, width)`` of an int (a square) or a pair; ValueError for anything else of another length."""
    if isinstance(x, (tuple, list)):
        if len(x) != 2:
            raise ValueError(f"expected an int or a pair (height, width), got {x!r}")
        return (int(x[0]), int(x[1]))
    return (int(x), int(x))
