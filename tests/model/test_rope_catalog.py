"""Curated names of the RoPE families (dinov3-s/b/l, eva02-b14, pe-core-b16), their architecture table against
timm's own architecture functions, the Hub's pre-download check letting them through, a gated repository's message,
and a DINOv3 repository opened by its curated name from a fake Hub (no network)."""

from __future__ import annotations

import json

import pytest
import torch
from family_helpers import randomise_
from safetensors.torch import save

from vitviz.model.sources import catalog, hub
from vitviz.model.sources.refs import parse_model_ref
from vitviz.model.sources.torch_hub import PretrainedError
from vitviz.model.timm_rope_archs import FAMILIES, family

timm = pytest.importorskip("timm")

CURATED = {"dinov3-s": "timm/vit_small_patch16_dinov3.lvd1689m", "dinov3-b": "timm/vit_base_patch16_dinov3.lvd1689m",
           "dinov3-l": "timm/vit_large_patch16_dinov3.lvd1689m", "eva02-b14": "timm/eva02_base_patch14_224.mim_in22k",
           "pe-core-b16": "timm/vit_pe_core_base_patch16_224.fb"}


def test_curated_rope_names_resolve_to_timms_hub_ids():
    for key, repo in CURATED.items():
        assert catalog.HUB_BY_KEY[key].repo == repo
        assert parse_model_ref(key) == f"hub:{repo}"
        cfg = timm.models.get_pretrained_cfg(repo[5:]).to_dict()
        assert cfg["hf_hub_id"] == repo  # timm's own pretrained config names this repository
        assert family(repo[5:].split(".")[0]) is not None  # and the timm-eva reader reads its architecture


def _timm_eva_arguments() -> dict[str, dict]:
    """What each architecture function of timm's eva.py passes to the model (its own source, called with the
    model constructor replaced by a recorder)."""
    import timm.models.eva as E

    seen: dict[str, dict] = {}
    real = E._create_eva
    E._create_eva = lambda name, pretrained=False, **kw: seen.__setitem__(name, kw)
    try:
        for name in timm.list_models():
            if hasattr(E, name):
                getattr(E, name)()
    finally:
        E._create_eva = real
    return seen


def test_architecture_table_agrees_with_timm():
    """Every entry of the table: rope type, temperature, offset, indexing, halves, reference grid, pooling, pool
    heads, norms and LayerNorm eps as timm's function sets them (timm's defaults where it sets none)."""
    from functools import partial

    from vitviz.model.timm_rope_archs import ref_from_name

    args = _timm_eva_arguments()
    covered = [a for a in args if family(a) is not None]
    assert {"eva02_base_patch14_224", "vit_pe_core_base_patch16_224", "vit_small_plus_patch16_dinov3",
            "vit_small_patch16_rope_mixed_224", "vit_base_patch16_rope_reg1_gap_256"} <= set(covered)
    defaults = dict(rope_type="cat", rope_temperature=10000.0, rope_grid_offset=0.0, rope_grid_indexing="ij",
                    rope_rotate_half=False, ref_feat_shape=None, global_pool="avg", attn_pool_num_heads=None,
                    no_embed_class=False)

    def norms(d):  # timm's Eva: fc_norm by default with mean pooling; the final norm unless fc_norm is on
        fc = d.get("use_fc_norm")
        fc = d.get("global_pool", "avg") == "avg" if fc is None else fc
        post = d.get("use_post_transformer_norm")
        return fc, (not fc) if post is None else post

    for arch in covered:
        kw, fam = args[arch], family(arch)
        nl = kw.get("norm_layer")
        eps = nl.keywords.get("eps", 1e-6) if isinstance(nl, partial) else 1e-6
        assert fam["eps"] == eps, arch
        assert norms(fam) == norms(kw), arch
        patch = kw["patch_size"]
        for k, default in defaults.items():
            want = kw.get(k, default)
            got = fam.get(k, default)
            if k == "ref_feat_shape" and fam.get("ref") == "name":
                got = ref_from_name(arch, patch)
            if isinstance(want, tuple):
                want = tuple(want)
            assert got == want or (isinstance(want, float) and got == pytest.approx(want)), (arch, k, got, want)
    assert all(p.pattern for p, _ in FAMILIES)


def test_hub_check_lets_the_rope_families_through_and_names_the_others(tmp_path):
    for arch in ("vit_small_patch16_dinov3", "eva02_base_patch14_224", "vit_pe_core_base_patch16_224",
                 "vit_base_patch16_rope_mixed_224"):
        (tmp_path / "config.json").write_text(json.dumps({"architecture": arch}))
        hub.check_supported("x/y", tmp_path / "config.json")
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "vit_base_patch16_sapiens2"}))
    with pytest.raises(PretrainedError, match="sapiens2"):
        hub.check_supported("x/y", tmp_path / "config.json")


def test_gated_repository_says_how_to_log_in(fake_hub):
    repo = CURATED["dinov3-s"]
    fake_hub.gated.add(repo)
    with pytest.raises(PretrainedError) as e:
        hub.load_hub(repo, show_bar=False)
    msg = str(e.value)
    assert "gated" in msg and "hf auth login" in msg and "HF_TOKEN" in msg and repo in msg and "\n" not in msg


def test_curated_dinov3_opens_from_the_hub(fake_hub):
    """A tiny DINOv3 in the curated repository (timm's files: config.json with architecture and pretrained_cfg,
    model.safetensors): opened by its curated name, RoPE and registers read, outputs equal timm's."""
    repo = CURATED["dinov3-s"]
    torch.manual_seed(0)
    ref = randomise_(timm.create_model("vit_small_patch16_dinov3", pretrained=False, num_classes=0, img_size=64,
                                       embed_dim=64, depth=2, num_heads=2, dynamic_img_size=True))
    cfg = {"architecture": "vit_small_patch16_dinov3", "num_classes": 0, "num_features": 64,
           "model_args": {"embed_dim": 64, "depth": 2, "num_heads": 2, "img_size": 64},
           "pretrained_cfg": {"input_size": [3, 64, 64], "mean": [0.485, 0.456, 0.406],
                              "std": [0.229, 0.224, 0.225], "crop_pct": 1.0, "interpolation": "bicubic"}}
    fake_hub.add(repo, {"config.json": json.dumps(cfg).encode(),
                        "model.safetensors": save({k: v.contiguous() for k, v in ref.state_dict().items()})})
    from vitviz.model.sources.refs import open_model

    model, _ = open_model(parse_model_ref("dinov3-s"), show_bar=False)
    assert model.config.rope == "dinov3" and model.config.num_reg_tokens == 4
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=1e-4, atol=1e-5)
