"""Models by name from the Hugging Face Hub, with the Hub faked on 127.0.0.1 (tests/fake_hub.py): names, downloads
through huggingface_hub's own code, the cache, offline mode, cancel, unsupported architectures, the curated list."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fake_hub import big_file, timm_repo
from repo_paths import SHARED_WEIGHTS

from vitviz.model.sources import catalog, hub
from vitviz.model.sources.name_errors import ModelNameError
from vitviz.model.sources.refs import describe_ref, open_model, parse_model_ref
from vitviz.model.sources.torch_hub import DownloadCancelled, PretrainedError

REPO = "timm/vit_tiny_test.t1"


def _partials(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.name.endswith(".incomplete")]


def _blobs(cache: Path, repo: str) -> set[str]:
    d = cache / ("models--" + repo.replace("/", "--")) / "blobs"
    return {p.name for p in d.iterdir()} if d.is_dir() else set()


# ---------------------------------------------------------------------------------------------------------- names
@pytest.mark.parametrize("text, ref", [
    ("dino-s8", "hub:timm/vit_small_patch8_224.dino"),
    ("dinov2-s-reg", "hub:timm/vit_small_patch14_reg4_dinov2.lvd142m"),
    ("timm/vit_small_patch14_reg4_dinov2.lvd142m", "hub:timm/vit_small_patch14_reg4_dinov2.lvd142m"),
    ("hf-hub:timm/vit_small_patch14_reg4_dinov2.lvd142m", "hub:timm/vit_small_patch14_reg4_dinov2.lvd142m"),
    ("hf-hub:timm/ViT-B-16-SigLIP", "hub:timm/ViT-B-16-SigLIP"),
    ("facebook/dinov2-small", "hub:facebook/dinov2-small"),
    ("facebook/dino-vitb16", "hub:facebook/dino-vitb16"),
    ("openai/clip-vit-base-patch16", "hub:openai/clip-vit-base-patch16"),
    ("google/siglip-base-patch16-224", "hub:google/siglip-base-patch16-224"),
    ("google/vit-base-patch16-224", "hub:google/vit-base-patch16-224"),
    ("hub:facebook/dinov2-small", "hub:facebook/dinov2-small"),
    ("vit_b_16", "pretrained:vit_b_16"),
    ("demo", "demo"),
    ("vit_tiny_patch16_224", "random:vit_tiny_patch16_224"),
])
def test_every_name_form_parses_without_network(text, ref, monkeypatch):
    import huggingface_hub

    def no_network(*a, **k):
        raise AssertionError("parsing a name must not touch the network")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_network)
    assert parse_model_ref(text) == ref


def test_an_existing_folder_wins_over_a_hub_id(tmp_path, monkeypatch):
    (tmp_path / "facebook" / "dinov2-small").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert parse_model_ref("facebook/dinov2-small") == f"file:{tmp_path / 'facebook' / 'dinov2-small'}"


NOT_AN_ID = "no such file or directory, nor a Hugging Face Hub id"
LISTED = " ('vitviz models' lists the names)"


@pytest.mark.parametrize("text, cause", [
    ("missing.pth", "no such file or directory"),
    ("runs/missing.safetensors", "no such file or directory"),
    ("a/b/c", f"{NOT_AN_ID} (it has 2 '/')"),
    ("no spaces/allowed", f"{NOT_AN_ID} (it has a space)"),
    ("x/", f"{NOT_AN_ID} (nothing after its '/')"),
    ("hf-hub:", "not a Hugging Face Hub id (nothing after 'hf-hub:'; expected hf-hub:OWNER/NAME)"),
    ("just-a-word", "no such file, and not a known model name"),
    ("a--b/c", f"{NOT_AN_ID} (it has '--')"),
    ("../up/dir", f"{NOT_AN_ID} (it has '..')"),
])
def test_what_is_not_a_name_is_refused_in_one_short_line_naming_it_and_the_cause(text, cause):
    with pytest.raises(ModelNameError) as e:
        parse_model_ref(text)
    shown = repr(text) if text.endswith(":") else text
    assert str(e.value) == f"{shown}: {cause}{LISTED}"  # not the list of every name: 'vitviz models' has it


@pytest.mark.parametrize("text, cause", [
    ("hub:bad", "it has no '/'"), ("hub:a/b/c", "it has 2 '/'"), ("hub:x/y.pth", "it ends in .pth, like a file")])
def test_a_hub_reference_must_hold_a_repository_id(text, cause):
    with pytest.raises(ModelNameError) as e:
        parse_model_ref(text)
    assert str(e.value) == f"{text}: not a Hugging Face Hub id ({cause}; expected hub:OWNER/NAME){LISTED}"


def test_describe_ref_uses_the_curated_title():
    assert describe_ref("hub:timm/vit_small_patch8_224.dino") == "DINO ViT-S/8"
    assert describe_ref("hub:facebook/dinov2-small") == "facebook/dinov2-small"


# ---------------------------------------------------------------------------------------------------- curated list
def test_curated_list_names_the_common_families_and_its_sizes_match_timm():
    import timm

    titles = " | ".join(m.title for m in catalog.HUB_MODELS)
    for needed in ("DeiT-S", "ViT-B/16 augreg", "DINO ViT-S/8", "DINO ViT-B/16", "DINOv2 ViT-S/14 |",
                   "DINOv2 ViT-S/14 with registers", "DINOv2 ViT-B/14 |", "DINOv2 ViT-B/14 with registers",
                   "CLIP ViT-B/16", "SigLIP ViT-B/16"):
        assert needed in titles + " |", needed
    assert len(catalog.HUB_BY_KEY) == len(catalog.HUB_BY_REPO) == len(catalog.HUB_MODELS)
    groups = {m.group for m in catalog.photo_offers()}
    assert groups == {"imagenet", "dino"}  # the offer: ImageNet classifiers and DINO
    known = set(timm.list_pretrained())
    for m in catalog.HUB_MODELS:
        assert m.group in catalog.HUB_GROUPS
        if m.text == "hf" or not m.repo.startswith("timm/"):  # Transformers folders: test_text_catalog.py
            continue
        assert m.repo.startswith("timm/") and m.repo[5:] in known, m.repo
        cfg = timm.models.get_pretrained_cfg(m.repo[5:]).to_dict()
        assert cfg["hf_hub_id"] == m.repo
        with torch.device("meta"):
            model = timm.create_model(m.repo[5:].split(".")[0], pretrained=False,
                                      num_classes=cfg.get("num_classes", 1000))
        nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        assert abs(nbytes / 1e6 - m.size_mb) < 0.1, (m.key, nbytes / 1e6, m.size_mb)


@pytest.mark.parametrize("env", [{}, {"HF_HOME": "/tmp/hfhome"}, {"XDG_CACHE_HOME": "/tmp/xdg"},
                                 {"HF_HUB_CACHE": "/tmp/hubcache", "HF_HOME": "/tmp/ignored"},
                                 {"HUGGINGFACE_HUB_CACHE": "/tmp/legacy"}])
def test_cache_folder_is_huggingface_hubs(env):
    """catalog.hf_cache_dir (no import of huggingface_hub) agrees with huggingface_hub's own constant."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME")}
    code = ("import huggingface_hub.constants as c; from vitviz.model.sources import catalog; "
            "print(c.HF_HUB_CACHE); print(catalog.hf_cache_dir())")
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split("\n")
    assert Path(out[0]) == Path(out[1]), out


