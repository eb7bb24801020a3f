"""Faithfulness of saliency maps, measured on the model itself. No Qt.

Three measurements, each a plain function of a model, one preprocessed image and a map over its patch grid:

**Perturbation curves** (:func:`perturbation_curve`; Petsiuk et al. 2018, "RISE"; the positive / negative tests of
Chefer et al. 2021). The ``P = gh * gw`` patches are ranked by the map and perturbed a whole patch at a time; the
model's softmax probability of the target class is read after each step::

    n_k = round(k * P / steps)                  k = 0 .. steps (round half up: floor(k * P / steps + 1/2))
    f_k = n_k / P                               the fraction of patches perturbed ("fractions")
    x_k = M_k * b + (1 - M_k) * x               M_k = 1 on the perturbed patches' pixels, b = the baseline image
    s_k = softmax(model(x_k))[target]           ("scores")
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

**Model randomisation** (:func:`randomisation_check`; Adebayo et al. 2018, "Sanity checks for saliency maps"):
the blocks are re-initialised from the top (block L-1, then L-1 and L-2, ...) in a copy of the model, the map is
recomputed after each stage, and the Spearman rank correlation with the original map is returned. A map that does
not change when the weights it claims to explain are destroyed explains nothing.

:func:`evaluate_views` puts them together for the window and ``vitviz evaluate``: the maps of several views from
one captured result, their deletion and insertion curves and the random baseline, in one batched run with progress
and cancel.

The model contract for the perturbation functions: a ``torch.nn.Module`` in eval mode mapping a batch
``[B, C, H, W]`` in its normalised input space to logits ``[B, K]``, whose patch size can be read from
``model.patch_size``, ``model.patch_embed.patch_size`` or ``model.config.patch_size`` (an int or a
``(height, width)`` pair; or pass ``patch_size=`` explicitly). vitviz's ViT, timm's and torchvision's
``VisionTransformer`` all qualify. :func:`randomisation_check` and :func:`evaluate_views` compute maps, so they need a
vitviz ViT (:func:`vitviz.capture.capture`). Every perturbed input of a call goes through the model in batches of
``batch_size`` under ``torch.inference_mode`` (identical inputs, such as the unperturbed image shared by the
curves, only once); the model's device and dtype are used as they are and the softmax is taken in float32.
"""

from __future__ import annotations

import copy
import csv
import io
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:  # pragma: no cover
    from vitviz.pipeline import InferenceResult, Pipeline
    from vitviz.document.session import ViewOptions
    from vitviz.views import View

__all__ = [
    "BASELINES", "DEFAULT_VIEWS", "MODES", "auto_batch_size", "baseline_image", "check_writable", "curve_auc",
    "evaluate_views", "EvaluationCancelled", "FaithfulnessTable", "format_mean_table", "gaussian_blur",
    "mean_over_images", "model_patch_size", "perturbation_curve", "PerturbationCurve", "random_baseline",
    "RandomBaseline", "randomisation_check", "RandomisationCheck", "rank_average", "spearman", "view_options",
    "ViewScore", "write_csv",
]

Mode = Literal["deletion", "insertion", "negative"]
BaselineKind = Literal["mean", "blur", "noise"]
MODES: tuple[str, ...] = ("deletion", "insertion", "negative")
BASELINES: tuple[str, ...] = ("mean", "blur", "noise")
DEFAULT_VIEWS: tuple[str, ...] = ("cls_last", "rollout", "grad_rollout", "relevance")
BATCH_BUDGET = 64 * 2**20
"""Bytes of the widest activation (the MLP's hidden layer, ``4 x tokens x 4 D`` per image in float32) that one
batch may hold when ``batch_size`` is None: ViT-B/16 at 224 px gets 27 images per forward, ViT-Ti/16 110, the demo
model the cap of :data:`MAX_AUTO_BATCH`. Small models run several times faster per image in large batches."""
MAX_AUTO_BATCH = 128

Progress = Callable[[int, int], Any]
Cancel = Callable[[], bool]


class EvaluationCancelled(Exception):
    """Raised by the evaluation functions when their ``cancel()`` returned True (checked before every batch)."""


