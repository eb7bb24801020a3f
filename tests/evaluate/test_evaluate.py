"""vitviz.evaluate: perturbation curves, the random baseline, the randomisation check, evaluate_views and
``vitviz evaluate``.

The curves are checked on a toy model whose target logit reads two known patches (so the right answer is known),
against a brute-force loop of single forwards, and for their arithmetic by hand; the demo model's faithfulness
criteria on held-out shapes; the real ViT-Ti (skipped without ../shared/weights) prints its table.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from repo_paths import SHARED_WEIGHTS
from torch import nn

from vitviz import evaluate as E
from vitviz import views
from vitviz.cli import main
from vitviz.evaluate import (
    EvaluationCancelled,
    curve_auc,
    evaluate_views,
    perturbation_curve,
    random_baseline,
    randomisation_check,
    rank_average,
    spearman,
)
from vitviz.pipeline import Pipeline
from vitviz.views.options import ViewOptions

TINY = SHARED_WEIGHTS / "vit_tiny_patch16_224_augreg_in21k_ft_in1k.safetensors"


# ------------------------------------------------------------------------------------------------ the toy model
class PatchProbe(nn.Module):
    """The model contract of perturbation_curve, with a known answer.

    Input ``[B, 3, 32, 32]`` = a 4x4 grid of 8 px patches; 3 classes. Logit 0 is ``scale * (v - 1/2)`` where v is the
    mean pixel of the patches ``important`` (row-major indices); logits 1 and 2 are 0. So on an image that is 1 on
    those patches, class 0 has probability ``e^5 / (e^5 + 2) = 0.9866``; with them at the mean baseline (0) it has
    ``e^-5 / (e^-5 + 2) = 0.0034``.
    """

    patch_size = 8
    num_classes = 3

    def __init__(self, important=(5, 10), scale=10.0):
        super().__init__()
        self.important = list(important)
        self.scale = scale
        self.dummy = nn.Parameter(torch.zeros(()))  # device and dtype, as a real model has

    def forward(self, x):
        B, C, H, W = x.shape
        p = self.patch_size
        tiles = x.reshape(B, C, H // p, p, W // p, p).mean(dim=(1, 3, 5)).reshape(B, -1)  # [B, P] patch means
        v = tiles[:, self.important].mean(1)
        z = torch.zeros_like(v)
        return torch.stack([self.scale * (v - 0.5) + self.dummy, z, z], dim=1)


HI = math.exp(5) / (math.exp(5) + 2)
LO = math.exp(-5) / (math.exp(-5) + 2)


def _probe_input(important=(5, 10)):
    """1 on the important patches, 0 elsewhere (so the mean baseline removes exactly what the model reads)."""
    x = torch.zeros(3, 32, 32)
    for i in important:
        r, c = divmod(i, 4)
        x[:, r * 8:(r + 1) * 8, c * 8:(c + 1) * 8] = 1.0
    return x


def _saliency_top(important=(5, 10)):
    s = np.arange(16, dtype=np.float64) / 100  # a weak ramp elsewhere
    s[list(important)] = [2.0, 1.0][:len(important)]
    return s.reshape(4, 4)


def test_deleting_the_patches_the_model_reads_collapses_the_score_at_the_first_step():
    model = PatchProbe().eval()
    x = _probe_input()
    c = perturbation_curve(model, x, _saliency_top(), target=0, mode="deletion", steps=8)
    # step 1 perturbs round(16 / 8) = 2 patches: exactly the two the model reads
    assert c.counts.tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 16]
    np.testing.assert_allclose(c.scores, [HI] + [LO] * 8, rtol=1e-6)
    ins = perturbation_curve(model, x, _saliency_top(), target=0, mode="insertion", steps=8)
    np.testing.assert_allclose(ins.scores, [LO] + [HI] * 8, rtol=1e-6)  # revealed first: recovered at step 1
    neg = perturbation_curve(model, x, _saliency_top(), target=0, mode="negative", steps=8)
    np.testing.assert_allclose(neg.scores, [HI] * 8 + [LO], rtol=1e-6)  # removed last
    # and the AUCs by hand: trapezoids of width 1/8
    assert c.auc == pytest.approx((HI + LO) / 2 / 8 + 7 * LO / 8, rel=1e-6)
    assert ins.auc == pytest.approx((LO + HI) / 2 / 8 + 7 * HI / 8, rel=1e-6)
    assert neg.auc == pytest.approx(7 * HI / 8 + (HI + LO) / 2 / 8, rel=1e-6)
    assert not c.higher_is_better and ins.higher_is_better and neg.higher_is_better
    # a map that puts the two patches last does the opposite
    bad = -_saliency_top()
    assert perturbation_curve(model, x, bad, target=0, mode="deletion", steps=8).auc > 0.8
    assert perturbation_curve(model, x, bad, target=0, mode="insertion", steps=8).auc < 0.2


def test_one_patch_at_a_time_and_ties_go_to_the_lower_index():
    model = PatchProbe(important=(3,)).eval()
    x = _probe_input((3,))
    flat = np.zeros((4, 4))  # all tied: the order is 0, 1, 2, ... so patch 3 goes at step 4
    c = perturbation_curve(model, x, flat, target=0, steps=16)
    assert c.counts.tolist() == list(range(17))
    assert np.argmax(c.scores < 0.5) == 4
    neg = perturbation_curve(model, x, flat, target=0, mode="negative", steps=16)  # ascending, ties by index too
    assert np.argmax(neg.scores < 0.5) == 4
    tied = np.zeros((4, 4))
    tied.flat[[3, 9]] = 1.0  # two tied at the top: 3 before 9
    c = perturbation_curve(model, x, tied, target=0, steps=16)
    assert np.argmax(c.scores < 0.5) == 1


def test_auc_arithmetic():
    assert curve_auc([0, 0.5, 1], [1, 0.5, 0]) == pytest.approx(0.5)
    assert curve_auc([0, 1], [1, 1]) == pytest.approx(1.0)
    # uneven spacing (as round(k P / steps) gives): 0.2 * (1 + .4) / 2 + 0.8 * (.4 + 0) / 2
    assert curve_auc([0, 0.2, 1.0], [1.0, 0.4, 0.0]) == pytest.approx(0.14 + 0.16)
    assert curve_auc([0.0], [0.3]) == 0.0
    with pytest.raises(ValueError, match="same length"):
        curve_auc([0, 1], [1])
    # the counts: round half up of k P / steps (P = 16, steps = 6: 2.67, 5.33, 8, 10.67, 13.33)
    assert E.step_counts(16, 6).tolist() == [0, 3, 5, 8, 11, 13, 16]
    assert E.step_counts(10, 4).tolist() == [0, 3, 5, 8, 10]  # 2.5 -> 3, 7.5 -> 8
    assert E.step_counts(3, 6).tolist() == [0, 1, 1, 2, 2, 3, 3]  # more steps than patches: repeats, no error


def _brute_force_curve(model, x, saliency, target, mode, steps, base):
    """Every perturbed image built by pixel loops and run alone."""
    C, H, W = x.shape
    p = 8
    gh, gw = H // p, W // p
    P = gh * gw
    sal = np.asarray(saliency).reshape(-1)
    order = sorted(range(P), key=lambda i: (sal[i], i)) if mode == "negative" else \
        sorted(range(P), key=lambda i: (-sal[i], i))
    scores = []
    for k in range(steps + 1):
        n = int(math.floor(k * P / steps + 0.5))
        chosen = set(order[:n])
        img = x.clone()
        for i in range(P):
            from_base = (i not in chosen) if mode == "insertion" else (i in chosen)
            if from_base:
                r, c = divmod(i, gw)
                img[:, r * p:(r + 1) * p, c * p:(c + 1) * p] = base[:, r * p:(r + 1) * p, c * p:(c + 1) * p]
        with torch.inference_mode():
            scores.append(float(model(img[None]).softmax(-1)[0, target]))
    return np.array(scores)


@pytest.mark.parametrize("mode", E.MODES)
@pytest.mark.parametrize("baseline", E.BASELINES)
def test_each_mode_and_baseline_against_single_forwards(tiny_model, mode, baseline):
    """A real (tiny) vitviz ViT on a non-square input (4x6 patches): the batched curve equals single forwards of
    images built pixel by pixel; the ends are the image and the baseline."""
    torch.manual_seed(1)
    x = torch.randn(3, 32, 48)
    sal = np.random.default_rng(0).random((4, 6))
    c = perturbation_curve(tiny_model, x, sal, target=2, mode=mode, steps=5, baseline=baseline, seed=3)
    base = E.baseline_image(x[None], baseline, patch_size=8, seed=3)[0]
    ref = _brute_force_curve(tiny_model, x, sal, 2, mode, 5, base)
    np.testing.assert_allclose(c.scores, ref, rtol=1e-5, atol=1e-6)
    assert c.fractions[0] == 0 and c.fractions[-1] == 1 and np.all(np.diff(c.fractions) > 0)
    assert c.mode == mode and c.baseline == baseline and c.target == 2
    assert c.auc == pytest.approx(curve_auc(c.fractions, c.scores))


def test_batching_equals_one_at_a_time(tiny_model):
    x = torch.randn(3, 32, 32)
    sal = torch.rand(4, 4)  # a tensor map works as well as an array
    one = perturbation_curve(tiny_model, x, sal, target=1, mode="insertion", steps=16, batch_size=1)
    many = perturbation_curve(tiny_model, x[None], sal, target=1, mode="insertion", steps=16, batch_size=64)
    odd = perturbation_curve(tiny_model, x, sal, target=1, mode="insertion", steps=16, batch_size=5)
    np.testing.assert_allclose(one.scores, many.scores, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(one.scores, odd.scores, rtol=1e-5, atol=1e-7)
    assert E.auto_batch_size(tiny_model, 16) == E.MAX_AUTO_BATCH


def test_forwards_are_batched_and_shared_images_run_once(tiny_model):
    calls = []
    h = tiny_model.register_forward_pre_hook(lambda m, a: calls.append(a[0].shape[0]))
    try:
        perturbation_curve(tiny_model, torch.randn(3, 32, 32), np.random.rand(4, 4), target=0, steps=20)
        assert calls == [17]  # 16 patches, 20 steps: 17 distinct images, one forward
        calls.clear()
        rb = random_baseline(tiny_model, torch.randn(3, 32, 32), target=0, steps=4, seeds=6, batch_size=8)
        assert sum(calls) == 6 * 3 + 2 and max(calls) == 8  # the image and the full baseline once, not 6 times
    finally:
        h.remove()
    assert rb.scores.shape == (6, 5) and rb.aucs.shape == (6,)


def test_gaussian_blur_matches_a_direct_convolution():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 3, 12, 16)).astype(np.float32)
    sigma = 2.0
    r = math.ceil(3 * sigma)
    t = np.arange(-r, r + 1)
    k = np.exp(-t**2 / (2 * sigma**2))
    k /= k.sum()
    pad = np.pad(x[0], ((0, 0), (r, r), (r, r)), mode="reflect")  # numpy's reflect = torch's (edge not repeated)
    ref = np.zeros_like(x[0])
    for c in range(3):
        for i in range(12):
            for j in range(16):
                ref[c, i, j] = k @ pad[c, i:i + 2 * r + 1, j:j + 2 * r + 1] @ k
    out = E.gaussian_blur(torch.from_numpy(x), sigma)[0].numpy()
    np.testing.assert_allclose(out, ref, atol=1e-5)
    flat = torch.full((1, 3, 16, 16), 0.7)
    torch.testing.assert_close(E.gaussian_blur(flat, 8.0), flat)  # a constant image stays (kernel cut at side - 1)
    # the blur baseline is sigma = one patch
    torch.testing.assert_close(E.baseline_image(torch.from_numpy(x), "blur", patch_size=3),
                               E.gaussian_blur(torch.from_numpy(x), 3.0))


def test_mean_and_noise_baselines():
    x = torch.randn(1, 3, 32, 32)
    assert torch.equal(E.baseline_image(x, "mean", patch_size=8), torch.zeros_like(x))
    a = E.baseline_image(x, "noise", patch_size=8, seed=4)
    assert torch.equal(a, E.baseline_image(x, "noise", patch_size=8, seed=4))
    assert not torch.equal(a, E.baseline_image(x, "noise", patch_size=8, seed=5))
    assert abs(float(a.mean())) < 0.1 and abs(float(a.std()) - 1) < 0.1
    with pytest.raises(ValueError, match="baseline='zero'"):
        E.baseline_image(x, "zero", patch_size=8)


def test_random_baseline_is_the_curves_of_random_rankings(tiny_model):
    x = torch.randn(3, 32, 32)
    rb = random_baseline(tiny_model, x, target=3, mode="insertion", steps=8, seeds=4, seed=7)
    assert rb.seeds == 4 and rb.fractions.shape == (9,)
    for r in range(4):  # ranking r is the permutation of default_rng([seed, r]) used as a map
        sal = np.random.default_rng([7, r]).permutation(16).astype(float).reshape(4, 4)
        c = perturbation_curve(tiny_model, x, sal, target=3, mode="insertion", steps=8)
        np.testing.assert_allclose(rb.scores[r], c.scores, rtol=1e-5, atol=1e-7)
        assert rb.aucs[r] == pytest.approx(c.auc, rel=1e-5)
    assert rb.auc_mean == pytest.approx(rb.aucs.mean()) and rb.auc_std == pytest.approx(rb.aucs.std(ddof=1))
    assert rb.mean_curve.auc == pytest.approx(rb.auc_mean)
    again = random_baseline(tiny_model, x, target=3, mode="insertion", steps=8, seeds=4, seed=7)
    np.testing.assert_array_equal(again.scores, rb.scores)


@pytest.mark.parametrize("kwargs, match", [
    (dict(saliency=np.zeros((4, 5))), r"expected shape \(4, 4\), got \(4, 5\)"),
    (dict(saliency=np.zeros(16)), r"expected shape \(4, 4\), got \(16,\)"),
    (dict(saliency=np.full((4, 4), np.nan)), "non-finite"),
    (dict(target=5), r"target class 5 out of range for a model with 5 classes \(valid: 0..4\)"),
    (dict(target=-1), "out of range"),
    (dict(target=1.0), "class index"),
    (dict(target=True), "class index"),
    (dict(steps=0), "steps must be an integer >= 1, got 0"),
    (dict(steps=2.5), "steps must be an integer"),
    (dict(mode="delete"), "mode='delete'; valid: 'deletion', 'insertion', 'negative'"),
    (dict(baseline="zeros"), "baseline='zeros'; valid: 'mean', 'blur', 'noise'"),
    (dict(batch_size=0), "batch_size"),
    (dict(x=torch.randn(2, 3, 32, 32)), "one preprocessed image"),
    (dict(x=torch.randn(3, 30, 32)), "not a whole number of 8x8 patches"),
    (dict(x=np.zeros((3, 32, 32))), "torch.Tensor"),
])
def test_bad_input_is_rejected_with_a_clear_message(tiny_model, kwargs, match):
    args = dict(x=torch.randn(3, 32, 32), saliency=np.zeros((4, 4)), target=1)
    args.update(kwargs)
    x, sal = args.pop("x"), args.pop("saliency")
    with pytest.raises(ValueError, match=match):
        perturbation_curve(tiny_model, x, sal, **args)


def test_a_model_in_training_mode_or_without_a_patch_size_is_refused(tiny_model):
    x = torch.randn(3, 32, 32)
    tiny_model.train()
    try:
        with pytest.raises(ValueError, match="training mode"):
            perturbation_curve(tiny_model, x, np.zeros((4, 4)), target=0)
    finally:
        tiny_model.eval()
    plain = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 4)).eval()
    with pytest.raises(ValueError, match="patch size"):
        perturbation_curve(plain, x, np.zeros((4, 4)), target=0)
    c = perturbation_curve(plain, x, np.zeros((4, 4)), target=0, patch_size=8)  # any module, given the patch size
    assert c.scores.shape == (21,)
    with pytest.raises(ValueError, match="target class 4 out of range for a model with 4 classes"):
        perturbation_curve(plain, x, np.zeros((4, 4)), target=4, patch_size=8)  # no num_classes: checked on logits


def test_torchvision_and_timm_models_fit_the_contract():
    """The docstring's claim: other libraries' ViTs work as they are (patch size read from the model)."""
    import torchvision

    tv = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16,
                                              mlp_dim=32, num_classes=3).eval()
    c = perturbation_curve(tv, torch.randn(3, 32, 32), np.random.rand(4, 4), target=2, steps=4)
    assert c.scores.shape == (5,)
    with pytest.raises(ValueError, match="out of range for a model with 3 classes"):
        perturbation_curve(tv, torch.randn(3, 32, 32), np.random.rand(4, 4), target=3)
    timm = pytest.importorskip("timm")
    tm = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=1,
                           num_classes=3).eval()
    assert E.model_patch_size(tm) == (8, 8)
    c = perturbation_curve(tm, torch.randn(3, 32, 32), np.random.rand(4, 4), target=1, steps=4, baseline="blur")
    assert c.scores.shape == (5,)


def test_cancel_and_progress(tiny_model):
    x = torch.randn(3, 32, 32)
    seen = []
    random_baseline(tiny_model, x, target=0, steps=10, seeds=5, batch_size=8, progress=lambda d, t: seen.append((d, t)))
    total = seen[-1][1]
    assert seen[-1] == (total, total) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    with pytest.raises(EvaluationCancelled):
        random_baseline(tiny_model, x, target=0, steps=10, seeds=5, batch_size=8, cancel=lambda: True)
    n = []
    with pytest.raises(EvaluationCancelled):
        random_baseline(tiny_model, x, target=0, steps=10, seeds=5, batch_size=8,
                        progress=lambda d, t: n.append(d), cancel=lambda: len(n) >= 2)
    assert len(n) == 2  # stopped between batches


# ------------------------------------------------------------------------------------------------ rank correlation
def _brute_ranks(v):
    v = list(np.asarray(v, dtype=float).reshape(-1))
    return np.array([1 + sum(u < a for u in v) + (sum(u == a for u in v) - 1) / 2 for a in v])


def test_spearman_with_ties_against_brute_force_and_scipy():
    rng = np.random.default_rng(0)
    for _ in range(5):
        a = rng.integers(0, 5, size=30).astype(float)  # many ties
        b = a + rng.integers(-2, 3, size=30)
        np.testing.assert_allclose(rank_average(a), _brute_ranks(a))
        ra, rb = _brute_ranks(a), _brute_ranks(b)
        assert spearman(a, b) == pytest.approx(np.corrcoef(ra, rb)[0, 1], rel=1e-12)
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 1, 0]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    try:
        from scipy.stats import spearmanr
    except ImportError:  # pragma: no cover
        return
    a = rng.integers(0, 4, size=(8, 8))
    b = rng.normal(size=(8, 8)).round(1)
    assert spearman(a, b) == pytest.approx(spearmanr(a.ravel(), b.ravel()).statistic, rel=1e-12)


# ------------------------------------------------------------------------------------------------ randomisation
def test_randomisation_check_leaves_the_model_unchanged(tiny_model):
    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    fused = [b.attn.fused for b in tiny_model.blocks]
    x = torch.randn(3, 32, 32)
    rng_before = torch.random.get_rng_state()
    rc = randomisation_check(tiny_model, x, "relevance", target=2)
    after = tiny_model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert [b.attn.fused for b in tiny_model.blocks] == fused and not tiny_model.training
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # the caller's random state is untouched
    L = len(tiny_model.blocks)
    assert rc.randomised == [(2,), (2, 1), (2, 1, 0)] and rc.maps.shape == (L, 4, 4) and rc.correlations.shape == (L,)
    # the original map is the view's map of the model as it is
    from vitviz.analysis import relevance
    from vitviz.capture import capture

    cap = capture(tiny_model, x[None], target=2).image(0)
    ref = relevance(cap.attentions, cap.attention_grads, grid=cap.grid, num_prefix_tokens=1)
    np.testing.assert_allclose(rc.original, ref.numpy(), rtol=1e-5, atol=1e-7)
    assert all(rc.correlations[i] == pytest.approx(spearman(rc.original, rc.maps[i])) for i in range(L))
    # deterministic from its seed; another seed, other maps
    again = randomisation_check(tiny_model, x, "relevance", target=2)
    np.testing.assert_array_equal(again.maps, rc.maps)
    other = randomisation_check(tiny_model, x, "relevance", target=2, seed=1)
    assert not np.array_equal(other.maps, rc.maps)
    # views without gradients, and the last-layer [CLS] attention; None = the top class
    roll = randomisation_check(tiny_model, x, "rollout", target=None)
    assert roll.target is None and roll.correlations.shape == (L,)
    cls = randomisation_check(tiny_model, x, "cls_last", target=None)
    assert cls.correlations.shape == (L,) and cls.correlations[0] < 1  # the last block's attention is replaced


def test_randomisation_check_rejects_bad_input(tiny_model):
    with pytest.raises(ValueError, match="unknown view 'nope'"):
        randomisation_check(tiny_model, torch.randn(3, 32, 32), "nope", target=0)
    with pytest.raises(ValueError, match="out of range"):
        randomisation_check(tiny_model, torch.randn(3, 32, 32), "relevance", target=9)
    with pytest.raises(ValueError, match="vitviz ViT"):
        randomisation_check(nn.Linear(2, 2), torch.randn(3, 32, 32), target=0)


# ------------------------------------------------------------------------------------------------ evaluate_views
def _photo(seed=0, size=(40, 50)):
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, size + (3,), dtype=np.uint8))


def test_evaluate_views_uses_the_windows_maps_and_one_capture(tiny_model, monkeypatch):
    pipe = Pipeline(tiny_model)
    img = _photo()
    result = pipe.run(img)
    runs = []
    orig = Pipeline.run
    monkeypatch.setattr(Pipeline, "run", lambda self, *a, **k: runs.append(1) or orig(self, *a, **k))
    prog = []
    t = evaluate_views(pipe, result, steps=8, seeds=3, progress=lambda d, n: prog.append((d, n)))
    assert runs == []  # the window's result is reused
    assert [v.key for v in t.views] == list(E.DEFAULT_VIEWS) and t.target == result.target
    # the maps are the views' maps at the default options; cls_last = the cls view at the last layer, mean of heads
    L = result.num_layers
    expect = {"cls_last": views.get("cls").compute(result, ViewOptions(view="cls", layer=L - 1, head="mean"))}
    for k in ("rollout", "grad_rollout", "relevance", "legrad", "gradcam"):
        expect[k] = views.get(k).compute(result, ViewOptions(view=k))
    for v in t.views:
        np.testing.assert_array_equal(v.saliency, expect[v.key])
    # and the curves are perturbation_curve / random_baseline of those maps (one batched run for all of them)
    x, _ = tiny_model.spec.preprocess.apply(img)
    for v in t.views:
        for mode in ("deletion", "insertion"):
            c = perturbation_curve(tiny_model, x, v.saliency, target=t.target, mode=mode, steps=8)
            np.testing.assert_allclose(getattr(v, mode).scores, c.scores, rtol=1e-5, atol=1e-7)
    rb = random_baseline(tiny_model, x, target=t.target, mode="insertion", steps=8, seeds=3)
    np.testing.assert_allclose(t.random_insertion.scores, rb.scores, rtol=1e-5, atol=1e-7)
    assert prog[-1][0] == prog[-1][1] and prog[-1][1] <= 2 * 9 * (len(E.DEFAULT_VIEWS) + 3)
    rows = t.rows()
    assert [r[0] for r in rows] == list(E.DEFAULT_VIEWS) + ["random"]
    assert rows[-1][1] == pytest.approx(t.random_deletion.auc_mean)
    text = t.format()
    assert "random (3 seeds)" in text and "relevance" in text and "*" in text
    # another target: a new capture for it
    other = (t.target + 1) % 5
    t2 = evaluate_views(pipe, result, ("relevance",), steps=4, seeds=2, target=other)
    assert runs == [1] and t2.target == other
    with pytest.raises(EvaluationCancelled):
        evaluate_views(pipe, result, steps=4, seeds=2, cancel=lambda: True)


def test_evaluate_views_on_a_model_a_path_and_unavailable_views(tiny_model, tmp_path):
    from vitviz.model import ViT
    from vitviz.model.preprocess import Preprocess
    from vitviz.model.spec import ModelSpec

    path = tmp_path / "a.png"
    _photo(1).save(path)
    t = evaluate_views(tiny_model, str(path), ("relevance", "cls"), steps=4, seeds=2, baseline="blur")
    assert t.source.endswith("a.png") and t.baseline == "blur"
    assert t.views[0].deletion is not None and t.views[1].deletion is not None  # cls: the default layer 0
    assert E.view_options("cls_last", 12) == ("cls", {"layer": 11, "head": "mean", "ignore_artefacts": False})
    assert E.view_options("rollout", 12) == ("rollout", {"discard_ratio": 0.0, "head_fusion": "mean",
                                                         "ignore_artefacts": False, "start_layer": 0})
    # a model without [CLS]: rollout and relevance are unavailable (a row with the reason, no curves)
    m = ViT(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=3, class_token=False,
            global_pool="avg").eval()
    m.spec = ModelSpec(config=m.config, preprocess=Preprocess(resize=32, crop=(32, 32)), labels=("a", "b", "c"),
                       name="no cls")
    t = evaluate_views(m, str(path), ("rollout", "relevance", "cls_last"), steps=4, seeds=2)
    assert [v.unavailable for v in t.views[:2]] == ["the model has no [CLS] token"] * 2
    assert t.views[0].deletion is None and math.isnan(t.views[0].deletion_auc)
    assert t.views[2].deletion is not None  # the last layer's attention from patch 0 instead
    assert "the model has no [CLS] token" in t.format() and t.best() == ("cls_last", "cls_last")
    with pytest.raises(ValueError, match="unknown view"):
        evaluate_views(tiny_model, str(path), ("rollout", "nope"), steps=4, seeds=2)
    with pytest.raises(ValueError, match="steps"):
        evaluate_views(tiny_model, str(path), steps=0)
    m.spec = None
    with pytest.raises(ValueError, match="no spec"):
        evaluate_views(m, str(path))


# ------------------------------------------------------------------------------------------------ the CLI
def _write_images(folder: Path, n: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = folder / f"img{i}.png"
        _photo(i).save(p)
        out.append(p)
    return out


def test_cli_evaluate_folder_glob_csv_and_bad_images(tiny_model_file, tmp_path, capsys):
    from vitviz.cli import evaluate_command

    assert evaluate_command.DEFAULT_VIEWS is E.DEFAULT_VIEWS  # imported from torch-free vitviz.evaluate.protocol
    imgs = _write_images(tmp_path / "pics" / "deeper", 2)
    (tmp_path / "pics" / "notes.txt").write_text("not an image")  # not an image suffix: not picked up
    bad = tmp_path / "pics" / "broken.png"
    bad.write_bytes(b"not a png")
    csv_path = tmp_path / "out.csv"
    argv = ["evaluate", str(tiny_model_file), str(tmp_path / "pics"), "--steps", "4", "--seeds", "2",
            "--views", "rollout,relevance", "--csv", str(csv_path)]
    assert main(argv) == 2  # one bad image: reported, the others evaluated
    out, err = capsys.readouterr()
    head, *lines = err.strip().splitlines()  # the first line: what runs where (tests/cli/test_run_flags.py)
    assert head.startswith("vitviz evaluate: 3 images · 1 target each · views rollout, relevance · 4 steps, 2 random "
                           "rankings, ") and "; tiny test ViT on cpu, auto: " in head
    assert len(lines) == 2 and "broken.png" in lines[0] and "Traceback" not in err and "wrote" in lines[1]
    assert lines[0].startswith("vitviz evaluate: error: ")
    assert out.count("deletion AUC") == 3 and "mean over 2 images" in out and "random (2 seeds)" in out
    text = csv_path.read_text().splitlines()
    assert text[0].startswith("image,target,label,view,deletion_auc,insertion_auc")
    assert len(text) == 1 + 2 * 3 + 3 and text[-1].startswith("mean,")
    # never overwritten without --overwrite, and refused before any work
    before = csv_path.read_text()
    assert main(["evaluate", str(tiny_model_file), str(imgs[0]), "--steps", "2", "--seeds", "1", "--csv",
                 str(csv_path)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--overwrite" in err and csv_path.read_text() == before
    assert main(["evaluate", str(tiny_model_file), str(imgs[0]), "--steps", "2", "--seeds", "1", "--csv", str(csv_path),
                 "--overwrite", "--views", "relevance"]) == 0
    assert csv_path.read_text() != before and len(csv_path.read_text().splitlines()) == 3
    capsys.readouterr()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.csv")]  # no temporary file left
    # a glob (recursive) and a pattern that matches nothing
    assert main(["evaluate", str(tiny_model_file), str(tmp_path / "pics" / "**" / "img*.png"), str(tmp_path / "z*.png"),
                 "--steps", "2", "--seeds", "1", "--views", "cls_last"]) == 2
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert out.count("deletion AUC") == 3 and "no files match" in err and len(errors) == 1


@pytest.mark.parametrize("extra, needle", [
    (["--steps", "0"], "--steps 0: must be at least 1"),
    (["--views", "nope"], "--views nope: unknown view"),
    (["--target", "7"], "--target 7: out of range for a model with 5 classes"),
    (["--csv", "{tmp}/missing/out.csv"], "does not exist"),
])
def test_cli_evaluate_errors_are_one_line(tiny_model_file, tmp_path, capsys, extra, needle):
    img = _write_images(tmp_path / "p", 1)[0]
    extra = [e.format(tmp=tmp_path) for e in extra]
    assert main(["evaluate", str(tiny_model_file), str(img), *extra]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and needle in err, err
    assert err.startswith("vitviz evaluate: error: ")


# ------------------------------------------------------------------------------------------------ the demo model
DEMO_IMAGES = 12  # of the 100 of bench/evaluate.py (b): the subset keeps this file within its time budget


@pytest.fixture(scope="module")
def demo_pipeline():
    from vitviz.demo import load_demo_model

    return Pipeline(load_demo_model())


@pytest.fixture(scope="module")
def demo_tables(demo_pipeline):
    from vitviz.demo import generate

    t = time.perf_counter()
    tables = [evaluate_views(demo_pipeline, generate(k, seed=0, stream="test").pil(), ("relevance",), steps=20,
                             seeds=10) for k in range(DEMO_IMAGES)]
    print(f"\ndemo: {DEMO_IMAGES} held-out images, relevance + 10 random rankings, 20 steps: "
          f"{time.perf_counter() - t:.1f} s")
    return tables


def test_demo_relevance_beats_the_random_baseline(demo_tables):
    """Faithfulness on held-out shapes (the first DEMO_IMAGES of the "test" stream; bench/evaluate.py (b) runs all 100):
    relevance's mean deletion AUC below the random baseline's mean - 2 std and its insertion AUC above mean + 2 std,
    the std being the spread over the 10 rankings of the image-averaged random AUC."""
    m = E.mean_over_images(demo_tables)
    d, i, _, _ = m["relevance"]
    rd, ri, sd, si = m["random"]
    print(f"relevance deletion {d:.3f} vs random {rd:.3f} +- {sd:.3f}; insertion {i:.3f} vs {ri:.3f} +- {si:.3f}")
    assert d < rd - 2 * sd
    assert i > ri + 2 * si


def test_demo_randomisation_destroys_relevance(demo_pipeline):
    from vitviz.demo import generate

    last = []
    for k in range(4):
        x, _ = demo_pipeline.spec.preprocess.apply(generate(k, seed=0, stream="test").pil())
        rc = randomisation_check(demo_pipeline.model, x, "relevance", target=None)  # the top class
        last.append(rc.correlations[-1])
    print(f"Spearman of relevance once every block is randomised: {np.round(last, 3).tolist()}")
    assert np.mean(last) < 0.5


# ------------------------------------------------------------------------------------------------ real weights
@pytest.mark.real_weights
@pytest.mark.skipif(not TINY.is_file(), reason=f"real weights not present at {TINY}")
def test_real_vit_tiny_table_on_four_photos():
    data = pytest.importorskip("skimage.data")
    from vitviz.model import load_checkpoint
    from vitviz.model.spec import inception_preprocess

    m = load_checkpoint(TINY)
    m.spec = m.spec.replace(preprocess=inception_preprocess(224))  # augreg: mean = std = 0.5
    pipe = Pipeline(m)
    tables = []
    for name in ("chelsea", "coffee", "astronaut", "rocket"):
        t = evaluate_views(pipe, Image.fromarray(getattr(data, name)()).convert("RGB"), steps=5, seeds=2)
        t.source = name
        print("\n" + t.format())
        tables.append(t)
        for v in t.views:
            assert 0 <= v.deletion_auc <= 1 and 0 <= v.insertion_auc <= 1
    print("\n" + E.format_mean_table(tables))
    assert tables[0].target in range(281, 286)  # chelsea is a cat
