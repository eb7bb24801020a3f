"""What the gradient views explain: a *target*, any scalar function of one image's model output.

Three kinds, one type (:data:`Target`) used by every gradient view, the faithfulness measures, the window, the
command line and :func:`vitviz.show`:

* :class:`ClassTarget`: a class logit (``index``; None: each image's top class, read from the same forward pass);
* :class:`SimilarityTarget`: ``scale * cos(e, v) + bias`` between the image's pooled embedding ``e`` (the model's
  output for a feature model -- DINO, DINOv2, CLIP / SigLIP image towers --, the features before the classifier
  for a classifier) and a reference vector ``v``: another image's embedding, a patch token of a reference image
  carried through the model's head, a stored vector, or a text prompt's embedding (CLIP: ``scale = logit_scale``;
  SigLIP: ``bias = logit_bias``);
* :class:`CallableTarget`: the user's function of one image's output ``[K]`` (logits or features), returning a 0-d
  tensor (as pytorch-grad-cam's target callables: called per image).

:func:`as_target` turns what a user passes (an int, ``"top"``, None, a callable, a target) into one;
:func:`target_scores` evaluates a target on a batch's live output, the scalar each gradient is taken of.
Bad targets raise :class:`TargetError` with one line naming the target and the cause.

No Qt. torch is imported at the top: this module is imported by :mod:`vitviz.capture` only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

import numpy as np
import torch

from vitviz.capture.target_guard import TargetMisuse, call_guarded, weights_watched

__all__ = ["CallableTarget", "ClassTarget", "SimilarityTarget", "Target", "TargetError", "Text", "as_target",
           "differentiable_scores", "target_scores"]


class TargetError(ValueError):
    """A target that cannot be used: one line naming it and the cause."""


@dataclass(frozen=True)
class ClassTarget:
    """A class logit: ``index``, or None for each image's most probable class (of the same pass)."""

    index: int | None = None

    kind = "class"
    space = "output"

    def __post_init__(self) -> None:
        if self.index is not None and (isinstance(self.index, (bool, np.bool_))
                                       or not isinstance(self.index, (int, np.integer))):
            raise TargetError(f"a class target is a class index, got {self.index!r}")
        if self.index is not None and int(self.index) < 0:
            raise TargetError(f"class {self.index}: a class index is 0 or more")
        if self.index is not None and int(self.index) >= 2**62:  # beyond any model's classes (and torch's int64)
            raise TargetError(f"class {str(int(self.index))[:30]}{'…' if len(str(int(self.index))) > 30 else ''}: "
                              "larger than any model's number of classes")

    @property
    def key(self) -> tuple:
        return ("class", None if self.index is None else int(self.index))

    def describe(self, labels: Any = None) -> str:
        if self.index is None:
            return "top class"
        i = int(self.index)
        return labels[i] if labels is not None and 0 <= i < len(labels) else f"class {i}"


@dataclass(frozen=True, eq=False)
class SimilarityTarget:
    """``scale * cos(embedding, vector) + bias``: how close the image's pooled embedding is to ``vector``.

    Attributes:
        vector: ``[E]`` the reference, in the space of the model's pooled embedding.
        name: what it is, for titles, captions, file names and session files ("image cat.jpg",
            "patch (3, 4) of cat.jpg", "vector ref.npy", a prompt).
        scale, bias: the family's score (CLIP ``logit_scale``; SigLIP ``logit_scale`` and ``logit_bias``); 1 and 0
            give the plain cosine similarity.
        origin: how to make it again (for session files): e.g. ``{"image": PATH}``, ``{"image": PATH, "patch":
            [row, col]}``, ``{"vector": PATH}``, ``{"text": PROMPT}``; empty when it cannot be (a vector built in
            Python).
    """

    vector: torch.Tensor
    name: str
    scale: float = 1.0
    bias: float = 0.0
    origin: tuple = ()

    kind = "similarity"
    space = "embedding"

    def __post_init__(self) -> None:
        v = self.vector
        if isinstance(v, np.ndarray):
            v = torch.from_numpy(np.ascontiguousarray(v))
        if not isinstance(v, torch.Tensor):
            raise TargetError(f"similarity target {self.name!r}: the reference must be a vector (tensor or array), "
                              f"got {type(self.vector).__name__}")
        v = v.detach().to("cpu", torch.float32)
        if v.ndim == 2 and v.shape[0] == 1:
            v = v[0]
        if v.ndim != 1 or v.numel() == 0:
            raise TargetError(f"similarity target {self.name!r}: the reference must be one vector, got shape "
                              f"{tuple(v.shape)}")
        if not bool(torch.isfinite(v).all()):
            raise TargetError(f"similarity target {self.name!r}: the reference vector has NaN or infinite values")
        if float(v.norm()) == 0.0 and float(v.abs().max()) == 0.0:
            raise TargetError(f"similarity target {self.name!r}: the reference vector is zero (no direction)")
        norm = float(v.double().norm())
        if not 1e-6 < norm < 1e30:  # its float32 norm would overflow (3e38) or fall under the cosine's eps: the
            v = (v.double() / norm).float()  # same direction at unit length (the score is a cosine)
        object.__setattr__(self, "vector", v)
        object.__setattr__(self, "scale", float(self.scale))
        object.__setattr__(self, "bias", float(self.bias))

    @property
    def key(self) -> tuple:
        digest = hashlib.sha1(self.vector.numpy().tobytes()).hexdigest()[:16]
        return ("similarity", self.name, digest, self.scale, self.bias)

    def describe(self, labels: Any = None) -> str:
        return f"similar to {self.name}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SimilarityTarget) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)


