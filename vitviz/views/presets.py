"""The default lists of views and the named presets, in one place. No Qt, no torch, no numpy (the command line's
parser and the window's faithfulness tab import it before any model).

:data:`STANDARD_VIEWS` are the four maps that explain a prediction (``vitviz export`` and the Compare window show
them by default; LeGrad and GradCAM are asked for by name: ``--views legrad,gradcam``); :data:`FAITHFULNESS_VIEWS`
the maps whose faithfulness ``vitviz evaluate`` and the window's faithfulness tab measure by default: those four
(the [CLS] attention at the last layer) and LeGrad and GradCAM at their default options (LeGrad from the last two
layers, mean pooling; GradCAM on the last block's ``norm1``). A preset (:class:`Preset`) is a view at fixed options
under its own name, such as :data:`CLS_LAST`: the [CLS] attention of the last layer, mean of heads (Abnar & Zuidema's
baseline).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CLS_LAST", "FAITHFULNESS_VIEWS", "FIRST_VIEW", "HEAD_VIEW", "PRESETS", "PROMPT_VIEWS", "STANDARD_VIEWS",
           "Preset"]


@dataclass(frozen=True)
class Preset:
    """A view at fixed options, under its own name.

    Attributes:
        key: the name (``"cls_last"``), used where a view key is (``--views``, faithfulness rows).
        view: the view key it shows.
        note: what it fixes, in words (``"last layer, mean of heads"``; titles add it to the view's title).
        last_layer: the layer is the model's last.
        head: the head option it fixes (None: the user's).
    """

    key: str
    view: str
    note: str
    last_layer: bool = False
    head: int | str | None = None

    def changes(self, num_layers: int) -> dict[str, Any]:
        """The option changes that show it on a model with ``num_layers`` layers (``view`` included)."""
        out: dict[str, Any] = {"view": self.view}
        if self.last_layer:
            out["layer"] = num_layers - 1
        if self.head is not None:
            out["head"] = self.head
        return out

    def title(self, view_title: str) -> str:
        """``"Attention from [CLS] (last layer, mean of heads)"`` from the view's title."""
        return f"{view_title} ({self.note})"


CLS_LAST = "cls_last"
PRESETS: dict[str, Preset] = {
    CLS_LAST: Preset(CLS_LAST, "cls", "last layer, mean of heads", last_layer=True, head="mean"),
}
STANDARD_VIEWS: tuple[str, ...] = ("cls", "rollout", "grad_rollout", "relevance")
FAITHFULNESS_VIEWS: tuple[str, ...] = (CLS_LAST, "rollout", "grad_rollout", "relevance", "legrad", "gradcam")
PROMPT_VIEWS: tuple[str, ...] = ("legrad",)
"""The views of a model with prompts: an export with ``--text`` (one map per prompt), the window's view once prompts
are typed."""
FIRST_VIEW = "rollout"
"""The window's view at the app's first start (no view remembered): attention rollout reads every layer and head into
one map of what reaches [CLS], so it explains itself; layer-0 [CLS] attention (the option table's default) is
scattered."""
HEAD_VIEW = "cls"
"""The view a clicked head tile shows when the current view reads no head: that head's [CLS] attention."""
