"""open_clip's head width: the number of heads of an open_clip folder is read from its ``open_clip_config.json``
(``vision_cfg.width / vision_cfg.head_width``, ``text_cfg.heads``), never passed by hand, and the image tower's
outputs and every layer's attention equal open_clip's own (read from open_clip's ``nn.MultiheadAttention`` modules
during open_clip's own forward), the text embeddings equal open_clip's ``encode_text``."""

from __future__ import annotations

import json

import pytest
import text_builders as tb
import torch
import torch.nn.functional as F
from family_helpers import MhaRecorder, check_against_reference, randomise_, rel_err, timm_reference

from vitviz.capture import capture
from vitviz.model import load_checkpoint
from vitviz.model.checkpoints.common import CheckpointError
from vitviz.model.text import open_text_tower
from vitviz.pipeline import Pipeline

open_clip = pytest.importorskip("open_clip")


def open_clip_attentions(model, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """open_clip's image embedding and each block's attention ``[B, H, N, N]``, read from its
    ``nn.MultiheadAttention`` modules during its own forward."""
    rec = MhaRecorder([b.attn for b in model.visual.transformer.resblocks])
    try:
        with torch.no_grad():
            out = model.encode_image(x)
    finally:
        rec.close()
    return out, rec.maps


def head_width_cfg() -> dict:
    """width 256 with head width 128 (2 heads; OpenAI's width / 64 rule would say 4), a text tower with 4 heads of
    width 16 (the rule would say 1)."""
    return dict(embed_dim=16, quick_gelu=False,
                text_cfg=dict(context_length=77, vocab_size=49408, width=64, heads=4, layers=2),
                vision_cfg=dict(layers=2, width=256, head_width=128, patch_size=16, image_size=48))


def test_head_width_is_read_and_the_tower_equals_open_clip(tmp_path):
    cfg = head_width_cfg()
    model = tb.open_clip_model(cfg)
    assert model.visual.transformer.resblocks[0].attn.num_heads == 2  # open_clip's own reading of the config
    folder = tb.write_open_clip_folder(tmp_path / "oc", model, cfg)
    pipe = Pipeline.open(folder)
    ours = pipe.model
    assert ours.config.num_heads == 2 and ours.config.embed_dim == 256
    x = torch.randn(2, 3, 48, 48, generator=torch.Generator().manual_seed(0))
    ref, ref_attn = open_clip_attentions(model, x)
    with torch.no_grad():
        assert rel_err(ours(x), ref) <= 1e-4
    cap = capture(ours, x)
    assert len(ref_attn) == cap.num_layers == 2
    for i, ra in enumerate(ref_attn):
        assert ra.shape[1] == 2
        assert rel_err(cap.attentions[i], ra) <= 1e-4, i
    # the head count matters: the same weights read with OpenAI's rule (4 heads) give other attention
    wrong = load_checkpoint(folder / "open_clip_model.safetensors", num_heads=4)
    with torch.no_grad():
        assert rel_err(wrong(x), ref) > 1e-3
    # the text tower: 4 heads from text_cfg.heads, the embeddings equal open_clip's
    tower = open_text_tower(folder)
    assert tower.encoder.cfg.heads == 4
    prompts = ["a photo of a cat", "a red car"]
    ids = open_clip.get_tokenizer(f"local-dir:{folder}")(prompts)
    with torch.no_grad():
        text_ref = F.normalize(model.encode_text(ids), dim=-1)
    assert (tower.encode(prompts) - text_ref).abs().max() <= 1e-4


@pytest.mark.parametrize("change,words", [
    ({"head_width": 96}, "head_width 96 does not divide the width 256"),
    ({"attentional_pool": True}, "attentional_pool=True"),
    ({"pool_type": "avg"}, "pool_type='avg'"),
    ({"width": 512}, "width is 512 but the weights are 256 wide"),
])
def test_image_tower_settings_not_built_are_refused(tmp_path, change, words):
    cfg = head_width_cfg()
    model = tb.open_clip_model(cfg)
    folder = tb.write_open_clip_folder(tmp_path / "oc", model, cfg)
    written = json.loads((folder / "open_clip_config.json").read_text())
    written["model_cfg"]["vision_cfg"].update(change)
    (folder / "open_clip_config.json").write_text(json.dumps(written))
    with pytest.raises(CheckpointError, match="open_clip_config.json: ") as e:
        load_checkpoint(folder)
    assert words in str(e.value) and "\n" not in str(e.value)


# --- open_clip towers with a timm trunk (EVA02-*) --------------------------------------------------------------------
def _eva02_open_clip(proj):
    """open_clip's ``CLIP`` with the ``EVA02-B-16`` vision config (a timm ``eva02_base_patch16_clip_224`` trunk), its
    trunk rebuilt small the way ``TimmModel`` builds it (``num_classes`` = embed_dim with ``timm_proj`` null; a
    head-less trunk and ``head.proj`` with ``linear``)."""
    import timm

    torch.manual_seed(0)
    vision = dict(image_size=64, timm_model_name="eva02_base_patch16_clip_224", timm_model_pretrained=False,
                  timm_pool="token", timm_proj=proj)
    text = dict(context_length=8, vocab_size=64, width=32, heads=2, layers=1)
    model = open_clip.CLIP(embed_dim=24, vision_cfg=vision, text_cfg=text)
    # head width 64 as in every EVA-02 (the config does not carry the heads: width / 64, as timm's eva02 functions)
    small = dict(img_size=64, embed_dim=128, depth=2, num_heads=2, global_pool="token",
                 dynamic_img_size=True)  # open_clip runs its own size only: timm's resize is the reference elsewhere
    model.visual.trunk = timm.create_model("eva02_base_patch16_clip_224", pretrained=False,
                                           num_classes=24 if proj is None else 0, **small)
    if proj == "linear":
        model.visual.head.proj = torch.nn.Linear(128, 24, bias=False)
    return randomise_(model), {"embed_dim": 24, "vision_cfg": vision, "text_cfg": text}


@pytest.mark.parametrize("proj", [None, "linear"])
def test_open_clip_eva02_tower_equals_open_clip(tmp_path, proj):
    """The image embedding (``encode_image``) and every layer's attention (timm's explicit path, its own softmax) of
    an open_clip EVA-02 tower, at the trunk's size and a non-square one."""
    model, cfg = _eva02_open_clip(proj)
    folder = tmp_path / "eva02-clip"
    folder.mkdir()
    torch.save(model.state_dict(), folder / "open_clip_pytorch_model.bin")
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg}))
    ours = load_checkpoint(folder)
    c = ours.config
    assert ours.spec.source_format == "open_clip-timm" and ours.spec.head_kind == "projection"
    assert c.rope == "axial" and c.attn_norm and c.num_classes == 24 and c.head_bias == (proj is None)
    assert c.num_heads == 2

    trunk_ref = timm_reference(model.visual.trunk)

    def reference(x):
        _, attn, _ = trunk_ref(x)
        with torch.no_grad():
            return model.encode_image(x), attn, None

    check_against_reference(ours, reference, [(64, 64), (48, 80)], prefix=1)


def test_open_clip_timm_trunk_without_config_is_refused(tmp_path):
    model, _ = _eva02_open_clip(None)
    torch.save(model.state_dict(), tmp_path / "eva.bin")
    with pytest.raises(CheckpointError, match="RoPE") as e:
        load_checkpoint(tmp_path / "eva.bin", num_heads=2)
    assert "open_clip_config.json" in str(e.value) and "\n" not in str(e.value)
