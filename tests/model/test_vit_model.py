"""Our ViT against timm with the same random weights, plus the constructor's validation."""

import math

import pytest
import torch

from vitviz.model import ViT, create_model, list_models

timm = pytest.importorskip("timm")


def _ours_like(ref, **extra) -> ViT:
    cfg = dict(
        img_size=ref.patch_embed.img_size, patch_size=ref.patch_embed.patch_size[0], embed_dim=ref.embed_dim,
        depth=len(ref.blocks), num_heads=ref.blocks[0].attn.num_heads, num_classes=ref.num_classes,
        distilled=getattr(ref, "dist_token", None) is not None, num_reg_tokens=getattr(ref, "num_reg_tokens", 0),
        global_pool=ref.global_pool, no_embed_class=ref.no_embed_class, class_token=ref.cls_token is not None,
    )
    cfg.update(extra)
    m = ViT(**cfg).eval()
    m.load_state_dict(ref.state_dict(), strict=True)
    return m


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "deit_tiny_distilled_patch16_224"])
def test_logits_match_timm(name):
    ref = timm.create_model(name, pretrained=False).eval()
    ours = _ours_like(ref)
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        a, b = ours(x), ref(x)
    assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


def test_fused_and_explicit_paths_agree():
    m = ViT(img_size=64, patch_size=16, embed_dim=64, depth=3, num_heads=4, num_classes=7).eval()
    x = torch.randn(3, 3, 64, 64)
    with torch.no_grad():
        m.set_fused_attention(True)
        a = m(x)
        m.set_fused_attention(False)
        b = m(x)
    assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)


def test_registry_has_paper_variants():
    names = list_models()
    for n in ["vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224", "vit_base_patch32_384",
              "vit_large_patch16_384", "vit_huge_patch14_224"]:
        assert n in names
    m = create_model("vit_base_patch16_224", depth=2)
    assert (m.embed_dim, m.num_heads, len(m.blocks)) == (768, 12, 2)
    assert m.spec.preprocess.crop == (224, 224)


