"""Batch export (`vitviz export`, vitviz.batch.export / vitviz.batch.inputs), batched pipeline runs and the "auto"
precision.

The bundled demo model on folders of generated shape images. The maps an export writes are compared with the
library's own: `Pipeline.run` of the same image into a `Session`, `Session.current_map()` (npy) and
`vitviz.document.panel.render_view()` / the window's figure bytes (PNG).
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from kill_points import stopped_when
from PIL import Image
from repo_paths import TINY_WEIGHTS

from vitviz import analysis as A
from vitviz import devices
from vitviz.batch.export import Exporter, export_images
from vitviz.batch.export_options import ExportOptions
from vitviz.batch.export_plan import map_requests, resolve_target
from vitviz.batch.inputs import InputImage, expand_inputs, parse_shard, shard_of, take_shard
from vitviz.batch.manifest import read_manifest
from vitviz.batch.rerun import ResumeMismatch
from vitviz.cli import main
from vitviz.demo import generate, load_demo_model
from vitviz.document import panel
from vitviz.document.session import Session
from vitviz.imaging import load_image
from vitviz.pipeline import Pipeline
from vitviz.render import figures

TINY = TINY_WEIGHTS


# ----------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def demo_model():
    return load_demo_model().eval()


@pytest.fixture(scope="module")
def pipe(demo_model):
    return Pipeline(demo_model, precision="fp32")


def _write_images(folder: Path, n: int, start: int = 0, nested: bool = True) -> list[Path]:
    """``n`` shape images of several sizes (some go through the resize and crop), half of them in a subfolder."""
    paths = []
    for i in range(start, start + n):
        s = generate(i, stream="test", size=(112 + 8 * (i % 3), 112 + 16 * (i % 2)))
        p = folder / ("sub" if nested and i % 2 else "") / f"img{i:02d}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(s.image).save(p)
        paths.append(p)
    return paths


@pytest.fixture
def images(tmp_path):
    folder = tmp_path / "images"
    paths = _write_images(folder, 5)
    return folder, paths


_RESULTS: dict = {}


def _session(pipe, path, **options):
    """A session on ``Pipeline.run`` of ``path`` (run once per pipeline and file) at the window's default options
    changed by ``options``."""
    key = (id(pipe), str(path), Path(path).stat().st_mtime_ns)
    if key not in _RESULTS:
        _RESULTS.clear() if len(_RESULTS) > 64 else None
        _RESULTS[key] = pipe.run(load_image(path), source=str(path))
    s = Session()
    s.set_result(_RESULTS[key])
    s.set_options(**options)
    return s


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.name.startswith("manifest")}


def _records(out: Path) -> dict[str, dict]:
    recs = {}
    for m in sorted(out.glob("manifest*.jsonl")):
        for r in read_manifest(m):
            r = dict(r)
            r.pop("timings")
            recs[r["source"]] = r
    return recs


# ----------------------------------------------------------------------------------------------- batched runs
def test_run_batch_equals_one_image_at_a_time(pipe, images):
    _, paths = images
    loaded = [load_image(p) for p in paths[:3]]
    batch = pipe.run_batch(loaded, sources=[str(p) for p in paths[:3]])
    for im, r in zip(loaded, batch):
        one = pipe.run(im)
        assert r.target == one.target == int(one.logits.argmax())
        torch.testing.assert_close(r.attentions, one.attentions, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(r.attention_grads, one.attention_grads, atol=1e-6, rtol=1e-3)
        rel = [A.relevance(x.attentions, x.attention_grads, grid=x.grid) for x in (r, one)]
        torch.testing.assert_close(rel[0], rel[1], atol=1e-5, rtol=1e-4)
        assert r.geometry == one.geometry and np.array_equal(r.rgb, one.rgb)
    # forward only: no gradients, no target; a fixed target for every image
    fwd = pipe.run_batch(loaded, gradients=False)
    assert all(r.attention_grads is None and r.target is None for r in fwd)
    torch.testing.assert_close(fwd[1].attentions, batch[1].attentions)
    fixed = pipe.run_batch(loaded, target=4)
    assert [r.target for r in fixed] == [4, 4, 4]
    with pytest.raises(ValueError, match="out of range"):
        pipe.run_batch(loaded, target=99)


# ----------------------------------------------------------------------------------------------- the maps
def test_exported_maps_are_the_window_maps(pipe, images, tmp_path):
    """Batch size 1: the very computation of the window (Pipeline.run is run_batch of one image), so npy and PNG are
    equal to the session's map and export, byte for byte for the PNG figure."""
    folder, paths = images
    out = tmp_path / "out"
    opts = ExportOptions(views=("cls", "rollout", "relevance", "token_norm", "pos_sim"), layers=("0", "last"),
                         heads=("mean", "1"), format="both", batch_size=1, precision="fp32", quiet=True)
    summary = export_images(pipe, [str(folder)], out, opts, model_ref="demo")
    assert (summary.written, summary.failed) == (5, 0)
    records = _records(out)
    checked = 0
    for p in paths:
        rec = records[str(p)]
        assert rec["status"] == "ok"
        # views x the layers / heads each reads: cls 2 x 2, rollout 1, relevance 1, token_norm 2, pos_sim 1
        assert [m["view"] for m in rec["maps"]] == ["cls"] * 4 + ["rollout", "relevance"] + ["token_norm"] * 2 + [
            "pos_sim"]
        for m in rec["maps"]:
            changes = {k: m[k] for k in ("layer", "head") if k in m}
            if "query" in m:
                changes["query"] = m["query"][0] * 14 + m["query"][1]
            s = _session(pipe, p, view=m["view"], **changes)
            want = s.current_map()
            got = np.load(out / m["npy"])
            assert got.dtype == np.float32 and got.shape == (14, 14)
            assert np.array_equal(got, want), (p, m)
            with Image.open(out / m["png"]) as im:
                png = np.asarray(im.convert("RGB"))
            assert np.array_equal(png, panel.render_view(s)), (p, m)
            data, _ = figures.encode(panel.view_figure(s), ".png", scale="native")
            assert (out / m["png"]).read_bytes() == data
            checked += 1
    assert checked == 5 * 9
    # the files mirror the input folders; the names are the window's export names
    assert (out / "sub" / "img01_cls_L3_mean.png").is_file() and (out / "img00_relevance_from0_circle.npy").is_file()


