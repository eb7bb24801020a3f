"""Logit lens, head knock-out and activation patching (vitviz.capture.mechanistic) against references written with
forward hooks on timm's OWN modules: random-weight timm models (a [CLS] classifier, a mean-pool classifier, SigLIP's
attention-pool "MAP" classifier) written as timm folders and opened through vitviz's normal route
(:meth:`vitviz.pipeline.Pipeline.open`), then every layer's lens probabilities, every (layer, head) knock-out score
and every layer's patching recovery compared with timm's own blocks, attention projections, norms and heads."""

from __future__ import annotations

import pytest
import torch
from family_helpers import randomise_, rel_err
from mechanistic_references import (
    MODELS,
    block_outputs,
    images,
    knockout_reference,
    patching_reference,
    timm_pair,
    token_alone,
)

from vitviz.capture.mechanistic import MechanisticError, activation_patching, head_knockout, logit_lens
from vitviz.capture.targets import SimilarityTarget
from vitviz.pipeline import Pipeline

pytest.importorskip("timm")

@pytest.mark.parametrize("kind", list(MODELS))
def test_logit_lens_equals_timm_head_on_hookedblock_outputs(tmp_path, kind):
    ref, ours = timm_pair(tmp_path, kind)
    x, _ = images()
    lens = logit_lens(ours, x)
    outs = block_outputs(ref, x)
    with torch.no_grad():
        want_logits = torch.cat([ref.forward_head(ref.norm(z)) for z in outs])
        final = ref(x)[0]
    want = want_logits.softmax(-1)
    top = int(final.argmax())
    assert lens.num_layers == 3 and int(lens.target.index) == top
    assert rel_err(lens.probabilities, want) <= 1e-4 and rel_err(lens.logits, want_logits) <= 1e-4
    assert rel_err(lens.target_probability, want[:, top]) <= 1e-4
    assert rel_err(lens.scores, want_logits[:, top]) <= 1e-4
    # the last layer's lens is the model's own output
    assert rel_err(lens.logits[-1], final) <= 1e-4
    # each patch token decoded alone
    p = ref.num_prefix_tokens
    with torch.no_grad():
        per_patch = torch.stack([token_alone(ref, z[0, p:]) for z in outs])  # [L, P, K]
    assert torch.equal(lens.patch_classes, per_patch.argmax(-1))
    assert rel_err(lens.patch_scores, per_patch[..., top]) <= 1e-4
    assert tuple(lens.class_map(1).shape) == (4, 4)
    rows = lens.top(2)
    assert len(rows) == 6 and rows[0][:2] == (0, 1) and rows[0][3] >= rows[1][3]
    assert rows[-1][2] == int(want[-1].topk(2).indices[1])


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_head_knockout_equals_timm_with_a_head_zeroed_at_proj(tmp_path, kind, mode):
    ref, ours = timm_pair(tmp_path, kind)
    x, _ = images()
    result = head_knockout(ours, x, target=4, mode=mode, batch_size=2)  # 2: a layer's heads in two batches
    want = knockout_reference(ref, x, 4, mode)
    with torch.no_grad():
        clean = float(ref(x)[0, 4])
    assert result.scores.shape == (3, 3)
    assert rel_err(result.scores, want) <= 1e-4
    assert abs(result.clean - clean) <= 1e-4 * abs(clean) + 1e-6
    assert rel_err(result.delta, want - clean) <= 1e-3
    assert float((want - clean).abs().max()) > 1e-3  # the heads matter: the comparison can fail
    assert result.rows()[4][:2] == (1, 1)


