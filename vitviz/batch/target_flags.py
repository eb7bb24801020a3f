"""What a command's ``--target`` names, as a target (:mod:`vitviz.capture.targets`) for a model: ``top``, a class index
or name (the name itself, one of its comma-separated names, or a unique part of one:
:func:`vitviz.batch.export_plan.resolve_target`), ``similar:IMAGE``, ``similar:IMAGE@ROW,COL`` (a patch of that image)
or ``similar:VECTOR.npy`` (:func:`vitviz.pipeline.parse_target`). ``vitviz export`` and ``vitviz evaluate`` read it
here, once, before any image: a bad one is one ValueError naming the flag and the cause (a reference that cannot be
read, a patch outside the grid, a vector whose length is not the model's embedding's, a class on a feature model).

``--text "a cat; a dog"`` (``vitviz predict``, ``export``, ``evaluate``) names prompts instead: :func:`text_problem`
refuses, before the model is loaded, empty prompts, ``--text`` with ``--target`` and a model without a text tower;
:func:`read_prompts` gives the pipeline over the prompts (:func:`vitviz.pipeline.prompt_pipeline`: each prompt a class,
the family's zero-shot probabilities); :func:`describe_prompts` is the manifest's list of them.

No Qt; torch and the pipeline are imported when a target is read (the commands' ``--help`` does not import them).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from vitviz.batch.export_plan import resolve_target

__all__ = ["SIMILAR", "TEXT_FLAG", "describe_prompts", "describe_target", "read_prompts", "read_target",
           "text_digest", "text_problem"]

SIMILAR = "similar:"
FORMS = "top, a class index or name, similar:IMAGE, similar:IMAGE@ROW,COL or similar:VECTOR.npy"
TEXT_FLAG = "--text"


def read_target(pipeline: Any, text: str | int | None, *, flag: str = "--target") -> Any:
    """The target that ``text`` names for ``pipeline``'s model, or None for each image's top class (a feature
    model's "top" is no target: its gradient views are then unavailable, with the reason).

    Raises:
        ValueError: naming ``flag``, the text and the cause.
    """
    from vitviz.capture.model_head import is_feature_model  # torch: when a command runs
    from vitviz.capture.targets import ClassTarget, TargetError
    from vitviz.pipeline import parse_target

    t = "" if text is None else str(text).strip()
    if t.lower() in ("", "top"):
        return None
    model = pipeline.model
    if t.lower().startswith(SIMILAR):
        try:
            target = parse_target(pipeline, t)
        except TargetError as e:
            raise ValueError(f"{flag} {t}: {_without_echo(str(e), t)}") from None
        except OSError as e:  # a name the system refuses (too long ...): the flag, and the cause without the name
            raise ValueError(f"{flag} {t}: cannot read the reference ({e.strerror or e})") from None
        problem = _size_problem(model, target.vector.shape[0])
        if problem:
            raise ValueError(f"{flag} {t}: {problem}")
        return target
    if is_feature_model(model):
        raise ValueError(f"{flag} {t}: the model has no classifier (its output is an embedding), so there is no class "
                         f"to explain; give similar:IMAGE, similar:IMAGE@ROW,COL or similar:VECTOR.npy")
    num_classes = int(getattr(model, "num_classes", 0) or 0)
    index = resolve_target(t, getattr(pipeline.spec, "labels", None), num_classes)  # ValueError naming --target
    return None if index is None else ClassTarget(index)


def _without_echo(message: str, text: str) -> str:
    """``message`` without a leading ``target 'TEXT': `` (the flag and the text are said before it)."""
    return re.sub(r"^(unknown )?target " + re.escape(repr(text)) + r":\s*", "", message)


def _size_problem(model: Any, size: int) -> str | None:
    """Why a reference of ``size`` values cannot be compared with the model's pooled embedding (None: it can, or the
    embedding's size cannot be told without an image: a module vitviz adapted, checked by its capture)."""
    import torch

    from vitviz.capture.foreign import is_vitviz_model
    from vitviz.capture.model_head import head_on_tokens

    if not is_vitviz_model(model):
        return None
    param = next(model.parameters())
    dim = int(getattr(model, "embed_dim", 0) or model.config.embed_dim)
    tokens = torch.zeros(1, int(model.num_prefix_tokens) + 1, dim, device=param.device, dtype=param.dtype)
    with torch.no_grad():
        want = int(head_on_tokens(model, tokens, "model")[1].shape[-1])
    if want == size:
        return None
    return (f"the reference vector has {size} values but the model's pooled embedding has {want} (a reference made "
            "with another model?)")


def describe_target(result: Any) -> dict[str, Any] | None:
    """The manifest's ``target`` of a result: None (no gradients), ``{"kind": "class", "name", "class", "label"}``,
    ``{"kind": "similarity", "name", "origin", "score"}`` (origin: ``{"image": PATH}``, with ``"patch": [row, col]``,
    or ``{"vector": PATH}``) or ``{"kind": "callable", "name", "score"}``."""
    spec = getattr(result, "target_spec", None)
    if result.target is not None:
        label = result.label(int(result.target))
        return {"kind": "class", "name": label, "class": int(result.target), "label": label}
    if spec is None or getattr(spec, "kind", "class") == "class":
        return None
    out: dict[str, Any] = {"kind": spec.kind, "name": result.target_text() or spec.describe()}
    if spec.kind == "similarity":
        out["origin"] = dict(spec.origin)
    score = result.target_score
    out["score"] = None if score is None else round(float(score), 6)
    return out


def _target_conflict(target: str | None) -> str | None:
    """Why ``--text`` cannot go with ``--target TARGET`` (None: the target is the default, ``top``)."""
    t = "" if target is None else str(target).strip()
    if t.lower() in ("", "top"):
        return None
    return f"{TEXT_FLAG} and --target {t}: give one of them (with {TEXT_FLAG} each prompt is the target of its maps)"


def text_problem(text: str, model_ref: str, target: str | None = "top") -> tuple[list[str], str | None]:
    """``(prompts, problem)`` of ``--text TEXT`` for the model ``model_ref``, read before the model is loaded (names
    and JSON only: :func:`vitviz.model.text.text_tower_reason`): the problem is one line naming the flag and the
    cause (``--target`` given too, an empty prompt, a model without a text tower), or None."""
    from vitviz.capture.targets import TargetError
    from vitviz.model.text import text_tower_reason
    from vitviz.pipeline import split_prompts

    conflict = _target_conflict(target)
    if conflict:
        return [], conflict
    try:
        prompts = split_prompts(text)
    except TargetError as e:
        return [], f"{TEXT_FLAG} {text!r}: {e}"
    reason = text_tower_reason(model_ref)
    return prompts, (f"{TEXT_FLAG}: {reason}" if reason else None)


def read_prompts(pipeline: Any, prompts: str | list[str] | tuple[str, ...], templates: str | None = None, *,
                 target: str | None = "top") -> Any:
    """The pipeline over ``prompts`` (:func:`vitviz.pipeline.prompt_pipeline`; the text tower opened from
    ``pipeline.source``): its classes are the prompts, its probabilities the family's zero-shot ones.

    Raises:
        ValueError: naming ``--text`` and the cause (``target`` other than ``top``, an empty prompt, no text tower,
            a tokenizer file missing, a text tower that does not fit the image tower).
    """
    from vitviz.pipeline import prompt_pipeline

    conflict = _target_conflict(target)
    if conflict:
        raise ValueError(conflict)
    try:
        return prompt_pipeline(pipeline, prompts, templates=templates)
    except ValueError as e:  # TargetError, TextTowerError, PromptError: one line each
        raise ValueError(f"{TEXT_FLAG}: {e}") from None


def describe_prompts(result: Any) -> list[dict[str, Any]]:
    """The manifest's ``prompts`` of a result of a prompt pipeline: ``[{"class", "prompt", "score", "p"}]`` in the
    prompts' order (``score``: the family's logit; ``p``: its zero-shot probability, softmax over the prompts for
    CLIP, the sigmoid of each for SigLIP)."""
    scores = result.logits.float().reshape(-1).tolist()
    probs = result.probabilities.float().reshape(-1).tolist()
    return [{"class": k, "prompt": result.label(k), "score": round(s, 6), "p": round(p, 6)}
            for k, (s, p) in enumerate(zip(scores, probs))]


def text_digest(model: Any) -> str:
    """The prompts' text embeddings of a prompt pipeline's model by content (16 hex digits of their SHA-1): they are
    not in its state dict, and they change with the text tower and the templates."""
    text = model.head.text.detach().float().cpu().contiguous().numpy()
    return hashlib.sha1(text.tobytes()).hexdigest()[:16]
