"""The text tower of a Hugging Face Hub model, downloaded when it is first asked for (never with the image tower).

The files come from the repository the image tower came from (for a curated timm upload that holds the image tower
only, the repository its ``text_repo`` names: the same checkpoint's open_clip release, e.g. ``siglip2-b16`` ->
``timm/ViT-B-16-SigLIP2``, ``pe-core-b16`` -> ``timm/PE-Core-B-16``), into the Hub's cache:

1. cached (the snapshot ``refs/main`` points to holds a complete text tower): no network request at all;
2. ``config.json`` of a Transformers ``CLIPModel`` / ``SiglipModel`` / ``Siglip2Model``: its weights (already there
   when the image tower was opened: one file holds both towers) and the tokenizer (``vocab.json`` + ``merges.txt`` or
   ``tokenizer.json``; ``spiece.model`` or ``tokenizer.json``), with ``tokenizer_config.json`` and
   ``special_tokens_map.json`` when present;
3. otherwise ``open_clip_config.json`` (timm's CLIP uploads carry open_clip's files beside timm's, e.g.
   ``timm/vit_base_patch16_clip_224.openai``) and open_clip's weights (``open_clip_model.safetensors``, else
   ``open_clip_pytorch_model.bin``); the tokenizer its ``text_cfg.hf_tokenizer_name`` names, from that repository,
   or CLIP's BPE (shipped with vitviz). open_clip's weights without its config (open_clip's registry holds the
   config of its own uploads) are read as an OpenAI / open_clip state dict (:mod:`.opening`: heads = width / 64,
   QuickGELU for OpenAI's weights, named by the repository);
4. neither: the repository has no text tower (timm's image-only uploads), said in one line.

Downloads go through :func:`vitviz.model.sources.hub.download_first` (progress, cancel, offline mode, no partial
files, as the image tower's). No Qt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitviz._util.files import read_json
from vitviz.model.sources import catalog
from vitviz.model.text.opening import (
    CLIP_VOCAB,
    FAST_TOKENIZER,
    HF_WEIGHTS,
    OPEN_CLIP_WEIGHTS,
    SIGLIP_TYPES,
    SPIECE,
    TEXT_MODEL_TYPES,
    TextSource,
    TextTowerError,
    folder_reason,
    locate,
)

SETTINGS_FILES = ("tokenizer_config.json", "special_tokens_map.json")


def snapshot(repo: str) -> Path | None:
    """The cached snapshot folder ``refs/main`` of ``repo`` points to, or None."""
    folder = catalog.hub_repo_folder(repo)
    try:
        commit = (folder / "refs" / "main").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    snap = folder / "snapshots" / commit
    return snap if commit and "/" not in commit and not commit.startswith(".") and snap.is_dir() else None


def _json(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    obj = read_json(path, TextTowerError)
    return obj if isinstance(obj, dict) else {}


def _tokenizer_repo(oc: dict[str, Any]) -> str | None:
    model_cfg = oc.get("model_cfg")
    text_cfg = model_cfg.get("text_cfg") if isinstance(model_cfg, dict) else None
    name = text_cfg.get("hf_tokenizer_name") if isinstance(text_cfg, dict) else None  # (else: refused by locate)
    if not isinstance(name, str) or not name:
        return None
    return name[len("hf-hub:"):] if name.startswith("hf-hub:") else name


def _named(src: TextSource, repo: str) -> TextSource:
    """``src`` with the repository as its name in messages (and for open_clip's QuickGELU rule, which reads it)."""
    src.origin = repo
    return src


def cached_text(repo: str) -> TextSource | None:
    """The text tower of ``repo`` when the cache holds all of it, else None (no network)."""
    snap = snapshot(repo)
    if snap is None:
        return None
    tok_folder = None
    tok_repo = _tokenizer_repo(_json(snap / "open_clip_config.json")) if (snap / "open_clip_config.json").is_file() \
        else None
    if tok_repo is not None and tok_repo != repo:
        tok_folder = snapshot(tok_repo)
        if tok_folder is None:
            return None
    try:
        return _named(locate(snap, tokenizer_folder=tok_folder), repo)
    except TextTowerError:
        pass
    weights = next((snap / n for n in OPEN_CLIP_WEIGHTS if (snap / n).is_file()), None)
    return _named(locate(weights), repo) if weights is not None else None  # (open_clip's file without its config)


def fetch_text(repo: str, *, progress: Any = None, show_bar: bool = True) -> TextSource:
    """The text tower of Hub repository ``repo``: from the cache, else downloaded (see the module docstring).

    Raises:
        TextTowerError: the repository has no text tower, or lacks its weights or tokenizer (one line naming it);
        PretrainedError, DownloadCancelled: offline, unreachable, or cancelled (as the image tower's download).
    """
    from vitviz.model.sources.hub import download_first
    from vitviz.model.sources.torch_hub import PretrainedError

    m = catalog.HUB_BY_REPO.get(repo)
    if m is not None and not m.text:  # a curated image-only model: said without a request
        raise TextTowerError(hub_reason(repo) or f"{repo}: no text tower")
    if m is not None and m.text_repo:  # timm's image-only upload: the text tower of the same checkpoint's release
        return fetch_text(m.text_repo, progress=progress, show_bar=show_bar)
    cached = cached_text(repo)
    if cached is not None:
        return cached
    if catalog.hf_offline():
        reason = hub_reason(repo)
        raise PretrainedError(reason or f"{repo}: its text tower is not downloaded yet, and offline mode is on "
                                        f"(HF_HUB_OFFLINE=1); cache: {catalog.hub_repo_folder(repo)}")

    def get(names: tuple[str, ...], *, probe: bool = False, where: str = repo) -> Path | None:
        return download_first(where, names, progress=progress, show_bar=show_bar, probe=probe)

    config_path = get(("config.json",), probe=True)
    config = _json(config_path)
    if config.get("model_type") in TEXT_MODEL_TYPES:
        if get(HF_WEIGHTS) is None:
            raise TextTowerError(f"{repo}: the repository has none of {', '.join(HF_WEIGHTS)}")
        if config["model_type"] in SIGLIP_TYPES:
            get((SPIECE, FAST_TOKENIZER))
        elif not all(get((n,)) for n in CLIP_VOCAB):
            get((FAST_TOKENIZER,))
        for n in SETTINGS_FILES:
            get((n,))
        assert config_path is not None
        return _named(locate(config_path.parent), repo)
    oc_path = get(("open_clip_config.json",))
    weights = get(OPEN_CLIP_WEIGHTS)
    if oc_path is None and weights is not None:  # open_clip's file without its config (open_clip's own registry
        return _named(locate(weights), repo)  # has the config): OpenAI's rules and CLIP's BPE (:mod:`.opening`)
    if oc_path is None:
        why = folder_reason(Path(repo), config or None, config.get("model_type")) if config else \
            "the repository has neither config.json nor open_clip_config.json: no text tower"
        raise TextTowerError(f"{repo}: {why}")
    if weights is None:
        raise TextTowerError(f"{repo}: the repository has none of {', '.join(OPEN_CLIP_WEIGHTS)}")
    tok_repo = _tokenizer_repo(_json(oc_path))
    tok_folder = None
    if tok_repo is not None:
        tok_file = get((FAST_TOKENIZER, SPIECE), where=tok_repo)
        if tok_file is None:
            raise TextTowerError(f"{repo}: the tokenizer its open_clip_config.json names ({tok_repo}) has neither "
                                 f"{FAST_TOKENIZER} nor {SPIECE}")
        for n in SETTINGS_FILES:
            get((n,), where=tok_repo)
        tok_folder = tok_file.parent
    return _named(locate(oc_path.parent, tokenizer_folder=tok_folder), repo)


def hub_reason(repo: str) -> str | None:
    """Why ``repo`` has no text tower, from the curated list or the cache only (no network); None when it has one
    or may have one (not downloaded yet)."""
    m = catalog.HUB_BY_REPO.get(repo)
    if m is not None:
        return None if m.text else f"{m.title} ({repo}): {m.text_note or 'an image tower only; no text tower'}"
    if cached_text(repo) is not None:
        return None
    snap = snapshot(repo)
    if snap is None or any((snap / n).is_file() for n in ("open_clip_config.json", *OPEN_CLIP_WEIGHTS)):
        return None  # not downloaded yet, or its text files are not yet: open_text_tower fetches and says
    config = _json(snap / "config.json") if (snap / "config.json").is_file() else {}
    arch = str(config.get("architecture") or "")
    if config.get("model_type") in TEXT_MODEL_TYPES or "clip" in arch or "siglip" in arch:
        return None  # its tokenizer or open_clip files may still be on the Hub
    if not config:
        return None
    return f"{repo}: {folder_reason(snap, config, config.get('model_type'))}"
