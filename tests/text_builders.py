"""Tiny image-text models with random weights, written as their libraries write them, for the text-tower tests
(tests/model/test_text_*.py) and the corpus (tests/corpus/test_text_corpus.py): open_clip folders (its hub layout),
Hugging Face ``CLIPModel`` / ``SiglipModel`` folders (``save_pretrained``), CLIP's vocabulary files and a
SentencePiece model trained here. Nothing downloads: CLIP's BPE vocabulary is the one inside open_clip."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import torch
from family_helpers import randomise_
from safetensors.torch import save_file

# strings where tokenizers go wrong: unicode, accents, emoji, punctuation, whitespace runs, HTML, mojibake,
# over-long prompts, empty and blank strings
TRICKY = [
    "a photo of a cat.", "A Photo Of A CAT!", "", " ", "   \t\n ", "a  red   car", "tab\tnew\nline\r\nend",
    "Café NAÏVE über Straße", "e\u0301te\u0301 (combining accents)", "🐱🚗 emoji!! 👩‍👩‍👧", "it's what's they're",
    "&amp; &lt;b&gt; tags", "cafÃ© mojibake", "ｆｕｌｌｗｉｄｔｈ letters", "ﬁ ligature", "x²³ ½ ⅓", "日本語のテキスト",
    "Ελληνικά ΣΑΣ", "hot_dog hot-dog", "...,;:!?", "(a) [b] {c} <d>", "a" * 300, " ".join(["word"] * 100),
    "numbers 1234567890 and 3.14159", "mixed: Ünïcödé & ASCII — dashes – and “quotes”", "\u200bzero\u200bwidth",
]


def clip_vocab_files(folder: Path) -> Path:
    """OpenAI's CLIP vocabulary as a Hugging Face folder has it: ``vocab.json`` + ``merges.txt`` (from open_clip's
    ``bpe_simple_vocab_16e6.txt.gz``)."""
    import open_clip
    from open_clip.tokenizer import SimpleTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    names = {"<start_of_text>": "<|startoftext|>", "<end_of_text>": "<|endoftext|>"}
    vocab = {names.get(k, k): v for k, v in SimpleTokenizer().encoder.items()}
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    merges = gzip.open(open_clip.tokenizer.default_bpe()).read().decode("utf-8").split("\n")[1:49152 - 256 - 2 + 1]
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    return folder


def training_text(folder: Path, seed: int) -> Path:
    """``folder/corpus.txt``: 3,000 lines of 8 words drawn from the words of the tricky strings."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    words = ("a photo of the cat dog red car blue sky house tree person running in on with big small café naïve "
             "über straße hello world it's numbers emoji 🐱 ümlaut ελληνικά 日本語 hot dog word tags").split()
    lines = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(3000)]
    (folder / "corpus.txt").write_text("\n".join(lines), encoding="utf-8")
    return folder / "corpus.txt"


def check_tower(tower, ids_ref, text_ref, img_ours, img_ref, logits_ref, prompts, tol: float = 1e-4):
    """A text tower against its reference: tokens equal; text and image embeddings and the image-text scores within
    ``tol``; the embeddings of unit length. Returns the largest differences (text, image, score)."""
    import torch.nn.functional as F

    assert torch.equal(tower.tokenize(prompts), ids_ref)
    ours = tower.encode(prompts)
    d_text = (ours - F.normalize(text_ref, dim=-1)).abs().max().item()
    d_img = (img_ours - img_ref).abs().max().item()
    d_score = (tower.score(img_ours, ours) - logits_ref).abs().max().item()
    assert d_text <= tol and d_img <= tol and d_score <= tol, (d_text, d_img, d_score)
    assert torch.allclose(ours.norm(dim=-1), torch.ones(len(prompts)))
    return d_text, d_img, d_score


