"""Batch jobs on streamed passes (vitviz.batch.batch_passes): ``vitviz export`` writes the stored route's maps from
streamed passes on every model family, ``evaluate`` and ``stats`` read the same numbers, the batch size follows the
memory available (fewer images at once when the estimate says so, half as many after an out-of-memory error, each
said once), and a model or view that cannot be streamed takes the stored route with a note."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from family_helpers import families
from PIL import Image

import vitviz.capture.streaming.budget as budget
import vitviz.document.streamed.batches as streamed_batches
from vitviz.batch.batch_passes import BatchPasses, result_of
from vitviz.batch.export import Exporter
from vitviz.batch.export_options import ExportOptions
from vitviz.batch.inputs import expand_inputs
from vitviz.batch.manifest import read_manifest
from vitviz.batch.stats import StatsAccumulator
from vitviz.document.streamed import NotStreamable, StreamedImage
from vitviz.evaluate.run import evaluate_views
from vitviz.model import create_model
from vitviz.pipeline import Pipeline

FAMILIES = families("cls", "map", "registers", "distilled", "avg", "dinov3")
VIEWS = ("cls", "query", "rollout", "grad_rollout", "relevance", "legrad", "gradcam", "token_sim", "token_norm",
         "pos_sim", "feature_pca")


def _pipe(family: str = "cls") -> Pipeline:
    torch.manual_seed(0)
    kw = dict(img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=4, num_classes=5)
    kw.update(FAMILIES[family])
    m = create_model("vit_tiny_patch16_224", **kw).eval()
    with torch.no_grad():
        for b in m.blocks:
            b.attn.qkv.weight.mul_(10.0)
    m.spec = m.spec.replace(labels=("circle", "square", "star", "cross", "heart"), name=f"tiny {family}")
    return Pipeline(m)


def _images(folder: Path, n: int = 4) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for i in range(n):
        Image.fromarray((rng.random((40 + 8 * (i % 2), 48, 3)) * 255).astype(np.uint8)).save(folder / f"im{i}.png")
    return folder


def _export(pipe, folder, out, streaming, **opts) -> tuple[dict, list[str]]:
    lines: list[str] = []
    options = ExportOptions(**{"views": VIEWS, "layers": ("all",), "heads": ("mean", "1"), "format": "npy",
                               "batch_size": 3, "precision": "fp32", "quiet": True, **opts})
    ex = Exporter(pipe, options, out, log=lines.append, streaming=streaming)
    s = ex.run(expand_inputs([str(folder)])[0])
    assert s.failed == 0, s.failures
    recs = {}
    for r in read_manifest(out / "manifest.jsonl"):
        if "source" in r:
            r = dict(r)
            r.pop("timings")
            recs[r["source"]] = r
    return recs, lines


@pytest.mark.parametrize("family", list(FAMILIES))
def test_streamed_export_writes_the_stored_routes_maps(family, tmp_path):
    pipe = _pipe(family)
    folder = _images(tmp_path / "in")
    streamed, lines = _export(pipe, folder, tmp_path / "streamed", None)
    assert "(streamed passes)" in lines[0]
    stored, lines = _export(pipe, folder, tmp_path / "stored", False)
    assert "(stored passes)" in lines[0]
    assert streamed.keys() == stored.keys()
    for src, rec in streamed.items():
        want = stored[src]
        assert {k: v for k, v in rec.items() if k != "maps"} == {k: v for k, v in want.items() if k != "maps"}
        assert [{k: v for k, v in m.items() if k != "npy"} for m in rec["maps"]] == [
            {k: v for k, v in m.items() if k != "npy"} for m in want["maps"]]
        for m, w in zip(rec["maps"], want["maps"]):
            if "npy" in m:
                np.testing.assert_allclose(np.load(tmp_path / "streamed" / m["npy"]),
                                           np.load(tmp_path / "stored" / w["npy"]), rtol=1e-5, atol=1e-6,
                                           err_msg=f"{family} {m}")


def test_streamed_png_and_animations_are_the_stored_ones(tmp_path):
    pipe = _pipe("registers")
    folder = _images(tmp_path / "in", 2)
    kw = dict(views=("cls", "rollout", "feature_pca"), layers=("last",), format="png", animate="gif")
    streamed, _ = _export(pipe, folder, tmp_path / "a", None, **kw)
    stored, _ = _export(pipe, folder, tmp_path / "b", False, **kw)
    assert streamed == stored
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.gif"))
    assert len(files) == 2 * 4  # cls (mean, head 1), rollout, feature PCA
    for f in files:  # the frames: the same maps drawn the same way (the stored path is bit-equal on one image)
        with Image.open(tmp_path / "a" / f) as a, Image.open(tmp_path / "b" / f) as b:
            assert a.n_frames == b.n_frames
            diff = np.abs(np.asarray(a.convert("RGB"), np.int16) - np.asarray(b.convert("RGB"), np.int16))
        assert diff.mean() < 0.5


def test_batch_size_follows_the_memory_available(tmp_path, monkeypatch):
    """A batch that would not fit is split, said once; the maps are those of the full batches."""
    pipe = _pipe("cls")
    folder = _images(tmp_path / "in", 5)
    want, _ = _export(pipe, folder, tmp_path / "full", None, views=("rollout", "relevance"), batch_size=5)
    x = pipe.prepare(Image.open(folder / "im0.png")).x
    per = budget.pass_bytes(pipe.model, tuple(pipe.model.patch_embed.check_input(x[None])), 1, gradients=True)
    monkeypatch.setattr(budget, "available_memory", lambda device="cpu": int(2.2 * per / budget.FILL))
    sizes: list[int] = []
    real = streamed_batches.stream_pass
    monkeypatch.setattr(streamed_batches, "stream_pass",
                        lambda m, x, *a, **k: (sizes.append(int(x.shape[0])), real(m, x, *a, **k))[1])
    got, lines = _export(pipe, folder, tmp_path / "fit", None, views=("rollout", "relevance"), batch_size=5)
    assert max(sizes) == 2 and sum(sizes) == 5
    notes = [ln for ln in lines if "note:" in ln]
    assert len(notes) == 1 and "batches of 2" in notes[0] and "GiB is available" in notes[0]
    for src, rec in got.items():
        for m, w in zip(rec["maps"], want[src]["maps"]):
            np.testing.assert_allclose(np.load(tmp_path / "fit" / m["npy"]), np.load(tmp_path / "full" / w["npy"]),
                                       rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("streaming", [None, False])
def test_out_of_memory_halves_the_batch_and_says_so_once(tmp_path, monkeypatch, streaming):
    pipe = _pipe("cls")
    folder = _images(tmp_path / "in", 5)
    error = RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
    sizes: list[int] = []
    if streaming is None:
        real = streamed_batches.stream_pass

        def limited(m, x, *a, **k):
            sizes.append(int(x.shape[0]))
            if x.shape[0] > 2:
                raise error
            return real(m, x, *a, **k)

        monkeypatch.setattr(streamed_batches, "stream_pass", limited)
    else:
        real_run = Pipeline.run_batch

        def limited_run(self, images, **k):
            sizes.append(len(images))
            if len(images) > 2:
                raise error
            return real_run(self, images, **k)

        monkeypatch.setattr(Pipeline, "run_batch", limited_run)
    got, lines = _export(pipe, folder, tmp_path / "o", streaming, views=("cls", "relevance"), batch_size=5)
    assert len(got) == 5 and all(r["status"] == "ok" for r in got.values())
    notes = [ln for ln in lines if "note:" in ln]
    assert len(notes) == 1 and "out of memory with 5 image(s)" in notes[0] and "2 at a time" in notes[0], lines
    assert sizes[0] == 5 and max(sizes[1:]) == 2


def test_a_model_that_cannot_be_streamed_takes_the_stored_route(tmp_path):
    import torchvision

    torch.manual_seed(0)
    tv = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16,
                                              mlp_dim=16, num_classes=4).eval()
    pipe = Pipeline.open(tv, adapt_options={"input_size": 32})
    passes = BatchPasses(pipe, batch_size=2)
    assert passes.route == "stored"
    with pytest.raises(NotStreamable, match="not vitviz's own ViT"):
        BatchPasses(pipe, batch_size=2, streaming=True)
    folder = _images(tmp_path / "in", 2)
    recs, lines = _export(pipe, folder, tmp_path / "o", None, views=("cls", "rollout"), layers=("last",))
    assert "(stored passes)" in lines[0] and len(recs) == 2


def test_a_view_without_streamed_form_switches_to_the_stored_route_once(tmp_path):
    from vitviz import views
    from vitviz.views.base import View, as_grid

    class Middle(View):
        key = "middle_row"
        title = "middle row"
        reads = frozenset({"layer"})

        def compute(self, result, options):
            return as_grid(result.attentions[options.layer].mean(0)[result.num_prefix_tokens + 1,
                                                                    result.num_prefix_tokens:], result.grid)

    views.register(Middle())
    try:
        pipe = _pipe("cls")
        folder = _images(tmp_path / "in", 4)
        recs, lines = _export(pipe, folder, tmp_path / "o", None, views=("middle_row", "cls"), batch_size=2)
        notes = [ln for ln in lines if "note:" in ln]
        assert len(notes) == 1 and "'middle_row' has no streamed form" in notes[0]
        assert len(recs) == 4 and all(r["status"] == "ok" for r in recs.values())
    finally:
        views.unregister("middle_row")


def test_evaluate_streams_and_gives_the_stored_table():
    pipe = _pipe("cls")
    photo = Image.fromarray((np.random.default_rng(3).random((40, 40, 3)) * 255).astype(np.uint8))
    names = ("cls_last", "rollout", "grad_rollout", "relevance", "legrad")
    streamed = evaluate_views(pipe, photo, names, steps=4, seeds=2)
    stored = evaluate_views(pipe, pipe.run(photo), names, steps=4, seeds=2)
    for a, b in zip(streamed.views, stored.views):
        assert a.key == b.key and a.saliency is not None
        np.testing.assert_allclose(a.saliency, b.saliency, rtol=1e-5, atol=1e-7)
        assert a.deletion.auc == pytest.approx(b.deletion.auc, abs=1e-6)
        assert a.insertion.auc == pytest.approx(b.insertion.auc, abs=1e-6)


def test_stats_from_streamed_passes_equal_the_stored_route():
    pipe = _pipe("map")
    photos = [Image.fromarray((np.random.default_rng(i).random((40, 40, 3)) * 255).astype(np.uint8))
              for i in range(3)]
    prepared = [pipe.prepare(p) for p in photos]
    accs = []
    for streaming in (None, False):
        passes = BatchPasses(pipe, batch_size=2, gradients=False, statistics=True, streaming=streaming)
        acc = StatsAccumulator()
        for item in passes.run(prepared, ["a", "b", "c"]):
            assert isinstance(item, StreamedImage) == (streaming is None)
            assert result_of(item).source in ("a", "b", "c")
            acc.add(passes.session(item))
        accs.append(acc.stats())
    a, b = accs
    np.testing.assert_allclose(a.distance_mean, b.distance_mean, rtol=1e-6)
    np.testing.assert_allclose(a.entropy_mean, b.entropy_mean, rtol=1e-6)
    np.testing.assert_allclose(a.distance_sd, b.distance_sd, rtol=1e-4, atol=1e-5)
    assert np.array_equal(a.artefact_frequency, b.artefact_frequency) and a.images == b.images == 3


def test_manifest_is_route_independent_json(tmp_path):
    pipe = _pipe("cls")
    folder = _images(tmp_path / "in", 1)
    _export(pipe, folder, tmp_path / "o", None, views=("cls",))
    lines = (tmp_path / "o" / "manifest.jsonl").read_text().splitlines()
    assert all(json.loads(ln) for ln in lines)


@pytest.mark.parametrize("keep", [True, False, None])
def test_evaluate_hands_its_backward_mode_to_the_streamed_pass(keep, monkeypatch):
    import vitviz.evaluate.run as run

    seen = []
    real = run.stream_images

    def spy(*a, **k):
        seen.append(k.get("keep_graph", "missing"))
        return real(*a, **k)

    monkeypatch.setattr(run, "stream_images", spy)
    photo = Image.fromarray((np.random.default_rng(3).random((40, 40, 3)) * 255).astype(np.uint8))
    table = evaluate_views(_pipe("cls"), photo, ("relevance",), steps=2, seeds=1, keep_graph=keep)
    assert seen == [keep] and table.views[0].saliency is not None


@pytest.mark.parametrize("keep", [True, False, None])
def test_prompt_passes_say_the_backward_mode_of_the_passes_they_repeat(keep):
    from vitviz.batch.prompt_passes import PromptPasses

    passes = BatchPasses(_pipe("cls"), batch_size=2, keep_graph=keep)
    wrapped = PromptPasses(passes, 3)
    assert wrapped.keep_graph is keep and wrapped.route == passes.route == "streamed"