@dataclass(frozen=True, eq=False)
class CallableTarget:
    """The user's scalar: ``fn(output) -> 0-d tensor``, called once per image with that image's output ``[K]``
    (logits, or features for a feature model), inside the autograd graph."""

    fn: Callable[[torch.Tensor], Any]
    name: str = ""

    kind = "callable"
    space = "output"

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TargetError(f"a callable target needs a function, got {type(self.fn).__name__}")
        if not self.name:
            object.__setattr__(self, "name", getattr(self.fn, "__name__", type(self.fn).__name__))

    @property
    def key(self) -> tuple:
        return ("callable", self.name, id(self.fn))

    def describe(self, labels: Any = None) -> str:
        return f"{self.name}(output)"


@dataclass(frozen=True, eq=False)
class Text:
    """A text prompt as the target (CLIP, SigLIP): the family's image-text score of ``prompt``, resolved by
    :meth:`resolve` into a :class:`SimilarityTarget` (the prompt's text embedding, ``logit_scale``, SigLIP's
    ``logit_bias``) with the text tower of the model's source, or ``tower`` when given.

    Attributes:
        prompt: the phrase ("a red car").
        templates: as :meth:`vitviz.model.text.TextTower.encode` (None: as typed; ``"photo"``; ``"imagenet"``).
        tower: a :class:`vitviz.model.text.TextTower` (default: opened from ``model.spec.source_path``).
    """

    prompt: str
    templates: Any = None
    tower: Any = None

    kind = "text"

    def resolve(self, model: Any) -> SimilarityTarget:
        """The similarity target of the prompt for ``model``'s image tower.

        Raises:
            TargetError: an empty prompt, no text tower for the model (why).
        """
        from vitviz.model.text import open_text_tower  # the text tower's code: only when a prompt is asked for

        if not str(self.prompt).strip():
            raise TargetError("the prompt is empty: type a phrase")
        tower = self.tower
        if tower is None:
            source = getattr(getattr(model, "spec", None), "source_path", None)
            if source is None:
                raise TargetError("Text target: the model was not opened from a folder or file, so its text tower "
                                  "is unknown; pass Text(prompt, tower=vitviz.model.text.open_text_tower(SOURCE))")
            try:
                tower = open_text_tower(source)
            except ValueError as e:
                raise TargetError(f"Text target: {e}") from None
        vector = tower.encode([str(self.prompt).strip()], self.templates)[0]
        return SimilarityTarget(vector, str(self.prompt).strip(), scale=tower.logit_scale, bias=tower.logit_bias,
                                origin=(("text", str(self.prompt).strip()),))


Target = Union[ClassTarget, SimilarityTarget, CallableTarget]
TARGET_TYPES = (ClassTarget, SimilarityTarget, CallableTarget)


def as_target(value: Any) -> Target:
    """A target from what a user passes: a target as it is; an int -> :class:`ClassTarget`; None or ``"top"`` ->
    the top class; a callable -> :class:`CallableTarget`.

    Raises:
        TargetError: anything else (naming it).
    """
    if isinstance(value, TARGET_TYPES):
        return value
    if value is None or (isinstance(value, str) and value == "top"):
        return ClassTarget(None)
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return ClassTarget(int(value))
    if callable(value) and not isinstance(value, (str, torch.Tensor, np.ndarray)):
        return CallableTarget(value)
    raise TargetError(f"target must be a class index, 'top', a SimilarityTarget or a function of the output, got "
                      f"{value!r}" if isinstance(value, (str, float)) else
                      f"target must be a class index, 'top', a SimilarityTarget or a function of the output, got a "
                      f"{type(value).__name__}")


