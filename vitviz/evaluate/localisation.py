"""Localisation of a map against ground truth: does the map find the object? numpy and torch, no Qt.

Everything is computed where the model sees the image, its input crop (:class:`vitviz.model.preprocess.CropGeometry`):

* the mask (at the image's size: 1 object, 0 background, -1 ignored) goes through the same resize and centre crop
  as the image, nearest neighbour (:func:`mask_in_crop`; crop pixels outside the resized image are ignored);
* the map at patch resolution is resized bilinearly (``align_corners=False``) to the crop, then min-max normalised
  to [0, 1] (:func:`map_in_crop`).

Then, over the pixels that are not ignored (``m``: the map, ``g``: the object mask)::

    pred            = m > mean(m)                                  (Chefer et al. 2021, imagenet_seg_eval.py; the
                                                                   mean over the whole crop)
    pixel_accuracy  = #(pred == g) / #pixels (not ignored)
    miou            = (IoU(pred, g) + IoU(not pred, not g)) / 2    IoU(a, b) = #(a and b) / #(a or b)
    map             = (AP(m, g) + AP(1 - m, not g)) / 2            AP = sum_n (R_n - R_{n-1}) P_n over the distinct
                                                                   scores, highest first (scikit-learn's definition)
    pointing_game   = 1 if the maximum of m lies on the object      (Zhang et al. 2016; with ``tolerance`` px: within
                      (within ``tolerance`` pixels of it), else 0    that Euclidean distance of an object pixel)
    energy_pointing_game = sum(m on g) / sum(m)                    (Wang et al. 2020, Score-CAM)
    p_miou          = TP / (TP + FP + FN) at annotated points,      (LeGrad's OpenImagesV7 protocol: positive and
                      predicted positive where m >= 0.5             negative points of one class)

Nothing raises on awkward data: a value that is undefined is NaN and :attr:`LocalisationScores.reasons` says why
(a constant map, no object or no background pixel in the crop, a maximum shared by pixels on and off the object, a
maximum on ignored pixels, no point in the crop). Chefer's script pools pixel accuracy and IoU over the whole data
set; the per-image values here are averaged over images by the summaries (:mod:`vitviz.evaluate.report`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from vitviz.evaluate.outcomes import LocalisationScores
from vitviz.evaluate.protocol import IGNORE, LOCALISATION_METRICS
from vitviz.model.preprocess import CropGeometry


def mask_in_crop(mask: np.ndarray, geometry: CropGeometry) -> np.ndarray:
    """``mask [H, W]`` (the image's size) through the preprocessing's resize and centre crop, nearest neighbour (PIL's
    rule: output pixel ``i`` reads source pixel ``floor((i + 1/2) * H / resized_H)``); crop pixels that fall outside
    the resized image are :data:`IGNORE`. Returns int64 ``[crop_h, crop_w]``."""
    m = np.asarray(mask)
    h, w = geometry.image_size
    if m.shape != (h, w):
        raise ValueError(f"the mask is {m.shape[1]}x{m.shape[0]} pixels but the image {w}x{h}")
    rh, rw = geometry.resized_size
    top, left, ch, cw = geometry.crop_box
    rows = np.arange(top, top + ch)
    cols = np.arange(left, left + cw)
    src_r = np.minimum(((rows + 0.5) * h / rh).astype(np.int64), h - 1)
    src_c = np.minimum(((cols + 0.5) * w / rw).astype(np.int64), w - 1)
    out = m[np.clip(src_r, 0, h - 1)[:, None], np.clip(src_c, 0, w - 1)[None, :]].astype(np.int64)
    outside = ((rows < 0) | (rows >= rh))[:, None] | ((cols < 0) | (cols >= rw))[None, :]
    out[outside] = IGNORE
    return out


def map_in_crop(saliency: np.ndarray, size: tuple[int, int]) -> np.ndarray | None:
    """The patch map ``[gh, gw]`` resized bilinearly (``align_corners=False``) to ``size = (crop_h, crop_w)`` and
    min-max normalised to [0, 1] (float64); None when the resized map is constant (min-max is undefined)."""
    s = torch.as_tensor(np.asarray(saliency, dtype=np.float64))
    if s.ndim != 2:
        raise ValueError(f"the map must be 2-D [gh, gw], got shape {tuple(s.shape)}")
    up = F.interpolate(s[None, None], size=tuple(size), mode="bilinear", align_corners=False)[0, 0].numpy()
    if not np.isfinite(up).all():
        raise ValueError("the map holds NaN or infinite values")
    lo, hi = float(up.min()), float(up.max())
    if hi <= lo:
        return None
    return (up - lo) / (hi - lo)


def average_precision(scores: np.ndarray, positive: np.ndarray) -> float:
    """AP of ``scores`` for the boolean ``positive`` (flattened): ``sum_n (R_n - R_{n-1}) P_n`` with one operating
    point per distinct score, highest first (tied scores enter together); NaN when there is no positive."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(positive, dtype=bool).reshape(-1)
    order = np.argsort(-s)  # (the order within a run of ties does not matter: a run enters at once)
    return _ap_sorted(s[order], y[order])


def _ap_sorted(s: np.ndarray, y: np.ndarray) -> float:
    """:func:`average_precision` of scores ``s`` already sorted from the highest, ``y`` in the same order."""
    n_pos = int(np.count_nonzero(y))
    if n_pos == 0:
        return math.nan
    last = np.r_[np.flatnonzero(s[1:] != s[:-1]), s.size - 1]  # the last index of each run of equal scores
    tp = np.cumsum(y)[last].astype(np.float64)
    precision = tp / (last + 1)
    recall = tp / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def _map_score(mv: np.ndarray, ov: np.ndarray) -> float:
    """``(AP(m, object) + AP(1 - m, background)) / 2`` with one sort: ascending ``m`` is descending ``1 - m`` (the
    rounding of ``1 - m`` is monotone, so its runs of ties are read from its own values)."""
    order = np.argsort(mv)
    asc, y = mv[order], ov[order]
    return (_ap_sorted(asc[::-1], y[::-1]) + _ap_sorted(1.0 - asc, ~y)) / 2.0


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    union = int(np.count_nonzero(a | b))
    return math.nan if union == 0 else np.count_nonzero(a & b) / union


def localisation_scores(saliency: np.ndarray, mask: np.ndarray, *, points: Sequence | None = None,
                        tolerance: float = 0.0) -> LocalisationScores:
    """The metrics of one patch map against a mask in the crop (:func:`mask_in_crop`: 1 object, 0 background,
    :data:`IGNORE`) and/or annotated points ``[(y, x, positive), ...]`` in crop pixels (for ``p_miou``).

    Args:
        saliency: ``[gh, gw]`` the view's map.
        mask: int ``[crop_h, crop_w]`` (for points alone: all :data:`IGNORE`; its shape gives the crop's).
        points: annotated points for ``p_miou`` (None: NaN, "no point labels").
        tolerance: the pointing game's tolerance in crop pixels (0: the maximum must lie on the object; Zhang et
            al.'s original protocol: 15).
    """
    out = LocalisationScores({k: math.nan for k in LOCALISATION_METRICS}, {})
    g = np.asarray(mask)
    if g.ndim != 2:
        raise ValueError(f"the mask must be 2-D, got shape {g.shape}")
    m = map_in_crop(saliency, g.shape)
    if m is None:
        out.reasons.update(dict.fromkeys(LOCALISATION_METRICS, "the map is constant"))
        return out
    _point_iou(out, m, points)
    valid = g != IGNORE
    obj = (g > 0) & valid
    if not valid.any():
        for k in LOCALISATION_METRICS[:-1]:
            out.reasons[k] = "every pixel of the crop is ignored"
        return out
    if not obj.any():
        for k in LOCALISATION_METRICS[:-1]:
            out.reasons[k] = "no object pixel in the crop (empty mask)"
        return out
    mv, ov = m[valid], obj[valid]
    bg = ~ov
    pred = mv > m.mean()  # the threshold: the mean of the whole map in the crop (Chefer's Res.mean())
    out.values["pixel_accuracy"] = float(np.count_nonzero(pred == ov) / ov.size)
    if not bg.any():
        out.reasons["miou"] = out.reasons["map"] = "no background pixel in the crop"
    else:
        out.values["miou"] = (_iou(pred, ov) + _iou(~pred, bg)) / 2.0
        out.values["map"] = _map_score(mv, ov)
    _pointing(out, m, valid, obj, tolerance)
    total = float(mv.sum())
    out.values["energy_pointing_game"] = float(mv[ov].sum()) / total if total > 0 else math.nan
    if total <= 0:
        out.reasons["energy_pointing_game"] = "the map is zero on every pixel that is not ignored"
    return out


def _pointing(out: LocalisationScores, m: np.ndarray, valid: np.ndarray, obj: np.ndarray, tolerance: float) -> None:
    """The pointing game: every pixel holding the maximum is a hit (on, or within ``tolerance`` of, the object) or a
    miss; ignored maxima do not count. All hits: 1; all misses: 0; both: NaN (a tie the game cannot decide)."""
    ys, xs = np.nonzero(m == m.max())
    keep = valid[ys, xs]
    ys, xs = ys[keep], xs[keep]
    if ys.size == 0:
        out.reasons["pointing_game"] = "the maximum of the map lies on ignored pixels"
        return
    if tolerance > 0:
        oy, ox = np.nonzero(obj)
        d2 = (ys[:, None] - oy[None, :]) ** 2 + (xs[:, None] - ox[None, :]) ** 2
        hits = d2.min(axis=1) <= tolerance * tolerance
    else:
        hits = obj[ys, xs]
    if hits.all() or not hits.any():
        out.values["pointing_game"] = float(hits.all())
    else:
        out.reasons["pointing_game"] = (f"the maximum is shared by {hits.size} pixels, {int(hits.sum())} on the "
                                        "object and the others off it")


def _point_iou(out: LocalisationScores, m: np.ndarray, points: Sequence | None) -> None:
    """p-mIoU's per-image IoU at the annotated points that fall in the crop (the map read at the nearest pixel)."""
    if points is None:
        out.reasons["p_miou"] = "no point labels"
        return
    h, w = m.shape
    tp = fp = fn = 0
    n = 0
    for y, x, positive in points:
        r, c = int(math.floor(y)), int(math.floor(x))
        if not (0 <= r < h and 0 <= c < w):
            continue
        n += 1
        hit = m[r, c] >= 0.5
        tp += bool(positive) and hit
        fp += (not positive) and hit
        fn += bool(positive) and not hit
    if n == 0:
        out.reasons["p_miou"] = "no annotated point in the crop"
    elif tp + fp + fn == 0:
        out.reasons["p_miou"] = "no positive point and none predicted positive"
    else:
        out.values["p_miou"] = tp / (tp + fp + fn)
