"""vitviz.capture.foreign: capture from ViT modules that are not vitviz's.

Each style is trained for a few steps with a plain loop, then the capture is checked against the module's own
attention (per head, every layer, relative error <= 1e-5), against autograd through an explicit re-implementation
of the forward (gradients with respect to every attention tensor), and against the block outputs (tokens).
"""

from __future__ import annotations

import pytest
import torch
from repo_paths import TINY_WEIGHTS
from textbook_models import (
    CONFIG_D,
    Custom,
    VisionTransformer,
    ViTC,
    ViTForClassfication,
    explicit_b,
    explicit_c,
    explicit_custom,
    explicit_d,
    own_attention_c,
    rel_err,
    train,
)

from vitviz.capture import CaptureError, capture
from vitviz.capture.foreign import AdaptedModel, capture_module, find_layout, mha_forward

TOL = 1e-5


def _check_against_explicit(model, explicit, x, target, *, grid, patch, prefix, **opts):
    cap = capture(model, x, target=target, **opts)
    logits, attns, toks = explicit(model, x)
    sel = logits.gather(1, torch.as_tensor(target)[:, None]).sum()
    sel.backward()
    ref_attn = torch.stack([a.detach() for a in attns])
    ref_grads = torch.stack([a.grad for a in attns])
    assert cap.grid == grid and cap.patch_size == patch and cap.num_prefix_tokens == prefix
    assert rel_err(cap.attentions, ref_attn) <= TOL
    assert rel_err(cap.attention_grads, ref_grads) <= TOL
    assert rel_err(cap.tokens, torch.stack([t.detach() for t in toks])) <= TOL
    torch.testing.assert_close(cap.logits, logits.detach(), rtol=1e-5, atol=1e-6)
    assert cap.attention_grads.abs().sum() > 0
    return cap


def test_style_b_hand_written_attention():
    model = train(VisionTransformer(img_size=32, patch_size=8, in_channels=3, num_classes=10, d_model=32,
                                    num_heads=4, num_layers=2, d_ff=64, dropout=0.1))
    x = torch.randn(3, 3, 32, 32)
    layout = find_layout(model)
    assert layout.route == "attention_modules"
    assert layout.attention == ("encoder.0.attn", "encoder.1.attn") and layout.blocks == ("encoder.0", "encoder.1")
    cap = _check_against_explicit(model, explicit_b, x, [1, 2, 3], grid=(4, 4), patch=8, prefix=1)
    with torch.no_grad():  # the module's own record of its attention (a plain forward)
        model(x)
    own = torch.stack([blk.attn.attn_weights for blk in model.encoder])
    assert rel_err(cap.attentions, own) <= TOL


def test_style_c_multihead_attention_post_norm():
    model = train(ViTC(img_size=32, patch_size=8, num_classes=10, emb_size=32, depth=2, num_heads=4))
    x = torch.randn(2, 3, 32, 32)
    assert find_layout(model).route == "multihead_attention"
    cap = _check_against_explicit(model, explicit_c, x, [4, 7], grid=(4, 4), patch=8, prefix=1)
    with torch.no_grad():
        own = own_attention_c(model, x)  # nn.MultiheadAttention's own per-head weights
    assert rel_err(cap.attentions, own) <= TOL
    # the module is left as it was: its own forward again, no hooks
    assert all("forward" not in m.__dict__ for m in model.modules())
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_style_d_output_attentions():
    model = train(ViTForClassfication(CONFIG_D))
    x = torch.randn(2, 3, 32, 32)
    layout = find_layout(model)
    assert layout.route == "output_attentions" and len(layout.blocks) == 2
    cap = _check_against_explicit(model, explicit_d, x, [0, 9], grid=(4, 4), patch=8, prefix=1)
    with torch.no_grad():
        own = torch.stack(model(x, output_attentions=True)[1])
    assert rel_err(cap.attentions, own) <= TOL