# ------------------------------------------------------------------------------------------------------ downloads
def test_download_loads_the_model_and_reports_progress(fake_hub, tmp_path, capfd):
    files, ref = timm_repo()
    fake_hub.add(REPO, {**files, "tf_model.h5": b"never", "flax_model.msgpack": b"never",
                        "open_clip_pytorch_model.bin": b"never", "pytorch_model.bin": b"never"})
    seen: list[tuple[int, int]] = []
    model = hub.load_hub(REPO, progress=lambda d, t: seen.append((d, t)), show_bar=True)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(model(x), ref(x), atol=1e-5, rtol=1e-4)
    # only the config and the safetensors weights were downloaded (nothing else, no pickles)
    assert fake_hub.gets() == [(REPO, "config.json"), (REPO, "model.safetensors")]
    weights = len(files["model.safetensors"])
    assert seen[-1] == (weights, weights)
    on_weights = [d for d, t in seen if t == weights]
    assert len(on_weights) > 10 and on_weights == sorted(on_weights)  # chunk by chunk, never backwards
    assert "model.safetensors" in capfd.readouterr().err  # the terminal bar
    assert catalog.hub_is_cached(REPO)
    assert model.spec.name == REPO


def test_cache_hit_makes_no_request_even_online(fake_hub, tmp_path):
    files, ref = timm_repo()
    fake_hub.add(REPO, files)
    hub.load_hub(REPO, show_bar=False)
    n = len(fake_hub.requests)
    model = hub.load_hub(REPO, show_bar=False)
    assert len(fake_hub.requests) == n  # not even a HEAD
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(model(x), ref(x), atol=1e-5, rtol=1e-4)


