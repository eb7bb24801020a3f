"""What the user chose as the target of the gradient views, as a recipe that makes the target for a model.

A :class:`TargetChoice` names the target the way the window, the session file and ``vitviz.show`` speak of it: the
top class, a class, "similar to image x.png", "similar to patch (r, c) of x.png", "similar to vector v.npy", or a
function of the output. :meth:`TargetChoice.build` makes the target itself for a model
(:mod:`vitviz.capture.targets`; a similarity target needs the reference's embedding: one forward pass without
gradients for a file, none for an open image's result), so the same choice is made again for another model or when a
session is reopened; :func:`choice_of` reads the choice back from a target (its ``origin``).

No Qt; torch is imported when a target is built.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["CHOICE_KINDS", "SIMILARITY_KINDS", "TargetChoice", "as_choice", "choice_of"]

CHOICE_KINDS: tuple[str, ...] = ("top", "class", "image", "patch", "vector", "text", "callable", "named")
"""``named``: a target made in Python that cannot be made again (a similarity target without an origin, a text
prompt's): known by its name only."""
SIMILARITY_KINDS: tuple[str, ...] = ("image", "patch", "vector")


@dataclass(frozen=True)
class TargetChoice:
    """A target as chosen (see the module's notes).

    Attributes:
        kind: one of :data:`CHOICE_KINDS`.
        index: the class (``"class"``).
        path: the reference image or ``.npy`` vector (``"image"``, ``"patch"``, ``"vector"``): a file, or the name of
            an image open in the window without a file (a pasted one, an image handed to ``vitviz.show``).
        patch: ``(row, col)`` on the reference's patch grid (``"patch"``).
        name: the function's name (``"callable"``), the prompt (``"text"``: CLIP / SigLIP), the target's words
            (``"named"``); a label for a class.
        fn: the function (``"callable"``; not compared, never saved).
        source: the target object it came from, used to make it again (a :class:`vitviz.capture.targets.Text` with
            its templates and tower; not compared, never saved).
    """

    kind: str = "top"
    index: int | None = None
    path: str = ""
    patch: tuple[int, int] | None = None
    name: str = ""
    fn: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    source: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in CHOICE_KINDS:
            raise ValueError(f"a target choice is one of {', '.join(CHOICE_KINDS)}, got {self.kind!r}")
        if self.kind == "class" and (isinstance(self.index, bool) or not isinstance(self.index, int)):
            raise ValueError(f"a class target needs its class index, got {self.index!r}")
        if self.kind in SIMILARITY_KINDS and not self.path:
            raise ValueError(f"a {self.kind} target needs the file it is made from")
        if self.kind == "patch" and (self.patch is None or len(self.patch) != 2):
            raise ValueError(f"a patch target needs (row, col), got {self.patch!r}")

    # ------------------------------------------------------------------ words
    @property
    def is_similarity(self) -> bool:
        return self.kind in SIMILARITY_KINDS

    @property
    def file_name(self) -> str:
        return Path(self.path).name or self.path

    def describe(self, labels: Any = None) -> str:
        """The target in words, as the caption says it: "top class", "tabby cat", "similar to image x.png", "similar
        to patch (2, 3) of x.png", "similar to vector v.npy", "score(output)"."""
        if self.kind == "top":
            return "top class"
        if self.kind == "class":
            i = int(self.index or 0)
            if labels is not None and 0 <= i < len(labels):
                return str(labels[i])
            return self.name or f"class {i}"
        if self.kind == "image":
            return f"similar to image {self.file_name}"
        if self.kind == "patch":
            r, c = self.patch or (0, 0)
            return f"similar to patch ({r}, {c}) of {self.file_name}"
        if self.kind == "vector":
            return f"similar to vector {self.file_name}"
        if self.kind == "named":
            return self.name or "a target made in Python"
        if self.kind == "text":
            return f"similar to {self.name}"
        return f"{self.name or 'target'}(output)"

    # ------------------------------------------------------------------ making the target
    def build(self, pipeline: Any, *, reference: Any = None) -> Any:
        """The target for ``pipeline``'s model (:mod:`vitviz.capture.targets`).

        Args:
            pipeline: the :class:`~vitviz.pipeline.Pipeline` the target is for.
            reference: for ``"image"`` / ``"patch"``: the reference already at hand, an open image's
                :class:`~vitviz.pipeline.InferenceResult` of this pipeline (no forward pass) or a PIL image (the
                file is read otherwise).

        Raises:
            TargetError: one line naming the target and the problem (a class the model lacks, a file that cannot be
                read, a patch outside the grid, a function that is gone ...).
        """
        from vitviz.capture.model_head import is_feature_model
        from vitviz.capture.targets import CallableTarget, ClassTarget, TargetError
        from vitviz.pipeline import reference_target, vector_target

        if self.kind == "top":
            return ClassTarget(None)
        if self.kind == "class":
            k = int(getattr(pipeline.model, "num_classes", 0) or 0)
            if is_feature_model(pipeline.model) or k <= 0:
                raise TargetError(f"class {self.index}: this model has no classifier (a feature model): choose a "
                                  "similarity target")
            if not 0 <= int(self.index or 0) < k:
                raise TargetError(f"target class {self.index} out of range for a model with {k} classes (valid: "
                                  f"0..{k - 1})")
            return ClassTarget(int(self.index or 0))
        if self.kind == "vector":
            return vector_target(self.path)
        if self.kind == "text":
            from vitviz.capture.targets import Text

            return (self.source if self.source is not None else Text(self.name)).resolve(pipeline.model)
        if self.kind == "named":
            raise TargetError(f"target {self.name or '?'}: it was made in Python and cannot be made again here")
        if self.kind == "callable":
            if self.fn is None:
                raise TargetError(f"target function {self.name or '?'}: a function cannot be saved; run vitviz.show("
                                  "..., target=fn) again to use it")
            return CallableTarget(self.fn, self.name)
        ref = reference if reference is not None else self.path
        if reference is None and not os.path.isfile(self.path) and not os.path.isabs(self.path):
            raise TargetError(f"reference image {self.path}: it was not a file (pasted or given as pixels) and is not "
                              "open any more")
        target = reference_target(pipeline, ref, patch=self.patch if self.kind == "patch" else None)
        if reference is not None and not isinstance(ref, (str, os.PathLike)):  # name it after the choice's file
            from vitviz.capture.targets import SimilarityTarget

            what = self.describe()[len("similar to "):]
            origin = dict(target.origin)
            origin["image"] = self.path
            target = SimilarityTarget(target.vector, what, target.scale, target.bias,
                                      origin=tuple(sorted(origin.items())))
        return target


def choice_of(target: Any) -> TargetChoice:
    """The choice a target was made from (its ``origin`` for a similarity target); None -> the top class.

    A similarity target made in Python without an origin it can be made from again (``SimilarityTarget(vector,
    name)``, a text prompt's) is a ``"named"`` choice (a session saves its words and falls back to the top class).
    """
    if target is None:
        return TargetChoice("top")
    kind = getattr(target, "kind", None)
    if kind == "class":
        index = getattr(target, "index", None)
        return TargetChoice("top") if index is None else TargetChoice("class", index=int(index))
    if kind == "similarity":
        origin = dict(getattr(target, "origin", ()) or ())
        if "text" in origin:
            return TargetChoice("text", name=str(origin["text"]))
        if "vector" in origin:
            return TargetChoice("vector", path=str(origin["vector"]))
        if "image" in origin:
            patch = origin.get("patch")
            if patch is not None:
                return TargetChoice("patch", path=str(origin["image"]), patch=(int(patch[0]), int(patch[1])))
            return TargetChoice("image", path=str(origin["image"]))
        return TargetChoice("named", name=target.describe())
    if kind == "callable":
        return TargetChoice("callable", name=str(getattr(target, "name", "")), fn=getattr(target, "fn", None))
    if isinstance(target, int) and not isinstance(target, bool):
        return TargetChoice("class", index=int(target))
    raise ValueError(f"not a target: {target!r}")


def as_choice(value: Any) -> tuple[TargetChoice, Any]:
    """``(choice, target)`` from what a caller passes: a :class:`TargetChoice` (target None: to be made), a class
    index, ``"top"``, a target of :mod:`vitviz.capture.targets` (kept as it is, to use for the model it was made
    for) or a function of the output (made into a callable target).

    Raises:
        ValueError: anything else, naming it.
    """
    if isinstance(value, TargetChoice):
        return value, None
    if value is None or (isinstance(value, str) and value == "top"):
        return TargetChoice("top"), None
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"class {value}: a class index is 0 or more")
        return TargetChoice("class", index=int(value)), None
    if getattr(value, "kind", None) in ("class", "similarity", "callable") and hasattr(value, "describe"):
        return choice_of(value), value
    if getattr(value, "kind", None) == "text" and hasattr(value, "resolve"):  # a prompt: made for each model
        return TargetChoice("text", name=str(value.prompt).strip(), source=value), None
    if callable(value) and not isinstance(value, (str, bytes)):
        return TargetChoice("callable", name=getattr(value, "__name__", type(value).__name__), fn=value), None
    raise ValueError(f"a target is a class index, 'top', a target of vitviz.capture.targets or a function of the "
                     f"output, got {value!r}" if isinstance(value, (str, float)) else
                     f"a target is a class index, 'top', a target of vitviz.capture.targets or a function of the "
                     f"output, got a {type(value).__name__}")