@pytest.mark.parametrize("fused", [False, True])
def test_custom_module_with_a_named_attention(fused):
    model = train(Custom(fused=fused), size=16, num_classes=4)
    x = torch.randn(2, 3, 16, 16)
    with pytest.raises(CaptureError) as e:  # nothing recognisable: the message says what was looked for
        capture(model, x)
    msg = str(e.value)
    for looked_for in ("MultiheadAttention", "output_attentions", "'Attention'", "scaled_dot_product_attention",
                       "attention="):
        assert looked_for in msg
    cap = _check_against_explicit(model, explicit_custom, x, [0, 3], grid=(4, 4), patch=4, prefix=2,
                                  attention="layers.*.mixer")
    if not fused:  # its own softmax, through nn.Softmax
        with torch.no_grad():
            model(x)
        assert rel_err(cap.attentions[-1], model.layers[-1].mixer.last) <= TOL
    # what the user says is checked against the pass
    with pytest.raises(CaptureError, match="num_prefix_tokens=1 was given.*leaves 2 prefix tokens"):
        capture(model, x, attention="layers.*.mixer", num_prefix_tokens=1)
    with pytest.raises(CaptureError, match=r"patch_size=8 was given, but the patch embedding stem has stride 4"):
        capture(model, x, attention="layers.*.mixer", patch_size=8)
    with pytest.raises(CaptureError, match="names no submodule"):
        capture(model, x, attention="layers.*.nothing")


def test_wrong_guesses_are_errors():
    model = Custom().eval()
    x = torch.randn(1, 3, 16, 16)
    # a module that is not the attention: what it computes is not a softmax over the keys
    with pytest.raises(CaptureError, match="expected each attention layer to compute one attention softmax"):
        capture(model, x, attention="layers.*.ln1")
    # blocks that cannot be told apart from the attention
    with pytest.raises(CaptureError, match="cannot tell the transformer blocks apart"):
        find_layout(torch.nn.Sequential(torch.nn.MultiheadAttention(8, 2)))
    # a grid that does not fit the tokens
    with pytest.raises(CaptureError, match=r"grid=\(3, 3\) was given, but the patch embedding stem produced a 4x4"):
        capture(model, x, attention="layers.*.mixer", grid=(3, 3))


def test_mha_forward_equals_torch_with_masks_and_layouts():
    """The explicit MultiheadAttention equals torch's own outputs and weights, masks and layouts included."""
    torch.manual_seed(1)
    for batch_first in (True, False):
        for kdim in (None, 12):
            mha = torch.nn.MultiheadAttention(16, 4, batch_first=batch_first, kdim=kdim, vdim=kdim).eval()
            q = torch.randn(2, 5, 16)
            kv = torch.randn(2, 5, kdim or 16)
            if not batch_first:
                q, kv = q.transpose(0, 1), kv.transpose(0, 1)
            kpm = torch.tensor([[False] * 4 + [True], [False] * 5])
            am = torch.randn(5, 5)
            for kwargs in ({}, {"key_padding_mask": kpm}, {"attn_mask": am}, {"attn_mask": am > 1.0},
                           {"average_attn_weights": False}, {"need_weights": False}):
                seen = []
                out, w = mha_forward(mha, q, kv, kv, record=seen.append, **kwargs)
                ref_out, ref_w = mha(q, kv, kv, **kwargs)
                torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
                assert (w is None) == (ref_w is None)
                if w is not None:
                    torch.testing.assert_close(w, ref_w, rtol=1e-5, atol=1e-6)
                assert seen[0].shape == (2, 4, 5, 5)
    # unbatched input
    mha = torch.nn.MultiheadAttention(16, 4).eval()
    q = torch.randn(5, 16)
    torch.testing.assert_close(mha_forward(mha, q, q, q)[0], mha(q, q, q)[0], rtol=1e-5, atol=1e-6)


