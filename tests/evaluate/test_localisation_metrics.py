"""The localisation metrics (vitviz.evaluate.localisation) against references written from the published
definitions (Chefer's imagenet_seg_eval.py in torch, AP as the mean precision at each positive, the pointing games of
Zhang et al. and Wang et al. as loops), against scikit-learn's average_precision_score and against Quantus' own
metrics where the definitions agree; ties, empty masks and constant maps give NaN with a reason."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz.evaluate.localisation import (
    IGNORE,
    average_precision,
    localisation_scores,
    map_in_crop,
    mask_in_crop,
)
from vitviz.evaluate.protocol import LOCALISATION_METRICS
from vitviz.model.preprocess import Preprocess


def _chefer(res: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Pixel accuracy and mIoU of one image as imagenet_seg_eval.py computes them (torch, its own arithmetic)."""
    Res = torch.as_tensor(res)[None, None]
    ret = Res.mean()
    Res_1 = Res.gt(ret).type(Res.type())
    Res_0 = Res.le(ret).type(Res.type())
    output = torch.cat((Res_0, Res_1), 1)[0]
    target = torch.as_tensor(labels).long()
    predict = torch.max(output, 0)[1] + 1
    t1 = target + 1
    labeled = int((t1 > 0).sum())
    correct = int(((predict == t1) * (t1 > 0)).sum())
    predict = predict * (t1 > 0).long()
    inter = predict * (predict == t1).long()
    area_inter = torch.histc(inter.float(), bins=2, min=1, max=2)
    area_pred = torch.histc(predict.float(), bins=2, min=1, max=2)
    area_lab = torch.histc(t1.float(), bins=2, min=1, max=2)
    union = area_pred + area_lab - area_inter
    return correct / labeled, float((area_inter / union).mean())


def _ap_reference(scores: np.ndarray, positive: np.ndarray) -> float:
    """AP without ties: the mean over the positives of the precision at each positive's rank."""
    order = np.argsort(-scores.reshape(-1))
    y = positive.reshape(-1)[order]
    ranks = np.flatnonzero(y) + 1
    return float(np.mean(np.arange(1, ranks.size + 1) / ranks))


def _bilinear(s: np.ndarray, h: int, w: int) -> np.ndarray:
    """Bilinear resize with align_corners=False written out: source coordinate (i + 1/2) * in / out - 1/2, clamped."""
    gh, gw = s.shape
    out = np.zeros((h, w))
    for i in range(h):
        y = max((i + 0.5) * gh / h - 0.5, 0.0)
        y0 = min(int(math.floor(y)), gh - 1)
        y1, fy = min(y0 + 1, gh - 1), y - y0
        for j in range(w):
            x = max((j + 0.5) * gw / w - 0.5, 0.0)
            x0 = min(int(math.floor(x)), gw - 1)
            x1, fx = min(x0 + 1, gw - 1), x - x0
            out[i, j] = ((1 - fy) * ((1 - fx) * s[y0, x0] + fx * s[y0, x1])
                         + fy * ((1 - fx) * s[y1, x0] + fx * s[y1, x1]))
    return out


def _case(seed: int, grid=(4, 4), crop=(16, 16)):
    rng = np.random.default_rng(seed)
    sal = rng.random(grid)
    mask = np.zeros(crop, np.int64)
    y0, x0 = rng.integers(0, 8, 2)
    mask[y0:y0 + 6, x0:x0 + 7] = 1
    return sal, mask


def test_map_in_crop_is_bilinear_without_corner_alignment_then_min_max():
    sal = np.random.default_rng(0).random((3, 5))
    ref = _bilinear(sal, 12, 20)
    ref = (ref - ref.min()) / (ref.max() - ref.min())
    np.testing.assert_allclose(map_in_crop(sal, (12, 20)), ref, atol=1e-12)
    assert map_in_crop(np.ones((3, 3)), (6, 6)) is None


