"""Named pretrained weights without network: a pre-seeded cache, a monkeypatched download, failures and cancel."""

from __future__ import annotations

import hashlib
import importlib
import io
import urllib.error

import pytest
import torch

from vitviz.model.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess
from vitviz.model.sources.torch_hub import (
    PRETRAINED,
    DownloadCancelled,
    PretrainedError,
    PretrainedInfo,
    cache_path,
    is_cached,
    pretrained,
)

torchvision = pytest.importorskip("torchvision")
# the module (``vitviz.model.sources.torch_hub`` the attribute is the function of the same name)
pretrained_mod = importlib.import_module("vitviz.model.sources.torch_hub")


def _tiny_tv_bytes() -> tuple[bytes, torch.nn.Module]:
    from torchvision.models.vision_transformer import VisionTransformer

    ref = VisionTransformer(image_size=32, patch_size=16, num_layers=1, num_heads=2, hidden_dim=128, mlp_dim=256,
                            num_classes=3).eval()
    with torch.no_grad():
        ref.heads.head.weight.normal_(0, 0.1)
    buf = io.BytesIO()
    torch.save(ref.state_dict(), buf)
    return buf.getvalue(), ref


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    """A registry entry for a tiny torchvision-format ViT, with TORCH_HOME in tmp_path."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    data, ref = _tiny_tv_bytes()
    digest = hashlib.sha256(data).hexdigest()
    info = PretrainedInfo(
        name="vit_tiny_test", weights="TEST_V1", url=f"https://download.example/models/vit_tiny_test-{digest[:8]}.pth",
        size_mb=len(data) / 1e6, num_params=sum(p.numel() for p in ref.parameters()), img_size=32,
        description="test entry", labels=("ant", "bee", "cat"),
        preprocess=Preprocess(resize=36, crop=(32, 32), interpolation="bilinear", mean=IMAGENET_MEAN,
                              std=IMAGENET_STD),
    )
    monkeypatch.setitem(PRETRAINED, info.name, info)
    return info, data, ref


class _FakeResponse:
    def __init__(self, data: bytes, length: int | None = None):
        self._buf = io.BytesIO(data)
        self.headers = {"Content-Length": str(len(data) if length is None else length)}
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        return self._buf.read(min(n, 4096) if n > 0 else n)  # small chunks: several progress calls

    def close(self) -> None:
        self.closed = True


def _no_network(url, timeout=30.0):
    raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")


def test_registry_describes_torchvision_weights(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    for name in ("vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14"):
        info = PRETRAINED[name]
        assert info.url.startswith("https://download.pytorch.org/models/") and info.size_mb > 300
        labels = info.class_labels()
        assert labels is not None and len(labels) == 1000 and labels[281] == "tabby"
        assert cache_path(name) == tmp_path / "hub" / "checkpoints" / info.file_name
        assert not is_cached(name)
    b16 = PRETRAINED["vit_b_16"]
    assert b16.weights == "IMAGENET1K_V1" and b16.file_name == "vit_b_16-c867db91.pth"
    p = b16.preprocess
    assert (p.resize, p.crop, p.interpolation, p.mean, p.std) == (256, (224, 224), "bilinear", IMAGENET_MEAN,
                                                                  IMAGENET_STD)
    assert PRETRAINED["vit_l_16"].preprocess.resize == 242  # torchvision's own value for these weights
    assert PRETRAINED["vit_h_14"].weights.startswith("IMAGENET1K_SWAG")
    with pytest.raises(PretrainedError, match="unknown pretrained name 'vit_x'.*vit_b_16"):
        pretrained("vit_x")


def test_preseeded_cache_is_used_without_network(tiny, monkeypatch):
    info, data, ref = tiny
    path = cache_path(info.name)
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    assert is_cached(info.name)
    monkeypatch.setattr(pretrained_mod, "_urlopen", _no_network)
    model = pretrained(info.name)
    assert model.spec.labels == info.labels and model.spec.preprocess == info.preprocess
    assert model.spec.source_format == "torchvision" and "TEST_V1" in model.spec.name
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(model(x), ref(x), atol=1e-4, rtol=1e-4)


def test_offline_and_not_cached_explains_what_to_do(tiny, monkeypatch):
    info, _, _ = tiny
    monkeypatch.setattr(pretrained_mod, "_urlopen", _no_network)
    with pytest.raises(PretrainedError) as e:
        pretrained(info.name)
    msg = str(e.value)
    assert "not cached" in msg and info.url in msg and str(cache_path(info.name)) in msg
    assert "vitviz --model path/to/file" in msg and "Open checkpoint" in msg
    assert not cache_path(info.name).parent.exists() or not any(cache_path(info.name).parent.iterdir())


def test_download_with_progress_then_cache_reuse(tiny, monkeypatch):
    info, data, ref = tiny
    opened, seen = [], []

    def fake_urlopen(url, timeout=30.0):
        opened.append(url)
        return _FakeResponse(data)

    monkeypatch.setattr(pretrained_mod, "_urlopen", fake_urlopen)
    model = pretrained(info.name, progress=lambda done, total: seen.append((done, total)), show_bar=False)
    assert opened == [info.url]
    assert len(seen) >= 2 and seen[-1] == (len(data), len(data))
    assert all(a[0] < b[0] for a, b in zip(seen, seen[1:]))
    assert cache_path(info.name).read_bytes() == data
    assert not list(cache_path(info.name).parent.glob("*.partial"))
    again = pretrained(info.name, show_bar=False)  # from the cache: no second download
    assert opened == [info.url]
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(model(x), again(x))
        assert torch.allclose(model(x), ref(x), atol=1e-4, rtol=1e-4)


def test_progress_bar_path_runs(tiny, monkeypatch, capsys):
    info, data, _ = tiny
    monkeypatch.setattr(pretrained_mod, "_urlopen", lambda url, timeout=30.0: _FakeResponse(data))
    pretrained(info.name)  # show_bar=True: tqdm writes to stderr
    assert is_cached(info.name)
    assert "vit_tiny_test" in capsys.readouterr().err


def test_cancel_deletes_partial_file(tiny, monkeypatch):
    info, data, _ = tiny
    resp = _FakeResponse(data)
    monkeypatch.setattr(pretrained_mod, "_urlopen", lambda url, timeout=30.0: resp)
    calls = []

    def progress(done, total):
        calls.append(done)
        return len(calls) < 3  # cancel on the third chunk

    with pytest.raises(DownloadCancelled, match="cancelled"):
        pretrained(info.name, progress=progress, show_bar=False)
    assert len(calls) == 3 and resp.closed
    assert not is_cached(info.name)
    assert not list(cache_path(info.name).parent.iterdir())


@pytest.mark.parametrize("problem", ["hash", "short"])
def test_bad_download_is_not_cached(tiny, monkeypatch, problem):
    info, data, _ = tiny
    if problem == "hash":
        resp = _FakeResponse(data[:-10] + b"0123456789")
    else:
        resp = _FakeResponse(data[: len(data) // 2], length=len(data))
    monkeypatch.setattr(pretrained_mod, "_urlopen", lambda url, timeout=30.0: resp)
    with pytest.raises(PretrainedError, match="sha256" if problem == "hash" else "closed after"):
        pretrained(info.name, show_bar=False)
    assert not is_cached(info.name)
    assert not list(cache_path(info.name).parent.iterdir())


def test_corrupt_cached_file(tiny):
    info, data, _ = tiny
    path = cache_path(info.name)
    path.parent.mkdir(parents=True)
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(PretrainedError, match="unreadable.*truncated.*Delete"):
        pretrained(info.name)


def test_load_model_path_or_name(tiny, tmp_path, monkeypatch):
    from vitviz.model.sources.name_errors import ModelNameError
    from vitviz.model.sources.refs import load_model

    info, data, ref = tiny
    f = tmp_path / "local.pth"
    f.write_bytes(data)
    m = load_model(str(f), num_heads=2)
    assert m.spec.source_path == str(f) and m.spec.labels is None  # a file: no registry labels
    path = cache_path(info.name)
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    monkeypatch.setattr(pretrained_mod, "_urlopen", _no_network)
    assert load_model(info.name).spec.labels == info.labels  # a name: registry labels and preprocessing
    monkeypatch.chdir(tmp_path)
    (tmp_path / info.name).write_bytes(data)  # a file of that name in the working directory wins
    assert load_model(info.name, num_heads=2).spec.labels is None
    with pytest.raises(ModelNameError, match=r"^vit_b_17: no such file, and not a known model name; did you mean "
                                             r"vit_b_16\? \('vitviz models' lists the names\)$"):
        load_model("vit_b_17")
    with pytest.raises(ValueError, match="apply to checkpoint files"):
        load_model("vit_b_16", num_classes=3)