# ------------------------------------------------------------------------------------------------------ results
@dataclass(eq=False)
class PerturbationCurve:
    """One perturbation curve (see the module docstring for the formulas).

    Attributes:
        mode: ``"deletion"``, ``"insertion"`` or ``"negative"``.
        baseline: ``"mean"``, ``"blur"`` or ``"noise"``.
        target: the class whose probability is read.
        fractions: float64 ``[steps + 1]``, ``n_k / P`` from 0 to 1.
        scores: float64 ``[steps + 1]``, softmax probability of ``target`` after step k.
        counts: int64 ``[steps + 1]``, ``n_k``: patches perturbed (deletion, negative) or revealed (insertion).
        auc: trapezoid area under ``scores`` over ``fractions``.
    """

    mode: str
    baseline: str
    target: int
    fractions: np.ndarray
    scores: np.ndarray
    counts: np.ndarray
    auc: float

    @property
    def higher_is_better(self) -> bool:
        """False for deletion (a faithful map makes the score fall fast), True for insertion and negative."""
        return self.mode != "deletion"


@dataclass(eq=False)
class RandomBaseline:
    """Perturbation curves for ``R`` random rankings of the patches.

    Attributes:
        mode, baseline, target: as in :class:`PerturbationCurve`.
        fractions: ``[steps + 1]`` (the same for every ranking).
        scores: ``[R, steps + 1]``, one curve per random ranking.
        aucs: ``[R]``.
        counts: ``[steps + 1]``, patches perturbed or revealed at each step.
        seed: the base seed (ranking r is ``numpy.random.default_rng([seed, r]).permutation(P)``).
    """

    mode: str
    baseline: str
    target: int
    fractions: np.ndarray
    scores: np.ndarray
    aucs: np.ndarray
    counts: np.ndarray
    seed: int = 0

    @property
    def seeds(self) -> int:
        return int(self.aucs.shape[0])

    @property
    def auc_mean(self) -> float:
        return float(self.aucs.mean())

    @property
    def auc_std(self) -> float:
        """Sample standard deviation over the rankings (``ddof=1``; 0 for a single ranking)."""
        return float(self.aucs.std(ddof=1)) if self.aucs.size > 1 else 0.0

    @property
    def mean_curve(self) -> PerturbationCurve:
        """The mean of the curves (its AUC is ``auc_mean``: the trapezoid rule is linear)."""
        s = self.scores.mean(0)
        return PerturbationCurve(self.mode, self.baseline, self.target, self.fractions, s, self.counts,
                                 curve_auc(self.fractions, s))


@dataclass(eq=False)
class RandomisationCheck:
    """Cascading model randomisation (Adebayo et al. 2018) of one view's map.

    Attributes:
        view: the view's key.
        target: the class the gradient views were computed for.
        original: ``[gh, gw]``, the map of the unchanged model.
        randomised: per stage, the blocks re-initialised so far (stage i: ``(L-1, ..., L-1-i)``).
        maps: ``[L, gh, gw]``, the map after each stage.
        correlations: ``[L]``, Spearman rank correlation between ``original`` and each stage's map (NaN where a
            map is constant).
    """

    view: str
    target: int | None
    original: np.ndarray
    randomised: list[tuple[int, ...]]
    maps: np.ndarray
    correlations: np.ndarray


@dataclass(eq=False)
class ViewScore:
    """One view's row of a :class:`FaithfulnessTable`.

    Attributes:
        key: the name asked for (``"cls_last"``, ``"rollout"``, ...).
        title: what the row shows, for tables and legends.
        saliency: ``[gh, gw]`` float32, the map that was ranked (None when the view is unavailable).
        deletion, insertion: the curves (None when unavailable).
        unavailable: why the view has no map for this model (None when it has one).
    """

    key: str
    title: str
    saliency: np.ndarray | None
    deletion: PerturbationCurve | None
    insertion: PerturbationCurve | None
    unavailable: str | None = None

    @property
    def deletion_auc(self) -> float:
        return math.nan if self.deletion is None else self.deletion.auc

    @property
    def insertion_auc(self) -> float:
        return math.nan if self.insertion is None else self.insertion.auc