def target_scores(target: Target, output: torch.Tensor, embedding: torch.Tensor | None,
                  classes: torch.Tensor | None = None) -> torch.Tensor:
    """The target's value for each image of a batch, ``[B]``, in the graph of ``output`` (to differentiate).

    Args:
        target: the target.
        output: ``[B, K]`` the model's output (logits, or features).
        embedding: ``[B, E]`` the pooled embedding (a similarity target's input), or None when the model has none
            that can be read.
        classes: ``[B]`` int64 class per image (a class target: ``target.index`` or each image's top class).

    Raises:
        TargetError: a similarity target whose vector does not fit the embedding, a callable that raises or does not
            give a scalar.
    """
    if isinstance(target, ClassTarget):
        if classes is None:
            raise TargetError("a class target needs its class per image")
        return output.gather(1, classes.to(output.device)[:, None])[:, 0]
    if isinstance(target, SimilarityTarget):
        if embedding is None:
            raise TargetError(f"{target.describe()}: this model's pooled embedding cannot be read, so there is "
                              "nothing to compare the reference with")
        v = target.vector.to(device=embedding.device, dtype=embedding.dtype)
        if embedding.shape[-1] != v.shape[0]:
            raise TargetError(f"{target.describe()}: the reference vector has {v.shape[0]} values but the model's "
                              f"pooled embedding has {embedding.shape[-1]} (a reference made with another model?)")
        cos = torch.nn.functional.cosine_similarity(embedding, v[None].expand_as(embedding), dim=-1, eps=1e-12)
        return target.scale * cos + target.bias
    if isinstance(target, CallableTarget):
        try:
            with weights_watched(target.name):  # (by content, once a batch: what the fence cannot see)
                return _callable_scores(target, output)
        except TargetMisuse as e:
            raise TargetError(str(e)) from None
    raise TargetError(f"unknown target {target!r}")


def _callable_scores(target: CallableTarget, output: torch.Tensor) -> torch.Tensor:
    """A callable target's score for each image, each call fenced (:func:`call_guarded`)."""
    values = []
    for b in range(output.shape[0]):
        try:
            y = call_guarded(target.name, target.fn, output[b], output)
        except TargetMisuse as e:  # it changed the model, ran it, or took a gradient: already one line
            raise TargetError(str(e)) from None
        except Exception as e:  # noqa: BLE001 - the user's code: name it, keep its message
            text = str(e).splitlines()[0] if str(e) else ""
            raise TargetError(f"target function {target.name} raised {type(e).__name__}"
                              + (f": {text}" if text else "")) from e
        if not isinstance(y, torch.Tensor):
            raise TargetError(f"target function {target.name} returned a {type(y).__name__}, not a tensor computed "
                              "from the output (a gradient needs one)")
        if y.numel() != 1:
            raise TargetError(f"target function {target.name} returned shape {tuple(y.shape)}, not a scalar")
        if not y.is_floating_point():
            raise TargetError(f"target function {target.name} returned dtype {y.dtype}, not a floating scalar")
        if not bool(torch.isfinite(y.detach()).all()):
            raise TargetError(f"target function {target.name} returned {float(y.detach())} on image {b + 1} (not "
                              "a finite number: the maps would be NaN)")
        values.append(y.reshape(()))
    return torch.stack(values)


def finite_scores(target: Target, scores: torch.Tensor) -> torch.Tensor:
    """``scores``, checked to be finite numbers (NaN or infinite ones come from a model whose output is not finite:
    the maps would be NaN)."""
    bad = ~torch.isfinite(scores.detach())
    if bool(bad.any()):
        raise TargetError(f"target {target.describe()}: the score of image {int(bad.nonzero()[0, 0]) + 1} is "
                          f"{float(scores.detach()[bad][0])}: the model's output is not finite (NaN or infinite "
                          "values in its weights or its input?), so the maps would be NaN")
    return scores


def differentiable_scores(target: Target, output: torch.Tensor, embedding: torch.Tensor | None,
                          classes: torch.Tensor | None = None, *, owner: str = "model") -> torch.Tensor:
    """:func:`target_scores`, checked to be in the autograd graph of ``output`` (a gradient to explain).

    Raises:
        TargetError: as :func:`target_scores`, or a value that does not depend on the ``owner``'s output (a constant,
            a detached tensor).
    """
    scores = finite_scores(target, target_scores(target, output, embedding, classes))
    unrelated = scores.requires_grad and isinstance(target, CallableTarget) and output.requires_grad and \
        torch.autograd.grad(scores.sum(), output, retain_graph=True, allow_unused=True)[0] is None
    if not scores.requires_grad or unrelated:  # (a tensor with a gradient of its own, not from the output)
        raise TargetError(f"target {target.describe()}: its value does not depend on the {owner}'s output, so it has "
                          "no gradient")
    return scores