def test_torch_transformer_encoder_sequence_first():
    """nn.TransformerEncoder (sequence-first, its fused fast path in eval): the attention per head, tokens
    batch-first."""

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 16, 8, 8)
            self.cls = torch.nn.Parameter(torch.randn(1, 1, 16))
            layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0)
            self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = torch.nn.Linear(16, 3)

        def forward(self, x):
            t = self.conv(x).flatten(2).transpose(1, 2)
            t = torch.cat([self.cls.expand(len(t), -1, -1), t], 1)
            return self.head(self.enc(t.transpose(0, 1))[0])

    model = Model().eval()
    x = torch.randn(2, 3, 16, 16)
    cap = capture(model, x)
    t = torch.cat([model.cls.expand(2, -1, -1), model.conv(x).flatten(2).transpose(1, 2)], 1).transpose(0, 1)
    own, toks = [], [t.transpose(0, 1)]
    with torch.no_grad():
        for layer in model.enc.layers:
            own.append(layer.self_attn(t, t, t, need_weights=True, average_attn_weights=False)[1])
            t = layer(t)
            toks.append(t.transpose(0, 1))
    assert rel_err(cap.attentions, torch.stack(own)) <= TOL
    assert rel_err(cap.tokens, torch.stack(toks)) <= TOL
    assert cap.grid == (2, 2) and cap.num_prefix_tokens == 1


def test_hugging_face_sdpa_and_eager_agree_with_its_own_attentions():
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32,
                    patch_size=8, num_labels=5)
    model = ViTForImageClassification(cfg).eval()
    x = torch.randn(2, 3, 32, 32)
    fused = capture(model, x, target=[1, 2])  # its default attention: scaled_dot_product_attention, recomputed
    model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(x, output_attentions=True, output_hidden_states=True)
    assert rel_err(fused.attentions, torch.stack(out.attentions)) <= TOL
    assert rel_err(fused.tokens, torch.stack(out.hidden_states)) <= TOL
    eager = capture(model, x, target=[1, 2])  # its own softmax
    assert rel_err(fused.attention_grads, eager.attention_grads) <= TOL
    assert fused.grid == (4, 4) and fused.patch_size == 8 and fused.num_prefix_tokens == 1
    # as a model of the window: its input size from config.image_size, its class names from config.id2label
    model.config.id2label = {i: name for i, name in enumerate(["ant", "bee", "cat", "dog", "eel"])}
    adapted = AdaptedModel(model, preprocess="inception")
    assert adapted.spec.input_size == (32, 32) and adapted.spec.labels == ("ant", "bee", "cat", "dog", "eel")


def test_adapted_model_answers_what_the_pipeline_asks(tmp_path):
    from PIL import Image

    from vitviz.pipeline import Pipeline

    model = train(ViTC())
    adapted = AdaptedModel(model, labels=[f"c{i}" for i in range(10)])
    assert adapted.spec.input_size == (32, 32) and adapted.num_classes == 10 and adapted.patch_size == 8
    assert adapted.config.depth == 2 and adapted.config.num_heads == 4
    assert adapted.pos_embed.shape == (1, 17, 32)  # the [N, D] "positions" of style C
    img = Image.fromarray((torch.rand(40, 60, 3) * 255).byte().numpy())
    r = Pipeline(adapted).run(img, source="x.png")
    assert r.grid == (4, 4) and r.num_prefix_tokens == 1 and r.attention_grads is not None
    assert r.label(int(r.logits.argmax())).startswith("c")
    assert r.model_data.pos_similarity().shape == (4, 4, 4, 4) and r.model_data.filters(4).shape[0] == 4
    # Pipeline.open takes the bare module too (adapted where it is opened); the Pipeline itself adapts nothing
    r2 = Pipeline.open(model).run(img)
    torch.testing.assert_close(r2.attentions, r.attentions)
    with pytest.raises(TypeError, match=r"Pipeline.open\(module\)"):
        Pipeline(model)
    # the faithfulness measures take it too (perturbation curves, block randomisation on a copy)
    from vitviz.evaluate import evaluate_views, randomisation_check

    table = evaluate_views(adapted, img, ["rollout", "relevance"], steps=3, seeds=2)
    assert [v.key for v in table.views] == ["rollout", "relevance"] and all(v.unavailable is None for v in table.views)
    check = randomisation_check(adapted, adapted.spec.preprocess(img), "relevance", target=None)
    assert check.correlations.shape == (2,) and len(adapted.blocks) == 2
    # capture of the wrapper equals capture of the module
    x = torch.randn(1, 3, 32, 32)
    torch.testing.assert_close(capture_module(adapted, x).attentions, capture(model, x).attentions)


