"""The weights alone of every ViT-like architecture timm registers (issue 31): built small, saved bare as safetensors,
opened with :func:`vitviz.model.load_checkpoint`. Each is either refused in one line naming the file, or opens with
timm's own output (within 1e-4) at its native size; none may open with a part misread. The full sweep is slow
(about 380 architectures); the fast test runs one architecture of each kind the sweep found. The marks of
:mod:`vitviz.model.checkpoints.bare_parts` are checked against timm's own block classes and configurations."""

from __future__ import annotations

import importlib.util
import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from family_fixtures import FAMILIES
from family_helpers import randomise_, rel_err, write_timm_folder
from safetensors.torch import save_file

from vitviz.model import load_checkpoint
from vitviz.model.checkpoints import CheckpointError

timm = pytest.importorskip("timm")
from timm.models import _registry  # noqa: E402

MODULES = ("vision_transformer", "eva", "deit", "beit", "naflexvit", "vision_transformer_relpos",
           "vision_transformer_hybrid", "vision_transformer_sam", "cait", "xcit", "convit", "crossvit", "qwen3_vit",
           "gemma4_vit", "deepseek_vit")
ENORMOUS = "eva02_enormous_patch14_clip_224"


def _archs() -> list[str]:
    return [a for a in timm.list_models() if _registry._model_to_module.get(a) in MODULES]


def _patch(arch: str) -> int:
    return 14 if "patch14" in arch else 8 if "patch8" in arch else 16


