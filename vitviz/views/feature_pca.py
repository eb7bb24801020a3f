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

Which tokens: the output of the options' block; at the last block, the tokens after the model's final norm, as the
DINO / DINOv2 / DINOv3 demos read them (``forward_features`` / ``x_norm_patchtokens``), when the result's model data
has that norm (:meth:`vitviz.pipeline.ModelData.after_final_norm`: vitviz's ViT); the caption says which. A joint
fit reads the open images' block outputs (before the final norm at every layer) and says so.

Colours (option ``pca_style``): ``"vitviz"``, each component min-max scaled over the fitted tokens (the DINO / DINOv2
demos); ``"dinov3"``, DINOv3's own (:func:`vitviz.analysis.whitened_pca`: a whitened PCA fitted on the foreground
patches, ``sigmoid(2x)``; the foreground is vitviz's mask when "Mask the background" is on, otherwise every patch).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vitviz import analysis as A
from vitviz.views.base import as_grid
from vitviz.views.kinds import TokenView


class FeaturePCA(TokenView):
    key = "feature_pca"
    title = "Feature PCA"
    reads = frozenset({"layer", "mask_background", "pca_joint", "pca_style"})
    quantity = "first principal component"
    unit = "projection"
    signed = True
    rgb = True

    @staticmethod
    def after_norm(result, options) -> bool:
        """Whether the PCA reads the tokens after the final norm: the last layer, when the result's model data has
        the norm."""
        data = getattr(result, "model_data", None)
        return options.layer == result.num_layers - 1 and data is not None and data.final_norm is not None

    def tokens_of(self, result, options) -> tuple[Any, bool]:
        """The tokens the PCA reads at the options' layer, and whether they are after the final norm."""
        tokens = result.tokens[options.layer + 1]
        if self.after_norm(result, options):
            return result.model_data.after_final_norm(tokens), True
        return tokens, False

    def fitted(self, result, options, fit: Any = None) -> Any:
        """The image's patch tokens at the options' layer coloured by ``fit`` (a
        :class:`vitviz.analysis.PCAFit`, e.g. fitted over every open image, of the block outputs), or by a fit of
        its own (None), in the options' colours."""
        if fit is not None:
            return A.project_feature_pca(fit, result.tokens[options.layer + 1], grid=result.grid,
                                         num_prefix_tokens=result.num_prefix_tokens)
        tokens, _ = self.tokens_of(result, options)
        own = A.feature_pca(tokens, grid=result.grid, num_prefix_tokens=result.num_prefix_tokens,
                            mask_background=bool(options.mask_background))
        if getattr(options, "pca_style", "vitviz") == "dinov3":
            return A.whitened_pca(tokens, grid=result.grid, num_prefix_tokens=result.num_prefix_tokens,
                                  foreground=own.foreground if options.mask_background else None)
        return own

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
        if result is not None and options.layer == result.num_layers - 1:
            joint = bool(options.pca_joint)
            after = not joint and self.after_norm(result, options)
            parts.append("tokens after the final norm" if after else "tokens before the final norm")
        if getattr(options, "pca_style", "vitviz") == "dinov3" and not options.pca_joint:
            parts.append("DINOv3 colours: whitened PCA, sigmoid(2x)")
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