def test_batched_export_matches_single_images_to_round_off(pipe, images, tmp_path):
    folder, paths = images
    out = tmp_path / "out"
    opts = ExportOptions(views=("cls", "grad_rollout"), format="npy", batch_size=4, precision="fp32", quiet=True)
    export_images(pipe, [str(folder)], out, opts)
    for p in paths:
        rec = _records(out)[str(p)]
        for m in rec["maps"]:
            s = _session(pipe, p, view=m["view"], **{k: m[k] for k in ("layer", "head") if k in m})
            np.testing.assert_allclose(np.load(out / m["npy"]), s.current_map(), rtol=1e-4, atol=1e-6)


def test_manifest_lines(pipe, images, tmp_path):
    folder, paths = images
    out = tmp_path / "out"
    export_images(pipe, [str(folder)], out, ExportOptions(views=("rollout", "relevance"), quiet=True,
                                                           precision="fp32"))
    recs = read_manifest(out / "manifest.jsonl")
    assert sorted(r["source"] for r in recs) == sorted(map(str, paths))
    r = next(r for r in recs if r["source"] == str(paths[1]))
    with Image.open(paths[1]) as im:
        w, h = im.size
    assert r["size"] == [w, h] and r["grid"] == [14, 14] and r["precision"] == "fp32"
    s = _session(pipe, paths[1])
    top = s.result.top_k(5)
    assert [(p["class"], p["label"]) for p in r["predictions"]] == [(c, lab) for c, lab, _ in top]
    assert r["predictions"][0]["p"] == pytest.approx(top[0][2], abs=1e-6)
    assert r["target"] == {"kind": "class", "name": top[0][1], "class": top[0][0], "label": top[0][1]}
    assert r["files"] == ["sub/img01_rollout_mean_from0.png", f"sub/img01_relevance_from0_{top[0][1]}.png"]
    assert set(r["timings"]) == {"load_s", "compute_s", "write_s"} and "error" not in r
    assert r["output"] == "sub/img01"


