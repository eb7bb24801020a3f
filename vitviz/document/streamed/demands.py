"""What a streamed pass must gather so that the maps asked for can be made: from ``(view, options)`` pairs to a
:class:`~vitviz.views.stream_plan.StreamPlan` (attention rows of some layers, tokens of some layers, rollout /
relevance / gradient-rollout products and their start layers, LeGrad poolings, GradCAM, per-layer statistics). Each
view adds what it reads (:meth:`vitviz.views.View.plan_stream`, from its input kind in :mod:`vitviz.views.kinds`);
nothing here knows a view by name. A view vitviz cannot make from a stream (one without a streamed form, or "ignore
artefact tokens", which needs the artefacts of the later layers before the first layer's attention) raises
:class:`NotStreamable`: the caller then takes the stored path. No Qt.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vitviz.views.base import View
from vitviz.views.options import ViewOptions
from vitviz.views.stream_plan import NotStreamable, StreamPlan

__all__ = ["NotStreamable", "StreamPlan", "check_streamable", "plan_streaming"]


def check_streamable(view: View, options: ViewOptions) -> None:
    """Raise :class:`NotStreamable` for a map no stream can make whatever the view: "ignore artefact tokens" on a
    map of attention."""
    if view.uses_attention and view.ignores_artefacts(options):
        raise NotStreamable(f"{view.key} with 'ignore artefact tokens' needs every layer's attention once the "
                            "artefacts are known")


def plan_streaming(result: Any, demands: Iterable[tuple[View, ViewOptions]], *,
                   statistics: bool = False) -> StreamPlan:
    """The plan that makes every ``(view, options)`` of ``demands`` for ``result`` (a result's shape: a streamed
    result before its pass).

    Raises:
        NotStreamable: a demand no stream can make (naming the view and why).
    """
    plan = StreamPlan(statistics=bool(statistics))
    for view, o in demands:
        check_streamable(view, o)
        view.plan_stream(plan, result, o)
    return plan
