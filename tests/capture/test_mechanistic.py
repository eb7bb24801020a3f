"""Logit lens, head knock-out and activation patching (vitviz.capture.mechanistic) against references written with
forward hooks on timm's OWN modules: random-weight timm models (a [CLS] classifier, a mean-pool classifier, SigLIP's
attention-pool "MAP" classifier) written as timm folders and opened through vitviz's normal route
(:meth:`vitviz.pipeline.Pipeline.open`), then every layer's lens probabilities, every (layer, head) knock-out score
and every layer's patching recovery compared with timm's own blocks, attention projections, norms and heads."""

from __future__ import annotations

import pytest
import torch
from family_helpers import randomise_, rel_err, write_timm_folder

from vitviz.capture.mechanistic import MechanisticError, activation_patching, head_knockout, logit_lens
from vitviz.capture.targets import SimilarityTarget
from vitviz.pipeline import Pipeline

timm = pytest.importorskip("timm")

SMALL = {"img_size": 32, "patch_size": 8, "embed_dim": 48, "depth": 3, "num_heads": 3}
SIGLIP_CFG = {"input_size": [3, 32, 32], "crop_pct": 1.0, "interpolation": "bicubic", "mean": [0.5] * 3,
              "std": [0.5] * 3}
MODELS = {
    "cls": ("vit_base_patch16_224", {}, {}),
    "avg": ("vit_base_patch16_224", {"global_pool": "avg"}, {}),
    "map": ("vit_base_patch16_siglip_224", {}, SIGLIP_CFG),
}


def _pair(tmp_path, kind: str, num_classes: int = 7):
    arch, options, cfg = MODELS[kind]
    torch.manual_seed(0)
    ref = randomise_(timm.create_model(arch, pretrained=False, num_classes=num_classes, **SMALL, **options), 0.2)
    folder = write_timm_folder(tmp_path / kind, ref, arch, cfg)
    ours = Pipeline.open(str(folder), precision="fp32").model
    return ref.eval(), ours


def _images():
    g = torch.Generator().manual_seed(3)
    return torch.randn(1, 3, 32, 32, generator=g), torch.randn(1, 3, 32, 32, generator=g)


def _block_outputs(ref, x):
    """Each timm block's output, by forward hooks on timm's blocks."""
    outs = []
    handles = [b.register_forward_hook(lambda m, a, o: outs.append(o.detach())) for b in ref.blocks]
    try:
        with torch.no_grad():
            ref(x)
    finally:
        for h in handles:
            h.remove()
    return outs


def _token_alone(ref, tok):
    """A token ``[B, D]`` through timm's final norm, its pool over that token alone, fc_norm and head."""
    x = ref.norm(tok[:, None])
    pooled = ref.attn_pool(x) if getattr(ref, "attn_pool", None) is not None else x[:, 0]
    return ref.head(ref.fc_norm(pooled))


@pytest.mark.parametrize("kind", list(MODELS))
def test_logit_lens_equals_timm_head_on_hooked_block_outputs(tmp_path, kind):
    ref, ours = _pair(tmp_path, kind)
    x, _ = _images()
    lens = logit_lens(ours, x)
    outs = _block_outputs(ref, x)
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
        per_patch = torch.stack([_token_alone(ref, z[0, p:]) for z in outs])  # [L, P, K]
    assert torch.equal(lens.patch_classes, per_patch.argmax(-1))
    assert rel_err(lens.patch_scores, per_patch[..., top]) <= 1e-4
    assert tuple(lens.class_map(1).shape) == (4, 4)
    rows = lens.top(2)
    assert len(rows) == 6 and rows[0][:2] == (0, 1) and rows[0][3] >= rows[1][3]
    assert rows[-1][2] == int(want[-1].topk(2).indices[1])