def _build(arch: str) -> tuple[torch.nn.Module, dict]:
    """The architecture small: 2 blocks of width 64 and 2 heads where timm takes them, a 4x4 grid where it can."""
    p = _patch(arch)
    last: Exception | None = None
    for kw in (dict(img_size=4 * p, embed_dim=64, depth=2, num_heads=2), dict(embed_dim=64, depth=2, num_heads=2),
               dict(img_size=4 * p, depth=2), dict(depth=2), {}):
        if not kw:  # native size (CrossViT: per-branch depths), when it is small: counted on the meta device first
            meta = timm.create_model(arch, pretrained=False, num_classes=0, device="meta")
            if sum(t.numel() for t in meta.parameters()) > 50_000_000:
                pytest.skip(f"{arch}: not built small ({last}) and over 50M parameters at its native size")
        try:
            torch.manual_seed(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return timm.create_model(arch, pretrained=False, num_classes=0, **kw), kw
        except Exception as e:  # an argument this architecture does not take: the next, smaller override
            last = e
    raise AssertionError(f"{arch}: not built small ({last})")


def _sweep_one(arch: str, tmp_path) -> str:
    """'refused: <line>' or 'equal'; fails when vitviz opens the weights with another output than timm's."""
    model, kw = _build(arch)
    randomise_(model).eval()
    f = tmp_path / f"{arch}.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(f))
    try:
        ours = load_checkpoint(f, num_heads=kw.get("num_heads"))
    except CheckpointError as e:
        msg = str(e)
        assert "\n" not in msg and msg.startswith(str(f)), msg
        return "refused: " + msg[len(str(f)) + 2:]
    x = torch.randn(1, 3, *ours.config.img_size)
    with torch.no_grad():
        got, ref = ours(x), model(x)
    assert got.shape == ref.shape and rel_err(got, ref) <= 1e-4, \
        f"{arch}: its weights alone open with another output than timm's ({tuple(got.shape)} vs " \
        f"{tuple(ref.shape)}, {rel_err(got, ref) if got.shape == ref.shape else '-'})"
    return "equal"


# one of each kind the full sweep met: plain / DeiT / DeiT III / CLIP / QuickGELU CLIP / SigLIP (map, no prefix) /
# map beside registers / residual post-norm (rpn) / GAP / registers / BEiT / BEiT 3 / EVA (v1) / EVA-02 / CaiT /
# parallel blocks / AIMv2 / relpos / hybrid / RADIO
FAST = ("vit_tiny_patch16_224", "deit_tiny_distilled_patch16_224", "deit3_small_patch16_224",
        "vit_base_patch16_clip_224", "vit_base_patch16_clip_quickgelu_224", "vit_base_patch16_siglip_224",
        "vit_so150m_patch16_reg4_map_256", "vit_base_patch16_rpn_224", "vit_medium_patch16_gap_256",
        "vit_small_patch14_reg4_dinov2", "beit_base_patch16_224", "beit3_base_patch16_224", "eva_giant_patch14_224",
        "eva02_tiny_patch14_224", "cait_xxs24_224", "vit_small_patch16_18x2_224", "aimv2_large_patch14_224",
        "vit_relpos_small_patch16_224", "vit_small_r26_s32_224", "vit_base_patch16_radio_v3")


@pytest.mark.parametrize("arch", FAST)
def test_bare_weights_of_each_kind_are_refused_or_equal(tmp_path, arch):
    _sweep_one(arch, tmp_path)


SWEEP = [a for a in _archs() if "enormous" not in a and "7b" not in a]


def test_the_sweep_covers_timms_vit_like_architectures():
    assert len(SWEEP) >= 300 and set(FAST) <= set(SWEEP)


@pytest.mark.slow
@pytest.mark.parametrize("arch", SWEEP)
def test_bare_weights_of_every_timm_vit_are_refused_or_equal(tmp_path, arch):
    """The whole sweep (minutes): every architecture of :data:`MODULES` but EVA-02 enormous (its mark is its native
    width: :func:`test_eva02_enormous_weights_alone_are_refused`) and the 7B ones (too large to build here)."""
    _sweep_one(arch, tmp_path)


def test_the_post_norm_mark_is_timms_res_post_block():
    """The keys :mod:`bare_parts` reads as residual post-norm (fc_norm, no [CLS], no register, no final norm, no qkv
    bias) belong, among timm's VisionTransformer architectures, exactly to those built of ``ResPostBlock``."""
    from timm.models.vision_transformer import ResPostBlock

    marked, post = set(), set()
    for arch in [a for a in timm.list_models() if _registry._model_to_module[a] == "vision_transformer"]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = timm.create_model(arch, pretrained=False, num_classes=0, depth=1, device="meta")
        k = set(m.state_dict())
        if "fc_norm.weight" in k and not k & {"cls_token", "reg_token", "norm.weight", "blocks.0.attn.qkv.bias"} \
                and "blocks.0.attn.qkv.weight" in k:
            marked.add(arch)
        if isinstance(m.blocks[0], ResPostBlock):
            post.add(arch)
    assert post and marked == post


def _enormous_keys(depth: int = 1) -> dict[str, torch.Tensor]:
    """EVA-02 enormous at its native width (timm's own model on the meta device, one block), as zeros in fp16."""
    m = timm.create_model(ENORMOUS, pretrained=False, depth=depth, img_size=28, num_classes=0, device="meta")
    assert all(type(b).__name__ == "EvaBlockPostNorm" for b in m.blocks)  # what the mark stands for
    return {k: torch.zeros(v.shape, dtype=torch.float16) for k, v in m.state_dict().items()}


def _refused(path, *words: str) -> str:
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path)), msg
    assert all(w in msg for w in words), msg
    return msg


def test_eva02_enormous_weights_alone_are_refused(tmp_path):
    """timm's ``eva02_enormous_patch14_*``: keys as EVA (v1)'s, residual post-norm in no key; its shapes name it.
    EVA (v1) giant, pre-norm with the same keys, still opens (``FAST``)."""
    f = tmp_path / "model.safetensors"
    save_file(_enormous_keys(), str(f))
    _refused(f, "post-norm", "EVA-02 enormous")


def test_open_clip_eva02_e_is_refused(tmp_path):
    """open_clip's ``EVA02-E-14`` / ``-plus`` (a timm ``eva02_enormous`` trunk): refused with its own
    ``open_clip_config.json`` (the trunk is not one vitviz reads) and without it."""
    spec = importlib.util.find_spec("open_clip")  # its own model configs, read without importing it (slow)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("open_clip is not installed")
    configs = Path(spec.submodule_search_locations[0]) / "model_configs"
    trunk = {f"visual.trunk.{k}": v for k, v in _enormous_keys().items()}
    for name in ("EVA02-E-14", "EVA02-E-14-plus"):
        cfg = json.loads((configs / f"{name}.json").read_text())
        assert cfg["vision_cfg"]["timm_model_name"].startswith("eva02_enormous")
        folder = tmp_path / name
        folder.mkdir()
        save_file(trunk, str(folder / "open_clip_model.safetensors"))
        (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg}))
        _refused(folder, "eva02_enormous", "post-norm")
        (folder / "open_clip_config.json").unlink()
        _refused(folder, "open_clip_config.json")


