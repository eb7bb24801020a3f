"""Tokenization equals each family's reference on tricky strings (unicode, accents, emoji, punctuation, whitespace
runs, HTML entities, mojibake, over-long and empty prompts): CLIP's BPE against open_clip's ``SimpleTokenizer``
(OpenAI's) with the vocabulary shipped with vitviz and with a Hugging Face folder's files, and against transformers'
``CLIPTokenizer`` where ftfy does not change the text; SigLIP's SentencePiece against transformers'
``SiglipTokenizer`` (with and without lower-casing) and, from a ``tokenizer.json``, against open_clip's
``HFTokenizer`` with SigLIP's ``canonicalize`` cleaning."""

from __future__ import annotations

import gzip

import pytest
import text_builders as tb
import torch

from vitviz.model.text.bpe import MERGES_FILE, NUM_MERGES, BpeTokenizer, fast_vocab, hf_vocab, openai_vocab
from vitviz.model.text.cleaning import canonicalize, siglip_clean
from vitviz.model.text.pieces import PieceTokenizer, read_settings

# where transformers' CLIPTokenizer (tokenizers' NFC + lower-case, no ftfy, no HTML unescaping) differs from
# OpenAI's: HTML entities, mojibake, full-width letters, ligatures and curly quotes (ftfy), the final sigma (Python's
# str.lower writes "ς" at a word's end)
HF_CLIP_DIFFERS = {"&amp; &lt;b&gt; tags", "cafÃ© mojibake", "ｆｕｌｌｗｉｄｔｈ letters", "ﬁ ligature", "Ελληνικά ΣΑΣ",
                   "mixed: Ünïcödé & ASCII — dashes – and “quotes”"}


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory):
    return tb.sentencepiece_model(tmp_path_factory.mktemp("sp"))


def test_the_shipped_merges_are_openais():
    open_clip = pytest.importorskip("open_clip")
    ref = gzip.open(open_clip.tokenizer.default_bpe()).read().decode("utf-8").split("\n")[1:NUM_MERGES + 1]
    assert gzip.decompress(MERGES_FILE.read_bytes()).decode("utf-8").split("\n")[:NUM_MERGES] == ref
    from open_clip.tokenizer import SimpleTokenizer

    assert openai_vocab()[1] == SimpleTokenizer().encoder


@pytest.mark.parametrize("clean", ["lower", "whitespace", "canonicalize"])
def test_clip_bpe_equals_open_clip(clean):
    from open_clip.tokenizer import SimpleTokenizer

    ref = SimpleTokenizer(clean=clean)
    ours = BpeTokenizer(*openai_vocab(), clean_mode=clean)
    strings = tb.TRICKY + ["<start_of_text>x", "<end_of_text>"]  # (its special tokens, typed, are those tokens)
    assert torch.equal(ours(strings), ref(strings))
    long = ours(["word " * 100])[0]
    assert long[0] == 49406 and long[-1] == 49407 and len(long) == 77  # cut keeping the end token


@pytest.mark.parametrize("alphabet", ["abcdefghij", "ab", "aé漢z", "0123456789.,!"])
def test_clip_bpe_merges_long_words_as_open_clip(alphabet):
    """The heap-ordered merges equal the reference's pair-by-pair loop (open_clip's SimpleTokenizer) on long words of
    few letters (many competing pairs, long merge chains)."""
    import random

    from open_clip.tokenizer import SimpleTokenizer

    rng = random.Random(36)
    words = ["".join(rng.choice(alphabet) for _ in range(n)) for n in (1, 2, 3, 17, 200, 1500)]
    ours, ref = BpeTokenizer(*openai_vocab()), SimpleTokenizer()
    assert torch.equal(ours(words), ref(words))
    assert [ours.encode(w) for w in words[:5]] == [ref.encode(w) for w in words[:5]]  # every token, not the first 75


@pytest.mark.parametrize("alphabet", ["abcdefghijklmnopqrstuvwxyz", "ab", "aé漢z"])
def test_a_100_kb_one_word_prompt_is_tokenized_as_far_as_the_context_reaches(alphabet, monkeypatch):
    """Only what can reach the 77 tokens is merged (the rest of the word and the prompt never is), and the ids are
    the whole word's: the BPE's cost is bounded by the context, not by the prompt (was quadratic in the word)."""
    import random

    from vitviz.model.text import bpe

    rng = random.Random(7)
    word = "".join(rng.choice(alphabet) for _ in range(100_000))
    ours = BpeTokenizer(*openai_vocab())
    whole = ours.encode(word)
    merged = []
    real = bpe.merge_pairs
    monkeypatch.setattr(bpe, "merge_pairs", lambda w, ranks: merged.append(len(w)) or real(w, ranks))
    ids = ours.ids(word + " and more words after it" * 1000)
    assert ids[0] == 49406 and ids[-1] == 49407 and ids[1:76] == whole[:75]
    assert merged == [bpe.word_start(76)] and merged[0] < 10_000 < len(word)


