"""The corpus of bad ``--text`` / ``--templates`` values of ``vitviz predict``, ``vitviz export`` and ``vitviz
evaluate`` (issue 24): empty prompts, models without a text tower (a vitviz checkpoint, the demo model, a timm
image-only folder), folders missing their tokenizer (Hugging Face CLIP without its vocabulary, SigLIP without
``spiece.model``, open_clip naming a tokenizer that is not there), a tokenizer file that is no tokenizer, ``--text``
together with ``--target``, ``--templates`` without ``--text`` or with an unknown name.

Every case runs the real command line (in this process) and has an exact expectation: exit status 2, exactly one
stderr line ``vitviz COMMAND: error: FLAG...: CAUSE`` (the flag, and the cause with the folder or file it is about),
nothing on stdout (the refusal came before any image), nothing written or changed under the corpus' folder (no
output folder, no CSV). Each call is bounded by a timeout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import text_builders as tb
import torch
from bounded_runs import cli, snapshot
from family_helpers import write_timm_folder
from PIL import Image

from vitviz.model import create_model, save_checkpoint

TIMEOUT_S = 60
ARCH = "vit_tiny_patch16_224"


def _copy(src: Path, dst: Path, drop: tuple[str, ...] = ()) -> Path:
    dst.mkdir(parents=True)
    for p in src.iterdir():
        if p.is_file() and p.name not in drop:
            (dst / p.name).write_bytes(p.read_bytes())
    return dst


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """Sources without a text tower or a usable tokenizer, and two photos (``imgs``)."""
    import timm

    root = tmp_path_factory.mktemp("prompt-flags")
    torch.manual_seed(0)
    save_checkpoint(create_model(ARCH, img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=5),
                    root / "classifier.safetensors")
    write_timm_folder(root / "timm", timm.create_model(ARCH, pretrained=False, depth=1, num_classes=3, img_size=32),
                      ARCH)
    clip = tb.write_hf_clip_folder(root / "src" / "clip", tb.hf_clip_model(), vocab="files")
    _copy(clip, root / "clip_novocab", drop=("vocab.json", "merges.txt", "tokenizer.json"))
    siglip = tb.write_hf_siglip_folder(root / "siglip_nosp", tb.hf_siglip_model(80), None)
    _copy(siglip, root / "siglip_badsp")
    (root / "siglip_badsp" / "spiece.model").write_bytes(b"not a SentencePiece model")
    cfg = tb.open_clip_cfg(False, siglip=True, tokenizer="timm/some-siglip")
    tb.write_open_clip_folder(root / "oc_notok", tb.open_clip_model(cfg), cfg)
    (root / "imgs").mkdir()
    rng = np.random.default_rng(3)
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(root / "imgs" / f"i{i}.png")
    return root






def argv_of(root: Path, command: str, model: str, extra: list[str]) -> list[str]:
    m = model if model == "demo" else str(root / model)
    if command == "predict":
        return ["predict", m, str(root / "imgs" / "i0.png"), *extra]
    if command == "export":
        return ["export", "--model", m, str(root / "imgs"), "--out", str(root / "out"), "--quiet", "--format", "npy",
                "--precision", "fp32", *extra]
    return ["evaluate", m, str(root / "imgs"), "--steps", "2", "--seeds", "1", "--csv", str(root / "auc.csv"), *extra]


# (id, model, --text value, the line after "vitviz COMMAND: error: " ({root}: the corpus folder))
CASES = [
    ("empty", "clip_novocab", "", "--text '': the prompt is empty: type a phrase (several separated by ';')"),
    ("blank prompts", "clip_novocab", " ; ", "--text ' ; ': the prompt is empty: type a phrase"),
    ("two ; in a row", "clip_novocab", "a cat;;a dog",
     "--text 'a cat;;a dog': prompt 2 of 3 is empty (two ';' in a row, or one at the end)"),
    ("; at the end", "clip_novocab", "a cat;", "--text 'a cat;': prompt 2 of 2 is empty"),
    ("a vitviz checkpoint", "classifier.safetensors", "a cat",
     "--text: {root}/classifier.safetensors: no text tower in this checkpoint (image tower weights only)"),
    ("the demo model", "demo", "a cat",
     "--text: demo: the bundled demo model classifies shapes; it has no text tower"),
    ("a timm image-only folder", "timm", "a cat",
     f"--text: {{root}}/timm: a timm image-only checkpoint ({ARCH}): it has no text tower"),
    ("CLIP without its vocabulary", "clip_novocab", "a cat",
     "--text: {root}/clip_novocab: the CLIP tokenizer is missing (vocab.json and merges.txt, or tokenizer.json)"),
    ("SigLIP without spiece.model", "siglip_nosp", "a cat",
     "--text: {root}/siglip_nosp: the SigLIP tokenizer is missing (spiece.model or tokenizer.json)"),
    ("open_clip's named tokenizer missing", "oc_notok", "a cat",
     "--text: {root}/oc_notok: the tokenizer that open_clip_config.json names (timm/some-siglip) is missing "
     "(tokenizer.json or spiece.model)"),
    ("spiece.model that is no tokenizer", "siglip_badsp", "a cat",
     "--text: {root}/siglip_badsp/spiece.model: not a SentencePiece model"),
]


@pytest.mark.parametrize("command", ["predict", "export", "evaluate"])
@pytest.mark.parametrize("name,model,text,line", CASES, ids=[c[0] for c in CASES])
def test_a_bad_prompt_or_source_is_one_line_and_writes_nothing(root, capsys, command, name, model, text, line):
    before = snapshot(root)
    status, err, out = cli(argv_of(root, command, model, ["--text", text]), capsys, TIMEOUT_S)
    assert status == 2, (status, err)
    assert len(err) == 1, err
    assert err[0].startswith(f"vitviz {command}: error: {line.format(root=root)}"), err[0]
    assert "Traceback" not in err[0] and out == ""
    assert snapshot(root) == before


# (id, commands, extra flags, the line after "vitviz COMMAND: error: ")
FLAG_CASES = [
    ("--text with --target", ("export", "evaluate"), ["--text", "a cat", "--target", "2"],
     "--text and --target 2: give one of them (with --text each prompt is the target of its maps)"),
    ("--text with a similar: target", ("export", "evaluate"), ["--text", "a cat", "--target", "similar:x.png"],
     "--text and --target similar:x.png: give one of them"),
    ("--templates without --text", ("predict", "export", "evaluate"), ["--templates", "photo"],
     "--templates photo: give --text too (the templates are put around its prompts)"),
    ("an unknown template set", ("predict", "export", "evaluate"), ["--text", "a cat", "--templates", "cifar"],
     "argument --templates: invalid choice: 'cifar' (choose from 'none', 'photo', 'imagenet')"),
]


@pytest.mark.parametrize("name,commands,extra,line", FLAG_CASES, ids=[c[0] for c in FLAG_CASES])
def test_bad_prompt_flags_are_one_line_and_write_nothing(root, capsys, name, commands, extra, line):
    before = snapshot(root)
    for command in commands:
        status, err, out = cli(argv_of(root, command, "clip_novocab", extra), capsys, TIMEOUT_S)
        assert status == 2, (command, status, err)
        assert len(err) == 1, (command, err)
        assert err[0].startswith(f"vitviz {command}: error: {line}"), (command, err[0])
        assert out == ""
    assert snapshot(root) == before
