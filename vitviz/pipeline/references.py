"""Similarity targets made from references (:class:`~vitviz.capture.targets.SimilarityTarget`): another image's
pooled embedding, a patch token of a reference image carried through the model's head, or a stored vector (``.npy``);
and :func:`parse_target`, the one reading of what a user types for a target (the command line's ``--target``, the
window's target box).

The reference image's embedding is read from its result's last-layer tokens with the model's own head
(:func:`vitviz.capture.model_head.head_on_tokens` with the model's pooling: the same numbers as its forward pass), so
an image already open costs nothing more; a file costs one forward pass without gradients. No Qt.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitviz.capture.foreign import is_vitviz_model
from vitviz.capture.model_head import head_on_tokens, is_feature_model, token_embedding
from vitviz.capture.targets import ClassTarget, SimilarityTarget, TargetError
from vitviz.imaging import ImageError, load_image

__all__ = ["parse_target", "reference_target", "vector_target"]

SIMILAR = "similar:"


def _reference_result(pipeline: Any, reference: Any) -> tuple[Any, str]:
    """``(result, name)`` of a reference: an InferenceResult as it is, else an image (path or PIL) run forward."""
    if hasattr(reference, "tokens") and hasattr(reference, "grid"):
        return reference, Path(str(reference.source)).name
    if isinstance(reference, (str, os.PathLike)):
        path = Path(reference).expanduser()
        if path.is_dir():
            raise TargetError(f"reference image {path}: is a folder, not an image file")
        if not path.exists():
            raise TargetError(f"reference image {path}: no such file")
        if not path.is_file():  # a pipe or a device: a reference is read at once, never waited for
            raise TargetError(f"reference image {path}: not a regular file")
        try:
            image = load_image(path)
        except ImageError as e:  # it names the file and the cause
            raise TargetError(f"reference image: {e}") from None
        return pipeline.run_batch([image], sources=[str(path)], gradients=False)[0], path.name
    if hasattr(reference, "mode") and hasattr(reference, "convert"):  # a PIL image
        return pipeline.run_batch([reference], sources=["reference image"], gradients=False)[0], "reference image"
    raise TargetError(f"a reference is an open image's result, an image file or a PIL image, got "
                      f"{type(reference).__name__}")


def _check_same_model(pipeline: Any, result: Any, label: str) -> None:
    """Refuse an open image's result made by another model (another width, depth, prefix or patch filters): its
    tokens would go through this model's head (a ``normalized_shape`` error, or a plausible wrong vector)."""
    model = pipeline.model
    if not is_vitviz_model(model):
        return
    tokens = result.tokens
    want = (len(model.blocks) + 1, int(model.embed_dim))
    got = (int(tokens.shape[0]), int(tokens.shape[-1]))
    differs = []
    if got[1] != want[1]:
        differs.append(f"{got[1]}-wide tokens, this model's are {want[1]}-wide")
    if got[0] != want[0]:
        differs.append(f"{got[0] - 1} layers, this model has {want[0] - 1}")
    if int(result.num_prefix_tokens) != int(model.num_prefix_tokens):
        differs.append(f"{int(result.num_prefix_tokens)} prefix tokens, this model has {int(model.num_prefix_tokens)}")
    if not differs:
        theirs = getattr(getattr(result, "model_data", None), "patch_embed_weight", None)
        ours = model.patch_embed.proj.weight.detach().float().cpu()
        if theirs is not None and (theirs.shape != ours.shape
                                   or not torch.allclose(theirs, ours, rtol=1e-2, atol=1e-3)):  # (any precision)
            differs.append("other patch-embedding weights")
    if differs:
        raise TargetError(f"reference {label}: this result is from another model ({result.model_name!r}: "
                          f"{'; '.join(differs)}); pass the image itself (a file or a PIL image) to run it through "
                          "this model")


