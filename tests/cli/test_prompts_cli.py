"""Text prompts on the command line and in the library (issue 24 item 4): ``vitviz predict --text`` prints the
reference library's zero-shot probabilities (open_clip CLIP: softmax; Transformers SigLIP: sigmoid), ``vitviz export
--text`` writes one map per prompt of each gradient view (LeGrad by default; the maps equal the window's for that
prompt; relevance on CLIP prompts from the last layer, Chefer's rule), ``vitviz evaluate --text`` measures each prompt
(the curves read its probability: SigLIP's sigmoid), and ``vitviz.Text`` / ``vitviz.prompt_pipeline`` are in the face.
Bad ``--text`` values: tests/corpus/test_prompt_flags_corpus.py. Tiny random-weight models written as their
libraries write them (tests/text_builders.py); every command runs in this process."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import text_builders as tb
import torch
import torch.nn.functional as F
from PIL import Image

import vitviz
from vitviz.cli import main
from vitviz.document.session import Session
from vitviz.imaging import load_image
from vitviz.pipeline import Pipeline, prompt_pipeline


def _photos(folder: Path, n: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        out.append(folder / f"i{i}.png")
        Image.fromarray(np.random.default_rng(i).integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(out[-1])
    return out


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """An open_clip CLIP folder (random weights; the heads read from its config), its reference model and two photos."""
    pytest.importorskip("open_clip")
    root = tmp_path_factory.mktemp("clip-prompts")
    cfg = tb.open_clip_cfg(True)
    ref = tb.open_clip_model(cfg)
    return {"folder": tb.write_open_clip_folder(root / "oc", ref, cfg), "ref": ref, "images": _photos(root / "imgs", 2),
            "root": root}


@pytest.fixture(scope="module")
def siglip(tmp_path_factory):
    """A Hugging Face SiglipModel folder with its SentencePiece tokenizer (random weights), the reference model and
    one photo."""
    root = tmp_path_factory.mktemp("siglip-prompts")
    sp = tb.sentencepiece_model(root / "sp")
    from transformers import SiglipTokenizer

    ref = tb.hf_siglip_model(len(SiglipTokenizer(str(sp))))
    return {"folder": tb.write_hf_siglip_folder(root / "siglip", ref, sp), "ref": ref,
            "images": _photos(root / "imgs", 1), "root": root}


def _predictions(out: str) -> dict[str, tuple[int, float, float]]:
    """``prompt -> (index, p, score)`` of predict's lines of one image."""
    rows = {}
    assert out.splitlines()[2].split() == ["index", "p", "logit", "prompt"]  # the columns named
    for line in out.splitlines()[3:]:
        i, p, s, prompt = line.split(maxsplit=3)
        rows[prompt] = (int(i), float(p), float(s))
    return rows


def _clip_reference(clip, image: Path, texts: list[str]) -> torch.Tensor:
    """open_clip's logits ``logit_scale * cos(image, text)`` of the photo (vitviz's preprocessing) and ``texts``."""
    import open_clip

    p = Pipeline.open(clip["folder"])
    x, _ = p.spec.preprocess.apply(load_image(image).image)
    ids = open_clip.get_tokenizer(f"local-dir:{clip['folder']}")(texts)
    ref = clip["ref"]
    with torch.no_grad():
        img, txt = ref.encode_image(x[None]), ref.encode_text(ids)
        return (ref.logit_scale.exp() * F.normalize(img, dim=-1) @ F.normalize(txt, dim=-1).T)[0]


def test_predict_prints_clips_softmax_over_the_prompts(clip, capsys):
    image = clip["images"][0]
    prompts = ["a photo of a cat", "a red car", "a dog"]
    for templates, texts in [([], prompts), (["--templates", "photo"], [f"a photo of a {p}." for p in prompts])]:
        capsys.readouterr()
        assert main(["predict", str(clip["folder"]), str(image), "--text",
                     " ; ".join(prompts), *templates, "--precision", "fp32"]) == 0
        out = capsys.readouterr().out
        head = out.splitlines()[0]
        assert head.startswith("CLIP zero-shot over 3 prompt(s)") and "softmax over the prompts" in head
        assert ("templates: photo" in head) == bool(templates)
        assert out.splitlines()[1] == str(image)
        rows = _predictions(out)
        logits = _clip_reference(clip, image, texts)
        probs = logits.softmax(-1)
        assert set(rows) == set(prompts)
        for k, prompt in enumerate(prompts):
            i, p, s = rows[prompt]
            assert i == k and abs(p - float(probs[k])) < 1e-4 and abs(s - float(logits[k])) < 1e-4
        ps = [rows[q][1] for q in rows]
        assert ps == sorted(ps, reverse=True)  # most probable first


