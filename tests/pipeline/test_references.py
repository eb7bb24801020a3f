"""Similarity targets from references: an open image, an image file, a patch of one, a stored vector; and the one
reading of a typed target."""

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz.capture.targets import ClassTarget, SimilarityTarget, TargetError
from vitviz.model import create_model
from vitviz.pipeline import Pipeline, parse_target, reference_target, vector_target


def _image(seed=0, h=40, w=40):
    rng = np.random.default_rng(seed)
    return Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8))


@pytest.fixture
def feature_pipeline():
    torch.manual_seed(0)
    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=24, depth=2, num_heads=3,
                     num_classes=0)
    return Pipeline(m.eval())


def test_an_open_images_embedding_is_the_models_output(feature_pipeline, tmp_path):
    p = feature_pipeline
    ref = p.run(_image(1), source=str(tmp_path / "ref.png"))
    t = reference_target(p, ref)
    x, _ = p.spec.preprocess.apply(_image(1))
    with torch.no_grad():
        out = p.model(x[None])[0]
    torch.testing.assert_close(t.vector, out, rtol=1e-5, atol=1e-6)
    assert t.name == "image ref.png" and dict(t.origin)["image"].endswith("ref.png")
    # the same from the file, and a target made from it explains another image: the score is the cosine similarity
    _image(1).save(tmp_path / "ref.png")
    t2 = reference_target(p, tmp_path / "ref.png")
    torch.testing.assert_close(t2.vector, t.vector, rtol=1e-5, atol=1e-6)
    r = p.run(_image(2), target=t)
    with torch.no_grad():
        other = p.model(p.spec.preprocess.apply(_image(2))[0][None])[0]
    assert r.target_score == pytest.approx(float(torch.nn.functional.cosine_similarity(other, out, dim=0)), abs=1e-5)
    assert r.attention_grads is not None and r.target_text() == "similar to image ref.png"


def test_a_patch_reference_is_its_token_through_the_head(feature_pipeline):
    p = feature_pipeline
    ref = p.run(_image(3), source="ref.png")
    t = reference_target(p, ref, patch=(2, 1))
    m = p.model
    token = ref.tokens[-1][m.num_prefix_tokens + 2 * ref.grid[1] + 1]
    with torch.no_grad():
        ref_vec = m.head(m.fc_norm(m.norm(token)))
    torch.testing.assert_close(t.vector, ref_vec, rtol=1e-5, atol=1e-6)
    assert t.name == "patch (2, 1) of ref.png" and dict(t.origin)["patch"] == [2, 1]
    with pytest.raises(TargetError, match=r"patch \(4, 0\) is outside the 4x4 patch grid of ref.png"):
        reference_target(p, ref, patch=(4, 0))


def test_stored_vectors_and_their_problems(tmp_path):
    good = tmp_path / "v.npy"
    np.save(good, np.arange(1, 5, dtype=np.float64))
    t = vector_target(good)
    assert isinstance(t, SimilarityTarget) and t.vector.dtype == torch.float32 and t.name == "vector v.npy"
    np.save(tmp_path / "m.npy", np.ones((2, 3)))
    np.save(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object))
    np.save(tmp_path / "z.npy", np.zeros(3))
    (tmp_path / "t.npy").write_bytes(b"\x93NUMPY garbage")
    for name, message in [("missing.npy", "no such file"), ("m.npy", r"one vector, got shape \(2, 3\)"),
                          ("o.npy", "not a plain .npy array"), ("z.npy", "is zero"),
                          ("t.npy", "cannot be read as .npy|not a plain .npy")]:
        with pytest.raises(TargetError, match=message) as e:
            vector_target(tmp_path / name)
        assert str(tmp_path / name) in str(e.value) and "\n" not in str(e.value)


def test_what_a_user_types_for_a_target(tiny_model, tmp_path):
    p = Pipeline(tiny_model)
    labels = tiny_model.spec.labels
    assert parse_target(p, "top") == ClassTarget(None)
    assert parse_target(p, " 3 ") == ClassTarget(3) and parse_target(p, "Star", labels) == ClassTarget(2)
    _image(4).save(tmp_path / "ref.png")
    t = parse_target(p, f"similar:{tmp_path / 'ref.png'}@1,2")
    assert t.name == "patch (1, 2) of ref.png" and t.vector.shape == (32,)  # a classifier: features before the head
    np.save(tmp_path / "v.npy", np.ones(32))
    assert parse_target(p, f"similar:{tmp_path / 'v.npy'}").name == "vector v.npy"
    for text, message in [("", "the target is empty"), ("9", "target class 9 out of range for a model with 5"),
                          ("dog", "unknown target 'dog'"), ("similar:", "name the reference"),
                          (f"similar:{tmp_path / 'ref.png'}@1", "the patch must be ROW,COL"),
                          (f"similar:{tmp_path / 'nope.png'}", "no such file"),
                          (f"similar:{tmp_path / 'v.npy'}@1,1", "a stored vector has no patches")]:
        with pytest.raises(TargetError, match=message):
            parse_target(p, text, labels)
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(TargetError, match="reference image: .*bad.png"):
        parse_target(p, f"similar:{tmp_path / 'bad.png'}")
