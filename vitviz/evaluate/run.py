"""The faithfulness table of one image: several views' maps from one captured result, their deletion and insertion
curves and the random baseline, in one batched run with progress and cancel (the window's faithfulness tab and
``vitviz evaluate``). An image (not a result) of vitviz's own ViT goes through a streamed pass
(:func:`vitviz.document.streamed.stream_images`: one layer's attention in memory at a time; the maps equal the stored
capture's), any other model through the stored capture. No Qt."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from PIL import Image
from torch import nn

from vitviz import views as registry
from vitviz.capture.model_head import is_feature_model
from vitviz.capture.streaming import streamable
from vitviz.capture.targets import ClassTarget, SimilarityTarget, as_target
from vitviz.document.streamed import NotStreamable, stream_images
from vitviz.evaluate.checks import check_choice, check_saliency, check_seeds, check_steps, own_pipeline
from vitviz.evaluate.ground_truth import GroundTruth, check_size
from vitviz.evaluate.localisation import localisation_scores, mask_in_crop
from vitviz.evaluate.outcomes import FaithfulnessTable, ViewScore
from vitviz.evaluate.perturbation import Perturber, step_counts
from vitviz.evaluate.protocol import BASELINES, DEFAULT_VIEWS, BaselineKind, Cancel, Progress
from vitviz.evaluate.view_rows import resolve_view
from vitviz.imaging import load_image
from vitviz.model.preprocess import CropGeometry
from vitviz.pipeline import InferenceResult, Pipeline
from vitviz.views.presets import PRESETS


def evaluate_views(
    pipeline_or_model: Pipeline | nn.Module,
    image: Any,
    views: Sequence[str] = DEFAULT_VIEWS,
    *,
    steps: int = 20,
    baseline: BaselineKind = "mean",
    target: Any = None,
    seeds: int = 10,
    seed: int = 0,
    batch_size: int | None = None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
    keep_graph: bool | None = None,
    ground_truth: GroundTruth | None = None,
    object_class: int | None = None,
    curves: bool = True,
    tolerance: float = 0.0,
) -> FaithfulnessTable:
    """Deletion and insertion curves of several views' maps of one image, and the random baseline; with
    ``ground_truth``, each map's localisation scores too (:mod:`vitviz.evaluate.localisation`).

    The maps come from ONE captured result (:meth:`vitviz.pipeline.Pipeline.run`), computed by the view registry
    at the default view options, so they are the window's maps; ``"cls_last"`` is the ``cls`` view at the last
    layer with the mean of the heads. Every curve of the table (2 per view, ``2 x seeds`` for the random baseline)
    is evaluated in one batched run, identical images once: about ``2 (steps + 1) (len(views) + seeds)`` forwards.

    Args:
        pipeline_or_model: a :class:`~vitviz.pipeline.Pipeline`, or a vitviz ViT with a spec (run on its own
            device and dtype; it is put in eval mode).
        image: a PIL image, a :class:`~vitviz.imaging.LoadedImage`, a path, or an
            :class:`~vitviz.pipeline.InferenceResult` of this model (reused: no new capture unless ``target``
            asks for another class).
        views: view keys (``vitviz.views``) and/or ``"cls_last"``. A view the model cannot show (e.g. rollout
            without a [CLS] token) gets a row with its reason and no curves.
        steps: steps per curve.
        baseline: ``"mean"``, ``"blur"`` or ``"noise"``.
        target: what the gradient views explain and the curves read (:func:`vitviz.capture.targets.as_target`):
            a class index (its softmax probability is read), None or ``"top"`` for the top class, a
            :class:`~vitviz.capture.targets.SimilarityTarget` (:func:`vitviz.pipeline.reference_target`,
            :func:`vitviz.pipeline.vector_target`: the similarity itself is read, so a feature model's curves follow
            it) or a function of one image's output (its value is read).
        seeds: random rankings of the random baseline (per mode).
        seed: seed of the random rankings (and of the noise baseline).
        batch_size: perturbed images per forward (None: :func:`auto_batch_size`).
        progress: ``progress(done, total)``, images evaluated so far, after each batch (the window's progress bar).
        cancel: ``cancel() -> bool``, checked before each batch; True raises :class:`EvaluationCancelled`.
        keep_graph: how a streamed capture's backward treats the blocks' graphs
            (:func:`vitviz.document.streamed.stream_images`: None by the memory available, True keeps, False
            recomputes each block: the memory of about one layer).
        ground_truth: the image's :class:`~vitviz.evaluate.ground_truth.GroundTruth` (at the image's pixel size):
            every view's map gets its localisation scores (``ViewScore.localisation``).
        object_class: the ground truth's class that is the object (None: every class; ``vitviz evaluate --target
            gt`` gives the mask's main class, also the target).
        curves: False skips the perturbation curves (``--only localisation``: the table's random baselines are
            None).
        tolerance: the pointing game's tolerance in pixels of the model's input (0: on the object).

    Returns:
        A :class:`FaithfulnessTable` (``.rows()``: ``[(view, deletion AUC, insertion AUC), ..., ("random", ...)]``;
        ``.format()``: the text table).

    Raises:
        ValueError: bad arguments; a target that cannot be used (:class:`~vitviz.capture.targets.TargetError`); a
            model without a classifier and no similarity or callable target (nothing to read).
    """
    check_choice("baseline", baseline, BASELINES)
    want = None if target is None else as_target(target)  # TargetError (a ValueError) naming it
    if isinstance(want, ClassTarget) and want.index is None:
        want = None  # the top class: as the pipeline's default
    steps = check_steps(steps)
    seeds = check_seeds(seeds)
    if isinstance(views, str):
        views = (views,)
    if not views:
        raise ValueError("views is empty: name at least one view")
    for name in views:  # unknown names before any work
        if name not in PRESETS:
            registry.get(name)
    if isinstance(pipeline_or_model, Pipeline):
        pipe = pipeline_or_model
    elif isinstance(pipeline_or_model, nn.Module):
        pipe = own_pipeline(pipeline_or_model)
    else:
        raise ValueError(f"evaluate_views needs a vitviz Pipeline or model, got {type(pipeline_or_model).__name__}")
    model = pipe.model
    if getattr(model, "spec", None) is None:
        raise ValueError("the model has no spec (its preprocessing and labels): load it with vitviz.load_checkpoint "
                         "or vitviz.create_model, or set model.spec")
    if isinstance(image, (str, os.PathLike)):
        image = load_image(image)
    compute = None
    if isinstance(image, InferenceResult):
        result = image
        if result.num_layers != len(model.blocks):
            raise ValueError(f"the result has {result.num_layers} layers but the model {len(model.blocks)}: "
                             "it is not a result of this model")
        pil = Image.fromarray(result.rgb)
        if (want is not None and not _explains(result, want)) or (
                want is None and result.target_spec is None and not is_feature_model(model)):  # (no gradients)
            result = pipe.run(pil, source=result.source, target=want)
    else:
        pil = getattr(image, "image", image)
        if not isinstance(pil, Image.Image):
            raise ValueError(f"image must be a PIL image, a LoadedImage, a path or an InferenceResult, got "
                             f"{type(image).__name__}")
        pil = pil if pil.mode == "RGB" else pil.convert("RGB")
        source = str(getattr(image, "path", None) or "image")
        result, compute = _streamed(pipe, pil, source, want, views, keep_graph)
        if result is None:
            result = pipe.run(pil, source=source, target=want)
    if not curves:
        rows = [_row(name, result, compute) for name in views]
        _localise(rows, ground_truth, object_class, pipe.spec.preprocess.geometry((pil.height, pil.width)), tolerance)
        return _localisation_table(result, rows, ground_truth, steps, baseline)
    tgt = _read_target(result)
    x, geometry = pipe.spec.preprocess.apply(pil)

    p = Perturber(model, x, target=tgt, baseline=baseline, patch_size=result.patch_size, seed=seed,
                  batch_size=batch_size)
    if p.grid != tuple(result.grid):
        raise ValueError(f"the preprocessed image has a {p.grid} patch grid but the result {tuple(result.grid)}")
    rows = [_row(name, result, compute) for name in views]
    _localise(rows, ground_truth, object_class, geometry, tolerance)
    blocks: list[np.ndarray] = []
    for row in rows:
        if row.saliency is None:
            continue
        sal = check_saliency(row.saliency, p.grid)
        for mode in ("deletion", "insertion"):
            blocks.append(p.curve_masks(sal, mode, steps)[0])
    rand = p.random_saliencies(seeds, seed)
    for mode in ("deletion", "insertion"):
        for s in rand:
            blocks.append(p.curve_masks(s, mode, steps)[0])
    scores = p.scores(np.concatenate(blocks), progress, cancel).reshape(len(blocks), steps + 1)
    counts = step_counts(p.P, steps)
    i = 0
    for row in rows:
        if row.saliency is None:
            continue
        row.deletion = p.curve("deletion", steps, counts, scores[i])
        row.insertion = p.curve("insertion", steps, counts, scores[i + 1])
        i += 2
    R = len(rand)
    rd = p.random("deletion", steps, counts, scores[i:i + R], seed)
    ri = p.random("insertion", steps, counts, scores[i + R:i + 2 * R], seed)
    gt = None if ground_truth is None else ground_truth.source
    if isinstance(tgt, int):
        return FaithfulnessTable(source=result.source, target=tgt, label=result.label(tgt),
                                 probability=float(result.probabilities[tgt]), steps=steps, baseline=baseline,
                                 views=rows, random_deletion=rd, random_insertion=ri, ground_truth=gt)
    # the unperturbed image's score as the curves read it (the first point of every deletion curve)
    score = float(rd.scores[0, 0]) if rd.scores.size else float(result.target_score or 0.0)
    return FaithfulnessTable(source=result.source, target=None, label=result.target_text() or tgt.describe(),
                             probability=score, steps=steps, baseline=baseline, views=rows, random_deletion=rd,
                             random_insertion=ri, ground_truth=gt,
                             measure="similarity" if isinstance(tgt, SimilarityTarget) else "value")


def localise_images(pipe: Pipeline, images: Sequence[Any], views: Sequence[str], ground_truths: Sequence[Any], *,
                    targets: Sequence[Any] | None = None, object_classes: Sequence[int | None] | None = None,
                    sources: Sequence[str] | None = None, tolerance: float = 0.0, keep_graph: bool | None = None
                    ) -> list[FaithfulnessTable]:
    """:func:`evaluate_views` with ``curves=False`` for many images at once: the maps of every image from one
    streamed pass over the batch (:func:`vitviz.document.streamed.stream_images`, the maps equal the one-image
    capture's), then each image's localisation table. A model or view that cannot be streamed, or targets of mixed
    kinds, go through :func:`evaluate_views` one image at a time.

    Args:
        images: PIL or loaded images (paths too); ``ground_truths``: one
            :class:`~vitviz.evaluate.ground_truth.GroundTruth` (or None) per image.
        targets: one per image (None: each image's top class; class indices; the same similarity target for all).
        object_classes, tolerance, keep_graph: as :func:`evaluate_views`, ``object_classes`` one per image.
    """
    n = len(images)
    targets = [None] * n if targets is None else list(targets)
    classes = [None] * n if object_classes is None else list(object_classes)
    loaded = [load_image(im) if isinstance(im, (str, os.PathLike)) else im for im in images]
    pils = [getattr(im, "image", im) for im in loaded]
    pils = [p if p.mode == "RGB" else p.convert("RGB") for p in pils]
    if sources is None:
        sources = [str(getattr(im, "path", None) or "image") for im in loaded]
    if len(ground_truths) != n or len(targets) != n or len(classes) != n or len(sources) != n:
        raise ValueError(f"{n} images need as many ground truths, targets, object classes and sources")
    for name in views:
        if name not in PRESETS:
            registry.get(name)
    if all(t is None for t in targets):
        want: Any = None
    elif all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in targets):
        want = [int(t) for t in targets]
    elif all(t is targets[0] for t in targets):
        want = targets[0]
    else:
        want = False
    done = None
    if want is not False and streamable(pipe.model) is None and n:
        def demands(r: Any) -> list[tuple[Any, Any]]:
            return [_resolve(name, r)[:2] for name in views]

        try:
            done = stream_images(pipe, pils, sources=sources, target=want, demands=demands, keep_graph=keep_graph)
        except NotStreamable:
            done = None
    if done is None:
        return [evaluate_views(pipe, im, views, target=t, ground_truth=gt, object_class=c, curves=False,
                               tolerance=tolerance, keep_graph=keep_graph)
                for im, t, gt, c in zip(loaded, targets, ground_truths, classes)]
    tables = []
    for pil, d, gt, c in zip(pils, done, ground_truths, classes):
        rows = [_row(name, d.result, d.map) for name in views]
        _localise(rows, gt, c, pipe.spec.preprocess.geometry((pil.height, pil.width)), tolerance)
        tables.append(_localisation_table(d.result, rows, gt))
    return tables


def _localisation_table(result: InferenceResult, rows: list[ViewScore], gt: GroundTruth | None, steps: int = 0,
                        baseline: str = "") -> FaithfulnessTable:
    """The table of maps without curves: the views' rows (and their localisation scores), the target of ``result``."""
    tgt = result.target
    if tgt is not None:
        label, score = result.label(int(tgt)), float(result.probabilities[int(tgt)])
    else:
        label, score = result.target_text() or "", float(result.target_score or 0.0)
    return FaithfulnessTable(source=result.source, target=None if tgt is None else int(tgt), label=label,
                             probability=score, steps=steps, baseline=baseline, views=rows, random_deletion=None,
                             random_insertion=None, ground_truth=None if gt is None else gt.source)


def _row(name: str, result: InferenceResult, compute: Any) -> ViewScore:
    """The table's row of one view: its map (from the streamed pass's ``compute`` when there is one), or why it has
    none."""
    v, opts, title = _resolve(name, result)
    why = v.unavailable(result)
    m = None if why else v.compute(result, opts) if compute is None else compute(v, opts)
    if m is None:
        return ViewScore(name, title, None, None, None, why or "no map for this model")
    return ViewScore(name, title, np.asarray(m, np.float32), None, None)


def _localise(rows: list[ViewScore], gt: GroundTruth | None, object_class: int | None, geometry: CropGeometry,
              tolerance: float) -> None:
    """Each row's localisation scores against ``gt`` in the model's input crop (rows without a map get none)."""
    if gt is None:
        return
    h, w = geometry.image_size
    if gt.classes is not None:
        check_size(gt.source, gt.classes.shape, (h, w))  # one line naming the mask file
    mask = mask_in_crop(gt.object_mask((h, w), object_class), geometry)
    points = None
    if gt.points is not None:
        points = [(*geometry.image_to_input(y, x), positive) for y, x, positive in gt.points]
    for row in rows:
        if row.saliency is not None:
            row.localisation = localisation_scores(row.saliency, mask, points=points, tolerance=tolerance)


def _resolve(name: str, result: Any) -> tuple[Any, Any, str]:
    """:func:`~vitviz.evaluate.view_rows.resolve_view` for ``result``, with relevance on CLIP prompts at the last
    layer only, as Chefer's CLIP notebook shows it (:meth:`vitviz.views.View.result_changes`)."""
    v, opts, title = resolve_view(name, result.num_layers)
    changes = v.result_changes(result)
    if changes:
        opts = replace(opts, **changes)
    return v, opts, title


def _explains(result: InferenceResult, want: Any) -> bool:
    """Whether ``result``'s gradients explain the target ``want`` (then its maps are reused)."""
    if isinstance(want, ClassTarget):
        return result.target is not None and int(result.target) == int(want.index)
    spec = result.target_spec
    return spec is not None and getattr(spec, "key", None) == want.key


def _read_target(result: InferenceResult) -> Any:
    """What the curves read for ``result``: its class (an int), or its similarity or callable target."""
    if result.target is not None:
        return int(result.target)
    spec = result.target_spec
    if spec is not None and not isinstance(spec, ClassTarget):
        return spec
    raise ValueError("the model has no classifier, so there is no class probability to perturb: give a similarity "
                     "target (e.g. similar:IMAGE, vitviz.pipeline.reference_target) or a function of the output")



def _streamed(pipe: Pipeline, pil: Image.Image, source: str, target: Any, views: Sequence[str],
              keep_graph: bool | None = None) -> tuple[Any, Any]:
    """``(result, map(view, options))`` of one streamed pass that gathers what the views' maps need, or ``(None,
    None)`` when the model or a view cannot be streamed (the caller captures every layer instead)."""
    if streamable(pipe.model) is not None:
        return None, None

    def demands(r: Any) -> list[tuple[Any, Any]]:
        return [_resolve(name, r)[:2] for name in views]

    try:
        done = stream_images(pipe, [pil], sources=[source], target=target, demands=demands, keep_graph=keep_graph)[0]
    except NotStreamable:
        return None, None
    return done.result, done.map
