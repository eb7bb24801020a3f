"""timm's NaFlex ViTs (``naflexvit_*``) from their timm hub folders, in fixed-grid use (an image batch through the
model): the Linear patch embedding, the ``[1, H, W, D]`` position table of the patch grid resized per input as timm
does (bicubic or bilinear, antialiased), registers, LayerScale, mean pooling with ``fc_norm`` or the SigLIP-shaped
attention pool. Outputs and every layer's attention (timm's explicit path, its own softmax) equal timm's at the
table's own size, at the pretrained size and at a non-square one within 1e-4. What vitviz does not model is
refused naming it."""

from __future__ import annotations

import pytest
import torch
from family_helpers import check_against_reference, randomise_, timm_reference, write_timm_folder

from vitviz.model import load_checkpoint
from vitviz.model.checkpoints import CheckpointError

timm = pytest.importorskip("timm")
SMALL = dict(embed_dim=64, depth=2, num_heads=2, num_classes=0, pos_embed_grid_size=(4, 4))


def _naflex(arch: str, **kw):
    torch.manual_seed(0)
    return randomise_(timm.create_model(arch, pretrained=False, **{**SMALL, **kw}))


def _folder(tmp_path, arch, model, model_args, size=96):
    return write_timm_folder(tmp_path / arch, model, arch, {"input_size": [3, size, size], "crop_pct": 1.0},
                             model_args=model_args)


@pytest.mark.parametrize("arch, prefix, registers, expect", [
    ("naflexvit_base_patch16_gap", 4, 4, dict(global_pool="avg", fc_norm=True, pos_embed_interp="timm")),
    ("naflexvit_so150m2_patch16_reg1_gap", 1, 1, dict(global_pool="avg", fc_norm=True, qkv_bias=False)),
    ("naflexvit_base_patch16_siglip", 0, 0, dict(global_pool="map", act_layer="gelu_tanh",
                                                   pos_embed_interp="bilinear_aa")),
])
def test_naflexvit_equals_timm(tmp_path, arch, prefix, registers, expect):
    kw = {k: v for k, v in SMALL.items() if k != "num_classes"}
    ref = _naflex(arch)
    ours = load_checkpoint(_folder(tmp_path, arch, ref, {**kw, "pos_embed_grid_size": [4, 4]}))
    c = ours.config
    assert ours.spec.source_format == "timm-naflex" and c.img_size == (64, 64) and c.no_embed_class == (prefix > 0)
    assert c.num_heads == 2 and ours.spec.input_size == (96, 96)  # timm's pretrained_cfg: the table resized
    for k, v in expect.items():
        assert getattr(c, k) == v, (k, getattr(c, k), v)
    worst = check_against_reference(ours, timm_reference(ref), [(64, 64), (96, 96), (48, 112)], prefix=prefix,
                                    registers=registers)
    print(arch, "worst relative errors:", worst)


@pytest.mark.parametrize("arch, kw, match", [
    ("naflexvit_base_patch16_par_gap", {}, "aspect-preserving"),
    ("naflexvit_base_patch16_map", {}, "pool reads the patch tokens only"),
    ("naflexvit_base_patch16_gap", {"qk_norm": True}, "model_args.qk_norm=True"),
    ("naflexvit_base_patch16_gap", {"rope_type": "axial", "pos_embed": "none"}, "model_args.rope_type='axial'"),
])
def test_naflexvit_parts_not_modelled_are_refused(tmp_path, arch, kw, match):
    ref = _naflex(arch, **kw)
    folder = _folder(tmp_path, arch, ref, {"num_heads": 2, **kw})
    with pytest.raises(CheckpointError, match=match) as e:
        load_checkpoint(folder)
    assert "\n" not in str(e.value)
