"""Targets in session files (vitviz.document.state, vitviz.document.target_choice): each kind saved and reopened
(a class, similar to an image, to a patch of one, to a stored vector; a function saved by its name only), the
reference files found like the images, and a target made again for a model."""

import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz.capture.targets import CallableTarget, ClassTarget, SimilarityTarget, TargetError, Text
from vitviz.document import state as st
from vitviz.document.session import Session
from vitviz.document.target_choice import TargetChoice, as_choice, choice_of
from vitviz.imaging import load_image


def _photo(path, seed, h=60, w=80):
    rng = np.random.default_rng(seed)
    Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)).save(path)
    return str(path)


def _make_project(folder, model, feature):
    from vitviz.model import save_checkpoint
    from vitviz.pipeline import Pipeline

    folder.mkdir()
    ckpt = save_checkpoint(model, folder / "m.safetensors")
    a, b = _photo(folder / "a.png", 0), _photo(folder / "b.png", 1)
    np.save(folder / "v.npy", np.linspace(-1, 1, 32).astype(np.float32))
    return {"folder": folder, "ref": f"file:{ckpt}", "a": a, "b": b, "vector": str(folder / "v.npy"),
            "pipe": Pipeline(model), "feature": feature}


@pytest.fixture(params=["classifier", "feature model"])
def project(request, tmp_path, tiny_model):
    """A checkpoint (the tiny classifier, or the same without its classifier), two photos and a stored vector."""
    from vitviz.model import create_model

    model = tiny_model
    if request.param == "feature model":
        torch.manual_seed(1)
        model = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=4,
                             num_classes=0).eval()
    return _make_project(tmp_path / "project", model, request.param == "feature model")


def _session(project, target):
    p = project["pipe"]
    s = Session()
    s.add_images([project["a"], project["b"]])
    s.set_result(p.run(load_image(project["a"]), source=project["a"], target=target))
    s.set_options(view="relevance", layer=1)
    return s


def score(out):
    return out[1] - out[0]


def _targets(project):
    from vitviz.pipeline import reference_target, vector_target

    p = project["pipe"]
    return {"image": reference_target(p, project["b"]), "patch": reference_target(p, project["b"], patch=(2, 1)),
            "vector": vector_target(project["vector"])}


@pytest.mark.parametrize("kind", ["image", "patch", "vector"])
def test_a_similarity_target_is_saved_and_made_again_on_reopening(project, kind):
    target = _targets(project)[kind]
    s = _session(project, target)
    state = st.capture_state(s, project["ref"])
    assert state.target is None and state.target_choice == choice_of(target)
    assert state.target_label == target.describe()
    path = st.save_state(state, project["folder"] / "s.vitviz.json")
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["version"] == st.TARGET_VERSION == 2 and doc["target"]["kind"] == kind
    want_rel = "v.npy" if kind == "vector" else "b.png"
    assert doc["target"]["relative"] == want_rel and doc["target"]["path"].endswith(want_rel)
    assert doc["target"].get("patch") == ([2, 1] if kind == "patch" else None)
    back = st.read_state(path)
    assert back.target_choice == state.target_choice and back.target_label == target.describe()
    s2, _ = st.reproduce(back)
    r1, r2 = s.result, s2.result
    assert r2.target_spec == r1.target_spec and r2.target_text() == r1.target_text()
    assert r2.target_score == pytest.approx(r1.target_score, abs=1e-5)
    np.testing.assert_allclose(s2.current_map(), s.current_map(), rtol=1e-4, atol=1e-6)
    assert target.describe() in s2.describe_view()


def test_the_references_are_found_beside_a_moved_session(project, tmp_path):
    s = _session(project, _targets(project)["patch"])
    st.save_state(st.capture_state(s, project["ref"]), project["folder"] / "s.vitviz.json")
    moved = shutil.move(str(project["folder"]), str(tmp_path / "elsewhere"))
    back = st.locate(st.read_state(f"{moved}/s.vitviz.json"))
    assert back.target_choice.path == str((tmp_path / "elsewhere" / "b.png").resolve())
    s2, _ = st.reproduce(back)
    assert s2.result.target_spec.name == "patch (2, 1) of b.png"


def test_a_missing_reference_is_named_and_nothing_opens(project):
    s = _session(project, _targets(project)["image"])
    path = st.save_state(st.capture_state(s, project["ref"]), project["folder"] / "s.vitviz.json")
    (project["folder"] / "b.png").rename(project["folder"] / "gone.png")
    with pytest.raises(st.StateError, match=r"its target's reference image .*b.png does not exist"):
        st.locate(st.read_state(path))


