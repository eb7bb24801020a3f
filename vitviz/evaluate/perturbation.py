"""Perturbation curves of a map and the random baseline, on the model itself. No Qt.

**Perturbation curves** (:func:`perturbation_curve`; Petsiuk et al. 2018, "RISE"; the positive / negative tests of
Chefer et al. 2021). The ``P = gh * gw`` patches are ranked by the map and perturbed a whole patch at a time; the
target's score is read after each step (a class: the model's softmax probability of it; a similarity or callable
target, :mod:`vitviz.capture.targets`: its own score, so a feature model's curve follows the similarity)::

    n_k = round(k * P / steps)                  k = 0 .. steps (round half up: floor(k * P / steps + 1/2))
    f_k = n_k / P                               the fraction of patches perturbed ("fractions")
    x_k = M_k * b + (1 - M_k) * x               M_k = 1 on the perturbed patches' pixels, b = the baseline image
    s_k = softmax(model(x_k))[target]           ("scores"; a class target; sigmoid(model(x_k)[target]) where the
                                                 model's spec says probability "sigmoid": SigLIP's prompts)
    s_k = scale * cos(e(x_k), v) + bias         (a similarity target: e = the pooled embedding of x_k)
    s_k = fn(model(x_k))                        (a callable target)
    AUC = sum_k (f_{k+1} - f_k) * (s_k + s_{k+1}) / 2          (trapezoid rule over the fractions)

Modes: ``"deletion"`` perturbs the *most* salient patches first (a faithful map makes the score collapse early:
lower AUC is better); ``"insertion"`` starts from the baseline image and reveals the most salient patches first
(``M_k`` = 1 everywhere except the ``n_k`` most salient patches: higher AUC is better); ``"negative"`` perturbs the
*least* salient patches first (the score should survive: higher AUC is better). The ranking is a stable sort of the
map (descending for deletion and insertion, ascending for negative), so ties go to the lower patch index
(row-major). Baselines ``b`` (in the model's normalised input space): ``"mean"`` is 0, i.e. every pixel set to the
normalisation mean; ``"blur"`` is the image convolved with a Gaussian of sigma = one patch side (separable, reflect
padding, kernel truncated at 3 sigma); ``"noise"`` is seeded standard normal noise (one dataset standard deviation
per channel around the mean).

**Random baseline** (:func:`random_baseline`): the same curve for ``R`` random rankings of the patches; the mean
and the standard deviation of their AUCs are the floor that any map must beat.

The model contract: a ``torch.nn.Module`` in eval mode mapping a batch ``[B, C, H, W]`` in its normalised input space to
logits ``[B, K]`` (or features, for a similarity or callable target), whose patch size can be read from
``model.patch_size``, ``model.patch_embed.patch_size`` or ``model.config.patch_size`` (an int or a ``(height, width)``
pair; or pass ``patch_size=`` explicitly). vitviz's ViT, timm's and torchvision's ``VisionTransformer`` all qualify.
Every perturbed input of a call goes through the model in batches of ``batch_size`` under ``torch.inference_mode``
(identical inputs, such as the unperturbed image shared by the curves, only once); the model's device and dtype are used
as they are and the scores are taken in float32. A similarity target reads the pooled embedding
(:func:`vitviz.capture.model_head.embedding_of`): a feature model's output, else the input of the model's ``head`` (a
forward pre-hook, for the duration of each forward). :class:`Perturber` is the machinery the functions here and
:func:`vitviz.evaluate.run.evaluate_views` share.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vitviz.capture.model_head import embedding_of, is_feature_model
from vitviz.capture.targets import SimilarityTarget, target_scores
from vitviz.evaluate.checks import (
    check_choice,
    check_input,
    check_saliency,
    check_seeds,
    check_steps,
    check_target,
    model_patch_size,
)
from vitviz.evaluate.metrics import curve_auc
from vitviz.evaluate.outcomes import PerturbationCurve, RandomBaseline
from vitviz.evaluate.protocol import (
    BASELINES,
    BATCH_BUDGET,
    MAX_AUTO_BATCH,
    MODES,
    BaselineKind,
    Cancel,
    EvaluationCancelled,
    Mode,
    Progress,
)


def gaussian_blur(x: torch.Tensor, sigma: float | tuple[float, float]) -> torch.Tensor:
    """``x [B, C, H, W]`` convolved with a Gaussian of standard deviation ``sigma`` pixels (or ``(sigma_y,
    sigma_x)``): two 1-D passes, reflect padding, kernel ``exp(-t^2 / (2 sigma^2))`` normalised over
    ``|t| <= ceil(3 sigma)`` (at most the image side - 1, as reflect padding requires). Computed in float32."""
    sy, sx = (sigma, sigma) if isinstance(sigma, (int, float)) else sigma
    out = x.float()
    B, C, H, W = out.shape
    for axis, s, size in ((3, sx, W), (2, sy, H)):
        r = min(int(math.ceil(3 * s)), size - 1)
        if r <= 0 or s <= 0:
            continue
        t = torch.arange(-r, r + 1, dtype=torch.float64)
        k = torch.exp(-t**2 / (2.0 * s * s))
        k = (k / k.sum()).to(device=out.device, dtype=torch.float32)
        if axis == 3:
            out = F.conv2d(F.pad(out, (r, r, 0, 0), mode="reflect"), k.view(1, 1, 1, -1).expand(C, 1, 1, -1),
                           groups=C)
        else:
            out = F.conv2d(F.pad(out, (0, 0, r, r), mode="reflect"), k.view(1, 1, -1, 1).expand(C, 1, -1, 1),
                           groups=C)
    return out.to(x.dtype)


def baseline_image(x: torch.Tensor, baseline: str, *, patch_size: int | tuple[int, int], seed: int = 0) -> torch.Tensor:
    """The baseline ``b`` for ``x [1, C, H, W]`` in normalised input space (same shape, device and dtype).

    ``"mean"``: zeros (the normalisation mean); ``"blur"``: :func:`gaussian_blur` with sigma = one patch;
    ``"noise"``: standard normal noise from ``torch.Generator().manual_seed(seed)`` (drawn on the CPU, so the same
    on every device).
    """
    check_choice("baseline", baseline, BASELINES)
    ph, pw = (patch_size, patch_size) if isinstance(patch_size, int) else patch_size
    if baseline == "mean":
        return torch.zeros_like(x)
    if baseline == "blur":
        return gaussian_blur(x, (float(ph), float(pw)))
    g = torch.Generator().manual_seed(int(seed))
    return torch.randn(tuple(x.shape), generator=g, dtype=torch.float32).to(device=x.device, dtype=x.dtype)


def auto_batch_size(model: nn.Module, num_patches: int) -> int:
    """Images per forward when none is given: :data:`BATCH_BUDGET` over ``4 x tokens x 4 D`` bytes (D =
    ``model.embed_dim``, or 768 when the model does not say), between 1 and :data:`MAX_AUTO_BATCH`."""
    d = getattr(model, "embed_dim", None) or getattr(getattr(model, "config", None), "embed_dim", None)
    d = int(d) if isinstance(d, (int, np.integer)) and d > 0 else 768
    per_image = 4 * (num_patches + 1) * 4 * d
    return max(1, min(MAX_AUTO_BATCH, BATCH_BUDGET // per_image))


def step_counts(P: int, steps: int) -> np.ndarray:
    """``n_k = floor(k P / steps + 1/2)`` for k = 0 .. steps, in exact integer arithmetic."""
    k = np.arange(steps + 1, dtype=np.int64)
    return (2 * k * P + steps) // (2 * steps)


def _ranking(saliency: np.ndarray, mode: str) -> np.ndarray:
    """``rank[p]``: when patch p is perturbed (0 = first). Stable sort: ties go to the lower index."""
    order = np.argsort(saliency if mode == "negative" else -saliency, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank


def _masks(rank: np.ndarray, counts: np.ndarray, mode: str) -> np.ndarray:
    """bool ``[steps + 1, P]``: True where the image shows the baseline at step k."""
    first = rank[None, :] < counts[:, None]  # the n_k first patches of the ranking
    return ~first if mode == "insertion" else first


class Perturber:
    """One model, one image, one baseline: scores of any set of patch masks, in batches, each mask once."""

    def __init__(self, model: nn.Module, x: Any, *, target: Any, baseline: str, patch_size: Any, seed: int,
                 batch_size: int | None):
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be a torch.nn.Module mapping [B, C, H, W] to logits, got "
                             f"{type(model).__name__}")
        if model.training:
            raise ValueError("the model is in training mode (dropout would make the scores random): call model.eval()")
        check_choice("baseline", baseline, BASELINES)
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer))
                                       or batch_size < 1):
            raise ValueError(f"batch_size must be an integer >= 1 (or None: automatic), got {batch_size!r}")
        self.model = model
        self.patch = model_patch_size(model, patch_size)
        self.x, self.grid = check_input(model, x, self.patch)
        self.target = check_target(model, target)
        self.sigmoid = getattr(getattr(model, "spec", None), "probability", "softmax") == "sigmoid"
        self.head = None  # the module whose input is the pooled embedding (a similarity target on a classifier)
        if isinstance(self.target, SimilarityTarget) and not is_feature_model(model):
            self.head = getattr(model, "head", None)
            if not isinstance(self.head, nn.Module):
                raise ValueError(f"{self.target.describe()}: the pooled embedding of {type(model).__name__} cannot be "
                                 "read (its output is class scores and it has no .head module)")
        self.baseline = baseline
        self.base = baseline_image(self.x, baseline, patch_size=self.patch, seed=seed)
        self.P = self.grid[0] * self.grid[1]
        self.batch_size = int(batch_size) if batch_size is not None else auto_batch_size(model, self.P)

    def scores(self, masks: np.ndarray, progress: Progress | None = None, cancel: Cancel | None = None) -> np.ndarray:
        """float64 ``[M]``: the target's score (:meth:`read`) for each mask ``[M, P]`` (True = baseline pixel)."""
        uniq, inverse = np.unique(np.asarray(masks, dtype=bool), axis=0, return_inverse=True)
        U = uniq.shape[0]
        gh, gw = self.grid
        ph, pw = self.patch
        out = np.empty(U, dtype=np.float64)
        m_all = torch.from_numpy(uniq).to(self.x.device)
        with torch.inference_mode():
            for i in range(0, U, self.batch_size):
                if cancel is not None and cancel():
                    raise EvaluationCancelled("evaluation cancelled")
                m = m_all[i:i + self.batch_size].view(-1, 1, gh, 1, gw, 1).expand(-1, 1, gh, ph, gw, pw)
                m = m.reshape(-1, 1, gh * ph, gw * pw)
                out[i:i + m.shape[0]] = self.read(torch.where(m, self.base, self.x))
                if progress is not None:
                    progress(min(i + self.batch_size, U), U)
        return out[np.asarray(inverse).reshape(-1)]

    def read(self, images: torch.Tensor) -> np.ndarray:
        """float64 ``[B]``: the target's score of each image of a batch (one forward; see the module docstring)."""
        head_in: list[torch.Tensor] = []
        hook = None
        if self.head is not None:  # the first call of the head in the forward: the pooled embedding
            hook = self.head.register_forward_pre_hook(lambda _m, args: None if head_in else head_in.append(args[0]))
        try:
            out = self.model(images)
        finally:
            if hook is not None:
                hook.remove()
        if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != images.shape[0]:
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"the model returned {shape} for a batch of {images.shape[0]} images; expected logits "
                             "[B, K]")
        if isinstance(self.target, int):
            if not self.target < out.shape[1]:
                raise ValueError(f"target class {self.target} out of range for a model with {out.shape[1]} "
                                 f"classes (valid: 0..{out.shape[1] - 1})")
            probs = out.float().sigmoid() if self.sigmoid else out.float().softmax(-1)
            return probs[:, self.target].double().cpu().numpy()
        emb = None
        if isinstance(self.target, SimilarityTarget):
            emb = embedding_of(self.model, out, head_in[0] if head_in else None)
            emb = None if emb is None else emb.float()
        return target_scores(self.target, out.float(), emb).double().cpu().numpy()

    def curve_masks(self, saliency: np.ndarray, mode: str, steps: int) -> tuple[np.ndarray, np.ndarray]:
        counts = step_counts(self.P, steps)
        return _masks(_ranking(saliency, mode), counts, mode), counts

    def curve(self, mode: str, steps: int, counts: np.ndarray, scores: np.ndarray) -> PerturbationCurve:
        fr = counts / float(self.P)
        return PerturbationCurve(mode, self.baseline, self.target, fr, scores, counts, curve_auc(fr, scores))

    def random_saliencies(self, seeds: int, seed: int) -> list[np.ndarray]:
        seeds = check_seeds(seeds)
        return [np.random.default_rng([int(seed), r]).permutation(self.P).astype(np.float64) for r in range(seeds)]

    def random(self, mode: str, steps: int, counts: np.ndarray, scores: np.ndarray, seed: int) -> RandomBaseline:
        fr = counts / float(self.P)
        aucs = np.array([curve_auc(fr, s) for s in scores])
        return RandomBaseline(mode, self.baseline, self.target, fr, scores, aucs, counts, seed)


