"""Non-square patch grids (SigLIP 2 NaFlex keeps each image's aspect ratio: a 40 x 100 photo is a 2 x 5 grid) in
every view, the heads grid, the figures and the streamed export; the [CLS]-based views of this attention-pool model
read the pool query's row and say so in the caption (the same mechanism as SigLIP 1's). The model is a tiny vitviz
ViT shaped as NaFlex (tests/family_helpers.naflex_model); that the shape equals transformers' own is
tests/model/test_families_siglip2.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from family_helpers import naflex_model
from PIL import Image

from vitviz import views
from vitviz.capture.targets import SimilarityTarget
from vitviz.document import panel as P
from vitviz.document.session import Session
from vitviz.pipeline import Pipeline, run_inference
from vitviz.render import figures as F

GRID = (2, 5)


def photo(h: int = 40, w: int = 100, seed: int = 0) -> Image.Image:
    return Image.fromarray((np.random.default_rng(seed).random((h, w, 3)) * 255).astype(np.uint8))


@pytest.fixture(scope="module")
def session():
    model = naflex_model()
    with torch.no_grad():
        target = SimilarityTarget(torch.randn(32), "a vector")
    s = Session()
    s.set_result(run_inference(model, photo(), source="wide.png", target=target))
    return s


def test_every_view_draws_the_non_square_grid(session):
    r = session.result
    assert r.grid == GRID and r.num_prefix_tokens == 0 and r.pool_attention is not None
    drawn = []
    for v in views.all_views():
        session.set_options(view=v.key)
        m = session.current_map()
        if m is None and v.key in ("rope_sim", "logit_lens"):  # this model has no RoPE and no classifier: said so
            assert session.unavailable_reason(), v.key
            continue
        assert m is not None, (v.key, session.unavailable_reason())
        assert m.shape[:2] == GRID, (v.key, m.shape)
        assert np.isfinite(m).all(), v.key
        drawn.append(v.key)
    assert {"cls", "rollout", "relevance", "legrad", "gradcam", "feature_pca", "pos_sim"} <= set(drawn)


def test_cls_views_read_the_pool_query_and_say_so(session):
    r = session.result
    session.set_options(view="cls", head="mean")
    want = r.pool_attention.float().mean(0).reshape(GRID).numpy()  # the pooling query's row over the patches
    np.testing.assert_allclose(session.current_map(), want, rtol=1e-6)
    assert "attention-pooling query's row" in session.caption()
    session.set_options(view="rollout", head="mean", start_layer=0)
    assert "pooling head's query as the [CLS] row" in session.caption()
    # rollout from the pool query, written out: q = mean_h(pool row); A_l = rownorm(mean_h(attn_l) + I)
    q = r.pool_attention.double().mean(0)
    for layer in reversed(range(r.num_layers)):
        a = r.attentions[layer].double().mean(0) + torch.eye(q.shape[0], dtype=torch.double)
        q = q @ (a / a.sum(-1, keepdim=True))
    got = session.current_map()
    np.testing.assert_allclose(got / got.sum(), (q / q.sum()).reshape(GRID).numpy(), rtol=1e-4)


def test_heads_grid_and_figures_of_a_non_square_grid(session, tmp_path):
    session.set_options(view="cls", layer=1)
    grid = P.heads_of(session)
    assert grid.maps.shape == (1, 4, *GRID) and grid.pool_row
    spec = P.heads_figure(session, all_layers=True)
    assert (spec.nrows, spec.ncols) == (3, 4)
    out = F.save(spec, tmp_path / "heads.png")
    with Image.open(out) as im:
        assert im.size[0] > 0
    view = P.view_figure(session)
    out = F.save(view, tmp_path / "view.png")
    with Image.open(out) as im:  # the figure keeps the photo's 100:40 aspect
        w, h = im.size
        assert w > 1.5 * h


def test_streamed_export_of_photos_of_several_aspect_ratios(tmp_path):
    from vitviz.batch.export import Exporter
    from vitviz.batch.export_options import ExportOptions
    from vitviz.batch.inputs import expand_inputs
    from vitviz.batch.manifest import read_manifest

    folder = tmp_path / "in"
    folder.mkdir()
    for i, (h, w) in enumerate([(40, 100), (100, 40), (64, 64)]):
        photo(h, w, i).save(folder / f"im{i}.png")
    pipe = Pipeline(naflex_model())
    records = {}
    for route in (None, False):  # streamed, stored
        out = tmp_path / f"out-{route}"
        lines: list[str] = []
        options = ExportOptions(views=("cls", "rollout", "token_norm", "feature_pca"), layers=("last",),
                                heads=("mean",), format="npy", batch_size=3, precision="fp32", quiet=True)
        s = Exporter(pipe, options, out, log=lines.append, streaming=route).run(expand_inputs([str(folder)])[0])
        assert s.failed == 0, s.failures
        assert ("(streamed passes)" if route is None else "(stored passes)") in lines[0]
        records[route] = {r["source"]: [np.load(out / m["npy"]) for m in r["maps"]]
                          for r in read_manifest(out / "manifest.jsonl") if "source" in r}
    grids = {}
    for src, maps in records[None].items():
        grids[src.rsplit("/", 1)[-1]] = maps[0].shape
        for a, b in zip(maps, records[False][src]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert grids == {"im0.png": (2, 5), "im1.png": (5, 2), "im2.png": (4, 4)}
