"""The guard of issue 31: a checkpoint is never opened with a part ignored. Every key of a checkpoint is read by its
reader, or named as deliberately unused (with the reason), or reported: a stray key (a rotary-embedding parameter, a
part vitviz's ViT does not model) makes the load fail with one line naming it, for every family vitviz reads; and a
reader that drops a key without a word is caught in the one place every reader passes through."""

from __future__ import annotations

import pytest
import torch
from family_fixtures import FAMILIES, add_key, block_key

from vitviz.model import load_checkpoint
from vitviz.model.checkpoints import CheckpointError, registry

pytest.importorskip("timm")
pytest.importorskip("transformers")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_loads_and_refuses_a_stray_key(tmp_path, family):
    path = FAMILIES[family](tmp_path / family)
    model = load_checkpoint(path, num_heads=2)  # keys are the point here (numerics: test_families_*)
    assert model.config.depth == 2
    for stray in ("rope.freqs", block_key(path).rsplit(".", 2)[0] + ".rope_freqs"):
        path = FAMILIES[family](tmp_path / f"{family}-{stray}")
        add_key(path, stray, torch.ones(4))
        with pytest.raises(CheckpointError) as e:
            load_checkpoint(path, num_heads=2)
        msg = str(e.value)
        assert stray in msg and "\n" not in msg and str(path).split("/")[-1] in msg


@pytest.mark.parametrize("family", ["timm-vit", "hf-vit", "hf-clip", "open_clip", "timm-beit"])
def test_a_reader_that_drops_a_key_silently_is_refused(tmp_path, family, monkeypatch):
    """A converter that forgets a key (neither reads it, nor names it unused, nor reports it) is caught by the loader
    for every reader: here each format's convert is wrapped to lose one key it had read."""
    path = FAMILIES[family](tmp_path / family)
    raw_name = {}

    def forgetful(convert):
        def wrapped(raw):
            c = convert(raw)
            ours, source = next((k, v) for k, v in c.source_names.items() if ".0." in k and k.endswith("bias"))
            del c.state[ours], c.source_names[ours]
            c.consumed.discard(source)
            raw_name["key"] = source
            c.config.setdefault("num_heads", 2)
            return c
        return wrapped

    for f in registry.FORMATS:
        monkeypatch.setattr(f, "convert", forgetful(f.convert))
    with pytest.raises(CheckpointError, match="read by no part of vitviz's ViT") as e:
        load_checkpoint(path, num_heads=2)
    assert repr(raw_name["key"]) in str(e.value)


@pytest.mark.parametrize("arch", ["eva02_base_patch14_224", "vit_pe_core_base_patch16_224",
                                  "vit_pe_spatial_base_patch16_512"])
def test_rope_models_without_a_rope_reader_are_refused_naming_rope(tmp_path, arch, monkeypatch):
    """EVA-02 and Perception Encoder keep their RoPE in no tensor: the plain timm layout reader refuses their folders
    (before issue 31 PE opened silently without it) and says why."""
    import timm
    from family_helpers import write_timm_folder

    from vitviz.model.checkpoints import timm as timm_reader

    m = timm.create_model(arch, pretrained=False, img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                          num_classes=0)
    folder = write_timm_folder(tmp_path / arch, m, arch)
    cfg = {"architecture": arch, "model_args": {}}
    with pytest.raises(CheckpointError, match="RoPE") as e:
        timm_reader.refuse_unmodelled(cfg, str(folder / "config.json"))
    assert arch in str(e.value)
    with pytest.raises(CheckpointError, match="rope_type"):
        timm_reader.refuse_unmodelled({"architecture": "vit_x", "model_args": {"rope_type": "cat"}}, "config.json")
