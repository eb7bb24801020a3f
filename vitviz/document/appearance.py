"""How the session's current map is drawn: artefact tokens, the colour scale, the mass mask, the title. No Qt.

A mix-in of :class:`vitviz.document.session.Session` (it reads ``self.result``, ``self.options``, ``self.view`` and caches
in ``self._cache``); kept apart so that the document (images, options, maps) and its appearance each have one room.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from vitviz.analysis.artefacts import ArtefactTokens
    from vitviz.render.scales import ColourScale
    from vitviz.views import View


class Appearance:
    """Artefact tokens, colour scale, mask and title of the current view (see :class:`vitviz.document.session.Session`)."""

    # ------------------------------------------------------------------ artefact tokens
    def artefacts(self) -> "ArtefactTokens | None":
        """The high-norm patch tokens of the current result (:func:`vitviz.analysis.high_norm_tokens`, defaults)."""
        r = self.result
        if r is None:
            return None

        def find():
            from vitviz import analysis as A

            return A.high_norm_tokens(r.tokens, num_prefix_tokens=r.num_prefix_tokens)

        return self._cache.get_or(("artefacts",), find)

    def artefact_grid(self) -> np.ndarray | None:
        """bool ``[gh, gw]``: the flagged patches (None without a result)."""
        a = self.artefacts()
        if a is None:
            return None
        return np.asarray(a.mask, dtype=bool).reshape(self.result.grid)

    def artefact_patches(self) -> list[tuple[int, int]]:
        """(row, col) of every flagged patch, row-major."""
        g = self.artefact_grid()
        return [] if g is None else [(int(r), int(c)) for r, c in zip(*np.nonzero(g))]

    def artefact_text(self) -> str:
        """For the status bar: how many patches are flagged, where, and how far above the median norm."""
        a = self.artefacts()
        cells = self.artefact_patches()
        if a is None:
            return ""
        reg = self.register_share()
        reg_text = "" if reg is None else (f" · registers take {reg:.0%} of [CLS] attention at layer "
                                           f"{self.attention_layer()}")
        if not cells:
            return "no artefact tokens" + reg_text
        shown = ", ".join(f"({r}, {c})" for r, c in cells[:6]) + (" …" if len(cells) > 6 else "")
        return f"{len(cells)} artefact token{'s' * (len(cells) > 1)} (norm > {a.ratio:g}× median): {shown}" + reg_text

    def register_share(self) -> float | None:
        """For a model with registers: the share of the [CLS] row's attention (mean of heads) that goes to the
        register tokens at the attention layer shown; None without registers."""
        r = self.result
        if r is None or not r.num_registers or r.num_prefix_tokens <= r.num_registers:
            return None

        def shares():
            from vitviz import analysis as A

            return np.asarray(A.register_attention_share(r.attentions, num_registers=r.num_registers,
                                                         num_prefix_tokens=r.num_prefix_tokens), dtype=float)

        return float(self._cache.get_or(("register-share",), shares)[self.attention_layer()])

    def result_for(self, view: "View", options: Any) -> Any:
        """The result ``view`` computes from: the captured one, or, with "ignore artefact tokens", one whose
        attention has the flagged patches' key columns removed and its rows renormalised
        (:func:`vitviz.analysis.exclude_tokens`)."""
        r = self.result
        if not view.ignores_artefacts(options):
            return r
        grid = self.artefact_grid()
        if grid is None or not grid.any():
            return r
        return self._cache.get_or(("excluding-artefacts",), lambda: r.excluding(grid.reshape(-1)))

    # ------------------------------------------------------------------ colour scale
    def levels(self) -> "ColourScale | None":
        """The colour scale of the current map under the options' scale mode (None without a map)."""
        if self.current_map() is None:
            return None
        return self._cache.get_or(("levels", self.options), self._levels)  # the window asks twice per redraw

    def _levels(self) -> "ColourScale":
        from vitviz.render.scales import scale_for

        m = self.current_map()
        o, v = self.options, self.view
        exclude = None
        if o.scale_excludes_artefacts:
            g = self.artefact_grid()
            if g is not None and g.any() and g.shape == m.shape:
                exclude = g
        kw = dict(signed=True if v.signed else None, log=o.log_scale and not v.signed, percentile=o.percentile,
                  cmap=o.cmap)
        if o.scale == "fixed":
            return scale_for(m, mode="fixed", fixed=o.fixed_range, **kw)
        stack = self.scale_stack()
        if stack is not None:
            ex = None if exclude is None else np.broadcast_to(exclude, stack.shape)
            return scale_for(m, mode="shared", shared=stack, exclude=ex, **kw)
        mode = "per_map" if o.scale == "per_map" else "robust"
        return scale_for(m, mode=mode, exclude=exclude, **kw)

    def scale_stack(self) -> np.ndarray | None:
        """The maps a shared scale spans: ``[n, gh, gw]`` over the layer slider's range ("layers") or over the
        heads ("heads"); None when the mode is not shared or the view does not vary along that axis."""
        o, v, r = self.options, self.view, self.result
        if r is None:
            return None
        if o.scale == "layers" and v.slider is not None:
            lo, hi = v.layer_range(r)
            maps = [self.map_for(v, replace(o, **{v.slider: i})) for i in range(lo, hi + 1)]
        elif o.scale == "heads" and "head" in v.reads:
            maps = [self.map_for(v, replace(o, head=h)) for h in range(r.num_heads)]
        else:
            return None
        maps = [m for m in maps if m is not None]
        return np.stack(maps) if maps else None

    def scale_text(self) -> str:
        """The scale mode in words, for the colour bar's tooltip and captions."""
        o = self.options
        text = {"robust": f"robust ({o.percentile:g}th percentile)", "per_map": "min–max of this map",
                "layers": "shared across layers", "heads": "shared across heads", "fixed": "fixed"}[o.scale]
        if o.log_scale:
            text += ", log"
        if o.scale_excludes_artefacts and self.artefact_patches():
            text += ", artefact tokens excluded"
        return text

    def colormap(self, scale: "ColourScale | None" = None) -> str:
        """The colormap the map is drawn with: the user's, or a diverging one centred at 0 for signed quantities."""
        scale = self.levels() if scale is None else scale
        return scale.cmap if scale is not None else self.options.cmap

    def quantity_text(self) -> str:
        """The colour bar's label: the view's quantity and unit, e.g. ``"relevance (a.u.)"``."""
        v = self.view
        return f"{v.quantity} ({v.unit})" if v.unit else v.quantity

    def reads_pool_row(self) -> bool:
        """Whether the current view reads the attention-pooling head's row in place of [CLS] (SigLIP's "MAP" head:
        the [CLS] view and the [CLS]-based views of a model that pools with attention)."""
        from vitviz.views.base import pool_row

        r, v = self.result, self.view
        return (r is not None and "query" not in v.reads and (v.needs_cls or v.key == "cls")
                and pool_row(r) is not None)

    def shows_query(self) -> bool:
        """Whether the selected-patch box means something in the current view (it reads the query patch, or the
        model has no [CLS] so the patch stands in for it, unless an attention-pooling head's row does)."""
        r, v = self.result, self.view
        return r is not None and ("query" in v.reads or (r.num_prefix_tokens == 0 and "head" in v.reads
                                                         and not self.reads_pool_row()))

    # ------------------------------------------------------------------ mask
    def mask(self) -> np.ndarray | None:
        """bool ``[gh, gw]``: the patches holding the top ``mask_keep`` of the map's mass (None when off)."""
        m = self.current_map()
        keep = self.options.mask_keep
        if m is None or keep <= 0:
            return None

        def make():
            from vitviz import analysis as A

            return np.asarray(A.top_mass_mask(m, keep=keep), dtype=bool)

        return self._cache.get_or(("mask", keep) + self.view.cache_key(self.options), make)

    # ------------------------------------------------------------------ title
    def title(self) -> str:
        """What the canvas shows, e.g. ``"Relevance (Chefer et al.) · Egyptian cat · start layer 0 · mean of
        heads"``, plus the mask when one is drawn."""
        text = self.describe_view()
        if self.options.mask_keep > 0:
            text += f" · top {self.options.mask_keep:.0%} of mass"
        return text
