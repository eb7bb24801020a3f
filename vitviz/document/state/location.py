"""Finding the files a session names (:func:`locate`): each image and a ``file:`` checkpoint at its saved absolute
path, else relative to the session file's folder, so a project folder can move; and which images changed since
(:func:`changed_images`). No Qt, no torch."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from vitviz.document.state.schema import IN_MEMORY_MODEL, SessionState, StateError
from vitviz.document.state.snapshot import file_sha256

__all__ = ["SHOWN_PROBLEMS", "changed_images", "locate"]

SHOWN_PROBLEMS = 5
"""The missing images a message names; the rest are counted ("and 9,995 more images cannot be found")."""


def locate(state: SessionState, *, current_model: str | None = None, check_model: bool = True) -> SessionState:
    """``state`` with every file found: each image (and a ``file:`` checkpoint) at its saved absolute path, else
    at its ``relative`` path from the folder of the file the state was read from.

    Args:
        current_model: the reference of the model the caller has loaded: a state naming it needs no reopening
            (never true of ``"memory"``: vitviz cannot tell two models handed over by scripts apart).
        check_model: False: the caller brings its own model; only the images are looked for.

    Raises:
        StateError: naming the state's file and everything that is missing: images that are not files (or a
            pasted image; the first :data:`SHOWN_PROBLEMS`, then how many more), a checkpoint that does not exist, a
            model given by a script, an unknown name.
    """
    base = Path(state.origin).resolve().parent if state.origin else None
    problems: list[str] = []
    found: dict[str, str] = {}  # saved path -> where it is

    def find(path: str, relative: str | None) -> str | None:
        if os.path.isabs(path) and os.path.isfile(path):
            return path
        if relative and base is not None:
            cand = base / relative
            if cand.is_file():
                return str(cand.resolve())
        return None

    images = []
    for ref in state.images:
        where = find(ref.path, ref.relative)
        if where is None:
            if not os.path.isabs(ref.path):
                problems.append(f"the image {ref.path!r} was not a file (it was pasted or dropped as pixels), "
                                f"so it cannot be opened again")
            elif os.path.exists(ref.path):
                problems.append(f"the image {ref.path} is not a regular file")
            else:
                extra = f" (nor {base / ref.relative})" if ref.relative and base is not None else ""
                problems.append(f"the image {ref.path} does not exist{extra}")
            images.append(ref)
        else:
            found[ref.path] = where
            images.append(replace(ref, path=where))
    if len(problems) > SHOWN_PROBLEMS:
        more = len(problems) - SHOWN_PROBLEMS
        problems[SHOWN_PROBLEMS:] = [f"and {more:,} more image{'s' if more > 1 else ''} cannot be found"]
    target = state.target_choice
    if target is not None and target.is_similarity and os.path.isabs(target.path):
        where = find(target.path, state.target_relative)
        what = "vector" if target.kind == "vector" else "reference image"
        if where is not None:
            target = replace(target, path=where)
        elif os.path.exists(target.path):
            problems.append(f"its target's {what} {target.path} is not a regular file")
        else:
            extra = f" (nor {base / state.target_relative})" if state.target_relative and base is not None else ""
            problems.append(f"its target's {what} {target.path} does not exist{extra}")
    model = state.model
    if not check_model or (model == current_model and model != IN_MEMORY_MODEL):
        pass
    elif model == IN_MEMORY_MODEL:
        name = f" ({state.model_name})" if state.model_name else ""
        problems.append(f"its model{name} was handed to vitviz by a script, not opened from a file or by name, so "
                        f"it cannot be reopened; open that model, then the images")
    elif model.startswith("file:"):
        ckpt = model[5:]
        if not os.path.exists(ckpt):
            alt = base / state.model_relative if state.model_relative and base is not None else None
            if alt is not None and alt.exists():
                model = f"file:{alt.resolve()}"
            else:
                extra = f" (nor {alt})" if alt is not None else ""
                problems.append(f"the model checkpoint {ckpt} does not exist{extra}")
    elif model != "demo":  # a name: known here? (no network; the download is asked for when it is opened)
        try:
            from vitviz.model.sources.refs import parse_model_ref

            parse_model_ref(model)
        except Exception as e:  # noqa: BLE001 - CheckpointError naming the known names
            problems.append(f"unknown model: {e}")
    if problems:
        lead = "cannot be opened: " if len(problems) == 1 else "cannot be opened:\n- "
        raise StateError(state.origin or None, lead + "\n- ".join(problems))
    compare = state.compare
    if compare is not None:
        compare = replace(compare, images=tuple(found.get(p, p) for p in compare.images))
    return replace(state, images=tuple(images), model=model, compare=compare, target_choice=target)


def changed_images(state: SessionState, which: list[int] | None = None) -> list[str]:
    """Paths of the images (all, or the indices ``which``) whose bytes differ from the SHA-256 the state recorded."""
    out = []
    for i, ref in enumerate(state.images):
        if which is not None and i not in which:
            continue
        if ref.sha256 and os.path.isfile(ref.path) and file_sha256(ref.path) != ref.sha256:
            out.append(ref.path)
    return out

