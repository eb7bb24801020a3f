"""Text towers against their reference libraries, with random weights (no network): open_clip folders (CLIP with
QuickGELU or GELU, safetensors or .bin; a SigLIP-like CustomTextCLIP with a fast tokenizer), Hugging Face
``CLIPModel`` (both pooling rules) and ``SiglipModel`` folders. For each, the tokens equal the reference tokenizer's,
the image embedding of vitviz's image tower (``Pipeline.open(folder)``) and the text embeddings equal the
reference's, and the image-text scores equal the reference's logits within 1e-4. Also: templates averaged as CLIP's
zero-shot code, the targets, only the text tensors read, and a Hub model's text tower fetched once, when asked."""

from __future__ import annotations

import pytest
import text_builders as tb
import torch
import torch.nn.functional as F

from vitviz.model.text import IMAGENET_TEMPLATES, open_text_tower, text_tower_reason
from vitviz.model.text.bpe import BpeTokenizer, openai_vocab
from vitviz.model.text.layouts import wanted
from vitviz.model.text.weights import read_tensors
from vitviz.pipeline import Pipeline

PROMPTS = ["a photo of a cat", "A RED car!", "Café NAÏVE über straße 🐱", "hot_dog", "word " * 90]
TOL = 1e-4
X = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(3))


def check(tower, ids_ref, text_ref, img_ours, img_ref, logits_ref, prompts=PROMPTS):
    """Tokens equal; text and image embeddings and the scores within TOL; returns the largest differences."""
    return tb.check_tower(tower, ids_ref, text_ref, img_ours, img_ref, logits_ref, prompts, TOL)


# ------------------------------------------------------------------------------------------------------- open_clip
@pytest.mark.parametrize("quick_gelu,fmt", [(True, "safetensors"), (False, "bin")])
def test_open_clip_clip_equals_open_clip(tmp_path, quick_gelu, fmt):
    open_clip = pytest.importorskip("open_clip")
    cfg = tb.open_clip_cfg(quick_gelu)
    model = tb.open_clip_model(cfg)
    folder = tb.write_open_clip_folder(tmp_path / "oc", model, cfg, fmt=fmt)
    tower = open_text_tower(folder)
    assert tower.family == "clip" and tower.logit_bias == 0.0 and tower.context_length == 77
    assert tower.encoder.cfg.act == ("quick_gelu" if quick_gelu else "gelu") and tower.encoder.cfg.causal
    assert tower.logit_scale == pytest.approx(model.logit_scale.exp().item())
    ids = open_clip.get_tokenizer(f"local-dir:{folder}")(PROMPTS)
    with torch.no_grad():
        text_ref, img_ref = model.encode_text(ids), model.encode_image(X)
        logits = model.logit_scale.exp() * F.normalize(img_ref, dim=-1) @ F.normalize(text_ref, dim=-1).T
        img = Pipeline.open(folder).model(X)
    print("open_clip CLIP max |diff| text, image, score:", check(tower, ids, text_ref, img, img_ref, logits))


def test_open_clip_siglip_with_a_fast_tokenizer_equals_open_clip(tmp_path):
    open_clip = pytest.importorskip("open_clip")
    pytest.importorskip("transformers")
    sp = tb.sentencepiece_model(tmp_path / "sp")
    folder = tmp_path / "oc-siglip"
    cfg = tb.open_clip_cfg(False, siglip=True, tokenizer="local/sp-tokenizer")
    model = tb.open_clip_model(cfg)
    tb.write_open_clip_folder(folder, model, cfg)
    tb.siglip_fast_tokenizer(sp, folder)  # (T5TokenizerFast(vocab_file=...) would read every word as <unk>)
    tower = open_text_tower(folder)
    assert tower.family == "siglip" and tower.tokenizer.backend == "tokenizers"
    assert not tower.encoder.cfg.causal and tower.encoder.cfg.pool == "last" and tower.encoder.cfg.eps == 1e-6
    assert tower.logit_bias == pytest.approx(model.logit_bias.item())
    ids = open_clip.get_tokenizer(f"local-dir:{folder}")(PROMPTS)
    assert 2 not in ids.tolist()[0] and len(set(ids[0].tolist())) > 3  # the reference reads the words (2: <unk>)
    with torch.no_grad():
        text_ref, img_ref = model.encode_text(ids), model.encode_image(X)
        logits = (model.logit_scale.exp() * F.normalize(img_ref, dim=-1) @ F.normalize(text_ref, dim=-1).T
                  + model.logit_bias)
        img = Pipeline.open(folder).model(X)
    print("open_clip SigLIP max |diff| text, image, score:", check(tower, ids, text_ref, img, img_ref, logits))