def sentencepiece_model(folder: Path) -> Path:
    """A tiny SentencePiece unigram model with T5's / SigLIP's special ids (pad 0, ``</s>`` 1, ``<unk>`` 2) and
    nmt_nfkc normalisation, trained here on words of the tricky strings."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=str(training_text(folder, 0)), model_prefix=str(folder / "sp"), vocab_size=120, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=1.0, hard_vocab_limit=False,
        normalization_rule_name="nmt_nfkc", minloglevel=2)
    return folder / "sp.model"


# --------------------------------------------------------------------------------------------------------- open_clip
def open_clip_cfg(quick_gelu: bool, *, siglip: bool = False, tokenizer: str | None = None) -> dict:
    """A small open_clip ``model_cfg``: a native ViT image tower and a text tower (CLIP's, or SigLIP-like: no causal
    mask, last-token pooling, projection with bias, LayerNorm eps 1e-6, ``hf_tokenizer_name``)."""
    text = dict(context_length=77, vocab_size=49408, width=32, heads=2, layers=2)
    if siglip:
        text = dict(context_length=64, vocab_size=120, width=32, heads=2, layers=2, no_causal_mask=True,
                    pool_type="last", proj_bias=True, norm_kwargs={"eps": 1e-6}, hf_tokenizer_name=tokenizer,
                    tokenizer_kwargs={"clean": "canonicalize"}, act_kwargs={"approximate": "tanh"})
    cfg = dict(embed_dim=16, quick_gelu=quick_gelu, text_cfg=text,
               vision_cfg=dict(layers=2, width=32, head_width=16, patch_size=8, image_size=32))
    if siglip:
        cfg.update(custom_text=True, init_logit_bias=-10.0)
    return cfg


def open_clip_model(cfg: dict):
    """The open_clip model of ``cfg`` with random weights (eval mode)."""
    import open_clip

    torch.manual_seed(0)
    kw = {k: v for k, v in cfg.items() if k not in ("custom_text",)}
    kw["text_cfg"] = {k: v for k, v in kw["text_cfg"].items() if k not in ("hf_tokenizer_name", "tokenizer_kwargs")}
    model = (open_clip.CustomTextCLIP if cfg.get("custom_text") else open_clip.CLIP)(**kw)
    return randomise_(model)


def write_open_clip_folder(folder: Path, model, cfg: dict, *, fmt: str = "safetensors") -> Path:
    """open_clip's hub layout: ``open_clip_config.json`` (``model_cfg``, ``preprocess_cfg``) and
    ``open_clip_model.safetensors`` or ``open_clip_pytorch_model.bin``."""
    folder.mkdir(parents=True, exist_ok=True)
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    if fmt == "safetensors":
        save_file(sd, str(folder / "open_clip_model.safetensors"))
    else:
        torch.save(sd, folder / "open_clip_pytorch_model.bin")
    (folder / "open_clip_config.json").write_text(json.dumps({
        "model_cfg": cfg, "preprocess_cfg": {"mean": [0.48145466, 0.4578275, 0.40821073],
                                             "std": [0.26862954, 0.26130258, 0.27577711]}}), encoding="utf-8")
    return folder


# --------------------------------------------------------------------------------------------------- Transformers
def hf_clip_model(eos_token_id: int = 49407):
    """A tiny ``CLIPModel`` (CLIP's real 49,408-token vocabulary, 77 positions) with random weights."""
    from transformers import CLIPConfig, CLIPModel

    cfg = CLIPConfig(
        text_config=dict(vocab_size=49408, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=77, eos_token_id=eos_token_id),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8),
        projection_dim=16)
    torch.manual_seed(0)
    return randomise_(CLIPModel(cfg))


def write_hf_clip_folder(folder: Path, model, *, vocab: str = "files") -> Path:
    """``save_pretrained`` and the tokenizer: ``vocab="files"`` (vocab.json + merges.txt, as openai/clip-* have),
    ``"fast"`` (tokenizer.json only, as transformers 5 saves it) or ``"none"``."""
    from transformers import CLIPTokenizer

    model.save_pretrained(folder)
    if vocab == "files":
        clip_vocab_files(folder)
    elif vocab == "fast":
        CLIPTokenizer.from_pretrained(str(clip_vocab_files(folder.parent / "vocab"))).save_pretrained(folder)
        for name in ("vocab.json", "merges.txt"):
            (folder / name).unlink(missing_ok=True)
    return folder


def siglip_fast_tokenizer(sp_model: Path, folder: Path) -> Path:
    """A ``tokenizer.json`` (and its config) in ``folder`` made from the SentencePiece model ``sp_model`` by
    transformers' own converter (``T5Converter`` over the slow ``SiglipTokenizer``, which reads the model with
    sentencepiece). Not ``T5TokenizerFast(vocab_file=...)``: under transformers 5 that reads every word of this model
    as ``<unk>``, so a test comparing with it would check nothing."""
    from transformers import PreTrainedTokenizerFast, SiglipTokenizer
    from transformers.convert_slow_tokenizer import T5Converter

    slow = SiglipTokenizer(str(sp_model))
    if not hasattr(slow, "_extra_ids"):
        slow._extra_ids = 0  # (the converter asks for T5's sentinel count: SigLIP has none)
    fast = PreTrainedTokenizerFast(tokenizer_object=T5Converter(slow).converted(), eos_token="</s>",
                                   pad_token="</s>", unk_token="<unk>")
    fast.save_pretrained(folder)
    return folder