def test_adapted_model_errors():
    with pytest.raises(ValueError, match="cannot tell its input size"):
        AdaptedModel(Custom(), attention="layers.*.mixer")
    a = AdaptedModel(Custom(), attention="layers.*.mixer", input_size=16, preprocess="inception")
    assert a.spec.preprocess.mean == (0.5, 0.5, 0.5) and a.num_prefix_tokens == 2
    feats = AdaptedModel(Custom(), attention="layers.*.mixer", input_size=16, features=True)
    from PIL import Image

    from vitviz.pipeline import Pipeline

    r = Pipeline(feats).run(Image.new("RGB", (20, 20)))
    assert feats.num_classes == 0 and r.attention_grads is None and r.top_k() == []
    from vitviz import views

    assert "no classifier" in views.get("relevance").unavailable(r)
    with pytest.raises(ValueError, match="labels has 3 names but Custom has 4 classes"):
        AdaptedModel(Custom(), attention="layers.*.mixer", input_size=16, labels=["a", "b", "c"])


# ---------------------------------------------------------------------------------------------------------------------
# vitviz --model path/to/file.py:ClassName --weights ckpt.pth --init JSON
# ---------------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def user_file(tmp_path_factory):
    """The user's own file (a copy of textbook_models.py) and a trained style-C state dict saved with torch.save."""
    import shutil

    import textbook_models

    tmp_path = tmp_path_factory.mktemp("user")
    path = tmp_path / "my_vit.py"
    shutil.copy(textbook_models.__file__, path)
    model = train(ViTC(emb_size=48, depth=2, num_heads=4))
    weights = tmp_path / "ckpt.pth"
    torch.save(model.state_dict(), weights)
    return path, weights, model


def _fake_gui(monkeypatch):
    import sys
    import types

    calls = {}

    def run_gui(images, model=None, device=None, settings=None, *, module=None, note=None, precision=None):
        calls.update(images=images, model=model, device=device, module=module, note=note, precision=precision)
        return 0

    fake = types.ModuleType("vitviz.gui.app")
    fake.run_gui = run_gui
    monkeypatch.setitem(sys.modules, "vitviz.gui.app", fake)
    return calls


def test_cli_model_from_the_users_file(user_file, monkeypatch):
    from vitviz.cli import main

    path, weights, model = user_file
    calls = _fake_gui(monkeypatch)
    assert main(["x.png", "--model", f"{path}:ViTC", "--weights", str(weights), "--init", '{"emb_size": 48}']) == 0
    m = calls["module"]
    assert isinstance(m, AdaptedModel) and calls["note"] is None and calls["images"] == ["x.png"]
    assert m.spec.name == "ViTC (ckpt.pth)" and m.spec.source_path == str(path)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(m(x), model(x))  # the weights were loaded
    # an --init file, no weights: random weights, said in a note
    init = path.parent / "init.json"
    init.write_text('{"emb_size": 48, "num_classes": 3}')
    assert main(["--model", f"{path}:ViTC", "--init", str(init)]) == 0
    assert calls["module"].num_classes == 3 and "Randomly initialised" in calls["note"]