# --------------------------------------------------------------------------------------------- other input sizes
@pytest.mark.parametrize("hw", [(64, 96), (96, 48)])
def test_non_square_input_matches_timm_dynamic_size(hw):
    from timm.models.vision_transformer import VisionTransformer

    ref = VisionTransformer(img_size=64, patch_size=16, embed_dim=64, depth=2, num_heads=4, num_classes=5,
                            reg_tokens=2, dynamic_img_size=True).eval()
    with torch.no_grad():
        ref.pos_embed.normal_(0, 0.5)
        ref.head.weight.normal_(0, 0.05)
    ours = _ours_like(ref)
    x = torch.randn(2, 3, *hw)
    with torch.no_grad():
        assert torch.allclose(ours(x), ref(x), atol=1e-4, rtol=1e-4)
        assert ours.pos_embed_for((hw[0] // 16, hw[1] // 16)).shape == (1, 2 + 1 + hw[0] * hw[1] // 256, 64)


def test_input_validation_names_the_wrong_number():
    m = ViT(img_size=64, patch_size=16, embed_dim=64, depth=1, num_heads=4, num_classes=3)
    with pytest.raises(ValueError, match=r"height 50 is not a multiple of patch_size=16 \(nearest valid: 48 or 64\)"):
        m(torch.randn(1, 3, 50, 64))
    with pytest.raises(ValueError, match=r"width 70 .*64 or 80"):
        m(torch.randn(1, 3, 64, 70))
    with pytest.raises(ValueError, match="input has 1 channels.*in_channels=3"):
        m(torch.randn(1, 1, 64, 64))
    with pytest.raises(ValueError, match=r"\[B, C, H, W\]"):
        m(torch.randn(3, 64, 64))
    with pytest.raises(ValueError, match=r"embed_dim=100 is not divisible by num_heads=3.*\[1, 2, 4, 5"):
        ViT(embed_dim=100, num_heads=3)
    with pytest.raises(ValueError, match=r"img_size height 100 is not a multiple of patch_size=16.*96 or 112"):
        ViT(img_size=100, patch_size=16)
    with pytest.raises(ValueError, match="global_pool='token' needs class_token=True"):
        ViT(class_token=False)


def test_num_classes_zero_returns_features():
    m = ViT(img_size=32, patch_size=8, embed_dim=64, depth=1, num_heads=4, num_classes=0).eval()
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        out = m(x)
        assert out.shape == (3, 64)
        assert torch.equal(out, m.forward_features(x)[:, 0])


def test_sincos_pos_embed_brute_force():
    from vitviz.model.pos_embed import sincos_pos_embed_2d

    gh, gw, D = 3, 4, 8
    pe = sincos_pos_embed_2d((gh, gw), D)
    q = D // 4
    for r in range(gh):
        for c in range(gw):
            row = pe[r * gw + c]
            for i in range(q):
                w = 1.0 / 10000 ** (i / q)
                want = [math.sin(c * w), math.cos(c * w), math.sin(r * w), math.cos(r * w)]
                got = [row[i], row[q + i], row[2 * q + i], row[3 * q + i]]
                assert all(abs(float(g) - v) < 1e-6 for g, v in zip(got, want))
    m = ViT(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, pos_embed="sincos")
    assert not any(n == "pos_embed" for n, _ in m.named_parameters())  # fixed, not trained
    assert torch.equal(m.pos_embed[0, 1:], sincos_pos_embed_2d((4, 4), 32))


# --------------------------------------------------------------------------------------------- training
@pytest.fixture
def one_thread():
    """Tiny models run faster (and far steadier on a busy machine) on one thread."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_training_reduces_loss(one_thread):
    torch.manual_seed(0)
    # a tiny synthetic task: is the bright square in the top or the bottom half?
    n = 32
    x = torch.randn(n, 3, 32, 32) * 0.1
    y = torch.randint(0, 2, (n,))
    for i in range(n):
        r = 2 if y[i] == 0 else 18
        x[i, :, r:r + 12, 10:22] += 1.0
    m = ViT(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=2, drop_rate=0.1,
            drop_path_rate=0.1)
    opt = torch.optim.AdamW(m.parameters(), lr=2e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    m.eval()
    with torch.no_grad():
        before = float(loss_fn(m(x), y))
    m.train()
    for _ in range(20):
        opt.zero_grad()
        loss = loss_fn(m(x), y)
        loss.backward()
        opt.step()
    m.eval()
    with torch.no_grad():
        after = float(loss_fn(m(x), y))
        acc = float((m(x).argmax(-1) == y).float().mean())
    assert after < 0.5 * before, (before, after)
    assert acc > 0.9


@pytest.mark.parametrize("kw", [dict(drop_rate=0.3), dict(attn_drop_rate=0.3), dict(drop_path_rate=0.3)])
def test_dropout_and_drop_path_only_in_train_mode(kw, one_thread):
    m = ViT(img_size=32, patch_size=8, embed_dim=64, depth=3, num_heads=4, num_classes=5, **kw)
    plain = ViT(img_size=32, patch_size=8, embed_dim=64, depth=3, num_heads=4, num_classes=5)
    plain.load_state_dict(m.state_dict())
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        m.train()
        a, b = m(x), m(x)
        assert not torch.allclose(a, b)  # stochastic in train mode
        m.eval()
        plain.eval()
        c, d = m(x), m(x)
        assert torch.equal(c, d)  # deterministic in eval
        assert torch.allclose(c, plain(x), atol=1e-6)  # and identical to the model without dropout
        for fused in (True, False):  # both attention paths honour train/eval
            m.set_fused_attention(fused)
            assert torch.equal(m(x), c) or torch.allclose(m(x), c, atol=1e-5)
            m.train()
            assert not torch.allclose(m(x), m(x))
            m.eval()


def test_drop_path_rates_rise_linearly():
    m = ViT(img_size=32, patch_size=8, embed_dim=32, depth=5, num_heads=2, drop_path_rate=0.2)
    rates = [b.drop_path1.p for b in m.blocks]
    assert rates[0] == 0.0 and abs(rates[-1] - 0.2) < 1e-9
    assert all(abs((rates[i + 1] - rates[i]) - 0.05) < 1e-9 for i in range(4))
