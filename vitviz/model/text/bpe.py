"""CLIP's byte-level BPE tokenizer, as OpenAI's ``simple_tokenizer`` and open_clip's ``SimpleTokenizer``: 77 tokens.

Why our own ~150 lines rather than a library: the reference is OpenAI's training-time tokenizer (copied by open_clip),
and the libraries that ship a CLIP tokenizer do not reproduce it: ``transformers``' ``CLIPTokenizer`` (a
``tokenizers`` BPE since transformers 5) normalises with NFC only, where OpenAI's cleans with ``ftfy.fix_text`` and
unescapes HTML twice, so it differs on ``&amp;``, mojibake (``cafÃ©``), full-width letters and ligatures (``ﬁ``);
open_clip itself would add torch-vision, timm and its model zoo as a dependency for one file. The rules here are the
reference's, line by line:

1. clean (``clean="lower"``, the default of every CLIP model): ``ftfy.fix_text``, ``html.unescape`` twice, strip;
   whitespace runs to one space; lower-case. (``"whitespace"``: no lower-casing; ``"canonicalize"``: big_vision's,
   see :func:`vitviz.model.text.cleaning.canonicalize` — the choices of open_clip's ``tokenizer_kwargs.clean``);
2. split with the regular expression ``<special>|'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+``
   (case-insensitive; ``regex`` for the Unicode classes, as the reference);
3. each piece's UTF-8 bytes as printable characters (``bytes_to_unicode``), merged pair by pair by the merge ranks, the
   last symbol of a word carrying ``</w>``;
4. ``[start] + ids + [end]``; longer than the context: cut to it, the last token replaced by the end token; padded
   with 0 (the ids after the end token never reach the pooled embedding: the text tower is causal and pools at the end
   token).

The vocabulary: the folder's ``vocab.json`` + ``merges.txt`` or ``tokenizer.json`` (Hugging Face CLIP folders), else
the copy shipped with vitviz (``clip_bpe_merges.txt.gz``: the 48,894 merges that OpenAI's
``bpe_simple_vocab_16e6.txt.gz`` contributes to the 49,408-token vocabulary, Copyright (c) 2021 OpenAI, MIT licence;
a test checks it against open_clip's copy), used by open_clip folders and OpenAI's weights, which carry none.
``ftfy`` and ``regex`` are the optional extra ``vitviz[text]``, imported on first use. No Qt, no torch at import.
"""

from __future__ import annotations

import gzip
import heapq
from functools import lru_cache
from pathlib import Path

from vitviz._util.files import read_json
from vitviz.model.text.cleaning import TokenizerError, clean, need
from vitviz.model.text.file_checks import MAX_TOKENIZER_BYTES, regular_file

