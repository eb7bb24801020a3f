"""The first three principal components of the patch tokens after a layer, as R, G and B (DINO / DINOv2's feature
PCA; :func:`vitviz.analysis.feature_pca`). Needs no target and no gradients.

Drawn as colours of its own (``rgb``): :meth:`compute_rgb` gives the RGBA picture the canvas and the figures draw
without colormap or colour bar; :meth:`compute` gives the first component's projection, the value read out under
the cursor. Both come from one fit (:meth:`FeaturePCA.fitted`, a :class:`vitviz.analysis.PatchPCA`): the session
makes it once per result and options and reads the map and the picture from it (:meth:`map_of`, :meth:`rgb_of`).

The components are fitted on the shown image's own patch tokens, or (option ``pca_joint``, "Fit over all open
images") on those of every open image at that layer: the session hands the joint fit
(:func:`vitviz.analysis.fit_feature_pca`, made over the tokens it holds of the open images) to :meth:`fitted`. Without
one (a document that holds no other image) the image's own fit is used.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vitviz import analysis as A
from vitviz.views.base import TokenView, as_grid


class FeaturePCA(TokenView):
    key = "feature_pca"
    title = "Feature PCA"
    reads = frozenset({"layer", "mask_background", "pca_joint"})
    quantity = "first principal component"
    unit = "projection"
    signed = True
    rgb = True

    def fitted(self, result, options, fit: Any = None) -> Any:
        """The image's patch tokens at the options' layer coloured by ``fit`` (a
        :class:`vitviz.analysis.PCAFit`, e.g. fitted over every open image), or by a fit of its own (None)."""
        tokens = result.tokens[options.layer + 1]
        if fit is not None:
            return A.project_feature_pca(fit, tokens, grid=result.grid, num_prefix_tokens=result.num_prefix_tokens)
        return A.feature_pca(tokens, grid=result.grid, num_prefix_tokens=result.num_prefix_tokens,
                             mask_background=bool(options.mask_background))

    def map_of(self, pca: Any, result) -> np.ndarray:
        """The map (the first component's projection, ``[gh, gw]``) of a fit."""
        return as_grid(pca.scores[..., 0], result.grid)

    def rgb_of(self, pca: Any) -> np.ndarray:
        """The picture (RGBA ``[gh, gw, 4]``, alpha 0 on a masked background) of a fit."""
        alpha = pca.foreground.to(pca.rgb.dtype)[..., None]
        return np.ascontiguousarray(np.concatenate([pca.rgb.numpy(), alpha.numpy()], axis=-1), dtype=np.float32)

    def compute(self, result, options):
        return self.map_of(self.fitted(result, options), result)

    def compute_rgb(self, result, options):
        return self.rgb_of(self.fitted(result, options))

    def caption_parts(self, result, options):
        parts = super().caption_parts(result, options)
        if options.mask_background:
            parts.append("background masked")
        return parts

    def file_stem(self, result, options):
        stem = super().file_stem(result, options)
        return stem + "_joint" if options.pca_joint else stem

    def rgb_text(self, options):
        where = "the patch embeddings" if options.layer < 0 else f"layer {options.layer}"
        return f"first three principal components of the patch tokens at {where} → R, G, B"


VIEW = FeaturePCA()
