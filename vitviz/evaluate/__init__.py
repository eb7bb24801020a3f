"""Faithfulness of saliency maps, measured on the model itself. No Qt.

Three measurements, each a plain function of a model, one preprocessed image and a map over its patch grid:

* perturbation curves (:func:`perturbation_curve`: deletion, insertion, negative; Petsiuk et al. 2018, Chefer et
  al. 2021) and the random baseline (:func:`random_baseline`), formulas in :mod:`vitviz.evaluate.perturbation`;
* model randomisation (:func:`randomisation_check`; Adebayo et al. 2018): :mod:`vitviz.evaluate.randomisation`;
* :func:`evaluate_views` (:mod:`vitviz.evaluate.run`) puts them together for the window and ``vitviz evaluate``: the
  maps of several views from one captured result, their deletion and insertion curves and the random baseline, in one
  batched run with progress and cancel.

The rest: :mod:`~vitviz.evaluate.protocol` (modes, baselines, the default views, the cancel error; no torch),
:mod:`~vitviz.evaluate.metrics` (AUC, Spearman), :mod:`~vitviz.evaluate.outcomes` (the result types and the text
table), :mod:`~vitviz.evaluate.checks` (argument checks), :mod:`~vitviz.evaluate.view_rows` (a table row as the
window's view and options) and :mod:`~vitviz.evaluate.report` (mean over images, CSV).

Localisation against ground truth (docs/localisation.md): :mod:`~vitviz.evaluate.localisation` (the metrics in the
model's input crop), :mod:`~vitviz.evaluate.ground_truth` (masks, ``gtsegs_ijcv.mat``, ImageNet-S, VOC, COCO,
OpenImages points); :func:`evaluate_views` takes ``ground_truth=`` (and ``curves=False``), :func:`localise_images`
scores many images from one streamed pass.

The names below are imported on first use, so that ``import vitviz.evaluate`` (and its torch-free constants) does not
import torch.
"""

from __future__ import annotations

from vitviz._util.lazy import lazy_names

_NAMES = {
    **dict.fromkeys(("BASELINES", "BATCH_BUDGET", "DEFAULT_VIEWS", "MAX_AUTO_BATCH", "MODES", "BaselineKind",
                     "Cancel", "EvaluationCancelled", "Mode", "Progress"), "protocol"),
    **dict.fromkeys(("curve_auc", "rank_average", "spearman"), "metrics"),
    **dict.fromkeys(("FaithfulnessTable", "PerturbationCurve", "RandomBaseline", "RandomisationCheck", "ViewScore"),
                    "outcomes"),
    "model_patch_size": "checks",
    **dict.fromkeys(("auto_batch_size", "baseline_image", "gaussian_blur", "perturbation_curve", "random_baseline",
                     "step_counts"), "perturbation"),
    "randomisation_check": "randomisation",
    "view_options": "view_rows",
    **dict.fromkeys(("evaluate_views", "localise_images"), "run"),
    **dict.fromkeys(("localisation_scores", "map_in_crop", "mask_in_crop", "average_precision"), "localisation"),
    **dict.fromkeys(("GroundTruth", "MaskFolder", "SegmentationMat", "BoxFolder", "CocoBoxes", "PointLabels"),
                    "ground_truth"),
    **dict.fromkeys(("LOCALISATION_METRICS", "IGNORE"), "protocol"),
    "LocalisationScores": "outcomes",
    **dict.fromkeys(("CSV_COLUMNS", "check_writable", "format_mean_table", "mean_over_images", "write_csv"), "report"),
}

__all__ = [
    "BASELINES", "DEFAULT_VIEWS", "MODES", "auto_batch_size", "baseline_image", "check_writable", "curve_auc",
    "evaluate_views", "EvaluationCancelled", "FaithfulnessTable", "format_mean_table", "gaussian_blur",
    "mean_over_images", "model_patch_size", "perturbation_curve", "PerturbationCurve", "random_baseline",
    "RandomBaseline", "randomisation_check", "RandomisationCheck", "rank_average", "spearman", "view_options",
    "ViewScore", "write_csv", "localise_images", "localisation_scores", "LocalisationScores", "LOCALISATION_METRICS",
    "GroundTruth", "MaskFolder", "SegmentationMat", "BoxFolder", "CocoBoxes", "PointLabels",
]

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
