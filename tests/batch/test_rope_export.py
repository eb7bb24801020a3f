"""``vitviz export`` on a DINOv3 read from timm's layout (RoPE, 4 registers, a feature model with a similarity target
to another image): the streamed route writes the stored route's maps (LeGrad, relevance, GradCAM, feature PCA, the
RoPE views ...)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from family_helpers import randomise_, write_timm_folder
from PIL import Image

from vitviz.batch.export import Exporter
from vitviz.batch.export_options import ExportOptions
from vitviz.batch.inputs import expand_inputs
from vitviz.batch.manifest import read_manifest
from vitviz.model import load_checkpoint
from vitviz.pipeline import Pipeline

timm = pytest.importorskip("timm")

VIEWS = ("cls", "query", "rollout", "relevance", "legrad", "gradcam", "token_sim", "pos_sim", "rope_sim",
         "feature_pca")


def _export(pipe, folder, out, streaming, target):
    lines: list[str] = []
    options = ExportOptions(views=VIEWS, layers=("all",), heads=("mean", "1"), format="npy", batch_size=2,
                            precision="fp32", quiet=True, target=target)
    s = Exporter(pipe, options, out, log=lines.append, streaming=streaming).run(
        expand_inputs([str(folder)])[0])
    assert s.failed == 0, s.failures
    return {r["source"]: r for r in read_manifest(out / "manifest.jsonl") if "source" in r}, lines


def test_streamed_export_of_a_dinov3_folder_equals_the_stored_one(tmp_path):
    torch.manual_seed(0)
    ref = randomise_(timm.create_model("vit_small_plus_patch16_dinov3", pretrained=False, num_classes=0,
                                       img_size=32, embed_dim=32, depth=2, num_heads=2))
    model = load_checkpoint(write_timm_folder(tmp_path / "dinov3", ref, "vit_small_plus_patch16_dinov3",
                                              {"input_size": [3, 32, 32]}))
    pipe = Pipeline(model)
    folder = tmp_path / "in"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(3):
        Image.fromarray((rng.random((40, 48, 3)) * 255).astype(np.uint8)).save(folder / f"im{i}.png")
    target = f"similar:{folder / 'im0.png'}"  # a feature model: its gradient views explain a similarity
    streamed, lines = _export(pipe, folder, tmp_path / "streamed", None, target)
    assert "(streamed passes)" in lines[0]
    stored, lines = _export(pipe, folder, tmp_path / "stored", False, target)
    assert "(stored passes)" in lines[0]
    assert streamed.keys() == stored.keys() and len(streamed) == 3
    written = set()
    for src, rec in streamed.items():
        for m, w in zip(rec["maps"], stored[src]["maps"]):
            assert {k: v for k, v in m.items() if k != "npy"} == {k: v for k, v in w.items() if k != "npy"}
            if "npy" in m:
                written.add(m["view"])
                np.testing.assert_allclose(np.load(tmp_path / "streamed" / m["npy"]),
                                           np.load(tmp_path / "stored" / w["npy"]), rtol=1e-5, atol=1e-6,
                                           err_msg=str(m))
    assert {"legrad", "relevance", "feature_pca", "pos_sim", "rope_sim"} <= written
