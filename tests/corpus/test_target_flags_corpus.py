"""The corpus of bad ``--target`` values of ``vitviz export`` and ``vitviz evaluate`` (issue 23): references that
cannot be read, patches outside the grid or not ROW,COL, stored vectors that are not one finite non-zero vector of the
model's embedding size, class targets on a feature model, classes that do not exist.

Every case runs the real command line (in this process) on a tiny feature model (no classifier) or the tiny
classifier of conftest's ``tiny_model`` and has an exact expectation: exit status 2, exactly one stderr line
``vitviz COMMAND: error: --target TEXT: CAUSE`` (the flag, the text as typed and the cause), nothing on stdout (so
the refusal came before any image was analysed), and nothing written or changed under tmp_path (no output folder, no
CSV). Each call is bounded by a timeout (a reference read from a FIFO must not hang the command: it is no file).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from bounded_runs import cli, snapshot
from PIL import Image

from vitviz.model import create_model, save_checkpoint

TIMEOUT_S = 60


@dataclass
class World:
    root: Path
    features: Path  # a feature model (no classifier), embedding size 24, 4x4 patch grid
    classifier: Path  # the tiny classifier: 5 classes (circle, square, star, cross, heart)
    images: Path
    ref: Path  # a readable reference image
    out: Path  # the export's folder (not created)
    csv: Path  # evaluate's CSV (not created)


@pytest.fixture
def world(tmp_path, tiny_model) -> World:
    torch.manual_seed(0)
    f = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=24, depth=2, num_heads=3,
                     num_classes=0).eval()
    features = tmp_path / "features.safetensors"
    save_checkpoint(f, features)
    classifier = tmp_path / "classifier.safetensors"
    save_checkpoint(tiny_model, classifier)
    images = tmp_path / "imgs"
    images.mkdir()
    rng = np.random.default_rng(3)
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(images / f"i{i}.png")
    ref = tmp_path / "ref.png"
    Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(ref)
    refs = tmp_path / "refs"
    refs.mkdir()
    (refs / "broken.png").write_bytes(b"not a png")
    (refs / "text.npy").write_text("0.1 0.2 0.3")
    np.save(refs / "object.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.save(refs / "strings.npy", np.array(["abc"]))
    np.save(refs / "two.npy", np.ones((2, 24), np.float32))
    np.save(refs / "empty.npy", np.zeros(0, np.float32))
    np.save(refs / "nan.npy", np.full(24, np.nan, np.float32))
    np.save(refs / "zero.npy", np.zeros(24, np.float32))
    np.save(refs / "short.npy", np.ones(7, np.float32))
    (refs / "folder.png").mkdir()
    os.mkfifo(refs / "fifo.png")
    return World(tmp_path, features, classifier, images, ref, tmp_path / "out", tmp_path / "auc.csv")






def argv_of(world: World, command: str, model: str, target: str | None) -> list[str]:
    ckpt = str(world.features if model == "features" else world.classifier)
    flag = [] if target is None else ["--target", target]
    if command == "export":
        return ["export", "--model", ckpt, str(world.images), "--out", str(world.out), "--quiet", "--format", "npy",
                "--views", "legrad,gradcam", "--precision", "fp32", *flag]
    return ["evaluate", ckpt, str(world.images), "--steps", "2", "--seeds", "1", "--csv", str(world.csv), *flag]


# (id, model, the --target value ({root}: tmp_path), what the line says after "--target VALUE: ")
CASES = [
    ("missing image", "features", "similar:{root}/nope.png", "reference image {root}/nope.png: no such file"),
    ("a folder", "features", "similar:{root}/refs/folder.png",
     "reference image {root}/refs/folder.png: is a folder, not an image file"),
    ("a fifo", "features", "similar:{root}/refs/fifo.png", "reference image {root}/refs/fifo.png: not a regular file"),
    ("not an image", "features", "similar:{root}/refs/broken.png",
     "reference image: {root}/refs/broken.png: not an image file, or a format vitviz cannot read"),
    ("nothing after similar:", "features", "similar:", "name the reference image or vector after 'similar:'"),
    ("blank after similar:", "features", "similar:   ", "name the reference image or vector after 'similar:'"),
    ("patch outside the grid", "features", "similar:{root}/ref.png@4,0",
     "patch (4, 0) is outside the 4x4 patch grid of ref.png (rows 0..3, columns 0..3)"),
    ("patch column outside", "features", "similar:{root}/ref.png@0,9",
     "patch (0, 9) is outside the 4x4 patch grid of ref.png"),
    ("negative patch", "features", "similar:{root}/ref.png@-1,0",
     "patch (-1, 0) is outside the 4x4 patch grid of ref.png"),
    ("patch not numbers", "features", "similar:{root}/ref.png@a,b",
     "the patch must be ROW,COL (two integers), got 'a,b'"),
    ("patch of three", "features", "similar:{root}/ref.png@1,2,3",
     "the patch must be ROW,COL (two integers), got '1,2,3'"),
    ("patch of one", "features", "similar:{root}/ref.png@1", "the patch must be ROW,COL (two integers), got '1'"),
    ("patch of a missing image", "features", "similar:{root}/nope.png@1,1",
     "reference image {root}/nope.png: no such file"),
    ("missing vector", "features", "similar:{root}/nope.npy", "reference vector {root}/nope.npy: no such file"),
    ("vector with a patch", "features", "similar:{root}/refs/zero.npy@1,1", "a stored vector has no patches"),
    ("text as .npy", "features", "similar:{root}/refs/text.npy",
     "reference vector {root}/refs/text.npy: not a plain .npy array"),
    ("pickled objects", "features", "similar:{root}/refs/object.npy",
     "reference vector {root}/refs/object.npy: not a plain .npy array (not NumPy's format, or pickled objects, "
     "which are never loaded)"),
    ("strings", "features", "similar:{root}/refs/strings.npy",
     "reference vector {root}/refs/strings.npy: holds <U3, not numbers"),
    ("a matrix", "features", "similar:{root}/refs/two.npy",
     "reference vector {root}/refs/two.npy: the reference must be one vector, got shape (2, 24)"),
    ("an empty vector", "features", "similar:{root}/refs/empty.npy",
     "reference vector {root}/refs/empty.npy: the reference must be one vector, got shape (0,)"),
    ("NaN", "features", "similar:{root}/refs/nan.npy",
     "reference vector {root}/refs/nan.npy: the reference vector has NaN or infinite values"),
    ("zero vector", "features", "similar:{root}/refs/zero.npy",
     "reference vector {root}/refs/zero.npy: the reference vector is zero (no direction)"),
    ("vector of another size", "features", "similar:{root}/refs/short.npy",
     "the reference vector has 7 values but the model's pooled embedding has 24"),
    ("a class on a feature model", "features", "2",
     "the model has no classifier (its output is an embedding), so there is no class to explain; give similar:"),
    ("a class name on a feature model", "features", "star", "the model has no classifier"),
    ("class out of range", "classifier", "5", "out of range for a model with 5 classes (valid: 0..4)"),
    ("negative class", "classifier", "-1", "out of range for a model with 5 classes (valid: 0..4)"),
    ("unknown class name", "classifier", "zebra", "no class name contains 'zebra'"),
    ("a vector of another size on a classifier", "classifier", "similar:{root}/refs/short.npy",
     "the reference vector has 7 values but the model's pooled embedding has 32"),
]


@pytest.mark.parametrize("command", ["export", "evaluate"])
@pytest.mark.parametrize("name,model,target,cause", CASES, ids=[c[0] for c in CASES])
def test_a_bad_target_is_one_line_and_writes_nothing(world, capsys, command, name, model, target, cause):
    target = target.format(root=world.root)
    before = snapshot(world.root)
    status, err, out = cli(argv_of(world, command, model, target), capsys, TIMEOUT_S)
    assert status == 2, (status, err)
    assert len(err) == 1, err
    assert err[0].startswith(f"vitviz {command}: error: --target {target.strip()}: "), err[0]
    assert cause.format(root=world.root) in err[0], (cause, err[0])
    assert "Traceback" not in err[0] and out == ""
    assert snapshot(world.root) == before


def test_a_feature_model_without_a_target(world, capsys):
    """evaluate has nothing to read (one line saying which --target to give); export writes the maps it can and the
    gradient views as unavailable, with the reason (tests/cli/test_targets_cli.py)."""
    before = snapshot(world.root)
    status, err, out = cli(argv_of(world, "evaluate", "features", None), capsys, TIMEOUT_S)
    assert status == 2 and len(err) == 1 and out == ""
    assert err[0].startswith("vitviz evaluate: error: ") and "the model has no classifier" in err[0]
    assert "give --target similar:IMAGE, similar:IMAGE@ROW,COL or similar:VECTOR.npy" in err[0]
    assert snapshot(world.root) == before
