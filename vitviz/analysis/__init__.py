"""vitviz.analysis: pure functions from captured tensors to maps and statistics. No Qt.

One image's tensors: ``attn [L, H, N, N]``, ``grads [L, H, N, N]``, ``tokens [L+1, N, D]`` (the slices
``Capture.image(b)`` returns); most functions also take a leading batch dimension (``[B, L, H, N, N]``, e.g.
``capture.attentions.transpose(0, 1)``) and return ``[B, ...]`` equal to per-image calls. Maps are ``[gh, gw]``
over the patch tokens, raw (not normalised for display).

Plain torch: float32 and float64, CPU or CUDA, run the same code.
"""

from vitviz.analysis._common import FUSIONS, Head, HeadFusion
from vitviz.analysis.distance import attention_entropy, mean_attention_distance, patch_distances
from vitviz.analysis.embeddings import embedding_filters, position_embedding_similarity, token_similarity
from vitviz.analysis.mapping import map_to_image, upsample
from vitviz.analysis.relevance import relevance
from vitviz.analysis.sweep import ImageAnalyses, analyse_image
from vitviz.analysis.rollout import (
    attention_rollout,
    cls_attention,
    gradient_rollout,
    query_attention,
    rollout_transitions,
)

__all__ = [
    "FUSIONS", "Head", "HeadFusion", "ImageAnalyses", "analyse_image", "attention_entropy", "attention_rollout", "cls_attention", "embedding_filters",
    "gradient_rollout", "map_to_image", "mean_attention_distance", "patch_distances", "position_embedding_similarity",
    "query_attention", "relevance", "rollout_transitions", "token_similarity", "upsample",
]
