"""The text transformer of CLIP and SigLIP, one module for both (the layouts of :mod:`.layouts` fill it). No Qt.

Token embedding + learned position embedding -> pre-norm blocks (``x + attn(ln1(x))``, ``x + mlp(ln2(x))``, optional
layer scale) -> final LayerNorm -> pool -> projection. The families differ in three places:

- CLIP: causal attention; pooled at the end token, ``argmax`` of the ids (OpenAI, open_clip, and transformers for
  configs with the legacy ``eos_token_id`` 2) or the first ``eos_id`` (transformers' newer configs, open_clip's
  ``pool_type="eos"``); ``text_projection`` without bias;
- SigLIP: bidirectional attention without a padding mask (the pads are input, as in training); pooled at the last
  position (transformers' ``SiglipTextTransformer``, open_clip's ``pool_type="last"``); ``head`` (transformers) /
  ``text_projection`` (open_clip) with a bias.

The attention is PyTorch's ``scaled_dot_product_attention`` (the references compute the same softmax(QKᵀ/√d)V).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = ("quick_gelu", "gelu", "gelu_tanh")
POOLS = ("argmax", "eos", "first", "last")


@dataclass(frozen=True)
class TextConfig:
    """The shape and rules of one text tower (see the module docstring).

    Attributes:
        embed_dim: the projection's output (the joint embedding); None: no projection (the pooled width).
        eos_id: the token ``pool="eos"`` looks for.
        proj_bias: the projection has a bias (SigLIP).
        layer_scale: blocks carry ``ls1`` / ``ls2`` (open_clip's ``ls_init_value``).
    """

    vocab_size: int
    context_length: int
    width: int
    heads: int
    layers: int
    mlp_dim: int
    embed_dim: int | None
    act: str = "gelu"
    eps: float = 1e-5
    causal: bool = True
    pool: str = "argmax"
    eos_id: int | None = None
    proj_bias: bool = False
    layer_scale: bool = False

    def problem(self) -> str | None:
        """What is inconsistent, in a few words, or None."""
        if self.act not in ACTIVATIONS:
            return f"unknown activation {self.act!r} (known: {', '.join(ACTIVATIONS)})"
        if self.pool not in POOLS:
            return f"unknown pooling {self.pool!r} (known: {', '.join(POOLS)})"
        if self.pool == "eos" and self.eos_id is None:
            return "pooling at the end token needs its id"
        if self.heads < 1 or self.width % self.heads:
            return f"width {self.width} is not a multiple of {self.heads} heads"
        if min(self.vocab_size, self.context_length, self.width, self.layers, self.mlp_dim) < 1:
            return "a size is not positive"
        return None


class QuickGELU(nn.Module):
    """OpenAI's ``x * sigmoid(1.702 x)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


def activation(name: str) -> nn.Module:
    return {"quick_gelu": QuickGELU, "gelu": nn.GELU,
            "gelu_tanh": lambda: nn.GELU(approximate="tanh")}[name]()


class LayerScale(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class SelfAttention(nn.Module):
    """Multi-head self-attention with packed ``qkv`` (``nn.MultiheadAttention``'s ``in_proj`` order: q, k, v)."""

    def __init__(self, width: int, heads: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(out.transpose(1, 2).reshape(B, N, D))


class Mlp(nn.Module):
    def __init__(self, width: int, hidden: int, act: str):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(width, hidden), activation(act), nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class TextBlock(nn.Module):
    def __init__(self, cfg: TextConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.width, eps=cfg.eps)
        self.attn = SelfAttention(cfg.width, cfg.heads, cfg.causal)
        self.ls1 = LayerScale(cfg.width) if cfg.layer_scale else nn.Identity()
        self.norm2 = nn.LayerNorm(cfg.width, eps=cfg.eps)
        self.mlp = Mlp(cfg.width, cfg.mlp_dim, cfg.act)
        self.ls2 = LayerScale(cfg.width) if cfg.layer_scale else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))


class TextEncoder(nn.Module):
    """Token ids ``[P, C]`` -> text embeddings ``[P, E]`` (not normalised), as the module docstring says."""

    def __init__(self, cfg: TextConfig):
        super().__init__()
        problem = cfg.problem()
        if problem is not None:
            raise ValueError(f"text tower: {problem}")
        self.cfg = cfg
        self.token_embedding = nn.Embedding(cfg.vocab_size, cfg.width)
        self.pos_embed = nn.Parameter(torch.zeros(cfg.context_length, cfg.width))
        self.blocks = nn.ModuleList(TextBlock(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.width, eps=cfg.eps)
        self.proj = (nn.Linear(cfg.width, cfg.embed_dim, bias=cfg.proj_bias) if cfg.embed_dim is not None
                     else nn.Identity())

    def pool(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(x.shape[0], device=x.device)
        if self.cfg.pool == "argmax":  # the end token has the largest id (first occurrence, as torch.argmax)
            return x[rows, ids.argmax(dim=-1)]
        if self.cfg.pool == "eos":
            return x[rows, (ids == self.cfg.eos_id).int().argmax(dim=-1)]
        return x[:, 0] if self.cfg.pool == "first" else x[:, -1]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        n = ids.shape[1]
        if n > self.cfg.context_length:
            raise ValueError(f"text tower: {n} tokens, more than its context of {self.cfg.context_length}")
        x = self.token_embedding(ids) + self.pos_embed[:n]
        for block in self.blocks:
            x = block(x)
        return self.proj(self.pool(self.norm(x), ids))