def test_unavailable_view_is_noted_not_failed(tmp_path):
    """A model without a classifier: the gradient views are unavailable; the image still succeeds."""
    from vitviz.model import create_model

    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                     num_classes=0).eval()
    img = tmp_path / "x.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 40, 3), np.uint8)).save(img)
    out = tmp_path / "out"
    s = export_images(Pipeline(m), [str(img)], out, ExportOptions(views=("cls", "relevance"), quiet=True))
    assert s.written == 1 and s.failed == 0
    rec = read_manifest(out / "manifest.jsonl")[0]
    assert rec["maps"][1]["view"] == "relevance" and "png" not in rec["maps"][1]
    why = rec["maps"][1]["unavailable"]  # the view's own reason (vitviz.views), whatever its wording
    assert "no classifier" in why and "gradient" in why
    assert rec["target"] is None and rec["predictions"] == []


# ----------------------------------------------------------------------------------------------- failures, resume
def test_corrupt_image_is_logged_and_skipped(pipe, images, tmp_path, capsys):
    folder, paths = images
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)  # a PNG signature, then nothing
    (folder / "sub" / "empty.jpg").write_bytes(b"")
    out = tmp_path / "out"
    status = main(["export", "--model", "demo", str(folder), "--out", str(out), "--views", "cls", "--precision",
                   "fp32", "--quiet"])
    assert status == 64 + 2
    recs = {r["source"]: r for r in read_manifest(out / "manifest.jsonl")}
    assert len(recs) == 7
    for bad in (folder / "broken.png", folder / "sub" / "empty.jpg"):
        r = recs[str(bad)]
        assert r["status"] == "error" and str(bad) in r["error"] and r["files"] == []
    assert "file is empty" in recs[str(folder / "sub" / "empty.jpg")]["error"]
    assert all(recs[str(p)]["status"] == "ok" for p in paths)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert sum("error:" in line for line in err.splitlines()) == 2
    assert "5 image(s) written" in err and "2 failed" in err


class _Interrupting:
    """A pipeline whose ``calls``-th batch raises KeyboardInterrupt (Ctrl+C while the model runs)."""

    def __init__(self, pipe, at: int | None):
        self.pipe, self.at, self.calls, self.sources = pipe, at, 0, []

    def __getattr__(self, name):
        return getattr(self.pipe, name)

    def run_batch(self, images, **kw):
        self.calls += 1
        if self.at is not None and self.calls == self.at:
            raise KeyboardInterrupt
        self.sources += list(kw.get("sources") or [])
        return self.pipe.run_batch(images, **kw)


def test_resume_after_ctrl_c_redoes_nothing_finished(pipe, tmp_path):
    folder = tmp_path / "images"
    paths = _write_images(folder, 9)
    out = tmp_path / "out"
    opts = ExportOptions(views=("cls", "rollout"), format="both", batch_size=2, precision="fp32", quiet=True)
    first = _Interrupting(pipe, at=3)
    s1 = Exporter(first, opts, out, model_ref="demo", log=lambda _: None).run(expand_inputs([str(folder)])[0])
    assert s1.interrupted and s1.exit_status == 130
    done = {r["source"] for r in read_manifest(out / "manifest.jsonl")}
    # the writer finished the image in hand and stopped; batches computed but not started are not "finished"
    assert done and done <= set(first.sources) and len(first.sources) == 4
    files = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()
             and not p.name.startswith("manifest")}
    assert len(files) == len(done) * 4 and not list(out.rglob("*.tmp"))  # complete files only, no temporary left
    assert not list(out.glob(".*.pending"))  # the image being written was finished: nothing is pending
    second = _Interrupting(pipe, at=None)
    s2 = Exporter(second, opts, out, model_ref="demo", log=lambda _: None).run(expand_inputs([str(folder)])[0])
    assert (s2.skipped, s2.written, s2.failed) == (len(done), 9 - len(done), 0)
    assert set(second.sources) == set(map(str, paths)) - done  # nothing finished was computed again
    for p, (mtime, data) in files.items():
        assert p.stat().st_mtime_ns == mtime and p.read_bytes() == data
    assert len(read_manifest(out / "manifest.jsonl")) == 9
    # another request (other views) stops before any work, saying what changed; --overwrite redoes every image and
    # keeps the files of the views not asked for again
    other = replace(opts, views=("cls", "relevance"))
    with pytest.raises(ResumeMismatch, match=r"\): --views cls,rollout before, cls,relevance now; pass --overwrite"):
        Exporter(pipe, other, out, model_ref="demo", log=lambda _: None).run(expand_inputs([str(folder)])[0])
    s3 = Exporter(pipe, replace(other, overwrite=True), out, model_ref="demo",
                  log=lambda _: None).run(expand_inputs([str(folder)])[0])
    assert (s3.skipped, s3.written) == (0, 9)
    assert all(p.is_file() for p in files)


