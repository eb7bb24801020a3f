"""Prompt templates, as plain data (no torch): CLIP's "a photo of a {}." and the ImageNet template ensemble.

:data:`IMAGENET_TEMPLATES` are the 80 templates of OpenAI's zero-shot ImageNet notebook (``Prompt_Engineering_for_
ImageNet.ipynb``, also ``open_clip.zero_shot_metadata.OPENAI_IMAGENET_TEMPLATES``; a test checks them against
open_clip's). A prompt is put into a template where ``{}`` stands (by replacement, so braces in the prompt are kept);
an ensemble is averaged as CLIP's zero-shot code does: the mean of the unit-length embeddings of the templated
prompts, renormalised (:meth:`vitviz.model.text.tower.TextTower.encode`).
"""

from __future__ import annotations

from collections.abc import Sequence

PHOTO_TEMPLATE = "a photo of a {}."

IMAGENET_TEMPLATES: tuple[str, ...] = (
    "a bad photo of a {}.", "a photo of many {}.", "a sculpture of a {}.", "a photo of the hard to see {}.",
    "a low resolution photo of the {}.", "a rendering of a {}.", "graffiti of a {}.", "a bad photo of the {}.",
    "a cropped photo of the {}.", "a tattoo of a {}.", "the embroidered {}.", "a photo of a hard to see {}.",
    "a bright photo of a {}.", "a photo of a clean {}.", "a photo of a dirty {}.", "a dark photo of the {}.",
    "a drawing of a {}.", "a photo of my {}.", "the plastic {}.", "a photo of the cool {}.",
    "a close-up photo of a {}.", "a black and white photo of the {}.", "a painting of the {}.",
    "a painting of a {}.", "a pixelated photo of the {}.", "a sculpture of the {}.", "a bright photo of the {}.",
    "a cropped photo of a {}.", "a plastic {}.", "a photo of the dirty {}.", "a jpeg corrupted photo of a {}.",
    "a blurry photo of the {}.", "a photo of the {}.", "a good photo of the {}.", "a rendering of the {}.",
    "a {} in a video game.", "a photo of one {}.", "a doodle of a {}.", "a close-up photo of the {}.",
    "a photo of a {}.", "the origami {}.", "the {} in a video game.", "a sketch of a {}.", "a doodle of the {}.",
    "a origami {}.", "a low resolution photo of a {}.", "the toy {}.", "a rendition of the {}.",
    "a photo of the clean {}.", "a photo of a large {}.", "a rendition of a {}.", "a photo of a nice {}.",
    "a photo of a weird {}.", "a blurry photo of a {}.", "a cartoon {}.", "art of a {}.", "a sketch of the {}.",
    "a embroidered {}.", "a pixelated photo of a {}.", "itap of the {}.", "a jpeg corrupted photo of the {}.",
    "a good photo of a {}.", "a plushie {}.", "a photo of the nice {}.", "a photo of the small {}.",
    "a photo of the weird {}.", "the cartoon {}.", "art of the {}.", "a drawing of the {}.",
    "a photo of the large {}.", "a black and white photo of a {}.", "the plushie {}.", "a dark photo of a {}.",
    "itap of a {}.", "graffiti of the {}.", "a toy {}.", "itap of my {}.", "a photo of a cool {}.",
    "a photo of a small {}.", "a tattoo of the {}.",
)

# the names a caller may give instead of a list (the CLI's --templates, the window's menu)
TEMPLATE_SETS: dict[str, tuple[str, ...]] = {"none": ("{}",), "photo": (PHOTO_TEMPLATE,),
                                             "imagenet": IMAGENET_TEMPLATES}


def resolve_templates(templates: str | Sequence[str] | None) -> tuple[str, ...]:
    """The templates ``templates`` names: None -> the prompt as typed; ``"photo"``, ``"imagenet"``, ``"none"`` (a
    name of :data:`TEMPLATE_SETS`); a string with ``{}`` -> that one template; a sequence -> those templates.

    Raises:
        ValueError: an unknown name, an empty list, or a template without ``{}`` (one line naming it).
    """
    if templates is None:
        return ("{}",)
    if isinstance(templates, str):
        if templates in TEMPLATE_SETS:
            return TEMPLATE_SETS[templates]
        if "{}" not in templates:
            raise ValueError(f"templates: {templates!r} is neither a template with '{{}}' where the prompt goes nor "
                             f"one of {', '.join(TEMPLATE_SETS)}")
        return (templates,)
    out = tuple(templates)
    if not out:
        raise ValueError("templates: an empty list (give None for the prompt as typed)")
    for t in out:
        if not isinstance(t, str) or "{}" not in t:
            raise ValueError(f"templates: {t!r} has no '{{}}' where the prompt goes")
    return out


def apply_template(template: str, prompt: str) -> str:
    """``template`` with ``prompt`` where ``{}`` stands (every occurrence, as ``str.format`` with one argument)."""
    return template.replace("{}", prompt)
