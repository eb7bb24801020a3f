"""vitviz.model.text: the text towers of CLIP and SigLIP, their tokenizers and their image-text score. No Qt.

``open_text_tower(source)`` opens the text tower from the source of the image tower (a folder, a file, a Hub model
downloaded when asked); ``text_tower_reason(source)`` says why a source has none (for greying out a prompt box).
A :class:`TextTower` turns prompts into unit embeddings (``encode(prompts, templates)``) and scores them against
image embeddings with the family's rule (``score``: CLIP ``logit_scale * cos``, SigLIP ``logit_scale * cos +
logit_bias``); ``targets`` gives one :class:`PromptTarget` (vector, name, scale, bias) per prompt.

Tokenizers (:mod:`.bpe` for CLIP, :mod:`.pieces` for SigLIP, whose docstrings say which library and why) need the
optional extra ``vitviz[text]`` (ftfy, regex, sentencepiece, tokenizers), imported on first use. Names are imported
on first use (no torch at ``import vitviz.model.text``).
"""

from __future__ import annotations

from vitviz._util.lazy import lazy_names

_LAZY = {
    "TextTower": "tower", "PromptTarget": "tower", "PromptError": "tower", "prompt_targets": "tower",
    "check_prompts": "tower",
    "TextTowerError": "opening", "open_text_tower": "loading", "text_tower_reason": "loading",
    "TokenizerError": "cleaning",
    "IMAGENET_TEMPLATES": "templates", "PHOTO_TEMPLATE": "templates", "TEMPLATE_SETS": "templates",
    "resolve_templates": "templates",
    "TextEncoder": "encoder", "TextConfig": "encoder",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_names("vitviz.model.text", _LAZY, globals())
