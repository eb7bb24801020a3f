"""vitviz.analysis against brute-force references written with explicit Python loops, plus invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vitviz import analysis as A
from vitviz.model.preprocess import CropGeometry, Preprocess

L, H, GH, GW = 3, 2, 3, 2


def _attn(p=1, L=L, H=H, gh=GH, gw=GW, B=None, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    N = p + gh * gw
    shape = (L, H, N, N) if B is None else (B, L, H, N, N)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).softmax(-1)


def _grads(like, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(like.shape, generator=g, dtype=torch.float64)


# ------------------------------------------------------------------ brute-force references (lists and loops)
def ref_fuse(a_l, fusion):
    """a_l: [H, N, N] -> list of lists [N][N]."""
    Hh, N = a_l.shape[0], a_l.shape[1]
    out = [[0.0] * N for _ in range(N)]
    for i in range(N):
        for j in range(N):
            vals = [float(a_l[h, i, j]) for h in range(Hh)]
            out[i][j] = {"mean": sum(vals) / Hh, "max": max(vals), "min": min(vals)}[fusion]
    return out


def ref_grad_fuse(a_l, g_l, clamp):
    Hh, N = a_l.shape[0], a_l.shape[1]
    out = [[0.0] * N for _ in range(N)]
    for i in range(N):
        for j in range(N):
            prods = [float(a_l[h, i, j]) * float(g_l[h, i, j]) for h in range(Hh)]
            if clamp == "after_mean":
                out[i][j] = max(sum(prods) / Hh, 0.0)
            else:
                out[i][j] = sum(max(x, 0.0) for x in prods) / Hh
    return out


def ref_discard(M, p, ratio):
    N = len(M)
    Mk = N - p
    k = int(math.floor(ratio * Mk + 1e-9))
    out = [row[:] for row in M]
    for i in range(N):
        order = sorted(range(Mk), key=lambda j: M[i][p + j])
        for j in order[:k]:
            out[i][p + j] = 0.0
    return out


def ref_hat(M):
    N = len(M)
    out = []
    for i in range(N):
        row = [M[i][j] + (1.0 if i == j else 0.0) for j in range(N)]
        s = sum(row)
        out.append([x / s for x in row])
    return out


def ref_matmul(X, Y):
    n, m, q = len(X), len(Y), len(Y[0])
    return [[sum(X[i][k] * Y[k][j] for k in range(m)) for j in range(q)] for i in range(n)]


def ref_eye(N):
    return [[1.0 if i == j else 0.0 for j in range(N)] for i in range(N)]


def ref_map(row, p, gh, gw):
    return torch.tensor([[row[p + i * gw + j] for j in range(gw)] for i in range(gh)], dtype=torch.float64)


def ref_rollout(attn, p, fusion="mean", ratio=0.0, start=0, grads=None, clamp="after_mean"):
    N = attn.shape[-1]
    R = ref_eye(N)
    for l in range(start, attn.shape[0]):
        fused = ref_fuse(attn[l], fusion) if grads is None else ref_grad_fuse(attn[l], grads[l], clamp)
        R = ref_matmul(ref_hat(ref_discard(fused, p, ratio)), R)
    return ref_map(R[0], p, GH, GW)


def ref_relevance(attn, grads, p, start=0):
    N = attn.shape[-1]
    R = ref_eye(N)
    for l in range(start, attn.shape[0]):
        Abar = ref_grad_fuse(attn[l], grads[l], "before_mean")
        AR = ref_matmul(Abar, R)
        R = [[R[i][j] + AR[i][j] for j in range(N)] for i in range(N)]
    return ref_map(R[0], p, GH, GW)


# ------------------------------------------------------------------ raw maps
@pytest.mark.parametrize("head", [0, 1, -1, "mean", "max", "min"])
def test_cls_and_query_attention_vs_loops(head):
    p = 2
    a = _attn(p=p)
    for layer in (0, 2, -1):
        for query in (0, 1, 4):
            got = A.query_attention(a, layer, head, query, grid=(GH, GW), num_prefix_tokens=p)
            fused = ref_fuse(a[layer], head) if isinstance(head, str) else a[layer, head].tolist()
            torch.testing.assert_close(got, ref_map(fused[query], p, GH, GW))
        torch.testing.assert_close(A.cls_attention(a, layer, head, grid=(GH, GW), num_prefix_tokens=p),
                                   A.query_attention(a, layer, head, 0, grid=(GH, GW), num_prefix_tokens=p))
    with pytest.raises(IndexError):
        A.cls_attention(a, 3, 0, grid=(GH, GW), num_prefix_tokens=p)
    with pytest.raises(IndexError):
        A.cls_attention(a, 0, 2, grid=(GH, GW), num_prefix_tokens=p)
    with pytest.raises(ValueError, match="grid"):
        A.cls_attention(a, 0, 0, grid=(2, 2), num_prefix_tokens=p)


# ------------------------------------------------------------------ rollout
@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("ratio", [0.0, 0.34, 0.5, 0.9])
@pytest.mark.parametrize("p", [1, 2])
def test_attention_rollout_vs_loops(fusion, ratio, p):
    a = _attn(p=p, seed=3)
    for start in (0, 1):
        got = A.attention_rollout(a, grid=(GH, GW), num_prefix_tokens=p, head_fusion=fusion, discard_ratio=ratio,
                                  start_layer=start)
        torch.testing.assert_close(got, ref_rollout(a, p, fusion, ratio, start), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("ratio", [0.0, 0.5, 1.0])
def test_transition_rows_sum_to_one_and_prefix_keys_kept(fusion, ratio):
    p = 2
    a = _attn(p=p, B=2, seed=5).float()
    a[..., :p] *= 1e-3  # prefix keys are the weakest entries of every row: discard would pick them if it could
    T = A.rollout_transitions(a, num_prefix_tokens=p, head_fusion=fusion, discard_ratio=ratio)
    assert T.shape == (2, L, a.shape[-1], a.shape[-1])
    torch.testing.assert_close(T.sum(-1), torch.ones(T.shape[:-1]), rtol=0, atol=1e-6)
    assert (T[..., :p] > 0).all()
    M = a.shape[-1] - p
    zeros = (T[..., p:] == 0).sum(-1)  # per row; the diagonal (+I) is never 0
    k = int(math.floor(ratio * M))
    assert (zeros[..., :p] == k).all()  # prefix queries: exactly k patch keys zeroed in every row
    # patch queries: k zeroed, but the own diagonal gets +1 back when it was discarded
    assert ((zeros[..., p:] == k) | (zeros[..., p:] == k - 1)).all()
    if k == M:  # everything but the diagonal discarded
        assert (zeros[..., p:] == M - 1).all()


@pytest.mark.parametrize("ratio", [0.34, 0.5, 0.9, 1.0])
def test_discard_with_ties_is_exact_and_stable(ratio):
    p = 1
    a = _attn(p=p, B=2, seed=31)
    a = (a * 8).round() / 8 + 0.01  # few distinct values: many ties at every threshold
    a[0, 1, :, 2] = 0.01  # a row where all keys are equal in every head
    got = A.rollout_transitions(a, num_prefix_tokens=p, head_fusion="min", discard_ratio=ratio)
    for b in range(2):
        for l in range(L):
            ref = ref_hat(ref_discard(ref_fuse(a[b, l], "min"), p, ratio))
            torch.testing.assert_close(got[b, l], torch.tensor(ref, dtype=torch.float64))


def test_discard_zero_equals_plain_product_and_identity_cases():
    p = 1
    a = _attn(p=p, seed=7)
    N = a.shape[-1]
    plain = torch.eye(N, dtype=torch.float64)
    for l in range(L):
        Ah = a[l].mean(0) + torch.eye(N, dtype=torch.float64)
        plain = (Ah / Ah.sum(-1, keepdim=True)) @ plain
    got = A.attention_rollout(a, grid=(GH, GW), num_prefix_tokens=p, discard_ratio=0.0)
    torch.testing.assert_close(got, plain[0, p:].reshape(GH, GW))
    # the row of a stochastic product is a distribution over all tokens
    assert abs(plain[0].sum().item() - 1.0) < 1e-12

    eye = torch.eye(N).expand(L, H, N, N).clone()
    torch.testing.assert_close(A.rollout_transitions(eye, num_prefix_tokens=p), torch.eye(N).expand(L, N, N))
    for ratio in (0.0, 0.5):
        assert A.attention_rollout(eye, grid=(GH, GW), discard_ratio=ratio).abs().max() == 0  # one-hot CLS row
    # CLS attends only to patch 4, every other token to itself: the flow ends on patch 4 with 1 - 2^-L
    one = eye.clone()
    one[:, :, 0] = 0
    one[:, :, 0, p + 4] = 1
    got = A.attention_rollout(one, grid=(GH, GW))
    expected = torch.zeros(GH * GW)
    expected[4] = 1 - 2.0**-L
    torch.testing.assert_close(got.reshape(-1), expected)


@pytest.mark.parametrize("clamp", ["after_mean", "before_mean"])
@pytest.mark.parametrize("ratio", [0.0, 0.5])
def test_gradient_rollout_vs_loops(clamp, ratio):
    p = 2
    a = _attn(p=p, seed=11)
    g = _grads(a)
    got = A.gradient_rollout(a, g, grid=(GH, GW), num_prefix_tokens=p, discard_ratio=ratio, clamp=clamp)
    torch.testing.assert_close(got, ref_rollout(a, p, ratio=ratio, grads=g, clamp=clamp), rtol=1e-10, atol=1e-12)
    # the two clamps differ on these inputs (the test can tell them apart)
    other = "before_mean" if clamp == "after_mean" else "after_mean"
    assert not torch.allclose(got, A.gradient_rollout(a, g, grid=(GH, GW), num_prefix_tokens=p,
                                                      discard_ratio=ratio, clamp=other))


@pytest.mark.parametrize("start", [0, 2])
def test_relevance_vs_loops(start):
    p = 1
    a = _attn(p=p, seed=13)
    g = _grads(a, seed=14)
    got = A.relevance(a, g, grid=(GH, GW), num_prefix_tokens=p, start_layer=start)
    torch.testing.assert_close(got, ref_relevance(a, g, p, start), rtol=1e-10, atol=1e-12)
    # zero gradients: R stays I, so the patch relevance is 0
    assert A.relevance(a, torch.zeros_like(a), grid=(GH, GW)).abs().max() == 0


# ------------------------------------------------------------------ statistics
def test_mean_attention_distance_vs_loops_and_uniform_value():
    p = 1
    a = _attn(p=p, seed=17)
    got = A.mean_attention_distance(a, grid=(GH, GW), patch_size=16, num_prefix_tokens=p)
    assert got.shape == (L, H)
    M = GH * GW
    for l in range(L):
        for h in range(H):
            total = 0.0
            for i in range(M):
                row = [float(a[l, h, p + i, p + j]) for j in range(M)]
                s = sum(row)
                for j in range(M):
                    dy, dx = i // GW - j // GW, i % GW - j % GW
                    total += row[j] / s * 16 * math.hypot(dy, dx)
            assert abs(got[l, h].item() - total / M) < 1e-9
    N = 1 + 14 * 14
    uniform = torch.full((1, 1, N, N), 1.0 / N)
    d = A.mean_attention_distance(uniform, grid=(14, 14), patch_size=16)
    assert abs(d.item() - 116.49) < 0.005
    # identity attention: every patch attends to itself -> distance 0
    assert A.mean_attention_distance(torch.eye(N).expand(1, 1, N, N), patch_size=16).abs().max() < 1e-6


def test_mean_attention_distance_of_non_finite_attention_is_nan_not_zero():
    """A head whose attention is not finite (a NaN weight upstream) has no distance: NaN, never a plausible 0 px
    (a NaN row's mass is not "no patch mass"); the other heads keep their values."""
    p = 1
    a = _attn(p=p, seed=23)
    clean = A.mean_attention_distance(a, grid=(GH, GW), patch_size=16, num_prefix_tokens=p)
    bad = a.clone()
    bad[1, 0, p + 2] = float("nan")  # one patch query's row
    got = A.mean_attention_distance(bad, grid=(GH, GW), patch_size=16, num_prefix_tokens=p)
    assert torch.isnan(got[1, 0])
    keep = torch.ones_like(got, dtype=torch.bool)
    keep[1, 0] = False
    torch.testing.assert_close(got[keep], clean[keep])
    # a row of zeros (no patch mass) still counts 0, as documented
    empty = a.clone()
    empty[0, 0, p + 1, p:] = 0
    assert torch.isfinite(A.mean_attention_distance(empty, grid=(GH, GW), patch_size=16, num_prefix_tokens=p)).all()


def test_attention_entropy_vs_loops():
    a = _attn(seed=19).float()
    a[0, 0, 0] = 0
    a[0, 0, 0, 3] = 1  # a one-hot row (entropy 0, 0 log 0 = 0)
    got = A.attention_entropy(a)
    assert got.shape == (L, H) and torch.isfinite(got).all()
    N = a.shape[-1]
    for l in range(L):
        for h in range(H):
            rows = [-sum(float(x) * math.log(float(x)) for x in a[l, h, i] if x > 0) for i in range(N)]
            assert abs(got[l, h].item() - sum(rows) / N) < 1e-5
    uniform = torch.full((1, 1, N, N), 1.0 / N)
    assert abs(A.attention_entropy(uniform).item() - math.log(N)) < 1e-5


# ------------------------------------------------------------------ embeddings
def _cos(u, v):
    dot = sum(float(x) * float(y) for x, y in zip(u, v))
    nu = math.sqrt(sum(float(x) ** 2 for x in u))
    nv = math.sqrt(sum(float(x) ** 2 for x in v))
    return dot / (nu * nv)


def test_position_embedding_similarity_vs_loops_with_and_without_prefix():
    p, D = 2, 5
    pe = torch.randn(1, p + GH * GW, D)
    got = A.position_embedding_similarity(pe, grid=(GH, GW), num_prefix_tokens=p)
    assert got.shape == (GH, GW, GH, GW)
    for i in range(GH):
        for j in range(GW):
            for k in range(GH):
                for m in range(GW):
                    ref = _cos(pe[0, p + i * GW + j], pe[0, p + k * GW + m])
                    assert abs(got[i, j, k, m].item() - ref) < 1e-6
    no_prefix = pe[0, p:].clone()  # [gh*gw, D]: a model without prefix slots
    torch.testing.assert_close(A.position_embedding_similarity(no_prefix, grid=(GH, GW), num_prefix_tokens=p), got)
    torch.testing.assert_close(A.position_embedding_similarity(no_prefix.numpy(), grid=(GH, GW)), got)
    with pytest.raises(ValueError, match="positions"):
        A.position_embedding_similarity(pe, grid=(3, 3), num_prefix_tokens=p)


def test_token_similarity_vs_loops():
    p, D = 1, 6
    tokens = torch.randn(L + 1, p + GH * GW, D)
    for layer, index in ((0, 0), (2, 3), (-1, 5)):
        got = A.token_similarity(tokens, layer=layer, index=index, grid=(GH, GW), num_prefix_tokens=p)
        for i in range(GH):
            for j in range(GW):
                ref = _cos(tokens[layer, index], tokens[layer, p + i * GW + j])
                assert abs(got[i, j].item() - ref) < 1e-6
    # a token is perfectly similar to itself
    got = A.token_similarity(tokens, layer=1, index=p + 4, grid=(GH, GW), num_prefix_tokens=p)
    assert abs(got.reshape(-1)[4].item() - 1) < 1e-6


def test_embedding_filters_vs_loop_covariance():
    D, C, P, k = 12, 3, 2, 4
    w = torch.randn(D, C, P, P, dtype=torch.float64)
    got = A.embedding_filters(w, k=k)
    assert got.shape == (k, P, P, C) and got.dtype == torch.float32
    X = w.reshape(D, -1).tolist()
    F_ = len(X[0])
    mean = [sum(X[d][f] for d in range(D)) / D for f in range(F_)]
    cov = [[sum((X[d][f] - mean[f]) * (X[d][g] - mean[g]) for d in range(D)) for g in range(F_)] for f in range(F_)]
    evals, evecs = np.linalg.eigh(np.array(cov))
    for c in range(k):
        v = evecs[:, -1 - c]
        v = v * np.sign(v[np.argmax(np.abs(v))])
        img = v.reshape(C, P, P).transpose(1, 2, 0)
        img = (img - img.min()) / (img.max() - img.min())
        np.testing.assert_allclose(got[c].numpy(), img, atol=1e-5)
        assert got[c].min() == 0 and got[c].max() == 1
    with pytest.raises(ValueError, match="valid"):
        A.embedding_filters(w, k=13)


def test_embedding_filter_variance_is_pca_explained_variance():
    """The share of variance of each filter component equals scikit-learn's PCA ``explained_variance_ratio_`` on the
    flattened filters (an independent implementation), for an RGB and a one-channel stem; identical filters give 0."""
    from sklearn.decomposition import PCA

    for D, C, P in ((20, 3, 4), (9, 1, 3)):
        w = torch.randn(D, C, P, P)
        got = A.embedding_filter_variance(w)
        ref = PCA().fit(w.reshape(D, -1).double().numpy()).explained_variance_ratio_
        n = min(len(ref), got.shape[0])
        np.testing.assert_allclose(got[:n].numpy(), ref[:n], rtol=1e-9, atol=1e-12)
        assert abs(float(got.sum()) - 1) < 1e-12
    assert not A.embedding_filter_variance(torch.ones(5, 3, 2, 2)).any()


# ------------------------------------------------------------------ batch == per image, input types
def test_batch_results_equal_per_image_results():
    p, B = 2, 3
    a = _attn(p=p, B=B, seed=23).float()
    g = _grads(a).float()
    tokens = torch.randn(B, L + 1, a.shape[-1], 4)
    kw = dict(grid=(GH, GW), num_prefix_tokens=p)
    calls = [
        lambda x, y, t: A.attention_rollout(x, discard_ratio=0.5, head_fusion="max", **kw),
        lambda x, y, t: A.attention_rollout(x, discard_ratio=0.34, start_layer=1, **kw),
        lambda x, y, t: A.gradient_rollout(x, y, discard_ratio=0.5, **kw),
        lambda x, y, t: A.gradient_rollout(x, y, clamp="before_mean", **kw),
        lambda x, y, t: A.relevance(x, y, **kw),
        lambda x, y, t: A.cls_attention(x, 1, "mean", **kw),
        lambda x, y, t: A.query_attention(x, -1, 1, 3, **kw),
        lambda x, y, t: A.rollout_transitions(x, num_prefix_tokens=p, discard_ratio=0.5),
        lambda x, y, t: A.mean_attention_distance(x, patch_size=14, **kw),
        lambda x, y, t: A.attention_entropy(x),
        lambda x, y, t: A.token_similarity(t, layer=2, index=0, **kw),
    ]
    for f in calls:
        batched = f(a, g, tokens)
        assert batched.shape[0] == B
        for b in range(B):
            torch.testing.assert_close(batched[b], f(a[b], g[b], tokens[b]), rtol=1e-5, atol=1e-7)
    # discard really happens per image: image 1 alone differs from what image 0's ordering would give
    r = A.attention_rollout(a, discard_ratio=0.5, **kw)
    assert not torch.allclose(r[0], r[1])


def test_numpy_half_and_inferred_grid_inputs():
    a = _attn(p=1, gh=3, gw=3, seed=29).float()
    ref = A.attention_rollout(a, grid=(3, 3))
    torch.testing.assert_close(A.attention_rollout(a.numpy()), ref)
    torch.testing.assert_close(A.attention_rollout(a.half()), ref, rtol=2e-3, atol=1e-4)
    assert A.attention_rollout(a.half()).dtype == torch.float32
    with pytest.raises(ValueError, match="square"):
        A.attention_rollout(_attn(p=1))  # 6 patches: grid cannot be inferred
    with pytest.raises(ValueError, match=r"\[L, H, N, N\]"):
        A.attention_rollout(a[0])
    with pytest.raises(ValueError, match="discard_ratio"):
        A.attention_rollout(a, discard_ratio=1.5)
    with pytest.raises(ValueError, match="head_fusion"):
        A.attention_rollout(a, head_fusion="median")
    with pytest.raises(ValueError, match="clamp"):
        A.gradient_rollout(a, a, clamp="never")
    with pytest.raises(ValueError, match="shape"):
        A.relevance(a, a[:2])


# ------------------------------------------------------------------ pixels
def ref_sample(m, gy, gx, mode):
    """Sample map m [gh, gw] at cell coordinates (gy, gx) (cell j spans [j, j+1))."""
    gh, gw = m.shape
    if mode == "nearest":
        return float(m[min(max(int(math.floor(gy)), 0), gh - 1), min(max(int(math.floor(gx)), 0), gw - 1)])

    def axis(g, n):
        t = max(g - 0.5, 0.0)
        i0 = min(int(math.floor(t)), n - 1)
        i1 = min(i0 + 1, n - 1)
        return i0, i1, t - i0 if i0 < n - 1 else 0.0

    y0, y1, wy = axis(gy, gh)
    x0, x1, wx = axis(gx, gw)
    return float((1 - wy) * ((1 - wx) * m[y0, x0] + wx * m[y0, x1]) + wy * ((1 - wx) * m[y1, x0] + wx * m[y1, x1]))


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_upsample_vs_loops(mode):
    m = torch.rand(3, 4, dtype=torch.float64)
    for size in ((6, 8), (7, 5), 9):
        got = A.upsample(m, size, mode)
        Hh, Ww = (size, size) if isinstance(size, int) else size
        assert got.shape == (Hh, Ww)
        for y in range(Hh):
            for x in range(Ww):
                ref = ref_sample(m, (y + 0.5) * 3 / Hh, (x + 0.5) * 4 / Ww, mode)
                assert abs(got[y, x].item() - ref) < 1e-9
    if mode == "nearest":  # integer factor: every cell a solid block
        torch.testing.assert_close(A.upsample(m, (6, 8), mode), m.repeat_interleave(2, 0).repeat_interleave(2, 1))
    batched = A.upsample(torch.stack([m, 2 * m]), (6, 8), mode)
    torch.testing.assert_close(batched[1], 2 * A.upsample(m, (6, 8), mode))


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_map_to_image_known_geometry(mode):
    # 64 x 96 image, shorter side already 64 -> no resize; a 64 x 64 centre crop at left = 16
    geo = Preprocess(resize=64, crop=(64, 64)).geometry((64, 96))
    assert geo.crop_box == (0, 16, 64, 64)
    m = torch.rand(4, 4)
    img = A.map_to_image(m, geo, mode=mode)
    assert img.shape == (64, 96) and img.dtype == torch.float32
    assert torch.isnan(img[:, :16]).all() and torch.isnan(img[:, 80:]).all()
    assert not torch.isnan(img[:, 16:80]).any()
    torch.testing.assert_close(img[:, 16:80], A.upsample(m, (64, 64), mode), rtol=0, atol=1e-6)


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_map_to_image_vs_loops_with_resize(mode):
    # 150 x 100 (portrait) -> shorter side 40: resized 60 x 40, crop 32 x 32 at (14, 4)
    geo = Preprocess(resize=40, crop=(32, 32)).geometry((150, 100))
    assert geo.resized_size == (60, 40) and geo.crop_box == (14, 4, 32, 32)
    y0, x0, y1, x1 = geo.crop_in_image()
    m = torch.rand(4, 4, dtype=torch.float64)
    img = A.map_to_image(m, geo, mode=mode)
    assert img.shape == (150, 100)
    for y in range(150):
        for x in range(100):
            yc, xc = y + 0.5, x + 0.5
            if not (y0 <= yc < y1 and x0 <= xc < x1):
                assert math.isnan(img[y, x].item())
                continue
            gy = (yc - y0) / (y1 - y0) * 4
            gx = (xc - x0) / (x1 - x0) * 4
            assert abs(img[y, x].item() - ref_sample(m, gy, gx, mode)) < 1e-5
    # nearest: the top-left cell covers the top-left quarter of the crop box
    if mode == "nearest":
        assert img[int(y0) + 1, int(x0) + 1].item() == pytest.approx(m[0, 0].item(), abs=1e-6)
        assert img[int(y1) - 2, int(x1) - 2].item() == pytest.approx(m[3, 3].item(), abs=1e-6)
    batched = A.map_to_image(torch.stack([m, m + 1]), geo, mode=mode)
    torch.testing.assert_close(batched[1], img + 1, equal_nan=True)
    with pytest.raises(TypeError):
        A.map_to_image(m, (150, 100))


def test_map_to_image_crop_geometry_direct():
    geo = CropGeometry(image_size=(10, 20), resized_size=(10, 20), crop_box=(2, 5, 6, 10))
    img = A.map_to_image(torch.arange(6.0).reshape(2, 3) + 1, geo, mode="nearest")
    assert torch.isnan(img[:2]).all() and torch.isnan(img[8:]).all()
    assert torch.isnan(img[:, :5]).all() and torch.isnan(img[:, 15:]).all()
    inside = img[2:8, 5:15]
    assert not torch.isnan(inside).any()
    assert inside[0, 0] == 1 and inside[-1, -1] == 6 and inside[3, 0] == 4


def test_capture_to_analysis_end_to_end():
    from vitviz.capture import capture
    from vitviz.model.vit import ViT

    model = ViT(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=4, num_reg_tokens=1).eval()
    cap = capture(model, torch.randn(2, 3, 32, 32), target=[0, 3], store_dtype=torch.float16)
    attn_bf = cap.attentions.transpose(0, 1)  # [B, L, H, N, N]
    grads_bf = cap.attention_grads.transpose(0, 1)
    kw = dict(grid=cap.grid, num_prefix_tokens=cap.num_prefix_tokens)
    batch = {
        "rollout": A.attention_rollout(attn_bf, discard_ratio=0.5, **kw),
        "grad": A.gradient_rollout(attn_bf, grads_bf, **kw),
        "rel": A.relevance(attn_bf, grads_bf, **kw),
        "dist": A.mean_attention_distance(attn_bf, patch_size=cap.patch_size, **kw),
    }
    geo = Preprocess(resize=32, crop=(32, 32)).geometry((48, 32))
    for b in range(2):
        im = cap.image(b)
        kwi = dict(grid=im.grid, num_prefix_tokens=im.num_prefix_tokens)
        one = {
            "rollout": A.attention_rollout(im.attentions, discard_ratio=0.5, **kwi),
            "grad": A.gradient_rollout(im.attentions, im.attention_grads, **kwi),
            "rel": A.relevance(im.attentions, im.attention_grads, **kwi),
            "dist": A.mean_attention_distance(im.attentions, patch_size=im.patch_size, **kwi),
        }
        for k in batch:
            torch.testing.assert_close(batch[k][b], one[k])
        assert one["rollout"].shape == (4, 4) and one["dist"].shape == (2, 2)
        img = A.map_to_image(one["rollout"], geo).numpy()
        assert img.shape == (48, 32) and np.isnan(img[:8]).all() and np.isfinite(img[8:40]).all()


# ------------------------------------------------------------------ the whole-attention analyses together
def _individual(a, g, *, grid, patch_size, p, fusion, ratio, clamp, start):
    kw = dict(grid=grid, num_prefix_tokens=p)
    return dict(
        rollout=A.attention_rollout(a, head_fusion=fusion, discard_ratio=ratio, start_layer=start, **kw),
        gradient_rollout=A.gradient_rollout(a, g, discard_ratio=ratio, clamp=clamp, start_layer=start, **kw),
        relevance=A.relevance(a, g, start_layer=start, **kw),
        mean_attention_distance=A.mean_attention_distance(a, patch_size=patch_size, **kw),
        attention_entropy=A.attention_entropy(a),
    )


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("ratio", [0.0, 0.5, 0.9])
@pytest.mark.parametrize("clamp", ["after_mean", "before_mean"])
@pytest.mark.parametrize("p,start", [(1, 0), (2, 1), (5, 2)])
def test_whole_attention_maps_in_float32_vs_the_float64_loops(fusion, ratio, clamp, p, start):
    """The three products in float32 (what the window computes) against the loops in float64, at every combination
    of fusion, discard, clamp, prefix tokens and start layer."""
    a64 = _attn(p=p, L=4, H=3, seed=start + 7)
    g64 = _grads(a64, seed=11)
    a, g = a64.float(), g64.float()
    got = _individual(a, g, grid=(GH, GW), patch_size=16, p=p, fusion=fusion, ratio=ratio, clamp=clamp, start=start)
    for name, have in got.items():
        assert have.dtype == torch.float32, name
    torch.testing.assert_close(got["rollout"].double(), ref_rollout(a64, p, fusion, ratio, start), rtol=1e-4,
                               atol=1e-6)
    torch.testing.assert_close(got["gradient_rollout"].double(),
                               ref_rollout(a64, p, "mean", ratio, start, grads=g64, clamp=clamp), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(got["relevance"].double(), ref_relevance(a64, g64, p, start), rtol=1e-4, atol=1e-6)


def test_float32_agrees_with_float64_at_vit_b_size():
    """ViT-B/16 shapes, peaky attention with exact zeros in a row and small gradients: every whole-attention
    analysis in float32 against the same code in float64."""
    a64 = _attn(p=1, L=12, H=12, gh=14, gw=14, seed=3, scale=4.0)
    a64[4, 7, 9, :60] = 0.0
    a64[4, 7, 9] /= a64[4, 7, 9].sum()
    g64 = _grads(a64, seed=4) * 1e-3
    kw = dict(grid=(14, 14), patch_size=16, p=1, fusion="mean", ratio=0.0, clamp="after_mean", start=0)
    want = _individual(a64, g64, **kw)
    a, g = a64.float(), g64.float()
    for name, have in _individual(a, g, **kw).items():
        assert have.dtype == torch.float32, name
        torch.testing.assert_close(have.double(), want[name], rtol=2e-5, atol=1e-9, msg=name)


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
def test_a_nan_in_the_attention_propagates(fusion):
    """One NaN entry (layer 1, head 0, query 2, key 3): the maps that depend on it are NaN (max and min fusion too,
    they must not skip it), and the entropy of that layer and head is NaN and the others finite."""
    p = 1
    a = _attn(p=p, seed=12).float()
    a[1, 0, 2, 3] = float("nan")
    g = _grads(a).float()
    kw = dict(grid=(GH, GW), patch_size=16, p=p, fusion=fusion, ratio=0.0, clamp="after_mean", start=0)
    ref = _individual(a, g, **kw)
    for name in ("rollout", "gradient_rollout", "relevance"):
        assert ref[name].isnan().all(), name
    bad = torch.zeros(L, H, dtype=torch.bool)
    bad[1, 0] = True
    assert torch.equal(ref["attention_entropy"].isnan(), bad)
    # mean_attention_distance likewise: NaN at that layer and head (not a plausible 0 px), finite elsewhere
    assert torch.equal(ref["mean_attention_distance"].isnan(), bad)
