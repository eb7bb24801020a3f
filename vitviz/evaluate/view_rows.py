"""The rows of a faithfulness table and the window's views: which view and options a row name (a view key, or
``"cls_last"``) stands for, so that the maps are the window's own and a row can be shown in the window."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vitviz import views
from vitviz.views import View
from vitviz.views.options import ViewOptions
from vitviz.views.presets import PRESETS


def view_options(name: str, num_layers: int) -> tuple[str, dict[str, Any]]:
    """The window's view and option changes that show the map of the row ``name`` of a
    :class:`~vitviz.evaluate.outcomes.FaithfulnessTable`: every option the view reads at the value the table's map
    was computed with, and ``ignore_artefacts`` for maps of attention; e.g. ``("cls", {"layer": L - 1, "head":
    "mean", "ignore_artefacts": False})`` for ``"cls_last"`` and ``("rollout", {"discard_ratio": 0.0, "head_fusion":
    "mean", "ignore_artefacts": False, "start_layer": 0})`` (the table takes the maps at the default options, so the
    user's own rollout settings are replaced)."""
    view, opts, _ = resolve_view(name, num_layers)
    changes = {n: getattr(opts, n) for n in sorted(view.reads) if n != "target"}
    if view.uses_attention:
        changes["ignore_artefacts"] = opts.ignore_artefacts
    return view.key, changes


def resolve_view(name: str, num_layers: int, options: ViewOptions | None = None) -> tuple[View, ViewOptions, str]:
    """``(view, options, title)`` for a name: a view key of :mod:`vitviz.views`, or a preset of
    :data:`vitviz.views.presets.PRESETS` such as ``"cls_last"`` (the ``cls`` view at the last layer, mean of
    heads)."""
    preset = PRESETS.get(name)
    if preset is not None:
        view = views.get(preset.view)
        return view, replace(options or ViewOptions(), **preset.changes(num_layers)), preset.title(view.title)
    view = views.get(name)  # ValueError naming the valid keys
    opts = replace(options or ViewOptions(), view=view.key)
    return view, opts, view.title

