"""Reopening a session: make a :class:`~vitviz.document.session.Session` show a state (:func:`apply_state`), give a
reopened model the preprocessing the state recorded (:func:`with_preprocess`), and rebuild the whole session
headlessly (:func:`reproduce`: the CLI, tests; the window does the same on its worker). No Qt."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from vitviz.document.session import Session
from vitviz.document.state.location import locate
from vitviz.document.state.schema import SessionState
from vitviz.imaging import load_image

if TYPE_CHECKING:  # pragma: no cover
    from vitviz.pipeline import InferenceResult, Pipeline

__all__ = ["apply_state", "reproduce", "state_pipeline", "state_target", "with_preprocess"]


def with_preprocess(model: Any, state: SessionState) -> str | None:
    """Give a reopened ``model`` the state's preprocessing when its own differs; returns a note saying so."""
    spec = getattr(model, "spec", None)
    p = state.preprocess
    if p is None or spec is None or spec.preprocess == p:
        return None
    model.spec = spec.replace(preprocess=p)
    return "the model prepares images as when the session was saved (its file says otherwise)"


def state_target(state: SessionState, pipeline: Pipeline) -> tuple[Any, str]:
    """``(target, note)``: the target a reopened session runs its image with (a class index, ``"top"``, or a target
    made for ``pipeline``: a similarity target's reference read and run, a prompt encoded by the model's text tower),
    and a note when it cannot be the saved one (a function, saved by its name only; a reference image that had no
    file): then the top class.

    Raises:
        TargetError: the saved target cannot be made for this model (a reference that cannot be read, a patch
            outside its grid, a vector of another length ...), naming it.
    """
    c = state.target_choice
    if c is None:
        return ("top" if state.target is None else state.target), ""
    from vitviz.capture.model_head import is_feature_model

    instead = ("the gradient views wait for a similarity target" if is_feature_model(pipeline.model) else
               "the top class is shown instead")
    if c.kind == "callable":
        return "top", f"its target, the function {c.name or '(unnamed)'}, was saved by its name only: {instead}"
    if c.kind == "named":
        return "top", f"its target ({c.name or 'unnamed'}) was made in Python and saved by its name only: {instead}"
    if c.is_similarity and not os.path.isabs(c.path):
        return "top", f"its target ({c.describe()}) was made from an image without a file: {instead}"
    return c.build(pipeline), ""


def state_pipeline(state: SessionState, pipeline: Pipeline, progress: Any = None, tower: Any = None) -> Pipeline:
    """``pipeline`` (the image tower's), or, for a session with prompts, the zero-shot pipeline over them (the text
    tower opened from the model's source unless ``tower`` is given; :func:`vitviz.pipeline.prompt_pipeline`).

    Raises:
        TextTowerError: the model has no text tower (why); TargetError: a prompt the tower cannot take.
    """
    if not state.prompts:
        return pipeline
    from vitviz.pipeline import prompt_pipeline

    return prompt_pipeline(pipeline, list(state.prompts), progress=progress, tower=tower)


def apply_state(state: SessionState, session: Session, result: InferenceResult) -> None:
    """Make ``session`` show ``state`` with ``result`` (the state's image through its model and target): the image
    list, the options (clamped to the model like any option the window sets) and the result."""
    session.images = list(state.paths)
    session.options = state.options
    session.set_result(result)


def reproduce(state: SessionState, *, pipeline: Pipeline | None = None, device: str = "cpu",
              precision: str | None = None) -> tuple[Session, Pipeline]:
    """Rebuild the session ``state`` describes, headlessly: open its model (unless ``pipeline`` is given), run its
    image with its target, set its options.

    Args:
        pipeline: a loaded model to use instead of opening ``state.model``.
        device, precision: where to run an opened model (default precision: the state's when available).

    Returns:
        ``(session, pipeline)``.

    Raises:
        StateError: a file is missing (:func:`locate`); CheckpointError, ImageError ...: the model or the image
            cannot be read.
    """
    from vitviz.pipeline import Pipeline  # torch: imported when a session is reopened, not when one is read

    state = locate(state, check_model=pipeline is None)
    if pipeline is None:  # the state's precision where the device has it, else fp32 (Pipeline.open's policy)
        pipeline = Pipeline.open(state.model, device=device, precision=precision or state.precision, show_bar=False)
        with_preprocess(pipeline.model, state)
    pipeline = state_pipeline(state, pipeline)
    target, _note = state_target(state, pipeline)  # (a function or a pasted reference: the top class)
    result = pipeline.run(load_image(state.image.path), source=state.image.path, target=target)
    session = Session()
    apply_state(state, session, result)
    return session, pipeline