def test_templates_average_as_clips_zero_shot_code(tmp_path):
    open_clip = pytest.importorskip("open_clip")
    from open_clip.zero_shot_metadata import OPENAI_IMAGENET_TEMPLATES

    assert IMAGENET_TEMPLATES == tuple(t("{}") for t in OPENAI_IMAGENET_TEMPLATES)
    cfg = tb.open_clip_cfg(True)
    model = tb.open_clip_model(cfg)
    folder = tb.write_open_clip_folder(tmp_path / "oc", model, cfg)
    tower = open_text_tower(folder)
    names = ["cat", "red car"]
    with torch.no_grad():
        ref = open_clip.build_zero_shot_classifier(model, open_clip.get_tokenizer(f"local-dir:{folder}"), names,
                                                   OPENAI_IMAGENET_TEMPLATES, num_classes_per_batch=2).T
    assert (tower.encode(names, "imagenet") - ref).abs().max() <= TOL
    photo = tower.encode(names, "photo")
    assert (photo - tower.encode(["a photo of a cat.", "a photo of a red car."])).abs().max() == 0
    explicit = F.normalize(F.normalize(tower.embed_texts(["a {} photo".replace("{}", "cat"), "the cat"]), dim=-1)
                           .mean(0), dim=-1)
    assert (tower.encode(["cat"], ["a {} photo", "the {}"])[0] - explicit).abs().max() <= 1e-6
    # targets: one per prompt, the tower's scale and bias
    targets = tower.targets(names, "photo")
    assert [t.name for t in targets] == names and all(t.scale == tower.logit_scale and t.bias == 0 for t in targets)
    assert torch.equal(torch.stack([t.vector for t in targets]), photo)
    scores = tower.score(torch.randn(2, 16), photo)
    assert scores.shape == (2, 2) and torch.allclose(tower.probabilities(scores).sum(-1), torch.ones(2))


def test_only_the_text_tensors_are_read(tmp_path):
    cfg = tb.open_clip_cfg(True)
    folder = tb.write_open_clip_folder(tmp_path / "oc", tb.open_clip_model(cfg), cfg)
    for f in (folder / "open_clip_model.safetensors",):
        names = set(read_tensors(f, wanted("open_clip")))
        assert names and not any(n.startswith("visual.") for n in names) and "logit_scale" in names


# ---------------------------------------------------------------------------------------------------- Transformers
@pytest.mark.parametrize("eos_token_id,vocab", [(49407, "files"), (2, "fast")])
def test_hf_clip_equals_transformers(tmp_path, eos_token_id, vocab):
    from transformers import CLIPTokenizer

    model = tb.hf_clip_model(eos_token_id)
    folder = tb.write_hf_clip_folder(tmp_path / "clip", model, vocab=vocab)
    tower = open_text_tower(folder)
    assert tower.family == "clip" and tower.encoder.cfg.pool == ("eos" if eos_token_id != 2 else "argmax")
    prompts = [p for p in PROMPTS if "Café" not in p]  # (ftfy cases: see test_text_tokenizers)
    enc = CLIPTokenizer.from_pretrained(str(tmp_path / "vocab" if vocab == "fast" else folder))(
        prompts, padding="max_length", max_length=77, truncation=True, return_tensors="pt")
    ids = torch.where(enc.attention_mask.bool(), enc.input_ids, 0)  # HF pads with the end token, OpenAI with 0
    with torch.no_grad():
        out = model(input_ids=enc.input_ids, attention_mask=enc.attention_mask, pixel_values=X)
        img = Pipeline.open(folder).model(X)
    print("HF CLIP max |diff| text, image, score:",
          check(tower, ids, out.text_embeds, img, _hf_image(model), out.logits_per_image, prompts))


def _hf_image(model) -> torch.Tensor:
    """The reference's unnormalised image embedding (``image_embeds`` of the output is normalised)."""
    with torch.no_grad():
        feats = model.get_image_features(pixel_values=X)
    return feats if isinstance(feats, torch.Tensor) else feats.pooler_output


def test_hf_siglip_equals_transformers(tmp_path):
    from transformers import SiglipTokenizer

    sp = tb.sentencepiece_model(tmp_path / "sp")
    tok = SiglipTokenizer(str(sp))
    model = tb.hf_siglip_model(len(tok))
    folder = tb.write_hf_siglip_folder(tmp_path / "siglip", model, sp)
    tower = open_text_tower(folder)
    assert tower.family == "siglip" and tower.tokenizer.backend == "sentencepiece" and tower.context_length == 64
    assert tower.logit_bias == pytest.approx(model.logit_bias.item())
    ids = SiglipTokenizer.from_pretrained(str(folder))(PROMPTS, padding="max_length", max_length=64,
                                                       truncation=True, return_tensors="pt").input_ids
    with torch.no_grad():  # no attention mask: SigLIP was trained on padded prompts without one
        out = model(input_ids=ids, pixel_values=X)
        img = Pipeline.open(folder).model(X)
    print("HF SigLIP max |diff| text, image, score:",
          check(tower, ids, out.text_embeds, img, _hf_image(model), out.logits_per_image))