def test_predict_prints_siglips_sigmoid_of_each_prompt(siglip, capsys):
    from transformers import SiglipTokenizer

    image = siglip["images"][0]
    prompts = ["a cat", "two dogs"]
    assert main(["predict", str(siglip["folder"]), str(image), "--text", "a cat;two dogs", "--top", "1",
                 "--precision", "fp32"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("SigLIP zero-shot over 2 prompt(s)") and "sigmoid" in out.splitlines()[0]
    p = Pipeline.open(siglip["folder"])
    x, _ = p.spec.preprocess.apply(load_image(image).image)
    ids = SiglipTokenizer.from_pretrained(str(siglip["folder"]))(prompts, padding="max_length", max_length=64,
                                                                 truncation=True, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = siglip["ref"](input_ids=ids, pixel_values=x[None]).logits_per_image[0]
    rows = _predictions(out)
    best = int(logits.argmax())
    assert list(rows) == [prompts[best]]  # --top 1: the most probable prompt only
    i, prob, score = rows[prompts[best]]
    assert i == best and abs(prob - float(torch.sigmoid(logits[best]))) < 1e-4
    assert abs(score - float(logits[best])) < 1e-4


def _records(out: Path) -> list[dict]:
    return [r for r in (json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()) if "source" in r]


def _session_map(result, view: str, **changes) -> np.ndarray:
    s = Session()
    s.set_result(result)
    s.set_options(view=view, **changes)
    return s.current_map()


def test_export_writes_one_map_per_prompt_named_as_the_window_names_it(clip, capsys):
    folder, images = clip["folder"], clip["images"]
    out = clip["root"] / "export"
    argv = ["export", "--model", str(folder), str(images[0].parent), "--out", str(out), "--quiet", "--format", "npy",
            "--precision", "fp32", "--text", "a cat; a red car"]
    assert main(argv) == 0  # default view for prompts: LeGrad, one map per prompt
    names = sorted(p.name for p in out.iterdir() if p.suffix == ".npy")
    assert names == [f"i{i}_legrad_from0_mean_{w}.npy" for i in range(2) for w in ("a-cat", "a-red-car")]
    pp = prompt_pipeline(Pipeline.open(folder), "a cat; a red car")
    for rec, image in zip(_records(out), images):
        assert [(m["view"], m["prompt"]) for m in rec["maps"]] == [("legrad", "a cat"), ("legrad", "a red car")]
        target = rec["target"]
        assert target["kind"] == "prompts" and target["templates"] is None
        r0 = pp.run(load_image(image), target=0)
        for k, entry in enumerate(target["prompts"]):
            assert entry["prompt"] == pp.spec.labels[k]
            assert abs(entry["p"] - float(r0.probabilities[k])) < 1e-5
            assert abs(entry["score"] - float(r0.logits[k])) < 1e-4
        for k, m in enumerate(rec["maps"]):  # each prompt's map is the window's LeGrad map explaining that prompt
            want = _session_map(pp.run(load_image(image), target=k), "legrad")
            np.testing.assert_allclose(np.load(out / m["npy"]), want, rtol=1e-4, atol=1e-6)
    # the same again: every image done; another prompt list into the same folder: refused, naming --text
    capsys.readouterr()
    assert main(argv) == 0 and "0 image(s) to do, 2 already done" in capsys.readouterr().err
    assert main(argv[:-1] + ["a cat; a dog"]) == 2
    err = capsys.readouterr().err
    assert "--text a cat,a red car before, a cat,a dog now" in err and len(err.strip().splitlines()) == 1

    # relevance follows Chefer's CLIP rule (the last layer only); attention views are written once, not per prompt
    out2 = clip["root"] / "export2"
    assert main(["export", "--model", str(folder), str(images[0]), "--out", str(out2), "--quiet", "--format", "both",
                 "--precision", "fp32", "--text", "a cat; a red car",
                 "--views", "relevance,rollout"]) == 0
    (rec,) = _records(out2)
    got = [(m["view"], m.get("prompt"), m["npy"]) for m in rec["maps"]]
    assert got == [("relevance", "a cat", "i0_relevance_from1_a-cat.npy"),
                   ("rollout", None, "i0_rollout_mean_from0.npy"),
                   ("relevance", "a red car", "i0_relevance_from1_a-red-car.npy")]
    r1 = pp.run(load_image(images[0]), target=1)
    np.testing.assert_allclose(np.load(out2 / got[2][2]), _session_map(r1, "relevance", start_layer=1),
                               rtol=1e-4, atol=1e-7)
    assert not np.allclose(_session_map(r1, "relevance", start_layer=1), _session_map(r1, "relevance", start_layer=0))
    assert (out2 / "i0_relevance_from1_a-red-car.png").is_file()


def test_evaluate_takes_relevance_on_clip_prompts_from_the_last_layer(clip):
    pp = prompt_pipeline(Pipeline.open(clip["folder"]), "a cat; a red car")
    image = load_image(clip["images"][0])
    table = vitviz.evaluate.evaluate_views(pp, image, ["relevance"], steps=2, seeds=1, target=1)
    r = pp.run(image, target=1)
    last = r.num_layers - 1
    np.testing.assert_allclose(table.views[0].saliency, _session_map(r, "relevance", start_layer=last), rtol=1e-4,
                               atol=1e-7)
    assert table.label == "a red car" and abs(table.probability - float(r.probabilities[1])) < 1e-6


def test_export_of_siglip_prompts_has_the_neutral_prompt_correction(siglip):
    out = siglip["root"] / "export"
    image = siglip["images"][0]
    assert main(["export", "--model", str(siglip["folder"]), str(image), "--out", str(out), "--quiet", "--format",
                 "npy", "--precision", "fp32", "--text", "a cat; two dogs", "--templates", "photo"]) == 0
    (rec,) = _records(out)
    assert rec["target"]["templates"] == "photo"
    pp = prompt_pipeline(Pipeline.open(siglip["folder"]), "a cat; two dogs", templates="photo")
    for k, m in enumerate(rec["maps"]):
        r = pp.run(load_image(image), target=k)
        assert m["prompt"] == pp.spec.labels[k]
        assert abs(rec["target"]["prompts"][k]["p"] - float(torch.sigmoid(r.logits[k]))) < 1e-5
        np.testing.assert_allclose(np.load(out / m["npy"]), _session_map(r, "legrad"), rtol=1e-4, atol=1e-6)


def test_evaluate_measures_each_prompt_by_its_probability(siglip, capsys):
    image = siglip["images"][0]
    table_csv = siglip["root"] / "auc.csv"
    assert main(["evaluate", str(siglip["folder"]), str(image), "--text", "a cat; two dogs", "--views",
                 "legrad,relevance", "--steps", "3", "--seeds", "2", "--csv", str(table_csv), "--precision",
                 "fp32"]) == 0
    out = capsys.readouterr().out
    assert "target 0 'a cat'" in out and "target 1 'two dogs'" in out
    with table_csv.open() as fh:
        rows = list(csv.DictReader(fh))
    pp = prompt_pipeline(Pipeline.open(siglip["folder"]), "a cat; two dogs")
    for k, prompt in enumerate(pp.spec.labels):
        table = vitviz.evaluate.evaluate_views(pp, load_image(image), ["legrad", "relevance"], steps=3, seeds=2,
                                               target=k)
        mine = {r["view"]: r for r in rows if r["target"] == str(k)}
        assert {r["label"] for r in mine.values()} == {prompt}
        for v in table.views:
            assert abs(float(mine[v.key]["deletion_auc"]) - v.deletion_auc) < 1e-6
        # the curves read the prompt's sigmoid probability (its value on the unperturbed image comes first)
        r = pp.run(load_image(image), target=k)
        assert abs(table.probability - float(torch.sigmoid(r.logits[k]))) < 1e-5
        np.testing.assert_allclose(table.random_deletion.scores[:, 0], table.probability, rtol=1e-4)


def test_the_library_face_has_text_targets_and_prompt_pipelines(clip):
    from vitviz.capture import capture
    from vitviz.capture.targets import Text

    assert vitviz.Text is Text and vitviz.prompt_pipeline is prompt_pipeline
    p = vitviz.Pipeline.open(clip["folder"])
    pp = vitviz.prompt_pipeline(p, "a dog; a red car")
    x, _ = p.spec.preprocess.apply(load_image(clip["images"][1]).image)
    by_text = capture(p.model, x[None], target=vitviz.Text("a red car"))
    by_prompt = capture(pp.model, x[None], target=1)
    torch.testing.assert_close(by_text.attention_grads, by_prompt.attention_grads, rtol=1e-4, atol=1e-6)
    assert by_text.target.name == "a red car"