@dataclass(eq=False)
class FaithfulnessTable:
    """What :func:`evaluate_views` returns: per view, its deletion and insertion curves, and the random baseline.

    Attributes:
        source: the image's name.
        target: the class whose probability the curves read.
        label: that class's name.
        probability: its probability on the unperturbed image.
        steps, baseline: the curves' settings.
        views: one :class:`ViewScore` per view asked for, in order.
        random_deletion, random_insertion: the random baseline of each mode.
    """

    source: str
    target: int
    label: str
    probability: float
    steps: int
    baseline: str
    views: list[ViewScore]
    random_deletion: RandomBaseline
    random_insertion: RandomBaseline

    def rows(self) -> list[tuple[str, float, float]]:
        """``[(key, deletion AUC, insertion AUC)]`` for every view, then ``("random", mean, mean)``."""
        out = [(v.key, v.deletion_auc, v.insertion_auc) for v in self.views]
        out.append(("random", self.random_deletion.auc_mean, self.random_insertion.auc_mean))
        return out

    def best(self) -> tuple[str | None, str | None]:
        """The keys of the views with the lowest deletion AUC and the highest insertion AUC (None if none)."""
        ok = [v for v in self.views if v.deletion is not None]
        if not ok:
            return None, None
        return (min(ok, key=lambda v: v.deletion_auc).key, max(ok, key=lambda v: v.insertion_auc).key)

    def format(self) -> str:
        """The table as text (best per column marked with ``*``, the random row as mean +- std)."""
        best_del, best_ins = self.best()
        head = (f"{self.source}: target {self.target} {self.label!r} (p = {self.probability:.3f}), "
                f"{self.steps} steps, {self.baseline} baseline")
        width = max([len(v.key) for v in self.views] + [len(_random_name(self.random_deletion))])
        lines = [head, f"  {'view':<{width}s}  {'deletion AUC (lower is better)':>31s}  "
                       f"{'insertion AUC (higher is better)':>33s}"]
        for v in self.views:
            if v.unavailable:
                lines.append(f"  {v.key:<{width}s}  {'-':>31s}  {'-':>33s}  ({v.unavailable})")
                continue
            d = f"{v.deletion_auc:.4f}" + ("*" if v.key == best_del else " ")
            i = f"{v.insertion_auc:.4f}" + ("*" if v.key == best_ins else " ")
            lines.append(f"  {v.key:<{width}s}  {d:>31s}  {i:>33s}")
        rd, ri = self.random_deletion, self.random_insertion
        lines.append(f"  {_random_name(rd):<{width}s}  {f'{rd.auc_mean:.4f} +- {rd.auc_std:.4f} ':>31s}  "
                     f"{f'{ri.auc_mean:.4f} +- {ri.auc_std:.4f} ':>33s}")
        return "\n".join(lines)


def _random_name(r: RandomBaseline) -> str:
    return f"random ({r.seeds} seed{'s' if r.seeds != 1 else ''})"


# ------------------------------------------------------------------------------------------------------ helpers
def curve_auc(fractions: Any, scores: Any) -> float:
    """Trapezoid area ``sum_k (f_{k+1} - f_k) (s_k + s_{k+1}) / 2`` (0 for a single point)."""
    f = np.asarray(fractions, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    if f.shape != s.shape or f.ndim != 1:
        raise ValueError(f"fractions and scores must be 1-D of the same length, got {f.shape} and {s.shape}")
    return float(np.sum(np.diff(f) * (s[1:] + s[:-1]) / 2.0))


def rank_average(a: Any) -> np.ndarray:
    """Ranks 1..n of the values of ``a`` (flattened), ties given the average of their ranks (float64 ``[n]``)."""
    v = np.asarray(a, dtype=np.float64).reshape(-1)
    n = v.size
    order = np.argsort(v, kind="stable")
    sv = v[order]
    # runs of equal values: [start, end) in sorted order get the mean of ranks start+1 .. end
    starts = np.flatnonzero(np.concatenate(([True], sv[1:] != sv[:-1])))
    ends = np.concatenate((starts[1:], [n]))
    avg = (starts + 1 + ends) / 2.0
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def spearman(a: Any, b: Any) -> float:
    """Spearman rank correlation: the Pearson correlation of :func:`rank_average` ranks; NaN when either input is
    constant (the correlation is undefined)."""
    ra, rb = rank_average(a), rank_average(b)
    if ra.shape != rb.shape:
        raise ValueError(f"spearman needs two maps of the same size, got {ra.size} and {rb.size} values")
    da, db = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float(da @ da) * float(db @ db))
    return float(da @ db) / den if den > 0 else math.nan