def _knockout_reference(ref, x, target, mode):
    L, H = len(ref.blocks), ref.blocks[0].attn.num_heads
    scores = torch.empty(L, H)
    for l in range(L):
        for h in range(H):
            def pre(module, args, h=h):
                a = args[0].clone()
                d = a.shape[-1] // H
                sl = a[..., h * d:(h + 1) * d]
                a[..., h * d:(h + 1) * d] = sl.mean(dim=1, keepdim=True) if mode == "mean" else 0.0
                return (a,)

            handle = ref.blocks[l].attn.proj.register_forward_pre_hook(pre)
            try:
                with torch.no_grad():
                    scores[l, h] = ref(x)[0, target]
            finally:
                handle.remove()
    return scores


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_head_knockout_equals_timm_with_a_head_zeroed_at_proj(tmp_path, kind, mode):
    ref, ours = _pair(tmp_path, kind)
    x, _ = _images()
    result = head_knockout(ours, x, target=4, mode=mode, batch_size=2)  # 2: a layer's heads in two batches
    want = _knockout_reference(ref, x, 4, mode)
    with torch.no_grad():
        clean = float(ref(x)[0, 4])
    assert result.scores.shape == (3, 3)
    assert rel_err(result.scores, want) <= 1e-4
    assert abs(result.clean - clean) <= 1e-4 * abs(clean) + 1e-6
    assert rel_err(result.delta, want - clean) <= 1e-3
    assert float((want - clean).abs().max()) > 1e-3  # the heads matter: the comparison can fail
    assert result.rows()[4][:2] == (1, 1)


def _patching_reference(ref, clean, corrupt, target, positions):
    """Recovered share per layer and position, by hooks replacing timm's block outputs."""
    donor = _block_outputs(ref, clean)
    with torch.no_grad():
        c, k = float(ref(clean)[0, target]), float(ref(corrupt)[0, target])
    out = torch.empty(len(ref.blocks), len(positions))
    for l, blk in enumerate(ref.blocks):
        for j, pos in enumerate(positions):
            def hook(m, a, o, l=l, pos=pos):
                o = o.clone()
                o[:, pos] = donor[l][:, pos]
                return o

            handle = blk.register_forward_hook(hook)
            try:
                with torch.no_grad():
                    out[l, j] = (float(ref(corrupt)[0, target]) - k) / (c - k)
            finally:
                handle.remove()
    return out


@pytest.mark.parametrize("kind", list(MODELS))
def test_activation_patching_equals_timm_with_block_outputs_replaced(tmp_path, kind):
    ref, ours = _pair(tmp_path, kind)
    clean, corrupt = _images()
    result = activation_patching(ours, clean, corrupt, target=2, batch_size=5)
    p = ref.num_prefix_tokens
    positions = ([0] if p else []) + [slice(None), p + 0, p + 9]
    want = _patching_reference(ref, clean, corrupt, 2, positions)
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
    ref, ours = _pair(tmp_path, "map", num_classes=0)
    x, _ = _images()
    v = torch.randn(48, generator=torch.Generator().manual_seed(5))
    target = SimilarityTarget(v, "vector v")
    lens = logit_lens(ours, x, target)
    outs = _block_outputs(ref, x)
    with torch.no_grad():
        want = torch.stack([torch.cosine_similarity(ref.forward_head(ref.norm(z))[0], v, dim=0) for z in outs])
    assert lens.probabilities is None and lens.patch_classes is None and lens.top(3) == []
    assert rel_err(lens.scores, want) <= 1e-4
    assert head_knockout(ours, x, target).scores.shape == (3, 3)
    with pytest.raises(MechanisticError, match="no classifier"):
        logit_lens(ours, x, 1)


def test_bad_inputs_are_one_line(tmp_path):
    _, ours = _pair(tmp_path, "cls")
    x, _ = _images()
    for call, match in ((lambda: head_knockout(ours, x, mode="half"), "valid: zero, mean"),
                        (lambda: logit_lens(ours, x, 99), "7 classes"),
                        (lambda: activation_patching(ours, x, x), "no difference"),
                        (lambda: activation_patching(ours, x, torch.randn(1, 3, 40, 40)), "same token grid")):
        with pytest.raises(MechanisticError, match=match) as e:
            call()
        assert "\n" not in str(e.value)
