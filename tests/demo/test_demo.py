"""The bundled shapes demo: generator, training command, shipped weights, sample images.

The end-to-end checks run the shipped model on freshly generated held-out images (the ``"test"`` stream, which
training never draws from) through the project's own preprocessing, capture and analysis, and check that the maps
point at the object whose position the generator knows.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open

from vitviz.analysis import attention_rollout, relevance
from vitviz.capture import capture
from vitviz.demo import CLASSES, default_model_path, generate, generate_batch, load_demo_model, render, sample_images
from vitviz.demo.samples import make_sample, sample_name
from vitviz.demo.shapes import STREAMS, sample_region
from vitviz.demo.train import (
    augment,
    build_model,
    demo_preprocess,
    dense_label_loss,
    jax_init_,
    lr_at,
    make_pool,
    pca_patch_init_,
    to_input,
    token_label_loss,
)
from vitviz.demo.train import main as train_main
from vitviz.model import load_checkpoint
from vitviz.model.preprocess import CropGeometry

HELD_OUT = 500
TEST_SEED = 0  # the "test" stream: never used by training (train/val streams only)


# ------------------------------------------------------------------------------------------------- generator
def test_generator_is_deterministic_and_streams_differ():
    a, b = generate(17, seed=5), generate(17, seed=5)
    assert np.array_equal(a.image, b.image) and a.label == b.label and a.box == b.box
    assert np.array_equal(a.mask, b.mask)
    assert not np.array_equal(a.image, generate(18, seed=5).image)
    assert not np.array_equal(a.image, generate(17, seed=6).image)
    assert not np.array_equal(a.image, generate(17, seed=5, stream="test").image)
    assert len(set(STREAMS.values())) == len(STREAMS)
    X1, Y1, B1 = generate_batch(3, 5, seed=2, stream="val")
    X2, Y2, B2 = generate_batch(3, 5, seed=2, stream="val")
    assert np.array_equal(X1, X2) and np.array_equal(Y1, Y2) and np.array_equal(B1, B2)
    assert X1.shape == (5, 112, 112, 3) and X1.dtype == np.uint8
    assert Y1.tolist() == [(i % len(CLASSES)) for i in range(3, 8)]


def test_at_least_eight_classes_with_distinct_shapes():
    assert len(CLASSES) >= 8 and len(set(CLASSES)) == len(CLASSES)
    # the same random draws give visibly different masks for every pair of classes
    masks = [render(k, np.random.default_rng(0)).mask > 0.5 for k in range(len(CLASSES))]
    for i in range(len(CLASSES)):
        for j in range(i + 1, len(CLASSES)):
            iou = (masks[i] & masks[j]).sum() / (masks[i] | masks[j]).sum()
            assert iou < 0.9, (CLASSES[i], CLASSES[j], iou)


@pytest.mark.parametrize("size", [(112, 112), (336, 448), (200, 150)])
def test_boxes_contain_the_object_pixels_and_are_tight(size):
    for i in range(40):
        region = sample_region(size)
        s = generate(i, seed=1, stream="val", size=size, region=region)
        assert s.image.shape == size + (3,) and s.image.dtype == np.uint8
        assert s.mask.shape == size
        x0, y0, x1, y1 = s.box
        ys, xs = np.nonzero(s.mask)
        # every object pixel inside the box ...
        assert xs.min() >= x0 and xs.max() < x1 and ys.min() >= y0 and ys.max() < y1
        # ... and the box is tight: object pixels on each of its four edges
        assert xs.min() == x0 and xs.max() == x1 - 1 and ys.min() == y0 and ys.max() == y1 - 1
        # the object lies inside the requested region (what the centre crop keeps)
        rx0, ry0, rx1, ry1 = region
        assert rx0 <= x0 and ry0 <= y0 and x1 <= rx1 and y1 <= ry1
        # a real object: at least a 20 px (at 112) wide blob, and its pixels carry its colour, not the background's
        side = min(rx1 - rx0, ry1 - ry0)
        assert max(x1 - x0, y1 - y0) >= 0.2 * side
        inside = s.mask > 0.99
        assert inside.sum() > 0.05 * (x1 - x0) * (y1 - y0)


def test_object_pixels_differ_from_the_surrounding_background():
    """The object's colour is drawn far from the background under it, so it is visible (not a coin-flip)."""
    for i in range(24):
        s = generate(i, seed=3, stream="val")
        m = s.mask
        core = m > 0.99
        x0, y0, x1, y1 = s.box
        ring = np.zeros_like(core)
        ring[max(0, y0 - 4):y1 + 4, max(0, x0 - 4):x1 + 4] = True
        ring &= m == 0
        obj = s.image[core].astype(float).mean(0)
        bg = s.image[ring].astype(float).mean(0)
        assert np.linalg.norm(obj - bg) > 40, (i, obj, bg)


