"""vitviz.analysis: pure functions from captured tensors to maps and statistics. No Qt.

One image's tensors: ``attn [L, H, N, N]``, ``grads [L, H, N, N]``, ``tokens [L+1, N, D]`` (the slices
``Capture.image(b)`` returns); most functions also take a leading batch dimension (``[B, L, H, N, N]``, e.g.
``capture.attentions.transpose(0, 1)``) and return ``[B, ...]`` equal to per-image calls. Maps are ``[gh, gw]``
over the patch tokens, raw (not normalised for display).

Plain torch: float32 and float64, CPU or CUDA, run the same code. float16 / bfloat16 inputs (a model's precision, in
which results keep their layers) are computed in float32: the attention functions promote each layer or row they read
(:func:`vitviz.analysis.basics.compute_dtype`), never the whole stack at once.
"""

from __future__ import annotations

from vitviz._util.lazy import lazy_names

# name -> submodule; imported on first use so that the views (and the window) can be listed without torch
_LAZY = {
    "FUSIONS": "basics", "Head": "basics", "HeadFusion": "basics",
    "ArtefactTokens": "artefacts", "artefact_attention_share": "artefacts", "exclude_tokens": "artefacts",
    "high_norm_tokens": "artefacts", "register_attention_share": "artefacts", "token_norms": "artefacts",
    "top_mass_mask": "masks",
    "attention_entropy": "distance", "mean_attention_distance": "distance", "patch_distances": "distance",
    "embedding_filter_variance": "embeddings", "embedding_filters": "embeddings",
    "position_embedding_similarity": "embeddings",
    "rope_kernel": "embeddings", "rope_kernel_row": "embeddings", "token_similarity": "embeddings",
    "map_to_image": "mapping", "upsample": "mapping",
    "relevance": "lrp",
    "PCAFit": "pca", "PatchPCA": "pca", "feature_pca": "pca", "fit_feature_pca": "pca", "project_feature_pca": "pca",
    "whitened_pca": "pca",
    "gradcam_map": "legrad_gradcam", "legrad_map": "legrad_gradcam",
    "attention_rollout": "attention_maps", "cls_attention": "attention_maps", "gradient_rollout": "attention_maps",
    "query_attention": "attention_maps", "rollout_transitions": "attention_maps",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_names("vitviz.analysis", _LAZY, globals())
