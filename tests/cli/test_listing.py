"""The named weights as plain data (`vitviz.model.sources.catalog`): equal to torchvision's own metadata; listed
without torch."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vitviz.model.sources import catalog
from vitviz.model.sources.torch_hub import PRETRAINED, cache_path

torchvision = pytest.importorskip("torchvision")


def test_catalog_equals_torchvision_weight_metadata():
    from torchvision import models as tvm

    for name, (arch, member, url, mb, params, acc, resize, crop, interp) in catalog.TORCHVISION_VITS.items():
        w = getattr(tvm.get_model_weights(arch), member)
        t = w.transforms()
        assert (url, mb, params) == (w.url, float(w.meta["_file_size"]), w.meta["num_params"]), name
        assert acc == pytest.approx(w.meta["_metrics"]["ImageNet-1K"]["acc@1"]), name
        assert (resize, crop) == (int(t.resize_size[0]), int(t.crop_size[0])), name
        assert interp == str(getattr(t.interpolation, "value", t.interpolation)).lower(), name
        assert tuple(t.mean) == PRETRAINED[name].preprocess.mean and tuple(t.std) == PRETRAINED[name].preprocess.std
        assert PRETRAINED[name].class_labels() == tuple(w.meta["categories"])


def test_cache_folder_without_torch_equals_torch_hub(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch")  # as in a process that has not imported torch
    no_torch = catalog.hub_dir()
    monkeypatch.undo()
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    assert no_torch == Path(torch.hub.get_dir()) == catalog.hub_dir()
    assert catalog.cache_file("vit_b_16") == cache_path("vit_b_16")


def test_models_command_does_not_import_torch(tmp_path):
    code = "import sys; from vitviz.cli import main; main(['models']); assert 'torch' not in sys.modules, 'torch'"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={"TORCH_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "vit_b_16" in r.stdout and "not cached" in r.stdout and str(tmp_path) in r.stdout


def test_starting_the_window_does_not_import_torchvision():
    code = "import sys, vitviz.gui.main_window; assert 'torchvision' not in sys.modules, 'torchvision'"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_shipped_imagenet_labels_equal_torchvisions():
    """The label list ships with vitviz (no torchvision import on every 1000-class load) and cannot drift."""
    from torchvision.models._meta import _IMAGENET_CATEGORIES

    from vitviz.model.checkpoints.common import imagenet_labels

    assert imagenet_labels() == tuple(_IMAGENET_CATEGORIES)