def test_cached_model_opens_offline(fake_hub, monkeypatch):
    files, _ = timm_repo()
    fake_hub.add(REPO, files)
    hub.load_hub(REPO, show_bar=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fake_hub.repos.clear()
    n = len(fake_hub.requests)
    model, note = open_model(parse_model_ref(REPO), show_bar=False)
    assert note is None and model.spec.config.depth == 2 and len(fake_hub.requests) == n


def test_offline_and_not_cached_names_the_model_and_the_cache(fake_hub, monkeypatch, tmp_path):
    fake_hub.add(REPO, timm_repo()[0])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PretrainedError) as e:
        hub.load_hub("timm/vit_small_patch8_224.dino", show_bar=False)
    msg = str(e.value)
    assert "DINO ViT-S/8" in msg and "timm/vit_small_patch8_224.dino" in msg and "offline" in msg
    assert str(tmp_path / "hf-cache" / "models--timm--vit_small_patch8_224.dino") in msg
    assert fake_hub.requests == []


def test_unreachable_and_not_cached_names_the_model_and_the_cache(fake_hub, monkeypatch, tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(PretrainedError) as e:
        hub.load_hub(REPO, show_bar=False)
    msg = str(e.value)
    assert REPO in msg and "cannot be reached" in msg
    assert str(tmp_path / "hf-cache" / ("models--" + REPO.replace("/", "--"))) in msg


def test_cancelled_download_leaves_no_partial_file_and_a_clean_state(fake_hub, tmp_path):
    files, ref = timm_repo()
    big = {**files, "model.safetensors": big_file(2 << 20)}
    fake_hub.add(REPO, big)
    cache = tmp_path / "hf-cache"
    calls = []

    def cancel_mid_file(done: int, total: int) -> bool:
        calls.append((done, total))
        return not (total == 2 << 20 and done >= 3 * fake_hub.chunk)

    with pytest.raises(DownloadCancelled, match="cancelled"):
        hub.load_hub(REPO, progress=cancel_mid_file, show_bar=False)
    assert any(t == 2 << 20 and 0 < d < t for d, t in calls)  # it stopped in the middle
    assert _partials(cache) == []
    import hashlib

    assert hashlib.sha256(big["model.safetensors"]).hexdigest() not in _blobs(cache, REPO)
    assert not catalog.hub_is_cached(REPO)
    # clear state: the next attempt downloads the (now valid) model from the start
    fake_hub.add(REPO, files)
    model = hub.load_hub(REPO, show_bar=False)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(model(x), ref(x), atol=1e-5, rtol=1e-4)


def test_downloads_use_plain_http_and_restore_the_setting(fake_hub):
    from huggingface_hub import constants

    fake_hub.add(REPO, timm_repo()[0])
    before = constants.HF_HUB_DISABLE_XET
    seen = []
    hub.load_hub(REPO, progress=lambda d, t: seen.append(constants.HF_HUB_DISABLE_XET), show_bar=False)
    assert seen and all(seen) and constants.HF_HUB_DISABLE_XET == before


@pytest.mark.parametrize("config, needles", [
    ({"architecture": "swin_tiny_patch4_window7_224", "num_classes": 1000}, ("swin_tiny_patch4_window7_224",
                                                                              "windowed")),
    ({"architecture": "convnext_tiny", "num_classes": 1000}, ("convnext_tiny",)),
    ({"architecture": "vit_base_r50_s16_384", "num_classes": 1000}, ("vit_base_r50_s16_384",)),
    ({"model_type": "swin", "architectures": ["SwinForImageClassification"]}, ("'swin'", "SwinForImage",
                                                                                "windowed")),
    ({"model_type": "bert"}, ("'bert'",)),
    ({"hello": "world"}, ("neither a timm architecture",)),
])
def test_unsupported_architecture_is_refused_before_the_weights(fake_hub, config, needles):
    fake_hub.add("someone/model", {"config.json": json.dumps(config).encode(), "model.safetensors": b"x" * 100})
    with pytest.raises(PretrainedError) as e:
        hub.load_hub("someone/model", show_bar=False)
    msg = str(e.value)
    assert "someone/model" in msg and "not supported" in msg and "vit_*" in msg and "dinov2" in msg
    for n in needles:
        assert n in msg
    assert fake_hub.gets("model.safetensors") == []


def test_missing_repository_and_missing_files(fake_hub):
    with pytest.raises(PretrainedError, match=r"no such model on the Hugging Face Hub .*name\. Curated names"):
        hub.load_hub("nobody/nothing", show_bar=False)
    with pytest.raises(PretrainedError, match=r"^timm/vit_small_patch8_224\.dinov: no such model on the Hugging Face "
                                              r"Hub .*; did you mean timm/vit_small_patch8_224\.dino\? Curated"):
        hub.load_hub("timm/vit_small_patch8_224.dinov", show_bar=False)  # a typo of a curated repository
    fake_hub.add("someone/weights-only", {"model.safetensors": b"x"})
    with pytest.raises(PretrainedError, match="no config.json"):
        hub.load_hub("someone/weights-only", show_bar=False)
    files, _ = timm_repo()
    fake_hub.add("someone/config-only", {"config.json": files["config.json"], "model.onnx": b"x"})
    with pytest.raises(PretrainedError, match="model.safetensors, pytorch_model.bin"):
        hub.load_hub("someone/config-only", show_bar=False)
    assert fake_hub.gets("model.onnx") == []


def test_torch_file_fallback_is_read_with_weights_only(fake_hub, monkeypatch):
    import io

    files, ref = timm_repo()
    buf = io.BytesIO()
    torch.save(ref.state_dict(), buf)
    fake_hub.add(REPO, {"config.json": files["config.json"], "pytorch_model.bin": buf.getvalue()})
    calls = []
    real_load = torch.load

    def spy(*a, **k):
        calls.append(k.get("weights_only"))
        return real_load(*a, **k)

    monkeypatch.setattr(torch, "load", spy)
    model = hub.load_hub(REPO, show_bar=False)
    assert calls and all(c is True for c in calls)
    assert fake_hub.gets() == [(REPO, "config.json"), (REPO, "pytorch_model.bin")]
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(model(x), ref(x), atol=1e-5, rtol=1e-4)


def test_hugging_face_layout_with_its_preprocessor_config(fake_hub, tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=128, num_labels=3)
    torch.manual_seed(0)
    ref = transformers.ViTForImageClassification(cfg).eval()
    out = tmp_path / "hf"
    ref.save_pretrained(out)
    pre = {"do_resize": True, "size": {"height": 32, "width": 32}, "resample": 2, "do_normalize": True,
           "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "do_rescale": True,
           "rescale_factor": 1 / 255, "image_processor_type": "ViTImageProcessor"}
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    files["preprocessor_config.json"] = json.dumps(pre).encode()
    fake_hub.add("google/vit-tiny-test", files)
    model, _ = open_model(parse_model_ref("google/vit-tiny-test"), show_bar=False)
    assert {f for _, f in fake_hub.gets()} == {"config.json", "preprocessor_config.json", "model.safetensors"}
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(model(x), ref(pixel_values=x).logits, atol=1e-5, rtol=1e-4)


def test_load_model_takes_every_name_form(fake_hub):
    """The same names as the CLI and the window: a curated key, timm/..., hf-hub:..."""
    from vitviz.model import load_model

    files, _ = timm_repo()
    fake_hub.add("timm/vit_small_patch8_224.dino", files)  # (the curated repository, served tiny)
    for name in ("dino-s8", "timm/vit_small_patch8_224.dino", "hf-hub:timm/vit_small_patch8_224.dino"):
        m = load_model(name, show_bar=False)
        assert m.spec.name == "DINO ViT-S/8"
    assert len(fake_hub.gets()) == 2  # downloaded once


# ----------------------------------------------------------------------------------------------------------- CLI
def test_cli_models_lists_the_curated_list_with_sizes_and_cache_state(fake_hub, capsys, monkeypatch, tmp_path):
    from vitviz.cli import main

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    fake_hub.add("timm/vit_small_patch8_224.dino", timm_repo()[0])
    hub.load_hub("timm/vit_small_patch8_224.dino", show_bar=False)
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "hf-cache") in out
    lines = out.splitlines()
    for m in catalog.HUB_MODELS:
        line = next(x for x in lines if x.split()[:1] == [m.key])
        assert f"{m.size_mb:.1f} MB" in line and m.title in line
        assert ("not cached" not in line) == (m.key == "dino-s8"), line
        assert m.repo in out
    assert "vit_b_16" in out and "torchvision" in out