def test_mask_in_crop_is_pils_nearest_resize_then_the_centre_crop():
    rng = np.random.default_rng(1)
    mask = rng.integers(0, 4, (37, 53)).astype(np.uint8)
    pre = Preprocess(resize=20, crop=(16, 16))
    geo = pre.geometry(mask.shape)
    rh, rw = geo.resized_size
    top, left, ch, cw = geo.crop_box
    ref = np.asarray(Image.fromarray(mask).resize((rw, rh), Image.NEAREST))[top:top + ch, left:left + cw]
    np.testing.assert_array_equal(mask_in_crop(mask, geo), ref)
    # a crop larger than the resized image: the padding is ignored, as the image there is zero padding
    geo = Preprocess(resize=10, crop=(12, 12)).geometry((10, 10))
    got = mask_in_crop(np.ones((10, 10), np.uint8), geo)
    assert (got == IGNORE).sum() == 12 * 12 - 100 and (got == 1).sum() == 100
    with pytest.raises(ValueError, match="the mask is 5x4 pixels but the image 10x10"):
        mask_in_crop(np.ones((4, 5)), geo)


@pytest.mark.parametrize("seed", range(6))
def test_pixel_accuracy_and_miou_equal_chefers_script(seed):
    sal, mask = _case(seed)
    got = localisation_scores(sal, mask)
    acc, miou = _chefer(map_in_crop(sal, mask.shape), mask)
    assert got.values["pixel_accuracy"] == pytest.approx(acc, abs=1e-12)
    assert got.values["miou"] == pytest.approx(miou, abs=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_map_is_the_mean_ap_of_object_and_background(seed):
    sal, mask = _case(seed)
    m = map_in_crop(sal, mask.shape)
    got = localisation_scores(sal, mask).values["map"]
    # a random map resized bilinearly has ties only where pixels are exact copies; break nothing, compare with sklearn
    from sklearn.metrics import average_precision_score
    ref = (average_precision_score(mask.reshape(-1) == 1, m.reshape(-1))
           + average_precision_score(mask.reshape(-1) == 0, 1 - m.reshape(-1))) / 2
    assert got == pytest.approx(ref, abs=1e-12)


def test_average_precision_against_the_mean_precision_at_positives_and_sklearn_with_ties():
    from sklearn.metrics import average_precision_score
    rng = np.random.default_rng(3)
    s = rng.random(200)
    y = rng.random(200) < 0.3
    assert average_precision(s, y) == pytest.approx(_ap_reference(s, y), abs=1e-12)
    tied = np.round(s * 5) / 5  # 6 distinct scores: ties enter together
    assert average_precision(tied, y) == pytest.approx(average_precision_score(y, tied), abs=1e-12)
    # hand-made: scores 3, 2, 2, 1 with labels 1, 0, 1, 0 -> points (R, P): (1/2, 1), (1, 2/3) -> AP = 1/2 + 1/3
    assert average_precision(np.array([3, 2, 2, 1]), np.array([1, 0, 1, 0], bool)) == pytest.approx(5 / 6)
    assert math.isnan(average_precision(s, np.zeros(200, bool)))


def test_pointing_games_by_hand():
    sal = np.zeros((4, 4))
    sal[1, 2] = 1.0
    sal[3, 0] = 0.5
    mask = np.zeros((16, 16), np.int64)
    mask[4:8, 8:12] = 1  # exactly patch (1, 2)
    got = localisation_scores(sal, mask)
    m = map_in_crop(sal, mask.shape)
    assert got.values["pointing_game"] == 1.0
    assert got.values["energy_pointing_game"] == pytest.approx(m[mask == 1].sum() / m.sum())
    # the object moved one patch right of the maximum: a miss; within 15 px tolerance: a hit
    mask2 = np.zeros((16, 16), np.int64)
    mask2[4:8, 13:16] = 1
    assert localisation_scores(sal, mask2).values["pointing_game"] == 0.0
    assert localisation_scores(sal, mask2, tolerance=15).values["pointing_game"] == 1.0
    far = np.zeros((64, 64), np.int64)
    far[60:, :4] = 1
    sal2 = np.zeros((4, 4))
    sal2[0, 3] = 1.0
    assert localisation_scores(sal2, far, tolerance=15).values["pointing_game"] == 0.0


def test_ties_empty_masks_and_constant_maps_are_nan_with_a_reason():
    flat = np.zeros((4, 4))
    flat[:, :2] = 1.0  # a plateau: the maximum on half the crop
    mask = np.zeros((16, 16), np.int64)
    mask[:, :4] = 1  # the object covers part of the plateau only
    got = localisation_scores(flat, mask)
    assert math.isnan(got.values["pointing_game"]) and "shared by" in got.reasons["pointing_game"]
    assert not math.isnan(got.values["miou"])
    from sklearn.metrics import average_precision_score  # the plateau's ties enter together, as in scikit-learn
    m = map_in_crop(flat, mask.shape).reshape(-1)
    y = mask.reshape(-1) == 1
    assert got.values["map"] == pytest.approx(
        (average_precision_score(y, m) + average_precision_score(~y, 1 - m)) / 2, abs=1e-12)
    empty = localisation_scores(np.random.default_rng(0).random((4, 4)), np.zeros((16, 16), np.int64))
    assert all(math.isnan(empty.values[k]) for k in LOCALISATION_METRICS)
    assert "empty mask" in empty.reasons["miou"] and empty.reasons["p_miou"] == "no point labels"
    const = localisation_scores(np.ones((4, 4)), mask)
    assert all(math.isnan(v) for v in const.values.values()) and "constant" in const.why()
    full = localisation_scores(np.random.default_rng(0).random((4, 4)), np.ones((16, 16), np.int64))
    assert math.isnan(full.values["miou"]) and "no background" in full.reasons["map"]
    assert full.values["pixel_accuracy"] >= 0 and full.values["energy_pointing_game"] == pytest.approx(1.0)
    ign = np.full((16, 16), IGNORE)
    assert "ignored" in localisation_scores(np.random.default_rng(0).random((4, 4)), ign).reasons["miou"]


def test_ignored_pixels_do_not_count():
    sal, mask = _case(2)
    ignored = mask.copy()
    ignored[:, :5] = IGNORE
    got = localisation_scores(sal, ignored)
    m = map_in_crop(sal, mask.shape)
    keep = ignored != IGNORE
    obj = ignored[keep] == 1
    pred = m[keep] > m.mean()
    assert got.values["pixel_accuracy"] == pytest.approx(np.mean(pred == obj))
    assert got.values["energy_pointing_game"] == pytest.approx(m[keep][obj].sum() / m[keep].sum())


def test_point_iou_by_hand():
    sal = np.zeros((2, 2))
    sal[0, 0] = 1.0  # the top-left quarter high
    ign = np.full((8, 8), IGNORE)
    pts = [(1, 1, True), (6, 6, True), (1, 6, False), (2, 2, False), (100, 100, True)]
    m = map_in_crop(sal, (8, 8))
    hit = [m[int(y), int(x)] >= 0.5 for y, x, _ in pts[:4]]
    tp = sum(h and p for h, (_, _, p) in zip(hit, pts))
    fp = sum(h and not p for h, (_, _, p) in zip(hit, pts))
    fn = sum((not h) and p for h, (_, _, p) in zip(hit, pts))
    assert localisation_scores(sal, ign, points=pts).values["p_miou"] == pytest.approx(tp / (tp + fp + fn))
    assert tp == 1 and fp == 1 and fn == 1
    none = localisation_scores(sal, ign, points=[(100, 100, True)])
    assert "no annotated point" in none.reasons["p_miou"]


@pytest.mark.parametrize("seed", range(5))
def test_equal_to_quantus_where_the_definitions_agree(seed):
    quantus = pytest.importorskip("quantus")
    sal, mask = _case(seed)
    got = localisation_scores(sal, mask)
    m = map_in_crop(sal, mask.shape)
    a, s = m[None, None], mask[None, None].astype(float)
    pg = quantus.PointingGame(disable_warnings=True).evaluate_batch(a_batch=a, s_batch=s)
    rma = quantus.RelevanceMassAccuracy(disable_warnings=True).evaluate_batch(a_batch=a, s_batch=s)
    # Quantus counts a hit when any pixel holding the maximum is on the object; with a unique maximum that is ours
    if np.count_nonzero(m == m.max()) == 1:
        assert got.values["pointing_game"] == float(pg[0])
    assert got.values["energy_pointing_game"] == pytest.approx(float(rma[0]), abs=1e-12)
