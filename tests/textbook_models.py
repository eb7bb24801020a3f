"""Minimal ViTs in the styles users write themselves, each with an explicit float re-implementation of its
forward that exposes every attention tensor, and a plain training loop. Used by test_adapters, test_textbook and
tests/gui/test_show (imported as ``textbook_models``).

- Style B: ``VisionTransformer(img_size, patch_size, in_channels, num_classes, d_model, num_heads, num_layers, d_ff,
  dropout)``: pre-norm blocks of a hand-written ``MultiHeadSelfAttention`` (separate W_q / W_k / W_v / W_o, softmax),
  [CLS] + learned positions, final LayerNorm, linear head.
- Style C: a post-norm encoder (``x = LN(x + Attn(x)); x = LN(x + FF(x))``) on ``nn.MultiheadAttention(batch_first=
  True)`` called as ``attn(x, x, x)``, conv patch embedding, [CLS] + learned positions ``[N, D]``,
  ``mlp_head = Sequential(LayerNorm, Linear)``; constructor ``(img_size, patch_size, num_classes, emb_size, depth,
  num_heads)``.
- Style D: configured by a plain dict (``hidden_size``, ``num_hidden_layers``, ...), one fused ``qkv`` Linear per
  layer, GELU, ``forward(x, output_attentions=True)`` returns the logits and the list of attention probabilities.
- Custom: an attention module the adapters cannot recognise (class ``TokenMixer``, attribute ``mixer``), to be named
  by the user; ``fused=True`` makes it call ``F.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


# ---------------------------------------------------------------------------------------------------------------------
# style B
# ---------------------------------------------------------------------------------------------------------------------
class PatchEmbedding(nn.Module):
    def __init__(self, img_size: int, patch_size: int, in_channels: int, d_model: int):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, dropout: float):
        super().__init__()
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.attn_weights = None  # the module's own record of its last attention

    def forward(self, x):
        B, N, _ = x.shape
        q = self.W_q(x).view(B, N, self.num_heads, self.d_k).transpose(1, 2)
        k = self.W_k(x).view(B, N, self.num_heads, self.d_k).transpose(1, 2)
        v = self.W_v(x).view(B, N, self.num_heads, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        attn = torch.softmax(scores, dim=-1)
        self.attn_weights = attn.detach()
        out = self.dropout(attn) @ v
        return self.W_o(out.transpose(1, 2).reshape(B, N, -1))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.fc2(self.dropout(F.gelu(self.fc1(x))))


class EncoderBlock(nn.Module):
    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadSelfAttention(d_model, num_heads, dropout)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.dropout(self.attn(self.norm1(x)))
        return x + self.dropout(self.ff(self.norm2(x)))


class VisionTransformer(nn.Module):
    """Style B."""

    def __init__(self, img_size=32, patch_size=8, in_channels=3, num_classes=10, d_model=32, num_heads=4,
                 num_layers=2, d_ff=64, dropout=0.1):
        super().__init__()
        self.patch_embedding = PatchEmbedding(img_size, patch_size, in_channels, d_model)
        n = self.patch_embedding.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embedding = nn.Parameter(torch.randn(1, n + 1, d_model) * 0.02)
        self.dropout = nn.Dropout(dropout)
        self.encoder = nn.ModuleList(EncoderBlock(d_model, num_heads, d_ff, dropout) for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, x):
        x = self.patch_embedding(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embedding
        x = self.dropout(x)
        for blk in self.encoder:
            x = blk(x)
        return self.head(self.norm(x)[:, 0])


def explicit_b(m: VisionTransformer, x):
    """``(logits, attentions, tokens)``: every attention a leaf-like tensor with ``retain_grad``."""
    t = m.patch_embedding.proj(x).flatten(2).transpose(1, 2)
    t = torch.cat([m.cls_token.expand(len(t), -1, -1), t], 1) + m.pos_embedding
    attns, toks = [], [t]
    for blk in m.encoder:
        a = blk.attn
        h = blk.norm1(t)
        B, N, D = h.shape
        q, k, v = (F.linear(h, w.weight, w.bias).view(B, N, a.num_heads, a.d_k).transpose(1, 2)
                   for w in (a.W_q, a.W_k, a.W_v))
        p = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(a.d_k), dim=-1)
        p.retain_grad()
        attns.append(p)
        t = t + a.W_o((p @ v).transpose(1, 2).reshape(B, N, D))
        t = t + blk.ff.fc2(F.gelu(blk.ff.fc1(blk.norm2(t))))
        toks.append(t)
    return m.head(m.norm(t)[:, 0]), attns, toks


# ---------------------------------------------------------------------------------------------------------------------
# style C
# ---------------------------------------------------------------------------------------------------------------------
class PatchEmbeddingC(nn.Module):
    def __init__(self, in_channels: int, patch_size: int, emb_size: int, img_size: int):
        super().__init__()
        self.projection = nn.Conv2d(in_channels, emb_size, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
        self.positions = nn.Parameter(torch.randn((img_size // patch_size) ** 2 + 1, emb_size))

    def forward(self, x):
        x = self.projection(x).flatten(2).transpose(1, 2)
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.positions


class TransformerEncoderBlock(nn.Module):
    """Post-norm."""

    def __init__(self, emb_size: int, num_heads: int, expansion: int = 4, drop_p: float = 0.1):
        super().__init__()
        self.attn = nn.MultiheadAttention(emb_size, num_heads, dropout=drop_p, batch_first=True)
        self.norm1 = nn.LayerNorm(emb_size)
        self.ff = nn.Sequential(nn.Linear(emb_size, expansion * emb_size), nn.GELU(), nn.Dropout(drop_p),
                                nn.Linear(expansion * emb_size, emb_size))
        self.norm2 = nn.LayerNorm(emb_size)
        self.drop = nn.Dropout(drop_p)

    def forward(self, x):
        x = self.norm1(x + self.drop(self.attn(x, x, x)[0]))
        return self.norm2(x + self.drop(self.ff(x)))


class ViTC(nn.Module):
    """Style C."""

    def __init__(self, img_size=32, patch_size=8, num_classes=10, emb_size=32, depth=2, num_heads=4):
        super().__init__()
        self.patch_embedding = PatchEmbeddingC(3, patch_size, emb_size, img_size)
        self.encoder = nn.Sequential(*[TransformerEncoderBlock(emb_size, num_heads) for _ in range(depth)])
        self.mlp_head = nn.Sequential(nn.LayerNorm(emb_size), nn.Linear(emb_size, num_classes))

    def forward(self, x):
        return self.mlp_head(self.encoder(self.patch_embedding(x))[:, 0])


def explicit_c(m: ViTC, x):
    t = m.patch_embedding(x)
    attns, toks = [], [t]
    for blk in m.encoder:
        mha = blk.attn
        B, N, D = t.shape
        H, hd = mha.num_heads, D // mha.num_heads
        wq, wk, wv = mha.in_proj_weight.chunk(3)
        bq, bk, bv = mha.in_proj_bias.chunk(3)
        q, k, v = (F.linear(t, w, b).view(B, N, H, hd).transpose(1, 2) for w, b in ((wq, bq), (wk, bk), (wv, bv)))
        p = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(hd), dim=-1)
        p.retain_grad()
        attns.append(p)
        t = blk.norm1(t + mha.out_proj((p @ v).transpose(1, 2).reshape(B, N, D)))
        t = blk.norm2(t + blk.ff(t))
        toks.append(t)
    return m.mlp_head(t[:, 0]), attns, toks


def own_attention_c(m: ViTC, x):
    """What ``nn.MultiheadAttention`` itself returns per head (need_weights, average_attn_weights=False)."""
    t = m.patch_embedding(x)
    out = []
    for blk in m.encoder:
        out.append(blk.attn(t, t, t, need_weights=True, average_attn_weights=False)[1])
        t = blk(t)
    return torch.stack(out)


# ---------------------------------------------------------------------------------------------------------------------
# style D
# ---------------------------------------------------------------------------------------------------------------------
CONFIG_D = {
    "patch_size": 8, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
    "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02, "image_size": 32,
    "num_classes": 10, "num_channels": 3, "qkv_bias": True,
}


class PatchEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_patches = (config["image_size"] // config["patch_size"]) ** 2
        self.projection = nn.Conv2d(config["num_channels"], config["hidden_size"], kernel_size=config["patch_size"],
                                    stride=config["patch_size"])

    def forward(self, x):
        return self.projection(x).flatten(2).transpose(1, 2)


class Embeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.patch_embeddings = PatchEmbeddings(config)
        self.cls_token = nn.Parameter(torch.randn(1, 1, config["hidden_size"]))
        self.position_embeddings = nn.Parameter(torch.randn(1, self.patch_embeddings.num_patches + 1,
                                                            config["hidden_size"]))
        self.dropout = nn.Dropout(config["hidden_dropout_prob"])

    def forward(self, x):
        x = self.patch_embeddings(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        return self.dropout(x + self.position_embeddings)


class FasterMultiHeadAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_size = config["hidden_size"]
        self.num_attention_heads = config["num_attention_heads"]
        self.attention_head_size = self.hidden_size // self.num_attention_heads
        self.qkv_projection = nn.Linear(self.hidden_size, 3 * self.hidden_size, bias=config["qkv_bias"])
        self.attn_dropout = nn.Dropout(config["attention_probs_dropout_prob"])
        self.output_projection = nn.Linear(self.hidden_size, self.hidden_size)
        self.output_dropout = nn.Dropout(config["hidden_dropout_prob"])

    def forward(self, x, output_attentions=False):
        B, N, _ = x.shape
        q, k, v = torch.chunk(self.qkv_projection(x), 3, dim=-1)
        q, k, v = (t.view(B, N, self.num_attention_heads, self.attention_head_size).transpose(1, 2) for t in (q, k, v))
        probs = F.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.attention_head_size), dim=-1)
        out = self.attn_dropout(probs) @ v
        out = self.output_dropout(self.output_projection(out.transpose(1, 2).reshape(B, N, self.hidden_size)))
        return out, (probs if output_attentions else None)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense_1 = nn.Linear(config["hidden_size"], config["intermediate_size"])
        self.activation = nn.GELU()
        self.dense_2 = nn.Linear(config["intermediate_size"], config["hidden_size"])
        self.dropout = nn.Dropout(config["hidden_dropout_prob"])

    def forward(self, x):
        return self.dropout(self.dense_2(self.activation(self.dense_1(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = FasterMultiHeadAttention(config)
        self.layernorm_1 = nn.LayerNorm(config["hidden_size"])
        self.mlp = MLP(config)
        self.layernorm_2 = nn.LayerNorm(config["hidden_size"])

    def forward(self, x, output_attentions=False):
        a, probs = self.attention(self.layernorm_1(x), output_attentions=output_attentions)
        x = x + a
        return x + self.mlp(self.layernorm_2(x)), probs


class Encoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.blocks = nn.ModuleList(Block(config) for _ in range(config["num_hidden_layers"]))

    def forward(self, x, output_attentions=False):
        all_attentions = []
        for block in self.blocks:
            x, probs = block(x, output_attentions=output_attentions)
            all_attentions.append(probs)
        return x, (all_attentions if output_attentions else None)


class ViTForClassfication(nn.Module):
    """Style D."""

    def __init__(self, config=None):
        super().__init__()
        self.config = dict(CONFIG_D if config is None else config)
        self.embedding = Embeddings(self.config)
        self.encoder = Encoder(self.config)
        self.layernorm = nn.LayerNorm(self.config["hidden_size"])
        self.classifier = nn.Linear(self.config["hidden_size"], self.config["num_classes"])

    def forward(self, x, output_attentions=False):
        x, attentions = self.encoder(self.embedding(x), output_attentions=output_attentions)
        logits = self.classifier(self.layernorm(x)[:, 0])
        return (logits, attentions) if output_attentions else (logits, None)


def explicit_d(m: ViTForClassfication, x):
    t = m.embedding(x)
    attns, toks = [], [t]
    for blk in m.encoder.blocks:
        a = blk.attention
        h = blk.layernorm_1(t)
        B, N, D = h.shape
        H, hd = a.num_attention_heads, a.attention_head_size
        w = a.qkv_projection.weight.view(3, D, D)
        b = a.qkv_projection.bias.view(3, D)
        q, k, v = (F.linear(h, w[i], b[i]).view(B, N, H, hd).transpose(1, 2) for i in range(3))
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1)
        p.retain_grad()
        attns.append(p)
        t = t + a.output_projection((p @ v).transpose(1, 2).reshape(B, N, D))
        t = t + blk.mlp(blk.layernorm_2(t))
        toks.append(t)
    return m.classifier(m.layernorm(t)[:, 0]), attns, toks


# ---------------------------------------------------------------------------------------------------------------------
# a module nothing recognises until its attention is named
# ---------------------------------------------------------------------------------------------------------------------
class TokenMixer(nn.Module):
    def __init__(self, dim: int, heads: int, fused: bool = False):
        super().__init__()
        self.heads, self.fused = heads, fused
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.out = nn.Linear(dim, dim)
        self.norm_probs = nn.Softmax(dim=-1)
        self.last = None

    def forward(self, x):
        B, N, D = x.shape
        q, k, v = self.to_qkv(x).view(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        if self.fused:
            o = F.scaled_dot_product_attention(q, k, v)
        else:
            p = self.norm_probs(torch.einsum("bhid,bhjd->bhij", q, k) * (D // self.heads) ** -0.5)
            self.last = p.detach()
            o = p @ v
        return self.out(o.transpose(1, 2).reshape(B, N, D))


class Layer(nn.Module):
    def __init__(self, dim, heads, fused):
        super().__init__()
        self.ln1, self.mixer, self.ln2 = nn.LayerNorm(dim), TokenMixer(dim, heads, fused), nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.mixer(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Custom(nn.Module):
    """Two register-like prefix tokens and no [CLS]; mean-pooled; 4 px patches on 16 px input."""

    def __init__(self, dim=24, heads=3, depth=2, num_classes=4, fused=False):
        super().__init__()
        self.stem = nn.Conv2d(3, dim, 4, 4)
        self.prefix = nn.Parameter(torch.randn(1, 2, dim))
        self.layers = nn.ModuleList(Layer(dim, heads, fused) for _ in range(depth))
        self.out = nn.Linear(dim, num_classes)

    def forward(self, x):
        t = self.stem(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.prefix.expand(len(t), -1, -1), t], 1)
        for layer in self.layers:
            t = layer(t)
        return self.out(t[:, 2:].mean(1))


def explicit_custom(m: Custom, x):
    t = m.stem(x).flatten(2).transpose(1, 2)
    t = torch.cat([m.prefix.expand(len(t), -1, -1), t], 1)
    attns, toks = [], [t]
    for layer in m.layers:
        mx = layer.mixer
        h = layer.ln1(t)
        B, N, D = h.shape
        q, k, v = mx.to_qkv(h).view(B, N, 3, mx.heads, D // mx.heads).permute(2, 0, 3, 1, 4)
        p = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D // mx.heads), dim=-1)
        p.retain_grad()
        attns.append(p)
        t = t + mx.out((p @ v).transpose(1, 2).reshape(B, N, D))
        t = t + layer.mlp(layer.ln2(t))
        toks.append(t)
    return m.out(t[:, 2:].mean(1)), attns, toks


# ---------------------------------------------------------------------------------------------------------------------
def train(model: nn.Module, steps: int = 5, *, size: int = 32, num_classes: int = 10, seed: int = 0) -> nn.Module:
    """A plain Adam + cross-entropy loop on random images; returns the model in eval mode."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(steps):
        x = torch.randn(8, 3, size, size, generator=g)
        y = torch.randint(0, num_classes, (8,), generator=g)
        out = model(x)
        logits = out[0] if isinstance(out, tuple) else out
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest relative error ``|a - b| / |b|`` (Frobenius) over the leading axes' slices (layer, image, head)."""
    a, b = a.detach().double(), b.detach().double()
    d = (a - b).flatten(-2).norm(dim=-1)
    n = b.flatten(-2).norm(dim=-1).clamp_min(1e-30)
    return float((d / n).max())
