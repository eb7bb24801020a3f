"""Finding and opening a model's text tower where its image tower came from: a folder, a file or a Hub model. No Qt.

================================  ==================================================  ===============================
source                            weights                                             tokenizer
================================  ==================================================  ===============================
HF ``CLIPModel`` folder           ``model.safetensors`` / ``pytorch_model.bin``       ``vocab.json`` + ``merges.txt``,
(``config.json``, ``clip``)       (``text_model.*``, ``text_projection``)             else ``tokenizer.json``
HF ``SiglipModel`` /              likewise (``text_model.*`` with ``head``)            ``spiece.model``, else
``Siglip2Model`` folder                                                               ``tokenizer.json`` (SigLIP 2:
(``config.json``, ``siglip``,                                                         Gemma's, 256k pieces)
``siglip2``)
open_clip folder                  ``open_clip_model.safetensors`` /                   ``text_cfg.hf_tokenizer_name``:
(``open_clip_config.json``)       ``open_clip_pytorch_model.bin``                     the folder's ``tokenizer.json``
                                                                                      / ``spiece.model``; else CLIP's
                                                                                      BPE (shipped with vitviz)
an open_clip / OpenAI state dict  the file (OpenAI's rules: heads = width / 64)       CLIP's BPE (shipped)
``hub:OWNER/NAME``                downloaded when asked (:mod:`.fetching`)            likewise
================================  ==================================================  ===============================

A timm folder whose ``config.json`` names an architecture and that has no ``open_clip_config.json`` (timm's
image-only uploads) has no text tower; nor do ``CLIPVisionModel`` / ``SiglipVisionModel`` folders, torchvision's
weights, the demo model and random weights. :func:`text_tower_reason` says so without reading any weights;
:func:`open_text_tower` raises :class:`TextTowerError` with the same one line (the folder or file first, then the
cause), or names the missing tokenizer file.

The files are checked before they are read: a name that is not a regular file (a folder, a device such as a link to
``/dev/zero``, a pipe) or a settings file above :data:`MAX_SETTINGS_BYTES` is refused naming it, and the settings that
must be JSON objects (``text_config``, ``model_cfg``, ``text_cfg``) are checked to be.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vitviz._util.files import read_json
from vitviz.model.text.file_checks import MAX_SETTINGS_BYTES, regular_file

HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
OPEN_CLIP_WEIGHTS = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")
CLIP_VOCAB = ("vocab.json", "merges.txt")
FAST_TOKENIZER = "tokenizer.json"
SPIECE = "spiece.model"
TEXT_MODEL_TYPES = {"clip": "hf-clip", "siglip": "hf-siglip", "siglip2": "hf-siglip"}
SIGLIP_TYPES = ("siglip", "siglip2")


class TextTowerError(ValueError):
    """No text tower can be opened from a source; the message is one line: the source, then the cause."""


@dataclass
class TextSource:
    """Where a text tower's parts are (no weights read yet).

    Attributes:
        origin: what messages name (the folder, or the file).
        weights: the checkpoint file holding the text tower.
        kind: ``"hf"`` (a Transformers folder), ``"open_clip"`` (a folder with ``open_clip_config.json``) or
            ``"file"`` (a bare state dict).
        settings: HF ``text_config`` or open_clip ``model_cfg`` (None: none).
        open_clip_config: the whole ``open_clip_config.json`` (for the activation rule), else None.
        tokenizer: ``("bpe", None)`` (CLIP's shipped BPE), ``("bpe", folder)`` (vocab.json + merges.txt or
            tokenizer.json in ``folder``), ``("pieces", file)`` (spiece.model or tokenizer.json).
        clean: the tokenizer's text cleaning (:mod:`.cleaning`).
        tokenizer_settings: ``tokenizer_config.json`` / ``special_tokens_map.json``.
        family_hint: ``"siglip"`` for a Transformers SigLIP folder, else None (the tensors decide).
    """

    origin: str
    weights: Path
    kind: str
    settings: dict[str, Any] | None = None
    open_clip_config: dict[str, Any] | None = None
    tokenizer: tuple[str, Path | None] = ("bpe", None)
    clean: str = "lower"
    tokenizer_settings: dict[str, Any] = field(default_factory=dict)
    family_hint: str | None = None


def _json_object(path: Path) -> dict[str, Any]:
    regular_file(path, MAX_SETTINGS_BYTES, error=TextTowerError)
    obj = read_json(path, TextTowerError)
    if not isinstance(obj, dict):
        raise TextTowerError(f"{path}: not a JSON object of settings")
    return obj


def settings_object(value: Any, path: Path, key: str) -> dict[str, Any] | None:
    """``value`` (the entry ``key`` of the settings file ``path``) as a dict, None when absent or null.

    Raises:
        TextTowerError: it is something else (a list, a string, a number).
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TextTowerError(f"{path}: {key} is a {type(value).__name__}, not a JSON object of settings")
    return value


