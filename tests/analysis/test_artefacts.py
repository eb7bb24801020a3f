"""High-norm (artefact) tokens: the detector on synthetic tokens, their exclusion against brute-force loops, the
attention shares, and (when ../shared/weights has them) the real ViT-Ti/16."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from repo_paths import SHARED_WEIGHTS

from vitviz import analysis as A
from vitviz.analysis.artefacts import default_layers

GH, GW = 3, 4
P = GH * GW


def _tokens(L=6, p=1, P=64, D=32, B=None, seed=0, offset=0.5):
    """Gaussian tokens ``[L+1, p+P, D]`` around a shared mean direction (as real tokens have)."""
    g = torch.Generator().manual_seed(seed)
    shape = (L + 1, p + P, D) if B is None else (B, L + 1, p + P, D)
    return torch.randn(shape, generator=g, dtype=torch.float64) + offset * torch.randn(D, generator=g,
                                                                                         dtype=torch.float64)


def _plant(t, p, patches, layers, factor):
    t = t.clone()
    for k in patches:
        for l in layers:
            t[..., l, p + k, :] *= factor
    return t


# ------------------------------------------------------------------ token norms and the detector
def test_token_norms_vs_loop_and_batch():
    t = _tokens(L=2, P=5, D=3, B=2)
    n = A.token_norms(t)
    assert n.shape == (2, 3, 6)
    for b in range(2):
        for l in range(3):
            for i in range(6):
                assert math.isclose(float(n[b, l, i]), math.sqrt(sum(float(x) ** 2 for x in t[b, l, i])), rel_tol=1e-12)
        assert torch.equal(A.token_norms(t[b]), n[b])
    big = torch.full((1, 2, 192), 100.0, dtype=torch.float16)  # a float16 sum of squares would overflow
    assert torch.allclose(A.token_norms(big), torch.full((1, 2), 100.0 * math.sqrt(192)))


@pytest.mark.parametrize("p", [1, 2, 5])
def test_planted_outliers_found_exactly_and_prefix_never_flagged(p):
    L, planted = 8, [3, 17, 40, 63]
    t = _tokens(L=L, p=p)
    t = _plant(t, p, planted, range(4, L + 1), 10.0)  # from block 3 on, as in real models
    t[:, :p] *= 50.0  # [CLS] and registers with huge norms: not patches, never flagged, not in the median
    r = A.high_norm_tokens(t, num_prefix_tokens=p)
    assert r.mask.shape == (64,) and r.mask.dtype == torch.bool
    assert r.indices == planted
    assert r.layers == default_layers(L) == (5, 6, 7, 8)
    assert r.ratio == 3.0 and r.norms.shape == (4, 64) and r.median.shape == (4,)
    assert torch.equal(r.median, r.norms.median(-1).values)
    assert bool((r.score[planted] > 5).all()) and bool((r.score[~r.mask] < 2.5).all())


def test_default_layers_are_the_later_half_of_the_blocks():
    assert default_layers(12) == (7, 8, 9, 10, 11, 12)
    assert default_layers(3) == (2, 3)
    assert default_layers(1) == (1,)
    assert default_layers(0) == (0,)


def test_early_layer_outliers_are_not_artefacts_unless_asked():
    t = _plant(_tokens(L=8), 1, [7], [0, 1], 10.0)  # pixel-driven: only at the embedding and block 0
    assert A.high_norm_tokens(t, num_prefix_tokens=1).indices == []
    r = A.high_norm_tokens(t, num_prefix_tokens=1, layers=[0, -1])
    assert r.indices == [7] and r.layers == (0, 8)


@pytest.mark.parametrize("D", [4, 8, 32, 192])
def test_clean_gaussian_tokens_flag_nothing(D):
    for seed in range(100):
        t = _tokens(L=12, P=196, D=D, seed=seed)
        assert A.high_norm_tokens(t, num_prefix_tokens=1).indices == [], (D, seed)


def test_z_guard_keeps_broad_norm_distributions_clean():
    # norms spread over [0.2, 2] (median ~1.1, robust sd ~0.7): 3.5 is 3.2x the median but only ~3.6 sd out
    norms = torch.cat([torch.linspace(0.2, 2.0, 39, dtype=torch.float64), torch.tensor([3.5], dtype=torch.float64)])
    t = norms[None, :, None].expand(3, 40, 1).clone()
    t = torch.cat([torch.ones(3, 1, 1, dtype=torch.float64), t], dim=1)
    assert A.high_norm_tokens(t, num_prefix_tokens=1).indices == []
    assert A.high_norm_tokens(t, num_prefix_tokens=1, min_z=None).indices == [39]


def test_cap_keeps_the_largest_and_ties_go_to_the_lower_index():
    t = _tokens(L=4, P=100, D=192) / 16  # norms within a few % of each other
    factors = {k: 5.0 * 1.1 ** k for k in range(0, 60, 2)}  # 30 outliers (more than 10%), 20% apart
    for k, f in factors.items():
        t[3:, 1 + k] *= f
    r = A.high_norm_tokens(t, num_prefix_tokens=1)
    assert r.mask.sum() == 10 and r.indices == list(range(40, 60, 2))
    assert A.high_norm_tokens(t, num_prefix_tokens=1, max_fraction=1.0).indices == list(range(0, 60, 2))
    assert A.high_norm_tokens(t, num_prefix_tokens=1, max_fraction=0.0).indices == []
    # equal scores: the lower indices win
    tied = torch.ones(3, 1 + 20, 4, dtype=torch.float64)
    tied[:, 1 + 5] *= 10
    tied[:, 1 + 9] *= 10
    tied[:, 1 + 12] *= 10
    assert A.high_norm_tokens(tied, num_prefix_tokens=1, max_fraction=0.1, min_z=None).indices == [5, 9]


def test_batch_equals_per_image():
    t = torch.stack([_plant(_tokens(L=6, seed=s), 1, ks, range(3, 7), 8.0)
                     for s, ks in ((0, [1, 2]), (1, []), (2, [60]))])
    r = A.high_norm_tokens(t, num_prefix_tokens=1)
    assert r.mask.shape == (3, 64) and r.indices == [[1, 2], [], [60]]
    for b in range(3):
        rb = A.high_norm_tokens(t[b], num_prefix_tokens=1)
        assert torch.equal(rb.mask, r.mask[b]) and torch.equal(rb.norms, r.norms[b])
        assert torch.equal(rb.median, r.median[b]) and torch.equal(rb.score, r.score[b])


def test_zero_median_and_bad_arguments():
    t = torch.zeros(3, 1 + 10, 4)
    t[:, 3, 0] = 5.0
    assert A.high_norm_tokens(t, num_prefix_tokens=1).indices == []  # no scale to compare against
    ok = _tokens(L=2, P=9)
    for kwargs, err in [({"ratio": 1.0}, ValueError), ({"ratio": math.nan}, ValueError),
                        ({"max_fraction": 1.5}, ValueError), ({"layers": [3]}, IndexError),
                        ({"layers": []}, ValueError), ({"layers": [1.0]}, TypeError),
                        ({"num_prefix_tokens": 10}, ValueError)]:
        with pytest.raises(err):
            A.high_norm_tokens(ok, **{"num_prefix_tokens": 1, **kwargs})
    with pytest.raises(ValueError):
        A.high_norm_tokens(torch.zeros(4, 4), num_prefix_tokens=1)
    assert A.high_norm_tokens(ok.numpy(), num_prefix_tokens=1, layers=[np.int64(-1)]).layers == (2,)


# ------------------------------------------------------------------ exclusion: brute-force references
def _attn(L=3, H=2, p=1, B=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    N = p + P
    shape = (L, H, N, N) if B is None else (B, L, H, N, N)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * 2).softmax(-1)


def _grads(like, seed=1):
    return torch.randn(like.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _mask(idx):
    m = torch.zeros(P, dtype=torch.bool)
    m[list(idx)] = True
    return m


def ref_exclude(a, g, idx, p):
    """Lists: zero the flagged key columns, divide each row by its remaining sum."""
    L, H, N = a.shape[0], a.shape[1], a.shape[-1]
    gone = {p + k for k in idx}
    A2 = [[[[0.0] * N for _ in range(N)] for _ in range(H)] for _ in range(L)]
    G2 = [[[[0.0] * N for _ in range(N)] for _ in range(H)] for _ in range(L)]
    for l in range(L):
        for h in range(H):
            for q in range(N):
                s = sum(float(a[l, h, q, k]) for k in range(N) if k not in gone)
                for k in range(N):
                    if k not in gone:
                        A2[l][h][q][k] = float(a[l, h, q, k]) / s if s > 0 else 0.0
                        G2[l][h][q][k] = float(g[l, h, q, k])
    return A2, G2


def ref_rollout(A2, G2, p, mode, start=0):
    """Rollout ("rollout"), gradient rollout ("grad", clamp after the head mean) or relevance ("rel") from lists."""
    L, H, N = len(A2), len(A2[0]), len(A2[0][0])
    R = [[float(i == j) for j in range(N)] for i in range(N)]
    for l in range(start, L):
        if mode == "rollout":
            M = [[sum(A2[l][h][i][j] for h in range(H)) / H for j in range(N)] for i in range(N)]
        elif mode == "grad":
            M = [[max(sum(A2[l][h][i][j] * G2[l][h][i][j] for h in range(H)) / H, 0.0) for j in range(N)]
                 for i in range(N)]
        else:
            M = [[sum(max(A2[l][h][i][j] * G2[l][h][i][j], 0.0) for h in range(H)) / H for j in range(N)]
                 for i in range(N)]
        if mode == "rel":
            MR = [[sum(M[i][k] * R[k][j] for k in range(N)) for j in range(N)] for i in range(N)]
            R = [[R[i][j] + MR[i][j] for j in range(N)] for i in range(N)]
        else:
            hat = [[M[i][j] + float(i == j) for j in range(N)] for i in range(N)]
            hat = [[x / sum(row) for x in row] for row in hat]
            R = [[sum(hat[i][k] * R[k][j] for k in range(N)) for j in range(N)] for i in range(N)]
    return torch.tensor(R[0][p:], dtype=torch.float64).reshape(GH, GW)


@pytest.mark.parametrize("p,idx", [(1, [0, 5]), (2, [11]), (1, [])])
def test_exclude_tokens_vs_loops(p, idx):
    a, g = _attn(p=p), _grads(_attn(p=p))
    a2, g2 = A.exclude_tokens(a, _mask(idx), num_prefix_tokens=p, grads=g)
    RA, RG = ref_exclude(a, g, idx, p)
    assert torch.allclose(a2, torch.tensor(RA, dtype=torch.float64), atol=1e-14)
    assert torch.equal(g2, torch.tensor(RG, dtype=torch.float64))
    assert torch.allclose(a2.sum(-1), torch.ones(a.shape[:-1], dtype=torch.float64))
    assert torch.equal(a2[..., [p + k for k in idx]], torch.zeros(a.shape[:-1] + (len(idx),), dtype=torch.float64))
    # the mask may be given as the [gh, gw] grid; the inputs are untouched; no grads -> None
    a3, none = A.exclude_tokens(a, _mask(idx).reshape(GH, GW), num_prefix_tokens=p)
    assert torch.equal(a3, a2) and none is None
    assert torch.equal(a, _attn(p=p))


def test_exclude_tokens_rows_with_all_mass_removed_stay_zero():
    a = _attn()
    a[0, 0, 3] = 0.0
    a[0, 0, 3, 1 + 4] = 1.0  # query 3 of layer 0, head 0 attends only to patch 4
    a2, _ = A.exclude_tokens(a.float(), _mask([4]), num_prefix_tokens=1)
    assert a2.dtype == torch.float32 and not bool(torch.isnan(a2).any())
    assert bool((a2[0, 0, 3] == 0).all())
    rows = a2.sum(-1)
    rows[0, 0, 3] = 1.0
    assert torch.allclose(rows, torch.ones_like(rows))


def test_exclude_tokens_batch_equals_per_image_and_rejects_bad_masks():
    a = _attn(B=2)
    g = _grads(a)
    m = torch.stack([_mask([1]), _mask([2, 7])])
    a2, g2 = A.exclude_tokens(a, m, num_prefix_tokens=1, grads=g)
    for b in range(2):
        ab, gb = A.exclude_tokens(a[b], m[b], num_prefix_tokens=1, grads=g[b])
        assert torch.equal(ab, a2[b]) and torch.equal(gb, g2[b])
    shared, _ = A.exclude_tokens(a, _mask([1]), num_prefix_tokens=1)  # one mask for every image
    assert torch.equal(shared[1], A.exclude_tokens(a[1], _mask([1]), num_prefix_tokens=1)[0])
    with pytest.raises(ValueError, match="patch tokens"):
        A.exclude_tokens(a[0], torch.zeros(P + 1, dtype=torch.bool), num_prefix_tokens=1)
    with pytest.raises(TypeError):
        A.exclude_tokens(a[0], torch.zeros(P), num_prefix_tokens=1)


@pytest.mark.parametrize("p,idx,start", [(1, [0, 5], 0), (2, [3, 4, 11], 1), (1, [6], 2)])
def test_analyses_of_excluded_attention_equal_brute_force(p, idx, start):
    """'Ignore artefact tokens': every analysis fed the excluded tensors equals the loops over the renormalised
    matrices."""
    a, g = _attn(p=p), _grads(_attn(p=p))
    a2, g2 = A.exclude_tokens(a, _mask(idx), num_prefix_tokens=p, grads=g)
    RA, RG = ref_exclude(a, g, idx, p)
    kw = {"grid": (GH, GW), "num_prefix_tokens": p, "start_layer": start}
    roll = ref_rollout(RA, RG, p, "rollout", start)
    grad = ref_rollout(RA, RG, p, "grad", start)
    rel = ref_rollout(RA, RG, p, "rel", start)
    assert torch.allclose(A.attention_rollout(a2, **kw), roll, atol=1e-12)
    assert torch.allclose(A.gradient_rollout(a2, g2, **kw), grad, atol=1e-12)
    assert torch.allclose(A.relevance(a2, g2, **kw), rel, atol=1e-12)
    for layer in range(3):
        cls = torch.tensor([sum(RA[layer][h][0][p + k] for h in range(2)) / 2 for k in range(P)],
                           dtype=torch.float64).reshape(GH, GW)
        assert torch.allclose(A.cls_attention(a2, layer, "mean", grid=(GH, GW), num_prefix_tokens=p), cls, atol=1e-14)
    # the flagged patches get no rollout mass and no [CLS] attention
    assert float(A.cls_attention(a2, 2, "mean", grid=(GH, GW), num_prefix_tokens=p).flatten()[idx].abs().sum()) == 0


# ------------------------------------------------------------------ attention shares
def test_register_attention_share_by_construction():
    # p = 1 [CLS] + 3 registers (timm's layout: [CLS], registers, patches); keys 1..3 are registers
    L, H, p, N = 2, 2, 4, 4 + P
    a = torch.zeros(L, H, N, N, dtype=torch.float64)
    a[..., :, 0] = 0.5  # every row: half to [CLS], the rest spread below
    a[0, 0, 0, 1:4] = 0.1  # layer 0 head 0 [CLS]: 0.3 on registers, 0.2 on patch 0
    a[0, 0, 0, p] = 0.2
    a[0, 1, 0, 2] = 0.5  # head 1: 0.5 on register 2
    a[1, :, 0, p:p + 5] = 0.1  # layer 1: nothing on registers
    a[:, :, 1:, 3] = 0.25  # other queries: 0.25 on register 3 ...
    a[:, :, 1:, p + 1] = 0.25  # ... and 0.25 on patch 1
    assert torch.allclose(a.sum(-1), torch.ones(L, H, N, dtype=torch.float64))
    s = A.register_attention_share(a, num_registers=3, num_prefix_tokens=p)
    assert torch.allclose(s, torch.tensor([0.4, 0.0], dtype=torch.float64))
    sh = A.register_attention_share(a, num_registers=3, num_prefix_tokens=p, per_head=True)
    assert torch.allclose(sh, torch.tensor([[0.3, 0.5], [0.0, 0.0]], dtype=torch.float64))
    patches = A.register_attention_share(a, num_registers=3, num_prefix_tokens=p, query="patches")
    assert torch.allclose(patches, torch.full((L,), 0.25, dtype=torch.float64))
    # the last R of the prefix: with 1 register only key 3 counts
    assert torch.allclose(A.register_attention_share(a, num_registers=1, num_prefix_tokens=p),
                          torch.tensor([0.05, 0.0], dtype=torch.float64))
    assert torch.equal(A.register_attention_share(a, num_registers=0, num_prefix_tokens=p), torch.zeros(L).double())
    batch = A.register_attention_share(torch.stack([a, a.flip(0)]), num_registers=3, num_prefix_tokens=p)
    assert torch.allclose(batch, torch.tensor([[0.4, 0.0], [0.0, 0.4]], dtype=torch.float64))
    with pytest.raises(ValueError):
        A.register_attention_share(a, num_registers=5, num_prefix_tokens=p)
    with pytest.raises(ValueError):
        A.register_attention_share(a, num_registers=1, num_prefix_tokens=p, query="keys")


def test_artefact_attention_share_by_construction():
    a = _attn()
    idx = [2, 9]
    s = A.artefact_attention_share(a, _mask(idx), num_prefix_tokens=1)
    ref = [sum(float(a[l, h, 0, 1 + k]) for h in range(2) for k in idx) / 2 for l in range(3)]
    assert torch.allclose(s, torch.tensor(ref, dtype=torch.float64), atol=1e-15)
    assert torch.equal(A.artefact_attention_share(a, _mask([]), num_prefix_tokens=1), torch.zeros(3).double())
    everything = A.artefact_attention_share(a, _mask(range(P)), num_prefix_tokens=1, per_head=True)
    assert torch.allclose(everything, 1 - a[:, :, 0, 0])
    a2, _ = A.exclude_tokens(a, _mask(idx), num_prefix_tokens=1)
    assert torch.equal(A.artefact_attention_share(a2, _mask(idx), num_prefix_tokens=1), torch.zeros(3).double())


# ------------------------------------------------------------------ the real ViT-Ti/16
WEIGHTS = SHARED_WEIGHTS
TINY = WEIGHTS / "vit_tiny_patch16_224_augreg_in21k_ft_in1k.safetensors"


@pytest.mark.real_weights
@pytest.mark.skipif(not TINY.is_file(), reason=f"real weights not present at {TINY}")
def test_real_vit_tiny_artefacts(capsys):
    skimage_data = pytest.importorskip("skimage.data")
    from PIL import Image

    import vitviz
    from vitviz.pipeline import Pipeline

    pipe = Pipeline(vitviz.load_checkpoint(TINY))
    lines = []
    for name in ("chelsea", "coffee", "astronaut", "rocket"):
        r = pipe.run(Image.fromarray(getattr(skimage_data, name)()), source=name)
        p, (gh, gw) = r.num_prefix_tokens, r.grid
        art = A.high_norm_tokens(r.tokens, num_prefix_tokens=p)
        flagged = art.indices
        assert 1 <= len(flagged) <= 0.1 * gh * gw, (name, flagged)
        share = A.artefact_attention_share(r.attentions, art.mask, num_prefix_tokens=p)
        a2, _ = A.exclude_tokens(r.attentions, art.mask, num_prefix_tokens=p)
        assert float(A.artefact_attention_share(a2, art.mask, num_prefix_tokens=p).abs().max()) == 0
        ratios = art.score[art.mask]
        lines.append(f"{name}: {r.top_k(1)[0][1]}; flagged {len(flagged)}/{gh * gw} patches "
                     f"{[(k // gw, k % gw) for k in flagged]} (row, col), norm/median {float(ratios.min()):.0f}-"
                     f"{float(ratios.max()):.0f}x over tokens{list(art.layers)}; their share of the [CLS] "
                     f"attention: last layer {float(share[-1]):.3f}, max over layers {float(share.max()):.3f}")
        # they are outliers by an order of magnitude, and take a large share of the last layer's [CLS] attention
        assert float(ratios.min()) > 10 and float(share[-1]) > 10 * len(flagged) / (gh * gw)
    with capsys.disabled():
        print("\n" + "\n".join(lines))
