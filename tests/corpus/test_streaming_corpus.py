"""The corpus of bad inputs of the streamed passes and the batch machinery around them: the library calls
(:func:`vitviz.capture.streaming.stream_pass`, :func:`vitviz.document.streamed.stream_images`, the layer-by-layer
analyses, :class:`vitviz.batch.export.Exporter`'s reading threads, the batch-size policy) and the GPU benchmark's
command line. Each case has one exact expectation: the error type, one line that names the argument and the cause,
nothing written, and an end within its time limit."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from PIL import Image
from repo_paths import REPO

from vitviz.analysis.layerwise import ReverseProduct
from vitviz.batch.export import Exporter
from vitviz.batch.export_options import ExportOptions
from vitviz.batch.inputs import InputImage, stream_batches
from vitviz.capture import CaptureError
from vitviz.capture.streaming import stream_pass
from vitviz.document.streamed import BatchSizer, NotStreamable, stream_images
from vitviz.pipeline import Pipeline


@dataclass(frozen=True)
class Call:
    name: str
    call: Callable[[dict], object]  # given {"model", "pipe", "tmp"}
    error: type[BaseException]
    needles: tuple[str, ...]


def _photo() -> Image.Image:
    return Image.fromarray((np.random.default_rng(0).random((40, 40, 3)) * 255).astype(np.uint8))


CALLS = [
    Call("pass: one image, not a batch", lambda w: stream_pass(w["model"], torch.randn(3, 32, 32)), ValueError,
         ("batch [B, C, H, W]", "one image", "images[None]")),
    Call("pass: an empty batch", lambda w: stream_pass(w["model"], torch.randn(0, 3, 32, 32)), ValueError,
         ("empty batch",)),
    Call("pass: not a tensor", lambda w: stream_pass(w["model"], np.zeros((1, 3, 32, 32))), ValueError,
         ("torch.Tensor", "ndarray")),
    Call("pass: wrong channels", lambda w: stream_pass(w["model"], torch.randn(1, 1, 32, 32)), ValueError,
         ("1 channels", "in_channels=3")),
    Call("pass: a side not a multiple of the patch", lambda w: stream_pass(w["model"], torch.randn(1, 3, 30, 32)),
         ValueError, ("height 30", "patch_size=8", "24 or 32")),
    Call("pass: a class out of range", lambda w: stream_pass(w["model"], torch.randn(1, 3, 32, 32), target=9),
         ValueError, ("[9]", "5 classes", "0..4")),
    Call("pass: a word for a target", lambda w: stream_pass(w["model"], torch.randn(1, 3, 32, 32), target="cat"),
         ValueError, ("'cat'",)),
    Call("pass: an unknown LeGrad pooling",
         lambda w: stream_pass(w["model"], torch.randn(1, 3, 32, 32), target=1, legrad=("max",)), ValueError,
         ("legrad poolings", "'max'")),
    Call("pass: not vitviz's ViT", lambda w: stream_pass(torch.nn.Linear(3, 3), torch.randn(1, 3, 32, 32)),
         CaptureError, ("cannot stream", "Linear", "not vitviz's own ViT")),
    Call("images: sources of another length",
         lambda w: stream_images(w["pipe"], [_photo()], sources=["a", "b"]), ValueError, ("2 sources", "1 images")),
    Call("images: targets of another length",
         lambda w: stream_images(w["pipe"], [_photo(), _photo()], target=[1, 2, 3]), ValueError,
         ("3 targets", "2 images")),
    Call("images: a target for some images only",
         lambda w: stream_images(w["pipe"], [_photo(), _photo()], target=[1, None]), ValueError,
         ("every image", "or for none")),
    Call("product: an unknown kind",
         lambda w: ReverseProduct("lrp", num_layers=3, num_prefix_tokens=1), ValueError, ("kind='lrp'", "rollout")),
    Call("product: relevance from the forward",
         lambda w: ReverseProduct("relevance", num_layers=3, num_prefix_tokens=1, from_forward=True), ValueError,
         ("relevance", "gradients")),
    Call("product: no start layer",
         lambda w: ReverseProduct("rollout", num_layers=3, num_prefix_tokens=1, starts=()), ValueError,
         ("start layer",)),
    Call("product: an unknown fusion",
         lambda w: ReverseProduct("rollout", num_layers=3, num_prefix_tokens=1, head_fusion="median"), ValueError,
         ("head_fusion='median'",)),
    Call("sizer: batch 0", lambda w: BatchSizer(0), ValueError, ("batch size", "at least 1", "0")),
    Call("loader: 0 workers",
         lambda w: list(stream_batches(w["pipe"], [InputImage(str(w["tmp"] / "x.png"), "x")], 2, workers=0)),
         ValueError, ("workers", "at least 1", "0")),
    Call("loader: batch 0", lambda w: list(stream_batches(w["pipe"], [], 0)), ValueError, ("batch size", "0")),
    Call("export: 0 workers",
         lambda w: Exporter(w["pipe"], ExportOptions(views=("cls",)), w["tmp"] / "out", workers=0), ValueError,
         ("workers", "at least 1", "0")),
    Call("export: workers True",
         lambda w: Exporter(w["pipe"], ExportOptions(views=("cls",)), w["tmp"] / "out", workers=True), ValueError,
         ("workers", "True")),
    Call("export: streaming insisted on for a module that cannot be",
         lambda w: Exporter(w["adapted"], ExportOptions(views=("cls",)), w["tmp"] / "out", streaming=True),
         NotStreamable, ("not vitviz's own ViT",)),
]


@pytest.fixture
def world(tmp_path, tiny_model):
    import torchvision

    torch.manual_seed(0)
    tv = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=8,
                                              mlp_dim=8, num_classes=3).eval()
    return {"model": tiny_model, "pipe": Pipeline(tiny_model), "tmp": tmp_path,
            "adapted": Pipeline.open(tv, adapt_options={"input_size": 32})}


def _in_thread(fn: Callable[[], object], limit: float = 60.0) -> BaseException | None:
    """What ``fn`` raised (None: nothing), run in a thread that must end within ``limit`` seconds (no hang)."""
    caught: list[BaseException] = []

    def run():
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            caught.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"still running after {limit} s"
    return caught[0] if caught else None


@pytest.mark.parametrize("case", CALLS, ids=[c.name for c in CALLS])
def test_library_calls_refuse_with_one_line_naming_the_cause(case, world, tmp_path):
    before = sorted(p.name for p in tmp_path.iterdir())
    error = _in_thread(lambda: case.call(world))
    assert isinstance(error, case.error), repr(error)
    text = str(error)
    assert "\n" not in text.strip(), text
    for needle in case.needles:
        assert needle in text, (needle, text)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


BENCH_CASES = [
    (["--only", "speed"], 2, ("--only speed", "unknown part", "latency")),
    (["--precisions", "fp64"], 2, ("--precisions fp64", "fp32, bf16, fp16")),
    ([], 1, ("needs a CUDA device", "torch.cuda.is_available() is False", "--device cpu")),
]


@pytest.mark.parametrize("argv,status,needles", BENCH_CASES, ids=["bad part", "bad precision", "no GPU"])
def test_gpu_bench_arguments_and_a_machine_without_gpu(argv, status, needles):
    if not argv and torch.cuda.is_available():
        pytest.skip("a GPU is here: the no-GPU line cannot be seen")
    r = subprocess.run([sys.executable, str(REPO / "bench" / "gpu.py"), *argv], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert r.returncode == status, r.stderr
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip() and not ln.startswith("usage:")]
    assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "Traceback" not in r.stderr and r.stdout == ""
