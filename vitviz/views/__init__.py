"""The views: what the canvas can show, and the options of what the user looks at. No Qt here.

A view is a small object (see :class:`View`) that declares its name, its keyboard shortcut, which options it reads
(layer, head, query patch, rollout options, target), how to compute its map from an
:class:`~vitviz.pipeline.InferenceResult`, its caption, the quantity and unit of its colour bar, and why it is
unavailable for a model. The window builds its view list, shortcuts, enabled controls and export names from the
registry (:mod:`vitviz.views.view_registry`: :func:`register`, :func:`get`, :func:`all_views`); the session computes
and caches maps through it.

:mod:`vitviz.views.options` holds :class:`ViewOptions` and the one table of every option (name, kind, default,
choices or range) that the session's checks, the session file, the window's settings and the export command's flags
come from; :mod:`vitviz.views.presets` the default view lists and presets such as last-layer [CLS]. Each view
subclasses the kind of input it reads (:mod:`vitviz.views.kinds`: one layer's attention rows, one layer's tokens, a
product over the layers, the whole result), which says how a streamed pass gathers it
(:mod:`vitviz.views.stream_plan`).

The names below are imported on first use (the presets and the option table without the view modules).
"""

from __future__ import annotations

from vitviz._util.lazy import lazy_names

_NAMES = {
    "View": "base", "as_grid": "base", "head_text": "base", "patch_text": "base",
    "ResultView": "kinds", "RowView": "kinds", "TokenView": "kinds", "WholeAttentionView": "kinds",
    "NotStreamable": "stream_plan", "Product": "stream_plan", "StreamPlan": "stream_plan",
    "all_views": "view_registry", "get": "view_registry", "register": "view_registry", "shortcut": "view_registry",
    "unregister": "view_registry",
    "HEAD_REDUCTIONS": "options", "Option": "options", "ViewOptions": "options", "all_options": "options",
    "option": "options", "readable_options": "options", "register_option": "options",
    "unregister_option": "options",
    "CLS_LAST": "presets", "FAITHFULNESS_VIEWS": "presets", "PRESETS": "presets", "STANDARD_VIEWS": "presets",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