@pytest.mark.parametrize("args, expected", [
    (["--model", "{dir}/missing.py:ViTC"], "missing.py: no such file"),
    (["--model", "{path}:Nope"], "defines no 'Nope'; its nn.Module classes: .*ViTC"),
    (["--model", "{path}:ViTC", "--init", "{{emb_size: 48}}"], "--init .*not valid JSON"),
    (["--model", "{path}:ViTC", "--init", '{{"width": 48}}'], r"ViTC\(width=48\) failed: TypeError"),
    (["--model", "{path}:ViTC", "--weights", "{weights}"], r"ckpt.pth: the weights do not match ViTC: shape mismatch"),
    (["--model", "{path}:ViTC", "--weights", "{weights}", "--init", '{{"emb_size": 48, "depth": 1}}'],
     r"ckpt.pth: the weights do not match ViTC: unexpected keys 'encoder.1"),
    (["--model", "{path}:Custom", "--init", '{{"dim": 24}}'], "Custom: found no attention to capture"),
    (["--model", "vit_b_16", "--weights", "{weights}"], "--weights and --init go with --model"),
])
def test_cli_model_errors_are_one_line_before_any_window(user_file, monkeypatch, capsys, args, expected):
    import re

    from vitviz.cli import main

    path, weights, _ = user_file
    calls = _fake_gui(monkeypatch)
    argv = [a.format(dir=path.parent, path=path, weights=weights) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert re.search(expected, err), err
    assert not calls  # no window


def test_cli_help_says_the_file_is_run(capsys):
    from vitviz.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "file.py:ClassName" in out and "imports and runs that file" in out and "weights_only=True" in out


def test_adapt_a_vitviz_vit():
    from vitviz.capture.foreign import adapt
    from vitviz.model import ViT

    vit = ViT(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=3)
    assert adapt(vit) is vit and vit.spec.input_size == (32, 32)  # built with ViT(...): a default spec
    adapt(vit, labels=["a", "b", "c"], preprocess="inception")
    assert vit.spec.labels == ("a", "b", "c") and vit.spec.preprocess.mean == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="labels has 2 names but the model has 3 classes"):
        adapt(vit, labels=["a", "b"])
    with pytest.raises(ValueError, match=r"options \['attention'\] apply to other modules"):
        adapt(vit, attention="blocks.*.attn")


class _LinearPatches(torch.nn.Module):
    """Patches cut with unfold + Linear (no Conv2d), ``prefix`` learned prefix tokens, one attention layer."""

    def __init__(self, prefix=1, patch=8, dim=16):
        super().__init__()
        self.patch, self.prefix = patch, torch.nn.Parameter(torch.randn(1, prefix, dim))
        self.to_tokens = torch.nn.Linear(3 * patch * patch, dim)
        self.blocks = torch.nn.ModuleList([torch.nn.TransformerEncoderLayer(dim, 2, 32, batch_first=True)])
        self.head = torch.nn.Linear(dim, 3)

    def forward(self, x):
        t = self.to_tokens(torch.nn.functional.unfold(x, self.patch, stride=self.patch).transpose(1, 2))
        t = torch.cat([self.prefix.expand(len(t), -1, -1), t], 1)
        for b in self.blocks:
            t = b(t)
        return self.head(t[:, 0])


def test_grid_without_a_patch_convolution():
    x = torch.randn(1, 3, 32, 32)
    cap = capture(_LinearPatches(prefix=1).eval(), x)  # 17 tokens on 32 px: 4x4 patches of 8 px and one [CLS]
    assert cap.grid == (4, 4) and cap.patch_size == 8 and cap.num_prefix_tokens == 1
    two = _LinearPatches(prefix=2).eval()  # 18 tokens: no square grid with 0 or 1 prefix tokens -> ask
    with pytest.raises(CaptureError, match="found no patch-embedding convolution.*pass patch_size="):
        capture(two, x)
    assert capture(two, x, patch_size=8).num_prefix_tokens == 2


def test_returned_copies_of_the_attention_have_no_gradient():
    import textbook_models as tm

    class CopyingAttention(tm.FasterMultiHeadAttention):
        def forward(self, x, output_attentions=False):
            out, probs = super().forward(x, output_attentions=output_attentions)
            return out, (probs.clone() if probs is not None else None)  # not what the output is computed from

    model = ViTForClassfication(CONFIG_D).eval()
    for blk in model.encoder.blocks:
        own = blk.attention
        blk.attention = CopyingAttention(CONFIG_D)
        blk.attention.load_state_dict(own.state_dict())
    x = torch.randn(1, 3, 32, 32)
    assert capture(model, x).attentions.shape == (2, 1, 4, 17, 17)  # the values are right
    with pytest.raises(CaptureError, match="do not depend on the attention tensors that were seen"):
        capture(model, x, target=0)  # but they have no gradient: said, not zeros


