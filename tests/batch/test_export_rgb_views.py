"""``vitviz export --views feature_pca --format npy`` writes all three components (issue 35 item 3): the npy is the
``[gh, gw, 3]`` R, G, B the PNG draws (``Session.rgb_map``), equal to the library's PCA of the same image's tokens and
to an SVD written here with numpy; the streamed and the stored routes write the same array."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz import analysis as A
from vitviz.batch.manifest import read_manifest
from vitviz.cli import main
from vitviz.demo import generate, load_demo_model
from vitviz.document.session import Session
from vitviz.imaging import load_image
from vitviz.pipeline import Pipeline


@pytest.fixture(scope="module")
def pipe():
    return Pipeline(load_demo_model().eval(), precision="fp32")


@pytest.fixture
def photos(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(2):
        Image.fromarray(generate(i, stream="test", size=(112 + 16 * i, 128)).image).save(folder / f"img{i}.png")
    return folder


def numpy_pca_colours(tokens: np.ndarray) -> np.ndarray:
    """DINO's feature PCA written out: centre the patch tokens, SVD, the first three projections min-max scaled to
    [0, 1] per component (``[n, 3]``; a component's sign is the SVD's own choice)."""
    x = tokens.astype(np.float64)
    x = x - x.mean(0)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    proj = x @ vt[:3].T
    return (proj - proj.min(0)) / (proj.max(0) - proj.min(0))


def test_feature_pca_npy_holds_the_three_components_the_png_draws(pipe, photos, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export", "--model", "demo", str(photos), "--out", str(out), "--views", "feature_pca", "--layers",
                 "0,last", "--format", "both", "--precision", "fp32", "--quiet"]) == 0
    records = [r for r in read_manifest(out / "manifest.jsonl") if "source" in r]
    assert len(records) == 2
    for rec in records:
        r = pipe.run(load_image(rec["source"]), source=rec["source"])
        gh, gw = r.grid
        assert [m["layer"] for m in rec["maps"]] == [0, r.num_layers - 1]
        for m in rec["maps"]:
            got = np.load(out / m["npy"])
            assert got.dtype == np.float32 and got.shape == (gh, gw, 3), got.shape
            tokens = r.tokens[m["layer"] + 1].float()
            if m["layer"] == r.num_layers - 1:  # the last layer: the tokens after the model's final norm (the demos')
                with torch.no_grad():
                    tokens = pipe.model.norm(tokens)
            lib = A.feature_pca(tokens, grid=r.grid, num_prefix_tokens=r.num_prefix_tokens)
            np.testing.assert_allclose(got, lib.rgb.numpy(), atol=1e-6)  # the library's PCA of the same tokens
            s = Session()
            s.set_result(r)
            s.set_options(view="feature_pca", layer=m["layer"])
            np.testing.assert_allclose(got, s.rgb_map()[..., :3], atol=1e-6)  # what the PNG draws, before drawing
            assert np.ptp(got.reshape(-1, 3), axis=0).min() > 0.99  # three components, each spread over [0, 1]
            # independent: numpy's SVD (a component's sign may differ: then its colour is 1 - c)
            ref = numpy_pca_colours(tokens[r.num_prefix_tokens:].numpy()).reshape(gh, gw, 3)
            for c in range(3):
                same, flipped = np.abs(got[..., c] - ref[..., c]).max(), np.abs(got[..., c] - (1 - ref[..., c])).max()
                assert min(same, flipped) < 1e-4, (m, c, same, flipped)
            assert (out / m["png"]).is_file()


def test_the_streamed_and_the_stored_route_write_the_same_three_components(pipe, photos, tmp_path):
    from vitviz.batch.export import Exporter
    from vitviz.batch.export_options import ExportOptions
    from vitviz.batch.inputs import expand_inputs

    arrays = {}
    for streaming in (None, False):
        out = tmp_path / f"out-{streaming}"
        options = ExportOptions(views=("feature_pca",), layers=("all",), format="npy", batch_size=2,
                                precision="fp32", quiet=True)
        lines: list[str] = []
        summary = Exporter(pipe, options, out, log=lines.append, streaming=streaming).run(
            expand_inputs([str(photos)])[0])
        assert summary.failed == 0
        assert ("(streamed passes)" if streaming is None else "(stored passes)") in lines[0], lines[0]
        arrays[streaming] = {p.name: np.load(p) for p in sorted(out.glob("*.npy"))}
    assert arrays[None].keys() == arrays[False].keys()
    assert len(arrays[None]) == 2 * (pipe.model.spec.config.depth + 1)  # two images, every layer and the embeddings
    for name, a in arrays[None].items():
        assert a.shape[-1] == 3
        torch.testing.assert_close(torch.from_numpy(a), torch.from_numpy(arrays[False][name]), atol=1e-5, rtol=1e-5)