@pytest.mark.parametrize("kind", list(MODELS))
def test_activation_patching_equals_timm_with_block_outputs_replaced(tmp_path, kind):
    ref, ours = timm_pair(tmp_path, kind)
    clean, corrupt = images()
    result = activation_patching(ours, clean, corrupt, target=2, batch_size=5)
    p = ref.num_prefix_tokens
    positions = ([0] if p else []) + [slice(None), p + 0, p + 9]
    want = patching_reference(ref, clean, corrupt, 2, positions)
    got = torch.stack(([result.cls] if p else []) + [result.all, result.patches[:, 0], result.patches[:, 9]], 1)
    assert (result.cls is None) == (p == 0)
    assert torch.allclose(got, want, atol=2e-4, rtol=1e-3)
    assert torch.allclose(result.all, torch.ones(3), atol=1e-4)  # every token patched: the clean run
    assert float(want[:, -2:].abs().max()) > 1e-3
    rows = result.rows()
    assert len(rows) == 3 * ((1 if p else 0) + 1 + 16) and rows[(1 if p else 0) + 1 + 9][1] == "2,1"
    assert tuple(result.recovery_map(0).shape) == (4, 4)


def test_similarity_target_on_a_feature_model_lens_and_knockout(tmp_path):
    """A feature model (no classifier): the lens and the knock-out score the similarity of the pooled embedding to a
    vector, checked against timm's own head on the hooked block outputs; a class target is refused."""
    ref, ours = timm_pair(tmp_path, "map", num_classes=0)
    x, _ = images()
    v = torch.randn(48, generator=torch.Generator().manual_seed(5))
    target = SimilarityTarget(v, "vector v")
    lens = logit_lens(ours, x, target)
    outs = block_outputs(ref, x)
    with torch.no_grad():
        want = torch.stack([torch.cosine_similarity(ref.forward_head(ref.norm(z))[0], v, dim=0) for z in outs])
    assert lens.probabilities is None and lens.patch_classes is None and lens.top(3) == []
    assert rel_err(lens.scores, want) <= 1e-4
    assert head_knockout(ours, x, target).scores.shape == (3, 3)
    with pytest.raises(MechanisticError, match="no classifier"):
        logit_lens(ours, x, 1)


def test_bad_inputs_are_one_line(tmp_path):
    ref, ours = timm_pair(tmp_path, "cls")
    x, _ = images()
    adapted = Pipeline.open(ref).model  # a module vitviz only adapted: its blocks cannot be restarted
    for call, match in ((lambda: head_knockout(ours, x, mode="half"), "valid: zero, mean"),
                        (lambda: logit_lens(ours, x, 99), "7 classes"),
                        (lambda: activation_patching(ours, x, x), "no difference"),
                        (lambda: activation_patching(ours, x, torch.randn(1, 3, 40, 40)), "same token grid"),
                        (lambda: head_knockout(adapted, x), "only adapted")):
        with pytest.raises(MechanisticError, match=match) as e:
            call()
        assert "\n" not in str(e.value)