def model_patch_size(model: nn.Module, patch_size: int | tuple[int, int] | None = None) -> tuple[int, int]:
    """The model's patch ``(height, width)``: ``patch_size`` when given, else ``model.patch_size``,
    ``model.patch_embed.patch_size`` or ``model.config.patch_size`` (an int or a pair)."""
    if patch_size is None:
        for owner, name in ((model, "patch_size"), (getattr(model, "patch_embed", None), "patch_size"),
                            (getattr(model, "config", None), "patch_size")):
            v = getattr(owner, name, None) if owner is not None else None
            if v is not None:
                patch_size = v
                break
        else:
            raise ValueError(f"cannot tell the patch size of {type(model).__name__} (no .patch_size, "
                             ".patch_embed.patch_size or .config.patch_size): pass patch_size=")
    ps = (patch_size, patch_size) if isinstance(patch_size, (int, np.integer)) else tuple(patch_size)
    if len(ps) != 2 or not all(isinstance(p, (int, np.integer)) and p > 0 for p in ps):
        raise ValueError(f"patch_size must be a positive int or a (height, width) pair, got {patch_size!r}")
    return (int(ps[0]), int(ps[1]))


def _num_classes(model: nn.Module) -> int | None:
    k = getattr(model, "num_classes", None)
    return int(k) if isinstance(k, (int, np.integer)) else None


