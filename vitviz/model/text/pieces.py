"""SigLIP's SentencePiece tokenizer: 64 tokens, ``padding="max_length"``, the end token ``</s>`` and pads of the
folder's pad token (``</s>`` in every SigLIP release), as the model was trained (big_vision: no attention mask, so the
pads are part of the input).

Which library: the one that *is* the reference for the file the folder carries, imported only when that file is used.

- ``spiece.model`` (Hugging Face ``SiglipModel`` folders, ``google/siglip-*``): ``sentencepiece``, the library
  transformers' ``SiglipTokenizer`` calls; a small wheel with no dependencies.
- ``tokenizer.json`` (open_clip's SigLIP folders, e.g. ``timm/ViT-B-16-SigLIP``, whose ``hf_tokenizer_name`` names a
  fast T5 tokenizer; every SigLIP 2 folder: Gemma's byte-fallback BPE of 256k pieces, ``<eos>`` added by the file's
  post-processor, ``<pad>`` pads): ``tokenizers``, the library behind transformers' fast tokenizers, with its own
  truncation and padding (what ``tokenizer(texts, padding="max_length", truncation=True, max_length=64)`` sets), on
  the side ``tokenizer_config.json``'s ``padding_side`` names (right when it names none).

Both are in the optional extra ``vitviz[text]``. The text is cleaned first, as each reference does, and the two
references differ (checked against both by the tests):

=====================  ===========================================================  ==============================
reference              cleaning                                                     ``"Hot_Dog!"`` becomes
=====================  ===========================================================  ==============================
transformers'          lower-case (``do_lower_case``, default True, from             ``"hotdog"``
``SiglipTokenizer``    ``tokenizer_config.json``), ``string.punctuation`` removed,
                       whitespace runs to one space, stripped (no ftfy, no HTML)
open_clip's            ``ftfy.fix_text``, HTML unescaped twice, then big_vision's    ``"hot dog"``
``HFTokenizer``        ``canonicalize_text``: ``_`` -> space, punctuation removed,
(``clean=              lower-case, whitespace runs to one space (its
"canonicalize"``)      ``tokenizer_kwargs.clean``; ``"whitespace"``, ``"lower"`` too)
=====================  ===========================================================  ==============================

Then ``ids[:63] + [</s>]``, padded to 64. Special-token strings typed in a prompt (``</s>``) are text here, where
transformers would read them as the token: a prompt is a phrase, not token markup. No Qt, no torch at import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitviz._util.files import read_json
from vitviz.model.text.cleaning import TokenizerError, clean, first_line, need
from vitviz.model.text.file_checks import MAX_SETTINGS_BYTES, MAX_TOKENIZER_BYTES, regular_file

CLEAN_MODES = ("siglip", "canonicalize", "whitespace", "lower")


TOKEN_SETTINGS = ("bos_token", "eos_token", "pad_token", "unk_token")
PADDING_SIDES = ("right", "left")


def read_settings(folder: Path) -> dict[str, Any]:
    """``tokenizer_config.json`` over ``special_tokens_map.json`` (both optional): token names as plain strings.

    Raises:
        TokenizerError: a file that is not a regular file of JSON settings, a special token that is not text
            (``{"content": 5}``), ``do_lower_case`` not true or false, ``padding_side`` neither right nor left.
    """
    out: dict[str, Any] = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        path = folder / name
        if not regular_file(path, MAX_SETTINGS_BYTES, error=TokenizerError):
            continue
        data = read_json(path, TokenizerError, "the tokenizer settings")
        if not isinstance(data, dict):
            raise TokenizerError(f"{path}: not a JSON object of tokenizer settings")
        for k, v in data.items():
            v = v.get("content") if isinstance(v, dict) and "content" in v else v
            if k in TOKEN_SETTINGS and v is not None and not isinstance(v, str):
                raise TokenizerError(f"{path}: {k} is {str(v)[:40]!r}, not a token (text)")
            if k == "do_lower_case" and not isinstance(v, bool):
                raise TokenizerError(f"{path}: {k} is {str(v)[:40]!r}, not true or false")
            if k == "padding_side" and v not in PADDING_SIDES:
                raise TokenizerError(f"{path}: padding_side is {str(v)[:40]!r}, not right or left")
            out[k] = v
    return out


class PieceTokenizer:
    """SigLIP's tokenizer over ``spiece.model`` or ``tokenizer.json`` (see the module docstring).

    Args:
        path: the ``spiece.model`` or ``tokenizer.json``.
        clean_mode: ``"siglip"`` (transformers' rule), or open_clip's ``"canonicalize"`` / ``"whitespace"`` /
            ``"lower"``.
        context_length: tokens per prompt (64).
        settings: ``tokenizer_config.json`` / ``special_tokens_map.json`` (:func:`read_settings`): ``eos_token``,
            ``pad_token``, ``do_lower_case``.
    """

    def __init__(self, path: Path, *, clean_mode: str = "siglip", context_length: int = 64,
                 settings: dict[str, Any] | None = None):
        if clean_mode not in CLEAN_MODES:
            raise TokenizerError(f"{path}: unknown text cleaning {clean_mode!r} (known: {', '.join(CLEAN_MODES)})")
        settings = settings or {}
        self.path = Path(path)
        regular_file(self.path, MAX_TOKENIZER_BYTES, "a tokenizer file", error=TokenizerError)
        self.padding_side = str(settings.get("padding_side") or "right")
        self.clean_mode = clean_mode
        self.lower = bool(settings.get("do_lower_case", True))
        self.context_length = int(context_length)
        if clean_mode != "siglip":
            need("ftfy")
        eos, pad = settings.get("eos_token") or "</s>", settings.get("pad_token") or "</s>"
        if self.path.name.endswith(".json"):
            self.backend = "tokenizers"
            self.fast = self._fast(eos, pad)
        else:
            self.backend = "sentencepiece"
            spm = need("sentencepiece")
            try:
                self.sp = spm.SentencePieceProcessor(model_file=str(self.path))
            except Exception as e:  # noqa: BLE001 - sentencepiece raises RuntimeError / OSError for broken files
                raise TokenizerError(f"{self.path}: not a SentencePiece model ({first_line(e)})") from None
            self.eos_id, self.pad_id = self._piece_id(eos), self._piece_id(pad)

    def _piece_id(self, piece: str) -> int:
        i = self.sp.piece_to_id(piece)
        if i == self.sp.unk_id() and piece != self.sp.id_to_piece(i):
            raise TokenizerError(f"{self.path}: the SentencePiece model has no {piece!r} token")
        return int(i)

    def _fast(self, eos: str, pad: str):
        tokenizers = need("tokenizers")
        try:
            tok = tokenizers.Tokenizer.from_file(str(self.path))
        except Exception as e:  # noqa: BLE001 - tokenizers raises its own Exception types
            raise TokenizerError(f"{self.path}: not a tokenizer.json ({first_line(e)})") from None
        pad_id = tok.token_to_id(pad)
        if pad_id is None:
            raise TokenizerError(f"{self.path}: the tokenizer has no pad token {pad!r}")
        self.eos_id, self.pad_id = tok.token_to_id(eos), pad_id
        # (the start / end tokens: tokenizer.json's post-processor, as transformers 5 reads it even where
        # tokenizer_config.json's add_bos_token / add_eos_token say otherwise; tested)
        tok.enable_truncation(max_length=self.context_length)
        tok.enable_padding(length=self.context_length, pad_id=pad_id, pad_token=pad, direction=self.padding_side)
        return tok

    def id_range(self) -> tuple[int, int]:
        """The smallest and largest token id the tokenizer can give (its vocabulary, special tokens included)."""
        if self.backend == "tokenizers":
            ids = self.fast.get_vocab(with_added_tokens=True).values()
            return min(ids, default=0), max(ids, default=0)
        return 0, self.sp.get_piece_size() - 1

    def ids(self, text: str) -> list[int]:
        """The ``context_length`` ids of ``text``: cleaned, encoded, cut keeping ``</s>``, padded."""
        text = clean(text, self.clean_mode, self.lower)
        if self.backend == "tokenizers":
            return list(self.fast.encode(text).ids)
        ids = list(self.sp.encode(text))[:self.context_length - 1] + [self.eos_id]
        pads = [self.pad_id] * (self.context_length - len(ids))
        return pads + ids if self.padding_side == "left" else ids + pads

    def __call__(self, texts: list[str]):
        """``LongTensor [len(texts), context_length]``."""
        import torch

        return torch.tensor([self.ids(t) for t in texts], dtype=torch.long).reshape(len(texts), self.context_length)

