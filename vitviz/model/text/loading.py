"""``open_text_tower(source)``: the text tower of what the user opened (a path, a model name or reference), and
``text_tower_reason(source)``: why there is none, without reading weights or downloading (for greying out the prompt
box). No Qt.

What the sources hold is described in :mod:`.opening`; Hub models are fetched by :mod:`.fetching` when a text tower
is first asked for (``vitviz models`` says which curated models have one). Only the text tower's tensors are read
(:mod:`.weights`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vitviz.model.text.opening import TextSource, TextTowerError, locate

NO_TEXT = {"demo": "the bundled demo model classifies shapes; it has no text tower",
           "random": "random weights of an image architecture; no text tower",
           "pretrained": "torchvision's ImageNet classifier; it has no text tower"}


def _ref(source: str | os.PathLike[str]) -> str:
    """The model reference of ``source`` (:func:`vitviz.model.sources.refs.parse_model_ref`), as a
    :class:`TextTowerError`."""
    from vitviz.model.sources.name_errors import ModelNameError
    from vitviz.model.sources.refs import parse_model_ref

    try:
        return parse_model_ref(source)
    except ModelNameError as e:
        raise TextTowerError(str(e).splitlines()[0]) from None


def text_tower_reason(source: str | os.PathLike[str]) -> str | None:
    """Why ``source`` has no text tower (one line: the source, then the cause), or None when it has one or may have
    one (a Hub model not downloaded yet: :func:`open_text_tower` then fetches it and says). Reads names and JSON
    only (a safetensors header; a torch file's names through a memory map): no weights, no network."""
    try:
        ref = _ref(source)
    except TextTowerError as e:
        return str(e)
    kind, _, value = ref.partition(":")
    if ref == "demo" or kind in NO_TEXT:
        return f"{value or ref}: {NO_TEXT[kind if kind in NO_TEXT else 'demo']}"
    if kind == "hub":
        from vitviz.model.text.fetching import hub_reason

        return hub_reason(value)
    try:
        text_layout(locate(value))
    except (TextTowerError, ValueError) as e:
        return str(e).splitlines()[0]
    return None


def open_text_tower(source: str | os.PathLike[str], *, device: str = "cpu", progress: Any = None,
                    show_bar: bool = True):
    """The text tower of ``source``: a folder or checkpoint file, a model name (``clip-b16``, ``timm/...``,
    ``openai/clip-vit-base-patch16``) or a model reference (``file:...``, ``hub:...``), as the image tower was opened.

    Args:
        device: where the tower runs.
        progress, show_bar: for a Hub download (as :func:`vitviz.model.sources.hub.fetch`).

    Returns:
        A :class:`~vitviz.model.text.tower.TextTower`.

    Raises:
        TextTowerError: no text tower (why), a missing tokenizer file, unreadable or unsupported weights (one line,
            the source first); PretrainedError / DownloadCancelled: a Hub download that failed or was cancelled.
    """
    ref = _ref(source)
    kind, _, value = ref.partition(":")
    if ref == "demo" or kind in NO_TEXT:
        raise TextTowerError(f"{value or ref}: {NO_TEXT[kind if kind in NO_TEXT else 'demo']}")
    if kind == "hub":
        from vitviz.model.text.fetching import fetch_text

        src = fetch_text(value, progress=progress, show_bar=show_bar)
    else:
        src = locate(value)
    return build(src).to(device)


def text_layout(src: TextSource) -> str:
    """The text layout of ``src``'s weights from their tensor names (a safetensors header; no weights read).

    Raises:
        TextTowerError: no text tower among them, or one that does not match the folder's config, or a bare file's
            SigLIP tower (which needs the tokenizer and config beside it); CheckpointError: an unreadable file.
    """
    from vitviz.model.text.layouts import layout
    from vitviz.model.text.weights import tensor_names

    names = tensor_names(src.weights)
    found = layout(names)
    if src.kind != "file":
        if found is None or (src.kind == "hf") != found.startswith("hf-"):
            raise TextTowerError(f"{src.origin}: no text tower in {src.weights.name} (its config describes one; "
                                 "the weights hold image tower tensors only)")
        return found
    if found is None:
        raise TextTowerError(f"{src.origin}: no text tower in this checkpoint (image tower weights only)")
    if found == "hf-siglip" or (found == "open_clip" and any(k.endswith("logit_bias") for k in names)):
        raise TextTowerError(f"{src.origin}: a SigLIP text tower needs its tokenizer and config: open the folder "
                             "that holds it with config.json / open_clip_config.json and the tokenizer file")
    return found


def build(src: TextSource):
    """Read the text tower's tensors from ``src`` and build the tower and its tokenizer.

    Raises:
        TextTowerError: as :func:`open_text_tower`.
    """
    from vitviz.model.checkpoints.common import CheckpointError, RawCheckpoint
    from vitviz.model.checkpoints.open_clip import quick_gelu
    from vitviz.model.text.cleaning import TokenizerError
    from vitviz.model.text.encoder import TextEncoder
    from vitviz.model.text.layouts import LayoutError, convert, wanted
    from vitviz.model.text.tower import TextTower
    from vitviz.model.text.weights import read_tensors

    try:
        found = text_layout(src)
        tensors = read_tensors(src.weights, wanted(found))
        gelu = False
        if found == "open_clip":
            gelu = quick_gelu(RawCheckpoint(tensors, src.origin, "text", hf_config=src.open_clip_config))
        converted = convert(tensors, found, src.settings, gelu)
        encoder = TextEncoder(converted.config)
        encoder.load_state_dict(converted.state, strict=True)
        tokenizer = _tokenizer(src, converted.config.context_length)
        _check_ids(tokenizer, converted.config.vocab_size)
    except CheckpointError as e:
        raise TextTowerError(str(e).splitlines()[0]) from None
    except (LayoutError, TokenizerError) as e:  # (a tokenizer file's problem names that file)
        msg = str(e).splitlines()[0]
        raise TextTowerError(msg if msg.startswith((src.origin, os.sep)) else f"{src.origin}: {msg}") from None
    except RuntimeError as e:  # load_state_dict: missing / unexpected keys or shapes
        raise TextTowerError(f"{src.origin}: the text tower's weights do not fit together "
                             f"({str(e).splitlines()[0]} ...)") from None
    family = src.family_hint or converted.family
    return TextTower(encoder, tokenizer, family=family, logit_scale=converted.scale, logit_bias=converted.bias,
                     name=src.origin)


def _check_ids(tokenizer, vocab_size: int) -> None:
    """The tokenizer's ids within the text tower's embedding (a vocabulary of another model reads other rows, or
    fails in the middle of a prompt)."""
    from vitviz.model.text.cleaning import TokenizerError

    low, high = tokenizer.id_range()
    where = getattr(tokenizer, "path", None) or getattr(tokenizer, "origin", "the tokenizer")
    if low < 0:
        raise TokenizerError(f"{where}: the tokenizer has a negative token id ({low})")
    if high >= vocab_size:
        raise TokenizerError(f"{where}: the tokenizer's ids reach {high}, beyond the text tower's {vocab_size} token "
                             "embeddings (a tokenizer of another model?)")


def _tokenizer(src: TextSource, context_length: int):
    from vitviz.model.text.bpe import BpeTokenizer, fast_vocab, hf_vocab, openai_vocab
    from vitviz.model.text.layouts import OC_WHERE, setting
    from vitviz.model.text.pieces import PieceTokenizer

    kind, where = src.tokenizer
    text_cfg = (src.settings or {}).get("text_cfg") or {} if src.kind == "open_clip" else {}
    ctx = setting(text_cfg, "context_length", None, int, OC_WHERE) or context_length
    if ctx < 2:
        raise TextTowerError(f"{src.origin}: its config says {ctx} text tokens (at least 2: start or text, and end)")
    if ctx > context_length:
        raise TextTowerError(f"{src.origin}: its config says {ctx} text tokens, but the position embedding has "
                             f"{context_length}")
    if kind == "pieces":
        assert where is not None
        return PieceTokenizer(where, clean_mode=src.clean, context_length=ctx, settings=src.tokenizer_settings)
    if where is None:
        return BpeTokenizer(*openai_vocab(), context_length=ctx, clean_mode=src.clean, origin=src.origin)
    folder = Path(where)
    if all((folder / n).is_file() for n in ("vocab.json", "merges.txt")):
        merges, vocab = hf_vocab(folder / "vocab.json", folder / "merges.txt")
    else:
        merges, vocab = fast_vocab(folder / "tokenizer.json")
    s = src.tokenizer_settings
    specials = (str(s.get("bos_token") or "<|startoftext|>"), str(s.get("eos_token") or "<|endoftext|>"))
    vocab_file = folder / ("vocab.json" if (folder / "vocab.json").is_file() else "tokenizer.json")
    return BpeTokenizer(merges, vocab, specials=specials, context_length=ctx, clean_mode=src.clean,
                        origin=str(vocab_file))
