"""The corpus of bad inputs of the text towers (:mod:`vitviz.model.text`): sources without a text tower, folders
missing their tokenizer, broken tokenizer files and settings, text towers vitviz does not build, and bad prompts and
templates.

Every case has its exact line: :func:`~vitviz.model.text.open_text_tower` (or ``encode``) raises it as one line that
names the source (folder, file, model) and the cause, shorter than 200 characters plus the paths it names; for the
sources that have no text tower or lack a tokenizer file, :func:`~vitviz.model.text.text_tower_reason` (the prompt
box's grey-out) gives the same line without reading any weights. Nothing is written into the sources; no network
(curated Hub models are answered from the curated list).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import text_builders as tb
from family_helpers import write_timm_folder
from safetensors.torch import load_file, save_file

from vitviz.model.text import PromptError, TextTowerError, open_text_tower, text_tower_reason

ARCH = "vit_tiny_patch16_224"
MAX_LINE = 200


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Good sources to spoil: an HF CLIP folder, an HF SigLIP folder, an open_clip folder, a timm folder, a
    SentencePiece model."""
    import timm

    root = tmp_path_factory.mktemp("text-corpus")
    sp = tb.sentencepiece_model(root / "sp")
    cfg = tb.open_clip_cfg(True)
    t = timm.create_model(ARCH, pretrained=False, depth=1, num_classes=3, img_size=32).eval()
    return {
        "clip": tb.write_hf_clip_folder(root / "clip", tb.hf_clip_model(), vocab="files"),
        "siglip": tb.write_hf_siglip_folder(root / "siglip", tb.hf_siglip_model(80), sp),
        "open_clip": tb.write_open_clip_folder(root / "oc", tb.open_clip_model(cfg), cfg),
        "timm": write_timm_folder(root / "timm", t, ARCH),
        "sp": sp,
    }


def copy(src: Path, dst: Path, drop: tuple[str, ...] = ()) -> Path:
    dst.mkdir(parents=True)
    for p in src.iterdir():
        if p.name not in drop:
            (dst / p.name).write_bytes(p.read_bytes())
    return dst


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def hf_model_name(d: Path) -> Path:
    edit_json(d / "open_clip_config.json", lambda c: c["model_cfg"]["text_cfg"].update(hf_model_name="roberta-base"))
    return d


def no_logit_scale(d: Path) -> Path:
    f = d / "open_clip_model.safetensors"
    save_file({k: v for k, v in load_file(str(f)).items() if k != "logit_scale"}, str(f))
    return d


def vision_only_weights(d: Path) -> Path:
    f = d / "model.safetensors"
    save_file({k: v for k, v in load_file(str(f)).items() if not k.startswith(("text_model.", "text_projection"))},
              str(f))
    return d


def siglip_tokenizer_named(d: Path) -> Path:
    edit_json(d / "open_clip_config.json", lambda c: c["model_cfg"]["text_cfg"].update(hf_tokenizer_name="x/tok"))
    return d


def cut_merges(d: Path) -> Path:
    """merges.txt without its last 100 lines, cut at a line boundary (each line still a pair)."""
    lines = (d / "merges.txt").read_text(encoding="utf-8").rstrip("\n").split("\n")
    (d / "merges.txt").write_text("\n".join(lines[:-100]) + "\n", encoding="utf-8")
    return d


def linked_to_dev_zero(name: str):
    def spoil(d: Path) -> Path:
        (d / name).unlink()
        (d / name).symlink_to("/dev/zero")
        return d
    return spoil


