"""The first three principal components of the patch tokens after a layer, as R, G and B (DINO / DINOv2's feature
PCA; :func:`vitviz.analysis.feature_pca`). Needs no target and no gradients.

Drawn as colours of its own (``rgb``): :meth:`compute_rgb` gives the RGBA picture the canvas and the figures draw
without colormap or colour bar; :meth:`compute` gives the first component's projection, the value read out under
the cursor. The components are fitted on the shown image's own patch tokens.
"""

from __future__ import annotations

import numpy as np

from vitviz import analysis as A
from vitviz.views.base import TokenView, as_grid


class FeaturePCA(TokenView):
    key = "feature_pca"
    title = "Feature PCA"
    reads = frozenset({"layer", "mask_background"})
    quantity = "first principal component"
    unit = "projection"
    signed = True
    rgb = True

    def _pca(self, result, options):
        return A.feature_pca(result.tokens[options.layer + 1], grid=result.grid,
                             num_prefix_tokens=result.num_prefix_tokens,
                             mask_background=bool(options.mask_background))

    def compute(self, result, options):
        return as_grid(self._pca(result, options).scores[..., 0], result.grid)

    def compute_rgb(self, result, options):
        pca = self._pca(result, options)
        alpha = pca.foreground.to(pca.rgb.dtype)[..., None]
        return np.ascontiguousarray(np.concatenate([pca.rgb.numpy(), alpha.numpy()], axis=-1), dtype=np.float32)

    def caption_parts(self, result, options):
        parts = super().caption_parts(result, options)
        if options.mask_background:
            parts.append("background masked")
        return parts

    def rgb_text(self, options):
        where = "the patch embeddings" if options.layer < 0 else f"layer {options.layer}"
        return f"first three principal components of the patch tokens at {where} → R, G, B"


VIEW = FeaturePCA()
