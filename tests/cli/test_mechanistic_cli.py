"""``vitviz lens``, ``vitviz ablate`` and ``vitviz patch`` on a random-weight timm [CLS] classifier written as a timm
folder: each CSV's numbers equal references written with hooks on timm's own modules (on the input vitviz's
preprocessing makes of the image files), and bad input is one line."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from mechanistic_references import block_outputs, knockout_reference, patching_reference, timm_folder
from PIL import Image

from vitviz.cli import main
from vitviz.imaging import load_image
from vitviz.pipeline import Pipeline

pytest.importorskip("timm")


@pytest.fixture
def setup(tmp_path):
    ref, folder = timm_folder(tmp_path, "cls")
    rng = np.random.default_rng(0)
    paths = []
    for name in ("a.png", "b.png"):
        p = tmp_path / name
        Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(p)
        paths.append(p)
    pipeline = Pipeline.open(str(folder), precision="fp32")
    xs = [pipeline.prepare(load_image(p)).x[None] for p in paths]
    return ref, folder, paths, xs


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_lens_csv_equals_timm_head_on_each_block_output(setup, tmp_path, capsys):
    ref, folder, (a, _), (x, _) = setup
    out = tmp_path / "lens.csv"
    assert main(["lens", str(folder), str(a), "--top", "3", "--csv", str(out), "--precision", "fp32"]) == 0
    assert "wrote" in capsys.readouterr().err
    rows = _rows(out)
    assert list(rows[0]) == ["layer", "rank", "class", "label", "probability", "logit"] and len(rows) == 9
    with torch.no_grad():
        logits = torch.cat([ref.forward_head(ref.norm(z)) for z in block_outputs(ref, x)])
    probs = logits.softmax(-1)
    for r in rows:
        layer, rank, c = int(r["layer"]), int(r["rank"]), int(r["class"])
        assert c == int(probs[layer].topk(3).indices[rank - 1])
        assert float(r["probability"]) == pytest.approx(float(probs[layer, c]), rel=1e-4)
        assert float(r["logit"]) == pytest.approx(float(logits[layer, c]), rel=1e-4, abs=1e-5)
        assert r["label"] == f"class {c}"


def test_ablate_csv_equals_timm_with_each_head_zeroed(setup, tmp_path, capsys):
    ref, folder, (a, _), (x, _) = setup
    assert main(["ablate", str(folder), str(a), "--target", "5", "--mode", "mean", "--precision", "fp32"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "layer,head,score,delta" and len(lines) == 1 + 9
    want = knockout_reference(ref, x, 5, "mean")
    with torch.no_grad():
        clean = float(ref(x)[0, 5])
    for line in lines[1:]:
        layer, head, score, delta = line.split(",")
        assert float(score) == pytest.approx(float(want[int(layer), int(head)]), rel=1e-4, abs=1e-5)
        assert float(delta) == pytest.approx(float(want[int(layer), int(head)]) - clean, rel=1e-3, abs=1e-4)


def test_patch_csv_equals_timm_with_block_outputs_replaced(setup, tmp_path, capsys):
    ref, folder, (a, b), (xa, xb) = setup
    out = tmp_path / "patch.csv"
    assert main(["patch", str(folder), str(a), str(b), "--target", "1", "--csv", str(out),
                 "--precision", "fp32"]) == 0
    rows = {(int(r["layer"]), r["position"]): float(r["recovered"]) for r in _rows(out)}
    assert len(rows) == 3 * (2 + 16)
    want = patching_reference(ref, xa, xb, 1, [0, slice(None), 1 + 0, 1 + 6])
    for l in range(3):
        for j, pos in enumerate(("cls", "all", "0,0", "1,2")):
            assert rows[(l, pos)] == pytest.approx(float(want[l, j]), abs=2e-4, rel=1e-3)


def test_mechanistic_commands_bad_input_one_line(setup, tmp_path, capsys):
    _, folder, (a, b), _ = setup
    existing = tmp_path / "exists.csv"
    existing.write_text("keep\n")
    cases = [
        (["lens", str(folder), str(tmp_path / "missing.png")], "missing.png"),
        (["lens", str(folder), str(a), "--top", "0"], "--top 0"),
        (["lens", str(folder), str(a), "--target", "99"], "--target 99"),
        (["ablate", str(folder), str(a), "--device", "nowhere:7"], "--device"),
        (["ablate", str(folder), str(a), "--csv", str(existing)], "already exists"),
        (["patch", str(folder), str(a), str(a)], "no difference"),
        (["lens", str(tmp_path / "nomodel"), str(a)], "nomodel"),
    ]
    for argv, words in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        # one line, after at most the command's first line (the model, device and precision, once the inputs are read)
        lines = [line for line in err.strip().splitlines() if " on cpu, auto: " not in line]
        assert words in err and "Traceback" not in err and len(lines) == 1, (argv, err)
    assert existing.read_text() == "keep\n"


def test_lens_of_a_feature_model_prints_the_similarity_per_layer(tmp_path, capsys):
    ref, folder = timm_folder(tmp_path, "map", num_classes=0)
    image = tmp_path / "a.png"
    Image.fromarray(np.random.default_rng(2).integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(image)
    v = np.random.default_rng(3).standard_normal(48).astype(np.float32)
    np.save(tmp_path / "v.npy", v)
    argv = ["lens", str(folder), str(image), "--precision", "fp32"]
    assert main(argv + ["--target", f"similar:{tmp_path / 'v.npy'}"]) == 0
    rows = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    x = Pipeline.open(str(folder), precision="fp32").prepare(load_image(image)).x[None]
    with torch.no_grad():
        emb = torch.cat([ref.forward_head(ref.norm(z)) for z in block_outputs(ref, x)])
    want = torch.nn.functional.cosine_similarity(emb, torch.from_numpy(v)[None], dim=-1)
    assert [int(r["layer"]) for r in rows] == [0, 1, 2] and all(r["class"] == "" for r in rows)
    for r, w in zip(rows, want.tolist()):
        assert float(r["logit"]) == pytest.approx(w, rel=1e-4, abs=1e-5)
    assert main(argv) == 2  # no classifier: the top class is no target
    assert "no classifier" in capsys.readouterr().err