def test_kill_9_loses_no_finished_image_and_leaves_no_partial_file(tmp_path):
    """A real ``kill -9`` in the middle of a run, then the same command again."""
    folder = tmp_path / "images"
    paths = _write_images(folder, 12, nested=False)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "vitviz", "export", "--model", "demo", str(folder), "--out", str(out), "--format",
           "both", "--batch-size", "2", "--precision", "fp32", "--quiet"]
    manifest = out / "manifest.jsonl"
    # stopped by itself at its first write once the manifest holds the run line and 3 images (no polling, no clock),
    # then killed there: in the middle of the run, whatever the machine's load
    proc = stopped_when(cmd[3:], manifest, lines=4)
    try:
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL  # killed in the middle, not finished
    lines = manifest.read_text().splitlines()
    finished = [r for x in lines if x.endswith("}") and "source" in (r := json.loads(x))]
    assert 3 <= len(finished) < 12
    for r in finished:  # every image in the manifest has all its files, complete
        for f in r["files"]:
            data = (out / f).read_bytes()
            if f.endswith(".npy"):
                assert np.load(io.BytesIO(data)).shape == (14, 14)
            else:
                with Image.open(io.BytesIO(data)) as im:
                    im.load()
    before = {f: (out / f).stat().st_mtime_ns for r in finished for f in r["files"]}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert f"{len(finished)} already done" in r.stderr
    assert f"took over the lock of an export that is gone (pid {proc.pid}" in r.stderr  # the killed run's lock
    recs = _records(out)
    assert sorted(recs) == sorted(map(str, paths)) and all(x["status"] == "ok" for x in recs.values())
    assert not list(out.rglob("*.tmp")) and not list(out.glob(".*.pending"))
    for f, mtime in before.items():
        assert (out / f).stat().st_mtime_ns == mtime  # finished images were not redone
    assert len(_files(out)) == 12 * 4 * 2


def test_existing_file_of_someone_else_is_never_replaced(pipe, images, tmp_path):
    folder, paths = images
    out = tmp_path / "out"
    out.mkdir()
    mine = out / "img00_cls_L3_mean.png"
    mine.write_bytes(b"my own figure")
    opts = ExportOptions(views=("cls",), quiet=True, precision="fp32")
    s = export_images(pipe, [str(folder)], out, opts)
    assert (s.written, s.failed) == (4, 1) and s.exit_status == 65
    assert mine.read_bytes() == b"my own figure"
    rec = _records(out)[str(paths[0])]
    assert rec["status"] == "error" and "already exists and was not written by this export" in rec["error"]
    s = export_images(pipe, [str(folder)], out, replace(opts, overwrite=True))
    assert (s.written, s.failed, s.skipped) == (5, 0, 0)
    assert mine.read_bytes().startswith(b"\x89PNG")


