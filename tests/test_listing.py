"""`vitviz models` lists the named weights without importing torch: its static table must equal the registry."""

import subprocess
import sys
from pathlib import Path

import torch

from vitviz import cli
from vitviz.model.pretrained import PRETRAINED, cache_path


def test_static_listing_equals_the_registry(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    assert set(cli._PRETRAINED_LISTING) == set(PRETRAINED)
    for name, (file, mb, desc) in cli._PRETRAINED_LISTING.items():
        info = PRETRAINED[name]
        assert (file, mb, desc) == (info.file_name, info.size_mb, info.description), name
    assert cli._torch_hub_dir() == Path(torch.hub.get_dir())
    assert cli._torch_hub_dir() / "checkpoints" / PRETRAINED["vit_b_16"].file_name == cache_path("vit_b_16")


def test_models_command_does_not_import_torch(tmp_path):
    code = "import sys; from vitviz.cli import main; main(['models']); assert 'torch' not in sys.modules, 'torch'"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={"TORCH_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "vit_b_16" in r.stdout and "not cached" in r.stdout