def test_blocks_that_do_not_chain_are_refused():
    """lucidrains-style layers (ModuleList of [attention branch, feed-forward branch]): no module's output is the
    block's, so the found 'blocks' (the attention branches) do not feed each other; said, not wrong tokens."""

    class Attention(torch.nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.qkv, self.out = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            return self.out(torch.softmax(q[:, None] @ k[:, None].transpose(-2, -1), dim=-1) @ v[:, None])[:, 0]

    class Residual(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return x + self.fn(x)

    class Model(torch.nn.Module):
        def __init__(self, dim=16):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, dim, 8, 8)
            self.layers = torch.nn.ModuleList(torch.nn.ModuleList([Residual(Attention(dim)), Residual(
                torch.nn.Linear(dim, dim))]) for _ in range(2))

        def forward(self, x):
            t = self.conv(x).flatten(2).transpose(1, 2)
            for attn, ff in self.layers:
                t = ff(attn(t))
            return t.mean(1)

    with pytest.raises(CaptureError, match=r"the input of layers.1.0 is not the output of layers.0.0: these modules "
                                           r"are not the transformer blocks"):
        capture(Model().eval(), torch.randn(1, 3, 16, 16))


_TINY = TINY_WEIGHTS


@pytest.mark.real_weights
@pytest.mark.skipif(not _TINY.is_file(), reason=f"real weights not present at {_TINY}")
def test_real_vit_tiny_as_a_timm_module_equals_vitviz():
    """The real ViT-Ti/16 as timm's own module, captured through the adapters (timm's fused attention switched off for
    the pass), against vitviz's own ViT loaded from the same file: attention, tokens and gradients on a photo."""
    import timm
    from safetensors.torch import load_file
    from skimage import data

    from vitviz.model import load_checkpoint

    ours = load_checkpoint(_TINY)
    x = ours.spec.preprocess(__import__("PIL.Image", fromlist=["Image"]).fromarray(data.chelsea()))[None]
    ref = capture(ours, x, target=285)
    assert int(ref.logits.argmax()) == 285
    tm = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=1000).eval()
    tm.load_state_dict(load_file(str(_TINY)))
    got = capture(tm, x, target=285)
    assert rel_err(got.attentions, ref.attentions) <= 1e-4 and rel_err(got.attention_grads, ref.attention_grads) <= 1e-3
    assert rel_err(got.tokens, ref.tokens) <= 1e-4 and tm.blocks[0].attn.fused_attn  # its flag restored


class _RaisesOnImages(ViTC):
    """Runs on the blank image of the check, raises on any other input (the user's own bug)."""

    def forward(self, x):
        if bool(x.abs().sum() > 0):
            raise KeyError("real images")
        return super().forward(x)


def test_a_forward_that_raises_is_named_by_its_file_and_class():
    from vitviz.capture.foreign import ForwardError

    m = AdaptedModel(_RaisesOnImages(emb_size=32, depth=1, num_heads=2), source_path=__file__)  # the check passes
    assert m.origin == f"{__file__}:_RaisesOnImages"  # the file as given, and the class
    x = torch.ones(1, 3, 32, 32)
    for run in (lambda: capture_module(m, x), lambda: capture_module(m, x, target="top"), lambda: m(x)):
        with pytest.raises(ForwardError) as e:
            run()
        assert str(e.value) == f"{__file__}:_RaisesOnImages forward raised KeyError: 'real images'"
        assert isinstance(e.value.__cause__, KeyError)  # the user's exception, with its traceback
    with pytest.raises(ForwardError) as e:  # a bare module: the name of its class's file
        capture_module(m.module, x)
    assert str(e.value) == "test_foreign.py:_RaisesOnImages forward raised KeyError: 'real images'"
