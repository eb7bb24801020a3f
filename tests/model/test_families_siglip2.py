"""SigLIP 2 against transformers, random weights saved by ``save_pretrained`` (no network): the NaFlex tower
(``Siglip2VisionModel``: a Linear on patchified pixels, the position table resized bilinearly with antialiasing to
each image's grid, the attention-pool head) at its native grid and at non-square ones; outputs, every layer's
attention (``output_attentions`` with eager attention) and the pool query's attention (read from the head's
``nn.MultiheadAttention`` during transformers' forward) within 1e-4. The NaFlex sizing against
``Siglip2ImageProcessor`` and a whole photo through the processor and the padded model against vitviz's pipeline.
The fixed-resolution SigLIP 2 checkpoints are ``SiglipModel`` folders (tests/model/test_families_hf.py) and timm's
``vit_*_siglip_*.v2_webli`` models (tests/model/test_families_timm.py): nothing new to read."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from family_helpers import MhaRecorder, check_against_reference, randomise_, rel_err, save_hf_folder
from PIL import Image

from vitviz.model import load_checkpoint
from vitviz.model.checkpoints.common import CheckpointError
from vitviz.model.checkpoints.saving import save_checkpoint
from vitviz.model.preprocess import INCEPTION_MEAN, naflex_size
from vitviz.pipeline import Pipeline

T = pytest.importorskip("transformers")
from transformers.models.siglip2 import image_processing_siglip2 as hf_proc  # noqa: E402

PATCH = 8


def naflex_model(**cfg):
    torch.manual_seed(0)
    config = T.Siglip2VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                   patch_size=PATCH, num_patches=16, attn_implementation="eager", **cfg)
    return randomise_(T.Siglip2VisionModel(config))




def patchify(x: torch.Tensor) -> torch.Tensor:
    """``[B, C, H, W]`` -> transformers' ``[B, N, P*P*C]`` (its own ``convert_image_to_patches``)."""
    return torch.stack([hf_proc.convert_image_to_patches(im, PATCH) for im in x])


def reference(model):
    def ref(x):
        B, _, H, W = x.shape
        shapes = torch.tensor([[H // PATCH, W // PATCH]] * B)
        mask = torch.ones(B, shapes[0].prod().item(), dtype=torch.int32)
        rec = MhaRecorder([model.head.attention])
        try:
            with torch.no_grad():
                out = model(pixel_values=patchify(x), pixel_attention_mask=mask, spatial_shapes=shapes,
                            output_attentions=True)
        finally:
            rec.close()
        return out.pooler_output, list(out.attentions), rec.maps[0][:, :, 0]
    return ref


def test_naflex_tower_equals_transformers_on_square_and_non_square_grids(tmp_path):
    model = naflex_model()
    ours = load_checkpoint(save_hf_folder(model, tmp_path / "naflex"))
    c, pre = ours.config, ours.spec.preprocess
    assert ours.spec.source_format == "hf-siglip" and c.global_pool == "map" and c.num_prefix_tokens == 0
    assert c.img_size == (32, 32) and c.pos_embed_interp == "bilinear_aa" and c.act_layer == "gelu_tanh"
    assert pre.max_num_patches == 256 and pre.patch_size == PATCH and pre.mean == INCEPTION_MEAN
    assert "preprocessing: NaFlex: aspect ratio kept, sides multiples of 8, at most 256 patches" in ours.spec.describe()
    again = load_checkpoint(save_checkpoint(ours, tmp_path / "naflex.safetensors"))  # vitviz's own file keeps it
    assert again.spec.preprocess == pre and again.config == c
    worst = check_against_reference(ours, reference(model), [(32, 32), (24, 56), (72, 16), (48, 40)], prefix=0)
    print("SigLIP 2 NaFlex worst relative errors:", worst)


def test_naflex_sizing_equals_the_image_processor():
    for h, w in [(480, 640), (640, 480), (100, 1000), (37, 53), (1000, 9), (256, 256), (17, 3000)]:
        for budget in (16, 64, 256, 1024):
            for p in (8, 16):
                assert naflex_size(h, w, p, budget) == hf_proc.get_image_size_for_max_num_patches(h, w, p, budget)


def test_a_photo_through_the_processor_and_the_padded_model_equals_the_pipeline(tmp_path):
    model = naflex_model()
    folder = save_hf_folder(model, tmp_path / "naflex", {
        "image_processor_type": "Siglip2ImageProcessor", "patch_size": PATCH, "max_num_patches": 26, "resample": 2,
        "image_mean": [0.5] * 3, "image_std": [0.5] * 3})
    pipe = Pipeline.open(folder)
    assert pipe.spec.preprocess.max_num_patches == 26
    rng = np.random.default_rng(0)
    photo = Image.fromarray((rng.random((90, 170, 3)) * 255).astype(np.uint8))
    proc = T.Siglip2ImageProcessor(patch_size=PATCH, max_num_patches=26)
    enc = proc(images=[photo], return_tensors="pt")
    gh, gw = enc["spatial_shapes"][0].tolist()
    assert (gh * PATCH, gw * PATCH) == naflex_size(90, 170, PATCH, 26) == (32, 48)  # aspect kept, padded
    prepared = pipe.prepare(photo)
    assert tuple(prepared.x.shape[-2:]) == (gh * PATCH, gw * PATCH)
    pixels = patchify(prepared.x[None])[0]
    # torchvision's resize (the processor) against PIL's (vitviz): the same size, pixels within a few 1/255 steps
    assert (pixels - enc["pixel_values"][0, :gh * gw]).abs().max() <= 0.05
    with torch.no_grad():
        ref = model(pixel_values=pixels[None].expand(1, -1, -1).contiguous(), spatial_shapes=torch.tensor([[gh, gw]]),
                    pixel_attention_mask=torch.ones(1, gh * gw, dtype=torch.int32)).pooler_output
        padded = torch.cat([pixels, torch.zeros(26 - gh * gw, pixels.shape[1])])[None]
        ref_padded = model(pixel_values=padded, spatial_shapes=torch.tensor([[gh, gw]]),
                           pixel_attention_mask=enc["pixel_attention_mask"]).pooler_output
        ours = pipe.model(prepared.x[None])
    assert rel_err(ours, ref) <= 1e-4 and rel_err(ours, ref_padded) <= 1e-4
    result = pipe.run(photo)
    assert result.grid == (4, 6) and result.pool_attention is not None


def test_naflex_two_tower_folder_reads_its_vision_config(tmp_path):
    torch.manual_seed(0)
    vis = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, patch_size=PATCH,
               num_patches=16)
    txt = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=99)
    model = randomise_(T.Siglip2Model(T.Siglip2Config(text_config=txt, vision_config=vis)))
    ours = load_checkpoint(save_hf_folder(model, tmp_path / "two"))
    assert ours.config.num_heads == 2 and ours.config.patch_size == PATCH
    x = torch.randn(1, 3, 24, 40)
    with torch.no_grad():
        ref = model.vision_model(pixel_values=patchify(x), spatial_shapes=torch.tensor([[3, 5]]),
                                 pixel_attention_mask=torch.ones(1, 15, dtype=torch.int32)).pooler_output
        assert rel_err(ours(x), ref) <= 1e-4


def test_a_naflex_patch_embedding_of_the_wrong_width_is_refused(tmp_path):
    folder = save_hf_folder(naflex_model(), tmp_path / "naflex")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["patch_size"] = 4
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="patch_embedding.weight has shape") as e:
        load_checkpoint(folder)
    assert "naflex" in str(e.value) and "\n" not in str(e.value)