# -------------------------------------------------------------------------------------------------------------- Hub
def test_a_hub_models_text_tower_is_fetched_when_asked_and_then_cached(fake_hub, tmp_path):
    from fake_hub import timm_repo

    cfg = tb.open_clip_cfg(True)
    model = tb.open_clip_model(cfg)
    folder = tb.write_open_clip_folder(tmp_path / "oc", model, cfg)
    files, _ = timm_repo(architecture="vit_base_patch16_clip_224")
    repo = "someone/tiny_clip.openai"
    fake_hub.add(repo, {**files, **{p.name: p.read_bytes() for p in folder.iterdir()}})
    assert text_tower_reason(f"hub:{repo}") is None and fake_hub.requests == []  # not downloaded: may have one
    tower = open_text_tower(repo, show_bar=False)
    assert tower.name == repo and tower.encoder.cfg.act == "quick_gelu"
    assert [f for _, f in fake_hub.gets()] == ["config.json", "open_clip_config.json", "open_clip_model.safetensors"]
    n = len(fake_hub.requests)
    again = open_text_tower(f"hub:{repo}", show_bar=False)
    assert len(fake_hub.requests) == n and text_tower_reason(f"hub:{repo}") is None  # the cache, no request
    assert torch.equal(again.encode(["a cat"]), tower.encode(["a cat"]))


def test_a_timm_image_only_hub_model_says_it_has_no_text_tower(fake_hub):
    from fake_hub import timm_repo

    from vitviz.model.sources.hub import load_hub
    from vitviz.model.text import TextTowerError

    repo = "someone/tiny_vit"
    fake_hub.add(repo, timm_repo()[0])
    load_hub(repo, show_bar=False)  # the image tower: cached now
    line = f"{repo}: a timm image-only checkpoint (vit_tiny_patch16_224): it has no text tower"
    assert text_tower_reason(f"hub:{repo}").startswith(line)
    with pytest.raises(TextTowerError) as e:
        open_text_tower(repo, show_bar=False)
    assert str(e.value).startswith(line) and "\n" not in str(e.value)


def test_a_transformers_hub_models_tokenizer_is_fetched_with_its_text_tower(fake_hub, tmp_path, monkeypatch):
    from vitviz.model.sources.hub import load_hub
    from vitviz.model.sources.torch_hub import PretrainedError

    folder = tb.write_hf_clip_folder(tmp_path / "clip", tb.hf_clip_model(), vocab="files")
    repo = "someone/tiny-clip"
    fake_hub.add(repo, {p.name: p.read_bytes() for p in folder.iterdir()})
    load_hub(repo, show_bar=False)  # the image tower: config.json, model.safetensors (both towers)
    assert {f for _, f in fake_hub.gets()} == {"config.json", "model.safetensors"}
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline and the tokenizer not cached: said in one line
    with pytest.raises(PretrainedError) as e:
        open_text_tower(repo, show_bar=False)
    assert str(e.value).startswith(f"{repo}: its text tower is not downloaded yet, and offline mode is on")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    n = len(fake_hub.gets())
    tower = open_text_tower(f"hub:{repo}", show_bar=False)
    assert [f for _, f in fake_hub.gets()[n:]] == ["vocab.json", "merges.txt"]  # the weights are there already
    assert tower.family == "clip" and tower.name == repo
    local = open_text_tower(folder)
    assert torch.equal(tower.encode(PROMPTS), local.encode(PROMPTS))


def test_open_clips_file_without_its_config_follows_openais_rules(fake_hub, tmp_path):
    """open_clip's own uploads may carry no open_clip_config.json (its registry has the config): OpenAI's rules, heads
    = width / 64 and QuickGELU for a model named openai, and CLIP's BPE."""
    from fake_hub import timm_repo

    cfg = tb.open_clip_cfg(True)
    cfg["text_cfg"].update(width=128, heads=2)
    model = tb.open_clip_model(cfg)
    folder = tb.write_open_clip_folder(tmp_path / "oc", model, cfg)
    repo = "someone/tiny_clip.openai"
    fake_hub.add(repo, {**timm_repo(architecture="vit_base_patch16_clip_224")[0],
                        "open_clip_model.safetensors": (folder / "open_clip_model.safetensors").read_bytes()})
    tower = open_text_tower(repo, show_bar=False)
    assert tower.encoder.cfg.heads == 2 and tower.encoder.cfg.act == "quick_gelu" and tower.name == repo
    ids = BpeTokenizer(*openai_vocab())(PROMPTS)
    with torch.no_grad():
        assert (tower.encode(PROMPTS) - model.encode_text(ids, normalize=True)).abs().max() <= TOL
    n = len(fake_hub.requests)
    assert open_text_tower(repo, show_bar=False).name == repo and len(fake_hub.requests) == n  # cached