def test_timm_folders_of_post_norm_architectures_are_refused(tmp_path):
    """With its config.json too, a residual post-norm architecture is refused by name (its keys would open)."""
    for arch in ("vit_base_patch16_rpn_224", ENORMOUS):
        m = timm.create_model(arch, pretrained=False, num_classes=0, depth=1, embed_dim=64, num_heads=2,
                              img_size=4 * _patch(arch))
        size = 4 * _patch(arch)
        folder = write_timm_folder(tmp_path / arch, m, arch, {"input_size": [3, size, size]})
        _refused(folder, "post-norm", arch)


def test_clip_tower_weights_alone_are_refused_naming_the_activation(tmp_path):
    """A timm CLIP tower's keys are the same with GELU and with OpenAI's QuickGELU (the sweep found the
    ``*_clip_quickgelu_*`` weights opening with GELU): alone they are refused naming the activation; the folder,
    whose config.json names the architecture, opens equal to timm's QuickGELU model."""
    arch = "vit_base_patch16_clip_quickgelu_224"
    m = randomise_(timm.create_model(arch, pretrained=False, num_classes=0, depth=2, embed_dim=64, num_heads=2,
                                     img_size=64)).eval()
    folder = write_timm_folder(tmp_path / arch, m, arch, {"input_size": [3, 64, 64]})
    _refused(folder / "model.safetensors", "QuickGELU", "config.json")
    ours = load_checkpoint(folder)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert rel_err(ours(x), m(x)) <= 1e-4


def test_attention_pool_beside_registers_is_refused_with_its_folder_too(tmp_path):
    """``vit_so150m_patch16_reg4_map_256``: timm's pool skips the registers, vitviz's would read them (the sweep
    found it opening with a relative error of 0.5): refused alone and from its timm folder."""
    arch = "vit_so150m_patch16_reg4_map_256"
    m = timm.create_model(arch, pretrained=False, num_classes=0, depth=1, embed_dim=64, num_heads=2, img_size=64)
    assert m.num_prefix_tokens == 4 and not m.pool_include_prefix
    folder = write_timm_folder(tmp_path / arch, m, arch, {"input_size": [3, 64, 64]})
    _refused(folder / "model.safetensors", "attention-pool", "reg_token")
    _refused(folder, "attention-pool", "reg_token")


HF_FAMILIES = [f for f in FAMILIES if f.startswith("hf-")]


@pytest.mark.parametrize("family", HF_FAMILIES)
def test_hf_weights_alone_are_refused_or_open_as_their_folder(tmp_path, family):
    """Each Hugging Face family's ``model.safetensors`` alone: refused in one line, or the same model as its folder
    (read with its config.json and tested against transformers in the family tests), at the folder's size."""
    folder = FAMILIES[family](tmp_path / family)
    a = load_checkpoint(folder)
    bare = tmp_path / "model.safetensors"
    shutil.copy(folder / "model.safetensors", bare)
    try:
        b = load_checkpoint(bare, num_heads=a.config.num_heads)
    except CheckpointError as e:
        assert "\n" not in str(e) and str(e).startswith(str(bare)), str(e)
        return
    x = torch.randn(1, 3, *a.config.img_size)
    with torch.no_grad():
        assert rel_err(b(x), a(x)) <= 1e-4, family


def test_hf_clip_weights_alone_are_refused_naming_the_activation(tmp_path):
    """OpenAI's HF CLIP weights use QuickGELU, LAION's GELU, with the same keys: alone, refused (they opened with
    QuickGELU, whichever they were)."""
    folder = FAMILIES["hf-clip"](tmp_path / "clip")
    assert load_checkpoint(folder).config.act_layer == "quick_gelu"  # transformers' default, written in config.json
    bare = tmp_path / "model.safetensors"
    shutil.copy(folder / "model.safetensors", bare)
    _refused(bare, "QuickGELU", "config.json")
