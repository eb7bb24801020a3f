"""Registry of ViT variants: the paper's sizes and the common ones (timm naming).

``create_model("vit_base_patch16_224")`` builds a randomly initialised model with its spec set;
keyword overrides change any constructor argument (``num_classes=10``, ``img_size=112`` ...).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any, Callable

from vitviz.model.preprocess import Preprocess
from vitviz.model.spec import ModelSpec, imagenet_preprocess, inception_preprocess
from vitviz.model.vit import ViT

# name -> (embed_dim, depth, num_heads)  (ViT paper Table 1, plus DeiT's tiny and small)
SIZES: dict[str, tuple[int, int, int]] = {
    "tiny": (192, 12, 3),
    "small": (384, 12, 6),
    "base": (768, 12, 12),
    "large": (1024, 24, 16),
    "huge": (1280, 32, 16),
}


@dataclass(frozen=True)
class Variant:
    name: str
    kwargs: dict[str, Any]
    preprocess: Callable[[int], Preprocess]
    description: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


_REGISTRY: dict[str, Variant] = {}


def register(variant: Variant) -> Variant:
    if variant.name in _REGISTRY:
        raise ValueError(f"model {variant.name!r} is already registered")
    _REGISTRY[variant.name] = variant
    return variant


def _populate() -> None:
    for size, (dim, depth, heads) in SIZES.items():
        for patch in (32, 16, 14):
            for res in (224, 384):
                if res % patch:  # 384 is not a multiple of 14: patch 14 gets 378 below instead
                    continue
                register(Variant(
                    name=f"vit_{size}_patch{patch}_{res}",
                    kwargs=dict(img_size=res, patch_size=patch, embed_dim=dim, depth=depth, num_heads=heads),
                    preprocess=(lambda r: inception_preprocess(r, crop_pct=0.875 if r == 224 else 1.0)),
                    description=f"ViT-{size[0].upper()}/{patch} at {res} px ({dim}/{depth}/{heads})",
                ))
        # patch 14 at 378 (27x27, the multiple of 14 nearest 384) and 518 (DINOv2's 37x37)
        for res in (378, 518):
            register(Variant(
                name=f"vit_{size}_patch14_{res}",
                kwargs=dict(img_size=res, patch_size=14, embed_dim=dim, depth=depth, num_heads=heads),
                preprocess=(lambda r: inception_preprocess(r, crop_pct=1.0)),
                description=f"ViT-{size[0].upper()}/14 at {res} px ({dim}/{depth}/{heads})",
            ))
    for size in ("tiny", "small", "base"):
        dim, depth, heads = SIZES[size]
        for distilled in (False, True):
            tag = "_distilled" if distilled else ""
            register(Variant(
                name=f"deit_{size}{tag}_patch16_224",
                kwargs=dict(img_size=224, patch_size=16, embed_dim=dim, depth=depth, num_heads=heads,
                            distilled=distilled),
                preprocess=(lambda r: imagenet_preprocess(r, crop_pct=0.875)),
                description=f"DeiT-{size[0].upper()}/16{' distilled' if distilled else ''} ({dim}/{depth}/{heads})",
            ))


_populate()


def list_models(pattern: str | None = None) -> list[str]:
    """Registered model names, sorted; ``pattern`` is a shell-style wildcard such as ``"vit_base*"``."""
    names = sorted(_REGISTRY)
    return [n for n in names if pattern is None or fnmatch.fnmatch(n, pattern)]


def get_variant(name: str) -> Variant:
    try:
        return _REGISTRY[name]
    except KeyError:
        close = [n for n in _REGISTRY if name.split("_")[0] in n][:8]
        raise ValueError(f"unknown model {name!r}; e.g. {close or list_models()[:8]} (see list_models())") from None


def create_model(name: str, **overrides: Any) -> ViT:
    """Build the registered variant ``name`` with random weights; ``overrides`` replace constructor arguments.

    The returned model carries ``model.spec`` (preprocessing follows the variant's family, at the input size).
    """
    v = get_variant(name)
    kwargs = {**v.kwargs, **overrides}
    model = ViT(**kwargs)
    size = model.config.img_size
    pre = v.preprocess(size[0]) if size[0] == size[1] else Preprocess(
        resize=size, crop=size, interpolation=v.preprocess(size[0]).interpolation,
        mean=v.preprocess(size[0]).mean, std=v.preprocess(size[0]).std)
    model.spec = ModelSpec(config=model.config, preprocess=pre, labels=None, source_format="registry",
                           source_path=None, name=name)
    return model
