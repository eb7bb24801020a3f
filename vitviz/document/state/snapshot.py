"""A session's state taken from what the window shows (:func:`capture_state`), and the file hashes that let a
reopened session tell a changed image. No Qt."""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from vitviz import __version__
from vitviz.document.state.schema import ImageRef, SessionState, StateError
from vitviz.document.target_choice import choice_of

if TYPE_CHECKING:  # pragma: no cover
    from vitviz.document.comparison import CompareSpec
    from vitviz.document.session import Session
    from vitviz.model.preprocess import Preprocess

__all__ = ["capture_state", "file_sha256", "software"]


def capture_state(session: Session, model_ref: str, *, model_name: str = "", device: str = "cpu",
                  precision: str = "fp32", preprocess: Preprocess | None = None, heads_all_layers: bool = False,
                  compare: CompareSpec | None = None, hashes: bool = True) -> SessionState:
    """The state of ``session`` (its shown result, images and options) with the model ``model_ref``.

    Args:
        preprocess: the model's preprocessing (``pipeline.spec.preprocess``), recorded so that a reopened model
            prepares the images the same way.
        hashes: record the SHA-256 of the shown image's file and of the comparison's images (a changed image is
            reported when the state is opened).

    Raises:
        StateError: nothing is shown yet.
    """
    r = session.result
    if r is None:
        raise StateError(None, "nothing to save: no image has been analysed yet")
    paths = [str(p) for p in session.images]
    if r.source not in paths:
        paths.append(str(r.source))
    for p in compare.images if compare is not None else ():  # the comparison's rows are images of the session
        if p not in paths:
            paths.append(str(p))
    # the images the picture is made of are hashed (the shown one, the comparison's): a folder of photos is not
    # read again at every export
    pictured = {str(r.source)} | set(compare.images if compare is not None else ())
    refs = []
    for p in paths:
        q = Path(p)
        is_file = q.is_file()
        sha = file_sha256(q) if is_file and hashes and p in pictured else None
        refs.append(ImageRef(path=str(q.resolve()) if is_file else p, sha256=sha))
    current = paths.index(str(r.source))
    if compare is not None:
        compare = replace(compare, images=tuple(refs[paths.index(p)].path for p in compare.images))
    choice = choice_of(r.target_spec) if r.target_spec is not None else None
    if choice is not None and choice.kind in ("top", "class"):
        choice = None  # a class: the plain "target" field (what older vitviz read)
    if choice is not None and choice.is_similarity and Path(choice.path).is_file():
        choice = replace(choice, path=str(Path(choice.path).resolve()))
    label = choice.describe() if choice is not None else r.label(r.target) if r.target is not None else ""
    prompts = tuple(str(p) for p in r.labels) if getattr(r, "head_kind", "") == "prompts" else ()
    return SessionState(model=model_ref, images=tuple(refs), current=current, options=session.options,
                        prompts=prompts,
                        target=r.target if choice is None else None, target_label=label, target_choice=choice,
                        model_name=model_name or r.model_name, device=device, precision=precision,
                        preprocess=preprocess, heads_all_layers=bool(heads_all_layers), compare=compare,
                        written_by=software())


def file_sha256(path: str | os.PathLike) -> str | None:
    """SHA-256 of a regular file's bytes (None when it cannot be read)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def software() -> str:
    """``"vitviz 0.1.0"``: what writes the file (its ``written_by``)."""
    return f"vitviz {__version__}"