def test_transformers_vit_classifier_all_three_against_hooks_on_its_modules(tmp_path):
    """A Hugging Face ViTForImageClassification (save_pretrained folder, opened by vitviz): the lens against its own
    ``layernorm`` and ``classifier`` on hooked layer outputs, the knock-out against a pre-hook on each layer's output
    projection (``attention.o_proj``; ``attention.output.dense`` before transformers 5), the patching against hooks
    replacing its layers' outputs."""
    import warnings

    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = T.ViTConfig(hidden_size=48, num_hidden_layers=3, num_attention_heads=3, intermediate_size=96, image_size=32,
                      patch_size=8, num_labels=5, attn_implementation="eager")
    ref = randomise_(T.ViTForImageClassification(cfg), 0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.save_pretrained(tmp_path / "hf")
    ours = Pipeline.open(str(tmp_path / "hf"), precision="fp32").model
    layers = ref.vit.layers if hasattr(ref.vit, "layers") else ref.vit.encoder.layer  # transformers 5 / 4

    def out_proj(layer):
        a = layer.attention
        return a.o_proj if hasattr(a, "o_proj") else a.output.dense
    clean, corrupt = images()

    def logits(x):
        with torch.no_grad():
            return ref(pixel_values=x).logits[0]

    def first(o):
        return o[0] if isinstance(o, tuple) else o

    outs = []
    handles = [m.register_forward_hook(lambda m, a, o: outs.append(first(o).detach())) for m in layers]
    logits(clean)
    for h in handles:
        h.remove()
    with torch.no_grad():
        want = torch.cat([ref.classifier(ref.vit.layernorm(z)[:, 0]) for z in outs])
    lens = logit_lens(ours, clean, 3)
    assert rel_err(lens.logits, want) <= 1e-4 and rel_err(lens.probabilities, want.softmax(-1)) <= 1e-4

    ko = torch.empty(3, 3)
    for l in range(3):
        for h in range(3):
            def pre(module, args, h=h):
                a = args[0].clone()
                a[..., h * 16:(h + 1) * 16] = 0.0
                return (a,)

            handle = out_proj(layers[l]).register_forward_pre_hook(pre)
            ko[l, h] = logits(clean)[3]
            handle.remove()
    assert rel_err(head_knockout(ours, clean, 3).scores, ko) <= 1e-4

    c, k = float(logits(clean)[3]), float(logits(corrupt)[3])
    rec = torch.empty(3, 3)
    for l in range(3):
        for j, pos in enumerate((0, slice(None), 1 + 5)):
            def hook(m, a, o, l=l, pos=pos):
                z = first(o).clone()
                z[:, pos] = outs[l][:, pos]
                return (z,) + tuple(o[1:]) if isinstance(o, tuple) else z

            handle = layers[l].register_forward_hook(hook)
            rec[l, j] = (float(logits(corrupt)[3]) - k) / (c - k)
            handle.remove()
    got = activation_patching(ours, clean, corrupt, 3)
    assert torch.allclose(torch.stack([got.cls, got.all, got.patches[:, 5]], 1), rec, atol=2e-4, rtol=1e-3)


@pytest.mark.real_weights
def test_real_vit_tiny_lens_ends_at_the_models_own_probabilities_on_chelsea():
    """The real ViT-Ti/16 on scikit-image's chelsea: the last layer's lens is the model's output (Egyptian cat 0.733,
    its README), the knock-out's clean score is the same logit, and the first layers' lens has no cat on top."""
    from repo_paths import TINY_WEIGHTS
    from skimage import data as skimage_data

    if not TINY_WEIGHTS.exists():
        pytest.skip("../shared/weights is absent")
    from PIL import Image

    pipeline = Pipeline.open(str(TINY_WEIGHTS), precision="fp32")
    x = pipeline.prepare(Image.fromarray(skimage_data.chelsea())).x[None]
    lens = logit_lens(pipeline.model, x)
    assert int(lens.target.index) == 285 and abs(float(lens.target_probability[-1]) - 0.733) < 1e-2
    with torch.no_grad():
        logits = pipeline.model(x)[0]
    assert rel_err(lens.logits[-1], logits) <= 1e-5
    assert all(int(lens.probabilities[l].argmax()) not in range(281, 286) for l in range(3))


def test_prompt_model_lens_reads_the_prompts_scores(tmp_path):
    """SigLIP-style prompts on an attention-pool feature model (vitviz.model.zero_shot.with_prompts): each layer's
    lens is ``scale * cos(timm's pooled embedding of the hooked block output, prompt) + bias``, its probabilities the
    sigmoid of each; the knock-out scores the target prompt the same way."""
    from vitviz.model.zero_shot import with_prompts

    ref, ours = timm_pair(tmp_path, "map", num_classes=0)
    x, _ = images()
    text = torch.randn(3, 48, generator=torch.Generator().manual_seed(7))
    prompted = with_prompts(ours, text, ["a cat", "a dog", "a sofa"], scale=10.0, bias=-2.0, probability="sigmoid")
    lens = logit_lens(prompted, x, 1)
    with torch.no_grad():
        emb = torch.cat([ref.forward_head(ref.norm(z)) for z in block_outputs(ref, x)])
    want = 10.0 * torch.nn.functional.normalize(emb, dim=-1) @ torch.nn.functional.normalize(text, dim=-1).T - 2.0
    assert rel_err(lens.logits, want) <= 1e-4 and rel_err(lens.probabilities, want.sigmoid()) <= 1e-4
    assert lens.label(2) == "a sofa" and rel_err(lens.target_probability, want[:, 1].sigmoid()) <= 1e-4
    assert rel_err(torch.tensor([head_knockout(prompted, x, 1).clean]), want[-1:, 1]) <= 1e-4