def test_bad_generator_input_is_rejected():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="label"):
        render(len(CLASSES), rng)
    with pytest.raises(ValueError, match="region"):
        render(0, rng, size=(112, 112), region=(0, 0, 200, 112))
    with pytest.raises(ValueError, match="stream"):
        generate(0, stream="nope")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------- training
def test_lr_schedule_warmup_then_cosine():
    lrs = [lr_at(s, 100, 1.0, 10) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(lrs[:9], lrs[1:10]))
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    assert lrs[-1] < 0.02


def test_augment_keeps_shape_range_and_is_seeded():
    x = torch.rand(6, 3, 16, 16)
    a = augment(x.clone(), torch.Generator().manual_seed(1))
    b = augment(x.clone(), torch.Generator().manual_seed(1))
    assert a.shape == x.shape and torch.equal(a, b)
    assert a.min() >= 0 and a.max() <= 1
    assert not torch.allclose(a, x)


def test_augment_moves_masks_with_their_images():
    masks = torch.zeros(5, 16, 16)
    for i in range(5):
        masks[i, i:i + 4, 2 * i:2 * i + 5] = 1.0
    x = masks[:, None].repeat(1, 3, 1, 1) * 0.5 + 0.25
    xa, ma = augment(x, torch.Generator().manual_seed(0), masks)
    assert ma.shape == masks.shape and xa.shape == x.shape
    for i in range(5):
        # every channel is an increasing affine function of the (flipped / turned) mask
        c = np.corrcoef(xa[i, 0].flatten().numpy(), ma[i].flatten().numpy())[0, 1]
        assert c > 0.999
        assert ma[i].sum() == masks[i].sum()


def test_token_label_loss_matches_a_brute_force_loop():
    torch.manual_seed(0)
    model = build_model(16, 1, 2)
    jax_init_(model, torch.Generator().manual_seed(0))
    torch.nn.init.normal_(model.head.weight)  # jax init zeroes the head; make the loss informative
    feats = torch.randn(2, 1 + 14 * 14, 16)
    masks = torch.zeros(2, 112, 112)
    masks[0, 0:16, 0:8] = 1.0  # patches (0, 0) and (1, 0) fully covered
    masks[1, 8:16, 8:10] = 1.0  # patch (1, 1) covered 25 %: selected at min_cover 0.25
    masks[1, 0:8, 8:9] = 1.0  # patch (0, 1) covered 12.5 %: not selected
    labels = torch.tensor([3, 5])
    model.requires_grad_(False)
    got = token_label_loss(model, feats, masks, labels)
    rows = [(0, 0 * 14 + 0, 3), (0, 1 * 14 + 0, 3), (1, 1 * 14 + 1, 5)]
    ref = sum(float(torch.nn.functional.cross_entropy(model.head(feats[b, 1 + t])[None], torch.tensor([c])))
              for b, t, c in rows) / len(rows)
    assert float(got) == pytest.approx(ref, rel=1e-5)
    assert float(token_label_loss(model, feats, torch.zeros(2, 112, 112), labels)) == 0.0