def test_cli_info_describes_a_curated_model_without_downloading(fake_hub, capsys):
    from vitviz.cli import main

    assert main(["info", "dinov2-s-reg"]) == 0
    out = capsys.readouterr().out
    assert "not downloaded yet" in out and "timm/vit_small_patch14_reg4_dinov2.lvd142m" in out and "88.2 MB" in out
    assert fake_hub.requests == []


def test_cli_offline_error_is_one_line_naming_model_and_cache(fake_hub, capsys, monkeypatch, tmp_path):
    from vitviz.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["predict", "facebook/dinov2-small", "x.png"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "facebook/dinov2-small" in err[0] and str(tmp_path / "hf-cache") in err[0]


def test_hugging_face_dinov2_with_registers_by_id(fake_hub, tmp_path):
    """An HF id of a family with registers: the folder the Hub cache holds opens with its own config."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Dinov2WithRegistersConfig(image_size=28, patch_size=14, hidden_size=32, num_hidden_layers=2,
                                                 num_attention_heads=2, intermediate_size=64, num_register_tokens=4)
    torch.manual_seed(0)
    ref = transformers.Dinov2WithRegistersModel(cfg).eval()
    ref.save_pretrained(tmp_path / "hf")
    fake_hub.add("facebook/dinov2-with-registers-tiny", {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()})
    model = load_model_ref("facebook/dinov2-with-registers-tiny")
    assert model.config.num_reg_tokens == 4
    x = torch.randn(1, 3, 28, 28)
    with torch.no_grad():
        assert torch.allclose(model(x), ref(pixel_values=x).pooler_output, atol=1e-5, rtol=1e-4)


def load_model_ref(text: str):
    return open_model(parse_model_ref(text), show_bar=False)[0]


def test_open_clip_repositories_fetch_their_own_files(fake_hub):
    """open_clip's spelling (hf-hub:...): open_clip_config.json, then open_clip_model.safetensors; a ResNet tower is
    refused from its config."""
    cfg = {"model_cfg": {"embed_dim": 16, "vision_cfg": {"image_size": 32, "layers": 2, "width": 32,
                                                         "patch_size": 8}}}
    fake_hub.add("someone/clip-tiny", {"open_clip_config.json": json.dumps(cfg).encode(),
                                       "open_clip_model.safetensors": b"weights", "open_clip_pytorch_model.bin": b"x"})
    files = hub.fetch(hub.hub_repo("hf-hub:someone/clip-tiny"), show_bar=False)
    assert files.config.name == "open_clip_config.json" and files.source == files.weights
    assert files.weights.read_bytes() == b"weights"
    assert fake_hub.gets("open_clip_pytorch_model.bin") == []
    resnet = {"model_cfg": {"vision_cfg": {"image_size": 224, "layers": [3, 4, 6, 3], "width": 64}}}
    fake_hub.add("someone/rn50", {"open_clip_config.json": json.dumps(resnet).encode(),
                                  "open_clip_model.safetensors": b"w"})
    with pytest.raises(PretrainedError, match="ResNet image tower"):
        hub.fetch("someone/rn50", show_bar=False)
    assert fake_hub.gets("open_clip_model.safetensors") == [("someone/clip-tiny", "open_clip_model.safetensors")]


@pytest.mark.parametrize("body, needle", [(b"{not json", "cannot read its config.json"),
                                          (b"[1, 2]", "not a JSON object")])
def test_a_broken_config_is_named(fake_hub, body, needle):
    fake_hub.add("someone/broken", {"config.json": body, "model.safetensors": b"w"})
    with pytest.raises(PretrainedError, match=needle) as e:
        hub.fetch("someone/broken", show_bar=False)
    assert "someone/broken" in str(e.value) and fake_hub.gets("model.safetensors") == []


@pytest.mark.real_weights
def test_real_vit_tiny_by_its_timm_name(fake_hub, tmp_path):
    """Real weights (../shared/weights) served as timm's upload of ViT-Ti/16 augreg, opened by its timm name:
    chelsea's top class is 285 (Egyptian cat) with p = 0.733, as the weights' README measured."""
    shared = SHARED_WEIGHTS
    weights = shared / "vit_tiny_patch16_224_augreg_in21k_ft_in1k.safetensors"
    if not weights.is_file():
        pytest.skip("../shared/weights is absent")
    skimage_data = pytest.importorskip("skimage.data")
    from PIL import Image

    config = {"architecture": "vit_tiny_patch16_224", "num_classes": 1000, "num_features": 192,
              "pretrained_cfg": {"tag": "augreg_in21k_ft_in1k", "input_size": [3, 224, 224], "crop_pct": 0.875,
                                 "interpolation": "bicubic", "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5],
                                 "num_classes": 1000}}
    repo = "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k"
    fake_hub.add(repo, {"config.json": json.dumps(config).encode(), "model.safetensors": weights.read_bytes()})
    model = load_model_ref(f"hf-hub:{repo}")
    x = model.spec.preprocess(Image.fromarray(skimage_data.chelsea()))[None]
    with torch.no_grad():
        p = model(x)[0].softmax(-1)
    top = p.topk(3)
    assert top.indices.tolist()[0] == 285 and abs(float(top.values[0]) - 0.733) < 0.02
    assert model.spec.label(285) == "Egyptian cat"
