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
    assert text == {"clip-b16": "open_clip", "clip-b16-hf": "hf", "siglip-b16-hf": "hf", "siglip2-b16": "open_clip",
                    "siglip2-b16-naflex": "hf", "pe-core-b16": "open_clip"}
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


def _open_clip_mb(name: str) -> float:
    """The size of open_clip's whole-model file of ``name`` (its architecture on the meta device)."""
    open_clip = pytest.importorskip("open_clip")
    cfg = dict(open_clip.get_model_config(name))
    custom = cfg.pop("custom_text", False)
    cfg["text_cfg"] = {k: v for k, v in cfg["text_cfg"].items() if k not in ("hf_tokenizer_name", "tokenizer_kwargs")}
    with torch.device("meta"):
        return _mb((open_clip.CustomTextCLIP if custom else open_clip.CLIP)(**cfg))


def test_the_2025_names_siglip2_pe_and_aimv2(monkeypatch):
    """siglip2-b16 and pe-core-b16 (timm's image towers) take their text towers from the same checkpoints' open_clip
    releases (sizes from open_clip's architectures); siglip2-b16-naflex (a Transformers Siglip2Model: its size from
    transformers' architecture on the meta device) from its own file; aimv2-l14 (timm; its size in test_hub.py) has
    none. The prompt box is told without any request."""
    from transformers import Siglip2Config, Siglip2Model

    for key in ("siglip2-b16", "siglip2-b16-naflex", "pe-core-b16", "aimv2-l14"):
        assert key in catalog.HUB_BY_KEY
    naflex = catalog.HUB_BY_KEY["siglip2-b16-naflex"]
    assert naflex.repo == "google/siglip2-base-patch16-naflex" and naflex.text == "hf"
    with torch.device("meta"):  # SigLIP 2 base: transformers' defaults with Gemma's 256k vocabulary
        ref = Siglip2Model(Siglip2Config(text_config=dict(vocab_size=256000),
                                         vision_config=dict(num_patches=256, patch_size=16)))
    assert abs(naflex.size_mb - _mb(ref)) < 0.1
    for key, text_repo, name in (("siglip2-b16", "timm/ViT-B-16-SigLIP2", "ViT-B-16-SigLIP2"),
                                 ("pe-core-b16", "timm/PE-Core-B-16", "PE-Core-B-16")):
        m = catalog.HUB_BY_KEY[key]
        assert (m.text, m.text_repo) == ("open_clip", text_repo)
        assert abs(m.text_mb - _open_clip_mb(name)) < 0.1, (key, _open_clip_mb(name))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent/hf-cache")
    for key in ("siglip2-b16", "siglip2-b16-naflex", "pe-core-b16"):
        assert text_tower_reason(key) is None, key
    assert text_tower_reason("aimv2-l14").endswith("an image tower only; no text tower")


def test_a_curated_timm_upload_fetches_its_text_tower_from_its_open_clip_release(fake_hub, tmp_path):
    """``pe-core-b16``'s text tower comes from ``timm/PE-Core-B-16`` (open_clip's files), never from timm's
    image-only repository, and is then cached (no second request)."""
    import text_builders as tb

    from vitviz.model.text import open_text_tower

    cfg = tb.open_clip_pe_cfg()
    folder = tb.write_open_clip_folder(tmp_path / "oc", tb.open_clip_model(cfg), cfg)
    m = catalog.HUB_BY_KEY["pe-core-b16"]
    fake_hub.add(m.text_repo, {p.name: p.read_bytes() for p in folder.iterdir()})
    tower = open_text_tower("pe-core-b16", show_bar=False)
    assert tower.name == m.text_repo and tower.context_length == 32
    assert {r for r, _ in fake_hub.gets()} == {m.text_repo}  # (timm's image repository never asked)
    n = len(fake_hub.requests)
    again = open_text_tower(m.ref, show_bar=False)
    assert len(fake_hub.requests) == n and torch.equal(again.encode(["a cat"]), tower.encode(["a cat"]))
