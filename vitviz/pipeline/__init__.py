"""One image through one model: image -> preprocess -> capture -> result. Shared by the window, the CLI and batch work.

No Qt here. :mod:`vitviz.pipeline.runner` holds :class:`Pipeline` (a model on its device and precision, turning images
into results; :meth:`Pipeline.open`, the one way to open a model), :mod:`vitviz.pipeline.image_result` what a result
is (:class:`InferenceResult`, :class:`ModelData`, :class:`PreparedImage`), :mod:`vitviz.pipeline.model_opening` how
a model is opened and placed, and :mod:`vitviz.pipeline.references` the similarity targets made from reference
images, patches and stored vectors, and the one reading of a typed target (:func:`parse_target`).
"""

from __future__ import annotations

from vitviz.pipeline.image_result import InferenceResult, ModelData, PreparedImage
from vitviz.pipeline.model_opening import (
    DTYPES,
    capturable,
    cast_model,
    has_full_precision_copy,
    open_adapted,
    placement,
)
from vitviz.pipeline.prompts import prompt_pipeline, split_prompts
from vitviz.pipeline.references import parse_target, reference_target, vector_target
from vitviz.pipeline.runner import Pipeline, run_inference

__all__ = ["DTYPES", "InferenceResult", "ModelData", "Pipeline", "PreparedImage", "capturable", "cast_model",
           "has_full_precision_copy", "open_adapted", "parse_target", "placement", "prompt_pipeline",
           "reference_target", "run_inference", "split_prompts", "vector_target"]