def test_dense_label_loss_matches_a_brute_force_loop():
    torch.manual_seed(0)
    model = build_model(16, 1, 2)
    head = torch.nn.Linear(16, len(CLASSES) + 1)
    feats = torch.randn(2, 1 + 14 * 14, 16)
    masks = torch.zeros(2, 112, 112)
    masks[0, 0:16, 0:8] = 1.0  # patches (0, 0), (1, 0) -> class 3
    masks[1, 8:16, 8:10] = 1.0  # patch (1, 1) at 25 % -> class 5
    masks[1, 0:8, 8:9] = 1.0  # patch (0, 1) at 12.5 % -> background
    labels = torch.tensor([3, 5])
    with torch.no_grad():
        got = float(dense_label_loss(model, head, feats, masks, labels))
        total, bg = 0.0, len(CLASSES)
        for b in range(2):
            for t in range(14 * 14):
                target = {(0, 0): 3, (0, 14): 3, (1, 15): 5}.get((b, t), bg)
                total += float(torch.nn.functional.cross_entropy(head(feats[b, 1 + t])[None], torch.tensor([target])))
    assert got == pytest.approx(total / (2 * 14 * 14), rel=1e-5)


def test_jax_init_scales_and_zero_head():
    model = build_model(64, 1, 2)
    jax_init_(model, torch.Generator().manual_seed(0))
    assert torch.count_nonzero(model.head.weight) == 0
    fc1 = model.blocks[0].mlp.fc1.weight.detach()
    bound = (6 / (fc1.shape[0] + fc1.shape[1])) ** 0.5
    assert float(fc1.abs().max()) <= bound and float(fc1.std()) > 0.8 * bound / 3**0.5
    w = model.patch_embed.proj.weight.detach()
    assert abs(float(w.std()) - 1 / (w[0].numel()) ** 0.5) < 0.01


def test_pca_patch_init_whitens_the_leading_principal_components():
    """Embedded patches are decorrelated with variance lambda_i / (lambda_i + eps) along the principal axes, checked
    against numpy's eigen-decomposition of the patch covariance computed here by explicit loops over patches."""
    X, _, _ = generate_batch(0, 12, seed=0, stream="val", size=(32, 32))
    x = to_input(X, demo_preprocess())
    model = build_model(16, 1, 2, img_size=32)
    eps = 1e-2
    pca_patch_init_(model, x, eps=eps)
    P = 8
    patches = np.array([x[b, :, i:i + P, j:j + P].numpy().ravel()
                        for b in range(len(x)) for i in range(0, 32, P) for j in range(0, 32, P)], np.float64)
    centred = patches - patches.mean(0)
    lam = np.linalg.eigvalsh(centred.T @ centred / (len(patches) - 1))[::-1][:16]
    with torch.no_grad():
        emb = model.patch_embed.proj(x).flatten(2).transpose(1, 2).reshape(-1, 16).double().numpy()
    assert np.abs(emb.mean(0)).max() < 1e-4  # the bias centres the embedding
    cov = np.cov(emb, rowvar=False)
    np.testing.assert_allclose(np.diag(cov), lam / (lam + eps), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(cov - np.diag(np.diag(cov)), 0, atol=1e-4)
    # deterministic, including the eigenvector signs
    other = build_model(16, 1, 2, img_size=32)
    pca_patch_init_(other, x, eps=eps)
    assert torch.equal(other.patch_embed.proj.weight, model.patch_embed.proj.weight)


def test_training_pool_is_the_generator_output_for_any_worker_count():
    x1, y1, m1 = make_pool(6, seed=4, side=32, workers=1, chunk=2)
    x2, y2, m2 = make_pool(6, seed=4, side=32, workers=2, chunk=2)
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2) and np.array_equal(m1, m2)
    X, Y, _, M = generate_batch(0, 6, seed=4, stream="train", size=(32, 32), with_masks=True)
    assert np.array_equal(x1, X) and np.array_equal(y1, Y)
    assert m1.dtype == np.uint8 and np.abs(m1 / 255.0 - M).max() <= 0.5 / 255 + 1e-6


def test_to_input_equals_the_spec_preprocessing():
    X, _, _ = generate_batch(0, 3, seed=0, stream="val")
    pre = demo_preprocess()
    ref = torch.stack([pre(Image.fromarray(im)) for im in X])
    torch.testing.assert_close(to_input(X, pre), ref, rtol=0, atol=1e-6)


