"""Model randomisation (Adebayo et al. 2018, "Sanity checks for saliency maps"), on the model itself. No Qt.

:func:`randomisation_check`: the blocks are re-initialised from the top (block L-1, then L-1 and L-2, ...) in a copy
of the model, the map is recomputed after each stage, and the Spearman rank correlation with the original map is
returned. A map that does not change when the weights it claims to explain are destroyed explains nothing. It
computes maps as the window does (a :class:`~vitviz.pipeline.Pipeline` of the copy on its own device and dtype), so
it needs a vitviz ViT.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch import nn

from vitviz.capture.model_head import is_feature_model
from vitviz.evaluate.checks import check_input, check_target, model_patch_size, own_pipeline
from vitviz.evaluate.metrics import spearman
from vitviz.evaluate.outcomes import RandomisationCheck
from vitviz.evaluate.protocol import Cancel, EvaluationCancelled, Progress
from vitviz.evaluate.view_rows import resolve_view
from vitviz.model.preprocess import CropGeometry
from vitviz.pipeline import PreparedImage
from vitviz.views.options import ViewOptions


def _input_image(x: torch.Tensor) -> PreparedImage:
    """The preprocessed input ``x [1, C, H, W]`` as the pipeline takes an image (no pixels: the maps need none)."""
    h, w = int(x.shape[-2]), int(x.shape[-1])
    return PreparedImage(x=x[0], geometry=CropGeometry((h, w), (h, w), (0, 0, h, w)),
                         rgb=np.zeros((1, 1, 3), np.uint8))


def _reinitialise(block: nn.Module) -> None:
    """Fresh random values for every parameter of ``block``: ``reset_parameters()`` of each submodule that has one
    (torch's default initialisation: Linear weights and biases uniform in +-1/sqrt(fan_in), LayerNorm 1 and 0);
    parameters no submodule resets (e.g. LayerScale's gamma) are drawn from N(0, 0.02^2)."""
    done: set[int] = set()
    for m in block.modules():
        reset = getattr(m, "reset_parameters", None)
        if callable(reset):
            reset()
            done.update(id(p) for p in m.parameters(recurse=False))
    with torch.no_grad():
        for p in block.parameters():
            if id(p) not in done:
                p.normal_(0.0, 0.02)


def randomisation_check(
    model: nn.Module,
    x: torch.Tensor,
    view: str = "relevance",
    *,
    target: Any,
    options: ViewOptions | None = None,
    seed: int = 0,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> RandomisationCheck:
    """Cascading randomisation of the blocks from the top (Adebayo et al. 2018), on a deep copy of ``model``.

    Stage i (i = 0 .. L-1) re-initialises block ``L-1-i`` (:func:`_reinitialise`, with the torch RNG seeded by
    ``seed + i`` inside ``torch.random.fork_rng``, so the caller's random state is untouched), on top of the
    stages before it; the view's map is recomputed (from one :meth:`~vitviz.pipeline.Pipeline.run_batch` of ``x``,
    the result the window's maps are made from, with gradients when the view needs them) and
    compared with the original map by :func:`spearman`. The patch embedding, the position embedding and the head
    are kept, so the gradient views still differentiate the same class's logit.

    Args:
        model: a vitviz ViT (:func:`vitviz.capture.capture`); never modified.
        x: the preprocessed image ``[C, H, W]`` or ``[1, C, H, W]``.
        view: a view key (``"relevance"``, ``"rollout"``, ``"grad_rollout"``, ``"cls"`` ...) or ``"cls_last"``.
        target: what the gradient views explain: a class index (None: the model's top class on ``x``), a
            :class:`~vitviz.capture.targets.SimilarityTarget` (its reference stays that of the original model) or a
            function of the output. A model without a classifier needs one of the last two for a gradient view.
        options: the view's options (default: :class:`vitviz.views.options.ViewOptions` defaults).
        seed: base seed of the re-initialisation.
        progress, cancel: ``progress(done, L)`` after each stage; ``cancel()`` before each (raises
            :class:`EvaluationCancelled`).

    Returns:
        A :class:`RandomisationCheck` with the original map, each stage's map and the correlations ``[L]``.
    """
    if not isinstance(model, nn.Module) or not hasattr(model, "blocks"):
        raise ValueError(f"randomisation_check needs a vitviz ViT (with .blocks), got {type(model).__name__}")
    blocks_n = len(model.blocks)
    v, opts, _ = resolve_view(view, blocks_n, options)
    work = copy.deepcopy(model).eval()
    xin, _ = check_input(work, x, model_patch_size(work))
    grads = bool(v.needs_grads or "target" in v.reads)
    if not grads:
        target = None
    elif target is None:
        if is_feature_model(work):
            raise ValueError(f"view {view!r} explains a target, and this model has no classifier (no top class): "
                             "give a similarity target or a function of the output")
        with torch.inference_mode():
            target = int(work(xin)[0].float().argmax())
    else:
        target = check_target(work, target)
    legrad = (opts.legrad_pooling,) if "legrad_pooling" in v.reads else ()
    gradcam = "gradcam_layer" in v.reads
    pipe, image = own_pipeline(work), _input_image(xin)

    def compute() -> np.ndarray:
        (r,) = pipe.run_batch([image], sources=["input"], target=target, gradients=grads, legrad=legrad,
                              gradcam=gradcam)
        why = v.unavailable(r)
        if why:
            raise ValueError(f"view {view!r} is unavailable for this model: {why}")
        m = v.compute(r, opts)
        if m is None:
            raise ValueError(f"view {view!r} has no map for this input")
        return np.asarray(m, dtype=np.float32)

    original = compute()
    maps, stages, rhos = [], [], []
    blocks = list(work.blocks)
    devices = sorted({p.device.index or 0 for p in work.parameters() if p.device.type == "cuda"})
    for i in range(blocks_n):
        if cancel is not None and cancel():
            raise EvaluationCancelled("randomisation check cancelled")
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(int(seed) + i)
            _reinitialise(blocks[blocks_n - 1 - i])
        m = compute()
        maps.append(m)
        stages.append(tuple(range(blocks_n - 1, blocks_n - 2 - i, -1)))
        rhos.append(spearman(original, m))
        if progress is not None:
            progress(i + 1, blocks_n)
    return RandomisationCheck(view=view, target=target, original=original, randomised=stages,
                              maps=np.stack(maps) if maps else np.zeros((0,) + original.shape, np.float32),
                              correlations=np.asarray(rhos, dtype=np.float64))