def open_clip_settings(oc: dict[str, Any], path: Path) -> dict[str, Any] | None:
    """``open_clip_config.json``'s ``model_cfg``, its ``text_cfg`` and the latter's ``*_kwargs`` checked to be
    objects (each refused naming ``path`` and the key otherwise)."""
    model_cfg = settings_object(oc.get("model_cfg"), path, "model_cfg")
    text_cfg = settings_object((model_cfg or {}).get("text_cfg"), path, "model_cfg.text_cfg") or {}
    for key in ("tokenizer_kwargs", "norm_kwargs", "act_kwargs"):
        settings_object(text_cfg.get(key), path, f"model_cfg.text_cfg.{key}")
    return model_cfg or None


def _first_file(folder: Path, names: tuple[str, ...]) -> Path | None:
    return next((folder / n for n in names if regular_file(folder / n, error=TextTowerError)), None)


def _weights(folder: Path, names: tuple[str, ...], what: str) -> Path:
    w = _first_file(folder, names)
    if w is None:
        raise TextTowerError(f"{folder}: {what} has no weights file ({' or '.join(names)})")
    return w


def _where(folder: Path | None, origin: str) -> str:
    """`` in FOLDER`` when the tokenizer is looked for elsewhere than the source itself, else nothing."""
    return "" if folder is None or str(folder) == origin else f" in {folder}"


def _hf_tokenizer(folder: Path, siglip: bool, origin: str) -> tuple[str, Path | None]:
    if siglip:
        path = _first_file(folder, (SPIECE, FAST_TOKENIZER))
        if path is None:
            raise TextTowerError(f"{origin}: the SigLIP tokenizer is missing ({SPIECE} or "
                                 f"{FAST_TOKENIZER}{_where(folder, origin)})")
        return "pieces", path
    if all(regular_file(folder / n, error=TextTowerError) for n in CLIP_VOCAB) or \
            regular_file(folder / FAST_TOKENIZER, error=TextTowerError):
        return "bpe", folder
    raise TextTowerError(f"{origin}: the CLIP tokenizer is missing (vocab.json and merges.txt, or "
                         f"{FAST_TOKENIZER}{_where(folder, origin)})")


def open_clip_tokenizer(config: dict[str, Any], folder: Path | None,
                        origin: str) -> tuple[tuple[str, Path | None], str]:
    """The tokenizer ``open_clip_config.json`` names and its cleaning: ``text_cfg.hf_tokenizer_name`` -> the files in
    ``folder`` (open_clip's ``local-dir`` rule; the fetched tokenizer folder for Hub models), cleaning
    ``tokenizer_kwargs.clean`` (default ``"whitespace"``, as open_clip's ``HFTokenizer``); else CLIP's BPE, cleaning
    default ``"lower"``."""
    text_cfg = (config.get("model_cfg") or {}).get("text_cfg") or {}  # (objects: checked by open_clip_settings)
    kwargs = text_cfg.get("tokenizer_kwargs") or {}
    name = text_cfg.get("hf_tokenizer_name")
    if text_cfg.get("tokenizer_mode"):
        raise TextTowerError(f"{origin}: open_clip tokenizer mode {text_cfg['tokenizer_mode']!r} is not supported")
    if not name:
        return ("bpe", None), str(kwargs.get("clean", "lower"))
    path = _first_file(folder, (FAST_TOKENIZER, SPIECE)) if folder is not None else None
    if path is None:
        raise TextTowerError(f"{origin}: the tokenizer that open_clip_config.json names ({name}) is missing "
                             f"({FAST_TOKENIZER} or {SPIECE}{_where(folder, origin)})")
    return ("pieces", path), str(kwargs.get("clean", "whitespace"))