def test_clip_bpe_from_a_hugging_face_folder(tmp_path):
    from open_clip.tokenizer import SimpleTokenizer
    from transformers import CLIPTokenizer

    folder = tb.clip_vocab_files(tmp_path / "vocab")
    merges, vocab = hf_vocab(folder / "vocab.json", folder / "merges.txt")
    ours = BpeTokenizer(merges, vocab, specials=("<|startoftext|>", "<|endoftext|>"))
    assert torch.equal(ours(tb.TRICKY), SimpleTokenizer()(tb.TRICKY))
    fast = tmp_path / "fast"
    CLIPTokenizer.from_pretrained(str(folder)).save_pretrained(fast)
    assert fast_vocab(fast / "tokenizer.json") == (merges, vocab)  # the same vocabulary from tokenizer.json
    hf = CLIPTokenizer.from_pretrained(str(folder))
    differ = set()
    for s in tb.TRICKY:
        ref = hf(s, padding="max_length", max_length=77, truncation=True)["input_ids"]
        end = ref.index(49407)
        if ours.ids(s) != ref[:end + 1] + [0] * (76 - end):  # (HF pads with the end token, OpenAI with 0)
            differ.add(s)
    assert differ == HF_CLIP_DIFFERS


@pytest.mark.parametrize("lower", [True, False])
def test_siglip_sentencepiece_equals_transformers(tmp_path, sp_model, lower):
    from transformers import SiglipTokenizer

    ref = SiglipTokenizer(str(sp_model), do_lower_case=lower)
    ref.save_pretrained(tmp_path / "tok")
    settings = read_settings(tmp_path / "tok")
    ours = PieceTokenizer(tmp_path / "tok" / "spiece.model", settings=settings)
    assert ours.lower is lower and ours.eos_id == 1 and ours.pad_id == 1
    expected = ref(tb.TRICKY, padding="max_length", max_length=64, truncation=True, return_tensors="pt").input_ids
    assert torch.equal(ours(tb.TRICKY), expected)
    assert siglip_clean("Hot_Dog!  now", lower) == ("hotdog now" if lower else "HotDog now")
    assert ours(["a " * 100])[0, -1] == 1  # cut keeping </s>


def test_siglip_fast_tokenizer_equals_sentencepiece_and_open_clip(tmp_path, sp_model):
    """From a ``tokenizer.json``: the ids are SentencePiece's own (``SentencePieceProcessor`` on the cleaned text,
    then ``</s>``, cut to 64 keeping it, padded with it) and open_clip's ``HFTokenizer``'s; the reference is first
    checked to read the words (no ``<unk>``), as ``T5TokenizerFast(vocab_file=...)`` under transformers 5 does not."""
    pytest.importorskip("open_clip")
    import sentencepiece
    from open_clip.tokenizer import HFTokenizer

    folder = tb.siglip_fast_tokenizer(sp_model, tmp_path / "tok")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(sp_model))
    ref = HFTokenizer(str(folder), context_length=64, clean="canonicalize")
    ours = PieceTokenizer(folder / "tokenizer.json", clean_mode="canonicalize", settings=read_settings(folder))
    assert ours.backend == "tokenizers"
    words = ref(["a photo of a cat"])[0]
    assert sp.unk_id() not in words.tolist() and words[:5].tolist() == sp.encode("a photo of a cat")[:5]
    from open_clip.tokenizer import basic_clean, canonicalize_text

    expected = []
    for text in tb.TRICKY:  # open_clip's cleaning (ftfy, HTML unescaped twice, then canonicalised), SentencePiece's ids
        ids = sp.encode(canonicalize_text(basic_clean(text)))[:63] + [1]
        expected.append(ids + [1] * (64 - len(ids)))
    assert ours(tb.TRICKY).tolist() == expected
    assert torch.equal(ours(tb.TRICKY), ref(tb.TRICKY))
    assert canonicalize("Hot_Dog!  now") == "hot dog now"


def test_a_bad_vocabulary_is_one_line(tmp_path):
    from vitviz.model.text.cleaning import TokenizerError

    (tmp_path / "vocab.json").write_text("[1, 2]")
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\n")
    with pytest.raises(TokenizerError, match=r"vocab.json: not a vocabulary"):
        hf_vocab(tmp_path / "vocab.json", tmp_path / "merges.txt")
    (tmp_path / "spiece.model").write_bytes(b"not a model")
    with pytest.raises(TokenizerError, match=r"spiece.model: not a SentencePiece model"):
        PieceTokenizer(tmp_path / "spiece.model")
