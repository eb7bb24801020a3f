"""``vitviz models``: the named models (the curated Hugging Face Hub models by group, then torchvision's weights),
their download size, whether they are cached, and whether they have a text tower (text prompts: CLIP, SigLIP; what
it adds to the download, fetched only when a prompt asks for it). Imports neither torch nor huggingface_hub."""

from __future__ import annotations

import argparse
from pathlib import Path

from vitviz.cli.commands import summary
from vitviz.cli.shared import Reporter, add_debug
from vitviz.model.sources import catalog


def add_parser(sub) -> None:
    models = sub.add_parser("models", help=summary("models"))
    add_debug(models)


def pretrained_listing() -> list[tuple[str, float, str, Path]]:
    """``(name, size_mb, description, cache path)`` of every named pretrained model (no torch import)."""
    return [(n, row[3], catalog.description(n), catalog.cache_file(n)) for n, row in catalog.TORCHVISION_VITS.items()]


def hub_listing_row(name: str):
    """``(key, HubModel, cache folder, cached)`` when ``name`` is a curated Hub model (key or repository), else None
    (no torch or huggingface_hub import)."""
    repo = name[len("hf-hub:"):] if name.startswith("hf-hub:") else name
    m = catalog.HUB_BY_KEY.get(name) or catalog.HUB_BY_REPO.get(repo)
    if m is None:
        return None
    return m.key, m, catalog.hub_repo_folder(m.repo), catalog.hub_is_cached(m.repo)


def run(args: argparse.Namespace, report: Reporter) -> int:
    """The curated Hugging Face Hub models by group, then torchvision's weights: size, cache state, description."""
    offline = " (offline mode: HF_HUB_OFFLINE is set)" if catalog.hf_offline() else ""
    print(f"Hugging Face Hub models, downloaded once into {catalog.hf_cache_dir()}{offline}:")
    width = max(len(m.key) for m in catalog.HUB_MODELS)
    for group, heading in catalog.HUB_GROUPS.items():
        print(f"  {heading}")
        for m in (m for m in catalog.HUB_MODELS if m.group == group):
            state = "cached" if catalog.hub_is_cached(m.repo) else "not cached"
            print(f"    {m.key:<{width}s} {m.size_mb:7.1f} MB  {state:<10s}  {m.title}: {m.what}")
            print(f"    {'':<{width}s} {m.repo}  ·  text tower: {m.text_tower()}")
    print("  Any other timm or Hugging Face id opens too: 'vitviz --model timm/MODEL.TAG', 'vitviz --model "
          "facebook/dinov2-small'.")
    rows = pretrained_listing()
    print("\ntorchvision ImageNet weights:")
    width = max(len(n) for n, *_ in rows)
    for name, size_mb, description, path in rows:
        state = "cached" if path.is_file() else "not cached"
        print(f"    {name:<{width}s} {size_mb:7.1f} MB  {state:<10s}  {description}")
        print(f"    {'':<{width}s} {path}")
    return 0
