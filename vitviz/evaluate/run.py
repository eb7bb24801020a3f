"""The faithfulness table of one image: several views' maps from one captured result, their deletion and insertion
curves and the random baseline, in one batched run with progress and cancel (the window's faithfulness tab and
``vitviz evaluate``). No Qt."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image
from torch import nn

from vitviz import views as registry
from vitviz.evaluate.checks import check_choice, check_saliency, check_seeds, check_steps, device_dtype
from vitviz.evaluate.outcomes import FaithfulnessTable, ViewScore
from vitviz.evaluate.perturbation import Perturber, step_counts
from vitviz.evaluate.protocol import BASELINES, DEFAULT_VIEWS, BaselineKind, Cancel, Progress
from vitviz.evaluate.view_rows import resolve_view
from vitviz.imaging import load_image
from vitviz.pipeline import DTYPES, InferenceResult, Pipeline
from vitviz.views.presets import PRESETS


def evaluate_views(
    pipeline_or_model: Pipeline | nn.Module,
    image: Any,
    views: Sequence[str] = DEFAULT_VIEWS,
    *,
    steps: int = 20,
    baseline: BaselineKind = "mean",
    target: int | None = None,
    seeds: int = 10,
    seed: int = 0,
    batch_size: int | None = None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> FaithfulnessTable:
    """Deletion and insertion curves of several views' maps of one image, and the random baseline.

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
        target: the class to explain and score; None for the top class.
        seeds: random rankings of the random baseline (per mode).
        seed: seed of the random rankings (and of the noise baseline).
        batch_size: perturbed images per forward (None: :func:`auto_batch_size`).
        progress: ``progress(done, total)``, images evaluated so far, after each batch (the window's progress bar).
        cancel: ``cancel() -> bool``, checked before each batch; True raises :class:`EvaluationCancelled`.

    Returns:
        A :class:`FaithfulnessTable` (``.rows()``: ``[(view, deletion AUC, insertion AUC), ..., ("random", ...)]``;
        ``.format()``: the text table).
    """
    check_choice("baseline", baseline, BASELINES)
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
        device, dtype = device_dtype(pipeline_or_model)
        precision = next((k for k, v in DTYPES.items() if v == dtype), "fp32")
        pipe = Pipeline(pipeline_or_model, device=str(device), precision=precision)
    else:
        raise ValueError(f"evaluate_views needs a vitviz Pipeline or model, got {type(pipeline_or_model).__name__}")
    model = pipe.model
    if getattr(model, "spec", None) is None:
        raise ValueError("the model has no spec (its preprocessing and labels): load it with vitviz.load_checkpoint "
                         "or vitviz.create_model, or set model.spec")
    if isinstance(image, (str, os.PathLike)):
        image = load_image(image)
    if isinstance(image, InferenceResult):
        result = image
        if result.num_layers != len(model.blocks):
            raise ValueError(f"the result has {result.num_layers} layers but the model {len(model.blocks)}: "
                             "it is not a result of this model")
        pil = Image.fromarray(result.rgb)
        if target is not None and target != result.target:
            result = pipe.run(pil, source=result.source, target=target)
    else:
        pil = getattr(image, "image", image)
        if not isinstance(pil, Image.Image):
            raise ValueError(f"image must be a PIL image, a LoadedImage, a path or an InferenceResult, got "
                             f"{type(image).__name__}")
        pil = pil if pil.mode == "RGB" else pil.convert("RGB")
        source = str(getattr(image, "path", None) or "image")
        result = pipe.run(pil, source=source, target=target)
    tgt = result.target
    if tgt is None:
        raise ValueError("the model has no classifier: there is no class probability to perturb")
    x, _ = pipe.spec.preprocess.apply(pil)

    p = Perturber(model, x, target=tgt, baseline=baseline, patch_size=result.patch_size, seed=seed,
                  batch_size=batch_size)
    if p.grid != tuple(result.grid):
        raise ValueError(f"the preprocessed image has a {p.grid} patch grid but the result {tuple(result.grid)}")
    rows: list[ViewScore] = []
    blocks: list[np.ndarray] = []
    for name in views:
        v, opts, title = resolve_view(name, result.num_layers)
        why = v.unavailable(result)
        m = None if why else v.compute(result, opts)
        if m is None:
            rows.append(ViewScore(name, title, None, None, None, why or "no map for this model"))
            continue
        sal = check_saliency(m, p.grid)
        rows.append(ViewScore(name, title, np.asarray(m, np.float32), None, None))
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
    prob = float(result.probabilities[tgt])
    return FaithfulnessTable(source=result.source, target=int(tgt), label=result.label(int(tgt)), probability=prob,
                             steps=steps, baseline=baseline, views=rows, random_deletion=rd, random_insertion=ri)