def test_a_prompt_is_saved_by_its_words(project):
    state = st.from_dict({**st.to_dict(st.capture_state(_session(project, None), project["ref"])),
                          "target": {"kind": "text", "name": "a red car"}, "version": 2})
    assert state.target_choice == TargetChoice("text", name="a red car")
    assert st.to_dict(state)["target"] == {"kind": "text", "name": "a red car"}
    with pytest.raises(TargetError, match="its text tower is unknown"):  # made again for the model: here none
        st.state_target(state, project["pipe"])


def test_a_function_is_saved_by_its_name_and_reopens_as_the_top_class(project):
    s = _session(project, CallableTarget(score))
    state = st.capture_state(s, project["ref"])
    assert state.target_choice == TargetChoice("callable", name="score") and state.target_label == "score(output)"
    doc = st.to_dict(state)
    assert doc["target"] == {"kind": "callable", "name": "score"} and doc["version"] == 2
    back = st.parse_state(st.state_json(state))
    target, note = st.state_target(back, project["pipe"])
    assert target == "top" and "the function score, was saved by its name only" in note
    assert ("wait for a similarity target" if project["feature"] else "the top class is shown instead") in note
    s2, _ = st.reproduce(back)
    if project["feature"]:
        assert s2.result.target_spec is None and s2.result.attention_grads is None
    else:
        assert s2.result.target == s2.result.top_k(1)[0][0]


def test_a_class_target_stays_version_1(tmp_path, tiny_model):
    s = _session(_make_project(tmp_path / "project", tiny_model, False), 3)
    doc = st.to_dict(st.capture_state(s, "demo"))
    assert doc["version"] == 1 and doc["target"] == 3 and doc["target_label"] == "cross"
    assert st.from_dict(doc).target_choice is None and st.from_dict(doc).target == 3


def test_choices_from_what_callers_pass():
    assert as_choice(None) == (TargetChoice("top"), None) and as_choice("top")[0] == TargetChoice("top")
    assert as_choice(3) == (TargetChoice("class", index=3), None)
    c = ClassTarget(2)
    assert as_choice(c) == (TargetChoice("class", index=2), c)
    fn_choice, made = as_choice(score)
    assert fn_choice.kind == "callable" and fn_choice.name == "score" and fn_choice.fn is score and made is None
    v = SimilarityTarget(torch.ones(4), "my vector")  # made in Python: known by its words only
    assert as_choice(v) == (TargetChoice("named", name="similar to my vector"), v)
    prompt = Text("a red car", templates="photo")  # a prompt: made for each model (its templates kept)
    c, made = as_choice(prompt)
    assert c == TargetChoice("text", name="a red car") and c.source is prompt and made is None
    assert c.describe() == "similar to a red car"
    resolved = SimilarityTarget(torch.ones(4), "a red car", origin=(("text", "a red car"),))
    assert choice_of(resolved) == TargetChoice("text", name="a red car")
    for bad, words in [(-1, "a class index is 0 or more"), ("dog", "got 'dog'"), (2.5, "got 2.5"),
                       (object(), "got a object")]:
        with pytest.raises(ValueError, match=words):
            as_choice(bad)


def test_a_choice_is_made_for_a_model(project):
    p = project["pipe"]
    made = TargetChoice("patch", path=project["b"], patch=(1, 1)).build(p)
    assert isinstance(made, SimilarityTarget) and made.name == "patch (1, 1) of b.png"
    open_result = p.run(load_image(project["b"]), source=project["b"])  # an open image: no forward pass again
    again = TargetChoice("patch", path=project["b"], patch=(1, 1)).build(p, reference=open_result)
    torch.testing.assert_close(again.vector, made.vector, rtol=1e-5, atol=1e-6)
    assert again.name == made.name and dict(again.origin) == dict(made.origin)
    if project["feature"]:
        with pytest.raises(TargetError, match="this model has no classifier"):
            TargetChoice("class", index=0).build(p)
    else:
        with pytest.raises(TargetError, match="target class 7 out of range for a model with 5 classes"):
            TargetChoice("class", index=7).build(p)
    with pytest.raises(TargetError, match="a function cannot be saved"):
        TargetChoice("callable", name="score").build(p)
    with pytest.raises(TargetError, match="it was not a file"):
        TargetChoice("image", path="pasted image").build(p)
    with pytest.raises(TargetError, match="its text tower is unknown"):  # (the tiny models have no text tower)
        TargetChoice("text", name="a cat").build(p)