def test_read_only_or_impossible_output_folder(pipe, images, tmp_path, monkeypatch, capsys):
    folder, _ = images
    ro = tmp_path / "readonly"
    ro.mkdir()
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # root writes anyway: refuse where the file is created
        import tempfile

        real = tempfile.mkstemp

        def mkstemp(*a, dir=None, **k):
            if dir is not None and Path(dir) == ro:
                raise PermissionError(13, "Permission denied")
            return real(*a, dir=dir, **k)

        monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    else:
        ro.chmod(0o555)
    try:
        assert main(["export", "--model", "demo", str(folder), "--out", str(ro), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(ro) in err and "not writable" in err
        assert "permission denied" in err.lower()
        assert list(ro.iterdir()) == []
        a_file = tmp_path / "file.txt"
        a_file.write_text("x")
        assert main(["export", "--model", "demo", str(folder), "--out", str(a_file), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "must be a folder" in err
        assert a_file.read_text() == "x"
    finally:
        ro.chmod(0o755)


# ----------------------------------------------------------------------------------------------- shards
def test_shards_union_to_the_single_run(pipe, tmp_path):
    folder = tmp_path / "images"
    _write_images(folder, 10)
    opts = ExportOptions(views=("cls", "relevance"), format="both", batch_size=1, precision="fp32", quiet=True)
    single = tmp_path / "single"
    export_images(pipe, [str(folder)], single, opts)
    sharded = tmp_path / "sharded"
    seen: list[set[str]] = []
    for k in (1, 2, 3):
        s = export_images(pipe, [str(folder)], sharded, replace(opts, shard=(k, 3)))
        seen.append({r["source"] for r in read_manifest(sharded / f"manifest-{k}-of-3.jsonl")})
        assert s.total == len(seen[-1])
    assert not (sharded / "manifest.jsonl").exists()
    assert sum(map(len, seen)) == 10 and len(set().union(*seen)) == 10  # disjoint, and every image in one
    assert _files(sharded) == _files(single)
    assert _records(sharded) == _records(single)


def test_shard_assignment_is_deterministic():
    ims = [InputImage(f"/data/x{i}.png", f"cls{i % 7}/x{i}") for i in range(300)]
    parts = [take_shard(ims, k, 4) for k in range(1, 5)]
    assert sorted(im.rel for p in parts for im in p) == sorted(im.rel for im in ims)
    assert min(map(len, parts)) > 40  # roughly even
    shuffled = ims[:]
    random.Random(1).shuffle(shuffled)
    moved = [InputImage("/mnt/elsewhere" + im.path, im.rel) for im in shuffled]  # another mount point
    for k in range(1, 5):
        assert {im.rel for im in take_shard(moved, k, 4)} == {im.rel for im in parts[k - 1]}
    assert all(1 <= shard_of(im, 4) <= 4 for im in ims)
    assert parse_shard("2/8") == (2, 8)
    for bad in ("0/3", "4/3", "x", "1/0", "2"):
        with pytest.raises(ValueError, match="--shard"):
            parse_shard(bad)


# ----------------------------------------------------------------------------------------------- inputs
def test_inputs_files_folders_globs_and_lists(tmp_path):
    a = tmp_path / "a"
    (a / "deep" / ".hidden").mkdir(parents=True)
    for rel in ("x.png", "x.jpg", "deep/y.png", "deep/.hidden/z.png", ".dot.png", "notes.md"):
        (a / rel).write_bytes(b"1")
    b = tmp_path / "b"
    b.mkdir()
    (b / "x.png").write_bytes(b"1")
    lst = tmp_path / "list.txt"
    lst.write_text("# images\n\nb/x.png\n" + str(a / "deep" / "y.png") + "\n")
    ims, problems = expand_inputs([str(a), str(tmp_path / "b" / "*.png"), str(lst), str(tmp_path / "none*.png"),
                                   str(tmp_path / "empty.lst")])
    # a folder: its files, then its subfolders', named below it; two inputs named alike get their type, then -2
    assert [(Path(i.path).relative_to(tmp_path).as_posix(), i.rel) for i in ims] == [
        ("a/x.jpg", "x-jpg"), ("a/x.png", "x-png"), ("a/deep/y.png", "deep/y"), ("b/x.png", "x-png-2")]
    assert [p for _, p in problems] == [f"no files match {tmp_path / 'none*.png'}",
                                        f"{tmp_path / 'empty.lst'}: list of images does not exist"]
    # a list on its own keeps its folder structure
    ims, _ = expand_inputs(["@" + str(lst)])
    assert [i.rel for i in ims] == ["b/x", "y"]


# ----------------------------------------------------------------------------------------------- targets, plans
def test_target_by_name_and_index(tmp_path, capsys):
    folder = tmp_path / "images"
    paths = _write_images(folder, 3, nested=False)
    for target, cls, label in (("star", 3, "star"), ("4", 4, "cross"), ("HEXA", 6, "hexagon")):
        out = tmp_path / f"out-{target}"
        assert main(["export", "--model", "demo", str(folder), "--out", str(out), "--views", "relevance,cls",
                     "--target", target, "--precision", "fp32", "--quiet"]) == 0
        for r in read_manifest(out / "manifest.jsonl"):
            assert r["target"] == {"kind": "class", "name": label, "class": cls, "label": label}
            assert f"img00_relevance_from0_{label}.png" in r["files"] or not r["source"].endswith("img00.png")
        assert len(list(out.glob(f"*_relevance_from0_{label}.png"))) == len(paths)
    labels = ("circle", "square", "triangle", "star", "cross", "ring", "hexagon", "heart")
    assert resolve_target("top", labels, 8) is None and resolve_target("Ring", labels, 8) == 5
    assert resolve_target("tabby", ("tabby, tabby cat", "tiger cat"), 2) == 0
    with pytest.raises(ValueError, match="2 classes match"):
        resolve_target("cat", ("tabby, tabby cat", "tiger cat"), 2)


@pytest.mark.parametrize("extra,needle", [
    (["--target", "r"], "classes match"),
    (["--target", "dragon"], "no class name contains 'dragon'"),
    (["--target", "8"], "out of range for a model with 8 classes"),
    (["--shard", "4/3"], "--shard 4/3: K must be between 1 and N"),
    (["--shard", "half"], "expected K/N"),
    (["--views", "cls,nosuch"], "--views nosuch: unknown view"),
    (["--layers", "9"], "--layers 9: the model has 4 layers"),
    (["--layers", "middle"], "--layers middle: expected a layer index"),
    (["--heads", "2"], "--heads 2: the model has 2 heads"),
    (["--query", "20,3"], "outside the model's 14x14 patch grid"),
    (["--query", "x"], "expected ROW,COL"),
    (["--batch-size", "0"], "--batch-size 0: must be at least 1"),
    (["--precision", "fp16"], "--precision fp16: not available on cpu"),
    (["--device", "cuda:7"], "--device cuda:7: not available here"),
    (["--scale", "huge"], "scale"),
    (["--cmap", "rainbowish"], "unknown colormap"),
    (["--format", "gif"], "invalid choice: 'gif'"),
    (["--model", "no_such_model"], "no_such_model"),
])
def test_bad_arguments_are_one_line_errors(tmp_path, extra, needle, capsys):
    folder = tmp_path / "images"
    _write_images(folder, 1, nested=False)
    args = ["export", "--model", "demo", str(folder), "--out", str(tmp_path / "out"), "--quiet"]
    if extra[0] == "--model":
        args[2] = extra[1]
        extra = []
    try:
        status = main(args + extra)
    except SystemExit as e:  # argparse's own errors
        status = e.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_missing_inputs_and_options(tmp_path, capsys):
    assert main(["export", "--model", "demo", str(tmp_path / "nothing*.png"), "--out", str(tmp_path / "o")]) == 2
    assert "no files match" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["export", "--model", "demo", str(tmp_path)])
    assert e.value.code == 2 and "--out" in capsys.readouterr().err


def test_map_requests_follow_what_each_view_reads(pipe, images):
    _, paths = images
    r = pipe.run(load_image(paths[0]))
    opts = ExportOptions(views=("cls", "token_norm", "rollout", "query"), layers=("all",), heads=("mean", "all"))
    reqs = map_requests(r, opts)
    count = {}
    for key, _changes in reqs:
        count[key] = count.get(key, 0) + 1
    assert count == {"cls": 4 * 3, "token_norm": 5, "rollout": 1, "query": 4 * 3}  # token_norm: emb + 4 blocks
    assert all(c["query"] == 7 * 14 + 7 for _, c in reqs)  # the centre patch by default


# ----------------------------------------------------------------------------------------------- streaming
def test_memory_follows_the_batch_not_the_dataset(pipe, tmp_path, monkeypatch):
    """The results alive at once are bounded by three batches (one computed, one queued, one being written), whatever
    the number of images. The writer is held on its first image until the computing side has handed over its third
    batch (or the end), so the worst case happens on every run, whatever the machine's load: the peak is exactly
    that bound, not a race between the threads."""
    folder = tmp_path / "images"
    _write_images(folder, 16, nested=False)
    peaks = []
    for n in (4, 16):
        items = expand_inputs([str(folder)])[0][:n]
        ex = Exporter(pipe, ExportOptions(views=("cls",), format="npy", batch_size=2, precision="fp32", quiet=True),
                      tmp_path / f"out{n}", log=lambda _: None)
        handed, third = [0], threading.Event()
        put, write_one = ex._put, ex._write_one

        def counted_put(jobs, item, force=False, put=put, handed=handed, third=third):
            handed[0] += 1
            if handed[0] == 3:
                third.set()
            put(jobs, item, force)

        def held_write(job, write_one=write_one, third=third):
            assert third.wait(60), "the computing side never handed over a third batch"
            return write_one(job)

        monkeypatch.setattr(ex, "_put", counted_put)
        monkeypatch.setattr(ex, "_write_one", held_write)
        s = ex.run(items)
        assert s.written == n
        peaks.append(s.peak_live_results)
    assert peaks == [2 * 2, 3 * 2]  # 4 images: both batches; 16 images: three batches of 2, not 16


def test_progress_bar_shows_rate_and_eta(pipe, images, tmp_path, capsys):
    folder, _ = images
    assert main(["export", "--model", "demo", str(folder), "--out", str(tmp_path / "o"), "--views", "cls",
                 "--format", "npy"]) == 0
    err = capsys.readouterr().err
    assert "image/s" in err and "5/5" in err and "<00:00" in err  # rate and time left
    assert "auto: " in err  # the precision chosen is printed
    assert main(["export", "--model", "demo", str(folder), "--out", str(tmp_path / "q"), "--views", "cls",
                 "--format", "npy", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "image/s" not in err.replace("images/s", "") and "1 view(s)" in err


# ----------------------------------------------------------------------------------------------- auto precision
def test_cpu_flags_are_read_from_cpuinfo():
    x86 = "processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16 amx_tile\n\nprocessor\t: 1\nflags\t: fpu\n"
    assert {"avx512_bf16", "avx512f", "amx_tile"} <= devices.cpu_flags(x86)
    arm = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"
    assert "bf16" in devices.cpu_flags(arm)
    assert devices.cpu_flags("") == frozenset()


@pytest.mark.parametrize("flags,expected", [
    ({"avx512f", "avx512_bf16"}, "bf16"),
    ({"avx512f", "amx_bf16", "amx_tile"}, "bf16"),
    ({"fp", "asimd", "bf16"}, "bf16"),
    ({"avx2", "avx512f", "avx512_vnni"}, "fp32"),  # AVX-512 without BF16: emulated, slower than fp32
    ({"fp", "asimd"}, "fp32"),
])
def test_auto_precision_follows_the_cpu_probe(flags, expected, monkeypatch):
    monkeypatch.delenv("VITVIZ_CPU_BF16", raising=False)
    monkeypatch.setattr(devices, "cpu_flags", lambda cpuinfo=None: frozenset(flags))
    devices.cpu_has_native_bf16.cache_clear()
    try:
        assert devices.cpu_has_native_bf16() is (expected == "bf16")
        assert devices.resolve_precision("auto", "cpu") == expected
        reason = devices.precision_reason("auto", "cpu")
        assert reason.startswith(f"auto: {expected} (")
        assert ("AVX-512 BF16" in reason) == ("avx512_bf16" in flags)
        assert devices.resolve_precision("fp32", "cpu") == "fp32" and devices.resolve_precision("bf16") == "bf16"
    finally:
        devices.cpu_has_native_bf16.cache_clear()


def test_auto_precision_without_cpuinfo_asks_torch_and_the_override(monkeypatch):
    monkeypatch.setattr(devices, "cpu_flags", lambda cpuinfo=None: frozenset())
    monkeypatch.setattr(devices.sys, "platform", "linux")
    for answer in (True, False):
        monkeypatch.setattr(devices, "_torch_cpu_bf16", lambda a=answer: a)
        devices.cpu_has_native_bf16.cache_clear()
        assert devices.resolve_precision("auto", "cpu") == ("bf16" if answer else "fp32")
    monkeypatch.setenv("VITVIZ_CPU_BF16", "0")
    monkeypatch.setattr(devices, "cpu_flags", lambda cpuinfo=None: frozenset({"avx512_bf16"}))
    devices.cpu_has_native_bf16.cache_clear()
    assert devices.resolve_precision("auto", "cpu") == "fp32"
    devices.cpu_has_native_bf16.cache_clear()
    with pytest.raises(ValueError, match="precision must be one of auto, fp32, bf16, fp16"):
        devices.resolve_precision("fp8")


def test_auto_precision_on_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for cap, expected in (((8, 0), "bf16"), ((9, 0), "bf16"), ((7, 5), "fp32"), ((6, 1), "fp32")):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0, c=cap: c)
        assert devices.resolve_precision("auto", "cuda:0") == expected
        assert devices.resolve_precision("auto", "cuda") == expected
    assert devices.resolve_precision("auto", "mps") == "fp32"


def test_pipeline_auto_precision(demo_model, monkeypatch):
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: False)
    p = Pipeline(load_demo_model(), precision="auto")
    assert (p.precision, p.precision_choice) == ("fp32", "auto")
    assert next(p.model.parameters()).dtype == torch.float32
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: True)
    p = Pipeline(load_demo_model(), precision="auto")
    assert p.precision == "bf16" and next(p.model.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="precision must be one of auto, fp32, bf16, fp16"):
        Pipeline(load_demo_model(), precision="fp64")


# ------------------------------------------------------------------------------------------ bf16 vs fp32, real weights
BF16_VIEWS = ("cls", "rollout", "grad_rollout", "relevance", "token_norm")


@pytest.mark.real_weights
@pytest.mark.skipif(not TINY.is_file(), reason=f"real weights not present at {TINY}")
def test_bf16_maps_rank_patches_as_fp32_on_real_photos(capsys):
    """ViT-Ti/16 (augreg) on scikit-image's four photos: top-1 agreement and the Spearman rank correlation of every
    view's map between bf16 and fp32 (docs/benchmarks.md quotes these numbers)."""
    skimage_data = pytest.importorskip("skimage.data")
    from vitviz.evaluate import spearman  # average ranks for ties (bf16 maps have some)
    from vitviz.model import load_checkpoint

    pipes = {p: Pipeline(load_checkpoint(TINY), precision=p) for p in ("fp32", "bf16")}
    agree, rho = 0, {v: [] for v in BF16_VIEWS}
    names = ("chelsea", "coffee", "astronaut", "rocket")
    for name in names:
        img = Image.fromarray(getattr(skimage_data, name)()).convert("RGB")
        res = {p: pipe.run(img, source=name) for p, pipe in pipes.items()}
        top = {p: int(r.logits.argmax()) for p, r in res.items()}
        agree += top["fp32"] == top["bf16"]
        for v in BF16_VIEWS:
            # both precisions explain the fp32 top class, so the maps answer the same question
            maps = {}
            for p in pipes:
                r = res[p] if res[p].target == top["fp32"] else pipes[p].run(img, source=name, target=top["fp32"])
                s = Session()
                s.set_result(r)
                s.set_options(view=v, layer=11)
                maps[p] = s.current_map()
            rho[v].append(spearman(maps["fp32"], maps["bf16"]))
    with capsys.disabled():
        print(f"\nbf16 vs fp32, ViT-Ti/16 on {', '.join(names)}: top-1 agreement {agree}/4; Spearman per view "
              + ", ".join(f"{v} {np.mean(r):.4f} (min {np.min(r):.4f})" for v, r in rho.items()))
    assert agree == 4
    for v, r in rho.items():
        assert min(r) >= 0.98, (v, r)
