"""Feature PCA (vitviz.analysis.pca): numpy's SVD up to each component's sign, the sign rule, the background mask,
the joint fit over several images."""

import numpy as np
import pytest
import torch

from vitviz.analysis import feature_pca

GRID = (5, 6)
P = 1  # one prefix token


def _tokens(seed: int, n: int = 30, d: int = 16, prefix: int = P) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scale = torch.linspace(3.0, 0.2, d)  # distinct variances: well-separated components
    return torch.randn(prefix + n, d, generator=g) * scale + torch.randn(d, generator=g)


def _numpy_pca(x: np.ndarray, k: int = 3):
    x = x.astype(np.float64)
    mean = x.mean(0)
    _, s, vt = np.linalg.svd(x - mean, full_matrices=False)
    return mean, vt[:k], s[:k] ** 2 / (x.shape[0] - 1)


def _minmax(a: np.ndarray, ref: np.ndarray) -> np.ndarray:
    lo, hi = ref.min(0), ref.max(0)
    return np.clip((a - lo) / (hi - lo), 0, 1)


def test_equals_numpy_svd_up_to_sign():
    t = _tokens(0)
    out = feature_pca(t, grid=GRID, num_prefix_tokens=P)
    x = t[P:].numpy()
    mean, vt, var = _numpy_pca(x)
    comps = out.components.numpy().astype(np.float64)
    signs = np.sign(np.sum(comps * vt, axis=1))
    assert np.all(np.abs(signs) == 1)
    np.testing.assert_allclose(comps, vt * signs[:, None], atol=1e-5)
    np.testing.assert_allclose(out.explained_variance.numpy(), var, rtol=1e-5)
    scores = (x - mean) @ (vt * signs[:, None]).T
    np.testing.assert_allclose(out.scores.numpy().reshape(-1, 3), scores, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out.rgb.numpy().reshape(-1, 3), _minmax(scores, scores), atol=1e-5)
    assert out.rgb.shape == (*GRID, 3) and float(out.rgb.min()) == 0.0 and float(out.rgb.max()) == 1.0
    assert out.foreground.all()
    assert 0 < float(out.explained_ratio.sum()) <= 1


def test_sign_rule_is_the_largest_loading_positive_and_deterministic():
    t = _tokens(1)
    a = feature_pca(t, grid=GRID, num_prefix_tokens=P)
    c = a.components.numpy()
    assert np.all(c[np.arange(3), np.abs(c).argmax(1)] > 0)
    # negating the tokens flips every axis of the SVD; the sign rule gives the same axes back
    b = feature_pca(-t, grid=GRID, num_prefix_tokens=P)
    np.testing.assert_allclose(b.components.numpy(), c, atol=1e-5)
    again = feature_pca(t.clone(), grid=GRID, num_prefix_tokens=P)
    assert torch.equal(again.rgb, a.rgb)


def test_prefix_tokens_are_dropped():
    t = _tokens(2, prefix=3)
    out = feature_pca(t, grid=GRID, num_prefix_tokens=3)
    ref = feature_pca(t[2:], grid=GRID, num_prefix_tokens=1)
    torch.testing.assert_close(out.rgb, ref.rgb)


def test_mask_thresholds_the_first_component_oriented_so_the_border_is_low():
    # a 5x6 grid whose centre patches differ strongly from the border ones along one direction
    g = torch.Generator().manual_seed(3)
    x = torch.randn(30, 8, generator=g) * 0.1
    centre = torch.zeros(5, 6, dtype=torch.bool)
    centre[1:4, 1:5] = True
    x[centre.reshape(-1), 0] += 5.0
    for flip in (1.0, -1.0):  # whichever sign the first axis has, the border side is background
        tokens = torch.cat([torch.zeros(1, 8), x * flip])
        out = feature_pca(tokens, grid=GRID, num_prefix_tokens=1, mask_background=True, threshold=0.5)
        assert torch.equal(out.foreground, centre)
        assert float(out.rgb[~centre].abs().max()) == 0.0
        # the rule itself: the first component scaled to [0, 1], flipped when the border's mean is above the mean
        plain = feature_pca(tokens, grid=GRID, num_prefix_tokens=1)
        t0 = plain.rgb[..., 0].reshape(-1)
        border = ~centre.reshape(-1)
        if t0[border].mean() > t0.mean():
            t0 = 1 - t0
        assert torch.equal(out.foreground.reshape(-1), t0 >= 0.5)
        # the colours of the foreground: a PCA of the foreground patches alone (DINOv2's demo)
        fg = x[centre.reshape(-1)].numpy() * flip
        mean, vt, _ = _numpy_pca(fg)
        pf = (x.numpy() * flip - mean) @ vt.T
        got = out.rgb.numpy().reshape(-1, 3)[centre.reshape(-1).numpy()]
        want = _minmax(pf[centre.reshape(-1).numpy()], pf[centre.reshape(-1).numpy()])
        for k in range(3):  # up to the sign of each component
            assert np.allclose(got[:, k], want[:, k], atol=1e-4) or np.allclose(got[:, k], 1 - want[:, k], atol=1e-4)


def test_threshold_moves_the_mask():
    t = _tokens(4)
    few = feature_pca(t, grid=GRID, num_prefix_tokens=P, mask_background=True, threshold=0.9).foreground.sum()
    many = feature_pca(t, grid=GRID, num_prefix_tokens=P, mask_background=True, threshold=0.1).foreground.sum()
    assert few < many


def test_joint_fit_over_two_images_equals_the_svd_of_the_stacked_tokens():
    a, b = _tokens(5), _tokens(6)
    stacked = torch.cat([a[P:], b[P:]])
    mean, vt, var = _numpy_pca(stacked.numpy())
    all_scores = (stacked.numpy() - mean) @ vt.T
    for i, t in enumerate((a, b)):
        out = feature_pca(t, grid=GRID, num_prefix_tokens=P, fit_tokens=stacked)
        comps = out.components.numpy()
        signs = np.sign(np.sum(comps * vt, axis=1))
        np.testing.assert_allclose(comps, vt * signs[:, None], atol=1e-5)
        np.testing.assert_allclose(out.explained_variance.numpy(), var, rtol=1e-5)
        s = all_scores * signs
        mine = s[i * 30:(i + 1) * 30]
        np.testing.assert_allclose(out.rgb.numpy().reshape(-1, 3), _minmax(mine, s), atol=1e-5)
    # one scale for both: the joint min and max are reached across the two images, not within each
    ra = feature_pca(a, grid=GRID, num_prefix_tokens=P, fit_tokens=stacked).rgb
    rb = feature_pca(b, grid=GRID, num_prefix_tokens=P, fit_tokens=stacked).rgb
    both = torch.stack([ra, rb])
    assert float(both.min()) == 0.0 and float(both.max()) == 1.0


def test_bad_shapes_say_what_is_wrong():
    t = _tokens(7)
    with pytest.raises(ValueError, match="do not fill a 4x4 grid"):
        feature_pca(t, grid=(4, 4), num_prefix_tokens=P)
    with pytest.raises(ValueError, match="fit_tokens must be"):
        feature_pca(t, grid=GRID, num_prefix_tokens=P, fit_tokens=torch.zeros(5, 3))
    with pytest.raises(ValueError, match="one image's tokens"):
        feature_pca(t[None], grid=GRID, num_prefix_tokens=P)