def _device_dtype(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    for t in list(model.parameters()) + list(model.buffers()):
        if t.is_floating_point():
            return t.device, t.dtype
    return torch.device("cpu"), torch.float32


def _check_choice(name: str, value: Any, valid: Sequence[str]) -> str:
    if value not in valid:
        raise ValueError(f"{name}={value!r}; valid: {', '.join(repr(v) for v in valid)}")
    return value


def _check_steps(steps: Any) -> int:
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    return int(steps)


def _check_seeds(seeds: Any) -> int:
    if isinstance(seeds, bool) or not isinstance(seeds, (int, np.integer)) or seeds < 1:
        raise ValueError(f"seeds must be an integer >= 1, got {seeds!r}")
    return int(seeds)


def _check_target(model: nn.Module, target: Any) -> int:
    if isinstance(target, (bool, np.bool_)) or not isinstance(target, (int, np.integer)):
        raise ValueError(f"target must be a class index (int), got {target!r}")
    k = _num_classes(model)
    if k is not None and not 0 <= int(target) < k:
        raise ValueError(f"target class {int(target)} out of range for a model with {k} classes (valid: 0..{k - 1})")
    if int(target) < 0:
        raise ValueError(f"target class {int(target)} is negative")
    return int(target)


def _check_input(model: nn.Module, x: Any, patch: tuple[int, int]) -> tuple[torch.Tensor, tuple[int, int]]:
    """``x`` as ``[1, C, H, W]`` on the model's device and dtype, and its patch grid."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a preprocessed torch.Tensor [3, H, W] or [1, 3, H, W], got {type(x).__name__}")
    if x.ndim == 3:
        x = x[None]
    if x.ndim != 4 or x.shape[0] != 1:
        raise ValueError(f"x must be one preprocessed image [C, H, W] or [1, C, H, W], got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"x must be a float tensor in the model's normalised input space, got {x.dtype}")
    _, _, h, w = x.shape
    ph, pw = patch
    if h % ph or w % pw or h == 0 or w == 0:
        raise ValueError(f"input {h}x{w} is not a whole number of {ph}x{pw} patches")
    device, dtype = _device_dtype(model)
    return x.detach().to(device=device, dtype=dtype), (h // ph, w // pw)


def _check_saliency(saliency: Any, grid: tuple[int, int]) -> np.ndarray:
    """``saliency`` as float64 ``[gh * gw]`` (row-major), or a ValueError naming the expected shape."""
    if isinstance(saliency, torch.Tensor):
        s = saliency.detach().to("cpu", torch.float64).numpy()
    else:
        s = np.asarray(saliency, dtype=np.float64)
    if s.shape != tuple(grid):
        raise ValueError(f"saliency must be a map over the patch grid: expected shape {tuple(grid)}, got {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError(f"saliency has {int((~np.isfinite(s)).sum())} non-finite value(s) (NaN or inf)")
    return s.reshape(-1)


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
    _check_choice("baseline", baseline, BASELINES)
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


def _counts(P: int, steps: int) -> np.ndarray:
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


class _Perturber:
    """One model, one image, one baseline: scores of any set of patch masks, in batches, each mask once."""

    def __init__(self, model: nn.Module, x: Any, *, target: Any, baseline: str, patch_size: Any, seed: int,
                 batch_size: int | None):
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be a torch.nn.Module mapping [B, C, H, W] to logits, got "
                             f"{type(model).__name__}")
        if model.training:
            raise ValueError("the model is in training mode (dropout would make the scores random): call model.eval()")
        _check_choice("baseline", baseline, BASELINES)
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer))
                                       or batch_size < 1):
            raise ValueError(f"batch_size must be an integer >= 1 (or None: automatic), got {batch_size!r}")
        self.model = model
        self.patch = model_patch_size(model, patch_size)
        self.x, self.grid = _check_input(model, x, self.patch)
        self.target = _check_target(model, target)
        self.baseline = baseline
        self.base = baseline_image(self.x, baseline, patch_size=self.patch, seed=seed)
        self.P = self.grid[0] * self.grid[1]
        self.batch_size = int(batch_size) if batch_size is not None else auto_batch_size(model, self.P)

    def scores(self, masks: np.ndarray, progress: Progress | None = None, cancel: Cancel | None = None) -> np.ndarray:
        """float64 ``[M]``: the target's probability for each mask ``[M, P]`` (True = baseline pixel)."""
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
                logits = self.model(torch.where(m, self.base, self.x))
                if logits.ndim != 2 or logits.shape[0] != m.shape[0]:
                    raise ValueError(f"the model returned shape {tuple(logits.shape)} for a batch of {m.shape[0]} "
                                     "images; expected logits [B, K]")
                if not self.target < logits.shape[1]:
                    raise ValueError(f"target class {self.target} out of range for a model with {logits.shape[1]} "
                                     f"classes (valid: 0..{logits.shape[1] - 1})")
                out[i:i + m.shape[0]] = logits.float().softmax(-1)[:, self.target].double().cpu().numpy()
                if progress is not None:
                    progress(min(i + self.batch_size, U), U)
        return out[np.asarray(inverse).reshape(-1)]

    def curve_masks(self, saliency: np.ndarray, mode: str, steps: int) -> tuple[np.ndarray, np.ndarray]:
        counts = _counts(self.P, steps)
        return _masks(_ranking(saliency, mode), counts, mode), counts

    def curve(self, mode: str, steps: int, counts: np.ndarray, scores: np.ndarray) -> PerturbationCurve:
        fr = counts / float(self.P)
        return PerturbationCurve(mode, self.baseline, self.target, fr, scores, counts, curve_auc(fr, scores))

    def random_saliencies(self, seeds: int, seed: int) -> list[np.ndarray]:
        seeds = _check_seeds(seeds)
        return [np.random.default_rng([int(seed), r]).permutation(self.P).astype(np.float64) for r in range(seeds)]

    def random(self, mode: str, steps: int, counts: np.ndarray, scores: np.ndarray, seed: int) -> RandomBaseline:
        fr = counts / float(self.P)
        aucs = np.array([curve_auc(fr, s) for s in scores])
        return RandomBaseline(mode, self.baseline, self.target, fr, scores, aucs, counts, seed)


# ------------------------------------------------------------------------------------------------------ curves
def perturbation_curve(
    model: nn.Module,
    x: torch.Tensor,
    saliency: Any,
    *,
    target: int,
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
        target: the class whose softmax probability is read.
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
    _check_choice("mode", mode, MODES)
    steps = _check_steps(steps)
    p = _Perturber(model, x, target=target, baseline=baseline, patch_size=patch_size, seed=seed,
                   batch_size=batch_size)
    s = _check_saliency(saliency, p.grid)
    masks, counts = p.curve_masks(s, mode, steps)
    return p.curve(mode, steps, counts, p.scores(masks, progress, cancel))


def random_baseline(
    model: nn.Module,
    x: torch.Tensor,
    *,
    target: int,
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
    _check_choice("mode", mode, MODES)
    steps = _check_steps(steps)
    p = _Perturber(model, x, target=target, baseline=baseline, patch_size=patch_size, seed=seed,
                   batch_size=batch_size)
    sal = p.random_saliencies(seeds, seed)
    parts = [p.curve_masks(s, mode, steps) for s in sal]
    counts = parts[0][1]
    scores = p.scores(np.concatenate([m for m, _ in parts]), progress, cancel).reshape(len(sal), steps + 1)
    return p.random(mode, steps, counts, scores, seed)


# ------------------------------------------------------------------------------------------------------ maps
def view_options(name: str, num_layers: int) -> tuple[str, dict[str, Any]]:
    """The window's view and option changes that show the map of the row ``name`` of a :class:`FaithfulnessTable`:
    every option the view reads at the value the table's map was computed with, and ``ignore_artefacts`` for maps
    of attention; e.g. ``("cls", {"layer": L - 1, "head": "mean", "ignore_artefacts": False})`` for ``"cls_last"``
    and ``("rollout", {"discard_ratio": 0.0, "head_fusion": "mean", "ignore_artefacts": False, "start_layer": 0})``
    (the table takes the maps at the default options, so the user's own rollout settings are replaced)."""
    view, opts, _ = _resolve_view(name, num_layers)
    changes = {n: getattr(opts, n) for n in sorted(view.reads) if n != "target"}
    if view.uses_attention:
        changes["ignore_artefacts"] = opts.ignore_artefacts
    return view.key, changes


def _resolve_view(name: str, num_layers: int, options: "ViewOptions | None" = None) -> tuple["View", "ViewOptions",
                                                                                               str]:
    """``(view, options, title)`` for a name: a view key of :mod:`vitviz.views`, or ``"cls_last"`` (the ``cls``
    view at the last layer, mean of heads)."""
    from dataclasses import replace

    from vitviz import views
    from vitviz.document.session import ViewOptions

    if name == "cls_last":
        view = views.get("cls")
        opts = replace(options or ViewOptions(), view="cls", layer=num_layers - 1, head="mean")
        return view, opts, f"{view.title} (last layer, mean of heads)"
    view = views.get(name)  # ValueError naming the valid keys
    opts = replace(options or ViewOptions(), view=view.key)
    return view, opts, view.title


def _result_for(model: nn.Module, x: torch.Tensor, *, target: int | None, grads: bool) -> "InferenceResult":
    """A minimal :class:`~vitviz.pipeline.InferenceResult` of ``x [1, C, H, W]`` (no pixels, no sweep): what the
    views need to compute a map."""
    from vitviz.capture import capture
    from vitviz.pipeline import InferenceResult
    from vitviz.model.preprocess import CropGeometry

    want: Any = target if grads else None
    with torch.inference_mode(False):
        cap = capture(model, x, target=want, store_dtype=torch.float32).image(0)
    h, w = int(x.shape[-2]), int(x.shape[-1])
    return InferenceResult(source="input", rgb=np.zeros((1, 1, 3), np.uint8),
                           geometry=CropGeometry((h, w), (h, w), (0, 0, h, w)), capture=cap)


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
    target: int | None,
    options: "ViewOptions | None" = None,
    seed: int = 0,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> RandomisationCheck:
    """Cascading randomisation of the blocks from the top (Adebayo et al. 2018), on a deep copy of ``model``.

    Stage i (i = 0 .. L-1) re-initialises block ``L-1-i`` (:func:`_reinitialise`, with the torch RNG seeded by
    ``seed + i`` inside ``torch.random.fork_rng``, so the caller's random state is untouched), on top of the
    stages before it; the view's map is recomputed (one capture, with gradients when the view needs them) and
    compared with the original map by :func:`spearman`. The patch embedding, the position embedding and the head
    are kept, so the gradient views still differentiate the same class's logit.

    Args:
        model: a vitviz ViT (:func:`vitviz.capture.capture`); never modified.
        x: the preprocessed image ``[C, H, W]`` or ``[1, C, H, W]``.
        view: a view key (``"relevance"``, ``"rollout"``, ``"grad_rollout"``, ``"cls"`` ...) or ``"cls_last"``.
        target: the class for the gradient views; None for the model's top class on ``x``.
        options: the view's options (default: :class:`vitviz.document.session.ViewOptions` defaults).
        seed: base seed of the re-initialisation.
        progress, cancel: ``progress(done, L)`` after each stage; ``cancel()`` before each (raises
            :class:`EvaluationCancelled`).

    Returns:
        A :class:`RandomisationCheck` with the original map, each stage's map and the correlations ``[L]``.
    """
    if not isinstance(model, nn.Module) or not hasattr(model, "blocks"):
        raise ValueError(f"randomisation_check needs a vitviz ViT (with .blocks), got {type(model).__name__}")
    blocks_n = len(model.blocks)
    v, opts, _ = _resolve_view(view, blocks_n, options)
    work = copy.deepcopy(model).eval()
    xin, _ = _check_input(work, x, model_patch_size(work))
    grads = bool(v.needs_grads or "target" in v.reads)
    if not grads:
        target = None
    elif target is None:
        with torch.inference_mode():
            target = int(work(xin)[0].float().argmax())
    else:
        target = _check_target(work, target)

    def compute() -> np.ndarray:
        r = _result_for(work, xin, target=target, grads=grads)
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


# ------------------------------------------------------------------------------------------------------ views
def evaluate_views(
    pipeline_or_model: "Pipeline | nn.Module",
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
    from PIL import Image

    from vitviz.imaging import load_image
    from vitviz.pipeline import DTYPES, InferenceResult, Pipeline

    _check_choice("baseline", baseline, BASELINES)
    steps = _check_steps(steps)
    seeds = _check_seeds(seeds)
    if isinstance(views, str):
        views = (views,)
    if not views:
        raise ValueError("views is empty: name at least one view")
    from vitviz import views as registry

    for name in views:  # unknown names before any work
        if name != "cls_last":
            registry.get(name)
    if isinstance(pipeline_or_model, Pipeline):
        pipe = pipeline_or_model
    elif isinstance(pipeline_or_model, nn.Module):
        device, dtype = _device_dtype(pipeline_or_model)
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

    p = _Perturber(model, x, target=tgt, baseline=baseline, patch_size=result.patch_size, seed=seed,
                   batch_size=batch_size)
    if p.grid != tuple(result.grid):
        raise ValueError(f"the preprocessed image has a {p.grid} patch grid but the result {tuple(result.grid)}")
    rows: list[ViewScore] = []
    blocks: list[np.ndarray] = []
    for name in views:
        v, opts, title = _resolve_view(name, result.num_layers)
        why = v.unavailable(result)
        m = None if why else v.compute(result, opts)
        if m is None:
            rows.append(ViewScore(name, title, None, None, None, why or "no map for this model"))
            continue
        sal = _check_saliency(m, p.grid)
        rows.append(ViewScore(name, title, np.asarray(m, np.float32), None, None))
        for mode in ("deletion", "insertion"):
            blocks.append(p.curve_masks(sal, mode, steps)[0])
    rand = p.random_saliencies(seeds, seed)
    for mode in ("deletion", "insertion"):
        for s in rand:
            blocks.append(p.curve_masks(s, mode, steps)[0])
    scores = p.scores(np.concatenate(blocks), progress, cancel).reshape(len(blocks), steps + 1)
    counts = _counts(p.P, steps)
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


# ------------------------------------------------------------------------------------------------------ summaries
def mean_over_images(tables: Sequence[FaithfulnessTable]) -> dict[str, tuple[float, float, float, float]]:
    """Per view key: ``(mean deletion AUC, mean insertion AUC, 0, 0)`` over the tables where the view has curves;
    for ``"random"``: the mean over images of the random AUCs and their standard deviation over the rankings
    (ranking r's AUC averaged over the images, then the spread of those ``R`` means; ``ddof=1``)."""
    out: dict[str, tuple[float, float, float, float]] = {}
    if not tables:
        return out
    keys: list[str] = []
    for t in tables:
        keys += [v.key for v in t.views if v.key not in keys]
    for k in keys:
        d = [v.deletion_auc for t in tables for v in t.views if v.key == k and v.deletion is not None]
        i = [v.insertion_auc for t in tables for v in t.views if v.key == k and v.insertion is not None]
        if d:
            out[k] = (float(np.mean(d)), float(np.mean(i)), 0.0, 0.0)
    R = {t.random_deletion.seeds for t in tables}
    if len(R) == 1:
        rd = np.stack([t.random_deletion.aucs for t in tables]).mean(0)
        ri = np.stack([t.random_insertion.aucs for t in tables]).mean(0)
        out["random"] = (float(rd.mean()), float(ri.mean()), _std(rd), _std(ri))
    return out


def format_mean_table(tables: Sequence[FaithfulnessTable]) -> str:
    """The mean over the images of :func:`mean_over_images` as text (best view per column marked with ``*``)."""
    means = mean_over_images(tables)
    views = {k: v for k, v in means.items() if k != "random"}
    if not tables:
        return "no images"
    t0 = tables[0]
    lines = [f"mean over {len(tables)} images: {t0.steps} steps, {t0.baseline} baseline"]
    rname = _random_name(t0.random_deletion)
    width = max([len(k) for k in views] + [len(rname)])
    lines.append(f"  {'view':<{width}s}  {'deletion AUC (lower is better)':>31s}  "
                 f"{'insertion AUC (higher is better)':>33s}")
    best_d = min(views, key=lambda k: views[k][0]) if views else None
    best_i = max(views, key=lambda k: views[k][1]) if views else None
    for k, (d, i, _, _) in views.items():
        lines.append(f"  {k:<{width}s}  {f'{d:.4f}' + ('*' if k == best_d else ' '):>31s}  "
                     f"{f'{i:.4f}' + ('*' if k == best_i else ' '):>33s}")
    if "random" in means:
        d, i, sd, si = means["random"]
        lines.append(f"  {rname:<{width}s}  {f'{d:.4f} +- {sd:.4f} ':>31s}  {f'{i:.4f} +- {si:.4f} ':>33s}")
    return "\n".join(lines)


CSV_COLUMNS = ("image", "target", "label", "view", "deletion_auc", "insertion_auc", "deletion_std",
               "insertion_std", "steps", "baseline", "seeds")


def write_csv(path: str | os.PathLike, tables: Sequence[FaithfulnessTable], *, overwrite: bool = False) -> Path:
    """Write the tables (one row per image and view, the random row with its standard deviations, then the means
    over the images with ``image = "mean"``) as CSV, atomically: a temporary file in the same folder, then a hard
    link (which fails when the name exists) or, with ``overwrite``, a rename.

    Raises:
        FileExistsError: the file exists and ``overwrite`` is False.
        ExportError: the folder is missing, is a file or is not writable; the disk is full ...
    """
    from vitviz.imaging import write_atomic

    target = Path(path)
    check_writable(target, overwrite=overwrite)  # missing folder, a file as parent, an existing file
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for t in tables:
        for v in t.views:
            w.writerow([t.source, t.target, t.label, v.key, _num(v.deletion_auc), _num(v.insertion_auc), "", "",
                        t.steps, t.baseline, ""])
        rd, ri = t.random_deletion, t.random_insertion
        w.writerow([t.source, t.target, t.label, "random", _num(rd.auc_mean), _num(ri.auc_mean), _num(rd.auc_std),
                    _num(ri.auc_std), t.steps, t.baseline, rd.seeds])
    if len(tables) > 1:
        for k, (d, i, sd, si) in mean_over_images(tables).items():
            w.writerow(["mean", "", "", k, _num(d), _num(i), _num(sd) if k == "random" else "",
                        _num(si) if k == "random" else "", tables[0].steps, tables[0].baseline,
                        tables[0].random_deletion.seeds if k == "random" else ""])
    data = buf.getvalue().encode("utf-8")
    return write_atomic(target, lambda fh: fh.write(data), overwrite=overwrite, suffix=".tmp",
                        exists_message=f"{target} already exists (pass --overwrite to replace it)")


def check_writable(path: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Refuse, before any work, a CSV path that :func:`write_csv` would refuse: an existing file without
    ``overwrite``, a folder of that name, a missing parent or one that is a file."""
    from vitviz._util.files import folder_problem
    from vitviz.imaging import ExportError

    target = Path(path)
    if target.is_dir():
        raise ExportError(target, "a folder of that name exists")
    if not overwrite and (target.exists() or target.is_symlink()):
        raise FileExistsError(f"{target} already exists (pass --overwrite to replace it)")
    folder = target.parent if str(target.parent) else Path(".")
    problem = folder_problem(folder)
    if problem:
        raise ExportError(target, problem)


def _std(a: np.ndarray) -> float:
    return float(a.std(ddof=1)) if a.size > 1 else 0.0


def _num(v: float) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.6f}"
