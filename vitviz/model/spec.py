"""The model spec: what a loaded model is, how to feed it, and what its outputs mean. No Qt."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from vitviz.model.preprocess import IMAGENET_MEAN, IMAGENET_STD, INCEPTION_MEAN, INCEPTION_STD, Preprocess
from vitviz.model.vit import ViTConfig

HEAD_KINDS: tuple[str, ...] = ("classifier", "projection", "prompts")


@dataclass(frozen=True)
class ModelSpec:
    """Frozen description of a model.

    Attributes:
        config: the architecture (constructor arguments of :class:`~vitviz.model.vit.ViT`).
        preprocess: resize / crop / interpolation / mean / std the weights were trained with.
        labels: class names in head order, or None when unknown.
        source_format: "native", "timm", "torchvision", "hf", "npz", "registry" ...
        source_path: file or directory it was loaded from (None for in-memory models).
        name: a human-readable name.
        head_kind: ``"classifier"`` (class scores), ``"projection"`` (the head maps the pooled token into an
            embedding space, CLIP's image projection, so the output is an embedding, not class scores) or
            ``"prompts"`` (text prompts' scores on a CLIP / SigLIP tower: :mod:`vitviz.model.zero_shot`).
        probability: how class probabilities follow from the logits: ``"softmax"`` over the classes, or
            ``"sigmoid"`` of each logit (SigLIP's prompts: :func:`vitviz.model.zero_shot.with_prompts`).
    """

    config: ViTConfig
    preprocess: Preprocess = field(default_factory=Preprocess)
    labels: tuple[str, ...] | None = None
    source_format: str = "registry"
    source_path: str | None = None
    name: str = "vit"
    head_kind: str = "classifier"
    probability: str = "softmax"

    @property
    def input_size(self) -> tuple[int, int]:
        return tuple(self.preprocess.crop)  # type: ignore[return-value]

    @property
    def num_prefix_tokens(self) -> int:
        return self.config.num_prefix_tokens

    @property
    def num_classes(self) -> int:
        return self.config.num_classes

    @property
    def is_feature_model(self) -> bool:
        """The output is an embedding (no head, or a projection head: DINO, DINOv2, CLIP, SigLIP towers), not class
        scores: its gradient views explain a similarity target, not a class."""
        return self.config.num_classes == 0 or self.head_kind == "projection"

    def label(self, index: int) -> str:
        """The class name of ``index``, or ``"class {index}"`` when the spec has no labels."""
        if self.labels is not None and 0 <= index < len(self.labels):
            return self.labels[index]
        return f"class {index}"

    def replace(self, **changes: Any) -> "ModelSpec":
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "preprocess": self.preprocess.to_dict(),
            "labels": list(self.labels) if self.labels is not None else None,
            "source_format": self.source_format,
            "source_path": self.source_path,
            "name": self.name,
            "head_kind": self.head_kind,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelSpec":
        labels = d.get("labels")
        return cls(
            config=ViTConfig.from_dict(d["config"]),
            preprocess=Preprocess.from_dict(d.get("preprocess", {})),
            labels=tuple(str(x) for x in labels) if labels is not None else None,
            source_format=d.get("source_format", "native"),
            source_path=d.get("source_path"),
            name=d.get("name", "vit"),
            head_kind=d.get("head_kind", "classifier"),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def parts_text(self) -> str:
        """The architecture's options in words (activation, MLP, LayerScale, norms, position bias, pooling ...)."""
        return _parts(self.config)

    def describe(self) -> str:
        """Multi-line human-readable summary (used by ``vitviz info``)."""
        c, p = self.config, self.preprocess
        heads = f"{c.num_heads} heads"
        prefix = []
        if c.class_token:
            prefix.append("CLS")
        if c.distilled:
            prefix.append("DIST")
        if c.num_reg_tokens:
            prefix.append(f"{c.num_reg_tokens} registers")
        lines = [
            f"name:          {self.name}",
            f"format:        {self.source_format}" + (f" ({self.source_path})" if self.source_path else ""),
            f"architecture:  ViT patch {c.patch_size}, width {c.embed_dim}, depth {c.depth}, {heads}, "
            f"MLP x{c.mlp_ratio:g}, pool {c.global_pool}, prefix tokens: {', '.join(prefix) or 'none'}",
            f"parts:         {self.parts_text()}",
            f"input size:    {c.img_size[0]}x{c.img_size[1]} (grid {c.grid_size[0]}x{c.grid_size[1]})",
            f"preprocessing: {p.words()}",
            # a projection head (CLIP, SigLIP, open_clip) maps to an embedding: its width is no class count
            f"embedding dim: {c.num_classes} (a projection head: no classes)" if self.head_kind == "projection" else
            f"classes:       {c.num_classes}" + (" (labelled)" if self.labels else " (no labels)"),
        ]
        return "\n".join(lines)


def _parts(c: ViTConfig) -> str:
    parts = [c.act_layer.replace("_", " ").replace("gelu tanh", "GELU (tanh)").replace("quick gelu", "QuickGELU")
             .replace("gelu", "GELU"), "SwiGLU MLP" if c.mlp_layer == "swiglu" else "MLP"]
    if c.init_values is not None:
        parts.append("LayerScale")
    if c.pre_norm:
        parts.append("pre-norm (ln_pre)")
    if c.post_norm:
        parts.append("post-norm blocks")
    if c.rel_pos_bias != "none":
        parts.append(f"relative position bias ({'per layer' if c.rel_pos_bias == 'layer' else 'shared'})")
    if c.global_pool == "map":
        parts.append("attention-pool head")
    parts.append({"learned": "learned", "sincos": "sin-cos", "none": "no"}[c.pos_embed] + " position embedding"
                 + (f" (resampled: {c.pos_embed_interp})" if c.pos_embed == "learned" else ""))
    if c.embed_norm:
        parts.append("normed patch embeddings")
    if not c.proj_bias:
        parts.append("no projection / MLP biases")
    parts.append(f"{'RMSNorm' if c.norm_layer == 'rmsnorm' else 'LayerNorm'} eps {c.layer_norm_eps:g}")
    return ", ".join(parts)


def imagenet_preprocess(size: int = 224, *, crop_pct: float = 0.875, interpolation: str = "bicubic") -> Preprocess:
    """DeiT / torchvision style: ImageNet mean and std."""
    return Preprocess.for_crop(size, crop_pct=crop_pct, interpolation=interpolation,  # type: ignore[arg-type]
                               mean=IMAGENET_MEAN, std=IMAGENET_STD)


def inception_preprocess(size: int = 224, *, crop_pct: float = 0.875, interpolation: str = "bicubic") -> Preprocess:
    """Google / augreg style: mean = std = 0.5."""
    return Preprocess.for_crop(size, crop_pct=crop_pct, interpolation=interpolation,  # type: ignore[arg-type]
                               mean=INCEPTION_MEAN, std=INCEPTION_STD)


# ---------------------------------------------------------------------------------------------------------------------
# model families: the documented default preprocessing when a checkpoint's own config does not say
# ---------------------------------------------------------------------------------------------------------------------
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

# family -> (mean, std, crop_pct, interpolation), as the family's reference (timm's pretrained_cfg, the HF
# preprocessor configs of the original releases) documents it
FAMILY_PREPROCESS: dict[str, tuple[tuple[float, ...], tuple[float, ...], float, str]] = {
    "vit": (INCEPTION_MEAN, INCEPTION_STD, 0.875, "bicubic"),        # augreg / Google ViT
    "deit": (IMAGENET_MEAN, IMAGENET_STD, 0.875, "bicubic"),         # DeiT (distilled or not)
    "deit3": (IMAGENET_MEAN, IMAGENET_STD, 1.0, "bicubic"),          # DeiT III
    "dino": (IMAGENET_MEAN, IMAGENET_STD, 0.875, "bicubic"),         # DINO (v1)
    "dinov2": (IMAGENET_MEAN, IMAGENET_STD, 1.0, "bicubic"),         # DINOv2 with or without registers
    "beit": (INCEPTION_MEAN, INCEPTION_STD, 0.9, "bicubic"),         # BEiT v1 (v2 and data2vec: ImageNet mean/std)
    "beitv2": (IMAGENET_MEAN, IMAGENET_STD, 0.9, "bicubic"),         # BEiT v2, data2vec-vision
    "clip": (CLIP_MEAN, CLIP_STD, 1.0, "bicubic"),                   # CLIP / OpenCLIP image towers
    "siglip": (INCEPTION_MEAN, INCEPTION_STD, 1.0, "bicubic"),       # SigLIP image towers
}


def family_preprocess(family: str, size: tuple[int, int]) -> Preprocess:
    """The documented default preprocessing of ``family`` (a key of :data:`FAMILY_PREPROCESS`) at input ``size``.

    Crop fraction 1.0 means the image is resized (shorter side) to the input size and centre-cropped; below 1, timm's
    ``floor(size / crop_pct)`` resize before the crop. Non-square inputs are resized to the size directly.
    """
    mean, std, crop_pct, interp = FAMILY_PREPROCESS[family]
    h, w = size
    if h != w:
        return Preprocess(resize=size, crop=size, interpolation=interp, mean=mean, std=std)  # type: ignore[arg-type]
    return Preprocess.for_crop(h, crop_pct=crop_pct, interpolation=interp, mean=mean, std=std)  # type: ignore[arg-type]


def guess_family(config: ViTConfig) -> str:
    """The family a timm-layout architecture most likely belongs to, from what its shapes show (a checkpoint's own
    config, when there is one, says more): SigLIP (attention-pool head), CLIP (``norm_pre``), BEiT (relative position
    bias), DINOv2 (LayerScale, patch 14), DeiT III (LayerScale, no position slots for [CLS]), DeiT (distillation
    token), otherwise a plain (augreg) ViT."""
    c = config
    if c.global_pool == "map":
        return "siglip"
    if c.pre_norm:
        return "clip"
    if c.rel_pos_bias != "none":
        return "beit"
    if c.init_values is not None and c.patch_size == 14:
        return "dinov2"
    if c.init_values is not None and c.no_embed_class and not c.num_reg_tokens:
        return "deit3"
    if c.distilled:
        return "deit"
    return "vit"
