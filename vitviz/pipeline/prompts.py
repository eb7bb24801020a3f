"""Text prompts on a pipeline: the text tower opened from the image tower's source, and a pipeline over the zero-shot
classifier whose classes are the prompts (:func:`vitviz.model.zero_shot.with_prompts`).

* :func:`prompt_pipeline`: ``"a cat; a dog"`` (or a list) -> a :class:`~vitviz.pipeline.Pipeline` on the same
  device and precision, the tower's weights shared: its results' classes are the prompts, their probabilities
  the zero-shot ones (softmax for CLIP, sigmoid for SigLIP), every gradient view explains a prompt's score; for SigLIP
  the neutral prompt ("a photo of a") is carried along so LeGrad's official correction can be applied;
* :func:`split_prompts`: the one reading of a typed prompt list.

No Qt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vitviz.capture.targets import SimilarityTarget, TargetError
from vitviz.model.zero_shot import with_prompts
from vitviz.pipeline.runner import Pipeline

__all__ = ["NEUTRAL_PROMPT", "prompt_pipeline", "split_prompts"]

NEUTRAL_PROMPT = "a photo of a"  # LeGrad's official neutral prompt for SigLIP's correction


def split_prompts(text: str | Sequence[str]) -> list[str]:
    """Prompts from ``"a cat; a dog"`` or a list: each stripped; empty ones refused.

    Raises:
        TargetError: no prompt, an empty one or one that is not text (None, a number: naming its place).
    """
    if text is None or isinstance(text, bytes) or not hasattr(text, "__iter__"):
        raise TargetError(f"the prompts must be text or a list of texts, got {type(text).__name__}")
    if not isinstance(text, str):
        text = list(text)
        wrong = [(i + 1, p) for i, p in enumerate(text) if not isinstance(p, str)]
        if wrong:  # (None, a number ...: never their repr as a prompt)
            raise TargetError(f"prompt {wrong[0][0]} of {len(text)} is {type(wrong[0][1]).__name__}, not text")
    parts = list(text) if not isinstance(text, str) else str(text).split(";")
    out = [p.strip() for p in parts]
    if not any(out):
        raise TargetError("the prompt is empty: type a phrase (several separated by ';')")
    empty = [i + 1 for i, p in enumerate(out) if not p]
    if empty:
        raise TargetError(f"prompt {empty[0]} of {len(out)} is empty (two ';' in a row, or one at the end)")
    return out


def prompt_pipeline(pipeline: Any, prompts: str | Sequence[str], *, templates: Any = None, tower: Any = None,
                    progress: Any = None) -> Any:
    """A pipeline over ``prompts`` as classes (the tower's weights shared with ``pipeline``).

    Args:
        pipeline: the image tower's :class:`~vitviz.pipeline.Pipeline` (a CLIP or SigLIP tower).
        prompts: ``"a cat; a dog"`` or a list.
        templates: as :meth:`vitviz.model.text.TextTower.encode` (None: as typed; ``"photo"``, ``"imagenet"``).
        tower: the text tower (default: :meth:`Pipeline.text_tower`, opened from the image tower's source).

    Raises:
        TargetError: empty prompts; TextTowerError: no text tower (why); ValueError: a text tower of another
            model (the widths differ).
    """
    names = split_prompts(prompts)
    tower = tower if tower is not None else pipeline.text_tower(progress=progress)
    text = tower.encode(names, templates)
    model = with_prompts(pipeline.model, text, names, scale=tower.logit_scale, bias=tower.logit_bias,
                         probability="sigmoid" if tower.family == "siglip" else "softmax")
    out = Pipeline(model, device=pipeline.device, precision=pipeline.precision)
    out.source = pipeline.source
    out.note = pipeline.note
    out.attach_text_tower(tower)
    if tower.family == "siglip":
        neutral = tower.encode([NEUTRAL_PROMPT])[0]
        out.legrad_neutral = SimilarityTarget(neutral, f"neutral prompt {NEUTRAL_PROMPT!r}")
    return out
