"""The text towers of SigLIP 2 and Perception Encoder core against their reference libraries, random weights, no
network: Gemma's tokenizer (a BPE SentencePiece model with byte fallback trained here, written as transformers 5's
``GemmaTokenizer`` writes it) read from ``tokenizer.json``; its ids equal transformers' tokenizer's and, independently,
SentencePiece's own; Transformers ``Siglip2Model`` (NaFlex) and ``SiglipModel`` folders with that tokenizer (the
fixed-resolution SigLIP 2 releases), an open_clip SigLIP 2 folder (``ViT-B-16-SigLIP2``'s text settings) and an
open_clip PE core folder (``PE-Core-B-16``'s text settings: context 32, CLIP's BPE): text embeddings, image
embeddings and image-text logits within 1e-4 of the reference's."""

from __future__ import annotations

import shutil

import pytest
import text_builders as tb
import torch
import torch.nn.functional as F

from vitviz.model.text import open_text_tower
from vitviz.model.text.cleaning import clean
from vitviz.pipeline import Pipeline

T = pytest.importorskip("transformers")
PATCH = 8
X = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(3))
PROMPTS = [p for p in tb.TRICKY if p.strip()] + ["A Photo Of A CAT", "word " * 90, "é" * 200]


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    """(SentencePiece model, folder with tokenizer.json + tokenizer_config.json, vocabulary size)."""
    root = tmp_path_factory.mktemp("gemma")
    sp = tb.gemma_sentencepiece(root / "sp")
    folder = tb.gemma_tokenizer(sp, root / "tok")
    return sp, folder, len(T.AutoTokenizer.from_pretrained(str(folder)))


def with_tokenizer(folder, gemma):
    folder.mkdir(parents=True, exist_ok=True)
    for p in gemma[1].iterdir():
        shutil.copy(p, folder / p.name)
    return folder


def test_gemma_tokens_equal_transformers_and_sentencepiece(tmp_path, gemma):
    import sentencepiece as spm

    sp_model, _, n = gemma
    folder = with_tokenizer(tmp_path / "siglip2", gemma)
    tb.hf_siglip2_model(n, naflex=True).save_pretrained(folder)
    tower = open_text_tower(folder)
    assert tower.tokenizer.backend == "tokenizers" and tower.context_length == 64
    prompts = tb.TRICKY + ["A Photo Of A CAT", "word " * 90, "é" * 200]
    texts = [clean(p, "siglip") for p in prompts]
    assert texts[1] == "a photo of a cat"  # lower-cased, punctuation removed (SigLIP's rule)
    ref = T.AutoTokenizer.from_pretrained(str(folder))(texts, padding="max_length", max_length=64, truncation=True,
                                                       return_tensors="pt").input_ids
    ours = tower.tokenize(prompts)
    assert torch.equal(ours, ref)
    sp = spm.SentencePieceProcessor(model_file=str(sp_model))  # the independent reference: SentencePiece itself
    for text, row in zip(texts, ours.tolist()):
        want = sp.encode(text)[:63] + [1]  # <eos> kept when cut, no <bos>, <pad> (0) to the right
        assert row == want + [0] * (64 - len(want)), text
    cut = [len(sp.encode(t)) >= 63 for t in texts]
    assert any(cut) and not all(cut) and ours[:, -1].tolist() == [1 if c else 0 for c in cut]  # <eos> kept when cut
    assert 3 not in ours[1].tolist() and len(set(ours[1].tolist())) > 3  # the words are read (3: <unk>)