def _tiny(out, *extra):
    return ["--steps", "2", "--batch-size", "8", "--pool-size", "12", "--workers", "1", "--embed-dim", "32",
            "--depth", "1", "--heads", "2", "--val-size", "8", "--log-every", "1", "--threads", "1", "--low-res", "56",
            "--low-res-steps", "1", "--out", str(out), *extra]


def test_training_command_runs_and_its_output_loads(tmp_path):
    out = tmp_path / "tiny.safetensors"
    r = subprocess.run([sys.executable, "-m", "vitviz.demo.train", *_tiny(out)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "phase 1/2 step     1/1  56px" in r.stdout and "phase 2/2 step     2/2  112px" in r.stdout
    assert "validation accuracy" in r.stdout
    model = load_checkpoint(out)
    assert model.spec.labels == CLASSES
    assert model.spec.preprocess == demo_preprocess()
    assert model.config.patch_size == 8 and model.config.img_size == (112, 112)
    assert model.config.embed_dim == 32 and model.config.depth == 1
    assert model(torch.zeros(1, 3, 112, 112)).shape == (1, len(CLASSES))
    # it refuses to overwrite without --force
    before = out.read_bytes()
    r = subprocess.run([sys.executable, "-m", "vitviz.demo.train", *_tiny(out)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0 and "exists" in r.stderr and out.read_bytes() == before


def test_training_is_reproducible_from_its_seed(tmp_path, capsys):
    paths = [tmp_path / "a.safetensors", tmp_path / "b.safetensors", tmp_path / "c.safetensors"]
    assert train_main(_tiny(paths[0], "--seed", "3")) == 0
    assert train_main(_tiny(paths[1], "--seed", "3")) == 0
    assert train_main(_tiny(paths[2], "--seed", "4")) == 0
    a, b, c = (load_checkpoint(p).state_dict() for p in paths)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)
    # training changed the weights away from initialisation
    init = build_model(32, 1, 2).state_dict()
    assert "phase 2/2 step     1/2" in capsys.readouterr().out
    assert any(not torch.equal(a[k], init[k]) for k in a if k in init)


# ------------------------------------------------------------------------------------------------- shipped model
@pytest.fixture(scope="module")
def demo_model():
    path = default_model_path()
    assert path.is_file(), f"the shipped demo model is missing: {path}"
    return load_demo_model()


def test_shipped_weights_file(demo_model):
    path = default_model_path()
    assert path.stat().st_size <= 10 * 1024 * 1024
    with safe_open(str(path), "pt") as f:
        assert "vitviz_spec" in f.metadata()
    spec = demo_model.spec
    assert spec.labels == CLASSES
    assert spec.preprocess == demo_preprocess()
    assert spec.name == "vitviz shapes demo (ViT 112/8)"
    assert spec.config.img_size == (112, 112) and spec.config.patch_size == 8
    assert spec.config.grid_size == (14, 14)
    assert not demo_model.training


def _peak_in_box(m: torch.Tensor, geo: CropGeometry, patch: int, box) -> bool:
    """Does the centre of the map's peak patch, mapped back to image pixels, lie in ``box`` dilated by one patch?"""
    gh, gw = m.shape
    r, c = divmod(int(torch.argmax(m)), gw)
    top, left, _, _ = geo.crop_box
    (h, w), (rh, rw) = geo.image_size, geo.resized_size
    sy, sx = h / rh, w / rw  # resized -> image pixels
    cy, cx = ((r + 0.5) * patch + top) * sy, ((c + 0.5) * patch + left) * sx
    x0, y0, x1, y1 = box
    dy, dx = patch * sy, patch * sx  # one patch, in image pixels
    return (x0 - dx <= cx <= x1 + dx) and (y0 - dy <= cy <= y1 + dy)


def _evaluate(model, samples, batch: int = 50):
    """Top-1 accuracy and rollout / relevance localisation rates over ``(image uint8 [H,W,3], label, box)``."""
    pre = model.spec.preprocess
    correct = roll_ok = rel_ok = 0
    for i in range(0, len(samples), batch):
        chunk = samples[i:i + batch]
        xs, geos = zip(*(pre.apply(Image.fromarray(im)) for im, _, _ in chunk))
        labels = torch.tensor([lab for _, lab, _ in chunk])
        cap = capture(model, torch.stack(xs), target=labels)
        correct += int((cap.logits.argmax(-1) == labels).sum())
        for j, (_, _lab, box) in enumerate(chunk):
            attn, grads = cap.attentions[:, j], cap.attention_grads[:, j]
            roll = attention_rollout(attn, grid=cap.grid, num_prefix_tokens=cap.num_prefix_tokens,
                                     head_fusion="mean", discard_ratio=0.0)
            rel = relevance(attn, grads, grid=cap.grid, num_prefix_tokens=cap.num_prefix_tokens)
            assert roll.shape == rel.shape == cap.grid
            roll_ok += _peak_in_box(roll, geos[j], cap.patch_size, box)
            rel_ok += _peak_in_box(rel, geos[j], cap.patch_size, box)
    n = len(samples)
    return correct / n, roll_ok / n, rel_ok / n


# Issue 5's targets on 500 held-out images: top-1 >= 95%, rollout and relevance peaks inside the object's box
# (dilated by one patch) in >= 90%. Measured for the shipped model: top-1 0.988, rollout 0.954, relevance 0.980.


@pytest.fixture(scope="module")
def held_out_scores(demo_model):
    X, Y, B = generate_batch(0, HELD_OUT, seed=TEST_SEED, stream="test")
    acc, roll, rel = _evaluate(demo_model, list(zip(X, Y.tolist(), B.tolist())))
    print(f"\nheld-out {HELD_OUT}: top-1 {acc:.3f}, rollout peak in box {roll:.3f}, relevance peak in box {rel:.3f}")
    return acc, roll, rel


def test_shipped_model_localises_held_out_images(held_out_scores):
    acc, roll, rel = held_out_scores
    assert roll >= 0.90
    assert rel >= 0.90


def test_shipped_model_top1_on_held_out_images(held_out_scores):
    assert held_out_scores[0] >= 0.95


@pytest.fixture(scope="module")
def photo_sized_scores(demo_model):
    """Non-square images, larger than the input: the maps go back through resize + centre crop."""
    samples = []
    for i in range(48):
        size = ((330, 440), (440, 330), (250, 400))[i % 3]
        s = generate(i, seed=TEST_SEED + 1, stream="test", size=size, region=sample_region(size))
        samples.append((s.image, s.label, s.box))
    acc, roll, rel = _evaluate(demo_model, samples, batch=48)
    print(f"\nphoto-sized 48: top-1 {acc:.3f}, rollout {roll:.3f}, relevance {rel:.3f}")
    return acc, roll, rel


def test_shipped_model_on_photo_sized_images_through_the_crop_geometry(photo_sized_scores):
    """Measured: top-1 1.000, rollout 0.979, relevance 1.000 (48 images, so the bounds leave room for 2-3 misses)."""
    acc, roll, rel = photo_sized_scores
    assert acc >= 0.9
    assert roll >= 0.9 and rel >= 0.9


def test_sample_images_are_the_generator_output(demo_model):
    paths = sample_images()
    assert [p.name for p in paths] == [sample_name(k) for k in range(len(CLASSES))]
    for k, p in enumerate(paths):
        img = Image.open(p)
        assert img.mode == "RGB"
        regenerated = make_sample(k)
        assert np.array_equal(np.asarray(img), regenerated.image), f"{p} is not what the generator makes"


def test_sample_images_are_classified_correctly(demo_model):
    pre = demo_model.spec.preprocess
    wrong = []
    for k, p in enumerate(sample_images()):
        with torch.no_grad():
            logits = demo_model(pre(Image.open(p))[None])
        if int(logits.argmax()) != k:
            wrong.append(f"{p.name} -> {CLASSES[int(logits.argmax())]}")
    assert not wrong, wrong