def perturbation_curve(
    model: nn.Module,
    x: torch.Tensor,
    saliency: Any,
    *,
    target: Any,
    mode: Mode = "deletion",
    steps: int = 20,
    baseline: BaselineKind = "mean",
    batch_size: int | None = None,
    patch_size: int | tuple[int, int] | None = None,
    seed: int = 0,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> PerturbationCurve:
    """The deletion, insertion or negative perturbation curve of one map (formulas in the module docstring).

    Args:
        model: eval-mode module mapping ``[B, C, H, W]`` to logits ``[B, K]`` (see the module docstring).
        x: the preprocessed image ``[C, H, W]`` or ``[1, C, H, W]`` in the model's normalised input space.
        saliency: ``[gh, gw]`` map over the patch grid (numpy or torch), higher = more important.
        target: what is read: a class index (its softmax probability), a
            :class:`~vitviz.capture.targets.SimilarityTarget` or a callable target (its own score).
        mode: ``"deletion"`` (lower AUC better), ``"insertion"`` or ``"negative"`` (higher AUC better).
        steps: number of steps (``steps + 1`` points, ``steps + 1`` forwards at most).
        baseline: ``"mean"``, ``"blur"`` or ``"noise"``.
        batch_size: perturbed images per forward (None: :func:`auto_batch_size`).
        patch_size: overrides the patch size read from the model.
        seed: the noise baseline's seed.
        progress: ``progress(done, total)`` after each batch (images).
        cancel: checked before each batch; when it returns True, :class:`EvaluationCancelled` is raised.

    Returns:
        A :class:`PerturbationCurve`.

    Raises:
        ValueError: a map of the wrong grid or with NaN, a target out of range, ``steps < 1``, an unknown mode or
            baseline, an input that is not a whole number of patches, a model in training mode.
    """
    check_choice("mode", mode, MODES)
    steps = check_steps(steps)
    p = Perturber(model, x, target=target, baseline=baseline, patch_size=patch_size, seed=seed,
                  batch_size=batch_size)
    s = check_saliency(saliency, p.grid)
    masks, counts = p.curve_masks(s, mode, steps)
    return p.curve(mode, steps, counts, p.scores(masks, progress, cancel))


def random_baseline(
    model: nn.Module,
    x: torch.Tensor,
    *,
    target: Any,
    mode: Mode = "deletion",
    steps: int = 20,
    baseline: BaselineKind = "mean",
    seeds: int = 10,
    seed: int = 0,
    batch_size: int | None = None,
    patch_size: int | tuple[int, int] | None = None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> RandomBaseline:
    """:func:`perturbation_curve` for ``seeds`` random rankings of the patches, all in one batched run.

    Ranking r is ``numpy.random.default_rng([seed, r]).permutation(P)`` used as the saliency. The images that the
    rankings share (the unperturbed image, the full baseline) are evaluated once.

    Returns:
        A :class:`RandomBaseline` (curves ``[R, steps + 1]``, AUCs ``[R]``, their mean and standard deviation).
    """
    check_choice("mode", mode, MODES)
    steps = check_steps(steps)
    p = Perturber(model, x, target=target, baseline=baseline, patch_size=patch_size, seed=seed,
                  batch_size=batch_size)
    sal = p.random_saliencies(seeds, seed)
    parts = [p.curve_masks(s, mode, steps) for s in sal]
    counts = parts[0][1]
    scores = p.scores(np.concatenate([m for m, _ in parts]), progress, cancel).reshape(len(sal), steps + 1)
    return p.random(mode, steps, counts, scores, seed)