def _settings(folder: Path) -> dict[str, Any]:
    """The tokenizer settings of ``folder`` (:func:`vitviz.model.text.pieces.read_settings`), as a
    :class:`TextTowerError`."""
    from vitviz.model.text.cleaning import TokenizerError
    from vitviz.model.text.pieces import read_settings

    try:
        return read_settings(folder)
    except TokenizerError as e:
        raise TextTowerError(str(e)) from None


def locate(path: str | os.PathLike[str], *, tokenizer_folder: Path | None = None) -> TextSource:
    """The text tower's parts in a folder or beside a file (see the module docstring); reads JSON and file names
    only. ``tokenizer_folder``: where open_clip's named tokenizer is, when not in the folder (Hub downloads).

    Raises:
        TextTowerError: no text tower there (the reason), or a missing tokenizer / weights file.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise TextTowerError(f"{p}: no such file or directory")
    folder, chosen = (p, None) if p.is_dir() else (p.parent, p)
    origin = str(p)
    config = _json_object(folder / "config.json") if regular_file(folder / "config.json", error=TextTowerError) \
        else None
    oc_file = folder / "open_clip_config.json"
    model_type = config.get("model_type") if config else None
    if config is not None and model_type in TEXT_MODEL_TYPES and (chosen is None or chosen.name in HF_WEIGHTS):
        siglip = model_type in SIGLIP_TYPES
        weights = chosen or _weights(folder, HF_WEIGHTS, f"a Hugging Face {model_type!r} model")
        text_config = settings_object(config.get("text_config"), folder / "config.json", "text_config")
        return TextSource(origin, weights, "hf", settings=text_config or {},
                          tokenizer=_hf_tokenizer(folder, siglip, origin), clean="siglip" if siglip else "lower",
                          tokenizer_settings=_settings(folder), family_hint="siglip" if siglip else None)
    if regular_file(oc_file, error=TextTowerError) and (chosen is None or chosen.name in OPEN_CLIP_WEIGHTS):
        oc = _json_object(oc_file)
        model_cfg = open_clip_settings(oc, oc_file)
        weights = chosen or _weights(folder, OPEN_CLIP_WEIGHTS, "an open_clip model")
        tok_folder = tokenizer_folder or folder
        tokenizer, clean = open_clip_tokenizer(oc, tok_folder, origin)
        return TextSource(origin, weights, "open_clip", settings=model_cfg, open_clip_config=oc,
                          tokenizer=tokenizer, clean=clean,
                          tokenizer_settings=_settings(tok_folder) if tokenizer[0] == "pieces" else {})
    if chosen is None:  # a folder without a text-tower config
        reason = folder_reason(folder, config, model_type)
        raise TextTowerError(f"{folder}: {reason}")
    return TextSource(origin, chosen, "file")


def folder_reason(folder: Path, config: dict[str, Any] | None, model_type: Any) -> str:
    """Why a folder without a CLIP / SigLIP / open_clip config has no text tower."""
    if config is not None and isinstance(config.get("architecture"), str):
        return (f"a timm image-only checkpoint ({config['architecture']}): it has no text tower (timm keeps the image "
                "tower only; open the open_clip or Hugging Face release of the model for its text tower)")
    if isinstance(model_type, str):
        return f"a Hugging Face {model_type!r} model (an image tower only): it has no text tower"
    files = sorted(q.name for q in folder.iterdir())[:8] if folder.is_dir() else []
    return (f"no text tower: neither a Hugging Face CLIPModel / SiglipModel folder (config.json) nor an open_clip "
            f"folder (open_clip_config.json) (found: {', '.join(files) or 'nothing'})")
