"""Faithfulness with every target kind (issue 23): the curves read a class's probability, a similarity target's own
score (so a feature model's deletion curve follows the similarity) or a callable target's value; LeGrad and GradCAM
are rows of the default table; the randomisation check and the table's text, CSV and shard part carry the target.

The end points of a curve are known without the machinery: step 0 is the unperturbed image, the last deletion step
(and the first insertion step) the baseline image itself (the mean baseline: zeros in the model's input space).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz import evaluate as E
from vitviz.capture.targets import CallableTarget, SimilarityTarget, TargetError
from vitviz.evaluate import evaluate_views, perturbation_curve, randomisation_check
from vitviz.evaluate.table_parts import table_from_json, table_json
from vitviz.model import create_model
from vitviz.pipeline import Pipeline, reference_target

STEPS, SEEDS = 4, 2


def _photo(seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (40, 50, 3), dtype=np.uint8))


def _model(num_classes: int):
    torch.manual_seed(0)
    return create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=24, depth=2, num_heads=3,
                        num_classes=num_classes).eval()


@pytest.fixture
def features():
    """A DINO-style feature model (no classifier) in a Pipeline."""
    return Pipeline(_model(0))


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1))


def test_a_feature_models_curves_follow_the_similarity(features):
    pipe = features
    ref = reference_target(pipe, pipe.run(_photo(1), source="ref.png"))
    t = evaluate_views(pipe, _photo(2), steps=STEPS, seeds=SEEDS, target=ref)
    x, _ = pipe.spec.preprocess.apply(_photo(2))
    with torch.no_grad():
        unperturbed = _cos(pipe.model(x[None])[0], ref.vector)
        baseline = _cos(pipe.model(torch.zeros_like(x)[None])[0], ref.vector)  # the mean baseline: zeros
    assert t.target is None and t.measure == "similarity" and t.label == "similar to image ref.png"
    assert t.probability == pytest.approx(unperturbed, abs=1e-5)
    # every row has curves: the gradient views too (LeGrad and GradCAM among them), explaining the similarity
    assert [v.key for v in t.views] == list(E.DEFAULT_VIEWS)
    assert {"legrad", "gradcam"} <= {v.key for v in t.views}
    assert all(v.unavailable is None and v.deletion is not None for v in t.views)
    for v in t.views:
        assert v.deletion.scores[0] == pytest.approx(unperturbed, abs=1e-5)  # nothing deleted yet
        assert v.deletion.scores[-1] == pytest.approx(baseline, abs=1e-5)  # everything deleted: the baseline image
        assert v.insertion.scores[0] == pytest.approx(baseline, abs=1e-5)
        assert v.insertion.scores[-1] == pytest.approx(unperturbed, abs=1e-5)
        assert v.deletion.target is ref
    assert t.random_deletion.scores[:, 0] == pytest.approx([unperturbed] * SEEDS, abs=1e-5)
    # the curves do not all read one number: the similarity moves as patches go
    assert np.ptp(t.views[0].deletion.scores) > 1e-3
    text = t.format()
    assert f"target similar to image ref.png (similarity = {unperturbed:.3f})" in text
    assert "legrad" in text and "gradcam" in text
    # without a target there is nothing to read
    with pytest.raises(ValueError, match="no classifier.*similarity target"):
        evaluate_views(pipe, _photo(2), steps=STEPS, seeds=SEEDS)


def test_an_open_result_with_a_similarity_target_is_reused(features, monkeypatch):
    pipe = features
    ref = reference_target(pipe, _photo(1))
    result = pipe.run(_photo(2), target=ref)
    runs = []
    orig = Pipeline.run
    monkeypatch.setattr(Pipeline, "run", lambda self, *a, **k: runs.append(1) or orig(self, *a, **k))
    t = evaluate_views(pipe, result, ("legrad", "gradcam"), steps=STEPS, seeds=SEEDS)  # the window's call
    assert runs == [] and t.measure == "similarity"
    assert t.probability == pytest.approx(result.target_score, abs=1e-5)
    t2 = evaluate_views(pipe, result, ("legrad",), steps=STEPS, seeds=SEEDS, target=ref)  # the same target: reused
    assert runs == [] and t2.views[0].deletion.auc == pytest.approx(t.views[0].deletion.auc)
    other = reference_target(pipe, _photo(3))
    evaluate_views(pipe, result, ("legrad",), steps=STEPS, seeds=SEEDS, target=other)  # another: a new capture
    assert runs == [1]


def test_a_classifiers_similarity_reads_the_features_before_its_head():
    pipe = Pipeline(_model(5))
    ref = reference_target(pipe, _photo(1))
    x, _ = pipe.spec.preprocess.apply(_photo(2))
    m = pipe.model
    with torch.no_grad():
        pre = m.forward_head(m.forward_features(x[None]), pre_logits=True)[0]
    assert ref.vector.shape[0] == pre.shape[0] == 24
    c = perturbation_curve(m, x, np.arange(16.0).reshape(4, 4), target=ref, steps=STEPS)
    assert c.scores[0] == pytest.approx(_cos(pre, ref.vector), abs=1e-5)
    # the head's hook is gone afterwards: the model is as it was
    assert not m.head._forward_pre_hooks
    # batched or one at a time: the same numbers (the hook takes each batch's own embedding)
    c1 = perturbation_curve(m, x, np.arange(16.0).reshape(4, 4), target=ref, steps=STEPS, batch_size=1)
    np.testing.assert_allclose(c.scores, c1.scores, rtol=1e-5, atol=1e-6)
    # a similarity target scaled and shifted (CLIP's logit scale, SigLIP's bias) is read as it scores
    scaled = SimilarityTarget(ref.vector, "scaled", scale=10.0, bias=-2.0)
    c2 = perturbation_curve(m, x, np.arange(16.0).reshape(4, 4), target=scaled, steps=STEPS)
    np.testing.assert_allclose(c2.scores, 10.0 * c.scores - 2.0, rtol=1e-5, atol=1e-5)
    # a vector of another size: one line naming the target
    with pytest.raises(TargetError, match="reference vector has 7 values but the model's pooled embedding has 24"):
        perturbation_curve(m, x, np.zeros((4, 4)), target=SimilarityTarget(torch.ones(7), "short"), steps=2)


def test_a_callable_targets_curves_read_its_value():
    pipe = Pipeline(_model(5))

    def margin(out):
        return out[1] - out[0]

    t = evaluate_views(pipe, _photo(2), steps=STEPS, seeds=SEEDS, target=margin)
    x, _ = pipe.spec.preprocess.apply(_photo(2))
    with torch.no_grad():
        out = pipe.model(x[None])[0]
        base = pipe.model(torch.zeros_like(x)[None])[0]
    assert t.target is None and t.measure == "value" and t.label == "margin(output)"
    assert isinstance(t.random_deletion.target, CallableTarget)
    for v in t.views:
        assert v.unavailable is None
        assert v.deletion.scores[0] == pytest.approx(float(out[1] - out[0]), abs=1e-4)
        assert v.deletion.scores[-1] == pytest.approx(float(base[1] - base[0]), abs=1e-4)
    assert "target margin(output) (value = " in t.format()
    # a plain function is a callable target for the curves too
    c = perturbation_curve(pipe.model, x, np.zeros((4, 4)), target=margin, steps=2)
    assert c.scores[0] == pytest.approx(float(out[1] - out[0]), abs=1e-4)

    def broken(out):
        raise KeyError("no such output")

    with pytest.raises(ValueError, match="target function broken raised KeyError"):
        perturbation_curve(pipe.model, x, np.zeros((4, 4)), target=broken, steps=2)
    with pytest.raises(ValueError, match="returned shape \\(5,\\), not a scalar"):
        perturbation_curve(pipe.model, x, np.zeros((4, 4)), target=lambda o: o, steps=2)


def test_a_class_target_keeps_the_probability_and_the_new_views_are_rows(tiny_model):
    pipe = Pipeline(tiny_model)
    t = evaluate_views(pipe, _photo(4), steps=STEPS, seeds=SEEDS, target=2)
    assert t.target == 2 and t.measure == "probability" and t.label == "star"
    rows = {v.key: v for v in t.views}
    assert rows["legrad"].deletion is not None and rows["gradcam"].deletion is not None
    x, _ = pipe.spec.preprocess.apply(_photo(4))
    with torch.no_grad():
        p = tiny_model(x[None])[0].float().softmax(-1)[2]
    assert rows["legrad"].deletion.scores[0] == pytest.approx(float(p), abs=1e-6)
    assert "target 2 'star' (p = " in t.format()
    # "top" is the top class, as None
    top = evaluate_views(pipe, _photo(4), ("legrad",), steps=STEPS, seeds=SEEDS, target="top")
    assert top.target == int(tiny_model(x[None])[0].argmax())


def test_the_text_csv_and_shard_part_of_a_similarity_table(features, tmp_path):
    pipe = features
    ref = reference_target(pipe, _photo(1), name="the reference")
    tables = [evaluate_views(pipe, _photo(s), ("rollout", "legrad"), steps=STEPS, seeds=SEEDS, target=ref)
              for s in (2, 3)]
    csv = E.write_csv(tmp_path / "auc.csv", tables).read_text().splitlines()
    assert csv[1].split(",")[1:4] == ["", "similar to the reference", "rollout"]  # no class; the target in words
    back = table_from_json(table_json(tables[0]))
    assert back.target is None and back.measure == "similarity" and back.label == tables[0].label
    assert back.views[1].deletion_auc == tables[0].views[1].deletion_auc
    assert "mean over 2 images" in E.format_mean_table(tables)


def test_randomisation_check_with_every_target_kind(features):
    pipe = features
    ref = reference_target(pipe, _photo(1))
    x, _ = pipe.spec.preprocess.apply(_photo(2))
    for view in ("legrad", "gradcam"):
        r = randomisation_check(pipe.model, x, view, target=ref)
        assert r.target is ref and r.correlations.shape == (2,) and np.isfinite(r.original).all()
        assert r.original.max() > 0  # a map explaining the similarity
    # the gradient views of a feature model need a target: refused with the reason
    with pytest.raises(ValueError, match="no classifier"):
        randomisation_check(pipe.model, x, "legrad", target=None)
    # an attention view needs none
    assert randomisation_check(pipe.model, x, "rollout", target=None).target is None
    # a callable on a classifier
    m = _model(5)
    r = randomisation_check(m, x, "gradcam", target=lambda out: out[3])
    assert isinstance(r.target, CallableTarget) and not math.isnan(float(r.correlations[0]))