def _naflex_inputs(x):
    from transformers.models.siglip2 import image_processing_siglip2 as proc

    b, _, h, w = x.shape
    return dict(pixel_values=torch.stack([proc.convert_image_to_patches(im, PATCH) for im in x]),
                pixel_attention_mask=torch.ones(b, (h // PATCH) * (w // PATCH), dtype=torch.int32),
                spatial_shapes=torch.tensor([[h // PATCH, w // PATCH]] * b))


@pytest.mark.parametrize("naflex", [True, False], ids=["Siglip2Model", "SiglipModel-gemma"])
def test_hf_siglip2_equals_transformers(tmp_path, gemma, naflex):
    model = tb.hf_siglip2_model(gemma[2], naflex)
    folder = with_tokenizer(tmp_path / "siglip2", gemma)
    model.save_pretrained(folder)
    tower = open_text_tower(folder)
    assert tower.family == "siglip" and not tower.encoder.cfg.causal and tower.encoder.cfg.pool == "last"
    assert tower.logit_bias == pytest.approx(model.logit_bias.item())
    texts = [clean(p, "siglip") for p in PROMPTS]
    ids = T.AutoTokenizer.from_pretrained(str(folder))(texts, padding="max_length", max_length=64, truncation=True,
                                                       return_tensors="pt").input_ids
    image = _naflex_inputs(X) if naflex else dict(pixel_values=X)
    with torch.no_grad():  # no attention mask: the pads are input, as in training (big_vision, open_clip)
        out = model(input_ids=ids, **image)
        feats = model.get_image_features(**image)
        img_ref = feats if isinstance(feats, torch.Tensor) else feats.pooler_output
        img = Pipeline.open(folder).model(X)
    print("SigLIP 2 max |diff| text, image, score:",
          tb.check_tower(tower, ids, out.text_embeds, img, img_ref, out.logits_per_image, PROMPTS))


def test_open_clip_siglip2_equals_open_clip(tmp_path, gemma):
    open_clip = pytest.importorskip("open_clip")
    cfg = tb.open_clip_siglip2_cfg(gemma[2], "local/gemma-tokenizer")
    model = tb.open_clip_model(cfg)
    folder = with_tokenizer(tb.write_open_clip_folder(tmp_path / "oc-siglip2", model, cfg), gemma)
    tower = open_text_tower(folder)
    assert tower.family == "siglip" and tower.tokenizer.backend == "tokenizers"
    assert tower.tokenizer.clean_mode == "canonicalize" and tower.encoder.cfg.eps == 1e-6
    ids = open_clip.get_tokenizer(f"local-dir:{folder}")(PROMPTS)
    assert 3 not in ids[0].tolist() and ids[0].tolist().count(1) == 1  # words read; one <eos>, then <pad>s
    with torch.no_grad():
        text_ref, img_ref = model.encode_text(ids), model.encode_image(X)
        logits = (model.logit_scale.exp() * F.normalize(img_ref, dim=-1) @ F.normalize(text_ref, dim=-1).T
                  + model.logit_bias)
        img = Pipeline.open(folder).model(X)
    print("open_clip SigLIP 2 max |diff| text, image, score:",
          tb.check_tower(tower, ids, text_ref, img, img_ref, logits, PROMPTS))


def test_open_clip_pe_core_equals_open_clip(tmp_path):
    open_clip = pytest.importorskip("open_clip")
    cfg = tb.open_clip_pe_cfg()
    model = tb.open_clip_model(cfg)
    assert isinstance(model, open_clip.CustomTextCLIP) and model.text.attn_mask is not None  # causal, as PE's
    folder = tb.write_open_clip_folder(tmp_path / "oc-pe", model, cfg)
    tower = open_text_tower(folder)
    c = tower.encoder.cfg
    assert tower.family == "clip" and tower.context_length == 32 and c.causal and c.pool == "argmax"
    assert c.act == "gelu" and c.heads == 4 and not c.proj_bias
    ids = open_clip.get_tokenizer(f"local-dir:{folder}")(PROMPTS)
    assert ids.shape == (len(PROMPTS), 32)
    with torch.no_grad():
        text_ref, img_ref = model.encode_text(ids), model.encode_image(X)
        logits = model.logit_scale.exp() * F.normalize(img_ref, dim=-1) @ F.normalize(text_ref, dim=-1).T
        img = Pipeline.open(folder).model(X)
    print("open_clip PE core max |diff| text, image, score:",
          tb.check_tower(tower, ids, text_ref, img, img_ref, logits, PROMPTS))


def test_prompts_and_legrad_on_a_siglip2_naflex_folder(tmp_path, gemma):
    """The whole route on SigLIP 2 NaFlex: prompts as the classes of a zero-shot model whose logits equal
    transformers' on the processor's non-square patch grid, sigmoid probabilities, LeGrad maps with the neutral
    prompt's correction, all finite."""
    import numpy as np
    from PIL import Image

    from vitviz.pipeline import prompt_pipeline

    model = tb.hf_siglip2_model(gemma[2], naflex=True)
    folder = with_tokenizer(tmp_path / "siglip2", gemma)
    model.save_pretrained(folder)
    pil = Image.fromarray((np.random.default_rng(1).random((30, 52, 3)) * 255).astype(np.uint8))
    p = Pipeline.open(folder)
    pp = prompt_pipeline(p, ["a cat", "two dogs"])
    r = pp.run(pil)
    x, _ = p.spec.preprocess.apply(pil)
    assert x.shape[1] != x.shape[2]  # the image keeps its aspect ratio: a non-square grid
    ids = T.AutoTokenizer.from_pretrained(str(folder))(["a cat", "two dogs"], padding="max_length", max_length=64,
                                                       truncation=True, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model(input_ids=ids, **_naflex_inputs(x[None]))
    torch.testing.assert_close(r.logits, out.logits_per_image[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(r.probabilities, torch.sigmoid(out.logits_per_image[0]), rtol=1e-4, atol=1e-5)
    assert pp.legrad_neutral is not None and {"mean", "mean|neutral"} <= set(r.legrad)
    assert all(bool(torch.isfinite(torch.as_tensor(m)).all()) for m in r.legrad.values())


@pytest.mark.parametrize("add_bos,add_eos", [(False, True), (True, True), (True, False)])
def test_the_start_and_end_tokens_are_tokenizer_jsons_as_in_transformers(tmp_path, gemma, add_bos, add_eos):
    """transformers 5 keeps ``tokenizer.json``'s post-processor even where ``tokenizer_config.json``'s
    ``add_bos_token`` / ``add_eos_token`` say otherwise (transformers 4's ``GemmaTokenizerFast`` rebuilt it from
    them); vitviz reads it as transformers 5 does: a file written with Gemma's own ``<bos> $A`` keeps it."""
    import json

    from tokenizers.models import BPE
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    parts = SentencePieceExtractor(str(gemma[0])).extract(BPE)
    folder = tmp_path / "siglip2"
    T.GemmaTokenizer(vocab=parts["vocab"], merges=parts["merges"], add_bos_token=True, add_eos_token=False,
                     padding_side="right").save_pretrained(folder)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg | {"add_bos_token": add_bos,
                                                                    "add_eos_token": add_eos}))
    tb.hf_siglip2_model(gemma[2], naflex=True).save_pretrained(folder)
    tower = open_text_tower(folder)
    texts = [clean(p, "siglip") for p in PROMPTS]
    ref = T.AutoTokenizer.from_pretrained(str(folder))(texts, padding="max_length", max_length=64, truncation=True,
                                                       return_tensors="pt").input_ids
    ours = tower.tokenize(PROMPTS)
    assert torch.equal(ours, ref)
    assert (ours[:, 0] == 2).all() and not (ours == 1).any()  # <bos> first, no <eos>: the file's rule


def test_siglip2_b16_fetches_its_text_tower_and_gemma_tokenizer_from_the_open_clip_release(fake_hub, tmp_path,
                                                                                          gemma):
    """``siglip2-b16`` (timm's image tower) asks ``timm/ViT-B-16-SigLIP2`` for open_clip's files and the Gemma
    tokenizer its ``hf_tokenizer_name`` names (the same repository), and gets the tower the local folder gives."""
    from vitviz.model.sources import catalog

    repo = catalog.HUB_BY_KEY["siglip2-b16"].text_repo
    cfg = tb.open_clip_siglip2_cfg(gemma[2], repo)
    folder = with_tokenizer(tb.write_open_clip_folder(tmp_path / "oc", tb.open_clip_model(cfg), cfg), gemma)
    fake_hub.add(repo, {p.name: p.read_bytes() for p in folder.iterdir()})
    tower = open_text_tower("siglip2-b16", show_bar=False)
    assert tower.name == repo and tower.family == "siglip" and tower.tokenizer.clean_mode == "canonicalize"
    assert {r for r, _ in fake_hub.gets()} == {repo} and "tokenizer.json" in {f for _, f in fake_hub.gets()}
    local = open_text_tower(folder)
    assert torch.equal(tower.tokenize(PROMPTS), local.tokenize(PROMPTS))
    assert torch.equal(tower.encode(PROMPTS), local.encode(PROMPTS))