def reference_target(pipeline: Any, reference: Any, *, patch: tuple[int, int] | None = None,
                     name: str | None = None) -> SimilarityTarget:
    """The similarity target of a reference image (its pooled embedding) or of one of its patches (the patch's
    last-layer token through the model's head, as if the model pooled it alone).

    Args:
        pipeline: the :class:`~vitviz.pipeline.Pipeline` of the model (the reference must be of the same model).
        reference: an open image's :class:`~vitviz.pipeline.InferenceResult`, an image file or a PIL image.
        patch: ``(row, col)`` on the reference's patch grid, or None for the whole image.
        name: for titles (default: from the file's name).

    Raises:
        TargetError: a file that cannot be read, a result from another model, a patch outside the grid, a patch of a
            module vitviz adapted.
    """
    result, label = _reference_result(pipeline, reference)
    _check_same_model(pipeline, result, label)
    model = pipeline.model
    origin: dict[str, Any] = {"image": str(result.source)}
    if patch is not None:
        row, col = (int(v) for v in patch)
        gh, gw = result.grid
        if not (0 <= row < gh and 0 <= col < gw):
            raise TargetError(f"patch ({row}, {col}) is outside the {gh}x{gw} patch grid of {label} (rows 0..{gh - 1},"
                              f" columns 0..{gw - 1})")
        origin["patch"] = [row, col]
    if not is_vitviz_model(model):
        if patch is not None:
            raise TargetError("a patch of a reference image needs vitviz's own ViT (this model is a module vitviz "
                              "adapted); use the whole image")
        if not is_feature_model(model):
            raise TargetError("this adapted module's pooled embedding cannot be read (its output is class scores); "
                              "a similarity target needs a feature model")
        vector = result.logits.detach().float()
    else:
        param = next(model.parameters())
        tokens = result.tokens[-1][None].to(device=param.device, dtype=param.dtype)
        with torch.no_grad():
            if patch is None:
                vector = head_on_tokens(model, tokens, "model")[1][0]
            else:
                vector = token_embedding(model, tokens, result.num_prefix_tokens + row * result.grid[1] + col)[0]
    what = f"patch ({row}, {col}) of {label}" if patch is not None else f"image {label}"
    return SimilarityTarget(vector.detach().float().cpu(), name or what, origin=tuple(sorted(origin.items())))


def vector_target(path: str | os.PathLike[str], *, name: str | None = None) -> SimilarityTarget:
    """The similarity target of a stored vector: a ``.npy`` file holding one vector (``[E]`` or ``[1, E]``).

    Raises:
        TargetError: a missing file, not an ``.npy`` array, pickled objects, not one finite non-zero vector.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        raise TargetError(f"reference vector {p}: is a folder, not a .npy file")
    if not p.is_file():
        raise TargetError(f"reference vector {p}: no such file" if not p.exists() else
                          f"reference vector {p}: not a regular file")
    try:
        a = np.load(p, allow_pickle=False)
    except ValueError:  # numpy's text is long: not its format, or pickled objects (never unpickled)
        raise TargetError(f"reference vector {p}: not a plain .npy array (not NumPy's format, or pickled "
                          "objects, which are never loaded)") from None
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file
        raise TargetError(f"reference vector {p}: cannot be read as .npy ({type(e).__name__})") from None
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "fiu":
        raise TargetError(f"reference vector {p}: holds {getattr(a, 'dtype', type(a).__name__)}, not numbers")
    try:
        return SimilarityTarget(torch.from_numpy(np.asarray(a, dtype=np.float32)), name or f"vector {p.name}",
                                origin=(("vector", str(p)),))
    except TargetError as e:
        raise TargetError(f"reference vector {p}: {str(e).split(': ', 1)[-1]}") from None


def parse_target(pipeline: Any, text: str, labels: Any = None) -> Any:
    """A target from what a user types: ``top``, a class index, a class name (exact, case-insensitive),
    ``similar:IMAGE``, ``similar:IMAGE@ROW,COL`` (a patch) or ``similar:VECTOR.npy``.

    Raises:
        TargetError: one line naming the text and the problem.
    """
    t = str(text).strip()
    if not t:
        raise TargetError("the target is empty: give top, a class index or name, or similar:PATH[@ROW,COL]")
    if t.lower() == "top":
        return ClassTarget(None)
    if t.lower().startswith(SIMILAR):
        ref = t[len(SIMILAR):].strip()
        patch = None
        if "@" in ref and not os.path.isfile(ref):  # (a file whose name has '@', e.g. ref@2x.png, is that file)
            ref, where = ref.rsplit("@", 1)
            try:
                row, col = (int(v) for v in where.split(","))
            except ValueError:
                raise TargetError(f"target {t!r}: the patch must be ROW,COL (two integers), got {where!r}") from None
            patch = (row, col)
        if not ref:
            raise TargetError(f"target {t!r}: name the reference image or vector after 'similar:'")
        if ref.lower().endswith(".npy"):
            if patch is not None:
                raise TargetError(f"target {t!r}: a stored vector has no patches")
            return vector_target(ref)
        return reference_target(pipeline, ref, patch=patch)
    if t.lstrip("-").isdigit():
        index = int(t)
        k = int(getattr(pipeline.model, "num_classes", 0) or 0)
        if is_feature_model(pipeline.model):
            raise TargetError(f"target {t}: this model has no classifier (a feature model): use similar:PATH")
        if not 0 <= index < k:
            raise TargetError(f"target class {index} out of range for a model with {k} classes (valid: 0..{k - 1})")
        return ClassTarget(index)
    names = [str(x).lower() for x in (labels or ())]
    if t.lower() in names:
        return ClassTarget(names.index(t.lower()))
    raise TargetError(f"unknown target {t!r}: give top, a class index"
                      + (" or name" if names else "") + ", or similar:IMAGE[@ROW,COL] or similar:VECTOR.npy")
