"""The curated image-text models and their text towers: the sizes of the Transformers entries and of open_clip's file
(from the references' architectures on the meta device), what ``vitviz models`` says, and what the prompt box is told
for each curated model, without any request."""

from __future__ import annotations

import pytest
import torch

from vitviz.model.sources import catalog
from vitviz.model.text import text_tower_reason


def _mb(model: torch.nn.Module) -> float:
    return sum(t.numel() * t.element_size() for t in model.state_dict().values()) / 1e6


def test_the_curated_image_text_models_and_their_sizes():
    from transformers import CLIPConfig, CLIPModel, SiglipConfig, SiglipModel

    text = {m.key: m.text for m in catalog.HUB_MODELS if m.text}
    assert text == {"clip-b16": "open_clip", "clip-b16-hf": "hf", "siglip-b16-hf": "hf"}
    assert all(m.group == "language" for m in catalog.HUB_MODELS if m.text)
    b16 = dict(hidden_size=768, intermediate_size=3072, num_attention_heads=12, num_hidden_layers=12, patch_size=16,
               image_size=224)
    with torch.device("meta"):
        clip = CLIPModel(CLIPConfig(vision_config=b16, projection_dim=512))  # text: transformers' defaults = OpenAI's
        siglip = SiglipModel(SiglipConfig(vision_config=b16))
    assert abs(catalog.HUB_BY_KEY["clip-b16-hf"].size_mb - _mb(clip)) < 0.1
    assert abs(catalog.HUB_BY_KEY["siglip-b16-hf"].size_mb - _mb(siglip)) < 0.1
    open_clip = pytest.importorskip("open_clip")
    with torch.device("meta"):
        oc = open_clip.CLIP(**open_clip.get_model_config("ViT-B-16"), quick_gelu=True)
    assert abs(catalog.HUB_BY_KEY["clip-b16"].text_mb - _mb(oc)) < 0.1  # open_clip's whole-model file


def test_vitviz_models_shows_the_text_towers(capsys):
    from vitviz.cli import main

    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for m in catalog.HUB_MODELS:
        line = next(x for x in lines if m.repo in x.split())
        assert line.endswith(f"text tower: {m.text_tower()}"), line
    assert catalog.HUB_BY_KEY["clip-b16"].text_tower() == "yes, +598 MB when asked"
    assert catalog.HUB_BY_KEY["siglip-b16-hf"].text_tower() == "yes, +0.8 MB tokenizer"
    assert catalog.HUB_BY_KEY["dino-s8"].text_tower() == "no"


def test_the_prompt_box_is_told_from_the_curated_list_alone(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # any request would fail
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent/hf-cache")
    for key in ("clip-b16", "clip-b16-hf", "siglip-b16-hf", "openai/clip-vit-base-patch16"):
        assert text_tower_reason(key) is None, key
    assert text_tower_reason("dino-s8") == ("DINO ViT-S/8 (timm/vit_small_patch8_224.dino): an image tower only; "
                                            "no text tower")


def test_the_2025_names_siglip2_and_aimv2(monkeypatch):
    """siglip2-b16 (timm's image tower), siglip2-b16-naflex (a Transformers Siglip2Model: its size from
    transformers' architecture on the meta device) and aimv2-l14 (timm; its size in test_hub.py); SigLIP 2's text
    tower is not offered, and the prompt box is told why in one line, without any request."""
    from transformers import Siglip2Config, Siglip2Model

    for key in ("siglip2-b16", "siglip2-b16-naflex", "aimv2-l14"):
        assert key in catalog.HUB_BY_KEY
    naflex = catalog.HUB_BY_KEY["siglip2-b16-naflex"]
    assert naflex.repo == "google/siglip2-base-patch16-naflex" and naflex.text == ""
    with torch.device("meta"):  # SigLIP 2 base: transformers' defaults with Gemma's 256k vocabulary
        ref = Siglip2Model(Siglip2Config(text_config=dict(vocab_size=256000),
                                         vision_config=dict(num_patches=256, patch_size=16)))
    assert abs(naflex.size_mb - _mb(ref)) < 0.1
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent/hf-cache")
    for key in ("siglip2-b16", "siglip2-b16-naflex"):
        why = text_tower_reason(key)
        assert why is not None and "Gemma tokenizer" in why and "\n" not in why, why
