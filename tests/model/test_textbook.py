"""Textbook layouts as checkpoints: state dicts of styles B, C and D saved by the user's own module
load into vitviz.model.ViT with the same logits and attention."""

from __future__ import annotations

import pytest
import torch
from textbook_models import (
    CONFIG_D,
    VisionTransformer,
    ViTC,
    ViTForClassfication,
    rel_err,
    train,
)

from vitviz.capture import capture
from vitviz.model import CheckpointError, ViT, load_checkpoint
from vitviz.model.checkpoints.textbook import style_b_config

STYLES = {
    "B": lambda: VisionTransformer(img_size=32, patch_size=8, in_channels=3, num_classes=10, d_model=32, num_heads=4,
                                   num_layers=2, d_ff=64, dropout=0.1),
    "C": lambda: ViTC(img_size=32, patch_size=8, num_classes=10, emb_size=32, depth=2, num_heads=4),
    "D": lambda: ViTForClassfication(CONFIG_D),
}


def _logits(model, x):
    with torch.no_grad():
        out = model(x)
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("kind", ["B", "C", "D"])
@pytest.mark.parametrize("container", ["pth", "safetensors"])
def test_checkpoint_route_gives_the_modules_logits_and_attention(kind, container, tmp_path):
    module = train(STYLES[kind]())
    path = tmp_path / f"style_{kind}.{container}"
    if container == "pth":
        torch.save(module.state_dict(), path)
    else:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(path))
    vit = load_checkpoint(path, num_heads=4)
    assert isinstance(vit, ViT) and vit.spec.source_format == "textbook"
    assert vit.config.post_norm == (kind == "C") and vit.config.layer_norm_eps == 1e-5
    assert vit.config.depth == 2 and vit.config.embed_dim == 32 and vit.config.num_classes == 10
    x = torch.randn(3, 3, 32, 32)
    assert rel_err(vit(x).detach()[None], _logits(module, x)[None]) <= 1e-5
    ours, theirs = capture(vit, x, target=[0, 1, 2]), capture(module, x, target=[0, 1, 2])
    assert rel_err(ours.attentions, theirs.attentions) <= 1e-5
    assert rel_err(ours.tokens, theirs.tokens) <= 1e-5
    assert rel_err(ours.attention_grads, theirs.attention_grads) <= 1e-4


def test_heads_are_not_in_a_state_dict(tmp_path):
    sd = train(STYLES["C"]()).state_dict()
    with pytest.raises(CheckpointError, match="cannot infer the number of attention heads.*num_heads"):
        load_checkpoint(sd)


def test_bad_textbook_checkpoints_are_clear_errors():
    sd = dict(STYLES["B"]().state_dict())
    del sd["encoder.1.attn.W_k.weight"]
    with pytest.raises(CheckpointError, match=r"block 1 has only 'encoder.1.attn.W_q.weight', "
                                              r"'encoder.1.attn.W_v.weight' of W_q / W_k / W_v weight"):
        load_checkpoint(sd, num_heads=4)
    sd = {k: v for k, v in STYLES["D"]().state_dict().items() if not k.startswith("layernorm.")}
    with pytest.raises(CheckpointError, match="without a final LayerNorm.*vitviz.show"):
        load_checkpoint(sd, num_heads=4)
    sd = dict(STYLES["C"]().state_dict())
    sd["encoder.0.ff.0.weight"] = sd["encoder.0.ff.0.weight"][:64]
    with pytest.raises(CheckpointError, match="shape mismatch"):
        load_checkpoint(sd, num_heads=4)


def test_style_b_constructor_names():
    cfg = style_b_config(img_size=32, patch_size=8, in_channels=3, num_classes=10, d_model=32, num_heads=4,
                         num_layers=2, d_ff=64, dropout=0.1)
    loaded = load_checkpoint(train(STYLES["B"](), steps=1).state_dict(), num_heads=4).config
    for f in ("img_size", "patch_size", "in_channels", "num_classes", "embed_dim", "num_heads", "depth", "mlp_ratio",
              "layer_norm_eps"):
        assert getattr(cfg, f) == getattr(loaded, f), f
    assert ViT.from_config(cfg).config.drop_rate == 0.1


def test_cli_info_names_the_layout(tmp_path, capsys):
    from vitviz.cli import main

    path = tmp_path / "mine.pth"
    torch.save(train(STYLES["D"](), steps=1).state_dict(), path)
    assert main(["info", str(path), "--num-heads", "4"]) == 0
    out = capsys.readouterr().out
    assert "textbook" in out and "depth 2" in out and "4 heads" in out


def test_style_b_names_are_aliases_of_the_constructor():
    """ViT(d_model=..., num_layers=..., d_ff=..., dropout=...) is style B's own constructor call: the same config as
    style_b_config, with the exact MLP width."""
    from vitviz.model import ViT
    from vitviz.model.checkpoints.textbook import style_b_config

    kw = dict(img_size=32, patch_size=8, in_channels=3, num_classes=5, d_model=48, num_heads=4, num_layers=2,
              d_ff=96, dropout=0.1)
    m = ViT(**kw)
    assert m.config == ViT.from_config(style_b_config(**kw)).config
    assert m.config.embed_dim == 48 and m.config.depth == 2 and m.blocks[0].mlp.fc1.out_features == 96
    assert m.config.layer_norm_eps == 1e-5 and m.blocks[0].norm1.eps == 1e-5
    assert ViT(img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=4).config.layer_norm_eps == 1e-6
    for d_ff in (97, 100, 3072):  # widths that are not a whole multiple of d_model come out exact too
        assert ViT(img_size=32, patch_size=8, d_model=48, num_heads=4, num_layers=1,
                   d_ff=d_ff).blocks[0].mlp.fc1.out_features == d_ff