MERGES_FILE = Path(__file__).with_name("clip_bpe_merges.txt.gz")
NUM_MERGES = 49152 - 256 - 2  # open_clip / OpenAI: merges[1 : 49152 - 256 - 2 + 1] of the 16e6 file
CLEAN_MODES = ("lower", "whitespace", "canonicalize")


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """OpenAI's reversible map from the 256 bytes to printable characters (the BPE works on those)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


# ---------------------------------------------------------------------------------------------------------------------
# vocabularies
# ---------------------------------------------------------------------------------------------------------------------
def openai_vocab() -> tuple[list[tuple[str, str]], dict[str, int]]:
    """The merges shipped with vitviz and the vocabulary OpenAI builds from them (bytes, bytes + ``</w>``, one token
    per merge, then the start and end tokens named as open_clip names them)."""
    try:
        lines = gzip.decompress(MERGES_FILE.read_bytes()).decode("utf-8").split("\n")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise TokenizerError(f"{MERGES_FILE}: cannot read CLIP's BPE merges ({e}); reinstall vitviz") from None
    merges = [tuple(m.split()) for m in lines[:NUM_MERGES]]
    if len(merges) != NUM_MERGES or any(len(m) != 2 for m in merges):
        raise TokenizerError(f"{MERGES_FILE}: not {NUM_MERGES} BPE merges; reinstall vitviz")
    symbols = list(bytes_to_unicode().values())
    symbols += [s + "</w>" for s in symbols] + ["".join(m) for m in merges] + ["<start_of_text>", "<end_of_text>"]
    return merges, {s: i for i, s in enumerate(symbols)}  # type: ignore[return-value]


def hf_vocab(vocab_json: Path, merges_txt: Path) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """A Hugging Face CLIP folder's ``vocab.json`` and ``merges.txt`` (``#version`` header skipped), checked by
    :func:`check_vocab`."""
    for f in (vocab_json, merges_txt):
        regular_file(f, MAX_TOKENIZER_BYTES, "a tokenizer file", error=TokenizerError)
    vocab = read_json(vocab_json, TokenizerError, "the tokenizer")
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
        raise TokenizerError(f"{vocab_json}: not a vocabulary (a JSON object of token -> id)")
    try:
        lines = merges_txt.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise TokenizerError(f"{merges_txt}: cannot read the BPE merges ({e})") from None
    merges = [tuple(x.split()) for x in lines if x and not x.startswith("#version")]
    if any(len(m) != 2 for m in merges):
        raise TokenizerError(f"{merges_txt}: a line is not two symbols separated by a space")
    check_vocab(merges, vocab, set(), vocab_json, merges_txt)  # type: ignore[arg-type]
    return merges, vocab  # type: ignore[return-value]


def fast_vocab(tokenizer_json: Path) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """The BPE model of a ``tokenizer.json`` (``model.vocab``, ``model.merges`` as ``"a b"`` or ``["a", "b"]``), its
    added tokens included, checked by :func:`check_vocab`."""
    regular_file(tokenizer_json, MAX_TOKENIZER_BYTES, "a tokenizer file", error=TokenizerError)
    data = read_json(tokenizer_json, TokenizerError, "the tokenizer")
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise TokenizerError(f"{tokenizer_json}: not a BPE tokenizer (CLIP's is one)")
    vocab = dict(model["vocab"])
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in vocab.values()):
        raise TokenizerError(f"{tokenizer_json}: model.vocab is not a JSON object of token -> id")
    added = set()
    for t in data.get("added_tokens") or []:
        if isinstance(t, dict) and isinstance(t.get("content"), str) and isinstance(t.get("id"), int):
            vocab.setdefault(t["content"], t["id"])
            added.add(t["content"])
    raw = model.get("merges") or []
    if not isinstance(raw, list) or not all(isinstance(m, (str, list)) for m in raw):
        raise TokenizerError(f"{tokenizer_json}: model.merges is not a list of BPE merges")
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in raw]
    if any(len(m) != 2 or not all(isinstance(x, str) for x in m) for m in merges):
        raise TokenizerError(f"{tokenizer_json}: a BPE merge is not two symbols")
    check_vocab(merges, vocab, added, tokenizer_json, tokenizer_json)  # type: ignore[arg-type]
    return merges, vocab  # type: ignore[return-value]


def check_vocab(merges: list[tuple[str, str]], vocab: dict[str, int], added: set[str], vocab_file: Path,
                merges_file: Path) -> None:
    """A byte-level BPE vocabulary and its merges that belong together: ids not negative; every token longer than
    one byte character (``</w>`` aside) made by a merge. A merges file cut short, even at a line boundary, leaves
    tokens no merge makes: those words would be split into other tokens without a word of warning.

    Raises:
        TokenizerError: naming the file, the count and a first example.
    """
    low = min(vocab.values(), default=0)
    if low < 0:
        token = next(t for t, i in vocab.items() if i == low)
        raise TokenizerError(f"{vocab_file}: token {token[:40]!r} has the negative id {low}")
    made = {a + b for a, b in merges}
    orphans = [t for t in vocab if t not in made and t not in added and len(t.removesuffix("</w>")) > 1
               and not (t.startswith("<") and t.endswith(">"))]  # (specials such as <|endoftext|>)
    if orphans:
        raise TokenizerError(f"{merges_file}: {len(orphans)} tokens of the vocabulary are made by no merge (e.g. "
                             f"{orphans[0][:40]!r}; {len(merges)} merges read): a merges list cut short? Words "
                             "would be tokenized differently")


CACHED_WORD = 64  # words up to this many characters are cached (a long one would only fill the cache)
SYMBOLS_PER_TOKEN = 32  # no CLIP token is longer than 32 byte characters (with '</w>')


def word_start(limit: int) -> int:
    """How much of one long word can give its first ``limit`` tokens: each token covers at most
    :data:`SYMBOLS_PER_TOKEN` characters, times four so that the merges near where the word is cut (which may
    differ from the whole word's there) stay far from the tokens kept (a test checks the ids against the whole
    word's). A 100 kB one-word prompt is tokenized as its first ~10 kB for a 77-token context."""
    return 4 * SYMBOLS_PER_TOKEN * max(limit, 1)


def merge_pairs(word: list[str], ranks: dict[tuple[str, str], int]) -> list[str]:
    """Merge the symbols of ``word`` as the reference's loop does: repeatedly the pair of lowest rank, all its
    places left to right (a place that overlaps one just merged is skipped), until no pair has a rank. A linked list
    and a heap of ``(rank, place)``: entries made stale by a merge are skipped when popped."""
    n = len(word)
    if n < 2:
        return word
    sym = list(word)
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prv = list(range(-1, n - 1))
    alive = [True] * n
    heap = [(r, i) for i in range(n - 1) if (r := ranks.get((sym[i], sym[i + 1]))) is not None]
    heapq.heapify(heap)
    while heap:
        rank = heap[0][0]
        places = []
        while heap and heap[0][0] == rank:
            places.append(heapq.heappop(heap)[1])
        places.sort()
        for i in places:
            j = nxt[i] if alive[i] else -1
            if j < 0 or ranks.get((sym[i], sym[j])) != rank:
                continue  # merged away, or no longer this pair
            sym[i] += sym[j]
            alive[j] = False
            nxt[i] = nxt[j]
            if nxt[j] >= 0:
                prv[nxt[j]] = i
            for a in (prv[i], i):  # the pairs the new symbol makes with its neighbours (never this rank's pair)
                if a >= 0 and nxt[a] >= 0:
                    r = ranks.get((sym[a], sym[nxt[a]]))
                    if r is not None:
                        heapq.heappush(heap, (r, a))
    out, i = [], 0
    while i >= 0:
        out.append(sym[i])
        i = nxt[i]
    return out


# ---------------------------------------------------------------------------------------------------------------------
# the tokenizer
# ---------------------------------------------------------------------------------------------------------------------
class BpeTokenizer:
    """CLIP's tokenizer over one vocabulary (see the module docstring).

    Args:
        merges, vocab: the BPE merges in rank order and the token ids (:func:`openai_vocab`, :func:`hf_vocab`,
            :func:`fast_vocab`).
        specials: the start and end tokens as written in ``vocab`` (``<start_of_text>`` in open_clip's naming,
            ``<|startoftext|>`` in OpenAI's and Hugging Face's); typed in a prompt, they are these tokens, as in the
            references.
        context_length: tokens per prompt (77 for every CLIP model).
        clean_mode: ``"lower"``, ``"whitespace"`` or ``"canonicalize"``.
    """

    def __init__(self, merges: list[tuple[str, str]], vocab: dict[str, int], *,
                 specials: tuple[str, str] = ("<start_of_text>", "<end_of_text>"), context_length: int = 77,
                 clean_mode: str = "lower", origin: str = "CLIP tokenizer"):
        regex = need("regex")
        need("ftfy")
        if clean_mode not in CLEAN_MODES:
            raise TokenizerError(f"{origin}: unknown text cleaning {clean_mode!r} (known: {', '.join(CLEAN_MODES)})")
        missing = [s for s in specials if s not in vocab]
        if missing:
            raise TokenizerError(f"{origin}: the vocabulary has no {' or '.join(missing)} token")
        self.encoder = vocab
        self.ranks = {m: i for i, m in enumerate(merges)}
        self.byte_encoder = bytes_to_unicode()
        self.specials = specials
        self.sot_id, self.eot_id = vocab[specials[0]], vocab[specials[1]]
        self.context_length = int(context_length)
        self.clean_mode = clean_mode
        self.origin = origin
        self.cache: dict[str, list[str]] = {s: [s] for s in specials}
        alternatives = "|".join(regex.escape(s) for s in specials)
        self.pattern = regex.compile(alternatives + r"""|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""",
                                     regex.IGNORECASE)

    def id_range(self) -> tuple[int, int]:
        """The smallest and largest token id of the vocabulary."""
        return min(self.encoder.values()), max(self.encoder.values())

    def bpe(self, token: str, whole: bool = True) -> list[str]:
        """The BPE symbols of one pre-token (already as byte characters): the reference's merges, in the reference's
        order (the lowest-ranked pair first, all its places left to right), found with a heap instead of the
        reference's scan of every pair per merge, so a word of n characters costs O(n log n), not O(n^2).
        ``whole=False``: ``token`` is the start of a longer word (its last symbol carries no ``</w>``)."""
        cached = self.cache.get(token) if whole else None
        if cached is not None:
            return cached
        word = merge_pairs(list(token[:-1]) + [token[-1] + "</w>"] if whole else list(token), self.ranks)
        if whole and len(token) <= CACHED_WORD:
            if len(self.cache) > 50_000:
                self.cache = {s: [s] for s in self.specials}
            self.cache[token] = word
        return word

    def encode(self, text: str, limit: int | None = None) -> list[int]:
        """The ids of ``text`` without start, end or padding; with ``limit``, only the first ``limit`` (the text
        after them is never tokenized, and a longer word only up to what can reach them: :func:`word_start`)."""
        regex = need("regex")
        ids: list[int] = []
        text = clean(text, self.clean_mode)
        for m in regex.finditer(self.pattern, text):
            if limit is not None and len(ids) >= limit:
                break
            piece = m.group()
            whole = True
            if piece in self.specials:
                chars = piece
            else:
                reach = word_start(limit) if limit is not None else None
                chars = "".join(self.byte_encoder[b] for b in piece[:reach].encode("utf-8"))  # as byte characters
                if reach is not None and (len(piece) > reach or len(chars) > reach):
                    chars, whole = chars[:reach], False
            for symbol in self.bpe(chars, whole):
                try:
                    ids.append(self.encoder[symbol])
                except KeyError:
                    raise TokenizerError(f"{self.origin}: the vocabulary has no token {symbol!r} (an incomplete "
                                         "vocab.json?)") from None
        return ids if limit is None else ids[:limit]

    def ids(self, text: str) -> list[int]:
        """``[start] + ids + [end]`` cut to the context (the end token kept), padded with 0."""
        tokens = [self.sot_id, *self.encode(text, limit=self.context_length - 1), self.eot_id]
        if len(tokens) > self.context_length:
            tokens = tokens[:self.context_length]
            tokens[-1] = self.eot_id
        return tokens + [0] * (self.context_length - len(tokens))

    def __call__(self, texts: list[str]):
        """``LongTensor [len(texts), context_length]``."""
        import torch

        return torch.tensor([self.ids(t) for t in texts], dtype=torch.long).reshape(len(texts), self.context_length)
