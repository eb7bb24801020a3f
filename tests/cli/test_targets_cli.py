"""``--target`` of ``vitviz export`` and ``vitviz evaluate`` (issue 23): every form parse_target reads (top, a class
index or name, similar:IMAGE, similar:IMAGE@ROW,COL, similar:VECTOR.npy); the export's file names and manifest name
the target; a feature model's gradient views are written with a similarity target and unavailable (with the reason)
without one; evaluate's curves follow the similarity. Bad targets: tests/corpus/test_target_flags_corpus.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz.cli import main
from vitviz.model import create_model, save_checkpoint
from vitviz.pipeline import Pipeline, reference_target


def _photo(path: Path, seed: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(path)
    return path


@pytest.fixture
def feature_ckpt(tmp_path):
    torch.manual_seed(0)
    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=24, depth=2, num_heads=3,
                     num_classes=0).eval()
    path = tmp_path / "features.safetensors"
    save_checkpoint(m, path)
    return path


@pytest.fixture
def class_ckpt(tmp_path, tiny_model):
    path = tmp_path / "tiny.safetensors"
    save_checkpoint(tiny_model, path)
    return path


def _records(out: Path) -> list[dict]:
    lines = [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]
    return [r for r in lines if "source" in r]


def _export(ckpt: Path, images: Path, out: Path, *extra: str) -> list[str]:
    return ["export", "--model", str(ckpt), str(images), "--out", str(out), "--quiet", "--format", "npy",
            "--precision", "fp32", *extra]


def test_export_a_feature_model_with_and_without_a_similarity_target(feature_ckpt, tmp_path, capsys):
    images = tmp_path / "imgs"
    for i in range(2):
        _photo(images / f"i{i}.png", i)
    ref = _photo(tmp_path / "ref.png", 7)
    views = "legrad,gradcam,relevance,rollout"
    # without a target: the gradient views are unavailable, with the reason; rollout is written
    out0 = tmp_path / "plain"
    assert main(_export(feature_ckpt, images, out0, "--views", views)) == 0
    for r in _records(out0):
        assert r["target"] is None and r["status"] == "ok"
        maps = {m["view"]: m for m in r["maps"]}
        for k in ("legrad", "gradcam", "relevance"):
            assert "similarity target" in maps[k]["unavailable"] and "npy" not in maps[k]
        assert "npy" in maps["rollout"]
    # with one: every gradient view written, the files and the manifest naming the target
    out1 = tmp_path / "similar"
    assert main(_export(feature_ckpt, images, out1, "--views", views, "--target", f"similar:{ref}")) == 0
    records = _records(out1)
    assert len(records) == 2
    for r in records:
        t = r["target"]
        assert t["kind"] == "similarity" and t["name"] == "similar to image ref.png"
        assert t["origin"] == {"image": str(ref)} and -1.0 <= t["score"] <= 1.0
        maps = {m["view"]: m for m in r["maps"]}
        for k in ("legrad", "gradcam", "relevance"):
            assert "unavailable" not in maps[k]
            assert "similar-to-image-ref-png" in maps[k]["npy"]
            assert np.isfinite(np.load(out1 / maps[k]["npy"])).all()
        assert "similar" not in maps["rollout"]["npy"]  # a view without a target does not name one
    # the score is the cosine similarity of the two images' embeddings
    from vitviz.model import load_checkpoint

    pipe = Pipeline(load_checkpoint(feature_ckpt).eval())
    x, _ = pipe.spec.preprocess.apply(Image.open(images / "i0.png").convert("RGB"))
    xr, _ = pipe.spec.preprocess.apply(Image.open(ref).convert("RGB"))
    with torch.no_grad():
        cos = torch.nn.functional.cosine_similarity(pipe.model(x[None]), pipe.model(xr[None]))[0]
    assert records[0]["target"]["score"] == pytest.approx(float(cos), abs=1e-4)
    # a rerun with another reference is refused (the maps were made for this one)
    other = _photo(tmp_path / "other" / "ref.png", 8)  # the same name, other pixels: another vector
    capsys.readouterr()
    assert main(_export(feature_ckpt, images, out1, "--views", views, "--target", f"similar:{other}")) == 2
    err = capsys.readouterr().err
    assert "other settings" in err and "target" in err


def test_export_a_patch_and_a_vector_target(feature_ckpt, tmp_path):
    images = tmp_path / "imgs"
    _photo(images / "a.png", 0)
    ref = _photo(tmp_path / "ref.png", 7)
    out = tmp_path / "patch"
    assert main(_export(feature_ckpt, images, out, "--views", "legrad", "--target", f"similar:{ref}@1,2")) == 0
    (r,) = _records(out)
    assert r["target"]["name"] == "similar to patch (1, 2) of ref.png"
    assert r["target"]["origin"] == {"image": str(ref), "patch": [1, 2]}
    assert "similar-to-patch-1-2-of-ref-png" in r["maps"][0]["npy"]
    from vitviz.model import load_checkpoint

    pipe = Pipeline(load_checkpoint(feature_ckpt).eval())
    vec = tmp_path / "v.npy"
    np.save(vec, reference_target(pipe, ref).vector.numpy()[None])  # [1, E] is one vector too
    out = tmp_path / "vector"
    assert main(_export(feature_ckpt, images, out, "--views", "gradcam", "--target", f"similar:{vec}")) == 0
    (r,) = _records(out)
    assert r["target"]["name"] == "similar to vector v.npy" and r["target"]["origin"] == {"vector": str(vec)}
    assert "unavailable" not in r["maps"][0]


def test_export_class_targets_name_the_class(class_ckpt, tmp_path):
    images = tmp_path / "imgs"
    _photo(images / "a.png", 0)
    out = tmp_path / "cls"
    assert main(_export(class_ckpt, images, out, "--views", "legrad,gradcam", "--target", "star")) == 0
    (r,) = _records(out)
    assert r["target"] == {"kind": "class", "name": "star", "class": 2, "label": "star"}
    assert all(m["npy"].endswith("_star.npy") for m in r["maps"])


def test_evaluate_a_feature_model_with_a_similarity_target(feature_ckpt, tmp_path, capsys):
    img = _photo(tmp_path / "a.png", 0)
    ref = _photo(tmp_path / "ref.png", 7)
    csv = tmp_path / "auc.csv"
    argv = ["evaluate", str(feature_ckpt), str(img), "--steps", "3", "--seeds", "2", "--target", f"similar:{ref}",
            "--csv", str(csv)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "target similar to image ref.png (similarity = " in out
    for key in ("cls_last", "rollout", "grad_rollout", "relevance", "legrad", "gradcam"):
        line = next(x for x in out.splitlines() if x.strip().startswith(key + " "))
        assert "-" not in line.split(key, 1)[1].split()[0]  # a number, not "-" (unavailable)
    rows = csv.read_text().splitlines()
    assert rows[1].split(",")[1:3] == ["", "similar to image ref.png"]


def test_evaluate_class_name_and_top(class_ckpt, tmp_path, capsys):
    img = _photo(tmp_path / "a.png", 0)
    assert main(["evaluate", str(class_ckpt), str(img), "--steps", "2", "--seeds", "1", "--views", "legrad",
                 "--target", "Star"]) == 0
    assert "target 2 'star' (p = " in capsys.readouterr().out
    assert main(["evaluate", str(class_ckpt), str(img), "--steps", "2", "--seeds", "1", "--views", "gradcam",
                 "--target", "top"]) == 0
    assert "(p = " in capsys.readouterr().out