def hf_siglip_model(vocab_size: int):
    """A tiny ``SiglipModel`` (64 positions, attention-pool image head) with random weights."""
    from transformers import SiglipConfig, SiglipModel

    cfg = SiglipConfig(
        text_config=dict(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=64, pad_token_id=1, bos_token_id=None,
                         eos_token_id=1),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8))
    torch.manual_seed(0)
    return randomise_(SiglipModel(cfg))


def write_hf_siglip_folder(folder: Path, model, sp_model: Path | None) -> Path:
    """``save_pretrained`` and ``SiglipTokenizer(sp_model).save_pretrained`` (``spiece.model`` and its settings);
    ``sp_model=None``: no tokenizer."""
    from transformers import SiglipTokenizer

    model.save_pretrained(folder)
    if sp_model is not None:
        SiglipTokenizer(str(sp_model)).save_pretrained(folder)
    return folder


# --------------------------------------------------------------------------------------------------------- SigLIP 2
def gemma_sentencepiece(folder: Path) -> Path:
    """A tiny SentencePiece **BPE** model shaped as Gemma's (SigLIP 2's): byte fallback, no normalisation, no dummy
    prefix, digits split, ids ``<pad>`` 0, ``<eos>`` 1, ``<bos>`` 2, ``<unk>`` 3, trained here."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=str(training_text(folder, 1)), model_prefix=str(folder / "gemma"), vocab_size=400, model_type="bpe",
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
        byte_fallback=True, character_coverage=1.0, normalization_rule_name="identity", add_dummy_prefix=False,
        split_digits=True, allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
        user_defined_symbols=["<mask>"], minloglevel=2)
    return folder / "gemma.model"


def gemma_tokenizer(sp_model: Path, folder: Path) -> Path:
    """SigLIP 2's tokenizer files in ``folder`` (``tokenizer.json`` + ``tokenizer_config.json``) as transformers 5
    writes them: its ``GemmaTokenizer`` built from the BPE model's vocabulary and merges (transformers' own
    ``SentencePieceExtractor``), with open_clip's SigLIP 2 settings: no ``<bos>``, ``<eos>`` added, pads ``<pad>``
    on the right. (transformers' ``GemmaConverter`` fails under transformers 5: its extractor has no ``sp``.)"""
    from tokenizers.models import BPE
    from transformers import GemmaTokenizer
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    parts = SentencePieceExtractor(str(sp_model)).extract(BPE)
    tok = GemmaTokenizer(vocab=parts["vocab"], merges=parts["merges"], add_bos_token=False, add_eos_token=True,
                         padding_side="right")
    tok.save_pretrained(folder)
    return folder


def hf_siglip2_model(vocab_size: int, naflex: bool):
    """A tiny SigLIP 2 with Gemma's special ids and random weights: ``Siglip2Model`` (NaFlex: 16 patches of 8 px) or,
    as the fixed-resolution releases (``google/siglip2-base-patch16-224``), a ``SiglipModel``."""
    from transformers import Siglip2Config, Siglip2Model, SiglipConfig, SiglipModel

    text = dict(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=2, eos_token_id=1)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, patch_size=8)
    torch.manual_seed(0)
    if naflex:
        return randomise_(Siglip2Model(Siglip2Config(text_config=text, vision_config=dict(vision, num_patches=16))))
    return randomise_(SiglipModel(SiglipConfig(text_config=text, vision_config=dict(vision, image_size=32))))


def open_clip_siglip2_cfg(vocab_size: int, tokenizer: str) -> dict:
    """open_clip's ``ViT-B-16-SigLIP2`` text settings, small: Gemma's tokenizer named, ``clean="canonicalize"``,
    no causal mask, last-token pooling, projection with bias, eps 1e-6, tanh GELU."""
    cfg = open_clip_cfg(False, siglip=True, tokenizer=tokenizer)
    cfg["text_cfg"]["vocab_size"] = vocab_size
    return cfg


def open_clip_pe_cfg() -> dict:
    """open_clip's ``PE-Core-B-16`` text settings at a small width: CLIP's 49,408-token BPE, a context of 32,
    causal, pooled at the end token (argmax), a projection without bias, ``custom_text`` (keys under ``text.``),
    GELU (no QuickGELU)."""
    cfg = open_clip_cfg(False)
    cfg["text_cfg"] = dict(context_length=32, vocab_size=49408, width=64, heads=4, layers=2)
    cfg["custom_text"] = True
    return cfg