def million_token_json(d: Path) -> Path:
    """A tokenizer.json of 10^6 tokens (19 MB) for a text tower of 80 (read in a few seconds, then refused)."""
    vocab = {f"t{i}": i for i in range(10**6)} | {"</s>": 10**6, "<unk>": 10**6 + 1}
    (d / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": []}}))
    return d


def open_clip_text(**change):
    return lambda d: edit_json(d / "open_clip_config.json", lambda c: c["model_cfg"]["text_cfg"].update(change))


# (name, base, files left out, spoil, expected line given the source path S, the same line from text_tower_reason)
CASES = [
    ("timm image-only folder", "timm", (), None,
     "{S}: a timm image-only checkpoint (vit_tiny_patch16_224): it has no text tower (timm keeps the image tower "
     "only; open the open_clip or Hugging Face release of the model for its text tower)", True),
    ("timm image-only file", "timm", (), "file",
     "{S}: no text tower in this checkpoint (image tower weights only)", True),
    ("clip without vocabulary", "clip", ("vocab.json", "merges.txt"), None,
     "{S}: the CLIP tokenizer is missing (vocab.json and merges.txt, or tokenizer.json)", True),
    ("clip without merges", "clip", ("merges.txt",), None,
     "{S}: the CLIP tokenizer is missing (vocab.json and merges.txt, or tokenizer.json)", True),
    ("siglip without spiece.model", "siglip", ("spiece.model",), None,
     "{S}: the SigLIP tokenizer is missing (spiece.model or tokenizer.json)", True),
    ("open_clip without its named tokenizer", "open_clip", (), siglip_tokenizer_named,
     "{S}: the tokenizer that open_clip_config.json names (x/tok) is missing (tokenizer.json or spiece.model)", True),
    ("a CLIPVisionModel folder", "clip", (), lambda d: edit_json(d / "config.json",
                                                                lambda c: c.update(model_type="clip_vision_model")),
     "{S}: a Hugging Face 'clip_vision_model' model (an image tower only): it has no text tower", True),
    ("an empty folder", "clip", ("config.json", "model.safetensors", "vocab.json", "merges.txt"), None,
     "{S}: no text tower: neither a Hugging Face CLIPModel / SiglipModel folder (config.json) nor an open_clip "
     "folder (open_clip_config.json) (found: nothing)", True),
    ("clip config, image weights only", "clip", (), vision_only_weights,
     "{S}: no text tower in model.safetensors (its config describes one; the weights hold image tower tensors "
     "only)", True),
    ("open_clip with a Hugging Face text encoder", "open_clip", (), hf_model_name,
     "{S}: an open_clip model with a Hugging Face text encoder ('roberta-base'); vitviz builds open_clip's own text "
     "transformer only", False),
    ("open_clip without logit_scale", "open_clip", (), no_logit_scale,
     "{S}: no logit_scale (the learned temperature of the image-text score)", False),
    ("a vocabulary that is a list", "clip", (), lambda d: (d / "vocab.json").write_text("[1, 2]"),
     "{S}/vocab.json: not a vocabulary (a JSON object of token -> id)", False),
    ("merges that are not pairs", "clip", (), lambda d: (d / "merges.txt").write_text("#version: 0.2\na b c\n"),
     "{S}/merges.txt: a line is not two symbols separated by a space", False),
    ("a spiece.model that is text", "siglip", (), lambda d: (d / "spiece.model").write_text("not a model"),
     "{S}/spiece.model: not a SentencePiece model", False),
    ("a tokenizer_config.json that is a list", "siglip", (),
     lambda d: (d / "tokenizer_config.json").write_text("[]"),
     "{S}/tokenizer_config.json: not a JSON object of tokenizer settings", True),
    ("a config.json that is not JSON", "clip", (), lambda d: (d / "config.json").write_text("{"),
     "{S}/config.json: cannot read it (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
     True),
    ("truncated weights", "clip", (), lambda d: (d / "model.safetensors").write_bytes(
        (d / "model.safetensors").read_bytes()[:20000]),
     "{S}/model.safetensors: truncated file: the tensors need", False),
    # issue 36, classes 5 and 7: values of the wrong type or size reached the code ("unexpected TypeError")
    ("text_config a list", "clip", (), lambda d: edit_json(d / "config.json", lambda c: c.update(text_config=[1])),
     "{S}/config.json: text_config is a list, not a JSON object of settings", True),
    ("text_cfg a string", "open_clip", (),
     lambda d: edit_json(d / "open_clip_config.json", lambda c: c["model_cfg"].update(text_cfg="big")),
     "{S}/open_clip_config.json: model_cfg.text_cfg is a str, not a JSON object of settings", True),
    ("tokenizer_kwargs a list", "open_clip", (), open_clip_text(tokenizer_kwargs=["clean"]),
     "{S}/open_clip_config.json: model_cfg.text_cfg.tokenizer_kwargs is a list, not a JSON object of settings",
     True),
    ("heads a string", "open_clip", (), open_clip_text(heads="two"),
     "{S}: open_clip_config.json: model_cfg.text_cfg.heads is 'two', not an integer", False),
    ("context_length a fraction", "open_clip", (), open_clip_text(context_length=7.5),
     "{S}: open_clip_config.json: model_cfg.text_cfg.context_length is '7.5', not an integer", False),
    ("num_attention_heads true", "clip", (),
     lambda d: edit_json(d / "config.json", lambda c: c["text_config"].update(num_attention_heads=True)),
     "{S}: config.json: text_config.num_attention_heads is 'True', not an integer", False),
    ("pad_token whose content is a number", "siglip", (),
     lambda d: edit_json(d / "tokenizer_config.json", lambda c: c.update(pad_token={"content": 5})),
     "{S}/tokenizer_config.json: pad_token is '5', not a token (text)", True),
    ("padding_side neither right nor left", "siglip", (),
     lambda d: edit_json(d / "tokenizer_config.json", lambda c: c.update(padding_side="middle")),
     "{S}/tokenizer_config.json: padding_side is 'middle', not right or left", True),
    ("a token id beyond the embedding", "clip", (),
     lambda d: edit_json(d / "vocab.json", lambda v: v.update({"cat</w>": 10**6})),
     "{S}/vocab.json: the tokenizer's ids reach 1000000, beyond the text tower's 49408 token embeddings", False),
    ("a negative token id", "clip", (), lambda d: edit_json(d / "vocab.json", lambda v: v.update({"cat</w>": -3})),
     "{S}/vocab.json: token 'cat</w>' has the negative id -3", False),
    ("a tokenizer.json of a million tokens", "siglip", ("spiece.model",), million_token_json,
     "{S}/tokenizer.json: the tokenizer's ids reach 1000001, beyond the text tower's 80 token embeddings", False),
    ("a merges file cut at a line boundary", "clip", (), cut_merges,
     "{S}/merges.txt: 100 tokens of the vocabulary are made by no merge", False),
    ("open_clip_config.json linked to /dev/zero", "open_clip", (), linked_to_dev_zero("open_clip_config.json"),
     "{S}/open_clip_config.json: a device, a pipe or a socket, not a regular file", True),
    ("config.json linked to /dev/zero", "clip", (), linked_to_dev_zero("config.json"),
     "{S}/config.json: a device, a pipe or a socket, not a regular file", True),
    ("a tokenizer.json that is a folder", "siglip", ("spiece.model",), lambda d: (d / "tokenizer.json").mkdir(),
     "{S}/tokenizer.json: a folder, not a regular file", True),
    ("a config.json of 20 MiB", "clip", (), lambda d: (d / "config.json").write_text(" " * 20 * 2**20 + "{}"),
     "{S}/config.json: 20 MiB, too large for a settings file (at most 16 MiB)", True),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_bad_source_is_one_line(base, tmp_path, case):
    name, kind, drop, spoil, expected, reason_too = case
    src = copy(base[kind], tmp_path / "src", drop)
    if spoil == "file":
        src = src / "model.safetensors"
    elif spoil is not None:
        spoil(src)
    before = {p.name: p.stat().st_mtime_ns for p in (src.parent if src.is_file() else src).iterdir()}
    line = expected.replace("{S}", str(src))
    with pytest.raises(TextTowerError) as e:
        open_text_tower(src)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(line), (msg, line)
    assert len(msg.replace(str(src), "S")) < MAX_LINE, msg
    reason = text_tower_reason(src)
    if reason_too:
        assert reason == msg
    else:
        assert reason is None or reason == msg
    assert {p.name: p.stat().st_mtime_ns for p in (src.parent if src.is_file() else src).iterdir()} == before


def test_an_open_clip_config_linked_to_dev_zero_is_named_when_the_image_tower_opens(base, tmp_path):
    """(was read past, and the folder opened as a bare state dict: "cannot infer the number of attention heads")"""
    from vitviz.model.checkpoints.common import CheckpointError
    from vitviz.pipeline import Pipeline

    src = linked_to_dev_zero("open_clip_config.json")(copy(base["open_clip"], tmp_path / "src"))
    with pytest.raises(CheckpointError) as e:
        Pipeline.open(src)
    assert str(e.value).splitlines()[0] == (f"{src}/open_clip_config.json: is not a regular file; a Hugging Face "
                                            "folder keeps its settings in a file of that name")


@pytest.mark.parametrize("source,line", [
    ("demo", "demo: the bundled demo model classifies shapes; it has no text tower"),
    ("pretrained:vit_b_16", "vit_b_16: torchvision's ImageNet classifier; it has no text tower"),
    (f"random:{ARCH}", f"{ARCH}: random weights of an image architecture; no text tower"),
    ("siglip-b16", "SigLIP ViT-B/16 (timm/vit_base_patch16_siglip_224.webli): timm's upload holds the image tower "
                   "only; 'siglip-b16-hf' has both towers"),
    ("/no/such/folder", "/no/such/folder: no such file or directory, nor a Hugging Face Hub id (it has 3 '/') "
                        "('vitviz models' lists the names)"),
])
def test_a_model_without_a_text_tower_says_so_without_a_request(source, line, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # any request would fail (and show)
    assert text_tower_reason(source) == line
    with pytest.raises(TextTowerError) as e:
        open_text_tower(source)
    assert str(e.value) == line


@pytest.mark.parametrize("prompts,line", [
    ([], "prompts: no prompt given"),
    ([""], "the prompt is empty"),
    (["a cat", "  \t"], "prompt 2 of 2 is empty"),
    (["a cat", None], "prompt 2 of 2 is a NoneType, not text"),
    ("a cat", "prompts: give a list of prompts, not one string (['a cat'], not 'a cat')"),
])
def test_a_bad_prompt_is_one_line(base, prompts, line):
    tower = open_text_tower(base["open_clip"])
    with pytest.raises(PromptError) as e:
        tower.encode(prompts)
    assert str(e.value) == line
    with pytest.raises(PromptError):
        tower.targets(prompts)


@pytest.mark.parametrize("templates,line", [
    ("a photo", "templates: 'a photo' is neither a template with '{}' where the prompt goes nor one of none, photo, "
                "imagenet"),
    ([], "templates: an empty list (give None for the prompt as typed)"),
    (["a {} photo", "no slot"], "templates: 'no slot' has no '{}' where the prompt goes"),
])
def test_bad_templates_are_one_line(base, templates, line):
    tower = open_text_tower(base["open_clip"])
    with pytest.raises(ValueError) as e:
        tower.encode(["a cat"], templates)
    assert str(e.value) == line


def test_a_missing_library_is_named_with_the_extra(base, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ftfy", None)  # as if not installed
    with pytest.raises(TextTowerError) as e:
        open_text_tower(base["open_clip"])
    assert str(e.value) == (f"{base['open_clip']}: the text towers need the Python package 'ftfy' "
                            "(pip install 'vitviz[text]')")
